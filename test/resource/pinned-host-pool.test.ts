/** PinnedHostPool: model fuzz, reuse guarded by events, caching limit, bad input. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { getBackend } from '../../src/backend/select.js';
import { Device } from '../../src/device.js';
import { DoubleFreeError, InvalidPointerError, UseAfterFreeError } from '../../src/errors.js';
import { PinnedHostPool } from '../../src/resource/suballoc/pinned-host-pool.js';
import { PinnedHostResource } from '../../src/resource/upstream/pinned-host-resource.js';
import { onLeak, type LeakRecord } from '../../src/backstop.js';
import { forceGc, needsGc } from '../helpers.js';
import { factories, runModel } from '../fuzz/allocator-model.js';

const backend = getBackend();
Device.get(0).makeCurrent();

test('PinnedHostPool: random allocate/free keeps every invariant', () => {
  const f = factories.find((x) => x.name === 'PinnedHostPool')!;
  for (const seed of [41, 42]) runModel(f, { seed, ops: 2000 });
});

test('acquire/free: chunks are reused, views are zero-copy, released chunks refuse use', () => {
  const pool = new PinnedHostPool();
  const a = pool.acquire(100_000);
  assert.ok(a.capacity >= 100_000 && a.capacity <= 125_000);
  a.view().fill(9);
  const ptr = a.ptr;
  a.free();
  assert.throws(() => a.view(), UseAfterFreeError);
  assert.throws(() => a.free(), DoubleFreeError);
  const b = pool.acquire(110_000);
  assert.equal(b.ptr, ptr, 'same size class: the idle buffer is reused');
  b.free();
  assert.equal(pool.releaseCached(), a.capacity);
  assert.equal(pool.reservedBytes, 0);
  pool.destroy();
});

test('a buffer freed with a stream is reused only after that stream reached the free', () => {
  const pool = new PinnedHostPool();
  const s = backend.streamCreate(0, 0);
  const dev = backend.memAlloc(1 << 20);
  try {
    const chunk = pool.acquire(1 << 20);
    chunk.view().fill(5);
    backend.memcpyAsync(dev, chunk.ptr, 1 << 20, s);
    chunk.free({ handle: s });
    const next = pool.acquire(1 << 20);
    // Whether it is the same buffer or not, the copy of the 5s must have completed before reuse.
    if (next.ptr === chunk.ptr) next.view().fill(6);
    backend.streamSynchronize(s);
    const out = new Uint8Array(8);
    backend.memcpyToHost(out, dev, 8);
    assert.deepEqual([...out], new Array(8).fill(5));
    next.free();
  } finally {
    backend.memFree(dev);
    backend.streamDestroy(s);
    pool.destroy();
  }
});

test('idle bytes above maximumCachedBytes are freed; bad input is typed', () => {
  const pool = new PinnedHostPool({ maximumCachedBytes: 64 * 1024 });
  const ptrs = [pool.allocate(40_000), pool.allocate(40_000), pool.allocate(40_000)];
  for (const p of ptrs) pool.deallocate(p, 40_000);
  assert.ok(pool.idleBytes <= 64 * 1024);
  assert.throws(() => pool.allocate(0), RangeError);
  const p = pool.allocate(1000);
  assert.throws(() => pool.deallocate(p, 999), InvalidPointerError);
  assert.throws(() => pool.deallocate(123, 1000), InvalidPointerError);
  pool.deallocate(p, 1000);
  assert.throws(() => pool.deallocate(p, 1000), DoubleFreeError);
  pool.destroy();
  assert.equal(pool.reservedBytes, 0);
});

test('a pool dropped without destroy() gives its buffers back to an upstream the program passed in, and counts the leak', needsGc, async () => {
  using upstream = new PinnedHostResource();
  const seen: LeakRecord[] = [];
  const off = onLeak((leak) => {
    if (leak.kind === 'PinnedHostPool') seen.push(leak);
  });
  try {
    (() => {
      const pool = new PinnedHostPool({ upstream });
      for (const bytes of [4096, 65536]) pool.deallocate(pool.allocate(bytes), bytes); // cached, idle
      pool.allocate(8192); // lent, and never given back
    })();
    assert.equal(upstream.liveCount, 3, 'the pool holds three buffers of the upstream');
    for (let i = 0; i < 100 && seen.length === 0; i++) {
      forceGc!();
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  } finally {
    off();
  }
  assert.equal(seen.length, 1, 'the dropped pool was counted as a leak');
  assert.equal(seen[0]!.bytes, 4096 + 65536 + 8192, 'with the bytes it held');
  assert.equal(upstream.liveCount, 0, 'every buffer went back to the upstream');
});

test('a destroyed pool is no leak, and a dropped pool that holds nothing is not counted', needsGc, async () => {
  const seen: LeakRecord[] = [];
  const off = onLeak((leak) => {
    if (leak.kind === 'PinnedHostPool') seen.push(leak);
  });
  try {
    (() => {
      const destroyed = new PinnedHostPool();
      destroyed.deallocate(destroyed.allocate(4096), 4096);
      destroyed.destroy();
      void new PinnedHostPool();
    })();
    for (let i = 0; i < 10; i++) {
      forceGc!();
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  } finally {
    off();
  }
  assert.deepEqual(seen, []);
});
