/**
 * `LiveStreams`: the streams a backend vouches for as live, counted per holder.
 */
import type { Handle } from './backend.js';

/**
 * The streams a backend vouches for as live (`streamKnown`), counted: its own creation counts
 * once and each `adoptStream` once more, so one borrower's `forgetStream` leaves a stream that
 * its creator or another borrower still holds known; `streamDestroy` ends them all. Both backends
 * keep one.
 */
export class LiveStreams {
  private readonly holders = new Map<Handle, number>();

  /**
   * Counts one more holder of `stream` (a creation or an adoption).
   * @param stream The handle.
   */
  hold(stream: Handle): void {
    this.holders.set(stream, (this.holders.get(stream) ?? 0) + 1);
  }

  /**
   * Counts one holder fewer; the last one makes the stream unknown. An unknown handle is ignored.
   * @param stream The handle.
   */
  release(stream: Handle): void {
    const n = this.holders.get(stream);
    if (n === undefined) return;
    if (n > 1) this.holders.set(stream, n - 1);
    else this.holders.delete(stream);
  }

  /**
   * Forgets `stream` whoever holds it: the driver destroyed it.
   * @param stream The handle.
   */
  destroyed(stream: Handle): void {
    this.holders.delete(stream);
  }

  /**
   * True when someone holds `stream`.
   * @param stream The handle.
   * @returns Whether it is vouched for.
   */
  has(stream: Handle): boolean {
    return this.holders.has(stream);
  }
}
