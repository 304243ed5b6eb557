/**
 * The hook vram's operations call before they touch a buffer's memory, so a spilled buffer is
 * brought back first, on the stream of the use, and its dirty state and recency are kept: copies
 * and fills (copy-planning.ts), kernel launches (kernels/signature.ts), and through them the
 * built-in operations, `toHost` and the exports. Apart from the spill manager so that the copy
 * path needs nothing of it but this lookup (a WeakMap miss for every buffer that is not spillable).
 *
 * Operations: a copy between two spillable buffers, or a kernel launch with several, brings each
 * back in turn, and bringing back the second may need room: the first must not be the one evicted.
 * Each operation therefore starts a new epoch (`beginOperation`), and a buffer prepared in the
 * current epoch is not evicted until the next one starts.
 */
import type { StreamRef } from '../../stream.js';

/** What a spillable buffer does before a use: come back if spilled, count the use, note a write. */
export interface Residency {
  /**
   * @param stream The stream the use is queued on; undefined for a synchronous use.
   * @param writes True when the use may write the memory (its host copy is then stale).
   */
  prepare(stream: StreamRef | undefined, writes: boolean): void;
  /** True when a reload gives the memory a new address (a resource without virtual memory). */
  readonly moves: boolean;
}

const residencies = new WeakMap<object, Residency>();
let epoch = 1;

/**
 * Says how `memory` is prepared for use (spillable buffers, set once as they are made).
 *
 * @internal
 * @param memory The buffer.
 * @param residency Its spill state.
 */
export function setResidency(memory: object, residency: Residency): void {
  residencies.set(memory, residency);
}

/**
 * Brings `memory` back if it is a spilled buffer, ordered on `stream`, and counts the use;
 * nothing for other memory.
 *
 * @internal
 * @param memory A copy's side, a fill's target or a kernel argument.
 * @param stream The stream of the use (undefined: synchronous).
 * @param writes Whether the use may write it.
 * @returns True for spillable memory.
 * @throws {OutOfMemoryError} When it cannot be brought back (the message says what was spillable).
 */
export function prepareUse(memory: unknown, stream: StreamRef | undefined, writes: boolean): boolean {
  if (typeof memory !== 'object' || memory === null) return false;
  const residency = residencies.get(memory);
  if (residency === undefined) return false;
  residency.prepare(stream, writes);
  return true;
}

/**
 * Whether `memory` is spillable memory whose address changes when it comes back: an operation
 * that read its address before `prepareUse` reads it again after.
 *
 * @internal
 * @param memory A copy's side, a fill's target or a kernel argument.
 * @returns True for such memory.
 */
export function movesOnReload(memory: unknown): boolean {
  if (typeof memory !== 'object' || memory === null) return false;
  return residencies.get(memory)?.moves === true;
}

/**
 * Starts an operation: buffers prepared before it may be evicted again.
 *
 * @internal
 */
export function beginOperation(): void {
  epoch++;
}

/**
 * The current operation's epoch (buffers prepared in it are kept).
 *
 * @internal
 * @returns The epoch.
 */
export function currentEpoch(): number {
  return epoch;
}
