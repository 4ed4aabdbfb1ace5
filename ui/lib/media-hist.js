/* Histograms logged under a key, over time: a heatmap on a canvas (x the step, y the value, the
 * colour how many values fell there), with a marker at the step a panel's slider chose, and the
 * histogram of that step as bars (SVG) below it. A click on the heatmap picks the step there. */

import { enc } from './address.js';
import { api } from './api.js';
import { el, svg } from './dom.js';
import { fmtNum } from './format.js';

/** The most histograms of one run and key read for a heatmap (pages of 1000). */
export const HEATMAP_MAX = 2000;

/** The heatmap's size in canvas pixels (before the device pixel ratio); CSS scales it to its column. */
const HEAT_W = 480;
const HEAT_H = 160;
/** The bars' drawing size (an SVG viewBox stretched to its column). */
const BARS_W = 480;
const BARS_H = 110;

/** Viridis, in stops from 0 to 1 (colours of the counts, few to many). */
const RAMP = ['#440154', '#482878', '#3e4989', '#31688e', '#26828e', '#1f9e89', '#35b779', '#6ece58', '#b5de2b', '#fde725']
  .map((h) => [1, 3, 5].map((k) => parseInt(h.slice(k, k + 2), 16)));

/** The colour of `t` in [0, 1] on the ramp, as [r, g, b]. */
function ramp(t) {
  const x = Math.min(1, Math.max(0, t)) * (RAMP.length - 1);
  const i = Math.min(RAMP.length - 2, Math.floor(x));
  const f = x - i;
  return RAMP[i].map((c, k) => Math.round(c + (RAMP[i + 1][k] - c) * f));
}

/** The histograms of run `runId` under `key`, by step, at most HEATMAP_MAX of them (the first):
 * {hists: [{step, edges, counts}], truncated}. */
export async function readHistograms(runId, key) {
  const hists = [];
  let token = null;
  do {
    const q = new URLSearchParams({ key, limit: '1000' });
    if (token) q.set('page_token', token);
    const res = await api(`/runs/${enc(runId)}/histograms?${q}`);
    hists.push(...(res.histograms || []));
    token = res.next_page_token || null;
  } while (token && hists.length < HEATMAP_MAX);
  hists.sort((a, b) => a.step - b.step);
  return { hists, truncated: Boolean(token) };
}

/** The histogram of run `runId` under `key` at exactly `step`, or null. */
export async function readHistogramAt(runId, key, step) {
  const q = new URLSearchParams({ key, step_min: String(step), step_max: String(step), limit: '1' });
  const res = await api(`/runs/${enc(runId)}/histograms?${q}`);
  return (res.histograms || [])[0] || null;
}

/** The value range every histogram spans: [lo, hi], hi > lo. */
function valueRange(hists) {
  let lo = Infinity, hi = -Infinity;
  for (const h of hists) {
    if (!h.edges || h.edges.length < 2) continue;
    lo = Math.min(lo, h.edges[0]);
    hi = Math.max(hi, h.edges[h.edges.length - 1]);
  }
  if (!Number.isFinite(lo) || !Number.isFinite(hi)) return [0, 1];
  if (hi <= lo) return [lo - 0.5, hi + 0.5];
  return [lo, hi];
}

/** How much of each of `rows` equal rows over [lo, hi] (row 0 at lo) a histogram's counts fill:
 * each bin's count spread over the rows it overlaps, in proportion. */
function rowMass(h, lo, hi, rows) {
  const out = new Float64Array(rows);
  const per = (hi - lo) / rows;
  for (let b = 0; b < h.counts.length; b++) {
    const c = h.counts[b];
    if (!(c > 0)) continue;
    const e0 = h.edges[b], e1 = h.edges[b + 1];
    const width = e1 - e0;
    const r0 = Math.max(0, Math.floor((e0 - lo) / per));
    const r1 = Math.min(rows - 1, Math.floor((e1 - lo) / per));
    for (let r = r0; r <= r1; r++) {
      const a = Math.max(e0, lo + r * per), z = Math.min(e1, lo + (r + 1) * per);
      if (z > a) out[r] += (c * (z - a)) / width;
    }
  }
  return out;
}

/** Where each histogram's column starts and ends on the x axis, in [0, width]: by step, a column
 * reaching the next histogram's step (the last one as wide as the median gap), the axis spanning
 * the steps `range` ([first, last]) too. */
function columnsOf(hists, width, range) {
  const steps = hists.map((h) => h.step);
  const gaps = steps.slice(1).map((s, i) => s - steps[i]).sort((a, b) => a - b);
  const gap = gaps.length ? Math.max(1, gaps[gaps.length >> 1]) : 1;
  const first = Math.min(steps[0], range ? range[0] : Infinity);
  const last = Math.max(steps[steps.length - 1], range ? range[1] : -Infinity);
  const span = last + gap - first;
  const x = (s) => ((s - first) / span) * width;
  return steps.map((s, i) => [x(s), x(i + 1 < steps.length ? steps[i + 1] : s + gap)]);
}

/**
 * A run's histograms under a key as a heatmap with bars below for one step. `hists`: ascending by
 * step; `truncated`: more were logged than read; `stepRange`: [first, last] step the x axis spans
 * at least (the steps of every run of a panel, so that their heatmaps line up). `onPick(step)`: a
 * click on the heatmap at a step. Returns {node, show(step, hist)}: marks `step` and draws `hist`
 * (that step's histogram) as bars.
 */
export function histogramFigure(hists, { color, truncated, stepRange, onPick }) {
  const dpr = Math.max(1, Math.min(3, window.devicePixelRatio || 1));
  const [lo, hi] = valueRange(hists);
  const cols = columnsOf(hists, HEAT_W, stepRange);
  // The heatmap, drawn once in canvas pixels; the canvas shown is it with the step's marker.
  const W = Math.round(HEAT_W * dpr), H = Math.round(HEAT_H * dpr);
  const base = document.createElement('canvas');
  base.width = W; base.height = H;
  const masses = hists.map((h) => rowMass(h, lo, hi, H));
  let max = 0;
  for (const m of masses) for (const v of m) if (v > max) max = v;
  const bctx = base.getContext('2d');
  const img = bctx.createImageData(W, H);
  hists.forEach((h, k) => {
    const x0 = Math.floor(cols[k][0] * dpr), x1 = Math.max(x0 + 1, Math.ceil(cols[k][1] * dpr));
    const m = masses[k];
    for (let r = 0; r < H; r++) {
      if (!(m[r] > 0)) continue;
      const [cr, cg, cb] = ramp(Math.sqrt(m[r] / max));
      const y = H - 1 - r;
      for (let x = x0; x < Math.min(x1, W); x++) {
        const p = (y * W + x) * 4;
        img.data[p] = cr; img.data[p + 1] = cg; img.data[p + 2] = cb; img.data[p + 3] = 255;
      }
    }
  });
  bctx.putImageData(img, 0, 0);

  const canvas = el('canvas', { class: 'media-heatmap', width: String(W), height: String(H), 'data-testid': 'media-histogram-heatmap', 'data-histograms': String(hists.length) });
  const ctx = canvas.getContext('2d');
  const steps = hists.map((h) => h.step);
  /** The histogram at `px` (a fraction of the width): the last whose column starts at or before it. */
  const stepAtX = (px) => {
    const x = px * HEAT_W;
    let k = 0;
    while (k + 1 < cols.length && cols[k + 1][0] <= x) k++;
    return k;
  };
  canvas.addEventListener('mousemove', (e) => {
    const r = canvas.getBoundingClientRect();
    const k = stepAtX((e.clientX - r.left) / r.width);
    const v = hi - ((e.clientY - r.top) / r.height) * (hi - lo);
    const h = hists[k];
    const b = h ? h.edges.findIndex((x, i) => i + 1 < h.edges.length && v >= x && v < h.edges[i + 1]) : -1;
    canvas.title = h ? `step ${fmtNum(h.step)}, value ${fmtNum(v)}` + (b >= 0 ? `: ${fmtNum(h.counts[b])} in [${fmtNum(h.edges[b])}, ${fmtNum(h.edges[b + 1])})` : '') + (onPick ? ' (click to show this step)' : '') : '';
  });
  if (onPick) {
    canvas.classList.add('pickable');
    canvas.addEventListener('click', (e) => {
      const r = canvas.getBoundingClientRect();
      const k = stepAtX((e.clientX - r.left) / r.width);
      if (hists[k]) onPick(hists[k].step);
    });
  }

  const bars = el('div', { class: 'media-hist-bars' });
  const caption = el('div', { class: 'media-caption', 'data-testid': 'media-histogram-caption' });
  const node = el('div', { class: 'media-hist', 'data-testid': 'media-histogram' },
    el('div', { class: 'media-hist-plot' },
      el('div', { class: 'media-hist-y mono' }, el('span', {}, fmtNum(hi)), el('span', {}, fmtNum(lo))),
      canvas),
    el('div', { class: 'media-hist-x mono' }, el('span', {}, `step ${fmtNum(Math.min(steps[0], stepRange ? stepRange[0] : Infinity))}`),
      el('span', { class: 'media-hist-legend', title: 'the colour of a cell: how many values fell in its range at its step (square-root scale)' },
        'few ', el('span', { class: 'media-hist-ramp', style: `background:linear-gradient(to right, ${RAMP.map(([r, g, b]) => `rgb(${r},${g},${b})`).join(', ')})` }), ' many',
        truncated ? ` · the first ${hists.length} histograms` : ''),
      el('span', {}, `step ${fmtNum(Math.max(steps[steps.length - 1], stepRange ? stepRange[1] : -Infinity))}`)),
    bars, caption);

  function drawMarker(step) {
    ctx.clearRect(0, 0, W, H);
    ctx.drawImage(base, 0, 0);
    const k = steps.indexOf(step);
    if (k < 0) return;
    const [a, z] = cols[k];
    const x = Math.round(((a + z) / 2) * dpr) + 0.5;
    // The step's column outlined, a red line through its middle.
    ctx.lineWidth = Math.max(1, dpr);
    ctx.strokeStyle = 'rgba(0,0,0,0.75)';
    ctx.strokeRect(Math.floor(a * dpr), 0.5, Math.max(1, Math.ceil((z - a) * dpr) - 1), H - 1);
    ctx.lineWidth = 2 * dpr;
    ctx.strokeStyle = '#ff4d4f';
    ctx.beginPath(); ctx.moveTo(x, 0); ctx.lineTo(x, H); ctx.stroke();
  }

  function drawBars(h) {
    if (!h) { bars.replaceChildren(); caption.textContent = ''; return; }
    const top = Math.max(0, ...h.counts);
    const total = h.counts.reduce((s, c) => s + c, 0);
    const x = (v) => ((v - lo) / (hi - lo)) * BARS_W;
    const rects = h.counts.map((c, b) => {
      const x0 = x(h.edges[b]), x1 = x(h.edges[b + 1]);
      const bh = top > 0 ? (c / top) * (BARS_H - 2) : 0;
      return svg('rect', { x: x0, y: BARS_H - bh, width: Math.max(0.5, x1 - x0), height: bh, fill: color, 'data-testid': 'media-histogram-bar', 'data-count': String(c) },
        svg('title', {}, `[${fmtNum(h.edges[b])}, ${fmtNum(h.edges[b + 1])}): ${fmtNum(c)}`));
    });
    bars.replaceChildren(svg('svg', { class: 'media-hist-svg', viewBox: `0 0 ${BARS_W} ${BARS_H}`, preserveAspectRatio: 'none', 'data-testid': 'media-histogram-bars', 'data-step': String(h.step) },
      svg('line', { x1: 0, y1: BARS_H - 0.5, x2: BARS_W, y2: BARS_H - 0.5, class: 'media-hist-axis' }), rects));
    caption.textContent = `step ${fmtNum(h.step)} · ${h.counts.length} bins over [${fmtNum(h.edges[0])}, ${fmtNum(h.edges[h.edges.length - 1])}] · ${fmtNum(total)} in all, at most ${fmtNum(top)} in a bin`;
  }

  return {
    node,
    show(step, hist) {
      drawMarker(step);
      drawBars(hist);
      node.dataset.step = String(step);
    },
  };
}
