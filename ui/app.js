/* trainlog web UI: the entry module, a hash router over the views (no build step; uPlot is the
 * one library, loaded before this module as a classic script). Talks to the JSON API under
 * /api/v1 (lib/api.js).
 * Routes: #/ projects, #/p/NAME runs table, #/compare/NAME/id1,id2 (or ?filter=…) compare,
 * #/run/ID run page, #/run/ID/logs its console lines, #/models model registry, #/sweeps/NAME a project's sweeps, #/sweep/ID a sweep,
 * #/report the training report of every project, #/report/NAME one project's, #/alerts/NAME a
 * project's alerts (inbox, rules, deliveries).
 * MLflow's UI addresses open the matching pages: #/experiments/N (the experiment's project),
 * #/experiments/N/runs/ID (the run), #/models/NAME[/versions/V] (the model, that version).
 * Each view is a function of the route's parts that returns {node, title?, mounted?, cleanup?}. */

import { authHeaders } from './lib/api.js';
import { el } from './lib/dom.js';
import { isSigningIn, startSession } from './lib/session.js';
import { alertsView } from './views/alerts.js';
import { compareView } from './views/compare.js';
import { modelsView } from './views/models.js';
import { projectsView } from './views/projects.js';
import { reportView } from './views/report.js';
import { runView } from './views/run.js';
import { runLogsView } from './views/run-logs.js';
import { runsView } from './views/runs-table.js';
import { sweepsView, sweepView } from './views/sweeps.js';

/** What the view shown needs done when it goes (timers, listeners, charts). */
let currentCleanup = null;

function leaveView() {
  if (currentCleanup) { currentCleanup(); currentCleanup = null; }
}

/** Shows the view of the address. */
function route() {
  leaveView();
  const app = document.getElementById('app');
  app.replaceChildren();
  const [path, query] = location.hash.replace(/^#\/?/, '').split('?');
  const params = new URLSearchParams(query || '');
  const parts = path.split('/').map((p) => {
    try { return decodeURIComponent(p); } catch (e) { return p; }
  });
  const [head, a, b, c] = parts;
  let view;
  if (!head) view = projectsView();
  else if (head === 'p' && a) view = runsView(a, params);
  else if (head === 'compare' && a) view = compareView(a, (b || '').split(',').filter(Boolean), params);
  else if (head === 'run' && a && b === 'logs') view = runLogsView(a, params);
  else if (head === 'run' && a) view = runView(a);
  else if (head === 'models') view = modelsView(a ? { name: a, version: b === 'versions' ? c || null : null } : null);
  else if (head === 'experiments' && a && b === 'runs' && c) view = runView(c);
  else if (head === 'experiments' && a) view = experimentView(a);
  else if (head === 'sweeps' && a) view = sweepsView(a);
  else if (head === 'sweep' && a) view = sweepView(a);
  else if (head === 'report') view = reportView(a || null, params);
  else if (head === 'alerts' && a) view = alertsView(a);
  else view = { node: el('p', { class: 'error' }, 'Unknown page: ' + location.hash) };
  app.append(view.node);
  const titles = { report: 'Report', models: 'Models', sweeps: `Sweeps · ${a}`, sweep: 'Sweep', run: 'Run' };
  document.title = (view.title || titles[head] || 'Projects') + ' · trainlog';
  if (view.mounted) view.mounted();
  currentCleanup = view.cleanup || null;
}

/** MLflow's #/experiments/N: the project the MLflow door names experiment N, opened in place. */
function experimentView(id) {
  const node = el('p', { class: 'muted', 'data-testid': 'experiment-redirect' }, `Opening MLflow experiment ${id}…`);
  fetch('/api/2.0/mlflow/experiments/get?experiment_id=' + encodeURIComponent(id), { headers: authHeaders() })
    .then(async (r) => {
      const body = await r.json().catch(() => ({}));
      if (!r.ok || !body.experiment) throw new Error(body.message || `experiment ${id}: HTTP ${r.status}`);
      location.replace('#/p/' + encodeURIComponent(body.experiment.name));
    })
    .catch((e) => node.replaceWith(el('p', { class: 'error', 'data-testid': 'experiment-error' }, e.message)));
  return { node, title: 'Experiment' };
}

window.addEventListener('hashchange', () => { if (!isSigningIn()) route(); });

// A module runs once the document is parsed (as a deferred script does).
const start = () => startSession(leaveView, route);
if (document.readyState === 'loading') window.addEventListener('DOMContentLoaded', start);
else start();
