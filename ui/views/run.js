/* #/run/ID a run's page: its info, params, tags, metrics and charts (live while the run is
 * running), metadata, artifacts and checkpoints; edit, archive, restore and delete. */

import { chartControls, chartSettings, mountCharts, seriesState } from '../charts.js';
import { enc, tableHref } from '../lib/address.js';
import { api } from '../lib/api.js';
import { runColor } from '../lib/colors.js';
import { el, errorEl, kvTable, statusEl } from '../lib/dom.js';
import { fmtDuration, fmtNum, fmtTime, toNum } from '../lib/format.js';
import { COST_KEY, isSystemKey, LIVE_MS, orderSystemKeys, runDuration } from '../lib/runs.js';
import { mayAdmin, mayWrite } from '../lib/session.js';
import { artifactPreviews, artifactsTable, checkpointsTable } from './run-artifacts.js';

/** The summary of each metric key: last, min, max, mean, last step and count. */
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

/** A run's metadata, a section each: the environment, the code (with its diff), and the rest. */
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

/** Tags as text, one per line: `key=value`, or `label` alone. */
function tagsText(tags) {
  return Object.entries(tags || {}).map(([k, v]) => (v === '' ? k : `${k}=${v}`)).join('\n');
}

/** Tags from that text. */
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

/** The page of run `id`; re-reads the run every LIVE_MS while it is running. */
export function runView(id) {
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
