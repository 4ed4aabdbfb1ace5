/* Browser tests of the workspace: run colours, system charts by metric, the panels a person
 * arranges, the runs table's basics, axis numbers, sweeps and the pages' fit at 1280 px. The real
 * server binary on 127.0.0.1, headless Debian Chromium driven by playwright-core. */

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { createHash } from 'node:crypto';

import { png } from './png.mjs';
import { launchBrowser, startServer } from './server.mjs';
const TEST_TIMEOUT = 90000;
let server, base, browser;

async function call(method, p, body) {
  const r = await fetch(`${base}/api/v1${p}`, { method, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  if (!r.ok) throw new Error(`${method} ${p}: ${r.status} ${await r.text()}`);
  return r.json();
}

/** `n` runs in `project`, each logging `loss` over 20 steps; their ids in creation order. */
async function makeRuns(project, n, extra = () => ({})) {
  const ids = [];
  for (let i = 0; i < n; i++) {
    const id = (await call('POST', '/runs', { project, name: `${project}-${String(i).padStart(2, '0')}`, ...extra(i) })).id;
    const points = Array.from({ length: 20 }, (_, s) => ({ key: 'loss', step: s, value: 1 / (s + 1 + i) }));
    await call('POST', `/runs/${id}/metrics`, { points });
    ids.push(id);
  }
  return ids;
}

async function withPage(fn, width = 1400) {
  const page = await browser.newPage({ viewport: { width, height: 900 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  try {
    await fn(page);
    assert.deepEqual(errors, [], 'no script errors');
  } finally {
    await page.close();
  }
}

before(async () => {
  const started = await startServer();
  server = started.proc;
  base = started.url;
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
  server?.kill('SIGTERM');
});

const legendColors = (page) => page.locator('[data-testid=legend] [data-testid=legend-item]')
  .evaluateAll((items) => Object.fromEntries(items.map((i) => [i.dataset.runId, getComputedStyle(i.querySelector('.swatch')).backgroundColor])));

test('ten compared runs have ten distinct colours, each the same in the runs table; two runs set to one colour still differ in a chart', { timeout: TEST_TIMEOUT }, async () => {
  const ids = await makeRuns('colours', 10);
  const runs = await Promise.all(ids.map((id) => call('GET', `/runs/${id}`)));
  assert.equal(new Set(runs.map((r) => r.color)).size, 10, 'the server gives each new run of a project the next colour');
  await withPage(async (page) => {
    await page.goto(`${base}/#/compare/colours/${ids.join(',')}`);
    await page.locator('[data-testid=chart-slot][data-chart-key="loss"][data-loaded="1"]').waitFor();
    const inChart = await legendColors(page);
    assert.equal(new Set(Object.values(inChart)).size, 10, 'ten lines, ten colours');
    await page.goto(`${base}/#/p/colours?filter=`);
    await page.getByTestId('row-count').filter({ hasText: '10 runs' }).waitFor();
    const inTable = Object.fromEntries(await page.locator('[data-testid=run-row]').evaluateAll((rows) => rows.map((r) => [
      r.dataset.runId, getComputedStyle(r.querySelector('[data-testid=run-color]')).backgroundColor])));
    for (const id of ids) assert.equal(inTable[id], inChart[id], `run ${id}: the same colour in the table as in the chart`);

    // A person sets run 5's colour on its page; run 7 is set to the same colour over the API.
    await page.goto(`${base}/#/run/${ids[5]}`);
    await page.getByTestId('edit-run').click();
    await page.getByTestId('edit-color').fill('#123456');
    await page.getByTestId('edit-save').click();
    await page.waitForFunction(async (id) => (await (await fetch(`/api/v1/runs/${id}`)).json()).color === '#123456', ids[5]);
    await call('PATCH', `/runs/${ids[7]}`, { color: '#123456' });
    await page.goto(`${base}/#/compare/colours/${ids.join(',')}`);
    await page.locator('[data-testid=chart-slot][data-chart-key="loss"][data-loaded="1"]').waitFor();
    const after = await legendColors(page);
    assert.equal(after[ids[5]], 'rgb(18, 52, 86)', 'the colour set on the run page');
    assert.equal(new Set(Object.values(after)).size, 10, 'the later run of the two takes a free colour');
  });
  const bad = await fetch(`${base}/api/v1/runs/${ids[0]}`, { method: 'PATCH', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ color: 'blue' }) });
  assert.equal(bad.status, 400);
  assert.equal((await bad.json()).error.field, 'color');
});

/** Points of `gpus` GPUs × util, memory, power and temperature over `samples` samples a second
 * apart, GPU g at util 10·g (under `prefix`, `sys/` or `sys/node/N/`), and the CPU. */
function systemPoints(gpus, samples, prefix = 'sys/', start = Date.now() - samples * 1000) {
  const points = [];
  for (let s = 0; s < samples; s++) {
    const timestamp = start + s * 1000;
    for (let g = 0; g < gpus; g++) {
      points.push({ key: `${prefix}gpu.${g}.util`, step: s, value: 10 * g, timestamp });
      points.push({ key: `${prefix}gpu.${g}.mem_used_bytes`, step: s, value: 1e9 * (g + 1), timestamp });
      points.push({ key: `${prefix}gpu.${g}.power_w`, step: s, value: 100 + g, timestamp });
      points.push({ key: `${prefix}gpu.${g}.temp_c`, step: s, value: 40 + g, timestamp });
    }
  }
  return points;
}

const lastValues = (page, key) => page.locator(`[data-testid=system-charts] [data-testid=chart][data-key="${key}"]`)
  .evaluate((c) => Object.fromEntries(c.dataset.last.split(';').map((kv) => kv.split('=')).map(([k, v]) => [k, Number(v)])));

test('a run with 8 GPUs x 4 system metrics shows 4 system charts of 8 lines each, in a collapsed section below media; compared, a line per run', { timeout: TEST_TIMEOUT }, async () => {
  const [a, b] = await makeRuns('system', 2);
  await call('POST', `/runs/${a}/metrics`, { points: systemPoints(8, 30) });
  await call('POST', `/runs/${b}/metrics`, { points: systemPoints(4, 30) });
  await withPage(async (page) => {
    await page.goto(`${base}/#/run/${a}`);
    const section = page.getByTestId('system-section');
    await section.waitFor();
    assert.equal(await section.evaluate((d) => d.open), false, 'collapsed');
    const order = await page.locator('h2, [data-testid=system-section]').evaluateAll((els) => els.map((e) => e.dataset.testid || e.textContent));
    assert.ok(order.indexOf('system-section') > order.indexOf('Media'), `below media: ${order}`);
    assert.equal(await page.locator('[data-testid=system-charts]').count(), 0, 'nothing read until opened');
    await section.locator('summary').click();
    const charts = page.locator('[data-testid=system-charts] [data-testid=chart]');
    await page.waitForFunction(() => {
      const cs = [...document.querySelectorAll('[data-testid=system-charts] [data-testid=chart]')];
      return cs.length === 4 && cs.every((c) => c.dataset.seriesCount === '8');
    }, null, { timeout: 20000 });
    assert.deepEqual(await charts.evaluateAll((cs) => cs.map((c) => c.dataset.key)), ['sys/gpu.util', 'sys/gpu.mem_used_bytes', 'sys/gpu.power_w', 'sys/gpu.temp_c']);
    assert.deepEqual(await page.locator('[data-testid=system-section] .chart-head .title').allInnerTexts(), ['GPU utilization', 'GPU memory used', 'GPU power', 'GPU temperature']);
    assert.deepEqual(await lastValues(page, 'sys/gpu.util'), Object.fromEntries(Array.from({ length: 8 }, (_, g) => [`gpu.${g}`, 10 * g])));

    await page.goto(`${base}/#/compare/system/${a},${b}`);
    await page.getByTestId('system-section').locator('summary').click();
    await page.waitForFunction(() => {
      const cs = [...document.querySelectorAll('[data-testid=system-charts] [data-testid=chart]')];
      return cs.length === 4 && cs.every((c) => c.dataset.seriesCount === '2');
    }, null, { timeout: 20000 });
    assert.deepEqual(await lastValues(page, 'sys/gpu.util'), { [a]: 35, [b]: 15 }, 'each run: the mean over its GPUs');
  });
});

test('ticks of a 0–10,000 axis and of small percentages read distinctly; money in cents; a mean of integers to one decimal', { timeout: TEST_TIMEOUT }, async () => {
  const id = (await call('POST', '/runs', { project: 'numbers', name: 'long' })).id;
  const points = [];
  for (let s = 0; s <= 10000; s += 50) points.push({ key: 'train/acc_pct', step: s, value: 0.2 + 0.6 * s / 10000 }, { key: 'cost/usd', step: s, value: 0.2 * s / 10000 });
  await call('POST', `/runs/${id}/metrics`, { points });
  const distinctAndExact = (labels, scale, suffix) => {
    assert.equal(new Set(labels).size, labels.length, `distinct: ${labels}`);
    const values = labels.map((l) => l.replace(suffix, '')).map((l) => (l.endsWith('k') ? 1000 * Number(l.slice(0, -1)) : Number(l)));
    const step = values[1] - values[0];
    values.forEach((v, i) => assert.ok(Math.abs(v - (values[0] + i * step)) < 1e-9 * scale, `evenly spaced as written: ${labels}`));
  };
  for (const width of [600, 900, 1400]) {
    await withPage(async (page) => {
      await page.goto(`${base}/#/run/${id}`);
      const chart = page.locator('[data-testid=chart][data-key="train/acc_pct"]');
      await page.waitForFunction(() => document.querySelector('[data-testid=chart][data-key="train/acc_pct"]')?.dataset.yTicks);
      distinctAndExact((await chart.getAttribute('data-x-ticks')).split('|'), 10000, '');
      distinctAndExact((await chart.getAttribute('data-y-ticks')).split('|'), 1, '%');
    }, width);
  }
  await withPage(async (page) => {
    await page.goto(`${base}/#/run/${id}`);
    assert.match(await page.getByTestId('run-info').innerText(), /cost\s+\$0\.20/);
  });
  // The formatting functions themselves, as the page loads them.
  await withPage(async (page) => {
    await page.goto(`${base}/#/`);
    const got = await page.evaluate(async () => {
      const axes = await import('/ui/lib/chart-axes.js');
      const format = await import('/ui/lib/format.js');
      const columns = await import('/ui/views/runs-columns.js');
      const fmt = columns.columnFormatter([4, 5, 7]);
      return {
        steps: axes.fmtTicks([0, 2500, 5000, 7500, 10000], 2500, { label: '' }, false),
        pct: axes.fmtTicks([0.25, 0.5, 0.75], 0.25, { suffix: '%' }, false),
        nice: axes.niceTicks(0, 10000, 4),
        usd: [0.2, 0, 0.01, 12.5, 0.0042].map(format.fmtUsd),
        mean: fmt((4 + 5 + 7) / 3),
      };
    });
    assert.deepEqual(got.steps, ['0', '2.5k', '5k', '7.5k', '10k']);
    assert.deepEqual(got.pct, ['0.25%', '0.5%', '0.75%']);
    assert.deepEqual(got.nice, [0, 2500, 5000, 7500, 10000]);
    assert.deepEqual(got.usd, ['$0.20', '$0.00', '$0.01', '$12.50', '$0.0042']);
    assert.equal(got.mean, '5.3');
  });
});

test('the runs table: a plain word filters by name, running rows update live, start time column, a column picker with search and groups, param and metric headers told apart, sorting and menus from the keyboard', { timeout: TEST_TIMEOUT }, async () => {
  const project = 'table';
  const made = {};
  for (const name of ['resnet50-a', 'ResNet18', 'vit-b']) {
    made[name] = (await call('POST', '/runs', { project, name, params: { lr: 0.1 } })).id;
    await call('POST', `/runs/${made[name]}/metrics`, { points: [{ key: 'lr', step: 0, value: 0.5 }] });
  }
  for (const name of ['resnet50-a', 'ResNet18']) await call('POST', `/runs/${made[name]}/finish`, { status: 'finished' });
  await withPage(async (page) => {
    await page.goto(`${base}/#/p/${project}`);
    await page.getByTestId('row-count').filter({ hasText: '3 runs' }).waitFor();
    const names = () => page.locator('[data-testid=run-row] .cell.pin a').allInnerTexts();

    // A plain word filters by name, in any case; the query language still works.
    await page.getByTestId('filter-input').fill('resnet');
    await page.getByTestId('filter-input').press('Enter');
    await page.getByTestId('row-count').filter({ hasText: '2 runs' }).waitFor();
    assert.deepEqual((await names()).sort(), ['ResNet18', 'resnet50-a']);
    assert.equal(await page.getByTestId('filter-error').innerText(), '');
    await page.getByTestId('filter-input').fill("status = 'running'");
    await page.getByTestId('filter-input').press('Enter');
    await page.getByTestId('row-count').filter({ hasText: '1 run' }).waitFor();
    assert.deepEqual(await names(), ['vit-b']);
    await page.getByTestId('filter-input').fill('');
    await page.getByTestId('filter-input').press('Enter');
    await page.getByTestId('row-count').filter({ hasText: '3 runs' }).waitFor();

    // The start time column.
    const vit = await call('GET', `/runs/${made['vit-b']}`);
    const startedCell = page.locator(`[data-testid=run-row][data-run-id="${made['vit-b']}"] .cell[data-column=started]`);
    assert.equal(await startedCell.getAttribute('title'), await page.evaluate((ms) => new Date(ms).toLocaleString(), vit.start_time));
    assert.match(await startedCell.innerText(), /\d\d:\d\d/, 'the day and minute');

    // Param and metric `lr`: two headers, told apart.
    const kinds = await page.locator('.thead .cell').evaluateAll((cs) => cs.filter((c) => c.querySelector('.col-label')?.textContent.startsWith('lr'))
      .map((c) => c.querySelector('.col-kind')?.textContent));
    assert.deepEqual(kinds.sort(), ['M', 'P']);

    // A running run's row updates without a reload: a new metric value, then its end.
    const row = page.locator(`[data-testid=run-row][data-run-id="${made['vit-b']}"]`);
    await call('POST', `/runs/${made['vit-b']}/metrics`, { points: [{ key: 'lr', step: 1, value: 0.25 }] });
    await row.locator('.cell[data-column], .cell').filter({ hasText: /^0\.25$/ }).first().waitFor({ timeout: 15000 });
    await call('POST', `/runs/${made['vit-b']}/finish`, { status: 'finished' });
    await row.getByText('finished').waitFor({ timeout: 15000 });

    // A header sorted from the keyboard: Tab to it, Enter sorts, Enter again reverses.
    const nameHead = page.locator('.thead .cell[data-column=name]');
    await nameHead.focus();
    await page.keyboard.press('Enter');
    await page.locator('.thead .cell[data-column=name][aria-sort=ascending]').waitFor();
    await page.waitForFunction(() => document.activeElement?.dataset.column === 'name');
    await page.keyboard.press('Enter');
    await page.locator('.thead .cell[data-column=name][aria-sort=descending]').waitFor();
    const order = await page.locator('[data-testid=run-row]').evaluateAll((rs) => rs.sort((a, b) => parseFloat(a.style.top) - parseFloat(b.style.top)).map((r) => r.querySelector('.cell.pin a').textContent));
    assert.deepEqual(order, ['vit-b', 'resnet50-a', 'ResNet18'], 'descending by name');

    // The column picker: groups with counts, a search over every column, Escape closes it.
    const menu = page.getByTestId('columns-menu');
    await menu.locator(':scope > summary').click();
    assert.deepEqual(await menu.getByTestId('column-group').evaluateAll((gs) => gs.map((g) => g.dataset.group)), ['attributes', 'job', 'params', 'metrics', 'summaries']);
    await menu.getByTestId('column-search').fill('lr');
    const listed = await menu.locator('label').allInnerTexts();
    assert.deepEqual(listed.map((t) => t.trim()), ['params.lr', 'metrics.lr', 'metrics.lr (min)', 'metrics.lr (max)', 'metrics.lr (mean)']);
    await menu.getByTestId('column-search').press('Escape');
    assert.equal(await menu.evaluate((d) => d.open), false, 'Escape closes the menu');

    // A group row folds from the keyboard.
    await page.goto(`${base}/#/p/${project}?group=status`);
    const group = page.locator('[data-testid=group-row] .group-name');
    await group.first().waitFor();
    await group.first().focus();
    await page.keyboard.press('Enter');
    await page.locator('[data-testid=group-row] .group-name[aria-expanded=false]').waitFor();
    assert.equal(await page.locator('[data-testid=run-row]').count(), 0, 'folded');
  });
});

test("panels: a chart's x-axis set to epoch and a scatter panel added survive a reload, a shared link and, saved as the project's workspace, a fresh comparison; panels resize, move and go", { timeout: TEST_TIMEOUT }, async () => {
  const project = 'panels';
  const ids = [];
  for (let i = 0; i < 3; i++) {
    const id = (await call('POST', '/runs', { project, name: `p${i}`, params: { lr: 0.001 * (i + 1) } })).id;
    const points = [];
    for (let s = 0; s < 100; s++) points.push({ key: 'loss', step: s, value: 2 / (s + 1 + i) }, { key: 'epoch', step: s, value: Math.floor(s / 10) });
    points.push({ key: 'val_acc', step: 99, value: 0.7 + 0.1 * i });
    await call('POST', `/runs/${id}/metrics`, { points });
    ids.push(id);
  }
  const panelKeys = (page) => page.getByTestId('ws-panel').evaluateAll((ps) => ps.map((p) => `${p.dataset.type}:${p.dataset.key}`));
  const lossChart = (page) => page.locator('[data-testid=ws-panel][data-key=loss] [data-testid=chart]');
  let address;
  await withPage(async (page) => {
    await page.goto(`${base}/#/compare/${project}/${ids.join(',')}`);
    await page.getByTestId('arrange-panels').click();
    assert.deepEqual(await panelKeys(page), ['line:epoch', 'line:loss', 'line:val_acc']);
    // The loss panel against epoch.
    const loss = page.locator('[data-testid=ws-panel][data-key=loss]');
    await loss.getByTestId('panel-menu').locator('summary').click();
    await loss.getByTestId('panel-x').selectOption('metric:epoch');
    await page.waitForFunction(() => {
      const c = document.querySelector('[data-testid=ws-panel][data-key=loss] [data-testid=chart]');
      return c && c.dataset.xMode === 'metric:epoch' && c.dataset.seriesCount === '3' && c.dataset.xTicks;
    });
    const ticks = (await lossChart(page).getAttribute('data-x-ticks')).split('|').map(Number);
    assert.ok(Math.max(...ticks) <= 10 && Math.min(...ticks) >= 0, `an epoch axis: ${ticks}`);
    // A scatter panel: val_acc against the learning rate, a point per run.
    await page.getByTestId('add-panel-type').selectOption('scatter');
    await page.getByTestId('add-panel-x').selectOption('param:lr');
    await page.getByTestId('add-panel-y').selectOption('metric:val_acc');
    await page.getByTestId('add-panel').click();
    assert.equal(await page.locator('[data-testid=scatter] circle').count(), 3);
    // Resize, move and remove.
    const accPanel = page.locator('[data-testid=ws-panel][data-key=val_acc]');
    await accPanel.getByTestId('panel-resize').click();
    assert.match(await page.locator('[data-testid=ws-panel][data-key=val_acc]').getAttribute('class'), /wide/);
    await page.locator('[data-testid=ws-panel][data-key=epoch]').getByTestId('panel-later').click();
    await page.locator('[data-testid=ws-panel][data-key=epoch]').getByTestId('panel-remove').click();
    assert.deepEqual(await panelKeys(page), ['line:loss', 'line:val_acc', 'scatter:metric:val_acc vs param:lr']);
    address = page.url();
    assert.match(address, /[?&]ws=/, 'the panels are in the address');
    // A reload shows the same panels.
    await page.reload();
    await page.getByTestId('ws-panel').first().waitFor();
    assert.deepEqual(await panelKeys(page), ['line:loss', 'line:val_acc', 'scatter:metric:val_acc vs param:lr']);
    await page.waitForFunction(() => document.querySelector('[data-testid=ws-panel][data-key=loss] [data-testid=chart]')?.dataset.xMode === 'metric:epoch');
    await page.getByTestId('save-workspace').click();
    await page.getByTestId('workspace-message').filter({ hasText: "project's workspace" }).waitFor();
    // A named view keeps other panels; opening it brings them back.
    await page.locator('[data-testid=ws-panel][data-type=scatter]').getByTestId('panel-remove').click();
    await page.getByTestId('workspace-view-name').fill('loss only');
    await page.getByTestId('save-workspace-view').click();
    await page.getByTestId('workspace-message').filter({ hasText: 'loss only' }).waitFor();
    await page.getByTestId('reset-workspace').click();
    assert.deepEqual(await panelKeys(page), ['line:epoch', 'line:loss', 'line:val_acc']);
    await page.getByTestId('workspace-views').selectOption('loss only');
    await page.waitForFunction(() => document.querySelectorAll('[data-testid=ws-panel]').length === 2);
    assert.deepEqual(await panelKeys(page), ['line:loss', 'line:val_acc']);
  });
  // A shared link, in another page.
  await withPage(async (page) => {
    await page.goto(address);
    await page.getByTestId('ws-panel').first().waitFor();
    assert.deepEqual(await panelKeys(page), ['line:loss', 'line:val_acc', 'scatter:metric:val_acc vs param:lr']);
    assert.match(await page.locator('[data-testid=ws-panel][data-key=val_acc]').getAttribute('class'), /wide/);
    await page.waitForFunction(() => document.querySelector('[data-testid=ws-panel][data-key=loss] [data-testid=chart]')?.dataset.xMode === 'metric:epoch');
  });
  // A comparison opened afresh (no panels in its link) gets the project's workspace.
  await withPage(async (page) => {
    await page.goto(`${base}/#/compare/${project}/${ids.slice(0, 2).join(',')}`);
    await page.getByTestId('ws-panel').first().waitFor();
    assert.deepEqual(await panelKeys(page), ['line:loss', 'line:val_acc', 'scatter:metric:val_acc vs param:lr']);
    assert.equal(await page.locator('[data-testid=scatter] circle').count(), 2);
  });
});

/** A random sweep over lr, batch and opt with `n` finished trials, whose loss falls with lr,
 * rises by 1.5 with sgd and hardly moves with the batch; answers {sweep, firstRun}. */
async function makeSweep(project, name, n) {
  const config = ['command: [python, train.py]', 'method: random', 'metric: {name: val_loss, goal: minimize}',
    'parameters:', '  lr: {distribution: log_uniform, min: 1.0e-5, max: 1.0e-1}', '  batch: {values: [16, 32, 64]}', '  opt: {values: [adam, sgd]}',
    `run_cap: ${n}`, 'seed: 7'].join('\n');
  const sweep = await call('POST', '/sweeps', { config, project, name });
  let firstRun = null;
  for (let i = 0; i < n; i++) {
    const trial = await call('POST', `/sweeps/${sweep.id}/next`, { agent: 'test:1', slot: 'gpu:0', gpus: 1 });
    firstRun = firstRun || trial;
    const loss = -Math.log10(trial.params.lr) + (trial.params.opt === 'sgd' ? 1.5 : 0) + 0.0001 * trial.params.batch;
    await call('POST', `/runs/${trial.run_id}/metrics`, { points: [0, 1, 2].map((s) => ({ key: 'val_loss', step: s, value: loss + (2 - s) })) });
    await call('POST', `/sweeps/${sweep.id}/trials/${trial.index}/end`, { outcome: 'finished', exit_code: 0 });
  }
  return { sweep, firstRun };
}

test("a sweep's page charts every trial's metric and shows each parameter's importance and correlation; a trial's page links to its sweep", { timeout: TEST_TIMEOUT }, async () => {
  const { sweep, firstRun } = await makeSweep('importance', 'lr-matters', 24);
  await withPage(async (page) => {
    await page.goto(`${base}/#/sweep/${sweep.id}`);
    const rows = page.getByTestId('importance-row');
    await rows.first().waitFor();
    const got = await rows.evaluateAll((rs) => rs.map((r) => ({ param: r.dataset.param, importance: Number(r.dataset.importance), correlation: r.dataset.correlation })));
    assert.equal(got[0].param, 'lr', `lr matters most: ${JSON.stringify(got)}`);
    assert.ok(got[0].importance > 0.5, JSON.stringify(got));
    const of = Object.fromEntries(got.map((g) => [g.param, g]));
    assert.ok(of.batch.importance < of.opt.importance, `batch matters least: ${JSON.stringify(got)}`);
    assert.ok(Number(of.lr.correlation) < -0.3, 'a larger lr, a smaller loss');
    assert.equal(of.opt.correlation, '', 'no correlation for a parameter that is not a number');
    await page.waitForFunction(() => document.querySelector('[data-testid=trials-chart] [data-testid=chart]')?.dataset.seriesCount === '24');
    await page.goto(`${base}/#/run/${firstRun.run_id}`);
    await page.getByTestId('run-sweep-link').click();
    await page.getByTestId('sweep-title').filter({ hasText: 'lr-matters' }).waitFor();
  });
});

/** What runs off a page: elements reaching past its right edge, even inside a container that
 * scrolls sideways (a table that has to be scrolled to be read does not fit either). */
const offPage = (page) => page.evaluate(() => {
  const W = document.documentElement.clientWidth;
  const out = [];
  for (const e of document.querySelectorAll('body *')) {
    const r = e.getBoundingClientRect();
    if (r.width === 0 || r.right <= W + 1) continue;
    // What a closed menu or a clipped label hides is not on the page.
    if (e.closest('details:not([open]) > :not(summary)') || getComputedStyle(e).visibility === 'hidden') continue;
    out.push(`${e.tagName.toLowerCase()}${e.dataset.testid ? '[' + e.dataset.testid + ']' : ''}${e.className && typeof e.className === 'string' ? '.' + e.className.split(' ').join('.') : ''} right=${Math.round(r.right)}`);
  }
  return { scroll: document.documentElement.scrollWidth, W, out: out.slice(0, 12) };
});

test('nothing runs off the page at 1280 px on the run, compare and sweep pages; names and statuses keep a tooltip; the image grid fills the width', { timeout: TEST_TIMEOUT }, async () => {
  const project = 'fit';
  const long = 'a-rather-long-run-name-that-says-everything-about-its-model-data-and-schedule-' + 'x'.repeat(40);
  const ids = [];
  for (let i = 0; i < 6; i++) {
    const id = (await call('POST', '/runs', { project, name: `${long}-${i}`, params: { lr: 0.001 * (i + 1), notes_param: 'y'.repeat(150 + i), layers: [1, 2, 3, i] }, tags: { owner: 'z'.repeat(60) } })).id;
    await call('POST', `/runs/${id}/metrics`, { points: [0, 1, 2].map((s) => ({ key: 'train/a_really_long_metric_name_for_a_layer_of_the_model/grad_norm', step: s, value: s + i })) });
    ids.push(id);
  }
  // A two-node job, preempted once: its attempts table and timeline.
  const job = 'fit-job-0001';
  const host = (n) => `ip-10-0-0-${n}.ec2.a-long-internal-domain-of-the-cloud-provider.internal`;
  const join = (rank, restart, started) => call('POST', '/runs', { project, id: job, name: long, resume: true, params: {}, process: {
    rank, local_rank: rank % 4, world_size: 8, node_rank: Math.floor(rank / 4), node_count: 2, host: host(Math.floor(rank / 4)),
    launcher: 'skypilot', job_id: 'sky-1', restart, zone: 'us-east-1a', region: 'us-east-1', cloud: 'aws', spot: true, started_ms: started,
    instance_type: 'p4d.24xlarge', ...(rank % 4 === 0 ? { node: { gpus: 4, usd_per_hour: 8.0, price_source: 'test' } } : {}),
  } });
  // Ninety seconds in all: ticks a quarter apart fall within one minute.
  for (let r = 0; r < 8; r++) await join(r, '0', Date.now() - 90e3);
  for (let r = 0; r < 8; r++) await call('POST', `/runs/${job}/finish`, { status: 'preempted', process: { rank: r } });
  for (let r = 0; r < 8; r++) await join(r, '1', Date.now() - 30e3);
  // Eight images at one step.
  for (let k = 0; k < 8; k++) {
    const bytes = png(64, 48, [30 * k, 100, 200 - 20 * k]);
    const sha = createHash('sha256').update(bytes).digest('hex');
    const r = await fetch(`${base}/api/v1/runs/${ids[0]}/media/blobs/${sha}`, { method: 'PUT', headers: { 'content-type': 'image/png' }, body: bytes });
    assert.ok(r.ok);
    await call('POST', `/runs/${ids[0]}/media`, { items: [{ key: 'samples', step: 0, index: k, kind: 'image', blob: sha, mime: 'image/png', width: 64, height: 48 }] });
  }
  const { sweep } = await makeSweep('fit-sweep', 'fit', 6);
  await withPage(async (page) => {
    const pages = [
      ['run', `#/run/${ids[0]}`, () => page.locator('[data-testid=media-image]').first().waitFor()],
      ['job', `#/run/${job}`, () => page.getByTestId('timeline-attempt').first().waitFor()],
      ['compare', `#/compare/${project}/${ids.join(',')}`, () => page.getByTestId('diff-table').waitFor()],
      ['sweep', `#/sweep/${sweep.id}`, () => page.getByTestId('importance-row').first().waitFor()],
    ];
    for (const [name, hash, ready] of pages) {
      await page.goto(`${base}/${hash}`);
      await ready();
      const got = await offPage(page);
      assert.deepEqual(got.out, [], `${name} page: nothing off the page`);
      assert.ok(got.scroll <= got.W, `${name} page: no sideways scrolling (${got.scroll} > ${got.W})`);
    }
    // The run page's image grid fills the width: more than two thumbnails a row.
    await page.goto(`${base}/#/run/${ids[0]}`);
    await page.locator('[data-testid=media-image]').nth(7).waitFor();
    const tops = await page.locator('[data-testid=media-image]').evaluateAll((is) => is.map((i) => Math.round(i.getBoundingClientRect().top)));
    assert.ok(tops.filter((t) => t === tops[0]).length >= 4, `at least 4 thumbnails in the first row: ${tops}`);
    // A cut name in the runs table keeps its whole text as a tooltip.
    await page.goto(`${base}/#/p/${project}`);
    await page.getByTestId('row-count').filter({ hasText: '7 runs' }).waitFor();
    assert.equal(await page.locator(`[data-testid=run-row][data-run-id="${ids[0]}"] .cell.pin[title]`).getAttribute('title'), `${long}-0`);
    assert.equal(await page.locator(`[data-testid=run-row][data-run-id="${ids[0]}"] .status`).getAttribute('title'), 'running');
    // The job's timeline labels each tick once.
    await page.goto(`${base}/#/run/${job}`);
    await page.getByTestId('timeline-attempt').first().waitFor();
    const labels = await page.locator('[data-testid=timeline-tick]').allInnerTexts();
    assert.ok(labels.length >= 2, `ticks: ${labels}`);
    assert.equal(new Set(labels).size, labels.length, `each tick labelled once: ${labels}`);
  }, 1280);
});

test('a chart is usable from the keyboard: Tab reaches it, the arrow keys move its cursor and tooltip, Escape leaves; Escape closes a panel menu', { timeout: TEST_TIMEOUT }, async () => {
  const ids = await makeRuns('keys', 2);
  await withPage(async (page) => {
    await page.goto(`${base}/#/compare/keys/${ids.join(',')}`);
    const chart = page.locator('[data-testid=chart-slot][data-chart-key=loss] [data-testid=chart]');
    await page.waitForFunction(() => document.querySelector('[data-testid=chart][data-key=loss]')?.dataset.seriesCount === '2');
    await chart.focus();
    await page.keyboard.press('Home');
    assert.equal(await chart.getAttribute('data-cursor-x'), '0');
    await page.keyboard.press('ArrowRight');
    await page.keyboard.press('ArrowRight');
    assert.equal(await chart.getAttribute('data-cursor-x'), '2');
    const tip = page.locator('[data-testid=chart-slot][data-chart-key=loss] [data-testid=chart-tooltip]');
    await tip.waitFor();
    assert.equal(await tip.getByTestId('tooltip-row').count(), 2, 'both runs at step 2');
    assert.match(await tip.innerText(), /step 2/);
    await page.keyboard.press('Escape');
    assert.equal(await tip.isVisible(), false);
    // A panel's menu closes on Escape.
    await page.getByTestId('arrange-panels').click();
    const menu = page.locator('[data-testid=ws-panel][data-key=loss] [data-testid=panel-menu]');
    await menu.locator(':scope > summary').click();
    assert.equal(await menu.evaluate((d) => d.open), true);
    await page.keyboard.press('Escape');
    assert.equal(await menu.evaluate((d) => d.open), false);
  });
});

test("the runs table asks only for its columns' values; showing another column reads it", { timeout: TEST_TIMEOUT }, async () => {
  const project = 'lean-table';
  for (let i = 0; i < 3; i++) {
    const id = (await call('POST', '/runs', { project, name: `r${i}`, params: { lr: 0.1 * (i + 1), seed: i } })).id;
    const points = [{ key: 'loss', step: 0, value: 1 + i }];
    for (let g = 0; g < 8; g++) points.push({ key: `sys/gpu.${g}.util`, step: 0, value: 50 }, { key: `sys/gpu.${g}.power_w`, step: 0, value: 300 });
    await call('POST', `/runs/${id}/metrics`, { points });
  }
  await withPage(async (page) => {
    const asked = [];
    page.on('request', (r) => { if (r.url().includes(`/projects/${project}/runs?`)) asked.push(new URL(r.url()).searchParams.get('columns')); });
    await page.goto(`${base}/#/p/${project}`);
    await page.getByTestId('row-count').filter({ hasText: '3 runs' }).waitFor();
    // A sort reloads the table, by then with the project's keys known.
    await page.locator('.thead .cell[data-column=name]').click();
    await page.locator('.thead .cell[data-column=name][aria-sort=ascending]').waitFor();
    const lean = asked[asked.length - 1];
    assert.ok(lean !== null, `a lean request: ${asked}`);
    const items = lean.split(',');
    assert.ok(items.includes('params.lr') && items.includes('metrics.loss') && items.includes('metrics.sys/gpu.0.util'), lean);
    assert.ok(!items.some((c) => c.includes('power_w')), `no hidden system series: ${lean}`);
    assert.equal(await page.locator('[data-testid=run-row] .cell').filter({ hasText: /^0\.3$/ }).count(), 1, "lr shown");
    // Showing a hidden column reads its values.
    const menu = page.getByTestId('columns-menu');
    await menu.locator(':scope > summary').click();
    await menu.getByTestId('column-search').fill('gpu.3.power');
    await menu.locator('input[data-column="metrics.sys/gpu.3.power_w"]').check();
    await page.locator('[data-testid=run-row] .cell').filter({ hasText: /^300$/ }).first().waitFor();
    assert.ok(asked[asked.length - 1].split(',').includes('metrics.sys/gpu.3.power_w'));
  });
});
