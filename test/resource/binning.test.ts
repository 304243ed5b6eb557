/** BinningResource: model fuzz, routing, custom bins, bad input. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { getBackend } from '../../src/backend/select.js';
import { Device } from '../../src/device.js';
import { InvalidPointerError } from '../../src/errors.js';
import { BinningResource } from '../../src/resource/suballoc/binning.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';
import { FixedSizeResource } from '../../src/resource/suballoc/fixed-size.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import { factories, runModel } from '../fuzz/allocator-model.js';

const backend = getBackend();
Device.get(0).makeCurrent();

test('BinningResource: random allocate/free on 3 streams keeps every invariant', () => {
  const f = factories.find((x) => x.name === 'BinningResource')!;
  for (const seed of [31, 32, 33]) runModel(f, { seed, ops: 3000 });
});

test('requests go to the smallest bin that fits, larger ones upstream', () => {
  const before = backend.memGetInfo().free;
  const upstream = new CudaResource();
  const pool = new PoolResource({ upstream });
  const bin = new BinningResource(upstream, { minSizeExponent: 10, maxSizeExponent: 12 });
  bin.addBin(64 * 1024, pool);
  assert.deepEqual(bin.binSizes, [1024, 2048, 4096, 65536]);
  const small = bin.allocate(1000);
  const mid = bin.allocate(3000);
  const big = bin.allocate(60000);
  const huge = bin.allocate(1 << 20);
  assert.equal(pool.memoryFigures().allocations.value, 1, '60000 bytes went to the 64 KiB bin');
  assert.throws(() => bin.deallocate(small, 3000), InvalidPointerError, 'wrong size routes to a bin that does not know it');
  assert.throws(() => bin.allocate(-1), RangeError);
  bin.deallocate(small, 1000);
  bin.deallocate(mid, 3000);
  bin.deallocate(big, 60000);
  bin.deallocate(huge, 1 << 20);
  bin.releaseCached();
  bin.destroy();
  pool.destroy();
  // Exact on the emulated device; a real GPU's free figure moves with the driver's own use.
  if (backend.name === 'emulated') assert.equal(backend.memGetInfo().free, before);
  assert.throws(() => new BinningResource(upstream, { minSizeExponent: 5 }), TypeError);
  assert.ok(new BinningResource(upstream).addBin(512, new FixedSizeResource(upstream, { blockSize: 512 })).binSizes.length === 1);
});
