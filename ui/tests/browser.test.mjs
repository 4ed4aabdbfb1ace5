/* Browser tests of the trainlog UI: the real server binary on 127.0.0.1 with seeded data, driven
 * in headless Debian Chromium by playwright-core. Screenshots go to target/ui-screenshots/. */

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const binary = process.env.TRAINLOG_BIN || path.join(repo, 'target/release/trainlog');
const shots = path.join(repo, 'target/ui-screenshots');
const RUNS = 30;
const SPIKE_RUN = 7;
const SPIKE_STEP = 1234;
let server, base, browser, page;
const ids = [];

function startServer() {
  const data = mkdtempSync(path.join(tmpdir(), 'trainlog-ui-'));
  const proc = spawn(binary, ['server', '--host', '127.0.0.1', '--port', '0', '--data', data], { stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error('the server did not start')), 30000);
    proc.stdout.on('data', (chunk) => {
      out += chunk;
      const m = out.match(/listening on (http:\/\/127\.0\.0\.1:\d+)/);
      if (m) { clearTimeout(timer); resolve({ proc, url: m[1] }); }
    });
    proc.on('exit', (code) => reject(new Error(`the server exited with ${code}`)));
  });
}

async function post(p, body) {
  const r = await fetch(`${base}/api/v1${p}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  if (!r.ok) throw new Error(`${p}: ${r.status} ${await r.text()}`);
  return r.json();
}

/** The last loss of run i: a permutation of 0.10 … 0.39, so sorting is not creation order. */
const lastLoss = (i) => 0.1 + 0.01 * ((i * 7) % RUNS);

before(async () => {
  ({ proc: server, url: base } = await startServer());
  for (let i = 0; i < RUNS; i++) {
    const name = `run-${String(i).padStart(2, '0')}`;
    const run = await post('/runs', { project: 'demo', name, params: { lr: 0.001 * (i + 1), batch: 64 }, tags: { team: 'a' } });
    const points = [];
    for (let s = 0; s < 2000; s++) {
      let v = lastLoss(i) + 2 * Math.exp(-s / 300) * (1 - s / 2000);
      if (i === SPIKE_RUN && s === SPIKE_STEP) v = 50;
      points.push({ key: 'loss', step: s, value: s === 1999 ? lastLoss(i) : v });
    }
    await post(`/runs/${run.id}/metrics`, { points });
    await post(`/runs/${run.id}/finish`, { status: 'finished' });
    ids.push(run.id);
  }
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
  page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  mkdirSync(shots, { recursive: true });
});

after(async () => {
  await browser?.close();
  server?.kill('SIGTERM');
});

const firstRowText = () => page.locator('[data-testid=run-row]').first().innerText();

test('the runs table shows every run and sorts by a clicked metric', async () => {
  await page.goto(`${base}/#/p/demo`);
  await page.getByTestId('row-count').filter({ hasText: `${RUNS} runs` }).waitFor();
  assert.match(await firstRowText(), /run-29/, 'newest first by default');
  await page.locator('[title="metrics.loss (click to sort)"]').click();
  await page.waitForFunction(() => document.querySelector('[data-testid=run-row]')?.innerText.includes('run-00'));
  assert.match(await firstRowText(), /run-00/, 'lowest last loss first');
  await page.locator('[title^="metrics.loss"]').click();
  await page.waitForFunction(() => document.querySelector('[data-testid=run-row]')?.innerText.includes('run-17'));
  assert.match(await firstRowText(), /run-17/, 'highest last loss first');
  await page.screenshot({ path: path.join(shots, 'runs-table-sorted.png') });
});

test('a filter narrows the table and a bad filter is explained in place', async () => {
  await page.goto(`${base}/#/p/demo`);
  await page.getByTestId('row-count').filter({ hasText: `${RUNS} runs` }).waitFor();
  await page.getByTestId('filter-input').fill('metrics.loss < 0.15');
  await page.getByTestId('filter-input').press('Enter');
  await page.getByTestId('row-count').filter({ hasText: '5 runs' }).waitFor();
  assert.equal(await page.locator('[data-testid=run-row]').count(), 5);
  await page.getByTestId('filter-input').fill('metrics.loss <');
  await page.getByTestId('filter-input').press('Enter');
  const error = page.getByTestId('filter-error');
  await error.filter({ hasText: 'expected' }).waitFor();
  assert.match(await error.innerText(), /filter: at \d+: expected a value/);
  await page.screenshot({ path: path.join(shots, 'bad-filter.png') });
});

test('compare overlays runs, keeps a spike after zooming, and highlights differing params', async () => {
  const chosen = [ids[SPIKE_RUN], ids[3], ids[11]];
  await page.goto(`${base}/#/compare/demo/${chosen.join(',')}`);
  const chart = page.locator('[data-testid=chart][data-key=loss]');
  await page.waitForFunction(() => document.querySelector('[data-testid=chart][data-key=loss]')?.getAttribute('data-series-count') === '3');
  assert.ok(Number(await chart.getAttribute('data-y-max')) >= 50, 'the spike is drawn at full view');
  const box = await chart.boundingBox();
  const plotLeft = box.x + 58, plotWidth = box.width - 70;
  const xAt = (step) => plotLeft + (step / 1999) * plotWidth;
  await page.mouse.move(xAt(1100), box.y + box.height / 2);
  await page.mouse.down();
  await page.mouse.move(xAt(1400), box.y + box.height / 2, { steps: 5 });
  await page.mouse.up();
  await page.waitForFunction(() => document.querySelector('[data-testid=chart][data-key=loss]')?.getAttribute('data-range') !== 'all');
  const [lo, hi] = (await chart.getAttribute('data-range')).split('-').map(Number);
  assert.ok(lo > 1000 && lo < SPIKE_STEP && hi > SPIKE_STEP && hi < 1500, `zoomed to ${lo}-${hi}`);
  await page.waitForFunction(() => Number(document.querySelector('[data-testid=chart][data-key=loss]')?.getAttribute('data-y-max')) >= 50);
  assert.equal(await page.locator('[data-testid=diff-cell]').count(), 3, 'lr differs (3 cells); batch does not');
  await page.screenshot({ path: path.join(shots, 'compare-zoomed.png') });
});

test('an unknown run is reported in words', async () => {
  await page.goto(`${base}/#/run/no-such-run`);
  await page.getByText('not found').first().waitFor();
  await page.screenshot({ path: path.join(shots, 'unknown-run.png') });
});
