/**
 * A lease on a buffer's residency (`DeviceBuffer.lease()`): while it lives, the buffer is not
 * spilled, so foreign code may use its address. Ends with `release()` or at the end of a `using`
 * scope; ending it twice does nothing.
 */
import type { Ptr } from '../../backend/backend.js';
import type { StreamRef } from '../../stream.js';

/** What a lease counts on: the spill manager's entry for its buffer (spill-manager.ts's SpillEntry). */
export interface LeasedEntry {
  leases: number;
}

/**
 * Options of `DeviceBuffer.lease()`.
 *
 * @example
 * ```ts
 * using lease = buf.lease({ stream, readOnly: true });
 * ```
 */
export interface LeaseOptions {
  /** Bring spilled memory back on this stream (default: synchronously). */
  readonly stream?: StreamRef;
  /** The foreign code only reads the memory: its host copy stays current (a later spill copies nothing). */
  readonly readOnly?: boolean;
}

/**
 * Keeps a buffer on the device while foreign code uses `ptr`.
 *
 * @example
 * ```ts
 * using lease = buf.lease();
 * native.process(lease.ptr, buf.byteLength);
 * ```
 */
export class SpillLease {
  #entry: LeasedEntry | undefined;
  #held = true;

  /** @internal Made by `DeviceBuffer.lease()`. */
  constructor(
    /** The buffer's address, valid while the lease lives. */
    readonly ptr: Ptr,
    entry: LeasedEntry | undefined,
  ) {
    this.#entry = entry;
  }

  /**
   * True until `release()` (or the end of its `using` scope).
   *
   * @returns Whether the lease still holds the buffer.
   * @throws Never.
   * @example
   * ```ts
   * lease.held; // true
   * ```
   */
  get held(): boolean {
    return this.#held;
  }

  /**
   * Ends the lease: the buffer may be spilled again. A second call does nothing.
   *
   * @returns Nothing.
   * @throws Never.
   * @example
   * ```ts
   * const lease = buf.lease();
   * try { native.process(lease.ptr); } finally { lease.release(); }
   * ```
   */
  release(): void {
    if (!this.#held) return;
    this.#held = false;
    const entry = this.#entry;
    this.#entry = undefined;
    if (entry !== undefined) entry.leases--;
  }

  /** `using lease = buf.lease()` releases at the end of the scope. */
  [Symbol.dispose](): void {
    this.release();
  }
}
