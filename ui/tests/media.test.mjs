/* Browser tests of the media panels (run and compare pages): the real server binary on
 * 127.0.0.1 with media seeded over HTTP (real PNG bytes, a distinct width each, so an image
 * shown can be told from another by its natural size and its SHA-256), driven in headless Debian
 * Chromium by playwright-core. Screenshots go to target/ui-screenshots/. */

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { deflateSync } from 'node:zlib';
import { chromium } from 'playwright-core';

import { repo, startServer } from './server.mjs';
const shots = path.join(repo, 'target/ui-screenshots');
const TEST_TIMEOUT = 60000;
let server, base, browser, page;

async function call(method, p, body, type = 'application/json') {
  const r = await fetch(`${base}/api/v1${p}`, { method, headers: { 'content-type': type }, body: type === 'application/json' ? JSON.stringify(body) : body });
  if (!r.ok) throw new Error(`${method} ${p}: ${r.status} ${await r.text()}`);
  return r.json();
}

/* PNG bytes: an RGB image of one colour. */
const CRC_TABLE = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});
function crc32(buf) {
  let c = 0xffffffff;
  for (const b of buf) c = CRC_TABLE[(c ^ b) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}
function chunk(type, data) {
  const len = Buffer.alloc(4);
  len.writeUInt32BE(data.length);
  const td = Buffer.concat([Buffer.from(type, 'ascii'), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(td));
  return Buffer.concat([len, td, crc]);
}
function png(width, height, [r, g, b]) {
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr[8] = 8; ihdr[9] = 2; // 8 bits, RGB
  const row = Buffer.concat([Buffer.from([0]), Buffer.from(Array.from({ length: width }, () => [r, g, b]).flat())]);
  const raw = Buffer.concat(Array.from({ length: height }, () => row));
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk('IHDR', ihdr), chunk('IDAT', deflateSync(raw)), chunk('IEND', Buffer.alloc(0))]);
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
  const dog = panel('detections').locator('[data-testid=media-class-toggle][data-value="2"]');
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
