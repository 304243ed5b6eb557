/**
 * A launch's configuration (grid, block, dynamic shared memory, stream) and its checks against the
 * device's limits and the kernel's own, before any driver call. The dimensions are read into a
 * preallocated array of the kernel's, so checking a launch allocates nothing.
 */
import type { FunctionAttributes, KernelLimits } from '../backend/backend.js';
import type { StreamRef } from '../stream.js';

/** One, two or three dimensions: `256`, `[64, 64]`, `[8, 8, 4]` (missing ones are 1). */
export type Dim3 = number | readonly [number, number?, number?];

/**
 * How a kernel is launched.
 *
 * @example
 * ```ts
 * kernel.launch({ grid: Math.ceil(n / 256), block: 256, stream }, y, x, 2.0, n);
 * ```
 */
export interface LaunchConfig {
  /** Blocks in the grid: each dimension a whole number from 1 to the device's maximum. */
  readonly grid: Dim3;
  /** Threads per block: each dimension within the device's maximum, their product within the kernel's. */
  readonly block: Dim3;
  /** Dynamic shared memory per block in bytes (default 0). */
  readonly sharedBytes?: number;
  /** The stream the kernel runs on (default: the legacy default stream, 0). */
  readonly stream?: StreamRef;
}

const AXES = ['x', 'y', 'z'] as const;

/**
 * Reads `config.grid` and `config.block` into `out` ([gx, gy, gz, bx, by, bz]) and checks them and
 * `sharedBytes` against the limits.
 *
 * @param kernel The kernel's name, for messages.
 * @param config The launch configuration.
 * @param limits The device's launch limits.
 * @param attributes The kernel's attributes (its own block-size and shared-memory ceilings).
 * @param out Six numbers, overwritten.
 * @returns The dynamic shared memory in bytes.
 * @throws {TypeError} When the configuration or a dimension is not a number or an array of numbers.
 * @throws {RangeError} For a dimension of zero, negative, fractional or above the device's maximum,
 *   too many threads per block for the kernel, or too much shared memory.
 * @example
 * ```ts
 * const dims = [0, 0, 0, 0, 0, 0];
 * readLaunchConfig('saxpy', { grid: 4, block: [16, 16] }, limits, attributes, dims); // dims: [4, 1, 1, 16, 16, 1]
 * ```
 */
export function readLaunchConfig(kernel: string, config: LaunchConfig, limits: KernelLimits, attributes: FunctionAttributes, out: number[]): number {
  if (config === null || typeof config !== 'object') throw new TypeError(`kernel ${kernel}: the launch configuration must be an object with grid and block`);
  readDims(kernel, 'grid', config.grid, limits.maxGridDim, out, 0);
  readDims(kernel, 'block', config.block, limits.maxBlockDim, out, 3);
  const threads = out[3]! * out[4]! * out[5]!;
  const maxThreads = Math.min(limits.maxThreadsPerBlock, attributes.maxThreadsPerBlock);
  if (threads > maxThreads) {
    throw new RangeError(`kernel ${kernel}: a block of ${threads} threads is more than the ${maxThreads} it can have on this device`);
  }
  const shared = config.sharedBytes ?? 0;
  if (typeof shared !== 'number' || !Number.isInteger(shared) || shared < 0) {
    throw new RangeError(`kernel ${kernel}: sharedBytes must be a whole number >= 0, got ${String(shared)}`);
  }
  if (shared > attributes.maxDynamicSharedSizeBytes) {
    throw new RangeError(`kernel ${kernel}: ${shared} bytes of dynamic shared memory is more than its ${attributes.maxDynamicSharedSizeBytes}`);
  }
  return shared;
}

function readDims(kernel: string, what: 'grid' | 'block', value: Dim3, max: readonly [number, number, number], out: number[], at: number): void {
  if (typeof value === 'number') {
    out[at] = checkDim(kernel, what, 0, value, max[0]);
    out[at + 1] = 1;
    out[at + 2] = 1;
    return;
  }
  if (!Array.isArray(value) || value.length < 1 || value.length > 3) {
    throw new TypeError(`kernel ${kernel}: ${what} must be a number or an array of 1 to 3 numbers`);
  }
  for (let i = 0; i < 3; i++) {
    const d: unknown = value[i];
    out[at + i] = d === undefined ? 1 : checkDim(kernel, what, i, d, max[i]!);
  }
}

function checkDim(kernel: string, what: string, axis: number, value: unknown, max: number): number {
  if (typeof value !== 'number') throw new TypeError(`kernel ${kernel}: ${what}.${AXES[axis]} must be a number, got ${typeof value}`);
  if (!Number.isInteger(value) || value < 1 || value > max) {
    throw new RangeError(`kernel ${kernel}: ${what}.${AXES[axis]} must be a whole number from 1 to ${max} (the device's limit), got ${value}`);
  }
  return value;
}
