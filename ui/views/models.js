/* #/models the model registry: each model's versions with their aliases (to set and move),
 * tags, source, files to download and lineage. */

import { enc } from '../lib/address.js';
import { API, api } from '../lib/api.js';
import { el, errorEl, kvTable } from '../lib/dom.js';
import { artifactLink } from '../lib/downloads.js';
import { fmtBytes, fmtNum, fmtTime, fmtValue, toNum } from '../lib/format.js';
import { isSystemKey } from '../lib/runs.js';
import { mayWrite } from '../lib/session.js';

/** Where a model version's files came from: a run's artifacts, a checkpoint, a path. */
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

/** Every registered model, a panel each. */
/** The registry; `focus` ({name, version}) scrolls to that model, and that version's row, and
 * marks them (an MLflow address such as #/models/NAME/versions/V). */
export function modelsView(focus = null) {
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
      if (focus && focus.name === m.name) {
        const row = focus.version ? versions.querySelector(`[data-version="${CSS.escape(String(focus.version))}"]`) : null;
        const target = row || panel;
        target.classList.add('focused');
        target.setAttribute('data-focused', 'true');
        target.scrollIntoView({ block: 'center' });
      }
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
    if (focus && !models.some((m) => m.name === focus.name)) {
      body.prepend(el('p', { class: 'error', 'data-testid': 'model-missing' }, `No registered model named ${focus.name}.`));
    }
  }).catch((e) => body.replaceChildren(errorEl(e)));
  return { node, title: 'Models' };
}
