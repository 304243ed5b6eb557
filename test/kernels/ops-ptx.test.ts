/**
 * The shipped PTX (src/kernels/ops/shipped-ptx.ts) matches the built-in sources generated now:
 * every fixed source has an entry recording its SHA-256, and its PTX's first line names the same
 * hash (both backends, so CI catches a kernel change without a regenerated PTX); where nvcc of the
 * release that compiled it is on PATH, compiling again gives the same PTX, byte for byte past the
 * banner; on a GPU, every shipped PTX loads.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { gpuOnly } from '../helpers.js';
import { Device } from '../../src/device.js';
import { Module } from '../../src/kernels/module.js';
import { BUILTIN_COMPILE_OPTIONS, PTX_HEADER_PREFIX, shippedPtxFor, sourceSha256 } from '../../src/kernels/ops/builtin-module.js';
import { builtinSources } from '../../src/kernels/ops/builtin-sources.js';
import { packLayout } from '../../src/kernels/ops/kernel-layout.js';
import { REDUCE_BLOCK, reduceSignatures } from '../../src/kernels/ops/reduction-kernels.js';
import { DeviceArray } from '../../src/array/device-array.js';
import { SHIPPED_PTX_COMPILER, shippedPtx } from '../../src/kernels/ops/shipped-ptx.js';

const REGENERATE = 'regenerate it: npm run build && node scripts/generate-builtin-ptx.mjs';

interface PtxScript {
  nvccRelease(): Promise<string | undefined>;
  compilePtx(source: string, sha256: string, options: readonly string[]): Promise<string>;
  inParallel<T>(jobs: readonly (() => Promise<T>)[]): Promise<T[]>;
}

/** The generator script (plain JavaScript beside the package, outside the TypeScript build). */
async function script(): Promise<PtxScript> {
  const url = new URL('../../../scripts/generate-builtin-ptx.mjs', import.meta.url);
  return (await import(fileURLToPath(url))) as PtxScript;
}

test('every fixed built-in source has shipped PTX made from exactly that source, and nothing else ships', () => {
  const sources = builtinSources();
  assert.equal(sources.length, 49);
  for (const { name, source } of sources) {
    const entry = shippedPtx[name];
    assert.ok(entry !== undefined, `no shipped PTX for ${name}: ${REGENERATE}`);
    assert.equal(entry.sourceSha256, sourceSha256(source), `the shipped PTX of ${name} was made from another source: ${REGENERATE}`);
    const ptx = shippedPtxFor(name, source);
    assert.ok(ptx !== undefined);
    assert.equal(ptx.split('\n')[0], `${PTX_HEADER_PREFIX}${entry.sourceSha256}`, `${name}: the header line names the source's hash`);
    assert.match(ptx, /^\.version \d+\.\d+$/m);
    assert.match(ptx, /^\.target sm_75$/m);
  }
  assert.deepEqual(Object.keys(shippedPtx).sort(), sources.map((s) => s.name).sort(), `stale entries: ${REGENERATE}`);
});

test('nvcc compiles the sources to the shipped PTX byte for byte (where nvcc of the same release is on PATH)', async (t) => {
  const { nvccRelease, compilePtx, inParallel } = await script();
  const release = await nvccRelease();
  if (release === undefined) return t.skip('nvcc is not on PATH');
  if (release !== SHIPPED_PTX_COMPILER) return t.skip(`nvcc here is ${release}; the PTX was compiled by ${SHIPPED_PTX_COMPILER}`);
  const sources = builtinSources();
  const compiled = await inParallel(
    sources.map(
      ({ source }) =>
        () =>
          compilePtx(source, sourceSha256(source), BUILTIN_COMPILE_OPTIONS),
    ),
  );
  sources.forEach(({ name, source }, i) => {
    assert.equal(compiled[i], shippedPtxFor(name, source), `${name}: ${REGENERATE}`);
  });
});

test("the shipped PTX of sum-float32 sums on the device, both passes (the fallback's code path without NVRTC)", gpuOnly, () => {
  const device = Device.get(0);
  const source = builtinSources().find((s) => s.name === 'sum-float32')!.source;
  using module = Module.fromPtx(shippedPtxFor('sum-float32', source)!, { device });
  const main = module.kernel('vram_sum_float32', reduceSignatures.main);
  const finish = module.kernel('vram_sum_float32_finish', reduceSignatures.finish);
  const n = 100_003;
  using a = DeviceArray.from(new Float32Array(n).fill(0.5));
  using partials = DeviceArray.empty([8], 'float32');
  using out = DeviceArray.empty([1], 'float32');
  const layout = packLayout([n], [1]);
  main.launch({ grid: 8, block: REDUCE_BLOCK }, a, layout, packLayout([], []), a, layout, 1, n, 1, out, partials);
  finish.launch({ grid: 1, block: REDUCE_BLOCK }, partials, 8, out);
  assert.equal(out.toHost()[0], n / 2);
});

test('every shipped PTX loads on the device and has its kernels', gpuOnly, () => {
  const device = Device.get(0);
  for (const { name, source } of builtinSources()) {
    using module = Module.fromPtx(shippedPtxFor(name, source)!, { device });
    const kernels =
      name === 'basic' ? ['vram_fill', 'vram_copy', 'vram_astype', 'vram_arange'] : [`vram_${name.replace('-', '_')}`, `vram_${name.replace('-', '_')}_finish`];
    for (const k of kernels) assert.ok(module.kernel(k, []).name === k, `${name}: ${k}`);
  }
});
