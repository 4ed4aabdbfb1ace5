/* UI benchmark in headless Chromium against the real server: first paint of a 10,000-run table,
 * selecting all 10,000 and comparing them (as a group), drawing an overlay of 20 runs x 1,000,000
 * points (downsampled by the server), a zoom refetch, and the first screen of a comparison of
 * 300 keys (charts load as they near the viewport).
 * Prints medians; asserts nothing. Usage: node ui/tests/bench.mjs (needs .venv with trainlog);
 * TRAINLOG_BIN names another server binary. */

import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const data = mkdtempSync(path.join(tmpdir(), 'trainlog-uibench-'));
const binary = process.env.TRAINLOG_BIN || path.join(repo, 'target/release/trainlog');
const server = spawn(binary, ['server', '--port', '0', '--data', data], { stdio: ['ignore', 'pipe', 'ignore'] });
const base = await new Promise((resolve) => {
  let out = '';
  server.stdout.on('data', (c) => { out += c; const m = out.match(/listening on (http:\S+)/); if (m) resolve(m[1]); });
});
const t0 = Date.now();
const longIds = execFileSync(path.join(repo, '.venv/bin/python'), [path.join(repo, 'ui/tests/seed_bench.py'), base], { encoding: 'utf8', maxBuffer: 1 << 26 })
  .trim().split('\n').pop();
// Two runs of 300 keys (three sections of 100), 100 steps each.
const WIDE_KEYS = 300;
const wideKeys = Array.from({ length: WIDE_KEYS }, (_, i) => `${['attn', 'mlp', 'norm'][Math.floor(i / 100)]}/layer.${String(i % 100).padStart(2, '0')}`);
const wideIds = [];
for (let r = 0; r < 2; r++) {
  const call = async (p, body) => (await fetch(`${base}/api/v1${p}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })).json();
  const run = await call('/runs', { project: 'wide', name: `wide-${r}` });
  await call(`/runs/${run.id}/metrics`, { points: wideKeys.flatMap((key, k) => Array.from({ length: 100 }, (_, step) => ({ key, step, value: r + k / 1000 + Math.exp(-step / 30) }))) });
  await call(`/runs/${run.id}/finish`, { status: 'finished' });
  wideIds.push(run.id);
}
await fetch(`${base}/api/v1/admin/flush`, { method: 'POST', headers: { 'content-type': 'application/json' } });
console.log(`seeded 10,000 runs, 20 x 1,000,000 points and 2 runs x ${WIDE_KEYS} keys in ${((Date.now() - t0) / 1000).toFixed(0)} s`);

const browser = await chromium.launch({ executablePath: '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'] });
const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const reps = 5;

const table = [];
for (let i = 0; i < reps; i++) {
  await page.goto('about:blank');
  const start = Date.now();
  await page.goto(`${base}/#/p/many`);
  await page.getByTestId('row-count').filter({ hasText: '10000 runs' }).waitFor({ timeout: 60000 });
  await page.locator('[data-testid=run-row]').first().waitFor();
  table.push(Date.now() - start);
}

// Select every run of the 10,000 and compare them: drawn as one group, in a handful of requests.
const selectAll = [];
let requests = 0;
const failures = [];
page.on('request', () => { requests++; });
page.on('requestfailed', (r) => { failures.push(`failed ${r.url()} ${r.failure()?.errorText}`); });
page.on('response', (r) => { if (r.status() >= 400) failures.push(`${r.status()} ${r.url()}`); });
const requestsBefore = [];
for (let i = 0; i < reps; i++) {
  await page.goto('about:blank');
  await page.goto(`${base}/#/p/many`);
  await page.getByTestId('row-count').filter({ hasText: '10000 runs' }).waitFor({ timeout: 60000 });
  await page.locator('.thead .cell.sel input[type=checkbox]').check();
  requestsBefore.push(requests);
  const start = Date.now();
  await page.getByTestId('compare-button').click();
  await page.waitForFunction(() => document.querySelector('[data-testid=chart][data-key=val_loss]')?.getAttribute('data-series-count') === '1', null, { timeout: 120000 });
  selectAll.push(Date.now() - start);
  requestsBefore[i] = requests - requestsBefore[i];
}
await page.screenshot({ path: path.join(repo, 'target/ui-screenshots/bench-compare-10000.png') });

const overlay = [];
const zoom = [];
for (let i = 0; i < reps; i++) {
  await page.goto('about:blank');
  const start = Date.now();
  await page.goto(`${base}/#/compare/long/${longIds}`);
  await page.waitForFunction(() => document.querySelector('[data-testid=chart][data-key=loss]')?.getAttribute('data-series-count') === '20', null, { timeout: 60000 });
  overlay.push(Date.now() - start);
  const chart = page.locator('[data-testid=chart][data-key=loss]');
  await page.waitForFunction(() => document.querySelector('[data-testid=chart][data-key=loss]')?.getAttribute('data-plot'));
  const box = await chart.boundingBox();
  const [left, top, width, height] = (await chart.getAttribute('data-plot')).split(',').map(Number);
  const x = (f) => box.x + left + f * width;
  await page.mouse.move(x(0.7), box.y + top + height / 2);
  await page.mouse.down();
  await page.mouse.move(x(0.85), box.y + top + height / 2, { steps: 3 });
  const zs = Date.now();
  await page.mouse.up();
  await page.waitForFunction(() => document.querySelector('[data-testid=chart][data-key=loss]')?.getAttribute('data-range') !== 'all');
  zoom.push(Date.now() - zs);
}
await page.screenshot({ path: path.join(repo, 'target/ui-screenshots/bench-overlay-zoomed.png') });

// A comparison of 300 keys: navigation to every chart on the first screen drawn, and the
// metric requests made by then.
const wide = [];
const wideRequests = [];
let metricRequests = 0;
page.on('request', (r) => { if (new URL(r.url()).pathname.startsWith('/api/v1/metrics')) metricRequests++; });
for (let i = 0; i < reps; i++) {
  await page.goto('about:blank');
  metricRequests = 0;
  const start = Date.now();
  await page.goto(`${base}/#/compare/wide/${wideIds.join(',')}`);
  await page.waitForFunction((n) => {
    const charts = [...document.querySelectorAll('[data-testid=metric-charts] [data-testid=chart]')];
    const seen = charts.filter((c) => { const r = c.getBoundingClientRect(); return r.bottom > 0 && r.top < innerHeight; });
    return charts.length === n && seen.length > 0 && seen.every((c) => c.getAttribute('data-series-count') === '2' && c.querySelector('canvas'));
  }, WIDE_KEYS, { timeout: 60000 });
  wide.push(Date.now() - start);
  wideRequests.push(metricRequests);
  // The charts just below the first screen load too: let them finish before leaving the page.
  await page.waitForFunction(() => ![...document.querySelectorAll('.chart-msg')].some((m) => m.textContent === 'loading…'), null, { timeout: 60000 });
}
await browser.close();
server.kill('SIGTERM');
console.log('| figure | median of 5 | target |');
console.log('|---|---:|---|');
console.log(`| first paint of a 10,000-run table (navigation to rows shown) | ${median(table)} ms | <= 1000 ms |`);
console.log(`| overlay of 20 runs x 1,000,000 points drawn | ${median(overlay)} ms | <= 1000 ms |`);
console.log(`| zoom refetch (mouse up to redraw) | ${median(zoom)} ms | <= 200 ms |`);
console.log(`| select all 10,000 runs and compare (click to chart drawn) | ${median(selectAll)} ms | no failed request |`);
console.log(`| compare 2 runs x ${WIDE_KEYS} keys (navigation to the first screen of charts drawn) | ${median(wide)} ms | |`);
console.log(`requests per select-all comparison: ${requestsBefore.join(', ')}; failed requests or 4xx/5xx answers over the whole benchmark: ${failures.length}`);
for (const f of failures) console.log(`  ${f}`);
console.log(`metric requests by the first screen of the ${WIDE_KEYS}-key comparison: ${wideRequests.join(', ')}`);
console.log(`all: table ${table.join(', ')}; overlay ${overlay.join(', ')}; zoom ${zoom.join(', ')}; select-all compare ${selectAll.join(', ')}; ${WIDE_KEYS}-key compare ${wide.join(', ')}`);
