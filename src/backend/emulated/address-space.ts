/**
 * The emulated unified address space. Every kind of memory gets its own range of addresses (device
 * memory near 0x7f0000000000 as the driver hands it out, then managed, virtual reservations, pinned
 * host memory and JavaScript memory), all above 0 and below 2^53. Addresses within a range are
 * handed out upwards and never reused, so an index is appended to, and a stale pointer never
 * aliases a newer allocation.
 */
import { CUresult } from '../../errors.js';
import { fail } from './fail.js';

/** Anything that occupies [base, base + size) of the address space. */
export interface Interval {
  readonly base: number;
  readonly size: number;
  /** False once freed; the index drops dead intervals lazily. */
  live: boolean;
}

/**
 * A sorted index of non-overlapping live intervals: O(log n) lookup of the interval containing an
 * address, amortised O(1) insert at the end (addresses grow) and O(1) removal (tombstones,
 * compacted when they outnumber the live entries).
 */
export class IntervalIndex<T extends Interval> {
  private entries: T[] = [];
  private dead = 0;

  /** Number of live intervals. */
  get size(): number {
    return this.entries.length - this.dead;
  }

  /** Adds a live interval (it must not overlap another live one). */
  insert(entry: T): void {
    const entries = this.entries;
    const last = entries[entries.length - 1];
    if (last === undefined || last.base <= entry.base) {
      entries.push(entry);
      return;
    }
    let lo = 0;
    let hi = entries.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (entries[mid]!.base <= entry.base) lo = mid + 1;
      else hi = mid;
    }
    entries.splice(lo, 0, entry);
  }

  /** Marks an interval dead and forgets it. */
  remove(entry: T): void {
    if (!entry.live) return;
    entry.live = false;
    this.dead++;
    if (this.dead > 32 && this.dead * 2 > this.entries.length) {
      this.entries = this.entries.filter((e) => e.live);
      this.dead = 0;
    }
  }

  /** The live interval containing `address`, if any. */
  find(address: number): T | undefined {
    const entries = this.entries;
    let lo = 0;
    let hi = entries.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (entries[mid]!.base <= address) lo = mid + 1;
      else hi = mid;
    }
    // Live intervals never overlap, so the nearest live one at or below the address is the only candidate.
    for (let i = lo - 1; i >= 0; i--) {
      const e = entries[i]!;
      if (!e.live) continue;
      return address < e.base + e.size ? e : undefined;
    }
    return undefined;
  }

  /** The first live interval overlapping [base, base + size), if any. */
  findOverlap(base: number, size: number): T | undefined {
    const at = this.find(base);
    if (at !== undefined) return at;
    for (const e of this.entries) {
      if (e.live && e.base < base + size && base < e.base + e.size) return e;
    }
    return undefined;
  }

  /** Every live interval, in address order. */
  *values(): IterableIterator<T> {
    for (const e of this.entries) if (e.live) yield e;
  }
}

/** A range of addresses handed out upwards with a bump pointer. */
export class AddressRange {
  private next: number;

  constructor(
    /** Name for errors. */
    readonly name: string,
    /** First address of the range (never 0). */
    readonly start: number,
    /** One past the last address. */
    readonly end: number,
  ) {
    this.next = start;
  }

  /** True when `address` lies in this range. */
  contains(address: number): boolean {
    return address >= this.start && address < this.end;
  }

  /** Hands out `size` bytes aligned to `alignment` (a power of two); leaves a guard gap after. */
  take(size: number, alignment: number, call: string): number {
    const base = Math.ceil(this.next / alignment) * alignment;
    if (base + size > this.end) {
      fail(CUresult.OUT_OF_MEMORY, call, `the emulated ${this.name} address range is exhausted`);
    }
    // A gap of one 4 KiB page keeps one-past-the-end of an allocation outside the next one.
    this.next = base + size + 4096;
    return base;
  }
}

const TIB = 2 ** 40;

/** The ranges of the emulated address space, one per kind of memory. */
export const ADDRESS_RANGES = {
  device: { start: 0x7f00_0000_0000, size: 64 * TIB },
  managed: { start: 0xc000_0000_0000, size: 64 * TIB },
  virtual: { start: 0x1_0000_0000_0000, size: 128 * TIB },
  pinned: { start: 0x2_0000_0000_0000, size: 64 * TIB },
  javascript: { start: 0x3_0000_0000_0000, size: 64 * TIB },
  pool: { start: 0x4_0000_0000_0000, size: 1024 * TIB },
} as const;

/**
 * The largest device the ranges hold room for: four of each use that spans a whole device (a
 * cuMemAlloc of all of it, a PoolResource's virtual range of twice it, a memory pool's range of four
 * times it), whose addresses are handed out upwards and never taken back. 16 TiB.
 */
export const MAX_DEVICE_CAPACITY = Math.min(ADDRESS_RANGES.device.size, ADDRESS_RANGES.virtual.size / 2, ADDRESS_RANGES.pool.size / 4) / 4;

/** Creates the bump range for one kind of memory. */
export function addressRange(kind: keyof typeof ADDRESS_RANGES): AddressRange {
  const r = ADDRESS_RANGES[kind];
  return new AddressRange(kind, r.start, r.start + r.size);
}
