/* The vendored chart library in ui/vendor is byte for byte the release pinned in package.json
 * (npm checks that release against the integrity hash in package-lock.json). */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const vendored = path.join(here, '../vendor/uplot');
const released = path.join(here, 'node_modules/uplot');
const pinned = JSON.parse(readFileSync(path.join(here, 'package.json'), 'utf8')).dependencies.uplot;

test('the vendored uPlot is the pinned release, with its license', () => {
  assert.equal(JSON.parse(readFileSync(path.join(released, 'package.json'), 'utf8')).version, pinned);
  for (const [mine, theirs] of [['uPlot.iife.min.js', 'dist/uPlot.iife.min.js'], ['uPlot.min.css', 'dist/uPlot.min.css'], ['LICENSE', 'LICENSE']]) {
    assert.ok(readFileSync(path.join(vendored, mine)).equals(readFileSync(path.join(released, theirs))), `ui/vendor/uplot/${mine} differs from uplot ${pinned}`);
  }
  assert.match(readFileSync(path.join(vendored, 'uPlot.iife.min.js'), 'utf8'), new RegExp(`\\(v${pinned.replace(/\./g, '\\.')}\\)`));
});
