/**
 * memoryStats, resetPeakStats and memorySummary read the figures of the device's current resource:
 * a pool, a driver pool, plain driver memory and a stack of adaptors, moved by allocate, free,
 * emptyCache and resetPeakStats, and an out-of-memory error through a LimitingAdaptor counted.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Ptr } from '../../src/backend/backend.js';
import { OutOfMemoryError } from '../../src/errors.js';
import { AsyncResource } from '../../src/resource/upstream/async-resource.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';
import { emptyCache, getCurrentResource } from '../../src/resource/current.js';
import { LimitingAdaptor } from '../../src/resource/adaptors/limiting.js';
import { memoryStats, memorySummary, resetPeakStats } from '../../src/observe/memory-stats.js';
import { RetryOnOutOfMemory } from '../../src/resource/adaptors/retry-on-oom.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import { MemoryResource } from '../../src/resource/resource.js';
import { StatisticsAdaptor } from '../../src/resource/adaptors/statistics.js';

import { withCurrent } from '../helpers.js';

const MiB = 1024 * 1024;

test('PoolResource: allocated, reserved and cached move with allocate, free, emptyCache and resetPeakStats', () => {
  withCurrent(new PoolResource(), (pool) => {
    const a = memoryStats();
    assert.equal(a.version, 2);
    assert.equal(a.device, 0);
    assert.match(a.resource, /^PoolResource\(/);
    assert.deepEqual(a.allocatedBytes, { value: 0, peak: 0, total: 0 });
    assert.equal(typeof a.pageMoves, 'number');
    assert.deepEqual(Object.keys(a.driverCalls ?? {}), ['create', 'map', 'unmap', 'setAccess', 'release'], 'driver calls by kind, as growthFigures() has them');
    assert.equal(a.allocationRetries, undefined);
    assert.equal(a.limitBytes, undefined);
    assert.equal(a.outOfMemoryErrors, 0);
    assert.equal(typeof a.leaks.count, 'number');

    const p1 = pool.allocate(MiB);
    const p3 = pool.allocate(3 * MiB);
    const b = memoryStats();
    assert.deepEqual(b.allocatedBytes, { value: 4 * MiB, peak: 4 * MiB, total: 4 * MiB });
    assert.deepEqual(b.allocations, { value: 2, peak: 2, total: 2 });
    assert.ok(b.reservedBytes!.value >= 4 * MiB);
    assert.equal(b.cachedBytes, b.reservedBytes!.value - 4 * MiB);
    assert.ok(b.driverCalls!.map > a.driverCalls!.map, 'growing maps pages through the driver');
    assert.deepEqual(b.driverCalls, pool.growthFigures().driverCalls, "one shape of driverCalls: the pool's growth figures");

    pool.deallocate(p3, 3 * MiB);
    const c = memoryStats();
    assert.deepEqual(c.allocatedBytes, { value: MiB, peak: 4 * MiB, total: 4 * MiB });
    assert.equal(c.reservedBytes!.value, b.reservedBytes!.value, 'the pool keeps what was freed');
    assert.ok(c.cachedBytes! >= 3 * MiB);

    assert.ok(emptyCache(0) > 0);
    const d = memoryStats();
    assert.ok(d.reservedBytes!.value < c.reservedBytes!.value);
    assert.ok(d.cachedBytes! < 3 * MiB);
    assert.equal(d.reservedBytes!.peak, b.reservedBytes!.peak);

    resetPeakStats();
    const e = memoryStats();
    assert.deepEqual(e.allocatedBytes, { value: MiB, peak: MiB, total: 4 * MiB });
    assert.equal(e.allocations!.peak, 1);
    assert.equal(e.reservedBytes!.peak, e.reservedBytes!.value);
    pool.deallocate(p1, MiB);
  });
});

test('AsyncResource: the live table for allocated, the pool for reserved', () => {
  withCurrent(new AsyncResource({ pool: {} }), (mr) => {
    const p = mr.allocate(2 * MiB);
    const a = memoryStats();
    assert.match(a.resource, /^AsyncResource\(/);
    assert.deepEqual(a.allocatedBytes, { value: 2 * MiB, peak: 2 * MiB, total: 2 * MiB });
    assert.ok(a.reservedBytes!.value >= 2 * MiB);
    assert.equal(a.pageMoves, undefined);
    mr.deallocate(p, 2 * MiB);
    const b = memoryStats();
    assert.equal(b.allocatedBytes!.value, 0);
    assert.equal(b.allocatedBytes!.peak, 2 * MiB);
    emptyCache(0);
    const c = memoryStats();
    assert.equal(c.reservedBytes!.value, 0);
    assert.equal(c.cachedBytes, 0);
    assert.ok(c.reservedBytes!.peak >= 2 * MiB);
    resetPeakStats(0);
    const d = memoryStats(0);
    assert.deepEqual(d.reservedBytes, { value: 0, peak: 0 });
    assert.deepEqual(d.allocatedBytes, { value: 0, peak: 0, total: 2 * MiB });
  });
});

test('CudaResource: reserved is allocated, nothing cached', () => {
  withCurrent(new CudaResource(0), (mr) => {
    const p = mr.allocate(1000);
    const a = memoryStats();
    assert.deepEqual(a.allocatedBytes, { value: 1000, peak: 1000, total: 1000 });
    assert.deepEqual(a.reservedBytes, { value: 1000, peak: 1000 });
    assert.equal(a.cachedBytes, 0);
    assert.equal(a.driverCalls, undefined);
    mr.deallocate(p, 1000);
    resetPeakStats();
    assert.deepEqual(memoryStats().reservedBytes, { value: 0, peak: 0 });
  });
});

test("an adaptor stack: the pool's figures with the limit and the retries; an out-of-memory error counts", () => {
  const cuda = new CudaResource(0);
  const pool = new PoolResource({ upstream: cuda, chunkSize: MiB });
  const stack = new RetryOnOutOfMemory(new LimitingAdaptor(new StatisticsAdaptor(pool), 8 * MiB));
  try {
    withCurrent(stack, () => {
      const p = stack.allocate(6 * MiB);
      const a = memoryStats();
      assert.match(a.resource, /^RetryOnOutOfMemory\(LimitingAdaptor\(limit=8 MiB, StatisticsAdaptor\(PoolResource/);
      assert.equal(a.limitBytes, 8 * MiB);
      assert.equal(a.allocationRetries, 0);
      assert.equal(a.pageMoves, undefined, 'upstream growth moves no pages');
      assert.deepEqual(a.allocatedBytes, { value: 6 * MiB, peak: 6 * MiB, total: 6 * MiB });
      assert.equal(a.reservedBytes!.value, pool.reservedBytes);

      assert.throws(() => stack.allocate(4 * MiB), OutOfMemoryError);
      const b = memoryStats();
      assert.equal(b.outOfMemoryErrors, 1);
      assert.equal(b.allocationRetries, 1);
      assert.deepEqual(b.allocatedBytes, a.allocatedBytes, 'a refused allocation changes nothing');

      stack.deallocate(p, 6 * MiB);
      resetPeakStats();
      const c = memoryStats();
      assert.deepEqual(c.allocatedBytes, { value: 0, peak: 0, total: 6 * MiB });
      assert.equal(c.outOfMemoryErrors, 1, 'counts of errors survive a peak reset');

      const summary = memorySummary();
      assert.match(summary, /^vram memory summary, device 0: RetryOnOutOfMemory\(/);
      assert.match(summary, /\nAllocated memory +0 B +0 B +6 MiB\n/);
      assert.match(summary, /\nLimit +8 MiB +- +-\n/);
      assert.match(summary, /\nOut-of-memory errors +- +- +1\n/);
      assert.match(summary, /\nPage moves +- +- +n\/a\n/);
      // The table's rows; the lines after its last rule list the live buffers and arrays.
      const table = summary.trimEnd().split('\n').slice(1);
      const widths = new Set(table.slice(0, table.lastIndexOf(table[0]!) + 1).map((l) => l.length));
      assert.equal(widths.size, 1, 'every row of the table is as wide as the rules');
    });
  } finally {
    pool.destroy();
    cuda.destroy();
  }
});

test('a LimitingAdaptor on top counts the out-of-memory errors it throws', () => {
  const cuda = new CudaResource(0);
  withCurrent(new LimitingAdaptor(cuda, MiB), (mr) => {
    assert.throws(() => mr.allocate(2 * MiB), OutOfMemoryError);
    assert.throws(() => mr.allocate(2 * MiB), OutOfMemoryError);
    assert.equal(memoryStats().outOfMemoryErrors, 2);
    assert.equal(memoryStats().allocationRetries, undefined);
  });
  cuda.destroy();
});

/** A resource of a program's own that keeps no figures. */
class Uncounted extends MemoryResource {
  readonly kind = 'device';
  readonly alignment = 256;
  readonly deviceOrdinal = 0;
  constructor(private readonly inner: MemoryResource) {
    super();
  }
  describe(): string {
    return 'Uncounted';
  }
  protected doAllocate(bytes: number): Ptr {
    return this.inner.allocate(bytes);
  }
  protected doDeallocate(ptr: Ptr, bytes: number): void {
    this.inner.deallocate(ptr, bytes);
  }
}

test('a resource that keeps no figures reports them undefined, and the summary says n/a', () => {
  const cuda = new CudaResource(0);
  withCurrent(new Uncounted(cuda), () => {
    const s = memoryStats();
    assert.equal(s.resource, 'Uncounted');
    assert.deepEqual(
      [s.allocatedBytes, s.allocations, s.reservedBytes, s.cachedBytes, s.allocationRetries, s.limitBytes, s.pageMoves, s.driverCalls],
      Array(8).fill(undefined),
      "none of the resource's figures, all together",
    );
    assert.equal(getCurrentResource(0).reservedBytes, undefined, 'nor its reserved bytes');
    resetPeakStats();
    assert.match(memorySummary(), /\nAllocated memory +n\/a +n\/a +n\/a\n/);
  });
  cuda.destroy();
});

test("memoryStats()' resource figures come together: one test narrows them all", () => {
  withCurrent(new PoolResource(), (pool) => {
    const p = pool.allocate(MiB);
    const s = memoryStats();
    assert.ok(s.allocatedBytes !== undefined, 'a resource of vram keeps figures');
    // Narrowed by the one test above: reserved and cached are there too (no `!`, no `?.`).
    assert.equal(s.cachedBytes, s.reservedBytes.value - s.allocatedBytes.value);
    assert.equal(s.allocations.value, 1);
    pool.deallocate(p, MiB);
  });
});

test('bad devices are refused', () => {
  assert.throws(() => memoryStats(-1), RangeError);
  assert.throws(() => resetPeakStats('0' as unknown as number), TypeError);
});
