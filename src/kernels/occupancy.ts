/**
 * Occupancy: how many blocks of a kernel fit on one multiprocessor at once, and the block size
 * that keeps the most threads resident (the driver's cuOccupancy* calls, which know the kernel's
 * registers and shared memory). Arguments are checked here, before the driver sees them.
 */
import type { Backend, FunctionAttributes, Handle } from '../backend/backend.js';

/** The block size the driver suggests and the smallest grid that reaches full occupancy with it. */
export interface SuggestedBlockSize {
  /** Threads per block with the most resident threads per multiprocessor. */
  readonly blockSize: number;
  /** Blocks needed to fill every multiprocessor at that occupancy (launch at least this many for full occupancy). */
  readonly minGridSize: number;
}

function checkShared(kernel: string, sharedBytes: number, attributes: FunctionAttributes): void {
  if (typeof sharedBytes !== 'number' || !Number.isInteger(sharedBytes) || sharedBytes < 0) {
    throw new RangeError(`kernel ${kernel}: sharedBytes must be a whole number >= 0, got ${String(sharedBytes)}`);
  }
  if (sharedBytes > attributes.maxDynamicSharedSizeBytes) {
    throw new RangeError(`kernel ${kernel}: ${sharedBytes} bytes of dynamic shared memory is more than its ${attributes.maxDynamicSharedSizeBytes}`);
  }
}

/**
 * Resident blocks per multiprocessor (cuOccupancyMaxActiveBlocksPerMultiprocessor).
 *
 * @param kernel The kernel's name, for messages.
 * @param backend The kernel's backend (its context current).
 * @param fn The function handle.
 * @param attributes The kernel's attributes.
 * @param blockSize Threads per block.
 * @param sharedBytes Dynamic shared memory per block.
 * @returns Blocks that can be resident on one multiprocessor (0 when none fits).
 * @throws {RangeError} For a block size outside 1..the kernel's maximum, or bad shared memory.
 * @throws {CudaError} When the driver fails.
 * @example
 * ```ts
 * maxActiveBlocks('saxpy', backend, fn, attributes, 256, 0); // e.g. 8
 * ```
 */
export function maxActiveBlocks(kernel: string, backend: Backend, fn: Handle, attributes: FunctionAttributes, blockSize: number, sharedBytes: number): number {
  if (typeof blockSize !== 'number' || !Number.isInteger(blockSize) || blockSize < 1 || blockSize > attributes.maxThreadsPerBlock) {
    throw new RangeError(`kernel ${kernel}: blockSize must be a whole number from 1 to ${attributes.maxThreadsPerBlock}, got ${String(blockSize)}`);
  }
  checkShared(kernel, sharedBytes, attributes);
  return backend.occupancyMaxActiveBlocksPerMultiprocessor(fn, blockSize, sharedBytes);
}

/**
 * The block size with the most resident threads (cuOccupancyMaxPotentialBlockSize, for a fixed
 * amount of dynamic shared memory per block).
 *
 * @param kernel The kernel's name, for messages.
 * @param backend The kernel's backend (its context current).
 * @param fn The function handle.
 * @param attributes The kernel's attributes.
 * @param sharedBytes Dynamic shared memory per block.
 * @param blockSizeLimit The largest block size to consider (0: the kernel's maximum).
 * @returns The suggested block size and the grid size that fills the device with it.
 * @throws {RangeError} For bad shared memory or limit.
 * @throws {CudaError} When the driver fails.
 * @example
 * ```ts
 * const { blockSize, minGridSize } = suggestedBlockSize('saxpy', backend, fn, attributes, 0, 0);
 * ```
 */
export function suggestedBlockSize(
  kernel: string,
  backend: Backend,
  fn: Handle,
  attributes: FunctionAttributes,
  sharedBytes: number,
  blockSizeLimit: number,
): SuggestedBlockSize {
  checkShared(kernel, sharedBytes, attributes);
  if (typeof blockSizeLimit !== 'number' || !Number.isInteger(blockSizeLimit) || blockSizeLimit < 0) {
    throw new RangeError(`kernel ${kernel}: blockSizeLimit must be a whole number >= 0 (0 for none), got ${String(blockSizeLimit)}`);
  }
  const { blockSize, minGridSize } = backend.occupancyMaxPotentialBlockSize(fn, sharedBytes, blockSizeLimit);
  return { blockSize, minGridSize };
}
