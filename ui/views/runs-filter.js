/* The runs table's filter box: the keys a filter names, and autocomplete from the project's keys
 * and the run attributes. */

import { el } from '../lib/dom.js';

/** The run attributes a filter can name. */
const FILTER_ATTRIBUTES = ['status', 'name', 'user', 'host', 'group', 'id', 'parent_id', 'notes', 'start_time', 'end_time', 'duration',
  // A job's figures (null for a run that is not a job).
  'attempts', 'gpus', 'world_size', 'nodes', 'lost_usd', 'lost_gpu_hours', 'steps_replayed'];
/** Each prefix a filter key can take, and the kind of key (of the project's keys) it names. */
const FILTER_PREFIXES = { params: 'params', tags: 'tags', metrics: 'metrics', metrics_min: 'metrics', metrics_max: 'metrics', metrics_mean: 'metrics', metrics_step: 'metrics' };

/** A key as the filter grammar takes it: bare when it can be, else in backquotes. */
function filterKey(k) { return /^[A-Za-z0-9_./:-]+$/.test(k) ? k : '`' + k.replace(/`/g, '') + '`'; }

/** The `params.K`, `tags.K` and `metrics….K` keys a filter names: [[prefix, kind, key]]. */
export function filterKeys(filter) {
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
export function filterCompleter(input, keys, onEnter) {
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

/** Words of a filter that holds no operator, quote or parenthesis: a search by name. */
const PLAIN_WORDS = /^[^\s=<>!'"`()]+(\s+[^\s=<>!'"`()]+)*$/;
const FILTER_KEYWORDS = new Set(['and', 'or', 'not', 'like', 'ilike', 'in', 'is', 'null']);

/**
 * The filter the server is sent for what was typed: plain words (`resnet50`, `bert large`) find
 * runs whose name holds every word, in any case; anything with an operator is the query
 * language, sent as it is.
 */
export function filterQuery(text) {
  const t = text.trim();
  if (!t || !PLAIN_WORDS.test(t)) return t;
  const words = t.split(/\s+/);
  if (words.some((w) => FILTER_KEYWORDS.has(w.toLowerCase()))) return t;
  return words.map((w) => `name ilike '%${w.replace(/[\\%_]/g, (c) => '\\' + c)}%'`).join(' and ');
}
