/* The cost panel of a comparison: each run's cost (the cost/usd series), and what reaching a
 * metric's threshold cost each run. */

import { enc } from '../lib/address.js';
import { api } from '../lib/api.js';
import { barList } from '../lib/bars.js';
import { el, errorEl } from '../lib/dom.js';
import { fmtDuration, fmtNum, fmtUsd, toNum } from '../lib/format.js';
import { COST_KEY } from '../lib/runs.js';

/** The value of a cumulative series at a time, interpolated between its points; null before the first. */
function valueAtTime(points, t) {
  let prev = null;
  for (const p of points) {
    const v = toNum(p.value);
    if (!Number.isFinite(v)) continue;
    if (p.timestamp === t) return v;
    if (p.timestamp > t) {
      if (!prev) return null;
      return prev.v + ((v - prev.v) * (t - prev.t)) / (p.timestamp - prev.t);
    }
    prev = { t: p.timestamp, v };
  }
  return prev ? prev.v : null;
}

/**
 * Where a run's metric first crossed a threshold: finds the first bucket that crosses, then reads
 * that bucket's points to find the exact step. Returns {step, timestamp, value} or null.
 */
async function firstCrossing(runId, key, below, threshold) {
  const crosses = (v) => Number.isFinite(v) && (below ? v < threshold : v > threshold);
  const q = new URLSearchParams({ key, buckets: '1000' });
  const res = await api(`/runs/${enc(runId)}/metrics?${q}`);
  const bucket = (res.buckets || []).find((b) => crosses(toNum(below ? b.min : b.max)));
  if (!bucket) return null;
  const pq = new URLSearchParams({ key, step_min: String(bucket.step_min), step_max: String(bucket.step_max) });
  const pts = await api(`/runs/${enc(runId)}/metrics?${pq}`);
  const p = (pts.points || []).find((x) => crosses(toNum(x.value)));
  return p ? { step: p.step, timestamp: p.timestamp, value: toNum(p.value) } : null;
}

/** The cost of each run as bars, their total, and the cost until a metric first crossed a threshold. */
export function costPanel(runs, series, metricKeys) {
  const costOf = (r) => { const s = (r.summary || {})[COST_KEY]; return s ? toNum(s.last) : NaN; };
  const withCost = runs.filter((r) => Number.isFinite(costOf(r)));
  const node = el('div', { 'data-testid': 'cost-panel' });
  if (!withCost.length) {
    node.append(el('p', { class: 'muted' }, `These runs recorded no cost (the ${COST_KEY} series).`));
    return node;
  }
  const total = withCost.reduce((a, r) => a + costOf(r), 0);
  node.append(el('p', {}, `Total: $${total.toFixed(2)} over ${withCost.length} run${withCost.length === 1 ? '' : 's'}.`),
    barList(runs.map((r, i) => ({ label: series[i].name, value: costOf(r), color: series[i].color })), fmtUsd, 'cost-bars'));
  if (!metricKeys.length) return node;

  const keySel = el('select', { 'data-testid': 'cost-metric' }, metricKeys.map((k) => el('option', { value: k }, k)));
  const dirSel = el('select', { 'data-testid': 'cost-direction' }, el('option', { value: 'below' }, 'first below'), el('option', { value: 'above' }, 'first above'));
  const thr = el('input', { type: 'text', size: '8', 'data-testid': 'cost-threshold', placeholder: 'threshold' });
  const out = el('div', { 'data-testid': 'cost-until' });
  let gen = 0;
  async function compute() {
    const my = ++gen;
    const threshold = Number(thr.value);
    if (thr.value.trim() === '' || !Number.isFinite(threshold)) { out.replaceChildren(errorEl('The threshold must be a number.')); return; }
    const key = keySel.value, below = dirSel.value === 'below';
    out.replaceChildren(el('p', { class: 'muted' }, 'Computing…'));
    const rows = await Promise.all(runs.map(async (r, i) => {
      try {
        const hit = await firstCrossing(r.id, key, below, threshold);
        if (!hit) return { i, reached: false };
        const cost = await api(`/runs/${enc(r.id)}/metrics?key=${enc(COST_KEY)}`).then((c) => valueAtTime(c.points || [], hit.timestamp)).catch(() => null);
        return { i, reached: true, hit, cost, elapsed: r.start_time ? hit.timestamp - r.start_time : null };
      } catch (e) { return { i, error: e.message }; }
    }));
    if (my !== gen) return;
    out.replaceChildren(el('table', { class: 'list' },
      el('thead', {}, el('tr', {}, ['run', 'first step', 'value', 'time to reach', 'cost to reach', 'total cost'].map((h) => el('th', {}, h)))),
      el('tbody', {}, rows.map((row) => {
        const r = runs[row.i];
        const name = el('td', {}, el('span', { class: 'swatch', style: `display:inline-block;width:10px;height:10px;margin-right:4px;background:${series[row.i].color}` }), series[row.i].name);
        const totalCell = el('td', { class: 'num' }, fmtUsd(costOf(r)));
        if (row.error) return el('tr', { 'data-testid': 'cost-until-row' }, name, el('td', { colspan: '4', class: 'error' }, row.error), totalCell);
        if (!row.reached) return el('tr', { 'data-testid': 'cost-until-row', 'data-reached': 'false' }, name, el('td', { colspan: '4', class: 'muted' }, 'not reached'), totalCell);
        return el('tr', { 'data-testid': 'cost-until-row', 'data-reached': 'true', 'data-step': String(row.hit.step), 'data-cost': row.cost === null ? '' : String(row.cost) },
          name, el('td', { class: 'num' }, String(row.hit.step)), el('td', { class: 'num' }, fmtNum(row.hit.value)),
          el('td', { class: 'num' }, fmtDuration(row.elapsed)),
          el('td', { class: 'num' }, row.cost === null ? '—' : fmtUsd(row.cost)), totalCell);
      }))));
  }
  thr.addEventListener('keydown', (e) => { if (e.key === 'Enter') compute(); });
  node.append(el('h3', {}, 'Cost until a metric crossed a threshold'),
    el('div', { class: 'toolbar' }, keySel, dirSel, thr, el('button', { onclick: compute, 'data-testid': 'cost-compute' }, 'Compute')), out);
  return node;
}
