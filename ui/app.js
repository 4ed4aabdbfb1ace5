/* trainlog web UI: a hash-routed single page (no build step, no dependencies).
 * Routes: #/ projects, #/p/NAME runs table, #/compare/NAME/id1,id2 compare,
 * #/run/ID run page, #/models model registry. Talks to the JSON API under /api/v1. */
'use strict';

const API = '/api/v1';
const ROW_H = 28;
const PAGE_LIMIT = 1000;
const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b',
  '#e377c2', '#17becf', '#bcbd22', '#7f7f7f'];

/* ---------- small helpers ---------- */

class ApiError extends Error {
  constructor(status, code, message, field) {
    super(message);
    this.status = status; this.code = code; this.field = field;
  }
}

async function api(path) {
  let res;
  try {
    res = await fetch(API + path, { headers: { Accept: 'application/json' } });
  } catch (e) {
    throw new ApiError(0, 'network', 'Cannot reach the trainlog server (' + e.message + ').');
  }
  let body = null;
  try { body = await res.json(); } catch (e) { /* non-JSON body */ }
  if (!res.ok) {
    const err = body && body.error;
    const msg = err && err.message ? err.message : `HTTP ${res.status} ${res.statusText}`;
    throw new ApiError(res.status, err && err.code, msg, err && err.field);
  }
  if (body === null) throw new ApiError(res.status, 'bad_response', 'The server sent a response that is not JSON.');
  return body;
}

/** el('div', {class: 'x', onclick: f}, child, 'text', ...) */
function el(tag, attrs, ...children) {
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

/** Numbers may arrive as the strings "NaN", "Infinity", "-Infinity". */
function toNum(v) {
  if (typeof v === 'number') return v;
  if (v === 'NaN') return NaN;
  if (v === 'Infinity') return Infinity;
  if (v === '-Infinity') return -Infinity;
  return typeof v === 'string' && v.trim() !== '' ? Number(v) : NaN;
}

function fmtNum(v) {
  if (v === null || v === undefined) return '';
  if (typeof v === 'string') return v;
  if (!Number.isFinite(v)) return String(v);
  if (Number.isInteger(v) && Math.abs(v) < 1e12) return String(v);
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(3);
  return String(Number(v.toPrecision(4)));
}

function fmtValue(v) {
  if (v === null || v === undefined) return '';
  if (typeof v === 'number') return fmtNum(v);
  if (typeof v === 'object') return JSON.stringify(v);
  return String(v);
}

function fmtTime(ms) {
  if (ms === null || ms === undefined) return '';
  const d = new Date(ms);
  return isNaN(d) ? '' : d.toLocaleString();
}

function fmtDuration(ms) {
  if (ms === null || ms === undefined || !Number.isFinite(ms) || ms < 0) return '';
  const s = Math.round(ms / 1000);
  if (s < 60) return s + 's';
  const m = Math.floor(s / 60), h = Math.floor(m / 60), d = Math.floor(h / 24);
  if (d > 0) return `${d}d ${h % 24}h`;
  if (h > 0) return `${h}h ${m % 60}m`;
  return `${m}m ${s % 60}s`;
}

function runDuration(run) {
  if (!run.start_time) return null;
  const end = run.end_time || (run.status === 'running' ? Date.now() : null);
  return end ? end - run.start_time : null;
}

function statusEl(status) {
  return el('span', { class: 'status status-' + status, text: status || '' });
}

function errorEl(err) {
  return el('p', { class: 'error' }, err instanceof Error ? err.message : String(err));
}

const enc = encodeURIComponent;

/* ---------- router ---------- */

let currentCleanup = null;

function route() {
  if (currentCleanup) { currentCleanup(); currentCleanup = null; }
  const app = document.getElementById('app');
  app.replaceChildren();
  const [path, query] = location.hash.replace(/^#\/?/, '').split('?');
  const params = new URLSearchParams(query || '');
  const parts = path.split('/').map((p) => {
    try { return decodeURIComponent(p); } catch (e) { return p; }
  });
  const [head, a, b] = parts;
  let view;
  if (!head) view = projectsView();
  else if (head === 'p' && a) view = runsView(a, params.get('filter'));
  else if (head === 'compare' && a && b) view = compareView(a, b.split(',').filter(Boolean));
  else if (head === 'run' && a) view = runView(a);
  else if (head === 'models') view = modelsView();
  else view = { node: el('p', { class: 'error' }, 'Unknown page: ' + location.hash) };
  app.append(view.node);
  if (view.mounted) view.mounted();
  currentCleanup = view.cleanup || null;
}

window.addEventListener('hashchange', route);
window.addEventListener('DOMContentLoaded', route);

/* ---------- #/ projects ---------- */

function projectsView() {
  const body = el('div', {}, el('p', { class: 'muted' }, 'Loading projects…'));
  const node = el('div', {}, el('h1', {}, 'Projects'), body);
  api('/projects').then((res) => {
    const projects = res.projects || [];
    if (!projects.length) {
      body.replaceChildren(el('p', { class: 'muted' }, 'No projects yet. Log a run to create one.'));
      return;
    }
    body.replaceChildren(el('table', { class: 'list', 'data-testid': 'projects-list' },
      el('thead', {}, el('tr', {}, el('th', {}, 'Project'), el('th', {}, 'Runs'),
        el('th', {}, 'Description'), el('th', {}, 'Created'))),
      el('tbody', {}, projects.map((p) => el('tr', {},
        el('td', {}, el('a', { href: '#/p/' + enc(p.name) }, p.name)),
        el('td', { class: 'num' }, String(p.run_count ?? '')),
        el('td', {}, p.description || ''),
        el('td', { class: 'muted' }, fmtTime(p.created_time)))))));
  }).catch((e) => body.replaceChildren(errorEl(e)));
  return { node };
}

/* ---------- #/p/NAME runs table ---------- */

// Per-project UI state kept while the page is open (filter, sort, selection).
const runsState = new Map();

function loadHiddenCols(project) {
  try { return new Set(JSON.parse(localStorage.getItem('trainlog.hiddenCols.' + project) || '[]')); }
  catch (e) { return new Set(); }
}
function saveHiddenCols(project, hidden) {
  try { localStorage.setItem('trainlog.hiddenCols.' + project, JSON.stringify([...hidden])); } catch (e) { /* ignore */ }
}

function runsView(project, initialFilter) {
  if (!runsState.has(project)) {
    runsState.set(project, { filter: '', sortKey: null, sortDir: 'asc', selected: new Set() });
  }
  const st = runsState.get(project);
  if (initialFilter !== null && initialFilter !== undefined) st.filter = initialFilter; // #/p/NAME?filter=...
  const hidden = loadHiddenCols(project);
  let runs = [];
  let columns = [];
  let loadGen = 0;
  let rafPending = false;

  const filterInput = el('input', {
    type: 'text', class: 'filter', 'data-testid': 'filter-input', spellcheck: 'false',
    placeholder: "filter, e.g. metrics.val_loss < 0.3 and params.lr = 0.001 and status = 'finished'",
  });
  filterInput.value = st.filter;
  filterInput.addEventListener('keydown', (e) => { if (e.key === 'Enter') applyFilter(); });
  const filterError = el('div', { class: 'filter-error', 'data-testid': 'filter-error' });
  const rowCount = el('span', { class: 'row-count', 'data-testid': 'row-count' });
  const compareBtn = el('button', { class: 'primary', 'data-testid': 'compare-button', onclick: () => {
    if (!st.selected.size) return;
    location.hash = '#/compare/' + enc(project) + '/' + [...st.selected].map(enc).join(',');
  } });
  const colMenu = el('div', { class: 'menu' });
  const colDetails = el('details', { class: 'columns' }, el('summary', {}, 'Columns ▾'), colMenu);
  const message = el('div', {});
  const thead = el('div', { class: 'thead' });
  const tbody = el('div', { class: 'tbody' });
  const scroller = el('div', { class: 'table-scroll', 'data-testid': 'runs-table' }, thead, tbody);
  scroller.addEventListener('scroll', scheduleRows, { passive: true });
  window.addEventListener('resize', scheduleRows);

  const node = el('div', {},
    el('div', { class: 'breadcrumb' }, el('a', { href: '#/' }, 'Projects'), ' / '),
    el('h1', {}, project),
    el('div', { class: 'toolbar' },
      filterInput,
      el('button', { onclick: applyFilter }, 'Apply'),
      el('button', { onclick: () => { filterInput.value = ''; applyFilter(); } }, 'Clear'),
      compareBtn, colDetails, rowCount),
    filterError, message, scroller);

  function applyFilter() {
    st.filter = filterInput.value.trim();
    load();
  }

  function updateCompareBtn() {
    compareBtn.disabled = st.selected.size === 0;
    compareBtn.textContent = st.selected.size ? `Compare (${st.selected.size})` : 'Compare';
  }

  function discoverColumns() {
    const params = new Set(), metrics = new Set();
    for (const r of runs) {
      for (const k in (r.params || {})) params.add(k);
      for (const k in (r.summary || {})) metrics.add(k);
    }
    const base = [
      { id: 'sel', label: '', width: 34 },
      { id: 'name', label: 'name', sort: 'name', width: 200 },
      { id: 'status', label: 'status', sort: 'status', width: 90 },
      { id: 'duration', label: 'duration', sort: 'duration', width: 90, num: true },
      { id: 'user', label: 'user', width: 100 },
      { id: 'tags', label: 'tags', width: 160 },
    ];
    const p = [...params].sort().map((k) => ({ id: 'params.' + k, key: k, group: 'param', label: k, sort: 'params.' + k, width: 110 }));
    const m = [...metrics].sort().map((k) => ({ id: 'metrics.' + k, key: k, group: 'metric', label: k, sort: 'metrics.' + k, width: 120, num: true }));
    const all = base.concat(p, m);
    buildColumnMenu(all);
    columns = all.filter((c) => !hidden.has(c.id));
  }

  function buildColumnMenu(all) {
    colMenu.replaceChildren(...all.filter((c) => c.id !== 'sel' && c.id !== 'name').map((c) => {
      const cb = el('input', { type: 'checkbox' });
      cb.checked = !hidden.has(c.id);
      cb.addEventListener('change', () => {
        if (cb.checked) hidden.delete(c.id); else hidden.add(c.id);
        saveHiddenCols(project, hidden);
        discoverColumns(); renderHeader(); renderRows();
      });
      return el('label', {}, cb, ' ', c.group ? `${c.group}s.${c.label}` : c.label);
    }));
  }

  function gridTemplate() { return columns.map((c) => c.width + 'px').join(' '); }
  function totalWidth() { return columns.reduce((s, c) => s + c.width, 0); }

  function renderHeader() {
    const tmpl = gridTemplate();
    thead.style.gridTemplateColumns = tmpl;
    thead.style.width = totalWidth() + 'px';
    thead.replaceChildren(...columns.map((c) => {
      if (c.id === 'sel') {
        const all = el('input', { type: 'checkbox', title: 'select all / none' });
        all.checked = runs.length > 0 && runs.every((r) => st.selected.has(r.id));
        all.addEventListener('change', () => {
          if (all.checked) runs.forEach((r) => st.selected.add(r.id)); else st.selected.clear();
          updateCompareBtn(); renderRows();
        });
        return el('div', { class: 'cell sel' }, all);
      }
      let arrow = '';
      if (c.sort && st.sortKey === c.sort) arrow = st.sortDir === 'asc' ? ' ▲' : ' ▼';
      const cell = el('div', {
        class: 'cell' + (c.sort ? ' sortable' : '') + (c.group ? ' grp-' + c.group : '') + (c.num ? ' num' : ''),
        title: (c.group ? c.group + 's.' : '') + c.label + (c.sort ? ' (click to sort)' : ''),
      }, c.label + arrow);
      if (c.sort) cell.addEventListener('click', () => {
        if (st.sortKey === c.sort) st.sortDir = st.sortDir === 'asc' ? 'desc' : 'asc';
        else { st.sortKey = c.sort; st.sortDir = 'asc'; }
        load();
      });
      return cell;
    }));
    tbody.style.width = totalWidth() + 'px';
    tbody.style.height = runs.length * ROW_H + 'px';
  }

  function cellFor(c, r) {
    switch (c.id) {
      case 'sel': {
        const cb = el('input', { type: 'checkbox' });
        cb.checked = st.selected.has(r.id);
        cb.addEventListener('change', () => {
          if (cb.checked) st.selected.add(r.id); else st.selected.delete(r.id);
          updateCompareBtn(); renderRows();
        });
        return el('div', { class: 'cell sel' }, cb);
      }
      case 'name': return el('div', { class: 'cell', title: r.name || r.id },
        el('a', { href: '#/run/' + enc(r.id) }, r.name || r.id));
      case 'status': return el('div', { class: 'cell' }, statusEl(r.status));
      case 'duration': return el('div', { class: 'cell num' }, fmtDuration(runDuration(r)));
      case 'user': return el('div', { class: 'cell', title: r.user || '' }, r.user || '');
      case 'tags': {
        const t = Object.entries(r.tags || {}).map(([k, v]) => `${k}=${fmtValue(v)}`).join(', ');
        return el('div', { class: 'cell tags', title: t }, t);
      }
      default:
        if (c.group === 'param') {
          const v = fmtValue((r.params || {})[c.key]);
          return el('div', { class: 'cell grp-param', title: v }, v);
        } else {
          const s = (r.summary || {})[c.key];
          if (!s) return el('div', { class: 'cell num' });
          return el('div', {
            class: 'cell num',
            title: `last ${fmtNum(s.last)} @ step ${s.last_step}\nmin ${fmtNum(s.min)}\nmax ${fmtNum(s.max)}\ncount ${s.count}`,
          }, fmtNum(s.last));
        }
    }
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
    const last = Math.min(runs.length, Math.ceil((top + h) / ROW_H) + 8);
    const tmpl = gridTemplate();
    const width = totalWidth() + 'px';
    const rows = [];
    for (let i = first; i < last; i++) {
      const r = runs[i];
      const row = el('div', {
        class: 'trow' + (st.selected.has(r.id) ? ' selected' : ''),
        'data-testid': 'run-row', 'data-run-id': r.id,
        style: `top:${i * ROW_H}px;width:${width};grid-template-columns:${tmpl}`,
      }, columns.map((c) => cellFor(c, r)));
      rows.push(row);
    }
    tbody.replaceChildren(...rows);
  }

  async function load() {
    const gen = ++loadGen;
    filterError.textContent = '';
    message.replaceChildren();
    rowCount.textContent = 'loading…';
    const acc = [];
    let token = null;
    try {
      do {
        const q = new URLSearchParams({ limit: String(PAGE_LIMIT) });
        if (st.filter) q.set('filter', st.filter);
        if (st.sortKey) q.set('order_by', `${st.sortKey} ${st.sortDir}`);
        if (token) q.set('page_token', token);
        const res = await api(`/projects/${enc(project)}/runs?${q}`);
        if (gen !== loadGen) return;
        acc.push(...(res.runs || []));
        token = res.next_page_token || null;
        if (token) rowCount.textContent = `loading… ${acc.length} runs`;
      } while (token);
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
    runs = acc;
    const ids = new Set(runs.map((r) => r.id));
    for (const id of [...st.selected]) if (!ids.has(id)) st.selected.delete(id);
    rowCount.textContent = `${runs.length} run${runs.length === 1 ? '' : 's'}`;
    if (!runs.length) message.replaceChildren(el('p', { class: 'muted' }, st.filter ? 'No runs match this filter.' : 'No runs in this project.'));
    discoverColumns();
    renderHeader();
    updateCompareBtn();
    scroller.scrollTop = 0;
    renderRows();
  }

  updateCompareBtn();
  return {
    node,
    mounted: load,
    cleanup: () => { loadGen++; window.removeEventListener('resize', scheduleRows); },
  };
}

/* ---------- charts (canvas, min/max bands + last line) ---------- */

function niceTicks(lo, hi, n) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / n;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const r = raw / mag;
  const step = (r >= 5 ? 10 : r >= 2 ? 5 : r >= 1 ? 2 : 1) * mag;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
  return out;
}

/**
 * A metric chart for one key and several runs.
 * series: [{run_id, name, color}]. Fetches GET /metrics?key=K&runs=...&buckets=W.
 * Drag to zoom into a step range (re-fetches finer buckets), double-click to reset.
 */
function createChart(key, series, opts = {}) {
  const canvas = el('canvas', { 'data-testid': 'chart', 'data-key': key, 'data-series-count': '0' });
  const msg = el('div', { class: 'chart-msg muted' });
  const logCb = el('input', { type: 'checkbox' });
  const box = el('div', { class: 'chart-box' },
    el('div', { class: 'chart-head' },
      el('span', { class: 'title' }, key),
      el('label', {}, logCb, ' log'),
      el('span', { class: 'hint' }, 'drag to zoom · double-click to reset')),
    canvas, msg);

  const M = { l: 58, r: 12, t: 8, b: 24 };
  let data = [];           // [{color, name, buckets}]
  let range = null;        // [stepMin, stepMax] when zoomed
  let seq = 0;
  let drag = null;         // {x0, x1} in css px
  let view = null;         // last computed scales
  const colorOf = new Map(series.map((s) => [s.run_id, s]));

  logCb.addEventListener('change', draw);

  function size() {
    const w = Math.max(200, canvas.clientWidth || 480);
    const h = canvas.clientHeight || 240;
    return { w, h };
  }

  async function fetchData() {
    const my = ++seq;
    const { w } = size();
    const q = new URLSearchParams({ key, runs: series.map((s) => s.run_id).join(','),
      buckets: String(Math.max(20, Math.round(w - M.l - M.r))) });
    if (range) { q.set('step_min', String(Math.floor(range[0]))); q.set('step_max', String(Math.ceil(range[1]))); }
    msg.textContent = 'loading…';
    try {
      const res = await api('/metrics?' + q);
      if (my !== seq) return;
      data = (res.series || []).map((s) => {
        const meta = colorOf.get(s.run_id) || { name: s.run_id, color: '#888' };
        return { name: meta.name, color: meta.color, buckets: (s.buckets || []).map((b) => ({
          step_min: b.step_min, step_max: b.step_max, min: toNum(b.min), max: toNum(b.max), last: toNum(b.last), count: b.count,
        })) };
      });
      msg.textContent = range ? `steps ${Math.floor(range[0])}–${Math.ceil(range[1])}` : '';
      msg.className = 'chart-msg muted';
    } catch (e) {
      if (my !== seq) return;
      data = [];
      msg.textContent = 'Could not load ' + key + ': ' + e.message;
      msg.className = 'chart-msg error';
    }
    draw();
  }

  function draw() {
    const { w, h } = size();
    const dpr = window.devicePixelRatio || 1;
    if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
      canvas.width = Math.round(w * dpr); canvas.height = Math.round(h * dpr);
    }
    const ctx = canvas.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    ctx.font = '11px system-ui, sans-serif';

    const drawn = data.filter((s) => s.buckets.some((b) => Number.isFinite(b.min) || Number.isFinite(b.max) || Number.isFinite(b.last)));
    canvas.setAttribute('data-series-count', String(drawn.length));
    // What the chart shows, for tests and tools: the largest value drawn, the buckets and the step range.
    let yMax = -Infinity, nBuckets = 0;
    for (const s of drawn) for (const b of s.buckets) { nBuckets++; if (Number.isFinite(b.max) && b.max > yMax) yMax = b.max; }
    canvas.setAttribute('data-y-max', Number.isFinite(yMax) ? String(yMax) : '');
    canvas.setAttribute('data-buckets', String(nBuckets));
    canvas.setAttribute('data-range', range ? `${Math.floor(range[0])}-${Math.ceil(range[1])}` : 'all');
    if (!drawn.length) {
      ctx.fillStyle = '#6b7280';
      ctx.fillText(msg.textContent === 'loading…' ? 'loading…' : 'no data', w / 2 - 20, h / 2);
      view = null;
      return;
    }

    // x domain
    let x0 = Infinity, x1 = -Infinity;
    for (const s of drawn) for (const b of s.buckets) { x0 = Math.min(x0, b.step_min); x1 = Math.max(x1, b.step_max); }
    if (range) { x0 = range[0]; x1 = range[1]; }
    if (!(x1 > x0)) { x0 -= 1; x1 += 1; }

    // y domain (log only uses positive values)
    let log = logCb.checked;
    const ok = (v) => Number.isFinite(v) && (!log || v > 0);
    let y0 = Infinity, y1 = -Infinity;
    const scan = () => {
      for (const s of drawn) for (const b of s.buckets) for (const v of [b.min, b.max, b.last]) {
        if (ok(v)) { y0 = Math.min(y0, v); y1 = Math.max(y1, v); }
      }
    };
    scan();
    if (log && !(y1 >= y0)) { log = false; scan(); msg.textContent = 'no positive values: log scale not possible'; }
    if (!(y1 >= y0)) { y0 = 0; y1 = 1; }
    const T = log ? Math.log10 : (v) => v;
    let ty0 = T(y0), ty1 = T(y1);
    if (ty1 === ty0) { ty0 -= 0.5; ty1 += 0.5; }
    const pad = (ty1 - ty0) * 0.05; ty0 -= pad; ty1 += pad;

    const pw = w - M.l - M.r, ph = h - M.t - M.b;
    const sx = (x) => M.l + ((x - x0) / (x1 - x0)) * pw;
    const sy = (v) => M.t + ph - ((T(v) - ty0) / (ty1 - ty0)) * ph;
    view = { x0, x1, pw };

    // grid + axes
    ctx.strokeStyle = '#e5e7eb'; ctx.fillStyle = '#6b7280'; ctx.lineWidth = 1;
    ctx.textAlign = 'right'; ctx.textBaseline = 'middle';
    let yt;
    if (log) {
      yt = [];
      for (let p = Math.ceil(ty0); p <= Math.floor(ty1); p++) yt.push(Math.pow(10, p));
      if (yt.length < 2) yt = niceTicks(Math.pow(10, ty0), Math.pow(10, ty1), 4).filter((v) => v > 0);
    } else yt = niceTicks(ty0, ty1, 5);
    for (const v of yt) {
      const y = Math.round(sy(v)) + 0.5;
      if (y < M.t - 1 || y > M.t + ph + 1) continue;
      ctx.beginPath(); ctx.moveTo(M.l, y); ctx.lineTo(M.l + pw, y); ctx.stroke();
      ctx.fillText(fmtNum(v), M.l - 4, y);
    }
    ctx.textAlign = 'center'; ctx.textBaseline = 'top';
    for (const v of niceTicks(x0, x1, Math.max(2, Math.floor(pw / 90)))) {
      const x = Math.round(sx(v)) + 0.5;
      ctx.beginPath(); ctx.moveTo(x, M.t); ctx.lineTo(x, M.t + ph); ctx.stroke();
      ctx.fillText(fmtNum(v), x, M.t + ph + 4);
    }
    ctx.strokeStyle = '#9ca3af';
    ctx.strokeRect(M.l + 0.5, M.t + 0.5, pw, ph);

    ctx.save();
    ctx.beginPath(); ctx.rect(M.l, M.t, pw, ph); ctx.clip();
    for (const s of drawn) {
      // min–max band: one rectangle per bucket, at least 1px wide/high so spikes stay visible
      ctx.globalAlpha = 0.25; ctx.fillStyle = s.color;
      for (const b of s.buckets) {
        if (!ok(b.min) || !ok(b.max)) continue;
        const xa = sx(b.step_min), xb = Math.max(sx(b.step_max + 1), xa + 1);
        const ya = sy(b.max), yb = Math.max(sy(b.min), ya + 1);
        ctx.fillRect(xa, ya, xb - xa, yb - ya);
      }
      // last-value line
      ctx.globalAlpha = 1; ctx.strokeStyle = s.color; ctx.lineWidth = 1.5;
      ctx.beginPath();
      let pen = false;
      for (const b of s.buckets) {
        if (!ok(b.last)) { pen = false; continue; }
        const x = sx(b.step_max), y = sy(b.last);
        if (pen) ctx.lineTo(x, y); else { ctx.moveTo(x, y); pen = true; }
      }
      ctx.stroke();
      if (s.buckets.length === 1 && ok(s.buckets[0].last)) {
        ctx.fillStyle = s.color;
        ctx.beginPath(); ctx.arc(sx(s.buckets[0].step_max), sy(s.buckets[0].last), 3, 0, 2 * Math.PI); ctx.fill();
      }
    }
    ctx.restore();

    if (drag) {
      ctx.fillStyle = 'rgba(37,99,235,0.15)';
      const a = Math.min(drag.x0, drag.x1), b = Math.max(drag.x0, drag.x1);
      ctx.fillRect(a, M.t, b - a, ph);
    }
  }

  function stepAt(px) {
    if (!view) return 0;
    const f = Math.min(1, Math.max(0, (px - M.l) / view.pw));
    return view.x0 + f * (view.x1 - view.x0);
  }
  const localX = (e) => e.clientX - canvas.getBoundingClientRect().left;

  canvas.addEventListener('mousedown', (e) => {
    if (!view || e.button !== 0) return;
    drag = { x0: localX(e), x1: localX(e) };
    e.preventDefault();
  });
  const onMove = (e) => { if (drag) { drag.x1 = localX(e); draw(); } };
  const onUp = () => {
    if (!drag) return;
    const d = drag; drag = null;
    if (Math.abs(d.x1 - d.x0) < 5) { draw(); return; }
    let a = stepAt(Math.min(d.x0, d.x1)), b = stepAt(Math.max(d.x0, d.x1));
    if (b - a < 1) b = a + 1;
    range = [a, b];
    fetchData();
  };
  window.addEventListener('mousemove', onMove);
  window.addEventListener('mouseup', onUp);
  canvas.addEventListener('dblclick', () => { range = null; fetchData(); });

  let resizeTimer = null;
  const onResize = () => { clearTimeout(resizeTimer); resizeTimer = setTimeout(draw, 100); };
  window.addEventListener('resize', onResize);

  return {
    node: box,
    start: fetchData,
    destroy: () => {
      seq++;
      window.removeEventListener('mousemove', onMove);
      window.removeEventListener('mouseup', onUp);
      window.removeEventListener('resize', onResize);
    },
  };
}

/** Renders charts for keys into a container already in the DOM; returns a cleanup fn. */
function mountCharts(container, keys, series) {
  const charts = keys.map((k) => createChart(k, series));
  container.replaceChildren(...charts.map((c) => c.node));
  charts.forEach((c) => c.start());
  return () => charts.forEach((c) => c.destroy());
}

function legendEl(series) {
  return el('div', { class: 'legend', 'data-testid': 'legend' }, series.map((s) =>
    el('span', {}, el('span', { class: 'swatch', style: `background:${s.color}` }),
      el('a', { href: '#/run/' + enc(s.run_id) }, s.name))));
}

/* ---------- #/compare/NAME/ids ---------- */

function compareView(project, ids) {
  const body = el('div', {}, el('p', { class: 'muted' }, `Loading ${ids.length} runs…`));
  const node = el('div', {},
    el('div', { class: 'breadcrumb' }, el('a', { href: '#/' }, 'Projects'), ' / ',
      el('a', { href: '#/p/' + enc(project) }, project), ' / '),
    el('h1', {}, `Compare ${ids.length} run${ids.length === 1 ? '' : 's'}`),
    body);
  let cleanupCharts = null;
  let alive = true;

  async function load() {
    const results = await Promise.allSettled(ids.map((id) => api('/runs/' + enc(id))));
    if (!alive) return;
    const runs = [], errors = [];
    results.forEach((r, i) => (r.status === 'fulfilled' ? runs.push(r.value) : errors.push(`${ids[i]}: ${r.reason.message}`)));
    body.replaceChildren();
    if (errors.length) body.append(el('div', { class: 'error' }, errors.map((e) => el('div', {}, e))));
    if (!runs.length) return;

    const series = runs.map((r, i) => ({ run_id: r.id, name: r.name || r.id, color: COLORS[i % COLORS.length] }));
    const keys = [...new Set(runs.flatMap((r) => Object.keys(r.summary || {})))].sort();
    const chartsEl = el('div', { class: 'charts' });
    body.append(legendEl(series),
      el('h2', {}, 'Metrics'),
      keys.length ? chartsEl : el('p', { class: 'muted' }, 'These runs have no metrics.'),
      el('h2', {}, 'Parameters'),
      diffTable(runs, series));
    if (keys.length) cleanupCharts = mountCharts(chartsEl, keys, series);
  }
  load().catch((e) => body.replaceChildren(errorEl(e)));
  return { node, cleanup: () => { alive = false; if (cleanupCharts) cleanupCharts(); } };
}

function diffTable(runs, series) {
  const rowsAll = [];
  const keysOf = (field) => [...new Set(runs.flatMap((r) => Object.keys(r[field] || {})))].sort();
  for (const k of keysOf('params')) rowsAll.push({ label: k, vals: runs.map((r) => (r.params || {})[k]) });
  for (const k of keysOf('tags')) rowsAll.push({ label: 'tags.' + k, vals: runs.map((r) => (r.tags || {})[k]) });
  const norm = (v) => (v === undefined ? '\u0000missing' : JSON.stringify(v));
  for (const row of rowsAll) row.differs = new Set(row.vals.map(norm)).size > 1;

  const showAll = el('input', { type: 'checkbox' });
  const wrap = el('div', { class: 'diff-wrap' });
  function render() {
    const rows = showAll.checked ? rowsAll : rowsAll.filter((r) => r.differs);
    const table = el('table', { class: 'list diff', 'data-testid': 'diff-table' },
      el('thead', {}, el('tr', {}, el('th', {}, 'key'),
        series.map((s) => el('th', {}, el('span', { class: 'swatch', style: `display:inline-block;width:10px;height:10px;margin-right:4px;background:${s.color}` }), s.name)))),
      el('tbody', {}, rows.length ? rows.map((r) => el('tr', {},
        el('td', { class: 'mono' }, r.label),
        r.vals.map((v) => el('td', r.differs ? { class: 'diff', 'data-testid': 'diff-cell' } : {},
          v === undefined ? el('span', { class: 'muted' }, '—') : fmtValue(v)))))
        : el('tr', {}, el('td', { colspan: String(series.length + 1), class: 'muted' },
          rowsAll.length ? 'All parameters are identical.' : 'No parameters.'))));
    wrap.replaceChildren(table);
  }
  showAll.addEventListener('change', render);
  render();
  return el('div', {}, el('label', {}, showAll, ' show all keys (not only those that differ)'), wrap);
}

/* ---------- #/run/ID ---------- */

function kvTable(obj, testid, keepOrder) {
  const entries = Object.entries(obj || {});
  if (!keepOrder) entries.sort(([a], [b]) => a.localeCompare(b));
  if (!entries.length) return el('p', { class: 'muted' }, 'none');
  return el('table', { class: 'kv', 'data-testid': testid || null },
    el('tbody', {}, entries.map(([k, v]) =>
      el('tr', {}, el('th', { class: 'mono' }, k),
        el('td', { class: 'mono' }, typeof v === 'object' && v !== null ? JSON.stringify(v) : fmtValue(v))))));
}

function runView(id) {
  const body = el('div', {}, el('p', { class: 'muted' }, 'Loading run…'));
  const node = el('div', {}, body);
  let cleanupCharts = null;
  let alive = true;

  async function load() {
    let run;
    try {
      run = await api('/runs/' + enc(id));
    } catch (e) {
      if (!alive) return;
      body.replaceChildren(el('h1', { 'data-testid': 'run-title' }, 'Run ' + id),
        errorEl(e.status === 404 ? `Run "${id}" was not found.` : e));
      return;
    }
    const [arts, ckpts] = await Promise.allSettled([
      api(`/runs/${enc(id)}/artifacts`), api(`/runs/${enc(id)}/checkpoints`)]);
    if (!alive) return;

    const summaryKeys = Object.keys(run.summary || {}).sort();
    const chartsEl = el('div', { class: 'charts' });
    const md = run.metadata || {};

    const summary = summaryKeys.length ? el('table', { class: 'list' },
      el('thead', {}, el('tr', {}, ['key', 'last', 'min', 'max', 'last step', 'count'].map((h) => el('th', {}, h)))),
      el('tbody', {}, summaryKeys.map((k) => {
        const s = run.summary[k];
        return el('tr', {}, el('td', { class: 'mono' }, k), el('td', { class: 'num' }, fmtNum(s.last)),
          el('td', { class: 'num' }, fmtNum(s.min)), el('td', { class: 'num' }, fmtNum(s.max)),
          el('td', { class: 'num' }, fmtNum(s.last_step)), el('td', { class: 'num' }, fmtNum(s.count)));
      }))) : el('p', { class: 'muted' }, 'No metrics logged.');

    const metaSections = [];
    if (md.environment) metaSections.push(el('div', {}, el('h3', {}, 'environment'), kvTable(md.environment)));
    if (md.code) {
      const { diff, ...rest } = md.code;
      metaSections.push(el('div', {}, el('h3', {}, 'code'), kvTable(rest),
        diff ? el('pre', { class: 'diff-text', 'data-testid': 'code-diff' }, diff) : null));
    }
    for (const [sec, val] of Object.entries(md)) {
      if (sec === 'environment' || sec === 'code') continue;
      metaSections.push(el('div', {}, el('h3', {}, sec),
        val && typeof val === 'object' && !Array.isArray(val) && Object.values(val).every((v) => typeof v !== 'object' || v === null)
          ? kvTable(val) : el('pre', { class: 'json' }, JSON.stringify(val, null, 2))));
    }

    let artifactsEl;
    if (arts.status === 'rejected') artifactsEl = errorEl('Could not load artifacts: ' + arts.reason.message);
    else if (!(arts.value.artifacts || []).length) artifactsEl = el('p', { class: 'muted' }, 'No artifacts.');
    else artifactsEl = el('table', { class: 'list', 'data-testid': 'artifacts' },
      el('thead', {}, el('tr', {}, el('th', {}, 'path'), el('th', {}, 'size'), el('th', {}, 'sha256'), el('th', {}, 'created'))),
      el('tbody', {}, arts.value.artifacts.map((a) => el('tr', {},
        el('td', {}, el('a', { href: `${API}/runs/${enc(id)}/artifacts/${a.path.split('/').map(enc).join('/')}`, download: '' }, a.path)),
        el('td', { class: 'num' }, fmtBytes(a.size)),
        el('td', { class: 'mono muted', title: a.sha256 || '' }, (a.sha256 || '').slice(0, 12)),
        el('td', { class: 'muted' }, fmtTime(a.created_time))))));

    let ckptEl;
    if (ckpts.status === 'rejected') ckptEl = errorEl('Could not load checkpoints: ' + ckpts.reason.message);
    else if (!(ckpts.value.checkpoints || []).length) ckptEl = el('p', { class: 'muted' }, 'No checkpoints.');
    else ckptEl = el('table', { class: 'list', 'data-testid': 'checkpoints' },
      el('thead', {}, el('tr', {}, el('th', {}, 'name'), el('th', {}, 'step'), el('th', {}, 'files'), el('th', {}, 'metadata'))),
      el('tbody', {}, ckpts.value.checkpoints.map((c) => el('tr', {},
        el('td', {}, c.name), el('td', { class: 'num' }, fmtNum(c.step)),
        el('td', {}, Array.isArray(c.files) ? c.files.map((f) => el('div', {}, el('a', {
          href: `${API}/runs/${enc(id)}/artifacts/${((c.prefix ? c.prefix.replace(/\/$/, '') + '/' : '') + (f.path || f)).split('/').map(enc).join('/')}`,
        }, f.path || f))) : fmtValue(c.files)),
        el('td', { class: 'mono' }, c.metadata ? JSON.stringify(c.metadata) : '')))));

    body.replaceChildren(
      el('div', { class: 'breadcrumb' }, el('a', { href: '#/' }, 'Projects'), ' / ',
        el('a', { href: '#/p/' + enc(run.project) }, run.project), ' / '),
      el('h1', { 'data-testid': 'run-title' }, run.name || run.id, ' ', statusEl(run.status)),
      el('div', { class: 'panel' }, kvTable({
        id: run.id, user: run.user, host: run.host, group: run.group,
        started: fmtTime(run.start_time), ended: fmtTime(run.end_time), duration: fmtDuration(runDuration(run)),
      }, 'run-info', true), run.notes ? el('p', {}, run.notes) : null),
      el('div', { class: 'grid2' },
        el('div', {}, el('h2', {}, 'Parameters'), kvTable(run.params, 'params-table')),
        el('div', {}, el('h2', {}, 'Tags'), kvTable(run.tags, 'tags-table'))),
      el('h2', {}, 'Metrics'),
      summary,
      summaryKeys.length ? chartsEl : null,
      el('h2', {}, 'Metadata'),
      metaSections.length ? el('div', { class: 'grid2' }, metaSections) : el('p', { class: 'muted' }, 'No metadata.'),
      el('h2', {}, 'Artifacts'), artifactsEl,
      el('h2', {}, 'Checkpoints'), ckptEl);
    if (summaryKeys.length) {
      chartsEl.style.marginTop = '12px';
      cleanupCharts = mountCharts(chartsEl, summaryKeys, [{ run_id: run.id, name: run.name || run.id, color: COLORS[0] }]);
    }
  }
  load().catch((e) => body.replaceChildren(errorEl(e)));
  return { node, cleanup: () => { alive = false; if (cleanupCharts) cleanupCharts(); } };
}

function fmtBytes(n) {
  if (typeof n !== 'number') return '';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : String(n)) + ' ' + u[i];
}

/* ---------- #/models ---------- */

function fmtSource(src) {
  if (!src) return '';
  if (typeof src !== 'object') return String(src);
  const bits = [src.kind, src.name, src.step !== undefined && src.step !== null ? `step ${src.step}` : null, src.path];
  return bits.filter((b) => b !== undefined && b !== null && b !== '').join(' · ') || JSON.stringify(src);
}

function modelsView() {
  const body = el('div', { 'data-testid': 'models-list' }, el('p', { class: 'muted' }, 'Loading models…'));
  const node = el('div', {}, el('h1', {}, 'Models'), body);
  api('/models').then((res) => {
    const models = res.models || [];
    if (!models.length) { body.replaceChildren(el('p', { class: 'muted' }, 'No registered models.')); return; }
    body.replaceChildren(...models.map((m) => {
      const versions = el('div', {}, el('p', { class: 'muted' }, 'Loading versions…'));
      api(`/models/${enc(m.name)}/versions`).then((vr) => {
        const vs = vr.versions || [];
        versions.replaceChildren(vs.length ? el('table', { class: 'list' },
          el('thead', {}, el('tr', {}, ['version', 'aliases', 'status', 'run', 'source'].map((h) => el('th', {}, h)))),
          el('tbody', {}, vs.map((v) => el('tr', {},
            el('td', { class: 'num' }, String(v.version)),
            el('td', {}, (v.aliases || []).map((a) => el('span', { class: 'alias' }, a))),
            el('td', {}, v.status || ''),
            el('td', {}, v.run_id ? el('a', { href: '#/run/' + enc(v.run_id) }, v.run_id) : ''),
            el('td', { class: 'mono' }, fmtSource(v.source),
              v.source_available === false ? el('span', { class: 'error' }, ' (unavailable)') : null)))))
          : el('p', { class: 'muted' }, 'No versions.'));
      }).catch((e) => versions.replaceChildren(errorEl(e)));
      return el('div', { class: 'panel model' },
        el('h2', { style: 'margin-top:0' }, m.name,
          el('span', { class: 'muted', style: 'font-weight:normal' }, ` · ${m.version_count ?? '?'} versions, latest v${m.latest_version ?? '?'}`)),
        m.description ? el('p', {}, m.description) : null,
        el('div', {}, Object.entries(m.aliases || {}).map(([a, v]) => el('span', { class: 'alias' }, `${a} → v${v}`))),
        versions);
    }));
  }).catch((e) => body.replaceChildren(errorEl(e)));
  return { node };
}
