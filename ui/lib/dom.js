/* DOM helpers: elements (`el`) and SVG elements (`svg`) from attributes and children, menus that close on Escape, and the
 * small pieces every view shows (a status, an error, a key–value table). */

import { fmtValue } from './format.js';

/** el('div', {class: 'x', onclick: f}, child, 'text', ...) */
export function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
    else if (k === 'class') node.className = v;
    else if (k === 'text') node.textContent = v;
    else if (k === 'style') node.style.cssText = v;
    else node.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : String(c));
  }
  return node;
}

const SVG_NS = 'http://www.w3.org/2000/svg';

/** svg('path', {d: 'M0 0L1 1'}, child, ...): an SVG element, as `el` makes HTML ones. */
export function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) node.setAttribute(k, String(v));
  for (const c of children.flat()) if (c !== null && c !== undefined) node.append(c instanceof Node ? c : String(c));
  return node;
}

/** A run's (or trial's) status as a coloured label. */
export function statusEl(status) {
  return el('span', { class: 'status status-' + status, text: status || '', title: status || null });
}

/** An error (or a message) as an error line. */
export function errorEl(err) {
  return el('p', { class: 'error' }, err instanceof Error ? err.message : String(err));
}

/** A table of keys and values, sorted by key unless `keepOrder`; 'none' when empty. */
export function kvTable(obj, testid, keepOrder) {
  const entries = Object.entries(obj || {});
  if (!keepOrder) entries.sort(([a], [b]) => a.localeCompare(b));
  if (!entries.length) return el('p', { class: 'muted' }, 'none');
  return el('table', { class: 'kv', 'data-testid': testid || null },
    el('tbody', {}, entries.map(([k, v]) =>
      el('tr', {}, el('th', { class: 'mono' }, k),
        el('td', { class: 'mono' }, typeof v === 'object' && v !== null ? JSON.stringify(v) : fmtValue(v))))));
}

/** A `<details>` menu closes on Escape (focus back on its summary) and on a click outside it. */
export function closingMenu(details) {
  details.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && details.open) { details.open = false; details.querySelector('summary').focus(); e.stopPropagation(); }
  });
  const outside = (e) => { if (!details.contains(e.target)) details.open = false; };
  details.addEventListener('toggle', () => {
    if (details.open) document.addEventListener('pointerdown', outside, true);
    else document.removeEventListener('pointerdown', outside, true);
  });
  return details;
}
