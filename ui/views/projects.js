/* #/ the projects, with their run counts and unread alerts. */

import { enc } from '../lib/address.js';
import { api } from '../lib/api.js';
import { el, errorEl } from '../lib/dom.js';
import { fmtTime } from '../lib/format.js';

/** Every project: its run count, description and creation time. */
export function projectsView() {
  const body = el('div', {}, el('p', { class: 'muted' }, 'Loading projects…'));
  const node = el('div', {}, el('h1', {}, 'Projects'), body);
  api('/projects').then((res) => {
    const projects = res.projects || [];
    if (!projects.length) {
      body.replaceChildren(el('p', { class: 'muted' }, 'No projects yet. Log a run to create one.'));
      return;
    }
    body.replaceChildren(el('table', { class: 'list', 'data-testid': 'projects-list' },
      el('thead', {}, el('tr', {}, el('th', {}, 'Project'), el('th', {}, 'Runs'), el('th', {}, 'Alerts'),
        el('th', {}, 'Description'), el('th', {}, 'Created'))),
      el('tbody', {}, projects.map((p) => el('tr', {},
        el('td', {}, el('a', { href: '#/p/' + enc(p.name) }, p.name)),
        el('td', { class: 'num' }, String(p.run_count ?? '')),
        el('td', {}, el('a', { href: '#/alerts/' + enc(p.name), 'data-testid': 'project-alerts', title: 'the inbox, rules and deliveries' },
          p.unread_alerts ? el('span', { class: 'badge unread', 'data-testid': 'unread-alerts' }, `${p.unread_alerts} new`) : 'inbox')),
        el('td', {}, p.description || ''),
        el('td', { class: 'muted' }, fmtTime(p.created_time)))))));
  }).catch((e) => body.replaceChildren(errorEl(e)));
  return { node };
}
