/**
 * How a peer device may access a pool's memory, one vocabulary for both pools that offer it:
 * `AsyncResource.setAccess` (cuMemPoolSetAccess) and `PoolResource.setAccess` (cuMemSetAccess on
 * its mapped pages).
 */
import { MemAccess } from '../backend/backend.js';

/** How a peer device may access a pool's memory. */
export type PoolAccess = 'none' | 'read' | 'readwrite';

const FLAGS: Readonly<Record<PoolAccess, number>> = {
  none: MemAccess.NONE,
  read: MemAccess.READ,
  readwrite: MemAccess.READWRITE,
};

/**
 * The driver's CUmemAccess_flags for `access`.
 *
 * @param access 'none', 'read' or 'readwrite'.
 * @returns MemAccess.NONE, READ or READWRITE.
 * @throws {RangeError} For anything else.
 * @example
 * ```ts
 * accessFlags('readwrite'); // MemAccess.READWRITE
 * ```
 */
export function accessFlags(access: unknown): number {
  if (typeof access !== 'string' || !Object.hasOwn(FLAGS, access)) {
    throw new RangeError(`access must be 'none', 'read' or 'readwrite', got '${String(access)}'`);
  }
  return FLAGS[access as PoolAccess];
}

/**
 * The PoolAccess the driver's flags mean.
 *
 * @param flags CUmemAccess_flags.
 * @returns 'readwrite', 'read' or 'none'.
 * @example
 * ```ts
 * poolAccess(MemAccess.READ); // 'read'
 * ```
 */
export function poolAccess(flags: number): PoolAccess {
  return flags === MemAccess.READWRITE ? 'readwrite' : flags === MemAccess.READ ? 'read' : 'none';
}
