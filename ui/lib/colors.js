/* Run colours: a palette of 50 colours and a run's colour, a function of its id alone. */

/** 50 colours, no two closer than 10 CIEDE2000 units, readable on light and dark pages
 * (printed by ui/tests/palette.py). */
const RUN_PALETTE = ['#2277bb', '#bbaa00', '#ff0022', '#ee66ff', '#007744', '#44bbbb', '#885577',
  '#886644', '#ff8800', '#00bb11', '#7733ff', '#dd9999', '#99aadd', '#ff0088', '#777700', '#227777',
  '#99aa77', '#00aaee', '#7777aa', '#aa5555', '#cc00bb', '#00bb88', '#cc5500', '#bb9966', '#bb77aa',
  '#9977ff', '#448800', '#aa7700', '#ff8866', '#bb2266', '#8855aa', '#009988', '#ff6677', '#bb99dd',
  '#88aa11', '#4466ff', '#dd9900', '#0088aa', '#bb7766', '#ff77bb', '#339955', '#bb3322', '#667744',
  '#5599ff', '#dd0044', '#995500', '#bb44ff', '#ff6611', '#ff11cc', '#bb7744'];

/** A run's colour: a function of its id alone (FNV-1a), so a run looks the same in every view. */
export function runColor(id) {
  let h = 0x811c9dc5;
  for (let i = 0; i < id.length; i++) { h ^= id.charCodeAt(i); h = Math.imul(h, 0x01000193); }
  return RUN_PALETTE[(h >>> 0) % RUN_PALETTE.length];
}
