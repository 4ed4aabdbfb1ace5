/* UI benchmark of a job's run page in headless Chromium against the real server: a 2-node job
 * with 16 GPUs (8 a node) recording what the collector records (9 series a GPU, 5 a node) for
 * 600 samples, and 5 metrics. Prints medians of: the first screen drawn (the run's title and
 * every chart placeholder within two screens drawn), and every system chart drawn (opening the
 * system section where it is collapsed, scrolling each chart into view).
 * Usage: node ui/tests/bench_system.mjs [UI_DIR ...]: each UI folder is served in turn
 * (TRAINLOG_UI_DIR), the embedded UI when none is given; TRAINLOG_BIN names the server binary.
 * Asserts nothing. */

import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

import { binary, launchBrowser } from './server.mjs';

const GPU_SERIES = ['util', 'sm_active', 'sm_occupancy', 'tensor_active', 'mem_used_bytes', 'mem_total_bytes', 'power_w', 'temp_c', 'energy_j'];
const NODE_SERIES = ['cpu.percent', 'proc.cpu_percent', 'ram.used_bytes', 'ram.total_bytes', 'proc.rss_bytes'];
const SAMPLES = 600, REPS = 5;

async function serve(uiDir) {
  const data = mkdtempSync(path.join(tmpdir(), 'trainlog-sysbench-'));
  const env = { ...process.env };
  if (uiDir) env.TRAINLOG_UI_DIR = path.resolve(uiDir); else delete env.TRAINLOG_UI_DIR;
  const proc = spawn(binary, ['server', '--port', '0', '--data', data], { stdio: ['ignore', 'pipe', 'ignore'], env });
  const base = await new Promise((resolve) => {
    let out = '';
    proc.stdout.on('data', (c) => { out += c; const m = out.match(/listening on (http:\S+)/); if (m) resolve(m[1]); });
  });
  return { proc, base };
}

async function seed(base) {
  const call = async (p, body) => (await fetch(`${base}/api/v1${p}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })).json();
  const run = await call('/runs', { project: 'jobs', name: 'two-nodes' });
  const start = Date.now() - SAMPLES * 10_000;
  for (let node = 0; node < 2; node++) {
    const points = [];
    for (let s = 0; s < SAMPLES; s++) {
      const timestamp = start + s * 10_000;
      for (let g = 0; g < 8; g++) for (const m of GPU_SERIES) points.push({ key: `sys/node/${node}/gpu.${g}.${m}`, step: s, value: 50 + 40 * Math.sin((s + g) / 30), timestamp });
      for (const m of NODE_SERIES) points.push({ key: `sys/node/${node}/${m}`, step: s, value: 30 + (s % 50), timestamp });
      if (node === 0) for (const m of ['loss', 'lr', 'grad_norm', 'val/loss', 'val/acc']) points.push({ key: m, step: s, value: Math.exp(-s / 200), timestamp });
    }
    for (let i = 0; i < points.length; i += 20_000) await call(`/runs/${run.id}/metrics`, { points: points.slice(i, i + 20_000) });
  }
  await call(`/runs/${run.id}/finish`, { status: 'finished' });
  await call('/admin/flush', {});
  return run.id;
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function measure(page, base, id) {
  await page.goto('about:blank');
  const t0 = performance.now();
  await page.goto(`${base}/#/run/${id}`);
  await page.getByTestId('run-title').waitFor();
  await page.waitForFunction(() => {
    const slots = [...document.querySelectorAll('[data-testid=chart-slot]')].filter((s) => s.getBoundingClientRect().top < 2 * innerHeight);
    return slots.length > 0 && slots.every((s) => s.dataset.loaded === '1' || s.closest('.hidden, details:not([open])'));
  }, null, { timeout: 120_000, polling: 20 });
  const first = performance.now() - t0;
  const t1 = performance.now();
  const section = page.getByTestId('system-section');
  if (await section.count()) await section.locator('summary').click();
  await page.getByTestId('system-charts').first().waitFor();
  for (let guard = 0; guard < 1000; guard++) {
    const waiting = page.locator('[data-testid=system-charts] [data-testid=chart-slot][data-loaded="0"]');
    if (!(await waiting.count())) break;
    await waiting.first().scrollIntoViewIfNeeded();
    await page.waitForTimeout(10);
  }
  const system = performance.now() - t1;
  const charts = await page.locator('[data-testid=system-charts] [data-testid=chart-slot]').count();
  return { first, system, charts };
}

const dirs = process.argv.slice(2);
const browser = await launchBrowser();
for (const dir of dirs.length ? dirs : [null]) {
  const { proc, base } = await serve(dir);
  try {
    const id = await seed(base);
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    const got = [];
    for (let i = 0; i < REPS; i++) got.push(await measure(page, base, id));
    await page.close();
    console.log(`${dir || 'embedded UI'}: 2-node job, 16 GPUs: first screen drawn ${median(got.map((g) => g.first)).toFixed(0)} ms, ` +
      `all ${got[0].charts} system charts drawn ${median(got.map((g) => g.system)).toFixed(0)} ms (medians of ${REPS})`);
  } finally {
    proc.kill('SIGTERM');
  }
}
await browser.close();
