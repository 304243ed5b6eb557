/**
 * Every memory resource and adaptor stack the data fuzz (data-fuzz.ts) runs, in one list. When a
 * constructor, an option or the way a resource is torn down changes, this is the one file to edit:
 * the engine, `npm run fuzz -- --data` and test/resource/data-fuzz.test.ts all take their targets from here.
 *
 * A factory builds a fresh stack each time it is called (the fuzz destroys and rebuilds it now and
 * then); `close()` tears down what that stack owns, after the fuzz has freed every block.
 * Upstreams shared on purpose across rebuilds (a factory's `shared` pool, the device's default
 * memory pool) outlive the stacks: memory a destroyed stack gave back to them may be handed out to
 * the next stack, which is how ordering mistakes in `destroy()` become visible.
 */
import { AsyncResource } from '../../src/resource/upstream/async-resource.js';
import { ArenaResource } from '../../src/resource/suballoc/arena.js';
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
import type { MemoryResource } from '../../src/resource/resource.js';
import { StatisticsAdaptor } from '../../src/resource/adaptors/statistics.js';
import { TrackingAdaptor } from '../../src/resource/adaptors/tracking.js';

const KiB = 1024;
const MiB = 1024 * 1024;

/** One built stack, as the fuzz drives it. */
export interface FuzzTarget {
  /** What the fuzz allocates from and frees to. */
  readonly resource: MemoryResource;
  /** The largest request to make (sizes above it are drawn again below it). */
  readonly maxBytes: number;
  /** The resource may run out (a fixed arena, a limit): OutOfMemoryError on allocate is then expected. */
  readonly bounded?: boolean;
  /** Tears the stack down; every block has been freed (on its stream) before this is called. */
  close(): void;
}

/** An upstream made once per run and shared by every stack built over it during the run. */
export interface SharedUpstream {
  readonly resource: MemoryResource;
  /** Tears it down at the end of the run, after the last stack was closed. */
  close(): void;
}

/** How to build one target; `name` is what `--only` matches and what failures print. */
export interface ResourceFactory {
  readonly name: string;
  /**
   * Made once per run when given, and passed to every `create`: an upstream that outlives the
   * stacks built over it, so memory a destroyed stack gave back (on whatever stream) can be handed
   * to the next stack, which is how ordering mistakes in `destroy()` become visible.
   */
  shared?(): SharedUpstream;
  create(shared?: MemoryResource): FuzzTarget;
}

/**
 * Destroys a resource: `destroy()`, or `shutdown()` for a resource of the older shape without
 * `destroy()`. The one place that knows how a resource is torn down.
 */
export function destroyResource(mr: MemoryResource): void {
  const r = mr as MemoryResource & { destroy?: () => void; shutdown?: () => void };
  if (typeof r.destroy === 'function') r.destroy();
  else if (typeof r.shutdown === 'function') r.shutdown();
}

/**
 * A target whose close destroys `owned` in order, top of the stack first (destroying an adaptor or
 * a sub-allocator leaves alone a resource it was given, so every layer is listed).
 */
function target(resource: MemoryResource, maxBytes: number, owned: readonly MemoryResource[], bounded = false): FuzzTarget {
  return {
    resource,
    maxBytes,
    bounded,
    close: () => {
      for (const r of owned) destroyResource(r);
    },
  };
}

/**
 * A resource over the device's default pool. The pool outlives every stack built over it
 * (destroying the resource leaves the default pool to the driver), so memory one stack gave back
 * can be handed to the next one.
 */
function defaultPool(): AsyncResource {
  return new AsyncResource({ pool: 'default' });
}

/** A target of `top` over the default pool `up`: close destroys `top`, trims the pool, destroys `up`. */
function overDefaultPool(top: MemoryResource, up: AsyncResource, maxBytes: number): FuzzTarget {
  return {
    resource: top,
    maxBytes,
    close: () => {
      destroyResource(top);
      up.releaseCached();
      destroyResource(up);
    },
  };
}

/** A PoolResource growing through virtual memory: what the adaptor stacks sit on. */
function virtualPool(maximumSize = 512 * MiB): PoolResource {
  return new PoolResource({ maximumSize });
}

/**
 * A virtual-memory PoolResource shared by the stacks of a run. A pool reuses memory freed on a
 * stream at once on that stream, so memory a sub-allocator gives back on the wrong stream comes
 * straight back to it while the other streams' work on it may still be queued.
 */
function sharedPool(): SharedUpstream {
  const pool = virtualPool();
  return { resource: pool, close: () => destroyResource(pool) };
}

/** The shared upstream `create` was given (every factory with `shared` is given one). */
function given(shared: MemoryResource | undefined): MemoryResource {
  if (shared === undefined) throw new Error('this factory needs its shared upstream');
  return shared;
}

/** Every target of the data fuzz. */
export const resourceFactories: readonly ResourceFactory[] = [
  {
    name: 'PoolResource (virtual memory)',
    create: () => {
      const p = virtualPool();
      return target(p, 4 * MiB, [p]);
    },
  },
  {
    // Adaptive growth with room (a quarter of 512 MiB stays free): chunks mapped ahead as large extents.
    name: 'PoolResource (adaptive extents, room)',
    create: () => {
      const p = new PoolResource({ maximumSize: 512 * MiB, extentSize: 'adaptive' });
      return target(p, 4 * MiB, [p]);
    },
  },
  {
    // Adaptive growth near its maximum: chunks while a quarter of 40 MiB stays free, then one-page
    // extents, and compaction (free extents released, a page-granular retry) before OutOfMemoryError.
    name: 'PoolResource (adaptive extents, short)',
    create: () => {
      const p = new PoolResource({ maximumSize: 40 * MiB, extentSize: 'adaptive' });
      return target(p, 4 * MiB, [p]);
    },
  },
  {
    // A granule-aligned virtual range and its own physical memory per block (spilling's resource;
    // the spilling itself is fuzzed by test/buffer/spill-fuzz.test.ts).
    name: 'SpillableResource',
    create: () => {
      const r = new SpillableResource();
      return target(r, 4 * MiB, [r]);
    },
  },
  {
    name: 'PoolResource (upstream chunks)',
    create: () => {
      const up = new CudaResource();
      const p = new PoolResource({ upstream: up, chunkSize: 4 * MiB });
      return target(p, 4 * MiB, [p, up]);
    },
  },
  {
    // Chunks from a stream-ordered upstream: the stream a chunk goes back on matters.
    name: 'PoolResource (chunks from AsyncResource)',
    create: () => {
      const up = defaultPool();
      return overDefaultPool(new PoolResource({ upstream: up, chunkSize: 4 * MiB }), up, 4 * MiB);
    },
  },
  {
    // Chunks from a pool shared by the stacks of a run (see sharedPool).
    name: 'PoolResource (chunks from a shared PoolResource)',
    shared: sharedPool,
    create: (shared) => {
      const p = new PoolResource({ upstream: given(shared), chunkSize: 4 * MiB });
      return target(p, 4 * MiB, [p]);
    },
  },
  {
    name: 'FixedSizeResource',
    create: () => {
      const up = new CudaResource();
      const f = new FixedSizeResource(up, { blockSize: 64 * KiB, blocksToPreallocate: 16 });
      return target(f, 64 * KiB, [f, up]);
    },
  },
  {
    // As above, over a stream-ordered upstream: the stream releaseCached/destroy give chunks back on is visible.
    name: 'FixedSizeResource (upstream AsyncResource)',
    create: () => {
      const up = defaultPool();
      return overDefaultPool(new FixedSizeResource(up, { blockSize: 64 * KiB, blocksToPreallocate: 16 }), up, 64 * KiB);
    },
  },
  {
    // Over a pool shared by the stacks of a run: the stream chunks go back on is visible at once.
    name: 'FixedSizeResource (upstream shared PoolResource)',
    shared: sharedPool,
    create: (shared) => {
      const f = new FixedSizeResource(given(shared), { blockSize: 64 * KiB, blocksToPreallocate: 16 });
      return target(f, 64 * KiB, [f]);
    },
  },
  {
    name: 'BinningResource',
    create: () => {
      const up = new CudaResource();
      const b = new BinningResource(up, { minSizeExponent: 8, maxSizeExponent: 16 });
      return target(b, 1 * MiB, [b, up]);
    },
  },
  {
    name: 'BinningResource (upstream AsyncResource)',
    create: () => {
      const up = defaultPool();
      return overDefaultPool(new BinningResource(up, { minSizeExponent: 8, maxSizeExponent: 16 }), up, 1 * MiB);
    },
  },
  {
    name: 'BinningResource (upstream shared PoolResource)',
    shared: sharedPool,
    create: (shared) => {
      const b = new BinningResource(given(shared), { minSizeExponent: 8, maxSizeExponent: 16 });
      return target(b, 1 * MiB, [b]);
    },
  },
  {
    name: 'ArenaResource',
    create: () => {
      const a = new ArenaResource({ size: 64 * MiB });
      return target(a, 4 * MiB, [a], true);
    },
  },
  {
    name: 'PinnedHostPool',
    create: () => {
      const p = new PinnedHostPool({ maximumCachedBytes: 8 * MiB });
      return target(p, 4 * MiB, [p]);
    },
  },
  {
    name: 'CudaResource',
    create: () => {
      const c = new CudaResource();
      return target(c, 4 * MiB, [c]);
    },
  },
  {
    name: 'AsyncResource (default pool)',
    create: () => {
      const a = defaultPool();
      return {
        resource: a,
        maxBytes: 4 * MiB,
        close: () => {
          a.releaseCached();
          destroyResource(a);
        },
      };
    },
  },
  {
    name: 'AsyncResource (new pool)',
    create: () => {
      const a = new AsyncResource({ pool: {} });
      return target(a, 4 * MiB, [a]);
    },
  },
  {
    name: 'ManagedResource',
    create: () => {
      const m = new ManagedResource();
      return target(m, 4 * MiB, [m]);
    },
  },
  {
    name: 'PinnedHostResource',
    create: () => {
      const p = new PinnedHostResource();
      return target(p, 4 * MiB, [p]);
    },
  },
  {
    name: 'StatisticsAdaptor on PoolResource',
    create: () => {
      const p = virtualPool();
      const a = new StatisticsAdaptor(p);
      return target(a, 4 * MiB, [a, p]);
    },
  },
  {
    name: 'LimitingAdaptor on PoolResource',
    create: () => {
      const p = virtualPool();
      const a = new LimitingAdaptor(p, 48 * MiB);
      return target(a, 4 * MiB, [a, p], true);
    },
  },
  {
    name: 'TrackingAdaptor on PoolResource',
    create: () => {
      const p = virtualPool();
      const a = new TrackingAdaptor(p);
      return target(a, 4 * MiB, [a, p]);
    },
  },
  {
    name: 'LoggingAdaptor on PoolResource',
    create: () => {
      const p = virtualPool();
      const sink = (line: string): void => {
        if (line.length === 0) throw new Error('LoggingAdaptor wrote an empty line');
      };
      const a = new LoggingAdaptor(p, sink);
      return target(a, 4 * MiB, [a, p]);
    },
  },
  {
    // A small maximum, so out-of-memory (and the release-and-retry path) happens now and then.
    name: 'RetryOnOutOfMemory on PoolResource',
    create: () => {
      const p = virtualPool(32 * MiB);
      const a = new RetryOnOutOfMemory(p);
      return target(a, 4 * MiB, [a, p], true);
    },
  },
  {
    name: 'All adaptors stacked on PoolResource',
    create: () => {
      const p = virtualPool(64 * MiB);
      const statistics = new StatisticsAdaptor(p);
      const limiting = new LimitingAdaptor(statistics, 48 * MiB);
      const tracking = new TrackingAdaptor(limiting);
      const logging = new LoggingAdaptor(tracking, () => {});
      const retry = new RetryOnOutOfMemory(logging);
      return target(retry, 4 * MiB, [retry, logging, tracking, limiting, statistics, p], true);
    },
  },
];
