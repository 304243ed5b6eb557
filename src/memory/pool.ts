/**
 * PoolResource: the general-purpose sub-allocator. Allocation and deallocation on a hit are plain
 * number arithmetic in TypeScript (segregated best-fit free lists over typed arrays, one Map of live
 * blocks): no FFI call, no object allocated, so a pair costs a fraction of a microsecond.
 *
 * Growth, by default, is through the virtual memory management API: one large virtual range is
 * reserved up front, addresses are sub-allocated in it, and physical pages are mapped only where
 * live blocks need them, so address fragmentation costs no physical memory (see
 * `pool/virtual-growth.ts`). With an `upstream` resource, the pool grows RMM style, in chunks.
 */
import type { Backend, Ptr } from '../backend/backend.js';
import { Device } from '../device.js';
import { DoubleFreeError, InvalidPointerError, NotSupportedError, OutOfMemoryError, UseAfterFreeError } from '../errors.js';
import { checkBytes } from '../validate.js';
import { BlockHeap } from './pool/block-heap.js';
import { NIL } from './pool/block-store.js';
import { GRANULE } from './pool/free-list.js';
import { UpstreamChunks } from './pool/upstream-growth.js';
import { PhysicalExhausted, VirtualPages } from './pool/virtual-growth.js';
import type { MemoryKind, MemoryResource, ReservingResource, StreamRef } from './resource.js';

/** Options for a PoolResource. */
export interface PoolOptions {
  /** The device (default: device 0, or the upstream's device). */
  readonly device?: Device;
  /** Grow in chunks from this resource instead of through virtual memory. */
  readonly upstream?: MemoryResource;
  /** Bytes to take (upstream) or map (virtual) at creation; default 0. */
  readonly initialSize?: number;
  /** Cap on reserved bytes (physical bytes for virtual growth); OutOfMemoryError beyond it. */
  readonly maximumSize?: number;
  /** Upstream growth: the smallest chunk taken after the first (default 32 MiB). */
  readonly chunkSize?: number;
  /** Virtual growth: bytes of address space to reserve (default twice the device's memory). */
  readonly addressSpaceSize?: number;
}

/** Statistics of a pool, for logs and tests. */
export interface PoolStatistics {
  /** Bytes the callers asked for, summed over live blocks. */
  readonly liveBytes: number;
  readonly peakLiveBytes: number;
  readonly liveCount: number;
  /** Bytes held from the driver or upstream. */
  readonly reservedBytes: number;
  readonly peakReservedBytes: number;
  /** Bytes sitting in free lists (address space for virtual growth). */
  readonly freeBytes: number;
  /** Times a stream took another stream's free blocks (an event wait each). */
  readonly streamSteals: number;
  /**
   * Virtual growth: cached physical pages moved to where live data needed them (an unmap and a
   * map each, on the growth path only); 0 with upstream growth.
   */
  readonly pageMoves: number;
  /**
   * Virtual growth: host waits before unmapping cached pages, each for one event on one stream
   * that freed blocks on them and had not yet passed it; 0 with upstream growth.
   */
  readonly synchronizations: number;
}

const DEFAULT_CHUNK = 32 * 1024 * 1024;

/** A stream-ordered pool allocator over virtual memory pages or an upstream resource. */
export class PoolResource implements ReservingResource {
  /** Device memory, or the upstream's kind. */
  readonly kind: MemoryKind;
  /** Every block is a multiple of 256 bytes, aligned to 256. */
  readonly alignment = GRANULE;
  /** The device ordinal. */
  readonly device: number;
  /** The upstream resource, when growing from one. */
  readonly upstream?: MemoryResource;
  private readonly heap: BlockHeap;
  private readonly pages: VirtualPages | null;
  private readonly chunks: UpstreamChunks | null;
  private readonly backend: Backend;
  private readonly options: PoolOptions;
  private destroyed = false;

  /** A pool on `device` (virtual growth) or over `upstream` (chunked growth). */
  constructor(options: PoolOptions = {}) {
    if (options === null || typeof options !== 'object') throw new TypeError('options must be an object');
    this.options = options;
    const maximum = options.maximumSize === undefined ? Infinity : checkBytes(options.maximumSize, 'maximumSize');
    const initial = options.initialSize === undefined || options.initialSize === 0 ? 0 : checkBytes(options.initialSize, 'initialSize');
    if (initial > maximum) throw new RangeError(`initialSize (${initial}) exceeds maximumSize (${maximum})`);
    const upstream = options.upstream;
    const dev = options.device ?? Device.get(upstream !== undefined && upstream.device >= 0 ? upstream.device : 0);
    this.backend = dev.backend;
    this.heap = new BlockHeap(this.backend);
    if (upstream !== undefined) {
      this.upstream = upstream;
      this.kind = upstream.kind;
      this.device = upstream.device;
      const chunk = options.chunkSize === undefined ? DEFAULT_CHUNK : checkBytes(options.chunkSize, 'chunkSize');
      this.pages = null;
      this.chunks = new UpstreamChunks(upstream, this.heap, chunk, maximum);
      if (initial > 0 && !this.chunks.grow(initial, -1, initial)) {
        throw new OutOfMemoryError(initial, 'PoolResource', this.describe(), undefined,
          `cannot take the initial ${initial} bytes from ${upstream.describe()}`);
      }
    } else {
      this.kind = 'device';
      this.device = dev.ordinal;
      dev.makeCurrent();
      if (!dev.info.virtualMemoryManagementSupported) {
        throw new NotSupportedError(`${dev.info.name} does not support virtual memory management; ` +
          'give PoolResource an upstream (e.g. new CudaResource(device))');
      }
      const range = options.addressSpaceSize === undefined
        ? 2 * dev.info.totalMemory
        : checkBytes(options.addressSpaceSize, 'addressSpaceSize');
      this.pages = new VirtualPages(this.backend, dev.ordinal, Math.max(range, initial), maximum, this.heap);
      this.chunks = null;
      if (initial > 0) {
        // Map the first pages now, so the first allocations hit.
        const ptr = this.allocate(initial);
        this.deallocate(ptr, initial);
      }
    }
  }

  /**
   * Allocates `bytes` usable on `stream` (default stream when omitted). A hit is pure TypeScript;
   * growth maps pages or takes a chunk from upstream.
   */
  allocate(bytes: number, stream?: StreamRef): Ptr {
    checkBytes(bytes);
    if (this.destroyed) throw new UseAfterFreeError(`${this.describe()} was destroyed`);
    const size = bytes % GRANULE === 0 ? bytes : (Math.floor(bytes / GRANULE) + 1) * GRANULE;
    const h = stream === undefined ? 0 : stream.handle;
    const heap = this.heap;
    let i = heap.take(size, h);
    if (i === NIL) i = this.growAndTake(size, h, bytes);
    const pages = this.pages;
    if (pages !== null) {
      try {
        i = pages.commit(i, size, h);
      } catch (error) {
        if (error instanceof PhysicalExhausted) throw this.outOfMemory(bytes, error.message);
        throw error;
      }
    }
    heap.markLive(i, bytes);
    return heap.store.start[i]!;
  }

  /**
   * Returns a block, reusable at once on `stream` and, after an event wait, on other streams.
   * Throws InvalidPointerError (not from this pool, or wrong size) or DoubleFreeError, leaving
   * the pool unchanged.
   */
  deallocate(ptr: Ptr, bytes: number, stream?: StreamRef): void {
    checkBytes(bytes);
    if (this.destroyed) throw new UseAfterFreeError(`${this.describe()} was destroyed`);
    const heap = this.heap;
    const i = typeof ptr === 'number' ? heap.live.get(ptr) : NIL;
    if (i === NIL) throw this.badPointer(ptr);
    const s = heap.store;
    if (s.requested[i] !== bytes) {
      throw new InvalidPointerError(
        `deallocate(${hex(ptr)}, ${bytes}): the block was allocated with ${s.requested[i]} bytes`);
    }
    heap.unmarkLive(i);
    if (this.pages !== null) this.pages.release(ptr, s.size[i]!);
    heap.give(i, stream === undefined ? 0 : stream.handle);
  }

  /** Pools are interchangeable only with themselves. */
  isEqual(other: MemoryResource): boolean {
    return other === this;
  }

  /**
   * Gives unused memory back: cached physical pages (virtual growth; waits, on the host, only for
   * the streams that freed blocks on those pages) or wholly free chunks (upstream growth). Returns
   * the bytes released.
   */
  releaseCached(): number {
    if (this.destroyed) return 0;
    if (this.pages !== null) return this.pages.releaseCached();
    return this.chunks!.releaseCached();
  }

  /** Frees everything the pool holds, live blocks included; later use throws UseAfterFreeError. */
  destroy(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    this.heap.destroy();
    if (this.pages !== null) this.pages.destroy();
    else this.chunks!.destroy();
  }

  /** `using pool = new PoolResource()` destroys it at the end of the scope. */
  [Symbol.dispose](): void {
    this.destroy();
  }

  /** Bytes obtained from the driver (physical) or upstream. */
  get reservedBytes(): number {
    return this.pages !== null ? this.pages.reservedBytes : this.chunks!.reservedBytes;
  }

  /** High-water mark of reservedBytes. */
  get peakReservedBytes(): number {
    return this.pages !== null ? this.pages.peakReservedBytes : this.chunks!.peakReservedBytes;
  }

  /** Restarts the high-water mark of reservedBytes (and of live bytes) from current figures. */
  resetPeakReserved(): void {
    if (this.pages !== null) this.pages.resetPeak();
    else this.chunks!.peakReservedBytes = this.chunks!.reservedBytes;
    this.heap.peakLiveBytes = this.heap.liveBytes;
  }

  /** Live, reserved and free figures. */
  statistics(): PoolStatistics {
    return {
      liveBytes: this.heap.liveBytes,
      peakLiveBytes: this.heap.peakLiveBytes,
      liveCount: this.heap.live.size,
      reservedBytes: this.reservedBytes,
      peakReservedBytes: this.peakReservedBytes,
      freeBytes: this.heap.freeBytes,
      streamSteals: this.heap.steals,
      pageMoves: this.pages !== null ? this.pages.pageMoves : 0,
      synchronizations: this.pages !== null ? this.pages.synchronizations : 0,
    };
  }

  /** E.g. `PoolResource(virtual, maximum=8 GiB)` or `PoolResource(upstream=CudaResource(device=0))`. */
  describe(): string {
    const parts = [this.upstream !== undefined ? `upstream=${this.upstream.describe()}` : `virtual, device=${this.device}`];
    if (this.options.initialSize) parts.push(`initial=${this.options.initialSize}`);
    if (this.options.maximumSize !== undefined) parts.push(`maximum=${this.options.maximumSize}`);
    return `PoolResource(${parts.join(', ')})`;
  }

  private growAndTake(size: number, stream: number, bytes: number): number {
    if (this.chunks !== null && this.chunks.grow(size, stream)) {
      const i = this.heap.take(size, stream);
      if (i !== NIL) return i;
    }
    throw this.outOfMemory(bytes, this.chunks !== null
      ? 'the upstream or the maximum size refused a new chunk'
      : 'the virtual address range is exhausted');
  }

  private outOfMemory(bytes: number, why: string): OutOfMemoryError {
    const stats = {
      currentBytes: this.heap.liveBytes,
      peakBytes: this.heap.peakLiveBytes,
      currentCount: this.heap.live.size,
      reservedBytes: this.reservedBytes,
    };
    return new OutOfMemoryError(bytes, 'PoolResource.allocate', this.describe(), stats,
      `cannot allocate ${bytes} bytes from ${this.describe()}: ${why} ` +
      `(live ${stats.currentBytes} bytes in ${stats.currentCount} blocks, reserved ${stats.reservedBytes} bytes)`);
  }

  /** The error for a pointer that is not a live block: freed before, or never from this pool. */
  private badPointer(ptr: number): Error {
    const inRange = this.pages !== null ? this.pages.contains(ptr) : this.chunks!.contains(ptr);
    if (inRange) {
      const s = this.heap.store;
      for (const i of this.heap.freeBlocks()) {
        if (ptr >= s.start[i]! && ptr < s.start[i]! + s.size[i]!) {
          return new DoubleFreeError(`deallocate(${hex(ptr)}): the block is already free (freed twice?)`);
        }
      }
      return new InvalidPointerError(`deallocate(${hex(ptr)}): not the start of a block from ${this.describe()}`);
    }
    return new InvalidPointerError(`deallocate(${hex(ptr)}): the pointer is not from ${this.describe()}`);
  }
}

function hex(ptr: number): string {
  return Number.isFinite(ptr) ? `0x${ptr.toString(16)}` : String(ptr);
}

