/* Run colours: the palette, a run's own colour (given by the server when the run was created, or
 * set by a person) and the colours of a chart's lines, never two the same up to the palette's size. */

/** 50 colours, no two closer than 10 CIEDE2000 units, readable on light and dark pages, most
 * distinct first (printed by ui/tests/palette.py; the server's `RUN_PALETTE` is the same list). */
export const RUN_PALETTE = ['#2277bb', '#bbaa00', '#ff0022', '#ee66ff', '#007744', '#44bbbb', '#885577',
  '#886644', '#ff8800', '#00bb11', '#7733ff', '#dd9999', '#99aadd', '#ff0088', '#777700', '#227777',
  '#99aa77', '#00aaee', '#7777aa', '#aa5555', '#cc00bb', '#00bb88', '#cc5500', '#bb9966', '#bb77aa',
  '#9977ff', '#448800', '#aa7700', '#ff8866', '#bb2266', '#8855aa', '#009988', '#ff6677', '#bb99dd',
  '#88aa11', '#4466ff', '#dd9900', '#0088aa', '#bb7766', '#ff77bb', '#339955', '#bb3322', '#667744',
  '#5599ff', '#dd0044', '#995500', '#bb44ff', '#ff6611', '#ff11cc', '#bb7744'];

/** A colour that is a function of a text alone (FNV-1a): for groups and mask classes, which have no
 * colour of their own. */
export function hashColor(text) {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) { h ^= text.charCodeAt(i); h = Math.imul(h, 0x01000193); }
  return RUN_PALETTE[(h >>> 0) % RUN_PALETTE.length];
}

/** A run's own colour: the one the server keeps for it (a run from an older server: by its id). */
export function runColor(run) {
  return (run && run.color) || hashColor(run.id || '');
}

/** The colours of one chart's lines, in order: each its own colour unless an earlier line took it,
 * then the palette's next colour no line has (a colour repeats only past the palette's size). */
export function distinctColors(colors) {
  const taken = new Set();
  return colors.map((c) => {
    const own = String(c).toLowerCase();
    if (!taken.has(own)) { taken.add(own); return own; }
    const start = Math.max(0, RUN_PALETTE.indexOf(own));
    for (let i = 1; i <= RUN_PALETTE.length; i++) {
      const next = RUN_PALETTE[(start + i) % RUN_PALETTE.length];
      if (!taken.has(next)) { taken.add(next); return next; }
    }
    return own;
  });
}

/** Runs' lines with distinct colours: `series` items get `color` replaced in place, in order. */
export function colorLines(series) {
  distinctColors(series.map((s) => s.color)).forEach((c, i) => { series[i].color = c; });
  return series;
}
