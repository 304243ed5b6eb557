/** FixedSizeResource: model fuzz, growth by chunks, stream order, bad input, release. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { getBackend } from '../../src/backend/select.js';
import { Device } from '../../src/device.js';
import { DoubleFreeError, InvalidPointerError } from '../../src/errors.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';
import { FixedSizeResource } from '../../src/resource/suballoc/fixed-size.js';
import { factories, runModel } from '../fuzz/allocator-model.js';

const backend = getBackend();
Device.get(0).makeCurrent();

test('FixedSizeResource: random allocate/free on 3 streams keeps every invariant', () => {
  const f = factories.find((x) => x.name === 'FixedSizeResource')!;
  for (const seed of [21, 22, 23]) runModel(f, { seed, ops: 3000 });
});

test('blocks of exactly blockSize, grown in chunks, released when idle', () => {
  const before = backend.memGetInfo().free;
  const fixed = new FixedSizeResource(new CudaResource(), { blockSize: 4096, blocksToPreallocate: 4 });
  const ptrs = Array.from({ length: 5 }, () => fixed.allocate(100));
  assert.equal(fixed.reservedBytes, 2 * 4 * 4096);
  assert.equal(new Set(ptrs).size, 5);
  assert.throws(() => fixed.allocate(4097), RangeError);
  assert.throws(() => fixed.allocate(0), RangeError);
  assert.throws(() => fixed.deallocate(ptrs[0]!, 101), InvalidPointerError);
  assert.throws(() => fixed.deallocate(7, 100), InvalidPointerError);
  fixed.deallocate(ptrs[0]!, 100);
  assert.throws(() => fixed.deallocate(ptrs[0]!, 100), DoubleFreeError);
  fixed.deallocate(ptrs[4]!, 100);
  const released = fixed.releaseCached();
  assert.ok(released === 4 * 4096 || released === 0);
  for (const p of ptrs.slice(1, 4)) fixed.deallocate(p, 100);
  fixed.releaseCached();
  assert.equal(fixed.reservedBytes, 0);
  fixed.destroy();
  // Exact on the emulated device; a real GPU's free figure moves with the driver's own use.
  if (backend.name === 'emulated') assert.equal(backend.memGetInfo().free, before);
});

test('a block freed on stream A goes to stream B only after B waits on an event on A', () => {
  const calls: string[] = [];
  const wait = backend.streamWaitEvent.bind(backend);
  backend.streamWaitEvent = (s, e) => {
    calls.push(`wait ${s}`);
    wait(s, e);
  };
  const A = { handle: backend.streamCreate(0, 0) };
  const B = { handle: backend.streamCreate(0, 0) };
  try {
    const fixed = new FixedSizeResource(new CudaResource(), { blockSize: 4096, blocksToPreallocate: 1 });
    const p = fixed.allocate(4096, A);
    fixed.deallocate(p, 4096, A);
    assert.equal(fixed.allocate(4096, A), p, 'same stream: at once');
    fixed.deallocate(p, 4096, A);
    assert.deepEqual(calls, []);
    assert.equal(fixed.allocate(4096, B), p);
    assert.deepEqual(calls, [`wait ${B.handle}`]);
    fixed.deallocate(p, 4096, B);
    fixed.destroy();
  } finally {
    backend.streamWaitEvent = wait;
    backend.streamDestroy(A.handle);
    backend.streamDestroy(B.handle);
  }
});
