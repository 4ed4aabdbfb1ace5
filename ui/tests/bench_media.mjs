/* Media benchmark in headless Chromium against the real server: a compare page of 10 runs that
 * each logged a 512x512 image at 200 steps (with their JPEG thumbnails), opened cold; the time to
 * the first thumbnail drawn and to every thumbnail on screen at the panel's step, counted from
 * the navigation (the panel is scrolled into view as soon as it exists).
 * Prints medians of 5 cold opens (a fresh browser context each); asserts nothing.
 * Usage: node ui/tests/bench_media.mjs (needs .venv with trainlog); TRAINLOG_BIN names another binary. */

import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const RUNS = 10;
const STEPS = 200;
const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const data = mkdtempSync(path.join(tmpdir(), 'trainlog-mediabench-'));
const binary = process.env.TRAINLOG_BIN || path.join(repo, 'target/release/trainlog');
const server = spawn(binary, ['server', '--port', '0', '--data', data], { stdio: ['ignore', 'pipe', 'ignore'] });
const base = await new Promise((resolve) => {
  let out = '';
  server.stdout.on('data', (c) => { out += c; const m = out.match(/listening on (http:\S+)/); if (m) resolve(m[1]); });
});

const seed = `
import sys, numpy as np, trainlog
ids = []
for r in range(${RUNS}):
    run = trainlog.init(project="media-bench", name=f"run-{r}", server=sys.argv[1], system_metrics_interval=None,
                        capture_environment=False, capture_code=False, cost=False, handle_sigterm=False)
    rng = np.random.default_rng(r)
    base = rng.integers(0, 256, size=(512, 512, 3), dtype=np.uint8)
    for step in range(${STEPS}):
        run.log({"samples": trainlog.Image(np.roll(base, step, axis=1), caption=f"run {r} step {step}"), "loss": 1 / (step + 1)}, step=step)
    report = run.finish()
    assert report["media_sent"] == ${STEPS}, report
    ids.append(run.id)
print(",".join(ids))
`;
const t0 = Date.now();
const ids = execFileSync(path.join(repo, '.venv/bin/python'), ['-c', seed, base], { encoding: 'utf8' }).trim().split('\n').pop();
console.log(`seeded ${RUNS} runs x ${STEPS} steps of 512x512 images in ${((Date.now() - t0) / 1000).toFixed(0)} s`);

const browser = await chromium.launch({ executablePath: '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'] });
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const drawn = () => [...document.querySelectorAll('[data-testid=media-panel][data-key=samples] img[data-testid=media-image]')]
  .filter((img) => img.complete && img.naturalWidth > 0).length;
const first = [];
const all = [];
let onScreen = 0;
const shownAt = [];
for (let i = 0; i < 5; i++) {
  const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  const page = await context.newPage();
  const start = Date.now();
  await page.goto(`${base}/#/compare/media/${ids}`);
  // The media section is below the charts of the runs' numbers: brought into view, as a user
  // scrolls to it; its panels load as they near the viewport.
  const samples = page.locator('[data-testid=media-panel][data-key=samples]');
  await samples.waitFor({ timeout: 60000 });
  shownAt.push(Date.now() - start);
  await samples.scrollIntoViewIfNeeded();
  await page.waitForFunction(drawn, null, { timeout: 60000, polling: 10 });
  first.push(Date.now() - start);
  // Every image of the panel that is on screen drawn (those below the fold load lazily).
  const visible = await page.waitForFunction(() => {
    const imgs = [...document.querySelectorAll('[data-testid=media-panel][data-key=samples] img[data-testid=media-image]')]
      .filter((img) => { const r = img.getBoundingClientRect(); return r.bottom > 0 && r.top < innerHeight && r.right > 0 && r.left < innerWidth; });
    return imgs.length > 0 && imgs.every((img) => img.complete && img.naturalWidth > 0) && imgs.length;
  }, null, { timeout: 60000, polling: 10 });
  onScreen = await visible.jsonValue();
  all.push(Date.now() - start);
  console.error(`open ${i + 1}: ${first[i]} / ${all[i]} ms`);
  await context.close();
}
console.log(`compare page of ${RUNS} runs x ${STEPS} steps of images, cold: media panel on the page ${median(shownAt)} ms, first thumbnail ${median(first)} ms, every thumbnail on screen (${onScreen} of ${RUNS} runs) ${median(all)} ms (medians of 5; each: ${first.join(', ')} / ${all.join(', ')})`);
await browser.close();
server.kill('SIGTERM');
