/* Browser tests of a run's console logs: a run of a million lines from four ranks scrolled,
 * searched, filtered, jumped to a step and followed, with its colours, through the real server
 * binary on 127.0.0.1 in headless Debian Chromium driven by playwright-core. */

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { launchBrowser, startServer } from './server.mjs';

const TEST_TIMEOUT = 180000;
const LINES = 1_000_000;
const RANKS = 4;
const NEEDLE_AT = 777_777;
let server, base, browser, runId;

async function call(method, p, body) {
  const r = await fetch(`${base}/api/v1${p}`, { method, headers: { 'content-type': 'application/json' }, body: typeof body === 'string' ? body : JSON.stringify(body) });
  if (!r.ok) throw new Error(`${method} ${p}: ${r.status} ${await r.text()}`);
  return r.json();
}

const T0 = Date.UTC(2026, 10, 29, 3, 0, 0);

/** Line i of the run: rank i % 4, step i / 1000, a colour every 1000 lines, one needle. */
function lineOf(i) {
  let text = `epoch ${Math.floor(i / 100_000)} batch ${i} loss=${(1 / (1 + i / 1000)).toFixed(5)}`;
  if (i % 1000 === 0) text = `\u001b[31mcheckpoint\u001b[0m at line ${i}`;
  if (i === NEEDLE_AT) text = 'RuntimeError: a needle in the haystack';
  return { seq: Math.floor(i / RANKS), time: T0 + i, step: Math.floor(i / 1000), stream: i === NEEDLE_AT ? 'stderr' : 'stdout', text };
}

async function postLines(from, to) {
  const byRank = Array.from({ length: RANKS }, () => []);
  for (let i = from; i < to; i++) byRank[i % RANKS].push(lineOf(i));
  for (let r = 0; r < RANKS; r++) {
    if (!byRank[r].length) continue;
    await call('POST', `/runs/${runId}/logs`, { process: `p${r}`, rank: r, node: `gpu-node-${r % 2}`, attempt: 1, lines: byRank[r] });
  }
}

async function withPage(fn) {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
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
  runId = (await call('POST', '/runs', { project: 'console', name: 'a million lines' })).id;
  await call('POST', `/runs/${runId}/metrics`, { points: Array.from({ length: 1000 }, (_, s) => ({ key: 'loss', step: s, value: 1 / (s + 1) })) });
  const began = Date.now();
  // Four ranks' batches of 2,500 lines each, in order.
  for (let from = 0; from < LINES; from += 10_000) await postLines(from, from + 10_000);
  console.log(`# posted ${LINES} lines in ${Date.now() - began} ms`);
});

after(async () => {
  await browser?.close();
  server?.kill('SIGTERM');
});

const counts = (page) => page.locator('[data-testid=log-counts]');
const firstRow = (page) => page.locator('[data-testid=log-rows] .log-row[data-n]').first();

/** Waits until the viewport's visible rows are drawn (none pending), answers the first's `n`. */
async function drawnFrom(page) {
  await page.waitForFunction(() => {
    const rows = [...document.querySelectorAll('[data-testid=log-rows] .log-row')];
    const vp = document.querySelector('[data-testid=log-viewport]').getBoundingClientRect();
    const visible = rows.filter((r) => { const b = r.getBoundingClientRect(); return b.bottom > vp.top && b.top < vp.bottom; });
    return visible.length > 10 && visible.every((r) => r.dataset.n);
  });
  return page.evaluate(() => {
    const vp = document.querySelector('[data-testid=log-viewport]').getBoundingClientRect();
    const row = [...document.querySelectorAll('[data-testid=log-rows] .log-row[data-n]')].find((r) => r.getBoundingClientRect().bottom > vp.top + 2);
    return Number(row.dataset.n);
  });
}

test('a million lines scroll with a bounded number of rows drawn, anywhere in the run', { timeout: TEST_TIMEOUT }, async () => {
  await withPage(async (page) => {
    await page.goto(`${base}/#/run/${runId}/logs`);
    await page.waitForFunction(() => document.querySelector('[data-testid=log-counts]')?.dataset.total === '1000000');
    assert.equal(await counts(page).textContent(), '1,000,000 lines');
    assert.equal(await drawnFrom(page), 0);
    const timings = [];
    for (const fraction of [0.5, 0.25, 0.9, 0.1, 1]) {
      const began = Date.now();
      const target = await page.evaluate((f) => {
        const vp = document.querySelector('[data-testid=log-viewport]');
        vp.scrollTop = (vp.scrollHeight - vp.clientHeight) * f;
        return f;
      }, fraction);
      const first = await drawnFrom(page);
      timings.push(Date.now() - began);
      const expected = Math.round(target * (LINES - 47));
      assert.ok(Math.abs(first - expected) < 100, `scrolled to ${fraction}: first line ${first}, expected about ${expected}`);
      const text = await page.locator(`[data-testid=log-rows] .log-row[data-n="${first}"] .log-text`).textContent();
      assert.equal(text, first % 1000 === 0 ? `checkpoint at line ${first}` : lineOf(first).text);
      const drawn = await page.locator('[data-testid=log-rows] .log-row').count();
      assert.ok(drawn < 150, `${drawn} rows drawn`);
    }
    timings.sort((a, b) => a - b);
    console.log(`# scroll to a new place, lines drawn: median ${timings[2]} ms (of ${timings.join(', ')})`);
    // Colours: the checkpoint lines are red, as the program printed them.
    await page.evaluate(() => { const vp = document.querySelector('[data-testid=log-viewport]'); vp.scrollTop = 0; });
    await drawnFrom(page);
    const red = await page.locator('[data-testid=log-rows] .log-row[data-n="0"] .log-text span').first().evaluate((s) => getComputedStyle(s).color);
    assert.equal(red, 'rgb(207, 34, 46)');
    assert.equal(await page.locator('[data-testid=log-rows] .log-row[data-n="1"]').getAttribute('data-rank'), '1');
  });
});

test('a search finds the one failing line and marks it; rank and stream filters and a step jump narrow the list', { timeout: TEST_TIMEOUT }, async () => {
  await withPage(async (page) => {
    await page.goto(`${base}/#/run/${runId}/logs`);
    await page.waitForFunction(() => document.querySelector('[data-testid=log-counts]')?.dataset.total === '1000000');
    await page.fill('[data-testid=log-search]', 'NEEDLE');
    await page.waitForFunction(() => document.querySelector('[data-testid=log-counts]')?.dataset.matched === '1');
    assert.equal(await counts(page).textContent(), '1 of 1,000,000 lines');
    await page.waitForSelector('[data-testid=log-match]');
    assert.equal(await page.locator('[data-testid=log-match]').textContent(), 'needle');
    assert.equal(await firstRow(page).getAttribute('data-n'), String(NEEDLE_AT));
    assert.match(page.url(), /q=NEEDLE/);
    // The same search as a regular expression.
    await page.fill('[data-testid=log-search]', '^\\w+Error:');
    await page.check('[data-testid=log-regex]');
    await page.waitForFunction(() => document.querySelector('[data-testid=log-counts]')?.dataset.matched === '1');
    await page.fill('[data-testid=log-search]', '');
    await page.waitForFunction(() => document.querySelector('[data-testid=log-counts]')?.dataset.matched === '1000000');
    await page.selectOption('[data-testid=log-rank]', '2');
    await page.waitForFunction(() => document.querySelector('[data-testid=log-counts]')?.dataset.matched === '250000');
    await page.selectOption('[data-testid=log-stream]', 'stderr');
    await page.waitForFunction(() => document.querySelector('[data-testid=log-counts]')?.dataset.matched === '0');
    await page.selectOption('[data-testid=log-rank]', '');
    await page.waitForFunction(() => document.querySelector('[data-testid=log-counts]')?.dataset.matched === '1');
    await page.selectOption('[data-testid=log-stream]', '');
    await page.waitForFunction(() => document.querySelector('[data-testid=log-counts]')?.dataset.matched === '1000000');
    // Jump to a step: the lines printed once step 500 was logged.
    await page.fill('[data-testid=log-step]', '500');
    await page.click('[data-testid=log-step-form] button');
    await page.waitForFunction(() => document.querySelector('[data-testid=log-viewport]').dataset.jumped);
    const first = await drawnFrom(page);
    assert.ok(first >= 499_990 && first <= 500_000, `first line shown ${first}`);
    // The download holds every line of the filter, as text.
    const href = await page.locator('[data-testid=log-download]').getAttribute('href');
    const text = await (await fetch(base + href.replace(/^\/api\/v1/, '/api/v1') + '&q=needle')).text();
    assert.match(text, /^2026-11-29T03:12:57\.777Z rank 1 stderr \| RuntimeError: a needle in the haystack\n$/);
  });
});

test('follow: new lines appear at the bottom as they are printed; the run page links a chart step to its lines', { timeout: TEST_TIMEOUT }, async () => {
  await withPage(async (page) => {
    await page.goto(`${base}/#/run/${runId}/logs?follow=true`);
    await page.waitForFunction(() => document.querySelector('[data-testid=log-counts]')?.dataset.total === '1000000');
    assert.equal(await page.locator('[data-testid=log-follow]').isChecked(), true);
    await drawnFrom(page);
    await call('POST', `/runs/${runId}/logs`, { process: 'late', rank: 0, node: 'gpu-node-0', attempt: 1,
      lines: [0, 1, 2].map((k) => ({ seq: k, time: T0 + LINES + k, step: 1000, stream: 'stdout', text: `followed line ${k}` })) });
    await page.waitForFunction(() => [...document.querySelectorAll('[data-testid=log-rows] .log-text')].some((t) => t.textContent === 'followed line 2'));
    assert.equal(await counts(page).getAttribute('data-total'), '1000003');
    const lastVisible = await page.evaluate(() => {
      const vp = document.querySelector('[data-testid=log-viewport]').getBoundingClientRect();
      const row = [...document.querySelectorAll('[data-testid=log-rows] .log-row')].find((r) => r.textContent.includes('followed line 2'));
      const b = row.getBoundingClientRect();
      return b.top >= vp.top && b.bottom <= vp.bottom + 1;
    });
    assert.ok(lastVisible, 'the newest line is in view');

    // The run page: its tabs, and a click on a chart offers the lines at that step.
    await page.goto(`${base}/#/run/${runId}`);
    await page.waitForSelector('[data-testid=run-tabs] [data-testid=tab-logs]');
    const plot = page.locator('[data-testid=metric-charts] .u-over').first();
    await plot.waitFor();
    const box = await plot.boundingBox();
    await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
    await page.mouse.click(box.x + box.width / 2, box.y + box.height / 2);
    const link = page.locator('[data-testid=logs-at-step]');
    await link.waitFor({ state: 'visible' });
    const step = Number((await link.getAttribute('href')).split('step=')[1]);
    assert.ok(step > 300 && step < 700, `step ${step}`);
    await link.click();
    await page.waitForFunction(() => document.querySelector('[data-testid=log-viewport]')?.dataset.jumped);
    const first = await drawnFrom(page);
    const shownStep = Number(await page.locator(`[data-testid=log-rows] .log-row[data-n="${first + 5}"]`).getAttribute('data-step'));
    assert.equal(shownStep, step);
  });
});
