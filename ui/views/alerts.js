/* #/alerts/NAME: a project's alerts. Its inbox (newest first, those the caller has not read
 * marked, "Mark all read"), its rules with when each last fired (writers add and remove them),
 * and the deliveries to its channels with what each receiver answered (for its admins). */

import { enc } from '../lib/address.js';
import { api } from '../lib/api.js';
import { el, errorEl } from '../lib/dom.js';
import { fmtTime } from '../lib/format.js';
import { mayWrite } from '../lib/session.js';

/** What an alert is about: its run (a link), or the project itself. */
function about(alert) {
  return alert.run ? el('a', { href: '#/run/' + enc(alert.run) }, alert.run) : el('span', { class: 'muted' }, 'project');
}

function table(head, rows, testid) {
  return el('table', { class: 'list', 'data-testid': testid },
    el('thead', {}, el('tr', {}, head.map((h) => el('th', {}, h)))), el('tbody', {}, rows));
}

export function alertsView(project) {
  const inbox = el('div', {}, el('p', { class: 'muted' }, 'Loading alerts…'));
  const rules = el('div', {});
  const deliveries = el('div', {});
  const node = el('div', {},
    el('div', { class: 'breadcrumb' }, el('a', { href: '#/' }, 'Projects'), ' / ',
      el('a', { href: '#/p/' + enc(project) }, project), ' / '),
    el('h1', {}, 'Alerts'), inbox,
    el('h2', {}, 'Rules'), rules,
    el('h2', {}, 'Deliveries'), deliveries);
  const base = `/projects/${enc(project)}`;

  async function loadInbox() {
    try {
      const res = await api(`${base}/alerts`);
      const readUpTo = res.read_up_to || 0;
      const unread = res.alerts.filter((a) => a.id > readUpTo);
      const newest = res.alerts.reduce((m, a) => Math.max(m, a.id), 0);
      const markRead = el('button', { type: 'button', 'data-testid': 'mark-read', disabled: !unread.length }, 'Mark all read');
      markRead.addEventListener('click', async () => {
        try { await api(`${base}/alerts/read`, { body: { up_to: newest } }); loadInbox(); } catch (e) { inbox.append(errorEl(e)); }
      });
      const rows = res.alerts.map((a) => el('tr', {
        'data-testid': 'inbox-row', 'data-unread': a.id > readUpTo ? '1' : '0',
        class: `alert-${a.level}${a.id > readUpTo ? ' unread' : ''}`,
      },
      el('td', {}, fmtTime(a.time)), el('td', {}, a.level), el('td', {}, about(a)), el('td', {}, a.step ?? ''),
      el('td', {}, el('strong', {}, a.title), a.text ? el('div', { class: 'muted' }, a.text) : null),
      el('td', {}, a.count > 1 ? `×${a.count}` : ''), el('td', { class: 'muted' }, a.rule || 'from code')));
      inbox.replaceChildren(
        el('div', { class: 'toolbar' }, el('span', { 'data-testid': 'unread-count' }, `${unread.length} unread`), markRead),
        res.alerts.length ? table(['time', 'level', 'about', 'step', 'alert', 'repeats', 'raised by'], rows, 'inbox')
          : el('p', { class: 'muted' }, 'No alerts yet.'));
    } catch (e) { inbox.replaceChildren(errorEl(e)); }
  }

  async function loadRules() {
    try {
      const [res, proj] = await Promise.all([api(`${base}/alert-rules`), api(base)]);
      const writable = mayWrite(proj.your_role);
      const error = el('div', { class: 'error', 'data-testid': 'rule-error' });
      const input = el('input', { type: 'text', 'data-testid': 'rule-input', size: 40, placeholder: 'e.g. train/loss not finite, stalled 10m, idle < 10% for 20m, budget 80%' });
      const add = el('button', { type: 'submit', 'data-testid': 'add-rule' }, 'Add rule');
      const form = el('form', { class: 'toolbar' }, input, add);
      form.addEventListener('submit', async (e) => {
        e.preventDefault();
        try { await api(`${base}/alert-rules`, { body: { rule: input.value } }); loadRules(); } catch (err) {
          error.textContent = (err.field ? err.field + ': ' : '') + err.message;
        }
      });
      const remove = (r) => el('button', {
        type: 'button', class: 'danger', 'data-testid': 'remove-rule',
        onclick: async () => {
          try { await api(`${base}/alert-rules/${r.id}`, { method: 'DELETE' }); loadRules(); } catch (err) { error.textContent = err.message; }
        },
      }, 'Remove');
      const rows = res.rules.map((r) => el('tr', { 'data-testid': 'rule-row' },
        el('td', {}, el('code', {}, r.rule), r.installation ? el('span', { class: 'badge', title: "a server admin's rule" }, 'every project') : null),
        el('td', { 'data-testid': 'rule-last-fired' }, r.last_fired_time ? fmtTime(r.last_fired_time) : 'never'),
        el('td', { class: 'num' }, String(r.fired)), el('td', { class: 'muted' }, r.created_by || ''),
        el('td', {}, writable && !r.installation ? remove(r) : null)));
      rules.replaceChildren(
        res.rules.length ? table(['rule', 'last fired', 'times', 'added by', ''], rows, 'rules')
          : el('p', { class: 'muted' }, 'No rules. A rule is written as people say it (see the docs: Alerts).'),
        writable ? form : null, error);
    } catch (e) { rules.replaceChildren(errorEl(e)); }
  }

  async function loadDeliveries() {
    try {
      const res = await api(`${base}/alert-deliveries`);
      const rows = res.deliveries.map((d) => el('tr', { 'data-testid': 'delivery-row', class: 'delivery-' + d.status },
        el('td', {}, fmtTime(d.sent_time || d.next_time)), el('td', {}, d.title), el('td', { class: 'muted' }, d.rule || 'from code'),
        el('td', {}, `${d.kind} ${d.url}`), el('td', {}, d.status), el('td', { class: 'num' }, String(d.attempts)),
        el('td', { class: 'muted' }, d.answer)));
      deliveries.replaceChildren(res.deliveries.length
        ? table(['time', 'alert', 'rule', 'channel', 'status', 'attempts', 'answer'], rows, 'deliveries')
        : el('p', { class: 'muted' }, 'No deliveries: the project has no channels, or nothing was sent yet.'));
    } catch (e) {
      deliveries.replaceChildren(e.status === 403
        ? el('p', { class: 'muted' }, "The project's admins see its deliveries.") : errorEl(e));
    }
  }

  loadInbox();
  loadRules();
  loadDeliveries();
  return { node, title: `Alerts · ${project}` };
}
