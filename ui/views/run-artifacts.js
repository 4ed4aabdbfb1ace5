/* A run's artifacts and checkpoints, and previews of its images, text, JSON and CSV files. */

import { enc } from '../lib/address.js';
import { API, authHeaders } from '../lib/api.js';
import { el, errorEl } from '../lib/dom.js';
import { artifactLink } from '../lib/downloads.js';
import { fmtBytes, fmtNum, fmtTime, fmtValue } from '../lib/format.js';

/** A run's artifacts (`arts`: the settled answer of its artifacts list), as download links. */
export function artifactsTable(id, arts) {
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

/** Which artifacts are previewed, and how: by the end of their path. */
const PREVIEW_KINDS = [
  [/\.(png|jpe?g|gif|webp|svg)$/i, 'image'], [/\.json$/i, 'json'], [/\.(csv|tsv)$/i, 'csv'],
  [/\.(txt|log|md|py|ya?ml|toml|cfg|ini|sh|out|err)$/i, 'text'],
];

/** At most this many previews; and the largest file of each kind that is previewed. */
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
export function artifactPreviews(id, arts) {
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

/** A run's checkpoints (`ckpts`: the settled answer of its checkpoints list) and their files. */
export function checkpointsTable(id, ckpts) {
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
