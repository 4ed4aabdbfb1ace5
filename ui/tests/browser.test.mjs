/* Browser tests of the trainlog UI: the real server binary on 127.0.0.1 with seeded data, driven
 * in headless Debian Chromium by playwright-core. Screenshots go to target/ui-screenshots/. */

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, mkdirSync, readFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';

import { binary, repo, startServer } from './server.mjs';
const shots = path.join(repo, 'target/ui-screenshots');
const RUNS = 30;
const SPIKE_RUN = 7;
const SPIKE_STEP = 1234;
let server, base, browser, page;
const ids = [];

async function post(p, body) {
  const r = await fetch(`${base}/api/v1${p}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  if (!r.ok) throw new Error(`${p}: ${r.status} ${await r.text()}`);
  return r.json();
}

/** The last loss of run i: a permutation of 0.10 … 0.39, so sorting is not creation order. */
const lastLoss = (i) => 0.1 + 0.01 * ((i * 7) % RUNS);

/** The loss of run i at step s; run SPIKE_RUN has a spike at SPIKE_STEP. */
const lossAt = (i, s) => {
  if (s === 1999) return lastLoss(i);
  if (i === SPIKE_RUN && s === SPIKE_STEP) return 50;
  return lastLoss(i) + 2 * Math.exp(-s / 300) * (1 - s / 2000);
};
/** Runs 0..SYS_RUNS-1 also record GPU metrics and cost: one sample every 10 s of their clock. */
const SYS_RUNS = 3;
const MS_PER_STEP = 1000;
const USD_PER_SAMPLE = 0.05;
const starts = [];

async function put(p, body) {
  const r = await fetch(`${base}/api/v1${p}`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: typeof body === 'string' ? body : JSON.stringify(body) });
  if (!r.ok) throw new Error(`${p}: ${r.status} ${await r.text()}`);
  return r.json();
}

before(async () => {
  ({ proc: server, url: base } = await startServer());
  for (let i = 0; i < RUNS; i++) {
    const name = `run-${String(i).padStart(2, '0')}`;
    const run = await post('/runs', { project: 'demo', name, params: { lr: 0.001 * (i + 1), batch: 64 }, tags: { team: i < 15 ? 'a' : 'b' } });
    const t0 = run.start_time;
    starts.push(t0);
    const points = [];
    for (let s = 0; s < 2000; s++) points.push({ key: 'loss', step: s, value: lossAt(i, s), timestamp: t0 + s * MS_PER_STEP });
    if (i < SYS_RUNS) {
      for (let k = 0; k <= 200; k++) {
        const timestamp = t0 + k * 10 * MS_PER_STEP;
        points.push({ key: 'sys/gpu.0.util', step: k, value: 50 + 10 * i + (k % 5), timestamp });
        points.push({ key: 'sys/gpu.0.mem_used_bytes', step: k, value: 1e9 * (4 + i), timestamp });
        points.push({ key: 'sys/gpu.0.power_w', step: k, value: 200 + 20 * i, timestamp });
        points.push({ key: 'cost/usd', step: k, value: k * USD_PER_SAMPLE * (i + 1), timestamp });
      }
      await put(`/runs/${run.id}/metadata/environment`, { os: 'Linux', python: i === 0 ? '3.11.9' : '3.12.4', gpu: 'H100' });
      await put(`/runs/${run.id}/metadata/code`, { commit: `abc${i}def`, branch: 'main', dirty: false });
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

/** The plot area of a chart on the page: {x, y, w, h} in CSS px. */
async function plotArea(chart) {
  await page.waitForFunction((c) => c.getAttribute('data-plot'), await chart.elementHandle());
  const box = await chart.boundingBox();
  const [l, t, w, h] = (await chart.getAttribute('data-plot')).split(',').map(Number);
  return { x: box.x + l, y: box.y + t, w, h };
}

/** A number as the UI's fmtNum writes it: 4 significant digits. */
const fmt4 = (v) => String(Number(v.toPrecision(4)));

const firstRowText = () => page.locator('[data-testid=run-row]').first().innerText();

test('the runs table shows every run and sorts by a clicked metric', async () => {
  await page.goto(`${base}/#/p/demo`);
  await page.getByTestId('row-count').filter({ hasText: `${RUNS} runs` }).waitFor();
  assert.match(await firstRowText(), /run-29/, 'newest first by default');
  await page.locator('[title="metrics.loss (click or Enter to sort)"]').click();
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

test('the runs table exports as CSV, keeps the name pinned, resizes and moves columns, and writes a param column alike', async () => {
  // Runs 0..11 (lr 0.001 … 0.012).
  try {
    await page.goto(`${base}/#/p/demo?filter=${encodeURIComponent('params.lr < 0.0125')}`);
    await page.getByTestId('row-count').filter({ hasText: '12 runs' }).waitFor();
    await page.waitForFunction(() => document.querySelectorAll('[data-testid=run-row]').length === 12);
    const headerIds = () => page.locator('.thead .cell[data-column]').evaluateAll((cs) => cs.map((c) => c.dataset.column));
    const shownNames = () => page.locator('[data-testid=run-row]').evaluateAll((rs) => rs
      .sort((a, b) => parseFloat(a.style.top) - parseFloat(b.style.top)).map((r) => r.querySelector('.cell.pin a').textContent));

    // (a) CSV: a header of the columns shown, and one line per row shown, in order.
    const [dl] = await Promise.all([page.waitForEvent('download'), page.locator('.toolbar [data-testid=export-csv]').click()]);
    assert.equal(dl.suggestedFilename(), 'demo-runs.csv');
    const rows = parseCsv(readFileSync(await dl.path(), 'utf8'));
    const cols = await headerIds();
    assert.deepEqual(rows[0].slice(0, 3), ['id', 'name', 'status']);
    assert.equal(rows[0].length, cols.length + 1, 'the id and one column per column shown');
    assert.ok(rows[0].includes('params.lr') && rows[0].includes('metrics.loss'), rows[0].join(','));
    const names = await shownNames();
    assert.equal(names.length, 12);
    assert.equal(rows.length - 1, names.length, 'one line per row shown');
    assert.deepEqual(rows.slice(1).map((r) => r[1]), names, 'the names shown, in order');
    const lrAt = rows[0].indexOf('params.lr');
    for (const r of rows.slice(1)) assert.equal(Number(r[lrAt]), 0.001 * (Number(r[1].slice(4)) + 1), `${r[1]}'s lr at full precision`);

    // (e) A numeric param column writes every value alike: here with the 3 decimals 0.012 needs,
    // so run-09's 0.01 is 0.010.
    const lrIdx = (await page.locator('.thead > .cell').evaluateAll((cs) => cs.map((c) => c.dataset.column || ''))).indexOf('params.lr');
    const lrCells = await page.locator('[data-testid=run-row]').evaluateAll((rs, i) => rs.map((r) => [r.querySelector('.cell.pin a').textContent, r.children[i].textContent]), lrIdx);
    assert.equal(lrCells.length, 12);
    for (const [name, text] of lrCells) {
      assert.match(text, /^0\.\d{3}$/, `${name}: ${text}`);
      assert.equal(Number(text), Number((0.001 * (Number(name.slice(4)) + 1)).toFixed(3)), `${name}: ${text}`);
    }
    assert.equal(Object.fromEntries(lrCells)['run-09'], '0.010');

    // (d) Dragging a header onto another moves the column there.
    const status = page.locator('.thead .cell[data-column=status]');
    const before = await headerIds();
    assert.ok(before.indexOf('params.lr') > before.indexOf('status'));
    await page.locator('.thead .cell[data-column="params.lr"]').dragTo(status);
    await page.waitForFunction(() => {
      const ids = [...document.querySelectorAll('.thead .cell[data-column]')].map((c) => c.dataset.column);
      return ids.indexOf('params.lr') < ids.indexOf('status');
    });
    const after = await headerIds();
    assert.deepEqual(after.slice(0, 2), ['name', 'params.lr'], after.join(','));
    assert.deepEqual([...after].sort(), [...before].sort(), 'the same columns');

    // (c) Dragging a column's edge resizes it.
    const w0 = (await status.boundingBox()).width;
    const grip = await status.getByTestId('col-resize').boundingBox();
    await page.mouse.move(grip.x + grip.width / 2, grip.y + grip.height / 2);
    await page.mouse.down();
    await page.mouse.move(grip.x + grip.width / 2 + 150, grip.y + grip.height / 2, { steps: 5 });
    await page.mouse.up();
    const w1 = (await status.boundingBox()).width;
    assert.ok(Math.abs(w1 - (w0 + 150)) <= 2, `status is ${w1} px wide, was ${w0}`);
    const rowStatus = await page.locator('[data-testid=run-row]').first().evaluate((r, i) => r.children[i].getBoundingClientRect().width, (await headerIds()).indexOf('status') + 1);
    assert.ok(Math.abs(rowStatus - w1) <= 2, 'the rows follow the header');

    // (b) Scrolling right, in a window narrower than the table, leaves the name column where it was.
    await page.setViewportSize({ width: 900, height: 900 });
    const table = page.getByTestId('runs-table');
    assert.ok(await table.evaluate((t) => t.scrollWidth > t.clientWidth + 300), 'the table is wider than its box');
    const firstRow = page.locator('[data-testid=run-row]').first();
    const nameX0 = (await firstRow.locator('.cell.pin a').boundingBox()).x;
    const statusX0 = (await firstRow.locator('.cell').nth(after.indexOf('status') + 1).boundingBox()).x;
    await table.evaluate((t) => { t.scrollLeft = 300; });
    await page.waitForFunction(() => document.querySelector('[data-testid=runs-table]').scrollLeft === 300);
    // The scroll re-renders the rows on the next animation frame: measure after it.
    await page.evaluate(() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done))));
    const nameBox = await firstRow.locator('.cell.pin a').boundingBox();
    assert.ok(Math.abs(nameBox.x - nameX0) < 1, `the name stays at ${nameX0}, is at ${nameBox.x}`);
    const statusX1 = (await firstRow.locator('.cell').nth(after.indexOf('status') + 1).boundingBox()).x;
    assert.ok(Math.abs(statusX0 - 300 - statusX1) < 1, `the other columns scroll: ${statusX0} → ${statusX1}`);
    const hit = await page.evaluate(([x, y]) => document.elementFromPoint(x, y)?.closest('.cell')?.classList.contains('pin'), [nameBox.x + 2, nameBox.y + nameBox.height / 2]);
    assert.ok(hit, 'the name is on top of the scrolled cells');
    await page.screenshot({ path: path.join(shots, 'runs-table-scrolled.png') });
  } finally {
    await page.evaluate(() => localStorage.removeItem('trainlog.columns.demo'));
    await page.setViewportSize({ width: 1400, height: 900 });
    await page.goto(`${base}/#/p/demo?filter=`);
  }
});

test('compare overlays runs, keeps a spike after zooming, and highlights differing params', async () => {
  const chosen = [ids[SPIKE_RUN], ids[3], ids[11]];
  await page.goto(`${base}/#/compare/demo/${chosen.join(',')}`);
  const chart = page.locator('[data-testid=chart][data-key=loss]');
  await page.waitForFunction(() => document.querySelector('[data-testid=chart][data-key=loss]')?.getAttribute('data-series-count') === '3');
  assert.ok(Number(await chart.getAttribute('data-y-max')) >= 50, 'the spike is drawn at full view');
  const plot = await plotArea(chart);
  const xAt = (step) => plot.x + (step / 1999) * plot.w;
  // The loss chart's reads of its series, from here on.
  const lossReads = [];
  const onRequest = (r) => {
    const u = new URL(r.url());
    if (u.pathname === '/api/v1/metrics' && u.searchParams.get('key') === 'loss') lossReads.push(u.searchParams);
  };
  page.on('request', onRequest);
  await page.mouse.move(xAt(1100), plot.y + plot.h / 2);
  await page.mouse.down();
  await page.mouse.move(xAt(1400), plot.y + plot.h / 2 + 3, { steps: 5 });
  await page.mouse.up();
  await page.waitForFunction(() => document.querySelector('[data-testid=chart][data-key=loss]')?.getAttribute('data-range') !== 'all');
  const [lo, hi] = (await chart.getAttribute('data-range')).split('-').map(Number);
  assert.ok(lo > 1000 && lo < SPIKE_STEP && hi > SPIKE_STEP && hi < 1500, `zoomed to ${lo}-${hi}`);
  await page.waitForFunction(() => Number(document.querySelector('[data-testid=chart][data-key=loss]')?.getAttribute('data-y-max')) >= 50);
  page.off('request', onRequest);
  // The zoom read the zoomed steps anew, and the chart now holds only those, in finer buckets.
  assert.equal(lossReads.length, 1, 'one new read of the loss series');
  assert.deepEqual([lossReads[0].get('step_min'), lossReads[0].get('step_max')], [String(lo), String(hi)]);
  assert.deepEqual(new Set(lossReads[0].get('runs').split(',')), new Set(chosen));
  const slot = page.locator('[data-testid=chart-slot][data-chart-key=loss]');
  await slot.getByTestId('chart-export').locator('summary').click();
  const [dl] = await Promise.all([page.waitForEvent('download'), slot.getByTestId('export-csv').click()]);
  const buckets = parseCsv(readFileSync(await dl.path(), 'utf8')).slice(1);
  assert.equal(new Set(buckets.map((r) => r[0])).size, 3, 'every run');
  assert.ok(buckets.every((r) => Number(r[2]) >= lo && Number(r[3]) <= hi), `every bucket within steps ${lo}-${hi}`);
  assert.equal(Math.min(...buckets.map((r) => Number(r[2]))), lo);
  assert.equal(Math.max(...buckets.map((r) => Number(r[3]))), hi);
  assert.equal(buckets.reduce((n, r) => n + Number(r[9]), 0), 3 * (hi - lo + 1), 'every point of the zoomed steps, none besides');
  await page.keyboard.press('Escape');
  assert.equal(await page.locator('[data-testid=diff-cell]').count(), 3, 'lr differs (3 cells); batch does not');
  await page.screenshot({ path: path.join(shots, 'compare-zoomed.png') });
});

test('a tooltip lists every run at the cursor, highest first, and the crosshair is shared', async () => {
  await page.goto(`${base}/#/compare/demo/${ids.join(',')}`);
  const chart = page.locator('[data-testid=chart][data-key=loss]');
  await page.waitForFunction((n) => document.querySelector('[data-testid=chart][data-key=loss]')?.getAttribute('data-series-count') === String(n), RUNS);
  const plot = await plotArea(chart);
  await page.mouse.move(plot.x + plot.w / 2, plot.y + plot.h / 2);
  await page.mouse.move(plot.x + plot.w / 2 + 2, plot.y + plot.h / 2);
  const rows = page.locator('[data-testid=chart-tooltip]:not(.hidden) [data-testid=tooltip-row]');
  await rows.first().waitFor();
  const step = Number((await page.locator('[data-testid=chart-tooltip] .tip-head').innerText()).match(/step (\d+)/)[1]);
  assert.ok(step > 800 && step < 1200, `the cursor is near step 1000, the tooltip says ${step}`);
  const shown = await rows.evaluateAll((rs) => rs.map((r) => [r.dataset.runId, Number(r.querySelector('.tip-value').firstChild.textContent)]));
  assert.equal(shown.length, RUNS, 'one row per run');
  assert.deepEqual(new Set(shown.map(([id]) => id)), new Set(ids));
  for (const [id, v] of shown) {
    const want = lossAt(ids.indexOf(id), step);
    assert.ok(Math.abs(v - want) <= 1e-3 * Math.abs(want), `${id} at step ${step}: ${v} vs ${want}`);
  }
  assert.ok(shown.every(([, v], i) => i === 0 || v <= shown[i - 1][1]), 'highest first');
  await page.screenshot({ path: path.join(shots, 'compare-tooltip.png') });

  // The system charts of one page share their crosshair.
  await page.goto(`${base}/#/compare/demo/${ids.slice(0, SYS_RUNS).join(',')}`);
  // The system section is collapsed; its charts load once it is open and they near the viewport.
  await page.getByTestId('system-section').locator('summary').click();
  await page.getByTestId('system-charts').scrollIntoViewIfNeeded();
  await page.waitForFunction(() => [...document.querySelectorAll('[data-testid=system-charts] [data-testid=chart]')].every((c) => c.getAttribute('data-series-count') === '3' && c.getAttribute('data-plot')));
  const [util, mem] = [page.locator('[data-testid=chart][data-key="sys/gpu.util"]'), page.locator('[data-testid=chart][data-key="sys/gpu.mem_used_bytes"]')];
  await util.scrollIntoViewIfNeeded();
  const a = await plotArea(util), b = await plotArea(mem);
  for (const f of [0.3, 0.7]) {
    await page.mouse.move(a.x + f * a.w, a.y + a.h / 2);
    await page.waitForFunction((want) => {
      const c = document.querySelector('[data-testid=chart][data-key="sys/gpu.mem_used_bytes"] .u-cursor-x');
      const m = c && !c.classList.contains('u-off') && /translateX\(([-\d.]+)px\)|translate\(([-\d.]+)px/.exec(c.style.transform);
      return m && Math.abs(Number(m[1] ?? m[2]) - want) < 4;
    }, f * b.w, { timeout: 5000 });
  }

  // One crosshair for the whole page: hovering a metric chart (by step) moves the system charts'
  // (by relative time) to the same moment. Here a step is logged every second of a run's clock.
  const loss = page.locator('[data-testid=chart][data-key=loss]');
  await loss.scrollIntoViewIfNeeded();
  await page.waitForFunction(() => document.querySelector('[data-testid=chart][data-key=loss]')?.getAttribute('data-series-count') === '3');
  const l = await plotArea(loss);
  const sysX = (key) => page.evaluate((k) => {
    const c = document.querySelector(`[data-testid=chart][data-key="${k}"] .u-cursor-x`);
    const m = c && !c.classList.contains('u-off') && /translateX\(([-\d.]+)px\)|translate\(([-\d.]+)px/.exec(c.style.transform);
    return m ? Number(m[1] ?? m[2]) : null;
  }, key);
  await page.mouse.move(l.x + 5, l.y + 5);
  await page.mouse.move(l.x - 20, l.y - 20);
  await page.waitForFunction(() => document.querySelector('[data-testid=chart][data-key="sys/gpu.util"] .u-cursor-x')?.classList.contains('u-off'), null, { timeout: 5000 });
  for (const f of [0.25, 0.6]) {
    await page.mouse.move(l.x + f * l.w, l.y + l.h / 2);
    const step = f * 1999;
    await page.waitForFunction(([want, tol]) => {
      const c = document.querySelector('[data-testid=chart][data-key="sys/gpu.util"] .u-cursor-x');
      const m = c && !c.classList.contains('u-off') && /translateX\(([-\d.]+)px\)|translate\(([-\d.]+)px/.exec(c.style.transform);
      return m && Math.abs(Number(m[1] ?? m[2]) - want) < tol;
    }, [(step / 2000) * a.w, 0.02 * a.w], { timeout: 5000 });
    const [x1, x2] = [await sysX('sys/gpu.util'), await sysX('sys/gpu.mem_used_bytes')];
    assert.ok(x1 !== null && x2 !== null && Math.abs(x1 / a.w - x2 / b.w) < 0.02, `both system charts follow the metric chart: ${x1}, ${x2}`);
  }
});

test('a run has the same colour in the table and in every comparison', async () => {
  const colorOf = (id) => page.locator(`[data-testid=legend-item][data-run-id="${id}"] .swatch`).evaluate((s) => getComputedStyle(s).backgroundColor);
  await page.goto(`${base}/#/compare/demo/${[ids[0], ids[1], ids[2]].join(',')}`);
  const first = await colorOf(ids[2]);
  await page.goto(`${base}/#/compare/demo/${[ids[2], ids[5]].join(',')}`);
  assert.equal(await colorOf(ids[2]), first, 'first in one comparison, third in the other');
  await page.goto(`${base}/#/p/demo?filter=`);
  await page.getByTestId('row-count').filter({ hasText: `${RUNS} runs` }).waitFor();
  const inTable = await page.locator('[data-testid=run-row]').filter({ hasText: 'run-02' }).locator('[data-testid=run-color]')
    .evaluate((s) => getComputedStyle(s).backgroundColor);
  assert.equal(inTable, first);
});

test('a diverging run leaves the others readable, and the legend hides a run', async () => {
  // Five runs that converge and one that diverges to 1e8, then NaN and Infinity.
  const dids = [];
  for (let i = 0; i < 6; i++) {
    const run = await post('/runs', { project: 'diverge', name: i === 5 ? 'diverged' : `ok-${i}` });
    const points = [];
    for (let s = 0; s < 500; s++) {
      let v = 0.2 + 0.05 * i + 1.5 * Math.exp(-s / 80);
      if (i === 5 && s > 250) v = s < 495 ? Math.exp((s - 250) / 13) : (s % 2 ? 'NaN' : 'Infinity');
      points.push({ key: 'loss', step: s, value: v });
    }
    await post(`/runs/${run.id}/metrics`, { points });
    await post(`/runs/${run.id}/finish`, { status: 'finished' });
    dids.push(run.id);
  }
  await page.goto(`${base}/#/compare/diverge/${dids.join(',')}`);
  const chart = page.locator('[data-testid=chart][data-key=loss]');
  await page.waitForFunction(() => document.querySelector('[data-testid=chart][data-key=loss]')?.getAttribute('data-series-count') === '6');
  /** How many pixels of the plot's height the converging runs span (they range over 0.2 … 1.9). */
  const span = async () => {
    const [lo, hi] = (await chart.getAttribute('data-y-range')).split(',').map(Number);
    assert.ok(Number.isFinite(lo) && Number.isFinite(hi), `a finite y range: ${lo}, ${hi}`);
    const { h } = await plotArea(chart);
    return ((Math.min(1.9, hi) - Math.max(0.2, lo)) / (hi - lo)) * h;
  };
  const flat = await span();
  assert.ok(flat < 2, `without help the diverging run flattens the others to ${flat.toFixed(2)} px`);
  await page.getByTestId('robust').first().check();
  await page.waitForFunction(() => Number(document.querySelector('[data-testid=chart][data-key=loss]')?.getAttribute('data-y-range').split(',')[1]) < 100);
  const readable = await span();
  const { h } = await plotArea(chart);
  assert.ok(readable > 0.5 * h, `ignoring outliers, the others span ${readable.toFixed(0)} of ${h} px`);
  await page.screenshot({ path: path.join(shots, 'compare-robust.png') });
  await page.getByTestId('robust').first().uncheck();
  // Hiding the diverged run from the legend rescales to the others; showing it again brings it back.
  await page.locator(`[data-testid=legend-item][data-run-id="${dids[5]}"]`).click();
  await page.waitForFunction(() => Number(document.querySelector('[data-testid=chart][data-key=loss]')?.getAttribute('data-y-range').split(',')[1]) < 2);
  assert.ok(await span() > 0.8 * h);
  await page.locator(`[data-testid=legend-item][data-run-id="${dids[5]}"]`).click();
  await page.waitForFunction(() => Number(document.querySelector('[data-testid=chart][data-key=loss]')?.getAttribute('data-y-range').split(',')[1]) > 1e7);
});

test('a vertical drag zooms the values, a double-click resets', async () => {
  await page.goto(`${base}/#/compare/demo/${[ids[0], ids[1]].join(',')}`);
  const chart = page.locator('[data-testid=chart][data-key=loss]');
  await page.waitForFunction(() => document.querySelector('[data-testid=chart][data-key=loss]')?.getAttribute('data-series-count') === '2');
  const plot = await plotArea(chart);
  const before = await chart.getAttribute('data-y-range');
  await page.mouse.move(plot.x + plot.w / 2, plot.y + plot.h * 0.6);
  await page.mouse.down();
  await page.mouse.move(plot.x + plot.w / 2 + 2, plot.y + plot.h * 0.95, { steps: 5 });
  await page.mouse.up();
  await page.waitForFunction((b) => document.querySelector('[data-testid=chart][data-key=loss]')?.getAttribute('data-y-range') !== b, before);
  const [lo, hi] = (await chart.getAttribute('data-y-range')).split(',').map(Number);
  const [lo0, hi0] = before.split(',').map(Number);
  assert.ok(lo >= lo0 - 1e-9 && hi < lo0 + 0.5 * (hi0 - lo0), `zoomed to ${lo}–${hi} from ${lo0}–${hi0}`);
  assert.equal(await chart.getAttribute('data-range'), 'all', 'the steps are not zoomed');
  await page.mouse.dblclick(plot.x + plot.w / 2, plot.y + plot.h / 2);
  await page.waitForFunction((b) => document.querySelector('[data-testid=chart][data-key=loss]')?.getAttribute('data-y-range') === b, before);
});

/** The rows of CSV text (quoted fields understood), without the line ending of the last. */
function parseCsv(text) {
  const rows = [];
  let row = [], field = '', quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') { field += '"'; i++; } else if (c === '"') quoted = false; else field += c;
    } else if (c === '"') quoted = true;
    else if (c === ',') { row.push(field); field = ''; }
    else if (c === '\n' || c === '\r') {
      if (c === '\r' && text[i + 1] === '\n') i++;
      row.push(field); rows.push(row); row = []; field = '';
    } else field += c;
  }
  if (field || row.length) { row.push(field); rows.push(row); }
  return rows;
}

test('a metric chart downloads as CSV of its buckets, PNG as drawn and SVG with a line per run', async () => {
  const chosen = [ids[0], ids[4], ids[9]];
  await page.goto(`${base}/#/compare/demo/${chosen.join(',')}`);
  const slot = page.locator('[data-testid=metric-charts] [data-testid=chart-slot]').first();
  const chart = slot.getByTestId('chart');
  await page.waitForFunction((c) => c.getAttribute('data-series-count') === '3' && c.getAttribute('data-plot'), await chart.elementHandle());
  assert.equal(await slot.getAttribute('data-loaded'), '1');
  assert.ok(await slot.getByTestId('chart-export').isVisible(), 'a loaded chart offers its downloads');
  const key = await slot.getAttribute('data-chart-key');
  const base_ = key.replace(/\//g, '_');
  const download = async (what) => {
    await slot.getByTestId('chart-export').locator('summary').click();
    const [dl] = await Promise.all([page.waitForEvent('download'), slot.getByTestId(`export-${what}`).click()]);
    return { name: dl.suggestedFilename(), bytes: readFileSync(await dl.path()) };
  };

  // CSV: one row per run and bucket the chart reports.
  const csv = await download('csv');
  assert.equal(csv.name, `${base_}.csv`);
  const rows = parseCsv(csv.bytes.toString('utf8'));
  assert.deepEqual(rows[0], ['run_id', 'run_name', 'step_min', 'step_max', 'time_first', 'time_last', 'min', 'max', 'last', 'count']);
  const body = rows.slice(1);
  assert.equal(body.length, Number(await chart.getAttribute('data-buckets')), 'one row per (run, bucket)');
  assert.ok(body.every((r) => r.length === 10), 'ten fields in every row');
  assert.deepEqual(new Set(body.map((r) => r[0])), new Set(chosen));
  assert.deepEqual(new Set(body.map((r) => r[1])), new Set(['run-00', 'run-04', 'run-09']));
  assert.equal(body.reduce((n, r) => n + Number(r[9]), 0), 3 * 2000, 'the buckets hold every point of the three runs');
  assert.ok(body.every((r) => Number(r[2]) <= Number(r[3]) && Number(r[6]) <= Number(r[8]) && Number(r[8]) <= Number(r[7])), 'min ≤ last ≤ max');

  // PNG: the chart's canvas framed by a title and legend, at the device pixel ratio.
  const png = await download('png');
  assert.equal(png.name, `${base_}.png`);
  assert.deepEqual([...png.bytes.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], 'PNG magic bytes');
  const { w } = await plotArea(chart);
  assert.ok(png.bytes.readUInt32BE(16) > w, `the PNG is ${png.bytes.readUInt32BE(16)} px wide, the plot area ${w} px`);

  // SVG: it parses and renders, with one stroked line per run in the run's colour.
  const svgFile = await download('svg');
  assert.equal(svgFile.name, `${base_}.svg`);
  const legend = Object.fromEntries(await page.locator('[data-testid=legend-item]').evaluateAll((items) => items.map((i) => [i.dataset.runId, getComputedStyle(i.querySelector('.swatch')).backgroundColor])));
  const parsed = await page.evaluate(async (text) => {
    const doc = new DOMParser().parseFromString(text, 'image/svg+xml');
    if (doc.querySelector('parsererror')) return { error: doc.querySelector('parsererror').textContent };
    const probe = document.createElement('span');
    document.body.append(probe);
    const rgb = (c) => { probe.style.color = ''; probe.style.color = c; return getComputedStyle(probe).color; };
    const lines = [...doc.querySelectorAll('path, polyline')].filter((p) => (p.getAttribute('stroke') || 'none') !== 'none')
      .map((p) => ({ run: p.getAttribute('data-run-id'), color: rgb(p.getAttribute('stroke')), points: (p.getAttribute('d') || p.getAttribute('points') || '').split(/[ML ,]/).filter(Boolean).length }));
    probe.remove();
    const img = new Image();
    img.src = URL.createObjectURL(new Blob([text], { type: 'image/svg+xml' }));
    await img.decode();
    return { root: doc.documentElement.localName, ns: doc.documentElement.namespaceURI, lines, width: img.naturalWidth, text: doc.documentElement.textContent };
  }, svgFile.bytes.toString('utf8'));
  assert.equal(parsed.error, undefined);
  assert.equal(parsed.root, 'svg');
  assert.equal(parsed.ns, 'http://www.w3.org/2000/svg');
  assert.ok(parsed.width > w, 'the browser renders it as an image');
  assert.equal(parsed.lines.length, chosen.length, 'one line per run');
  assert.deepEqual(parsed.lines.map((l) => l.color).sort(), chosen.map((id) => legend[id]).sort(), 'stroked in the runs\' colours');
  for (const l of parsed.lines) assert.equal(l.color, legend[l.run], `${l.run}'s line in its colour`);
  assert.ok(parsed.lines.every((l) => l.points > 100), 'each line goes through the buckets');
  assert.ok(parsed.text.includes(key) && parsed.text.includes('run-04'), 'a title and a legend');
  await slot.getByTestId('chart-export').locator('summary').click();
  await page.screenshot({ path: path.join(shots, 'chart-export-menu.png') });
  await page.keyboard.press('Escape');

  // Names are quoted, and values that are not finite are spelled out.
  const odd = await post('/runs', { project: 'exports', name: 'comma, "quoted"' });
  await post(`/runs/${odd.id}/metrics`, { points: [1, 'NaN', 'Infinity', '-Infinity', 2].map((value, step) => ({ key: 'loss', step, value })) });
  await post(`/runs/${odd.id}/finish`, { status: 'finished' });
  await page.goto(`${base}/#/compare/exports/${odd.id}`);
  const oddSlot = page.locator('[data-testid=chart-slot][data-chart-key=loss]');
  await oddSlot.locator('[data-testid=chart][data-series-count="1"]').waitFor();
  await oddSlot.getByTestId('chart-export').locator('summary').click();
  const [dl] = await Promise.all([page.waitForEvent('download'), oddSlot.getByTestId('export-csv').click()]);
  const text = readFileSync(await dl.path(), 'utf8');
  assert.ok(text.includes(`${odd.id},"comma, ""quoted"""`), text);
  assert.deepEqual(parseCsv(text).slice(1).map((r) => [r[1], r[8]]), [['comma, "quoted"', '1'], ['comma, "quoted"', 'NaN'], ['comma, "quoted"', 'Infinity'], ['comma, "quoted"', '-Infinity'], ['comma, "quoted"', '2']]);
});

test('an SVG export on wall time over several days dates its ticks, as the axis on screen does', async () => {
  // 300 points over three days, from a fixed local noon.
  const run = await post('/runs', { project: 'walltime', name: 'three-days' });
  const t0 = new Date(2024, 5, 10, 12).getTime(), span = 3 * 86400e3;
  const points = [];
  for (let s = 0; s < 300; s++) points.push({ key: 'loss', step: s, value: Math.sin(s / 10), timestamp: Math.round(t0 + (s * span) / 299) });
  await post(`/runs/${run.id}/metrics`, { points });
  await page.goto(`${base}/#/compare/walltime/${run.id}?x=wall`);
  const slot = page.locator('[data-testid=chart-slot][data-chart-key=loss]');
  await page.waitForFunction(() => document.querySelector('[data-testid=chart][data-key=loss]')?.getAttribute('data-series-count') === '1');
  await plotArea(slot.getByTestId('chart'));
  await slot.getByTestId('chart-export').locator('summary').click();
  const [dl] = await Promise.all([page.waitForEvent('download'), slot.getByTestId('export-svg').click()]);
  await page.keyboard.press('Escape');
  // Each x label: its lines (one, or a time over a date), in page order.
  const labels = await page.evaluate((text) => {
    const doc = new DOMParser().parseFromString(text, 'image/svg+xml');
    return [...doc.querySelectorAll('text[text-anchor=middle]')]
      .map((t) => (t.querySelector('tspan') ? [...t.querySelectorAll('tspan')].map((s) => s.textContent) : [t.textContent]));
  }, readFileSync(await dl.path(), 'utf8'));
  assert.ok(labels.length >= 4, JSON.stringify(labels));
  // The steps are under a day: each tick gives its time, and the first tick and every tick on a new
  // day also the date, as uPlot writes them (M/D, with the year on the first).
  assert.ok(labels.every((l) => /^\d{1,2}(:\d\d)?(am|pm)$/.test(l[0])), JSON.stringify(labels));
  assert.deepEqual(labels[0].slice(1), ['6/10/24'], JSON.stringify(labels));
  const dated = labels.filter((l) => l.length > 1).map((l) => l[1]);
  assert.deepEqual(dated, ['6/10/24', '6/11', '6/12', '6/13'], JSON.stringify(labels));
});

test('a reload keeps the table\'s filter, sort, group and selection, and the comparison\'s chart settings', async () => {
  const below = Array.from({ length: RUNS }, (_, i) => i).filter((i) => lastLoss(i) < 0.3);
  await page.goto(`${base}/#/p/demo`);
  await page.getByTestId('row-count').filter({ hasText: `${RUNS} runs` }).waitFor();
  await page.getByTestId('filter-input').fill('metrics.loss < 0.3');
  await page.getByTestId('filter-input').press('Enter');
  await page.getByTestId('row-count').filter({ hasText: `${below.length} runs` }).waitFor();
  await page.locator('[title="metrics.loss (click or Enter to sort)"]').click();
  await page.locator('[title^="metrics.loss"]').filter({ hasText: '▲' }).waitFor();
  await page.getByTestId('group-by').selectOption('tags.team');
  await page.locator('[data-testid=group-row]').first().waitFor();
  const picked = await page.locator('[data-testid=run-row]').evaluateAll((rows) => rows.slice(0, 2).map((r) => r.dataset.runId));
  for (const id of picked) await page.locator(`[data-testid=run-row][data-run-id="${id}"] input[type=checkbox]`).check();
  await page.getByTestId('compare-button').filter({ hasText: 'Compare (2)' }).waitFor();
  const address = page.url();
  await page.reload();
  await page.getByTestId('row-count').filter({ hasText: `${below.length} runs` }).waitFor();
  assert.equal(await page.getByTestId('filter-input').inputValue(), 'metrics.loss < 0.3');
  assert.equal(await page.getByTestId('group-by').inputValue(), 'tags.team');
  await page.locator('[title^="metrics.loss"]').filter({ hasText: '▲' }).waitFor();
  assert.deepEqual(await page.locator('[data-testid=run-row].selected').evaluateAll((rows) => rows.map((r) => r.dataset.runId).sort()), [...picked].sort());
  assert.equal(await page.getByTestId('compare-button').innerText(), 'Compare (2)');
  assert.equal(page.url(), address, 'the address after a reload is the one before');
  // Within a group, the runs are sorted by loss, lowest first.
  const groupB = await page.locator('[data-testid=run-row]').evaluateAll((rows) => rows.map((r) => r.innerText.match(/run-(\d+)/)[1]).map(Number));
  const lossOrder = groupB.filter((i) => i >= 15).map(lastLoss);
  assert.deepEqual(lossOrder, [...lossOrder].sort((x, y) => x - y));
  // The bare address is a fresh table: no filter lingers from before.
  await page.goto(`${base}/#/p/demo`);
  await page.getByTestId('row-count').filter({ hasText: `${RUNS} runs` }).waitFor();
  assert.equal(await page.getByTestId('filter-input').inputValue(), '');

  // Chart settings and hidden runs of a comparison survive a reload too.
  await page.goto(`${base}/#/compare/demo/${[ids[0], ids[1], ids[2]].join(',')}`);
  await page.waitForFunction(() => document.querySelector('[data-testid=chart][data-key=loss]')?.getAttribute('data-series-count') === '3');
  await page.getByTestId('x-axis').first().selectOption('wall');
  await page.getByTestId('smoothing').first().fill('0.5');
  await page.getByTestId('robust').first().check();
  await page.locator(`[data-testid=legend-item][data-run-id="${ids[1]}"]`).click();
  await page.waitForFunction(() => /hide=/.test(location.hash) && /robust=1/.test(location.hash) && /smooth=0.5/.test(location.hash) && /x=wall/.test(location.hash));
  await page.reload();
  await page.waitForFunction(() => document.querySelector('[data-testid=chart][data-key=loss]')?.getAttribute('data-x-mode') === 'wall');
  assert.equal(await page.getByTestId('smoothing').first().inputValue(), '0.5');
  assert.ok(await page.getByTestId('robust').first().isChecked());
  assert.match(await page.locator(`[data-testid=legend-item][data-run-id="${ids[1]}"]`).getAttribute('class'), /\boff\b/);
  assert.equal(await page.title(), 'Compare 3 runs · demo · trainlog');
});

test('at 1024 px, in dark mode, the run page has no overlaps, a title and a favicon, and nothing fails to load', async () => {
  const narrow = await browser.newPage({ viewport: { width: 1024, height: 800 }, colorScheme: 'dark' });
  const failed = [];
  narrow.on('response', (r) => { if (r.status() >= 400) failed.push(`${r.status()} ${r.url()}`); });
  await narrow.goto(`${base}/#/run/${ids[0]}`);
  await narrow.getByTestId('run-title').waitFor();
  await narrow.waitForFunction(() => document.querySelector('[data-testid=chart][data-key=loss]')?.getAttribute('data-plot'));
  assert.equal(await narrow.title(), 'run-00 · demo · trainlog');
  const boxes = await narrow.evaluate(() => [...document.querySelectorAll('.grid2 > *')].map((e) => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom, e.textContent.slice(0, 30)]; }));
  assert.ok(boxes.length >= 4, 'params, tags and metadata sections');
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const [a, b] = [boxes[i], boxes[j]];
    const overlap = Math.min(a[2], b[2]) - Math.max(a[0], b[0]) > 1 && Math.min(a[3], b[3]) - Math.max(a[1], b[1]) > 1;
    assert.ok(!overlap, `"${a[4]}" overlaps "${b[4]}"`);
  }
  assert.ok(await narrow.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth), 'no sideways scrolling of the page');
  const bg = await narrow.evaluate(() => getComputedStyle(document.body).backgroundColor);
  assert.equal(bg, 'rgb(11, 15, 23)', 'dark background');
  const icon = await narrow.evaluate(async () => (await fetch('/favicon.ico')).status);
  assert.equal(icon, 200);
  assert.deepEqual(failed, []);
  await narrow.screenshot({ path: path.join(shots, 'run-dark-1024.png'), fullPage: true });
  await narrow.close();
});

test('image, JSON, CSV and text artifacts preview on the run page', async () => {
  const run = await post('/runs', { project: 'previews', name: 'with-artifacts' });
  // A 2x1 PNG: one red and one blue pixel.
  const png = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAIAAAABCAIAAAB7QOjdAAAADUlEQVR4nGP4zwAE/wEHAAH/4iOeWQAAAABJRU5ErkJggg==', 'base64');
  const upload = async (p, body) => {
    const r = await fetch(`${base}/api/v1/runs/${run.id}/artifacts/${p}`, { method: 'PUT', headers: { 'content-type': 'application/octet-stream' }, body });
    assert.ok(r.ok, `${p}: ${r.status} ${await r.text()}`);
  };
  await upload('plots/confusion.png', png);
  await upload('config.json', JSON.stringify({ lr: 0.001, layers: [64, 64] }));
  await upload('eval/preds.csv', 'id,label,"score, raw"\n1,cat,0.9\n2,dog,"0.8"\n');
  await upload('train.log', 'epoch 1 loss 0.5\nepoch 2 loss 0.4\n');
  await page.goto(`${base}/#/run/${run.id}`);
  const img = page.locator('[data-testid=preview][data-path="plots/confusion.png"] img');
  await img.waitFor();
  await page.waitForFunction(() => document.querySelector('[data-testid=preview-image]')?.naturalWidth === 2);
  assert.equal(await page.locator('[data-testid=preview][data-path="config.json"] [data-testid=preview-json]').innerText(), JSON.stringify({ lr: 0.001, layers: [64, 64] }, null, 2));
  const csv = page.locator('[data-testid=preview][data-path="eval/preds.csv"] [data-testid=preview-csv]');
  assert.deepEqual(await csv.locator('th').allInnerTexts(), ['id', 'label', 'score, raw']);
  assert.deepEqual(await csv.locator('tbody tr').evaluateAll((rs) => rs.map((r) => [...r.cells].map((c) => c.textContent))), [['1', 'cat', '0.9'], ['2', 'dog', '0.8']]);
  assert.match(await page.locator('[data-testid=preview][data-path="train.log"] pre').innerText(), /epoch 2 loss 0.4/);
  await page.screenshot({ path: path.join(shots, 'run-previews.png'), fullPage: true });
});

test('parallel coordinates pick the common metric, put a log-sampled lr on a log axis, colour by the metric and name the hovered run', async () => {
  const pids = [];
  for (let i = 0; i < 12; i++) {
    const lr = Math.pow(10, -5 + (3 * ((i * 5) % 12)) / 11);   // log-uniform over 1e-5 … 1e-2
    const run = await post('/runs', { project: 'pc', name: `trial-${i}`, params: { lr, layers: 2 + (i % 3) } });
    const points = [{ key: 'val/loss', step: 0, value: 1 + Math.abs(Math.log10(lr) + 3.5) }];
    if (i < 3) points.push({ key: 'aux', step: 0, value: i });
    if (i === 4) points.push({ key: 'val/loss', step: 1, value: 'Infinity' });
    await post(`/runs/${run.id}/metrics`, { points });
    pids.push(run.id);
  }
  await page.goto(`${base}/#/compare/pc/${pids.join(',')}`);
  await page.getByTestId('parcoords').locator('[data-testid=parcoords-line]').first().waitFor();
  assert.equal(await page.getByTestId('parcoords-metric').inputValue(), 'val/loss', 'the metric every run has, not the first by name');
  const scales = await page.locator('[data-testid=parcoords-axis]').evaluateAll((gs) => Object.fromEntries(gs.map((g) => [g.querySelector('.pc-label').textContent, g.dataset.scale])));
  assert.deepEqual(scales, { layers: 'linear', lr: 'log', 'val/loss': 'linear' });
  assert.match(await page.locator('.pc-scale').innerText(), /colour: val\/loss/);
  await page.locator(`[data-testid=parcoords-line][data-run-id="${pids[4]}"]`).hover({ force: true });
  assert.match(await page.getByTestId('parcoords-hover').innerText(), /trial-4/);
  await page.screenshot({ path: path.join(shots, 'compare-parcoords.png'), fullPage: true });
});

test('the filter box completes keys, warns about a key no run has, and a saved view brings the table back', async () => {
  await page.goto(`${base}/#/p/demo`);
  await page.getByTestId('row-count').filter({ hasText: `${RUNS} runs` }).waitFor();
  const box = page.getByTestId('filter-input');
  await box.fill('');
  await box.pressSequentially('metrics.lo');
  await page.getByTestId('filter-completion').first().waitFor();
  assert.deepEqual(await page.getByTestId('filter-completion').allInnerTexts(), ['metrics.loss']);
  await box.press('Tab');
  assert.equal(await box.inputValue(), 'metrics.loss');
  await box.pressSequentially(' < 0.2 and par');
  assert.deepEqual(await page.getByTestId('filter-completion').allInnerTexts(), ['params.', 'parent_id']);
  await box.press('Enter');
  await box.pressSequentially('b');
  assert.deepEqual(await page.getByTestId('filter-completion').allInnerTexts(), ['params.batch']);
  await box.press('Enter');
  await box.pressSequentially(' = 64');
  await box.press('Enter');
  const fewer = Array.from({ length: RUNS }, (_, i) => i).filter((i) => lastLoss(i) < 0.2).length;
  await page.getByTestId('row-count').filter({ hasText: `${fewer} runs` }).waitFor();
  assert.equal(await page.getByTestId('filter-warning').innerText(), '');
  // A misspelt key: the table says no run has it, rather than only "no runs match".
  await box.fill('metrics.los < 1');
  await box.press('Enter');
  await page.getByTestId('filter-warning').filter({ hasText: 'No run of this project has metrics.los.' }).waitFor();

  // Save the table as a view, change everything, open the view again.
  await box.fill('metrics.loss < 0.2');
  await box.press('Enter');
  await page.getByTestId('row-count').filter({ hasText: `${fewer} runs` }).waitFor();
  await page.locator('[title="metrics.loss (click or Enter to sort)"]').click();
  await page.locator('[title^="metrics.loss"]').filter({ hasText: '▲' }).waitFor();
  await page.locator('details.views summary').click();
  await page.getByTestId('view-name').fill('best runs');
  await page.getByTestId('view-save').click();
  await page.getByTestId('view-message').filter({ hasText: 'Saved "best runs".' }).waitFor();
  const saved = await (await fetch(`${base}/api/v1/projects/demo/views/best%20runs`)).json();
  assert.match(saved.state.query, /filter=metrics.loss/);
  await page.goto(`${base}/#/p/demo?filter=`);
  await page.getByTestId('row-count').filter({ hasText: `${RUNS} runs` }).waitFor();
  await page.locator('details.views summary').click();
  await page.getByTestId('views').selectOption('best runs');
  await page.getByTestId('row-count').filter({ hasText: `${fewer} runs` }).waitFor();
  assert.equal(await page.getByTestId('filter-input').inputValue(), 'metrics.loss < 0.2');
  await page.locator('[title^="metrics.loss"]').filter({ hasText: '▲' }).waitFor();
  await page.locator('details.views summary').click();
  await page.getByTestId('view-delete').click();
  await page.getByTestId('view-message').filter({ hasText: 'Deleted "best runs".' }).waitFor();
  assert.equal((await fetch(`${base}/api/v1/projects/demo/views/best%20runs`)).status, 404);
});

test('selecting all of 10,000 runs compares them as a group, without a failed request', async () => {
  const N = 10000;
  const made = [];
  let next = 0;
  const worker = async () => {
    while (next < N) {
      const i = next++;
      const run = await post('/runs', { project: 'many', name: `m-${i}`, params: { lr: 10 ** -(1 + (i % 4)) } });
      await post(`/runs/${run.id}/metrics`, { points: [{ key: 'val_loss', step: 0, value: 1 + (i % 10) }, { key: 'val_loss', step: 1, value: (i % 10) / 10 }] });
      made.push(run.id);
    }
  };
  await Promise.all(Array.from({ length: 8 }, worker));
  const bad = [];
  const onResponse = (r) => { if (r.status() >= 400) bad.push(`${r.status()} ${r.url()}`); };
  const onFailed = (r) => bad.push(`failed ${r.url()} ${r.failure()?.errorText}`);
  page.on('response', onResponse);
  page.on('requestfailed', onFailed);
  let requests = 0;
  const count = () => { requests++; };
  try {
    await page.goto(`${base}/#/p/many`);
    await page.getByTestId('row-count').filter({ hasText: `${N} runs` }).waitFor({ timeout: 60000 });
    await page.locator('.thead .cell.sel input[type=checkbox]').check();
    await page.getByTestId('compare-button').filter({ hasText: `Compare (${N})` }).waitFor();
    page.on('request', count);
    await page.getByTestId('compare-button').click();
    const chart = '[data-testid=chart][data-key=val_loss]';
    await page.waitForFunction((c) => document.querySelector(c)?.getAttribute('data-series-count') === '1', chart, { timeout: 120000 });
    assert.match(await page.getByTestId('grouped-note').innerText(), /10000 runs/);
    // The group's mean at step 1 is the mean of (i % 10) / 10 over the runs: 0.45.
    const plot = await plotArea(page.locator(chart));
    await page.mouse.move(plot.x + plot.w - 2, plot.y + plot.h / 2);
    const row = page.locator('[data-testid=chart-tooltip] [data-testid=tooltip-row]').first();
    await row.waitFor();
    assert.equal(Number(await row.locator('.tip-value').evaluate((e) => e.firstChild.textContent)), 0.45);
    assert.match(await row.innerText(), /all runs \(10000\)/);
    assert.ok(requests < 40, `${requests} requests for the comparison`);
    await page.screenshot({ path: path.join(shots, 'compare-10000.png') });
  } finally {
    page.off('response', onResponse);
    page.off('requestfailed', onFailed);
    page.off('request', count);
  }
  assert.deepEqual(bad, []);
});

test('an unknown run is reported in words', async () => {
  await page.goto(`${base}/#/run/no-such-run`);
  await page.getByText('not found').first().waitFor();
  await page.screenshot({ path: path.join(shots, 'unknown-run.png') });
});

test('group by a tag folds the table into groups with their means', async () => {
  await page.goto(`${base}/#/p/demo?filter=`);
  await page.getByTestId('row-count').filter({ hasText: `${RUNS} runs` }).waitFor();
  await page.getByTestId('group-by').selectOption('tags.team');
  const groups = page.locator('[data-testid=group-row]');
  await groups.first().waitFor();
  assert.deepEqual(await groups.evaluateAll((rows) => rows.map((r) => [r.dataset.group, r.dataset.count])), [['a', '15'], ['b', '15']]);
  // The group's loss cell is the mean of its runs' last losses.
  const expected = (lo, hi) => { let t = 0; for (let i = lo; i < hi; i++) t += lastLoss(i); return t / (hi - lo); };
  const lossMean = await page.locator('[data-testid=group-row][data-group=b] .group-mean').last().innerText();
  assert.ok(Math.abs(Number(lossMean) - expected(15, 30)) < 1e-3, `group b mean loss ${lossMean}`);
  await page.locator('[data-testid=group-row][data-group=a] .group-name').click();
  await page.waitForFunction(() => document.querySelectorAll('[data-testid=run-row]').length === 15);
  const names = await page.locator('[data-testid=run-row]').evaluateAll((rows) => rows.map((r) => r.innerText));
  assert.ok(names.every((t) => /run-(1[5-9]|2\d)/.test(t)), 'only group b is unfolded');
  await page.screenshot({ path: path.join(shots, 'runs-grouped.png') });
  await page.getByTestId('group-by').selectOption('');
});

test('compare shows parallel coordinates, time axes, smoothing, GPU and cost panels', async () => {
  const chosen = ids.slice(0, SYS_RUNS);
  await page.goto(`${base}/#/compare/demo/${chosen.join(',')}`);
  await page.waitForFunction(() => document.querySelector('[data-testid=chart][data-key=loss]')?.getAttribute('data-series-count') === '3');
  // Parallel coordinates: one line per run, axes for the param that differs (lr) and the metric.
  assert.equal(await page.locator('[data-testid=parcoords-line]').count(), 3);
  assert.deepEqual(await page.locator('[data-testid=parcoords-axis] text.pc-label').evaluateAll((ts) => ts.map((t) => t.textContent)), ['lr', 'loss']);
  // The diff table shows the environment and code rows that differ, not those that are equal.
  const diffKeys = await page.locator('[data-testid=diff-table] tbody td.mono').allInnerTexts();
  assert.deepEqual(diffKeys, ['lr', 'code.commit', 'environment.python']);
  // Wall-time and relative-time axes, and smoothing, redraw the same series.
  await page.getByTestId('x-axis').first().selectOption('wall');
  await page.waitForFunction(() => document.querySelector('[data-testid=chart][data-key=loss]')?.getAttribute('data-x-mode') === 'wall');
  await page.getByTestId('x-axis').first().selectOption('relative');
  await page.waitForFunction(() => document.querySelector('[data-testid=chart][data-key=loss]')?.getAttribute('data-x-mode') === 'relative');
  await page.getByTestId('smoothing').first().fill('0.9');
  await page.waitForFunction(() => document.querySelector('[data-testid=chart][data-key=loss]')?.getAttribute('data-smoothing') === '0.9');
  assert.equal(await page.locator('[data-testid=chart][data-key=loss]').getAttribute('data-series-count'), '3');
  // The system panel: utilization, memory and power of each run's GPU, over relative time.
  const sys = page.locator('[data-testid=system-charts] [data-testid=chart]');
  await page.getByTestId('system-section').locator('summary').click();
  await page.getByTestId('system-charts').scrollIntoViewIfNeeded();
  await page.waitForFunction(() => [...document.querySelectorAll('[data-testid=system-charts] [data-testid=chart]')].every((c) => c.getAttribute('data-series-count') === '3'));
  assert.deepEqual((await sys.evaluateAll((cs) => cs.map((c) => c.dataset.key))).slice(0, 3), ['sys/gpu.util', 'sys/gpu.mem_used_bytes', 'sys/gpu.power_w']);
  assert.equal(await sys.first().getAttribute('data-x-mode'), 'relative');
  // Cost per run, then the cost until the loss first fell below 0.5.
  const bars = await page.locator('[data-testid=cost-bars-row] .bar-value').allInnerTexts();
  assert.deepEqual(bars, [0, 1, 2].map((i) => '$' + (200 * USD_PER_SAMPLE * (i + 1)).toFixed(2)));
  await page.getByTestId('cost-metric').selectOption('loss');
  await page.getByTestId('cost-direction').selectOption('below');
  await page.getByTestId('cost-threshold').fill('0.5');
  await page.getByTestId('cost-compute').click();
  const rows = page.locator('[data-testid=cost-until-row]');
  await rows.first().waitFor();
  for (let i = 0; i < SYS_RUNS; i++) {
    let step = 0;
    while (!(lossAt(i, step) < 0.5)) step++;
    const row = rows.nth(i);
    assert.equal(await row.getAttribute('data-step'), String(step), `run ${i} first below 0.5`);
    const cost = (step * MS_PER_STEP) / (10 * MS_PER_STEP) * USD_PER_SAMPLE * (i + 1);
    assert.ok(Math.abs(Number(await row.getAttribute('data-cost')) - cost) < 1e-9, `run ${i} cost ${await row.getAttribute('data-cost')} vs ${cost}`);
  }
  await page.screenshot({ path: path.join(shots, 'compare-panels.png'), fullPage: true });
});

test('a comparison of 300 keys lays out every chart but loads only those near the viewport', async (t) => {
  // Two runs logging 300 keys in three sections (as per-layer statistics would), 3 points each.
  const KEYS = 300;
  const keys = Array.from({ length: KEYS }, (_, i) => `${['attn', 'mlp', 'norm'][Math.floor(i / 100)]}/layer.${String(i % 100).padStart(2, '0')}`);
  const wide = [];
  for (let r = 0; r < 2; r++) {
    const run = await post('/runs', { project: 'wide', name: `wide-${r}` });
    await post(`/runs/${run.id}/metrics`, { points: keys.flatMap((key, k) => [0, 1, 2].map((step) => ({ key, step, value: r + k / 1000 + step }))) });
    await post(`/runs/${run.id}/finish`, { status: 'finished' });
    wide.push(run.id);
  }
  const fetched = [], failed = [];
  const onRequest = (r) => { if (new URL(r.url()).pathname === '/api/v1/metrics') fetched.push(new URL(r.url()).searchParams.get('key')); };
  const onFailed = (r) => failed.push(`failed ${r.url()} ${r.failure()?.errorText}`);
  const onResponse = (r) => { if (r.status() >= 400) failed.push(`${r.status()} ${r.url()}`); };
  page.on('request', onRequest);
  page.on('requestfailed', onFailed);
  page.on('response', onResponse);
  try {
    await page.goto(`${base}/#/compare/wide/${wide.join(',')}`);
    const slots = page.locator('[data-testid=metric-charts] [data-testid=chart-slot]');
    await page.locator('[data-testid=chart-slot][data-chart-key="attn/layer.00"][data-loaded="1"]').waitFor();
    // Every chart has its place, at its final size, from the start.
    assert.equal(await slots.count(), KEYS);
    const heights = await slots.evaluateAll((ss) => [...new Set(ss.map((s) => s.getBoundingClientRect().height))]);
    assert.equal(heights.length, 1, `one height for loaded charts and placeholders: ${heights.join(', ')}`);
    // Before any scrolling, only the charts within a screen of the viewport ask for data.
    await page.waitForTimeout(1000);
    const loaded = await page.locator('[data-testid=metric-charts] [data-testid=chart-slot][data-loaded="1"]').count();
    assert.ok(loaded > 0 && fetched.length < 40, `${fetched.length} metric requests for ${loaded} charts before scrolling`);
    assert.equal(new Set(fetched).size, fetched.length, 'one request per chart');
    t.diagnostic(`${fetched.length} metric requests for ${loaded} charts before scrolling`);
    assert.equal(await page.evaluate(() => window.scrollY), 0, 'nothing scrolled');
    assert.equal(await slots.last().getAttribute('data-loaded'), '0');
    assert.equal(await slots.last().locator('canvas').count(), 0, 'the last chart is a placeholder');
    assert.ok(!(await slots.last().getByTestId('chart-export').isVisible()), 'a placeholder offers no download');

    // Scrolled into view, the last chart loads, and the charts in between do not.
    const last = page.locator('[data-testid=chart-slot][data-chart-key="norm/layer.99"]');
    assert.equal(await slots.last().getAttribute('data-chart-key'), 'norm/layer.99');
    await last.scrollIntoViewIfNeeded();
    await page.locator('[data-testid=chart-slot][data-chart-key="norm/layer.99"][data-loaded="1"]').waitFor();
    await last.locator('canvas').first().waitFor();
    assert.equal(await last.getByTestId('chart').getAttribute('data-series-count'), '2');
    assert.equal(await last.getByTestId('chart').getAttribute('data-buckets'), '6');
    assert.ok(fetched.length < 80, `${fetched.length} metric requests after jumping to the last chart`);
    t.diagnostic(`${fetched.length} metric requests after jumping to the last chart`);
    assert.ok(!fetched.includes('mlp/layer.50'), 'a chart scrolled past is not loaded');

    // A chart the search box brings into view loads.
    await page.evaluate(() => window.scrollTo(0, 0));
    await page.getByTestId('chart-search').fill('mlp/layer.5');
    await page.locator('[data-testid=chart-slot][data-chart-key="mlp/layer.55"][data-loaded="1"]').waitFor();
    assert.equal(await page.locator('[data-testid=chart][data-key="mlp/layer.55"]').getAttribute('data-series-count'), '2');
    assert.equal(await slots.filter({ visible: true }).count(), 10);
    await page.waitForFunction(() => /q=mlp/.test(location.hash));
    await page.screenshot({ path: path.join(shots, 'compare-300-keys.png') });
  } finally {
    page.off('request', onRequest);
    page.off('requestfailed', onFailed);
    page.off('response', onResponse);
  }
  assert.deepEqual(failed, []);
});

test('a running run\'s page updates its charts live', async () => {
  const run = await post('/runs', { project: 'demo', name: 'live-run' });
  const batch = (from, to) => ({ points: Array.from({ length: to - from }, (_, k) => ({ key: 'acc', step: from + k, value: (from + k) / 100 })) });
  await post(`/runs/${run.id}/metrics`, batch(0, 50));
  await page.goto(`${base}/#/run/${run.id}`);
  const chart = '[data-testid=chart][data-key=acc]';
  await page.waitForFunction((c) => document.querySelector(c)?.getAttribute('data-buckets') === '50', chart);
  assert.equal(await page.locator('[data-live]').getAttribute('data-live'), 'on');
  await post(`/runs/${run.id}/metrics`, batch(50, 100));
  await page.waitForFunction((c) => document.querySelector(c)?.getAttribute('data-buckets') === '100', chart, { timeout: 10000 });
  await post(`/runs/${run.id}/metrics`, { points: [{ key: 'grad_norm', step: 0, value: 1 }] });
  await page.locator('[data-testid=chart][data-key=grad_norm]').waitFor({ timeout: 10000 });
  await post(`/runs/${run.id}/finish`, { status: 'finished' });
  await page.waitForFunction(() => document.querySelector('[data-live]')?.getAttribute('data-live') === 'off', null, { timeout: 10000 });
  await page.screenshot({ path: path.join(shots, 'run-live.png') });
});

test('a running run\'s page refreshes the charts it has loaded, and a chart loaded later shows the current points', async () => {
  const run = await post('/runs', { project: 'demo', name: 'live-wide' });
  const keys = Array.from({ length: 40 }, (_, i) => `layer/${String(i).padStart(2, '0')}`);
  const batch = (from, to) => ({ points: keys.flatMap((key) => Array.from({ length: to - from }, (_, k) => ({ key, step: from + k, value: from + k }))) });
  await post(`/runs/${run.id}/metrics`, batch(0, 10));
  const fetched = [];
  const onRequest = (r) => { if (new URL(r.url()).pathname === '/api/v1/metrics') fetched.push(new URL(r.url()).searchParams.get('key')); };
  page.on('request', onRequest);
  try {
    await page.goto(`${base}/#/run/${run.id}`);
    const first = page.locator('[data-testid=chart][data-key="layer/00"]');
    await first.scrollIntoViewIfNeeded();
    await page.waitForFunction(() => document.querySelector('[data-testid=chart][data-key="layer/00"]')?.getAttribute('data-buckets') === '10');
    const last = page.locator('[data-testid=chart-slot][data-chart-key="layer/39"]');
    assert.equal(await last.getAttribute('data-loaded'), '0');
    await post(`/runs/${run.id}/metrics`, batch(10, 20));
    await page.waitForFunction(() => document.querySelector('[data-testid=chart][data-key="layer/00"]')?.getAttribute('data-buckets') === '20', null, { timeout: 10000 });
    assert.equal(await last.getAttribute('data-loaded'), '0', 'a live update leaves placeholders be');
    assert.ok(!fetched.includes('layer/39'));
    await last.scrollIntoViewIfNeeded();
    await page.waitForFunction(() => document.querySelector('[data-testid=chart][data-key="layer/39"]')?.getAttribute('data-buckets') === '20', null, { timeout: 10000 });
    assert.ok(fetched.filter((k) => k === 'layer/00').length >= 2, 'the loaded chart was refreshed');
    assert.ok(fetched.length < keys.length + 20, `${fetched.length} metric requests`);
  } finally {
    page.off('request', onRequest);
  }
  await post(`/runs/${run.id}/finish`, { status: 'finished' });
  await page.waitForFunction(() => document.querySelector('[data-live]')?.getAttribute('data-live') === 'off', null, { timeout: 10000 });
});

test('the models page shows a version\'s lineage back to its run', async () => {
  await put(`/runs/${ids[0]}/artifacts/model.bin`, 'weights');
  await post('/models', { name: 'demo-model', description: 'for the UI test' });
  await post('/models/demo-model/versions', { run_id: ids[0], artifact: 'model.bin', alias: 'prod' });
  await page.goto(`${base}/#/models`);
  const lineage = page.getByTestId('lineage').first();
  await lineage.waitFor();
  assert.match(await lineage.locator('summary').innerText(), /run run-00 · abc0def · main/);
  await lineage.locator('summary').click();
  assert.match(await page.getByTestId('lineage-params').innerText(), /lr\s+0\.001/);
  await page.getByTestId('lineage-run-link').click();
  await page.getByTestId('run-title').filter({ hasText: 'run-00' }).waitFor();
  await page.screenshot({ path: path.join(shots, 'models-lineage.png') });
});

test('MLflow\'s UI addresses open the matching experiment, run and model version', async () => {
  // MLflow's client prints links of its own UI: #/experiments/N, …/runs/ID, #/models/NAME/versions/V.
  const door = async (p, body) => {
    const r = await fetch(`${base}/api/2.0/mlflow${p}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    assert.equal(r.status, 200, await r.clone().text());
    return r.json();
  };
  const { experiment_id: experiment } = await door('/experiments/create', { name: 'mlflow-paths' });
  const { run } = await door('/runs/create', { experiment_id: experiment, run_name: 'from-mlflow' });
  await page.goto(`${base}/#/experiments/${experiment}`);
  await page.waitForURL(/#\/p\/mlflow-paths$/);
  await page.getByText('from-mlflow').first().waitFor();
  await page.goto(`${base}/#/experiments/${experiment}/runs/${run.info.run_id}`);
  await page.getByTestId('run-title').filter({ hasText: 'from-mlflow' }).waitFor();
  await put(`/runs/${ids[1]}/artifacts/weights.bin`, 'weights');
  await post('/models', { name: 'paths-model' });
  for (let k = 0; k < 2; k++) await post('/models/paths-model/versions', { run_id: ids[1], artifact: 'weights.bin' });
  await page.goto(`${base}/#/models/paths-model/versions/2`);
  const focused = page.locator('[data-model="paths-model"] [data-testid="version-row"][data-focused="true"]');
  await focused.waitFor();
  assert.equal(await focused.getAttribute('data-version'), '2');
  await page.goto(`${base}/#/experiments/987654`);
  await page.getByTestId('experiment-error').waitFor();
  assert.doesNotMatch(await page.locator('#app').innerText(), /Unknown page/);
});

test('a rename, new notes and tags, and an alias move persist; a version shows its description, tags and files', async () => {
  const run = await post('/runs', { project: 'edits', name: 'before', tags: { keep: 'yes', drop: 'me' } });
  await post(`/runs/${run.id}/finish`, { status: 'finished' });
  await page.goto(`${base}/#/run/${run.id}`);
  await page.getByTestId('run-title').filter({ hasText: 'before' }).waitFor();
  await page.getByTestId('edit-run').click();
  await page.getByTestId('edit-name').fill('after');
  await page.getByTestId('edit-notes').fill('lr too high;\nrerun with warmup');
  await page.getByTestId('edit-tags').fill('keep=yes\nnew=tag\nbaseline');
  await page.getByTestId('edit-save').click();
  await page.getByTestId('run-title').filter({ hasText: 'after' }).waitFor();
  await page.reload();
  await page.getByTestId('run-title').filter({ hasText: 'after' }).waitFor();
  assert.equal(await page.getByTestId('run-notes').innerText(), 'lr too high;\nrerun with warmup');
  const stored = await (await fetch(`${base}/api/v1/runs/${run.id}`)).json();
  assert.equal(stored.name, 'after');
  assert.deepEqual(stored.tags, { keep: 'yes', new: 'tag', baseline: '' });
  assert.equal(await page.title(), 'after · edits · trainlog');

  // demo-model v1 holds the alias prod; v2 is made with a description and tags; prod moves to it.
  await put(`/runs/${ids[1]}/artifacts/model.bin`, 'weights v2');
  await post('/models/demo-model/versions', { run_id: ids[1], artifact: 'model.bin', description: 'warmup, lr 3e-4', tags: { stage: 'candidate' } });
  await page.goto(`${base}/#/models`);
  const v2 = page.locator('[data-testid=model][data-model=demo-model] [data-testid=version-row][data-version="2"]');
  await v2.waitFor();
  assert.equal(await v2.getByTestId('version-description').innerText(), 'warmup, lr 3e-4');
  assert.equal(await v2.getByTestId('version-tags').innerText(), 'stage=candidate');
  assert.match(await v2.locator('.files a').innerText(), /model\.bin/);
  await v2.getByTestId('alias-input').fill('prod');
  await v2.getByTestId('alias-set').click();
  await page.locator('[data-testid=model][data-model=demo-model] [data-testid=model-aliases] [data-alias=prod][data-version="2"]').waitFor();
  await page.reload();
  await page.locator('[data-testid=model][data-model=demo-model] [data-testid=version-row][data-version="2"] [data-alias=prod]').waitFor();
  assert.equal(await page.locator('[data-testid=model][data-model=demo-model] [data-testid=version-row][data-version="1"] [data-alias=prod]').count(), 0);
  const model = await (await fetch(`${base}/api/v1/models/demo-model`)).json();
  assert.deepEqual(model.aliases, { prod: 2 });
  // The version's file downloads with its bytes.
  const [download] = await Promise.all([page.waitForEvent('download'), v2Link(page).click()]);
  assert.equal(readFileSync(await download.path(), 'utf8'), 'weights v2');
  await page.screenshot({ path: path.join(shots, 'models-edit.png'), fullPage: true });
});

test('a run archived from its page can be restored, or deleted for good after a confirmation', async () => {
  const run = await post('/runs', { project: 'cleanup', name: 'scratch' });
  const other = await post('/runs', { project: 'cleanup', name: 'keeper' });
  await post(`/runs/${run.id}/finish`, { status: 'finished' });
  await page.goto(`${base}/#/run/${run.id}`);
  await page.getByTestId('archive-run').click();
  await page.getByTestId('archived').waitFor();
  assert.equal((await (await fetch(`${base}/api/v1/runs/${run.id}`)).json()).archived, true);
  // Dismissing the confirmation deletes nothing.
  page.once('dialog', (d) => d.dismiss());
  await page.getByTestId('delete-run').click();
  await page.getByTestId('restore-run').waitFor();
  assert.equal((await fetch(`${base}/api/v1/runs/${run.id}`)).status, 200);
  page.once('dialog', (d) => d.accept());
  await page.getByTestId('delete-run').click();
  await page.waitForURL((u) => u.hash.startsWith('#/p/cleanup'));
  await page.locator('[data-testid=run-row]').filter({ hasText: 'keeper' }).waitFor();
  assert.equal(await page.locator('[data-testid=run-row]').count(), 1);
  assert.equal((await fetch(`${base}/api/v1/runs/${run.id}`)).status, 404);
  assert.equal((await fetch(`${base}/api/v1/runs/${other.id}`)).status, 200);
  // An active run offers no delete.
  await page.goto(`${base}/#/run/${other.id}`);
  await page.getByTestId('archive-run').waitFor();
  assert.equal(await page.getByTestId('delete-run').count(), 0);
});

const v2Link = (p) => p.locator('[data-testid=model][data-model=demo-model] [data-testid=version-row][data-version="2"] .files a');

test('a sweep shows its trials, parallel coordinates, best-so-far curve and spending', async () => {
  const config = ['command: [python, train.py]', 'method: random', 'metric: {name: val_loss, goal: minimize}',
    'parameters:', '  lr: {distribution: log_uniform, min: 1.0e-4, max: 1.0e-1}', '  layers: {values: [2, 4]}',
    'run_cap: 5', 'budget: {usd: 10}', 'seed: 3'].join('\n');
  const sweep = await post('/sweeps', { config, project: 'demo', name: 'lr-search' });
  const losses = [];
  for (let i = 0; i < 5; i++) {
    const trial = await post(`/sweeps/${sweep.id}/next`, { agent: 'test:1', slot: `gpu:${i % 2}`, gpus: 1 });
    assert.equal(trial.status, 'trial');
    if (i === 2) {
      await post(`/sweeps/${sweep.id}/trials/${trial.index}/end`, { outcome: 'failed', exit_code: 1, output_tail: 'CUDA out of memory' });
      continue;
    }
    const loss = Math.abs(Math.log10(trial.params.lr) + 2.5) + 0.1 * trial.params.layers;
    losses.push(loss);
    await post(`/runs/${trial.run_id}/metrics`, { points: [
      { key: 'val_loss', step: 0, value: loss + 1 }, { key: 'val_loss', step: 1, value: loss },
      { key: 'cost/usd', step: 0, value: 0.5 * (i + 1) }] });
    await post(`/sweeps/${sweep.id}/trials/${trial.index}/end`, { outcome: 'finished', exit_code: 0 });
  }
  await page.goto(`${base}/#/sweeps/demo`);
  await page.getByRole('link', { name: 'lr-search' }).click();
  await page.getByTestId('sweep-title').filter({ hasText: 'finished (run_cap)' }).waitFor();
  const rows = page.locator('[data-testid=trial-row]');
  assert.equal(await rows.count(), 5);
  assert.deepEqual(await rows.evaluateAll((rs) => rs.map((r) => r.dataset.state)), ['finished', 'finished', 'failed', 'finished', 'finished']);
  assert.match(await rows.nth(2).getAttribute('title'), /CUDA out of memory/);
  const curve = page.getByTestId('best-so-far');
  assert.equal(await curve.getAttribute('data-points'), '4');
  assert.ok(Math.abs(Number(await curve.getAttribute('data-best')) - Math.min(...losses)) < 1e-9);
  assert.equal(await page.locator('[data-testid=parcoords-line]').count(), 4);
  // Trials 0, 1, 3 and 4 cost $0.50, $1.00, $2.00 and $2.50; the failed trial 2 logged none.
  assert.match(await page.getByTestId('budget-row').innerText(), /\$6\.00 \/ \$10\.00/);
  // Sorting by the metric puts the finished trials in order of their loss, the failed one last.
  await page.locator('[data-testid=trials-table] th[data-sort=metric]').click();
  const sorted = await rows.evaluateAll((rs) => rs.map((r) => r.cells[4].textContent));
  assert.deepEqual(sorted.slice(0, 4).map(Number), [...losses].sort((a, b) => a - b).map((v) => Number(fmt4(v))));
  assert.equal(sorted[4], '');
  await page.locator('[data-testid=trials-table] th[data-sort=metric]').click();
  assert.equal((await rows.first().evaluate((r) => r.cells[4].textContent)), fmt4(Math.max(...losses)));
  await page.screenshot({ path: path.join(shots, 'sweep.png'), fullPage: true });
});

test('a page of another origin cannot change anything, nor frame the UI', async () => {
  const target = ids[0];
  const before = await (await fetch(`${base}/api/v1/runs/${target}`)).json();
  const projectsBefore = (await (await fetch(`${base}/api/v1/projects`)).json()).projects.length;
  // The attacker's page: its own origin (another port), trying every request a page can make
  // without the server's consent: simple fetches, a form post, a beacon, and framing the UI.
  const attack = `<!doctype html><body>
    <form id="f" method="POST" enctype="text/plain" action="${base}/api/v1/runs/${target}/params">
      <input name='{"params":{"lr":666},"x":"' value='"}'></form>
    <script>
      const api = ${JSON.stringify(base)} + '/api/v1';
      const tries = [
        fetch(api + '/runs', { method: 'POST', mode: 'no-cors', headers: { 'content-type': 'text/plain' }, body: JSON.stringify({ project: 'evil', name: 'x' }) }),
        fetch(api + '/runs/${target}/tags', { method: 'POST', mode: 'no-cors', body: JSON.stringify({ tags: { owned: 'yes' } }) }),
        fetch(api + '/runs/${target}/params', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ params: { lr: 667 } }) }),
        fetch(api + '/runs/${target}/finish', { method: 'POST', mode: 'no-cors', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'status=failed' }),
      ].map((p) => p.then(() => 'sent', () => 'blocked'));
      navigator.sendBeacon(api + '/runs/${target}/tags', JSON.stringify({ tags: { beacon: 'yes' } }));
      Promise.all(tries).then((r) => { window.results = r; document.getElementById('f').submit(); });
    </script></body>`;
  const http = await import('node:http');
  const framing = `<!doctype html><body><iframe src="${base}/"></iframe></body>`;
  const evil = http.createServer((req, res) => {
    res.writeHead(200, { 'content-type': 'text/html' });
    res.end(req.url === '/frame' ? framing : attack);
  });
  await new Promise((resolve) => evil.listen(0, '127.0.0.1', resolve));
  const evilUrl = `http://127.0.0.1:${evil.address().port}/`;
  const refused = [];
  const attacker = await browser.newPage();
  attacker.on('response', (r) => { if (r.url().startsWith(base)) refused.push(`${r.request().method()} ${r.status()}`); });
  try {
    // The page submits its form once every fetch has settled: its navigation ends the attack.
    await attacker.goto(evilUrl);
    await attacker.waitForURL((u) => u.href.startsWith(base), { timeout: 15000 });
    // The form's navigation landed on the server's refusal.
    assert.match(await attacker.content(), /forbidden/);
    await attacker.goto(evilUrl + 'frame', { waitUntil: 'load' });
    const framed = attacker.frames().filter((f) => f !== attacker.mainFrame());
    assert.equal(framed.length, 1);
    // Chromium replaces a frame that its headers refuse with an error page of its own.
    assert.ok(!framed[0].url().startsWith(base), `the UI loaded inside a foreign frame: ${framed[0].url()}`);
  } finally {
    await attacker.close();
    evil.close();
  }
  const after = await (await fetch(`${base}/api/v1/runs/${target}`)).json();
  assert.deepEqual(after.params, before.params);
  assert.deepEqual(after.tags, before.tags);
  assert.equal(after.status, before.status);
  assert.equal((await (await fetch(`${base}/api/v1/projects`)).json()).projects.length, projectsBefore);
  const posts = refused.filter((r) => r.startsWith('POST'));
  assert.ok(posts.length >= 3 && posts.every((r) => / 40[13]$/.test(r) || / 415$/.test(r)), posts.join(', '));
});

test('with --auth the UI asks for a key once, shows who is signed in, hides unreadable projects, and signs out', async () => {
  const data = mkdtempSync(path.join(tmpdir(), 'trainlog-ui-auth-'));
  const { proc, url } = await startServer(['--auth', '--default-permission', 'none'], data);
  const context = await browser.newContext({ viewport: { width: 1200, height: 800 }, acceptDownloads: true });
  const signed = await context.newPage();
  try {
    const admin = readFileSync(path.join(data, 'admin.key'), 'utf8').trim();
    const out = execFileSync(binary, ['users', 'add', 'ada', '--data', data], { encoding: 'utf8' });
    const ada = out.trim().split('\n').pop();
    const call = async (key, method, p, body) => {
      const r = await fetch(`${url}/api/v1${p}`, { method, headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: body && JSON.stringify(body) });
      if (!r.ok) throw new Error(`${method} ${p}: ${r.status} ${await r.text()}`);
      return r.json();
    };
    await call(admin, 'POST', '/projects', { name: 'board-only' });
    const run = await call(ada, 'POST', '/runs', { project: 'ada-lab', name: 'first' });
    const put = await fetch(`${url}/api/v1/runs/${run.id}/artifacts/notes.txt`, { method: 'PUT', headers: { authorization: `Bearer ${ada}` }, body: 'hello' });
    assert.equal(put.status, 201);

    await signed.goto(url);
    await signed.getByTestId('sign-in').waitFor();
    await signed.getByTestId('api-key').fill('tl_000000000000_' + '0'.repeat(64));
    await signed.getByTestId('sign-in-button').click();
    await signed.getByTestId('sign-in-message').filter({ hasText: 'refused' }).waitFor();
    await signed.getByTestId('api-key').fill(ada);
    await signed.getByTestId('sign-in-button').click();
    await signed.getByTestId('projects-list').waitFor();
    assert.match(await signed.getByTestId('signed-in-as').innerText(), /Signed in as ada/);
    const listed = await signed.getByTestId('projects-list').innerText();
    assert.match(listed, /ada-lab/);
    assert.doesNotMatch(listed, /board-only/, 'a project ada may not read is not listed');
    await signed.screenshot({ path: path.join(shots, 'signed-in.png') });

    // The key is kept: a reload, and an artifact download, need no sign-in.
    await signed.reload();
    await signed.getByTestId('projects-list').waitFor();
    await signed.goto(`${url}/#/run/${run.id}`);
    const link = signed.getByRole('link', { name: 'notes.txt' });
    await link.waitFor();
    const [download] = await Promise.all([signed.waitForEvent('download'), link.click()]);
    const saved = await download.path();
    assert.equal(readFileSync(saved, 'utf8'), 'hello');
    // ada made the project, so she may change the run (the server's default role is none).
    await signed.getByTestId('archive-run').waitFor();
    assert.equal(await signed.getByTestId('read-only').count(), 0);

    await signed.getByTestId('sign-out').click();
    await signed.getByTestId('sign-in').waitFor();
    assert.equal(await signed.evaluate(() => localStorage.getItem('trainlog.apiKey')), null);
    await signed.reload();
    await signed.getByTestId('sign-in').waitFor();
    assert.equal(await signed.getByTestId('signed-in-as').count(), 0);

    // A reader of the project sees the run and no way to change it.
    const bob = execFileSync(binary, ['users', 'add', 'bob', '--data', data], { encoding: 'utf8' }).trim().split('\n').pop();
    await call(ada, 'PUT', '/projects/ada-lab/members/bob', { role: 'read' });
    await signed.getByTestId('api-key').fill(bob);
    await signed.getByTestId('sign-in-button').click();
    await signed.getByTestId('signed-in-as').waitFor();
    await signed.goto(`${url}/#/run/${run.id}`);
    await signed.getByTestId('read-only').waitFor();
    assert.equal(await signed.getByTestId('archive-run').count(), 0);
    assert.equal(await signed.getByRole('button', { name: 'Edit' }).count(), 0);

    // Deleting an archived run for good is offered to the project's admins only: a writer may
    // restore it, its creator (admin of the project) may also delete it.
    const carol = execFileSync(binary, ['users', 'add', 'carol', '--data', data], { encoding: 'utf8' }).trim().split('\n').pop();
    await call(ada, 'PUT', '/projects/ada-lab/members/carol', { role: 'write' });
    await call(ada, 'POST', `/runs/${run.id}/archive`, {});
    const signInAs = async (key, name) => {
      await signed.getByTestId('sign-out').click();
      await signed.getByTestId('sign-in').waitFor();
      await signed.getByTestId('api-key').fill(key);
      await signed.getByTestId('sign-in-button').click();
      await signed.getByTestId('signed-in-as').filter({ hasText: name }).waitFor();
      await signed.goto(`${url}/#/run/${run.id}`);
      await signed.getByTestId('archived').waitFor();
    };
    await signInAs(carol, 'carol');
    await signed.getByTestId('restore-run').waitFor();
    assert.equal(await signed.getByTestId('read-only').count(), 0, 'carol may change the run');
    assert.equal(await signed.getByTestId('delete-run').count(), 0, 'but not delete it');
    await signInAs(ada, 'ada');
    await signed.getByTestId('restore-run').waitFor();
    assert.equal(await signed.getByTestId('delete-run').count(), 1, 'ada administers her project');
  } finally {
    await context.close();
    proc.kill('SIGTERM');
  }
});

test('a job\'s run shows its attempts on a timeline and in a table, its system charts by node, and its attempts in the runs table', async () => {
  const project = 'jobs', id = 'job-' + Date.now().toString(36);
  // Eight ranks on two nodes join the run as the SDK does; local rank 0 describes its node.
  const join = (rank, restart, zone, started) => post('/runs', { project, id, resume: true, params: {}, process: {
    rank, local_rank: rank % 4, world_size: 8, node_rank: Math.floor(rank / 4), node_count: 2, host: 'node-' + Math.floor(rank / 4),
    launcher: 'skypilot', job_id: 'sky-1', restart, zone, region: zone.slice(0, -1), cloud: 'aws', spot: true, started_ms: started,
    ...(rank % 4 === 0 ? { node: { gpus: 4, usd_per_hour: 8.0, price_source: 'test' } } : {}),
  } });
  for (let r = 0; r < 8; r++) await join(r, '0', 'us-east-1a', Date.now() - 2 * 3600e3);
  for (let r = 0; r < 8; r++) await post(`/runs/${id}/finish`, { status: 'preempted', process: { rank: r } });
  const restarted = Date.now();
  for (let r = 0; r < 8; r++) await join(r, '1', 'us-west-2b', restarted);
  const points = [];
  for (let s = 0; s < 20; s++) {
    const timestamp = restarted + s * 1000;
    points.push({ key: 'loss', step: s, value: 1 / (s + 1), timestamp });
    points.push({ key: 'sys/node/0/cpu.percent', step: s, value: 10 + s, timestamp });
    points.push({ key: 'sys/node/1/cpu.percent', step: s, value: 30 + s, timestamp });
    points.push({ key: 'sys/node/1/gpu.0.util', step: s, value: 90, timestamp });
  }
  await post(`/runs/${id}/metrics`, { points });
  const plain = await post('/runs', { project, name: 'plain', params: {} });
  await post(`/runs/${plain.id}/finish`, { status: 'finished' });

  // The run's page: the job in a line, its two attempts on one time axis, and in a table.
  await page.goto(`${base}/#/run/${id}`);
  await page.getByTestId('job-section').waitFor();
  assert.match(await page.getByTestId('job-summary').innerText(),
    /^skypilot job sky-1 · 8 ranks on 2 nodes · 8 GPUs · 2 attempts · cost \$\d+\.\d\d \(now \$16\.00\/h\) · .* · lost \$\d+\.\d\d and [\d.]+ GPU-h · 0 steps replayed$/);
  const bars = page.getByTestId('timeline-attempt');
  assert.equal(await bars.count(), 2);
  assert.deepEqual(await bars.evaluateAll((rs) => rs.map((r) => [r.dataset.attempt, r.dataset.status])), [['1', 'preempted'], ['2', 'running']]);
  const labels = await bars.allInnerTexts();
  assert.match(labels[0], /#1 preempted · aws us-east-1a · spot · \$16\.00\/h · \$\d+\.\d\d/);
  assert.match(labels[1], /#2 running · aws us-west-2b · spot · \$16\.00\/h · \$\d+\.\d\d/);
  const [first, second] = await page.getByTestId('timeline-bar').evaluateAll((bs) => bs.map((b) => {
    const r = b.getBoundingClientRect();
    return { left: r.left, right: r.right, color: getComputedStyle(b).backgroundColor };
  }));
  assert.ok(first.left < second.left && first.right <= second.left + 2, `the first attempt ends before the second starts: ${JSON.stringify([first, second])}`);
  assert.ok(second.right - second.left >= 1 && first.right - first.left > 100, 'two hours, then a running attempt up to now');
  assert.notEqual(first.color, second.color, 'coloured by how each ended');
  const rows = page.getByTestId('attempt-row');
  assert.equal(await rows.count(), 2);
  const firstRow = await rows.nth(0).innerText();
  assert.match(firstRow, /preempted/);
  assert.match(firstRow, /aws \/ us-east-1 \/ us-east-1a/);
  assert.match(firstRow, /8\/8/);
  assert.match(await rows.nth(1).innerText(), /aws \/ us-west-2 \/ us-west-2b/);
  assert.deepEqual(await rows.nth(0).getByTestId('attempt-node').allInnerTexts(),
    ['0: node-0 · 4× GPU · $8.00/h · 4 processes', '1: node-1 · 4× GPU · $8.00/h · 4 processes']);
  // No rank failed; the preempted attempt says what ended it (the running one says nothing yet).
  const ended = page.getByTestId('attempt-reason');
  assert.equal(await ended.count(), 1);
  assert.match(await ended.innerText(), /^why attempt 1 ended: rank 0 preempted/);

  // System charts: a chart per metric; a line per node until a node is chosen, then that node's.
  await page.getByTestId('system-section').locator('summary').click();
  const nodePicker = page.getByTestId('system-node');
  await nodePicker.waitFor();
  assert.deepEqual(await nodePicker.locator('option').allInnerTexts(),
    ['all: a line per node', 'node 0 · node-0 · 4 GPUs: a line per GPU', 'node 1 · node-1 · 4 GPUs: a line per GPU']);
  const sysChart = (key) => page.locator(`[data-testid=system-charts] [data-testid=chart][data-key="${key}"]`);
  await page.waitForFunction(() => document.querySelector('[data-testid=system-charts] [data-testid=chart][data-key="sys/cpu.percent"]')?.dataset.seriesCount === '2');
  assert.deepEqual(await page.locator('[data-testid=system-charts] [data-testid=chart]').evaluateAll((cs) => cs.map((c) => c.dataset.key)), ['sys/gpu.util', 'sys/cpu.percent']);
  assert.equal(await sysChart('sys/cpu.percent').getAttribute('data-y-max'), '49');
  await nodePicker.selectOption('0');
  await page.waitForFunction(() => document.querySelector('[data-testid=system-charts] [data-testid=chart][data-key="sys/cpu.percent"]')?.dataset.yMax === '29');
  assert.deepEqual(await page.locator('[data-testid=system-charts] [data-testid=chart]').evaluateAll((cs) => cs.map((c) => c.dataset.key)), ['sys/cpu.percent'], 'node 0 recorded no GPU series');
  await nodePicker.selectOption('1');
  await page.waitForFunction(() => document.querySelector('[data-testid=system-charts] [data-testid=chart][data-key="sys/cpu.percent"]')?.dataset.yMax === '49');
  await page.waitForFunction(() => document.querySelector('[data-testid=system-charts] [data-testid=chart][data-key="sys/gpu.util"]')?.dataset.seriesCount === '1');
  assert.match(await sysChart('sys/gpu.util').getAttribute('data-last'), /^gpu\.0=90$/, "node 1's one GPU");
  await page.screenshot({ path: path.join(shots, 'run-job.png'), fullPage: true });

  // The runs table: the job's attempts, GPUs and lost dollars; empty for the plain run.
  await page.goto(`${base}/#/p/${project}`);
  await page.getByTestId('row-count').filter({ hasText: '2 runs' }).waitFor();
  const order = () => page.locator('[data-testid=run-row]').evaluateAll((rs) => rs
    .sort((a, b) => parseFloat(a.style.top) - parseFloat(b.style.top)).map((r) => r.dataset.runId));
  assert.deepEqual(await order(), [plain.id, id], 'newest first');
  const cell = (run, column) => page.locator(`[data-testid=run-row][data-run-id="${run}"] .cell[data-column=${column}]`).innerText();
  assert.equal(await cell(id, 'attempts'), '2');
  assert.equal(await cell(id, 'gpus'), '8');
  assert.match(await cell(id, 'lost_usd'), /^\$\d+\.\d\d$/);
  assert.equal(await cell(plain.id, 'attempts'), '');
  await page.locator('.thead .cell[data-column=attempts]').click();
  await page.locator('.thead .cell[data-column=attempts]').filter({ hasText: '▲' }).waitFor();
  await page.waitForFunction((want) => document.querySelector('[data-testid=run-row]')?.dataset.runId === want, id);
  assert.deepEqual(await order(), [id, plain.id], 'sorted by attempts, the run without a job last');
  assert.match(decodeURIComponent(await page.evaluate(() => location.hash)), /sort=attempts/);
  const [dl] = await Promise.all([page.waitForEvent('download'), page.locator('.toolbar [data-testid=export-csv]').click()]);
  const csv = parseCsv(readFileSync(await dl.path(), 'utf8'));
  const at = (name) => csv[0].indexOf(name);
  assert.ok(at('attempts') > 0 && at('gpus') > 0 && at('lost_usd') > 0, csv[0].join(','));
  assert.deepEqual(csv.slice(1).map((r) => [r[0], r[at('attempts')], r[at('gpus')]]), [[id, '2', '8'], [plain.id, '', '']]);

  // The filter box completes the job's attributes.
  const box = page.getByTestId('filter-input');
  await box.fill('');
  await box.pressSequentially('attem');
  assert.deepEqual(await page.getByTestId('filter-completion').allInnerTexts(), ['attempts']);
  await box.press('Tab');
  await box.pressSequentially(' > 1');
  await box.press('Enter');
  await page.getByTestId('row-count').filter({ hasText: '1 run' }).waitFor();
  assert.deepEqual(await order(), [id]);

  // A failed attempt tells why, and its last lines, folded.
  const failed = 'failed-' + id;
  await post('/runs', { project: 'jobs-failed', id: failed, resume: true, params: {}, process: {
    rank: 0, world_size: 1, host: 'box', launcher: 'torchrun', job_id: 'tr-7', restart: '0', instance_type: 'p4d.24xlarge', spot: false,
    node: { gpus: 8, gpu_names: ['NVIDIA A100-SXM4-40GB'], usd_per_hour: 32.77, price_source: 'test' },
  } });
  await post(`/runs/${failed}/finish`, { status: 'failed', process: { rank: 0, reason: 'CUDA out of memory', last_lines: 'step 41 loss 0.52\nstep 42 loss 0.51' } });
  await page.goto(`${base}/#/run/${failed}`);
  const one = page.getByTestId('timeline-attempt');
  await one.waitFor();
  assert.match(await one.innerText(), /#1 failed · p4d\.24xlarge · on-demand · \$32\.77\/h/);
  assert.match(await page.getByTestId('attempt-node').innerText(), /^0: box · 8× NVIDIA A100-SXM4-40GB · \$32\.77\/h · 1 process$/);
  const reason = page.locator('[data-testid=attempt-reason][data-attempt="1"]');
  assert.match(await reason.locator('summary').innerText(), /why attempt 1 ended: rank 0 failed: CUDA out of memory/);
  assert.equal(await reason.getByTestId('attempt-last-lines').isVisible(), false, 'folded');
  await reason.locator('summary').click();
  assert.match(await reason.getByTestId('attempt-last-lines').innerText(), /step 42 loss 0\.51/);
  assert.equal(await page.getByTestId('system-section').count(), 0, 'no system series, no system section');

  // A two-node job whose rank 0 logged its own node's cost ($8) shows the job's cost ($16, both
  // nodes) alike in its header, its job section and the runs table.
  const ddp = 'ddp-' + id, hourAgo = Date.now() - 3600e3;
  for (const rank of [0, 1]) {
    await post('/runs', { project: 'jobs-ddp', id: ddp, resume: true, params: {}, start_time: hourAgo, process: {
      rank, world_size: 2, node_rank: rank, node_count: 2, host: 'ddp-' + rank, launcher: 'torchrun', job_id: 'tr-8', restart: '0',
      started_ms: hourAgo, node: { gpus: 1, usd_per_hour: 8.0, price_source: 'test' },
    } });
  }
  await post(`/runs/${ddp}/metrics`, { points: [{ key: 'cost/usd', step: 0, value: 8.0, timestamp: Date.now() }] });
  for (const rank of [0, 1]) await post(`/runs/${ddp}/finish`, { status: 'finished', end_time: hourAgo + 3600e3, process: { rank } });
  await page.goto(`${base}/#/run/${ddp}`);
  await page.getByTestId('job-summary').waitFor();
  assert.match(await page.getByTestId('job-summary').innerText(), / · cost \$16\.00 · /);
  assert.match(await page.getByTestId('run-info').innerText(), /cost\s+\$16\.00/);
  await page.goto(`${base}/#/p/jobs-ddp`);
  await page.getByTestId('row-count').filter({ hasText: '1 run' }).waitFor();
  assert.equal(await cell(ddp, 'cost'), '$16.00');
});

const MINUTE = 60e3, HOUR = 60 * MINUTE, DAY = 24 * HOUR, WEEK = 7 * DAY;
/** The Monday (UTC) that starts the report's second week, and the date it is. */
let reportWeekB = 0;
let reporting = null;

/**
 * A server of its own for the report: four runs in two projects over the two whole weeks before
 * this one, made as the SDK makes them (a process with its node's GPUs and price, an end with the
 * attempt and rank, GPU utilization as `sys/gpu.N.util` points, a sample a minute):
 *
 * | run           | project | user | week | GPUs | $/h (node) | minutes | spot | end       | busy (85 %)    |
 * | rep-v-big     | vision  | ana  | A    | 2    | 8          | 120     | no   | finished  | 3 minutes of 4 |
 * | rep-v-spot    | vision  | ben  | B    | 1    | 2          | 60      | yes  | finished  | every minute   |
 * | rep-n-nan     | nlp     | ana  | A    | 1    | 4          | 30      | no   | failed    | no series      |
 * | rep-n-preempt | nlp     | ben  | B    | 4    | 12         | 90      | yes  | preempted | no series      |
 *
 * So: cost 16 + 2 + 2 + 18 = $38; active GPU-hours above 10 %: 3 + 1 of 4 + 1 provisioned with a
 * series (80 %); spot 7 of 11.5 GPU-hours; 2 finished of 4 ended; week A costs $18 at 75 %, week B
 * $20 at 100 %; no run queued or restored a checkpoint.
 */
function reportInstallation() {
  reporting ??= (async () => {
    const { proc, url } = await startServer();
    const call = async (p, body) => {
      const r = await fetch(`${url}/api/v1${p}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
      if (!r.ok) throw new Error(`${p}: ${r.status} ${await r.text()}`);
      return r.json();
    };
    const day = Math.floor(Date.now() / DAY);
    const thisMonday = (day - ((day + 3) % 7)) * DAY;
    const weekA = thisMonday - 2 * WEEK;
    reportWeekB = thisMonday - WEEK;
    const runs = [
      { id: 'rep-v-big', project: 'vision', user: 'ana', start: weekA + DAY + 2 * HOUR, gpus: 2, usd: 8, minutes: 120, spot: false, end: ['finished', null], busyOf4: 3 },
      { id: 'rep-v-spot', project: 'vision', user: 'ben', start: reportWeekB + DAY + 2 * HOUR, gpus: 1, usd: 2, minutes: 60, spot: true, end: ['finished', null], busyOf4: 4 },
      { id: 'rep-n-nan', project: 'nlp', user: 'ana', start: weekA + 2 * DAY + 3 * HOUR, gpus: 1, usd: 4, minutes: 30, spot: false, end: ['failed', 'ValueError: loss is NaN'] },
      { id: 'rep-n-preempt', project: 'nlp', user: 'ben', start: reportWeekB + 2 * DAY + 3 * HOUR, gpus: 4, usd: 12, minutes: 90, spot: true, end: ['preempted', null] },
    ];
    for (const r of runs) {
      await call('/runs', { id: r.id, project: r.project, name: r.id.slice(4), user: r.user, start_time: r.start, params: {}, process: {
        rank: 0, world_size: 1, host: r.id, launcher: 'torchrun', job_id: 'job-' + r.id, restart: '0', cloud: 'aws', spot: r.spot,
        started_ms: r.start, node: { gpus: r.gpus, gpu_names: Array(r.gpus).fill('NVIDIA H100 80GB HBM3'), usd_per_hour: r.usd },
      } });
      await call(`/runs/${r.id}/finish`, { status: r.end[0], end_time: r.start + r.minutes * MINUTE, process: { attempt: 1, rank: 0, reason: r.end[1] } });
      if (r.busyOf4) {
        const points = [];
        for (let g = 0; g < r.gpus; g++) {
          for (let m = 0; m < r.minutes; m++) points.push({ key: `sys/gpu.${g}.util`, step: m, value: m % 4 < r.busyOf4 ? 85 : 3, timestamp: r.start + m * MINUTE });
        }
        await call(`/runs/${r.id}/metrics`, { points });
      }
    }
    const budget = await fetch(`${url}/api/v1/projects/vision/budget`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ monthly_usd: 100 }) });
    assert.equal(budget.status, 200, await budget.text());
    const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
    return { proc, url, context };
  })();
  return reporting;
}

after(async () => {
  if (!reporting) return;
  const { proc, context } = await reporting;
  await context.close();
  proc.kill('SIGTERM');
});

/** The report's tiles on the page: {figure: {value, target, met, reason}}. */
const reportTiles = (p) => p.getByTestId('report-tile').evaluateAll((ts) => Object.fromEntries(ts.map((t) => [t.dataset.figure, {
  value: t.querySelector('[data-testid=tile-value]').textContent,
  target: t.querySelector('[data-testid=tile-target]')?.textContent ?? null,
  met: t.querySelector('[data-testid=tile-target]')?.dataset.met ?? null,
  reason: t.querySelector('[data-testid=tile-reason]')?.textContent ?? null,
  title: t.title,
}])));

/** How many pixels of a canvas are near an RGB colour. */
const pixelsNear = (p, canvas, rgb) => canvas.evaluate((c, want) => {
  const { data } = c.getContext('2d').getImageData(0, 0, c.width, c.height);
  let n = 0;
  for (let i = 0; i < data.length; i += 4) {
    if (data[i + 3] > 0 && Math.abs(data[i] - want[0]) < 24 && Math.abs(data[i + 1] - want[1]) < 24 && Math.abs(data[i + 2] - want[2]) < 24) n++;
  }
  return n;
}, rgb);

test('the report shows each figure beside its target, why a figure is missing, a row per project, cost and utilization by week, and the runs behind them', async () => {
  const { url, context } = await reportInstallation();
  const p = await context.newPage();
  const errors = [];
  p.on('pageerror', (e) => errors.push(e.message));
  try {
    await p.goto(`${url}/#/`);
    await p.getByTestId('nav-report').click();
    await p.getByTestId('report-tiles').waitFor();
    assert.equal(await p.evaluate(() => location.hash.split('?')[0]), '#/report');
    assert.match(await p.getByTestId('report-scope').innerText(), /^4 runs started from \d{4}-\d\d-\d\d to \d{4}-\d\d-\d\d \(UTC\)/);
    assert.doesNotMatch(await p.getByTestId('report').innerText(), /\b(null|undefined|NaN)\b/);

    const tiles = await reportTiles(p);
    assert.deepEqual(Object.keys(tiles), ['gpu_utilization_rate', 'queue_wait_s', 'spot_savings_rate', 'spot_savings_usd', 'job_success_rate',
      'time_to_result_median_s', 'cost_usd', 'cost_per_gpu_hour_usd', 'cost_per_experiment_usd', 'idle_gpu_hours', 'failures',
      'checkpoint_restore_rate', 'experiments_per_user_week', 'energy_kwh']);
    // Spot prices the jobs reported have no on-demand price beside them: the saving is not guessed.
    assert.deepEqual([tiles.spot_savings_usd.value, tiles.spot_savings_usd.reason], ['—', 'the catalog has no on-demand price for the 2 spot run(s)']);
    assert.match(tiles.time_to_result_median_s.value, /^\d+h \d+m$/);
    assert.deepEqual([tiles.energy_kwh.value, tiles.energy_kwh.reason], ['—', "no run in this group measured its GPUs' energy"]);
    assert.equal(tiles.cost_usd.value, '$38.00');
    assert.deepEqual([tiles.gpu_utilization_rate.value, tiles.gpu_utilization_rate.target, tiles.gpu_utilization_rate.met], ['80 %', 'target ≥ 70 % · met', 'true']);
    assert.equal(tiles.gpu_utilization_rate.reason, '2 run(s) with GPUs have no GPU utilization series and are left out');
    assert.match(tiles.gpu_utilization_rate.title, /^active GPU-hours \/ provisioned GPU-hours/, 'the definition is the tooltip');
    assert.deepEqual([tiles.spot_savings_rate.value, tiles.spot_savings_rate.target, tiles.spot_savings_rate.met], ['60.9 %', 'target ≥ 50 % · met', 'true']);
    assert.equal(tiles.job_success_rate.value, '50 %');
    assert.equal(tiles.cost_per_gpu_hour_usd.value, '$4.50');
    assert.equal(tiles.cost_per_experiment_usd.value, '$9.50');
    assert.equal(tiles.idle_gpu_hours.value, '1');
    assert.equal(tiles.failures.value, '1 infra · 1 code');
    // A figure that cannot be computed: a dash, its target unjudged, and the reason.
    assert.deepEqual([tiles.queue_wait_s.value, tiles.queue_wait_s.target, tiles.queue_wait_s.met], ['—', 'target < 30 min', '']);
    assert.equal(tiles.queue_wait_s.reason, 'no run has a submit time (a sweep trial\'s or a launcher\'s)');
    assert.deepEqual([tiles.checkpoint_restore_rate.value, tiles.checkpoint_restore_rate.reason], ['—', 'no checkpoint of these runs was restored']);

    // Vision's budget with this month's spend, as the API says it.
    const spent = (await (await fetch(`${url}/api/v1/projects/vision/budget`)).json()).spent_usd;
    const budget = p.locator('[data-testid=report-budget][data-project=vision]');
    assert.equal(Number(await budget.getAttribute('data-spent')), spent);
    assert.match(await budget.getByTestId('budget-text').innerText(), new RegExp(`^\\$${spent.toFixed(2)} of \\$100\\.00 \\(`));

    // The breakdown: a row per project, and the total.
    const rows = p.getByTestId('report-group-row');
    assert.deepEqual(await rows.evaluateAll((rs) => rs.map((r) => r.dataset.group)), ['nlp', 'vision']);
    const cell = (group, figure) => p.locator(`[data-testid=report-group-row][data-group="${group}"] td[data-figure=${figure}]`);
    assert.equal(await cell('nlp', 'cost_usd').innerText(), '$20.00');
    assert.equal(await cell('vision', 'cost_usd').innerText(), '$18.00');
    assert.equal(await cell('vision', 'gpu_utilization_rate').innerText(), '80 %');
    assert.equal(await cell('nlp', 'gpu_utilization_rate').innerText(), '—');
    assert.equal(await cell('nlp', 'gpu_utilization_rate').getAttribute('title'), 'none of the 2 run(s) with GPUs has a GPU utilization series');
    assert.equal(await p.locator('[data-testid=report-total-row] td[data-figure=cost_usd]').innerText(), '$38.00');

    // Cost and utilization by week, drawn: teal bars and a blue line on the canvas.
    const trend = p.getByTestId('report-trend');
    await p.locator('[data-testid=report-trend][data-plot]').waitFor();
    assert.equal(await trend.getAttribute('data-weeks'), '2');
    const numbers = async (name) => (await trend.getAttribute(name)).split(',').map(Number);
    const near = (got, want, what) => assert.ok(got.length === want.length && got.every((v, i) => Math.abs(v - want[i]) < 1e-6), `${what}: ${got}`);
    near(await numbers('data-cost'), [18, 20], 'cost by week');
    near(await numbers('data-util'), [75, 100], 'utilization by week');
    const canvas = trend.locator('canvas');
    assert.ok(await pixelsNear(p, canvas, [15, 118, 110]) > 500, 'the cost bars are drawn');
    assert.ok(await pixelsNear(p, canvas, [37, 99, 235]) > 50, 'the utilization line is drawn');
    await p.screenshot({ path: path.join(shots, 'report.png'), fullPage: true });

    // The runs behind the figures, each a link to its run.
    const list = (name) => p.locator(`[data-testid=report-runs][data-list=${name}] [data-testid=report-run-row]`).evaluateAll((rs) => rs.map((r) => r.dataset.runId));
    assert.deepEqual((await list('most_expensive')).slice(0, 2), ['rep-n-preempt', 'rep-v-big']);
    assert.deepEqual(await list('idlest'), ['rep-v-big', 'rep-v-spot']);
    assert.deepEqual(await list('infra_failures'), ['rep-n-preempt']);
    assert.deepEqual(errors, []);
    await p.locator('[data-testid=report-runs][data-list=most_expensive] [data-testid=report-run-link]').first().click();
    await p.waitForFunction(() => location.hash === '#/run/rep-n-preempt');
    await p.getByTestId('run-info').filter({ hasText: 'rep-n-preempt' }).waitFor();
  } finally {
    await p.close();
  }
});

test('a project\'s report is linked from its runs table, keeps its period, breakdown and threshold in the address, and links a group to its runs', async () => {
  const { url, context } = await reportInstallation();
  const p = await context.newPage();
  const errors = [];
  p.on('pageerror', (e) => errors.push(e.message));
  try {
    await p.goto(`${url}/#/p/vision`);
    await p.getByTestId('report-link').click();
    await p.getByTestId('report-tiles').waitFor();
    assert.equal(await p.evaluate(() => location.hash.split('?')[0]), '#/report/vision');
    let tiles = await reportTiles(p);
    assert.equal(tiles.cost_usd.value, '$18.00');
    assert.equal(tiles.gpu_utilization_rate.value, '80 %');
    assert.equal(tiles.gpu_utilization_rate.reason, null, 'every run with GPUs has a series');
    const groups = () => p.getByTestId('report-group-row').evaluateAll((rs) => rs.map((r) => r.dataset.group));
    assert.deepEqual(await groups(), ['ana', 'ben'], 'a project breaks down by user');

    // A threshold above every busy sample: nothing is active.
    await p.getByTestId('report-active').selectOption('90');
    await p.locator('[data-testid=report-tile][data-figure=gpu_utilization_rate][data-value="0"]').waitFor();
    tiles = await reportTiles(p);
    assert.deepEqual([tiles.gpu_utilization_rate.value, tiles.gpu_utilization_rate.met], ['0 %', 'false']);
    assert.deepEqual([tiles.cost_per_gpu_hour_usd.value, tiles.cost_per_gpu_hour_usd.reason], ['—', 'the priced runs with a GPU series have no active GPU-hour']);

    // The second week only, by week.
    const weekB = new Date(reportWeekB).toISOString().slice(0, 10);
    const today = new Date().toISOString().slice(0, 10);
    await p.getByTestId('report-period').selectOption('dates');
    await p.getByTestId('report-from').fill(weekB);
    await p.getByTestId('report-to').fill(today);
    await p.getByTestId('report-by').selectOption('week');
    await p.locator(`[data-testid=report-group-row][data-group="${weekB}"]`).waitFor();
    assert.match(await p.getByTestId('report-scope').innerText(), /^1 run of vision started from /);
    assert.deepEqual(await groups(), [weekB]);
    const hash = await p.evaluate(() => location.hash);
    const q = new URLSearchParams(hash.split('?')[1]);
    assert.deepEqual(Object.fromEntries(q), { period: 'dates', from: weekB, to: today, by: 'week', active_above: '90' });

    // A reload shows the same report.
    await p.reload();
    await p.getByTestId('report-scope').filter({ hasText: /^1 run of vision started from / }).waitFor();
    assert.equal(await p.getByTestId('report-period').inputValue(), 'dates');
    assert.equal(await p.getByTestId('report-from').inputValue(), weekB);
    assert.equal(await p.getByTestId('report-by').inputValue(), 'week');
    assert.equal(await p.getByTestId('report-active').inputValue(), '90');
    assert.equal((await reportTiles(p)).cost_usd.value, '$2.00');
    await p.screenshot({ path: path.join(shots, 'report-project.png'), fullPage: true });

    // A user's runs, in the runs table.
    await p.getByTestId('report-by').selectOption('user');
    await p.getByTestId('report-period').selectOption('all');
    await p.waitForFunction(() => [...document.querySelectorAll('[data-testid=report-group-row]')].map((r) => r.dataset.group).join() === 'ana,ben');
    await p.locator('[data-testid=report-group-row][data-group=ana] [data-testid=report-group-runs]').click();
    await p.getByTestId('row-count').filter({ hasText: '1 run' }).waitFor();
    assert.deepEqual(await p.getByTestId('run-row').evaluateAll((rs) => rs.map((r) => r.dataset.runId)), ['rep-v-big']);
    assert.deepEqual(errors, []);
  } finally {
    await p.close();
  }
});
