/**
 * The shapes every resource reports itself in: its figures (one counter shape for every count) and
 * the segments its memory is laid out in. The resources fill them; memoryStats, snapshots, the
 * out-of-memory message and replay read them. Kept apart from the contract (resource.ts) and from
 * the snapshot format (observe/), which both use them, so neither depends on the other.
 */
import type { Counter } from '../counter.js';
import type { OutOfMemoryStatistics } from '../errors.js';

/** What kind of memory a resource hands out. */
export type MemoryKind = 'device' | 'managed' | 'pinned-host';

/**
 * The figures a resource (with what lies below it) reports in one shape, so `memoryStats()` can
 * read any stack without knowing its classes. Optional fields are absent where the resource has
 * no such figure, rather than a 0 that would read as measured.
 */
export interface MemoryFigures {
  /** Bytes handed out and not yet returned (value), their peak and all bytes ever handed out. */
  readonly allocatedBytes: Counter;
  /** Blocks handed out and not yet returned, their peak and all blocks ever handed out. */
  readonly allocations: Counter;
  /** Bytes held from the driver (or the upstream) now: live blocks plus what is cached. */
  readonly reservedBytes: number;
  /** The high-water mark of `reservedBytes` since creation or the last peak reset. */
  readonly peakReservedBytes: number;
  /**
   * `true` where the resource cannot see what the driver holds beyond the bytes asked for (one
   * driver allocation per block, or an adaptor counting over a resource that keeps no figures):
   * `reservedBytes` is then the allocated bytes, and replay estimates the driver's rounding
   * instead. Absent where reserved is measured (pools, arenas, CUDA's own pool).
   */
  readonly reservedFromAllocated?: true;
  /** Allocations that failed for lack of memory and were retried after releasing caches. */
  readonly allocationRetries?: number;
  /** The byte cap of a LimitingAdaptor in the stack (the lowest, where there are several). */
  readonly limitBytes?: number;
  /** Cached physical pages moved to where live data needed them (virtual-memory pools). */
  readonly pageMoves?: number;
  /** Driver calls made to grow, move and give back memory, by kind (virtual-memory pools). */
  readonly driverCalls?: DriverCalls;
}

/**
 * Driver calls of a pool's virtual growth, by kind (cuMemCreate, cuMemMap, cuMemUnmap,
 * cuMemSetAccess, cuMemRelease): the one shape of `driverCalls` wherever it is reported
 * (`memoryFigures()`, `memoryStats()`, snapshots, `growthFigures()`, replay).
 */
export interface DriverCalls {
  readonly create: number;
  readonly map: number;
  readonly unmap: number;
  readonly setAccess: number;
  readonly release: number;
}

/**
 * The sum of driver calls of every kind.
 *
 * @param calls Driver calls by kind.
 * @returns Their sum.
 * @throws Never.
 * @example
 * ```ts
 * totalDriverCalls({ create: 1, map: 1, unmap: 0, setAccess: 1, release: 0 }); // 3
 * ```
 */
export function totalDriverCalls(calls: DriverCalls): number {
  return calls.create + calls.map + calls.unmap + calls.setAccess + calls.release;
}

/**
 * What a pool spent on growing, counted since it was made (`PoolResource.growthFigures()`; replay
 * reports each pass's share of them). With upstream growth every figure but the stream joins is 0.
 */
export interface GrowthFigures {
  /**
   * Cached pages whose memory went to where a live block needed it, on the growth path only (a
   * one-page allocation is mapped at its new place, its old mapping left there; a larger one, see
   * `extentSize`, is unmapped and released whole and its bytes created again).
   */
  readonly pageMoves: number;
  /** Of those, moves back to a place where the page was mapped before: its old mapping was still there, no driver call. */
  readonly pageMovesBack: number;
  /** Host waits before unmapping cached pages, each for one event on one stream that freed blocks on them and had not passed it. */
  readonly hostWaits: number;
  /** Driver calls made to grow, move and give back pages, by kind. */
  readonly driverCalls: DriverCalls;
  /** Nanoseconds spent on the growth path (allocations that had to map pages). */
  readonly growthNs: number;
  /** `extentSize: 'adaptive'`: pages mapped beyond what blocks needed, by growths while memory was plentiful. */
  readonly pagesMappedAhead: number;
  /** `extentSize: 'adaptive'`: growths refused (by the driver or the maximum) that released every wholly free extent and retried. */
  readonly compactions: number;
  /**
   * Stream joins: events recorded on the streams that freed blocks (`records`, for joins and host
   * waits), and times a stream took another stream's free blocks, waiting on such an event (`waits`:
   * each orders the two streams on the GPU, not the host).
   */
  readonly streamJoins: { readonly records: number; readonly waits: number };
}

/**
 * The figures an out-of-memory error carries, read from `memoryFigures()` (the one channel), so an
 * error says what `memoryStats()` would have said at the moment of the failure.
 *
 * @param figures A resource's `memoryFigures()`.
 * @returns Its allocated bytes, allocations and reserved bytes; `undefined` when it keeps none.
 * @example
 * ```ts
 * const statistics = outOfMemoryStatistics(pool.memoryFigures()); // what an OutOfMemoryError carries
 * ```
 */
export function outOfMemoryStatistics(figures: MemoryFigures | undefined): OutOfMemoryStatistics | undefined {
  if (figures === undefined) return undefined;
  return { allocatedBytes: figures.allocatedBytes, allocations: figures.allocations, reservedBytes: figures.reservedBytes };
}

/**
 * What a block of a segment is: handed out (`live`), in the free lists (`free`), or `parked`:
 * freed, but kept aside whole for the same stream's next allocation of the same size (a pool's
 * hit path), so it is free memory that does not merge with its neighbours until the pool needs it.
 */
export type BlockState = 'live' | 'free' | 'parked';

/** One block of a segment: a range of addresses a sub-allocator handed out or holds free. */
export interface SnapshotBlock {
  /** The first address. */
  readonly address: number;
  /** Its size in the segment (the request rounded up to the resource's granule). */
  readonly bytes: number;
  /** What the caller asked for (live blocks); `null` for free and parked blocks. */
  readonly requestedBytes: number | null;
  /** Live, free or parked. */
  readonly state: BlockState;
  /**
   * The stream it was allocated on (live) or whose free lists hold it (free, parked); `null` for
   * fresh memory no stream has used yet, or when the resource does not say.
   */
  readonly stream: number | null;
  /** The id of the call stack that allocated it (live blocks seen by a recording history); else `null`. */
  readonly stack: number | null;
}

/**
 * How a segment came to the resource:
 * - `virtual-range`: a reserved virtual address range, physical pages mapped where `pages` says
 *   (PoolResource's default growth);
 * - `chunk`: memory taken from the upstream resource in one piece (PoolResource over an upstream,
 *   FixedSizeResource);
 * - `region`: an arena's one fixed region;
 * - `allocation`: one driver allocation per block (CudaResource, ManagedResource, AsyncResource),
 *   or a request BinningResource passed to its upstream whole: the segment is the block;
 * - `graph-pool`: a block of a capture-private pool (`GraphPool`): memory a CUDA graph owns, which
 *   eager work is never handed while the graph lives.
 */
export type SegmentKind = 'virtual-range' | 'chunk' | 'region' | 'allocation' | 'graph-pool';

/** Physical pages of a virtual range: which are mapped (hold memory) now. */
export interface SnapshotPages {
  /** The size of one page (the allocation granularity the range is mapped in). */
  readonly pageBytes: number;
  /** Runs of mapped pages, `[first page index, page count]`, ascending and not touching. */
  readonly mapped: ReadonlyArray<readonly [number, number]>;
}

/** A range of addresses a resource holds, with the blocks it is cut into. */
export interface SnapshotSegment {
  /** The first address. */
  readonly address: number;
  /** Its size: for a virtual range the whole reservation, of which only `pages.mapped` holds memory. */
  readonly bytes: number;
  /** How the resource got it. */
  readonly kind: SegmentKind;
  /** Mapped physical pages, for `virtual-range` segments; `null` for the others (wholly backed). */
  readonly pages: SnapshotPages | null;
  /**
   * The blocks, ascending by address. They cover the part of the segment the resource has cut so
   * far: a virtual range's blocks may end before the range does (never used addresses).
   */
  readonly blocks: readonly SnapshotBlock[];
}
