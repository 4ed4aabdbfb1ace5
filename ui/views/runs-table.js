/* #/p/NAME the runs table: virtualized rows loaded page by page, server-side sort and filter, a
 * pinned name column, columns to choose, resize and move, group-by, selection for a comparison,
 * CSV export and saved views. Its state lives in the address. */

import { enc, hashQuery, setHashQuery, showAddress, tableAddress } from '../lib/address.js';
import { api, settleLimited } from '../lib/api.js';
import { runColor } from '../lib/colors.js';
import { closingMenu, el, errorEl, statusEl } from '../lib/dom.js';
import { csvField, downloadText } from '../lib/downloads.js';
import { fmtDuration, fmtNum, fmtTime, fmtUsd, fmtValue, toNum } from '../lib/format.js';
import { COMPARE_LINES_MAX, COST_KEY, groupValue, isSystemKey, LIVE_MS, runDuration } from '../lib/runs.js';
import { columnFormatter, columnPrefsFrom, columnPrefsJson, columnValue, gpuUtil, JOB_COLUMNS, jobValue, loadColumnPrefs, METRIC_COLUMNS, runCost, saveColumnPrefs } from './runs-columns.js';
import { mayWrite } from '../lib/session.js';
import { columnName, fillColumnMenu } from './runs-column-menu.js';
import { filterCompleter, filterKeys, filterQuery } from './runs-filter.js';

/** Columns the table sorts itself, computed from each run: their values. */
const CLIENT_SORTS = { gpu_util: gpuUtil, cost: runCost };

/** A run's GPU utilization series, whose means the `mean GPU util` column averages. */
const GPU_UTIL_KEY = /^sys\/(?:node\/\d+\/)?gpu\.\d+\.util$/;

/** Most running rows the table follows live. */
const LIVE_ROWS_MAX = 200;

/** A start time in a table cell: the day and minute (`Nov 28, 14:03`), the year when not this one. */
function fmtStart(ms) {
  if (!ms) return '';
  const d = new Date(ms);
  const opts = { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit' };
  if (d.getFullYear() !== new Date().getFullYear()) opts.year = 'numeric';
  return d.toLocaleString(undefined, opts);
}

/** The height of a row of the table, in px. */
const ROW_H = 28;

/** Runs per page of the runs table; pages load as their rows scroll into view. */
const PAGE_LIMIT = 500;

/** The saved view last opened, shown as chosen when the table comes back. */
let openedView = '';

/** Most run ids a link keeps as a selection; a larger selection of every run shown is kept as `all`. */
const MAX_SELECTION_IN_URL = 200;

/** The runs table's state, read from its address: filter, sort, group-by and selection. */
function tableState(params) {
  const sel = params.get('sel') || '';
  return {
    filter: params.get('filter') || '',
    sortKey: params.get('sort') || null,
    sortDir: params.get('dir') === 'desc' ? 'desc' : 'asc',
    groupBy: params.get('group') || '',
    selected: new Set(sel === 'all' ? [] : sel.split(',').filter(Boolean)),
    allSelected: sel === 'all',
    collapsed: new Set(),
  };
}

/** The runs table of `project`, its state read from the address's query (`params`). */
export function runsView(project, params) {
  const st = tableState(params || new URLSearchParams());
  const prefs = loadColumnPrefs(project);
  let runs = [];
  let items = [];          // rows on screen: {run} or {group: {label, runs}}
  let columns = [];
  let loadGen = 0;
  let rafPending = false;
  let sawJobs = false;     // a run of a job was shown: the job columns are shown unless hidden
  let mayStop = false;     // the caller may write to the project: running rows offer Stop
  api('/projects/' + enc(project)).then((p) => {
    mayStop = mayWrite(p.your_role);
    if (mayStop && columns.length) renderRows();
  }).catch(() => { /* no Stop buttons */ });

  const filterInput = el('input', {
    type: 'text', class: 'filter', 'data-testid': 'filter-input', spellcheck: 'false',
    placeholder: "a name, or a filter: metrics.val_loss < 0.3 and params.lr = 0.001 and status = 'finished'",
  });
  filterInput.value = st.filter;
  // The project's keys, for autocomplete and for warning about a key no run has.
  let projectKeys = null;
  api(`/projects/${enc(project)}/keys`).then((k) => {
    projectKeys = k;
    warnUnknownKeys();
    if (columns.length) { discoverColumns(); renderHeader(); renderRows(); }
  }).catch(() => { /* an older server: no help */ });
  const filterBox = filterCompleter(filterInput, () => projectKeys, () => applyFilter());
  const filterWarning = el('div', { class: 'filter-warning', 'data-testid': 'filter-warning' });
  function warnUnknownKeys() {
    if (!projectKeys) return;
    const unknown = filterKeys(st.filter).filter(([, kind, key]) => !(projectKeys[kind] || []).includes(key)).map(([prefix, , key]) => `${prefix}.${key}`);
    filterWarning.textContent = unknown.length ? `No run of this project has ${[...new Set(unknown)].join(', ')}.` : '';
  }
  const filterError = el('div', { class: 'filter-error', 'data-testid': 'filter-error' });
  const rowCount = el('span', { class: 'row-count', 'data-testid': 'row-count' });
  const compareBtn = el('button', { class: 'primary', 'data-testid': 'compare-button', onclick: () => {
    if (!selectedCount()) return;
    if (st.allSelected && runs.length > COMPARE_LINES_MAX) {
      // Every run the filter finds: the comparison asks for them by the filter, not one by one.
      const q = new URLSearchParams();
      if (st.filter) q.set('filter', filterQuery(st.filter));
      if (st.groupBy) q.set('group', st.groupBy);
      location.hash = '#/compare/' + enc(project) + (q.toString() ? '?' + q : '');
      return;
    }
    selectedIds().then((ids) => { location.hash = '#/compare/' + enc(project) + '/' + ids.map(enc).join(','); });
  } });
  const groupSel = el('select', { 'data-testid': 'group-by', title: 'group rows by a param, tag or attribute' });
  groupSel.addEventListener('change', async () => {
    st.groupBy = groupSel.value; st.collapsed.clear(); syncUrl();
    if (needsReload()) { load(); return; }
    if (st.groupBy) { try { await allRuns(); } catch (e) { message.replaceChildren(errorEl(e)); return; } }
    buildItems(); renderHeader(); renderRows();
  });
  const colMenu = el('div', { class: 'menu' });
  const colDetails = closingMenu(el('details', { class: 'columns', 'data-testid': 'columns-menu' }, el('summary', {}, 'Columns ▾'), colMenu));
  const message = el('div', {});
  const thead = el('div', { class: 'thead' });
  const tbody = el('div', { class: 'tbody' });
  const scroller = el('div', { class: 'table-scroll', 'data-testid': 'runs-table' }, thead, tbody);
  scroller.addEventListener('scroll', scheduleRows, { passive: true });
  window.addEventListener('resize', scheduleRows);

  // Saved views: the table's address (filter, sort, group, selection) and its columns, by name, on the server.
  const viewsSel = el('select', { 'data-testid': 'views', title: 'open a saved view of this table' });
  const viewName = el('input', { type: 'text', size: 14, placeholder: 'view name', 'data-testid': 'view-name' });
  const viewMsg = el('span', { class: 'muted', 'data-testid': 'view-message' });
  const viewsBar = closingMenu(el('details', { class: 'columns views' }, el('summary', {}, 'Views ▾'), el('div', { class: 'menu' },
    el('label', {}, 'open ', viewsSel),
    el('form', { class: 'toolbar', onsubmit: (e) => { e.preventDefault(); saveView(); } },
      viewName, el('button', { type: 'submit', 'data-testid': 'view-save' }, 'Save')),
    el('button', { type: 'button', 'data-testid': 'view-delete', onclick: () => deleteView() }, 'Delete the open view'),
    viewMsg)));
  const viewsPath = `/projects/${enc(project)}/views`;
  async function loadViews(selected) {
    try {
      const res = await api(viewsPath);
      viewsSel.replaceChildren(el('option', { value: '' }, '(choose)'), ...(res.views || []).map((v) => el('option', { value: v.name }, v.name)));
      viewsSel.value = selected || '';
    } catch (e) { viewMsg.textContent = e.status === 404 ? '' : 'views: ' + e.message; }
  }
  viewsSel.addEventListener('change', async () => {
    if (!viewsSel.value) return;
    try {
      const v = await api(`${viewsPath}/${enc(viewsSel.value)}`);
      const state = v.state || {};
      Object.assign(prefs, columnPrefsFrom(state.columns));
      saveColumnPrefs(project, prefs);
      const address = '#/p/' + enc(project) + (state.query ? '?' + state.query : '');
      openedView = v.name;
      showAddress(address);
    } catch (e) { viewMsg.textContent = e.message; }
  });
  async function saveView() {
    const name = viewName.value.trim() || viewsSel.value;
    if (!name) { viewMsg.textContent = 'Name the view.'; return; }
    try {
      await api(`${viewsPath}/${enc(name)}`, { method: 'PUT', body: { state: { query: hashQuery().toString(), columns: columnPrefsJson(prefs) } } });
      viewMsg.textContent = `Saved "${name}".`;
      viewName.value = '';
      await loadViews(name);
    } catch (e) { viewMsg.textContent = (e.field ? e.field + ': ' : '') + e.message; }
  }
  async function deleteView() {
    if (!viewsSel.value) return;
    try {
      await api(`${viewsPath}/${enc(viewsSel.value)}`, { method: 'DELETE' });
      viewMsg.textContent = `Deleted "${viewsSel.value}".`;
      await loadViews('');
    } catch (e) { viewMsg.textContent = e.message; }
  }
  loadViews(openedView);

  const node = el('div', {},
    el('div', { class: 'breadcrumb' }, el('a', { href: '#/' }, 'Projects'), ' / '),
    el('h1', {}, project, ' ', el('a', { class: 'sub-link', href: '#/sweeps/' + enc(project), 'data-testid': 'sweeps-link' }, 'sweeps →'),
      el('a', { class: 'sub-link', href: '#/report/' + enc(project), 'data-testid': 'report-link' }, 'report →')),
    el('div', { class: 'toolbar' },
      filterBox,
      el('button', { onclick: applyFilter }, 'Apply'),
      el('button', { onclick: () => { filterInput.value = ''; applyFilter(); } }, 'Clear'),
      compareBtn, el('label', {}, 'group by ', groupSel), colDetails,
      el('button', { type: 'button', 'data-testid': 'export-csv', title: 'the rows and columns shown, as CSV', onclick: () => exportCsv() }, 'CSV'),
      viewsBar, rowCount),
    filterError, filterWarning, message, scroller);

  function applyFilter() {
    st.filter = filterInput.value.trim();
    warnUnknownKeys();
    load();
  }

  /** Writes the table's state into the address. */
  function syncUrl() {
    let sel = '';
    if (st.allSelected) sel = 'all';
    else if (st.selected.size <= MAX_SELECTION_IN_URL) sel = [...st.selected].join(',');
    setHashQuery({ filter: st.filter, sort: st.sortKey, dir: st.sortKey && st.sortDir === 'desc' ? 'desc' : '', group: st.groupBy, sel });
    tableAddress.set(project, location.hash);
  }

  /** Every run matching the filter is selected (select all), loaded or not. */
  function selectedCount() { return st.allSelected ? runs.length : st.selected.size; }

  /** The ids of the selected runs, in table order (loading the pages they need). */
  async function selectedIds() {
    if (st.allSelected) return (await allRuns()).map((r) => r.id);
    const order = new Map(runs.map((r, i) => [r && r.id, i]));
    return [...st.selected].sort((a, b) => (order.get(a) ?? 1e12) - (order.get(b) ?? 1e12));
  }

  /** Leaves "select all" for the explicit set of every run (loading them all), so one can be unticked. */
  async function materializeAll() {
    if (!st.allSelected) return;
    const all = await allRuns();
    all.forEach((r) => st.selected.add(r.id));
    st.allSelected = false;
  }

  function updateCompareBtn() {
    syncUrl();
    const n = selectedCount();
    compareBtn.disabled = n === 0;
    compareBtn.textContent = n ? `Compare (${n})` : 'Compare';
  }

  function discoverColumns() {
    const params = new Set(projectKeys ? projectKeys.params : []), metrics = new Set(projectKeys ? projectKeys.metrics : []), tags = new Set(projectKeys ? projectKeys.tags : []);
    for (const r of loadedRuns()) {
      for (const k in (r.params || {})) params.add(k);
      for (const k in (r.summary || {})) metrics.add(k);
      for (const k in (r.tags || {})) tags.add(k);
    }
    const base = [
      { id: 'sel', label: '', width: 34 },
      { id: 'name', label: 'name', sort: 'name', width: 200 },
      { id: 'status', label: 'status', sort: 'status', width: 140 },
      { id: 'started', label: 'started', sort: 'start_time', width: 120, title: 'When the run started' },
      { id: 'duration', label: 'duration', sort: 'duration', width: 90, num: true },
      { id: 'user', label: 'user', sort: 'user', width: 100 },
      { id: 'tags', label: 'tags', width: 160 },
      { id: 'cost', label: 'cost', sort: 'cost', clientSort: true, width: 80, num: true,
        title: "The job's cost (every attempt and node), as its page and the report show it; else the run's cost series" },
      { id: 'gpu_util', label: 'mean GPU util', sort: 'gpu_util', clientSort: true, width: 80, num: true,
        title: "The mean of NVML's GPU utilization (the share of time any kernel ran), over the run's GPUs; the report's GPU utilization is the share of GPU-time active" },
    ];
    sawJobs = sawJobs || loadedRuns().some((r) => r.job);
    for (const [id, label] of Object.entries(JOB_COLUMNS)) base.push({ id, label, sort: id, width: 80, num: true, job: true, defaultHidden: !sawJobs });
    const p = [...params].sort().map((k) => ({ id: 'params.' + k, key: k, group: 'param', label: k, sort: 'params.' + k, width: 110 }));
    const m = [];
    for (const k of [...metrics].sort()) {
      if (k === COST_KEY) continue;
      for (const [stat, prefix] of Object.entries(METRIC_COLUMNS)) {
        m.push({
          id: prefix + '.' + k, key: k, stat, group: 'metric', label: stat === 'last' ? k : `${k} (${stat})`,
          sort: prefix + '.' + k, width: 120, num: true, defaultHidden: stat !== 'last' || isSystemKey(k),
        });
      }
    }
    const all = base.concat(p, m);
    buildColumnMenu(all);
    const visible = all.filter((c) => prefs.shown.has(c.id) || (!prefs.hidden.has(c.id) && !c.defaultHidden));
    const rank = (c, i) => (c.id === 'sel' ? -2 : c.id === 'name' ? -1 : prefs.order.includes(c.id) ? prefs.order.indexOf(c.id) : 10000 + i);
    columns = visible.map((c, i) => [c, rank(c, i)]).sort((a, b) => a[1] - b[1]).map(([c]) => c);
    for (const c of columns) {
      const w = Number(prefs.widths[c.id]);
      if (Number.isFinite(w) && w >= 40 && w <= 1000) c.width = w;
      if (c.num || c.group === 'param') c.fmt = columnFormatter(loadedRuns().map((r) => columnValue(c, r)));
    }
    let left = 0;
    for (const c of columns) { if (c.id === 'sel' || c.id === 'name') { c.pin = left; left += c.width; } }

    const choices = [['', '(none)'], ['status', 'status'], ['user', 'user'], ['group', 'run group']]
      .concat([...params].sort().map((k) => ['params.' + k, 'params.' + k]), [...tags].sort().map((k) => ['tags.' + k, 'tags.' + k]));
    groupSel.replaceChildren(...choices.map(([v, label]) => el('option', { value: v }, label)));
    if (!choices.some(([v]) => v === st.groupBy)) st.groupBy = '';
    groupSel.value = st.groupBy;
  }

  function buildColumnMenu(all) {
    const isShown = (c) => prefs.shown.has(c.id) || (!prefs.hidden.has(c.id) && !c.defaultHidden);
    fillColumnMenu(colMenu, all.filter((c) => c.id !== 'sel' && c.id !== 'name'), isShown, (c, on) => {
      prefs.hidden.delete(c.id); prefs.shown.delete(c.id);
      if (on && c.defaultHidden) prefs.shown.add(c.id);
      if (!on && !c.defaultHidden) prefs.hidden.add(c.id);
      saveColumnPrefs(project, prefs);
      discoverColumns();
      if (needsReload()) { load(); return; }
      renderHeader(); renderRows();
    });
  }

  /** Rows to show: the runs in order, or groups (in order of their values) each followed by its runs. */
  function buildItems() {
    if (!st.groupBy) { items = null; return; }
    const groups = new Map();
    for (const r of runs) {
      const v = groupValue(r, st.groupBy);
      const label = v === undefined || v === null || v === '' ? '(none)' : fmtValue(v);
      if (!groups.has(label)) groups.set(label, { label, value: v, runs: [] });
      groups.get(label).runs.push(r);
    }
    const ordered = [...groups.values()].sort((a, b) => {
      const [x, y] = [a.value, b.value];
      if (typeof x === 'number' && typeof y === 'number') return x - y;
      return a.label.localeCompare(b.label, undefined, { numeric: true });
    });
    items = [];
    for (const g of ordered) {
      items.push({ group: g });
      if (!st.collapsed.has(g.label)) for (const run of g.runs) items.push({ run });
    }
  }

  function gridTemplate() { return columns.map((c) => c.width + 'px').join(' '); }
  function totalWidth() { return columns.reduce((s, c) => s + c.width, 0); }

  function renderHeader() {
    const focused = thead.contains(document.activeElement) ? document.activeElement.dataset.column : null;
    const tmpl = gridTemplate();
    thead.style.gridTemplateColumns = tmpl;
    thead.style.width = totalWidth() + 'px';
    thead.replaceChildren(...columns.map((c) => {
      if (c.id === 'sel') {
        const all = el('input', { type: 'checkbox', title: 'select all / none' });
        all.checked = runs.length > 0 && (st.allSelected || (loadedRuns().length === runs.length && runs.every((r) => st.selected.has(r.id))));
        all.addEventListener('change', () => {
          st.selected.clear();
          st.allSelected = all.checked;
          updateCompareBtn(); renderRows();
        });
        return el('div', { class: 'cell sel pin', style: `left:${c.pin}px` }, all);
      }
      let arrow = '';
      if (c.sort && st.sortKey === c.sort) arrow = st.sortDir === 'asc' ? ' ▲' : ' ▼';
      const grip = el('span', { class: 'col-resize', title: 'drag to resize', 'data-testid': 'col-resize' });
      // A param's header and a metric's of the same name differ by a badge (and their colour).
      const kind = c.group === 'param' ? el('span', { class: 'col-kind', title: 'a param' }, 'P')
        : c.group === 'metric' ? el('span', { class: 'col-kind', title: isSystemKey(c.key) ? 'a system metric' : 'a metric' }, isSystemKey(c.key) ? 'S' : 'M') : null;
      const sorted = c.sort && st.sortKey === c.sort;
      const cell = el('div', {
        class: 'cell' + (c.sort ? ' sortable' : '') + (c.group ? ' grp-' + c.group : '') + (c.num ? ' num' : '') + (c.pin !== undefined ? ' pin' : ''),
        title: (c.title ? c.title + ' ' : columnName(c)) + (c.sort ? ' (click or Enter to sort)' : ''),
        role: 'columnheader', tabindex: c.sort ? '0' : null, 'aria-sort': sorted ? (st.sortDir === 'asc' ? 'ascending' : 'descending') : null,
        'data-column': c.id, draggable: c.pin === undefined ? 'true' : null,
        style: c.pin !== undefined ? `left:${c.pin}px` : null,
      }, kind, el('span', { class: 'col-label' }, c.label + arrow), grip);
      const sortBy = () => {
        if (st.sortKey === c.sort) st.sortDir = st.sortDir === 'asc' ? 'desc' : 'asc';
        else { st.sortKey = c.sort; st.sortDir = 'asc'; }
        load().then(() => thead.querySelector(`[data-column="${CSS.escape(c.id)}"]`)?.focus());
      };
      if (c.sort) {
        cell.addEventListener('click', (e) => { if (e.target !== grip) sortBy(); });
        cell.addEventListener('keydown', (e) => { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); sortBy(); } });
      }
      grip.addEventListener('mousedown', (e) => startResize(e, c));
      grip.addEventListener('click', (e) => e.stopPropagation());
      cell.addEventListener('dragstart', (e) => { e.dataTransfer.setData('text/x-trainlog-column', c.id); e.dataTransfer.effectAllowed = 'move'; });
      cell.addEventListener('dragover', (e) => { if (c.pin === undefined) { e.preventDefault(); cell.classList.add('drop'); } });
      cell.addEventListener('dragleave', () => cell.classList.remove('drop'));
      cell.addEventListener('drop', (e) => {
        e.preventDefault();
        cell.classList.remove('drop');
        const moved = e.dataTransfer.getData('text/x-trainlog-column');
        if (moved && moved !== c.id) moveColumn(moved, c.id);
      });
      return cell;
    }));
    tbody.style.width = totalWidth() + 'px';
    tbody.style.height = rowTotal() * ROW_H + 'px';
    if (focused) thead.querySelector(`[data-column="${CSS.escape(focused)}"]`)?.focus();
  }

  /** Drags a column's right edge: its width follows the mouse and is kept for the project. */
  function startResize(e, c) {
    e.preventDefault();
    e.stopPropagation();
    const x0 = e.clientX, w0 = c.width;
    const move = (ev) => {
      c.width = Math.max(40, Math.min(1000, Math.round(w0 + ev.clientX - x0)));
      let left = 0;
      for (const k of columns) if (k.pin !== undefined) { k.pin = left; left += k.width; }
      renderHeader(); scheduleRows();
    };
    const up = () => {
      window.removeEventListener('mousemove', move);
      window.removeEventListener('mouseup', up);
      prefs.widths[c.id] = c.width;
      saveColumnPrefs(project, prefs);
    };
    window.addEventListener('mousemove', move);
    window.addEventListener('mouseup', up);
  }

  /** Puts column `moved` where column `target` is (the pinned columns stay first). */
  function moveColumn(moved, target) {
    const ids = columns.filter((c) => c.pin === undefined).map((c) => c.id).filter((id) => id !== moved);
    ids.splice(ids.indexOf(target) + (columns.findIndex((c) => c.id === moved) < columns.findIndex((c) => c.id === target) ? 1 : 0), 0, moved);
    prefs.order = ids.concat(prefs.order.filter((id) => !ids.includes(id)));
    saveColumnPrefs(project, prefs);
    discoverColumns(); renderHeader(); renderRows();
  }

  /** What the table shows, as CSV: the runs in their order, the visible columns, full precision. */
  async function exportCsv() {
    await allRuns();
    const cols = columns.filter((c) => c.id !== 'sel');
    const value = (c, r) => {
      switch (c.id) {
        case 'name': return r.name || r.id;
        case 'status': return r.status;
        case 'started': return r.start_time ? new Date(r.start_time).toISOString() : '';
        case 'duration': { const d = runDuration(r); return d === null ? '' : d / 1000; }
        case 'user': return r.user;
        case 'tags': return Object.entries(r.tags || {}).map(([k, v]) => (v === '' ? k : `${k}=${fmtValue(v)}`)).join('; ');
        default: { const v = columnValue(c, r); return typeof v === 'number' && !Number.isFinite(v) ? String(v) : v; }
      }
    };
    const header = ['id', ...cols.map((c) => (c.group === 'param' ? 'params.' + c.key : c.group === 'metric' ? `metrics.${c.key}${c.stat === 'last' ? '' : '.' + c.stat}` : c.id === 'duration' ? 'duration_s' : c.id === 'started' ? 'start_time' : c.id))];
    const shownRuns = st.groupBy ? items.filter((it) => it.run).map((it) => it.run) : runs;
    const lines = [header.map(csvField).join(','), ...shownRuns.map((r) => [r.id, ...cols.map((c) => value(c, r))].map(csvField).join(','))];
    downloadText(`${project}-runs.csv`, lines.join('\r\n') + '\r\n', 'text/csv');
  }

  function cellFor(c, r) {
    switch (c.id) {
      case 'sel': {
        const cb = el('input', { type: 'checkbox' });
        cb.checked = st.allSelected || st.selected.has(r.id);
        cb.addEventListener('change', async () => {
          await materializeAll();
          if (cb.checked) st.selected.add(r.id); else st.selected.delete(r.id);
          updateCompareBtn(); renderHeader(); renderRows();
        });
        return el('div', { class: 'cell sel pin', style: `left:${c.pin}px` }, cb);
      }
      case 'name': return el('div', { class: 'cell pin', style: `left:${c.pin}px`, title: r.name || r.id },
        el('span', { class: 'swatch', 'data-testid': 'run-color', style: `background:${runColor(r)}` }),
        el('a', { href: '#/run/' + enc(r.id) }, r.name || r.id));
      case 'status': return el('div', { class: 'cell' }, statusEl(r.status), r.status === 'running' && mayStop ? stopButton(r) : null);
      case 'started': return el('div', { class: 'cell', 'data-column': 'started', title: fmtTime(r.start_time) }, fmtStart(r.start_time));
      case 'duration': return el('div', { class: 'cell num' }, fmtDuration(runDuration(r)));
      case 'user': return el('div', { class: 'cell', title: r.user || '' }, r.user || '');
      case 'tags': {
        const t = Object.entries(r.tags || {}).map(([k, v]) => (v === '' ? k : `${k}=${fmtValue(v)}`)).join(', ');
        return el('div', { class: 'cell tags', title: t }, t);
      }
      case 'cost': {
        const v = runCost(r);
        return el('div', { class: 'cell num', 'data-column': 'cost' }, v === null ? '' : fmtUsd(v));
      }
      case 'gpu_util': {
        const v = gpuUtil(r);
        return el('div', { class: 'cell num' }, v === null ? '' : v.toFixed(0) + '%');
      }
      case 'attempts': case 'gpus': {
        const v = jobValue(r, c.id);
        const title = r.job ? `${r.job.launcher}${r.job.job_id ? ' job ' + r.job.job_id : ''}: ${r.job.world_size} ranks on ${r.job.node_count} nodes` : null;
        return el('div', { class: 'cell num', 'data-column': c.id, title }, v === null ? '' : String(v));
      }
      case 'lost_usd': {
        const v = jobValue(r, 'lost_usd');
        const title = r.job ? `lost after checkpoints: $${v.toFixed(2)}, ${fmtNum(r.job.lost_gpu_hours)} GPU-hours; ${r.job.steps_replayed} steps replayed` : null;
        return el('div', { class: 'cell num', 'data-column': c.id, title }, v === null ? '' : fmtUsd(v));
      }
      default:
        if (c.group === 'param') {
          const raw = (r.params || {})[c.key];
          const v = typeof raw === 'number' && c.fmt ? c.fmt(raw) : fmtValue(raw);
          return el('div', { class: 'cell grp-param' + (typeof raw === 'number' ? ' num' : ''), title: fmtValue(raw) }, v);
        } else {
          const s = (r.summary || {})[c.key];
          if (!s) return el('div', { class: 'cell num' });
          return el('div', {
            class: 'cell num',
            title: `last ${fmtNum(toNum(s.last))} @ step ${s.last_step}\nmin ${fmtNum(toNum(s.min))}\nmax ${fmtNum(toNum(s.max))}\nmean ${fmtNum(toNum(s.mean))}\ncount ${s.count}`,
          }, (c.fmt || fmtNum)(toNum(s[c.stat])));
        }
    }
  }

  /** A group's header row: a fold toggle, its value and size, and the mean of each numeric column. */
  function groupRow(g, i, tmpl, width) {
    const collapsed = st.collapsed.has(g.label);
    return el('div', {
      class: 'trow group-row', 'data-testid': 'group-row', 'data-group': g.label, 'data-count': String(g.runs.length),
      style: `top:${i * ROW_H}px;width:${width};grid-template-columns:${tmpl}`,
    }, columns.map((c) => {
      if (c.id === 'sel') {
        const cb = el('input', { type: 'checkbox', title: 'select the runs of this group' });
        cb.checked = st.allSelected || g.runs.every((r) => st.selected.has(r.id));
        cb.addEventListener('change', async () => {
          await materializeAll();
          g.runs.forEach((r) => (cb.checked ? st.selected.add(r.id) : st.selected.delete(r.id)));
          updateCompareBtn(); renderHeader(); renderRows();
        });
        return el('div', { class: 'cell sel pin', style: `left:${c.pin}px` }, cb);
      }
      if (c.id === 'name') {
        const fold = () => {
          if (collapsed) st.collapsed.delete(g.label); else st.collapsed.add(g.label);
          buildItems(); renderHeader(); renderRows();
          tbody.querySelector(`[data-testid=group-row][data-group="${CSS.escape(g.label)}"] .group-name`)?.focus();
        };
        return el('div', {
          class: 'cell group-name pin', style: `left:${c.pin}px`, title: `${st.groupBy} = ${g.label} (click or Enter to fold)`,
          tabindex: '0', role: 'button', 'aria-expanded': String(!collapsed), onclick: fold,
          onkeydown: (e) => { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); fold(); } },
        }, `${collapsed ? '▸' : '▾'} ${g.label} (${g.runs.length})`);
      }
      if (c.num || c.group === 'metric') {
        const vals = g.runs.map((r) => columnValue(c, r)).map((v) => (typeof v === 'number' ? v : NaN)).filter(Number.isFinite);
        if (!vals.length) return el('div', { class: 'cell num' });
        const mean = vals.reduce((a, b) => a + b, 0) / vals.length;
        const text = c.id === 'duration' ? fmtDuration(mean) : c.id === 'cost' || c.id === 'lost_usd' ? fmtUsd(mean) : c.id === 'gpu_util' ? mean.toFixed(0) + '%' : (c.fmt || fmtNum)(mean);
        return el('div', { class: 'cell num group-mean', title: `mean of ${vals.length}` }, text);
      }
      return el('div', { class: 'cell' });
    }));
  }

  function scheduleRows() {
    if (rafPending) return;
    rafPending = true;
    requestAnimationFrame(() => { rafPending = false; renderRows(); });
  }

  // Only the rows in (or near) the viewport exist in the DOM.
  function renderRows() {
    const top = scroller.scrollTop;
    const h = scroller.clientHeight || 600;
    const first = Math.max(0, Math.floor(top / ROW_H) - 8);
    const last = Math.min(rowTotal(), Math.ceil((top + h) / ROW_H) + 8);
    const tmpl = gridTemplate();
    const width = totalWidth() + 'px';
    const rows = [];
    for (let i = first; i < last; i++) {
      const item = items ? items[i] : { run: runs[i] };
      if (item.group) { rows.push(groupRow(item.group, i, tmpl, width)); continue; }
      const r = item.run;
      if (!r) {
        ensurePage(Math.floor(i / PAGE_LIMIT));
        rows.push(el('div', { class: 'trow placeholder', style: `top:${i * ROW_H}px;width:${width}` }, el('div', { class: 'cell muted' }, 'loading…')));
        continue;
      }
      rows.push(el('div', {
        class: 'trow' + (st.allSelected || st.selected.has(r.id) ? ' selected' : ''),
        'data-testid': 'run-row', 'data-run-id': r.id,
        style: `top:${i * ROW_H}px;width:${width};grid-template-columns:${tmpl}`,
      }, columns.map((c) => cellFor(c, r))));
    }
    tbody.replaceChildren(...rows);
  }

  /** The runs loaded so far, in table order. */
  function loadedRuns() { return runs.filter(Boolean); }
  /** Rows of the table: groups with their runs, or one per run matching the filter. */
  function rowTotal() { return items ? items.length : runs.length; }

  /** The `columns` a page asks for: the params, tags and metrics of the columns shown, of the
   * group-by and of the computed columns, so a wide project answers lean rows; null (everything)
   * until the columns are known, or when the list would not fit an address. */
  function wantedColumns() {
    if (!projectKeys || !columns.length) return null;
    const items = new Set();
    for (const c of columns) {
      if (c.id === 'tags') items.add('tags');
      else if (c.group === 'param') items.add('params.' + c.key);
      else if (c.group === 'metric') items.add('metrics.' + c.key);
      else if (c.id === 'cost') items.add('metrics.' + COST_KEY);
      else if (c.id === 'gpu_util') for (const k of projectKeys.metrics || []) if (GPU_UTIL_KEY.test(k)) items.add('metrics.' + k);
    }
    if (/^(params|tags)\./.test(st.groupBy)) items.add(st.groupBy);
    const text = [...items].join(',');
    return text.length <= 2500 ? text : null;
  }
  /** The `columns` the loaded pages asked for (null: everything). */
  let askedColumns = null;
  /** Whether the columns shown now need values the loaded pages did not ask for. */
  function needsReload() {
    if (askedColumns === null) return false;
    const asked = new Set(askedColumns.split(','));
    const wanted = wantedColumns();
    return wanted === null || wanted.split(',').some((c) => c && !asked.has(c) && !asked.has(c.split('.')[0]));
  }

  /** One page of the current search, from a run offset; answers {runs, total} (total on the first page). */
  async function fetchPage(offset) {
    const q = new URLSearchParams({ limit: String(PAGE_LIMIT) });
    if (askedColumns !== null) q.set('columns', askedColumns);
    if (st.filter) q.set('filter', filterQuery(st.filter));
    if (st.sortKey && !CLIENT_SORTS[st.sortKey]) q.set('order_by', `${st.sortKey} ${st.sortDir}`);
    if (offset) q.set('page_token', String(offset));
    else q.set('total', 'true');
    return api(`/projects/${enc(project)}/runs?${q}`);
  }

  const inFlight = new Map();
  /** Loads page p of the current search once, then redraws the rows. */
  function ensurePage(p) {
    if (inFlight.has(p)) return inFlight.get(p);
    const gen = loadGen;
    const done = fetchPage(p * PAGE_LIMIT).then((res) => {
      if (gen !== loadGen) return;
      (res.runs || []).forEach((r, k) => { if (p * PAGE_LIMIT + k < runs.length) runs[p * PAGE_LIMIT + k] = r; });
      scheduleRows();
    }).catch((e) => { inFlight.delete(p); if (gen === loadGen) message.replaceChildren(errorEl(e)); });
    inFlight.set(p, done);
    return done;
  }

  /** Every run of the current search (loading the pages not loaded yet, four at a time). */
  async function allRuns() {
    const pages = Math.ceil(runs.length / PAGE_LIMIT);
    const missing = [];
    for (let p = 0; p < pages; p++) if (runs.slice(p * PAGE_LIMIT, (p + 1) * PAGE_LIMIT).some((r) => !r)) missing.push(p);
    if (missing.length) {
      rowCount.textContent = `loading all ${runs.length} runs…`;
      await settleLimited(missing, 4, (p) => ensurePage(p));
      rowCount.textContent = countText();
    }
    if (runs.some((r) => !r)) throw new Error('Some runs could not be loaded; try again.');
    return runs;
  }

  const countText = () => `${runs.length} run${runs.length === 1 ? '' : 's'}`;

  /**
   * Reads the first page and the number of runs the filter matches, and paints; further pages
   * load as their rows come into view. Group-by and sorting by a computed column need every run.
   */
  async function load() {
    const gen = ++loadGen;
    inFlight.clear();
    askedColumns = wantedColumns();
    filterError.textContent = '';
    message.replaceChildren();
    rowCount.textContent = 'loading…';
    let first;
    try {
      first = await fetchPage(0);
    } catch (e) {
      if (gen !== loadGen) return;
      if (e.field === 'filter' || (e.status === 400 && /filter/i.test(e.message))) {
        filterError.textContent = e.message;
      } else if (e.field === 'order_by') {
        message.replaceChildren(errorEl('Cannot sort: ' + e.message));
      } else if (e.status === 404) {
        message.replaceChildren(errorEl(`Project "${project}" not found (${e.message}).`));
      } else {
        message.replaceChildren(errorEl(e));
      }
      rowCount.textContent = '';
      return;
    }
    if (gen !== loadGen) return;
    const page = first.runs || [];
    const total = typeof first.total === 'number' ? first.total : (first.next_page_token ? null : page.length);
    runs = new Array(total === null ? page.length : total);
    page.forEach((r, i) => { runs[i] = r; });
    inFlight.set(0, Promise.resolve());
    if (total === null) {
      // A server that does not count: read every page, as before.
      let token = first.next_page_token;
      while (token) {
        const q = new URLSearchParams({ limit: String(PAGE_LIMIT), page_token: token });
        if (askedColumns !== null) q.set('columns', askedColumns);
        if (st.filter) q.set('filter', filterQuery(st.filter));
        if (st.sortKey && !CLIENT_SORTS[st.sortKey]) q.set('order_by', `${st.sortKey} ${st.sortDir}`);
        const res = await api(`/projects/${enc(project)}/runs?${q}`);
        if (gen !== loadGen) return;
        runs.push(...(res.runs || []));
        token = res.next_page_token || null;
      }
    }
    if (st.groupBy || CLIENT_SORTS[st.sortKey]) {
      try { await allRuns(); } catch (e) { message.replaceChildren(errorEl(e)); return; }
      if (gen !== loadGen) return;
    }
    if (CLIENT_SORTS[st.sortKey]) {
      // Computed columns sort here; runs without a value go last either way.
      const dir = st.sortDir === 'asc' ? 1 : -1;
      const value = CLIENT_SORTS[st.sortKey];
      runs.sort((a, b) => {
        const [x, y] = [value(a), value(b)];
        if (x === null || y === null) return (x === null) - (y === null);
        return (x - y) * dir;
      });
    }
    if (!runs.some((r) => !r)) {
      const ids = new Set(runs.map((r) => r.id));
      for (const id of [...st.selected]) if (!ids.has(id)) st.selected.delete(id);
    }
    rowCount.textContent = countText();
    if (!runs.length) message.replaceChildren(el('p', { class: 'muted' }, st.filter ? 'No runs match this filter.' : 'No runs in this project.'));
    discoverColumns();
    buildItems();
    renderHeader();
    updateCompareBtn();
    scroller.scrollTop = 0;
    renderRows();
    followRunning(gen);
  }

  /** While rows of running runs are loaded, re-reads them (and only them) every LIVE_MS and
   * redraws the rows when any changed: their status, duration, metrics and cost go on. */
  let liveTimer = null;
  function followRunning(gen) {
    clearTimeout(liveTimer);
    liveTimer = setTimeout(async () => {
      if (gen !== loadGen) return;
      const ids = loadedRuns().filter((r) => r.status === 'running').map((r) => r.id).slice(0, LIVE_ROWS_MAX);
      if (ids.length) {
        try {
          const q = new URLSearchParams({ limit: String(ids.length), filter: `id in (${ids.map((id) => `'${id}'`).join(', ')})` });
          if (askedColumns !== null) q.set('columns', askedColumns);
          const res = await api(`/projects/${enc(project)}/runs?${q}`);
          if (gen !== loadGen) return;
          const fresh = new Map((res.runs || []).map((r) => [r.id, r]));
          let changed = false;
          runs.forEach((r, i) => {
            const now = r && fresh.get(r.id);
            if (now && JSON.stringify(now) !== JSON.stringify(r)) { runs[i] = now; changed = true; }
          });
          // New values may need more decimals than the columns' formats had.
          if (changed) { discoverColumns(); if (st.groupBy) buildItems(); renderHeader(); renderRows(); }
        } catch (e) { /* the next turn tries again */ }
      }
      // Durations of running runs grow: their rows are redrawn each turn.
      if (gen === loadGen) { if (ids.length) renderRows(); followRunning(gen); }
    }, LIVE_MS);
  }

  updateCompareBtn();
  return {
    node,
    title: project,
    mounted: load,
    cleanup: () => { loadGen++; clearTimeout(liveTimer); window.removeEventListener('resize', scheduleRows); },
  };
}

/** Asks a running run to stop (its processes see it with their next heartbeat). */
function stopButton(run) {
  const button = el('button', {
    type: 'button', class: 'danger small', 'data-testid': 'row-stop',
    title: "ask the run's processes to stop: each sees it with its next heartbeat, and the run ends killed",
  }, 'Stop');
  button.addEventListener('click', async (e) => {
    e.stopPropagation();
    if (!confirm(`Stop run ${run.name || run.id}? Its processes stop with their next heartbeat.`)) return;
    try {
      await api(`/runs/${enc(run.id)}/stop`, { body: { reason: 'from the runs table' } });
      button.textContent = 'Stopping…';
      button.disabled = true;
    } catch (err) { button.title = err.message; button.textContent = 'Stop failed'; }
  });
  return button;
}
