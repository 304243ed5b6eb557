/**
 * The one shape every statistic in vram has: a current value, its high-water mark and a running
 * total (RMM's `statistics_resource_adaptor::counter`). Bytes and counts, of any resource, read
 * the same way, so a report or an out-of-memory error never has to know who produced them.
 */

/** A figure with its peak and running total. */
export interface Counter {
  /** The figure now (live bytes, live allocations, reserved bytes). */
  readonly value: number;
  /** The highest `value` since creation or the last peak reset. */
  readonly peak: number;
  /** The sum of every increase ever made (bytes ever allocated, allocations ever made). */
  readonly total: number;
}

/**
 * A mutable Counter, held by the resources that count. `add` and `sub` are a few additions, so a
 * resource can update one on its hot path.
 *
 * @example
 * ```ts
 * const c = new CounterCell();
 * c.add(256); c.sub(256);
 * c.snapshot(); // { value: 0, peak: 256, total: 256 }
 * ```
 */
export class CounterCell implements Counter {
  value = 0;
  peak = 0;
  total = 0;

  /**
   * Adds `n` to the value and the total, and raises the peak if needed.
   * @param n The amount, >= 0.
   */
  add(n: number): void {
    const v = (this.value += n);
    this.total += n;
    if (v > this.peak) this.peak = v;
  }

  /**
   * Subtracts `n` from the value (the total and peak stay).
   * @param n The amount, >= 0.
   */
  sub(n: number): void {
    this.value -= n;
  }

  /** Starts a new high-water mark from the current value. */
  resetPeak(): void {
    this.peak = this.value;
  }

  /**
   * A frozen copy, safe to hand out.
   * @returns `{ value, peak, total }` as they are now.
   */
  snapshot(): Counter {
    return Object.freeze({ value: this.value, peak: this.peak, total: this.total });
  }
}
