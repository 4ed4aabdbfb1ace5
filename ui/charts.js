/* trainlog web UI: metric charts on uPlot (vendored in ui/vendor/uplot at a pinned release), and
 * parallel coordinates, bar lists and the best-so-far curve in SVG. A metric chart shows each
 * run's line through the last value of every bucket the server returns, plus the bucket's
 * min–max band (so a spike is never hidden); a tooltip lists every run's value at the cursor, the
 * crosshair is shared by the charts of a page, zoom (x, y or both) re-fetches finer buckets.
 * Charts load lazily: each is a placeholder of its final size until it nears the viewport.
 * Uses the helpers of app.js (el, api, toNum, fmtNum, fmtBytes, enc), loaded after this file. */
'use strict';

const X_MODES = { step: 'step', wall: 'wall time', relative: 'relative time' };
/** Parallel coordinates draw at most this many runs. */
const PARCOORDS_MAX = 1000;
/** Up to this many runs, a chart reads its series with one GET; above, with one POST. */
const GET_RUNS_MAX = 40;

/** 50 colours, no two closer than 10 CIEDE2000 units, readable on light and dark pages
 * (printed by ui/tests/palette.py). */
const RUN_PALETTE = ['#2277bb', '#bbaa00', '#ff0022', '#ee66ff', '#007744', '#44bbbb', '#885577',
  '#886644', '#ff8800', '#00bb11', '#7733ff', '#dd9999', '#99aadd', '#ff0088', '#777700', '#227777',
  '#99aa77', '#00aaee', '#7777aa', '#aa5555', '#cc00bb', '#00bb88', '#cc5500', '#bb9966', '#bb77aa',
  '#9977ff', '#448800', '#aa7700', '#ff8866', '#bb2266', '#8855aa', '#009988', '#ff6677', '#bb99dd',
  '#88aa11', '#4466ff', '#dd9900', '#0088aa', '#bb7766', '#ff77bb', '#339955', '#bb3322', '#667744',
  '#5599ff', '#dd0044', '#995500', '#bb44ff', '#ff6611', '#ff11cc', '#bb7744'];

/** A run's colour: a function of its id alone (FNV-1a), so a run looks the same in every view. */
function runColor(id) {
  let h = 0x811c9dc5;
  for (let i = 0; i < id.length; i++) { h ^= id.charCodeAt(i); h = Math.imul(h, 0x01000193); }
  return RUN_PALETTE[(h >>> 0) % RUN_PALETTE.length];
}

let chartSyncCount = 0;

/** Which runs a page hides and which one it highlights, and the key that makes one crosshair of
 * its charts; shared by all its charts (of every panel) and its legend. */
function seriesState() {
  const s = { hidden: new Set(), focus: null, listeners: new Set(), sync: 'trainlog-charts-' + (++chartSyncCount) };
  s.toggle = (id) => { if (s.hidden.has(id)) s.hidden.delete(id); else s.hidden.add(id); s.listeners.forEach((f) => f('hidden')); };
  s.setFocus = (id) => { if (s.focus !== id) { s.focus = id; s.listeners.forEach((f) => f('focus')); } };
  return s;
}

/** Settings shared by the charts of one panel; charts redraw when they change. Their cursor is
 * synced with every chart of the same seriesState (the page), whatever its panel. */
function chartSettings(initial, runs) {
  runs = runs || seriesState();
  const s = { xMode: 'step', smoothing: 0, robust: false, ...initial, runs, sync: runs.sync, listeners: new Set() };
  s.set = (patch) => { Object.assign(s, patch); s.listeners.forEach((f) => f(patch)); };
  return s;
}

/** The x-axis, smoothing and outlier controls for a chart settings object. */
function chartControls(settings) {
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
function runLegend(series, runs) {
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

/** What a key's values are measured in, from its name: `*_bytes`, `*_w`, `*_c`, `util`, `cost/…`. */
function unitOf(key) {
  const k = key.toLowerCase();
  if (/bytes$/.test(k)) return { label: 'bytes', bytes: true };
  if (k.startsWith('cost/') || /_usd$/.test(k)) return { label: 'USD', prefix: '$' };
  if (/(^|[/._])util(ization)?$|percent$|_pct$/.test(k)) return { label: '%', suffix: '%' };
  if (/_w$|(^|[/._])power$/.test(k)) return { label: 'W', suffix: ' W' };
  if (/_c$|(^|[/._])temp(erature)?$/.test(k)) return { label: '°C', suffix: ' °C' };
  if (/_mhz$/.test(k)) return { label: 'MHz', suffix: ' MHz' };
  if (/_(s|secs|seconds)$/.test(k)) return { label: 's', suffix: ' s' };
  return { label: '' };
}

const BYTE_UNITS = [[2 ** 40, ' TiB'], [2 ** 30, ' GiB'], [2 ** 20, ' MiB'], [2 ** 10, ' KiB']];
const SI_UNITS = [[1e12, 'T'], [1e9, 'G'], [1e6, 'M'], [1e3, 'k']];

/** Tick steps for byte axes: 1, 2 or 5 times a power of 1024 (and of 10 within it), so 4 GiB, 6 GiB, … */
const BYTE_INCRS = [1, 2 ** 10, 2 ** 20, 2 ** 30, 2 ** 40].flatMap((b) => [1, 2, 5, 10, 20, 50, 100, 200, 500].map((m) => m * b));

let measureCtx = null;
/** The width of an axis label in the axes' font (uPlot's default, 12px system-ui). */
function labelWidth(text) {
  measureCtx = measureCtx || document.createElement('canvas').getContext('2d');
  measureCtx.font = '12px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif';
  return measureCtx.measureText(String(text)).width;
}

/** Axis labels: one scale and one number of decimals for all ticks, enough to tell them apart. */
function fmtTicks(splits, incr, unit, log) {
  const finite = splits.filter(Number.isFinite);
  const maxAbs = Math.max(0, ...finite.map(Math.abs));
  let div = 1, scaled = '';
  if (unit.bytes) [div, scaled] = BYTE_UNITS.find(([d]) => maxAbs >= d) || [1, ' B'];
  else if (maxAbs >= 1e4 && maxAbs < 1e15) [div, scaled] = SI_UNITS.find(([d]) => maxAbs >= d);
  const step = log ? null : incr / div;
  return splits.map((v) => {
    if (!Number.isFinite(v)) return '';
    let text;
    if (log) text = String(Number((v / div).toPrecision(3)));
    else {
      const dec = step > 0 ? Math.max(0, -Math.floor(Math.log10(step) + 1e-9)) : 2;
      text = dec > 6 ? (v / div).toExponential(Math.min(4, Math.max(1, Math.round(Math.log10(Math.abs(v / div) / step) + 1e-9)))) : (v / div).toFixed(dec);
    }
    return (unit.prefix || '') + text + scaled + (unit.suffix || '');
  });
}

/** One value with its unit, for tooltips. */
function fmtWithUnit(v, unit) {
  if (!Number.isFinite(v)) return fmtNum(v);
  if (unit.bytes) return fmtBytes(v);
  return (unit.prefix || '') + fmtNum(v) + (unit.suffix || '');
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

/** The q-quantile of sorted numbers. */
function quantile(sorted, q) {
  const i = (sorted.length - 1) * q, lo = Math.floor(i), hi = Math.ceil(i);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (i - lo);
}

/** A y range around [lo, hi] with 5% room, never empty (on a log scale, in decades). */
function paddedRange(lo, hi, log) {
  if (log) {
    let a = Math.log10(lo), b = Math.log10(hi);
    if (b - a < 1e-9) { a -= 0.5; b += 0.5; }
    const pad = (b - a) * 0.05;
    return [Math.pow(10, a - pad), Math.pow(10, b + pad)];
  }
  if (hi - lo <= Math.abs(hi) * 1e-12) {
    const d = Math.abs(hi) > 0 ? Math.abs(hi) * 0.05 : 0.5;
    return [lo - d, hi + d];
  }
  const pad = (hi - lo) * 0.05;
  return [lo - pad, hi + pad];
}

function cssVar(name, fallback) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || fallback;
}

/**
 * A metric chart for one key and several runs.
 * series: [{run_id, name, color, start_time}]. Fetches GET /metrics?key=K&runs=...&buckets=W.
 * Drag to zoom (sideways: steps, re-fetching finer buckets; up or down: values; diagonally:
 * both), double-click to reset.
 * Until start() is called, the chart is a placeholder of its final size (its head, an empty plot
 * area and its message line): it listens to nothing and fetches nothing. start() fetches its data
 * and draws it; `data-loaded` on the box turns to 1 once the first answer is drawn.
 */
function createChart(key, series, settings) {
  settings = settings || chartSettings();
  const unit = unitOf(key);
  const plot = el('div', { class: 'chart-plot', 'data-testid': 'chart', 'data-key': key, 'data-series-count': '0' });
  const msg = el('div', { class: 'chart-msg muted' });
  const tip = el('div', { class: 'chart-tip hidden', 'data-testid': 'chart-tooltip' });
  const logCb = el('input', { type: 'checkbox' });
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
      el('span', { class: 'title', title: key }, key),
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
      const got = await loadSeries(key, series, range);
      if (my !== seq) return;
      data = got.map((s) => {
        const m = meta.get(s.run_id) || { name: s.run_id, color: runColor(s.run_id) };
        const buckets = (s.buckets || []).map((b) => ({
          step_min: b.step_min, step_max: b.step_max, time_first: b.time_first, time_last: b.time_last,
          min: toNum(b.min), max: toNum(b.max), last: toNum(b.last), count: b.count,
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

  function axes() {
    const stroke = cssVar('--chart-axis', '#6b7280'), grid = { stroke: cssVar('--chart-grid', '#e5e7eb'), width: 1 };
    const ticks = { stroke: grid.stroke, width: 1 };
    const x = { stroke, grid, ticks, space: 70 };
    if (settings.xMode === 'relative') {
      x.splits = (self, ai, min, max) => durationTicks(min, max, Math.max(2, Math.floor(self.over.clientWidth / 90)));
      x.values = (self, splits) => splits.map(fmtSeconds);
    } else if (settings.xMode === 'step') {
      x.values = (self, splits, ai, space, incr) => fmtTicks(splits, incr, { label: '' }, false);
    }
    const y = {
      stroke, grid, ticks,
      values: (self, splits, ai, space, incr) => fmtTicks(splits, incr, unit, isLog()),
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
        draw: [recordGeometry],
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

  /* ---- export ---- */

  /** The runs drawn (those the legend does not hide). */
  const shownData = () => data.filter((s) => !runs.hidden.has(s.run_id));
  /** The file name of an export: the key, with `/` (and characters file systems refuse) as `_`. */
  const fileName = (ext) => key.replace(/[/\\:*?"<>|\x00-\x1f]/g, '_') + '.' + ext;

  /** What the chart shows besides its title: the x-axis, the step range, log scale, smoothing. */
  function subtitle() {
    const parts = ['x: ' + X_MODES[settings.xMode]];
    if (zoom && zoom.steps) parts.push(`steps ${Math.floor(zoom.steps[0])}–${Math.ceil(zoom.steps[1])}`);
    if (unit.label) parts.push('unit: ' + unit.label);
    if (isLog()) parts.push('log scale');
    if (settings.smoothing > 0) parts.push('smoothing ' + settings.smoothing.toFixed(2));
    return parts.join(' · ');
  }

  /** The buckets drawn, as CSV: one row per run and bucket, full precision, NaN/Infinity/-Infinity spelled out. */
  function toCsv() {
    const cols = ['run_id', 'run_name', 'step_min', 'step_max', 'time_first', 'time_last', 'min', 'max', 'last', 'count'];
    const lines = [cols.join(',')];
    for (const s of shownData()) {
      for (const b of s.buckets) {
        lines.push([s.run_id, s.name, b.step_min, b.step_max, b.time_first, b.time_last, b.min, b.max, b.last, b.count]
          .map((v) => csvField(v === null || v === undefined ? '' : String(v))).join(','));
      }
    }
    return lines.join('\r\n') + '\r\n';
  }

  /** Legend items laid out in rows no wider than `width`: [{s, x, row, text}] and the number of rows. */
  function legendLayout(shown, width) {
    const items = [];
    let x = 0, row = 0;
    for (const s of shown) {
      const text = s.name.length > 48 ? s.name.slice(0, 47) + '…' : s.name;
      const w = 16 + labelWidth(text);
      if (x > 0 && x + w > width) { x = 0; row++; }
      items.push({ s, x, row, text });
      x += w + 14;
    }
    return { items, rows: shown.length ? row + 1 : 0 };
  }

  /** The canvas uPlot drew (plot, bands and axes with their labels) framed by the title and a legend, as PNG. */
  function toPng() {
    const src = u.ctx.canvas, px = window.devicePixelRatio || 1;
    const W = src.width / px, H = src.height / px, pad = 12, head = 40, rowH = 18;
    const { items, rows } = legendLayout(shownData(), W);
    const total = [W + 2 * pad, pad + head + H + (rows ? 8 + rows * rowH : 0) + pad];
    const out = document.createElement('canvas');
    out.width = Math.round(total[0] * px);
    out.height = Math.round(total[1] * px);
    const ctx = out.getContext('2d');
    ctx.scale(px, px);
    ctx.fillStyle = cssVar('--panel', '#ffffff');
    ctx.fillRect(0, 0, total[0], total[1]);
    ctx.textBaseline = 'top';
    ctx.fillStyle = cssVar('--fg', '#1d2330');
    ctx.font = '600 14px ui-monospace, Menlo, Consolas, monospace';
    ctx.fillText(key, pad, pad, W);
    ctx.fillStyle = cssVar('--muted', '#6b7280');
    ctx.font = '12px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif';
    ctx.fillText(subtitle(), pad, pad + 20, W);
    ctx.drawImage(src, pad, pad + head, W, H);
    const top = pad + head + H + 8;
    ctx.textBaseline = 'middle';
    for (const { s, x, row, text } of items) {
      const y = top + row * rowH + rowH / 2;
      ctx.fillStyle = s.color;
      ctx.fillRect(pad + x, y - 5, 10, 10);
      ctx.fillStyle = cssVar('--fg', '#1d2330');
      ctx.fillText(text, pad + x + 16, y);
    }
    return new Promise((resolve, reject) => out.toBlob((b) => (b ? resolve(b) : reject(new Error('the canvas gave no image'))), 'image/png'));
  }

  /** Tick positions and labels for the x-axis of the SVG, over [lo, hi] in the current mode. */
  function xTicks(lo, hi, n) {
    if (settings.xMode === 'relative') { return durationTicks(lo, hi, n).map((v) => [v, fmtSeconds(v)]); }
    if (settings.xMode === 'wall') {
      const t = durationTicks(lo / 1000, hi / 1000, n).map((v) => v * 1000);
      const step = t.length > 1 ? (t[1] - t[0]) / 1000 : 86400;
      // As uPlot labels the wall-time axis on screen: the tick's time (or date, for steps of a day
      // or more) and, under it, the date on the first tick and wherever the day (or year) changes.
      const hm = '{h}:{mm}{aa}';
      const [each, onYear, onDay, onMinute] = step >= 86400 ? ['{M}/{D}', '\n{YYYY}', '', '']
        : step >= 3600 ? ['{h}{aa}', '\n{M}/{D}/{YY}', '\n{M}/{D}', '']
          : step >= 60 ? [hm, '\n{M}/{D}/{YY}', '\n{M}/{D}', '']
            : [':{ss}', `\n{M}/{D}/{YY} ${hm}`, `\n{M}/{D} ${hm}`, '\n' + hm];
      let prev = null;
      return t.map((v) => {
        const d = new Date(v);
        const extra = !prev || prev.getFullYear() !== d.getFullYear() ? onYear
          : prev.toDateString() !== d.toDateString() ? onDay
            : prev.getHours() !== d.getHours() || prev.getMinutes() !== d.getMinutes() ? onMinute : '';
        prev = d;
        const lines = uPlot.fmtDate(each + extra)(d).split('\n');
        return [v, lines.length > 1 ? lines : lines[0]];
      });
    }
    const t = niceTicks(lo, hi, n);
    const labels = fmtTicks(t, t.length > 1 ? t[1] - t[0] : 0, { label: '' }, false);
    return t.map((v, i) => [v, labels[i]]);
  }

  /** Tick positions and labels for the y-axis of the SVG, over [lo, hi]. */
  function yTicks(lo, hi, log, n) {
    let t;
    if (log) {
      t = [];
      for (let e = Math.ceil(Math.log10(lo) - 1e-9); e <= Math.floor(Math.log10(hi) + 1e-9); e++) t.push(Number(Math.pow(10, e).toPrecision(12)));
      if (t.length < 2) t = niceTicks(lo, hi, n).filter((v) => v > 0);
    } else if (unit.bytes) {
      const step = BYTE_INCRS.find((i) => i >= (hi - lo) / n) || (hi - lo) / n;
      t = [];
      for (let v = Math.ceil(lo / step) * step; v <= hi; v += step) t.push(v);
    } else t = niceTicks(lo, hi, n);
    const labels = fmtTicks(t, t.length > 1 ? t[1] - t[0] : 0, unit, log);
    return t.map((v, i) => [v, labels[i]]);
  }

  /** The lines drawn (each shown run's last values, smoothed as drawn), their min–max bands, axes, title and legend, as SVG. */
  function toSvg() {
    const px = window.devicePixelRatio || 1, log = isLog();
    const [x0, x1] = [u.scales.x.min, u.scales.x.max], [y0, y1] = [u.scales.y.min, u.scales.y.max];
    const pw = Math.round(u.bbox.width / px), ph = Math.round(u.bbox.height / px);
    const yt = yTicks(y0, y1, log, Math.max(2, Math.floor(ph / 25)));
    const xt = xTicks(x0, x1, Math.max(2, Math.floor(pw / 70)));
    // The x labels: one line, or two where a wall-time tick also gives the date.
    const xAxisH = 26 + (xt.some(([, t]) => Array.isArray(t)) ? 14 : 0);
    const pad = 12, L = pad + Math.ceil(Math.max(24, ...yt.map(([, t]) => labelWidth(t)))) + 8, T = pad + 44;
    const W = L + pw + 24;
    const shown = shownData();
    const { items, rows } = legendLayout(shown, W - 2 * pad);
    const H = T + ph + xAxisH + (rows ? 8 + rows * 18 : 0) + pad;
    const fx = (x) => L + ((x - x0) / (x1 - x0)) * pw;
    const fy = log ? (v) => T + (1 - (Math.log10(v) - Math.log10(y0)) / (Math.log10(y1) - Math.log10(y0))) * ph
      : (v) => T + (1 - (v - y0) / (y1 - y0)) * ph;
    const ok = (v) => Number.isFinite(v) && (!log || v > 0);
    const r2 = (v) => Math.round(v * 100) / 100;
    const colors = { bg: cssVar('--panel', '#ffffff'), fg: cssVar('--fg', '#1d2330'), muted: cssVar('--muted', '#6b7280'),
      axis: cssVar('--chart-axis', '#6b7280'), grid: cssVar('--chart-grid', '#e5e7eb') };
    const font = 'system-ui, -apple-system, Segoe UI, Roboto, sans-serif';
    const root = svg('svg', { width: W, height: H, viewBox: `0 0 ${W} ${H}`, 'font-family': font, 'font-size': 12 });
    root.append(svg('rect', { width: W, height: H, fill: colors.bg }));
    root.append(svg('text', { x: pad, y: pad + 12, fill: colors.fg, 'font-size': 14, 'font-weight': 600, 'font-family': 'ui-monospace, Menlo, Consolas, monospace' }, key));
    root.append(svg('text', { x: pad, y: pad + 30, fill: colors.muted }, subtitle()));
    root.append(svg('defs', {}, svg('clipPath', { id: 'plot-area' }, svg('rect', { x: L, y: T, width: pw, height: ph }))));
    const grid = svg('g', { stroke: colors.grid, 'stroke-width': 1 });
    const labels = svg('g', { fill: colors.axis });
    for (const [v, t] of yt) {
      const y = r2(fy(v));
      if (!(y >= T - 0.5 && y <= T + ph + 0.5)) continue;
      grid.append(svg('line', { x1: L, x2: L + pw, y1: y, y2: y }));
      labels.append(svg('text', { x: L - 6, y: y + 4, 'text-anchor': 'end' }, t));
    }
    for (const [v, t] of xt) {
      const x = r2(fx(v));
      if (!(x >= L - 0.5 && x <= L + pw + 0.5)) continue;
      grid.append(svg('line', { x1: x, x2: x, y1: T, y2: T + ph }));
      labels.append(svg('text', { x, y: T + ph + 16, 'text-anchor': 'middle' },
        Array.isArray(t) ? t.map((line, i) => svg('tspan', { x, dy: i ? 14 : 0 }, line)) : t));
    }
    root.append(grid, svg('rect', { x: L, y: T, width: pw, height: ph, fill: 'none', stroke: colors.grid, 'stroke-width': 1 }), labels);
    const plotG = svg('g', { 'clip-path': 'url(#plot-area)' });
    for (const s of shown) {
      let band = '';
      for (const b of s.buckets) {
        if (b.count < 2 || !ok(b.min) || !ok(b.max)) continue;
        const [a, e] = xOf(s, b);
        const xa = fx(a), xb = Math.max(fx(e), xa + 0.5), ya = fy(b.max), yb = Math.max(fy(b.min), ya + 0.5);
        band += `M${r2(xa)} ${r2(ya)}H${r2(xb)}V${r2(yb)}H${r2(xa)}Z`;
      }
      if (band) plotG.append(svg('path', { d: band, fill: s.color, 'fill-opacity': 0.22, stroke: 'none' }));
    }
    for (const s of shown) {
      let d = '', pen = false;
      s.ys.forEach((v, i) => {
        if (!ok(v)) { pen = false; return; }
        d += (pen ? 'L' : 'M') + r2(fx(s.xs[i])) + ' ' + r2(fy(v));
        pen = true;
      });
      plotG.append(svg('path', { d, fill: 'none', stroke: s.color, 'stroke-width': settings.smoothing > 0 ? 2 : 1.5,
        'stroke-linejoin': 'round', 'stroke-linecap': 'round', 'data-run-id': s.run_id }, svg('title', {}, s.name)));
    }
    root.append(plotG);
    const top = T + ph + xAxisH + 8;
    for (const { s, x, row, text } of items) {
      const y = top + row * 18;
      root.append(svg('rect', { x: r2(pad + x), y: y + 4, width: 10, height: 10, rx: 2, fill: s.color }),
        svg('text', { x: r2(pad + x + 16), y: y + 13, fill: colors.fg }, text));
    }
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + new XMLSerializer().serializeToString(root) + '\n';
  }

  async function exportAs(kind) {
    exporter.open = false;
    if (!u || !data.length) return;
    try {
      if (kind === 'csv') downloadText(fileName('csv'), toCsv(), 'text/csv');
      else if (kind === 'svg') downloadText(fileName('svg'), toSvg(), 'image/svg+xml');
      else downloadBlob(fileName('png'), await toPng());
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
  logCb.addEventListener('change', () => { if (!started) return; if (zoom) zoom.y = null; draw(); });

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

/** A small download arrow over a tray, in the text's colour. */
function downloadIcon() {
  return svg('svg', { width: 14, height: 14, viewBox: '0 0 14 14', fill: 'none', stroke: 'currentColor', 'stroke-width': 1.5,
    'stroke-linecap': 'round', 'stroke-linejoin': 'round', 'aria-hidden': 'true' },
  svg('path', { d: 'M7 2v7M4 6.5 7 9.5l3-3M2.5 11.5h9' }));
}

/**
 * The buckets of a key for a chart's series: [{run_id, buckets}]. Runs are read with one GET (a
 * few) or one POST (many); groups of runs (series with `members`) with one POST that answers,
 * per bucket, the mean over the group's runs as `last` and the min–max over them as the band.
 */
async function loadSeries(key, series, range) {
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
function mountCharts(container, keys, series, settings, initialSearch) {
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
  let observer = null;
  if (typeof IntersectionObserver === 'function') {
    const waiting = new Map(charts.map((c) => [c.node, c]));
    observer = new IntersectionObserver((entries) => {
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
  } else {
    charts.forEach((c) => c.start());
  }
  return {
    /** Re-fetches the charts started so far; the others fetch current data when they start. */
    refresh: () => charts.forEach((c) => c.refresh()),
    destroy: () => { if (observer) observer.disconnect(); charts.forEach((c) => c.destroy()); },
  };
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
function parallelCoords(runs, metricKeys, initialMetric) {
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
      g.append(svg('text', { x, y: top - 10, 'text-anchor': 'middle', class: a.metric ? 'pc-label pc-metric' : 'pc-label' }, a.label));
      if (a.log) g.append(svg('text', { x, y: H - bottom + 14, 'text-anchor': 'middle', class: 'pc-tick' }, 'log scale'));
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
