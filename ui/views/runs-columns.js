/* The runs table's columns: the choices kept per project (hidden, shown, order, widths), the
 * value a column shows for a run, and one number format per column. */

import { fmtNum, toNum } from '../lib/format.js';
import { COST_KEY, runDuration } from '../lib/runs.js';

/** Column choices per project: ids explicitly hidden and shown (over the defaults), their order and widths. */
export function columnPrefsFrom(v) {
  const ok = v && typeof v === 'object';
  return {
    hidden: new Set(ok && Array.isArray(v.hidden) ? v.hidden : []),
    shown: new Set(ok && Array.isArray(v.shown) ? v.shown : []),
    order: ok && Array.isArray(v.order) ? v.order.filter((x) => typeof x === 'string') : [],
    widths: ok && v.widths && typeof v.widths === 'object' ? v.widths : {},
  };
}

/** Column choices as kept (in localStorage and in saved views). */
export function columnPrefsJson(prefs) {
  return { hidden: [...prefs.hidden], shown: [...prefs.shown], order: prefs.order, widths: prefs.widths };
}

/** The column choices kept for a project in this browser. */
export function loadColumnPrefs(project) {
  try {
    return columnPrefsFrom(JSON.parse(localStorage.getItem('trainlog.columns.' + project) || 'null'));
  } catch (e) { return columnPrefsFrom(null); }
}

/** Keeps a project's column choices in this browser. */
export function saveColumnPrefs(project, prefs) {
  try {
    localStorage.setItem('trainlog.columns.' + project, JSON.stringify(columnPrefsJson(prefs)));
  } catch (e) { /* storage full or disabled */ }
}

/**
 * One way of writing every number of a table column, so they line up (a group's mean too, at
 * the column's precision): integers as integers;
 * exponents for all when any is below 1e-3 or from 1e6 up; otherwise the decimals the most
 * precise value needs for 4 significant digits (at most 6).
 */
export function columnFormatter(values) {
  const finite = values.filter((v) => typeof v === 'number' && Number.isFinite(v));
  if (!finite.length) return fmtNum;
  // Integers as integers; a mean of them (a group's row) to one decimal.
  if (finite.every(Number.isInteger) && finite.every((v) => Math.abs(v) < 1e12)) {
    return (v) => (Number.isInteger(v) ? String(v) : Number.isFinite(v) ? String(Number(v.toFixed(1))) : fmtNum(v));
  }
  const nonzero = finite.filter((v) => v !== 0).map(Math.abs);
  const lo = nonzero.length ? Math.min(...nonzero) : 0, hi = nonzero.length ? Math.max(...nonzero) : 0;
  const decimalsOf = (text) => { const i = text.indexOf('.'); return i < 0 ? 0 : text.length - i - 1; };
  if (lo && (lo < 1e-3 || hi >= 1e6)) {
    const digits = Math.min(3, Math.max(...finite.map((v) => decimalsOf(String(Number(Math.abs(v).toExponential(3).split('e')[0]))))));
    return (v) => (Number.isFinite(v) ? v.toExponential(digits) : fmtNum(v));
  }
  const dec = Math.min(6, Math.max(0, ...finite.map((v) => decimalsOf(String(Number(v.toPrecision(4)))))));
  return (v) => (Number.isFinite(v) ? v.toFixed(dec) : fmtNum(v));
}

/** Mean NVML GPU utilization of a run (the share of time any kernel ran): the mean over its
 * GPUs (of every node) of each one's mean `sys/gpu.N.util` (`sys/node/M/gpu.N.util` for a job of
 * several nodes). Not the report's utilization rate, which is the share of GPU-time active. */
export function gpuUtil(run) {
  const means = [];
  for (const [k, s] of Object.entries(run.summary || {})) {
    if (/^sys\/(?:node\/\d+\/)?gpu\.\d+\.util$/.test(k) && s.mean !== null && s.mean !== undefined) means.push(toNum(s.mean));
  }
  const ok = means.filter(Number.isFinite);
  return ok.length ? ok.reduce((a, b) => a + b, 0) / ok.length : null;
}

/** A run's cost in dollars: its job's (every attempt and node, the figure its page and the
 * report show) where every node had a price, else the last value of its cost series, or null. */
export function runCost(run) {
  const job = run.job;
  if (job && typeof job.cost_usd === 'number' && job.unpriced_nodes === 0) return job.cost_usd;
  const s = (run.summary || {})[COST_KEY];
  return s ? toNum(s.last) : null;
}

/** The job figures the runs table has columns for (a run's `job`, absent when it is not a job). */
export const JOB_COLUMNS = { attempts: 'attempts', gpus: 'GPUs', lost_usd: 'lost $' };

/** A job figure of a run, or null for a run that is not a job. */
export function jobValue(run, key) {
  const v = run.job ? run.job[key] : null;
  return typeof v === 'number' ? v : null;
}

/** A metric's columns: each statistic of its summary, and the prefix that sorts by it. */
export const METRIC_COLUMNS = { last: 'metrics', min: 'metrics_min', max: 'metrics_max', mean: 'metrics_mean' };

/** The value a column shows for a run, as used for group means and client-side sorting. */
export function columnValue(c, r) {
  switch (c.id) {
    case 'duration': return runDuration(r);
    case 'cost': return runCost(r);
    case 'gpu_util': return gpuUtil(r);
    case 'attempts': case 'gpus': case 'lost_usd': return jobValue(r, c.id);
    default:
      if (c.group === 'param') return (r.params || {})[c.key];
      if (c.group === 'metric') { const s = (r.summary || {})[c.key]; return s ? toNum(s[c.stat]) : null; }
      return null;
  }
}
