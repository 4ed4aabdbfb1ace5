/* Media panels: the images, audio, video, text, files, histograms and tables logged under a key,
 * one panel per key, each with a step slider over the steps logged, for one run (the run page) or
 * several side by side (the compare page). A panel fetches nothing until it comes near the
 * viewport, then its steps, then only what the step shown needs. Boxes are drawn in SVG over their
 * image, with a checkbox per box group and per class; a click on an image shows it whole in an
 * overlay. Histograms are a heatmap over the steps with the chosen step's bars (media-hist.js);
 * a table is read from the server a page at a time, sorted and filtered there (media-table.js); on
 * the compare page text can be shown as a line diff against the first run's (line-diff.js). */

import { enc } from './address.js';
import { api, authHeaders, settleLimited, storedKey } from './api.js';
import { hashColor } from './colors.js';
import { el, errorEl, svg } from './dom.js';
import { artifactLink } from './downloads.js';
import { fmtBytes, fmtNum } from './format.js';
import { lineDiff } from './line-diff.js';
import { histogramFigure, readHistogramAt, readHistograms } from './media-hist.js';
import { tableWidget } from './media-table.js';

/** How far outside the viewport a panel starts loading. */
const PANEL_LOAD_MARGIN = '300px';

/** Text items longer than this are cut when shown. */
const TEXT_MAX_CHARS = 100000;

/** Text items' contents by URL (the bytes of a URL never change), the oldest forgotten past TEXTS_MAX. */
const texts = new Map();
const TEXTS_MAX = 200;

/** The text at `url` (a text item's bytes), fetched once. */
function textOf(url) {
  if (!texts.has(url)) {
    const got = fetch(url, { headers: authHeaders() }).then(async (res) => {
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      return res.text();
    });
    got.catch(() => texts.delete(url));
    texts.set(url, got);
    if (texts.size > TEXTS_MAX) texts.delete(texts.keys().next().value);
  }
  return texts.get(url);
}

/** A text as shown: cut past TEXT_MAX_CHARS, saying how large it was. */
const clipText = (text, size) => (text.length > TEXT_MAX_CHARS ? text.slice(0, TEXT_MAX_CHARS) + `\n… (${fmtBytes(size)} in all)` : text);

/** Blob URLs made for bytes fetched with an API key (a plain `src` cannot send one), by URL. */
const keyedUrls = new Map();
const KEYED_URLS_MAX = 300;

/** Where the browser reads a blob from: its URL, or with an API key a blob: URL of the bytes
 * fetched with it (kept for the page's next uses, the oldest forgotten past KEYED_URLS_MAX). */
async function blobSrc(url) {
  if (!storedKey()) return url;
  if (!keyedUrls.has(url)) {
    keyedUrls.set(url, (async () => {
      const res = await fetch(url, { headers: authHeaders() });
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      return URL.createObjectURL(await res.blob());
    })());
    if (keyedUrls.size > KEYED_URLS_MAX) {
      const [oldest, made] = keyedUrls.entries().next().value;
      keyedUrls.delete(oldest);
      made.then((u) => URL.revokeObjectURL(u), () => {});
    }
  }
  return keyedUrls.get(url);
}

/** Sets `attr` of `node` to where the blob at `url` is read from. */
function setSrc(node, attr, url) {
  if (!storedKey()) { node.setAttribute(attr, url); return node; }
  blobSrc(url).then((src) => node.setAttribute(attr, src),
    (e) => node.replaceWith(el('span', { class: 'error' }, `could not load: ${e.message}`)));
  return node;
}

/** Every item of a run's key at one step, page by page. */
async function itemsAt(runId, key, step) {
  const items = [];
  let token = null;
  do {
    const q = new URLSearchParams({ key, step_min: String(step), step_max: String(step), limit: '1000' });
    if (token) q.set('page_token', token);
    const res = await api(`/runs/${enc(runId)}/media?${q}`);
    items.push(...(res.items || []));
    token = res.next_page_token || null;
  } while (token);
  return items.sort((a, b) => a.index - b.index);
}

/** The last of the ascending `steps` at or before `step`, or null. */
function stepAtOrBefore(steps, step) {
  let lo = 0, hi = steps.length - 1, found = null;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (steps[mid] <= step) { found = steps[mid]; lo = mid + 1; } else hi = mid - 1;
  }
  return found;
}

/** A class's colour, a function of its id. */
const classColor = (id) => (id === null || id === undefined ? '#ff8800' : hashColor('class:' + id));

/** A mask (a grey image of one class id per pixel, 0 for none) as an image of its classes'
 * colours, half transparent, for a blob: or data: URL. */
async function maskSrc(url) {
  const img = new Image();
  img.src = await blobSrc(url);
  await img.decode();
  const canvas = document.createElement('canvas');
  canvas.width = img.naturalWidth;
  canvas.height = img.naturalHeight;
  const ctx = canvas.getContext('2d');
  ctx.drawImage(img, 0, 0);
  const data = ctx.getImageData(0, 0, canvas.width, canvas.height);
  const px = data.data;
  const colors = new Map();
  for (let i = 0; i < px.length; i += 4) {
    const id = px[i];
    if (!id) { px[i + 3] = 0; continue; }
    if (!colors.has(id)) {
      const hex = classColor(id);
      colors.set(id, [1, 3, 5].map((k) => parseInt(hex.slice(k, k + 2), 16)));
    }
    const [r, g, b] = colors.get(id);
    px[i] = r; px[i + 1] = g; px[i + 2] = b; px[i + 3] = 120;
  }
  ctx.putImageData(data, 0, 0);
  return canvas.toDataURL();
}

/** What a box is called: its label, else its class's name, else its class id. */
function boxName(b, labels) {
  if (b.label) return b.label;
  if (b.class_id !== null && b.class_id !== undefined) return labels[String(b.class_id)] || `class ${b.class_id}`;
  return '';
}

/** The class a toggle names for a box: its id, or '' for none. */
const boxClass = (b) => (b.class_id === null || b.class_id === undefined ? '' : String(b.class_id));

/**
 * An image with its boxes over it in SVG, in the image's pixels (`item.width`×`item.height`,
 * else the shown image's own size once loaded). `full`: the image itself, not its thumbnail.
 */
function imageFigure(item, opts, full) {
  const url = !full && item.thumbnail_url ? item.thumbnail_url : item.url;
  const img = el('img', { alt: item.caption || `${item.key} step ${item.step}`, loading: full ? null : 'lazy', 'data-testid': full ? 'media-zoom-image' : 'media-image', 'data-sha': item.sha256 });
  setSrc(img, 'src', url);
  const fig = el('div', { class: 'media-figure' }, img);
  for (const m of item.masks || []) {
    const mask = el('img', { class: 'media-mask', alt: '', 'data-testid': 'media-mask', 'data-group': m.group, 'data-sha': m.sha256 });
    fig.append(mask);
    maskSrc(m.url).then((src) => { mask.src = src; opts.applyToggles(fig); }, () => mask.remove());
  }
  const boxes = item.boxes || [];
  if (boxes.length) {
    const draw = (w, h) => {
      if (!w || !h) return;
      const labels = item.class_labels || {};
      const font = Math.max(w, h) * 0.045;
      const overlay = svg('svg', { class: 'media-boxes', viewBox: `0 0 ${w} ${h}`, preserveAspectRatio: 'none', 'data-testid': 'media-boxes' },
        boxes.map((b) => {
          const [sx, sy] = b.domain === 'pixel' ? [1, 1] : [w, h];
          const x = Math.min(b.x_min, b.x_max) * sx, y = Math.min(b.y_min, b.y_max) * sy;
          const bw = Math.abs(b.x_max - b.x_min) * sx, bh = Math.abs(b.y_max - b.y_min) * sy;
          const name = boxName(b, labels);
          const text = name + (b.score === null || b.score === undefined ? '' : ` ${fmtNum(b.score)}`);
          const color = classColor(b.class_id);
          return svg('g', { 'data-testid': 'media-box', 'data-group': b.group, 'data-class': boxClass(b) },
            svg('title', {}, `${b.group}: ${text || 'box'}`),
            svg('rect', { x, y, width: bw, height: bh, fill: 'none', stroke: color, 'stroke-width': 2, 'vector-effect': 'non-scaling-stroke' }),
            text ? svg('text', { x: x + font * 0.2, y: Math.max(font, y - font * 0.25), 'font-size': font, fill: color, stroke: '#000', 'stroke-width': font * 0.06, 'paint-order': 'stroke' }, text) : null);
        }));
      fig.append(overlay);
      opts.applyToggles(overlay);
    };
    if (item.width && item.height) draw(item.width, item.height);
    else img.addEventListener('load', () => draw(img.naturalWidth, img.naturalHeight), { once: true });
  }
  return fig;
}

/** Shows an item's image whole over the page, its boxes toggled as in its panel; a click or Escape closes it. */
function zoom(item, opts) {
  const close = () => { overlay.remove(); document.removeEventListener('keydown', onKey); };
  const onKey = (e) => { if (e.key === 'Escape') close(); };
  const overlay = el('div', { class: 'media-zoom', 'data-testid': 'media-zoom', onclick: close },
    el('div', { class: 'media-zoom-body' }, imageFigure(item, opts, true),
      el('div', { class: 'media-caption' }, [item.caption, `step ${fmtNum(item.step)}`, item.width && item.height ? `${item.width}×${item.height}` : ''].filter(Boolean).join(' · '))));
  overlay.close = close;
  document.addEventListener('keydown', onKey);
  document.body.append(overlay);
}

/** One item as its kind shows: an image (a click zooms), audio, video, text, or a download link. */
function itemEl(item, opts) {
  let body;
  if (item.kind === 'image') {
    body = imageFigure(item, opts, false);
    body.classList.add('zoomable');
    body.title = 'click to enlarge';
    body.addEventListener('click', () => zoom(item, opts));
  } else if (item.kind === 'audio') {
    body = setSrc(el('audio', { controls: true, preload: 'none', 'data-testid': 'media-audio' }), 'src', item.url);
  } else if (item.kind === 'video') {
    body = setSrc(el('video', { controls: true, preload: 'metadata', 'data-testid': 'media-video' }), 'src', item.url);
  } else if (item.kind === 'text') {
    body = el('pre', { class: 'json media-text', 'data-testid': 'media-text' }, 'loading…');
    textOf(item.url).then((text) => {
      body.textContent = clipText(text, item.size);
    }).catch((e) => { body.className = 'error'; body.textContent = `could not load: ${e.message}`; });
  } else {
    const ext = (item.mime.split('/')[1] || 'bin').split(/[;+]/)[0];
    body = el('div', { 'data-testid': 'media-file' }, artifactLink(item.url, `${item.key.replace(/\//g, '_')}-${item.step}-${item.index}.${ext}`),
      el('span', { class: 'muted' }, ` ${item.mime}, ${fmtBytes(item.size)}`));
  }
  return el('div', { class: 'media-item', 'data-testid': 'media-item', 'data-kind': item.kind, 'data-step': String(item.step), 'data-index': String(item.index) },
    body, item.caption ? el('div', { class: 'media-caption', 'data-testid': 'media-caption' }, item.caption) : null);
}

/** Text `text` as a line diff against `base` (`baseName`'s): each line marked added, removed or the same. */
function textDiffEl(base, text, baseName) {
  const d = lineDiff(base, text);
  const mark = { add: '+', del: '−', eq: ' ' };
  return el('div', { class: 'media-item', 'data-testid': 'media-diff', 'data-added': String(d.added), 'data-removed': String(d.removed) },
    el('div', { class: 'media-note', 'data-testid': 'media-diff-summary' },
      d.added || d.removed ? `+${d.added} −${d.removed} lines against ${baseName}` : `the same as ${baseName}`,
      d.exact ? '' : ' (too long to align: what differs is shown removed, then added)'),
    el('pre', { class: 'json media-text media-diff' }, d.ops.map((o) =>
      el('div', { class: 'diff-line diff-' + o.op, 'data-testid': 'media-diff-line', 'data-op': o.op }, el('span', { class: 'diff-mark' }, mark[o.op]), o.line))));
}

/**
 * A panel of key `key` (`kind`) over `runs` ({id, name, color}; columns labelled when
 * `labelled`). `initialStep`: where its slider starts (the last step when null). `onMove(step)`
 * is called when the user moves its slider. Returns {node, start, setStep, refresh, destroy}.
 * What a column shows of a run at a step is the kind's view (items, histograms or a table).
 */
function mediaPanel(key, kind, runs, { labelled, onMove, initialStep }) {
  const slider = el('input', { type: 'range', min: '0', max: '0', value: '0', disabled: true, 'data-testid': 'media-slider', 'aria-label': `step of ${key}` });
  const stepLabel = el('span', { class: 'mono', 'data-testid': 'media-step' }, '');
  const toggles = el('div', { class: 'media-toggles', 'data-testid': 'media-toggles' });
  const controls = el('div', { class: 'media-controls', 'data-testid': 'media-controls' });
  const wide = kind === 'histogram' || kind === 'table';
  const columns = el('div', { class: 'media-columns' + (labelled ? ' labelled' : '') + (wide ? ' wide' : '') }, el('p', { class: 'muted' }, 'Loading…'));
  const node = el('div', { class: 'panel media-panel', 'data-testid': 'media-panel', 'data-key': key, 'data-kind': kind, 'data-loaded': '0' },
    el('div', { class: 'media-head' }, el('h3', { class: 'mono' }, key), el('span', { class: 'badge' }, kind),
      el('label', { class: 'media-slider' }, slider, ' ', stepLabel)),
    controls, toggles, columns);
  const hidden = { groups: new Set(), classes: new Set() };
  let runSteps = new Map(); // run id → its ascending steps under this key
  let steps = []; // the union, ascending
  let wanted = initialStep; // the step asked for before the steps are known
  let started = false;
  let seq = 0;
  let timer = null;

  const applyToggles = (root) => root.querySelectorAll('g[data-group], img[data-group]').forEach((g) => {
    g.style.display = hidden.groups.has(g.dataset.group) || hidden.classes.has(`${g.dataset.group}|${g.dataset.class}`) ? 'none' : '';
  });
  const opts = { applyToggles };

  /** A checkbox per box or mask group among the items shown and, beside it, one per class of
   * that group's boxes, named by the group's labels (what is hidden stays hidden). */
  function renderToggles(items) {
    const groups = new Map(); // group → class id → label
    for (const it of items) {
      for (const m of it.masks || []) if (!groups.has(m.group)) groups.set(m.group, new Map());
      for (const b of it.boxes || []) {
        if (!groups.has(b.group)) groups.set(b.group, new Map());
        const classes = groups.get(b.group), c = boxClass(b);
        if (!classes.has(c)) classes.set(c, c === '' ? 'no class' : (it.class_labels || {})[c] || `class ${c}`);
      }
    }
    const box = (set, key, label, testid, color, data) => {
      const input = el('input', { type: 'checkbox', checked: !set.has(key), 'data-testid': testid, ...data });
      input.addEventListener('change', () => {
        if (input.checked) set.delete(key); else set.add(key);
        applyToggles(node);
        const z = document.querySelector('[data-testid=media-zoom]');
        if (z) applyToggles(z);
      });
      return el('label', { class: 'media-toggle' }, input, color ? el('span', { class: 'swatch', style: `background:${color}` }) : null, label);
    };
    toggles.replaceChildren(...[...groups].sort(([a], [b]) => a.localeCompare(b)).map(([g, classes]) => el('span', { class: 'media-group', 'data-testid': 'media-group', 'data-group': g },
      box(hidden.groups, g, g, 'media-group-toggle', null, { 'data-value': g }),
      ...(classes.size > 1 || (classes.size === 1 && !classes.has('')) ? [el('span', { class: 'muted' }, ' classes:'),
        ...[...classes].sort(([a], [b]) => Number(a) - Number(b)).map(([c, label]) => box(hidden.classes, `${g}|${c}`, label, 'media-class-toggle', classColor(c === '' ? null : c), { 'data-value': c, 'data-group': g }))] : []))));
  }

  /** The items of a run at a step, as images, players, text (on the compare page, text can be
   * shown as a diff against the first run's) or links; with a checkbox per box group and class. */
  function itemsView() {
    const diffBox = kind === 'text' && labelled && runs.length > 1 ? el('input', { type: 'checkbox', 'data-testid': 'media-diff-toggle' }) : null;
    if (diffBox) {
      diffBox.addEventListener('change', () => { if (steps.length) show(Number(slider.value)); });
      controls.append(el('label', { class: 'media-toggle' }, diffBox, ` diff: each run's text against ${runs[0].name}'s`));
    }
    const diffing = () => Boolean(diffBox && diffBox.checked);
    return {
      runs: () => runs,
      async load(r, at) {
        const items = await itemsAt(r.id, key, at);
        if (!diffing()) return { items };
        const parts = await Promise.all(items.filter((it) => it.kind === 'text').map(async (it) => clipText(await textOf(it.url), it.size)));
        return { items, text: parts.join('\n') };
      },
      render(r, data, at, k, got) {
        if (diffing() && k > 0) {
          const base = got[0];
          if (base.status === 'fulfilled' && base.value.data && base.value.data.text !== undefined && data.text !== undefined) {
            return textDiffEl(base.value.data.text, data.text, runs[0].name);
          }
          return [el('p', { class: 'muted' }, `${runs[0].name} has no text at or before this step to compare with.`),
            el('div', { class: 'media-items' }, data.items.map((it) => itemEl(it, opts)))];
        }
        return el('div', { class: 'media-items' }, data.items.map((it) => itemEl(it, opts)));
      },
      done(got) { renderToggles(got.flatMap((g) => (g.status === 'fulfilled' && g.value.data ? g.value.data.items : []))); },
    };
  }

  /** A run's histograms under the key as a heatmap over its steps, the step's histogram as bars. */
  function histogramView() {
    const read = new Map(); // run id → its histograms (a promise)
    const figures = new Map(); // run id → its figure
    return {
      runs: () => runs,
      async load(r, at) {
        if (!read.has(r.id)) {
          const got = readHistograms(r.id, key);
          got.catch(() => read.delete(r.id));
          read.set(r.id, got);
        }
        const data = await read.get(r.id);
        const hist = data.hists.find((h) => h.step === at) || await readHistogramAt(r.id, key, at);
        return { data, hist };
      },
      render(r, { data, hist }, at) {
        const hists = data.hists.length ? data.hists : hist ? [hist] : [];
        if (!hists.length) return el('p', { class: 'muted' }, 'No histograms.');
        let fig = figures.get(r.id);
        if (!fig || fig.data !== data) {
          fig = histogramFigure(hists, { color: r.color, truncated: data.truncated, stepRange: [steps[0], steps[steps.length - 1]], onPick: pick });
          fig.data = data;
          figures.set(r.id, fig);
        }
        fig.show(at, hist);
        return fig.node;
      },
      reset() { read.clear(); figures.clear(); },
    };
  }

  /** The table as of the step, sorted, filtered and paged by the server; on the compare page two
   * runs' tables side by side (two pickers choose them among more). */
  function tableView() {
    const widgets = new Map(); // `${slot}|${run id}` → its table
    const picked = [0, 1];
    const picking = labelled && runs.length > 2;
    if (picking) {
      const pickers = picked.map((chosen, slot) => {
        const s = el('select', { 'data-testid': 'media-table-run', 'aria-label': `run ${slot + 1} of 2` },
          runs.map((r, k) => el('option', { value: String(k), selected: k === chosen }, r.name)));
        s.addEventListener('change', () => { picked[slot] = Number(s.value); if (steps.length) show(Number(slider.value)); });
        return s;
      });
      controls.append(el('span', { class: 'muted' }, 'side by side:'), pickers[0], pickers[1]);
    }
    return {
      runs: () => (picking ? picked.map((k) => runs[k]) : runs),
      async load(r, at, slot) {
        const id = `${slot}|${r.id}`;
        if (!widgets.has(id)) widgets.set(id, tableWidget(r, key));
        const w = widgets.get(id);
        await w.load(at);
        return w;
      },
      render: (r, w) => w.node,
    };
  }

  const view = kind === 'histogram' ? histogramView() : kind === 'table' ? tableView() : itemsView();

  /** Shows steps[i]: each run's at the last step it logged at or before it. */
  async function show(i) {
    const step = steps[i];
    slider.value = String(i);
    stepLabel.textContent = `step ${fmtNum(step)}`;
    const mine = ++seq;
    const shownRuns = view.runs();
    const got = await settleLimited(shownRuns.map((r, k) => [r, k]), 4, async ([r, k]) => {
      const at = stepAtOrBefore(runSteps.get(r.id) || [], step);
      return { at, data: at === null ? null : await view.load(r, at, k) };
    });
    if (mine !== seq) return;
    const cols = shownRuns.map((r, k) => {
      const g = got[k];
      let content;
      if (g.status === 'rejected') content = errorEl(g.reason);
      else if (g.value.at === null) {
        const first = (runSteps.get(r.id) || [])[0];
        content = el('p', { class: 'muted' }, first === undefined ? 'nothing logged under this key' : `nothing at or before step ${fmtNum(step)} (first at step ${fmtNum(first)})`);
      } else {
        content = [
          g.value.at !== step ? el('div', { class: 'media-note', 'data-testid': 'media-shown-step' }, `step ${fmtNum(g.value.at)} (last at or before ${fmtNum(step)})`) : null,
          view.render(r, g.value.data, g.value.at, k, got)];
      }
      return el('div', { class: 'media-column', 'data-testid': 'media-column', 'data-run': r.id, 'data-shown-step': g.status === 'fulfilled' && g.value.at !== null ? String(g.value.at) : '' },
        labelled ? el('div', { class: 'media-run' }, el('span', { class: 'swatch', style: `background:${r.color}` }), r.name) : null,
        content);
    });
    if (view.done) view.done(got);
    columns.replaceChildren(...cols);
    applyToggles(node);
    node.dataset.step = String(step);
    node.dataset.loaded = String(Number(node.dataset.loaded) + 1);
  }

  /** The index of the last step at or before `step` (the first when none is). */
  const indexOf = (step) => {
    const at = stepAtOrBefore(steps, step);
    return at === null ? 0 : steps.indexOf(at);
  };

  /** Shows the last step at or before `step` (a click on a heatmap), as a move of the slider. */
  function pick(step) {
    const i = indexOf(step);
    clearTimeout(timer);
    show(i);
    if (onMove) onMove(steps[i]);
  }

  slider.addEventListener('input', () => {
    const i = Number(slider.value);
    stepLabel.textContent = `step ${fmtNum(steps[i])}`;
    clearTimeout(timer);
    timer = setTimeout(() => show(i), 80);
    if (onMove) onMove(steps[i]);
  });

  /** Reads each run's steps; keeps the step shown, or follows the last step when it was there. */
  async function readSteps() {
    const got = await settleLimited(runs, 4, (r) => api(`/runs/${enc(r.id)}/media/steps?key=${enc(key)}`));
    runSteps = new Map(runs.map((r, k) => [r.id, got[k].status === 'fulfilled' ? got[k].value.steps || [] : []]));
    const failed = got.find((g) => g.status === 'rejected');
    steps = [...new Set([...runSteps.values()].flat())].sort((a, b) => a - b);
    if (!steps.length) { columns.replaceChildren(failed ? errorEl(failed.reason) : el('p', { class: 'muted' }, 'No items.')); return false; }
    slider.max = String(steps.length - 1);
    slider.disabled = steps.length < 2;
    return true;
  }

  async function start() {
    if (started) return;
    started = true;
    try {
      if (!(await readSteps())) return;
      await show(wanted === null || wanted === undefined ? steps.length - 1 : indexOf(wanted));
    } catch (e) { columns.replaceChildren(errorEl(e)); }
  }

  return {
    node, start,
    /** Moves the slider to the last step at or before `step` (once loaded; before, where it will start). */
    setStep(step) {
      wanted = step;
      if (!steps.length) return;
      const i = indexOf(step);
      if (String(i) !== slider.value || node.dataset.step !== String(steps[i])) {
        slider.value = String(i);
        stepLabel.textContent = `step ${fmtNum(steps[i])}`;
        clearTimeout(timer);
        timer = setTimeout(() => show(i), 80);
      }
    },
    /** Re-reads the steps of a loaded panel (a live run logs more); one at its last step follows. */
    async refresh() {
      if (!started || !steps.length) return;
      const atLast = Number(slider.value) === steps.length - 1;
      const before = steps.length;
      const current = steps[Number(slider.value)];
      if (!(await readSteps())) return;
      if (steps.length === before) return;
      if (view.reset) view.reset();
      await show(atLast ? steps.length - 1 : indexOf(current));
    },
    destroy() { clearTimeout(timer); seq++; },
  };
}

/**
 * Media panels into `container`: one per key of `keys` ({key, kind, runs: [{id, name, color}]}),
 * each loading when it comes near the viewport. `sync`: offer "Sync sliders" (moving one panel's
 * slider moves them all to that step); `labelled`: label each run's column. Returns {refresh, destroy}.
 */
export function mountMediaPanels(container, keys, { sync = false, labelled = false } = {}) {
  const syncBox = el('input', { type: 'checkbox', 'data-testid': 'media-sync' });
  const panels = [];
  const moved = (from) => (step) => {
    if (!syncBox.checked) return;
    panels.forEach((p) => { if (p !== from()) p.setStep(step); });
  };
  for (const k of keys) {
    let self = null;
    self = mediaPanel(k.key, k.kind, k.runs, { labelled, onMove: moved(() => self), initialStep: null });
    panels.push(self);
  }
  syncBox.addEventListener('change', () => {
    // Turning sync on lines the panels up on the step of the first one loaded.
    if (!syncBox.checked) return;
    const first = panels.find((p) => p.node.dataset.step !== undefined);
    if (first) moved(() => first)(Number(first.node.dataset.step));
  });
  container.replaceChildren(
    sync && keys.length > 1 ? el('label', { class: 'media-sync' }, syncBox, ' Sync sliders (moving one moves every panel to that step)') : '',
    ...panels.map((p) => p.node));
  let observer = null;
  if (typeof IntersectionObserver === 'function') {
    const waiting = new Map(panels.map((p) => [p.node, p]));
    observer = new IntersectionObserver((entries) => {
      for (const e of entries) {
        const p = e.isIntersecting && waiting.get(e.target);
        if (!p) continue;
        waiting.delete(e.target);
        observer.unobserve(e.target);
        p.start();
      }
      if (!waiting.size) observer.disconnect();
    }, { rootMargin: PANEL_LOAD_MARGIN });
    panels.forEach((p) => observer.observe(p.node));
  } else {
    panels.forEach((p) => p.start());
  }
  return {
    refresh: () => panels.forEach((p) => p.refresh()),
    destroy: () => {
      if (observer) observer.disconnect();
      panels.forEach((p) => p.destroy());
      document.querySelectorAll('[data-testid=media-zoom]').forEach((z) => z.close());
    },
  };
}

/** The media keys of `runs` ({id, name, color}): {key, kind, runs} per key any of them logged,
 * each with the runs that logged it, sorted by key. */
export async function mediaKeys(runs) {
  const got = await settleLimited(runs, 6, (r) => api(`/runs/${enc(r.id)}/media/keys`));
  const failed = got.find((g) => g.status === 'rejected');
  if (failed && got.every((g) => g.status === 'rejected')) throw failed.reason;
  const byKey = new Map();
  runs.forEach((r, i) => {
    if (got[i].status !== 'fulfilled') return;
    for (const k of got[i].value.keys || []) {
      if (!byKey.has(k.key)) byKey.set(k.key, { key: k.key, kind: k.kind, runs: [] });
      byKey.get(k.key).runs.push(r);
    }
  });
  return [...byKey.values()].sort((a, b) => a.key.localeCompare(b.key));
}
