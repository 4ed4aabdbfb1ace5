/* #/run/ID a run's page: its info, the job it follows (its attempts on a timeline and in a
 * table), params, tags, metrics and charts (live while the run is running; system charts by
 * node), media, metadata, artifacts and checkpoints; edit, archive, restore and delete. */

import { chartControls, chartSettings, mountCharts, seriesState } from '../charts.js';
import { collapsedSection, runSystemCharts } from '../system-charts.js';
import { enc, tableHref } from '../lib/address.js';
import { api } from '../lib/api.js';
import { runColor } from '../lib/colors.js';
import { el, errorEl, kvTable, statusEl } from '../lib/dom.js';
import { fmtDuration, fmtNum, fmtTime, fmtUsd, toNum } from '../lib/format.js';
import { COST_KEY, isSystemKey, LIVE_MS, runDuration } from '../lib/runs.js';
import { mayAdmin, mayWrite } from '../lib/session.js';
import { artifactPreviews, artifactsTable, checkpointsTable } from './run-artifacts.js';
import { runLogsLink, runTabs } from './run-logs.js';
import { runMediaSection } from './run-media.js';

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

/** "N things", or "1 thing". */
const plural = (n, one, many = one + 's') => `${fmtNum(n)} ${n === 1 ? one : many}`;

/** GPU-hours as text. */
const fmtGpuHours = (h) => (Number.isFinite(h) ? `${h >= 100 ? h.toFixed(0) : h.toFixed(1)} GPU-h` : '');

/** Where an attempt ran, short (cloud and zone, else region) or whole (cloud / region / zone). */
const attemptPlace = (a, whole) => (whole ? [a.cloud, a.region, a.zone] : [a.cloud, a.zone || a.region]).filter(Boolean).join(whole ? ' / ' : ' ');

/** Spot or on-demand, when the attempt said. */
const attemptMarket = (a) => (a.spot === true ? 'spot' : a.spot === false ? 'on-demand' : '');

/** An attempt's price per hour, or why it has none. */
const attemptPrice = (a) => (a.usd_per_hour === null || a.usd_per_hour === undefined ? 'unpriced' : fmtUsd(a.usd_per_hour) + '/h');

/** The end of an attempt on the timeline: its end, or now while it runs. */
const attemptEnd = (a, now) => a.end_time ?? (a.status === 'running' ? Math.max(now, a.start_time) : a.start_time);

/** The job in one line: launcher and id, ranks and nodes, GPUs, attempts, cost and what was lost. */
function jobSummary(job) {
  const parts = [
    [job.launcher, job.job_id ? `job ${job.job_id}` : 'job'].filter(Boolean).join(' '),
    `${plural(job.world_size, 'rank')} on ${plural(job.node_count, 'node')}`,
    plural(job.gpus, 'GPU'),
    plural(job.attempts, 'attempt'),
    `cost ${fmtUsd(job.cost_usd)}` + (job.usd_per_hour > 0 ? ` (now ${fmtUsd(job.usd_per_hour)}/h)` : '') +
      (job.unpriced_nodes > 0 ? `, ${plural(job.unpriced_nodes, 'node')} unpriced` : ''),
    fmtGpuHours(job.gpu_hours),
    `lost ${fmtUsd(job.lost_usd)} and ${fmtGpuHours(job.lost_gpu_hours)}`,
    `${plural(job.steps_replayed, 'step')} replayed`,
  ];
  return el('p', { class: 'job-summary', 'data-testid': 'job-summary' }, parts.filter(Boolean).join(' · '));
}

/** The labels of times on the timeline's axis, each told apart from its neighbours: the time of
 * day (the date too across a day), with seconds when minutes alone would repeat; a time that
 * still reads like the one before is left unlabelled. */
function axisTimes(times, span) {
  const base = span < 86400000 ? { hour: '2-digit', minute: '2-digit' } : { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit' };
  const write = (opts) => times.map((t) => (span < 86400000 ? new Date(t).toLocaleTimeString([], opts) : new Date(t).toLocaleString([], opts)));
  let labels = write(base);
  if (new Set(labels).size < labels.length) labels = write({ ...base, second: '2-digit' });
  return labels.map((l, i) => (i > 0 && l === labels[i - 1] ? '' : l));
}

/**
 * The attempts as bars on one time axis (start to end, a running one up to now), coloured by how
 * each ended; the work lost after the last checkpoint is hatched, the checkpoint marked.
 */
function attemptsTimeline(attempts, now) {
  const ends = attempts.map((a) => attemptEnd(a, now));
  const t0 = Math.min(...attempts.map((a) => a.start_time));
  const t1 = Math.max(t0 + 1000, ...ends);
  const at = (t) => (100 * (t - t0)) / (t1 - t0);
  const rows = attempts.map((a, i) => {
    const end = ends[i], span = Math.max(1, end - a.start_time);
    const inBar = (t) => `${Math.min(100, Math.max(0, (100 * (t - a.start_time)) / span)).toFixed(2)}%`;
    const ckpt = a.last_checkpoint_time;
    const bar = el('div', {
      class: 'tl-bar attempt-' + a.status, 'data-testid': 'timeline-bar',
      style: `left:${at(a.start_time).toFixed(2)}%;width:${Math.max(0.4, at(end) - at(a.start_time)).toFixed(2)}%`,
      title: `attempt ${a.number}: ${fmtTime(a.start_time)} – ${a.end_time ? fmtTime(a.end_time) : 'now'} (${fmtDuration(end - a.start_time)})`,
    },
    a.lost_gpu_hours > 0 ? el('div', { class: 'tl-lost', style: `left:${ckpt ? inBar(ckpt) : '0%'}`,
      title: `lost after the last checkpoint: ${fmtUsd(a.lost_usd)}, ${fmtGpuHours(a.lost_gpu_hours)}, ${plural(a.lost_steps, 'step')}` }) : null,
    ckpt ? el('div', { class: 'tl-ckpt', style: `left:${inBar(ckpt)}`,
      title: `last checkpoint: step ${fmtNum(a.last_checkpoint_step)} at ${fmtTime(ckpt)}` }) : null);
    const label = [attemptPlace(a), a.instance_type, attemptMarket(a), attemptPrice(a), fmtUsd(a.cost_usd)].filter(Boolean);
    return el('div', { class: 'tl-row', 'data-testid': 'timeline-attempt', 'data-attempt': String(a.number), 'data-status': a.status },
      el('div', { class: 'tl-label' }, el('b', {}, `#${a.number}`), ' ', statusEl(a.status),
        el('span', { 'data-testid': 'timeline-label' }, label.map((t) => ' · ' + t).join(''))),
      el('div', { class: 'tl-track' }, bar));
  });
  const fractions = [0, 0.25, 0.5, 0.75, 1];
  const labels = axisTimes(fractions.map((f) => t0 + f * (t1 - t0)), t1 - t0);
  const ticks = fractions.map((f, i) => (labels[i] ? el('span', { class: 'tl-tick', 'data-testid': 'timeline-tick', style: `left:${(100 * f).toFixed(0)}%` }, labels[i]) : null));
  return el('div', { class: 'job-timeline', 'data-testid': 'job-timeline' }, rows, el('div', { class: 'tl-axis' }, ticks));
}

/** One attempt's nodes: node rank, host, GPUs and price. */
function attemptNodes(a) {
  return (a.nodes || []).map((n) => {
    const gpus = n.gpus ? `${n.gpus}× ${n.gpu_names && n.gpu_names.length ? [...new Set(n.gpu_names)].join(', ') : 'GPU'}` : 'no GPU';
    const price = n.usd_per_hour === null || n.usd_per_hour === undefined ? 'unpriced' : fmtUsd(n.usd_per_hour) + '/h';
    return el('div', { class: 'mono', 'data-testid': 'attempt-node', title: [n.driver ? 'driver ' + n.driver : '', n.price_source ? 'price from ' + n.price_source : ''].filter(Boolean).join('; ') || null },
      `${n.node_rank}: ${n.host || '?'} · ${gpus} · ${price} · ${plural(n.processes, 'process', 'processes')}`);
  });
}

/** The attempts in a table that fits the page (several facts a cell, one a line); why one ended
 * and its last lines, when known, in a row below it. */
function attemptsTable(attempts, now, open) {
  const head = ['#', 'status', 'when', 'where', 'nodes', 'ranks · GPUs', 'price · cost', 'steps', 'lost'];
  const lines = (...parts) => parts.filter((p) => p !== null && p !== undefined && p !== '').map((p) => el('div', {}, p));
  const rows = [];
  for (const a of attempts) {
    const steps = a.first_step === null && a.last_step === null ? '' : `${fmtNum(a.first_step)}–${fmtNum(a.last_step)}` +
      (a.steps_replayed > 0 ? ` (${fmtNum(a.steps_replayed)} replayed)` : '');
    const lost = a.lost_gpu_hours > 0 || a.lost_steps > 0
      ? `${fmtUsd(a.lost_usd)} · ${fmtGpuHours(a.lost_gpu_hours)} · ${plural(a.lost_steps, 'step')}` : '';
    rows.push(el('tr', { 'data-testid': 'attempt-row', 'data-attempt': String(a.number) },
      el('td', { class: 'num' }, String(a.number)), el('td', {}, statusEl(a.status)),
      el('td', {}, lines(fmtTime(a.start_time), a.end_time ? '→ ' + fmtTime(a.end_time) : '', fmtDuration(attemptEnd(a, now) - a.start_time))),
      el('td', {}, lines(attemptPlace(a, true), a.instance_type || '', attemptMarket(a))),
      el('td', { class: 'nodes' }, attemptNodes(a)),
      el('td', { title: `${a.ranks} of ${a.world_size} ranks joined, on ${plural(a.node_count, 'node')}` }, lines(`${a.ranks}/${a.world_size} ranks`, plural(a.gpus, 'GPU'))),
      el('td', { title: (a.price_sources || []).join(', ') || null }, lines(attemptPrice(a),
        fmtUsd(a.cost_usd) + (a.unpriced_nodes > 0 ? ` (+${plural(a.unpriced_nodes, 'node')} unpriced)` : ''), fmtGpuHours(a.gpu_hours))),
      el('td', {}, lines(steps, a.last_checkpoint_step === null ? '' : `checkpoint at step ${fmtNum(a.last_checkpoint_step)}, ${fmtTime(a.last_checkpoint_time)}`)),
      el('td', {}, lost)));
    // What decided its end (the server's evidence); a finished attempt needs no explaining.
    const why = a.status === 'finished' ? a.reason : (a.ended_by || a.reason);
    if (why || a.last_lines) {
      const details = el('details', { 'data-testid': 'attempt-reason', 'data-attempt': String(a.number), open: open.has(String(a.number)) },
        el('summary', {}, `why attempt ${a.number} ended: `, el('span', { class: 'mono' }, (why || 'its last lines').split('\n')[0])),
        why ? el('pre', { class: 'json' }, why) : null,
        a.reason && a.reason !== why ? el('pre', { class: 'json' }, a.reason) : null,
        a.last_lines ? el('pre', { class: 'json', 'data-testid': 'attempt-last-lines' }, a.last_lines) : null);
      rows.push(el('tr', { class: 'attempt-reason' }, el('td', { colspan: String(head.length) }, details)));
    }
  }
  return el('div', { class: 'wide-table' }, el('table', { class: 'list fit', 'data-testid': 'attempts-table' },
    el('thead', {}, el('tr', {}, head.map((h) => el('th', {}, h)))), el('tbody', {}, rows)));
}

/** The job a run follows: its summary line, its attempts on a timeline and in a table. `open`:
 * the attempts whose reason is unfolded (kept across live updates). */
function jobSection(run, open = new Set()) {
  const now = run.job.at_ms || Date.now();
  const attempts = run.attempts || [];
  return el('div', { 'data-testid': 'job-section' }, el('h2', {}, 'Job'), jobSummary(run.job),
    attempts.length ? attemptsTimeline(attempts, now) : null,
    attempts.length ? attemptsTable(attempts, now, open) : el('p', { class: 'muted' }, 'No attempt recorded.'));
}

/** What the page knows of node n of a job (its host and GPUs, in the latest attempt that had it). */
function nodeLabel(run, n) {
  const node = [...(run.attempts || [])].reverse().map((a) => (a.nodes || []).find((x) => x.node_rank === n)).find(Boolean);
  return node ? [node.host, node.gpus ? plural(node.gpus, 'GPU') : ''].filter(Boolean).join(' · ') : '';
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
 * A run's actions: edit its name, group, colour, notes and tags (PATCH /runs/ID), archive it or restore
 * it, and delete an archived run for good (DELETE /runs/ID, admins only, after a confirmation).
 * Offered only when the user may write to the run's project. `done` re-reads the run.
 */
function runActions(run, role, done) {
  if (!mayWrite(role)) return el('span', { class: 'muted', 'data-testid': 'read-only' }, 'read only');
  const error = el('span', { class: 'error', 'data-testid': 'run-edit-error' });
  const form = el('form', { class: 'panel run-edit hidden', 'data-testid': 'run-edit' });
  const name = el('input', { type: 'text', name: 'name', value: run.name || '', 'data-testid': 'edit-name', size: 40 });
  const group = el('input', { type: 'text', name: 'group', value: run.group || '', 'data-testid': 'edit-group', size: 30 });
  const color = el('input', { type: 'color', name: 'color', value: runColor(run), 'data-testid': 'edit-color', title: "the run's colour in every chart" });
  const notes = el('textarea', { name: 'notes', rows: 4, cols: 60, 'data-testid': 'edit-notes' });
  notes.value = run.notes || '';
  const tags = el('textarea', { name: 'tags', rows: 4, cols: 60, 'data-testid': 'edit-tags', placeholder: 'key=value or a label, one per line' });
  tags.value = tagsText(run.tags);
  form.append(
    el('label', {}, 'name ', name), el('label', {}, 'group ', group), el('label', {}, 'colour ', color),
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
    if (color.value.toLowerCase() !== runColor(run)) body.color = color.value;
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
  const stopButton = el('button', {
    type: 'button', class: 'danger', 'data-testid': 'stop-run',
    title: "ask the run's processes to stop: each sees it with its next heartbeat, and the run ends killed",
  }, 'Stop');
  stopButton.addEventListener('click', async () => {
    if (!confirm(`Stop run ${run.name || run.id}? Its processes stop with their next heartbeat.`)) return;
    try {
      await api(`/runs/${enc(run.id)}/stop`, { body: { reason: 'from the UI' } });
      stopButton.textContent = 'Stopping…';
      stopButton.disabled = true;
    } catch (err) { error.textContent = err.message; form.classList.remove('hidden'); }
  });
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
      run.status === 'running' && !run.archived ? stopButton : null,
      run.archived
        ? el('button', { type: 'button', 'data-testid': 'restore-run', onclick: () => lifecycle('restore') }, 'Restore')
        : el('button', { type: 'button', 'data-testid': 'archive-run', title: 'hide the run from the table; it can be restored', onclick: () => lifecycle('archive') }, 'Archive'),
      run.archived && mayAdmin(role)
        ? el('button', { type: 'button', class: 'danger', 'data-testid': 'delete-run', title: 'delete the run and its data for good', onclick: purge }, 'Delete for good')
        : null),
    form);
}

/** The run's alerts (`trainlog.alert`, rules), newest first, with their step and repeats. */
function alertsSection(alerts) {
  const rows = [...alerts].reverse().map((a) => el('tr', { 'data-testid': 'alert-row', class: 'alert-' + a.level },
    el('td', {}, fmtTime(a.time)), el('td', {}, a.level), el('td', {}, a.step ?? ''),
    el('td', {}, el('strong', {}, a.title), a.text ? el('div', { class: 'muted' }, a.text) : null),
    el('td', {}, a.count > 1 ? `×${a.count}` : ''), el('td', { class: 'muted' }, a.rule || 'from code')));
  return el('div', { 'data-testid': 'alerts' }, el('h2', {}, 'Alerts'),
    el('table', { class: 'kv' }, el('thead', {}, el('tr', {}, ...['time', 'level', 'step', 'alert', 'repeats', 'raised by'].map((h) => el('th', {}, h)))),
      el('tbody', {}, ...rows)));
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
      // The job's cost (every attempt and node) where every node had a price: the figure the job
      // section, the runs table and the report show.
      cost: run.job && run.job.unpriced_nodes === 0 ? fmtUsd(run.job.cost_usd)
        : (run.summary || {})[COST_KEY] ? fmtUsd(toNum(run.summary[COST_KEY].last)) : run.job ? fmtUsd(run.job.cost_usd) : null,
    }, 'run-info', true);
  }

  async function render(run) {
    const [arts, ckpts, proj, alerts] = await Promise.allSettled([
      api(`/runs/${enc(id)}/artifacts`), api(`/runs/${enc(id)}/checkpoints`), api('/projects/' + enc(run.project)),
      api(`/runs/${enc(id)}/alerts`)]);
    const role = proj.status === 'fulfilled' ? proj.value.your_role : undefined;
    if (!alive) return;
    unmount();
    document.title = `${run.name || run.id} · ${run.project} · trainlog`;
    const keys = Object.keys(run.summary || {}).sort();
    const metricKeys = keys.filter((k) => !isSystemKey(k));
    const systemKeys = keys.filter(isSystemKey);
    shownKeys = keys.join('\n');
    const series = [{ run_id: run.id, name: run.name || run.id, color: runColor(run), start_time: run.start_time }];
    const shown = seriesState();
    // The alerts raised at a step mark the metric charts there.
    const markers = alerts.status === 'fulfilled'
      ? alerts.value.alerts.filter((a) => a.step != null).map((a) => ({ step: a.step, level: a.level, title: a.title })) : [];
    const settings = chartSettings({ markers }, shown);
    const systemSettings = chartSettings({ xMode: 'relative' }, shown);
    const chartsEl = el('div', { 'data-testid': 'metric-charts' });
    const system = systemKeys.length ? collapsedSection(`System (${systemKeys.length} series)`, 'system-section', () => {
      const charts = runSystemCharts(run, runColor(run), systemKeys, systemSettings, (n) => nodeLabel(run, n));
      return { ...charts, node: el('div', { 'data-testid': 'system-panel' }, chartControls(systemSettings), charts.node) };
    }) : null;
    if (system) mounted.push(system);
    parts = {
      status: el('span', {}, statusEl(run.status)),
      info: el('div', {}, runInfo(run)),
      summary: el('div', {}, summaryTable(run, metricKeys)),
      live: el('span', { class: 'muted live', 'data-testid': 'live-status' }),
      job: el('div', {}, run.job ? jobSection(run) : null),
    };
    const md = run.metadata || {};
    const meta = metadataSections(md);
    const media = runMediaSection(run);
    mounted.push(media);
    body.replaceChildren(...[
      el('div', { class: 'breadcrumb' }, el('a', { href: '#/' }, 'Projects'), ' / ',
        el('a', { href: '#/p/' + enc(run.project) }, run.project), ' / '),
      el('h1', { 'data-testid': 'run-title' }, run.name || run.id, ' ', parts.status, ' ', parts.live,
        run.archived ? el('span', { class: 'badge', 'data-testid': 'archived' }, 'archived') : ''),
      runTabs(id, 'overview'),
      (run.tags || {}).sweep ? el('p', {}, el('a', { href: '#/sweep/' + enc(run.tags.sweep), 'data-testid': 'run-sweep-link' },
        `trial ${run.tags.sweep_trial ?? ''} of its sweep →`)) : null,
      runActions(run, role, () => { clearTimeout(liveTimer); liveTimer = null; load(); }),
      el('div', { class: 'panel' }, parts.info, run.notes ? el('p', { class: 'notes', 'data-testid': 'run-notes' }, run.notes) : null),
      parts.job,
      alerts.status === 'fulfilled' && alerts.value.alerts.length ? alertsSection(alerts.value.alerts) : null,
      el('div', { class: 'grid2' },
        el('div', {}, el('h2', {}, 'Parameters'), kvTable(run.params, 'params-table')),
        el('div', {}, el('h2', {}, 'Tags'), kvTable(run.tags, 'tags-table'))),
      el('h2', {}, 'Metrics'),
      parts.summary,
      metricKeys.length ? el('div', { style: 'margin-top:12px' }, chartControls(settings), runLogsLink(id, chartsEl, settings), chartsEl) : null,
      el('h2', {}, 'Media'),
      media.node,
      system ? system.node : null,
      el('h2', {}, 'Metadata'),
      meta.length ? el('div', { class: 'grid2' }, meta) : el('p', { class: 'muted' }, 'No metadata.'),
      el('h2', {}, 'Artifacts'), artifactsTable(id, arts), artifactPreviews(id, arts),
      el('h2', {}, 'Checkpoints'), checkpointsTable(id, ckpts)].filter(Boolean));
    if (metricKeys.length) mounted.push(mountCharts(chartsEl, metricKeys, series, settings));
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
    if (Object.keys(run.summary || {}).sort().join('\n') !== shownKeys || !run.job !== !parts.job.firstChild) { await render(run); return; }
    parts.status.replaceChildren(statusEl(run.status));
    parts.info.replaceChildren(runInfo(run));
    if (run.job) {
      const open = new Set([...parts.job.querySelectorAll('details[open]')].map((d) => d.dataset.attempt));
      parts.job.replaceChildren(jobSection(run, open));
    }
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
