/**
 * The `sum` row: the built-in whole-array sum over 256 MiB of float32 (`sum(a, { out })`, the
 * two-pass reduction of src/kernels/ops/reduction-kernels.ts), as read bandwidth. bench/peers/sum.py
 * times `cupy.sum` over the same size the same way, for the ratio the issue asks for (within 1.2x
 * of CuPy's time) from one call on the GPU machine.
 *
 * Timing, the same on both sides: untimed warm-up runs (module load or JIT, the memory pool's
 * first blocks), then each run timed with the host clock from launch to a synchronise of its
 * stream (so launch and allocation overheads count, as they do for a caller), median over runs.
 * The result stays on the device (`out`), as `cupy.sum` returns a device array.
 */
import { DeviceArray } from '../../array/device-array.js';
import { Device } from '../../device.js';
import { fill, sum } from '../../kernels/ops/index.js';
import { Stream } from '../../stream.js';
import { gbPerSecond, median, nowNs, repeatsFor, type BenchCase, type BenchRow, type BenchSettings } from './common.js';

/** Bytes summed: 256 MiB of float32 (bench/peers/sum.py uses the same). */
const SUM_BYTES = 256 << 20;
/** On a quick run (the emulated backend's is always quick): the emulation sums in JavaScript. */
const QUICK_SUM_BYTES = 4 << 20;
/** Untimed runs first, and timed runs (full run); bench/peers/sum.py uses the same. */
const WARMUP_RUNS = 10;
const RUNS = 100;

/**
 * The `sum` row of the kernels group.
 *
 * @param settings The run's settings (quick: 4 MiB and fewer runs).
 * @returns One case.
 * @throws Never (the case throws when run, becoming a skipped row).
 * @example
 * ```ts
 * const rows = await sumCases(settings)[0].run();
 * ```
 */
export function sumCases(settings: BenchSettings): BenchCase[] {
  const size = settings.quick ? QUICK_SUM_BYTES : SUM_BYTES;
  const name = 'sum float32 (built-in)';
  return [{
    group: 'kernels', name, size,
    run: (): BenchRow => {
      const device = Device.get(0);
      using stream = Stream.create({ device, nonBlocking: true });
      using a = DeviceArray.empty([size / 4], 'float32', { device, stream });
      using out = DeviceArray.empty([1], 'float32', { device, stream });
      fill(a, 1, { stream });
      const runs = repeatsFor(settings, RUNS);
      const samples: number[] = [];
      for (let i = 0; i < WARMUP_RUNS + runs; i++) {
        const t0 = nowNs();
        sum(a, { out, stream });
        stream.synchronize();
        if (i >= WARMUP_RUNS) samples.push((nowNs() - t0) / 1e9);
      }
      // Every element is 1: a wrong sum would make the figure meaningless.
      const got = out.toHost()[0];
      if (got !== size / 4) throw new Error(`sum gave ${String(got)}, expected ${size / 4}`);
      return { group: 'kernels', name, size, value: gbPerSecond(size, median(samples)), unit: 'GB/s', repeats: runs };
    },
  }];
}
