/* A table logged under a key, as of one step, read a page at a time from the server
 * (`GET /runs/{id}/tables`), which sorts, filters and pages it: a click on a column's header sorts
 * by it (again: the other way), a filter is a column, an operator and a value, and the pager says
 * which rows are shown of how many match. */

import { enc } from './address.js';
import { api } from './api.js';
import { el, errorEl } from './dom.js';
import { fmtNum, fmtValue } from './format.js';

/** Rows in a page. */
export const TABLE_PAGE = 50;

/** The filter's operators, as the server names them and as they are shown. */
const OPS = [['eq', '='], ['ne', '≠'], ['lt', '<'], ['le', '≤'], ['gt', '>'], ['ge', '≥'], ['contains', 'contains']];

/** A cell's value as shown: null as a muted "null", numbers and text as they are. */
function cellEl(v) {
  if (v === null || v === undefined) return el('td', { class: 'muted' }, 'null');
  const shown = fmtValue(v);
  const exact = typeof v === 'object' ? JSON.stringify(v) : String(v);
  return el('td', { class: typeof v === 'number' ? 'num' : null, title: exact !== shown ? exact : null }, shown);
}

/**
 * The table `key` of run `run` ({id, name}). Returns {node, load(step)}: `load` shows the table
 * as of `step` (its sort, filter and page kept), resolving once it is drawn.
 */
export function tableWidget(run, key) {
  const state = { step: null, sort: '', order: 'asc', filter: null, offset: 0 };
  let columns = [];
  let seq = 0;

  const column = el('select', { 'data-testid': 'media-table-filter-column', 'aria-label': 'column to filter on' });
  const op = el('select', { 'data-testid': 'media-table-filter-op', 'aria-label': 'filter operator' }, OPS.map(([v, label]) => el('option', { value: v }, label)));
  const value = el('input', { type: 'text', placeholder: 'value', 'data-testid': 'media-table-filter-value', 'aria-label': 'filter value' });
  const clear = el('button', { type: 'button', 'data-testid': 'media-table-filter-clear', disabled: true }, 'Clear');
  const form = el('form', { class: 'media-table-filter', 'data-testid': 'media-table-filter' },
    el('span', { class: 'muted' }, 'filter:'), column, op, value,
    el('button', { type: 'submit', 'data-testid': 'media-table-filter-apply' }, 'Apply'), clear);
  const grid = el('div', { class: 'media-table-wrap' }, el('p', { class: 'muted' }, 'Loading…'));
  const range = el('span', { class: 'muted', 'data-testid': 'media-table-range' }, '');
  const prev = el('button', { type: 'button', 'data-testid': 'media-table-prev', disabled: true }, '‹ Prev');
  const next = el('button', { type: 'button', 'data-testid': 'media-table-next', disabled: true }, 'Next ›');
  const node = el('div', { class: 'media-table', 'data-testid': 'media-table', 'data-run': run.id, 'data-loading': '1' },
    form, grid, el('div', { class: 'media-table-pager' }, prev, range, next));

  form.addEventListener('submit', (e) => {
    e.preventDefault();
    state.filter = column.value ? { column: column.value, op: op.value, value: value.value } : null;
    state.offset = 0;
    clear.disabled = !state.filter;
    fetchPage();
  });
  clear.addEventListener('click', () => {
    value.value = '';
    state.filter = null;
    state.offset = 0;
    clear.disabled = true;
    fetchPage();
  });
  prev.addEventListener('click', () => { state.offset = Math.max(0, state.offset - TABLE_PAGE); fetchPage(); });
  next.addEventListener('click', () => { state.offset += TABLE_PAGE; fetchPage(); });

  function sortBy(name) {
    if (state.sort === name) state.order = state.order === 'asc' ? 'desc' : 'asc';
    else { state.sort = name; state.order = 'asc'; }
    state.offset = 0;
    fetchPage();
  }

  function query() {
    const q = new URLSearchParams({ key, step: String(state.step), offset: String(state.offset), limit: String(TABLE_PAGE) });
    if (state.sort) { q.set('sort', state.sort); q.set('order', state.order); }
    if (state.filter) {
      q.set('filter_column', state.filter.column);
      q.set('filter_op', state.filter.op);
      q.set('filter_value', state.filter.value);
    }
    return q;
  }

  /** The column choices of the filter: the table's columns, the one chosen kept. */
  function fillColumns(cols) {
    const names = cols.map((c) => c.name);
    if (names.join('\n') === columns.map((c) => c.name).join('\n') && column.options.length) { columns = cols; return; }
    const chosen = column.value;
    columns = cols;
    column.replaceChildren(...cols.map((c) => el('option', { value: c.name }, `${c.name} (${c.type})`)));
    if (names.includes(chosen)) column.value = chosen;
  }

  function render(res) {
    fillColumns(res.columns || []);
    const head = el('tr', {}, columns.map((c) => {
      const sorted = state.sort === c.name;
      return el('th', {
        class: 'sortable' + (sorted ? ' sorted' : ''), 'data-testid': 'media-table-header', 'data-column': c.name,
        'aria-sort': sorted ? (state.order === 'asc' ? 'ascending' : 'descending') : null, title: `sort by ${c.name} (${c.type})`,
        onclick: () => sortBy(c.name),
      }, c.name, sorted ? (state.order === 'asc' ? ' ▲' : ' ▼') : '');
    }));
    const rows = res.rows || [];
    const matched = res.matched_rows ?? rows.length;
    const total = res.total_rows ?? matched;
    grid.replaceChildren(el('table', { class: 'list media-table-grid', 'data-testid': 'media-table-grid' },
      el('thead', {}, head),
      el('tbody', {}, rows.length ? rows.map((r) => el('tr', { 'data-testid': 'media-table-row' }, r.map(cellEl)))
        : el('tr', {}, el('td', { colspan: String(Math.max(1, columns.length)), class: 'muted' }, state.filter ? 'No rows match the filter.' : 'No rows.')))));
    const offset = res.offset ?? state.offset;
    range.textContent = (rows.length ? `rows ${fmtNum(offset + 1)}–${fmtNum(offset + rows.length)} of ${fmtNum(matched)}` : `no rows of ${fmtNum(matched)}`) +
      (matched !== total ? ` (${fmtNum(total)} before the filter)` : '') +
      (res.parts > 1 ? ` · ${res.parts} parts` : '');
    prev.disabled = offset <= 0;
    next.disabled = offset + rows.length >= matched;
    Object.assign(node.dataset, { step: String(res.step ?? state.step), matched: String(matched), total: String(total), offset: String(offset), sort: state.sort, order: state.sort ? state.order : '' });
  }

  async function fetchPage() {
    const mine = ++seq;
    node.dataset.loading = '1';
    try {
      let res = await api(`/runs/${enc(run.id)}/tables?${query()}`);
      // Past the last page (a step with fewer rows, a narrower filter): the last page instead.
      if (mine === seq && state.offset > 0 && !(res.rows || []).length && (res.matched_rows || 0) > 0) {
        state.offset = Math.floor((res.matched_rows - 1) / TABLE_PAGE) * TABLE_PAGE;
        res = await api(`/runs/${enc(run.id)}/tables?${query()}`);
      }
      if (mine !== seq) return;
      render(res);
    } catch (e) {
      if (mine !== seq) return;
      grid.replaceChildren(errorEl(e));
      range.textContent = '';
      prev.disabled = next.disabled = true;
    }
    node.dataset.loading = '0';
  }

  return {
    node,
    async load(step) {
      state.step = step;
      await fetchPage();
    },
  };
}
