/* Browser tests of what the run page shows and does about watching a run: its alerts (raised over
 * the HTTP API as the SDK raises them, a repeat folded) and the Stop button, which asks the
 * server to stop a running run. The real server binary on 127.0.0.1, headless Debian Chromium
 * driven by playwright-core. */

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { launchBrowser, startServer } from './server.mjs';
const TEST_TIMEOUT = 60000;
let server, base, browser;

async function call(method, p, body) {
  const r = await fetch(`${base}/api/v1${p}`, { method, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  if (!r.ok) throw new Error(`${method} ${p}: ${r.status} ${await r.text()}`);
  return r.json();
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

test("a run's alerts show on its page, newest first, a folded repeat counted", { timeout: TEST_TIMEOUT }, async () => {
  const id = (await call('POST', '/runs', { project: 'watch', name: 'diverging' })).id;
  await call('POST', `/runs/${id}/alerts`, { title: 'loss spiked', text: 'x5 in 10 steps', level: 'warn', step: 40 });
  await call('POST', `/runs/${id}/alerts`, { title: 'loss is NaN', level: 'error', step: 90, wait_duration: 600 });
  await call('POST', `/runs/${id}/alerts`, { title: 'loss is NaN', level: 'error', step: 91, wait_duration: 600 });
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  try {
    await page.goto(`${base}/#/run/${id}`);
    await page.getByTestId('alerts').waitFor();
    const rows = await page.getByTestId('alert-row').evaluateAll((trs) => trs.map((tr) => [...tr.cells].map((td) => td.textContent)));
    assert.deepEqual(rows.map((r) => [r[1], r[2], r[3], r[4], r[5]]), [
      ['error', '90', 'loss is NaN', '×2', 'from code'],
      ['warn', '40', 'loss spikedx5 in 10 steps', '', 'from code'],
    ]);
  } finally {
    await page.close();
  }
});

test('the Stop button asks the server to stop a running run, and is not offered for an ended one', { timeout: TEST_TIMEOUT }, async () => {
  const running = (await call('POST', '/runs', { project: 'watch', name: 'long' })).id;
  const done = (await call('POST', '/runs', { project: 'watch', name: 'done' })).id;
  await call('POST', `/runs/${done}/finish`, { status: 'finished' });
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  try {
    page.on('dialog', (dialog) => dialog.accept());
    await page.goto(`${base}/#/run/${running}`);
    const stop = page.getByTestId('stop-run');
    await stop.click();
    await page.waitForFunction(() => document.querySelector('[data-testid="stop-run"]')?.textContent === 'Stopping…');
    assert.equal(await stop.isDisabled(), true);
    // The stop is kept on the run: asking again answers the first one, made from the UI.
    const asked = await call('POST', `/runs/${running}/stop`, {});
    assert.deepEqual([asked.by, asked.reason], ['someone', 'from the UI']);
    await page.goto(`${base}/#/run/${done}`);
    await page.getByTestId('edit-run').waitFor();
    assert.equal(await page.getByTestId('stop-run').count(), 0);
  } finally {
    await page.close();
  }
});

test("a project's inbox marks what the reader has not read, and the projects list counts it", { timeout: TEST_TIMEOUT }, async () => {
  const id = (await call('POST', '/runs', { project: 'inbox', name: 'noisy' })).id;
  await call('POST', `/runs/${id}/alerts`, { title: 'loss spiked', level: 'warn', step: 3 });
  await call('POST', `/runs/${id}/alerts`, { title: 'loss is NaN', level: 'error', step: 7 });
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  try {
    await page.goto(`${base}/#/`);
    const badge = page.locator('tr', { hasText: 'inbox' }).filter({ has: page.locator('a[href="#/p/inbox"]') }).getByTestId('unread-alerts');
    assert.equal(await badge.textContent(), '2 new');
    await page.locator('a[href="#/alerts/inbox"]').click();
    await page.getByTestId('inbox').waitFor();
    assert.equal(await page.getByTestId('unread-count').textContent(), '2 unread');
    const rows = await page.getByTestId('inbox-row').evaluateAll((trs) => trs.map((tr) => [tr.dataset.unread, tr.cells[3].textContent, tr.cells[4].textContent]));
    assert.deepEqual(rows, [['1', '7', 'loss is NaN'], ['1', '3', 'loss spiked']]);
    await page.getByTestId('mark-read').click();
    await page.waitForFunction(() => document.querySelector('[data-testid="unread-count"]')?.textContent === '0 unread');
    // A new alert is the only unread one.
    await call('POST', `/runs/${id}/alerts`, { title: 'stalled', level: 'error' });
    await page.reload();
    await page.getByTestId('inbox').waitFor();
    const unread = await page.getByTestId('inbox-row').evaluateAll((trs) => trs.filter((tr) => tr.dataset.unread === '1').map((tr) => tr.cells[4].textContent));
    assert.deepEqual(unread, ['stalled']);
    await page.goto(`${base}/#/`);
    await page.getByTestId('projects-list').waitFor();
    assert.equal(await page.locator('a[href="#/alerts/inbox"]').textContent(), '1 new');
  } finally {
    await page.close();
  }
});

test("the rules page adds and removes a rule, says a bad one's field, and shows when each fired", { timeout: TEST_TIMEOUT }, async () => {
  const id = (await call('POST', '/runs', { project: 'ruled-ui', name: 'r' })).id;
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  try {
    await page.goto(`${base}/#/alerts/ruled-ui`);
    await page.getByTestId('rule-input').fill('loss is bad');
    await page.getByTestId('add-rule').click();
    await page.waitForFunction(() => document.querySelector('[data-testid="rule-error"]')?.textContent.startsWith('rule: '));
    await page.getByTestId('rule-input').fill('loss not finite');
    await page.getByTestId('add-rule').click();
    await page.getByTestId('rule-row').waitFor();
    assert.equal(await page.getByTestId('rule-last-fired').textContent(), 'never');
    await call('POST', `/runs/${id}/metrics`, { points: [{ key: 'loss', step: 4, value: 'NaN' }] });
    const deadline = Date.now() + 20000;
    let fired = 'never';
    while (fired === 'never' && Date.now() < deadline) {
      await page.reload();
      await page.getByTestId('rule-row').waitFor();
      fired = await page.getByTestId('rule-last-fired').textContent();
    }
    assert.notEqual(fired, 'never');
    assert.equal(await page.getByTestId('rule-row').locator('td').nth(2).textContent(), '1');
    await page.getByTestId('remove-rule').click();
    await page.waitForFunction(() => !document.querySelector('[data-testid="rule-row"]'));
  } finally {
    await page.close();
  }
});

test("a run's alerts mark its metric charts at their steps", { timeout: TEST_TIMEOUT }, async () => {
  const id = (await call('POST', '/runs', { project: 'marked', name: 'm' })).id;
  await call('POST', `/runs/${id}/metrics`, { points: Array.from({ length: 50 }, (_, i) => ({ key: 'loss', step: i, value: 1 / (i + 1) })) });
  await call('POST', `/runs/${id}/alerts`, { title: 'spike', level: 'warn', step: 20 });
  await call('POST', `/runs/${id}/alerts`, { title: 'no step', level: 'info' });
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  try {
    await page.goto(`${base}/#/run/${id}`);
    const plot = page.locator('[data-testid="chart"][data-key="loss"]');
    await page.waitForFunction(() => document.querySelector('[data-testid="chart"][data-key="loss"]')?.dataset.markers === '1');
    assert.equal(await plot.getAttribute('data-markers'), '1');
  } finally {
    await page.close();
  }
});

test('the runs table offers Stop on running rows, which asks the server to stop the run', { timeout: TEST_TIMEOUT }, async () => {
  const running = (await call('POST', '/runs', { project: 'table-stop', name: 'long' })).id;
  const done = (await call('POST', '/runs', { project: 'table-stop', name: 'done' })).id;
  await call('POST', `/runs/${done}/finish`, { status: 'finished' });
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  try {
    page.on('dialog', (dialog) => dialog.accept());
    await page.goto(`${base}/#/p/table-stop`);
    const stop = page.getByTestId('row-stop');
    await stop.waitFor();
    assert.equal(await stop.count(), 1, 'only the running run');
    await stop.click();
    await page.waitForFunction(() => document.querySelector('[data-testid="row-stop"]')?.textContent === 'Stopping…');
    const asked = await call('POST', `/runs/${running}/stop`, {});
    assert.deepEqual([asked.by, asked.reason], ['someone', 'from the runs table']);
  } finally {
    await page.close();
  }
});
