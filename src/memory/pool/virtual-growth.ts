/**
 * Physical backing for a pool that sub-allocates addresses in one large reserved virtual range
 * (the virtual memory management API: cuMemAddressReserve, cuMemCreate, cuMemMap, cuMemSetAccess).
 * The range is cut into granularity pages (2 MiB on current GPUs); a page gets physical memory when
 * a live block first touches it. A page whose live blocks are all gone stays mapped as a cache (so
 * a later hit there makes no driver call); when a block needs an unmapped page, a cached page's
 * physical handle is moved there (unmap + map, no new cuMemCreate) before any new memory is
 * created. So the pool's physical memory grows only when live data truly needs more pages:
 * peak reserved ≈ peak number of pages touched by live blocks, whatever the address fragmentation.
 */
import type { Backend } from '../../backend/backend.js';
import { MemAccess } from '../../backend/backend.js';
import { OutOfMemoryError } from '../../errors.js';

/** Thrown by `commit` when physical memory cannot be had; the pool turns it into its own error. */
export class PhysicalExhausted extends Error {}

/** Per-page bookkeeping and the driver calls that map and unmap pages. */
export class VirtualPages {
  /** First address of the reserved range. */
  readonly base: number;
  /** Size of the reserved range in bytes. */
  readonly rangeBytes: number;
  /** Page size: the device's allocation granularity. */
  readonly pageBytes: number;
  /** Live blocks touching each page. */
  private readonly liveCount: Uint32Array;
  /** Physical handle mapped at each page; 0 when unmapped. */
  private readonly handle: Float64Array;
  /** Pages that are mapped with no live block (the cache), as a stack with lazy deletion. */
  private cached: Int32Array;
  private cachedTop = 0;
  private readonly inCache: Uint8Array;
  /** Physical pages held (mapped pages). */
  private physicalPages = 0;
  /** High-water mark of physicalPages. */
  private peakPages = 0;
  /** Pages that need mapping in the current commit (scratch, reused). */
  private pending: Int32Array = new Int32Array(64);
  private destroyed = false;

  constructor(
    private readonly backend: Backend,
    private readonly ordinal: number,
    rangeBytes: number,
    /** Cap on physical bytes (Infinity for none). */
    private readonly maximumBytes: number,
  ) {
    this.pageBytes = backend.memGetAllocationGranularity(ordinal);
    this.rangeBytes = Math.ceil(rangeBytes / this.pageBytes) * this.pageBytes;
    this.base = backend.memAddressReserve(this.rangeBytes, this.pageBytes);
    const pages = this.rangeBytes / this.pageBytes;
    this.liveCount = new Uint32Array(pages);
    this.handle = new Float64Array(pages);
    this.inCache = new Uint8Array(pages);
    this.cached = new Int32Array(64);
  }

  /** Physical bytes held. */
  get reservedBytes(): number {
    return this.physicalPages * this.pageBytes;
  }

  /** High-water mark of reservedBytes. */
  get peakReservedBytes(): number {
    return this.peakPages * this.pageBytes;
  }

  /** Restarts the high-water mark from the current figure. */
  resetPeak(): void {
    this.peakPages = this.physicalPages;
  }

  /**
   * Counts a live block on the pages [start, start + size) touches, mapping pages that have no
   * physical memory. Throws PhysicalExhausted (leaving nothing changed) when it cannot.
   */
  commit(start: number, size: number): void {
    const p0 = Math.floor((start - this.base) / this.pageBytes);
    const p1 = Math.floor((start + size - 1 - this.base) / this.pageBytes);
    const count = this.liveCount;
    const handle = this.handle;
    let missing = 0;
    for (let p = p0; p <= p1; p++) {
      if (count[p]++ === 0 && handle[p] === 0) {
        if (missing === this.pending.length) this.pending = grow(this.pending);
        this.pending[missing++] = p;
      }
    }
    if (missing > 0) {
      try {
        this.mapPages(missing);
      } catch (error) {
        for (let p = p0; p <= p1; p++) {
          if (--count[p] === 0 && handle[p] !== 0) this.pushCached(p);
        }
        throw error;
      }
    }
  }

  /** Uncounts a live block; pages left with no live block join the cache (still mapped). */
  release(start: number, size: number): void {
    const p0 = Math.floor((start - this.base) / this.pageBytes);
    const p1 = Math.floor((start + size - 1 - this.base) / this.pageBytes);
    const count = this.liveCount;
    for (let p = p0; p <= p1; p++) {
      if (--count[p] === 0 && this.inCache[p] === 0) this.pushCached(p);
    }
  }

  /** True when `ptr` lies in the reserved range. */
  contains(ptr: number): boolean {
    return ptr >= this.base && ptr < this.base + this.rangeBytes;
  }

  /**
   * Unmaps and releases every cached page (synchronizing first: freed blocks on those pages may
   * still be in use by queued work). Returns the bytes released.
   */
  releaseCached(): number {
    let released = 0;
    let synced = false;
    while (this.cachedTop > 0) {
      const p = this.cached[--this.cachedTop]!;
      this.inCache[p] = 0;
      if (this.liveCount[p] !== 0 || this.handle[p] === 0) continue;
      if (!synced) {
        this.backend.contextSynchronize();
        synced = true;
      }
      const addr = this.base + p * this.pageBytes;
      this.backend.memUnmap(addr, this.pageBytes);
      this.backend.memRelease(this.handle[p]!);
      this.handle[p] = 0;
      this.physicalPages--;
      released += this.pageBytes;
    }
    return released;
  }

  /** Unmaps and releases everything and frees the address range. */
  destroy(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    this.backend.contextSynchronize();
    for (let p = 0; p < this.handle.length; p++) {
      if (this.handle[p] !== 0) {
        this.backend.memUnmap(this.base + p * this.pageBytes, this.pageBytes);
        this.backend.memRelease(this.handle[p]!);
        this.handle[p] = 0;
      }
    }
    this.physicalPages = 0;
    this.cachedTop = 0;
    this.backend.memAddressFree(this.base, this.rangeBytes);
  }

  /**
   * Gives physical memory to the `missing` pages in `pending`: first by moving cached pages' handles
   * (unmap there, map here), then by creating new ones. Slow path: moving a cached page needs a
   * device synchronization first, because work queued before a free may still touch that page
   * (PyTorch's expandable segments synchronize here too).
   */
  private mapPages(missing: number): void {
    const b = this.backend;
    const P = this.pageBytes;
    const reuse = Math.min(missing, this.countCached());
    const create = missing - reuse;
    if ((this.physicalPages + create) * P > this.maximumBytes) {
      throw new PhysicalExhausted(
        `needs ${create} more page(s) of ${P} bytes beyond the maximum of ${this.maximumBytes} bytes`);
    }
    if (reuse > 0) b.contextSynchronize();
    for (let done = 0; done < missing; done++) {
        const p = this.pending[done]!;
        const addr = this.base + p * P;
        let h: number;
        const q = done < reuse ? this.popCached() : -1;
        if (q >= 0) {
          h = this.handle[q]!;
          b.memUnmap(this.base + q * P, P);
          this.handle[q] = 0;
        } else {
          try {
            h = b.memCreate(P, this.ordinal);
          } catch (error) {
            if (error instanceof OutOfMemoryError) throw new PhysicalExhausted(error.message);
            throw error;
          }
          this.physicalPages++;
          if (this.physicalPages > this.peakPages) this.peakPages = this.physicalPages;
        }
        try {
          b.memMap(addr, P, h);
          b.memSetAccess(addr, P, this.ordinal, MemAccess.READWRITE);
        } catch (error) {
          b.memRelease(h);
          this.physicalPages--;
          throw error;
        }
        this.handle[p] = h;
    }
  }

  private pushCached(p: number): void {
    if (this.inCache[p] !== 0) return;
    this.inCache[p] = 1;
    if (this.cachedTop === this.cached.length) this.cached = grow(this.cached);
    this.cached[this.cachedTop++] = p;
  }

  /** Cached pages that are really free (drops stale entries). */
  private countCached(): number {
    let w = 0;
    for (let r = 0; r < this.cachedTop; r++) {
      const p = this.cached[r]!;
      if (this.liveCount[p] === 0 && this.handle[p] !== 0) this.cached[w++] = p;
      else this.inCache[p] = 0;
    }
    this.cachedTop = w;
    return w;
  }

  private popCached(): number {
    while (this.cachedTop > 0) {
      const p = this.cached[--this.cachedTop]!;
      this.inCache[p] = 0;
      if (this.liveCount[p] === 0 && this.handle[p] !== 0) return p;
    }
    return -1;
  }
}

function grow(a: Int32Array): Int32Array {
  const b = new Int32Array(a.length * 2);
  b.set(a);
  return b;
}
