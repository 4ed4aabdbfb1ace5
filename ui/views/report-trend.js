/* The training report's trend: each week's cost (bars, dollars on the left axis) and GPU
 * utilization (a line, percent on the right axis), on uPlot; weeks without runs stay empty. */

import { cssVar, fmtTicks, labelWidth } from '../lib/chart-axes.js';
import { el } from '../lib/dom.js';
import { fmtPercent, fmtUsd } from '../lib/format.js';

const WEEK_MS = 7 * 86400000;
/** Weeks drawn at most (ten years), the latest kept. */
const MAX_WEEKS = 520;
const COST_COLOR = '#0f766e';
const COST_FILL = 'rgba(15, 118, 110, 0.55)';
const UTIL_COLOR = '#2563eb';

/** Every week from the first group's to the last's (groups are a `by=week` report's, each named
 * by its Monday, YYYY-MM-DD): [{week, group (null for a week without runs)}]. */
export function everyWeek(groups) {
  const byWeek = new Map(groups.map((g) => [g.group, g]));
  const starts = groups.map((g) => Date.parse(g.group + 'T00:00:00Z')).filter(Number.isFinite);
  if (!starts.length) return [];
  const hi = Math.max(...starts);
  const lo = Math.max(Math.min(...starts), hi - (MAX_WEEKS - 1) * WEEK_MS);
  const out = [];
  for (let t = lo; t <= hi; t += WEEK_MS) {
    const week = new Date(t).toISOString().slice(0, 10);
    out.push({ week, group: byWeek.get(week) || null });
  }
  return out;
}

/** The chart of a `by=week` report's groups: {node, mount (once the node is in the page), destroy}. */
export function weekTrend(groups) {
  const weeks = everyWeek(groups);
  const cost = weeks.map((w) => (w.group && typeof w.group.cost_usd === 'number' ? w.group.cost_usd : null));
  const util = weeks.map((w) => (w.group && typeof w.group.gpu_utilization_rate === 'number' ? 100 * w.group.gpu_utilization_rate : null));
  const plot = el('div', {
    class: 'trend-plot', 'data-testid': 'report-trend', 'data-weeks': String(weeks.length),
    'data-cost': cost.map((v) => (v === null ? '' : String(v))).join(','),
    'data-util': util.map((v) => (v === null ? '' : String(v))).join(','),
  });
  const caption = el('div', { class: 'trend-caption muted' }, 'cost per week (bars, left axis) and GPU utilization (line, right axis); hover for a week\'s figures');
  const node = el('div', { class: 'trend' }, caption, plot);
  let u = null, resizeTimer = null;

  const width = () => Math.max(320, Math.min(960, plot.clientWidth || 640));
  const onResize = () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => { if (u) u.setSize({ width: width(), height: 220 }); }, 100);
  };

  function options() {
    const stroke = cssVar('--chart-axis', '#6b7280'), grid = { stroke: cssVar('--chart-grid', '#e5e7eb'), width: 1 };
    const ticks = { stroke: grid.stroke, width: 1 };
    const n = weeks.length;
    const ySize = (self, values) => (values && values.length ? Math.max(40, Math.ceil(18 + Math.max(...values.map(labelWidth)))) : 50);
    return {
      width: width(),
      height: 220,
      padding: [12, 8, 0, 0],
      legend: { show: true, live: true },
      cursor: { drag: { x: false, y: false }, points: { size: 7 } },
      scales: {
        x: { time: false, range: () => [-0.5, n - 0.5] },
        usd: { range: (self, lo, hi) => [0, hi > 0 ? hi * 1.1 : 1] },
        pct: { range: () => [0, 100] },
      },
      axes: [
        {
          stroke, grid: { show: false }, ticks,
          // A tick on a week's Monday, as many as fit.
          splits: (self) => {
            const every = Math.max(1, Math.ceil(n / Math.max(1, Math.floor(self.bbox.width / (window.devicePixelRatio || 1) / 90))));
            const out = [];
            for (let i = 0; i < n; i += every) out.push(i);
            return out;
          },
          values: (self, splits) => splits.map((i) => (weeks[i] ? weeks[i].week : '')),
        },
        { scale: 'usd', stroke, grid, ticks, size: ySize, values: (self, splits, ai, space, incr) => fmtTicks(splits, incr, { prefix: '$' }, false) },
        { scale: 'pct', side: 1, stroke, grid: { show: false }, ticks, size: ySize, values: (self, splits) => splits.map((v) => v + ' %') },
      ],
      series: [
        { label: 'week of', value: (self, i) => (i === null || i === undefined || !weeks[i] ? '' : weeks[i].week) },
        {
          label: 'cost', scale: 'usd', stroke: COST_COLOR, fill: COST_FILL, width: 1,
          paths: uPlot.paths.bars({ size: [0.6, 64] }), points: { show: false },
          value: (self, v) => (v === null || v === undefined ? '—' : fmtUsd(v)),
        },
        {
          label: 'GPU utilization', scale: 'pct', stroke: UTIL_COLOR, width: 2, spanGaps: true,
          points: { show: true, size: 6, fill: UTIL_COLOR },
          value: (self, v) => (v === null || v === undefined ? '—' : fmtPercent(v / 100)),
        },
      ],
      hooks: {
        // What was drawn, for tests and tools: the plot area (CSS px from the chart's top left).
        draw: [(self) => {
          const b = self.bbox, px = window.devicePixelRatio || 1;
          plot.setAttribute('data-plot', [b.left / px, b.top / px, b.width / px, b.height / px].map((v) => v.toFixed(1)).join(','));
        }],
      },
    };
  }

  return {
    node,
    mount() {
      if (u || !weeks.length) return;
      u = new uPlot(options(), [weeks.map((_, i) => i), cost, util], plot);
      window.addEventListener('resize', onResize);
    },
    destroy() {
      clearTimeout(resizeTimer);
      window.removeEventListener('resize', onResize);
      if (u) { u.destroy(); u = null; }
    },
  };
}
