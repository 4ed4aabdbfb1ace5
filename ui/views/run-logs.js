/* A run's console logs (#/run/ID/logs): every rank's lines in one virtualized list (a million
 * lines scroll as fast as ten), ANSI colours kept, filters by rank, stream and attempt, a search
 * with its matches marked, follow (server-sent events), a jump to a step, and a download. */

import { API, api, authHeaders } from '../lib/api.js';
import { enc } from '../lib/address.js';
import { ansiRuns } from '../lib/ansi.js';
import { el, errorEl, statusEl } from '../lib/dom.js';
import { fetchedWithKey } from '../lib/downloads.js';

/** Pixels per line; lines are one row each (long ones scroll sideways). */
const ROW = 18;
/** Lines per block read from the server. */
const BLOCK = 1000;
/** Lines drawn beyond the viewport, above and below. */
const OVERSCAN = 20;
/** Browsers stop growing an element somewhere past 16 million pixels: a taller list is scaled. */
const MAX_SCROLL_PX = 8_000_000;
/** Blocks kept in memory. */
const MAX_BLOCKS = 64;

/** The run page's tabs: the overview and the logs. */
export function runTabs(id, current) {
  const tab = (name, href) => el('a', { href, class: current === name ? 'tab active' : 'tab', 'data-testid': `tab-${name}` },
    name === 'overview' ? 'Overview' : 'Logs');
  return el('nav', { class: 'tabs', 'data-testid': 'run-tabs' }, tab('overview', '#/run/' + enc(id)), tab('logs', '#/run/' + enc(id) + '/logs'));
}

/** Under a run's charts: a click on a chart (not a drag) offers the console lines around the
 * step under the cursor. */
export function runLogsLink(id, charts, settings) {
  const link = el('a', { class: 'logs-at-step hidden', 'data-testid': 'logs-at-step' });
  let down = null;
  charts.addEventListener('mousedown', (e) => { down = [e.clientX, e.clientY]; });
  charts.addEventListener('click', (e) => {
    const plot = e.target.closest('[data-cursor-x]');
    const moved = down && Math.hypot(e.clientX - down[0], e.clientY - down[1]) > 4;
    if (!plot || moved || (settings.xMode && settings.xMode !== 'step')) return;
    const step = Math.round(Number(plot.getAttribute('data-cursor-x')));
    if (!Number.isFinite(step)) return;
    link.href = `#/run/${enc(id)}/logs?step=${step}`;
    link.textContent = `Console lines around step ${step} →`;
    link.classList.remove('hidden');
  });
  return el('div', { class: 'logs-link-row' }, link);
}

function clock(ms) {
  const d = new Date(ms);
  const two = (n) => String(n).padStart(2, '0');
  return `${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}.${String(d.getMilliseconds()).padStart(3, '0')}`;
}

/** A line's text as styled spans, with the search's matches marked. */
function lineText(text, search) {
  const out = el('span', { class: 'log-text' });
  const runs = ansiRuns(text);
  const plain = runs.map((r) => r.text).join('');
  let marks = [];
  if (search) {
    const re = search.regex ? safeRegex(search.q, 'g') : new RegExp(search.q.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'), 'gi');
    if (re) {
      let m;
      while ((m = re.exec(plain)) !== null && marks.length < 50) {
        if (m[0].length === 0) { re.lastIndex++; continue; }
        marks.push([m.index, m.index + m[0].length]);
      }
    }
  }
  let at = 0;
  for (const r of runs) {
    const style = [r.fg ? `color:${r.fg}` : '', r.bg ? `background:${r.bg}` : '', r.bold ? 'font-weight:600' : '',
      r.italic ? 'font-style:italic' : '', r.underline ? 'text-decoration:underline' : ''].filter(Boolean).join(';');
    const start = at;
    const end = at + r.text.length;
    at = end;
    // The run's text split where marks begin and end.
    const cuts = [start, ...marks.flatMap(([a, b]) => [a, b]).filter((c) => c > start && c < end), end];
    for (let i = 0; i < cuts.length - 1; i++) {
      const piece = plain.slice(cuts[i], cuts[i + 1]);
      if (!piece) continue;
      const marked = marks.some(([a, b]) => cuts[i] >= a && cuts[i] < b);
      const node = marked ? el('mark', { 'data-testid': 'log-match' }, piece) : el('span', {}, piece);
      if (style) node.setAttribute('style', style);
      out.append(node);
    }
  }
  return out;
}

function safeRegex(q, flags) {
  try { return new RegExp(q, flags); } catch (e) { return null; }
}

export function runLogsView(id, params) {
  const state = {
    rank: params.get('rank') || '',
    stream: params.get('stream') || '',
    attempt: params.get('attempt') || '',
    q: params.get('q') || '',
    regex: params.get('regex') === 'true',
    follow: params.get('follow') === 'true',
    step: params.get('step'),
  };
  let alive = true;
  let generation = 0; // bumps when the filters change: older answers are dropped
  let matched = 0;
  let total = 0;
  let blocks = new Map(); // block index -> {lines} or a promise
  let followAbort = null;
  let drawQueued = false;

  const title = el('h1', { 'data-testid': 'run-title' }, 'Run ' + id);
  const counts = el('span', { class: 'muted', 'data-testid': 'log-counts' });
  const viewport = el('div', { class: 'log-viewport', 'data-testid': 'log-viewport', tabindex: '0' });
  const spacer = el('div', { class: 'log-spacer' });
  const rows = el('div', { class: 'log-rows', 'data-testid': 'log-rows' });
  viewport.append(spacer, rows);
  const rankSel = el('select', { 'data-testid': 'log-rank', 'aria-label': 'Rank' });
  const streamSel = el('select', { 'data-testid': 'log-stream', 'aria-label': 'Stream' },
    el('option', { value: '' }, 'stdout and stderr'), el('option', { value: 'stdout' }, 'stdout'), el('option', { value: 'stderr' }, 'stderr'));
  const attemptSel = el('select', { 'data-testid': 'log-attempt', 'aria-label': 'Attempt' });
  const search = el('input', { type: 'search', placeholder: 'Search lines', 'data-testid': 'log-search', value: state.q, 'aria-label': 'Search' });
  const regex = el('input', { type: 'checkbox', 'data-testid': 'log-regex' });
  regex.checked = state.regex;
  const followBox = el('input', { type: 'checkbox', 'data-testid': 'log-follow' });
  followBox.checked = state.follow;
  const stepInput = el('input', { type: 'number', placeholder: 'step', class: 'log-step-input', 'data-testid': 'log-step', 'aria-label': 'Jump to step' });
  const download = fetchedWithKey(el('a', { 'data-testid': 'log-download', class: 'button', download: `${id}-logs.txt` }, 'Download'), `${id}-logs.txt`);
  const problem = el('div');
  streamSel.value = state.stream;

  const node = el('div', { class: 'logs-page' },
    el('div', { class: 'breadcrumb' }, el('a', { href: '#/' }, 'Projects'), ' / ', el('span', { 'data-testid': 'log-project' }), ' / '),
    title, runTabs(id, 'logs'),
    el('div', { class: 'log-toolbar' }, rankSel, streamSel, attemptSel, search,
      el('label', {}, regex, ' regex'), el('label', {}, followBox, ' follow'),
      el('form', { class: 'inline', 'data-testid': 'log-step-form', onsubmit: (e) => { e.preventDefault(); jumpToStep(stepInput.value); } },
        stepInput, el('button', { type: 'submit' }, 'Go to step')),
      download, counts),
    problem, viewport);

  function query(extra) {
    const q = new URLSearchParams();
    if (state.rank !== '') q.set('rank', state.rank);
    if (state.stream) q.set('stream', state.stream);
    if (state.attempt !== '') q.set('attempt', state.attempt);
    if (state.q) q.set('q', state.q);
    if (state.q && state.regex) q.set('regex', 'true');
    for (const [k, v] of Object.entries(extra || {})) q.set(k, String(v));
    return q.toString();
  }

  function keepAddress() {
    const q = new URLSearchParams();
    for (const k of ['rank', 'stream', 'attempt', 'q']) if (state[k] !== '' && state[k] != null) q.set(k, state[k]);
    if (state.regex) q.set('regex', 'true');
    if (state.follow) q.set('follow', 'true');
    const hash = `#/run/${enc(id)}/logs` + (q.toString() ? '?' + q : '');
    if (location.hash !== hash) history.replaceState(null, '', hash);
  }

  function setCounts() {
    const filtered = matched !== total ? `${matched.toLocaleString('en-US')} of ` : '';
    counts.textContent = `${filtered}${total.toLocaleString('en-US')} lines`;
    counts.dataset.matched = String(matched);
    counts.dataset.total = String(total);
  }

  function fillSelect(sel, values, all, label, current) {
    sel.replaceChildren(el('option', { value: '' }, all), ...values.map((v) => el('option', { value: String(v) }, `${label} ${v}`)));
    sel.value = current;
  }

  /** Reads block `b` (lines b*BLOCK …) once; answers its lines. */
  function block(b) {
    const have = blocks.get(b);
    if (have) return have;
    const gen = generation;
    const p = api(`/runs/${enc(id)}/logs?` + query({ offset: b * BLOCK, limit: BLOCK })).then((page) => {
      if (gen !== generation || !alive) return null;
      matched = page.matched;
      total = page.total;
      setCounts();
      blocks.set(b, { lines: page.lines });
      if (blocks.size > MAX_BLOCKS) blocks.delete(blocks.keys().next().value);
      queueDraw();
      return page.lines;
    }).catch((e) => { if (gen === generation) problem.replaceChildren(errorEl(e)); blocks.delete(b); });
    blocks.set(b, p);
    return p;
  }

  function scrollHeight() { return Math.min(matched * ROW, MAX_SCROLL_PX); }

  /** The first line shown for the viewport's scroll position (scaled past MAX_SCROLL_PX). */
  function firstLine() {
    const height = viewport.clientHeight;
    const visible = Math.ceil(height / ROW);
    if (matched * ROW <= MAX_SCROLL_PX) return Math.floor(viewport.scrollTop / ROW);
    const room = Math.max(1, scrollHeight() - height);
    return Math.round((viewport.scrollTop / room) * Math.max(0, matched - visible));
  }

  function scrollToLine(i) {
    const height = viewport.clientHeight;
    const visible = Math.ceil(height / ROW);
    if (matched * ROW <= MAX_SCROLL_PX) viewport.scrollTop = i * ROW;
    else viewport.scrollTop = (i / Math.max(1, matched - visible)) * Math.max(1, scrollHeight() - height);
    draw();
  }

  function atBottom() { return viewport.scrollTop + viewport.clientHeight >= scrollHeight() - ROW * 2; }

  function queueDraw() {
    if (drawQueued) return;
    drawQueued = true;
    requestAnimationFrame(() => { drawQueued = false; draw(); });
  }

  function draw() {
    spacer.style.height = scrollHeight() + 'px';
    const first = firstLine();
    const count = Math.ceil(viewport.clientHeight / ROW) + 1;
    const from = Math.max(0, first - OVERSCAN);
    const to = Math.min(matched, first + count + OVERSCAN);
    // Rows sit where the viewport shows them: top at the scroll position, less the overscan.
    rows.style.transform = `translateY(${viewport.scrollTop - (first - from) * ROW}px)`;
    const out = [];
    const searchOn = state.q ? { q: state.q, regex: state.regex } : null;
    for (let i = from; i < to; i++) {
      const b = Math.floor(i / BLOCK);
      const got = blocks.get(b);
      const line = got && got.lines ? got.lines[i - b * BLOCK] : null;
      if (!got) block(b);
      if (!line) {
        out.push(el('div', { class: 'log-row pending' }, '…'));
        continue;
      }
      out.push(el('div', { class: `log-row ${line.stream}`, 'data-n': String(line.n), 'data-step': line.step ?? '', 'data-rank': String(line.rank) },
        el('span', { class: 'log-time', title: new Date(line.time).toISOString() }, clock(line.time)),
        el('span', { class: `log-rank r${line.rank % 8}`, title: `rank ${line.rank} on ${line.node}, attempt ${line.attempt}` }, String(line.rank)),
        line.step == null ? el('span', { class: 'log-step' }, '')
          : el('a', { class: 'log-step', href: `#/run/${enc(id)}?step=${line.step}`, title: `step ${line.step}: back to the run's charts` }, String(line.step)),
        lineText(line.text, searchOn)));
    }
    rows.replaceChildren(...out);
    rows.dataset.first = String(first);
  }

  /** Starts over with the filters in `state`: the count, then the lines around the end or the top. */
  async function reload(toEnd) {
    generation++;
    blocks = new Map();
    problem.replaceChildren();
    keepAddress();
    const gen = generation;
    download.href = `${API}/runs/${enc(id)}/logs?` + query({ download: 'true' });
    let page;
    try {
      page = await api(`/runs/${enc(id)}/logs?` + query({ tail: 'true', limit: BLOCK }));
    } catch (e) {
      problem.replaceChildren(errorEl(e));
      return;
    }
    if (gen !== generation || !alive) return;
    matched = page.matched;
    total = page.total;
    fillSelect(rankSel, page.ranks, 'every rank', 'rank', state.rank);
    fillSelect(attemptSel, page.attempts, 'every attempt', 'attempt', state.attempt);
    setCounts();
    // The tail block read is the last lines: keep it where it falls.
    if (page.lines.length) {
      const firstOffset = page.offset;
      for (let i = 0; i < page.lines.length; i++) {
        const b = Math.floor((firstOffset + i) / BLOCK);
        if (!blocks.has(b) || blocks.get(b).then) blocks.set(b, { lines: [] });
        blocks.get(b).lines[(firstOffset + i) - b * BLOCK] = page.lines[i];
      }
      // A block filled only in part must be read whole when shown.
      for (const [b, v] of blocks) if (v.lines && v.lines.filter(Boolean).length < Math.min(BLOCK, matched - b * BLOCK)) blocks.delete(b);
    }
    spacer.style.height = scrollHeight() + 'px';
    if (state.step != null && state.step !== '') await jumpToStep(state.step);
    else if (toEnd || state.follow) scrollToLine(Math.max(0, matched - 1));
    else scrollToLine(0);
    startFollow();
  }

  async function jumpToStep(step) {
    if (step === '' || step == null) return;
    const page = await api(`/runs/${enc(id)}/logs?` + query({ at_step: step, limit: 1 })).catch((e) => { problem.replaceChildren(errorEl(e)); return null; });
    if (!page || !alive) return;
    state.step = null;
    scrollToLine(Math.max(0, page.offset - 3));
    viewport.dataset.jumped = String(page.offset);
  }

  /** Follow: a server-sent event stream of the lines after the last one; the list stays at the
   * bottom when it was there. */
  async function startFollow() {
    if (followAbort) { followAbort.abort(); followAbort = null; }
    if (!state.follow || !alive) return;
    const controller = new AbortController();
    followAbort = controller;
    const gen = generation;
    try {
      const res = await fetch(`${API}/runs/${enc(id)}/logs?` + query({ follow: 'true', tail: 'true', limit: 1 }),
        { headers: { Accept: 'text/event-stream', ...authHeaders() }, signal: controller.signal });
      const reader = res.body.getReader();
      const decoder = new TextDecoder();
      let buffered = '';
      let event = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done || gen !== generation || !alive) break;
        buffered += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffered.indexOf('\n')) >= 0) {
          const line = buffered.slice(0, cut);
          buffered = buffered.slice(cut + 1);
          if (line.startsWith('event: ')) event = line.slice(7);
          else if (line.startsWith('data: ') && event === 'lines') arrived(JSON.parse(line.slice(6)));
        }
      }
    } catch (e) {
      if (e.name !== 'AbortError' && alive) problem.replaceChildren(errorEl(e));
    }
  }

  function arrived(page) {
    const stick = atBottom();
    const before = matched;
    matched = page.matched;
    total = page.total;
    setCounts();
    // New lines append to the end: the blocks they fall in are read again when shown.
    for (let b = Math.floor(before / BLOCK); b * BLOCK < matched; b++) blocks.delete(b);
    spacer.style.height = scrollHeight() + 'px';
    if (stick) scrollToLine(Math.max(0, matched - 1));
    else queueDraw();
  }

  viewport.addEventListener('scroll', queueDraw, { passive: true });
  rankSel.addEventListener('change', () => { state.rank = rankSel.value; reload(false); });
  streamSel.addEventListener('change', () => { state.stream = streamSel.value; reload(false); });
  attemptSel.addEventListener('change', () => { state.attempt = attemptSel.value; reload(false); });
  let typing = null;
  search.addEventListener('input', () => {
    clearTimeout(typing);
    typing = setTimeout(() => { state.q = search.value; reload(false); }, 300);
  });
  regex.addEventListener('change', () => { state.regex = regex.checked; if (state.q) reload(false); });
  followBox.addEventListener('change', () => { state.follow = followBox.checked; keepAddress(); if (state.follow) scrollToLine(Math.max(0, matched - 1)); startFollow(); });
  const resize = () => queueDraw();
  window.addEventListener('resize', resize);

  api('/runs/' + enc(id)).then((run) => {
    if (!alive) return;
    title.replaceChildren(run.name || run.id, ' ', statusEl(run.status));
    node.querySelector('[data-testid=log-project]').replaceChildren(el('a', { href: '#/p/' + enc(run.project) }, run.project));
    document.title = `Logs · ${run.name || run.id} · trainlog`;
  }).catch((e) => problem.replaceChildren(errorEl(e)));

  return {
    node,
    title: 'Logs',
    mounted: () => reload(false),
    cleanup: () => {
      alive = false;
      if (followAbort) followAbort.abort();
      window.removeEventListener('resize', resize);
    },
  };
}

