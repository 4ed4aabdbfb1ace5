/* System charts by metric: one chart per quantity (GPU utilization, SM active, GPU memory, power,
 * temperature, CPU, RAM, …) instead of one per GPU and quantity. On a run's page a chart draws a
 * line per GPU; for a job of several nodes, a line per node (the mean over its GPUs) unless one
 * node is chosen, then a line per GPU of that node. When runs are compared, a line per run (or
 * group): the mean over its GPUs and nodes. In a section of their own, collapsed, below the
 * metrics and media: nothing is read until it is opened. */

import { createChart, loadSeries, runLegend, startNearViewport } from './charts.js';
import { settleLimited } from './lib/api.js';
import { RUN_PALETTE } from './lib/colors.js';
import { el } from './lib/dom.js';
import { toNum } from './lib/format.js';
import { isSystemKey } from './lib/runs.js';

/** What a system key measures: `sys/[node/N/]gpu.I.NAME` is metric `gpu.NAME` of GPU I (of node N);
 * any other `sys/[node/N/]NAME` is metric NAME. */
export function systemKeyParts(key) {
  const m = /^sys\/(?:node\/(\d+)\/)?(?:gpu\.(\d+)\.(.+)|(.+))$/.exec(key);
  if (!m) return null;
  return { key, node: m[1] === undefined ? null : Number(m[1]), gpu: m[2] === undefined ? null : Number(m[2]), metric: m[2] === undefined ? m[4] : 'gpu.' + m[3] };
}

/** Metrics in the order their charts are shown, with their titles; others follow by name. */
const METRICS = [
  ['gpu.util', 'GPU utilization'], ['gpu.sm_active', 'SM active'], ['gpu.sm_occupancy', 'SM occupancy'],
  ['gpu.tensor_active', 'Tensor cores active'], ['gpu.mem_used_bytes', 'GPU memory used'], ['gpu.power_w', 'GPU power'],
  ['gpu.temp_c', 'GPU temperature'], ['gpu.energy_j', 'GPU energy since start'], ['gpu.mem_total_bytes', 'GPU memory size'],
  ['cpu.percent', 'CPU (whole machine)'], ['proc.cpu_percent', 'CPU (training process)'], ['ram.used_bytes', 'RAM used'],
  ['proc.rss_bytes', 'RAM of the training process'], ['ram.total_bytes', 'RAM size'],
  ['net.recv_bytes_per_s', 'Network received'], ['net.sent_bytes_per_s', 'Network sent'],
];
const RANK = new Map(METRICS.map(([m], i) => [m, i]));
const TITLES = new Map(METRICS);

/** System keys by metric, in display order: [{metric, title, entries: [{key, node, gpu}]}]. */
export function systemMetrics(keys) {
  const by = new Map();
  for (const k of keys) {
    const p = isSystemKey(k) && systemKeyParts(k);
    if (!p) continue;
    if (!by.has(p.metric)) by.set(p.metric, []);
    by.get(p.metric).push(p);
  }
  const rank = (m) => RANK.get(m) ?? METRICS.length;
  return [...by.entries()]
    .sort(([a], [b]) => rank(a) - rank(b) || a.localeCompare(b))
    .map(([metric, entries]) => ({
      metric, title: TITLES.get(metric) || metric,
      entries: entries.sort((a, b) => (a.node ?? -1) - (b.node ?? -1) || (a.gpu ?? -1) - (b.gpu ?? -1)),
    }));
}

/** Buckets of several series averaged where their last steps meet (GPUs of one node are sampled
 * together): each bucket's mean of the last values, its band the min and max over them. */
export function meanBuckets(lists) {
  if (lists.length === 1) return lists[0];
  const at = new Map();
  for (const buckets of lists) {
    for (const b of buckets) {
      const last = toNum(b.last), lo = toNum(b.min), hi = toNum(b.max);
      let m = at.get(b.step_max);
      if (!m) {
        m = { step_min: b.step_min, step_max: b.step_max, time_first: b.time_first, time_last: b.time_last, min: Infinity, max: -Infinity, sum: 0, n: 0, count: 0 };
        at.set(b.step_max, m);
      }
      m.step_min = Math.min(m.step_min, b.step_min);
      if (b.time_first != null) m.time_first = m.time_first == null ? b.time_first : Math.min(m.time_first, b.time_first);
      if (b.time_last != null) m.time_last = m.time_last == null ? b.time_last : Math.max(m.time_last, b.time_last);
      if (Number.isFinite(lo)) m.min = Math.min(m.min, lo);
      if (Number.isFinite(hi)) m.max = Math.max(m.max, hi);
      if (Number.isFinite(last)) { m.sum += last; m.n++; }
      m.count += b.count || 0;
    }
  }
  return [...at.values()].sort((a, b) => a.step_max - b.step_max).map((m) => ({
    step_min: m.step_min, step_max: m.step_max, time_first: m.time_first, time_last: m.time_last,
    min: Number.isFinite(m.min) ? m.min : NaN, max: Number.isFinite(m.max) ? m.max : NaN, last: m.n ? m.sum / m.n : NaN, count: m.count,
  }));
}

/** Reads the lines of a chart: each line's `parts` are [{key, source}], `source` a run or a group
 * as `loadSeries` takes it; one read per key, four at a time. Answers [{run_id, buckets}]. */
async function loadLines(lines, range) {
  const byKey = new Map();
  for (const line of lines) {
    for (const { key, source } of line.parts) {
      if (!byKey.has(key)) byKey.set(key, new Map());
      byKey.get(key).set(source.run_id, source);
    }
  }
  const keys = [...byKey.keys()];
  const answers = await settleLimited(keys, 4, (key) => loadSeries(key, [...byKey.get(key).values()], range));
  const got = new Map();
  answers.forEach((a, i) => {
    if (a.status === 'rejected') throw a.reason;
    for (const s of a.value) got.set(keys[i] + '\n' + s.run_id, s.buckets || []);
  });
  return lines.map((line) => ({
    run_id: line.run_id,
    buckets: meanBuckets(line.parts.map((p) => got.get(p.key + '\n' + p.source.run_id) || []).filter((b) => b.length)),
  })).filter((l) => l.buckets.length);
}

/** The lines of one run's chart of a metric: a line per GPU (of the chosen node), or for a job of
 * several nodes with none chosen a line per node, the mean over its GPUs. */
function runLines(run, color, entries, nodes, chosen, nodeName) {
  const source = { run_id: run.id };
  const line = (id, name, lineColor, keys) => ({ run_id: id, name, color: lineColor, start_time: run.start_time, parts: keys.map((key) => ({ key, source })) });
  const perNode = nodes.length > 1 && chosen === null;
  if (!perNode) {
    const mine = nodes.length > 1 ? entries.filter((e) => e.node === chosen) : entries;
    return mine.map((e) => (e.gpu === null
      ? line(e.node === null ? 'run' : `node.${e.node}`, e.node === null ? (run.name || run.id) : nodeName(e.node), color, [e.key])
      : line(`gpu.${e.gpu}`, `GPU ${e.gpu}`, RUN_PALETTE[e.gpu % RUN_PALETTE.length], [e.key])));
  }
  return nodes.map((n, i) => {
    const of = entries.filter((e) => (e.node ?? 0) === n);
    const gpus = of.filter((e) => e.gpu !== null).length;
    return of.length ? line(`node.${n}`, nodeName(n) + (gpus > 1 ? ` (mean of ${gpus} GPUs)` : ''), RUN_PALETTE[i % RUN_PALETTE.length], of.map((e) => e.key)) : null;
  }).filter(Boolean);
}

/** Charts for `metrics`, `linesOf(metric)` giving each its lines; answers {refresh, destroy}. */
function mountMetricCharts(container, metrics, linesOf, settings) {
  const charts = metrics.map((m) => {
    const lines = linesOf(m);
    return lines.length ? createChart('sys/' + m.metric, lines, settings, { title: m.title, load: (range) => loadLines(lines, range) }) : null;
  }).filter(Boolean);
  container.replaceChildren(el('div', { class: 'charts' }, charts.map((c) => c.node)));
  const stop = startNearViewport(charts);
  return {
    refresh: () => charts.forEach((c) => c.refresh()),
    destroy: () => { stop(); charts.forEach((c) => c.destroy()); },
  };
}

/**
 * The system charts of run `run` (its `sys/…` keys): a chart per metric, a line per GPU; for a
 * job of several nodes a choice of node (`nodeLabel(n)` adds what is known of node n) and, until
 * one is chosen, a line per node. Answers {node, refresh, destroy}.
 */
export function runSystemCharts(run, color, keys, settings, nodeLabel) {
  const metrics = systemMetrics(keys);
  const nodes = [...new Set(metrics.flatMap((m) => m.entries.map((e) => e.node ?? 0)))].sort((a, b) => a - b);
  const nodeName = (n) => { const l = nodeLabel ? nodeLabel(n) : ''; return `node ${n}` + (l ? ` · ${l}` : ''); };
  const legendEl = el('div');
  const chartsEl = el('div', { 'data-testid': 'system-charts' });
  let chosen = null, mounted = null;
  const show = () => {
    if (mounted) mounted.destroy();
    const linesOf = (m) => runLines(run, color, m.entries, nodes, chosen, nodeName);
    const all = new Map(metrics.flatMap(linesOf).map((l) => [l.run_id, l]));
    legendEl.replaceChildren(all.size > 1 ? runLegend([...all.values()], settings.runs) : '');
    mounted = mountMetricCharts(chartsEl, metrics, linesOf, settings);
  };
  const picker = nodes.length > 1
    ? el('label', {}, 'nodes ', el('select', {
      'data-testid': 'system-node',
      onchange: (e) => { chosen = e.target.value === '' ? null : Number(e.target.value); show(); },
    }, el('option', { value: '' }, 'all: a line per node'), nodes.map((n) => el('option', { value: String(n) }, nodeName(n) + ': a line per GPU'))))
    : null;
  show();
  return {
    node: el('div', {}, picker ? el('div', { class: 'toolbar' }, picker) : null, legendEl, chartsEl),
    refresh: () => mounted && mounted.refresh(),
    destroy: () => mounted && mounted.destroy(),
  };
}

/**
 * The system charts of compared runs: a chart per metric, a line per series (a run, or a group
 * with `members`), the mean over the GPUs and nodes its runs recorded. `runs` are the runs
 * compared (their summaries name their keys). Answers {node, refresh, destroy}.
 */
export function compareSystemCharts(runs, series, keys, settings) {
  const metrics = systemMetrics(keys);
  const keysOf = new Map(runs.map((r) => [r.id, new Set(Object.keys(r.summary || {}))]));
  const has = (s, key) => (s.members || [s.run_id]).some((id) => keysOf.get(id)?.has(key));
  const linesOf = (m) => series.map((s) => {
    const parts = m.entries.filter((e) => has(s, e.key)).map((e) => ({ key: e.key, source: s.members ? { run_id: s.run_id, members: s.members } : { run_id: s.run_id } }));
    return parts.length ? { ...s, parts } : null;
  }).filter(Boolean);
  const chartsEl = el('div', { 'data-testid': 'system-charts' });
  const mounted = mountMetricCharts(chartsEl, metrics, linesOf, settings);
  return { node: chartsEl, refresh: mounted.refresh, destroy: mounted.destroy };
}

/** A collapsed section that builds its content (`make()`, answering {node, refresh, destroy})
 * only when first opened; answers {node, refresh, destroy}. */
export function collapsedSection(title, testid, make) {
  let inner = null;
  const body = el('div');
  const section = el('details', { class: 'system-section', 'data-testid': testid },
    el('summary', {}, el('h2', {}, title)), body);
  section.addEventListener('toggle', () => {
    if (section.open && !inner) { inner = make(); body.replaceChildren(inner.node); }
  });
  return { node: section, refresh: () => inner && inner.refresh(), destroy: () => inner && inner.destroy() };
}
