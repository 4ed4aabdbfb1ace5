/* #/report the training report over every project the caller may read, #/report/NAME one
 * project's: the figures as tiles beside their targets, cost and GPU utilization by week, the
 * breakdown table and the runs behind the figures. The period (`period`, and `from`/`to` for
 * dates), the breakdown (`by`) and the active threshold (`active_above`) live in the address. */

import { enc, setHashQuery, tableHref } from '../lib/address.js';
import { api } from '../lib/api.js';
import { el, errorEl } from '../lib/dom.js';
import { fmtDuration, fmtNum, fmtPercent, fmtTime, fmtUsd } from '../lib/format.js';
import { weekTrend } from './report-trend.js';

/** The periods to choose from: a span back from now (as the server reads it), all time, or dates. */
const PERIODS = [['7d', 'last 7 days'], ['30d', 'last 30 days'], ['90d', 'last 90 days'], ['all', 'all time'], ['dates', 'between dates']];
const DEFAULT_PERIOD = '30d';

/** The breakdowns (`by`); `tag` takes a key and is sent as `tag:KEY`. */
const BREAKDOWNS = [['all', 'nothing'], ['project', 'project'], ['user', 'user'], ['group', 'run group'], ['tag', 'tag'],
  ['gpu', 'GPU model'], ['provider', 'provider'], ['pricing', 'spot or on-demand'], ['week', 'week'], ['day', 'day']];

/** A GPU-second is active above this utilization (percent) unless the address says otherwise. */
const DEFAULT_ACTIVE = 10;

/** The targets figures are held to. */
const TARGETS = {
  gpu_utilization_rate: { text: '≥ 70 %', met: (v) => v >= 0.7 },
  queue_wait_s: { text: '< 30 min', met: (v) => v < 30 * 60 },
  spot_savings_rate: { text: '≥ 50 %', met: (v) => v >= 0.5 },
};

const gpuHours = (v) => `${fmtNum(v)} GPU-h`;
const seconds = (v) => fmtDuration(v * 1000) || '0s';

/** The figures in the order the tiles show them: the name in the answer, a label, how its value
 * is written, short and in the breakdown table, and a line on what it was computed from. */
const FIGURES = [
  { name: 'gpu_utilization_rate', label: 'GPU utilization', short: 'GPU util.', fmt: fmtPercent,
    detail: (g, i, r) => `${gpuHours(i.active_gpu_hours)} active of ${gpuHours(i.sampled_gpu_hours)} (above ${r.active_above} %)` },
  { name: 'queue_wait_s', label: 'Queue wait', short: 'queue wait', fmt: seconds,
    detail: (g, i) => `mean of ${i.queued_runs} run${i.queued_runs === 1 ? '' : 's'}` + (i.queue_wait_max_s !== null && i.queue_wait_max_s !== undefined ? `, longest ${seconds(i.queue_wait_max_s)}` : '') },
  { name: 'spot_savings_rate', label: 'Spot share', short: 'spot', fmt: fmtPercent,
    detail: (g, i) => `${gpuHours(i.spot_gpu_hours)} of ${gpuHours(i.provisioned_gpu_hours)} on spot` },
  { name: 'spot_savings_usd', label: 'Spot saved', short: 'spot saved', fmt: fmtUsd,
    detail: (g) => `against on-demand prices, over ${(g.covers || {}).spot_savings_usd ?? '?'} spot runs` },
  { name: 'job_success_rate', label: 'Job success', short: 'success', fmt: fmtPercent,
    detail: (g, i) => `${i.finished} finished of ${(g.covers || {}).job_success_rate ?? '?'} ended` },
  { name: 'time_to_result_median_s', label: 'Time to result', short: 'to result', fmt: seconds,
    detail: (g) => `median of ${(g.covers || {}).time_to_result_median_s ?? '?'} finished runs` +
      (isValue(g.time_to_result_p90_s) ? `; 90 % within ${seconds(g.time_to_result_p90_s)}` : '') },
  { name: 'cost_usd', label: 'Cost', short: 'cost', fmt: fmtUsd,
    detail: (g, i) => `${i.priced_runs} priced run${i.priced_runs === 1 ? '' : 's'}` },
  { name: 'cost_per_gpu_hour_usd', label: 'Cost per active GPU-hour', short: '$/active GPU-h', fmt: fmtUsd,
    detail: (g) => `over ${(g.covers || {}).cost_per_gpu_hour_usd ?? '?'} runs with a price and a GPU series` },
  { name: 'cost_per_experiment_usd', label: 'Cost per experiment', short: '$/experiment', fmt: fmtUsd,
    detail: (g, i) => `over ${i.priced_runs} priced run${i.priced_runs === 1 ? '' : 's'}` },
  { name: 'idle_gpu_hours', label: 'Idle GPU-hours', short: 'idle GPU-h', fmt: fmtNum,
    detail: (g, i) => (i.idle_usd > 0 ? `${fmtUsd(i.idle_usd)} paid for idle GPUs` : `of ${gpuHours(i.sampled_gpu_hours)} with a GPU series`) },
  { name: 'failures', label: 'Infra vs code failures', failures: true },
  { name: 'checkpoint_restore_rate', label: 'Checkpoint restores', short: 'restores ok', fmt: fmtPercent,
    detail: (g, i) => `${i.checkpoint_restores_ok} of ${i.checkpoint_restores} restores worked` },
  { name: 'experiments_per_user_week', label: 'Experiments per user-week', short: 'runs/user-week', fmt: fmtNum,
    detail: (g, i) => `${g.runs} run${g.runs === 1 ? '' : 's'} by ${i.users} user${i.users === 1 ? '' : 's'}` },
  { name: 'energy_kwh', label: 'GPU energy', short: 'kWh', fmt: (v) => `${fmtNum(v)} kWh`,
    detail: (g) => `over ${(g.covers || {}).energy_kwh ?? '?'} runs that measured it` },
];

/** The breakdown table's columns after the group and its runs. */
const COLUMNS = [
  'gpu_utilization_rate', 'idle_gpu_hours', 'queue_wait_s', 'cost_usd', 'cost_per_gpu_hour_usd', 'cost_per_experiment_usd',
  'spot_savings_rate', 'job_success_rate', 'infra_failures', 'code_failures', 'checkpoint_restore_rate', 'experiments_per_user_week',
].map((name) => FIGURES.find((f) => f.name === name) || { name, short: name === 'infra_failures' ? 'infra failures' : 'code failures', fmt: fmtNum });

const isValue = (v) => v !== null && v !== undefined;

/** The report's state, read from its address. */
function readState(params, project) {
  const period = params.get('period');
  const by = params.get('by') || '';
  const known = BREAKDOWNS.some(([b]) => b === by && b !== 'tag') || (by.startsWith('tag:') && by.length > 4);
  const active = Number(params.get('active_above'));
  const date = (v) => (/^\d{4}-\d{2}-\d{2}$/.test(v || '') ? v : '');
  return {
    period: PERIODS.some(([p]) => p === period) ? period : DEFAULT_PERIOD,
    from: date(params.get('from')),
    to: date(params.get('to')),
    by: known ? by : defaultBy(project),
    active: params.has('active_above') && Number.isInteger(active) && active % 5 === 0 && active >= 0 && active <= 95 ? active : DEFAULT_ACTIVE,
  };
}

/** A project's report breaks down by user, the installation's by project. */
const defaultBy = (project) => (project ? 'user' : 'project');

/** The day after a date (YYYY-MM-DD): the end of a period that includes the date. */
function nextDay(date) {
  return new Date(Date.parse(date + 'T00:00:00Z') + 86400000).toISOString().slice(0, 10);
}

/** A date (ms) as YYYY-MM-DD in UTC, as the server's weeks and days are. */
const utcDate = (ms) => new Date(ms).toISOString().slice(0, 10);

/** A breakdown in words. */
function byLabel(by) {
  if (by.startsWith('tag:')) return `tag ${by.slice(4)}`;
  const known = BREAKDOWNS.find(([b]) => b === by);
  return known ? known[1] : by;
}

/** A string literal of the run-search grammar. */
const quoted = (text) => `'${String(text).replace(/'/g, "''")}'`;

/** A run's outcome in words, and the status colour it takes. */
const OUTCOMES = {
  finished: ['finished', 'finished'], code: ['code failure', 'failed'], infra: ['infra failure', 'preempted'],
  killed: ['killed', 'killed'], running: ['running', 'running'],
};

/** The report of `project` (null: every project the caller may read). */
export function reportView(project, params) {
  const st = readState(params, project);
  const body = el('div', { 'data-testid': 'report' }, el('p', { class: 'muted' }, 'Loading the report…'));
  const message = el('div', { class: 'filter-error', 'data-testid': 'report-error' });
  let gen = 0, trend = null;

  const select = (options, value, testid) => {
    const s = el('select', { 'data-testid': testid }, options.map(([v, label]) => el('option', { value: v }, label)));
    s.value = value;
    return s;
  };
  const periodSel = select(PERIODS, st.period, 'report-period');
  const fromInput = el('input', { type: 'date', value: st.from, 'data-testid': 'report-from' });
  const toInput = el('input', { type: 'date', value: st.to, 'data-testid': 'report-to' });
  const dates = el('span', { class: st.period === 'dates' ? '' : 'hidden' }, 'from ', fromInput, ' to ', toInput, el('span', { class: 'muted' }, ' (UTC, both included)'));
  const bySel = select(BREAKDOWNS, st.by.startsWith('tag:') ? 'tag' : st.by, 'report-by');
  const tagInput = el('input', { type: 'text', size: 12, placeholder: 'tag key', value: st.by.startsWith('tag:') ? st.by.slice(4) : '', 'data-testid': 'report-tag' });
  const tagBox = el('span', { class: st.by.startsWith('tag:') ? '' : 'hidden' }, tagInput);
  const activeSel = select(Array.from({ length: 20 }, (_, k) => [String(5 * k), `${5 * k} %`]), String(st.active), 'report-active');

  /** Reads the controls into the state, keeps it in the address and loads the report again. */
  function apply() {
    st.period = periodSel.value;
    st.from = fromInput.value;
    st.to = toInput.value;
    dates.className = st.period === 'dates' ? '' : 'hidden';
    tagBox.className = bySel.value === 'tag' ? '' : 'hidden';
    const tag = tagInput.value.trim();
    if (bySel.value === 'tag' && !tag) { message.textContent = 'Name the tag to break down by.'; tagInput.focus(); return; }
    st.by = bySel.value === 'tag' ? 'tag:' + tag : bySel.value;
    st.active = Number(activeSel.value);
    load();
  }
  for (const c of [periodSel, fromInput, toInput, bySel, activeSel]) c.addEventListener('change', apply);
  tagInput.addEventListener('keydown', (e) => { if (e.key === 'Enter') apply(); });
  tagInput.addEventListener('change', apply);

  /** The address's query for this state (defaults left out). */
  function addressState(s = st) {
    return {
      period: s.period === DEFAULT_PERIOD ? '' : s.period,
      from: s.period === 'dates' ? s.from : '',
      to: s.period === 'dates' ? s.to : '',
      by: s.by === defaultBy(project) ? '' : s.by,
      active_above: s.active === DEFAULT_ACTIVE ? '' : s.active,
    };
  }

  /** The API query for this state, broken down by `by`. */
  function apiQuery(by) {
    const q = new URLSearchParams();
    if (project) q.set('projects', project);
    if (st.period === 'dates') {
      if (st.from) q.set('since', st.from);
      if (st.to) q.set('until', nextDay(st.to));
    } else if (st.period !== 'all') q.set('since', st.period);
    if (by !== 'all') q.set('by', by);
    q.set('active_above', String(st.active));
    return q.toString();
  }

  /** An address of a report: this one's state for `other` (a project, or null for all of them). */
  function reportHref(other) {
    const s = addressState({ ...st, by: other ? 'user' : 'project' });
    const q = new URLSearchParams(Object.entries(s).filter(([, v]) => v !== ''));
    return (other ? '#/report/' + enc(other) : '#/report') + (q.toString() ? '?' + q : '');
  }

  async function load() {
    const my = ++gen;
    message.textContent = '';
    setHashQuery(addressState());
    const main = api('/report?' + apiQuery(st.by));
    const weekly = st.by === 'week' ? main : api('/report?' + apiQuery('week'));
    const [rep, weeks] = await Promise.allSettled([main, weekly]);
    if (my !== gen) return;
    if (trend) { trend.destroy(); trend = null; }
    if (rep.status === 'rejected') {
      const e = rep.reason;
      body.replaceChildren(errorEl((e.field ? e.field + ': ' : '') + e.message));
      return;
    }
    render(rep.value, weeks);
  }

  function render(report, weeks) {
    const total = report.total;
    const trendPart = weeks.status === 'rejected' ? errorEl(weeks.reason)
      : !(weeks.value.groups || []).length ? el('p', { class: 'muted' }, 'No runs in this period.')
        : (trend = weekTrend(weeks.value.groups)).node;
    body.replaceChildren(...[
      el('p', { 'data-testid': 'report-scope' },
        `${total.runs} run${total.runs === 1 ? '' : 's'} ${project ? `of ${project} ` : ''}started from ${utcDate(report.since)} to ${utcDate(Math.max(report.since, report.until - 1))} (UTC)`,
        el('span', { class: 'muted' }, ` · a GPU-second is active above ${report.active_above} % utilization · hover a figure for its definition`)),
      report.pending_runs > 0 ? el('p', { class: 'filter-warning', 'data-testid': 'report-pending' },
        `${report.pending_runs} run${report.pending_runs === 1 ? '' : 's'} could not be brought up to date for this answer; reload to count them.`) : null,
      el('div', { class: 'tiles', 'data-testid': 'report-tiles' }, FIGURES.map((f) => tile(f, total, report))),
      budgetsPart(report.budgets || []),
      el('h2', {}, 'Cost and GPU utilization by week'), trendPart,
      report.by === 'all' ? null : el('h2', {}, 'By ' + byLabel(report.by)),
      report.by === 'all' ? null : breakdownTable(report),
      el('h2', {}, 'The runs behind the figures'),
      runList('Most expensive', report.runs.most_expensive, 'most_expensive', 'No run in this period has a price.'),
      runList('Idlest GPUs', report.runs.idlest, 'idlest', 'No run in this period has a GPU utilization series.'),
      runList('Infra failures, newest first', report.runs.infra_failures, 'infra_failures', 'No run in this period failed for want of its infrastructure.'),
    ].filter(Boolean));
    if (trend) trend.mount();
  }

  /** One figure of the total as a tile: its value, its target, what it was computed from, and
   * why it is missing or leaves runs out; its definition as the tooltip. */
  function tile(fig, g, report) {
    const defs = report.definitions || {}, reasons = g.reasons || {}, i = g.inputs || {};
    if (fig.failures) {
      const ended = (g.covers || {}).infra_failures ?? 0;
      return el('div', { class: 'tile', 'data-testid': 'report-tile', 'data-figure': fig.name,
        'data-infra': String(g.infra_failures), 'data-code': String(g.code_failures),
        title: `infra failures: ${defs.infra_failures || ''}\n\ncode failures: ${defs.code_failures || ''}` },
      el('div', { class: 'tile-label' }, fig.label),
      el('div', { class: 'tile-value', 'data-testid': 'tile-value' }, `${g.infra_failures} infra · ${g.code_failures} code`),
      el('div', { class: 'tile-detail muted' }, `of ${ended} ended run${ended === 1 ? '' : 's'}`),
      g.infra_failures > 0 ? el('div', { class: 'tile-detail' }, el('a', { href: '#', onclick: (e) => { e.preventDefault(); body.querySelector('[data-list=infra_failures]')?.scrollIntoView(); } }, 'the infra failures ↓')) : null);
    }
    const v = g[fig.name], target = TARGETS[fig.name], reason = reasons[fig.name];
    const met = isValue(v) && target ? target.met(v) : null;
    return el('div', {
      class: 'tile' + (met === true ? ' met' : met === false ? ' missed' : ''), 'data-testid': 'report-tile', 'data-figure': fig.name,
      'data-value': isValue(v) ? String(v) : '', title: defs[fig.name] || '',
    },
    el('div', { class: 'tile-label' }, fig.label),
    el('div', { class: 'tile-value', 'data-testid': 'tile-value' }, isValue(v) ? fig.fmt(v) : '—'),
    target ? el('div', { class: 'tile-target', 'data-testid': 'tile-target', 'data-met': met === null ? '' : String(met) },
      `target ${target.text}`, met === null ? '' : met ? ' · met' : ' · missed') : null,
    isValue(v) ? el('div', { class: 'tile-detail muted' }, fig.detail(g, i, report)) : null,
    reason ? el('div', { class: isValue(v) ? 'tile-note' : 'tile-reason', 'data-testid': 'tile-reason' }, reason) : null);
  }

  /** The projects' monthly budgets with this month's spend, each as a bar; null without any. */
  function budgetsPart(budgets) {
    if (!budgets.length) return null;
    const row = (b) => {
      const used = b.used ?? 0;
      return el('div', { class: 'budget' + (used > 1 ? ' missed' : ''), 'data-testid': 'report-budget', 'data-project': b.project,
        'data-spent': String(b.spent_usd), title: b.unpriced_runs ? `${b.unpriced_runs} run(s) of the month have no price and are left out` : null },
      el('span', { class: 'budget-name' }, b.project),
      el('span', { class: 'budget-bar' }, el('span', { class: 'budget-fill', style: `width: ${Math.min(100, used * 100).toFixed(1)}%` })),
      el('span', { 'data-testid': 'budget-text' }, `${fmtUsd(b.spent_usd)} of ${fmtUsd(b.monthly_usd)}`,
        b.used === null || b.used === undefined ? '' : ` (${fmtPercent(b.used)})`));
    };
    return el('div', { class: 'budgets', 'data-testid': 'report-budgets' },
      el('h2', {}, `Budgets, ${budgets[0].month} (UTC)`), budgets.map(row));
  }

  /** The group's name as the table writes it. */
  function groupLabel(by, name) {
    if (by === 'week') return 'week of ' + name;
    return name === '' ? '(none)' : name;
  }

  /** The run-search filter for a group's runs, or null when the grammar cannot name them. */
  function groupFilter(by, g) {
    const period = `start_time >= ${g.inputs.since} and start_time < ${g.inputs.until}`;
    if (by === 'project' || by === 'week' || by === 'day') return period;
    if (g.group === '') return null;
    if (by === 'user') return `${period} and user = ${quoted(g.group)}`;
    if (by === 'group') return `${period} and group = ${quoted(g.group)}`;
    if (by.startsWith('tag:')) return `${period} and tags.\`${by.slice(4).replace(/`/g, '``')}\` = ${quoted(g.group)}`;
    return null;
  }

  /** A row per group with its figures, and the total; a project's row links to its own report,
   * and a group's runs to the runs table when a filter can name them. */
  function breakdownTable(report) {
    const defs = report.definitions || {};
    const cells = (g) => COLUMNS.map((c) => {
      const v = g[c.name], why = (g.reasons || {})[c.name];
      return el('td', { class: 'num' + (isValue(v) ? '' : ' muted'), 'data-figure': c.name, title: why || null },
        isValue(v) ? c.fmt(v) : '—', isValue(v) && why ? el('span', { class: 'muted' }, '*') : null);
    });
    const row = (g) => {
      const runsProject = project || (report.by === 'project' ? g.group : null);
      const filter = runsProject ? groupFilter(report.by, g) : null;
      const runs = filter ? el('a', { href: `${tableHref(runsProject).split('?')[0]}?filter=${enc(filter)}`, 'data-testid': 'report-group-runs', title: 'these runs in the runs table' }, String(g.runs)) : String(g.runs);
      const name = report.by === 'project' && !project && g.group
        ? el('a', { href: reportHref(g.group), 'data-testid': 'report-group-link', title: `${g.group}'s report` }, g.group)
        : groupLabel(report.by, g.group);
      return el('tr', { 'data-testid': 'report-group-row', 'data-group': g.group }, el('td', {}, name), el('td', { class: 'num' }, runs), cells(g));
    };
    return el('div', { class: 'wide-table' }, el('table', { class: 'list report-table', 'data-testid': 'report-table' },
      el('thead', {}, el('tr', {}, el('th', {}, report.by.startsWith('tag:') ? report.by.slice(4) : report.by), el('th', {}, 'runs'),
        COLUMNS.map((c) => el('th', { title: defs[c.name] || '' }, c.short)))),
      el('tbody', {}, report.groups.map(row)),
      el('tfoot', {}, el('tr', { 'data-testid': 'report-total-row' }, el('th', {}, 'total'), el('td', { class: 'num' }, String(report.total.runs)), cells(report.total)))),
    el('p', { class: 'muted' }, '— a figure that cannot be computed (hover for why); * a figure that leaves runs out (hover for which).'));
  }

  /** One list of runs behind the figures, each linking to its run's page. */
  function runList(title, runs, list, empty) {
    const head = el('h3', {}, title);
    if (!runs.length) return el('div', { 'data-testid': 'report-runs', 'data-list': list }, head, el('p', { class: 'muted' }, empty));
    const failures = list === 'infra_failures';
    return el('div', { 'data-testid': 'report-runs', 'data-list': list }, head, el('div', { class: 'wide-table' }, el('table', { class: 'list' },
      el('thead', {}, el('tr', {}, ['run', project ? null : 'project', 'user', 'outcome', 'started', 'cost', 'GPU-h', 'idle GPU-h', failures ? 'why' : null]
        .filter(Boolean).map((h) => el('th', {}, h)))),
      el('tbody', {}, runs.map((r) => {
        const [outcome, status] = OUTCOMES[r.outcome] || [r.outcome, ''];
        return el('tr', { 'data-testid': 'report-run-row', 'data-run-id': r.id, title: r.failure || null },
          el('td', {}, el('a', { href: '#/run/' + enc(r.id), 'data-testid': 'report-run-link' }, r.name || r.id)),
          project ? null : el('td', {}, el('a', { href: tableHref(r.project) }, r.project)),
          el('td', {}, r.user || ''),
          el('td', {}, el('span', { class: 'status status-' + status }, outcome)),
          el('td', { class: 'muted' }, fmtTime(r.start_time)),
          el('td', { class: 'num' }, isValue(r.cost_usd) ? fmtUsd(r.cost_usd) : '—'),
          el('td', { class: 'num' }, fmtNum(r.gpu_hours)),
          el('td', { class: 'num' }, isValue(r.idle_gpu_hours) ? fmtNum(r.idle_gpu_hours) : '—'),
          failures ? el('td', {}, r.failure || '') : null);
      })))));
  }

  const node = el('div', {},
    el('div', { class: 'breadcrumb' }, el('a', { href: '#/' }, 'Projects'), ' / ',
      project ? [el('a', { href: tableHref(project) }, project), ' / '] : null),
    el('h1', {}, project ? `Report · ${project}` : 'Report',
      project ? el('a', { class: 'sub-link', href: reportHref(null), 'data-testid': 'report-all-link' }, 'every project →') : null),
    el('div', { class: 'toolbar report-controls' },
      el('label', {}, 'period ', periodSel), dates,
      el('label', {}, 'break down by ', bySel), tagBox,
      el('label', { title: 'A GPU-second counts as active when its utilization sample is above this' }, 'active above ', activeSel)),
    message, body);
  return {
    node,
    title: project ? `Report · ${project}` : 'Report',
    mounted: () => { load(); },
    cleanup: () => { gen++; if (trend) { trend.destroy(); trend = null; } },
  };
}
