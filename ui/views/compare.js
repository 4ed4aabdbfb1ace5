/* #/compare/NAME/ID,ID,… or #/compare/NAME?filter=… a comparison of runs: the legend, metric
 * charts (above COMPARE_LINES_MAX runs, groups of runs), parallel coordinates, the differences in
 * params, code and environment, the system charts (a chart per metric, collapsed), the
 * media panels (the runs side by side at a step: histograms, two runs' tables, text diffed
 * against the first run's on request) and the cost panel. */

import { chartControls, chartSettings, mountCharts, runLegend, seriesState } from '../charts.js';
import { collapsedSection, compareSystemCharts } from '../system-charts.js';
import { autoWorkspace, checkWorkspace, decodeWorkspace, encodeWorkspace, mountWorkspace, WORKSPACE_VIEW } from '../workspace.js';
import { enc, setHashQuery, tableHref } from '../lib/address.js';
import { api, settleLimited } from '../lib/api.js';
import { X_MODES } from '../lib/chart-axes.js';
import { colorLines, hashColor, runColor } from '../lib/colors.js';
import { el, errorEl } from '../lib/dom.js';
import { fmtValue } from '../lib/format.js';
import { mediaKeys, mountMediaPanels } from '../lib/media.js';
import { parallelCoords, PARCOORDS_MAX } from '../lib/parcoords.js';
import { COMPARE_LINES_MAX, groupValue, isCostKey, isSystemKey } from '../lib/runs.js';
import { costPanel } from './cost-panel.js';

/** Run ids per search when loading runs by id (the filter `id IN (…)` stays under its length limit). */
const IDS_PER_SEARCH = 300;

/** Every run a search answers, page by page. */
async function searchAll(body, onProgress) {
  const runs = [];
  let token = null;
  do {
    const res = await api('/runs/search', { body: { ...body, limit: 1000, ...(token ? { page_token: token } : {}) } });
    runs.push(...(res.runs || []));
    token = res.next_page_token || null;
    if (onProgress) onProgress(runs.length);
  } while (token);
  return runs;
}

/** The runs with these ids, in this order; ids not found are reported. Up to COMPARE_LINES_MAX runs
 * are read one by one, with their metadata (code, environment) for the diff; more in a few searches. */
async function runsByIds(project, ids, onProgress) {
  const found = new Map();
  if (ids.length <= COMPARE_LINES_MAX) {
    const got = await settleLimited(ids, 6, (id) => api('/runs/' + enc(id)));
    got.forEach((r) => { if (r.status === 'fulfilled') found.set(r.value.id, r.value); });
    return { runs: ids.filter((id) => found.has(id)).map((id) => found.get(id)), missing: ids.filter((id) => !found.has(id)) };
  }
  for (let i = 0; i < ids.length; i += IDS_PER_SEARCH) {
    const chunk = ids.slice(i, i + IDS_PER_SEARCH);
    const filter = `id IN (${chunk.map((id) => `'${id.replace(/'/g, "''")}'`).join(', ')})`;
    for (const r of await searchAll({ project, filter })) found.set(r.id, r);
    if (onProgress) onProgress(found.size);
  }
  return { runs: ids.filter((id) => found.has(id)).map((id) => found.get(id)), missing: ids.filter((id) => !found.has(id)) };
}

/** Runs in groups by a group-by choice (see the runs table), or by their run group, or all together. */
function groupRuns(runs, by) {
  if (!by && runs.some((r) => r.group)) by = 'group';
  const groups = new Map();
  for (const r of runs) {
    const v = by ? groupValue(r, by) : '';
    const label = by ? (v === undefined || v === null || v === '' ? '(none)' : fmtValue(v)) : 'all runs';
    if (!groups.has(label)) groups.set(label, []);
    groups.get(label).push(r);
  }
  return { by, groups: [...groups.entries()].sort(([a], [b]) => a.localeCompare(b, undefined, { numeric: true })) };
}

/**
 * Compares runs: by id (`#/compare/NAME/id,id,…`) or every run a filter finds
 * (`#/compare/NAME?filter=…&group=…`). Up to COMPARE_LINES_MAX runs are drawn one line each;
 * more are drawn as groups. Chart settings live in the address too (x, smooth, robust, hide, q).
 */
export function compareView(project, ids, params) {
  params = params || new URLSearchParams();
  const byFilter = !ids.length;
  const filter = params.get('filter') || '';
  const groupBy = params.get('group') || '';
  const status = el('p', { class: 'muted', 'data-testid': 'compare-status' }, byFilter ? 'Loading runs…' : `Loading ${ids.length} runs…`);
  const body = el('div', {}, status);
  const title = el('h1', {}, byFilter ? 'Compare runs' : `Compare ${ids.length} run${ids.length === 1 ? '' : 's'}`);
  const node = el('div', {},
    el('div', { class: 'breadcrumb' }, el('a', { href: '#/' }, 'Projects'), ' / ',
      el('a', { href: tableHref(project) }, project), ' / '),
    title, body);
  const mounted = [];
  let alive = true;

  async function load() {
    let runs, missing = [];
    const progress = (n) => { status.textContent = `Loading runs… ${n}`; };
    if (byFilter) runs = await searchAll({ project, filter }, progress);
    else ({ runs, missing } = await runsByIds(project, ids, progress));
    if (!alive) return;
    body.replaceChildren();
    title.textContent = `Compare ${runs.length} run${runs.length === 1 ? '' : 's'}` + (byFilter && filter ? ` matching ${filter}` : '');
    document.title = `Compare ${runs.length} runs · ${project} · trainlog`;
    if (missing.length) body.append(el('div', { class: 'error' }, `${missing.length} run${missing.length === 1 ? ' was' : 's were'} not found: ${missing.slice(0, 10).join(', ')}${missing.length > 10 ? ', …' : ''}`));
    if (!runs.length) { body.append(el('p', { class: 'muted' }, 'No runs to compare.')); return; }

    const grouped = runs.length > COMPARE_LINES_MAX;
    let series;
    if (grouped) {
      const { by, groups } = groupRuns(runs, groupBy);
      series = groups.map(([label, members]) => ({
        run_id: 'group:' + label, name: `${label} (${members.length})`, color: hashColor('group:' + label), members: members.map((r) => r.id),
      }));
      body.append(el('p', { class: 'note', 'data-testid': 'grouped-note' },
        `${runs.length} runs are more than ${COMPARE_LINES_MAX} lines can show: each chart draws ${series.length === 1 ? 'their' : 'each group\'s'} mean, with the min–max band, ` +
        (by ? `grouped by ${by}` : 'as one group') + '. Group the runs table to choose the groups.'));
    } else {
      series = runs.map((r) => ({ run_id: r.id, name: r.name || r.id, color: runColor(r), start_time: r.start_time }));
    }
    colorLines(series);
    const keys = [...new Set(runs.flatMap((r) => Object.keys(r.summary || {})))].sort();
    const metricKeys = keys.filter((k) => !isSystemKey(k) && !isCostKey(k));
    const systemKeys = keys.filter(isSystemKey);
    const shown = seriesState();
    (params.get('hide') || '').split(',').filter(Boolean).forEach((id) => shown.hidden.add(id));
    const initial = {
      xMode: grouped ? 'step' : (X_MODES[params.get('x')] ? params.get('x') : 'step'),
      smoothing: Math.min(0.99, Math.max(0, Number(params.get('smooth')) || 0)),
      robust: params.get('robust') === '1',
      stepOnly: grouped,
      search: params.get('q') || '',
    };
    const settings = chartSettings(initial, shown);
    const systemSettings = chartSettings({ ...initial, xMode: grouped ? 'step' : 'relative' }, shown);
    // The panels a person arranged (null: automatic): from the address, else the project's workspace.
    let ws = grouped ? null : await initialWorkspace(params);
    if (!alive) return;
    const syncUrl = () => setHashQuery({
      filter: byFilter ? filter : '', group: byFilter ? groupBy : '',
      x: settings.xMode !== 'step' ? settings.xMode : '', smooth: settings.smoothing || '', robust: settings.robust ? '1' : '',
      hide: [...shown.hidden].join(','), q: settings.search || '', ws: ws ? encodeWorkspace(ws) : '',
    });
    settings.listeners.add(syncUrl);
    shown.listeners.add((what) => { if (what === 'hidden') syncUrl(); });

    const chartsEl = el('div', { 'data-testid': 'metric-charts' });
    const system = collapsedSection('System', 'system-section', () => {
      if (!systemKeys.length) return { node: el('p', { class: 'muted' }, 'These runs recorded no system metrics.'), refresh() {}, destroy() {} };
      const charts = compareSystemCharts(runs, series, systemKeys, systemSettings);
      return { ...charts, node: el('div', { 'data-testid': 'system-panel' }, chartControls(systemSettings), charts.node) };
    });
    mounted.push(system);
    const mediaEl = el('div', { 'data-testid': 'media-section' }, el('p', { class: 'muted' }, 'Loading media…'));
    const upTo = (n, what) => el('p', { class: 'muted' }, `Shown for up to ${n} runs; these are ${runs.length}. ${what}`);
    body.append(runLegend(series, shown),
      el('h2', {}, 'Metrics'),
      metricKeys.length ? chartsEl : el('p', { class: 'muted' }, 'These runs have no metrics.'),
      el('h2', {}, 'Media'),
      grouped ? upTo(COMPARE_LINES_MAX, 'Narrow the filter to see their media side by side.') : mediaEl,
      system.node,
      el('h2', {}, 'Parallel coordinates'),
      runs.length <= PARCOORDS_MAX ? parallelCoords(runs, metricKeys) : upTo(PARCOORDS_MAX, 'Narrow the filter to see them.'),
      el('h2', {}, 'Differences'),
      grouped ? upTo(COMPARE_LINES_MAX, 'Narrow the filter to see how they differ.') : diffTable(runs, series),
      el('h2', {}, 'Cost'),
      grouped ? upTo(COMPARE_LINES_MAX, '') : costPanel(runs, series, metricKeys));
    const paramKeys = [...new Set(runs.flatMap((r) => Object.keys(r.params || {})))].sort();
    let metricCharts = null;
    const showMetrics = () => {
      if (metricCharts) metricCharts.destroy();
      const holder = el('div');
      if (ws) {
        chartsEl.replaceChildren(holder);
        metricCharts = mountWorkspace(holder, {
          project, ws, keys: metricKeys, params: paramKeys, runs, series, shown, robust: settings.robust,
          onChange: (next) => { ws = next; syncUrl(); },
        });
      } else {
        const arrange = el('button', { type: 'button', 'data-testid': 'arrange-panels', title: 'add, remove, resize and move panels; give each its own x-axis, smoothing and range',
          onclick: () => { ws = autoWorkspace(metricKeys); syncUrl(); showMetrics(); } }, 'Arrange panels');
        chartsEl.replaceChildren(el('div', { class: 'toolbar' }, chartControls(settings), arrange), holder);
        metricCharts = mountCharts(holder, metricKeys, series, settings, settings.search);
      }
    };
    if (metricKeys.length) { showMetrics(); mounted.push({ refresh: () => metricCharts.refresh(), destroy: () => metricCharts.destroy() }); }
    if (!grouped) mountMedia(mediaEl, series);
  }

  /** The panels of the address (`ws=`), else the project's saved workspace; null for automatic. */
  async function initialWorkspace(q) {
    if (q.get('ws')) return decodeWorkspace(q.get('ws'));
    try {
      // Asked for only when the project has one: a comparison makes no failing request.
      const { views } = await api(`/projects/${enc(project)}/views`);
      if (!(views || []).some((v) => v.name === WORKSPACE_VIEW)) return null;
      const view = await api(`/projects/${enc(project)}/views/${enc(WORKSPACE_VIEW)}`);
      return checkWorkspace((view.state || {}).panels);
    } catch (e) {
      return null;
    }
  }

  /** The media panels of the runs: a panel per key any of them logged, a column per run. */
  async function mountMedia(container, series) {
    let keys;
    try {
      keys = await mediaKeys(series.map((s) => ({ id: s.run_id, name: s.name, color: s.color })));
    } catch (e) {
      if (alive) container.replaceChildren(errorEl('Could not load media: ' + e.message));
      return;
    }
    if (!alive) return;
    if (!keys.length) { container.replaceChildren(el('p', { class: 'muted' }, 'These runs logged no media.')); return; }
    mounted.push(mountMediaPanels(container, keys, { sync: true, labelled: true }));
  }
  load().catch((e) => { if (alive) body.replaceChildren(errorEl(e)); });
  return { node, title: `Compare · ${project}`, cleanup: () => { alive = false; mounted.forEach((m) => m.destroy()); } };
}

/** The rows a diff table compares: params, tags, code version, environment, python and packages. */
function diffRows(runs) {
  const rows = [];
  const keysOf = (get) => [...new Set(runs.flatMap((r) => Object.keys(get(r) || {})))].sort();
  const section = (name, prefix, get) => {
    for (const k of keysOf(get)) rows.push({ section: name, label: prefix + k, vals: runs.map((r) => (get(r) || {})[k]) });
  };
  const md = (r) => r.metadata || {};
  section('params', '', (r) => r.params);
  section('tags', 'tags.', (r) => r.tags);
  section('code', 'code.', (r) => {
    const c = md(r).code;
    if (!c || typeof c !== 'object') return null;
    const { diff, ...rest } = c;
    if (typeof diff === 'string' && diff) rest.diff = `${diff.split('\n').length} lines, ${diffDigest(diff)}`;
    return rest;
  });
  section('environment', 'environment.', (r) => md(r).environment);
  section('python', 'python.', (r) => md(r).python);
  section('packages', 'packages.', (r) => md(r).packages);
  for (const [sec, val] of Object.entries(runs.reduce((acc, r) => Object.assign(acc, md(r)), {}))) {
    if (['code', 'environment', 'python', 'packages'].includes(sec) || val === null || typeof val !== 'object') continue;
    section(sec, sec + '.', (r) => md(r)[sec]);
  }
  return rows;
}

/** A short fingerprint of a text, so two diffs can be told apart in a table cell. */
function diffDigest(text) {
  let h = 2166136261;
  for (let i = 0; i < text.length; i++) { h ^= text.charCodeAt(i); h = Math.imul(h, 16777619); }
  return (h >>> 0).toString(16).padStart(8, '0');
}

/** What differs between the runs (params, tags, code, environment, …), or everything on request. */
function diffTable(runs, series) {
  const rowsAll = diffRows(runs);
  const norm = (v) => (v === undefined ? '\u0000missing' : JSON.stringify(v));
  for (const row of rowsAll) row.differs = new Set(row.vals.map(norm)).size > 1;

  const showAll = el('input', { type: 'checkbox', 'data-testid': 'diff-show-all' });
  const wrap = el('div', { class: 'diff-wrap' });
  function render() {
    const rows = showAll.checked ? rowsAll : rowsAll.filter((r) => r.differs);
    let lastSection = null;
    const body = [];
    for (const r of rows) {
      if (r.section !== lastSection) {
        lastSection = r.section;
        body.push(el('tr', { class: 'diff-section' }, el('th', { colspan: String(series.length + 1) }, r.section)));
      }
      body.push(el('tr', {},
        el('td', { class: 'mono' }, r.label),
        r.vals.map((v) => el('td', r.differs ? { class: 'diff', 'data-testid': 'diff-cell' } : {},
          v === undefined ? el('span', { class: 'muted' }, '—') : fmtValue(v)))));
    }
    const table = el('table', { class: 'list diff fit fixed', 'data-testid': 'diff-table' },
      el('thead', {}, el('tr', {}, el('th', {}, 'key'),
        series.map((s) => el('th', {}, el('span', { class: 'swatch', style: `display:inline-block;width:10px;height:10px;margin-right:4px;background:${s.color}` }), s.name)))),
      el('tbody', {}, body.length ? body
        : el('tr', {}, el('td', { colspan: String(series.length + 1), class: 'muted' },
          rowsAll.length ? 'Params, config, code and environment are identical.' : 'Nothing recorded to compare.'))));
    wrap.replaceChildren(table);
  }
  showAll.addEventListener('change', render);
  render();
  return el('div', {}, el('label', {}, showAll, ' show all keys (not only those that differ)'), wrap);
}
