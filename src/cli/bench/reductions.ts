/**
 * The reduction rows: the built-in whole-array `sum`, `min`, `max` and `dot` over 256 MiB of float32
 * (`op(a, { out })`, the two-pass reductions of src/kernels/ops/reduction-kernels.ts), as read
 * bandwidth (dot reads two arrays of 128 MiB, the same bytes). bench/peers/reductions.py times CuPy's
 * `sum`, `min`, `max` and `dot` over the same sizes the same way, and a device-to-device copy beside
 * them, for the ratios issue 38 asks for, from one call on the GPU machine.
 *
 * Timing, the same on both sides: untimed warm-up runs (module load or JIT, the memory pool's
 * first blocks), then each run timed with the host clock from launch to a synchronise of its
 * stream (so launch and allocation overheads count, as they do for a caller), median over runs.
 * The result stays on the device (`out`), as CuPy's return device arrays. The data is random
 * (uniform in [0, 1)), written once by a kernel, and checked against a float64 sum on the host.
 */
import { DeviceArray } from '../../array/device-array.js';
import { Device } from '../../device.js';
import { dot, max, min, sum } from '../../kernels/ops/index.js';
import { Stream } from '../../stream.js';
import { gbPerSecond, median, nowNs, repeatsFor, type BenchCase, type BenchRow, type BenchSettings } from './common.js';
import { mulberry32 } from '../../util/random.js';

/** Bytes read: 256 MiB of float32 (bench/peers/reductions.py uses the same). */
const REDUCE_BYTES = 256 << 20;
/** On a quick run (the emulated backend's is always quick): the emulation reduces in JavaScript. */
const QUICK_REDUCE_BYTES = 4 << 20;
/** Untimed runs first, and timed runs (full run); bench/peers/reductions.py uses the same. */
const WARMUP_RUNS = 100;
const RUNS = 100;

type Reduction = 'sum' | 'min' | 'max' | 'dot';
const REDUCTIONS: readonly Reduction[] = ['sum', 'min', 'max', 'dot'];

/** What the host expects of one reduction over `values` (dot: of its two halves). */
function expected(op: Reduction, values: Float32Array): number {
  if (op === 'min') return values.reduce((m, v) => Math.min(m, v), Infinity);
  if (op === 'max') return values.reduce((m, v) => Math.max(m, v), -Infinity);
  if (op === 'sum') return values.reduce((s, v) => s + v, 0);
  const half = values.length / 2;
  let s = 0;
  for (let i = 0; i < half; i++) s += values[i]! * values[half + i]!;
  return s;
}

/**
 * The reduction rows of the kernels group.
 *
 * @param settings The run's settings (quick: 4 MiB and fewer runs).
 * @returns One case per reduction.
 * @throws Never (a case throws when run, becoming a skipped row).
 * @example
 * ```ts
 * const rows = await reductionCases(settings)[0].run();
 * ```
 */
export function reductionCases(settings: BenchSettings): BenchCase[] {
  const size = settings.quick ? QUICK_REDUCE_BYTES : REDUCE_BYTES;
  return REDUCTIONS.map((op): BenchCase => {
    const name = `${op} float32 (built-in)`;
    return {
      group: 'kernels',
      name,
      size,
      run: (): BenchRow => {
        const device = Device.get(0);
        using stream = Stream.create({ device, nonBlocking: true });
        const random = mulberry32(0x5eed);
        const values = new Float32Array(size / 4);
        for (let i = 0; i < values.length; i++) values[i] = random();
        using a = DeviceArray.from(values, { device, stream });
        // Views of a's halves (they own no memory: a frees it).
        const x = a.slice([0, values.length / 2]);
        const y = a.slice([values.length / 2, values.length]);
        using out = DeviceArray.empty([1], 'float32', { device, stream });
        const run = (): void => {
          if (op === 'dot') dot(x, y, { out, stream });
          else if (op === 'sum') sum(a, { out, stream });
          else if (op === 'min') min(a, { out, stream });
          else max(a, { out, stream });
        };
        const runs = repeatsFor(settings, RUNS);
        const samples: number[] = [];
        for (let i = 0; i < WARMUP_RUNS + runs; i++) {
          const t0 = nowNs();
          run();
          stream.synchronize();
          if (i >= WARMUP_RUNS) samples.push((nowNs() - t0) / 1e9);
        }
        // A wrong result would make the figure meaningless: float32 accumulation, so a relative bound.
        const got = out.toHost()[0]!;
        const want = expected(op, values);
        if (!(Math.abs(got - want) <= 1e-4 * Math.max(1, Math.abs(want)))) throw new Error(`${op} gave ${got}, expected ${want}`);
        return { group: 'kernels', name, size, value: gbPerSecond(size, median(samples)), unit: 'GB/s', repeats: runs };
      },
    };
  });
}
