// The trainlog binary the UI tests drive: started on 127.0.0.1, port 0, with a temporary data
// folder, answering once it prints its ready line.
import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const binary = process.env.TRAINLOG_BIN || path.join(repo, 'target/release/trainlog');

export function startServer(extra = [], data = mkdtempSync(path.join(tmpdir(), 'trainlog-ui-'))) {
  const proc = spawn(binary, ['server', '--host', '127.0.0.1', '--port', '0', '--data', data, ...extra], { stdio: ['ignore', 'pipe', 'inherit'] });
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

/** Headless Debian Chromium (`CHROMIUM` names another), as every browser test and benchmark drives it. */
export function launchBrowser() {
  return import('playwright-core').then(({ chromium }) => chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
  }));
}
