/**
 * A ballast: one plain cuMemAlloc, made outside every resource stack, that takes all of a device's
 * free memory but a chosen capacity, so a replay runs with only that much device memory left, as
 * on a smaller card. The same on both backends: the emulated device charges the ballast against
 * its capacity as the driver charges a GPU's memory (whole 2 MiB pages), and backs it lazily, so
 * it costs no host memory.
 */
import { Device } from '../device.js';
import { formatBytes } from '../util/size.js';
import type { AllocationTrace } from './parse.js';

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
    throw new RangeError(
      `a capacity of ${formatBytes(capacityBytes)} (${capacityBytes} bytes) is more than device ${device.ordinal}'s ` +
        `free memory, ${formatBytes(free)} (${free} bytes) of ${formatBytes(total)}`,
    );
  }
  return { free, total };
}

/**
 * Holds a ballast on `device` so that its free memory comes down to `capacityBytes`, within one
 * page below it: the ballast is whole 2 MiB pages, and memory is handed out in whole pages, so a
 * capacity that ends part way through a page has the use of its whole pages only (13.7 MiB holds
 * six pages of 2 MiB, not seven). Leaving the partial page free too would let a replay fit where
 * a device of that capacity could not.
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
  // Whole pages, enough to leave no more than the capacity free, and never more than is free.
  const bytes = Math.min(Math.ceil((free - capacityBytes) / PAGE), Math.floor(free / PAGE)) * PAGE;
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
    capacityBytes,
    bytes,
    freeBytes,
    totalBytes: total,
    release(): void {
      if (!held) return;
      held = false;
      device.makeCurrent();
      device.backend.memFree(ptr);
    },
  };
}

/** The least memory a trace's live blocks take at its peak, in whole pages (see `pagesAtPeak`). */
export interface PeakPages {
  /** The operation (1-based, as replay failures count) after which live bytes first reach their peak. */
  readonly operation: number;
  /** Its line in the log. */
  readonly line: number;
  /** The bytes live then: the trace's peak live. */
  readonly liveBytes: number;
  /** The blocks live then. */
  readonly blocks: number;
  /** The page size counted in. */
  readonly pageBytes: number;
  /**
   * Pages those bytes fill, packed with no gap: no allocator whose memory comes in pages of
   * `pageBytes` (every one over the driver: cuMemAlloc and CUDA's pool round to 2 MiB pages as
   * vram's pools do) can hold the peak in fewer.
   */
  readonly pages: number;
}

/**
 * Where a trace's live bytes first reach their peak, and the fewest whole pages that can hold
 * them: a capacity of fewer pages cannot run the trace on any allocator, so `vram replay` says so
 * rather than only reporting each stack's failure.
 *
 * @param trace A parsed trace.
 * @param pageBytes The page size (default 2 MiB, a GPU's allocation granularity).
 * @returns The peak's place, its live bytes and blocks, and the pages they need.
 * @throws Never.
 * @example
 * ```ts
 * const peak = pagesAtPeak(readAllocationLog('trace.csv'));
 * if (Math.floor(capacity / peak.pageBytes) < peak.pages) console.log('cannot fit');
 * ```
 */
export function pagesAtPeak(trace: AllocationTrace, pageBytes: number = PAGE): PeakPages {
  const peak = trace.summary.peakLiveBytes;
  const live = new Map<number, number>();
  let bytes = 0;
  let operation = 0;
  for (const e of trace.events) {
    if (e.action === 'allocate failure') continue;
    operation++;
    if (e.action === 'allocate') {
      live.set(e.slot, e.size);
      bytes += e.size;
      if (bytes === peak) {
        return { operation, line: e.line, liveBytes: bytes, blocks: live.size, pageBytes, pages: Math.ceil(bytes / pageBytes) };
      }
    } else {
      bytes -= live.get(e.slot) ?? 0;
      live.delete(e.slot);
    }
  }
  return { operation: 0, line: 0, liveBytes: 0, blocks: 0, pageBytes, pages: 0 };
}
