/* Parallel coordinates in SVG: an axis per differing param and one for a chosen metric, a line
 * per run coloured by that metric; numeric axes are linear or log, others categorical. */

import { el, svg } from './dom.js';
import { fmtNum, fmtValue, toNum } from './format.js';

/** Parallel coordinates draw at most this many runs. */
export const PARCOORDS_MAX = 1000;

/** Blue (low) to red (high). */
function rampColor(f) {
  const stops = [[49, 54, 149], [69, 117, 180], [116, 173, 209], [254, 224, 144], [244, 109, 67], [165, 0, 38]];
  const x = Math.min(1, Math.max(0, f)) * (stops.length - 1);
  const i = Math.min(stops.length - 2, Math.floor(x)), t = x - i;
  const c = stops[i].map((a, k) => Math.round(a + (stops[i + 1][k] - a) * t));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

/**
 * Whether positive values read better on a log axis: they span more than two decades, or more
 * than one and their median sits nearer the middle of the axis in log space than in linear space
 * (as for a learning rate sampled log-uniformly).
 */
function logSpread(nums) {
  const pos = nums.filter((v) => v > 0);
  if (pos.length !== nums.length || pos.length < 2) return false;
  const lo = Math.min(...pos), hi = Math.max(...pos);
  if (hi / lo > 100) return true;
  if (hi / lo < 10) return false;
  const sorted = [...pos].sort((a, b) => a - b), median = sorted[Math.floor(sorted.length / 2)];
  const linear = Math.abs((median - lo) / (hi - lo) - 0.5);
  const logged = Math.abs((Math.log(median) - Math.log(lo)) / (Math.log(hi) - Math.log(lo)) - 0.5);
  return logged < linear;
}

/** The metric parallel coordinates show first: the one most runs have, preferring validation and loss keys. */
function commonMetric(runs, metricKeys) {
  const score = (k) => {
    const n = runs.filter((r) => (r.summary || {})[k]).length;
    return n * 10 + (/(^|[/_.])(val|valid|eval|test)/i.test(k) ? 2 : 0) + (/loss|acc|score|f1|auc/i.test(k) ? 1 : 0);
  };
  return [...metricKeys].sort((a, b) => score(b) - score(a) || a.localeCompare(b))[0];
}

/**
 * One axis of parallel coordinates: numeric (linear, or log when positive and spanning > 2
 * decades) or categorical (sorted distinct values). pos(v) gives 0 (bottom) … 1 (top), or null.
 */
function pcAxis(label, values) {
  // NaN and ±Infinity (a diverged run) have no place on an axis: their lines stop short of it.
  const present = values.filter((v) => v !== undefined && v !== null && !(typeof v === 'number' ? !Number.isFinite(v) : ['NaN', 'Infinity', '-Infinity'].includes(v)));
  const nums = present.map((v) => (typeof v === 'number' ? v : toNum(v)));
  const numeric = present.length > 0 && nums.every(Number.isFinite) && present.every((v) => typeof v === 'number' || (typeof v === 'string' && v.trim() !== '' && !isNaN(Number(v))));
  if (numeric) {
    let lo = Math.min(...nums), hi = Math.max(...nums);
    const log = logSpread(nums);
    const T = log ? Math.log10 : (v) => v;
    const [a, b] = [T(lo), T(hi)];
    const pos = (v) => {
      const n = typeof v === 'number' ? v : toNum(v);
      if (!Number.isFinite(n) || (log && n <= 0)) return null;
      return b > a ? (T(n) - a) / (b - a) : 0.5;
    };
    return { label, pos, log, ticks: lo === hi ? [lo] : [lo, log ? Math.pow(10, (a + b) / 2) : (lo + hi) / 2, hi], fmt: fmtNum };
  }
  const cats = [...new Set(present.map((v) => fmtValue(v)))].sort();
  const pos = (v) => {
    if (v === undefined || v === null) return null;
    const i = cats.indexOf(fmtValue(v));
    return cats.length > 1 ? i / (cats.length - 1) : 0.5;
  };
  return { label, pos, ticks: cats, fmt: (v) => String(v), categorical: true };
}

/**
 * Parallel coordinates from params (those that differ, or all when none differ) to a chosen
 * metric's last value. runs: run objects from the API; items: [{run, name, color}].
 */
export function parallelCoords(runs, metricKeys, initialMetric) {
  const sel = el('select', { 'data-testid': 'parcoords-metric' }, metricKeys.map((k) => el('option', { value: k }, k)));
  sel.value = initialMetric && metricKeys.includes(initialMetric) ? initialMetric : (commonMetric(runs, metricKeys) || '');
  const holder = el('div', { class: 'parcoords', 'data-testid': 'parcoords' });
  const hover = el('div', { class: 'pc-hover muted', 'data-testid': 'parcoords-hover' }, 'hover a line to see its run');
  const scale = el('div', { class: 'pc-scale' });
  const node = el('div', {}, el('div', { class: 'toolbar' }, el('label', {}, 'metric ', sel), scale), holder, hover);

  function render() {
    const metric = sel.value;
    const keys = [...new Set(runs.flatMap((r) => Object.keys(r.params || {})))].sort();
    const differing = keys.filter((k) => new Set(runs.map((r) => JSON.stringify((r.params || {})[k]))).size > 1);
    const paramKeys = (differing.length ? differing : keys).slice(0, 12);
    const axes = paramKeys.map((k) => ({ ...pcAxis(k, runs.map((r) => (r.params || {})[k])), get: (r) => (r.params || {})[k] }));
    if (metric) {
      const get = (r) => { const s = (r.summary || {})[metric]; return s ? toNum(s.last) : undefined; };
      axes.push({ ...pcAxis(metric, runs.map(get)), get, metric: true });
    }
    if (!axes.length) { holder.replaceChildren(el('p', { class: 'muted' }, 'No params or metrics to draw.')); return; }
    const W = Math.max(480, Math.min(1400, 160 * axes.length)), H = 300, top = 28, bottom = 34, left = 50, right = 60;
    const ax = (i) => (axes.length === 1 ? W / 2 : left + (i * (W - left - right)) / (axes.length - 1));
    const ay = (p) => top + (1 - p) * (H - top - bottom);
    const metricAxis = axes.find((a) => a.metric);
    // As wide as its container allows (never wider than drawn): a page of many axes fits the window.
    const root = svg('svg', { width: '100%', viewBox: `0 0 ${W} ${H}`, class: 'pc-svg', style: `max-width:${W}px` });
    const lines = svg('g', { fill: 'none', 'stroke-width': 1.5, 'stroke-opacity': 0.8 });
    for (const r of runs) {
      const pts = [];
      axes.forEach((a, i) => { const p = a.pos(a.get(r)); if (p !== null) pts.push([ax(i), ay(p)]); else pts.push(null); });
      let d = '', pen = false;
      for (const p of pts) { if (!p) { pen = false; continue; } d += (pen ? 'L' : 'M') + p[0].toFixed(1) + ' ' + p[1].toFixed(1); pen = true; }
      const mp = metricAxis ? metricAxis.pos(metricAxis.get(r)) : null;
      const path = svg('path', { d, stroke: mp === null ? '#9ca3af' : rampColor(mp), 'data-testid': 'parcoords-line', 'data-run-id': r.id },
        svg('title', {}, `${r.name || r.id}\n` + axes.map((a) => `${a.label} = ${fmtValue(a.get(r))}`).join('\n')));
      path.addEventListener('mouseenter', () => {
        path.setAttribute('stroke-width', '4'); lines.append(path);
        hover.className = 'pc-hover';
        hover.replaceChildren(el('strong', {}, r.name || r.id), ' · ', axes.map((a) => `${a.label} = ${fmtValue(a.get(r))}`).join(' · '));
      });
      path.addEventListener('mouseleave', () => path.setAttribute('stroke-width', '1.5'));
      lines.append(path);
    }
    root.append(lines);
    if (metricAxis && !metricAxis.categorical) {
      const [lo, hi] = [metricAxis.ticks[0], metricAxis.ticks[metricAxis.ticks.length - 1]];
      scale.replaceChildren(el('span', { class: 'muted' }, `colour: ${metricAxis.label} `), el('span', {}, fmtNum(lo)),
        el('span', { class: 'pc-ramp', style: `background:linear-gradient(to right, ${[0, 0.2, 0.4, 0.6, 0.8, 1].map(rampColor).join(', ')})` }),
        el('span', {}, fmtNum(hi)), metricAxis.log ? el('span', { class: 'muted' }, ' (log)') : '');
    } else scale.replaceChildren();
    axes.forEach((a, i) => {
      const x = ax(i);
      const g = svg('g', { 'data-testid': 'parcoords-axis', 'data-scale': a.categorical ? 'categorical' : a.log ? 'log' : 'linear' });
      g.append(svg('line', { x1: x, x2: x, y1: top, y2: H - bottom, class: 'pc-axis' }));
      g.append(titled(svg('text', { x, y: top - 10, 'text-anchor': 'middle', class: a.metric ? 'pc-label pc-metric' : 'pc-label' }, cut(a.label, 24)), a.label));
      if (a.log) g.append(svg('text', { x, y: H - bottom + 14, 'text-anchor': 'middle', class: 'pc-tick' }, 'log scale'));
      const ticks = a.categorical && a.ticks.length > 8 ? a.ticks.filter((_, k) => k % Math.ceil(a.ticks.length / 8) === 0) : a.ticks;
      for (const t of ticks) {
        const p = a.categorical ? a.pos(t) : a.pos(t);
        if (p === null) continue;
        // The last axis labels its ticks on its left, inside the drawing.
        const last = axes.length > 1 && i === axes.length - 1;
        const text = a.fmt(t);
        g.append(titled(svg('text', { x: last ? x - 4 : x + 4, y: ay(p) + 3, class: 'pc-tick', 'text-anchor': last ? 'end' : 'start' }, cut(text, 18)), text));
      }
      root.append(g);
    });
    holder.replaceChildren(root);
  }
  sel.addEventListener('change', render);
  render();
  return node;
}

/** A label of at most n characters, the rest elided. */
function cut(text, n) {
  return text.length > n ? text.slice(0, n - 1) + '…' : text;
}

/** A label whose text was cut, in a group whose tooltip is the whole text; else the label. */
function titled(label, whole) {
  return label.textContent === whole ? label : svg('g', {}, svg('title', {}, whole), label);
}
