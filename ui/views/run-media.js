/* The media section of a run's page: a panel per key the run logged images, audio, video, text,
 * files, histograms or tables under, each with its own step slider (see lib/media.js). */

import { enc } from '../lib/address.js';
import { api } from '../lib/api.js';
import { runColor } from '../lib/colors.js';
import { el, errorEl } from '../lib/dom.js';
import { mountMediaPanels } from '../lib/media.js';

/**
 * The run's media section: {node, refresh, destroy}, as mounted charts are. Its keys are read at
 * once; each panel reads its steps and items when it comes near the viewport. `refresh` re-reads
 * the keys (a new key rebuilds the panels) and the steps of the panels loaded.
 */
export function runMediaSection(run) {
  const node = el('div', { 'data-testid': 'media-section' }, el('p', { class: 'muted' }, 'Loading media…'));
  const runs = [{ id: run.id, name: run.name || run.id, color: runColor(run) }];
  let mounted = null;
  let shown = null;
  let alive = true;

  async function load() {
    let keys;
    try {
      keys = (await api(`/runs/${enc(run.id)}/media/keys`)).keys || [];
    } catch (e) {
      if (alive) node.replaceChildren(errorEl('Could not load media: ' + e.message));
      return;
    }
    if (!alive) return;
    const names = keys.map((k) => `${k.key}\n${k.kind}`).join('\n');
    if (names === shown) { if (mounted) mounted.refresh(); return; }
    shown = names;
    if (mounted) mounted.destroy();
    mounted = null;
    if (!keys.length) { node.replaceChildren(el('p', { class: 'muted' }, 'No media logged.')); return; }
    mounted = mountMediaPanels(node, keys.map((k) => ({ key: k.key, kind: k.kind, runs })));
  }
  load();
  return {
    node,
    refresh: () => { if (alive) load(); },
    destroy: () => { alive = false; if (mounted) mounted.destroy(); },
  };
}
