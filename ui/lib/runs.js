/* Runs and their keys as several views read them: durations, group-by values, system and cost
 * keys, and the limits and timings the views share. */

/** How long a run ran (or has been running), in ms; null before it starts. */
export function runDuration(run) {
  if (!run.start_time) return null;
  const end = run.end_time || (run.status === 'running' ? Date.now() : null);
  return end ? end - run.start_time : null;
}

/** What a run is grouped under for a group-by choice ("status", "user", "group", "params.K", "tags.K"). */
export function groupValue(r, by) {
  if (by.startsWith('params.')) return (r.params || {})[by.slice(7)];
  if (by.startsWith('tags.')) return (r.tags || {})[by.slice(5)];
  return r[by];
}

/** System metrics (GPU, CPU, memory, …) that the client records by itself. */
export const isSystemKey = (k) => k.startsWith('sys/');
/** Cost metrics; COST_KEY is a run's cumulative cost in dollars. */
export const isCostKey = (k) => k.startsWith('cost/');
export const COST_KEY = 'cost/usd';

/** Above this many runs, a comparison draws groups (their mean and min–max band), not runs. */
export const COMPARE_LINES_MAX = 100;

/** How often the page of a running run (or sweep) re-reads it and its charts. */
export const LIVE_MS = 2000;
