/**
 * Stream-ordered memory pools (cuMemAllocAsync), emulated the way the driver builds them: a pool
 * owns a large range of virtual addresses and backs it with physical memory in 2 MiB pages, mapped
 * when a block needs them and unmapped when the pool releases memory. Blocks tile the range from
 * its start; allocation is best fit over free blocks (512-byte granules), else the range grows at
 * its top (extending a free block at the top if there is one); free neighbours coalesce. What the
 * pool reserves (RESERVED_MEM_CURRENT, and capacity) is the mapped pages. Freed memory stays
 * mapped until released: at each synchronisation point the pool unmaps pages lying wholly inside
 * free blocks while it holds more than its release threshold, as the driver does.
 *
 * Reuse follows stream order: a block freed on stream A may be handed out again at once on A, but
 * on another stream only after A has reached the free.
 */
import type { Allocation } from './allocation.js';
import { outOfMemory } from './fail.js';
import { formatBytesExact } from '../../util/size.js';
import { LazyStore, PAGE_SIZE } from './store.js';

/** Granule of pool blocks: every block address and size is a multiple of it. */
export const POOL_BLOCK_ALIGNMENT = 512;
/** Page size of pool memory: the physical allocation granularity. */
export const POOL_SEGMENT_GRANULARITY = 2 * 1024 * 1024;

/**
 * A stream, by identity only: the pool compares the stream that freed a block with the one that
 * asks for it, and reads nothing else of it.
 */
type StreamKey = object;

/** A free that a stream has not reached yet; shared by the pieces of a block split meanwhile. */
interface PendingFree {
  readonly stream: StreamKey;
  done: boolean;
  readonly blocks: Block[];
}

/** True when `block` may be handed to `stream` now. */
function usableBy(block: Block, stream: StreamKey | undefined): boolean {
  const p = block.pending;
  return p === undefined || p.done || p.stream === stream;
}

/** A sub-range of a pool's address range, allocated or free. */
export class Block {
  /** True when free (cached in the pool). */
  free = false;
  /** The free that a stream has not reached yet; only that stream may reuse the block meanwhile. */
  pending: PendingFree | undefined;
  /** Bumped whenever the block changes hands. */
  generation = 0;
  /** The bytes asked for when it was last handed out (what the driver reports as its range size). */
  requested = 0;
  prev: Block | undefined;
  next: Block | undefined;

  constructor(
    readonly pool: PoolState,
    public address: number,
    public size: number,
  ) {}
}

/** What a pool needs from the backend: capacity for the pages it maps. */
export interface PoolHost {
  /** Takes `bytes` of the pool's device capacity (throws OutOfMemoryError naming `call`). */
  charge(pool: PoolState, bytes: number, call: string): void;
  /** Gives `bytes` of capacity back. */
  uncharge(pool: PoolState, bytes: number): void;
}

function compareFree(a: Block, b: Block): number {
  return a.size - b.size || a.address - b.address;
}

/** A stream-ordered pool: its attributes, statistics, address range, pages and blocks. */
export class PoolState implements Allocation {
  readonly kind = 'pool' as const;
  live = true;
  readonly flags = 0;
  readonly charged = 0;
  readonly store: LazyStore;
  /** The three reuse policies, stored as set (they default to enabled). */
  readonly reuse = new Map<number, number>([
    [1, 1],
    [2, 1],
    [3, 1],
  ]);
  releaseThreshold = 0;
  reserved = 0;
  reservedHigh = 0;
  used = 0;
  usedHigh = 0;
  /** Access of other devices (the owning device always has read-write). */
  readonly access = new Map<number, number>();
  /** Indexes (from `base`, in 2 MiB pages) of the mapped pages. */
  private readonly mapped = new Set<number>();
  /** The first block; blocks tile [base, top). */
  private first: Block | undefined;
  private last: Block | undefined;
  private top: number;
  /** Free blocks sorted by (size, address), for best fit. */
  private readonly freeBlocks: Block[] = [];

  constructor(
    /** The pool's handle. */
    readonly handle: number,
    /** Device ordinal the pool's memory lives on. */
    readonly device: number,
    /** Context it was created in. */
    readonly context: number,
    /** Upper bound on reserved bytes; 0 for none. */
    readonly maxSize: number,
    /** Handle types it can be exported as. */
    readonly handleTypes: number,
    /** Start of the pool's virtual address range (2 MiB aligned). */
    readonly base: number,
    /** Size of the range. */
    readonly size: number,
    private readonly host: PoolHost,
    /** The host NUMA node whose memory the pool holds; undefined for device memory. */
    readonly hostNuma?: number,
  ) {
    this.top = base;
    this.store = new LazyStore(size);
    // Host memory is viewed from the host zero-copy, one ArrayBuffer per block from its first
    // byte: blocks of a host pool are whole store pages, so no page is shared by two blocks.
    this.granule = hostNuma === undefined ? POOL_BLOCK_ALIGNMENT : PAGE_SIZE;
  }

  /** Every block address and size is a multiple of it: 512 bytes, a store page for host memory. */
  private readonly granule: number;

  /** Hands out a block of at least `bytes` usable by `stream`. */
  allocate(bytes: number, stream: StreamKey, call: string): Block {
    const size = Math.ceil(bytes / this.granule) * this.granule;
    let block = this.bestFit(size, stream);
    if (block === undefined) {
      const tail = this.last !== undefined && this.last.free && usableBy(this.last, stream) ? this.last : undefined;
      const grow = size - (tail?.size ?? 0);
      if (this.top + grow > this.base + this.size) {
        outOfMemory(bytes, call, `the pool's ${formatBytesExact(this.size)} address range is exhausted`);
      }
      if (tail !== undefined) {
        this.removeFree(tail);
        tail.size += grow;
        block = tail;
      } else {
        block = new Block(this, this.top, grow);
        block.free = true;
        block.prev = this.last;
        if (this.last !== undefined) this.last.next = block;
        else this.first = block;
        this.last = block;
      }
      this.top += grow;
    } else {
      this.removeFree(block);
    }
    this.mapPages(block.address, size, bytes, call, block);
    if (block.size - size >= this.granule) {
      const rest = new Block(this, block.address + size, block.size - size);
      rest.free = true;
      rest.pending = block.pending;
      rest.pending?.blocks.push(rest);
      rest.prev = block;
      rest.next = block.next;
      if (block.next !== undefined) block.next.prev = rest;
      else this.last = rest;
      block.next = rest;
      block.size = size;
      this.insertFree(rest);
    }
    block.free = false;
    block.pending = undefined;
    block.generation++;
    block.requested = bytes;
    this.used += block.size;
    this.usedHigh = Math.max(this.usedHigh, this.used);
    if (this.hostNuma !== undefined) this.store.sharePages(block.address - this.base, block.size, new Uint8Array(block.size));
    return block;
  }

  /**
   * The ArrayBuffer behind the host pool block starting at `address`, from its first byte (what a
   * host view of it is); undefined for a device pool or an address that starts no live block.
   */
  hostBuffer(address: number, bytes: number): ArrayBuffer | undefined {
    if (this.hostNuma === undefined) return undefined;
    const block = this.blockAt(address);
    if (block === undefined || block.free || block.address !== address || bytes > block.size) return undefined;
    return this.store.hostBuffer(address - this.base, bytes);
  }

  /**
   * Returns a block to the pool on `stream`; returns the callback that completes the free when the
   * stream reaches it (or undefined when `stream` is undefined: the free completes at once).
   */
  free(block: Block, stream: StreamKey | undefined): (() => void) | undefined {
    this.used -= block.size;
    if (this.hostNuma !== undefined) this.store.unsharePages(block.address - this.base, block.size);
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
        if (b.free && b.pending === pending && this.live) {
          b.pending = undefined;
          this.coalesce(b, undefined);
        }
      }
    };
  }

  /** Unmaps pages wholly inside free blocks while more than `keep` bytes are mapped; returns bytes released. */
  releaseTo(keep: number): number {
    if (this.reserved <= keep) return 0;
    let released = 0;
    // Largest free blocks first: they hold the most whole pages.
    for (let i = this.freeBlocks.length - 1; i >= 0 && this.reserved > keep; i--) {
      const b = this.freeBlocks[i]!;
      if (!usableBy(b, undefined)) continue;
      const first = Math.ceil((b.address - this.base) / POOL_SEGMENT_GRANULARITY);
      // Past the top block nothing is allocated, so its last partial page counts as free too.
      const end = (b.next === undefined ? Math.ceil : Math.floor)((b.address + b.size - this.base) / POOL_SEGMENT_GRANULARITY);
      for (let page = first; page < end && this.reserved > keep; page++) {
        if (!this.mapped.delete(page)) continue;
        this.reserved -= POOL_SEGMENT_GRANULARITY;
        released += POOL_SEGMENT_GRANULARITY;
        this.store.fill(page * POOL_SEGMENT_GRANULARITY, POOL_SEGMENT_GRANULARITY, new Uint8Array(1));
      }
    }
    if (released > 0) this.host.uncharge(this, released);
    return released;
  }

  /** Releases what exceeds the release threshold (called at synchronisation points). */
  releaseAboveThreshold(): void {
    if (this.reserved > this.releaseThreshold) this.releaseTo(this.releaseThreshold);
  }

  /** The block containing `address`, if it lies in the pool's blocks. */
  blockAt(address: number): Block | undefined {
    for (let b = this.first; b !== undefined; b = b.next) {
      if (address >= b.address && address < b.address + b.size) return b;
    }
    return undefined;
  }

  /** Every allocated block, in address order. */
  *allocatedBlocks(): IterableIterator<Block> {
    for (let b = this.first; b !== undefined; b = b.next) if (!b.free) yield b;
  }

  /** Gives every mapped page back (memPoolDestroy). */
  destroy(): void {
    if (this.reserved > 0) this.host.uncharge(this, this.reserved);
    this.mapped.clear();
    this.freeBlocks.length = 0;
    this.first = undefined;
    this.last = undefined;
    this.reserved = 0;
    this.used = 0;
    this.live = false;
  }

  /** Maps the pages under [address, address + length) that are not mapped yet. */
  private mapPages(address: number, length: number, requested: number, call: string, block: Block): void {
    const first = Math.floor((address - this.base) / POOL_SEGMENT_GRANULARITY);
    const end = Math.ceil((address + length - this.base) / POOL_SEGMENT_GRANULARITY);
    let missing = 0;
    for (let page = first; page < end; page++) if (!this.mapped.has(page)) missing++;
    if (missing === 0) return;
    const bytes = missing * POOL_SEGMENT_GRANULARITY;
    try {
      if (this.maxSize > 0 && this.reserved + bytes > this.maxSize) {
        outOfMemory(requested, call, `the pool holds ${formatBytesExact(this.reserved)} and its maximum size is ${formatBytesExact(this.maxSize)}`);
      }
      this.host.charge(this, bytes, call);
    } catch (error) {
      // Give back cached pages (not the ones this block needs) and try once more before failing.
      this.insertFree(block);
      if (this.releaseTo(0) === 0) throw error;
      this.removeFree(block);
      this.mapPages(address, length, requested, call, block);
      return;
    }
    for (let page = first; page < end; page++) this.mapped.add(page);
    this.reserved += bytes;
    this.reservedHigh = Math.max(this.reservedHigh, this.reserved);
  }

  private bestFit(size: number, stream: StreamKey): Block | undefined {
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
      else this.last = prev;
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
      else this.last = b;
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
