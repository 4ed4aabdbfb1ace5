/* Browser tests of the workspace: run colours, system charts by metric, the panels a person
 * arranges, the runs table's basics, axis numbers, sweeps and the pages' fit at 1280 px. The real
 * server binary on 127.0.0.1, headless Debian Chromium driven by playwright-core. */

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { chromium } from 'playwright-core';

import { startServer } from './server.mjs';
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
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
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
