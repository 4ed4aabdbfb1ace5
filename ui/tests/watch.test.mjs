/* Browser tests of what the run page shows and does about watching a run: its alerts (raised over
 * the HTTP API as the SDK raises them, a repeat folded) and the Stop button, which asks the
 * server to stop a running run. The real server binary on 127.0.0.1, headless Debian Chromium
 * driven by playwright-core. */

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { chromium } from 'playwright-core';

import { startServer } from './server.mjs';
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
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
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
