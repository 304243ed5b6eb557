/**
 * Segregated free lists (TLSF-style size classes with two-level bitmaps) for one stream: finding a
 * best-fitting free block is a couple of bit operations plus a short scan, independent of how many
 * blocks are free, and uses numbers only.
 */
import { JoinClock } from '../../join-clock.js';
import { BlockStore, NIL } from './block-store.js';

/** Every block size is a multiple of this; classes are computed in these units. */
export const GRANULE = 256;
const SL_BITS = 4;
const SL_COUNT = 1 << SL_BITS;
/** Groups of 16 classes: units < 16 are linear, then one group per power of two up to 2^31 units. */
const GROUPS = 29;
/** Number of size classes. */
export const CLASS_COUNT = GROUPS * SL_COUNT;
/** How many blocks of a class the best-fit scan looks at before settling. */
const SCAN_LIMIT = 32;

/** The size class of a block of `size` bytes (a multiple of GRANULE). */
export function sizeClass(size: number): number {
  const u = size / GRANULE;
  if (u < SL_COUNT) return u;
  if (u >= 2 ** 32) return CLASS_COUNT - 1;
  const fl = 31 - Math.clz32(u);
  return ((fl - SL_BITS + 1) << SL_BITS) + ((u >>> (fl - SL_BITS)) & (SL_COUNT - 1));
}

function lowestBit(x: number): number {
  return 31 - Math.clz32(x & -x);
}

/** The free blocks one stream may reuse without waiting, by size class. */
export class FreeLists {
  /** First block of each class, or NIL. */
  readonly heads = new Int32Array(CLASS_COUNT).fill(NIL);
  private groupBitmap = 0;
  private readonly classBitmap = new Int32Array(GROUPS);
  /** Number of free blocks in these lists. */
  count = 0;
  /**
   * `bytes` and `event`: a region's size (hundreds of GB) and a driver event handle (a pointer) are
   * doubles. Plain fields would start as small integers and be widened the first time, changing
   * the hidden class of every FreeLists and discarding the optimized hit path mid-run; a
   * Float64Array never changes shape.
   */
  private readonly numbers = new Float64Array(2);

  constructor(
    /** Index of these lists in the owning heap. */
    readonly id: number,
    /** The stream handle these blocks were freed on (-1 for memory no stream has used). */
    readonly stream: number,
    private readonly store: BlockStore,
  ) {
    this.clock = new JoinClock(id);
  }

  /** Bytes in these lists. */
  get bytes(): number {
    return this.numbers[0]!;
  }

  /** Set when the stream was destroyed (see StreamOrder.retire); `event` then marks its end. */
  retired = false;
  /** What the stream's joins already ordered (`give` sets `freed`: see StreamOrder.join). */
  readonly clock: JoinClock;

  /**
   * The block last freed on this stream and parked, not merged nor listed, for the next
   * allocation of exactly its size on this stream (see BlockHeap.park); NIL when none.
   */
  parked = NIL;

  /** A reusable event on this stream (0 until first needed). */
  get event(): number {
    return this.numbers[1]!;
  }

  set event(handle: number) {
    this.numbers[1] = handle;
  }

  /** Adds free block `i` (its owner must already be set to this list's id). */
  insert(i: number): void {
    const s = this.store;
    const c = sizeClass(s.size[i]!);
    s.sizeClass[i] = c;
    const h = this.heads[c]!;
    s.fprev[i] = NIL;
    s.fnext[i] = h;
    if (h !== NIL) s.fprev[h] = i;
    else {
      this.classBitmap[c >> SL_BITS]! |= 1 << (c & (SL_COUNT - 1));
      this.groupBitmap |= 1 << (c >> SL_BITS);
    }
    this.heads[c] = i;
    this.count++;
    this.numbers[0]! += s.size[i]!;
  }

  /** Removes free block `i` from these lists (its size must not have changed since insert). */
  remove(i: number): void {
    const s = this.store;
    const p = s.fprev[i]!;
    const n = s.fnext[i]!;
    if (n !== NIL) s.fprev[n] = p;
    if (p !== NIL) s.fnext[p] = n;
    else {
      const c = s.sizeClass[i]!;
      this.heads[c] = n;
      if (n === NIL) {
        const g = c >> SL_BITS;
        const bits = (this.classBitmap[g]! &= ~(1 << (c & (SL_COUNT - 1))));
        if (bits === 0) this.groupBitmap &= ~(1 << g);
      }
    }
    this.count--;
    this.numbers[0]! -= s.size[i]!;
  }

  /**
   * The best-fitting free block of at least `size` bytes (smallest, then lowest address), or NIL.
   * Looks in the request's own class first, then in the smallest non-empty larger class.
   */
  findFit(size: number): number {
    const c = sizeClass(size);
    const higher = this.nextNonEmpty(c + 1);
    if (this.heads[c] === NIL) return higher === NIL ? NIL : this.bestIn(higher, size, SCAN_LIMIT);
    const best = this.bestIn(c, size, higher === NIL ? Infinity : SCAN_LIMIT);
    if (best !== NIL || higher === NIL) return best;
    return this.bestIn(higher, size, SCAN_LIMIT);
  }

  /** The first free block found (any size), or NIL: used to drain these lists. */
  any(): number {
    if (this.groupBitmap === 0) return NIL;
    const g = lowestBit(this.groupBitmap);
    return this.heads[(g << SL_BITS) + lowestBit(this.classBitmap[g]!)]!;
  }

  private bestIn(c: number, size: number, limit: number): number {
    const s = this.store;
    let best = NIL;
    let bestSize = Infinity;
    let bestStart = Infinity;
    let n = 0;
    for (let i = this.heads[c]!; i !== NIL && n < limit; i = s.fnext[i]!, n++) {
      const bs = s.size[i]!;
      if (bs < size) continue;
      if (bs < bestSize || (bs === bestSize && s.start[i]! < bestStart)) {
        best = i;
        bestSize = bs;
        bestStart = s.start[i]!;
        if (bs === size) limit = Math.min(limit, n + 4);
      }
    }
    return best;
  }

  /**
   * The first class from `c` up that holds a free block, or NIL: two bitmap reads.
   *
   * @param c A size class (CLASS_COUNT or more gives NIL).
   * @returns The class, or NIL.
   */
  nextNonEmpty(c: number): number {
    if (c >= CLASS_COUNT) return NIL;
    let g = c >> SL_BITS;
    const bits = this.classBitmap[g]! & (~0 << (c & (SL_COUNT - 1)));
    if (bits !== 0) return (g << SL_BITS) + lowestBit(bits);
    if (g + 1 >= 32) return NIL;
    const groups = this.groupBitmap & (~0 << (g + 1));
    if (groups === 0) return NIL;
    g = lowestBit(groups);
    return (g << SL_BITS) + lowestBit(this.classBitmap[g]!);
  }
}
