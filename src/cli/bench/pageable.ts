/**
 * Transfer rows for ordinary JavaScript memory through vram's transfer layer, beside the ceilings
 * that bound them, all measured in the same run:
 * - staged pageable H2D/D2H: a one-shot copy (registration off), through pinned chunks on the copy
 *   threads, timed to completion with the host clock;
 * - registered pageable H2D/D2H: the same buffer copied again and again (the registration cache
 *   pinned it during the warm-up);
 * - host memcpy into/out of pinned: the copy threads alone, same thread count, between the
 *   JavaScript buffer and pinned memory (the host side's ceiling; the copy engine's is the pinned
 *   H2D/D2H rows of transfers.ts);
 * - async staged pageable H2D and D2H (1 GiB on a GPU by default), and the event loop's delay
 *   (p99, `monitorEventLoopDelay`) while they run: the copies must not block the event loop.
 */
import { monitorEventLoopDelay } from 'node:perf_hooks';
import type { Backend } from '../../backend/backend.js';
import { nativeAddress } from '../../cuda/host-memcpy.js';
import { Device } from '../../device.js';
import { DeviceBuffer } from '../../buffer/device-buffer.js';
import { CopyThreads } from '../../buffer/transfer/copy-threads.js';
import { configureTransfers, releaseTransferCaches, transferSettings } from '../../buffer/transfer/transfers.js';
import { gbPerSecond, median, nowNs, repeatsFor, type BenchCase, type BenchRow, type BenchSettings } from './common.js';
import { fullRepeats, timeHostClock } from './transfers.js';

type Measure = (bytes: number, repeats: number) => number;

/** A JavaScript buffer of `bytes` with its pages touched (first-touch faults are not the copy's). */
function pageable(bytes: number): Uint8Array {
  return new Uint8Array(bytes).fill(7);
}

/**
 * Runs `body` with a device buffer of `bytes` and every pageable copy staged (the threshold below
 * which copies go straight to the driver set to 0, so each row measures the path it names), then
 * frees the buffer, restores the threshold and empties the transfer caches.
 */
function withDevice<T>(bytes: number, body: (buf: DeviceBuffer) => T): T {
  const { stagingThreshold } = transferSettings();
  configureTransfers({ stagingThreshold: 0 });
  const buf = DeviceBuffer.allocate(bytes);
  try {
    return body(buf);
  } finally {
    buf.free();
    configureTransfers({ stagingThreshold });
    releaseTransferCaches();
  }
}

/** The copy threads alone, between JavaScript memory and pinned memory, with the transfers' thread count. */
function hostCeiling(backend: Backend, bytes: number, repeats: number, intoPinned: boolean): number {
  const threads = new CopyThreads(transferSettings().threads);
  const pinned = backend.memHostAlloc(bytes, 0);
  try {
    const view = new Uint8Array(backend.hostView(pinned, bytes));
    view.fill(1);
    const host = pageable(bytes);
    const pinnedAddress = nativeAddress(view);
    const hostAddress = nativeAddress(host);
    const copy = intoPinned ? { dst: pinnedAddress, src: hostAddress, bytes } : { dst: hostAddress, src: pinnedAddress, bytes };
    return timeHostClock(bytes, repeats, () => threads.copy([copy]));
  } finally {
    threads.destroy();
    backend.memFreeHost(pinned);
  }
}

/** A pageable copy one way through the transfer layer, with the registration cache off or on. */
function pageableCopy(toDevice: boolean, register: boolean): Measure {
  return (bytes, repeats) => {
    const host = pageable(bytes);
    return withDevice(bytes, (buf) =>
      timeHostClock(
        bytes,
        repeats,
        toDevice
          ? () => buf.copyFromHost(host, { register })
          : () => {
              buf.copyToHost(host, { register });
            },
      ),
    );
  };
}

function measures(backend: Backend): readonly (readonly [name: string, measure: Measure])[] {
  return [
    ['staged pageable H2D', pageableCopy(true, false)],
    ['staged pageable D2H', pageableCopy(false, false)],
    ['registered pageable H2D', pageableCopy(true, true)],
    ['registered pageable D2H', pageableCopy(false, true)],
    ['host memcpy into pinned (copy threads)', (bytes, repeats) => hostCeiling(backend, bytes, repeats, true)],
    ['host memcpy out of pinned (copy threads)', (bytes, repeats) => hostCeiling(backend, bytes, repeats, false)],
  ];
}

/**
 * One async staged copy of `bytes` each way with the event loop's delay histogram running: the
 * bandwidth rows and the p99 delay (milliseconds). A warm-up copy first starts the threads and
 * fills the staging pool with chunks of the size the copy uses, as a program's first copy does.
 */
async function asyncCopies(bytes: number, repeats: number): Promise<{ h2d: number; d2h: number; p99Ms: number }> {
  const host = pageable(bytes);
  const buf = DeviceBuffer.allocate(bytes, { device: Device.get(0) });
  try {
    const warm = host.subarray(0, Math.min(bytes, 4 * transferSettings().chunkBytes));
    await buf.copyFromHostAsync(warm, { register: false });
    await buf.copyToHostAsync(warm, { register: false, bytes: warm.byteLength });
    const delay = monitorEventLoopDelay({ resolution: 1 });
    const h2d: number[] = [];
    const d2h: number[] = [];
    delay.enable();
    for (let i = 0; i < repeats; i++) {
      let start = nowNs();
      await buf.copyFromHostAsync(host, { register: false });
      h2d.push(gbPerSecond(bytes, (nowNs() - start) / 1e9));
      start = nowNs();
      await buf.copyToHostAsync(host, { register: false });
      d2h.push(gbPerSecond(bytes, (nowNs() - start) / 1e9));
    }
    delay.disable();
    return { h2d: median(h2d), d2h: median(d2h), p99Ms: delay.percentile(99) / 1e6 };
  } finally {
    buf.free();
    releaseTransferCaches();
  }
}

/** The pageable rows for the sizes asked for, and the async rows at `asyncTransferSize`. */
export function pageableCases(settings: BenchSettings): BenchCase[] {
  const cases: BenchCase[] = [];
  for (const [name, measure] of measures(settings.backend)) {
    for (const size of settings.transferSizes) {
      const repeats = repeatsFor(settings, fullRepeats(size));
      cases.push({
        group: 'transfers',
        name,
        size,
        run: (): BenchRow => ({ group: 'transfers', name, size, unit: 'GB/s', repeats, value: measure(size, repeats) }),
      });
    }
  }
  const size = settings.asyncTransferSize;
  const name = 'async staged pageable H2D+D2H';
  const repeats = repeatsFor(settings, 5);
  cases.push({
    group: 'transfers',
    name,
    size,
    run: async (): Promise<BenchRow[]> => {
      const { h2d, d2h, p99Ms } = await asyncCopies(size, repeats);
      return [
        { group: 'transfers', name: 'async staged pageable H2D', size, unit: 'GB/s', repeats, value: h2d },
        { group: 'transfers', name: 'async staged pageable D2H', size, unit: 'GB/s', repeats, value: d2h },
        { group: 'transfers', name: 'event-loop delay p99 during async staged H2D+D2H', size, unit: 'ms', repeats, value: p99Ms },
      ];
    },
  });
  return cases;
}
