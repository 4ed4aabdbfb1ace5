/* A scatter plot in SVG: a point per run, its colour the run's, its values in its tooltip. */

import { niceTicks, fmtTicks } from './chart-axes.js';
import { svg } from './dom.js';
import { fmtNum } from './format.js';

/** points: [{id, x, y, color, label}] (finite x and y) → an SVG scatter plot `width` px wide. */
export function scatterPlot(points, xName, yName, width = 480, height = 260) {
  const pad = { l: 58, r: 12, t: 10, b: 34 };
  const w = width - pad.l - pad.r, h = height - pad.t - pad.b;
  const range = (vs) => {
    let lo = Math.min(...vs), hi = Math.max(...vs);
    if (!(hi > lo)) { const d = Math.abs(hi) > 0 ? Math.abs(hi) * 0.05 : 0.5; lo -= d; hi += d; }
    const m = (hi - lo) * 0.05;
    return [lo - m, hi + m];
  };
  const [x0, x1] = points.length ? range(points.map((p) => p.x)) : [0, 1];
  const [y0, y1] = points.length ? range(points.map((p) => p.y)) : [0, 1];
  const px = (x) => pad.l + ((x - x0) / (x1 - x0)) * w, py = (y) => pad.t + h - ((y - y0) / (y1 - y0)) * h;
  const xt = niceTicks(x0, x1, Math.max(2, Math.floor(w / 90))), yt = niceTicks(y0, y1, 5);
  const xl = fmtTicks(xt, xt.length > 1 ? xt[1] - xt[0] : 0, { label: '' }, false);
  const yl = fmtTicks(yt, yt.length > 1 ? yt[1] - yt[0] : 0, { label: '' }, false);
  return svg('svg', { class: 'scatter', 'data-testid': 'scatter', viewBox: `0 0 ${width} ${height}`, width: '100%', role: 'img', 'aria-label': `${yName} against ${xName}` },
    ...xt.map((t, i) => svg('g', {},
      svg('line', { x1: px(t), x2: px(t), y1: pad.t, y2: pad.t + h, class: 'grid' }),
      svg('text', { x: px(t), y: pad.t + h + 14, 'text-anchor': 'middle', class: 'tick' }, xl[i]))),
    ...yt.map((t, i) => svg('g', {},
      svg('line', { x1: pad.l, x2: pad.l + w, y1: py(t), y2: py(t), class: 'grid' }),
      svg('text', { x: pad.l - 6, y: py(t) + 4, 'text-anchor': 'end', class: 'tick' }, yl[i]))),
    svg('text', { x: pad.l + w / 2, y: height - 4, 'text-anchor': 'middle', class: 'axis-name' }, xName),
    svg('text', { x: 12, y: pad.t + h / 2, 'text-anchor': 'middle', class: 'axis-name', transform: `rotate(-90 12 ${pad.t + h / 2})` }, yName),
    ...points.map((p) => svg('circle', { cx: px(p.x), cy: py(p.y), r: 5, fill: p.color, 'data-run-id': p.id, 'data-x': String(p.x), 'data-y': String(p.y), class: 'scatter-point' },
      svg('title', {}, `${p.label}\n${xName}: ${fmtNum(p.x)}\n${yName}: ${fmtNum(p.y)}`))));
}
