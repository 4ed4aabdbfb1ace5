/* Browser tests of the media panels (run and compare pages): the real server binary on
 * 127.0.0.1 with media seeded over HTTP (real PNG bytes, a distinct width each, so an image
 * shown can be told from another by its natural size and its SHA-256; histograms, tables and
 * texts whose expected rendering the test computes), driven in headless Debian Chromium by
 * playwright-core. Screenshots go to target/ui-screenshots/. */

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { chromium } from 'playwright-core';

import { lineDiff } from '../lib/line-diff.js';
import { png } from './png.mjs';
import { repo, startServer } from './server.mjs';
const shots = path.join(repo, 'target/ui-screenshots');
const TEST_TIMEOUT = 60000;
let server, base, browser, page;

async function call(method, p, body, type = 'application/json') {
  const r = await fetch(`${base}/api/v1${p}`, { method, headers: { 'content-type': type }, body: type === 'application/json' ? JSON.stringify(body) : body });
  if (!r.ok) throw new Error(`${method} ${p}: ${r.status} ${await r.text()}`);
  return r.json();
}

/** Every image seeded gets the next width, so no two have the same bytes or natural size. */
let nextWidth = 6;
const seeded = new Map(); // `${run}|${key}|${step}` → {sha, width}

/** Uploads an image and records it as the item of `key` at `step` of run `id`. */
async function logImage(id, key, step, extra = {}) {
  const width = extra.width || nextWidth++;
  const height = extra.height || 6;
  const bytes = png(width, height, [(width * 37) % 256, (width * 91) % 256, (width * 53) % 256]);
  const sha = createHash('sha256').update(bytes).digest('hex');
  await call('PUT', `/runs/${id}/media/blobs/${sha}`, bytes, 'image/png');
  const { boxes, class_labels } = extra;
  let masks;
  if (extra.maskClass) {
    // A mask of one class id per pixel (here every pixel's red, green and blue).
    const mask = png(width, height, [extra.maskClass, extra.maskClass, extra.maskClass]);
    const maskSha = createHash('sha256').update(mask).digest('hex');
    await call('PUT', `/runs/${id}/media/blobs/${maskSha}`, mask, 'image/png');
    masks = [{ group: 'truth', blob: maskSha }];
  }
  await call('POST', `/runs/${id}/media`, { items: [{ key, step, index: 0, kind: 'image', blob: sha, mime: 'image/png', width, height, caption: `${key} at ${step}`, boxes, masks, class_labels }] });
  seeded.set(`${id}|${key}|${step}`, { sha, width });
}

const runs = {}; // name → id

/** The histogram of `key` at `step` seeded for run `id`: {edges, counts}. */
const seededHists = new Map(); // `${run}|${key}|${step}` → {edges, counts}

/** Logs histograms of `key` at `steps` for run `id`: 20 bins over [-2, 2], a bump that moves
 * right with the step (and with `shift`), a distinct count in each bin. */
async function logHistograms(id, key, steps, shift = 0) {
  const edges = Array.from({ length: 21 }, (_, i) => -2 + i * 0.2);
  const histograms = steps.map((step) => {
    const centre = 3 + step + shift;
    const counts = edges.slice(1).map((_, b) => Math.round(100 * Math.exp(-((b - centre) ** 2) / 8)) + b / 100);
    seededHists.set(`${id}|${key}|${step}`, { edges, counts });
    return { key, step, edges, counts };
  });
  assert.equal((await call('POST', `/runs/${id}/histograms`, { histograms })).recorded, steps.length);
}

/** A table's rows: [id, label, score] from `from` up to `to`, labels in turn, scores scattered
 * (never a whole number, so that every score is written as a float). */
const LABELS = ['cat', 'dog', 'bird'];
const tableRows = (from, to) => Array.from({ length: to - from }, (_, k) => {
  const i = from + k;
  return [i, LABELS[i % 3], (((i * 37) % 101) * 10 + 5) / 1000];
});

/** Logs a table part of `rows` under `key` at `step` of run `id` (`mode`: replace or append). */
async function logTable(id, key, step, rows, mode = 'replace') {
  const res = await call('POST', `/runs/${id}/tables?key=${encodeURIComponent(key)}&step=${step}&mode=${mode}`, { columns: ['id', 'label', 'score'], rows });
  assert.equal(res.rows, rows.length);
}

/** Logs `text` as the text item of `key` at `step` of run `id`. */
async function logText(id, key, step, text) {
  const bytes = Buffer.from(text);
  const sha = createHash('sha256').update(bytes).digest('hex');
  await call('PUT', `/runs/${id}/media/blobs/${sha}`, bytes, 'text/plain');
  await call('POST', `/runs/${id}/media`, { items: [{ key, step, kind: 'text', blob: sha, mime: 'text/plain' }] });
}

const BASE_TEXT = 'line one\nline two\nline three\n';
const CHANGED_TEXT = 'line one\nline 2\nline three\nline four\n';

before(async () => {
  ({ proc: server, url: base } = await startServer());
  const single = (await call('POST', '/runs', { project: 'media', name: 'single' })).id;
  runs.single = single;
  for (const step of [0, 10, 20]) {
    await logImage(single, 'samples', step);
    await logImage(single, 'other', step);
  }
  await logImage(single, 'detections', 0, {
    width: 40, height: 30, class_labels: { 1: 'cat', 2: 'dog' }, maskClass: 2,
    boxes: [
      { group: 'predictions', x_min: 0.25, y_min: 0.2, x_max: 0.75, y_max: 0.8, domain: 'fraction', class_id: 1, score: 0.9 },
      { group: 'ground_truth', x_min: 2, y_min: 3, x_max: 20, y_max: 25, domain: 'pixel', class_id: 2 },
    ],
  });
  const text = Buffer.from('hello from step 5\n');
  const textSha = createHash('sha256').update(text).digest('hex');
  await call('PUT', `/runs/${single}/media/blobs/${textSha}`, text, 'text/plain');
  await call('POST', `/runs/${single}/media`, { items: [{ key: 'notes', step: 5, kind: 'text', blob: textSha, mime: 'text/plain' }] });
  // Three runs to compare: c logs no step 10.
  for (const name of ['a', 'b', 'c']) {
    const id = (await call('POST', '/runs', { project: 'media', name: `cmp-${name}` })).id;
    runs[name] = id;
    for (const step of name === 'c' ? [0, 20] : [0, 10, 20]) {
      await logImage(id, 'samples', step);
      await logImage(id, 'other', step);
    }
  }
  // A run with histograms over ten steps and a table of 120 rows at step 0, 10 more appended at step 5.
  runs.data = (await call('POST', '/runs', { project: 'media', name: 'data' })).id;
  await logHistograms(runs.data, 'weights/fc1', [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
  await logTable(runs.data, 'preds', 0, tableRows(0, 120));
  await logTable(runs.data, 'preds', 5, tableRows(120, 130), 'append');
  // Three runs to compare histograms, tables and texts: each its own histograms and table rows;
  // y's text differs from x's, z's is the same.
  for (const [k, name] of ['x', 'y', 'z'].entries()) {
    const id = (await call('POST', '/runs', { project: 'media', name: `data-${name}` })).id;
    runs[name] = id;
    await logHistograms(id, 'weights/fc1', [0, 1, 2, 3, 4], 4 * k);
    await logTable(id, 'preds', 0, tableRows(100 * k, 100 * k + 10 + k));
    await logText(id, 'sample', 1, name === 'y' ? CHANGED_TEXT : BASE_TEXT);
  }
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
  mkdirSync(shots, { recursive: true });
});

after(async () => {
  await browser?.close();
  server?.kill('SIGTERM');
});

/** Opens `hash` of the UI in a new page (a page of its own per test: no state carried over). */
async function open(hash) {
  await page?.close();
  page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  await page.goto(`${base}/${hash}`);
  await page.getByTestId('media-section').waitFor();
}

const panel = (key) => page.locator(`[data-testid=media-panel][data-key="${key}"]`);

/** Waits until the panel of `key` shows `step`, with each of its images loaded; returns, per
 * column, the step it shows and its images' SHA-256 and natural widths. */
async function shown(key, step) {
  await panel(key).scrollIntoViewIfNeeded();
  const handle = await panel(key).elementHandle();
  await page.waitForFunction(([p, s]) => p.dataset.step === String(s) && p.querySelectorAll('[data-testid=media-column]').length > 0 &&
    [...p.querySelectorAll('img[data-testid=media-image]')].every((i) => i.complete && i.naturalWidth > 0), [handle, step]);
  return panel(key).locator('[data-testid=media-column]').evaluateAll((cols) => cols.map((c) => ({
    run: c.dataset.run, step: c.dataset.shownStep,
    images: [...c.querySelectorAll('img[data-testid=media-image]')].map((i) => ({ sha: i.dataset.sha, width: i.naturalWidth, src: i.getAttribute('src') })),
  })));
}

/** What the run's page should show for `key` at `step`: one column, its one image. */
const expectOne = (run, key, step) => {
  const s = seeded.get(`${run}|${key}|${step}`);
  return [{ run, step: String(step), images: [{ sha: s.sha, width: s.width, src: `/api/v1/runs/${run}/media/blobs/${s.sha}` }] }];
};

test('run page: moving one panel\'s slider changes that panel only', { timeout: TEST_TIMEOUT }, async () => {
  await open(`#/run/${runs.single}`);
  assert.deepEqual(await shown('samples', 20), expectOne(runs.single, 'samples', 20), 'a panel starts at its last step');
  assert.deepEqual(await shown('other', 20), expectOne(runs.single, 'other', 20));
  assert.equal(await panel('samples').getByTestId('media-step').innerText(), 'step 20');
  assert.equal(await panel('samples').getByTestId('media-caption').innerText(), 'samples at 20');

  await panel('samples').getByTestId('media-slider').focus();
  await page.keyboard.press('Home');
  assert.deepEqual(await shown('samples', 0), expectOne(runs.single, 'samples', 0));
  assert.equal(await panel('samples').getByTestId('media-step').innerText(), 'step 0');
  await page.keyboard.press('ArrowRight');
  assert.deepEqual(await shown('samples', 10), expectOne(runs.single, 'samples', 10), 'the slider moves over the steps logged');
  assert.deepEqual(await shown('other', 20), expectOne(runs.single, 'other', 20), 'the other panel stays');
  assert.equal(await panel('other').getByTestId('media-step').innerText(), 'step 20');
  assert.equal(await panel('other').getByTestId('media-slider').inputValue(), '2');

  await panel('notes').scrollIntoViewIfNeeded();
  await panel('notes').getByTestId('media-text').filter({ hasText: 'hello from step 5' }).waitFor();
  await page.screenshot({ path: path.join(shots, 'media-run.png'), fullPage: true });
});

test('run page: boxes are drawn over the image, and a group or class checkbox hides them', { timeout: TEST_TIMEOUT }, async () => {
  await open(`#/run/${runs.single}`);
  await shown('detections', 0);
  const boxes = panel('detections').getByTestId('media-box');
  await page.waitForFunction((p) => p.querySelectorAll('[data-testid=media-box]').length === 2, await panel('detections').elementHandle());
  const rects = await boxes.evaluateAll((gs) => gs.map((g) => {
    const r = g.querySelector('rect');
    const at = (a) => Math.round(1000 * Number(r.getAttribute(a))) / 1000;
    return { group: g.dataset.group, cls: g.dataset.class, x: at('x'), y: at('y'), w: at('width'), h: at('height'), shown: getComputedStyle(g).display !== 'none' };
  }));
  assert.deepEqual(rects, [
    { group: 'predictions', cls: '1', x: 10, y: 6, w: 20, h: 18, shown: true }, // fractions of 40×30
    { group: 'ground_truth', cls: '2', x: 2, y: 3, w: 18, h: 22, shown: true }, // pixels
  ]);
  assert.match(await boxes.first().locator('text').textContent(), /^cat 0\.9/);
  assert.equal(await boxes.nth(1).locator('text').textContent(), 'dog');
  // The overlay covers the image exactly.
  const img = await panel('detections').getByTestId('media-image').boundingBox();
  const over = await panel('detections').getByTestId('media-boxes').boundingBox();
  for (const k of ['x', 'y', 'width', 'height']) assert.ok(Math.abs(img[k] - over[k]) < 1.5, `overlay ${k}: ${over[k]} vs image ${img[k]}`);

  const visible = () => boxes.evaluateAll((gs) => gs.filter((g) => getComputedStyle(g).display !== 'none').map((g) => g.dataset.group));
  const group = panel('detections').locator('[data-testid=media-group-toggle][data-value=predictions]');
  await group.uncheck();
  assert.deepEqual(await visible(), ['ground_truth'], 'unchecking a group hides its boxes');
  // Each group lists the classes of its own boxes, by its labels.
  assert.deepEqual(await panel('detections').getByTestId('media-group').evaluateAll((gs) => gs.map((g) => [g.dataset.group,
    [...g.querySelectorAll('[data-testid=media-class-toggle]')].map((c) => c.parentElement.textContent.trim())])),
  [['ground_truth', ['dog']], ['predictions', ['cat']], ['truth', []]]);
  const dog = panel('detections').locator('[data-testid=media-class-toggle][data-group=ground_truth][data-value="2"]');
  await dog.uncheck();
  assert.deepEqual(await visible(), [], 'unchecking a class hides its boxes');
  await group.check();
  await dog.check();
  assert.deepEqual(await visible(), ['predictions', 'ground_truth']);

  // The mask is drawn over the image in its class's colour; its group's checkbox hides it.
  const mask = panel('detections').getByTestId('media-mask');
  await page.waitForFunction((m) => m.complete && m.naturalWidth === 40 && m.src.startsWith('data:image/png'), await mask.elementHandle());
  assert.notEqual(await mask.evaluate((m) => getComputedStyle(m).display), 'none');
  await panel('detections').locator('[data-testid=media-group-toggle][data-value=truth]').uncheck();
  assert.equal(await mask.evaluate((m) => getComputedStyle(m).display), 'none');
  await panel('detections').locator('[data-testid=media-group-toggle][data-value=truth]').check();

  // A click enlarges the image, its boxes with it; hidden groups stay hidden there.
  await group.uncheck();
  await panel('detections').getByTestId('media-image').click();
  const zoomed = page.getByTestId('media-zoom');
  await zoomed.waitFor();
  assert.equal(await zoomed.getByTestId('media-zoom-image').getAttribute('data-sha'), seeded.get(`${runs.single}|detections|0`).sha);
  await page.waitForFunction(() => document.querySelectorAll('[data-testid=media-zoom] [data-testid=media-box]').length === 2);
  assert.deepEqual(await zoomed.getByTestId('media-box').evaluateAll((gs) => gs.filter((g) => getComputedStyle(g).display !== 'none').map((g) => g.dataset.group)), ['ground_truth']);
  const big = await zoomed.getByTestId('media-zoom-image').boundingBox();
  assert.ok(big.width > img.width, `the zoomed image is larger (${big.width} > ${img.width})`);
  await page.screenshot({ path: path.join(shots, 'media-zoom.png') });
  await page.keyboard.press('Escape');
  await zoomed.waitFor({ state: 'detached' });
});

test('compare page: the runs\' images at one step side by side, a run without that step at its last before', { timeout: TEST_TIMEOUT }, async () => {
  const ids = [runs.a, runs.b, runs.c];
  await open(`#/compare/media/${ids.join(',')}`);
  const cols = await shown('samples', 20);
  assert.deepEqual(cols.map((c) => c.run), ids, 'a column per run, in order');
  for (const c of cols) {
    const s = seeded.get(`${c.run}|samples|20`);
    assert.equal(c.step, '20');
    assert.deepEqual(c.images.map((i) => [i.sha, i.width]), [[s.sha, s.width]], `run ${c.run} shows its own image`);
  }
  assert.equal(await panel('samples').locator('img[data-testid=media-image]').count(), 3);
  assert.deepEqual(await panel('samples').locator('.media-run').allInnerTexts(), ['cmp-a', 'cmp-b', 'cmp-c']);

  await panel('samples').getByTestId('media-slider').focus();
  await page.keyboard.press('ArrowLeft');
  const at10 = await shown('samples', 10);
  assert.deepEqual(at10.map((c) => c.step), ['10', '10', '0'], 'run c logged no step 10: its step 0 is shown');
  assert.deepEqual(at10[2].images.map((i) => i.sha), [seeded.get(`${runs.c}|samples|0`).sha]);
  assert.match(await panel('samples').locator(`[data-run="${runs.c}"]`).getByTestId('media-shown-step').innerText(), /step 0 \(last at or before 10\)/);
  await page.screenshot({ path: path.join(shots, 'media-compare.png'), fullPage: true });
});

test('compare page: with sync on, one slider moves every panel; off, only its own', { timeout: TEST_TIMEOUT }, async () => {
  const ids = [runs.a, runs.b, runs.c];
  await open(`#/compare/media/${ids.join(',')}`);
  await shown('other', 20);
  await shown('samples', 20);
  const sync = page.getByTestId('media-sync');
  assert.equal(await sync.isChecked(), false);

  await panel('samples').getByTestId('media-slider').focus();
  await page.keyboard.press('Home');
  await shown('samples', 0);
  const other = await shown('other', 20);
  assert.deepEqual(other.map((c) => c.images[0].sha), ids.map((id) => seeded.get(`${id}|other|20`).sha), 'sync off: the other panel stays');

  assert.equal(await panel('other').getByTestId('media-slider').inputValue(), '2', 'sync off: the other slider stays');

  await sync.check();
  // Turning sync on lines the panels up on the first panel's step ('other', at 20).
  await shown('samples', 20);
  await panel('samples').getByTestId('media-slider').focus();
  await page.keyboard.press('ArrowLeft');
  await shown('samples', 10);
  const moved = await shown('other', 10);
  assert.deepEqual(moved.map((c) => c.step), ['10', '10', '0']);
  assert.deepEqual(moved.map((c) => c.images[0].sha), [seeded.get(`${runs.a}|other|10`).sha, seeded.get(`${runs.b}|other|10`).sha, seeded.get(`${runs.c}|other|0`).sha]);
  assert.equal(await panel('other').getByTestId('media-slider').inputValue(), '1');

  await panel('other').getByTestId('media-slider').focus();
  await page.keyboard.press('End');
  await shown('other', 20);
  await shown('samples', 20);

  await sync.uncheck();
  await panel('other').getByTestId('media-slider').focus();
  await page.keyboard.press('Home');
  await shown('other', 0);
  assert.deepEqual((await shown('samples', 20)).map((c) => c.step), ['20', '20', '20'], 'sync off again: samples stays');
});

test('run page: a panel reads its steps and items only when near the viewport, one step at a time', { timeout: TEST_TIMEOUT }, async () => {
  await page?.close();
  page = await browser.newPage({ viewport: { width: 1400, height: 400 } });
  const asked = [];
  page.on('request', (r) => { if (r.url().includes('/media')) asked.push(new URL(r.url())); });
  await page.goto(`${base}/#/run/${runs.single}`);
  await page.getByTestId('media-section').waitFor();
  await page.getByTestId('media-panel').first().waitFor();
  // The first panel is within a screen of the top of the page: it loads without scrolling.
  await page.waitForFunction((p) => p.dataset.loaded !== '0', await panel('detections').elementHandle());
  const forKey = (key) => asked.filter((u) => u.searchParams.get('key') === key);
  assert.equal(await panel('samples').getAttribute('data-loaded'), '0', 'a panel far below waits');
  assert.deepEqual(forKey('samples'), [], 'and asks for nothing');
  assert.ok(forKey('detections').length > 0);

  await shown('samples', 20);
  const items = forKey('samples').filter((u) => u.pathname.endsWith('/media'));
  assert.ok(items.length > 0);
  for (const u of items) {
    assert.equal(u.searchParams.get('step_min'), u.searchParams.get('step_max'), `one step only: ${u.search}`);
    assert.equal(u.searchParams.get('step_min'), '20');
  }
});

/** Waits until the panel of `key` shows `step` (scrolled to, so that it loads). */
async function panelAt(key, step) {
  await panel(key).scrollIntoViewIfNeeded();
  await page.waitForFunction(([p, s]) => p.dataset.step === String(s) && p.querySelectorAll('[data-testid=media-column]').length > 0,
    [await panel(key).elementHandle(), step]);
}

/** Per column of the panel of `key`: its run, and the step and bin counts of the histogram drawn as bars. */
const histBars = (key) => panel(key).getByTestId('media-column').evaluateAll((cols) => cols.map((c) => {
  const s = c.querySelector('[data-testid=media-histogram-bars]');
  return { run: c.dataset.run, step: s && s.dataset.step, counts: s ? [...s.querySelectorAll('[data-testid=media-histogram-bar]')].map((r) => Number(r.dataset.count)) : [] };
}));

test('line diff: common lines kept, removed lines before added ones, a large middle shown whole', () => {
  const ops = (d) => d.ops.map((o) => `${o.op} ${o.line}`);
  assert.deepEqual(ops(lineDiff(BASE_TEXT, CHANGED_TEXT)), ['eq line one', 'del line two', 'add line 2', 'eq line three', 'add line four']);
  assert.deepEqual(ops(lineDiff('a\r\nb\r\n', 'a\nb')), ['eq a', 'eq b'], 'line ends do not count');
  assert.deepEqual(ops(lineDiff('', 'x\n')), ['add x']);
  assert.deepEqual(ops(lineDiff('x\ny\n', '')), ['del x', 'del y']);
  assert.deepEqual(ops(lineDiff('a\nb\nc\nd', 'b\nc\nd\ne')), ['del a', 'eq b', 'eq c', 'eq d', 'add e']);
  const big = lineDiff(Array.from({ length: 2100 }, (_, i) => `a${i}`).join('\n'), Array.from({ length: 2100 }, (_, i) => `b${i}`).join('\n'));
  assert.equal(big.exact, false);
  assert.deepEqual([big.removed, big.added], [2100, 2100]);
});

test('run page: histograms over the steps as a heatmap, the chosen step\'s histogram as bars', { timeout: TEST_TIMEOUT }, async () => {
  await open(`#/run/${runs.data}`);
  const key = 'weights/fc1';
  await panelAt(key, 9);
  assert.equal(await panel(key).getAttribute('data-kind'), 'histogram');
  const heat = panel(key).getByTestId('media-histogram-heatmap');
  assert.equal(await heat.getAttribute('data-histograms'), '10', 'every step is drawn');
  const painted = () => heat.evaluate((c) => {
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let opaque = 0, sum = 0;
    const colours = new Set();
    for (let i = 0; i < d.length; i += 4) {
      if (!d[i + 3]) continue;
      opaque++;
      colours.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
      sum = (sum * 31 + d[i] * 7 + d[i + 1] * 3 + d[i + 2] + i) % 1000000007;
    }
    return { share: opaque / (c.width * c.height), colours: colours.size, sum };
  });
  const at9 = await painted();
  assert.ok(at9.share > 0.2, `the heatmap is painted (${at9.share} of its pixels)`);
  assert.ok(at9.colours > 5, `in several colours (${at9.colours})`);
  const seeded9 = seededHists.get(`${runs.data}|${key}|9`);
  assert.deepEqual(await histBars(key), [{ run: runs.data, step: '9', counts: seeded9.counts }], 'the last step\'s bins as bars');
  // The tallest bar is the bin with the most.
  const heights = await panel(key).getByTestId('media-histogram-bar').evaluateAll((rs) => rs.map((r) => Number(r.getAttribute('height'))));
  assert.equal(heights.indexOf(Math.max(...heights)), seeded9.counts.indexOf(Math.max(...seeded9.counts)));

  await panel(key).getByTestId('media-slider').focus();
  await page.keyboard.press('Home');
  await panelAt(key, 0);
  assert.deepEqual((await histBars(key))[0].counts, seededHists.get(`${runs.data}|${key}|0`).counts);
  assert.notEqual((await painted()).sum, at9.sum, 'the marker moved with the step');
  await page.screenshot({ path: path.join(shots, 'media-histogram.png'), fullPage: true });

  // A click on the heatmap shows the step there.
  const box = await heat.boundingBox();
  await heat.click({ position: { x: box.width * 0.97, y: box.height / 2 } });
  await panelAt(key, 9);
  assert.equal(await panel(key).getByTestId('media-slider').inputValue(), '9');
  await heat.click({ position: { x: box.width * 0.33, y: box.height / 2 } });
  await panelAt(key, 3);
  assert.deepEqual((await histBars(key))[0].counts, seededHists.get(`${runs.data}|${key}|3`).counts);
});

test('run page: a table as of the step, sorted, filtered and paged by the server', { timeout: TEST_TIMEOUT }, async () => {
  await open(`#/run/${runs.data}`);
  await panelAt('preds', 5);
  assert.equal(await panel('preds').getAttribute('data-kind'), 'table');
  const table = panel('preds').getByTestId('media-table');
  const handle = await table.elementHandle();
  const settled = () => page.waitForFunction((n) => n.dataset.loading === '0', handle);
  const state = async () => {
    await settled();
    return table.evaluate((n) => ({
      matched: Number(n.dataset.matched), total: Number(n.dataset.total), step: n.dataset.step,
      range: n.querySelector('[data-testid=media-table-range]').textContent,
      rows: [...n.querySelectorAll('[data-testid=media-table-row]')].map((r) => [...r.children].map((td) => td.textContent)),
    }));
  };
  const all = tableRows(0, 130);
  let s = await state();
  assert.deepEqual([s.step, s.matched, s.total, s.range], ['5', 130, 130, 'rows 1–50 of 130 · 2 parts'], 'step 5: both parts, 130 rows');
  assert.deepEqual(s.rows[0], ['0', 'cat', '0.005'], 'in the order logged');
  assert.equal(s.rows.length, 50);

  // A click on a header sorts by it; another, the other way.
  const header = (name) => table.locator(`[data-testid=media-table-header][data-column="${name}"]`);
  const scores = all.map((r) => r[2]);
  await header('score').click();
  s = await state();
  assert.equal(Number(s.rows[0][2]), Math.min(...scores));
  await header('score').click();
  s = await state();
  assert.equal(Number(s.rows[0][2]), Math.max(...scores), 'descending: the highest score first');
  assert.notDeepEqual(s.rows[0], ['0', 'cat', '0.005'], 'the first row changed');
  assert.equal(await header('score').getAttribute('aria-sort'), 'descending');
  const byScore = s.rows.map((r) => Number(r[2]));
  assert.deepEqual(byScore, [...byScore].sort((a, b) => b - a));

  await table.getByTestId('media-table-next').click();
  s = await state();
  assert.equal(s.range, 'rows 51–100 of 130 · 2 parts');

  // A filter narrows the rows matched, from the first page.
  await table.getByTestId('media-table-filter-column').selectOption('label');
  await table.getByTestId('media-table-filter-op').selectOption('eq');
  await table.getByTestId('media-table-filter-value').fill('dog');
  await table.getByTestId('media-table-filter-apply').click();
  s = await state();
  const dogs = all.filter((r) => r[1] === 'dog');
  assert.deepEqual([s.matched, s.total], [dogs.length, 130]);
  assert.equal(s.range, `rows 1–${dogs.length} of ${dogs.length} (130 before the filter) · 2 parts`);
  assert.ok(s.rows.every((r) => r[1] === 'dog'));
  assert.equal(Number(s.rows[0][2]), Math.max(...dogs.map((r) => r[2])), 'still sorted');

  await table.getByTestId('media-table-filter-column').selectOption('score');
  await table.getByTestId('media-table-filter-op').selectOption('gt');
  await table.getByTestId('media-table-filter-value').fill('0.5');
  await table.getByTestId('media-table-filter-value').press('Enter');
  s = await state();
  assert.equal(s.matched, all.filter((r) => r[2] > 0.5).length, 'a number compared as a number');
  await page.screenshot({ path: path.join(shots, 'media-table.png'), fullPage: true });

  // At step 0 only the first part: the sort and the filter stay.
  await panel('preds').getByTestId('media-slider').focus();
  await page.keyboard.press('Home');
  await panelAt('preds', 0);
  s = await state();
  assert.deepEqual([s.step, s.total, s.matched], ['0', 120, all.slice(0, 120).filter((r) => r[2] > 0.5).length]);

  await table.getByTestId('media-table-filter-clear').click();
  s = await state();
  assert.deepEqual([s.matched, s.total, s.range], [120, 120, 'rows 1–50 of 120']);
});

test('compare page: a histogram per run at the chosen step, two runs\' tables side by side, a text diff', { timeout: TEST_TIMEOUT }, async () => {
  const ids = [runs.x, runs.y, runs.z];
  await open(`#/compare/media/${ids.join(',')}`);
  const key = 'weights/fc1';
  await panelAt(key, 4);
  assert.equal(await panel(key).getByTestId('media-histogram-heatmap').count(), 3, 'a heatmap per run');
  assert.deepEqual(await histBars(key), ids.map((id) => ({ run: id, step: '4', counts: seededHists.get(`${id}|${key}|4`).counts })));
  await panel(key).getByTestId('media-slider').focus();
  await page.keyboard.press('ArrowLeft');
  await panelAt(key, 3);
  assert.deepEqual(await histBars(key), ids.map((id) => ({ run: id, step: '3', counts: seededHists.get(`${id}|${key}|3`).counts })));

  // Tables: the first two runs side by side; a picker swaps in the third; each sorts on its own.
  await panelAt('preds', 0);
  const tables = panel('preds').getByTestId('media-table');
  const tablesState = async () => {
    await page.waitForFunction((p) => [...p.querySelectorAll('[data-testid=media-table]')].every((t) => t.dataset.loading === '0'), await panel('preds').elementHandle());
    return tables.evaluateAll((ts) => ts.map((t) => ({
      run: t.dataset.run, matched: Number(t.dataset.matched), sort: `${t.dataset.sort} ${t.dataset.order}`.trim(),
      first: t.querySelector('[data-testid=media-table-row] td').textContent,
    })));
  };
  assert.deepEqual(await tablesState(), [
    { run: runs.x, matched: 10, sort: '', first: '0' },
    { run: runs.y, matched: 11, sort: '', first: '100' },
  ]);
  await panel('preds').getByTestId('media-table-run').nth(1).selectOption({ label: 'data-z' });
  await page.waitForFunction(([p, z]) => p.querySelectorAll('[data-testid=media-table]')[1]?.dataset.run === z, [await panel('preds').elementHandle(), runs.z]);
  const first = tables.first();
  await first.locator('[data-testid=media-table-header][data-column=id]').click();
  await page.waitForFunction((t) => t.dataset.loading === '0' && t.dataset.order === 'asc', await first.elementHandle());
  await first.locator('[data-testid=media-table-header][data-column=id]').click();
  await page.waitForFunction((t) => t.dataset.loading === '0' && t.dataset.order === 'desc', await first.elementHandle());
  assert.deepEqual(await tablesState(), [
    { run: runs.x, matched: 10, sort: 'id desc', first: '9' },
    { run: runs.z, matched: 12, sort: '', first: '200' },
  ]);

  // Text: a diff against the first run's, on request.
  await panelAt('sample', 1);
  const toggle = panel('sample').getByTestId('media-diff-toggle');
  assert.equal(await panel('sample').getByTestId('media-diff').count(), 0, 'no diff until asked');
  await toggle.check();
  await page.waitForFunction((p) => p.querySelectorAll('[data-testid=media-diff]').length === 2, await panel('sample').elementHandle());
  const diffs = await panel('sample').getByTestId('media-column').evaluateAll((cols) => cols.map((c) => {
    const d = c.querySelector('[data-testid=media-diff]');
    return {
      run: c.dataset.run, summary: d ? d.querySelector('[data-testid=media-diff-summary]').textContent : null,
      lines: d ? [...d.querySelectorAll('[data-testid=media-diff-line]')].map((l) => `${l.dataset.op} ${l.textContent.slice(1)}`) : [],
    };
  }));
  assert.deepEqual(diffs, [
    { run: runs.x, summary: null, lines: [] },
    { run: runs.y, summary: '+2 −1 lines against data-x', lines: ['eq line one', 'del line two', 'add line 2', 'eq line three', 'add line four'] },
    { run: runs.z, summary: 'the same as data-x', lines: ['eq line one', 'eq line two', 'eq line three'] },
  ]);
  const baseText = panel('sample').locator(`[data-run="${runs.x}"]`).getByTestId('media-text');
  await baseText.filter({ hasText: 'line two' }).waitFor();
  assert.equal(await baseText.textContent(), BASE_TEXT, 'the first run\'s text as it is');
  await page.screenshot({ path: path.join(shots, 'media-compare-data.png'), fullPage: true });
  await toggle.uncheck();
  await page.waitForFunction((p) => p.querySelectorAll('[data-testid=media-diff]').length === 0 && p.querySelectorAll('[data-testid=media-text]').length === 3, await panel('sample').elementHandle());
});
