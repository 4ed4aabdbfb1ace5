/* #/sweeps/NAME a project's sweeps and #/sweep/ID a sweep: its settings, the best value so far,
 * money spent against the budget, the trials' metric in one chart, parameter importance,
 * parallel coordinates of its trials and the trials table. */

import { chartSettings, createChart, runLegend, seriesState } from '../charts.js';
import { enc } from '../lib/address.js';
import { api } from '../lib/api.js';
import { barList } from '../lib/bars.js';
import { niceTicks } from '../lib/chart-axes.js';
import { el, errorEl, kvTable, svg } from '../lib/dom.js';
import { fmtDuration, fmtNum, fmtTime, fmtUsd, fmtValue, toNum } from '../lib/format.js';
import { RUN_PALETTE } from '../lib/colors.js';
import { paramImportance } from '../lib/importance.js';
import { parallelCoords } from '../lib/parcoords.js';
import { LIVE_MS } from '../lib/runs.js';

/** A project's sweeps, with their state, metric, best value and money spent. */
export function sweepsView(project) {
  const body = el('div', { 'data-testid': 'sweeps-list' }, el('p', { class: 'muted' }, 'Loading sweeps…'));
  const node = el('div', {},
    el('div', { class: 'breadcrumb' }, el('a', { href: '#/' }, 'Projects'), ' / ', el('a', { href: '#/p/' + enc(project) }, project), ' / '),
    el('h1', {}, 'Sweeps'), body);
  api('/sweeps?project=' + enc(project)).then((res) => {
    const sweeps = res.sweeps || [];
    if (!sweeps.length) { body.replaceChildren(el('p', { class: 'muted' }, 'No sweeps in this project. Create one with `trainlog sweep create sweep.yaml --project ' + project + '`.')); return; }
    body.replaceChildren(el('table', { class: 'list' },
      el('thead', {}, el('tr', {}, ['sweep', 'state', 'method', 'metric', 'trials', 'best', 'spent', 'created'].map((h) => el('th', {}, h)))),
      el('tbody', {}, sweeps.map((sw) => el('tr', {},
        el('td', {}, el('a', { href: '#/sweep/' + enc(sw.id) }, sw.name)),
        el('td', {}, sw.state + (sw.ended_reason ? ` (${sw.ended_reason})` : '')),
        el('td', {}, sw.method),
        el('td', { class: 'mono' }, `${sw.metric.name} (${sw.metric.goal})`),
        el('td', { class: 'num' }, String(sw.trial_count)),
        el('td', { class: 'num' }, sw.best ? fmtNum(toNum(sw.best.value)) : '—'),
        el('td', { class: 'num' }, fmtUsd(sw.spent.usd)),
        el('td', { class: 'muted' }, fmtTime(sw.created_time)))))));
  }).catch((e) => body.replaceChildren(errorEl(e)));
  return { node };
}

/** Sweep `id`: re-read every LIVE_MS while it is running. */
export function sweepView(id) {
  const body = el('div', {}, el('p', { class: 'muted' }, 'Loading sweep…'));
  const node = el('div', {}, body);
  let alive = true, timer = null, chart = null;
  const trialSort = { col: null, desc: false };

  async function load() {
    let sweep, trials;
    try {
      [sweep, trials] = await Promise.all([api('/sweeps/' + enc(id)), api(`/sweeps/${enc(id)}/trials`).then((r) => r.trials || [])]);
    } catch (e) {
      if (!alive) return;
      body.replaceChildren(el('h1', {}, 'Sweep ' + id), errorEl(e.status === 404 ? `Sweep "${id}" was not found.` : e));
      return;
    }
    if (!alive) return;
    const metric = sweep.metric.name;
    const paramNames = sweep.parameters || [];
    const budgetRows = [];
    if (sweep.budget.usd !== null && sweep.budget.usd !== undefined) budgetRows.push({ label: 'money', value: sweep.spent.usd, max: sweep.budget.usd, fmt: fmtUsd });
    if (sweep.budget.gpu_hours !== null && sweep.budget.gpu_hours !== undefined) budgetRows.push({ label: 'GPU-hours', value: sweep.spent.gpu_hours, max: sweep.budget.gpu_hours, fmt: (v) => v.toFixed(2) });
    if (chart) { chart.destroy(); chart = null; }
    const shown = seriesState();
    const lines = trials.map((t, i) => ({ run_id: t.run_id, name: `#${t.index}`, color: RUN_PALETTE[i % RUN_PALETTE.length] }));
    chart = lines.length ? createChart(metric, lines, chartSettings({}, shown), { title: `${metric} of every trial` }) : null;
    const runsLike = trials.filter((t) => t.metric !== null && t.metric !== undefined).map((t) => ({
      id: t.run_id, name: `#${t.index}`, params: t.params, summary: { [metric]: { last: t.metric } },
    }));
    body.replaceChildren(
      el('div', { class: 'breadcrumb' }, el('a', { href: '#/' }, 'Projects'), ' / ', el('a', { href: '#/p/' + enc(sweep.project) }, sweep.project),
        ' / ', el('a', { href: '#/sweeps/' + enc(sweep.project) }, 'sweeps'), ' / '),
      el('h1', { 'data-testid': 'sweep-title' }, sweep.name, ' ', el('span', { class: 'status status-' + (sweep.state === 'running' ? 'running' : 'finished') }, sweep.state + (sweep.ended_reason ? ` (${sweep.ended_reason})` : ''))),
      el('div', { class: 'panel' }, kvTable({
        method: sweep.method, metric: `${metric} (${sweep.metric.goal})`, command: (sweep.command || []).join(' '),
        trials: `${sweep.trial_count}${sweep.run_cap ? ' of ' + sweep.run_cap : ''} · ` + Object.entries(sweep.counts || {}).map(([k, v]) => `${k} ${v}`).join(', '),
        best: sweep.best ? `${fmtNum(toNum(sweep.best.value))} (trial ${sweep.best.trial}) ${JSON.stringify(sweep.best.params)}` : '—',
        spent: `${fmtUsd(sweep.spent.usd)} · ${sweep.spent.gpu_hours.toFixed(3)} GPU-hours`,
      }, 'sweep-info', true)),
      el('div', { class: 'grid2' },
        el('div', {}, el('h2', {}, 'Best so far'), bestSoFarChart(sweep.best_so_far || [], metric)),
        el('div', { 'data-testid': 'sweep-spend' }, el('h2', {}, 'Money spent'),
          budgetRows.length ? budgetList(budgetRows) : el('p', {}, `${fmtUsd(sweep.spent.usd)} spent; no budget set.`),
          barList(trials.map((t) => ({ label: `#${t.index}`, value: typeof t.cost_usd === 'number' ? t.cost_usd : NaN, color: '#0f766e' })), fmtUsd, 'trial-cost'))),
      el('h2', {}, 'Trials over steps'),
      chart ? el('div', { 'data-testid': 'trials-chart' }, runLegend(lines, shown), chart.node) : el('p', { class: 'muted' }, 'No trials yet.'),
      el('h2', {}, 'Parameter importance'),
      importanceTable(trials, paramNames, metric),
      el('h2', {}, 'Parallel coordinates'),
      runsLike.length ? parallelCoords(runsLike, [metric]) : el('p', { class: 'muted' }, 'No trial has reported the metric yet.'),
      el('h2', {}, 'Trials'),
      trialsTable(trials, paramNames, metric, trialSort));
    if (chart) chart.start();
    if (sweep.state === 'running' && alive) timer = setTimeout(load, LIVE_MS);
  }

  load().catch((e) => body.replaceChildren(errorEl(e)));
  return { node, cleanup: () => { alive = false; clearTimeout(timer); if (chart) chart.destroy(); } };
}

/** Each parameter's importance for the metric (a random forest's share of its decrease in
 * variance) and its correlation with it, most important first. */
function importanceTable(trials, paramNames, metric) {
  const rows = paramImportance(trials.map((t) => ({ params: t.params, metric: toNum(t.metric) })), paramNames);
  if (!rows.length) return el('p', { class: 'muted' }, 'Shown once three trials have reported the metric.');
  const bar = (value, color) => el('span', { class: 'bar-track' }, el('span', { class: 'bar', style: `width:${Math.round(100 * Math.min(1, Math.abs(value)))}%;background:${color}` }));
  return el('table', { class: 'list importance', 'data-testid': 'importance-table' },
    el('thead', {}, el('tr', {}, el('th', {}, 'parameter'),
      el('th', { title: `the share of a random forest's decrease in the variance of ${metric} that splits on the parameter make` }, 'importance'),
      el('th', { title: `Pearson's correlation of the parameter with ${metric} (numeric parameters)` }, 'correlation'))),
    el('tbody', {}, rows.map((r) => el('tr', { 'data-testid': 'importance-row', 'data-param': r.param, 'data-importance': r.importance.toFixed(4), 'data-correlation': Number.isFinite(r.correlation) ? r.correlation.toFixed(4) : '' },
      el('td', { class: 'mono' }, r.param),
      el('td', {}, el('div', { class: 'bar-row' }, bar(r.importance, '#2563eb'), el('span', { class: 'num' }, r.importance.toFixed(2)))),
      el('td', {}, Number.isFinite(r.correlation)
        ? el('div', { class: 'bar-row' }, bar(r.correlation, r.correlation < 0 ? '#c62828' : '#2e7d32'), el('span', { class: 'num' }, r.correlation.toFixed(2)))
        : el('span', { class: 'muted', title: 'not numeric, or the same in every trial' }, '—'))))));
}

/** How much of each budget (money, GPU-hours) is spent, as bars. */
function budgetList(rows) {
  return el('div', { class: 'bars' }, rows.map((r) => el('div', { class: 'bar-row', 'data-testid': 'budget-row' },
    el('span', { class: 'bar-label' }, r.label),
    el('span', { class: 'bar-track' }, el('span', { class: 'bar', style: `width:${Math.min(100, (100 * r.value) / r.max)}%;background:${r.value >= r.max ? '#c62828' : '#2563eb'}` })),
    el('span', { class: 'bar-value num' }, `${r.fmt(r.value)} / ${r.fmt(r.max)}`))));
}

/** How trials sort by a column of the trials table. */
const TRIAL_COLUMNS = {
  '#': (t) => t.index, state: (t) => t.state, attempts: (t) => t.attempts, slot: (t) => t.slot,
  metric: (t) => toNum(t.metric), cost: (t) => t.cost_usd, time: (t) => t.run_seconds,
};

/** The trials of a sweep; a click on a header sorts by it (again: the other way). */
function trialsTable(trials, paramNames, metric, sort) {
  if (!trials.length) return el('p', { class: 'muted' }, 'No trials yet.');
  const wrap = el('div', { class: 'diff-wrap' });
  const valueOf = (col, t) => (col in TRIAL_COLUMNS ? TRIAL_COLUMNS[col](t) : (t.params || {})[col.slice(7)]);
  function render() {
    const rows = [...trials];
    if (sort.col) {
      const dir = sort.desc ? -1 : 1;
      rows.sort((a, b) => {
        const [x, y] = [valueOf(sort.col, a), valueOf(sort.col, b)];
        const missing = (v) => v === null || v === undefined || (typeof v === 'number' && Number.isNaN(v));
        if (missing(x) || missing(y)) return missing(x) - missing(y);
        return (typeof x === 'number' && typeof y === 'number' ? x - y : String(x).localeCompare(String(y), undefined, { numeric: true })) * dir;
      });
    }
    const cols = [['#', '#'], ['state', 'state'], ['attempts', 'attempts'], ['slot', 'slot'], ['metric', metric], ['cost', 'cost'], ['time', 'time']]
      .concat(paramNames.map((p) => ['params.' + p, p]));
    wrap.replaceChildren(el('table', { class: 'list sortable', 'data-testid': 'trials-table' },
      el('thead', {}, el('tr', {}, cols.map(([col, label]) => el('th', {
        'data-sort': col, title: 'click to sort',
        onclick: () => { if (sort.col === col) sort.desc = !sort.desc; else { sort.col = col; sort.desc = false; } render(); },
      }, label + (sort.col === col ? (sort.desc ? ' ▼' : ' ▲') : ''))))),
      el('tbody', {}, rows.map((t) => el('tr', { 'data-testid': 'trial-row', 'data-state': t.state, title: t.output_tail || t.stop_reason || '' },
        el('td', {}, el('a', { href: '#/run/' + enc(t.run_id) }, String(t.index))),
        el('td', {}, el('span', { class: 'status status-' + ({ pruned: 'killed', finished: 'finished', failed: 'failed', running: 'running', preempted: 'preempted' }[t.state] || '') }, t.state),
          t.exit_code !== null && t.exit_code !== undefined && t.state === 'failed' ? ` (exit ${t.exit_code})` : ''),
        el('td', { class: 'num' }, String(t.attempts)),
        el('td', { class: 'mono' }, t.slot),
        el('td', { class: 'num' }, t.metric === null || t.metric === undefined ? '' : fmtNum(toNum(t.metric))),
        el('td', { class: 'num' }, typeof t.cost_usd === 'number' ? fmtUsd(t.cost_usd) : ''),
        el('td', { class: 'num' }, fmtDuration((t.run_seconds || 0) * 1000)),
        paramNames.map((p) => el('td', {}, fmtValue((t.params || {})[p]))))))));
  }
  render();
  return wrap;
}

/** points: [{trials, value, best}] in the order trials ended → each trial's value and the best so far. */
function bestSoFarChart(points, metric) {
  if (!points.length) return el('p', { class: 'muted' }, 'No trial has ended with the metric yet.');
  const W = 520, H = 240, M = { l: 56, r: 12, t: 10, b: 28 };
  const vals = points.flatMap((p) => [toNum(p.value), toNum(p.best)]).filter(Number.isFinite);
  let lo = Math.min(...vals), hi = Math.max(...vals);
  if (!(hi > lo)) { lo -= 0.5; hi += 0.5; }
  const pad = (hi - lo) * 0.05; lo -= pad; hi += pad;
  const n = points.length;
  const sx = (i) => M.l + (n === 1 ? 0.5 : (i - 1) / (n - 1)) * (W - M.l - M.r);
  const sy = (v) => M.t + (1 - (v - lo) / (hi - lo)) * (H - M.t - M.b);
  const root = svg('svg', { width: W, height: H, viewBox: `0 0 ${W} ${H}`, class: 'pc-svg', 'data-testid': 'best-so-far', 'data-points': n,
    'data-best': String(toNum(points[n - 1].best)) });
  for (const v of niceTicks(lo, hi, 4)) {
    root.append(svg('line', { x1: M.l, x2: W - M.r, y1: sy(v), y2: sy(v), class: 'pc-grid' }));
    root.append(svg('text', { x: M.l - 4, y: sy(v) + 3, 'text-anchor': 'end', class: 'pc-tick' }, fmtNum(v)));
  }
  for (const v of niceTicks(1, Math.max(2, n), Math.min(6, n))) {
    if (!Number.isInteger(v) || v < 1 || v > n) continue;
    root.append(svg('text', { x: sx(v), y: H - 10, 'text-anchor': 'middle', class: 'pc-tick' }, String(v)));
  }
  root.append(svg('text', { x: W - M.r, y: H - 1, 'text-anchor': 'end', class: 'pc-tick' }, 'trials ended'));
  for (const p of points) {
    root.append(svg('circle', { cx: sx(p.trials), cy: sy(toNum(p.value)), r: 3, fill: '#9ca3af' }, svg('title', {}, `trial ${p.trial}: ${metric} = ${fmtNum(toNum(p.value))}`)));
  }
  let d = '';
  points.forEach((p, i) => {
    const x = sx(p.trials), y = sy(toNum(p.best));
    d += i === 0 ? `M${x} ${y}` : `H${x}V${y}`;
  });
  root.append(svg('path', { d, fill: 'none', stroke: '#2563eb', 'stroke-width': 2 }));
  return root;
}
