/**
 * What every group of benchmark rows shares: the row shape (rows are data; the table and `--json`
 * are views over them), the run settings, and the statistics (median of repeats).
 */
import type { Backend } from '../../backend/backend.js';

/** The groups `--only` selects. */
export const GROUPS = ['transfers', 'alloc', 'allocators', 'objects', 'kernels'] as const;
/** One of {@link GROUPS}. */
export type Group = (typeof GROUPS)[number];

/**
 * The unit of a measured value: bandwidth, nanoseconds per allocate+free pair or per operation,
 * or milliseconds (the event loop's delay during an async copy).
 */
export type Unit = 'GB/s' | 'ns/pair' | 'ns/op' | 'ms';

/** One measured figure: a cell of the bench table, an element of `--json`'s `rows`. */
export interface BenchRow {
  readonly group: Group;
  /** What was measured, e.g. `pinned H2D`, `cuMemAllocAsync+cuMemFreeAsync`, `PoolResource`. */
  readonly name: string;
  /** Bytes per copy or per allocation (the largest size for random-size patterns). */
  readonly size: number;
  /** The median over repeats. */
  readonly value: number;
  readonly unit: Unit;
  /** How many timed repeats (or batches) the median is over. */
  readonly repeats: number;
  /**
   * True where the emulated backend stands in for the CUDA driver (its allocation calls, CUDA's
   * stream-ordered pool): a model of the driver's behaviour, whose cost says nothing of the driver's.
   */
  readonly model?: boolean;
}

/** A measurement that could not run (unsupported on this backend, or failed), kept in the output. */
export interface SkippedRow {
  readonly group: Group;
  readonly name: string;
  readonly size: number;
  readonly reason: string;
}

/** The settings a run was asked for, shared by every group. */
export interface BenchSettings {
  readonly backend: Backend;
  /** Fewer repeats and batches: a smoke run, or the emulated backend. */
  readonly quick: boolean;
  /** Transfer sizes in bytes. */
  readonly transferSizes: readonly number[];
  /** The size of the async pageable copies timed beside the event loop's delay. */
  readonly asyncTransferSize: number;
  /** Allocation sizes in bytes for pair latency. */
  readonly allocSizes: readonly number[];
  /** Overrides the number of timed repeats / batches when set. */
  readonly repeats?: number;
  /**
   * Time pool hits as bench/pool-hit does (hits.ts: each resource in a process of its own, warm,
   * 15 long rounds) even on a quick run: the emulated backend's, whose quick batches in one process
   * timed a cold JIT and call sites other resources had already made slow.
   */
  readonly warmHits?: boolean;
}

/** One measurement to run: a label for the progress line, and the code that yields its row. */
export interface BenchCase {
  readonly group: Group;
  readonly name: string;
  readonly size: number;
  /** Its row, or rows (a case that measures two figures at once), possibly asynchronously. */
  run(): BenchRow | readonly BenchRow[] | Promise<BenchRow | readonly BenchRow[]>;
}

/** The median of a non-empty list of samples; robust to the odd slow repeat (page faults, clocks). */
export function median(samples: readonly number[]): number {
  if (samples.length === 0) throw new RangeError('median of no samples');
  const sorted = [...samples].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** Bandwidth in GB/s (1e9 bytes per second), the unit CUDA's own samples report. */
export function gbPerSecond(bytes: number, seconds: number): number {
  return bytes / seconds / 1e9;
}

/** The host's monotonic clock in nanoseconds, as a number (exact for any run shorter than 104 days). */
export function nowNs(): number {
  return Number(process.hrtime.bigint());
}

/** Repeats chosen for full runs, scaled down for quick ones, or exactly what `--repeats` asked. */
export function repeatsFor(settings: BenchSettings, full: number): number {
  if (settings.repeats !== undefined) return settings.repeats;
  return settings.quick ? Math.max(3, Math.ceil(full / 5)) : full;
}

/**
 * The one rule for the `(model)` mark: a row is a model of the driver when the backend is the
 * emulation and the code it timed called the driver for memory (`driverTally` > 0: what the
 * driver rows call by definition, or what `driverCallTally` moved by over the timed part). A pool
 * hit, or a random pattern over memory the pool already holds, times vram's own code and is not.
 *
 * @param settings The run's settings (its backend).
 * @param driverTally The driver calls (or tally movement) over the timed part.
 * @returns `{ model: true }`, or nothing to spread.
 * @example
 * ```ts
 * const row = { group: 'alloc', name, size, value, unit: 'ns/pair', repeats, ...modelMark(settings, 2 * pairs) };
 * ```
 */
export function modelMark(settings: BenchSettings, driverTally: number): { model?: true } {
  return settings.backend.name === 'emulated' && driverTally > 0 ? { model: true } : {};
}
