/**
 * Allocator rows: allocate+free pair latency of every memory resource at each allocation size
 * (the driver rows' batch scheme, or on the emulated backend bench/pool-hit's, in a process per
 * resource: hits.ts), and RMM's random-allocations pattern through each (time per operation).
 * Each case builds its resource fresh, warms it, measures, and tears it down, so the figures are
 * a pool *hit* and one resource's cache never serves another. A row is marked a model of the
 * driver by what its timed part called (`modelMark`).
 */
import type { MemoryResource } from '../../resource/resource.js';
import { createResourceStack, type ResourceStackName, type ResourceStackOptions } from '../../resource/stacks.js';
import { Stream } from '../../stream.js';
import { median, modelMark, nowNs, repeatsFor, type BenchCase, type BenchRow, type BenchSettings } from './common.js';
import { driverCallTally } from './driver-calls.js';
import { measureHitsApart } from './hits.js';
import { pairsPerBatch, timePairs } from './pairs.js';
import { runRandomAllocations, type RandomPattern } from './random-allocations.js';

/** A resource under test: which named stack, and whether each pair is a slow driver call. */
interface Subject {
  /** The row's name: the class on top of the stack, as the results files have always named it. */
  readonly name: string;
  readonly stack: ResourceStackName;
  readonly options?: ResourceStackOptions;
  /** True when every allocation reaches the driver synchronously (fewer pairs per batch, no hit to time). */
  readonly slow: boolean;
}

/** Room for the random pattern's live bytes (1 GiB) with slack for fragmentation. */
const ARENA_BYTES = 2 * 1024 ** 3;

/** The named stacks of src/resource/stacks.ts, the same ones `vram replay` compares. */
const SUBJECTS: readonly Subject[] = [
  { name: 'PoolResource', stack: 'pool', slow: false },
  { name: 'AsyncResource', stack: 'async', slow: false },
  { name: 'CudaResource', stack: 'cuda', slow: true },
  { name: 'ArenaResource', stack: 'arena', options: { size: ARENA_BYTES }, slow: false },
  { name: 'BinningResource', stack: 'binning', slow: false },
];

/** Runs `body` with a fresh resource and a non-blocking stream, both torn down afterwards. */
function withSubject<T>(subject: Subject, body: (mr: MemoryResource, stream: Stream) => T): T {
  const stream = Stream.create({ nonBlocking: true });
  try {
    const stack = createResourceStack(subject.stack, subject.options);
    try {
      return body(stack.resource, stream);
    } finally {
      stream.synchronize();
      stack.destroy();
    }
  } finally {
    stream.destroy();
  }
}

/** The pair at every size, timed as bench/pool-hit times it, in a process of the subject's own. */
function hitsCase(settings: BenchSettings, subject: Subject): BenchCase {
  return {
    group: 'allocators',
    name: subject.name,
    size: Math.max(...settings.allocSizes),
    run: (): BenchRow[] =>
      measureHitsApart({
        stack: subject.stack,
        ...(subject.options === undefined ? {} : { options: subject.options }),
        sizes: settings.allocSizes,
        ...(settings.repeats === undefined ? {} : { rounds: settings.repeats }),
      }).map((f) => ({
        group: 'allocators',
        name: subject.name,
        size: f.bytes,
        value: f.ns,
        unit: 'ns/pair',
        repeats: f.rounds,
        ...modelMark(settings, f.driverTally),
      })),
  };
}

function pairCase(settings: BenchSettings, subject: Subject, size: number): BenchCase {
  return {
    group: 'allocators',
    name: subject.name,
    size,
    run: (): BenchRow =>
      withSubject(subject, (mr, stream) => {
        const before = driverCallTally(mr);
        const { ns, batches } = timePairs(settings, pairsPerBatch(size, subject.slow), {
          pair: () => mr.deallocate(mr.allocate(size, stream), size, stream),
          sync: () => stream.synchronize(),
        });
        // The tally over the warm-up too: a pair that reaches the driver does so every time.
        const calls = driverCallTally(mr) - before;
        return { group: 'allocators', name: subject.name, size, value: ns, unit: 'ns/pair', repeats: batches, ...modelMark(settings, calls) };
      }),
  };
}

/** RMM's defaults scaled to a quick run: 10,000 allocations (1,000 quick) of up to 1 MiB. */
function randomPattern(settings: BenchSettings, slow: boolean): RandomPattern {
  const full = slow ? 2000 : 10_000;
  return {
    allocations: settings.quick ? full / 10 : full,
    maxSize: 1 << 20,
    maxUsage: 1 << 30,
    seed: 42,
  };
}

function randomCase(settings: BenchSettings, subject: Subject): BenchCase {
  const pattern = randomPattern(settings, subject.slow);
  const name = `${subject.name} random`;
  return {
    group: 'allocators',
    name,
    size: pattern.maxSize,
    run: (): BenchRow =>
      withSubject(subject, (mr, stream) => {
        // One untimed pass warms the resource (pool growth, driver caches); timed passes repeat it.
        runRandomAllocations(mr, pattern, stream);
        stream.synchronize();
        const before = driverCallTally(mr);
        const repeats = repeatsFor(settings, 5);
        const samples: number[] = [];
        for (let r = 0; r < repeats; r++) {
          const start = nowNs();
          const operations = runRandomAllocations(mr, pattern, stream);
          stream.synchronize();
          samples.push((nowNs() - start) / operations);
        }
        const calls = driverCallTally(mr) - before;
        return { group: 'allocators', name, size: pattern.maxSize, value: median(samples), unit: 'ns/op', repeats, ...modelMark(settings, calls) };
      }),
  };
}

/** Every allocator case: pair latency at each size, then the random pattern, per resource. */
export function allocatorCases(settings: BenchSettings): BenchCase[] {
  return SUBJECTS.flatMap((subject) => [
    ...(settings.warmHits === true && !subject.slow ? [hitsCase(settings, subject)] : settings.allocSizes.map((size) => pairCase(settings, subject, size))),
    randomCase(settings, subject),
  ]);
}
