/**
 * Stream-ordered memory pools (cuMemAllocAsync), emulated. A pool takes capacity from its device in
 * segments whose size is the request rounded up to the 2 MiB physical granularity, sub-allocates
 * them best fit in 512-byte granules, coalesces free neighbours, and keeps freed memory cached
 * until trimmed: at each synchronisation point it gives back whole free segments while it holds more
 * than its release threshold, as the driver does.
 *
 * Reuse follows stream order: a block freed on stream A may be handed out again at once on A, but
 * on another stream only after A has reached the free.
 */
import type { Interval } from './address-space.js';
import type { Allocation } from './allocation.js';
import { outOfMemory } from './fail.js';
import { LazyStore } from './store.js';
import type { StreamState } from './streams.js';

/** Granule of pool blocks: every block address and size is a multiple of it. */
export const POOL_BLOCK_ALIGNMENT = 512;
/** Granule of pool segments: the physical allocation granularity. */
export const POOL_SEGMENT_GRANULARITY = 2 * 1024 * 1024;

/** A free that a stream has not reached yet; shared by the pieces of a block split meanwhile. */
interface PendingFree {
  readonly stream: StreamState;
  done: boolean;
  readonly blocks: Block[];
}

/** True when `block` may be handed to `stream` now. */
function usableBy(block: Block, stream: StreamState | undefined): boolean {
  const p = block.pending;
  return p === undefined || p.done || p.stream === stream;
}

/** A sub-range of a segment, allocated or free. */
export class Block {
  /** True when free (cached in the pool). */
  free = false;
  /** The free that a stream has not reached yet; only that stream may reuse the block meanwhile. */
  pending: PendingFree | undefined;
  /** Bumped whenever the block changes hands, so a stale queued free is ignored. */
  generation = 0;
  prev: Block | undefined;
  next: Block | undefined;

  constructor(
    readonly segment: Segment,
    public address: number,
    public size: number,
  ) {}
}

/** Memory a pool holds from its device: an allocation in the device address range. */
export class Segment implements Allocation {
  readonly kind = 'pool' as const;
  live = true;
  readonly store: LazyStore;
  readonly flags = 0;
  /** First block of the segment (blocks tile it in address order). */
  first: Block;

  constructor(
    readonly pool: PoolState,
    readonly base: number,
    readonly size: number,
    readonly context: number,
  ) {
    this.store = new LazyStore(size);
    this.first = new Block(this, base, size);
  }

  /** Capacity this segment holds. */
  get charged(): number {
    return this.size;
  }

  /** The pool's device. */
  get device(): number {
    return this.pool.device;
  }

  /** True when the whole segment is one free block that no stream still has a pending free on. */
  get reclaimable(): boolean {
    return this.first.free && this.first.next === undefined && usableBy(this.first, undefined);
  }

  /** The block containing `address`. */
  blockAt(address: number): Block | undefined {
    for (let b: Block | undefined = this.first; b !== undefined; b = b.next) {
      if (address >= b.address && address < b.address + b.size) return b;
    }
    return undefined;
  }
}

/** What a pool needs from the backend: capacity and addresses for segments. */
export interface PoolHost {
  /** Takes `bytes` of capacity and an address range for a new segment (throws when out of memory). */
  createSegment(pool: PoolState, bytes: number, call: string): Segment;
  /** Gives a segment's capacity and addresses back. */
  destroySegment(segment: Segment): void;
}

function compareFree(a: Block, b: Block): number {
  return a.size - b.size || a.address - b.address;
}

/** A stream-ordered pool: its attributes, statistics, segments and free blocks. */
export class PoolState implements Interval {
  readonly base: number;
  readonly size = 1;
  live = true;
  /** The three reuse policies, stored as set (they default to enabled). */
  readonly reuse = new Map<number, number>([[1, 1], [2, 1], [3, 1]]);
  releaseThreshold = 0;
  reserved = 0;
  reservedHigh = 0;
  used = 0;
  usedHigh = 0;
  /** Access of other devices (the owning device always has read-write). */
  readonly access = new Map<number, number>();
  readonly segments = new Set<Segment>();
  /** Free blocks sorted by (size, address), for best fit. */
  private readonly freeBlocks: Block[] = [];

  constructor(
    /** The pool's handle. */
    readonly handle: number,
    /** Device ordinal the pool's memory lives on. */
    readonly device: number,
    /** Upper bound on reserved bytes; 0 for none. */
    readonly maxSize: number,
    /** Handle types it can be exported as. */
    readonly handleTypes: number,
    private readonly host: PoolHost,
  ) {
    this.base = handle;
  }

  /** Hands out a block of at least `bytes` usable by `stream`. */
  allocate(bytes: number, stream: StreamState, call: string): Block {
    const size = Math.ceil(bytes / POOL_BLOCK_ALIGNMENT) * POOL_BLOCK_ALIGNMENT;
    let block = this.bestFit(size, stream);
    if (block === undefined) {
      const segmentSize = Math.ceil(size / POOL_SEGMENT_GRANULARITY) * POOL_SEGMENT_GRANULARITY;
      let segment: Segment;
      try {
        segment = this.grow(segmentSize, call);
      } catch (error) {
        // Give back what is cached and try once more before failing.
        if (this.releaseTo(0) === 0) throw error;
        segment = this.grow(segmentSize, call);
      }
      this.reserved += segmentSize;
      this.reservedHigh = Math.max(this.reservedHigh, this.reserved);
      block = segment.first;
    } else {
      this.removeFree(block);
    }
    if (block.size - size >= POOL_BLOCK_ALIGNMENT) {
      const rest = new Block(block.segment, block.address + size, block.size - size);
      rest.free = true;
      rest.pending = block.pending;
      rest.pending?.blocks.push(rest);
      rest.prev = block;
      rest.next = block.next;
      if (block.next !== undefined) block.next.prev = rest;
      block.next = rest;
      block.size = size;
      this.insertFree(rest);
    }
    block.free = false;
    block.pending = undefined;
    block.generation++;
    this.used += block.size;
    this.usedHigh = Math.max(this.usedHigh, this.used);
    return block;
  }

  /**
   * Returns a block to the pool on `stream`; returns the callback that completes the free when the
   * stream reaches it (or undefined when `stream` is undefined: the free completes at once).
   */
  free(block: Block, stream: StreamState | undefined): (() => void) | undefined {
    this.used -= block.size;
    block.free = true;
    block.generation++;
    if (stream === undefined) {
      block.pending = undefined;
      this.insertFree(block);
      this.coalesce(block, undefined);
      return undefined;
    }
    const pending: PendingFree = { stream, done: false, blocks: [block] };
    block.pending = pending;
    this.insertFree(block);
    this.coalesce(block, pending);
    return (): void => {
      pending.done = true;
      for (const b of pending.blocks) {
        if (b.free && b.pending === pending && this.segments.has(b.segment)) {
          b.pending = undefined;
          this.coalesce(b, undefined);
        }
      }
    };
  }

  /** Gives back whole free segments while more than `keep` bytes are reserved; returns bytes released. */
  releaseTo(keep: number): number {
    let released = 0;
    if (this.reserved <= keep) return 0;
    for (const segment of this.segments) {
      if (this.reserved <= keep) break;
      if (!segment.reclaimable) continue;
      this.removeFree(segment.first);
      this.segments.delete(segment);
      this.reserved -= segment.size;
      released += segment.size;
      this.host.destroySegment(segment);
    }
    return released;
  }

  /** Releases what exceeds the release threshold (called at synchronisation points). */
  releaseAboveThreshold(): void {
    this.releaseTo(this.releaseThreshold);
  }

  /** Destroys every segment (memPoolDestroy). */
  destroy(): void {
    for (const segment of this.segments) this.host.destroySegment(segment);
    this.segments.clear();
    this.freeBlocks.length = 0;
    this.reserved = 0;
    this.used = 0;
    this.live = false;
  }

  private grow(segmentSize: number, call: string): Segment {
    if (this.maxSize > 0 && this.reserved + segmentSize > this.maxSize) {
      outOfMemory(segmentSize, call,
        `the pool holds ${this.reserved} bytes and its maximum size is ${this.maxSize}`);
    }
    const segment = this.host.createSegment(this, segmentSize, call);
    this.segments.add(segment);
    return segment;
  }

  private bestFit(size: number, stream: StreamState): Block | undefined {
    const list = this.freeBlocks;
    let lo = 0;
    let hi = list.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (list[mid]!.size < size) lo = mid + 1;
      else hi = mid;
    }
    for (let i = lo; i < list.length; i++) {
      const b = list[i]!;
      if (usableBy(b, stream)) return b;
    }
    return undefined;
  }

  /**
   * Merges `block` (free) with free neighbours it may join: neighbours usable by every stream, and,
   * when `pending` is a free not yet reached, neighbours freed earlier on the same stream. The
   * result carries `pending` (the latest free on that stream), which is the conservative choice.
   */
  private coalesce(block: Block, pending: PendingFree | undefined): void {
    const joins = (n: Block | undefined): n is Block =>
      n !== undefined && n.free && (usableBy(n, undefined) || (pending !== undefined && n.pending?.stream === pending.stream));
    let b = block;
    const prev = b.prev;
    if (joins(prev)) {
      this.removeFree(prev);
      this.removeFree(b);
      prev.size += b.size;
      prev.next = b.next;
      if (b.next !== undefined) b.next.prev = prev;
      b.free = false;
      b.pending = undefined;
      b = prev;
      this.insertFree(b);
    }
    const next = b.next;
    if (joins(next)) {
      this.removeFree(next);
      this.removeFree(b);
      b.size += next.size;
      b.next = next.next;
      if (next.next !== undefined) next.next.prev = b;
      next.free = false;
      next.pending = undefined;
      this.insertFree(b);
    }
    if (b !== block || b.pending !== pending) {
      b.generation++;
      b.pending = pending;
      if (pending !== undefined && !pending.blocks.includes(b)) pending.blocks.push(b);
    }
  }

  private indexOf(block: Block): number {
    const list = this.freeBlocks;
    let lo = 0;
    let hi = list.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (compareFree(list[mid]!, block) < 0) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  private insertFree(block: Block): void {
    this.freeBlocks.splice(this.indexOf(block), 0, block);
  }

  private removeFree(block: Block): void {
    const i = this.indexOf(block);
    if (this.freeBlocks[i] === block) this.freeBlocks.splice(i, 1);
  }
}
