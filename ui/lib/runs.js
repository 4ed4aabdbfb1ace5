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

/** The node of a system key of a job of several nodes (`sys/node/N/…`), or null. */
export function systemKeyNode(k) {
  const m = /^sys\/node\/(\d+)\//.exec(k);
  return m ? Number(m[1]) : null;
}

/** System keys in display order: by node, then per GPU its utilization, memory and power first, then the rest. */
export function orderSystemKeys(keys) {
  const rank = (k) => {
    const node = systemKeyNode(k) ?? -1;
    const m = k.match(/^sys\/(?:node\/\d+\/)?gpu\.(\d+)\.(.+)$/);
    if (!m) return [node, 1, 0, 0, k];
    const q = ['util', 'mem_used_bytes', 'power_w'].indexOf(m[2]);
    return [node, 0, Number(m[1]), q < 0 ? 9 : q, k];
  };
  return [...keys].sort((a, b) => {
    const [x, y] = [rank(a), rank(b)];
    for (let i = 0; i < 5; i++) if (x[i] !== y[i]) return x[i] < y[i] ? -1 : 1;
    return 0;
  });
}

/** System keys in groups: those of the run itself (node null) first, then one group per node, in
 * node order: [{node, keys}], each group's keys in display order. */
export function systemKeyGroups(keys) {
  const groups = new Map();
  for (const k of orderSystemKeys(keys)) {
    const node = systemKeyNode(k);
    if (!groups.has(node)) groups.set(node, []);
    groups.get(node).push(k);
  }
  return [...groups.entries()].map(([node, ks]) => ({ node, keys: ks }));
}

/** Above this many runs, a comparison draws groups (their mean and min–max band), not runs. */
export const COMPARE_LINES_MAX = 100;

/** How often the page of a running run (or sweep) re-reads it and its charts. */
export const LIVE_MS = 2000;
