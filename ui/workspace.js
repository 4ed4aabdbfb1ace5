/* The compare page's panels as a person arranges them: line charts (x-axis: step, wall time,
 * relative time, or any logged metric such as `epoch` or `tokens`), scatter panels (a metric or
 * param against another, a point per run) and bar panels (a bar per run), in named sections.
 * Each panel can be added, removed, made one or two columns wide, moved, put in another section,
 * and given its own x-axis, smoothing, log scale, y range and runs. The arrangement travels in
 * the address (`ws=`) when it fits, and is kept as the project's workspace (the saved view named
 * `workspace`) or as a named view. */

import { chartSettings, createChart, loadSeries, startNearViewport } from './charts.js';
import { api } from './lib/api.js';
import { enc } from './lib/address.js';
import { barList } from './lib/bars.js';
import { closingMenu, el } from './lib/dom.js';
import { fmtNum, toNum } from './lib/format.js';
import { scatterPlot } from './lib/scatter.js';

/** The saved view that holds a project's workspace. */
export const WORKSPACE_VIEW = 'workspace';

/** The longest workspace kept in the address; a larger one is kept by saving it. */
const WS_IN_URL_MAX = 1800;

/** The automatic panels: a line chart per metric key, in sections by key prefix. */
export function autoWorkspace(keys) {
  const sections = new Map();
  for (const key of keys) {
    const i = key.indexOf('/');
    const name = i > 0 ? key.slice(0, i) : 'charts';
    if (!sections.has(name)) sections.set(name, []);
    sections.get(name).push(linePanel(key));
  }
  return { v: 1, sections: [...sections.entries()].map(([name, panels]) => ({ name, panels })) };
}

const linePanel = (key) => ({ type: 'line', key, x: 'step', smooth: 0, log: false, ymin: null, ymax: null, w: 1, runs: null });

/** A workspace as the address carries it (base64url of its JSON), or '' when it is too long. */
export function encodeWorkspace(ws) {
  const bytes = new TextEncoder().encode(JSON.stringify(ws));
  let bin = '';
  bytes.forEach((b) => { bin += String.fromCharCode(b); });
  const text = btoa(bin).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
  return text.length <= WS_IN_URL_MAX ? text : '';
}

/** The workspace an address or a view carries, checked; null when it is not one. */
export function decodeWorkspace(text) {
  try {
    const bin = atob(text.replace(/-/g, '+').replace(/_/g, '/'));
    return checkWorkspace(JSON.parse(new TextDecoder().decode(Uint8Array.from(bin, (c) => c.charCodeAt(0)))));
  } catch (e) {
    return null;
  }
}

/** A workspace read from outside, with only the panels and fields this page knows; null if none. */
export function checkWorkspace(ws) {
  if (!ws || ws.v !== 1 || !Array.isArray(ws.sections)) return null;
  const str = (v) => (typeof v === 'string' ? v : null);
  const num = (v) => (typeof v === 'number' && Number.isFinite(v) ? v : null);
  const sections = ws.sections.filter((s) => s && Array.isArray(s.panels)).map((s) => ({
    name: str(s.name) || 'charts',
    panels: s.panels.map((p) => {
      if (!p) return null;
      const base = { w: p.w === 2 ? 2 : 1, runs: Array.isArray(p.runs) ? p.runs.filter((r) => typeof r === 'string') : null };
      if (p.type === 'line' && str(p.key)) {
        return { ...linePanel(p.key), ...base, x: str(p.x) || 'step', smooth: Math.min(0.99, Math.max(0, num(p.smooth) || 0)), log: p.log === true, ymin: num(p.ymin), ymax: num(p.ymax) };
      }
      if (p.type === 'scatter' && str(p.x) && str(p.y)) return { type: 'scatter', x: p.x, y: p.y, ...base };
      if (p.type === 'bar' && str(p.key)) return { type: 'bar', key: p.key, ...base };
      return null;
    }).filter(Boolean),
  }));
  return { v: 1, sections };
}

/** A run's value of `metric:KEY` (its last) or `param:KEY` (a number), else NaN. */
function valueOf(run, field) {
  const [kind, ...rest] = field.split(':');
  const key = rest.join(':');
  if (kind === 'metric') return toNum(((run.summary || {})[key] || {}).last);
  if (kind === 'param') { const v = (run.params || {})[key]; return typeof v === 'number' ? v : typeof v === 'boolean' ? Number(v) : toNum(v); }
  return NaN;
}

const fieldName = (field) => field.replace(/^metric:/, '').replace(/^param:/, 'params.');

/** The value at `step` of a series' buckets: the last value of the bucket holding it (else of the one before). */
function valueAtStep(buckets, step) {
  let lo = 0, hi = buckets.length - 1, found = -1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (buckets[mid].step_min <= step) { found = mid; lo = mid + 1; } else hi = mid - 1;
  }
  return found < 0 ? NaN : toNum(buckets[found].last);
}

/** Reads `key` of the runs with, at each bucket, the value of metric `xKey` at its last step. */
async function loadAgainst(key, xKey, series, range) {
  const [ys, xs] = await Promise.all([loadSeries(key, series, range), loadSeries(xKey, series, range)]);
  const xBy = new Map(xs.map((s) => [s.run_id, s.buckets || []]));
  return ys.map((s) => {
    const xb = xBy.get(s.run_id) || [];
    return { run_id: s.run_id, buckets: (s.buckets || []).map((b) => ({ ...b, x: valueAtStep(xb, b.step_max) })).filter((b) => Number.isFinite(b.x)) };
  });
}

/**
 * The panels of `ctx.ws` in `container`: ctx = {project, ws, keys (metric keys), params (param
 * keys), runs, series (a line per run, with colours), shown (the page's runs state), robust,
 * markers, onChange(ws)}. Answers {refresh, destroy}.
 */
export function mountWorkspace(container, ctx) {
  let ws = ctx.ws;
  let charts = [], stop = () => {};
  const msg = el('span', { class: 'muted', 'data-testid': 'workspace-message' });
  const changed = () => { ctx.onChange(ws); render(); };
  const fieldOptions = () => [
    ...ctx.keys.map((k) => el('option', { value: 'metric:' + k }, k)),
    ...ctx.params.map((k) => el('option', { value: 'param:' + k }, 'params.' + k)),
  ];

  function addForm() {
    const type = el('select', { 'data-testid': 'add-panel-type' }, ['line', 'scatter', 'bar'].map((t) => el('option', { value: t }, t)));
    const key = el('select', { 'data-testid': 'add-panel-key' }, ctx.keys.map((k) => el('option', { value: k }, k)));
    const x = el('select', { 'data-testid': 'add-panel-x' }, fieldOptions());
    const y = el('select', { 'data-testid': 'add-panel-y' }, fieldOptions());
    const section = el('input', { type: 'text', size: 12, value: ws.sections[0] ? ws.sections[0].name : 'charts', 'data-testid': 'add-panel-section', list: 'ws-sections' });
    const sync = () => { key.hidden = type.value === 'scatter'; x.hidden = y.hidden = type.value !== 'scatter'; if (type.value === 'bar') { key.hidden = true; x.hidden = false; } };
    type.addEventListener('change', sync);
    sync();
    const add = (e) => {
      e.preventDefault();
      const panel = type.value === 'line' ? linePanel(key.value)
        : type.value === 'scatter' ? { type: 'scatter', x: x.value, y: y.value, w: 1, runs: null }
          : { type: 'bar', key: x.value, w: 1, runs: null };
      const name = section.value.trim() || 'charts';
      let sec = ws.sections.find((s) => s.name === name);
      if (!sec) { sec = { name, panels: [] }; ws.sections.push(sec); }
      sec.panels.push(panel);
      changed();
    };
    return el('form', { class: 'toolbar add-panel', onsubmit: add },
      el('datalist', { id: 'ws-sections' }, ws.sections.map((s) => el('option', { value: s.name }))),
      'Add a ', type, ' panel: ', key, x, ' ', y, ' in section ', section,
      el('button', { type: 'submit', 'data-testid': 'add-panel' }, 'Add'));
  }

  async function save(name) {
    try {
      await api(`/projects/${enc(ctx.project)}/views/${enc(name)}`, { method: 'PUT', body: { state: { panels: ws } } });
      viewNames.then((names) => { if (!names.includes(name)) names.push(name); });
      msg.textContent = name === WORKSPACE_VIEW ? "Saved as the project's workspace." : `Saved as view "${name}".`;
    } catch (e) { msg.textContent = (e.field ? e.field + ': ' : '') + e.message; }
  }

  // The project's views, read once for this page (a view saved here joins the list).
  const viewNames = api(`/projects/${enc(ctx.project)}/views`).then(({ views }) => (views || []).map((v) => v.name)).catch(() => []);

  /** The project's views, to open one's panels here. */
  function viewPicker() {
    const pick = el('select', { 'data-testid': 'workspace-views', title: 'open the panels of a saved view' }, el('option', { value: '' }, 'open a view…'));
    viewNames.then((names) => pick.append(...names.map((name) => el('option', { value: name }, name))));
    pick.addEventListener('change', async () => {
      if (!pick.value) return;
      try {
        const view = await api(`/projects/${enc(ctx.project)}/views/${enc(pick.value)}`);
        const panels = checkWorkspace((view.state || {}).panels);
        if (!panels) { msg.textContent = `View "${pick.value}" holds no panels.`; return; }
        ws = panels;
        changed();
      } catch (e) { msg.textContent = e.message; }
    });
    return pick;
  }

  function toolbar() {
    const viewName = el('input', { type: 'text', size: 12, placeholder: 'view name', 'data-testid': 'workspace-view-name' });
    return el('div', { class: 'toolbar workspace-bar' }, viewPicker(),
      el('button', { type: 'button', 'data-testid': 'save-workspace', title: "the panels every comparison of this project opens with", onclick: () => save(WORKSPACE_VIEW) }, "Save as the project's workspace"),
      el('form', { class: 'toolbar', onsubmit: (e) => { e.preventDefault(); if (viewName.value.trim()) save(viewName.value.trim()); } },
        viewName, el('button', { type: 'submit', 'data-testid': 'save-workspace-view' }, 'Save as a view')),
      el('button', { type: 'button', 'data-testid': 'reset-workspace', title: 'a line chart per metric, in sections by key prefix', onclick: () => { ws = autoWorkspace(ctx.keys); changed(); } }, 'Automatic panels'),
      msg);
  }

  /** Moves panel p of section si by `by` places (across sections at the ends). */
  function move(si, pi, by) {
    const flat = ws.sections.flatMap((s, i) => s.panels.map((p, j) => [i, j]));
    const at = flat.findIndex(([i, j]) => i === si && j === pi);
    const to = flat[at + by];
    if (!to) return;
    const [panel] = ws.sections[si].panels.splice(pi, 1);
    const target = ws.sections[to[0]];
    const index = to[0] === si ? to[1] : by > 0 ? 0 : target.panels.length;
    target.panels.splice(index, 0, panel);
    changed();
  }

  function panelMenu(p, si, pi) {
    const fields = [];
    const set = (patch) => { Object.assign(p, patch); changed(); };
    if (p.type === 'line') {
      const x = el('select', { 'data-testid': 'panel-x' },
        el('option', { value: 'step' }, 'step'), el('option', { value: 'wall' }, 'wall time'), el('option', { value: 'relative' }, 'relative time'),
        ctx.keys.filter((k) => k !== p.key).map((k) => el('option', { value: 'metric:' + k }, k)));
      x.value = p.x;
      x.addEventListener('change', () => set({ x: x.value }));
      const smooth = el('input', { type: 'number', min: '0', max: '0.99', step: '0.05', value: String(p.smooth), 'data-testid': 'panel-smoothing', style: 'width:5em' });
      smooth.addEventListener('change', () => set({ smooth: Math.min(0.99, Math.max(0, Number(smooth.value) || 0)) }));
      const lo = el('input', { type: 'number', step: 'any', value: p.ymin ?? '', placeholder: 'auto', 'data-testid': 'panel-ymin', style: 'width:6em' });
      const hi = el('input', { type: 'number', step: 'any', value: p.ymax ?? '', placeholder: 'auto', 'data-testid': 'panel-ymax', style: 'width:6em' });
      const range = () => set({ ymin: lo.value === '' ? null : Number(lo.value), ymax: hi.value === '' ? null : Number(hi.value) });
      lo.addEventListener('change', range);
      hi.addEventListener('change', range);
      fields.push(el('label', {}, 'x-axis ', x), el('label', {}, 'smoothing ', smooth), el('label', {}, 'y from ', lo, ' to ', hi));
    }
    const runBoxes = ctx.series.map((s) => {
      const cb = el('input', { type: 'checkbox', 'data-run-id': s.run_id });
      cb.checked = !p.runs || p.runs.includes(s.run_id);
      cb.addEventListener('change', () => {
        const on = runBoxes.filter((b) => b.checked).map((b) => b.dataset.runId);
        set({ runs: on.length === ctx.series.length ? null : on });
      });
      return cb;
    });
    const section = el('select', { 'data-testid': 'panel-section' }, ws.sections.map((s, i) => el('option', { value: String(i) }, s.name)), el('option', { value: 'new' }, 'a new section…'));
    section.value = String(si);
    section.addEventListener('change', () => {
      let to = Number(section.value);
      if (section.value === 'new') {
        const name = (prompt('Name of the new section') || '').trim();
        if (!name) { section.value = String(si); return; }
        ws.sections.push({ name, panels: [] });
        to = ws.sections.length - 1;
      }
      const [panel] = ws.sections[si].panels.splice(pi, 1);
      ws.sections[to].panels.push(panel);
      changed();
    });
    return closingMenu(el('details', { class: 'columns panel-menu', 'data-testid': 'panel-menu' },
      el('summary', { title: 'this panel\'s settings', 'aria-label': 'panel settings' }, '⚙'),
      el('div', { class: 'menu' }, ...fields, el('label', {}, 'section ', section),
        el('div', { class: 'muted' }, 'runs shown'), ctx.series.map((s, i) => el('label', {}, runBoxes[i], ' ', s.name)))));
  }

  function panelNode(p, si, pi) {
    const head = el('div', { class: 'panel-head' },
      el('span', { class: 'panel-kind muted' }, p.type),
      el('button', { type: 'button', class: 'small', title: 'move earlier', 'aria-label': 'move earlier', 'data-testid': 'panel-earlier', onclick: () => move(si, pi, -1) }, '◀'),
      el('button', { type: 'button', class: 'small', title: 'move later', 'aria-label': 'move later', 'data-testid': 'panel-later', onclick: () => move(si, pi, 1) }, '▶'),
      el('button', { type: 'button', class: 'small', title: p.w === 2 ? 'one column wide' : 'two columns wide', 'data-testid': 'panel-resize', onclick: () => { p.w = p.w === 2 ? 1 : 2; changed(); } }, p.w === 2 ? '⇥⇤' : '⇤⇥'),
      panelMenu(p, si, pi),
      el('button', { type: 'button', class: 'small', title: 'remove the panel', 'aria-label': 'remove the panel', 'data-testid': 'panel-remove', onclick: () => { ws.sections[si].panels.splice(pi, 1); changed(); } }, '✕'));
    const series = p.runs ? ctx.series.filter((s) => p.runs.includes(s.run_id)) : ctx.series;
    const box = el('div', { class: 'ws-panel' + (p.w === 2 ? ' wide' : ''), 'data-testid': 'ws-panel', 'data-type': p.type, 'data-key': p.key || `${p.y} vs ${p.x}` }, head);
    if (p.type === 'line') {
      const metric = p.x.startsWith('metric:') ? p.x.slice(7) : null;
      const settings = chartSettings({ xMode: p.x, smoothing: p.smooth, robust: ctx.robust, markers: ctx.markers }, ctx.shown);
      const chart = createChart(p.key, series, settings, {
        log: p.log, onLog: (on) => { p.log = on; ctx.onChange(ws); }, yRange: [p.ymin, p.ymax],
        load: metric ? (range) => loadAgainst(p.key, metric, series, range) : undefined,
      });
      charts.push(chart);
      box.append(chart.node);
    } else {
      const runById = new Map(ctx.runs.map((r) => [r.id, r]));
      if (p.type === 'scatter') {
        const points = series.map((s) => ({ s, r: runById.get(s.run_id) })).filter(({ r }) => r)
          .map(({ s, r }) => ({ id: s.run_id, label: s.name, color: s.color, x: valueOf(r, p.x), y: valueOf(r, p.y) }))
          .filter((q) => Number.isFinite(q.x) && Number.isFinite(q.y));
        box.append(el('div', { class: 'chart-head' }, el('span', { class: 'title' }, `${fieldName(p.y)} vs ${fieldName(p.x)}`)),
          points.length ? scatterPlot(points, fieldName(p.x), fieldName(p.y)) : el('p', { class: 'muted' }, 'No run has both values.'));
      } else {
        box.append(el('div', { class: 'chart-head' }, el('span', { class: 'title' }, fieldName(p.key))),
          barList(series.map((s) => ({ label: s.name, value: valueOf(runById.get(s.run_id) || {}, p.key), color: s.color })), fmtNum, 'bar-panel'));
      }
    }
    return box;
  }

  function render() {
    stop();
    charts.forEach((c) => c.destroy());
    charts = [];
    const sections = ws.sections.map((s, si) => el('details', { open: true, class: 'chart-section', 'data-testid': 'ws-section', 'data-section': s.name },
      el('summary', {}, s.name, el('span', { class: 'muted count' }, ` ${s.panels.length}`)),
      el('div', { class: 'charts' }, s.panels.map((p, pi) => panelNode(p, si, pi)))));
    container.replaceChildren(toolbar(), addForm(), ...sections);
    stop = startNearViewport(charts);
  }

  render();
  return {
    refresh: () => charts.forEach((c) => c.refresh()),
    destroy: () => { stop(); charts.forEach((c) => c.destroy()); },
  };
}
