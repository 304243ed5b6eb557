/**
 * Where a pool block goes when its best fit needs unmapped pages (mapping them means moving cached
 * pages or creating memory): a place wholly on mapped pages, in the free blocks the stream may use
 * without waiting, that adds no more pages in use than the best fit would; failing that, the same
 * after gathering the other streams' blocks; and when the best fit misses more than
 * `FEWEST_MISSING_ABOVE` pages, the place with the fewest missing. Slow path only.
 * (Note [Mapped placement], docs/design/mapped-placement.md)
 */
import { NEUTRAL, type BlockHeap } from './block-heap.js';
import { NIL } from './block-store.js';
import { type FreeLists, sizeClass } from './free-list.js';

/** Pages a mapped place may add to those in use beyond what the best fit would (Note [Mapped placement]). */
const ALLOWANCE = 0;
/** Pages the best fit may miss before the place with the fewest missing pages wins (Note [Mapped placement]). */
export const FEWEST_MISSING_ABOVE = 4;

/** What the search reads of the pool's pages (VirtualPages). */
export interface PageMap {
  /** First address of the reserved range. */
  readonly base: number;
  /** Page size. */
  readonly pageBytes: number;
  /** The highest page ever mapped (-1 before any). */
  readonly topMapped: number;
  /** Pages [start, start + size) would add to those in use. */
  addedPages(start: number, size: number): number;
  /** Pages of [start, start + size) that are not mapped. */
  missingPages(start: number, size: number): number;
  /** The first page from p to `end` that is mapped (`flip` 0) or unmapped (-1), else end + 1. */
  nextMapped(p: number, end: number, flip: number): number;
}

/** The search of `VirtualPages`' growth for a place wholly on mapped pages. */
export class MappedPlacement {
  /** Growths served on mapped pages instead of the best fit. */
  placements = 0;
  /** The search state (fields, so the slow path allocates nothing). */
  private bestAdded = 0;
  private bestBlock = NIL;
  private bestStart = 0;
  private bestWhole = false;
  /** Unmapped pages of the best place so far (the fewest-missing search). */
  private bestMissing = 0;

  constructor(
    private readonly heap: BlockHeap,
    private readonly pages: PageMap,
  ) {}

  /**
   * Where `size` bytes go when the best fit `i` (taken by `heap.take` for `stream`) needs unmapped
   * pages: see the class.
   *
   * @param i The best fit, taken.
   * @param size The block's bytes (a multiple of the granule).
   * @param stream The allocating stream (its handle, as `heap.take` had it).
   * @returns The chosen block, taken (the best fit again when no mapped place qualifies).
   */
  place(i: number, size: number, stream: number): number {
    const heap = this.heap;
    const s = heap.store;
    const start = s.start[i]!;
    this.bestAdded = this.pages.addedPages(start, size) + ALLOWANCE;
    this.bestBlock = NIL;
    this.bestStart = start;
    this.bestWhole = false;
    heap.untake(i);
    const own = heap.listsFor(stream);
    this.scanLists(own, size);
    const neutral = heap.lists[NEUTRAL]!;
    if (neutral !== own) this.scanLists(neutral, size);
    let gathered = false;
    if (this.bestBlock === NIL && heap.gather(stream) > 0) {
      // Other streams' free blocks, gathered into this stream's lists after an event wait on each
      // (stream-ordered, no host wait), and coalesced there with its own: as CUDA's pool reuses
      // them by event dependency. A wait costs less than a page move (a host wait for the freeing
      // stream's work and three driver calls on a GPU), and blocks that coalesce across streams
      // make a repeated workload's free space the same at each step, so its places repeat too.
      gathered = true;
      this.scanLists(own, size);
      if (neutral !== own) this.scanLists(neutral, size);
    }
    if (this.bestBlock === NIL) {
      // No place wholly on mapped pages. A best fit many pages short moves them at every step of
      // a loop whose block sizes change (bert's cycle): the place with the fewest missing pages,
      // among the same free blocks, moves fewer.
      const missing = this.pages.missingPages(start, size);
      if (missing > FEWEST_MISSING_ABOVE) {
        this.bestMissing = missing;
        this.scanLists(own, size, true);
        if (neutral !== own) this.scanLists(neutral, size, true);
      }
    }
    if (this.bestBlock === NIL) {
      const k = heap.take(size, stream);
      // Gathering may have coalesced a better fit than the first; else the first comes back as it was.
      if (k === NIL || (!gathered && s.start[k] !== start)) throw new Error('internal: the best fit moved');
      return k;
    }
    this.placements++;
    return heap.takeAt(this.bestBlock, this.bestStart - s.start[this.bestBlock]!, size);
  }

  /**
   * `place` over one stream's lists: every block of a class that may hold `size`, the
   * classes holding none skipped by the lists' bitmaps (walking all 464 classes of two lists was
   * half of bert_dynamic_infer's steady state with 64 MiB extents, on the emulated backend).
   * `partly`: the fewest-missing search instead of places wholly on mapped pages.
   */
  private scanLists(lists: FreeLists, size: number, partly = false): void {
    const s = this.heap.store;
    for (let c = lists.nextNonEmpty(sizeClass(size)); c !== NIL; c = lists.nextNonEmpty(c + 1)) {
      for (let b = lists.heads[c]!; b !== NIL; b = s.fnext[b]!) {
        if (s.size[b]! >= size) this.scanBlock(b, size, partly);
      }
    }
  }

  /** Keeps place `x` in free block `b` if it misses fewer pages than the best so far (then the lower address). */
  private considerPartly(b: number, x: number, size: number): void {
    if (this.pages.addedPages(x, size) > this.bestAdded) return;
    const missing = this.pages.missingPages(x, size);
    if (missing < this.bestMissing || (missing === this.bestMissing && this.bestBlock !== NIL && x < this.bestStart)) {
      this.bestMissing = missing;
      this.bestBlock = b;
      this.bestStart = x;
    }
  }

  /**
   * `place` over free block `b`: each run of mapped pages inside it that can hold `size`
   * bytes offers places at its two ends and at its first and last page boundaries. `partly`
   * (the fewest-missing search): each run, whatever its length, offers the place starting at its
   * first page and the one ending at its last, which cover as much of it as `size` can.
   */
  private scanBlock(b: number, size: number, partly: boolean): void {
    const s = this.heap.store;
    const P = this.pages.pageBytes;
    const base = this.pages.base;
    const a = s.start[b]!;
    const e = a + s.size[b]!;
    const pa = Math.floor((a - base) / P);
    // The free space above the highest page ever mapped (the untouched end of the range, tens of
    // thousands of pages on a large GPU) has no mapped page to offer.
    const pb = Math.min(this.pages.topMapped, Math.floor((e - 1 - base) / P));
    let p = pa;
    while (p <= pb) {
      p = this.pages.nextMapped(p, pb, 0);
      if (p > pb) break;
      const q = this.pages.nextMapped(p, pb, -1) - 1; // the last page of this run of mapped pages
      const lo = Math.max(a, base + p * P);
      const last = Math.min(e, base + (q + 1) * P) - size;
      if (partly) {
        if (lo + size <= e) this.considerPartly(b, lo, size);
        if (last >= a) this.considerPartly(b, last, size);
      } else if (lo <= last) {
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
    const added = this.pages.addedPages(x, size);
    if (added > this.bestAdded) return;
    const whole = x === a || x + size === e;
    if (added < this.bestAdded || this.bestBlock === NIL || (whole && !this.bestWhole) || (whole === this.bestWhole && x < this.bestStart)) {
      this.bestAdded = added;
      this.bestBlock = b;
      this.bestStart = x;
      this.bestWhole = whole;
    }
  }
}
