/**
 * The MemoryResource contract, run over every resource and every adaptor stacked on a pool, on
 * both backends: bad sizes, streams and pointers are refused before anything changes; foreign,
 * inner, double and wrongly sized frees are typed errors and leave the resource working; a
 * destroyed resource refuses every call; a stream destroyed while the resource caches blocks freed
 * on it loses nothing. New resources go in SUBJECTS.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Device } from '../../src/device.js';
import { DoubleFreeError, InvalidPointerError, OutOfMemoryError, UseAfterFreeError, VramError } from '../../src/errors.js';
import { ArenaResource } from '../../src/resource/suballoc/arena.js';
import { AsyncResource } from '../../src/resource/upstream/async-resource.js';
import { BinningResource } from '../../src/resource/suballoc/binning.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';
import { FixedSizeResource } from '../../src/resource/suballoc/fixed-size.js';
import { LimitingAdaptor } from '../../src/resource/adaptors/limiting.js';
import { LoggingAdaptor } from '../../src/resource/adaptors/logging.js';
import { ManagedResource } from '../../src/resource/upstream/managed-resource.js';
import { RetryOnOutOfMemory } from '../../src/resource/adaptors/retry-on-oom.js';
import { PinnedHostPool } from '../../src/resource/suballoc/pinned-host-pool.js';
import { PinnedHostResource } from '../../src/resource/upstream/pinned-host-resource.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import { SpillableResource } from '../../src/resource/upstream/spillable-resource.js';
import { MemoryResource } from '../../src/resource/resource.js';
import { type StreamRef } from '../../src/stream.js';
import { StatisticsAdaptor } from '../../src/resource/adaptors/statistics.js';
import { TrackingAdaptor } from '../../src/resource/adaptors/tracking.js';
import { Stream } from '../../src/stream.js';

const device = Device.get(0);
device.makeCurrent();
const MiB = 1024 * 1024;

/** A resource under test, and everything created for it (destroyed after, top first). */
interface Subject {
  readonly resource: MemoryResource;
  readonly below: readonly MemoryResource[];
  /** The largest request the resource serves (fixed-size blocks). */
  readonly largest: number;
}

/** Every resource, and every adaptor over a pool. */
const SUBJECTS: ReadonlyArray<readonly [string, () => Subject]> = [
  ['PoolResource (virtual memory)', () => only(new PoolResource())],
  ['PoolResource (adaptive extents)', () => only(new PoolResource({ extentSize: 'adaptive' }))],
  ['PoolResource (upstream chunks)', () => over(new CudaResource(), (u) => new PoolResource({ upstream: u, chunkSize: 4 * MiB }))],
  ['ArenaResource', () => only(new ArenaResource({ size: 16 * MiB }))],
  [
    'FixedSizeResource',
    () => ({ ...over(new CudaResource(), (u) => new FixedSizeResource(u, { blockSize: 64 * 1024, blocksToPreallocate: 8 })), largest: 64 * 1024 }),
  ],
  ['BinningResource', () => over(new PoolResource(), (u) => new BinningResource(u, { minSizeExponent: 8, maxSizeExponent: 14 }))],
  ['PinnedHostPool', () => only(new PinnedHostPool())],
  ['CudaResource', () => only(new CudaResource())],
  ['AsyncResource (new pool)', () => only(new AsyncResource({ pool: {} }))],
  ['ManagedResource', () => only(new ManagedResource())],
  ['SpillableResource', () => only(new SpillableResource())],
  ['PinnedHostResource', () => only(new PinnedHostResource())],
  ['StatisticsAdaptor over a pool', () => over(new PoolResource(), (u) => new StatisticsAdaptor(u))],
  ['LimitingAdaptor over a pool', () => over(new PoolResource(), (u) => new LimitingAdaptor(u, 64 * MiB))],
  ['TrackingAdaptor over a pool', () => over(new PoolResource(), (u) => new TrackingAdaptor(u))],
  ['LoggingAdaptor over a pool', () => over(new PoolResource(), (u) => new LoggingAdaptor(u, () => {}))],
  ['RetryOnOutOfMemory over a pool', () => over(new PoolResource(), (u) => new RetryOnOutOfMemory(u))],
];

function only(resource: MemoryResource): Subject {
  return { resource, below: [], largest: 4 * MiB };
}

function over<T extends MemoryResource>(upstream: T, make: (u: T) => MemoryResource): Subject {
  return { resource: make(upstream), below: [upstream], largest: 4 * MiB };
}

function destroyAll(s: Subject): void {
  s.resource.destroy();
  for (const r of s.below) r.destroy();
}

/** Runs `body` on a fresh subject, destroyed afterwards whatever happens. */
function withSubject(make: () => Subject, body: (s: Subject) => void): void {
  const s = make();
  try {
    body(s);
  } finally {
    destroyAll(s);
  }
}

/** Asserts that `fn` throws `type` and that the resource still allocates and frees afterwards. */
function refused(mr: MemoryResource, fn: () => unknown, type: new (...args: never[]) => Error, what: string): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof type, `${what}: expected ${type.name}, got ${String(e)}`);
    return true;
  });
  const p = mr.allocate(1000);
  mr.deallocate(p, 1000);
}

for (const [name, make] of SUBJECTS) {
  describe(`contract: ${name}`, () => {
    it('refuses bad sizes and streams before anything changes', () =>
      withSubject(make, ({ resource: mr }) => {
        for (const bytes of [0, -1, 1.5, Number.NaN, Infinity, 2 ** 60]) refused(mr, () => mr.allocate(bytes), RangeError, `allocate(${bytes})`);
        refused(mr, () => mr.allocate(8n as unknown as number), TypeError, 'allocate(8n)');
        // A size string is read as the CLI reads it; one that is not a size is refused the same way.
        refused(mr, () => mr.allocate('8 bytes'), RangeError, "allocate('8 bytes')");
        for (const handle of [1.5, -1, Number.NaN]) {
          refused(mr, () => mr.allocate(256, { handle }), RangeError, `stream handle ${handle}`);
        }
        refused(mr, () => mr.allocate(256, null as unknown as StreamRef), TypeError, 'stream null');
        refused(mr, () => mr.allocate(256, { handle: '1' } as unknown as StreamRef), TypeError, "stream handle '1'");
        const gone = Stream.create();
        gone.destroy();
        refused(mr, () => mr.allocate(256, gone), UseAfterFreeError, 'destroyed stream');
      }));

    it('refuses bad, foreign, inner, double and wrongly sized frees, and stays usable', () =>
      withSubject(make, ({ resource: mr }) => {
        const bytes = 3000;
        const p = mr.allocate(bytes);
        assert.equal(p % mr.alignment, 0, 'aligned');
        for (const ptr of [-1, 1.5, Number.NaN]) refused(mr, () => mr.deallocate(ptr, bytes), RangeError, `deallocate(${ptr})`);
        refused(mr, () => mr.deallocate(String(p) as unknown as number, bytes), TypeError, 'string pointer');
        refused(mr, () => mr.deallocate(p, 0), RangeError, 'size 0');
        refused(mr, () => mr.deallocate(p, bytes + 1), InvalidPointerError, 'wrong size');
        refused(mr, () => mr.deallocate(p, 1 << 20), InvalidPointerError, 'much larger size');
        refused(mr, () => mr.deallocate(p + 256, bytes), InvalidPointerError, 'inner pointer');
        refused(mr, () => mr.deallocate(0x7e00_0000_0000, bytes), InvalidPointerError, 'foreign pointer');
        mr.deallocate(p, bytes);
        assert.throws(
          () => mr.deallocate(p, bytes),
          (e: unknown) => e instanceof DoubleFreeError || e instanceof InvalidPointerError,
          'a second free is DoubleFreeError or InvalidPointerError',
        );
        const q = mr.allocate(bytes);
        mr.deallocate(q, bytes);
      }));

    it('a destroyed resource refuses every call but the free of a block live at destroy; destroy twice is harmless', () => {
      const s = make();
      const p = s.resource.allocate(512);
      s.resource.destroy();
      assert.equal(s.resource.destroyed, true);
      assert.equal(s.resource.released, false, 'the live block holds the memory');
      assert.throws(() => s.resource.allocate(512), UseAfterFreeError);
      assert.throws(() => s.resource.releaseCached(), UseAfterFreeError);
      s.resource.deallocate(p, 512);
      assert.equal(s.resource.released, true, 'the last live block freed: released');
      assert.throws(() => s.resource.deallocate(p, 512), UseAfterFreeError);
      s.resource.destroy();
      s.resource[Symbol.dispose]();
      for (const r of s.below) r.destroy();
    });

    it('a stream destroyed while blocks freed on it are cached loses nothing', () =>
      withSubject(make, ({ resource: mr, largest }) => {
        const size = Math.min(largest, 64 * 1024);
        const a = Stream.create();
        const ptrs = Array.from({ length: 4 }, () => mr.allocate(size, a));
        for (const p of ptrs) mr.deallocate(p, size, a);
        a.destroy();
        // A new stream (it may get the same handle) and the default stream reuse the memory.
        const b = Stream.create();
        try {
          const again = Array.from({ length: 6 }, () => mr.allocate(size, b));
          for (const p of again) mr.deallocate(p, size, b);
          mr.releaseCached();
          const last = mr.allocate(size);
          mr.deallocate(last, size);
        } finally {
          b.destroy();
        }
      }));

    it('every error it raises is a VramError or an argument error', () =>
      withSubject(make, ({ resource: mr }) => {
        try {
          mr.allocate(2 ** 52);
        } catch (e) {
          assert.ok(e instanceof VramError || e instanceof RangeError, String(e));
          if (e instanceof OutOfMemoryError) assert.equal(e.requestedBytes, 2 ** 52);
        }
      }));
  });
}

describe('contract: the base class itself', () => {
  it('calls the hooks only with checked arguments, and destroy once', () => {
    const calls: string[] = [];
    class Probe extends MemoryResource {
      readonly kind = 'device';
      readonly alignment = 256;
      readonly deviceOrdinal = 0;
      protected doAllocate(bytes: number, handle: number): number {
        calls.push(`allocate ${bytes} ${handle}`);
        return 4096;
      }
      protected doDeallocate(ptr: number, bytes: number, handle: number): void {
        calls.push(`deallocate ${ptr} ${bytes} ${handle}`);
      }
      protected override doDestroy(): void {
        calls.push('destroy');
      }
      describe(): string {
        return 'Probe';
      }
    }
    const probe = new Probe();
    assert.throws(() => probe.allocate(0), RangeError);
    assert.throws(() => probe.allocate(1, { handle: -3 }), RangeError);
    using stream = Stream.create();
    assert.equal(probe.allocate(10, stream), 4096);
    probe.deallocate(4096, 10);
    probe.destroy();
    probe.destroy();
    assert.deepEqual(calls, [`allocate 10 ${stream.handle}`, 'deallocate 4096 10 0', 'destroy']);
  });
});
