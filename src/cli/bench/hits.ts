/**
 * How a pool hit is timed, the one scheme `bench/pool-hit` and `vram bench` share: a fresh process
 * holding one resource (hit-process.ts is the one `vram bench` starts), a few live blocks so the
 * heap is not trivially empty, every size warmed first, then per size the median of 15 rounds of
 * pairs. A hit costs tens of nanoseconds, so what else the process ran matters: after four other
 * resources' pairs in one process, the pool's pair cost 4x (its `allocate` call sites had seen
 * them all), which is why each resource gets a process of its own.
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Stream, type StreamRef } from '../../stream.js';
import type { MemoryResource } from '../../resource/resource.js';
import type { ResourceStackName, ResourceStackOptions } from '../../resource/stacks.js';
import { median } from './common.js';
import { driverCallTally } from './driver-calls.js';

/** Timed rounds per size. */
export const HIT_ROUNDS = 15;
/** A round lasts about this long (pairs measured in the warm-up tell how many it takes)... */
export const HIT_ROUND_NS = 2e6;
/** ...within these many pairs. */
export const HIT_PAIRS = [1000, 200_000] as const;
/** Warm-up passes over the sizes, each at most this many pairs or this long per size. */
const WARM_PASSES = 3;
const WARM_PAIRS = 20_000;
const WARM_NS = 10e6;
/** The blocks kept live while timing. */
const KEEP = [1000, 5000, 300_000, 3 << 20] as const;

/** One size's hit figure. */
export interface HitFigure {
  /** Bytes per allocation. */
  readonly bytes: number;
  /** Median nanoseconds per allocate+free pair. */
  readonly ns: number;
  readonly rounds: number;
  /** Pairs per round. */
  readonly pairs: number;
  /** What `driverCallTally` moved by over the timed rounds: 0 when the pairs never reached the driver. */
  readonly driverTally: number;
}

/**
 * Nanoseconds per pair over `pairs` allocate+free pairs of `bytes` on `stream`. One function for
 * every size, so its optimized code is made once (a loop compiled mid-run is thrown away when
 * anything around it changes, which made the first size measured look slower than the rest).
 *
 * @param resource The resource.
 * @param bytes Bytes per allocation.
 * @param pairs How many pairs.
 * @param stream The stream they are ordered on.
 * @returns Nanoseconds per pair on the host's monotonic clock.
 * @example
 * ```ts
 * const ns = hitPairs(pool, 256, 100_000, { handle: 0 });
 * ```
 */
export function hitPairs(resource: MemoryResource, bytes: number, pairs: number, stream: StreamRef): number {
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < pairs; i++) resource.deallocate(resource.allocate(bytes, stream), bytes, stream);
  return Number(process.hrtime.bigint() - t0) / pairs;
}

/** The pairs a round takes to last about HIT_ROUND_NS, from the warm-up's rate. */
function roundPairs(nsPerPair: number): number {
  return Math.min(HIT_PAIRS[1], Math.max(HIT_PAIRS[0], Math.round(HIT_ROUND_NS / nsPerPair)));
}

/**
 * Times pool hits of `resource` at each size: a non-blocking stream, the live blocks, every size
 * warmed `WARM_PASSES` times, then per size `rounds` rounds each ended by a synchronize (inside the
 * timing, so nothing a stream-ordered free deferred is hidden), and their median.
 *
 * @param resource The resource, alone in this process for the figure `bench/pool-hit` reports.
 * @param sizes Bytes per allocation, in the order timed.
 * @param rounds Rounds per size.
 * @returns One figure per size.
 * @example
 * ```ts
 * for (const f of measureHits(new PoolResource(), [256, 1 << 20])) console.log(f.bytes, f.ns);
 * ```
 */
export function measureHits(resource: MemoryResource, sizes: readonly number[], rounds = HIT_ROUNDS): HitFigure[] {
  const stream = Stream.create({ nonBlocking: true });
  const keep = KEEP.map((bytes) => [resource.allocate(bytes, stream), bytes] as const);
  try {
    const rate = new Map<number, number>();
    for (let pass = 0; pass < WARM_PASSES; pass++) {
      for (const bytes of sizes) {
        const start = process.hrtime.bigint();
        let pairs = 0;
        while (pairs < WARM_PAIRS && Number(process.hrtime.bigint() - start) < WARM_NS) {
          hitPairs(resource, bytes, HIT_PAIRS[0], stream);
          pairs += HIT_PAIRS[0];
        }
        stream.synchronize();
        // The fastest pass: a pass the scheduler interrupted says nothing of the pair.
        const ns = Number(process.hrtime.bigint() - start) / pairs;
        rate.set(bytes, Math.min(ns, rate.get(bytes) ?? ns));
      }
    }
    return sizes.map((bytes) => {
      const pairs = roundPairs(rate.get(bytes)!);
      const before = driverCallTally(resource);
      const samples: number[] = [];
      for (let round = 0; round < rounds; round++) {
        const t0 = process.hrtime.bigint();
        hitPairs(resource, bytes, pairs, stream);
        stream.synchronize();
        samples.push(Number(process.hrtime.bigint() - t0) / pairs);
      }
      return { bytes, ns: median(samples), rounds, pairs, driverTally: driverCallTally(resource) - before };
    });
  } finally {
    for (const [ptr, bytes] of keep) resource.deallocate(ptr, bytes, stream);
    stream.synchronize();
    stream.destroy();
  }
}

/** What hit-process.ts is asked to measure: a named stack, with its options, at these sizes. */
export interface HitRequest {
  readonly stack: ResourceStackName;
  readonly options?: ResourceStackOptions;
  readonly sizes: readonly number[];
  readonly rounds?: number;
  /** What to time: the resource's hits (the default), or the object layer's pairs over it (object-pairs.ts). */
  readonly measure?: 'hits' | 'objects';
}

/**
 * `measureHits` over a fresh `request.stack` in a process of its own (hit-process.ts, on this
 * process's Node with its environment, so the same backend), as bench/pool-hit runs: the figure
 * then does not depend on what this process ran before.
 *
 * @param request The stack, its options and the sizes.
 * @returns One figure per size.
 * @throws {Error} When the process fails, with the last line it wrote on stderr (its error).
 * @example
 * ```ts
 * const [figure] = measureHitsApart({ stack: 'pool', sizes: [256] });
 * ```
 */
export function measureHitsApart(request: HitRequest): HitFigure[] {
  return JSON.parse(runApart({ ...request, measure: 'hits' })) as HitFigure[];
}

/**
 * The stack's process (hit-process.ts) run on `request`, its standard output returned.
 *
 * @param request What to build and time.
 * @returns What the process printed: its figures as JSON.
 * @throws {Error} When the process fails, with the last line it wrote on stderr (its error).
 * @example
 * ```ts
 * const figures = JSON.parse(runApart({ stack: 'pool', sizes: [256], measure: 'objects' }));
 * ```
 */
export function runApart(request: HitRequest): string {
  const child = spawnSync(process.execPath, [fileURLToPath(new URL('./hit-process.js', import.meta.url)), JSON.stringify(request)], {
    encoding: 'utf8',
    env: process.env,
  });
  if (child.status !== 0) {
    const why = child.error?.message ?? child.stderr.trim().split('\n').at(-1);
    throw new Error(`the pool-hit process for stack '${request.stack}' failed (${child.signal ?? `exit ${child.status}`}): ${why}`);
  }
  return child.stdout;
}
