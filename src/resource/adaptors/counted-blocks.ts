/**
 * The blocks an adaptor that keeps its own count handed out, with their sizes, so a free it never
 * counted is refused before the count moves (statistics, limiting; tracking keeps a record per
 * block instead and refuses through the same check).
 */
import type { Ptr } from '../../backend/backend.js';
import { InvalidPointerError } from '../../errors.js';
import type { Counter } from '../../counter.js';
import type { MemoryFigures } from '../figures.js';
import type { MemoryResource } from '../resource.js';

/**
 * Refuses the free of `ptr` with `bytes` through `adaptor` when `counted` (the size the adaptor
 * recorded for it, undefined for none) does not match: memory another resource handed out (an
 * equal upstream's, another adaptor's over it), a block already freed, or a wrong size would move
 * the adaptor's count from the truth.
 *
 * @param counted The size recorded for `ptr`, or undefined.
 * @param ptr The pointer freed.
 * @param bytes The size it is freed with.
 * @param adaptor The adaptor, for the message.
 * @throws {InvalidPointerError} When it does not match.
 * @internal
 */
export function checkCounted(counted: number | undefined, ptr: Ptr, bytes: number, adaptor: MemoryResource): void {
  if (counted === undefined) {
    throw new InvalidPointerError(
      `${adaptor.constructor.name}: 0x${ptr.toString(16)} was not allocated through ${adaptor.describe()} or was already deallocated`,
    );
  }
  if (counted !== bytes) {
    throw new InvalidPointerError(`${adaptor.constructor.name}: 0x${ptr.toString(16)} was allocated with ${counted} bytes, deallocated with ${bytes}`);
  }
}

/**
 * The sizes of the blocks an adaptor counted and has not seen freed.
 *
 * @example
 * ```ts
 * const blocks = new CountedBlocks();
 * blocks.add(ptr, 4096);
 * blocks.take(ptr, 4096, adaptor); // InvalidPointerError for a pointer never added
 * ```
 * @internal
 */
export class CountedBlocks {
  readonly #sizes = new Map<Ptr, number>();

  /** Records a block handed out. */
  add(ptr: Ptr, bytes: number): void {
    this.#sizes.set(ptr, bytes);
  }

  /**
   * Checks, before anything changes, that `ptr` was counted with `bytes`.
   *
   * @throws {InvalidPointerError} When it was not.
   */
  check(ptr: Ptr, bytes: number, adaptor: MemoryResource): void {
    checkCounted(this.#sizes.get(ptr), ptr, bytes, adaptor);
  }

  /** Forgets a block once its free went through. */
  delete(ptr: Ptr): void {
    this.#sizes.delete(ptr);
  }
}

/**
 * The figures of an adaptor that counts what passes through it (statistics, tracking): its own
 * allocated bytes and allocations, with the upstream's reserved bytes and whatever else it
 * reports; over an upstream that keeps no figures, reserved is taken as allocated (nothing is
 * known of what the upstream caches).
 *
 * @param below The upstream's `memoryFigures()`.
 * @param allocatedBytes The adaptor's count of bytes.
 * @param allocations The adaptor's count of blocks.
 * @returns The adaptor's figures.
 * @internal
 */
export function countedFigures(below: MemoryFigures | undefined, allocatedBytes: Counter, allocations: Counter): MemoryFigures {
  if (below !== undefined) return { ...below, allocatedBytes, allocations };
  return { allocatedBytes, allocations, reservedBytes: allocatedBytes.value, peakReservedBytes: allocatedBytes.peak, reservedFromAllocated: true };
}
