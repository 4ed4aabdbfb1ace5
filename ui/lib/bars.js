/* Horizontal bar lists (costs of runs, of a sweep's trials). */

import { el } from './dom.js';

/** rows: [{label, value, color, title}] → a bar list scaled to the largest value. */
export function barList(rows, fmt, testid) {
  const max = Math.max(0, ...rows.map((r) => (Number.isFinite(r.value) ? r.value : 0)));
  return el('div', { class: 'bars', 'data-testid': testid || null }, rows.map((r) =>
    el('div', { class: 'bar-row', 'data-testid': testid ? testid + '-row' : null, title: r.title || '' },
      el('span', { class: 'bar-label' }, r.label),
      el('span', { class: 'bar-track' }, el('span', {
        class: 'bar', style: `width:${max > 0 && Number.isFinite(r.value) ? Math.max(0.5, (100 * r.value) / max) : 0}%;background:${r.color || '#2563eb'}`,
      })),
      el('span', { class: 'bar-value num' }, Number.isFinite(r.value) ? fmt(r.value) : '—'))));
}
