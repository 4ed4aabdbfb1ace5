/* What metric charts need to scale and label values: units from key names, tick positions and
 * labels, smoothing, robust and padded ranges, the axes' font and the page's colours. */

import { fmtBytes, fmtNum } from './format.js';

/** The x-axes a chart can draw: by step, by wall-clock time, or by time since the run started. */
export const X_MODES = { step: 'step', wall: 'wall time', relative: 'relative time' };

/** About n ticks over [lo, hi] on 1, 2, 2.5 or 5 times a power of ten (the least step not below
 * an n-th of the span). */
export function niceTicks(lo, hi, n) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / n;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].find((m) => m * mag >= raw * (1 - 1e-9)) * mag;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
  return out;
}

/** Ticks for a duration axis in seconds, on round units. */
export function durationTicks(lo, hi, n) {
  const units = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];
  const raw = (hi - lo) / n;
  const step = units.find((u) => u >= raw) || Math.ceil(raw / 86400) * 86400;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi; v += step) out.push(v);
  return out;
}

/** Seconds as `42s`, `3m05`, `2h10` or `3d 4h`. */
export function fmtSeconds(s) {
  const sign = s < 0 ? '-' : '';
  s = Math.abs(Math.round(s));
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
  if (h >= 48) return `${sign}${Math.floor(h / 24)}d${h % 24 ? ` ${h % 24}h` : ''}`;
  if (h > 0) return `${sign}${h}h${m ? String(m).padStart(2, '0') : ''}`;
  if (m > 0) return `${sign}${m}m${sec ? String(sec).padStart(2, '0') : ''}`;
  return `${sign}${sec}s`;
}

/** What a key's values are measured in, from its name: `*_bytes`, `*_w`, `*_c`, `util`, `cost/…`. */
export function unitOf(key) {
  const k = key.toLowerCase();
  if (/bytes_per_s$/.test(k)) return { label: 'bytes/s', bytes: true, suffix: '/s' };
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
export const BYTE_INCRS = [1, 2 ** 10, 2 ** 20, 2 ** 30, 2 ** 40].flatMap((b) => [1, 2, 5, 10, 20, 50, 100, 200, 500].map((m) => m * b));

let measureCtx = null;

/** The width of an axis label in the axes' font (uPlot's default, 12px system-ui). */
export function labelWidth(text) {
  measureCtx = measureCtx || document.createElement('canvas').getContext('2d');
  measureCtx.font = '12px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif';
  return measureCtx.measureText(String(text)).width;
}

/** The decimals a tick step needs to be written exactly (2.5 → 1, 0.25 → 2, 500 → 0), at most 12. */
export function stepDecimals(step) {
  for (let d = 0; d < 12; d++) {
    const scaled = step * Math.pow(10, d);
    if (Math.abs(scaled - Math.round(scaled)) < 1e-6 * Math.max(1, scaled)) return d;
  }
  return 12;
}

/** A number written with `dec` decimals, without trailing zeros (2.50 → 2.5, 5.00 → 5, -0 → 0). */
function trimmed(v, dec) {
  let text = v.toFixed(dec);
  if (text.includes('.')) text = text.replace(/0+$/, '').replace(/\.$/, '');
  return Number(text) === 0 ? '0' : text;
}

/** Axis labels: one scale for all ticks and the decimals their step needs, so every tick reads
 * differently (2.5k 5k 7.5k 10k; 0.25% 0.5% 0.75%). */
export function fmtTicks(splits, incr, unit, log) {
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
      const dec = step > 0 ? stepDecimals(step) : 2;
      text = dec > 6 ? (v / div).toExponential(Math.min(4, Math.max(1, Math.round(Math.log10(Math.abs(v / div) / step) + 1e-9)))) : trimmed(v / div, dec);
    }
    return (unit.prefix || '') + text + (text === '0' ? '' : scaled) + (unit.suffix || '');
  });
}

/** One value with its unit, for tooltips. */
export function fmtWithUnit(v, unit) {
  if (!Number.isFinite(v)) return fmtNum(v);
  if (unit.bytes) return fmtBytes(v) + (unit.suffix || '');
  return (unit.prefix || '') + fmtNum(v) + (unit.suffix || '');
}

/** Exponential moving average with TensorBoard's debiasing, over finite values only. */
export function smoothValues(values, weight) {
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
export function quantile(sorted, q) {
  const i = (sorted.length - 1) * q, lo = Math.floor(i), hi = Math.ceil(i);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (i - lo);
}

/** A y range around [lo, hi] with 5% room, never empty (on a log scale, in decades). */
export function paddedRange(lo, hi, log) {
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

/** A CSS custom property of the page (its colours follow light and dark mode). */
export function cssVar(name, fallback) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || fallback;
}
