/* The runs table's column picker: a search box over every column, the columns in groups
 * (attributes, job, params, metrics, summaries, system) each with its count, a checkbox a column. */

import { el } from '../lib/dom.js';
import { isSystemKey } from '../lib/runs.js';

/** The group a column is listed under. */
function groupOf(c) {
  if (c.group === 'param') return 'params';
  if (c.group === 'metric') return isSystemKey(c.key) ? 'system' : c.stat === 'last' ? 'metrics' : 'summaries';
  return c.job ? 'job' : 'attributes';
}
const GROUPS = ['attributes', 'job', 'params', 'metrics', 'summaries', 'system'];

/** What a column is called in the picker (and searched by). */
export function columnName(c) {
  if (c.group === 'param') return 'params.' + c.label;
  if (c.group === 'metric') return 'metrics.' + c.label;
  return c.label;
}

/** Fills `menu` with the picker for `columns` when they changed since it was last filled;
 * `shown(c)` tells whether c is shown, `toggle(c, on)` shows or hides it. A group is listed folded
 * when it has more than 30 columns and no search. */
export function fillColumnMenu(menu, columns, shown, toggle) {
  // The menu is filled again after each change: its search box and unfolded groups stay.
  let search = menu.querySelector('input.column-search');
  if (!search) {
    search = el('input', { type: 'search', 'data-testid': 'column-search', class: 'column-search' });
    search.addEventListener('input', () => menu.renderColumns());
    menu.replaceChildren(search, el('div', { class: 'column-groups' }));
    menu.unfolded = new Set();
  }
  const signature = columns.map((c) => c.id).join('\n');
  if (menu.signature === signature) return;
  menu.signature = signature;
  search.placeholder = `search ${columns.length} columns`;
  const body = menu.querySelector('.column-groups');
  menu.renderColumns = () => {
    const words = search.value.toLowerCase().split(/\s+/).filter(Boolean);
    const match = (c) => words.every((w) => columnName(c).toLowerCase().includes(w));
    const sections = GROUPS.map((g) => {
      const of = columns.filter((c) => groupOf(c) === g && match(c));
      if (!of.length) return null;
      const count = el('span', { class: 'muted' }, `${of.filter(shown).length}/${of.length}`);
      const details = el('details', { class: 'column-group', 'data-testid': 'column-group', 'data-group': g, open: words.length > 0 || of.length <= 30 || menu.unfolded.has(g) },
        el('summary', {}, `${g} `, count),
        of.slice(0, 500).map((c) => {
          const cb = el('input', { type: 'checkbox', 'data-column': c.id });
          cb.checked = shown(c);
          cb.addEventListener('change', () => {
            count.textContent = `${details.querySelectorAll('input:checked').length}/${of.length}`;
            toggle(c, cb.checked);
          });
          return el('label', {}, cb, ' ', columnName(c));
        }),
        of.length > 500 ? el('p', { class: 'muted' }, `${of.length - 500} more: search to narrow them.`) : null);
      details.addEventListener('toggle', () => { if (details.open) menu.unfolded.add(g); else menu.unfolded.delete(g); });
      return details;
    }).filter(Boolean);
    body.replaceChildren(...(sections.length ? sections : [el('p', { class: 'muted' }, 'No column matches.')]));
  };
  menu.renderColumns();
}
