/**
 * One statistics contract: every resource, sub-allocator and adaptor answers `memoryFigures()` in
 * the full shape with values that agree after allocations and frees, and the reserved bytes it
 * reports beside them (`reservedBytes`, `peakReservedBytes`) are the figures'; a pool's growth
 * figures are declared once, `driverCalls` in one shape wherever it appears; and `memoryStats()` over
 * binning, fixed-size and pinned-host-pool stacks reports the memory they hold (they reported
 * nothing before: a binning stack was blank while the pool below held its chunks).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Counter } from '../../src/counter.js';
import type { MemoryFigures } from '../../src/resource/figures.js';
import type { MemoryResource } from '../../src/resource/resource.js';
import { memoryStats, memorySummary, resetPeakStats } from '../../src/observe/memory-stats.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';
import { ManagedResource } from '../../src/resource/upstream/managed-resource.js';
import { AsyncResource } from '../../src/resource/upstream/async-resource.js';
import { PinnedHostResource } from '../../src/resource/upstream/pinned-host-resource.js';
import { SpillableResource } from '../../src/resource/upstream/spillable-resource.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import { ArenaResource } from '../../src/resource/suballoc/arena.js';
import { BinningResource } from '../../src/resource/suballoc/binning.js';
import { FixedSizeResource } from '../../src/resource/suballoc/fixed-size.js';
import { PinnedHostPool } from '../../src/resource/suballoc/pinned-host-pool.js';
import { StatisticsAdaptor } from '../../src/resource/adaptors/statistics.js';
import { LimitingAdaptor } from '../../src/resource/adaptors/limiting.js';
import { TrackingAdaptor } from '../../src/resource/adaptors/tracking.js';
import { LoggingAdaptor } from '../../src/resource/adaptors/logging.js';
import { RetryOnOutOfMemory } from '../../src/resource/adaptors/retry-on-oom.js';

import { withCurrent } from '../helpers.js';

const MiB = 1024 * 1024;
/** The one shape of `driverCalls`, wherever it is reported. */
const DRIVER_CALL_KINDS = ['create', 'map', 'unmap', 'setAccess', 'release'];

/** A stack by name: the resource under test and what lies below it (destroyed after it). */
const stacks: Record<string, () => { mr: MemoryResource; below: MemoryResource[] }> = {
  CudaResource: () => ({ mr: new CudaResource(), below: [] }),
  ManagedResource: () => ({ mr: new ManagedResource(), below: [] }),
  AsyncResource: () => ({ mr: new AsyncResource(), below: [] }),
  PinnedHostResource: () => ({ mr: new PinnedHostResource(), below: [] }),
  'PoolResource (virtual)': () => ({ mr: new PoolResource(), below: [] }),
  'PoolResource (upstream)': () => {
    const up = new CudaResource();
    return { mr: new PoolResource({ upstream: up }), below: [up] };
  },
  ArenaResource: () => ({ mr: new ArenaResource({ size: 4 * MiB }), below: [] }),
  BinningResource: () => {
    const up = new PoolResource();
    return { mr: new BinningResource(up, { minSizeExponent: 8, maxSizeExponent: 12 }), below: [up] };
  },
  FixedSizeResource: () => {
    const up = new CudaResource();
    return { mr: new FixedSizeResource(up, { blockSize: 4096, blocksToPreallocate: 8 }), below: [up] };
  },
  PinnedHostPool: () => ({ mr: new PinnedHostPool(), below: [] }),
  SpillableResource: () => ({ mr: new SpillableResource(), below: [] }),
  StatisticsAdaptor: () => {
    const up = new CudaResource();
    return { mr: new StatisticsAdaptor(up), below: [up] };
  },
  LimitingAdaptor: () => {
    const up = new PoolResource();
    return { mr: new LimitingAdaptor(up, 64 * MiB), below: [up] };
  },
  TrackingAdaptor: () => {
    const up = new PoolResource();
    return { mr: new TrackingAdaptor(up), below: [up] };
  },
  LoggingAdaptor: () => {
    const up = new PoolResource();
    return { mr: new LoggingAdaptor(up, () => {}), below: [up] };
  },
  RetryOnOutOfMemory: () => {
    const up = new PoolResource();
    return { mr: new RetryOnOutOfMemory(up), below: [up] };
  },
};

function isCounter(c: Counter): void {
  assert.deepEqual(Object.keys(c).sort(), ['peak', 'total', 'value']);
  for (const v of [c.value, c.peak, c.total]) assert.ok(Number.isInteger(v) && v >= 0, `${JSON.stringify(c)}`);
  assert.ok(c.value <= c.peak && c.peak <= c.total, `value <= peak <= total: ${JSON.stringify(c)}`);
}

/** The figures' shape, and the reserved bytes every resource reports beside them (what the memory history reads) equal to theirs. */
function checkShape(mr: MemoryResource, name: string): MemoryFigures {
  const f = mr.memoryFigures();
  assert.ok(f !== undefined, `${name}.memoryFigures() is undefined`);
  assert.equal(mr.reservedBytes, f.reservedBytes, `${name}.reservedBytes is memoryFigures().reservedBytes`);
  assert.equal(mr.peakReservedBytes, f.peakReservedBytes, `${name}.peakReservedBytes is memoryFigures().peakReservedBytes`);
  if (f.driverCalls !== undefined) assert.deepEqual(Object.keys(f.driverCalls), DRIVER_CALL_KINDS, `${name}: driver calls by kind`);
  isCounter(f.allocatedBytes);
  isCounter(f.allocations);
  assert.ok(Number.isInteger(f.reservedBytes) && f.reservedBytes >= 0, `${name}: reservedBytes ${f.reservedBytes}`);
  assert.ok(f.peakReservedBytes >= f.reservedBytes, `${name}: peak reserved below reserved`);
  return f;
}

for (const [name, make] of Object.entries(stacks)) {
  test(`memoryFigures() contract: ${name} reports the full shape, consistent after allocations and frees`, () => {
    const { mr, below } = make();
    try {
      // Sizes every resource serves (the fixed-size blocks are 4096 bytes).
      const a = mr.allocate(1000);
      const b = mr.allocate(3000);
      const c = mr.allocate(200);
      const f1 = checkShape(mr, name);
      assert.deepEqual(f1.allocations, { value: 3, peak: 3, total: 3 }, name);
      assert.ok(f1.allocatedBytes.value >= 4200, `${name}: ${f1.allocatedBytes.value} allocated`);
      assert.ok(f1.reservedBytes >= f1.allocatedBytes.value, `${name}: reserved ${f1.reservedBytes} under allocated ${f1.allocatedBytes.value}`);
      mr.deallocate(b, 3000);
      mr.deallocate(a, 1000);
      const f2 = checkShape(mr, name);
      assert.deepEqual(f2.allocations, { value: 1, peak: 3, total: 3 }, name);
      assert.equal(f2.allocatedBytes.peak, f1.allocatedBytes.value, name);
      assert.equal(f2.allocatedBytes.total, f1.allocatedBytes.total, name);
      assert.ok(f2.allocatedBytes.value < f1.allocatedBytes.value, name);
      mr.resetPeakFigures();
      const f3 = checkShape(mr, name);
      assert.equal(f3.allocations.peak, 1, `${name}: resetPeakFigures restarts the peak`);
      assert.equal(f3.allocatedBytes.peak, f3.allocatedBytes.value, name);
      assert.equal(f3.allocations.total, 3, `${name}: the total stays`);
      mr.deallocate(c, 200);
      const f4 = checkShape(mr, name);
      assert.deepEqual(f4.allocations, { value: 0, peak: 1, total: 3 }, name);
      assert.equal(f4.allocatedBytes.value, 0, name);
    } finally {
      mr.destroy();
      for (const r of below) r.destroy();
    }
  });
}

test("memoryStats over new BinningResource(new PoolResource()) reports the pool's reserved and the bins' allocated bytes", () => {
  const pool = new PoolResource();
  withCurrent(
    new BinningResource(pool, { minSizeExponent: 10, maxSizeExponent: 16 }),
    (bins) => {
      const small = Array.from({ length: 10 }, () => bins.allocate(1000));
      const large = bins.allocate(4 * MiB); // larger than every bin: passed to the pool whole
      const s = memoryStats();
      assert.deepEqual(s.allocations, { value: 11, peak: 11, total: 11 });
      assert.deepEqual(s.allocatedBytes, { value: 10 * 1000 + 4 * MiB, peak: 10 * 1000 + 4 * MiB, total: 10 * 1000 + 4 * MiB });
      const poolFigures = pool.memoryFigures()!;
      assert.ok(poolFigures.reservedBytes > 4 * MiB);
      assert.deepEqual(s.reservedBytes, { value: poolFigures.reservedBytes, peak: poolFigures.peakReservedBytes });
      assert.equal(s.cachedBytes, poolFigures.reservedBytes - s.allocatedBytes!.value);
      assert.deepEqual(s.driverCalls, poolFigures.driverCalls, 'what the pool reports beyond reserved comes up too');
      assert.match(memorySummary(), /Reserved memory +\d/);
      for (const p of small) bins.deallocate(p, 1000);
      bins.deallocate(large, 4 * MiB);
      const after = memoryStats();
      assert.deepEqual(after.allocations, { value: 0, peak: 11, total: 11 });
      resetPeakStats();
      assert.equal(memoryStats().allocatedBytes!.peak, 0);
    },
    [pool],
  );
});

test('memoryStats over a FixedSizeResource stack reports its chunks as reserved and its blocks as allocated', () => {
  const up = new CudaResource();
  withCurrent(
    new FixedSizeResource(up, { blockSize: 64 * 1024, blocksToPreallocate: 16 }),
    (fixed) => {
      const p = fixed.allocate(1000);
      const q = fixed.allocate(50_000);
      const s = memoryStats();
      assert.deepEqual(s.allocatedBytes, { value: 51_000, peak: 51_000, total: 51_000 });
      assert.deepEqual(s.allocations, { value: 2, peak: 2, total: 2 });
      assert.deepEqual(s.reservedBytes, { value: 1 * MiB, peak: 1 * MiB });
      assert.equal(s.cachedBytes, 1 * MiB - 51_000);
      fixed.deallocate(p, 1000);
      fixed.deallocate(q, 50_000);
      fixed.releaseCached();
      assert.deepEqual(memoryStats().reservedBytes, { value: 0, peak: 1 * MiB });
    },
    [up],
  );
});

test('a PinnedHostPool reports the buffers it holds and those it lent (memoryStats reads device resources; the pool is host memory)', () => {
  const staging = new PinnedHostPool({ maximumCachedBytes: 16 * MiB });
  try {
    const a = staging.acquire(5000); // size class 5120
    const b = staging.acquire(1 * MiB);
    const s = staging.memoryFigures();
    assert.deepEqual(s.allocatedBytes, { value: 5000 + MiB, peak: 5000 + MiB, total: 5000 + MiB });
    assert.deepEqual(s.allocations, { value: 2, peak: 2, total: 2 });
    const held = PinnedHostPool.sizeClass(5000) + PinnedHostPool.sizeClass(MiB);
    assert.equal(s.reservedBytes, held);
    assert.equal(s.peakReservedBytes, held);
    a.free();
    b.free();
    const idle = staging.memoryFigures();
    assert.equal(idle.allocatedBytes.value, 0);
    assert.equal(idle.reservedBytes, held, 'released buffers stay cached');
    staging.releaseCached();
    assert.equal(staging.memoryFigures().reservedBytes, 0);
    assert.equal(staging.memoryFigures().peakReservedBytes, held);
  } finally {
    staging.destroy();
  }
});

test("a pool's growth figures: one declaration, driverCalls by kind as memoryFigures() and memoryStats() report them, hostWaits", () => {
  withCurrent(new PoolResource(), (pool) => {
    const p = pool.allocate(3 * MiB);
    const growth = pool.growthFigures();
    assert.deepEqual(Object.keys(growth).sort(), [
      'compactions',
      'driverCalls',
      'growthNs',
      'hostWaits',
      'pageMoves',
      'pageMovesBack',
      'pagesMappedAhead',
      'streamJoins',
    ]);
    assert.deepEqual(Object.keys(growth.driverCalls), DRIVER_CALL_KINDS);
    assert.ok(growth.driverCalls.map >= 1, 'growing mapped pages');
    assert.deepEqual(pool.memoryFigures().driverCalls, growth.driverCalls, 'the same figure, the same shape');
    assert.equal(pool.memoryFigures().pageMoves, growth.pageMoves);
    assert.deepEqual(memoryStats().driverCalls, growth.driverCalls);
    pool.deallocate(p, 3 * MiB);
  });
  const chunked = new CudaResource();
  const overUpstream = new PoolResource({ upstream: chunked });
  try {
    overUpstream.deallocate(overUpstream.allocate(1000), 1000);
    const g = overUpstream.growthFigures();
    assert.deepEqual(g.driverCalls, { create: 0, map: 0, unmap: 0, setAccess: 0, release: 0 }, 'upstream growth makes no virtual-memory calls');
    assert.equal(g.hostWaits, 0);
    assert.equal(overUpstream.memoryFigures().driverCalls, undefined);
  } finally {
    overUpstream.destroy();
    chunked.destroy();
  }
});
