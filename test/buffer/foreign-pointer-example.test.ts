/** examples/foreign-pointer.ts (a CUdeviceptr from "C code" as a DeviceArray) runs to completion on the selected backend. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

test('examples/foreign-pointer runs: wrapped without a copy, read in the C context, handed back, freed by C', () => {
  const example = fileURLToPath(new URL('../../examples/foreign-pointer.js', import.meta.url));
  const output = execFileSync(process.execPath, [example], { encoding: 'utf8', env: process.env });
  assert.match(output, /matrix: 0 1 2 3 10 11 12 13 20 21 22 23/);
  assert.match(output, /column 1: 1 11 21/);
  assert.match(output, /handed back to C\n.*C freed the matrix/s);
});
