/* A line diff of two texts: the lines common to both (a longest common subsequence, after the
 * common head and tail are set aside), the lines only the first has (removed) and those only the
 * second has (added). Small and dependency-free; past DIFF_CELLS_MAX the middle that differs is
 * shown as removed then added, without looking for common lines in it. */

/** The most cells (lines of one × lines of the other) of the table the LCS is found with. */
export const DIFF_CELLS_MAX = 4_000_000;

/** The lines of a text: split at \n (a \r before it dropped), without the empty line a final \n leaves. */
export function splitLines(text) {
  if (text === '') return [];
  const lines = text.split('\n').map((l) => (l.endsWith('\r') ? l.slice(0, -1) : l));
  if (lines[lines.length - 1] === '') lines.pop();
  return lines;
}

/**
 * The diff of text `a` to text `b`: {ops: [{op: 'eq'|'del'|'add', line}], added, removed, exact},
 * in the order of the texts (where both change at one place, the removed lines come first).
 * `exact` is false when the part that differs was too large to look for common lines in.
 */
export function lineDiff(a, b) {
  const x = splitLines(a), y = splitLines(b);
  let head = 0;
  while (head < x.length && head < y.length && x[head] === y[head]) head++;
  let tail = 0;
  while (tail < x.length - head && tail < y.length - head && x[x.length - 1 - tail] === y[y.length - 1 - tail]) tail++;
  const xs = x.slice(head, x.length - tail), ys = y.slice(head, y.length - tail);
  const ops = x.slice(0, head).map((line) => ({ op: 'eq', line }));
  let exact = true;
  const n = xs.length, m = ys.length;
  if (n && m && n * m <= DIFF_CELLS_MAX) {
    // lcs[i * (m + 1) + j]: the length of the LCS of xs[i..] and ys[j..].
    const w = m + 1;
    const lcs = new Uint32Array((n + 1) * w);
    for (let i = n - 1; i >= 0; i--) {
      for (let j = m - 1; j >= 0; j--) {
        lcs[i * w + j] = xs[i] === ys[j] ? lcs[(i + 1) * w + j + 1] + 1 : Math.max(lcs[(i + 1) * w + j], lcs[i * w + j + 1]);
      }
    }
    let i = 0, j = 0;
    while (i < n && j < m) {
      if (xs[i] === ys[j]) { ops.push({ op: 'eq', line: xs[i] }); i++; j++; }
      else if (lcs[(i + 1) * w + j] >= lcs[i * w + j + 1]) ops.push({ op: 'del', line: xs[i++] });
      else ops.push({ op: 'add', line: ys[j++] });
    }
    while (i < n) ops.push({ op: 'del', line: xs[i++] });
    while (j < m) ops.push({ op: 'add', line: ys[j++] });
  } else {
    exact = !(n && m);
    ops.push(...xs.map((line) => ({ op: 'del', line })), ...ys.map((line) => ({ op: 'add', line })));
  }
  ops.push(...x.slice(x.length - tail).map((line) => ({ op: 'eq', line })));
  return {
    ops, exact,
    added: ops.filter((o) => o.op === 'add').length,
    removed: ops.filter((o) => o.op === 'del').length,
  };
}
