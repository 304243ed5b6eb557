/**
 * The sizes of the live allocations of a resource that hands out driver memory directly
 * (CudaResource, AsyncResource, ManagedResource, PinnedHostResource). The driver frees whatever
 * pointer it is given: a foreign pointer, one inside an allocation, or one freed before is at best
 * a driver error and at worst frees someone else's memory (a stream-ordered pool reuses addresses
 * at once). With this table such a call is a typed error before any driver call, and a wrong size
 * is caught too, so adaptors above (a limit, statistics) never count a free that did not happen.
 *
 * An open-addressing table over typed arrays (the pool's LiveTable) maps an address to a slot;
 * the slot's size is in a Float64Array. No object is allocated per call.
 */
import { CounterCell } from '../../counter.js';
import { DoubleFreeError, InvalidPointerError } from '../../errors.js';
import { LiveTable } from '../suballoc/kit/live-table.js';

/** Recently freed addresses remembered, so a second free says "freed twice" rather than "foreign". */
const RECENT = 64;

/** Address -> size of the live allocations of one resource. */
export class SizeTable {
  private readonly slots = new LiveTable(64);
  private sizes = new Float64Array(64);
  private spare = new Int32Array(64);
  private spareCount = 0;
  private used = 0;
  private readonly recent = new Float64Array(RECENT).fill(-1);
  private recentNext = 0;
  /** Bytes of the live allocations, with peak and total. */
  readonly bytes = new CounterCell();
  /** Live allocations, with peak and total. */
  readonly allocations = new CounterCell();

  /** Number of live allocations. */
  get size(): number {
    return this.slots.size;
  }

  /**
   * Records a new allocation.
   * @param ptr Its address (not already live).
   * @param bytes Its size.
   */
  add(ptr: number, bytes: number): void {
    let slot: number;
    if (this.spareCount > 0) slot = this.spare[--this.spareCount]!;
    else {
      slot = this.used++;
      if (slot === this.sizes.length) this.grow();
    }
    this.sizes[slot] = bytes;
    this.slots.set(ptr, slot);
    this.bytes.add(bytes);
    this.allocations.add(1);
  }

  /**
   * Checks that `ptr` is a live allocation of `bytes`, before the caller frees it; changes nothing.
   * @param ptr The address given back.
   * @param bytes The size given back.
   * @param owner The resource's description, for messages.
   * @throws {InvalidPointerError} For a foreign pointer, one inside an allocation, or a wrong size.
   * @throws {DoubleFreeError} For an address freed recently and not allocated since.
   */
  check(ptr: number, bytes: number, owner: string): void {
    const slot = this.slots.get(ptr);
    if (slot < 0) throw this.unknown(ptr, owner);
    const size = this.sizes[slot]!;
    if (size !== bytes) {
      throw new InvalidPointerError(`deallocate(0x${ptr.toString(16)}, ${bytes}): the allocation has ${size} bytes (${owner})`);
    }
  }

  /**
   * Forgets a live allocation (after `check`).
   * @param ptr Its address.
   */
  remove(ptr: number): void {
    const slot = this.slots.delete(ptr);
    if (slot < 0) return;
    this.bytes.sub(this.sizes[slot]!);
    this.allocations.sub(1);
    if (this.spareCount === this.spare.length) {
      const spare = new Int32Array(this.spare.length * 2);
      spare.set(this.spare);
      this.spare = spare;
    }
    this.spare[this.spareCount++] = slot;
    this.recent[this.recentNext] = ptr;
    this.recentNext = (this.recentNext + 1) % RECENT;
  }

  /**
   * Every live allocation, for destroy and reports.
   * @returns Pairs of address and size.
   */
  entries(): Array<[ptr: number, bytes: number]> {
    return this.slots.entries().map(([ptr, slot]) => [ptr, this.sizes[slot]!]);
  }

  /** Forgets everything. */
  clear(): void {
    for (const [ptr] of this.entries()) this.remove(ptr);
  }

  /** The error for an address that is not a live allocation (error path: a linear scan is fine). */
  private unknown(ptr: number, owner: string): Error {
    for (const [start, bytes] of this.entries()) {
      if (ptr > start && ptr < start + bytes) {
        return new InvalidPointerError(
          `deallocate(0x${ptr.toString(16)}): the address lies inside the ` +
            `${bytes}-byte allocation at 0x${start.toString(16)}; give back the address allocate returned (${owner})`,
        );
      }
    }
    if (this.recent.includes(ptr)) {
      return new DoubleFreeError(`deallocate(0x${ptr.toString(16)}): already deallocated (freed twice?) (${owner})`);
    }
    return new InvalidPointerError(`deallocate(0x${ptr.toString(16)}): not allocated by ${owner}`);
  }

  private grow(): void {
    const sizes = new Float64Array(this.sizes.length * 2);
    sizes.set(this.sizes);
    this.sizes = sizes;
  }
}
