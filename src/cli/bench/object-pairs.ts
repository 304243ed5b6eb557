/**
 * The object layer beside the resource pair it stands on (issue 35's "within 5x"): per size, rounds
 * of the current resource's `allocate` + `deallocate`, `DeviceBuffer.allocate` + `free` and
 * `DeviceArray.empty` (float32) + `free`, alternated so all three see the same machine state, and
 * the median of each on the host's monotonic clock, a synchronize inside every round. Run in a
 * process of its own (hit-process.ts), as pool hits are: the ratio is then the object layer's own.
 */
import { DeviceArray } from '../../array/device-array.js';
import { DeviceBuffer } from '../../buffer/device-buffer.js';
import { Device } from '../../device.js';
import { setCurrentResource } from '../../resource/current.js';
import type { MemoryResource } from '../../resource/resource.js';
import { defaultStream } from '../../stream.js';
import { OBJECT_PAIR_BASE } from '../../report/bench-report.js';
import { median, type BenchCase, type BenchRow, type BenchSettings } from './common.js';
import { runApart } from './hits.js';

/** Pairs per round, and warm-up rounds of each kind before the timed ones. */
const OBJECT_PAIRS = 20_000;
const WARM_ROUNDS = 3;

/** What the three kinds cost at one size: median nanoseconds per pair. */
export interface ObjectPairFigure {
  readonly bytes: number;
  /** The resource's own `allocate` + `deallocate` (on the stream the object layer passes it). */
  readonly resourceNs: number;
  readonly bufferNs: number;
  readonly arrayNs: number;
  readonly rounds: number;
  readonly pairs: number;
}

/**
 * The three pairs as loops of `pairs` each, in the order the figures name them: the resource's own
 * allocate+deallocate (on the stream the object layer passes it), `DeviceBuffer.allocate`+`free`,
 * `DeviceArray.empty`+`free` of float32 (from the current resource, which the caller sets).
 *
 * @param resource The resource under the objects.
 * @param bytes Bytes per allocation.
 * @param pairs Pairs per call of each loop.
 * @returns The three loops.
 * @example
 * ```ts
 * const [resourcePairs, bufferPairs, arrayPairs] = objectPairKinds(pool, 1 << 20, 1000);
 * bufferPairs();
 * ```
 */
export function objectPairKinds(resource: MemoryResource, bytes: number, pairs: number): readonly [() => void, () => void, () => void] {
  const elements = Math.max(1, Math.floor(bytes / 4));
  return [
    () => {
      for (let i = 0; i < pairs; i++) resource.deallocate(resource.allocate(bytes, defaultStream), bytes, defaultStream);
    },
    () => {
      for (let i = 0; i < pairs; i++) DeviceBuffer.allocate(bytes).free();
    },
    () => {
      for (let i = 0; i < pairs; i++) DeviceArray.empty([elements], 'float32').free();
    },
  ];
}

/**
 * Times the three pairs over `resource`, made the current device's current resource for the run
 * (the one the objects allocate from) and put back after.
 *
 * @param resource The resource under the objects.
 * @param sizes Bytes per allocation.
 * @param rounds Timed rounds of each kind per size.
 * @returns One figure per size.
 * @example
 * ```ts
 * const [f] = measureObjectPairs(new PoolResource(), [1 << 20], 15);
 * console.log(f.bufferNs / f.resourceNs);
 * ```
 */
export function measureObjectPairs(resource: MemoryResource, sizes: readonly number[], rounds: number): ObjectPairFigure[] {
  const device = Device.get(resource.deviceOrdinal);
  const previous = setCurrentResource(device, resource);
  try {
    return sizes.map((bytes) => {
      const kinds = objectPairKinds(resource, bytes, OBJECT_PAIRS);
      for (let w = 0; w < WARM_ROUNDS; w++) for (const kind of kinds) kind();
      const samples: [number[], number[], number[]] = [[], [], []];
      for (let round = 0; round < rounds; round++) {
        kinds.forEach((kind, k) => {
          const t0 = process.hrtime.bigint();
          kind();
          device.synchronize();
          samples[k].push(Number(process.hrtime.bigint() - t0) / OBJECT_PAIRS);
        });
      }
      return { bytes, resourceNs: median(samples[0]), bufferNs: median(samples[1]), arrayNs: median(samples[2]), rounds, pairs: OBJECT_PAIRS };
    });
  } finally {
    setCurrentResource(device, previous);
  }
}

/** The sizes the object pairs are timed at: small, the README's 1 MiB, large. */
const OBJECT_SIZES = [256, 1 << 20, 64 << 20] as const;

/**
 * The `objects` group: the three pairs over a `PoolResource` (the fastest resource pair, so the
 * object layer's own cost shows most), in a process of their own, as rows named by what each pair is.
 *
 * @param settings The run's settings (`repeats` sets the rounds).
 * @returns The group's one case.
 * @example
 * ```ts
 * const [objects] = objectCases(settings);
 * ```
 */
export function objectCases(settings: BenchSettings): BenchCase[] {
  const rounds = settings.repeats ?? (settings.quick ? 7 : 15);
  return [
    {
      group: 'objects',
      name: 'object pairs over PoolResource',
      size: Math.max(...OBJECT_SIZES),
      run: (): BenchRow[] => {
        const figures = JSON.parse(runApart({ stack: 'pool', sizes: OBJECT_SIZES, rounds, measure: 'objects' })) as ObjectPairFigure[];
        return figures.flatMap((f) =>
          (
            [
              [OBJECT_PAIR_BASE, f.resourceNs],
              ['DeviceBuffer.allocate+free', f.bufferNs],
              ['DeviceArray.empty+free (float32)', f.arrayNs],
            ] as const
          ).map(([name, value]) => ({ group: 'objects' as const, name, size: f.bytes, value, unit: 'ns/pair' as const, repeats: f.rounds })),
        );
      },
    },
  ];
}
