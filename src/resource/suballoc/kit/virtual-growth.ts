/**
 * Physical backing for a pool that sub-allocates addresses in one large reserved virtual range
 * (the virtual memory management API: cuMemAddressReserve, cuMemCreate, cuMemMap, cuMemSetAccess).
 * The range is cut into granularity pages (2 MiB on current GPUs); a page gets physical memory when
 * a live block first touches it. A page whose live blocks are all gone stays mapped as a cache (so
 * a later hit there makes no driver call); when a block needs unmapped pages beyond the high-water
 * mark, cached pages are taken first (a one-page physical allocation is moved: mapped here, its
 * mapping there left in place, stale, so that moving it back later costs no driver call; no new
 * cuMemCreate) before any new memory is created. So the pool's physical memory grows only when
 * live data truly needs more pages: peak reserved ≈ peak number of pages touched by live blocks,
 * whatever the address fragmentation. Physical allocations ("extents") are one page by default;
 * `PoolOptions.extentSize` makes them span runs of pages, far fewer driver calls for a higher peak
 * (see `mapMissing`); `'adaptive'` sizes each growth from the memory left (`adaptive-growth.ts`,
 * `growFor`): a chunk mapped ahead as one extent while the device has room, the block's own pages
 * one page an extent when it is short.
 *
 * The bookkeeping on a hit is O(1) whatever the block's size. Only a block's first and last pages
 * can be shared with other blocks: every page strictly between them lies wholly inside the block.
 * So live counts are kept for boundary pages only (`edgeCount`), the number of pages in use is kept
 * as one running total, and which mapped extents are free (the cache) is worked out only when growth
 * needs one, by marking the pages of every live block (`findFree`). Whether a block's pages are all
 * mapped is a check of one or two words of a bitmap.
 */
import type { Backend } from '../../../backend/backend.js';
import { MemAccess } from '../../../backend/backend.js';
import { isOutOfMemory, VramError } from '../../../errors.js';
import { formatBytesExact } from '../../../util/size.js';
import { NEUTRAL, type BlockHeap } from './block-heap.js';
import { LIVE, NIL } from './block-store.js';
import { MappedPlacement } from './mapped-placement.js';
import { PageBitmap } from './page-bitmap.js';
import { adaptiveChunkPages, LARGE_BLOCK_SHARE, pressurePages } from './adaptive-growth.js';
import { PeerGrants } from '../../peer-grants.js';

/** Indices of `VirtualPages.calls`. */
export const CALL_CREATE = 0;
export const CALL_MAP = 1;
export const CALL_UNMAP = 2;
export const CALL_SET_ACCESS = 3;
export const CALL_RELEASE = 4;

/** Thrown by `commit` when physical memory cannot be had; the pool turns it into its own error. */
export class PhysicalExhausted extends VramError {
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
  /** Physical handle mapped at each page (one per extent, on all its pages); 0 when unmapped. */
  private readonly handle: Float64Array;
  /** First page of the extent (one physical allocation, one mapping) each mapped page is part of. */
  private readonly extentFirst: Int32Array;
  /** Pages in the extent, at its first page. */
  private readonly extentPages: Int32Array;
  /** Most pages in one extent: runs are cut where a page index is a multiple of it. */
  private readonly extentLimit: number;
  /** The cut of the current growth: `extentLimit`, or with the adaptive policy 1 or no cut. */
  private cut: number;
  /** Scratch of `findFree`: pages a live block touches. */
  private readonly usedMark: Uint8Array;
  /** One bit per page, set while the page is mapped (`handle` non-zero): range checks by word. */
  private readonly mapped: PageBitmap;
  /** The heap block at the range's first address (stable: merges keep the lower block). */
  private readonly head: number;
  /** Pages touched by at least one live block. */
  private usedPages = 0;
  /** The highest page ever mapped (-1 before any): every page above it is unmapped. */
  topMapped = -1;
  /** Physical pages held (mapped pages). */
  private physicalPages = 0;
  /** High-water mark of physicalPages. */
  private peakPages = 0;
  /**
   * High-water mark of physicalPages since the last releaseCached: below it growth creates memory
   * and leaves cached extents mapped; at it, growth takes cached extents first. Apart from the
   * peak statistic (resetPeak) so that restarting the figure does not change where memory goes, and
   * restarted by releaseCached so that a pool told to give memory back does not grow back to its
   * old high-water mark while cached pages could serve.
   */
  private ceilingPages = 0;
  /**
   * Pages the current growth may create past `ceilingPages` rather than move cached ones: under
   * pressure, the device's free pages (`pressurePages`); 0 outside an adaptive growth.
   */
  private pressureRoom = 0;
  /** Where a block goes when its best fit needs unmapped pages. */
  private readonly placement: MappedPlacement;
  /** Cached pages whose memory went to where a live block needed it (see GrowthFigures.pageMoves). */
  pageMoves = 0;
  /** Host waits for a stream before unmapping cached pages (see `waitForDonors`). */
  hostWaits = 0;
  /**
   * Driver calls made to grow, move and give back pages (not the reservation, nor `destroy`), by
   * kind: CALL_CREATE, CALL_MAP, CALL_UNMAP, CALL_SET_ACCESS, CALL_RELEASE.
   */
  readonly calls = new Float64Array(5);
  /** Nanoseconds spent on the growth path (commits that had to map pages), driver calls included. */
  growthNs = 0;
  /** Runs of pages that need mapping in the current commit: first page, page count (scratch). */
  private runs: Int32Array = new Int32Array(16);
  /** Wholly free extents found by `findFree` (their first pages; scratch, reused). */
  private donors: Int32Array = new Int32Array(64);
  /** Handles of one-page donors unmapped for this growth, to be mapped again (scratch). */
  private spare: Float64Array = new Float64Array(64);
  private spareCount = 0;
  /** Donor page of each spare handle: its mapping there stays, stale, until `returnSpare` or reuse. */
  private spareFrom: Int32Array = new Int32Array(64);
  /** Runs in `runs` found by `collectRuns`. */
  private runCount = 0;
  /** Donor page of each run mapped by the current growth, -1 for memory it created (for its undo). */
  private runFrom: Int32Array = new Int32Array(8);
  /** Adaptive growths that failed, released every wholly free extent and retried one page an extent. */
  compactions = 0;
  /** Pages mapped ahead of need by adaptive growths (cached from the start: see `adaptive-growth.ts`). */
  pagesAhead = 0;
  /** Pages moved to by `reclaimStale` (scratch). */
  private targets: Int32Array = new Int32Array(64);
  /**
   * The page where each one-page handle is live (its bit set in `mapped`). A moved page keeps its
   * old mapping, stale (handle set, bit clear), so moving it back costs no driver call: see
   * `reclaimStale`. Slow path only.
   */
  private readonly ownerOf = new Map<number, number>();
  /** Pages holding a stale mapping. */
  private stalePages = 0;
  /** Page moves made by making a stale mapping live again (no driver call; counted in pageMoves too). */
  pageMovesBack = 0;
  /** End of the extents mapped so far by the current growth in `runs` (for its undo). */
  private mappedNow = 0;
  /** Scratch of `waitForDonors`: list ids whose stream must pass an event. */
  private waitMark = new Uint8Array(8);
  private destroyed = false;
  /** Peer devices granted access to every mapped page, now and later. */
  readonly peers = new PeerGrants();

  /** Reserves the range and adds it to `heap` as one free region usable by any stream. */
  constructor(
    private readonly backend: Backend,
    private readonly ordinal: number,
    rangeBytes: number,
    /** Cap on physical bytes (Infinity for none). */
    private readonly maximumBytes: number,
    private readonly heap: BlockHeap,
    /**
     * Most bytes in one physical allocation (rounded down to whole pages, at least one); Infinity:
     * one allocation per run of pages a growth maps. See `PoolOptions.extentSize`.
     */
    extentBytes: number,
    /**
     * The adaptive policy (`adaptive-growth.ts`): the device's free and total memory, read on the
     * growth path only; null for fixed extents of `extentBytes`.
     */
    private readonly memInfo: (() => { free: number; total: number }) | null = null,
    /** The shareable handle types each physical allocation is created with (MemHandleType bits); undefined: the backend's default. */
    private readonly handleTypes: number | undefined = undefined,
  ) {
    this.pageBytes = backend.memGetAllocationGranularity(ordinal);
    this.rangeBytes = Math.ceil(rangeBytes / this.pageBytes) * this.pageBytes;
    this.extentLimit = memInfo !== null ? this.rangeBytes / this.pageBytes + 1 : Math.max(1, Math.floor(extentBytes / this.pageBytes));
    this.cut = this.extentLimit;
    this.base = backend.memAddressReserve(this.rangeBytes, this.pageBytes);
    const pages = this.rangeBytes / this.pageBytes;
    this.edgeCount = new Uint32Array(pages);
    this.handle = new Float64Array(pages);
    this.extentFirst = new Int32Array(pages);
    this.extentPages = new Int32Array(pages);
    this.usedMark = new Uint8Array(pages);
    this.mapped = new PageBitmap(pages);
    this.head = heap.addRegion(this.base, this.rangeBytes, -1);
    this.placement = new MappedPlacement(heap, this);
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
   * place wholly on mapped pages (`MappedPlacement`); only when there is none, map the best fit's
   * missing pages.
   */
  private commitSlow(i: number, size: number, stream: number): number {
    const heap = this.heap;
    i = this.placement.place(i, size, stream);
    const start = heap.store.start[i]!;
    const p0 = Math.floor((start - this.base) / this.pageBytes);
    const p1 = Math.floor((start + size - 1 - this.base) / this.pageBytes);
    if (!this.allMapped(p0, p1)) {
      try {
        this.growFor(p0, p1);
      } catch (error) {
        heap.give(i, stream);
        throw error;
      }
    }
    this.countIn(p0, p1);
    return i;
  }

  /**
   * Maps the missing pages among p0..p1. With fixed extents, `mapMissing` as it is. With the
   * adaptive policy, the chunk and cut are chosen first (`adaptiveChunkPages`: the one read of the
   * device's free memory, on the growth path only); and when the driver or the maximum refuses,
   * the pool compacts before it fails: every wholly free extent is released (its streams waited
   * for, as `releaseCached` does), then the block's missing pages are mapped again one page per
   * extent, with nothing mapped ahead. An extent that still holds a live block stays: the driver
   * frees an allocation only whole, which is why large extents form only while memory is plentiful.
   */
  private growFor(p0: number, p1: number): void {
    if (this.memInfo === null) {
      this.mapMissing(p0, p1, 0);
      return;
    }
    const { free, total } = this.memInfo();
    const state = {
      heldPages: this.physicalPages,
      blockPages: p1 - p0 + 1,
      pageBytes: this.pageBytes,
      freeBytes: free,
      totalBytes: total,
      maximumBytes: this.maximumBytes,
    };
    const chunk = adaptiveChunkPages(state);
    this.pressureRoom = pressurePages(state);
    try {
      this.cut = chunk < 0 ? 1 : this.extentLimit;
      try {
        this.mapMissing(p0, p1, Math.max(0, chunk));
        return;
      } catch (error) {
        if (!(error instanceof PhysicalExhausted)) throw error;
        const n = this.findFree(Infinity, p0, p1);
        const released = n === 0 ? 0 : this.takeDonors(n, 0);
        // Nothing freed and nothing asked beyond the block at one page an extent: the retry would fail the same way.
        if (released === 0 && chunk < 0) throw error;
        this.compactions++;
      }
      this.cut = 1;
      this.pressureRoom = 0; // the device refused: what is left is moved, not created
      this.mapMissing(p0, p1, 0);
    } finally {
      this.cut = this.extentLimit;
      this.pressureRoom = 0;
    }
  }

  /**
   * Pages [start, start + size) would add to those in use (its boundary pages may be shared).
   *
   * @param start The first address (in the range).
   * @param size The bytes.
   * @returns How many pages no live block touches now.
   */
  addedPages(start: number, size: number): number {
    const p0 = Math.floor((start - this.base) / this.pageBytes);
    const p1 = Math.floor((start + size - 1 - this.base) / this.pageBytes);
    let n = p1 - p0 + 1;
    if (this.edgeCount[p0] !== 0) n--;
    if (p1 !== p0 && this.edgeCount[p1] !== 0) n--;
    return n;
  }

  /**
   * Pages of [start, start + size) that are not mapped (a growth there would have to map them).
   *
   * @param start The first address (in the range).
   * @param size The bytes.
   * @returns How many of its pages are unmapped.
   */
  missingPages(start: number, size: number): number {
    const p0 = Math.floor((start - this.base) / this.pageBytes);
    const p1 = Math.floor((start + size - 1 - this.base) / this.pageBytes);
    return this.mapped.missing(p0, p1);
  }

  /**
   * The first page from p to `end` that is mapped (`flip` 0) or unmapped (`flip` -1), else end + 1:
   * a bitmap word at a time (a free block of a gigabyte is 500 pages; walking them one by one, and
   * every page of the untouched end of the range, was about 60% of resnet50_train's steady state on
   * the emulated backend).
   *
   * @param p The first page to look at.
   * @param end The last page to look at.
   * @param flip 0 to find a mapped page, -1 an unmapped one.
   * @returns The page, or end + 1.
   */
  nextMapped(p: number, end: number, flip: number): number {
    return this.mapped.next(p, end, flip);
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
   * Unmaps and releases every cached extent (one with no live block on any of its pages), after
   * waiting for the streams that freed blocks on them (queued work may still touch those blocks;
   * see `waitForDonors`). Returns the bytes released. An extent with a live block on one of its
   * pages stays whole: the driver frees a physical allocation only as a whole.
   */
  releaseCached(): number {
    const n = this.findFree(Infinity, -1, -1);
    const released = n === 0 ? 0 : this.takeDonors(n, 0) * this.pageBytes;
    this.ceilingPages = this.physicalPages;
    return released;
  }

  /** Unmaps and releases everything and frees the address range. */
  destroy(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    this.backend.contextSynchronize();
    for (let p = 0; p < this.handle.length && this.stalePages > 0; p++) {
      if (this.handle[p] === 0 || this.isMapped(p)) continue;
      this.backend.memUnmap(this.base + p * this.pageBytes, this.pageBytes);
      this.setUnmapped(p);
    }
    for (let p = 0; p < this.handle.length; p++) {
      if (this.handle[p] !== 0 && this.extentFirst[p] === p) {
        const n = this.extentPages[p]!;
        this.backend.memUnmap(this.base + p * this.pageBytes, n * this.pageBytes);
        this.backend.memRelease(this.handle[p]!);
        for (let q = p; q < p + n; q++) this.setUnmapped(q);
      }
    }
    this.physicalPages = 0;
    this.usedPages = 0;
    this.backend.memAddressFree(this.base, this.rangeBytes);
  }

  /** True when every page p0..p1 is mapped: one or two bitmap words for any block up to 64 pages. */
  private allMapped(p0: number, p1: number): boolean {
    return this.mapped.all(p0, p1);
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
    // Stale mappings too: one may be made live again later with no call (see reclaimStale).
    const h = this.handle;
    for (let p = 0; p < pages; p++) {
      if (h[p] === 0) continue;
      let q = p;
      while (q + 1 < pages && h[q + 1] !== 0) q++;
      b.memSetAccess(this.base + p * P, (q - p + 1) * P, peer, flags);
      this.calls[CALL_SET_ACCESS]!++;
      p = q;
    }
    this.peers.set(peer, flags);
  }

  /**
   * The physical allocations under [ptr, ptr + bytes), in address order, each whole (an extent may
   * start before the range and end after it), and where `ptr` lies in the first: what an exporter
   * shares so that an importer maps them back to back and finds the range at the same offset. Not
   * a hot path (one export).
   *
   * @param ptr The first byte (in a live block: every page under it is mapped).
   * @param bytes The range's length (> 0).
   */
  extentsUnder(ptr: number, bytes: number): { readonly extents: { readonly handle: number; readonly bytes: number }[]; readonly offset: number } {
    const P = this.pageBytes;
    const firstPage = Math.floor((ptr - this.base) / P);
    const lastPage = Math.floor((ptr + bytes - 1 - this.base) / P);
    const extents: { handle: number; bytes: number }[] = [];
    let offset = 0;
    for (let p = firstPage; p <= lastPage;) {
      if (!this.isMapped(p)) throw new VramError(`page ${p} under ${ptr} (+${bytes}) is not mapped: not a live block of this pool`);
      const first = this.extentFirst[p]!;
      const n = this.extentPages[first]!;
      if (extents.length === 0) offset = ptr - (this.base + first * P);
      extents.push({ handle: this.handle[p]!, bytes: n * P });
      p = first + n;
    }
    return { extents, offset };
  }

  private isMapped(p: number): boolean {
    return this.mapped.has(p);
  }

  /** Records extent p..p+n-1 as mapped to physical allocation `h`. */
  private setMapped(p: number, n: number, h: number): void {
    this.extentPages[p] = n;
    for (let q = p; q < p + n; q++) {
      this.handle[q] = h;
      this.extentFirst[q] = p;
      this.mapped.set(q);
    }
    if (n === 1) this.ownerOf.set(h, p);
    if (p + n - 1 > this.topMapped) this.topMapped = p + n - 1;
  }

  /** Records page p (live or stale) as unmapped. */
  private setUnmapped(p: number): void {
    if (this.handle[p] !== 0 && !this.isMapped(p)) this.stalePages--;
    this.handle[p] = 0;
    this.mapped.clear(p);
  }

  /** Page p's stale mapping becomes its handle's live one (the caller has disowned the old one). */
  private own(p: number): void {
    this.mapped.set(p);
    this.ownerOf.set(this.handle[p]!, p);
    this.stalePages--;
  }

  /** Page p's mapping stays in place, stale: its one-page handle is to be live elsewhere. */
  private disown(p: number): void {
    this.mapped.clear(p);
    this.stalePages++;
  }

  /** Unmaps the stale mappings among pages p..p+n-1, so that other memory can be mapped there. */
  private clearStale(p: number, n: number): void {
    if (this.stalePages === 0) return;
    for (let q = p; q < p + n; q++) {
      if (this.handle[q] === 0) continue;
      this.backend.memUnmap(this.base + q * this.pageBytes, this.pageBytes);
      this.calls[CALL_UNMAP]!++;
      this.setUnmapped(q);
    }
  }

  /**
   * Gives physical memory to the unmapped pages among p0..p1 (the block being committed).
   *
   * Measured on an H100 (bench/c/vmm_calls.c, 2026-11-22): cuMemCreate costs 11-18 us whatever
   * the size (2 to 512 MiB), cuMemMap 1 us, cuMemSetAccess 28-44 us and cuMemUnmap 19-26 us per
   * mapping they cover (one call over 64 one-page mappings took 1.8 ms and 1.2 ms: batching calls
   * saves nothing), cuMemRelease 13 us plus ~1.1 us per page. So the cost of growth is the number
   * of mappings made and unmapped, and a physical allocation of many pages (an extent) costs what
   * one page does. But the driver frees an allocation only whole: a free page of an extent that
   * still has a live block on another page can be neither moved nor released. So extents are at
   * most `extentLimit` pages (one by default: see `PoolOptions.extentSize` for the measured trade).
   *
   * Physical memory goes past its high-water mark (since the last releaseCached: `ceilingPages`)
   * only when no cached extent can make room: before that, cached extents (no live block on any
   * page) are taken, a one-page one moved here (mapped here, its mapping there left stale: see
   * `reclaimStale`), a larger one released (its bytes created again here). Below the mark cached extents stay mapped (a later block there is a
   * hit), unless the device has no memory left. Slow path: a taken extent may
   * still be touched by work queued before its blocks were freed, so the streams that freed them
   * are waited for first (`waitForDonors`).
   */
  private mapMissing(p0: number, p1: number, chunk: number): void {
    const P = this.pageBytes;
    let missing = this.collectRuns(p0, p1);
    let excess = this.physicalPages + missing - this.ceilingPages;
    let marked = false;
    if (excess > 0 && this.stalePages > 0) {
      const moved = this.reclaimStale(p0, p1, excess);
      marked = true;
      if (moved > 0) {
        this.pageMoves += moved;
        this.pageMovesBack += moved;
        excess -= moved;
        missing = this.collectRuns(p0, p1);
        if (missing === 0) return;
      }
    }
    // Under pressure, pages the device can still give are created rather than moved (`pressurePages`);
    // a page moved back to its old mapping above cost no driver call.
    excess -= Math.min(Math.max(0, excess), this.pressureRoom);
    // Cached pages outside the block (its own mapped pages that no live block uses are no donors).
    const count = this.edgeCount;
    let ownIdle = p1 - p0 + 1 - missing;
    if (count[p0] !== 0) ownIdle--;
    if (p1 !== p0 && count[p1] !== 0) ownIdle--;
    if (excess > 0 && this.physicalPages - this.usedPages - ownIdle > 0) {
      const n = this.findFree(excess, p0, p1, marked);
      if (n > 0) this.pageMoves += Math.min(excess, this.takeDonors(n, missing));
    }
    // Adaptive, with room: a growth that still takes the pool past its high-water mark maps a
    // whole chunk, the block's pages and free address space beside them, as one extent (unless
    // the block is large: see LARGE_BLOCK_SHARE).
    let ahead = 0;
    if (missing < chunk * LARGE_BLOCK_SHARE && this.physicalPages - this.spareCount + missing > this.ceilingPages) {
      ahead = this.extendRuns(p0, p1, chunk - missing);
      missing += ahead;
    }
    const nRuns = this.runCount;
    this.mappedNow = nRuns;
    // The span of this growth's runs: pages mapped by it are no donors for its own retry below.
    const lo = Math.min(p0, this.runs[0]!);
    const hi = Math.max(p1, this.runs[2 * nRuns - 2]! + this.runs[2 * nRuns - 1]! - 1);
    const b = this.backend;
    let done = 0;
    try {
      if ((this.physicalPages - this.spareCount + missing) * P > this.maximumBytes) {
        throw new PhysicalExhausted(
          `needs ${this.physicalPages - this.spareCount + missing - Math.floor(this.maximumBytes / P)} ` +
            `more page(s) of ${formatBytesExact(P, true)} beyond the maximum of ${formatBytesExact(this.maximumBytes)}`,
          'maximum',
        );
      }
      // Moved one-page handles first, page by page; what they do not cover, one new extent per run.
      let k = nRuns;
      let reclaimed = false;
      let left = missing;
      for (let r = 0; r < nRuns; r++) {
        let p = this.runs[2 * r]!;
        let n = this.runs[2 * r + 1]!;
        for (;;) {
          while (n > 0 && this.spareCount > 0) {
            const h = this.spare[--this.spareCount]!;
            const from = this.spareFrom[this.spareCount]!;
            if (this.handle[p] === h) {
              this.own(p); // its stale mapping is here already: no call
            } else {
              this.clearStale(p, 1);
              this.mapExtent(p, 1, h, k++, from);
            }
            p++;
            n--;
            left--;
          }
          if (n === 0) break;
          let h: number;
          try {
            h = b.memCreate(n * P, this.ordinal, this.handleTypes);
            this.calls[CALL_CREATE]!++;
          } catch (error) {
            if (!isOutOfMemory(error)) throw error;
            // Below the high-water mark cached extents were kept; the device has no memory to
            // spare, so take them now (once) for the pages still missing, as the peak rule would.
            const found = reclaimed ? 0 : this.findFree(left, lo, hi);
            reclaimed = true;
            if (found === 0) throw new PhysicalExhausted(error.message, 'device', error);
            this.pageMoves += Math.min(left, this.takeDonors(found, left));
            continue;
          }
          this.physicalPages += n;
          if (this.physicalPages > this.peakPages) this.peakPages = this.physicalPages;
          if (this.physicalPages > this.ceilingPages) this.ceilingPages = this.physicalPages;
          this.clearStale(p, n);
          this.mapExtent(p, n, h, k++, -1);
          left -= n;
          break;
        }
      }
      done = k;
      this.grantAccess(nRuns, k);
      this.pagesAhead += ahead;
    } catch (error) {
      this.undoMapped(nRuns, done);
      throw error;
    } finally {
      this.returnSpare();
    }
  }

  /**
   * Adds up to `extra` pages to the runs in `runs`: unmapped pages with no stale mapping (so no live
   * block's, and no unmap needed) just above p1, then just below p0, joined to the runs at p1 and p0
   * (or as runs of their own). Returns the pages added.
   */
  private extendRuns(p0: number, p1: number, extra: number): number {
    const pages = this.rangeBytes / this.pageBytes;
    const h = this.handle;
    let q = p1 + 1;
    while (q < pages && q - p1 - 1 < extra && h[q] === 0) q++;
    const up = q - p1 - 1;
    let n = this.runCount;
    if (up > 0) {
      if (n > 0 && this.runs[2 * n - 2]! + this.runs[2 * n - 1]! === p1 + 1) {
        this.runs[2 * n - 1]! += up;
      } else {
        if (2 * n + 2 > this.runs.length) this.runs = grow(this.runs);
        this.runs[2 * n] = p1 + 1;
        this.runs[2 * n + 1] = up;
        n++;
      }
    }
    q = p0 - 1;
    while (q >= 0 && up + p0 - 1 - q < extra && h[q] === 0) q--;
    const down = p0 - 1 - q;
    if (down > 0) {
      if (n > 0 && this.runs[0] === p0) {
        this.runs[0] = p0 - down;
        this.runs[1]! += down;
      } else {
        if (2 * n + 2 > this.runs.length) this.runs = grow(this.runs);
        this.runs.copyWithin(2, 0, 2 * n);
        this.runs[0] = p0 - down;
        this.runs[1] = down;
        n++;
      }
    }
    this.runCount = n;
    return up + down;
  }

  /**
   * Puts the runs of pages among p0..p1 that are not live-mapped in `runs` (cut where a page index
   * is a multiple of `cut`) and their count in `runCount`; returns their pages.
   */
  private collectRuns(p0: number, p1: number): number {
    let nRuns = 0;
    let missing = 0;
    for (let p = p0; p <= p1; p++) {
      if (this.isMapped(p)) continue;
      let q = p;
      while (q < p1 && (q + 1) % this.cut !== 0 && !this.isMapped(q + 1)) q++;
      if (2 * nRuns + 2 > this.runs.length) this.runs = grow(this.runs);
      this.runs[2 * nRuns] = p;
      this.runs[2 * nRuns + 1] = q - p + 1;
      nRuns++;
      missing += q - p + 1;
      p = q;
    }
    this.runCount = nRuns;
    return missing;
  }

  /**
   * Moves up to `want` cached pages to the pages among p0..p1 that hold a stale mapping of them,
   * by making that mapping live again: no driver call, only the wait for the streams that freed
   * blocks on the page's current place (`waitForDonors`). Returns the pages moved.
   *
   * A page moved by `takeDonors` leaves its old mapping in place (unmapping it would cost 26-31 us,
   * and a second mapping of a page costs nothing but address space: bench/c/vmm_alias.c on an H100,
   * 2026-11-23, mapped one page at 1,024 places). A loop that allocates the same way each step moves
   * the same pages back and forth, so after the first steps most moves find their mapping in place.
   *
   * What it cannot serve is a page whose old mapping is of memory under a live block elsewhere now:
   * an address holds one mapping, so that page is unmapped and mapped to a donor's memory (the
   * calls that remain). Counted with `vram replay --repeat 4` on the emulated backend (pool stack;
   * the same with 3% headroom or plenty): of the pages of bert_dynamic_infer's passes 2-4 holding
   * an old mapping when needed, 3,409 were moved back here with no call, 3,739 had their memory
   * under a live block elsewhere, 303 under an idle page of the block itself; so its 4,076 unmaps
   * and 4,124 maps (8,724 calls with cuMemSetAccess) are all of that kind, and keeping more old
   * mappings saves none of them (resnet50_train: 172 back, 111 under a live block, 44 in the block).
   * Which donor's memory goes there decides where the next such meeting is; tried, none kept: the
   * donor whose memory has the fewest or the most old mappings, or the lowest address, instead of
   * the highest (bert 18,080, 23,555 and 16,550 calls).
   */
  private reclaimStale(p0: number, p1: number, want: number): number {
    this.markUsed();
    const used = this.usedMark;
    let n = 0;
    for (let v = p0; v <= p1 && n < want; v++) {
      if (this.isMapped(v)) continue;
      const h = this.handle[v]!;
      if (h === 0) continue;
      const u = this.ownerOf.get(h);
      if (u === undefined || (u >= p0 && u <= p1) || used[u] !== 0) continue;
      used[u] = 1; // one move per page
      if (n === this.donors.length) this.donors = grow(this.donors);
      if (n === this.targets.length) this.targets = grow(this.targets);
      this.donors[n] = u;
      this.targets[n] = v;
      n++;
    }
    if (n === 0) return 0;
    // waitForDonors takes the donors highest first.
    this.donors.subarray(0, n).sort().reverse();
    this.waitForDonors(n);
    for (let k = 0; k < n; k++) this.disown(this.donors[k]!);
    for (let k = 0; k < n; k++) this.own(this.targets[k]!);
    return n;
  }

  /**
   * Maps extent p..p+n-1 to `h` (created by this growth, or a donor's from page `from`) and records
   * it as runs[2k..2k+1] (the runs mapped so far).
   */
  private mapExtent(p: number, n: number, h: number, k: number, from: number): void {
    const P = this.pageBytes;
    try {
      this.backend.memMap(this.base + p * P, n * P, h);
      this.calls[CALL_MAP]!++;
    } catch (error) {
      if (from >= 0) {
        this.own(from); // still mapped at its donor page: live there again
      } else {
        this.backend.memRelease(h);
        this.calls[CALL_RELEASE]!++;
        this.physicalPages -= n;
      }
      throw error;
    }
    this.setMapped(p, n, h);
    if (2 * k + 2 > this.runs.length) this.runs = grow(this.runs, 2 * k + 2);
    if (k + 1 > this.runFrom.length) this.runFrom = grow(this.runFrom, k + 1);
    this.runs[2 * k] = p;
    this.runs[2 * k + 1] = n;
    this.runFrom[k] = from;
    this.mappedNow = k + 1;
  }

  /** One-page handles taken from donors and not mapped again (none on success) live at their donor pages again. */
  private returnSpare(): void {
    while (this.spareCount > 0) this.own(this.spareFrom[--this.spareCount]!);
  }

  /**
   * Read-write access for the pool's device, and the peers' access, to the extents just mapped
   * (runs[from..to), ascending): one cuMemSetAccess per stretch of adjacent extents and device (a
   * range may span many mappings: the driver needs it only fully mapped; the peer-access tests on
   * two H200s set it over such ranges).
   */
  private grantAccess(from: number, to: number): void {
    const b = this.backend;
    const P = this.pageBytes;
    const runs = this.runs;
    for (let k = from; k < to; k++) {
      const addr = this.base + runs[2 * k]! * P;
      let pages = runs[2 * k + 1]!;
      while (k + 1 < to && runs[2 * k + 2] === runs[2 * k]! + runs[2 * k + 1]!) {
        k++;
        pages += runs[2 * k + 1]!;
      }
      const bytes = pages * P;
      b.memSetAccess(addr, bytes, this.ordinal, MemAccess.READWRITE);
      this.calls[CALL_SET_ACCESS]! += 1 + this.peers.grant(b, addr, bytes);
    }
  }

  /**
   * A growth that failed gives back every extent it mapped (runs[from..done)): none is used by a
   * block, a created one would leave the device fuller than before the failed call (so the next
   * allocator, ours or another, would fail too), and one may lack access (granted only once all
   * were mapped), so none may stay as cache.
   */
  private undoMapped(from: number, done: number): void {
    done = Math.max(done, this.mappedNow);
    const P = this.pageBytes;
    for (let k = from; k < done; k++) {
      const p = this.runs[2 * k]!;
      const n = this.runs[2 * k + 1]!;
      const h = this.handle[p]!;
      this.backend.memUnmap(this.base + p * P, n * P);
      this.calls[CALL_UNMAP]!++;
      for (let q = p; q < p + n; q++) this.setUnmapped(q);
      const donor = this.runFrom[k]!;
      if (donor >= 0) {
        this.own(donor); // a moved page: live at its donor page again, where it is still mapped
        continue;
      }
      this.ownerOf.delete(h);
      this.backend.memRelease(h);
      this.calls[CALL_RELEASE]!++;
      this.physicalPages -= n;
    }
  }

  /**
   * Puts cached extents (mapped, no live block on any of their pages), none overlapping
   * skip0..skip1, in `donors`, highest addresses first, until they hold `want` pages; returns how
   * many. Best fit prefers low addresses, so high pages are the ones least likely to be wanted
   * back soon. Marks the pages live blocks touch (one walk over the range's blocks), then walks
   * the mapped extents downwards, skipping unmapped stretches a bitmap word at a time. Slow path
   * only (growth past the high-water mark, releaseCached).
   */
  private findFree(want: number, skip0: number, skip1: number, marked = false): number {
    if (!marked) this.markUsed();
    const used = this.usedMark;
    const m = this.mapped;
    let n = 0;
    let got = 0;
    for (let p = this.topMapped; p >= 0 && got < want; p--) {
      if (m.wordEmpty(p)) {
        p &= ~31; // the rest of this word, downwards, is unmapped
        continue;
      }
      if (!this.isMapped(p)) continue;
      const f = this.extentFirst[p]!;
      const len = this.extentPages[f]!;
      p = f;
      if (f + len - 1 >= skip0 && f <= skip1) continue;
      let free = true;
      for (let q = f; q < f + len && free; q++) if (used[q] !== 0) free = false;
      if (!free) continue;
      if (n === this.donors.length) this.donors = grow(this.donors);
      this.donors[n++] = f;
      got += len;
    }
    return n;
  }

  /** Marks in `usedMark` the pages live blocks touch (one walk over the range's blocks). */
  private markUsed(): void {
    const s = this.heap.store;
    const P = this.pageBytes;
    const used = this.usedMark;
    used.fill(0, 0, this.topMapped + 1); // no live block lies above the highest page ever mapped
    for (let i = this.head; i !== NIL; i = s.next[i]!) {
      if (s.owner[i] !== LIVE) continue;
      const q0 = Math.floor((s.start[i]! - this.base) / P);
      const q1 = Math.floor((s.start[i]! + s.size[i]! - 1 - this.base) / P);
      used.fill(1, q0, q1 + 1);
    }
  }

  /**
   * Takes the first `n` donor extents, after `waitForDonors`: up to `keep` one-page ones put their
   * handle in `spare` (to be mapped again where needed: a page move) and stay mapped where they
   * are, stale (see `reclaimStale`); the others are unmapped and released (their bytes created
   * again where needed, or, with `keep` 0, given back), stale mappings of them included. Returns
   * the donors' pages.
   */
  private takeDonors(n: number, keep: number): number {
    this.waitForDonors(n);
    const P = this.pageBytes;
    let pages = 0;
    let released: Set<number> | null = null;
    for (let k = 0; k < n; k++) {
      const f = this.donors[k]!;
      const len = this.extentPages[f]!;
      const h = this.handle[f]!;
      pages += len;
      if (len === 1 && this.spareCount < keep) {
        if (this.spareCount === this.spare.length) {
          this.spare = growF(this.spare);
          this.spareFrom = grow(this.spareFrom);
        }
        this.spareFrom[this.spareCount] = f;
        this.spare[this.spareCount++] = h;
        this.disown(f);
        continue;
      }
      this.backend.memUnmap(this.base + f * P, len * P);
      this.calls[CALL_UNMAP]!++;
      for (let q = f; q < f + len; q++) this.setUnmapped(q);
      if (len === 1) {
        this.ownerOf.delete(h);
        (released ??= new Set()).add(h);
      } else {
        this.backend.memRelease(h);
        this.calls[CALL_RELEASE]!++;
      }
      this.physicalPages -= len;
    }
    if (released !== null) {
      // Their stale mappings first (the driver frees memory only once nothing maps it), then them.
      for (let q = 0; q < this.handle.length && this.stalePages > 0; q++) {
        if (this.handle[q] === 0 || this.isMapped(q) || !released.has(this.handle[q]!)) continue;
        this.backend.memUnmap(this.base + q * P, P);
        this.calls[CALL_UNMAP]!++;
        this.setUnmapped(q);
      }
      for (const h of released) {
        this.backend.memRelease(h);
        this.calls[CALL_RELEASE]!++;
      }
    }
    return pages;
  }

  /**
   * Waits until no queued work can still touch the first `n` donor extents, before they are
   * unmapped. Every block on a donor is free (a live block on it would make it no donor), and a
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
    const donors = this.donors;
    // One sweep: blocks upwards in address order, donors (found highest first) from the last one.
    let k = n - 1;
    for (let i = this.head; i !== NIL && k >= 0; i = s.next[i]!) {
      const a = s.start[i]!;
      while (k >= 0 && this.base + (donors[k]! + this.extentPages[donors[k]!]!) * P <= a) k--;
      if (k < 0) break;
      const o = s.owner[i]!;
      if (o > NEUTRAL && this.base + donors[k]! * P < a + s.size[i]!) mark[o] = 1;
    }
    const order = heap.order;
    for (let id = NEUTRAL + 1; id < lists.length; id++) {
      if (mark[id] === 0) continue;
      const waits = order.hostWaits;
      order.hostWait(lists[id]!);
      if (order.hostWaits !== waits) this.hostWaits++;
    }
  }
}

function growF(a: Float64Array): Float64Array {
  const b = new Float64Array(a.length * 2);
  b.set(a);
  return b;
}

/** A copy of `a` at least twice as long, and at least `least` long. */
function grow(a: Int32Array, least = 0): Int32Array {
  const b = new Int32Array(Math.max(a.length * 2, least));
  b.set(a);
  return b;
}
