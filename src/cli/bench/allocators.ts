/**
 * Allocator rows: allocate+free pair latency of every memory resource at 256 B, 1 MiB and 64 MiB
 * (same batch scheme as the driver rows), and RMM's random-allocations pattern through each (time
 * per operation). Each case builds its resource fresh, warms it, measures, and tears it down, so
 * the figures are a pool *hit* and one resource's cache never serves another.
 */
import type { MemoryResource } from '../../resource/resource.js';
import { createResourceStack, type ResourceStack } from '../../resource/stacks.js';
import { Stream } from '../../stream.js';
import { median, nowNs, repeatsFor, type BenchCase, type BenchRow, type BenchSettings } from './common.js';
import { pairsPerBatch, timePairs } from './pairs.js';
import { runRandomAllocations, type RandomPattern } from './random-allocations.js';

/** A resource under test: how to build it, and whether each pair is a slow driver call. */
interface Subject {
  /** True for the stacks that are the driver's own allocators (`cuda`, `async`): on the emulated backend, a model. */
  readonly driver: boolean;
  /** The row's name: the class on top of the stack, as the results files have always named it. */
  readonly name: string;
  /** True when every allocation reaches the driver synchronously (fewer pairs per batch). */
  readonly slow: boolean;
  create(): ResourceStack;
}

/** Room for the random pattern's live bytes (1 GiB) with slack for fragmentation. */
const ARENA_BYTES = 2 * 1024 ** 3;

/** The named stacks of src/resource/stacks.ts, the same ones `vram replay` compares. */
const SUBJECTS: readonly Subject[] = [
  { name: 'PoolResource', slow: false, driver: false, create: () => createResourceStack('pool') },
  { name: 'AsyncResource', slow: false, driver: true, create: () => createResourceStack('async') },
  { name: 'CudaResource', slow: true, driver: true, create: () => createResourceStack('cuda') },
  { name: 'ArenaResource', slow: false, driver: false, create: () => createResourceStack('arena', { size: ARENA_BYTES }) },
  { name: 'BinningResource', slow: false, driver: false, create: () => createResourceStack('binning') },
];

/** `{ model: true }` for a driver stack on the emulated backend, else nothing. */
function model(settings: BenchSettings, subject: Subject): { model?: true } {
  return subject.driver && settings.backend.name === 'emulated' ? { model: true } : {};
}

/** Runs `body` with a fresh resource and a non-blocking stream, both torn down afterwards. */
function withSubject<T>(subject: Subject, body: (mr: MemoryResource, stream: Stream) => T): T {
  const stream = Stream.create({ nonBlocking: true });
  try {
    const stack = subject.create();
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

function pairCase(settings: BenchSettings, subject: Subject, size: number): BenchCase {
  return {
    group: 'allocators',
    name: subject.name,
    size,
    run: (): BenchRow =>
      withSubject(subject, (mr, stream) => {
        const { ns, batches } = timePairs(
          settings,
          pairsPerBatch(size, subject.slow),
          {
            pair: () => mr.deallocate(mr.allocate(size, stream), size, stream),
            sync: () => stream.synchronize(),
          },
          !subject.slow,
        );
        return { group: 'allocators', name: subject.name, size, value: ns, unit: 'ns/pair', repeats: batches, ...model(settings, subject) };
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
        const repeats = repeatsFor(settings, 5);
        const samples: number[] = [];
        for (let r = 0; r < repeats; r++) {
          const start = nowNs();
          const operations = runRandomAllocations(mr, pattern, stream);
          stream.synchronize();
          samples.push((nowNs() - start) / operations);
        }
        return { group: 'allocators', name, size: pattern.maxSize, value: median(samples), unit: 'ns/op', repeats, ...model(settings, subject) };
      }),
  };
}

/** Every allocator case: pair latency at each size, then the random pattern, per resource. */
export function allocatorCases(settings: BenchSettings): BenchCase[] {
  return SUBJECTS.flatMap((subject) => [...settings.allocSizes.map((size) => pairCase(settings, subject, size)), randomCase(settings, subject)]);
}
