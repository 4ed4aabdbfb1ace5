/* ANSI escape sequences in console lines: the SGR colour and weight codes become styled spans,
 * every other sequence (cursor moves, titles) is dropped. */

const BASE = ['#1f2328', '#cf222e', '#1a7f37', '#9a6700', '#0969da', '#8250df', '#1b7c83', '#6e7781'];
const BRIGHT = ['#57606a', '#ff5c57', '#2da44e', '#d4a72c', '#218bff', '#a475f9', '#3192aa', '#8c959f'];

/** The colour of xterm's 256-colour index `n`. */
function color256(n) {
  if (n < 8) return BASE[n];
  if (n < 16) return BRIGHT[n - 8];
  if (n < 232) {
    const i = n - 16;
    const level = (v) => (v === 0 ? 0 : 55 + v * 40);
    return `rgb(${level(Math.floor(i / 36))},${level(Math.floor(i / 6) % 6)},${level(i % 6)})`;
  }
  const grey = 8 + (n - 232) * 10;
  return `rgb(${grey},${grey},${grey})`;
}

/** Applies SGR parameters to a style {fg, bg, bold, italic, underline}. */
function apply(style, params) {
  const p = params.length ? params : [0];
  for (let i = 0; i < p.length; i++) {
    const c = p[i];
    if (c === 0) Object.assign(style, { fg: null, bg: null, bold: false, italic: false, underline: false });
    else if (c === 1) style.bold = true;
    else if (c === 3) style.italic = true;
    else if (c === 4) style.underline = true;
    else if (c === 22) style.bold = false;
    else if (c === 23) style.italic = false;
    else if (c === 24) style.underline = false;
    else if (c >= 30 && c <= 37) style.fg = BASE[c - 30];
    else if (c >= 90 && c <= 97) style.fg = BRIGHT[c - 90];
    else if (c >= 40 && c <= 47) style.bg = BASE[c - 40];
    else if (c >= 100 && c <= 107) style.bg = BRIGHT[c - 100];
    else if (c === 39) style.fg = null;
    else if (c === 49) style.bg = null;
    else if ((c === 38 || c === 48) && p[i + 1] === 5) {
      style[c === 38 ? 'fg' : 'bg'] = color256(p[i + 2] || 0);
      i += 2;
    } else if ((c === 38 || c === 48) && p[i + 1] === 2) {
      style[c === 38 ? 'fg' : 'bg'] = `rgb(${p[i + 2] || 0},${p[i + 3] || 0},${p[i + 4] || 0})`;
      i += 4;
    }
  }
}

/** A line as runs of text with their style: [{text, fg, bg, bold, italic, underline}]. */
export function ansiRuns(line) {
  const runs = [];
  const style = { fg: null, bg: null, bold: false, italic: false, underline: false };
  // CSI sequences (ESC [ … final byte), OSC sequences (ESC ] … BEL or ESC \), other ESC pairs.
  const re = /\x1b\[([0-9;:?]*)([@-~])|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]?/g;
  let last = 0;
  let m;
  while ((m = re.exec(line)) !== null) {
    if (m.index > last) runs.push({ text: line.slice(last, m.index), ...style });
    if (m[2] === 'm') apply(style, m[1].split(/[;:]/).filter((s) => s !== '').map(Number));
    last = re.lastIndex;
  }
  if (last < line.length) runs.push({ text: line.slice(last), ...style });
  return runs;
}

/** The line without its escape sequences. */
export function stripAnsi(line) {
  return ansiRuns(line).map((r) => r.text).join('');
}
