/* trainlog web UI: charts drawn on canvas and SVG, with no library. Metric charts show each run's
 * min–max band from the server's buckets plus its last value (so a spike is never hidden), on a
 * step, wall-time or relative-time x-axis, with smoothing, log scale and drag-to-zoom that
 * re-fetches finer buckets. Also: parallel coordinates and horizontal bars. Uses the helpers of
 * app.js (el, api, toNum, fmtNum, enc), which is loaded after this file. */
'use strict';

const X_MODES = { step: 'step', wall: 'wall time', relative: 'relative time' };

/** Settings shared by the charts of one page; charts redraw when they change. */
function chartSettings(initial) {
  const s = { xMode: 'step', smoothing: 0, ...initial, listeners: new Set() };
  s.set = (patch) => { Object.assign(s, patch); s.listeners.forEach((f) => f()); };
  return s;
}

/** The x-axis and smoothing controls for a chart settings object. */
function chartControls(settings) {
  const xSel = el('select', { 'data-testid': 'x-axis' },
    Object.entries(X_MODES).map(([v, label]) => el('option', { value: v }, label)));
  xSel.value = settings.xMode;
  xSel.addEventListener('change', () => settings.set({ xMode: xSel.value }));
  const smooth = el('input', { type: 'range', min: '0', max: '0.99', step: '0.01', 'data-testid': 'smoothing' });
  smooth.value = String(settings.smoothing);
  const smoothVal = el('span', { class: 'mono' }, settings.smoothing.toFixed(2));
  smooth.addEventListener('input', () => {
    smoothVal.textContent = Number(smooth.value).toFixed(2);
    settings.set({ smoothing: Number(smooth.value) });
  });
  return el('div', { class: 'toolbar chart-controls' },
    el('label', {}, 'x-axis ', xSel), el('label', {}, 'smoothing ', smooth, ' ', smoothVal));
}

function niceTicks(lo, hi, n) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / n;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const r = raw / mag;
  const step = (r >= 5 ? 10 : r >= 2 ? 5 : r >= 1 ? 2 : 1) * mag;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
  return out;
}

/** Ticks for a duration axis in seconds, on round units. */
function durationTicks(lo, hi, n) {
  const units = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];
  const raw = (hi - lo) / n;
  const step = units.find((u) => u >= raw) || Math.ceil(raw / 86400) * 86400;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi; v += step) out.push(v);
  return out;
}

function fmtSeconds(s) {
  const sign = s < 0 ? '-' : '';
  s = Math.abs(Math.round(s));
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
  if (h >= 48) return `${sign}${Math.floor(h / 24)}d${h % 24 ? ` ${h % 24}h` : ''}`;
  if (h > 0) return `${sign}${h}h${m ? String(m).padStart(2, '0') : ''}`;
  if (m > 0) return `${sign}${m}m${sec ? String(sec).padStart(2, '0') : ''}`;
  return `${sign}${sec}s`;
}

function fmtClock(ms, spanMs) {
  const d = new Date(ms);
  const hm = d.toLocaleTimeString([], spanMs < 120000 ? { hour: '2-digit', minute: '2-digit', second: '2-digit' } : { hour: '2-digit', minute: '2-digit' });
  return spanMs > 2 * 86400000 ? d.toLocaleDateString([], { month: 'short', day: 'numeric' }) + ' ' + hm : hm;
}

/** Short labels for a value axis: bytes in binary units for `*_bytes` keys, else compact numbers. */
function axisFormatter(key) {
  if (/_bytes$/.test(key)) return (v) => (v === 0 ? '0' : fmtBytes(v));
  return (v) => {
    const a = Math.abs(v);
    if (a >= 1e4 && a < 1e15) {
      for (const [d, u] of [[1e12, 'T'], [1e9, 'G'], [1e6, 'M'], [1e3, 'k']]) if (a >= d) return String(Number((v / d).toPrecision(3))) + u;
    }
    return fmtNum(v);
  };
}

/** Exponential moving average with TensorBoard's debiasing, over finite values only. */
function smoothValues(values, weight) {
  if (!(weight > 0)) return values;
  const out = new Array(values.length);
  let acc = 0, n = 0;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (!Number.isFinite(v)) { out[i] = v; continue; }
    acc = acc * weight + (1 - weight) * v;
    n++;
    out[i] = acc / (1 - Math.pow(weight, n));
  }
  return out;
}

/**
 * A metric chart for one key and several runs.
 * series: [{run_id, name, color, start_time}]. Fetches GET /metrics?key=K&runs=...&buckets=W.
 * Drag to zoom into an x range (re-fetches finer buckets for its steps), double-click to reset.
 */
function createChart(key, series, settings) {
  settings = settings || chartSettings();
  const canvas = el('canvas', { 'data-testid': 'chart', 'data-key': key, 'data-series-count': '0' });
  const msg = el('div', { class: 'chart-msg muted' });
  const hover = el('div', { class: 'chart-hover mono', 'data-testid': 'chart-hover' });
  const logCb = el('input', { type: 'checkbox' });
  const box = el('div', { class: 'chart-box' },
    el('div', { class: 'chart-head' },
      el('span', { class: 'title' }, key),
      el('label', {}, logCb, ' log'),
      el('span', { class: 'hint' }, 'drag to zoom · double-click to reset')),
    canvas, hover, msg);

  const M = { l: 58, r: 12, t: 8, b: 24 };
  let data = [];           // [{name, color, origin, buckets}]
  let zoom = null;         // {mode, x: [a, b], steps: [lo, hi]} when zoomed
  let seq = 0;
  let drag = null;         // {x0, x1} in css px
  let view = null;         // last computed scales
  const meta = new Map(series.map((s) => [s.run_id, s]));
  const yFmt = axisFormatter(key);

  logCb.addEventListener('change', draw);
  const onSettings = () => {
    if (zoom && zoom.mode !== settings.xMode) { zoom = null; fetchData(); } else draw();
  };
  settings.listeners.add(onSettings);

  function size() {
    return { w: Math.max(200, canvas.clientWidth || 480), h: canvas.clientHeight || 240 };
  }

  // Where a bucket lies on the x-axis in the current mode: [start, end] of its band and the x of its last point.
  function xOf(s, b) {
    switch (settings.xMode) {
      case 'wall': return [b.time_first, b.time_last, b.time_last];
      case 'relative': return [(b.time_first - s.origin) / 1000, (b.time_last - s.origin) / 1000, (b.time_last - s.origin) / 1000];
      default: return [b.step_min, b.step_max + 1, b.step_max];
    }
  }

  async function fetchData() {
    const my = ++seq;
    const { w } = size();
    const q = new URLSearchParams({ key, runs: series.map((s) => s.run_id).join(','),
      buckets: String(Math.max(20, Math.round(w - M.l - M.r))) });
    if (zoom) { q.set('step_min', String(Math.floor(zoom.steps[0]))); q.set('step_max', String(Math.ceil(zoom.steps[1]))); }
    msg.textContent = 'loading…';
    try {
      const res = await api('/metrics?' + q);
      if (my !== seq) return;
      data = (res.series || []).map((s) => {
        const m = meta.get(s.run_id) || { name: s.run_id, color: '#888' };
        const buckets = (s.buckets || []).map((b) => ({
          step_min: b.step_min, step_max: b.step_max, time_first: b.time_first, time_last: b.time_last,
          min: toNum(b.min), max: toNum(b.max), last: toNum(b.last), count: b.count,
        }));
        const origin = m.start_time || (buckets.length ? buckets[0].time_first : 0);
        return { run_id: s.run_id, name: m.name, color: m.color, origin, buckets };
      });
      msg.textContent = zoom ? `steps ${Math.floor(zoom.steps[0])}–${Math.ceil(zoom.steps[1])}` : '';
      msg.className = 'chart-msg muted';
    } catch (e) {
      if (my !== seq) return;
      data = [];
      msg.textContent = 'Could not load ' + key + ': ' + e.message;
      msg.className = 'chart-msg error';
    }
    draw();
  }

  function draw() {
    const { w, h } = size();
    const dpr = window.devicePixelRatio || 1;
    if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
      canvas.width = Math.round(w * dpr); canvas.height = Math.round(h * dpr);
    }
    const ctx = canvas.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    ctx.font = '11px system-ui, sans-serif';

    const drawn = data.filter((s) => s.buckets.some((b) => Number.isFinite(b.min) || Number.isFinite(b.max) || Number.isFinite(b.last)));
    // What the chart shows, for tests and tools: series, the largest value, buckets, range and settings.
    let yMax = -Infinity, nBuckets = 0;
    for (const s of drawn) for (const b of s.buckets) { nBuckets++; if (Number.isFinite(b.max) && b.max > yMax) yMax = b.max; }
    canvas.setAttribute('data-series-count', String(drawn.length));
    canvas.setAttribute('data-y-max', Number.isFinite(yMax) ? String(yMax) : '');
    canvas.setAttribute('data-buckets', String(nBuckets));
    canvas.setAttribute('data-range', zoom ? `${Math.floor(zoom.steps[0])}-${Math.ceil(zoom.steps[1])}` : 'all');
    canvas.setAttribute('data-x-mode', settings.xMode);
    canvas.setAttribute('data-smoothing', String(settings.smoothing));
    if (!drawn.length) {
      ctx.fillStyle = '#6b7280';
      ctx.fillText(msg.textContent === 'loading…' ? 'loading…' : 'no data', w / 2 - 20, h / 2);
      view = null;
      return;
    }

    // x domain
    let x0 = Infinity, x1 = -Infinity;
    for (const s of drawn) for (const b of s.buckets) { const [a, e] = xOf(s, b); x0 = Math.min(x0, a); x1 = Math.max(x1, e); }
    if (zoom) { x0 = zoom.x[0]; x1 = zoom.x[1]; }
    if (!(x1 > x0)) { x0 -= 1; x1 += 1; }

    // y domain (log only uses positive values)
    let log = logCb.checked;
    const ok = (v) => Number.isFinite(v) && (!log || v > 0);
    let y0 = Infinity, y1 = -Infinity;
    const scan = () => {
      for (const s of drawn) for (const b of s.buckets) {
        if (zoom) { const [a, e] = xOf(s, b); if (e < x0 || a > x1) continue; }
        for (const v of [b.min, b.max, b.last]) if (ok(v)) { y0 = Math.min(y0, v); y1 = Math.max(y1, v); }
      }
    };
    scan();
    if (log && !(y1 >= y0)) { log = false; scan(); msg.textContent = 'no positive values: log scale not possible'; }
    if (!(y1 >= y0)) { y0 = 0; y1 = 1; }
    const T = log ? Math.log10 : (v) => v;
    let ty0 = T(y0), ty1 = T(y1);
    if (ty1 === ty0) { ty0 -= 0.5; ty1 += 0.5; }
    const pad = (ty1 - ty0) * 0.05; ty0 -= pad; ty1 += pad;

    const pw = w - M.l - M.r, ph = h - M.t - M.b;
    const sx = (x) => M.l + ((x - x0) / (x1 - x0)) * pw;
    const sy = (v) => M.t + ph - ((T(v) - ty0) / (ty1 - ty0)) * ph;
    view = { x0, x1, pw, drawn };

    // grid + axes
    ctx.strokeStyle = '#e5e7eb'; ctx.fillStyle = '#6b7280'; ctx.lineWidth = 1;
    ctx.textAlign = 'right'; ctx.textBaseline = 'middle';
    let yt;
    if (log) {
      yt = [];
      for (let p = Math.ceil(ty0); p <= Math.floor(ty1); p++) yt.push(Math.pow(10, p));
      if (yt.length < 2) yt = niceTicks(Math.pow(10, ty0), Math.pow(10, ty1), 4).filter((v) => v > 0);
    } else yt = niceTicks(ty0, ty1, 5);
    for (const v of yt) {
      const y = Math.round(sy(v)) + 0.5;
      if (y < M.t - 1 || y > M.t + ph + 1) continue;
      ctx.beginPath(); ctx.moveTo(M.l, y); ctx.lineTo(M.l + pw, y); ctx.stroke();
      ctx.fillText(yFmt(v), M.l - 4, y);
    }
    ctx.textAlign = 'center'; ctx.textBaseline = 'top';
    const nx = Math.max(2, Math.floor(pw / 90));
    let xt, xfmt;
    if (settings.xMode === 'wall') {
      const spanS = (x1 - x0) / 1000;
      xt = durationTicks(x0 / 1000, x1 / 1000, nx).map((s) => s * 1000);
      xfmt = (v) => fmtClock(v, spanS * 1000);
    } else if (settings.xMode === 'relative') {
      xt = durationTicks(x0, x1, nx); xfmt = fmtSeconds;
    } else { xt = niceTicks(x0, x1, nx); xfmt = fmtNum; }
    for (const v of xt) {
      const x = Math.round(sx(v)) + 0.5;
      ctx.beginPath(); ctx.moveTo(x, M.t); ctx.lineTo(x, M.t + ph); ctx.stroke();
      ctx.fillText(xfmt(v), x, M.t + ph + 4);
    }
    ctx.strokeStyle = '#9ca3af';
    ctx.strokeRect(M.l + 0.5, M.t + 0.5, pw, ph);

    ctx.save();
    ctx.beginPath(); ctx.rect(M.l, M.t, pw, ph); ctx.clip();
    const smoothing = settings.smoothing;
    for (const s of drawn) {
      // min–max band: one rectangle per bucket, at least 1px wide/high so spikes stay visible
      ctx.globalAlpha = 0.25; ctx.fillStyle = s.color;
      for (const b of s.buckets) {
        if (!ok(b.min) || !ok(b.max)) continue;
        const [a, e] = xOf(s, b);
        const xa = sx(a), xb = Math.max(sx(e), xa + 1);
        const ya = sy(b.max), yb = Math.max(sy(b.min), ya + 1);
        ctx.fillRect(xa, ya, xb - xa, yb - ya);
      }
      const line = (values, alpha, width) => {
        ctx.globalAlpha = alpha; ctx.strokeStyle = s.color; ctx.lineWidth = width;
        ctx.beginPath();
        let pen = false;
        s.buckets.forEach((b, i) => {
          const v = values[i];
          if (!ok(v)) { pen = false; return; }
          const x = sx(xOf(s, b)[2]), y = sy(v);
          if (pen) ctx.lineTo(x, y); else { ctx.moveTo(x, y); pen = true; }
        });
        ctx.stroke();
      };
      const lasts = s.buckets.map((b) => b.last);
      if (smoothing > 0) { line(lasts, 0.35, 1); line(smoothValues(lasts, smoothing), 1, 2); } else line(lasts, 1, 1.5);
      if (s.buckets.length === 1 && ok(s.buckets[0].last)) {
        ctx.globalAlpha = 1; ctx.fillStyle = s.color;
        ctx.beginPath(); ctx.arc(sx(xOf(s, s.buckets[0])[2]), sy(s.buckets[0].last), 3, 0, 2 * Math.PI); ctx.fill();
      }
    }
    ctx.restore();
    ctx.globalAlpha = 1;

    if (drag) {
      ctx.fillStyle = 'rgba(37,99,235,0.15)';
      const a = Math.min(drag.x0, drag.x1), b = Math.max(drag.x0, drag.x1);
      ctx.fillRect(a, M.t, b - a, ph);
    }
  }

  function xAt(px) {
    const f = Math.min(1, Math.max(0, (px - M.l) / view.pw));
    return view.x0 + f * (view.x1 - view.x0);
  }
  const localX = (e) => e.clientX - canvas.getBoundingClientRect().left;

  /** The steps whose buckets meet the x range [a, b], over every series drawn. */
  function stepsIn(a, b) {
    if (settings.xMode === 'step') return [a, b];
    let lo = Infinity, hi = -Infinity;
    for (const s of view.drawn) for (const bk of s.buckets) {
      const [xa, xe] = xOf(s, bk);
      if (xe >= a && xa <= b) { lo = Math.min(lo, bk.step_min); hi = Math.max(hi, bk.step_max); }
    }
    return lo <= hi ? [lo, hi] : null;
  }

  function showHover(px) {
    if (!view) { hover.textContent = ''; return; }
    const x = xAt(px);
    const parts = [];
    for (const s of view.drawn) {
      let best = null, dist = Infinity;
      for (const b of s.buckets) { const d = Math.abs(xOf(s, b)[2] - x); if (d < dist) { dist = d; best = b; } }
      if (best) parts.push(`${s.name}: ${fmtNum(best.last)} @ ${best.step_max}` + (best.count > 1 ? ` [${fmtNum(best.min)}, ${fmtNum(best.max)}]` : ''));
    }
    hover.textContent = parts.slice(0, 6).join('  ·  ') + (parts.length > 6 ? `  · +${parts.length - 6}` : '');
  }

  canvas.addEventListener('mousedown', (e) => {
    if (!view || e.button !== 0) return;
    drag = { x0: localX(e), x1: localX(e) };
    e.preventDefault();
  });
  canvas.addEventListener('mousemove', (e) => { if (!drag) showHover(localX(e)); });
  canvas.addEventListener('mouseleave', () => { hover.textContent = ''; });
  const onMove = (e) => { if (drag) { drag.x1 = localX(e); draw(); } };
  const onUp = () => {
    if (!drag) return;
    const d = drag; drag = null;
    if (Math.abs(d.x1 - d.x0) < 5 || !view) { draw(); return; }
    let a = xAt(Math.min(d.x0, d.x1)), b = xAt(Math.max(d.x0, d.x1));
    if (settings.xMode === 'step' && b - a < 1) b = a + 1;
    const steps = stepsIn(a, b);
    if (!steps) { draw(); return; }
    zoom = { mode: settings.xMode, x: [a, b], steps };
    fetchData();
  };
  window.addEventListener('mousemove', onMove);
  window.addEventListener('mouseup', onUp);
  canvas.addEventListener('dblclick', () => { zoom = null; fetchData(); });

  let resizeTimer = null;
  const onResize = () => { clearTimeout(resizeTimer); resizeTimer = setTimeout(draw, 100); };
  window.addEventListener('resize', onResize);

  return {
    node: box,
    start: fetchData,
    /** Re-fetches what is shown (the zoomed range stays), for live updates. */
    refresh: () => fetchData(),
    destroy: () => {
      seq++;
      settings.listeners.delete(onSettings);
      window.removeEventListener('mousemove', onMove);
      window.removeEventListener('mouseup', onUp);
      window.removeEventListener('resize', onResize);
    },
  };
}

/** Charts for keys in a container already in the DOM; returns {refresh, destroy}. */
function mountCharts(container, keys, series, settings) {
  const charts = keys.map((k) => createChart(k, series, settings));
  container.replaceChildren(...charts.map((c) => c.node));
  charts.forEach((c) => c.start());
  return { refresh: () => charts.forEach((c) => c.refresh()), destroy: () => charts.forEach((c) => c.destroy()) };
}

/* ---------- parallel coordinates (SVG) ---------- */

const SVG_NS = 'http://www.w3.org/2000/svg';
function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) node.setAttribute(k, String(v));
  for (const c of children.flat()) if (c !== null && c !== undefined) node.append(c instanceof Node ? c : String(c));
  return node;
}

/** Blue (low) to red (high). */
function rampColor(f) {
  const stops = [[49, 54, 149], [69, 117, 180], [116, 173, 209], [254, 224, 144], [244, 109, 67], [165, 0, 38]];
  const x = Math.min(1, Math.max(0, f)) * (stops.length - 1);
  const i = Math.min(stops.length - 2, Math.floor(x)), t = x - i;
  const c = stops[i].map((a, k) => Math.round(a + (stops[i + 1][k] - a) * t));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

/**
 * One axis of parallel coordinates: numeric (linear, or log when positive and spanning > 2
 * decades) or categorical (sorted distinct values). pos(v) gives 0 (bottom) … 1 (top), or null.
 */
function pcAxis(label, values) {
  const present = values.filter((v) => v !== undefined && v !== null);
  const nums = present.map((v) => (typeof v === 'number' ? v : toNum(v)));
  const numeric = present.length > 0 && nums.every(Number.isFinite) && present.every((v) => typeof v === 'number' || (typeof v === 'string' && v.trim() !== '' && !isNaN(Number(v))));
  if (numeric) {
    let lo = Math.min(...nums), hi = Math.max(...nums);
    const log = lo > 0 && hi / lo > 100;
    const T = log ? Math.log10 : (v) => v;
    const [a, b] = [T(lo), T(hi)];
    const pos = (v) => {
      const n = typeof v === 'number' ? v : toNum(v);
      if (!Number.isFinite(n) || (log && n <= 0)) return null;
      return b > a ? (T(n) - a) / (b - a) : 0.5;
    };
    return { label, pos, ticks: lo === hi ? [lo] : [lo, log ? Math.pow(10, (a + b) / 2) : (lo + hi) / 2, hi], fmt: fmtNum };
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
function parallelCoords(runs, metricKeys, initialMetric) {
  const sel = el('select', { 'data-testid': 'parcoords-metric' }, metricKeys.map((k) => el('option', { value: k }, k)));
  if (initialMetric && metricKeys.includes(initialMetric)) sel.value = initialMetric;
  const holder = el('div', { class: 'parcoords', 'data-testid': 'parcoords' });
  const node = el('div', {}, el('div', { class: 'toolbar' }, el('label', {}, 'metric ', sel)), holder);

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
    const root = svg('svg', { width: W, height: H, viewBox: `0 0 ${W} ${H}`, class: 'pc-svg' });
    const lines = svg('g', { fill: 'none', 'stroke-width': 1.5, 'stroke-opacity': 0.8 });
    for (const r of runs) {
      const pts = [];
      axes.forEach((a, i) => { const p = a.pos(a.get(r)); if (p !== null) pts.push([ax(i), ay(p)]); else pts.push(null); });
      let d = '', pen = false;
      for (const p of pts) { if (!p) { pen = false; continue; } d += (pen ? 'L' : 'M') + p[0].toFixed(1) + ' ' + p[1].toFixed(1); pen = true; }
      const mp = metricAxis ? metricAxis.pos(metricAxis.get(r)) : null;
      const path = svg('path', { d, stroke: mp === null ? '#9ca3af' : rampColor(mp), 'data-testid': 'parcoords-line', 'data-run-id': r.id },
        svg('title', {}, `${r.name || r.id}\n` + axes.map((a) => `${a.label} = ${fmtValue(a.get(r))}`).join('\n')));
      path.addEventListener('mouseenter', () => { path.setAttribute('stroke-width', '4'); lines.append(path); });
      path.addEventListener('mouseleave', () => path.setAttribute('stroke-width', '1.5'));
      lines.append(path);
    }
    root.append(lines);
    axes.forEach((a, i) => {
      const x = ax(i);
      const g = svg('g', { 'data-testid': 'parcoords-axis' });
      g.append(svg('line', { x1: x, x2: x, y1: top, y2: H - bottom, stroke: '#374151' }));
      g.append(svg('text', { x, y: top - 10, 'text-anchor': 'middle', class: a.metric ? 'pc-label pc-metric' : 'pc-label' }, a.label));
      const ticks = a.categorical && a.ticks.length > 8 ? a.ticks.filter((_, k) => k % Math.ceil(a.ticks.length / 8) === 0) : a.ticks;
      for (const t of ticks) {
        const p = a.categorical ? a.pos(t) : a.pos(t);
        if (p === null) continue;
        g.append(svg('text', { x: x + 4, y: ay(p) + 3, class: 'pc-tick' }, a.fmt(t)));
      }
      root.append(g);
    });
    holder.replaceChildren(root);
  }
  sel.addEventListener('change', render);
  render();
  return node;
}

/* ---------- horizontal bars ---------- */

/** rows: [{label, value, color, title}] → a bar list scaled to the largest value. */
function barList(rows, fmt, testid) {
  const max = Math.max(0, ...rows.map((r) => (Number.isFinite(r.value) ? r.value : 0)));
  return el('div', { class: 'bars', 'data-testid': testid || null }, rows.map((r) =>
    el('div', { class: 'bar-row', 'data-testid': testid ? testid + '-row' : null, title: r.title || '' },
      el('span', { class: 'bar-label' }, r.label),
      el('span', { class: 'bar-track' }, el('span', {
        class: 'bar', style: `width:${max > 0 && Number.isFinite(r.value) ? Math.max(0.5, (100 * r.value) / max) : 0}%;background:${r.color || '#2563eb'}`,
      })),
      el('span', { class: 'bar-value num' }, Number.isFinite(r.value) ? fmt(r.value) : '—'))));
}

/* ---------- best-so-far curve (SVG) ---------- */

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
    root.append(svg('line', { x1: M.l, x2: W - M.r, y1: sy(v), y2: sy(v), stroke: '#e5e7eb' }));
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
