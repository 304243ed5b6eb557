/**
 * The batch scheme for allocate+free pair latency, shared by the driver rows and the allocator
 * rows and mirrored by bench/c/alloc_async.c: three untimed warm-up batches, then timed batches of N
 * pairs on the host clock, each batch ending with a stream synchronize (inside the timing, so
 * nothing deferred by a stream-ordered free is hidden); the row is the median ns per pair.
 *
 * A pool hit on the emulated backend is timed otherwise (`settings.warmHits`): as bench/pool-hit
 * times it, in a process of its own (hits.ts), since its tens of nanoseconds depend on what else
 * the process ran.
 */
import { median, nowNs, repeatsFor, type BenchSettings } from './common.js';

/** Timed batches per row on a full run (bench/c/alloc_async.c uses the same). */
export const FULL_BATCHES = 51;
/** Untimed batches first (JIT, CPU clock ramp, pool growth); bench/c/alloc_async.c uses the same. */
export const WARMUP_BATCHES = 3;

/** Pairs per batch: enough that a batch is long against the clock, few where each pair is slow. */
export function pairsPerBatch(bytes: number, slow: boolean): number {
  if (!slow) return 1000;
  return bytes >= 16 << 20 ? 20 : 100;
}

/** One allocate+free pair, and the synchronize that ends a batch. */
export interface PairOps {
  pair(): void;
  sync(): void;
}

/**
 * Median nanoseconds per pair over the batches; also returns how many batches and pairs were timed.
 *
 * @param settings The run's settings (quick, `--repeats`).
 * @param pairs Pairs per batch on a full run (`pairsPerBatch`).
 * @param ops The pair and the synchronize.
 */
export function timePairs(settings: BenchSettings, pairs: number, ops: PairOps): { ns: number; batches: number; pairs: number } {
  const batches = repeatsFor(settings, FULL_BATCHES);
  const perBatch = settings.quick ? Math.max(10, Math.ceil(pairs / 10)) : pairs;
  for (let w = 0; w < WARMUP_BATCHES; w++) {
    for (let i = 0; i < perBatch; i++) ops.pair();
    ops.sync();
  }
  const samples: number[] = [];
  for (let b = 0; b < batches; b++) {
    const start = nowNs();
    for (let i = 0; i < perBatch; i++) ops.pair();
    ops.sync();
    samples.push((nowNs() - start) / perBatch);
  }
  return { ns: median(samples), batches, pairs: batches * perBatch };
}
