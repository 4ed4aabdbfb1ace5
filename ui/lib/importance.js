/* Parameter importance for a sweep, as W&B shows it: each parameter's correlation with the
 * metric (Pearson, for numeric parameters) and a model-based importance: a random forest of
 * regression trees fitted to predict the metric from every parameter, each parameter's share of
 * the forest's total decrease in variance (mean decrease in impurity). Seeded, so the same trials
 * give the same figures. */

/** A small seeded generator (mulberry32): the forest is the same on every page load. */
function random(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Pearson's correlation of two equally long lists; NaN when either is constant. */
export function correlation(xs, ys) {
  const n = xs.length;
  const mx = xs.reduce((a, b) => a + b, 0) / n, my = ys.reduce((a, b) => a + b, 0) / n;
  let sxy = 0, sxx = 0, syy = 0;
  for (let i = 0; i < n; i++) { const dx = xs[i] - mx, dy = ys[i] - my; sxy += dx * dy; sxx += dx * dx; syy += dy * dy; }
  return sxx > 0 && syy > 0 ? sxy / Math.sqrt(sxx * syy) : NaN;
}

const variance = (ys, idx) => {
  let s = 0, q = 0;
  for (const i of idx) { s += ys[i]; q += ys[i] * ys[i]; }
  return q / idx.length - (s / idx.length) ** 2;
};

/** Grows one regression tree over rows `idx` (a bootstrap sample), adding each split's decrease
 * in squared error to `gain[feature]`. */
function grow(X, ys, idx, depth, rnd, gain, opts) {
  if (depth >= opts.maxDepth || idx.length < 2 * opts.minLeaf) return;
  const parentError = variance(ys, idx) * idx.length;
  if (!(parentError > 1e-12)) return;
  const p = X[0].length;
  const features = [...Array(p).keys()];
  for (let i = p - 1; i > 0; i--) { const j = Math.floor(rnd() * (i + 1)); [features[i], features[j]] = [features[j], features[i]]; }
  features.length = opts.tryFeatures;
  let best = null;
  for (const f of features) {
    const order = [...idx].sort((a, b) => X[a][f] - X[b][f]);
    let ls = 0, lq = 0, rs = 0, rq = 0;
    for (const i of order) { rs += ys[i]; rq += ys[i] * ys[i]; }
    for (let k = 0; k < order.length - 1; k++) {
      const y = ys[order[k]];
      ls += y; lq += y * y; rs -= y; rq -= y * y;
      const nl = k + 1, nr = order.length - nl;
      if (nl < opts.minLeaf || nr < opts.minLeaf || X[order[k]][f] === X[order[k + 1]][f]) continue;
      const error = (lq - (ls * ls) / nl) + (rq - (rs * rs) / nr);
      if (!best || error < best.error) best = { error, f, at: (X[order[k]][f] + X[order[k + 1]][f]) / 2 };
    }
  }
  if (!best || best.error >= parentError) return;
  gain[best.f] += parentError - best.error;
  const left = idx.filter((i) => X[i][best.f] <= best.at), right = idx.filter((i) => X[i][best.f] > best.at);
  grow(X, ys, left, depth + 1, rnd, gain, opts);
  grow(X, ys, right, depth + 1, rnd, gain, opts);
}

/**
 * trials: [{params, metric}] with a finite metric; params: the parameter names. Answers
 * [{param, importance (0–1, summing to 1 when any split was found), correlation (NaN for a
 * parameter that is not numeric or does not vary)}], most important first; [] under 3 trials.
 */
export function paramImportance(trials, params, { trees = 60, maxDepth = 8, minLeaf = 2, seed = 1 } = {}) {
  const rows = trials.filter((t) => Number.isFinite(t.metric));
  if (rows.length < 3 || !params.length) return [];
  const ys = rows.map((t) => t.metric);
  // A numeric (or boolean) parameter as its number; another as its categories ranked by their mean metric.
  const columns = params.map((name) => {
    const raw = rows.map((t) => (t.params || {})[name]);
    const numeric = raw.every((v) => typeof v === 'number' || typeof v === 'boolean');
    if (numeric) return { name, numeric, values: raw.map(Number) };
    const text = raw.map((v) => (v === undefined || v === null ? '' : typeof v === 'string' ? v : JSON.stringify(v)));
    const means = new Map();
    text.forEach((v, i) => { const m = means.get(v) || [0, 0]; m[0] += ys[i]; m[1]++; means.set(v, m); });
    const rank = new Map([...means.entries()].sort((a, b) => a[1][0] / a[1][1] - b[1][0] / b[1][1]).map(([v], i) => [v, i]));
    return { name, numeric, values: text.map((v) => rank.get(v)) };
  });
  const X = rows.map((_, i) => columns.map((c) => c.values[i]));
  const gain = new Array(params.length).fill(0);
  const rnd = random(seed);
  const opts = { maxDepth, minLeaf, tryFeatures: Math.max(1, Math.ceil(params.length / 3)) };
  for (let t = 0; t < trees; t++) {
    const sample = rows.map(() => Math.floor(rnd() * rows.length));
    grow(X, ys, sample, 0, rnd, gain, opts);
  }
  const total = gain.reduce((a, b) => a + b, 0);
  return columns.map((c, i) => ({
    param: c.name,
    importance: total > 0 ? gain[i] / total : 0,
    correlation: c.numeric ? correlation(c.values, ys) : NaN,
  })).sort((a, b) => b.importance - a.importance);
}
