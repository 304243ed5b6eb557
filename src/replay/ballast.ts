/**
 * A ballast: one plain cuMemAlloc, made outside every resource stack, that takes all of a device's
 * free memory but a chosen capacity, so a replay runs with only that much device memory left, as
 * on a smaller card. The same on both backends: the emulated device charges the ballast against
 * its capacity as the driver charges a GPU's memory (whole 2 MiB pages), and backs it lazily, so
 * it costs no host memory.
 */
import { Device } from '../device.js';
import { formatBytes } from '../util/size.js';

/** The driver's page for a large cuMemAlloc: a ballast of whole pages takes exactly its size. */
const PAGE = 2 * 1024 * 1024;

/** A held ballast. */
export interface Ballast {
  /** The capacity asked for. */
  readonly capacityBytes: number;
  /** Bytes the ballast holds (0 when the device's free memory was already the capacity). */
  readonly bytes: number;
  /** The device's free memory once the ballast is held: what a stack made next sees (cuMemGetInfo). */
  readonly freeBytes: number;
  /** The device's total memory. */
  readonly totalBytes: number;
  /** Gives the ballast back (once; later calls do nothing). */
  release(): void;
}

/**
 * Checks that `device` has `capacityBytes` free now, before anything is replayed.
 *
 * @param device The device.
 * @param capacityBytes The device memory a replay is to have.
 * @returns The device's free and total memory now.
 * @throws {RangeError} When the capacity is more than the free memory (the message names both,
 *   and the total).
 * @throws {CudaError} When the driver fails cuMemGetInfo.
 * @example
 * ```ts
 * checkCapacity(Device.get(0), 24 * 2 ** 30);
 * ```
 */
export function checkCapacity(device: Device, capacityBytes: number): { free: number; total: number } {
  const { free, total } = device.memInfo();
  if (capacityBytes > free) {
    throw new RangeError(`a capacity of ${formatBytes(capacityBytes)} (${capacityBytes} bytes) is more than device ${device.ordinal}'s ` +
      `free memory, ${formatBytes(free)} (${free} bytes) of ${formatBytes(total)}`);
  }
  return { free, total };
}

/**
 * Holds a ballast on `device` so that its free memory comes down to `capacityBytes`, within one
 * page above it: the ballast is whole 2 MiB pages, so it never takes more than it was meant to.
 *
 * @param device The device.
 * @param capacityBytes The device memory to leave free.
 * @returns The ballast, with the free memory it left.
 * @throws {RangeError} When the capacity is more than the device's free memory now (the message
 *   names both, and the total).
 * @throws {CudaError} When the driver refuses the ballast.
 * @example
 * ```ts
 * const ballast = holdBallast(Device.get(0), 24 * 2 ** 30); // as if on a 24 GiB card
 * try { replay(trace, resource); } finally { ballast.release(); }
 * ```
 */
export function holdBallast(device: Device, capacityBytes: number): Ballast {
  const { free, total } = checkCapacity(device, capacityBytes);
  const bytes = Math.floor((free - capacityBytes) / PAGE) * PAGE;
  // Made current by memInfo: cuMemAlloc allocates in the current context.
  const ptr = bytes === 0 ? 0 : device.backend.memAlloc(bytes);
  let held = ptr !== 0;
  let freeBytes: number;
  try {
    freeBytes = device.memInfo().free;
  } catch (error) {
    if (held) device.backend.memFree(ptr);
    throw error;
  }
  return {
    capacityBytes, bytes, freeBytes, totalBytes: total,
    release(): void {
      if (!held) return;
      held = false;
      device.makeCurrent();
      device.backend.memFree(ptr);
    },
  };
}
