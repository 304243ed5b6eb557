/**
 * Block records for the sub-allocators, kept as parallel typed arrays indexed by a small integer
 * (structure of arrays): a pool hit then allocates no JavaScript object and makes no garbage,
 * which is what keeps an allocate+free pair in the hundreds of nanoseconds.
 */

/** `owner` value of a block that is handed out (not in any free list). */
export const LIVE = -1;
/** `prev`/`next`/`fprev`/`fnext` value meaning "none". */
export const NIL = -1;

/**
 * Parallel arrays describing blocks of address space. A block is either live (owner LIVE) or free
 * and in the free lists of one stream (owner = that stream's list id). `prev`/`next` link blocks
 * that are adjacent in address order within one region (for coalescing); `fprev`/`fnext` link the
 * blocks of one size class in a free list.
 */
export class BlockStore {
  /** First address of each block. */
  start: Float64Array;
  /** Size of each block in bytes (a multiple of the allocation granule). */
  size: Float64Array;
  /** The size the caller asked for, for live blocks (checked on deallocate). */
  requested: Float64Array;
  prev: Int32Array;
  next: Int32Array;
  fprev: Int32Array;
  fnext: Int32Array;
  owner: Int32Array;
  /** Size class of a free block (set when it enters a free list). */
  sizeClass: Int16Array;
  private spare: Int32Array;
  private spareCount = 0;
  private used = 0;

  constructor(capacity = 1024) {
    this.start = new Float64Array(capacity);
    this.size = new Float64Array(capacity);
    this.requested = new Float64Array(capacity);
    this.prev = new Int32Array(capacity);
    this.next = new Int32Array(capacity);
    this.fprev = new Int32Array(capacity);
    this.fnext = new Int32Array(capacity);
    this.owner = new Int32Array(capacity);
    this.sizeClass = new Int16Array(capacity);
    this.spare = new Int32Array(capacity);
  }

  /** A fresh record index; the arrays may be replaced, so re-read them after calling this. */
  alloc(): number {
    if (this.spareCount > 0) return this.spare[--this.spareCount]!;
    if (this.used === this.start.length) this.grow();
    return this.used++;
  }

  /** Returns a record index for reuse. */
  release(i: number): void {
    this.owner[i] = NIL;
    this.spare[this.spareCount++] = i;
  }

  /** Number of records in use. */
  get count(): number {
    return this.used - this.spareCount;
  }

  private grow(): void {
    const n = this.start.length * 2;
    const f64 = (a: Float64Array): Float64Array => {
      const b = new Float64Array(n);
      b.set(a);
      return b;
    };
    const i32 = (a: Int32Array): Int32Array => {
      const b = new Int32Array(n);
      b.set(a);
      return b;
    };
    this.start = f64(this.start);
    this.size = f64(this.size);
    this.requested = f64(this.requested);
    this.prev = i32(this.prev);
    this.next = i32(this.next);
    this.fprev = i32(this.fprev);
    this.fnext = i32(this.fnext);
    this.owner = i32(this.owner);
    const cls = new Int16Array(n);
    cls.set(this.sizeClass);
    this.sizeClass = cls;
    this.spare = i32(this.spare);
  }
}
