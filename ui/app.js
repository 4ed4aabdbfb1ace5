/* trainlog web UI: a hash-routed single page (no build step, no dependencies).
 * Routes: #/ projects, #/p/NAME runs table, #/compare/NAME/id1,id2 compare,
 * #/run/ID run page, #/models model registry, #/sweeps/NAME a project's sweeps, #/sweep/ID a sweep. Talks to the JSON API under /api/v1.
 * Charts live in charts.js. */
'use strict';

const API = '/api/v1';
const ROW_H = 28;
/** Runs per page of the runs table; pages load as their rows scroll into view. */
const PAGE_LIMIT = 500;

/* ---------- small helpers ---------- */

class ApiError extends Error {
  constructor(status, code, message, field) {
    super(message);
    this.status = status; this.code = code; this.field = field;
  }
}

/* ---------- sign-in (a server run with --auth) ---------- */

const KEY_STORAGE = 'trainlog.apiKey';

function storedKey() {
  try { return localStorage.getItem(KEY_STORAGE) || ''; } catch (e) { return ''; }
}

function authHeaders() {
  const key = storedKey();
  return key ? { Authorization: 'Bearer ' + key } : {};
}

/** Calls the JSON API; `body` (an object) makes it a POST unless `method` says otherwise. */
async function api(path, opts = {}) {
  let res;
  const init = { method: opts.method || (opts.body !== undefined ? 'POST' : 'GET'), headers: { Accept: 'application/json', ...authHeaders() } };
  if (opts.body !== undefined) { init.body = JSON.stringify(opts.body); init.headers['Content-Type'] = 'application/json'; }
  try {
    res = await fetch(API + path, init);
  } catch (e) {
    throw new ApiError(0, 'network', 'Cannot reach the trainlog server (' + e.message + ').');
  }
  let body = null;
  try { body = await res.json(); } catch (e) { /* non-JSON body */ }
  if (!res.ok) {
    const err = body && body.error;
    const msg = err && err.message ? err.message : `HTTP ${res.status} ${res.statusText}`;
    // The key was revoked, or the server started checking keys: ask for one.
    if (res.status === 401 && !signingIn) showSignIn(storedKey() ? 'Your API key was refused; sign in again.' : '');
    throw new ApiError(res.status, err && err.code, msg, err && err.field);
  }
  if (body === null && res.status === 204) return {};
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

/* ---------- state in the URL ---------- */

/** The query part of the current hash route (`#/p/NAME?filter=…`). */
function hashQuery() {
  const i = location.hash.indexOf('?');
  return new URLSearchParams(i < 0 ? '' : location.hash.slice(i + 1));
}

/** Puts a view's state in the hash's query, in place (no new history entry, no re-render), so a
 * reload or a copied link shows the same view. Empty values are left out. */
function setHashQuery(entries) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(entries)) if (v !== '' && v !== null && v !== undefined && v !== false) q.set(k, String(v));
  const path = location.hash.split('?')[0] || '#/';
  const text = q.toString();
  history.replaceState(history.state, '', text ? `${path}?${text}` : path);
}

/** The last address of each project's runs table, so links back to it keep its filter and sort. */
const tableAddress = new Map();
function tableHref(project) { return tableAddress.get(project) || '#/p/' + enc(project); }

/** A download link; with a key, the bytes are fetched with it (a plain link cannot send one). */
function artifactLink(url, name) {
  return el('a', { href: url, download: '', onclick: async (e) => {
    if (!storedKey()) return;
    e.preventDefault();
    const res = await fetch(url, { headers: authHeaders() });
    if (!res.ok) { alert(`Downloading ${name} failed: HTTP ${res.status}`); return; }
    const blob = URL.createObjectURL(await res.blob());
    const a = el('a', { href: blob, download: name.split('/').pop() });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(blob), 10000);
  } }, name);
}

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
  else if (head === 'p' && a) view = runsView(a, params);
  else if (head === 'compare' && a) view = compareView(a, (b || '').split(',').filter(Boolean), params);
  else if (head === 'run' && a) view = runView(a);
  else if (head === 'models') view = modelsView();
  else if (head === 'sweeps' && a) view = sweepsView(a);
  else if (head === 'sweep' && a) view = sweepView(a);
  else view = { node: el('p', { class: 'error' }, 'Unknown page: ' + location.hash) };
  app.append(view.node);
  const titles = { models: 'Models', sweeps: `Sweeps · ${a}`, sweep: 'Sweep', run: 'Run' };
  document.title = (view.title || titles[head] || 'Projects') + ' · trainlog';
  if (view.mounted) view.mounted();
  currentCleanup = view.cleanup || null;
}

let signingIn = false;

/** Who is calling, from /whoami: {auth, admin, user, default_role}. */
let ME = { auth: false };

/** Whether the signed-in user may change something with this role (`your_role` of a project or model). */
function mayWrite(role) {
  if (!ME.auth || ME.admin) return true;
  const r = role || ME.default_role;
  return r === 'write' || r === 'admin';
}

/** Whether the signed-in user administers something with this role (deleting for good needs it). */
function mayAdmin(role) {
  if (!ME.auth || ME.admin) return true;
  return (role || ME.default_role) === 'admin';
}

/** Shows who is signed in (with a sign-out button) in the top bar; nothing without --auth. */
function renderWho(me) {
  const who = document.getElementById('who');
  if (!who) return;
  who.replaceChildren();
  if (!me || !me.auth) return;
  who.append(
    el('span', { 'data-testid': 'signed-in-as' }, 'Signed in as ', el('strong', {}, me.user), me.admin ? ' (admin)' : ''),
    el('button', { type: 'button', 'data-testid': 'sign-out', onclick: signOut }, 'Sign out'),
  );
}

function signOut() {
  ME = { auth: true };
  try { localStorage.removeItem(KEY_STORAGE); } catch (e) { /* storage disabled */ }
  renderWho(null);
  showSignIn('Signed out.');
}

/** The sign-in page: one API key, checked against the server, then kept in this browser. */
function showSignIn(message) {
  signingIn = true;
  if (currentCleanup) { currentCleanup(); currentCleanup = null; }
  renderWho(null);
  const input = el('input', { type: 'password', id: 'api-key', 'data-testid': 'api-key', autocomplete: 'off', placeholder: 'tl_…', size: 60 });
  const status = el('p', { class: message ? 'muted' : 'hidden', 'data-testid': 'sign-in-message' }, message || '');
  const form = el('form', { class: 'sign-in', 'data-testid': 'sign-in' },
    el('h1', {}, 'Sign in'),
    el('p', {}, 'This server needs an API key. Make one with ', el('code', {}, 'trainlog keys create USER'),
      ' (or ask an admin); it is kept in this browser until you sign out.'),
    el('label', { for: 'api-key' }, 'API key '), input, ' ',
    el('button', { type: 'submit', 'data-testid': 'sign-in-button' }, 'Sign in'),
    status);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const key = input.value.trim();
    if (!key) return;
    const res = await fetch(API + '/whoami', { headers: { Accept: 'application/json', Authorization: 'Bearer ' + key } })
      .catch(() => null);
    if (!res || !res.ok) {
      status.className = 'error';
      status.textContent = res ? 'That key was refused: unknown, revoked, or for another server.' : 'Cannot reach the trainlog server.';
      return;
    }
    try { localStorage.setItem(KEY_STORAGE, key); } catch (err) { /* storage disabled: this page only */ }
    signingIn = false;
    ME = await res.json();
    renderWho(ME);
    route();
  });
  document.getElementById('app').replaceChildren(form);
  input.focus();
}

/** Asks who is calling: a server without --auth answers at once; one with it needs a key. */
async function start() {
  let res = null;
  try {
    res = await fetch(API + '/whoami', { headers: { Accept: 'application/json', ...authHeaders() } });
  } catch (e) { /* the views report an unreachable server */ }
  if (res && res.status === 401) {
    showSignIn(storedKey() ? 'Your API key was refused; sign in again.' : '');
    return;
  }
  if (res && res.ok) { ME = await res.json(); renderWho(ME); }
  route();
}

window.addEventListener('hashchange', () => { if (!signingIn) route(); });
window.addEventListener('DOMContentLoaded', start);

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

/** Column choices per project: ids explicitly hidden and shown (over the defaults), their order and widths. */
function columnPrefsFrom(v) {
  const ok = v && typeof v === 'object';
  return {
    hidden: new Set(ok && Array.isArray(v.hidden) ? v.hidden : []),
    shown: new Set(ok && Array.isArray(v.shown) ? v.shown : []),
    order: ok && Array.isArray(v.order) ? v.order.filter((x) => typeof x === 'string') : [],
    widths: ok && v.widths && typeof v.widths === 'object' ? v.widths : {},
  };
}
function columnPrefsJson(prefs) {
  return { hidden: [...prefs.hidden], shown: [...prefs.shown], order: prefs.order, widths: prefs.widths };
}
function loadColumnPrefs(project) {
  try {
    return columnPrefsFrom(JSON.parse(localStorage.getItem('trainlog.columns.' + project) || 'null'));
  } catch (e) { return columnPrefsFrom(null); }
}
function saveColumnPrefs(project, prefs) {
  try {
    localStorage.setItem('trainlog.columns.' + project, JSON.stringify(columnPrefsJson(prefs)));
  } catch (e) { /* storage full or disabled */ }
}

/**
 * One way of writing every number of a table column, so they line up: integers as integers;
 * exponents for all when any is below 1e-3 or from 1e6 up; otherwise the decimals the most
 * precise value needs for 4 significant digits (at most 6).
 */
function columnFormatter(values) {
  const finite = values.filter((v) => typeof v === 'number' && Number.isFinite(v));
  if (!finite.length) return fmtNum;
  if (finite.every(Number.isInteger) && finite.every((v) => Math.abs(v) < 1e12)) return (v) => (Number.isFinite(v) ? String(v) : fmtNum(v));
  const nonzero = finite.filter((v) => v !== 0).map(Math.abs);
  const lo = nonzero.length ? Math.min(...nonzero) : 0, hi = nonzero.length ? Math.max(...nonzero) : 0;
  const decimalsOf = (text) => { const i = text.indexOf('.'); return i < 0 ? 0 : text.length - i - 1; };
  if (lo && (lo < 1e-3 || hi >= 1e6)) {
    const digits = Math.min(3, Math.max(...finite.map((v) => decimalsOf(String(Number(Math.abs(v).toExponential(3).split('e')[0]))))));
    return (v) => (Number.isFinite(v) ? v.toExponential(digits) : fmtNum(v));
  }
  const dec = Math.min(6, Math.max(0, ...finite.map((v) => decimalsOf(String(Number(v.toPrecision(4)))))));
  return (v) => (Number.isFinite(v) ? v.toFixed(dec) : fmtNum(v));
}

/** A CSV field: quoted when it holds a comma, quote or line break. */
function csvField(v) {
  const t = v === null || v === undefined ? '' : typeof v === 'object' ? JSON.stringify(v) : String(v);
  return /[",\r\n]/.test(t) ? '"' + t.replace(/"/g, '""') + '"' : t;
}

/** Saves text as a file the browser downloads. */
function downloadText(name, text, type) {
  downloadBlob(name, new Blob([text], { type }));
}

/** Saves a Blob as a file the browser downloads. */
function downloadBlob(name, blob) {
  const url = URL.createObjectURL(blob);
  const a = el('a', { href: url, download: name });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

/** Mean GPU utilization of a run: the mean over its GPUs of each one's mean `sys/gpu.N.util`. */
function gpuUtil(run) {
  const means = [];
  for (const [k, s] of Object.entries(run.summary || {})) {
    if (/^sys\/gpu\.\d+\.util$/.test(k) && s.mean !== null && s.mean !== undefined) means.push(toNum(s.mean));
  }
  const ok = means.filter(Number.isFinite);
  return ok.length ? ok.reduce((a, b) => a + b, 0) / ok.length : null;
}

function runCost(run) {
  const s = (run.summary || {})[COST_KEY];
  return s ? toNum(s.last) : null;
}

const METRIC_COLUMNS = { last: 'metrics', min: 'metrics_min', max: 'metrics_max', mean: 'metrics_mean' };

/** The value a column shows for a run, as used for group means and client-side sorting. */
function columnValue(c, r) {
  switch (c.id) {
    case 'duration': return runDuration(r);
    case 'cost': return runCost(r);
    case 'gpu_util': return gpuUtil(r);
    default:
      if (c.group === 'param') return (r.params || {})[c.key];
      if (c.group === 'metric') { const s = (r.summary || {})[c.key]; return s ? toNum(s[c.stat]) : null; }
      return null;
  }
}

/** What a run is grouped under for a group-by choice ("status", "user", "group", "params.K", "tags.K"). */
function groupValue(r, by) {
  if (by.startsWith('params.')) return (r.params || {})[by.slice(7)];
  if (by.startsWith('tags.')) return (r.tags || {})[by.slice(5)];
  return r[by];
}

const FILTER_ATTRIBUTES = ['status', 'name', 'user', 'host', 'group', 'id', 'parent_id', 'notes', 'start_time', 'end_time', 'duration'];
const FILTER_PREFIXES = { params: 'params', tags: 'tags', metrics: 'metrics', metrics_min: 'metrics', metrics_max: 'metrics', metrics_mean: 'metrics', metrics_step: 'metrics' };

/** A key as the filter grammar takes it: bare when it can be, else in backquotes. */
function filterKey(k) { return /^[A-Za-z0-9_./:-]+$/.test(k) ? k : '`' + k.replace(/`/g, '') + '`'; }

/** The `params.K`, `tags.K` and `metrics….K` keys a filter names: [[prefix, kind, key]]. */
function filterKeys(filter) {
  const out = [];
  const re = /\b(params|tags|metrics_min|metrics_max|metrics_mean|metrics_step|metrics)\.(?:`([^`]*)`|"([^"]*)"|([A-Za-z0-9_./:-]+))/g;
  let m;
  while ((m = re.exec(filter))) out.push([m[1], FILTER_PREFIXES[m[1]], m[2] ?? m[3] ?? m[4]]);
  return out;
}

/**
 * Autocomplete for the filter box: the word at the cursor is completed from the project's keys
 * (`params.`, `metrics.`, `tags.`) and the run attributes. Arrow keys move, Tab or Enter takes.
 */
function filterCompleter(input, keys, onEnter) {
  const list = el('div', { class: 'completions hidden', 'data-testid': 'filter-completions' });
  let items = [], active = 0, span = null;
  const close = () => { list.classList.add('hidden'); items = []; };
  const render = () => list.replaceChildren(...items.map((t, i) => el('div', {
    class: 'completion' + (i === active ? ' active' : ''), 'data-testid': 'filter-completion',
    onmousedown: (e) => { e.preventDefault(); take(i); },
  }, t)));
  function take(i) {
    const text = items[i];
    if (!span || text === undefined) return;
    input.value = input.value.slice(0, span[0]) + text + input.value.slice(span[1]);
    const at = span[0] + text.length;
    input.setSelectionRange(at, at);
    close();
  }
  function update() {
    const k = keys();
    const upto = input.value.slice(0, input.selectionStart);
    const m = /([A-Za-z_][A-Za-z0-9_]*)(?:\.([A-Za-z0-9_./:-]*))?$/.exec(upto);
    if (!m || !k) { close(); return; }
    const start = upto.length - m[0].length;
    if (m[2] !== undefined && FILTER_PREFIXES[m[1]]) {
      const pool = k[FILTER_PREFIXES[m[1]]] || [];
      items = pool.filter((x) => x.startsWith(m[2]) && x !== m[2]).slice(0, 12).map((x) => `${m[1]}.${filterKey(x)}`);
    } else if (m[2] === undefined && m[1].length >= 1) {
      items = [...Object.keys(FILTER_PREFIXES).map((p) => p + '.'), ...FILTER_ATTRIBUTES].filter((x) => x.startsWith(m[1]) && x !== m[1]).slice(0, 12);
    } else items = [];
    span = [start, input.selectionStart];
    active = 0;
    if (items.length) { list.classList.remove('hidden'); render(); } else close();
  }
  input.addEventListener('input', update);
  input.addEventListener('blur', () => setTimeout(close, 100));
  input.addEventListener('keydown', (e) => {
    const open = items.length > 0;
    if (open && (e.key === 'ArrowDown' || e.key === 'ArrowUp')) {
      e.preventDefault();
      active = (active + (e.key === 'ArrowDown' ? 1 : items.length - 1)) % items.length;
      render();
    } else if (open && (e.key === 'Tab' || e.key === 'Enter')) {
      e.preventDefault();
      take(active);
    } else if (open && e.key === 'Escape') close();
    else if (e.key === 'Enter') onEnter();
  });
  return el('div', { class: 'filter-wrap' }, input, list);
}

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

function runsView(project, params) {
  const st = tableState(params || new URLSearchParams());
  const prefs = loadColumnPrefs(project);
  let runs = [];
  let items = [];          // rows on screen: {run} or {group: {label, runs}}
  let columns = [];
  let loadGen = 0;
  let rafPending = false;

  const filterInput = el('input', {
    type: 'text', class: 'filter', 'data-testid': 'filter-input', spellcheck: 'false',
    placeholder: "filter, e.g. metrics.val_loss < 0.3 and params.lr = 0.001 and status = 'finished'",
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
      if (st.filter) q.set('filter', st.filter);
      if (st.groupBy) q.set('group', st.groupBy);
      location.hash = '#/compare/' + enc(project) + (q.toString() ? '?' + q : '');
      return;
    }
    selectedIds().then((ids) => { location.hash = '#/compare/' + enc(project) + '/' + ids.map(enc).join(','); });
  } });
  const groupSel = el('select', { 'data-testid': 'group-by', title: 'group rows by a param, tag or attribute' });
  groupSel.addEventListener('change', async () => {
    st.groupBy = groupSel.value; st.collapsed.clear(); syncUrl();
    if (st.groupBy) { try { await allRuns(); } catch (e) { message.replaceChildren(errorEl(e)); return; } }
    buildItems(); renderHeader(); renderRows();
  });
  const colMenu = el('div', { class: 'menu' });
  const colDetails = el('details', { class: 'columns' }, el('summary', {}, 'Columns ▾'), colMenu);
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
  const viewsBar = el('details', { class: 'columns views' }, el('summary', {}, 'Views ▾'), el('div', { class: 'menu' },
    el('label', {}, 'open ', viewsSel),
    el('form', { class: 'toolbar', onsubmit: (e) => { e.preventDefault(); saveView(); } },
      viewName, el('button', { type: 'submit', 'data-testid': 'view-save' }, 'Save')),
    el('button', { type: 'button', 'data-testid': 'view-delete', onclick: () => deleteView() }, 'Delete the open view'),
    viewMsg));
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
      if (location.hash === address) route(); else location.hash = address;
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
    el('h1', {}, project, ' ', el('a', { class: 'sub-link', href: '#/sweeps/' + enc(project), 'data-testid': 'sweeps-link' }, 'sweeps →')),
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
      { id: 'status', label: 'status', sort: 'status', width: 90 },
      { id: 'duration', label: 'duration', sort: 'duration', width: 90, num: true },
      { id: 'user', label: 'user', sort: 'user', width: 100 },
      { id: 'tags', label: 'tags', width: 160 },
      { id: 'cost', label: 'cost', sort: 'metrics.' + COST_KEY, width: 80, num: true },
      { id: 'gpu_util', label: 'GPU util', sort: 'gpu_util', clientSort: true, width: 80, num: true },
    ];
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
    colMenu.replaceChildren(...all.filter((c) => c.id !== 'sel' && c.id !== 'name').map((c) => {
      const cb = el('input', { type: 'checkbox', 'data-column': c.id });
      cb.checked = prefs.shown.has(c.id) || (!prefs.hidden.has(c.id) && !c.defaultHidden);
      cb.addEventListener('change', () => {
        prefs.hidden.delete(c.id); prefs.shown.delete(c.id);
        if (cb.checked && c.defaultHidden) prefs.shown.add(c.id);
        if (!cb.checked && !c.defaultHidden) prefs.hidden.add(c.id);
        saveColumnPrefs(project, prefs);
        discoverColumns(); renderHeader(); renderRows();
      });
      return el('label', {}, cb, ' ', c.group === 'param' ? `params.${c.label}` : c.group === 'metric' ? `metrics.${c.label}` : c.label);
    }));
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
      const cell = el('div', {
        class: 'cell' + (c.sort ? ' sortable' : '') + (c.group ? ' grp-' + c.group : '') + (c.num ? ' num' : '') + (c.pin !== undefined ? ' pin' : ''),
        title: (c.group ? c.group + 's.' : '') + c.label + (c.sort ? ' (click to sort)' : ''),
        'data-column': c.id, draggable: c.pin === undefined ? 'true' : null,
        style: c.pin !== undefined ? `left:${c.pin}px` : null,
      }, el('span', { class: 'col-label' }, c.label + arrow), grip);
      if (c.sort) cell.addEventListener('click', (e) => {
        if (e.target === grip) return;
        if (st.sortKey === c.sort) st.sortDir = st.sortDir === 'asc' ? 'desc' : 'asc';
        else { st.sortKey = c.sort; st.sortDir = 'asc'; }
        load();
      });
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
        case 'duration': { const d = runDuration(r); return d === null ? '' : d / 1000; }
        case 'user': return r.user;
        case 'tags': return Object.entries(r.tags || {}).map(([k, v]) => (v === '' ? k : `${k}=${fmtValue(v)}`)).join('; ');
        default: { const v = columnValue(c, r); return typeof v === 'number' && !Number.isFinite(v) ? String(v) : v; }
      }
    };
    const header = ['id', ...cols.map((c) => (c.group === 'param' ? 'params.' + c.key : c.group === 'metric' ? `metrics.${c.key}${c.stat === 'last' ? '' : '.' + c.stat}` : c.id === 'duration' ? 'duration_s' : c.id))];
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
        el('span', { class: 'swatch', 'data-testid': 'run-color', style: `background:${runColor(r.id)}` }),
        el('a', { href: '#/run/' + enc(r.id) }, r.name || r.id));
      case 'status': return el('div', { class: 'cell' }, statusEl(r.status));
      case 'duration': return el('div', { class: 'cell num' }, fmtDuration(runDuration(r)));
      case 'user': return el('div', { class: 'cell', title: r.user || '' }, r.user || '');
      case 'tags': {
        const t = Object.entries(r.tags || {}).map(([k, v]) => (v === '' ? k : `${k}=${fmtValue(v)}`)).join(', ');
        return el('div', { class: 'cell tags', title: t }, t);
      }
      case 'cost': {
        const v = runCost(r);
        return el('div', { class: 'cell num' }, v === null ? '' : '$' + fmtNum(Number(v.toFixed(2))));
      }
      case 'gpu_util': {
        const v = gpuUtil(r);
        return el('div', { class: 'cell num' }, v === null ? '' : v.toFixed(0) + '%');
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
        return el('div', { class: 'cell group-name pin', style: `left:${c.pin}px`, title: `${st.groupBy} = ${g.label}`, onclick: () => {
          if (collapsed) st.collapsed.delete(g.label); else st.collapsed.add(g.label);
          buildItems(); renderHeader(); renderRows();
        } }, `${collapsed ? '▸' : '▾'} ${g.label} (${g.runs.length})`);
      }
      if (c.num || c.group === 'metric') {
        const vals = g.runs.map((r) => columnValue(c, r)).map((v) => (typeof v === 'number' ? v : NaN)).filter(Number.isFinite);
        if (!vals.length) return el('div', { class: 'cell num' });
        const mean = vals.reduce((a, b) => a + b, 0) / vals.length;
        const text = c.id === 'duration' ? fmtDuration(mean) : c.id === 'cost' ? '$' + mean.toFixed(2) : c.id === 'gpu_util' ? mean.toFixed(0) + '%' : (c.fmt || fmtNum)(mean);
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

  /** One page of the current search, from a run offset; answers {runs, total} (total on the first page). */
  async function fetchPage(offset) {
    const q = new URLSearchParams({ limit: String(PAGE_LIMIT) });
    if (st.filter) q.set('filter', st.filter);
    if (st.sortKey && st.sortKey !== 'gpu_util') q.set('order_by', `${st.sortKey} ${st.sortDir}`);
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
        if (st.filter) q.set('filter', st.filter);
        if (st.sortKey && st.sortKey !== 'gpu_util') q.set('order_by', `${st.sortKey} ${st.sortDir}`);
        const res = await api(`/projects/${enc(project)}/runs?${q}`);
        if (gen !== loadGen) return;
        runs.push(...(res.runs || []));
        token = res.next_page_token || null;
      }
    }
    if (st.groupBy || st.sortKey === 'gpu_util') {
      try { await allRuns(); } catch (e) { message.replaceChildren(errorEl(e)); return; }
      if (gen !== loadGen) return;
    }
    if (st.sortKey === 'gpu_util') {
      // Computed columns sort here; runs without a value go last either way.
      const dir = st.sortDir === 'asc' ? 1 : -1;
      runs.sort((a, b) => {
        const [x, y] = [gpuUtil(a), gpuUtil(b)];
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
  }

  updateCompareBtn();
  return {
    node,
    title: project,
    mounted: load,
    cleanup: () => { loadGen++; window.removeEventListener('resize', scheduleRows); },
  };
}

/* ---------- #/compare/NAME/ids ---------- */

const isSystemKey = (k) => k.startsWith('sys/');
const isCostKey = (k) => k.startsWith('cost/');
const COST_KEY = 'cost/usd';

/** System keys in display order: per GPU its utilization, memory and power first, then the rest. */
function orderSystemKeys(keys) {
  const rank = (k) => {
    const m = k.match(/^sys\/gpu\.(\d+)\.(.+)$/);
    if (!m) return [1, 0, 0, k];
    const q = ['util', 'mem_used_bytes', 'power_w'].indexOf(m[2]);
    return [0, Number(m[1]), q < 0 ? 9 : q, k];
  };
  return [...keys].sort((a, b) => {
    const [x, y] = [rank(a), rank(b)];
    for (let i = 0; i < 4; i++) if (x[i] !== y[i]) return x[i] < y[i] ? -1 : 1;
    return 0;
  });
}

/** Above this many runs, a comparison draws groups (their mean and min–max band), not runs. */
const COMPARE_LINES_MAX = 100;
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

/** fn over items with at most `limit` calls in flight; the results in order, as Promise.allSettled gives them. */
async function settleLimited(items, limit, fn) {
  const out = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      try { out[i] = { status: 'fulfilled', value: await fn(items[i]) }; } catch (e) { out[i] = { status: 'rejected', reason: e }; }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
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
function compareView(project, ids, params) {
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
        run_id: 'group:' + label, name: `${label} (${members.length})`, color: runColor('group:' + label), members: members.map((r) => r.id),
      }));
      body.append(el('p', { class: 'note', 'data-testid': 'grouped-note' },
        `${runs.length} runs are more than ${COMPARE_LINES_MAX} lines can show: each chart draws ${series.length === 1 ? 'their' : 'each group\'s'} mean, with the min–max band, ` +
        (by ? `grouped by ${by}` : 'as one group') + '. Group the runs table to choose the groups.'));
    } else {
      series = runs.map((r) => ({ run_id: r.id, name: r.name || r.id, color: runColor(r.id), start_time: r.start_time }));
    }
    const keys = [...new Set(runs.flatMap((r) => Object.keys(r.summary || {})))].sort();
    const metricKeys = keys.filter((k) => !isSystemKey(k) && !isCostKey(k));
    const systemKeys = orderSystemKeys(keys.filter(isSystemKey));
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
    const syncUrl = () => setHashQuery({
      filter: byFilter ? filter : '', group: byFilter ? groupBy : '',
      x: settings.xMode !== 'step' ? settings.xMode : '', smooth: settings.smoothing || '', robust: settings.robust ? '1' : '',
      hide: [...shown.hidden].join(','), q: settings.search || '',
    });
    settings.listeners.add(syncUrl);
    shown.listeners.add((what) => { if (what === 'hidden') syncUrl(); });

    const chartsEl = el('div', { 'data-testid': 'metric-charts' });
    const systemEl = el('div', { 'data-testid': 'system-charts' });
    const upTo = (n, what) => el('p', { class: 'muted' }, `Shown for up to ${n} runs; these are ${runs.length}. ${what}`);
    body.append(runLegend(series, shown),
      el('h2', {}, 'Metrics'),
      metricKeys.length ? el('div', {}, chartControls(settings), chartsEl) : el('p', { class: 'muted' }, 'These runs have no metrics.'),
      el('h2', {}, 'Parallel coordinates'),
      runs.length <= PARCOORDS_MAX ? parallelCoords(runs, metricKeys) : upTo(PARCOORDS_MAX, 'Narrow the filter to see them.'),
      el('h2', {}, 'Differences'),
      grouped ? upTo(COMPARE_LINES_MAX, 'Narrow the filter to see how they differ.') : diffTable(runs, series),
      el('h2', {}, 'System'),
      el('div', { 'data-testid': 'system-panel' }, systemKeys.length
        ? el('div', {}, chartControls(systemSettings), systemEl)
        : el('p', { class: 'muted' }, 'These runs recorded no system metrics.')),
      el('h2', {}, 'Cost'),
      grouped ? upTo(COMPARE_LINES_MAX, '') : costPanel(runs, series, metricKeys));
    if (metricKeys.length) mounted.push(mountCharts(chartsEl, metricKeys, series, settings, settings.search));
    if (systemKeys.length) mounted.push(mountCharts(systemEl, systemKeys, series, systemSettings));
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
    const table = el('table', { class: 'list diff', 'data-testid': 'diff-table' },
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

/* ---------- cost panel ---------- */

/** The value of a cumulative series at a time, interpolated between its points; null before the first. */
function valueAtTime(points, t) {
  let prev = null;
  for (const p of points) {
    const v = toNum(p.value);
    if (!Number.isFinite(v)) continue;
    if (p.timestamp === t) return v;
    if (p.timestamp > t) {
      if (!prev) return null;
      return prev.v + ((v - prev.v) * (t - prev.t)) / (p.timestamp - prev.t);
    }
    prev = { t: p.timestamp, v };
  }
  return prev ? prev.v : null;
}

/**
 * Where a run's metric first crossed a threshold: finds the first bucket that crosses, then reads
 * that bucket's points to find the exact step. Returns {step, timestamp, value} or null.
 */
async function firstCrossing(runId, key, below, threshold) {
  const crosses = (v) => Number.isFinite(v) && (below ? v < threshold : v > threshold);
  const q = new URLSearchParams({ key, buckets: '1000' });
  const res = await api(`/runs/${enc(runId)}/metrics?${q}`);
  const bucket = (res.buckets || []).find((b) => crosses(toNum(below ? b.min : b.max)));
  if (!bucket) return null;
  const pq = new URLSearchParams({ key, step_min: String(bucket.step_min), step_max: String(bucket.step_max) });
  const pts = await api(`/runs/${enc(runId)}/metrics?${pq}`);
  const p = (pts.points || []).find((x) => crosses(toNum(x.value)));
  return p ? { step: p.step, timestamp: p.timestamp, value: toNum(p.value) } : null;
}

function costPanel(runs, series, metricKeys) {
  const costOf = (r) => { const s = (r.summary || {})[COST_KEY]; return s ? toNum(s.last) : NaN; };
  const withCost = runs.filter((r) => Number.isFinite(costOf(r)));
  const node = el('div', { 'data-testid': 'cost-panel' });
  if (!withCost.length) {
    node.append(el('p', { class: 'muted' }, `These runs recorded no cost (the ${COST_KEY} series).`));
    return node;
  }
  const total = withCost.reduce((a, r) => a + costOf(r), 0);
  node.append(el('p', {}, `Total: $${total.toFixed(2)} over ${withCost.length} run${withCost.length === 1 ? '' : 's'}.`),
    barList(runs.map((r, i) => ({ label: series[i].name, value: costOf(r), color: series[i].color })), (v) => '$' + v.toFixed(2), 'cost-bars'));
  if (!metricKeys.length) return node;

  const keySel = el('select', { 'data-testid': 'cost-metric' }, metricKeys.map((k) => el('option', { value: k }, k)));
  const dirSel = el('select', { 'data-testid': 'cost-direction' }, el('option', { value: 'below' }, 'first below'), el('option', { value: 'above' }, 'first above'));
  const thr = el('input', { type: 'text', size: '8', 'data-testid': 'cost-threshold', placeholder: 'threshold' });
  const out = el('div', { 'data-testid': 'cost-until' });
  let gen = 0;
  async function compute() {
    const my = ++gen;
    const threshold = Number(thr.value);
    if (thr.value.trim() === '' || !Number.isFinite(threshold)) { out.replaceChildren(errorEl('The threshold must be a number.')); return; }
    const key = keySel.value, below = dirSel.value === 'below';
    out.replaceChildren(el('p', { class: 'muted' }, 'Computing…'));
    const rows = await Promise.all(runs.map(async (r, i) => {
      try {
        const hit = await firstCrossing(r.id, key, below, threshold);
        if (!hit) return { i, reached: false };
        const cost = await api(`/runs/${enc(r.id)}/metrics?key=${enc(COST_KEY)}`).then((c) => valueAtTime(c.points || [], hit.timestamp)).catch(() => null);
        return { i, reached: true, hit, cost, elapsed: r.start_time ? hit.timestamp - r.start_time : null };
      } catch (e) { return { i, error: e.message }; }
    }));
    if (my !== gen) return;
    out.replaceChildren(el('table', { class: 'list' },
      el('thead', {}, el('tr', {}, ['run', 'first step', 'value', 'time to reach', 'cost to reach', 'total cost'].map((h) => el('th', {}, h)))),
      el('tbody', {}, rows.map((row) => {
        const r = runs[row.i];
        const name = el('td', {}, el('span', { class: 'swatch', style: `display:inline-block;width:10px;height:10px;margin-right:4px;background:${series[row.i].color}` }), series[row.i].name);
        const totalCell = el('td', { class: 'num' }, Number.isFinite(costOf(r)) ? '$' + costOf(r).toFixed(2) : '—');
        if (row.error) return el('tr', { 'data-testid': 'cost-until-row' }, name, el('td', { colspan: '4', class: 'error' }, row.error), totalCell);
        if (!row.reached) return el('tr', { 'data-testid': 'cost-until-row', 'data-reached': 'false' }, name, el('td', { colspan: '4', class: 'muted' }, 'not reached'), totalCell);
        return el('tr', { 'data-testid': 'cost-until-row', 'data-reached': 'true', 'data-step': String(row.hit.step), 'data-cost': row.cost === null ? '' : String(row.cost) },
          name, el('td', { class: 'num' }, String(row.hit.step)), el('td', { class: 'num' }, fmtNum(row.hit.value)),
          el('td', { class: 'num' }, fmtDuration(row.elapsed)),
          el('td', { class: 'num' }, row.cost === null ? '—' : '$' + row.cost.toFixed(2)), totalCell);
      }))));
  }
  thr.addEventListener('keydown', (e) => { if (e.key === 'Enter') compute(); });
  node.append(el('h3', {}, 'Cost until a metric crossed a threshold'),
    el('div', { class: 'toolbar' }, keySel, dirSel, thr, el('button', { onclick: compute, 'data-testid': 'cost-compute' }, 'Compute')), out);
  return node;
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

/** How often a running run's page re-reads the run and its charts. */
const LIVE_MS = 2000;

function summaryTable(run, keys) {
  if (!keys.length) return el('p', { class: 'muted' }, 'No metrics logged.');
  return el('table', { class: 'list', 'data-testid': 'summary-table' },
    el('thead', {}, el('tr', {}, ['key', 'last', 'min', 'max', 'mean', 'last step', 'count'].map((h) => el('th', {}, h)))),
    el('tbody', {}, keys.map((k) => {
      const s = run.summary[k];
      return el('tr', {}, el('td', { class: 'mono' }, k), el('td', { class: 'num' }, fmtNum(s.last)),
        el('td', { class: 'num' }, fmtNum(s.min)), el('td', { class: 'num' }, fmtNum(s.max)),
        el('td', { class: 'num' }, fmtNum(s.mean)),
        el('td', { class: 'num' }, fmtNum(s.last_step)), el('td', { class: 'num' }, fmtNum(s.count)));
    })));
}

function metadataSections(md) {
  const out = [];
  if (md.environment) out.push(el('div', {}, el('h3', {}, 'environment'), kvTable(md.environment)));
  if (md.code) {
    const { diff, ...rest } = md.code;
    out.push(el('div', {}, el('h3', {}, 'code'), kvTable(rest),
      diff ? el('pre', { class: 'diff-text', 'data-testid': 'code-diff' }, diff) : null));
  }
  for (const [sec, val] of Object.entries(md)) {
    if (sec === 'environment' || sec === 'code') continue;
    out.push(el('div', {}, el('h3', {}, sec),
      val && typeof val === 'object' && !Array.isArray(val) && Object.values(val).every((v) => typeof v !== 'object' || v === null)
        ? kvTable(val) : el('pre', { class: 'json' }, JSON.stringify(val, null, 2))));
  }
  return out;
}

function artifactsTable(id, arts) {
  if (arts.status === 'rejected') return errorEl('Could not load artifacts: ' + arts.reason.message);
  if (!(arts.value.artifacts || []).length) return el('p', { class: 'muted' }, 'No artifacts.');
  return el('table', { class: 'list', 'data-testid': 'artifacts' },
    el('thead', {}, el('tr', {}, el('th', {}, 'path'), el('th', {}, 'size'), el('th', {}, 'sha256'), el('th', {}, 'created'))),
    el('tbody', {}, arts.value.artifacts.map((a) => el('tr', {},
      el('td', {}, artifactLink(`${API}/runs/${enc(id)}/artifacts/${a.path.split('/').map(enc).join('/')}`, a.path)),
      el('td', { class: 'num' }, fmtBytes(a.size)),
      el('td', { class: 'mono muted', title: a.sha256 || '' }, (a.sha256 || '').slice(0, 12)),
      el('td', { class: 'muted' }, fmtTime(a.created_time))))));
}

const PREVIEW_KINDS = [
  [/\.(png|jpe?g|gif|webp|svg)$/i, 'image'], [/\.json$/i, 'json'], [/\.(csv|tsv)$/i, 'csv'],
  [/\.(txt|log|md|py|ya?ml|toml|cfg|ini|sh|out|err)$/i, 'text'],
];
const PREVIEW_MAX = 12;
const PREVIEW_BYTES = { image: 10 << 20, json: 1 << 20, csv: 1 << 20, text: 1 << 20 };
const IMAGE_TYPES = { png: 'image/png', jpg: 'image/jpeg', jpeg: 'image/jpeg', gif: 'image/gif', webp: 'image/webp', svg: 'image/svg+xml' };

/** The rows of CSV (or TSV) text, quotes understood. */
function parseCsv(text, sep) {
  const rows = [];
  let row = [], field = '', quoted = false;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i];
    if (quoted) {
      if (ch === '"' && text[i + 1] === '"') { field += '"'; i++; } else if (ch === '"') quoted = false; else field += ch;
    } else if (ch === '"' && field === '') quoted = true;
    else if (ch === sep) { row.push(field); field = ''; }
    else if (ch === '\n' || ch === '\r') {
      if (ch === '\r' && text[i + 1] === '\n') i++;
      row.push(field); rows.push(row); row = []; field = '';
    } else field += ch;
  }
  if (field !== '' || row.length) { row.push(field); rows.push(row); }
  return rows;
}

/** Previews of a run's images, text, JSON and CSV artifacts (the first PREVIEW_MAX of them). */
function artifactPreviews(id, arts) {
  if (arts.status === 'rejected') return null;
  const candidates = (arts.value.artifacts || []).map((a) => ({ a, kind: (PREVIEW_KINDS.find(([re]) => re.test(a.path)) || [])[1] }))
    .filter((x) => x.kind && x.a.size <= PREVIEW_BYTES[x.kind]);
  if (!candidates.length) return null;
  const urls = [];
  const cards = candidates.slice(0, PREVIEW_MAX).map(({ a, kind }) => {
    const body = el('div', { class: 'preview-body muted' }, 'loading…');
    const url = `${API}/runs/${enc(id)}/artifacts/${a.path.split('/').map(enc).join('/')}`;
    (async () => {
      const res = await fetch(url, { headers: authHeaders() });
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      if (kind === 'image') {
        const ext = a.path.split('.').pop().toLowerCase();
        const src = URL.createObjectURL(new Blob([await res.arrayBuffer()], { type: IMAGE_TYPES[ext] }));
        urls.push(src);
        body.replaceChildren(el('img', { src, alt: a.path, 'data-testid': 'preview-image' }));
      } else {
        const text = await res.text();
        if (kind === 'json') {
          let shown = text;
          try { shown = JSON.stringify(JSON.parse(text), null, 2); } catch (e) { /* not JSON after all: as text */ }
          body.replaceChildren(el('pre', { class: 'json', 'data-testid': 'preview-json' }, shown));
        } else if (kind === 'csv') {
          const rows = parseCsv(text, a.path.toLowerCase().endsWith('.tsv') ? '\t' : ',');
          const [head, ...rest] = rows;
          body.replaceChildren(el('div', { class: 'preview-table' }, el('table', { class: 'list', 'data-testid': 'preview-csv' },
            el('thead', {}, el('tr', {}, (head || []).map((h) => el('th', {}, h)))),
            el('tbody', {}, rest.slice(0, 50).map((r) => el('tr', {}, r.map((v) => el('td', {}, v))))))),
          rest.length > 50 ? el('p', { class: 'muted' }, `first 50 of ${rest.length} rows`) : '');
        } else {
          body.replaceChildren(el('pre', { class: 'json', 'data-testid': 'preview-text' }, text));
        }
      }
      body.className = 'preview-body';
    })().catch((e) => { body.className = 'preview-body error'; body.textContent = `Could not preview ${a.path}: ${e.message}`; });
    return el('div', { class: 'preview', 'data-testid': 'preview', 'data-path': a.path }, el('div', { class: 'preview-name mono' }, a.path), body);
  });
  const node = el('div', { class: 'previews', 'data-testid': 'previews' }, cards,
    candidates.length > PREVIEW_MAX ? el('p', { class: 'muted' }, `${candidates.length - PREVIEW_MAX} more can be previewed; download them from the list.`) : '');
  node.cleanupPreviews = () => urls.forEach((u) => URL.revokeObjectURL(u));
  return node;
}

/** Tags as text, one per line: `key=value`, or `label` alone. */
function tagsText(tags) {
  return Object.entries(tags || {}).map(([k, v]) => (v === '' ? k : `${k}=${v}`)).join('\n');
}
function parseTagsText(text) {
  const out = {};
  for (const line of text.split('\n').map((l) => l.trim()).filter(Boolean)) {
    const i = line.indexOf('=');
    if (i < 0) out[line] = ''; else out[line.slice(0, i).trim()] = line.slice(i + 1).trim();
  }
  return out;
}

/**
 * A run's actions: edit its name, group, notes and tags (PATCH /runs/ID), archive it or restore
 * it, and delete an archived run for good (DELETE /runs/ID, admins only, after a confirmation).
 * Offered only when the user may write to the run's project. `done` re-reads the run.
 */
function runActions(run, role, done) {
  if (!mayWrite(role)) return el('span', { class: 'muted', 'data-testid': 'read-only' }, 'read only');
  const error = el('span', { class: 'error', 'data-testid': 'run-edit-error' });
  const form = el('form', { class: 'panel run-edit hidden', 'data-testid': 'run-edit' });
  const name = el('input', { type: 'text', name: 'name', value: run.name || '', 'data-testid': 'edit-name', size: 40 });
  const group = el('input', { type: 'text', name: 'group', value: run.group || '', 'data-testid': 'edit-group', size: 30 });
  const notes = el('textarea', { name: 'notes', rows: 4, cols: 60, 'data-testid': 'edit-notes' });
  notes.value = run.notes || '';
  const tags = el('textarea', { name: 'tags', rows: 4, cols: 60, 'data-testid': 'edit-tags', placeholder: 'key=value or a label, one per line' });
  tags.value = tagsText(run.tags);
  form.append(
    el('label', {}, 'name ', name), el('label', {}, 'group ', group),
    el('label', {}, 'notes', notes), el('label', {}, 'tags', tags),
    el('div', { class: 'toolbar' }, el('button', { type: 'submit', class: 'primary', 'data-testid': 'edit-save' }, 'Save'),
      el('button', { type: 'button', onclick: () => form.classList.add('hidden') }, 'Cancel'), error));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const wanted = parseTagsText(tags.value);
    const patch = {};
    for (const k of Object.keys(run.tags || {})) if (!(k in wanted)) patch[k] = null;
    for (const [k, v] of Object.entries(wanted)) if ((run.tags || {})[k] !== v) patch[k] = v;
    const body = {};
    if (name.value.trim() !== (run.name || '')) body.name = name.value.trim();
    if (group.value.trim() !== (run.group || '')) body.group = group.value.trim();
    if (notes.value !== (run.notes || '')) body.notes = notes.value;
    if (Object.keys(patch).length) body.tags = patch;
    try {
      if (Object.keys(body).length) await api('/runs/' + enc(run.id), { method: 'PATCH', body });
      done();
    } catch (err) { error.textContent = (err.field ? err.field + ': ' : '') + err.message; }
  });
  const lifecycle = async (what) => {
    try { await api(`/runs/${enc(run.id)}/${what}`, { body: {} }); done(); } catch (err) { error.textContent = err.message; form.classList.remove('hidden'); }
  };
  const purge = async () => {
    if (!confirm(`Delete run ${run.name || run.id} for good? Its metrics, artifacts and files are deleted and cannot be restored.`)) return;
    try {
      await api('/runs/' + enc(run.id), { method: 'DELETE' });
      location.hash = tableHref(run.project);
    } catch (err) { error.textContent = err.message; form.classList.remove('hidden'); }
  };
  return el('div', { class: 'run-actions' },
    el('div', { class: 'toolbar' },
      el('button', { type: 'button', 'data-testid': 'edit-run', onclick: () => form.classList.toggle('hidden') }, 'Edit'),
      run.archived
        ? el('button', { type: 'button', 'data-testid': 'restore-run', onclick: () => lifecycle('restore') }, 'Restore')
        : el('button', { type: 'button', 'data-testid': 'archive-run', title: 'hide the run from the table; it can be restored', onclick: () => lifecycle('archive') }, 'Archive'),
      run.archived && mayAdmin(role)
        ? el('button', { type: 'button', class: 'danger', 'data-testid': 'delete-run', title: 'delete the run and its data for good', onclick: purge }, 'Delete for good')
        : null),
    form);
}

function checkpointsTable(id, ckpts) {
  if (ckpts.status === 'rejected') return errorEl('Could not load checkpoints: ' + ckpts.reason.message);
  if (!(ckpts.value.checkpoints || []).length) return el('p', { class: 'muted' }, 'No checkpoints.');
  return el('table', { class: 'list', 'data-testid': 'checkpoints' },
    el('thead', {}, el('tr', {}, el('th', {}, 'name'), el('th', {}, 'step'), el('th', {}, 'files'), el('th', {}, 'metadata'))),
    el('tbody', {}, ckpts.value.checkpoints.map((c) => el('tr', {},
      el('td', {}, c.name), el('td', { class: 'num' }, fmtNum(c.step)),
      el('td', {}, Array.isArray(c.files) ? c.files.map((f) => el('div', {}, el('a', {
        href: `${API}/runs/${enc(id)}/artifacts/${((c.prefix ? c.prefix.replace(/\/$/, '') + '/' : '') + (f.path || f)).split('/').map(enc).join('/')}`,
      }, f.path || f))) : fmtValue(c.files)),
      el('td', { class: 'mono' }, c.metadata ? JSON.stringify(c.metadata) : '')))));
}

function runView(id) {
  const body = el('div', {}, el('p', { class: 'muted' }, 'Loading run…'));
  const node = el('div', {}, body);
  let mounted = [];
  let alive = true;
  let liveTimer = null;
  let shownKeys = '';
  let parts = null; // the pieces a live update rewrites

  const unmount = () => { mounted.forEach((m) => m.destroy()); mounted = []; };

  function runInfo(run) {
    return kvTable({
      id: run.id, user: run.user, host: run.host, group: run.group,
      started: fmtTime(run.start_time), ended: fmtTime(run.end_time), duration: fmtDuration(runDuration(run)),
      cost: (run.summary || {})[COST_KEY] ? '$' + toNum(run.summary[COST_KEY].last).toFixed(2) : null,
    }, 'run-info', true);
  }

  async function render(run) {
    const [arts, ckpts, proj] = await Promise.allSettled([
      api(`/runs/${enc(id)}/artifacts`), api(`/runs/${enc(id)}/checkpoints`), api('/projects/' + enc(run.project))]);
    const role = proj.status === 'fulfilled' ? proj.value.your_role : undefined;
    if (!alive) return;
    unmount();
    document.title = `${run.name || run.id} · ${run.project} · trainlog`;
    const keys = Object.keys(run.summary || {}).sort();
    const metricKeys = keys.filter((k) => !isSystemKey(k));
    const systemKeys = orderSystemKeys(keys.filter(isSystemKey));
    shownKeys = keys.join('\n');
    const series = [{ run_id: run.id, name: run.name || run.id, color: runColor(run.id), start_time: run.start_time }];
    const shown = seriesState();
    const settings = chartSettings({}, shown);
    const systemSettings = chartSettings({ xMode: 'relative' }, shown);
    const chartsEl = el('div', { 'data-testid': 'metric-charts' });
    const systemEl = el('div', { 'data-testid': 'system-charts' });
    parts = {
      status: el('span', {}, statusEl(run.status)),
      info: el('div', {}, runInfo(run)),
      summary: el('div', {}, summaryTable(run, metricKeys)),
      live: el('span', { class: 'muted live', 'data-testid': 'live-status' }),
    };
    const md = run.metadata || {};
    const meta = metadataSections(md);
    body.replaceChildren(
      el('div', { class: 'breadcrumb' }, el('a', { href: '#/' }, 'Projects'), ' / ',
        el('a', { href: '#/p/' + enc(run.project) }, run.project), ' / '),
      el('h1', { 'data-testid': 'run-title' }, run.name || run.id, ' ', parts.status, ' ', parts.live,
        run.archived ? el('span', { class: 'badge', 'data-testid': 'archived' }, 'archived') : ''),
      runActions(run, role, () => { clearTimeout(liveTimer); liveTimer = null; load(); }),
      el('div', { class: 'panel' }, parts.info, run.notes ? el('p', { class: 'notes', 'data-testid': 'run-notes' }, run.notes) : null),
      el('div', { class: 'grid2' },
        el('div', {}, el('h2', {}, 'Parameters'), kvTable(run.params, 'params-table')),
        el('div', {}, el('h2', {}, 'Tags'), kvTable(run.tags, 'tags-table'))),
      el('h2', {}, 'Metrics'),
      parts.summary,
      metricKeys.length ? el('div', { style: 'margin-top:12px' }, chartControls(settings), chartsEl) : null,
      systemKeys.length ? el('h2', {}, 'System') : null,
      systemKeys.length ? el('div', { 'data-testid': 'system-panel' }, chartControls(systemSettings), systemEl) : null,
      el('h2', {}, 'Metadata'),
      meta.length ? el('div', { class: 'grid2' }, meta) : el('p', { class: 'muted' }, 'No metadata.'),
      el('h2', {}, 'Artifacts'), artifactsTable(id, arts), artifactPreviews(id, arts),
      el('h2', {}, 'Checkpoints'), checkpointsTable(id, ckpts));
    if (metricKeys.length) mounted.push(mountCharts(chartsEl, metricKeys, series, settings));
    if (systemKeys.length) mounted.push(mountCharts(systemEl, systemKeys, series, systemSettings));
    follow(run);
  }

  /** While the run is running, re-read it every LIVE_MS: new keys re-render, otherwise charts refresh. */
  function follow(run) {
    const live = run.status === 'running';
    body.setAttribute('data-live', live ? 'on' : 'off');
    if (parts) parts.live.textContent = live ? '● live' : '';
    if (live && alive) liveTimer = setTimeout(poll, LIVE_MS);
  }

  async function poll() {
    liveTimer = null;
    let run;
    try {
      run = await api('/runs/' + enc(id));
    } catch (e) {
      if (!alive) return;
      parts.live.textContent = 'live updates paused: ' + e.message;
      liveTimer = setTimeout(poll, LIVE_MS);
      return;
    }
    if (!alive) return;
    if (Object.keys(run.summary || {}).sort().join('\n') !== shownKeys) { await render(run); return; }
    parts.status.replaceChildren(statusEl(run.status));
    parts.info.replaceChildren(runInfo(run));
    parts.summary.replaceChildren(summaryTable(run, Object.keys(run.summary || {}).sort().filter((k) => !isSystemKey(k))));
    mounted.forEach((m) => m.refresh());
    follow(run);
  }

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
    await render(run);
  }
  load().catch((e) => body.replaceChildren(errorEl(e)));
  return { node, cleanup: () => { alive = false; clearTimeout(liveTimer); unmount(); } };
}

function fmtBytes(n) {
  if (typeof n !== 'number') return '';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : String(n)) + ' ' + u[i];
}

/* ---------- #/models ---------- */

function fmtSource(src) {
  if (!src) return '';
  if (typeof src !== 'object') return String(src);
  const bits = [src.kind, src.name, src.step !== undefined && src.step !== null ? `step ${src.step}` : null, src.path];
  return bits.filter((b) => b !== undefined && b !== null && b !== '').join(' · ') || JSON.stringify(src);
}

/** What a model version was trained from, as recorded when it was registered. */
function lineageEl(v) {
  const l = v.lineage;
  if (!l || typeof l !== 'object') return el('span', { class: 'muted' }, 'none recorded');
  const run = l.run || {};
  const code = l.code && typeof l.code === 'object' ? l.code : {};
  const env = l.environment && typeof l.environment === 'object' ? l.environment : {};
  const metrics = Object.fromEntries(Object.entries(l.metrics || {})
    .filter(([k]) => !isSystemKey(k)).map(([k, s]) => [k, s && typeof s === 'object' ? fmtNum(toNum(s.last)) : fmtValue(s)]));
  const codeLine = [code.commit ? String(code.commit).slice(0, 12) : null, code.branch, code.dirty ? 'dirty' : null].filter(Boolean).join(' · ');
  return el('details', { class: 'lineage', 'data-testid': 'lineage' },
    el('summary', {}, run.id ? `run ${run.name || run.id}` : 'lineage', codeLine ? ` · ${codeLine}` : ''),
    el('div', { class: 'lineage-body' },
      kvTable({ run: run.id, project: run.project, status: run.status, user: run.user, host: run.host,
        started: fmtTime(run.start_time), ended: fmtTime(run.end_time) }, 'lineage-run', true),
      run.id ? el('p', {}, el('a', { href: '#/run/' + enc(run.id), 'data-testid': 'lineage-run-link' }, 'open the run →')) : null,
      el('h3', {}, 'params'), kvTable(l.params, 'lineage-params'),
      el('h3', {}, 'metrics at registration'), kvTable(metrics),
      Object.keys(code).length ? el('h3', {}, 'code') : null,
      Object.keys(code).length ? kvTable(Object.fromEntries(Object.entries(code).filter(([k]) => k !== 'diff'))) : null,
      Object.keys(env).length ? el('h3', {}, 'environment') : null,
      Object.keys(env).length ? kvTable(env) : null));
}

/** A version's files, as download links to the run's artifacts. */
function versionFiles(v) {
  const files = Array.isArray(v.files) ? v.files : [];
  if (!files.length) return el('span', { class: 'muted' }, '—');
  return el('div', { class: 'files' }, files.slice(0, 5).map((f) => el('div', {},
    artifactLink(`${API}/runs/${enc(v.run_id)}/artifacts/${String(f.path).split('/').map(enc).join('/')}`, f.path),
    el('span', { class: 'muted' }, ' ' + fmtBytes(f.size)))),
  files.length > 5 ? el('div', { class: 'muted' }, `+${files.length - 5} more`) : '');
}

function modelsView() {
  const body = el('div', { 'data-testid': 'models-list' }, el('p', { class: 'muted' }, 'Loading models…'));
  const node = el('div', {}, el('h1', {}, 'Models'), body);

  /** One model: its description, tags and aliases, and its versions with their own. */
  function modelPanel(m) {
    const writable = mayWrite(m.your_role);
    const versions = el('div', {}, el('p', { class: 'muted' }, 'Loading versions…'));
    const error = el('p', { class: 'error', 'data-testid': 'model-error' });
    const panel = el('div', { class: 'panel model', 'data-testid': 'model', 'data-model': m.name });
    const refresh = async () => {
      try { panel.replaceWith(modelPanel(await api('/models/' + enc(m.name)))); } catch (e) { error.textContent = e.message; }
    };
    const act = async (fn) => { try { await fn(); await refresh(); } catch (e) { error.textContent = (e.field ? e.field + ': ' : '') + e.message; } };
    const aliasChip = (alias, version) => el('span', { class: 'alias', 'data-testid': 'alias', 'data-alias': alias, 'data-version': String(version) },
      version === undefined ? alias : `${alias} → v${version}`,
      writable ? el('button', { type: 'button', title: `remove the alias ${alias}`, 'data-testid': 'alias-remove',
        onclick: () => act(() => api(`/models/${enc(m.name)}/aliases/${enc(alias)}`, { method: 'DELETE' })) }, '×') : '');
    api(`/models/${enc(m.name)}/versions`).then((vr) => {
      const vs = vr.versions || [];
      versions.replaceChildren(vs.length ? el('div', { class: 'diff-wrap' }, el('table', { class: 'list' },
        el('thead', {}, el('tr', {}, ['version', 'aliases', 'description', 'tags', 'status', 'run', 'source', 'files', 'lineage'].map((h) => el('th', {}, h)))),
        el('tbody', {}, vs.map((v) => {
          const aliasInput = el('input', { type: 'text', size: 8, placeholder: 'alias', 'data-testid': 'alias-input' });
          return el('tr', { 'data-testid': 'version-row', 'data-version': String(v.version) },
            el('td', { class: 'num' }, String(v.version)),
            el('td', {}, (v.aliases || []).map((a) => aliasChip(a)),
              writable ? el('form', { class: 'alias-form', onsubmit: (e) => {
                e.preventDefault();
                const alias = aliasInput.value.trim();
                if (alias) act(() => api(`/models/${enc(m.name)}/aliases/${enc(alias)}`, { method: 'PUT', body: { version: v.version } }));
              } }, aliasInput, el('button', { type: 'submit', 'data-testid': 'alias-set', title: 'point this alias at this version (moving it if it points elsewhere)' }, 'set')) : ''),
            el('td', { 'data-testid': 'version-description' }, v.description || el('span', { class: 'muted' }, '—')),
            el('td', { 'data-testid': 'version-tags' }, Object.entries(v.tags || {}).map(([k, val]) => el('span', { class: 'tag' }, val === '' ? k : `${k}=${val}`))),
            el('td', {}, v.status || ''),
            el('td', {}, v.run_id ? el('a', { href: '#/run/' + enc(v.run_id) }, (v.lineage && v.lineage.run && v.lineage.run.name) || v.run_id) : ''),
            el('td', { class: 'mono' }, fmtSource(v.source),
              v.source_available === false ? el('span', { class: 'error' }, ' (unavailable)') : null),
            el('td', {}, versionFiles(v)),
            el('td', {}, lineageEl(v)));
        }))))
        : el('p', { class: 'muted' }, 'No versions.'));
    }).catch((e) => versions.replaceChildren(errorEl(e)));
    panel.append(
      el('h2', { style: 'margin-top:0' }, m.name,
        el('span', { class: 'muted', style: 'font-weight:normal' }, ` · ${m.version_count ?? '?'} versions, latest v${m.latest_version ?? '?'}`)),
      m.description ? el('p', { 'data-testid': 'model-description' }, m.description) : '',
      Object.keys(m.tags || {}).length ? el('div', {}, Object.entries(m.tags).map(([k, val]) => el('span', { class: 'tag' }, val === '' ? k : `${k}=${val}`))) : '',
      el('div', { 'data-testid': 'model-aliases' }, Object.entries(m.aliases || {}).map(([a, v]) => aliasChip(a, v))),
      error, versions);
    return panel;
  }

  api('/models').then((res) => {
    const models = res.models || [];
    if (!models.length) { body.replaceChildren(el('p', { class: 'muted' }, 'No registered models.')); return; }
    body.replaceChildren(...models.map(modelPanel));
  }).catch((e) => body.replaceChildren(errorEl(e)));
  return { node, title: 'Models' };
}

/* ---------- #/sweeps/NAME and #/sweep/ID ---------- */

/** Money: cents from a dollar up; below, two significant digits, so a small cost never reads $0.00. */
function fmtUsd(v) {
  if (typeof v !== 'number' || !Number.isFinite(v)) return '—';
  const a = Math.abs(v);
  if (a === 0 || a >= 1) return '$' + v.toFixed(2);
  return '$' + Number(v.toPrecision(2)).toFixed(Math.max(2, 1 - Math.floor(Math.log10(a))));
}

function sweepsView(project) {
  const body = el('div', { 'data-testid': 'sweeps-list' }, el('p', { class: 'muted' }, 'Loading sweeps…'));
  const node = el('div', {},
    el('div', { class: 'breadcrumb' }, el('a', { href: '#/' }, 'Projects'), ' / ', el('a', { href: '#/p/' + enc(project) }, project), ' / '),
    el('h1', {}, 'Sweeps'), body);
  api('/sweeps?project=' + enc(project)).then((res) => {
    const sweeps = res.sweeps || [];
    if (!sweeps.length) { body.replaceChildren(el('p', { class: 'muted' }, 'No sweeps in this project. Create one with `trainlog sweep create sweep.yaml --project ' + project + '`.')); return; }
    body.replaceChildren(el('table', { class: 'list' },
      el('thead', {}, el('tr', {}, ['sweep', 'state', 'method', 'metric', 'trials', 'best', 'spent', 'created'].map((h) => el('th', {}, h)))),
      el('tbody', {}, sweeps.map((sw) => el('tr', {},
        el('td', {}, el('a', { href: '#/sweep/' + enc(sw.id) }, sw.name)),
        el('td', {}, sw.state + (sw.ended_reason ? ` (${sw.ended_reason})` : '')),
        el('td', {}, sw.method),
        el('td', { class: 'mono' }, `${sw.metric.name} (${sw.metric.goal})`),
        el('td', { class: 'num' }, String(sw.trial_count)),
        el('td', { class: 'num' }, sw.best ? fmtNum(toNum(sw.best.value)) : '—'),
        el('td', { class: 'num' }, fmtUsd(sw.spent.usd)),
        el('td', { class: 'muted' }, fmtTime(sw.created_time)))))));
  }).catch((e) => body.replaceChildren(errorEl(e)));
  return { node };
}

function sweepView(id) {
  const body = el('div', {}, el('p', { class: 'muted' }, 'Loading sweep…'));
  const node = el('div', {}, body);
  let alive = true, timer = null;
  const trialSort = { col: null, desc: false };

  async function load() {
    let sweep, trials;
    try {
      [sweep, trials] = await Promise.all([api('/sweeps/' + enc(id)), api(`/sweeps/${enc(id)}/trials`).then((r) => r.trials || [])]);
    } catch (e) {
      if (!alive) return;
      body.replaceChildren(el('h1', {}, 'Sweep ' + id), errorEl(e.status === 404 ? `Sweep "${id}" was not found.` : e));
      return;
    }
    if (!alive) return;
    const metric = sweep.metric.name;
    const paramNames = sweep.parameters || [];
    const budgetRows = [];
    if (sweep.budget.usd !== null && sweep.budget.usd !== undefined) budgetRows.push({ label: 'money', value: sweep.spent.usd, max: sweep.budget.usd, fmt: fmtUsd });
    if (sweep.budget.gpu_hours !== null && sweep.budget.gpu_hours !== undefined) budgetRows.push({ label: 'GPU-hours', value: sweep.spent.gpu_hours, max: sweep.budget.gpu_hours, fmt: (v) => v.toFixed(2) });
    const runsLike = trials.filter((t) => t.metric !== null && t.metric !== undefined).map((t) => ({
      id: t.run_id, name: `#${t.index}`, params: t.params, summary: { [metric]: { last: t.metric } },
    }));
    body.replaceChildren(
      el('div', { class: 'breadcrumb' }, el('a', { href: '#/' }, 'Projects'), ' / ', el('a', { href: '#/p/' + enc(sweep.project) }, sweep.project),
        ' / ', el('a', { href: '#/sweeps/' + enc(sweep.project) }, 'sweeps'), ' / '),
      el('h1', { 'data-testid': 'sweep-title' }, sweep.name, ' ', el('span', { class: 'status status-' + (sweep.state === 'running' ? 'running' : 'finished') }, sweep.state + (sweep.ended_reason ? ` (${sweep.ended_reason})` : ''))),
      el('div', { class: 'panel' }, kvTable({
        method: sweep.method, metric: `${metric} (${sweep.metric.goal})`, command: (sweep.command || []).join(' '),
        trials: `${sweep.trial_count}${sweep.run_cap ? ' of ' + sweep.run_cap : ''} · ` + Object.entries(sweep.counts || {}).map(([k, v]) => `${k} ${v}`).join(', '),
        best: sweep.best ? `${fmtNum(toNum(sweep.best.value))} (trial ${sweep.best.trial}) ${JSON.stringify(sweep.best.params)}` : '—',
        spent: `${fmtUsd(sweep.spent.usd)} · ${sweep.spent.gpu_hours.toFixed(3)} GPU-hours`,
      }, 'sweep-info', true)),
      el('div', { class: 'grid2' },
        el('div', {}, el('h2', {}, 'Best so far'), bestSoFarChart(sweep.best_so_far || [], metric)),
        el('div', { 'data-testid': 'sweep-spend' }, el('h2', {}, 'Money spent'),
          budgetRows.length ? budgetList(budgetRows) : el('p', {}, `${fmtUsd(sweep.spent.usd)} spent; no budget set.`),
          barList(trials.map((t) => ({ label: `#${t.index}`, value: typeof t.cost_usd === 'number' ? t.cost_usd : NaN, color: '#0f766e' })), fmtUsd, 'trial-cost'))),
      el('h2', {}, 'Parallel coordinates'),
      runsLike.length ? parallelCoords(runsLike, [metric]) : el('p', { class: 'muted' }, 'No trial has reported the metric yet.'),
      el('h2', {}, 'Trials'),
      trialsTable(trials, paramNames, metric, trialSort));
    if (sweep.state === 'running' && alive) timer = setTimeout(load, LIVE_MS);
  }

  load().catch((e) => body.replaceChildren(errorEl(e)));
  return { node, cleanup: () => { alive = false; clearTimeout(timer); } };
}

function budgetList(rows) {
  return el('div', { class: 'bars' }, rows.map((r) => el('div', { class: 'bar-row', 'data-testid': 'budget-row' },
    el('span', { class: 'bar-label' }, r.label),
    el('span', { class: 'bar-track' }, el('span', { class: 'bar', style: `width:${Math.min(100, (100 * r.value) / r.max)}%;background:${r.value >= r.max ? '#c62828' : '#2563eb'}` })),
    el('span', { class: 'bar-value num' }, `${r.fmt(r.value)} / ${r.fmt(r.max)}`))));
}

/** How trials sort by a column of the trials table. */
const TRIAL_COLUMNS = {
  '#': (t) => t.index, state: (t) => t.state, attempts: (t) => t.attempts, slot: (t) => t.slot,
  metric: (t) => toNum(t.metric), cost: (t) => t.cost_usd, time: (t) => t.run_seconds,
};

/** The trials of a sweep; a click on a header sorts by it (again: the other way). */
function trialsTable(trials, paramNames, metric, sort) {
  if (!trials.length) return el('p', { class: 'muted' }, 'No trials yet.');
  const wrap = el('div', { class: 'diff-wrap' });
  const valueOf = (col, t) => (col in TRIAL_COLUMNS ? TRIAL_COLUMNS[col](t) : (t.params || {})[col.slice(7)]);
  function render() {
    const rows = [...trials];
    if (sort.col) {
      const dir = sort.desc ? -1 : 1;
      rows.sort((a, b) => {
        const [x, y] = [valueOf(sort.col, a), valueOf(sort.col, b)];
        const missing = (v) => v === null || v === undefined || (typeof v === 'number' && Number.isNaN(v));
        if (missing(x) || missing(y)) return missing(x) - missing(y);
        return (typeof x === 'number' && typeof y === 'number' ? x - y : String(x).localeCompare(String(y), undefined, { numeric: true })) * dir;
      });
    }
    const cols = [['#', '#'], ['state', 'state'], ['attempts', 'attempts'], ['slot', 'slot'], ['metric', metric], ['cost', 'cost'], ['time', 'time']]
      .concat(paramNames.map((p) => ['params.' + p, p]));
    wrap.replaceChildren(el('table', { class: 'list sortable', 'data-testid': 'trials-table' },
      el('thead', {}, el('tr', {}, cols.map(([col, label]) => el('th', {
        'data-sort': col, title: 'click to sort',
        onclick: () => { if (sort.col === col) sort.desc = !sort.desc; else { sort.col = col; sort.desc = false; } render(); },
      }, label + (sort.col === col ? (sort.desc ? ' ▼' : ' ▲') : ''))))),
      el('tbody', {}, rows.map((t) => el('tr', { 'data-testid': 'trial-row', 'data-state': t.state, title: t.output_tail || t.stop_reason || '' },
        el('td', {}, el('a', { href: '#/run/' + enc(t.run_id) }, String(t.index))),
        el('td', {}, el('span', { class: 'status status-' + ({ pruned: 'killed', finished: 'finished', failed: 'failed', running: 'running', preempted: 'preempted' }[t.state] || '') }, t.state),
          t.exit_code !== null && t.exit_code !== undefined && t.state === 'failed' ? ` (exit ${t.exit_code})` : ''),
        el('td', { class: 'num' }, String(t.attempts)),
        el('td', { class: 'mono' }, t.slot),
        el('td', { class: 'num' }, t.metric === null || t.metric === undefined ? '' : fmtNum(toNum(t.metric))),
        el('td', { class: 'num' }, typeof t.cost_usd === 'number' ? fmtUsd(t.cost_usd) : ''),
        el('td', { class: 'num' }, fmtDuration((t.run_seconds || 0) * 1000)),
        paramNames.map((p) => el('td', {}, fmtValue((t.params || {})[p]))))))));
  }
  render();
  return wrap;
}
