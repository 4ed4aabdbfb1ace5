/* trainlog web UI: metric charts on uPlot (vendored in ui/vendor/uplot at a pinned release, the
 * global `uPlot`). A metric chart shows each run's line through the last value of every bucket
 * the server returns, plus the bucket's min–max band (so a spike is never hidden); a tooltip lists
 * every run's value at the cursor, the crosshair is shared by the charts of a page, zoom (x, y or
 * both) re-fetches finer buckets. Charts load lazily: each is a placeholder of its final size
 * until it nears the viewport. Also the settings, controls and legend the charts of a page share.
 * Axes and units: lib/chart-axes.js; downloads: lib/chart-export.js. */

import { api } from './lib/api.js';
import { BYTE_INCRS, cssVar, durationTicks, fmtSeconds, fmtTicks, fmtWithUnit, labelWidth, paddedRange, quantile, smoothValues, unitOf, X_MODES } from './lib/chart-axes.js';
import { downloadIcon, exportChart } from './lib/chart-export.js';
import { hashColor } from './lib/colors.js';
import { el } from './lib/dom.js';
import { fmtNum, toNum } from './lib/format.js';

/** Up to this many runs, a chart reads its series with one GET; above, with one POST. */
const GET_RUNS_MAX = 40;

/** Pages so far: each page's charts share a crosshair under its own sync key. */
let chartSyncCount = 0;

/** Which runs a page hides and which one it highlights, and the key that makes one crosshair of
 * its charts; shared by all its charts (of every panel) and its legend. */
export function seriesState() {
  const s = { hidden: new Set(), focus: null, listeners: new Set(), sync: 'trainlog-charts-' + (++chartSyncCount) };
  s.toggle = (id) => { if (s.hidden.has(id)) s.hidden.delete(id); else s.hidden.add(id); s.listeners.forEach((f) => f('hidden')); };
  s.setFocus = (id) => { if (s.focus !== id) { s.focus = id; s.listeners.forEach((f) => f('focus')); } };
  return s;
}

/** The colour of an alert's marker, by its level. */
const MARKER_COLORS = { error: '#d62728', warn: '#e67e00', info: '#1f77b4' };

/** Settings shared by the charts of one panel; charts redraw when they change. Their cursor is
 * synced with every chart of the same seriesState (the page), whatever its panel. */
export function chartSettings(initial, runs) {
  runs = runs || seriesState();
  const s = { xMode: 'step', smoothing: 0, robust: false, ...initial, runs, sync: runs.sync, listeners: new Set() };
  s.set = (patch) => { Object.assign(s, patch); s.listeners.forEach((f) => f(patch)); };
  return s;
}

/** The x-axis, smoothing and outlier controls for a chart settings object. */
export function chartControls(settings) {
  const xSel = el('select', { 'data-testid': 'x-axis' },
    Object.entries(X_MODES).map(([v, label]) => el('option', { value: v }, label)));
  xSel.value = settings.xMode;
  if (settings.stepOnly) { xSel.disabled = true; xSel.title = 'groups of runs are drawn by step'; }
  xSel.addEventListener('change', () => settings.set({ xMode: xSel.value }));
  const smooth = el('input', { type: 'range', min: '0', max: '0.99', step: '0.01', 'data-testid': 'smoothing' });
  smooth.value = String(settings.smoothing);
  const smoothVal = el('span', { class: 'mono' }, settings.smoothing.toFixed(2));
  smooth.addEventListener('input', () => {
    smoothVal.textContent = Number(smooth.value).toFixed(2);
    settings.set({ smoothing: Number(smooth.value) });
  });
  const robust = el('input', { type: 'checkbox', 'data-testid': 'robust' });
  robust.checked = settings.robust;
  robust.addEventListener('change', () => settings.set({ robust: robust.checked }));
  return el('div', { class: 'toolbar chart-controls' },
    el('label', {}, 'x-axis ', xSel), el('label', {}, 'smoothing ', smooth, ' ', smoothVal),
    el('label', { title: 'Scale the y-axes to the values within 3 interquartile ranges of the middle half' }, robust, ' ignore outliers'));
}

/** The legend of a page: a click hides or shows a run in every chart, hovering highlights it. */
export function runLegend(series, runs) {
  const items = series.map((s) => {
    const item = el('button', { type: 'button', class: 'legend-item', 'data-testid': 'legend-item', 'data-run-id': s.run_id,
      title: 'click to hide or show; hover to highlight' },
    el('span', { class: 'swatch', style: `background:${s.color}` }), s.name);
    item.addEventListener('click', () => runs.toggle(s.run_id));
    item.addEventListener('mouseenter', () => runs.setFocus(s.run_id));
    item.addEventListener('mouseleave', () => runs.setFocus(null));
    return item;
  });
  const sync = () => items.forEach((it) => it.classList.toggle('off', runs.hidden.has(it.dataset.runId)));
  runs.listeners.add(sync);
  sync();
  return el('div', { class: 'legend', 'data-testid': 'legend' }, items);
}

/**
 * A metric chart for one key and several runs.
 * series: [{run_id, name, color, start_time}]. Fetches GET /metrics?key=K&runs=...&buckets=W;
 * `opts.load(range)`, when given, answers the lines instead ([{run_id, buckets}], `run_id` naming
 * a series; a bucket's `x` is its x on a `metric:KEY` axis), `opts.title` is shown for the key,
 * `opts.log` starts the y-axis logarithmic (`opts.onLog(on)` hears it change) and `opts.yRange`
 * ([lo, hi], either null) fixes the y range.
 * Drag to zoom (sideways: steps, re-fetching finer buckets; up or down: values; diagonally:
 * both), double-click to reset.
 * Until start() is called, the chart is a placeholder of its final size (its head, an empty plot
 * area and its message line): it listens to nothing and fetches nothing. start() fetches its data
 * and draws it; `data-loaded` on the box turns to 1 once the first answer is drawn.
 */
export function createChart(key, series, settings, opts = {}) {
  settings = settings || chartSettings();
  const unit = unitOf(key);
  const plot = el('div', { class: 'chart-plot', 'data-testid': 'chart', 'data-key': key, 'data-series-count': '0',
    tabindex: '0', role: 'img', 'aria-label': `${opts.title || key}: arrow keys move the cursor, Escape leaves it` });
  const msg = el('div', { class: 'chart-msg muted' });
  const tip = el('div', { class: 'chart-tip hidden', 'data-testid': 'chart-tooltip' });
  const logCb = el('input', { type: 'checkbox', 'data-testid': 'chart-log' });
  logCb.checked = !!opts.log;
  // Downloads of what the chart shows; hidden (and closed) until the chart has drawn data.
  const exporter = el('details', { class: 'chart-export off', 'data-testid': 'chart-export' },
    el('summary', { title: 'download this chart', 'aria-label': 'download this chart' }, downloadIcon()),
    el('div', { class: 'menu' },
      el('button', { type: 'button', 'data-testid': 'export-png', title: 'the chart as drawn, with its title and legend', onclick: () => exportAs('png') }, 'PNG'),
      el('button', { type: 'button', 'data-testid': 'export-csv', title: 'the buckets drawn: one row per run and bucket', onclick: () => exportAs('csv') }, 'CSV'),
      el('button', { type: 'button', 'data-testid': 'export-svg', title: 'the lines drawn, as a vector image', onclick: () => exportAs('svg') }, 'SVG')));
  const closeOutside = (e) => { if (!exporter.contains(e.target)) exporter.open = false; };
  exporter.addEventListener('toggle', () => {
    if (exporter.open) document.addEventListener('pointerdown', closeOutside, true);
    else document.removeEventListener('pointerdown', closeOutside, true);
  });
  exporter.addEventListener('keydown', (e) => { if (e.key === 'Escape') exporter.open = false; });
  const box = el('div', { class: 'chart-box', 'data-chart-key': key, 'data-testid': 'chart-slot', 'data-loaded': '0' },
    el('div', { class: 'chart-head' },
      el('span', { class: 'title', title: key }, opts.title || shortKey(key)),
      unit.label ? el('span', { class: 'unit muted' }, unit.label) : null,
      el('label', {}, logCb, ' log'),
      el('span', { class: 'hint' }, 'drag to zoom · double-click to reset'),
      exporter),
    plot, tip, msg);

  const meta = new Map(series.map((s) => [s.run_id, s]));
  let data = [];           // the runs with values: [{run_id, name, color, origin, buckets, xs, ys, raw}]
  let zoom = null;         // {mode, x: [a, b] | null, steps: [lo, hi] | null, y: [c, d] | null}
  let seq = 0;
  let u = null, shape = '';
  let hovering = false;
  let loading = true;
  let started = false;
  const runs = settings.runs;

  const isLog = () => logCb.checked;

  // Where a bucket lies on the x-axis in the current mode: [start, end] of its band and the x of its last point.
  function xOf(s, b, mode = settings.xMode) {
    // Against another metric (`metric:epoch`): the loader put that metric's value at each bucket.
    if (mode.startsWith('metric:')) return [b.x, b.x, b.x];
    switch (mode) {
      case 'wall': return [b.time_first, b.time_last, b.time_last];
      case 'relative': return [(b.time_first - s.origin) / 1000, (b.time_last - s.origin) / 1000, (b.time_last - s.origin) / 1000];
      default: return [b.step_min, b.step_max + 1, b.step_max];
    }
  }
  const plotWidth = () => Math.max(200, plot.clientWidth || 480);

  async function fetchData() {
    const my = ++seq;
    const range = { buckets: Math.max(20, Math.round(plotWidth() - 80)) };
    if (zoom && zoom.steps) { range.step_min = Math.floor(zoom.steps[0]); range.step_max = Math.ceil(zoom.steps[1]); }
    msg.textContent = 'loading…';
    loading = true;
    try {
      const got = opts.load ? await opts.load(range) : await loadSeries(key, series, range);
      if (my !== seq) return;
      data = got.map((s) => {
        const m = meta.get(s.run_id) || { name: s.run_id, color: hashColor(s.run_id) };
        const buckets = (s.buckets || []).map((b) => ({
          step_min: b.step_min, step_max: b.step_max, time_first: b.time_first, time_last: b.time_last,
          min: toNum(b.min), max: toNum(b.max), last: toNum(b.last), count: b.count, x: b.x,
        }));
        const origin = m.start_time || (buckets.length ? buckets[0].time_first : 0);
        return { run_id: s.run_id, name: m.name, color: m.color, origin, buckets };
      }).filter((s) => s.buckets.some((b) => Number.isFinite(b.min) || Number.isFinite(b.max) || Number.isFinite(b.last)));
      msg.textContent = zoom && zoom.steps ? `steps ${Math.floor(zoom.steps[0])}–${Math.ceil(zoom.steps[1])}` : '';
      msg.className = 'chart-msg muted';
    } catch (e) {
      if (my !== seq) return;
      data = [];
      msg.textContent = 'Could not load ' + key + ': ' + e.message;
      msg.className = 'chart-msg error';
    }
    loading = false;
    draw();
    box.setAttribute('data-loaded', '1');
  }

  /** Each run's points in x order, smoothed if asked, with non-finite (and, on a log axis, non-positive) values as gaps. */
  function prepare() {
    const log = isLog();
    for (const s of data) {
      const order = s.buckets.map((b, i) => [xOf(s, b)[2], i]).sort((a, b) => a[0] - b[0]);
      s.buckets = order.map(([, i]) => s.buckets[i]);
      s.xs = order.map(([x]) => x);
      s.raw = s.buckets.map((b) => b.last);
      s.ys = smoothValues(s.raw, settings.smoothing);
    }
    const tables = data.map((s) => [s.xs, s.ys.map((v) => (Number.isFinite(v) && (!log || v > 0) ? v : null))]);
    return tables.length ? uPlot.join(tables) : [[]];
  }

  /** The y range of what is shown: every value of the visible runs in the x range, or all but the outliers. */
  function yRange() {
    if (zoom && zoom.y) return zoom.y;
    // A range set for the chart (either end may be left free).
    const [fixedLo, fixedHi] = opts.yRange || [null, null];
    if (Number.isFinite(fixedLo) && Number.isFinite(fixedHi) && fixedHi > fixedLo) return [fixedLo, fixedHi];
    const auto = freeYRange();
    return [Number.isFinite(fixedLo) ? fixedLo : auto[0], Number.isFinite(fixedHi) ? fixedHi : auto[1]];
  }

  function freeYRange() {
    const log = isLog();
    const ok = (v) => Number.isFinite(v) && (!log || v > 0);
    const [x0, x1] = zoom && zoom.x ? zoom.x : [-Infinity, Infinity];
    const values = [];
    for (const s of data) {
      if (runs.hidden.has(s.run_id)) continue;
      s.buckets.forEach((b, i) => {
        const [a, e] = xOf(s, b);
        if (e < x0 || a > x1) return;
        for (const v of [b.min, b.max, b.last, s.ys[i]]) if (ok(v)) values.push(v);
      });
    }
    if (!values.length) return log ? [1, 10] : [0, 1];
    let lo, hi;
    if (settings.robust && values.length >= 20) {
      // Tukey's far-out fences: a value more than 3 interquartile ranges beyond the quartiles is
      // an outlier. Unlike fixed percentiles, this holds while up to a quarter of the values
      // (one run of four diverging) are outliers.
      values.sort((a, b) => a - b);
      const q1 = quantile(values, 0.25), q3 = quantile(values, 0.75), iqr = q3 - q1;
      lo = Math.max(values[0], q1 - 3 * iqr); hi = Math.min(values[values.length - 1], q3 + 3 * iqr);
      if (log && lo <= 0) lo = values[0];
    } else {
      lo = Infinity; hi = -Infinity;
      for (const v of values) { if (v < lo) lo = v; if (v > hi) hi = v; }
    }
    return paddedRange(lo, hi, log);
  }

  function xRange() {
    if (zoom && zoom.x) return zoom.x;
    let lo = Infinity, hi = -Infinity;
    for (const s of data) if (s.xs.length) { lo = Math.min(lo, s.xs[0]); hi = Math.max(hi, s.xs[s.xs.length - 1]); }
    if (!(hi >= lo)) return [0, 1];
    if (hi === lo) { const d = settings.xMode === 'wall' ? 60000 : 1; return [lo - d, hi + d]; }
    return [lo, hi];
  }

  /** The alerts raised at a step (`settings.markers`), as dashed lines across the plot, coloured
   * by level, when the x-axis is the step; `data-markers` on the plot counts those drawn. */
  function drawMarkers(self) {
    const marks = settings.xMode === 'step' ? settings.markers || [] : [];
    const { left, top, width, height } = self.bbox;
    const ctx = self.ctx;
    let drawn = 0;
    ctx.save();
    ctx.setLineDash([4, 3]);
    ctx.lineWidth = window.devicePixelRatio || 1;
    for (const m of marks) {
      const x = self.valToPos(m.step, 'x', true);
      if (!(x >= left && x <= left + width)) continue;
      ctx.strokeStyle = MARKER_COLORS[m.level] || MARKER_COLORS.info;
      ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, top + height); ctx.stroke();
      drawn += 1;
    }
    ctx.restore();
    plot.dataset.markers = String(drawn);
  }

  /** Min–max bands under the lines (and, when smoothing, the raw line), clipped to the plot. */
  function drawBands(self) {
    const ctx = self.ctx, { left, top, width, height } = self.bbox;
    const px = window.devicePixelRatio || 1;
    const log = isLog();
    const ok = (v) => Number.isFinite(v) && (!log || v > 0);
    ctx.save();
    ctx.beginPath(); ctx.rect(left, top, width, height); ctx.clip();
    data.forEach((s, k) => {
      const ser = self.series[k + 1];
      if (!ser || !ser.show) return;
      const alpha = ser.alpha == null ? 1 : ser.alpha;
      ctx.fillStyle = s.color;
      ctx.globalAlpha = 0.22 * alpha;
      for (const b of s.buckets) {
        if (b.count < 2 || !ok(b.min) || !ok(b.max)) continue;
        const [a, e] = xOf(s, b);
        const xa = self.valToPos(a, 'x', true), xb = Math.max(self.valToPos(e, 'x', true), xa + px);
        const ya = self.valToPos(b.max, 'y', true), yb = Math.max(self.valToPos(b.min, 'y', true), ya + px);
        ctx.fillRect(xa, ya, xb - xa, yb - ya);
      }
      if (settings.smoothing > 0) {
        ctx.globalAlpha = 0.3 * alpha; ctx.strokeStyle = s.color; ctx.lineWidth = px;
        ctx.beginPath();
        let pen = false;
        s.raw.forEach((v, i) => {
          if (!ok(v)) { pen = false; return; }
          const x = self.valToPos(s.xs[i], 'x', true), y = self.valToPos(v, 'y', true);
          if (pen) ctx.lineTo(x, y); else { ctx.moveTo(x, y); pen = true; }
        });
        ctx.stroke();
      }
    });
    ctx.restore();
  }

  /** Index of the point of s nearest to x, or -1 when x is outside the run's points by more than `slack`. */
  function nearest(s, x, slack) {
    const xs = s.xs;
    if (!xs.length || x < xs[0] - slack || x > xs[xs.length - 1] + slack) return -1;
    let lo = 0, hi = xs.length - 1;
    while (hi - lo > 1) { const mid = (lo + hi) >> 1; if (xs[mid] <= x) lo = mid; else hi = mid; }
    return Math.abs(xs[hi] - x) < Math.abs(xs[lo] - x) ? hi : lo;
  }

  function xLabel(s, b) {
    if (settings.xMode === 'wall') return new Date(b.time_last).toLocaleString();
    if (settings.xMode === 'relative') return fmtSeconds((b.time_last - s.origin) / 1000);
    if (settings.xMode.startsWith('metric:')) return `${settings.xMode.slice(7)} ${fmtNum(b.x)} (step ${b.step_max})`;
    return 'step ' + b.step_max;
  }

  /** The x, in `mode`, of what is under the cursor at `left` px: for a chart of the page drawn on
   * another x-axis. The nearest point of the highlighted run (else of any shown run) says where
   * the step or time under the cursor lies on that axis; null when no run is drawn. */
  function xAtIn(mode, left) {
    const x = u.posToVal(left, 'x');
    if (mode === settings.xMode) return x;
    let best = null, dist = Infinity;
    for (const s of data) {
      if (runs.hidden.has(s.run_id)) continue;
      const i = nearest(s, x, Infinity);
      if (i < 0) continue;
      const d = s.run_id === runs.focus ? -1 : Math.abs(s.xs[i] - x);
      if (d < dist) { dist = d; best = xOf(s, s.buckets[i], mode)[2]; }
    }
    return best;
  }

  /** The crosshair of another chart of the page moved. On the same x-axis uPlot places ours by
   * value; on another one, ours goes to the same step or time (drags and zooms stay apart). */
  function onSyncFrom(type, src, left, top, w, h) {
    const from = src && src.trainlogX;
    if (!from || from.mode === settings.xMode) return true;
    if (type !== 'mousemove' || !u) return false;
    let x = -10, y = -10;
    if (left >= 0) {
      const v = from.at(settings.xMode, left);
      if (v != null && Number.isFinite(v)) {
        x = u.valToPos(v, 'x');
        y = top >= 0 && h > 0 ? (top / h) * u.over.clientHeight : -10;
      }
    }
    u.setCursor({ left: x, top: y }, true, false);
    return false;
  }

  /** The tooltip: every shown run's value at the cursor, highest first. */
  function showTip(self) {
    const { left, top } = self.cursor;
    if (!hovering || left == null || left < 0) { tip.classList.add('hidden'); return; }
    const x = self.posToVal(left, 'x');
    plot.setAttribute('data-cursor-x', String(x));
    const perPx = (self.scales.x.max - self.scales.x.min) / Math.max(1, self.over.clientWidth);
    const rows = [];
    for (const s of data) {
      if (runs.hidden.has(s.run_id)) continue;
      const i = nearest(s, x, 8 * perPx);
      if (i < 0) continue;
      rows.push({ s, b: s.buckets[i], v: s.ys[i], raw: s.raw[i] });
    }
    if (!rows.length) { tip.classList.add('hidden'); return; }
    rows.sort((a, b) => (Number.isFinite(b.v) ? b.v : -Infinity) - (Number.isFinite(a.v) ? a.v : -Infinity));
    const shown = rows.slice(0, 50);
    tip.replaceChildren(
      el('div', { class: 'tip-head' }, key, ' · ', xLabel(shown[0].s, shown[0].b)),
      ...shown.map(({ s, b, v, raw }) => el('div', { class: 'tip-row' + (runs.focus === s.run_id ? ' focused' : ''), 'data-testid': 'tooltip-row', 'data-run-id': s.run_id },
        el('span', { class: 'swatch', style: `background:${s.color}` }),
        el('span', { class: 'tip-name' }, s.name),
        el('span', { class: 'tip-value' }, fmtWithUnit(v, unit),
          settings.smoothing > 0 ? el('span', { class: 'muted' }, ' (' + fmtWithUnit(raw, unit) + ')') : null,
          b.count > 1 && b.min !== b.max ? el('span', { class: 'muted' }, ` [${fmtWithUnit(b.min, unit)} – ${fmtWithUnit(b.max, unit)}]`) : null))),
      rows.length > shown.length ? el('div', { class: 'muted' }, `+${rows.length - shown.length} more`) : '');
    tip.classList.remove('hidden');
    const boxRect = box.getBoundingClientRect(), over = self.over.getBoundingClientRect();
    const cx = over.left - boxRect.left + left, cy = over.top - boxRect.top + top;
    const w = tip.offsetWidth;
    tip.style.left = `${cx + 16 + w > boxRect.width && cx - 16 - w >= 0 ? cx - 16 - w : cx + 16}px`;
    tip.style.top = `${Math.max(0, cy - 20)}px`;
  }

  /** A drag ended: zoom to the selected x range (re-fetching its steps), y range, or both. */
  function onSelect(self) {
    const sel = self.select;
    if (!sel || (sel.width < 4 && sel.height < 4)) return;
    const W = self.over.clientWidth, H = self.over.clientHeight;
    const zx = sel.width < W - 1, zy = sel.height < H - 1;
    const next = { mode: settings.xMode, x: zoom ? zoom.x : null, steps: zoom ? zoom.steps : null, y: zoom ? zoom.y : null };
    if (zx) {
      let a = self.posToVal(sel.left, 'x'), b = self.posToVal(sel.left + sel.width, 'x');
      if (settings.xMode === 'step' && b - a < 1) b = a + 1;
      const steps = stepsIn(a, b);
      if (steps) { next.x = [a, b]; next.steps = steps; }
    }
    if (zy) next.y = [self.posToVal(sel.top + sel.height, 'y'), self.posToVal(sel.top, 'y')];
    self.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
    const refetch = zx && next.steps && (!zoom || next.steps !== zoom.steps);
    zoom = next;
    if (refetch) fetchData(); else draw();
  }

  /** The steps whose buckets meet the x range [a, b], over every run drawn. */
  function stepsIn(a, b) {
    if (settings.xMode === 'step') return [a, b];
    let lo = Infinity, hi = -Infinity;
    for (const s of data) for (const bk of s.buckets) {
      const [xa, xe] = xOf(s, bk);
      if (xe >= a && xa <= b) { lo = Math.min(lo, bk.step_min); hi = Math.max(hi, bk.step_max); }
    }
    return lo <= hi ? [lo, hi] : null;
  }

  /** The labels an axis draws, kept on the plot (`data-x-ticks`, `data-y-ticks`, `|`-separated). */
  function shownTicks(attr, labels) {
    plot.dataset[attr] = labels.join('|');
    return labels;
  }

  function axes() {
    const stroke = cssVar('--chart-axis', '#6b7280'), grid = { stroke: cssVar('--chart-grid', '#e5e7eb'), width: 1 };
    const ticks = { stroke: grid.stroke, width: 1 };
    const x = { stroke, grid, ticks, space: 70 };
    if (settings.xMode === 'relative') {
      x.splits = (self, ai, min, max) => durationTicks(min, max, Math.max(2, Math.floor(self.over.clientWidth / 90)));
      x.values = (self, splits) => splits.map(fmtSeconds);
    } else if (settings.xMode === 'step' || settings.xMode.startsWith('metric:')) {
      x.values = (self, splits, ai, space, incr) => shownTicks('xTicks', fmtTicks(splits, incr, { label: '' }, false));
    }
    const y = {
      stroke, grid, ticks,
      values: (self, splits, ai, space, incr) => shownTicks('yTicks', fmtTicks(splits, incr, unit, isLog())),
      size: (self, values) => (values && values.length ? Math.max(40, Math.ceil(18 + Math.max(...values.map(labelWidth)))) : 50),
    };
    if (unit.bytes && !isLog()) y.incrs = BYTE_INCRS;
    return [x, y];
  }

  function draw() {
    const log = isLog();
    const joined = prepare();
    let yMax = -Infinity, nBuckets = 0;
    for (const s of data) for (const b of s.buckets) { nBuckets++; if (Number.isFinite(b.max) && b.max > yMax) yMax = b.max; }
    plot.setAttribute('data-series-count', String(data.length));
    plot.setAttribute('data-y-max', Number.isFinite(yMax) ? String(yMax) : '');
    // Each line's last value, `id=value;…`: what the chart reads at its right end.
    plot.setAttribute('data-last', data.map((s) => `${s.run_id}=${s.raw.filter(Number.isFinite).pop() ?? ''}`).join(';'));
    plot.setAttribute('data-buckets', String(nBuckets));
    plot.setAttribute('data-range', zoom && zoom.steps ? `${Math.floor(zoom.steps[0])}-${Math.ceil(zoom.steps[1])}` : 'all');
    plot.setAttribute('data-x-mode', settings.xMode);
    plot.setAttribute('data-smoothing', String(settings.smoothing));
    exporter.classList.toggle('off', !data.length);
    if (!data.length) {
      exporter.open = false;
      if (u) { u.destroy(); u = null; shape = ''; }
      plot.replaceChildren(el('div', { class: 'chart-empty muted' }, loading ? 'loading…' : 'no data'));
      return;
    }
    const want = [settings.xMode, log, ...data.map((s) => s.run_id)].join('|');
    if (u && want === shape) {
      u.setData(joined, true);
    } else {
      if (u) u.destroy();
      plot.replaceChildren();
      shape = want;
      u = new uPlot(makeOptions(log), joined, plot);
      u.trainlogX = { mode: settings.xMode, at: xAtIn };
      u.over.addEventListener('mouseenter', () => { hovering = true; });
      u.over.addEventListener('mouseleave', () => { hovering = false; tip.classList.add('hidden'); runs.setFocus(null); });
      u.over.addEventListener('dblclick', () => { const had = zoom && zoom.steps; zoom = null; if (had) fetchData(); else draw(); });
      applyFocus();
    }
  }

  /** What the chart shows, for tests and tools: the y range and the plot area (CSS px, from the chart's top left). */
  function recordGeometry(self) {
    plot.setAttribute('data-y-range', `${self.scales.y.min},${self.scales.y.max}`);
    const b = self.bbox, px = window.devicePixelRatio || 1;
    plot.setAttribute('data-plot', [b.left / px, b.top / px, b.width / px, b.height / px].map((v) => v.toFixed(1)).join(','));
  }

  function makeOptions(log) {
    const points = (k) => data[k].xs.length * 6 < plotWidth();
    return {
      width: plotWidth(),
      height: 240,
      ms: 1,
      padding: [12, 24, 0, 0],
      legend: { show: false },
      focus: { alpha: 0.25 },
      cursor: {
        sync: { key: settings.sync, setSeries: false, filters: { sub: onSyncFrom } },
        drag: { x: true, y: true, uni: 40, setScale: false },
        focus: { prox: 12 },
        points: { size: 6 },
        bind: { dblclick: () => null },
      },
      scales: {
        x: { time: settings.xMode === 'wall', range: xRange },
        y: { distr: log ? 3 : 1, range: () => yRange() },
      },
      axes: axes(),
      series: [{}, ...data.map((s, k) => ({
        label: s.name, stroke: s.color, width: settings.smoothing > 0 ? 2 : 1.5, spanGaps: false,
        show: !runs.hidden.has(s.run_id), points: { show: points(k), size: 5, fill: s.color },
      }))],
      hooks: {
        drawAxes: [drawBands],
        setSelect: [onSelect],
        setCursor: [showTip],
        draw: [recordGeometry, drawMarkers],
        setSeries: [(self, i, opts) => {
          if (opts && opts.focus && hovering) runs.setFocus(i == null ? null : (data[i - 1] || {}).run_id || null);
        }],
      },
    };
  }

  /** Shows the page's hidden runs and highlighted run on this chart. */
  function applyFocus() {
    if (!u) return;
    data.forEach((s, k) => { if (u.series[k + 1].show === runs.hidden.has(s.run_id)) u.setSeries(k + 1, { show: !runs.hidden.has(s.run_id) }, false); });
    const i = data.findIndex((s) => s.run_id === runs.focus);
    u.setSeries(i < 0 ? null : i + 1, { focus: true }, false);
  }

  /** Downloads what the chart shows (see lib/chart-export.js). */
  async function exportAs(kind) {
    exporter.open = false;
    if (!u || !data.length) return;
    const shown = data.filter((s) => !runs.hidden.has(s.run_id));
    try {
      await exportChart({ key, unit, settings, zoom, log: isLog(), u, shown, xOf }, kind);
    } catch (e) {
      msg.textContent = `Could not export ${key} as ${kind.toUpperCase()}: ${e.message}`;
      msg.className = 'chart-msg error';
    }
  }

  const onRuns = (what) => {
    if (!u) return;
    if (what === 'hidden') { applyFocus(); draw(); } else if (!hovering) applyFocus();
  };
  const onSettings = (patch) => {
    if (Object.keys(patch).every((k) => k === 'search')) return;
    if ('xMode' in patch && zoom && zoom.mode !== settings.xMode) { zoom = null; fetchData(); return; }
    if ('smoothing' in patch && u) { shape = ''; }
    draw();
  };
  // Before the chart starts there is nothing to redraw: its first draw reads the box.
  logCb.addEventListener('change', () => { if (opts.onLog) opts.onLog(logCb.checked); if (!started) return; if (zoom) zoom.y = null; draw(); });

  // From the keyboard: the arrow keys move the cursor from point to point (Home, End: the ends),
  // showing the tooltip as the mouse does; Escape or leaving the chart hides it.
  let keyAt = -1;
  plot.addEventListener('keydown', (e) => {
    if (!u || !u.data[0].length) return;
    const xs = u.data[0], n = xs.length;
    const next = { ArrowRight: keyAt + 1, ArrowLeft: keyAt < 0 ? n - 1 : keyAt - 1, Home: 0, End: n - 1 }[e.key];
    if (e.key === 'Escape') { hovering = false; keyAt = -1; u.setCursor({ left: -10, top: -10 }); tip.classList.add('hidden'); return; }
    if (next === undefined) return;
    e.preventDefault();
    keyAt = Math.max(0, Math.min(n - 1, next));
    hovering = true;
    u.setCursor({ left: u.valToPos(xs[keyAt], 'x'), top: u.over.clientHeight / 2 });
    plot.setAttribute('data-cursor-x', String(xs[keyAt]));
  });
  plot.addEventListener('blur', () => { if (keyAt >= 0) { hovering = false; keyAt = -1; tip.classList.add('hidden'); } });

  let resizeTimer = null;
  const onResize = () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => { if (u) { u.setSize({ width: plotWidth(), height: 240 }); draw(); } }, 100);
  };

  return {
    node: box,
    /** Turns the placeholder into a chart: follows the page's settings and runs, fetches, draws. */
    start: () => {
      if (started) return;
      started = true;
      runs.listeners.add(onRuns);
      settings.listeners.add(onSettings);
      window.addEventListener('resize', onResize);
      fetchData();
    },
    /** Re-fetches what is shown (the zoomed range stays), for live updates; a placeholder fetches when it starts. */
    refresh: () => { if (started) fetchData(); },
    destroy: () => {
      seq++;
      settings.listeners.delete(onSettings);
      runs.listeners.delete(onRuns);
      window.removeEventListener('resize', onResize);
      clearTimeout(resizeTimer);
      document.removeEventListener('pointerdown', closeOutside, true);
      if (u) { u.destroy(); u = null; }
    },
  };
}

/**
 * The buckets of a key for a chart's series: [{run_id, buckets}]. Runs are read with one GET (a
 * few) or one POST (many); groups of runs (series with `members`) with one POST that answers,
 * per bucket, the mean over the group's runs as `last` and the min–max over them as the band.
 */
export async function loadSeries(key, series, range) {
  const groups = series.filter((s) => s.members);
  if (groups.length) {
    const res = await api('/metrics/query', { body: { key, ...range, groups: Object.fromEntries(groups.map((g) => [g.run_id, g.members])) } });
    return (res.groups || []).map((g) => ({
      run_id: g.name,
      buckets: (g.buckets || []).map((b) => ({ step_min: b.step_min, step_max: b.step_max, time_first: null, time_last: null,
        min: b.min, max: b.max, last: b.mean, count: b.runs })),
    }));
  }
  if (series.length > GET_RUNS_MAX) {
    const res = await api('/metrics/query', { body: { key, ...range, runs: series.map((s) => s.run_id) } });
    return res.series || [];
  }
  const q = new URLSearchParams({ key, runs: series.map((s) => s.run_id).join(','), buckets: String(range.buckets) });
  if (range.step_min !== undefined) { q.set('step_min', String(range.step_min)); q.set('step_max', String(range.step_max)); }
  return (await api('/metrics?' + q)).series || [];
}

/** The section a key is charted in: the part before its first `/`. */
function keySection(key) {
  const i = key.indexOf('/');
  return i > 0 ? key.slice(0, i) : '';
}

/** How near the viewport (above or below) a chart's placeholder comes before the chart loads: one screen. */
const CHART_LOAD_MARGIN = '100% 0px';

/**
 * Charts for keys, in sections by key prefix (`train/`, `val/`, …) with a search box, in a
 * container already in the DOM; returns {refresh, destroy}. Every chart is laid out at once as a
 * placeholder of its final size; a chart starts (fetches its data and draws) when its placeholder
 * comes within a screen of the viewport, so a page of hundreds of keys asks for a screenful or
 * two. A placeholder hidden by the search box, or in a closed section, is out of view: it starts
 * when it is shown near the viewport. A chart once started stays.
 */
/** A key as a chart's title: a long one keeps its start and its end, the parts that tell keys
 * apart (`sys/node/1/gpu.4.mem_used_bytes`), the middle elided; the whole key is its tooltip. */
export function shortKey(key, max = 44) {
  if (key.length <= max) return key;
  const head = Math.floor(max / 3);
  return key.slice(0, head) + '…' + key.slice(key.length - (max - head - 1));
}

/** Starts each chart when its placeholder comes within a screen of the viewport; answers what
 * stops watching. */
export function startNearViewport(charts) {
  if (typeof IntersectionObserver !== 'function') {
    charts.forEach((c) => c.start());
    return () => {};
  }
  const waiting = new Map(charts.map((c) => [c.node, c]));
  const observer = new IntersectionObserver((entries) => {
    for (const e of entries) {
      const c = e.isIntersecting && waiting.get(e.target);
      if (!c) continue;
      waiting.delete(e.target);
      observer.unobserve(e.target);
      c.start();
    }
    if (!waiting.size) observer.disconnect();
  }, { rootMargin: CHART_LOAD_MARGIN });
  charts.forEach((c) => observer.observe(c.node));
  return () => observer.disconnect();
}

export function mountCharts(container, keys, series, settings, initialSearch) {
  const charts = keys.map((k) => createChart(k, series, settings));
  const bySection = new Map();
  charts.forEach((c, i) => {
    const name = keySection(keys[i]);
    if (!bySection.has(name)) bySection.set(name, []);
    bySection.get(name).push(c);
  });
  const sections = [...bySection.entries()].sort(([a], [b]) => (a === '' ? -1 : b === '' ? 1 : a.localeCompare(b)));
  const search = el('input', { type: 'search', class: 'chart-search', placeholder: `search ${keys.length} charts`, 'data-testid': 'chart-search' });
  const sectionEls = sections.map(([name, cs]) => el('details', { open: true, class: 'chart-section', 'data-testid': 'chart-section', 'data-section': name },
    el('summary', {}, name ? name + '/' : 'charts', el('span', { class: 'muted count' }, ` ${cs.length}`)),
    el('div', { class: 'charts' }, cs.map((c) => c.node))));
  const nothing = el('p', { class: 'muted hidden' }, 'No chart matches.');
  search.value = initialSearch || '';
  search.addEventListener('input', () => settings.set({ search: search.value }));
  const applySearch = () => {
    const words = search.value.toLowerCase().split(/\s+/).filter(Boolean);
    let any = false;
    sectionEls.forEach((sec) => {
      let shown = 0;
      sec.querySelectorAll('.chart-box').forEach((b) => {
        const match = words.every((w) => b.dataset.chartKey.toLowerCase().includes(w));
        b.classList.toggle('hidden', !match);
        if (match) shown++;
      });
      sec.classList.toggle('hidden', shown === 0);
      sec.querySelector('.count').textContent = ` ${shown}`;
      any = any || shown > 0;
    });
    nothing.classList.toggle('hidden', any);
  };
  search.addEventListener('input', applySearch);
  if (search.value) applySearch();
  container.replaceChildren(keys.length > 4 ? search : '', nothing, ...sectionEls);
  const stop = startNearViewport(charts);
  return {
    /** Re-fetches the charts started so far; the others fetch current data when they start. */
    refresh: () => charts.forEach((c) => c.refresh()),
    destroy: () => { stop(); charts.forEach((c) => c.destroy()); },
  };
}
