/**
 * The kernel examples run to completion on the selected backend: Accelerate's foreign pointer
 * (on a GPU, the C side is examples/native/accelerate.c, built here with nvcc) and Chroma's mesh
 * (mapped write-combined memory read in place by a user kernel, then the same with place()).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { onGpu } from '../helpers.js';

function runExample(name: string, args: readonly string[] = []): string {
  const example = fileURLToPath(new URL(`../../examples/${name}.js`, import.meta.url));
  return execFileSync(process.execPath, [example, ...args], { encoding: 'utf8', env: process.env });
}

test('examples/chroma-mesh: areas read from mapped write-combined memory equal those from placed memory', () => {
  const output = runExample('chroma-mesh');
  assert.match(output, /^mapped write-combined: 20000 triangles, block \d+, total area 1\.2807\d\d$/m);
  assert.match(output, /^placed in (device|mapped) memory \(indices in (device|mapped)\): total area 1\.2807\d\d$/m);
  assert.match(output, /^same areas both ways; within 1e-5 of the float64 reference/m);
});

test('examples/accelerate: a CUdeviceptr from C wrapped without a copy, sum 496, zipWith(+) 0 3 6 .., freed by C', () => {
  const dir = mkdtempSync(join(tmpdir(), 'vram-accelerate-'));
  try {
    const args: string[] = [];
    if (onGpu) {
      // The C side for real: compiled with nvcc against the driver API, loaded by the example with koffi.
      const library = join(dir, 'libaccelerate.so');
      const source = fileURLToPath(new URL('../../../examples/native/accelerate.c', import.meta.url));
      execFileSync('nvcc', ['-shared', '-Xcompiler', '-fPIC', '-o', library, source, '-lcuda'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
      args.push(library);
    }
    const output = runExample('accelerate', args);
    assert.match(output, onGpu ? /^C \(.*libaccelerate\.so\) handed over CUdeviceptr 0x[0-9a-f]+$/m : /handed over CUdeviceptr 0x[0-9a-f]+$/m);
    assert.match(output, /^sum: 496$/m);
    assert.match(output, /^zipWith\(\+\): 0 3 6 9 12 15 \.\. 93$/m);
    assert.match(output, /^handed back; the C side freed it$/m);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
