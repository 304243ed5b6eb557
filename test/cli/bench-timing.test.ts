/**
 * How `vram bench` and bench/pool-hit time a row and decide its `(model)` mark: the pool-hit scheme
 * they share (`measureHits`, each resource in a process of its own through `measureHitsApart`), the
 * driver-call tally the mark is read from, and the one rule (`modelMark`). Shapes only: figures are
 * the benchmarks' to measure.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { getBackend } from '../../src/backend/select.js';
import { modelMark, type BenchSettings } from '../../src/cli/bench/common.js';
import { driverCallTally } from '../../src/cli/bench/driver-calls.js';
import { HIT_PAIRS, HIT_ROUNDS, measureHits, measureHitsApart } from '../../src/cli/bench/hits.js';
import { measureObjectPairs, objectCases } from '../../src/cli/bench/object-pairs.js';
import { Device } from '../../src/device.js';
import { getCurrentResource } from '../../src/resource/current.js';
import { createResourceStack } from '../../src/resource/stacks.js';

const settings: BenchSettings = { backend: getBackend(), quick: true, transferSizes: [], asyncTransferSize: 0, allocSizes: [256] };

describe('driverCallTally', () => {
  it('stays put over pool hits and moves when a pool grows or a driver resource allocates', () => {
    const pool = createResourceStack('pool');
    try {
      const grown = driverCallTally(pool.resource);
      pool.resource.deallocate(pool.resource.allocate(1 << 20), 1 << 20);
      assert.ok(driverCallTally(pool.resource) > grown, 'the first allocation maps memory through the driver');
      const warm = driverCallTally(pool.resource);
      for (let i = 0; i < 100; i++) pool.resource.deallocate(pool.resource.allocate(1 << 20), 1 << 20);
      assert.equal(driverCallTally(pool.resource), warm, 'a hit never reaches the driver');
    } finally {
      pool.destroy();
    }
    for (const name of ['cuda', 'async'] as const) {
      const stack = createResourceStack(name);
      try {
        const before = driverCallTally(stack.resource);
        stack.resource.deallocate(stack.resource.allocate(256), 256);
        assert.ok(driverCallTally(stack.resource) > before, `${name}: every block is a driver allocation`);
      } finally {
        stack.destroy();
      }
    }
  });

  it('sees a driver resource under a sub-allocator (the arena over CudaResource)', () => {
    const arena = createResourceStack('arena', { size: 64 << 20 });
    try {
      const before = driverCallTally(arena.resource);
      arena.resource.deallocate(arena.resource.allocate(256), 256);
      assert.equal(driverCallTally(arena.resource), before, "the arena's region was taken once, at creation");
      assert.ok(before > 0, 'the region is a driver allocation of the CudaResource under it');
    } finally {
      arena.destroy();
    }
  });
});

describe('modelMark', () => {
  it('marks a row from what it timed: driver calls on the emulated backend, nothing otherwise', () => {
    const emulated = settings.backend.name === 'emulated';
    assert.deepEqual(modelMark(settings, 0), {});
    assert.deepEqual(modelMark(settings, 2), emulated ? { model: true } : {});
  });
});

describe('measureHits', () => {
  it('times every size asked, in rounds of bounded pairs, and says a pool hit called no driver', () => {
    const stack = createResourceStack('pool');
    try {
      const figures = measureHits(stack.resource, [256, 1 << 20], 3);
      assert.deepEqual(
        figures.map((f) => f.bytes),
        [256, 1 << 20],
      );
      for (const f of figures) {
        assert.equal(f.rounds, 3);
        assert.ok(f.pairs >= HIT_PAIRS[0] && f.pairs <= HIT_PAIRS[1], String(f.pairs));
        assert.ok(Number.isFinite(f.ns) && f.ns > 0);
        assert.equal(f.driverTally, 0);
      }
      assert.equal(stack.resource.memoryFigures()?.allocations.value, 0, 'the live blocks it kept while timing are freed');
    } finally {
      stack.destroy();
    }
  });

  it('in a process of its own: the same figures for the named stack, with the driver calls of a driver stack', () => {
    const [pool] = measureHitsApart({ stack: 'pool', sizes: [4096] });
    assert.equal(pool!.bytes, 4096);
    assert.equal(pool!.rounds, HIT_ROUNDS);
    assert.equal(pool!.driverTally, 0);
    const [async] = measureHitsApart({ stack: 'async', sizes: [4096], rounds: 2 });
    assert.equal(async!.rounds, 2);
    assert.ok(async!.driverTally > 0, 'every AsyncResource block is a cuMemAllocAsync from the pool');
    assert.throws(() => measureHitsApart({ stack: 'arena', sizes: [256] }), /the pool-hit process for stack 'arena' failed .*size/);
  });
});

describe('measureObjectPairs', () => {
  it('times the three pairs over the resource at every size and leaves the current resource as it was', () => {
    const device = Device.get(0);
    const before = getCurrentResource(device);
    const stack = createResourceStack('pool');
    try {
      const figures = measureObjectPairs(stack.resource, [256, 1 << 20], 2);
      assert.deepEqual(
        figures.map((f) => f.bytes),
        [256, 1 << 20],
      );
      for (const f of figures) {
        for (const ns of [f.resourceNs, f.bufferNs, f.arrayNs]) assert.ok(Number.isFinite(ns) && ns > 0, `${ns}`);
        assert.equal(f.rounds, 2);
      }
      assert.equal(getCurrentResource(device), before);
      // Every object made was freed: the pool holds no block of them.
      assert.equal(stack.resource.memoryFigures().allocations.value, 0);
    } finally {
      stack.destroy();
    }
  });

  it('is the bench group objects: three rows per size, from a process of its own', async () => {
    const settings = { backend: getBackend(), quick: true, transferSizes: [], asyncTransferSize: 0, allocSizes: [], repeats: 2 } satisfies BenchSettings;
    const [objects] = objectCases(settings);
    const rows = await objects!.run();
    const list = Array.isArray(rows) ? rows : [rows];
    assert.deepEqual(
      [...new Set(list.map((r) => r.name))],
      ['PoolResource allocate+deallocate', 'DeviceBuffer.allocate+free', 'DeviceArray.empty+free (float32)'],
    );
    assert.deepEqual([...new Set(list.map((r) => r.size))], [256, 1 << 20, 64 << 20]);
    assert.ok(list.every((r) => r.group === 'objects' && r.unit === 'ns/pair' && r.value > 0 && r.repeats === 2));
  });
});
