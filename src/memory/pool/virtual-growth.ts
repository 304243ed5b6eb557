/**
 * Physical backing for a pool that sub-allocates addresses in one large reserved virtual range
 * (the virtual memory management API: cuMemAddressReserve, cuMemCreate, cuMemMap, cuMemSetAccess).
 * The range is cut into granularity pages (2 MiB on current GPUs); a page gets physical memory when
 * a live block first touches it. A page whose live blocks are all gone stays mapped as a cache (so
 * a later hit there makes no driver call); when a block needs an unmapped page, a cached page's
 * physical handle is moved there (unmap + map, no new cuMemCreate) before any new memory is
 * created. So the pool's physical memory grows only when live data truly needs more pages:
 * peak reserved ≈ peak number of pages touched by live blocks, whatever the address fragmentation.
 *
 * The bookkeeping on a hit is O(1) whatever the block's size. Only a block's first and last pages
 * can be shared with other blocks: every page strictly between them lies wholly inside the block.
 * So live counts are kept for boundary pages only (`edgeCount`), the number of pages in use is kept
 * as one running total, and which mapped pages are free (the cache) is worked out only when growth
 * needs to move one: a mapped page is free iff no live block has it as a boundary page and its first
 * byte lies in a free block (a live block over it would otherwise have it as an interior page, and
 * so contain that byte). Whether a block's pages are all mapped is a check of one or two words of
 * a bitmap.
 */
import type { Backend } from '../../backend/backend.js';
import { MemAccess } from '../../backend/backend.js';
import { OutOfMemoryError } from '../../errors.js';
import type { BlockHeap } from './block-heap.js';
import { LIVE, NIL } from './block-store.js';

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
  /** Live blocks whose first or last page this is (a block on one page counts once). */
  private readonly edgeCount: Uint32Array;
  /** Physical handle mapped at each page; 0 when unmapped. */
  private readonly handle: Float64Array;
  /** One bit per page, set while the page is mapped (`handle` non-zero): range checks by word. */
  private readonly mapped: Int32Array;
  /** The heap block at the range's first address (stable: merges keep the lower block). */
  private readonly head: number;
  /** A block of the range, walked forward to find the last one (see `lastBlock`). */
  private tail: number;
  /** Pages touched by at least one live block. */
  private usedPages = 0;
  /** Physical pages held (mapped pages). */
  private physicalPages = 0;
  /** High-water mark of physicalPages. */
  private peakPages = 0;
  /** Pages that need mapping in the current commit, then cached pages to move (scratch, reused). */
  private pending: Int32Array = new Int32Array(64);
  private donors: Int32Array = new Int32Array(64);
  private destroyed = false;

  /** Reserves the range and adds it to `heap` as one free region usable by any stream. */
  constructor(
    private readonly backend: Backend,
    private readonly ordinal: number,
    rangeBytes: number,
    /** Cap on physical bytes (Infinity for none). */
    private readonly maximumBytes: number,
    private readonly heap: BlockHeap,
  ) {
    this.pageBytes = backend.memGetAllocationGranularity(ordinal);
    this.rangeBytes = Math.ceil(rangeBytes / this.pageBytes) * this.pageBytes;
    this.base = backend.memAddressReserve(this.rangeBytes, this.pageBytes);
    const pages = this.rangeBytes / this.pageBytes;
    this.edgeCount = new Uint32Array(pages);
    this.handle = new Float64Array(pages);
    this.mapped = new Int32Array((pages + 31) >>> 5);
    this.head = heap.addRegion(this.base, this.rangeBytes, -1);
    this.tail = this.head;
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
   * physical memory. The block must already be out of the free lists. Throws PhysicalExhausted
   * (counting nothing; pages mapped so far stay mapped, as cache) when it cannot.
   */
  commit(start: number, size: number): void {
    const p0 = Math.floor((start - this.base) / this.pageBytes);
    const p1 = Math.floor((start + size - 1 - this.base) / this.pageBytes);
    if (!this.allMapped(p0, p1)) this.mapMissing(p0, p1);
    const count = this.edgeCount;
    let fresh = p1 - p0 + 1;
    if (count[p0]++ !== 0) fresh--;
    if (p1 !== p0 && count[p1]++ !== 0) fresh--;
    this.usedPages += fresh;
  }

  /** Uncounts a live block; pages left with no live block stay mapped, as cache. */
  release(start: number, size: number): void {
    const p0 = Math.floor((start - this.base) / this.pageBytes);
    const p1 = Math.floor((start + size - 1 - this.base) / this.pageBytes);
    const count = this.edgeCount;
    let gone = p1 - p0 + 1;
    if (--count[p0] !== 0) gone--;
    if (p1 !== p0 && --count[p1] !== 0) gone--;
    this.usedPages -= gone;
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
    const n = this.findCached(this.physicalPages - this.usedPages, -1, -1);
    if (n === 0) return 0;
    this.backend.contextSynchronize();
    for (let k = 0; k < n; k++) {
      const p = this.donors[k]!;
      this.backend.memUnmap(this.base + p * this.pageBytes, this.pageBytes);
      this.backend.memRelease(this.handle[p]!);
      this.setUnmapped(p);
      this.physicalPages--;
    }
    return n * this.pageBytes;
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
        this.setUnmapped(p);
      }
    }
    this.physicalPages = 0;
    this.usedPages = 0;
    this.backend.memAddressFree(this.base, this.rangeBytes);
  }

  /** True when every page p0..p1 is mapped: one or two bitmap words for any block up to 64 pages. */
  private allMapped(p0: number, p1: number): boolean {
    const m = this.mapped;
    const w0 = p0 >>> 5;
    const w1 = p1 >>> 5;
    if (w0 === w1) {
      const bits = (-1 >>> (31 - (p1 & 31))) & (-1 << (p0 & 31));
      return (m[w0]! & bits) === bits;
    }
    const head = -1 << (p0 & 31);
    if ((m[w0]! & head) !== head) return false;
    for (let w = w0 + 1; w < w1; w++) if (m[w] !== -1) return false;
    const tail = -1 >>> (31 - (p1 & 31)) | 0;
    return (m[w1]! & tail) === tail;
  }

  private isMapped(p: number): boolean {
    return (this.mapped[p >>> 5]! & (1 << (p & 31))) !== 0;
  }

  private setMapped(p: number, h: number): void {
    this.handle[p] = h;
    this.mapped[p >>> 5]! |= 1 << (p & 31);
  }

  private setUnmapped(p: number): void {
    this.handle[p] = 0;
    this.mapped[p >>> 5]! &= ~(1 << (p & 31));
  }

  /**
   * Gives physical memory to the unmapped pages among p0..p1 (the block being committed): first
   * by moving cached pages' handles (unmap there, map here), then by creating new ones. Slow path:
   * moving a cached page needs a device synchronization first, because work queued before a free
   * may still touch that page (PyTorch's expandable segments synchronize here too).
   */
  private mapMissing(p0: number, p1: number): void {
    let missing = 0;
    for (let p = p0; p <= p1; p++) {
      if (!this.isMapped(p)) {
        if (missing === this.pending.length) this.pending = grow(this.pending);
        this.pending[missing++] = p;
      }
    }
    // Cached pages, less the block's own mapped pages that no live block uses (they are not donors).
    const count = this.edgeCount;
    let ownIdle = p1 - p0 + 1 - missing;
    if (count[p0] !== 0) ownIdle--;
    if (p1 !== p0 && count[p1] !== 0) ownIdle--;
    const available = this.physicalPages - this.usedPages - ownIdle;
    const reuse = Math.min(missing, available);
    const create = missing - reuse;
    const b = this.backend;
    const P = this.pageBytes;
    if ((this.physicalPages + create) * P > this.maximumBytes) {
      throw new PhysicalExhausted(
        `needs ${create} more page(s) of ${P} bytes beyond the maximum of ${this.maximumBytes} bytes`);
    }
    const found = reuse > 0 ? this.findCached(reuse, p0, p1) : 0;
    if (found !== reuse) throw new Error(`internal: expected ${reuse} cached page(s), found ${found}`);
    if (reuse > 0) b.contextSynchronize();
    for (let done = 0; done < missing; done++) {
      const p = this.pending[done]!;
      const addr = this.base + p * P;
      let h: number;
      if (done < reuse) {
        const q = this.donors[done]!;
        h = this.handle[q]!;
        b.memUnmap(this.base + q * P, P);
        this.setUnmapped(q);
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
      this.setMapped(p, h);
    }
  }

  /**
   * Puts up to `want` cached pages (mapped, no live block on them), none in skip0..skip1, in
   * `donors`, highest addresses first; returns how many. Best fit prefers low addresses, so high
   * pages are the ones least likely to be wanted back soon (lowest-first moves twice as many pages
   * on the bert trace). Walks the heap's blocks backwards in address order and looks at the pages
   * whose first byte lies in a free block, skipping unmapped stretches a bitmap word at a time.
   * Slow path only (growth that can reuse a page, releaseCached).
   */
  private findCached(want: number, skip0: number, skip1: number): number {
    if (want <= 0) return 0;
    if (this.donors.length < want) this.donors = new Int32Array(Math.max(want, this.donors.length * 2));
    const s = this.heap.store;
    const P = this.pageBytes;
    const count = this.edgeCount;
    const m = this.mapped;
    const last = this.handle.length - 1;
    let n = 0;
    for (let i = this.lastBlock(); i !== NIL && n < want; i = s.prev[i]!) {
      if (s.owner[i] === LIVE) continue;
      const pa = Math.ceil((s.start[i]! - this.base) / P);
      const pb = Math.min(last, Math.floor((s.start[i]! + s.size[i]! - 1 - this.base) / P));
      for (let p = pb; p >= pa && n < want; p--) {
        if (m[p >>> 5] === 0) {
          p &= ~31; // the rest of this word, downwards, is unmapped
          continue;
        }
        if (this.isMapped(p) && count[p] === 0 && (p < skip0 || p > skip1)) this.donors[n++] = p;
      }
    }
    return n;
  }

  /** The range's last block: from the last one found, which is still in the region unless freed. */
  private lastBlock(): number {
    const s = this.heap.store;
    let i = this.tail;
    if (s.owner[i] === NIL && i !== this.head) i = this.head;
    while (s.next[i] !== NIL) i = s.next[i]!;
    this.tail = i;
    return i;
  }
}

function grow(a: Int32Array): Int32Array {
  const b = new Int32Array(a.length * 2);
  b.set(a);
  return b;
}
