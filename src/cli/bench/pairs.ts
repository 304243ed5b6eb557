/**
 * The batch scheme for allocate+free pair latency, shared by the driver rows and the allocator
 * rows and mirrored by bench/c/alloc_async.c: three untimed warm-up batches, then timed batches of N
 * pairs on the host clock, each batch ending with a stream synchronize (inside the timing, so
 * nothing deferred by a stream-ordered free is hidden); the row is the median ns per pair.
 *
 * A pool hit costs tens of nanoseconds, and on the emulated backend's quick run those small batches
 * timed a cold JIT (629-1,171 ns a pair where bench/pool-hit measured 42-45 on the same machine).
 * So where `settings.warmHits` is set, a hit is timed as bench/pool-hit times it: warm first
 * (60,000 pairs, or 30 ms where pairs are slow), then the median of 15 long rounds. pool-hit's
 * rounds are 200,000 pairs of some 50 ns; these are as many pairs as take about 2 ms, from 1,000 to
 * 50,000, so a resource whose hit costs microseconds on the emulation (CUDA's pool, the binning
 * stack) does not stretch the run to minutes, and a 50 ns hit still gets tens of thousands.
 */
import { median, nowNs, repeatsFor, type BenchSettings } from './common.js';

/** Timed batches per row on a full run (bench/c/alloc_async.c uses the same). */
export const FULL_BATCHES = 51;
/** Untimed batches first (JIT, CPU clock ramp, pool growth); bench/c/alloc_async.c uses the same. */
export const WARMUP_BATCHES = 3;

/** bench/pool-hit's scheme for a pool hit: warm-up rounds and pairs, then timed rounds and pairs. */
export const HIT_WARMUP_PAIRS = 60_000;
export const HIT_WARMUP_NS = 30e6;
export const HIT_ROUNDS = 15;
export const HIT_ROUND_NS = 2e6;
export const HIT_PAIRS = [1000, 50_000] as const;

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
 * Median nanoseconds per pair over the batches; also returns how many batches were timed.
 *
 * @param settings The run's settings (quick, `--repeats`, `warmHits`).
 * @param pairs Pairs per batch on a full run (`pairsPerBatch`).
 * @param ops The pair and the synchronize.
 * @param hit A pair that is a pool hit (tens of nanoseconds): timed as bench/pool-hit does when `settings.warmHits`.
 */
export function timePairs(settings: BenchSettings, pairs: number, ops: PairOps, hit = false): { ns: number; batches: number } {
  const warm = hit && settings.warmHits === true;
  const batches = warm ? (settings.repeats ?? HIT_ROUNDS) : repeatsFor(settings, FULL_BATCHES);
  let perBatch = settings.quick ? Math.max(10, Math.ceil(pairs / 10)) : pairs;
  if (warm) {
    perBatch = warmUp(ops);
  } else {
    for (let w = 0; w < WARMUP_BATCHES; w++) {
      for (let i = 0; i < perBatch; i++) ops.pair();
      ops.sync();
    }
  }
  const samples: number[] = [];
  for (let b = 0; b < batches; b++) {
    const start = nowNs();
    for (let i = 0; i < perBatch; i++) ops.pair();
    ops.sync();
    samples.push((nowNs() - start) / perBatch);
  }
  return { ns: median(samples), batches };
}

/** pool-hit's warm-up, bounded in time; returns the pairs a round takes to last about HIT_ROUND_NS. */
function warmUp(ops: PairOps): number {
  const start = nowNs();
  let warmed = 0;
  while (warmed < HIT_WARMUP_PAIRS && nowNs() - start < HIT_WARMUP_NS) {
    for (let i = 0; i < HIT_PAIRS[0]; i++) ops.pair();
    ops.sync();
    warmed += HIT_PAIRS[0];
  }
  const perPair = (nowNs() - start) / warmed;
  return Math.min(HIT_PAIRS[1], Math.max(HIT_PAIRS[0], Math.round(HIT_ROUND_NS / perPair)));
}
