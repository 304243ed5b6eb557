/**
 * Resource lifetimes and kinds (issue 19), on both backends: a resource destroyed with live blocks
 * keeps their memory from its upstream until the last is freed (cuMemPoolDestroy's rule), for
 * every resource that takes an upstream; an upstream or a bin of the wrong memory kind is refused
 * at construction; streams, events and resources dropped without `destroy()` are ended by the
 * garbage-collection backstop and counted as leaks, while anything still in use keeps them alive.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { leakStatistics, onLeak, type LeakRecord } from '../../src/backstop.js';
import { Device } from '../../src/device.js';
import { UseAfterFreeError } from '../../src/errors.js';
import { ArenaResource } from '../../src/resource/suballoc/arena.js';
import { BinningResource } from '../../src/resource/suballoc/binning.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { FixedSizeResource } from '../../src/resource/suballoc/fixed-size.js';
import { LimitingAdaptor } from '../../src/resource/adaptors/limiting.js';
import { LoggingAdaptor } from '../../src/resource/adaptors/logging.js';
import { RetryOnOutOfMemory } from '../../src/resource/adaptors/retry-on-oom.js';
import { PinnedHostPool } from '../../src/resource/suballoc/pinned-host-pool.js';
import { PinnedHostResource } from '../../src/resource/upstream/pinned-host-resource.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import type { MemoryResource } from '../../src/resource/resource.js';
import { StatisticsAdaptor } from '../../src/resource/adaptors/statistics.js';
import { TrackingAdaptor } from '../../src/resource/adaptors/tracking.js';
import { Event, Stream } from '../../src/stream.js';
import { assertMemoryReturned, deviceMemoryUsed, forceGc, needsGc, onGpu } from '../helpers.js';

const device = Device.get(0);
device.makeCurrent();
const MiB = 1024 * 1024;

/** Every resource that takes an upstream, made over `outer`. */
const INNER: ReadonlyArray<readonly [string, (outer: MemoryResource) => MemoryResource]> = [
  ['PoolResource', (u) => new PoolResource({ upstream: u, chunkSize: 4 * MiB })],
  ['FixedSizeResource', (u) => new FixedSizeResource(u, { blockSize: 64 * 1024, blocksToPreallocate: 8 })],
  ['ArenaResource', (u) => new ArenaResource({ size: 4 * MiB, upstream: u })],
  ['BinningResource', (u) => new BinningResource(u, { minSizeExponent: 8, maxSizeExponent: 16 })],
  ['StatisticsAdaptor', (u) => new StatisticsAdaptor(u)],
  ['LimitingAdaptor', (u) => new LimitingAdaptor(u, 64 * MiB)],
  ['TrackingAdaptor', (u) => new TrackingAdaptor(u)],
  ['LoggingAdaptor', (u) => new LoggingAdaptor(u, () => {})],
  ['RetryOnOutOfMemory', (u) => new RetryOnOutOfMemory(u)],
];

/** True when [a, a + an) and [b, b + bn) share a byte. */
function overlaps(a: number, an: number, b: number, bn: number): boolean {
  return a < b + bn && b < a + an;
}

/** Live blocks in a pool (its own count, not the base class's). */
function liveIn(pool: PoolResource): number {
  return pool.memoryFigures().allocations.value;
}

describe('a resource destroyed with live blocks keeps their memory until the last is freed', () => {
  for (const [name, make] of INNER) {
    it(`${name}: the upstream never hands the live block out again; the free after destroy releases`, () => {
      using outer = new PoolResource();
      const inner = make(outer);
      const bytes = 3000;
      const p = inner.allocate(bytes);
      const held = liveIn(outer);
      inner.destroy();
      // Sizes the inner resource's memory was taken in, and the request itself.
      const sizes = [bytes, 64 * 1024, 512 * 1024, 4 * MiB, 4 * MiB + 4096];
      const taken = sizes.map((n) => [outer.allocate(n), n] as const);
      for (const [q, n] of taken) {
        assert.ok(!overlaps(p, bytes, q, n), `${name}: the upstream handed out 0x${q.toString(16)}+${n}, over the live block`);
      }
      assert.equal(liveIn(outer), held + taken.length, 'nothing went back upstream under the live block');
      assert.equal(inner.destroyed, true);
      assert.equal(inner.released, false, 'a block is live: the memory waits for it');
      assert.throws(() => inner.allocate(bytes), UseAfterFreeError);
      assert.throws(() => inner.releaseCached(), UseAfterFreeError);
      for (const [q, n] of taken) outer.deallocate(q, n);
      inner.deallocate(p, bytes);
      assert.equal(inner.released, true, 'the last live block freed: the memory went back');
      assert.equal(liveIn(outer), 0, 'everything the inner resource took is back upstream');
      assert.throws(() => inner.deallocate(p, bytes), UseAfterFreeError, 'a released resource refuses every call');
    });
  }

  it('PinnedHostPool over a pinned-host pool: the same', () => {
    using outer = new PoolResource({ upstream: new PinnedHostResource(), chunkSize: 4 * MiB });
    const inner = new PinnedHostPool({ upstream: outer });
    const p = inner.allocate(4096);
    inner.destroy();
    assert.equal(inner.released, false);
    const q = outer.allocate(4096);
    assert.ok(!overlaps(p, 4096, q, 4096), 'the live pinned buffer is not handed out again');
    outer.deallocate(q, 4096);
    inner.deallocate(p, 4096);
    assert.equal(inner.released, true);
    assert.equal(liveIn(outer), 0);
    outer.upstream!.destroy();
  });

  it('a write through a buffer of the destroyed inner pool never reaches a new buffer of the outer one', () => {
    using outer = new PoolResource();
    const inner = new PoolResource({ upstream: outer });
    const old = DeviceBuffer.allocate(4096, { resource: inner });
    inner.destroy();
    using fresh = DeviceBuffer.allocate(4096, { resource: outer });
    fresh.memset(0x11);
    old.memset(0x99);
    const seen = new Uint8Array(4096);
    fresh.copyToHost(seen);
    assert.ok(
      seen.every((b) => b === 0x11),
      'the new buffer kept its own bytes',
    );
    old.free();
    assert.equal(inner.released, true, 'freeing the buffer released the destroyed pool');
  });

  it('destroying an upstream under a live inner resource keeps the inner one working until it is done', () => {
    const outer = new PoolResource();
    const inner = new PoolResource({ upstream: outer, chunkSize: 4 * MiB });
    const p = inner.allocate(MiB);
    outer.destroy();
    assert.equal(outer.released, false, "the inner pool's chunk is live in the outer one");
    const q = inner.allocate(MiB); // from the chunk it already holds
    inner.deallocate(q, MiB);
    inner.deallocate(p, MiB);
    inner.destroy();
    assert.equal(inner.released, true);
    assert.equal(outer.released, true, 'the inner pool gave its chunk back: the outer one released');
  });

  it("an arena's pitched blocks count as live blocks", () => {
    using outer = new PoolResource();
    const arena = new ArenaResource({ size: 4 * MiB, upstream: outer });
    const { ptr } = arena.allocatePitched(1000, 10);
    arena.destroy();
    assert.equal(arena.released, false);
    assert.equal(liveIn(outer), 1);
    arena.deallocatePitched(ptr);
    assert.equal(arena.released, true);
    assert.equal(liveIn(outer), 0);
  });
});

describe('resources refuse memory of another kind', () => {
  it('a PinnedHostPool over device memory is a TypeError naming both', () => {
    using cuda = new CudaResource();
    assert.throws(
      () => new PinnedHostPool({ upstream: cuda }),
      (e: unknown) => {
        assert.ok(e instanceof TypeError);
        assert.match(e.message, /PinnedHostPool needs pinned-host memory/);
        assert.match(e.message, /CudaResource\(device=0\) hands out device memory/);
        return true;
      },
    );
  });

  it('a bin of pinned host memory in a device binning resource is a TypeError naming both', () => {
    using pool = new PoolResource();
    using bins = new BinningResource(pool);
    using pinned = new PinnedHostResource();
    assert.throws(
      () => bins.addBin(256, pinned),
      (e: unknown) => {
        assert.ok(e instanceof TypeError);
        assert.match(e.message, /BinningResource.* needs device memory, but its binResource PinnedHostResource\(\) hands out pinned-host memory/);
        return true;
      },
    );
    assert.deepEqual(bins.binSizes, [], 'nothing was added');
  });

  it('an upstream on another device than the one named is a RangeError', { skip: Device.count() < 2 ? 'needs two devices' : false }, () => {
    using cuda = new CudaResource(Device.get(1));
    assert.throws(() => new PoolResource({ upstream: cuda, device: Device.get(0) }), RangeError);
    assert.throws(() => new ArenaResource({ size: MiB, upstream: cuda, device: Device.get(0) }), RangeError);
  });
});

/** Collects garbage until `done()` or about a second has passed. */
async function collectUntil(done: () => boolean): Promise<void> {
  for (let i = 0; i < 100 && !done(); i++) {
    forceGc!();
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** Leak records of `kind` seen while `body` and the collection after it ran. */
async function leaksOf(kind: string, expected: number, body: () => void): Promise<LeakRecord[]> {
  const seen: LeakRecord[] = [];
  const off = onLeak((leak) => {
    if (leak.kind === kind) seen.push(leak);
  });
  try {
    body();
    await collectUntil(() => seen.length >= expected);
  } finally {
    off();
  }
  return seen;
}

describe('the garbage-collection backstop ends dropped streams, events and resources', () => {
  it('1,000 dropped streams are destroyed and counted', needsGc, async () => {
    const before = leakStatistics().count;
    const handles = new Set<number>();
    const seen = await leaksOf('Stream', 1000, () => {
      for (let i = 0; i < 1000; i++) handles.add(Stream.create({ nonBlocking: true }).handle);
    });
    assert.equal(seen.length, 1000);
    assert.ok(
      seen.every((l) => handles.has(l.ptr) && l.releaseError === undefined),
      'each destroyed without an error',
    );
    assert.ok(leakStatistics().count >= before + 1000, 'counted in the leak statistics');
    // The driver took them back: the emulated one refuses the handle now (a real driver may crash on it).
    const [first] = handles;
    if (!onGpu) assert.throws(() => device.backend.streamDestroy(first!));
  });

  it('1,000 dropped events are destroyed and counted', needsGc, async () => {
    const handles = new Set<number>();
    const seen = await leaksOf('Event', 1000, () => {
      for (let i = 0; i < 1000; i++) handles.add(Event.create({ timing: false }).handle);
    });
    assert.equal(seen.length, 1000);
    assert.ok(seen.every((l) => handles.has(l.ptr) && l.releaseError === undefined));
    const [first] = handles;
    if (!onGpu) assert.throws(() => device.backend.eventDestroy(first!));
  });

  it('a dropped pool gives its memory back, live blocks included', needsGc, async () => {
    const before = deviceMemoryUsed(device);
    const seen = await leaksOf('PoolResource', 1, () => {
      const pool = new PoolResource();
      pool.allocate(16 * MiB);
    });
    assert.equal(seen.length, 1);
    assert.ok(seen[0]!.bytes >= 16 * MiB, `the leak says what it held (${seen[0]!.bytes} bytes)`);
    assertMemoryReturned(before, deviceMemoryUsed(device), "the dropped pool's pages went back");
  });

  it('a dropped sub-allocator gives its chunks back to the upstream', needsGc, async () => {
    using outer = new PoolResource();
    const seen = await leaksOf('FixedSizeResource', 1, () => {
      new FixedSizeResource(outer, { blockSize: 4096, blocksToPreallocate: 4 }).allocate(100);
    });
    assert.equal(seen.length, 1);
    assert.equal(seen[0]!.bytes, 4 * 4096);
    assert.equal(liveIn(outer), 0, 'the chunk is back upstream');
  });

  it('a buffer keeps its resource and its stream alive; they end with it', needsGc, async () => {
    let buffer: DeviceBuffer | undefined;
    const seen: LeakRecord[] = [];
    const off = onLeak((leak) => seen.push(leak));
    try {
      (() => {
        const pool = new PoolResource();
        const stream = Stream.create({ nonBlocking: true });
        buffer = DeviceBuffer.allocate(MiB, { resource: pool, stream });
      })();
      await collectUntil(() => false);
      assert.deepEqual(
        seen.filter((l) => l.kind === 'Stream' || l.kind === 'PoolResource'),
        [],
        'neither was collected while the buffer holds them',
      );
      buffer!.free(); // on its stream, into its pool: both still usable
      buffer = undefined;
      await collectUntil(() => seen.some((l) => l.kind === 'Stream') && seen.some((l) => l.kind === 'PoolResource'));
      assert.ok(
        seen.some((l) => l.kind === 'Stream' && l.releaseError === undefined),
        'the stream ended after the buffer',
      );
      assert.ok(
        seen.some((l) => l.kind === 'PoolResource' && l.releaseError === undefined),
        'the pool ended after the buffer',
      );
    } finally {
      off();
    }
  });

  it('a pool caching blocks freed on a dropped stream keeps working', needsGc, async () => {
    using pool = new PoolResource();
    await leaksOf('Stream', 1, () => {
      const s = Stream.create({ nonBlocking: true });
      for (let i = 0; i < 4; i++) pool.deallocate(pool.allocate(MiB, s), MiB, s);
    });
    const p = pool.allocate(MiB);
    pool.deallocate(p, MiB);
    pool.releaseCached();
  });

  it('a destroyed or released resource is not counted', needsGc, async () => {
    const seen = await leaksOf('CudaResource', 1, () => {
      new CudaResource().destroy();
      new CudaResource(); // holds nothing: no leak either
    });
    assert.deepEqual(seen, []);
  });
});
