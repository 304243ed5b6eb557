/**
 * The kernel examples run to completion on the selected backend: Chroma's mesh (mapped
 * write-combined memory read in place by a user kernel, then the same with place()).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

function runExample(name: string, args: readonly string[] = []): string {
  const example = fileURLToPath(new URL(`../examples/${name}.js`, import.meta.url));
  return execFileSync(process.execPath, [example, ...args], { encoding: 'utf8', env: process.env });
}

test('examples/chroma-mesh: areas read from mapped write-combined memory equal those from placed memory', () => {
  const output = runExample('chroma-mesh');
  assert.match(output, /^mapped write-combined: 20000 triangles, block \d+, total area 1\.2807\d\d$/m);
  assert.match(output, /^placed in (device|mapped) memory \(indices in (device|mapped)\): total area 1\.2807\d\d$/m);
  assert.match(output, /^same areas both ways; within 1e-5 of the float64 reference/m);
});
