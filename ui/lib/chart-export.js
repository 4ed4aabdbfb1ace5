/* A metric chart's downloads: PNG (uPlot's canvas, axes and bands included, at the device pixel
 * ratio, framed by the key, a line of settings and a legend), CSV (the buckets drawn for the
 * current zoom, one row per shown run and bucket) and SVG (each shown run's line and min–max band
 * over the current x and y ranges, with ticks, title and legend). Files are named after the key.
 *
 * An export reads a view of the chart (see createChart in charts.js): {key, unit, settings, zoom,
 * log, u (the uPlot drawn), shown (the runs the legend does not hide: {run_id, name, color,
 * buckets, xs, ys}), xOf(s, bucket) (where a bucket lies on the x-axis: [start, end, x])}. */

import { BYTE_INCRS, cssVar, durationTicks, fmtSeconds, fmtTicks, labelWidth, niceTicks, X_MODES } from './chart-axes.js';
import { svg } from './dom.js';
import { csvField, downloadBlob, downloadText } from './downloads.js';

/** The file name of an export: the key, with `/` (and characters file systems refuse) as `_`. */
const fileName = (key, ext) => key.replace(/[/\\:*?"<>|\x00-\x1f]/g, '_') + '.' + ext;

/** Downloads what the chart shows as `kind` ('png', 'csv' or 'svg'). */
export async function exportChart(view, kind) {
  if (kind === 'csv') downloadText(fileName(view.key, 'csv'), toCsv(view.shown), 'text/csv');
  else if (kind === 'svg') downloadText(fileName(view.key, 'svg'), toSvg(view), 'image/svg+xml');
  else downloadBlob(fileName(view.key, 'png'), await toPng(view));
}

/** A small download arrow over a tray, in the text's colour. */
export function downloadIcon() {
  return svg('svg', { width: 14, height: 14, viewBox: '0 0 14 14', fill: 'none', stroke: 'currentColor', 'stroke-width': 1.5,
    'stroke-linecap': 'round', 'stroke-linejoin': 'round', 'aria-hidden': 'true' },
  svg('path', { d: 'M7 2v7M4 6.5 7 9.5l3-3M2.5 11.5h9' }));
}

/** What the chart shows besides its title: the x-axis, the step range, log scale, smoothing. */
function subtitle({ key, unit, settings, zoom, log }) {
  const parts = ['x: ' + X_MODES[settings.xMode]];
  if (zoom && zoom.steps) parts.push(`steps ${Math.floor(zoom.steps[0])}–${Math.ceil(zoom.steps[1])}`);
  if (unit.label) parts.push('unit: ' + unit.label);
  if (log) parts.push('log scale');
  if (settings.smoothing > 0) parts.push('smoothing ' + settings.smoothing.toFixed(2));
  return parts.join(' · ');
}

/** The buckets drawn, as CSV: one row per run and bucket, full precision, NaN/Infinity/-Infinity spelled out. */
function toCsv(shown) {
  const cols = ['run_id', 'run_name', 'step_min', 'step_max', 'time_first', 'time_last', 'min', 'max', 'last', 'count'];
  const lines = [cols.join(',')];
  for (const s of shown) {
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
function toPng(view) {
  const { key, u, shown } = view;
  const src = u.ctx.canvas, px = window.devicePixelRatio || 1;
  const W = src.width / px, H = src.height / px, pad = 12, head = 40, rowH = 18;
  const { items, rows } = legendLayout(shown, W);
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
  ctx.fillText(subtitle(view), pad, pad + 20, W);
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
function xTicks(settings, lo, hi, n) {
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
function yTicks(unit, lo, hi, log, n) {
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
function toSvg(view) {
  const { key, unit, settings, log, u, shown, xOf } = view;
  const px = window.devicePixelRatio || 1;
  const [x0, x1] = [u.scales.x.min, u.scales.x.max], [y0, y1] = [u.scales.y.min, u.scales.y.max];
  const pw = Math.round(u.bbox.width / px), ph = Math.round(u.bbox.height / px);
  const yt = yTicks(unit, y0, y1, log, Math.max(2, Math.floor(ph / 25)));
  const xt = xTicks(settings, x0, x1, Math.max(2, Math.floor(pw / 70)));
  // The x labels: one line, or two where a wall-time tick also gives the date.
  const xAxisH = 26 + (xt.some(([, t]) => Array.isArray(t)) ? 14 : 0);
  const pad = 12, L = pad + Math.ceil(Math.max(24, ...yt.map(([, t]) => labelWidth(t)))) + 8, T = pad + 44;
  const W = L + pw + 24;
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
  root.append(svg('text', { x: pad, y: pad + 30, fill: colors.muted }, subtitle(view)));
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
