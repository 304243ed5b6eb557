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
import { isOutOfMemory } from '../../errors.js';
import { NEUTRAL, type BlockHeap } from './block-heap.js';
import { LIVE, NIL } from './block-store.js';
import { CLASS_COUNT, type FreeLists, sizeClass } from './free-list.js';

/** Indices of `VirtualPages.calls`. */
export const CALL_CREATE = 0;
export const CALL_MAP = 1;
export const CALL_UNMAP = 2;
export const CALL_SET_ACCESS = 3;
export const CALL_RELEASE = 4;

/** Thrown by `commit` when physical memory cannot be had; the pool turns it into its own error. */
export class PhysicalExhausted extends Error {
  constructor(
    message: string,
    /** `maximum`: the pool's cap; `device`: the driver had no memory (its error is the cause). */
    readonly reason: 'maximum' | 'device',
    cause?: unknown,
  ) {
    super(message, cause === undefined ? undefined : { cause });
  }
}

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
  /** Growths served on mapped pages instead of the best fit (see `placeOnMapped`). */
  placements = 0;
  /** Cached pages moved to where a live block needed them (an unmap and a map each). */
  pageMoves = 0;
  /** Host waits for a stream before unmapping cached pages (see `waitForDonors`). */
  synchronizations = 0;
  /**
   * Driver calls made to grow, move and give back pages (not the reservation, nor `destroy`), by
   * kind: CALL_CREATE, CALL_MAP, CALL_UNMAP, CALL_SET_ACCESS, CALL_RELEASE.
   */
  readonly calls = new Float64Array(5);
  /** Nanoseconds spent on the growth path (commits that had to map pages), driver calls included. */
  growthNs = 0;
  /** The search state of `placeOnMapped` (fields, so the slow path allocates nothing). */
  private bestAdded = 0;
  private bestBlock = NIL;
  private bestStart = 0;
  private bestWhole = false;
  /** Pages that need mapping in the current commit, then cached pages to move (scratch, reused). */
  private pending: Int32Array = new Int32Array(64);
  private donors: Int32Array = new Int32Array(64);
  /** The free block whose range holds each donor's first byte (see `waitForDonors`). */
  private donorBlocks: Int32Array = new Int32Array(64);
  /** Scratch of `waitForDonors`: list ids whose stream must pass an event. */
  private waitMark = new Uint8Array(8);
  private destroyed = false;
  /** Peer devices granted access to every mapped page, now and later: ordinal -> CUmemAccess_flags. */
  private readonly peers = new Map<number, number>();

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
   * Counts live block `i` (`size` bytes, taken by `heap.take` for `stream`, not yet live) on the
   * pages it touches and returns the block to hand out: `i` itself when its pages are all mapped
   * (the hit path: a bitmap check and two counters), else see `commitSlow`. Throws
   * PhysicalExhausted when physical memory cannot be had, with the block back in the free lists.
   */
  commit(i: number, size: number, stream: number): number {
    const start = this.heap.store.start[i]!;
    const p0 = Math.floor((start - this.base) / this.pageBytes);
    const p1 = Math.floor((start + size - 1 - this.base) / this.pageBytes);
    if (!this.allMapped(p0, p1)) {
      const t0 = performance.now();
      try {
        return this.commitSlow(i, size, stream);
      } finally {
        this.growthNs += (performance.now() - t0) * 1e6;
      }
    }
    this.countIn(p0, p1);
    return i;
  }

  /**
   * True when every page of [start, start + size) is mapped: a block there commits without growth.
   *
   * @param start The block's first address (in the range).
   * @param size Its size.
   */
  covers(start: number, size: number): boolean {
    const p0 = Math.floor((start - this.base) / this.pageBytes);
    const p1 = Math.floor((start + size - 1 - this.base) / this.pageBytes);
    return this.allMapped(p0, p1);
  }

  /** Counts a live block on pages p0..p1: only its edge pages can be shared with other blocks. */
  private countIn(p0: number, p1: number): void {
    const count = this.edgeCount;
    let fresh = p1 - p0 + 1;
    if (count[p0]++ !== 0) fresh--;
    if (p1 !== p0 && count[p1]++ !== 0) fresh--;
    this.usedPages += fresh;
  }

  /**
   * Growth: the best fit `i` needs unmapped pages. Mapping them means moving cached pages (a wait
   * for the work queued before their frees, unmap, map) or creating new ones, so first look for a
   * place wholly on mapped pages (`placeOnMapped`); only when there is none, map the best fit's
   * missing pages.
   */
  private commitSlow(i: number, size: number, stream: number): number {
    const heap = this.heap;
    i = this.placeOnMapped(i, size, stream);
    const start = heap.store.start[i]!;
    const p0 = Math.floor((start - this.base) / this.pageBytes);
    const p1 = Math.floor((start + size - 1 - this.base) / this.pageBytes);
    if (!this.allMapped(p0, p1)) {
      try {
        this.mapMissing(p0, p1);
      } catch (error) {
        heap.give(i, stream);
        throw error;
      }
    }
    this.countIn(p0, p1);
    return i;
  }

  /** Pages [start, start + size) would add to those in use (its boundary pages may be shared). */
  private addedPages(start: number, size: number): number {
    const p0 = Math.floor((start - this.base) / this.pageBytes);
    const p1 = Math.floor((start + size - 1 - this.base) / this.pageBytes);
    let n = p1 - p0 + 1;
    if (this.edgeCount[p0] !== 0) n--;
    if (p1 !== p0 && this.edgeCount[p1] !== 0) n--;
    return n;
  }

  /**
   * Chooses where `size` bytes go when the best fit `i` (detached) needs unmapped pages: a place
   * wholly on mapped pages, in the free blocks `stream` may use without waiting (its own lists and
   * untouched space), that adds at most one page in use more than the best fit would. Fewest pages
   * added wins, then a place at either end of its free block (no extra split), then the lowest
   * address. Returns the chosen block, detached (the best fit again when there is no such place).
   *
   * Measured on the shared traces: this alone takes a third of bert_dynamic_infer's page moves
   * away at unchanged peak memory (5,147 left), and the one-page allowance another fifth (4,117);
   * placing where the fewest pages are missing rather than none, or choosing donors from the
   * shortest runs of cached pages, moved more pages, not fewer (5,938 and 6,747).
   *
   * Slow path only: it walks every free block of those lists that is large enough, visiting only
   * their mapped pages (a bitmap word of unmapped pages at a time).
   */
  private placeOnMapped(i: number, size: number, stream: number): number {
    const heap = this.heap;
    const s = heap.store;
    const start = s.start[i]!;
    this.bestAdded = this.addedPages(start, size) + 1;
    this.bestBlock = NIL;
    this.bestStart = start;
    this.bestWhole = false;
    heap.untake(i);
    const own = heap.listsFor(stream);
    this.scanLists(own, size);
    const neutral = heap.lists[NEUTRAL]!;
    if (neutral !== own) this.scanLists(neutral, size);
    if (this.bestBlock === NIL) {
      const k = heap.take(size, stream);
      if (k === NIL || s.start[k] !== start) throw new Error('internal: the best fit moved');
      return k;
    }
    this.placements++;
    return heap.takeAt(this.bestBlock, this.bestStart - s.start[this.bestBlock]!, size);
  }

  /** `placeOnMapped` over one stream's lists: every block of a class that may hold `size`. */
  private scanLists(lists: FreeLists, size: number): void {
    const s = this.heap.store;
    for (let c = sizeClass(size); c < CLASS_COUNT; c++) {
      for (let b = lists.heads[c]!; b !== NIL; b = s.fnext[b]!) {
        if (s.size[b]! >= size) this.scanBlock(b, size);
      }
    }
  }

  /**
   * `placeOnMapped` over free block `b`: each run of mapped pages inside it that can hold `size`
   * bytes offers places at its two ends and at its first and last page boundaries.
   */
  private scanBlock(b: number, size: number): void {
    const s = this.heap.store;
    const P = this.pageBytes;
    const base = this.base;
    const a = s.start[b]!;
    const e = a + s.size[b]!;
    const pa = Math.floor((a - base) / P);
    const pb = Math.min(this.handle.length - 1, Math.floor((e - 1 - base) / P));
    const m = this.mapped;
    let p = pa;
    while (p <= pb) {
      if (m[p >>> 5] === 0) {
        p = (p | 31) + 1; // the rest of this word is unmapped
        continue;
      }
      if (!this.isMapped(p)) {
        p++;
        continue;
      }
      let q = p;
      while (q < pb && this.isMapped(q + 1)) q++;
      const lo = Math.max(a, base + p * P);
      const last = Math.min(e, base + (q + 1) * P) - size;
      if (lo <= last) {
        this.consider(b, a, e, lo, size);
        this.consider(b, a, e, last, size);
        const up = Math.ceil((lo - base) / P) * P + base;
        if (up <= last) this.consider(b, a, e, up, size);
        const down = Math.floor((last + size - base) / P) * P + base - size;
        if (down >= lo) this.consider(b, a, e, down, size);
      }
      p = q + 1;
    }
  }

  /** Keeps place `x` in free block `b` ([a, e)) if it beats the best so far. */
  private consider(b: number, a: number, e: number, x: number, size: number): void {
    const added = this.addedPages(x, size);
    if (added > this.bestAdded) return;
    const whole = x === a || x + size === e;
    if (added < this.bestAdded || this.bestBlock === NIL || (whole && !this.bestWhole) ||
      (whole === this.bestWhole && x < this.bestStart)) {
      this.bestAdded = added;
      this.bestBlock = b;
      this.bestStart = x;
      this.bestWhole = whole;
    }
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
   * Unmaps and releases every cached page, after waiting for the streams that freed blocks on them
   * (queued work may still touch those blocks; see `waitForDonors`). Returns the bytes released.
   */
  releaseCached(): number {
    const n = this.findCached(this.physicalPages - this.usedPages, -1, -1);
    if (n === 0) return 0;
    this.waitForDonors(n);
    for (let k = 0; k < n; k++) {
      const p = this.donors[k]!;
      this.backend.memUnmap(this.base + p * this.pageBytes, this.pageBytes);
      this.backend.memRelease(this.handle[p]!);
      this.calls[CALL_UNMAP]!++;
      this.calls[CALL_RELEASE]!++;
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

  /**
   * Grants device `peer` access `flags` (MemAccess) to every page mapped now, one cuMemSetAccess
   * per run of mapped pages, and to every page mapped later; MemAccess.NONE revokes it.
   *
   * @param peer The peer's ordinal (not the pool's own device).
   * @param flags MemAccess.NONE, READ or READWRITE.
   */
  setPeerAccess(peer: number, flags: number): void {
    const b = this.backend;
    const P = this.pageBytes;
    const pages = this.rangeBytes / P;
    for (let p = 0; p < pages; p++) {
      if (!this.isMapped(p)) continue;
      let q = p;
      while (q + 1 < pages && this.isMapped(q + 1)) q++;
      b.memSetAccess(this.base + p * P, (q - p + 1) * P, peer, flags);
      this.calls[CALL_SET_ACCESS]!++;
      p = q;
    }
    if (flags === MemAccess.NONE) this.peers.delete(peer);
    else this.peers.set(peer, flags);
  }

  /** The access `peer` was granted (MemAccess.NONE when none). */
  peerAccess(peer: number): number {
    return this.peers.get(peer) ?? MemAccess.NONE;
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
        `needs ${create} more page(s) of ${P} bytes beyond the maximum of ${this.maximumBytes} bytes`, 'maximum');
    }
    const found = reuse > 0 ? this.findCached(reuse, p0, p1) : 0;
    if (found !== reuse) throw new Error(`internal: expected ${reuse} cached page(s), found ${found}`);
    if (reuse > 0) this.waitForDonors(reuse);
    this.pageMoves += reuse;
    let done = 0;
    try {
      for (; done < missing; done++) {
        const p = this.pending[done]!;
        let h: number;
        if (done < reuse) {
          const q = this.donors[done]!;
          h = this.handle[q]!;
          b.memUnmap(this.base + q * P, P);
          this.calls[CALL_UNMAP]!++;
          this.setUnmapped(q);
        } else {
          try {
            h = b.memCreate(P, this.ordinal);
            this.calls[CALL_CREATE]!++;
          } catch (error) {
            if (isOutOfMemory(error)) throw new PhysicalExhausted(error.message, 'device', error);
            throw error;
          }
          this.physicalPages++;
          if (this.physicalPages > this.peakPages) this.peakPages = this.physicalPages;
        }
        try {
          b.memMap(this.base + p * P, P, h);
          this.calls[CALL_MAP]!++;
        } catch (error) {
          // Mapped nowhere now (a moved page was unmapped from its old place): give it back.
          b.memRelease(h);
          this.calls[CALL_RELEASE]!++;
          this.physicalPages--;
          throw error;
        }
        this.setMapped(p, h);
      }
      this.grantAccess(missing);
    } catch (error) {
      this.undoMapped(done);
      throw error;
    }
  }

  /**
   * Read-write access for the pool's device, and the peers' access, to the `count` pages just
   * mapped (pending[0..count), ascending): one cuMemSetAccess per run of consecutive pages and
   * device, not one per page. A run may span many mappings (the driver allows it: the range need
   * only be fully mapped; the peer-access tests on two H200s set it over such runs).
   */
  private grantAccess(count: number): void {
    const b = this.backend;
    const P = this.pageBytes;
    const pending = this.pending;
    for (let k = 0; k < count;) {
      let e = k;
      while (e + 1 < count && pending[e + 1] === pending[e]! + 1) e++;
      const addr = this.base + pending[k]! * P;
      const bytes = (e - k + 1) * P;
      b.memSetAccess(addr, bytes, this.ordinal, MemAccess.READWRITE);
      this.calls[CALL_SET_ACCESS]!++;
      for (const [peer, flags] of this.peers) {
        b.memSetAccess(addr, bytes, peer, flags);
        this.calls[CALL_SET_ACCESS]!++;
      }
      k = e + 1;
    }
  }

  /**
   * A growth that failed gives back every page it mapped (pending[0..done)), created or moved
   * here: none is used by a block, a created one would leave the device fuller than before the
   * failed call (so the next allocator, ours or another, would fail too), and a moved one may lack
   * access (granted only once all were mapped), so none may stay as cache.
   */
  private undoMapped(done: number): void {
    const P = this.pageBytes;
    for (let k = 0; k < done; k++) {
      const p = this.pending[k]!;
      this.backend.memUnmap(this.base + p * P, P);
      this.backend.memRelease(this.handle[p]!);
      this.calls[CALL_UNMAP]!++;
      this.calls[CALL_RELEASE]!++;
      this.setUnmapped(p);
      this.physicalPages--;
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
    if (this.donors.length < want) {
      this.donors = new Int32Array(Math.max(want, this.donors.length * 2));
      this.donorBlocks = new Int32Array(this.donors.length);
    }
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
        if (this.isMapped(p) && count[p] === 0 && (p < skip0 || p > skip1)) {
          this.donorBlocks[n] = i;
          this.donors[n++] = p;
        }
      }
    }
    return n;
  }

  /**
   * Waits until no queued work can still touch the first `n` donor pages, before they are unmapped.
   * Every block on a donor page is free (a live block on it would count the page as used), and a
   * block in a stream's free lists was freed on that stream (or taken from another stream after
   * that stream waited on the other's event), so the work that may touch it is the work queued on
   * that stream so far. So: one event recorded on each stream whose free blocks lie on the donors
   * (untouched space needs none), and a host wait on it only if the stream has not passed it yet
   * (`eventQuery`). Other streams, and the rest of the device, are never waited for; a stream with
   * nothing queued (the common case between iterations) costs a record and a query, no wait.
   */
  private waitForDonors(n: number): void {
    const heap = this.heap;
    const s = heap.store;
    const lists = heap.lists;
    if (this.waitMark.length < lists.length) this.waitMark = new Uint8Array(lists.length * 2);
    const mark = this.waitMark;
    mark.fill(0);
    const P = this.pageBytes;
    for (let k = 0; k < n; k++) {
      const ps = this.base + this.donors[k]! * P;
      const pe = ps + P;
      const i = this.donorBlocks[k]!;
      // The donor's first byte lies in block i; the blocks before it and after it may share the page.
      for (let j = i; j !== NIL && s.start[j]! + s.size[j]! > ps; j = s.prev[j]!) {
        if (s.owner[j]! >= 0) mark[s.owner[j]!] = 1;
        if (s.start[j]! <= ps) break;
      }
      for (let j = s.next[i]!; j !== NIL && s.start[j]! < pe; j = s.next[j]!) {
        if (s.owner[j]! >= 0) mark[s.owner[j]!] = 1;
      }
    }
    const order = heap.order;
    for (let id = NEUTRAL + 1; id < lists.length; id++) {
      if (mark[id] === 0) continue;
      const waits = order.hostWaits;
      order.hostWait(lists[id]!);
      if (order.hostWaits !== waits) this.synchronizations++;
    }
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
