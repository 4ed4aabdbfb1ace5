/* Numbers, times, durations, sizes and money as the UI writes them; numbers as the API sends
 * them (NaN and the infinities as strings). */

/** Numbers may arrive as the strings "NaN", "Infinity", "-Infinity". */
export function toNum(v) {
  if (typeof v === 'number') return v;
  if (v === 'NaN') return NaN;
  if (v === 'Infinity') return Infinity;
  if (v === '-Infinity') return -Infinity;
  return typeof v === 'string' && v.trim() !== '' ? Number(v) : NaN;
}

/** A number in at most 4 significant digits (integers whole, exponents when very small or large). */
export function fmtNum(v) {
  if (v === null || v === undefined) return '';
  if (typeof v === 'string') return v;
  if (!Number.isFinite(v)) return String(v);
  if (Number.isInteger(v) && Math.abs(v) < 1e12) return String(v);
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(3);
  return String(Number(v.toPrecision(4)));
}

/** A param, tag or metadata value as text. */
export function fmtValue(v) {
  if (v === null || v === undefined) return '';
  if (typeof v === 'number') return fmtNum(v);
  if (typeof v === 'object') return JSON.stringify(v);
  return String(v);
}

/** A time (ms since the epoch) in the browser's locale. */
export function fmtTime(ms) {
  if (ms === null || ms === undefined) return '';
  const d = new Date(ms);
  return isNaN(d) ? '' : d.toLocaleString();
}

/** A duration in ms as `42s`, `3m 5s`, `2h 10m` or `1d 4h`. */
export function fmtDuration(ms) {
  if (ms === null || ms === undefined || !Number.isFinite(ms) || ms < 0) return '';
  const s = Math.round(ms / 1000);
  if (s < 60) return s + 's';
  const m = Math.floor(s / 60), h = Math.floor(m / 60), d = Math.floor(h / 24);
  if (d > 0) return `${d}d ${h % 24}h`;
  if (h > 0) return `${h}h ${m % 60}m`;
  return `${m}m ${s % 60}s`;
}

/** A size in bytes in binary units (KiB, MiB, …). */
export function fmtBytes(n) {
  if (typeof n !== 'number') return '';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : String(n)) + ' ' + u[i];
}

/** Money in cents ($0.20, $0.00, $12.50); a cost below a cent in two significant digits
 * ($0.0042), so it never reads $0.00. */
export function fmtUsd(v) {
  if (typeof v !== 'number' || !Number.isFinite(v)) return '—';
  const a = Math.abs(v);
  if (a === 0 || a >= 0.01) return '$' + v.toFixed(2);
  return '$' + Number(v.toPrecision(2)).toFixed(Math.max(2, 1 - Math.floor(Math.log10(a))));
}

/** A rate from 0 to 1 as a percentage with at most one decimal (`80 %`, `60.9 %`); '—' when not a number. */
export function fmtPercent(rate) {
  if (typeof rate !== 'number' || !Number.isFinite(rate)) return '—';
  return Number((rate * 100).toFixed(1)) + ' %';
}
