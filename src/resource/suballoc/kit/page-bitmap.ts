/**
 * Which pages of a virtual-memory pool's range are mapped (live-mapped: a page whose old mapping
 * stays, stale, is not): one bit per page, so that a block's range is checked a word at a time.
 * Pure arithmetic, no driver: the first piece of `virtual-growth.ts`'s page table on its own
 * (docs/design/virtual-growth.md).
 */
export class PageBitmap {
  private readonly words: Int32Array;

  /** @param pages Pages in the range. */
  constructor(readonly pages: number) {
    this.words = new Int32Array((pages + 31) >>> 5);
  }

  /** True when page p is mapped. */
  has(p: number): boolean {
    return (this.words[p >>> 5]! & (1 << (p & 31))) !== 0;
  }

  /** Marks page p mapped. */
  set(p: number): void {
    this.words[p >>> 5]! |= 1 << (p & 31);
  }

  /** Marks page p unmapped. */
  clear(p: number): void {
    this.words[p >>> 5]! &= ~(1 << (p & 31));
  }

  /** True when no page of p's word (the 32 pages from p & ~31) is mapped: a walk skips them at once. */
  wordEmpty(p: number): boolean {
    return this.words[p >>> 5] === 0;
  }

  /** True when every page p0..p1 is mapped: one or two words for any block up to 64 pages. */
  all(p0: number, p1: number): boolean {
    const m = this.words;
    const w0 = p0 >>> 5;
    const w1 = p1 >>> 5;
    if (w0 === w1) {
      const bits = (-1 >>> (31 - (p1 & 31))) & (-1 << (p0 & 31));
      return (m[w0]! & bits) === bits;
    }
    const head = -1 << (p0 & 31);
    if ((m[w0]! & head) !== head) return false;
    for (let w = w0 + 1; w < w1; w++) if (m[w] !== -1) return false;
    const tail = (-1 >>> (31 - (p1 & 31))) | 0;
    return (m[w1]! & tail) === tail;
  }

  /**
   * The first page from p to `end` that is mapped (`flip` 0) or unmapped (`flip` -1), else end + 1:
   * a word at a time (a free block of a gigabyte is 500 pages; walking them one by one, and every
   * page of the untouched end of the range, was about 60% of resnet50_train's steady state on the
   * emulated backend).
   */
  next(p: number, end: number, flip: number): number {
    const m = this.words;
    let w = p >>> 5;
    let bits = (m[w]! ^ flip) & (-1 << (p & 31));
    const last = end >>> 5;
    while (bits === 0) {
      if (++w > last) return end + 1;
      bits = m[w]! ^ flip;
    }
    const q = (w << 5) + 31 - Math.clz32(bits & -bits);
    return q > end ? end + 1 : q;
  }

  /** Pages of p0..p1 that are not mapped (runs of mapped pages skipped a word at a time). */
  missing(p0: number, p1: number): number {
    let n = 0;
    for (let p = p0; p <= p1;) {
      const q = this.next(p, p1, -1); // the next unmapped page
      if (q > p1) break;
      const r = this.next(q, p1, 0); // the next mapped page after it
      n += r - q;
      p = r;
    }
    return n;
  }
}
