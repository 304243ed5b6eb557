/**
 * Driver allocation latency rows: cuMemAlloc+cuMemFree, and cuMemAllocAsync+cuMemFreeAsync from
 * the device's default pool with its release threshold at the maximum (so freed memory stays in
 * the pool and a pair is a pool hit) on a non-blocking stream — the figures every allocator in
 * src/memory is measured against, and what bench/c/alloc_async.c measures in C.
 */
import { MemPoolAttribute, StreamFlags } from '../../backend/backend.js';
import { modelMark, type BenchCase, type BenchRow, type BenchSettings } from './common.js';
import { pairsPerBatch, timePairs } from './pairs.js';

/**
 * The largest release threshold the Backend accepts: pool attributes are numbers, and 2^53-1
 * bytes is as good as UINT64_MAX (never release) for any real device.
 */
export const RELEASE_THRESHOLD_MAX = Number.MAX_SAFE_INTEGER;

/** cuMemAlloc+cuMemFree pair latency at one size. */
function syncPairCase(settings: BenchSettings, size: number): BenchCase {
  const name = 'cuMemAlloc+cuMemFree';
  return {
    group: 'alloc',
    name,
    size,
    run: (): BenchRow => {
      const { backend } = settings;
      const { ns, batches, pairs } = timePairs(settings, pairsPerBatch(size, true), {
        pair: () => backend.memFree(backend.memAlloc(size)),
        sync: () => {},
      });
      // Each pair is two driver calls.
      return { group: 'alloc', name, size, value: ns, unit: 'ns/pair', repeats: batches, ...modelMark(settings, 2 * pairs) };
    },
  };
}

/** cuMemAllocAsync+cuMemFreeAsync pair latency at one size, on the default pool. */
function asyncPairCase(settings: BenchSettings, size: number): BenchCase {
  const name = 'cuMemAllocAsync+cuMemFreeAsync';
  return {
    group: 'alloc',
    name,
    size,
    run: (): BenchRow => {
      const { backend } = settings;
      const device = 0;
      const pool = backend.deviceGetDefaultMemPool(device);
      const previous = backend.memPoolGetAttribute(pool, MemPoolAttribute.RELEASE_THRESHOLD);
      backend.memPoolSetAttribute(pool, MemPoolAttribute.RELEASE_THRESHOLD, RELEASE_THRESHOLD_MAX);
      const stream = backend.streamCreate(StreamFlags.NON_BLOCKING, 0);
      try {
        const { ns, batches, pairs } = timePairs(settings, pairsPerBatch(size, false), {
          pair: () => backend.memFreeAsync(backend.memAllocAsync(size, stream), stream),
          sync: () => backend.streamSynchronize(stream),
        });
        return { group: 'alloc', name, size, value: ns, unit: 'ns/pair', repeats: batches, ...modelMark(settings, 2 * pairs) };
      } finally {
        backend.streamSynchronize(stream);
        backend.streamDestroy(stream);
        // Leave the process-wide default pool as we found it, and give back what we cached.
        backend.memPoolSetAttribute(pool, MemPoolAttribute.RELEASE_THRESHOLD, previous);
        backend.memPoolTrimTo(pool, 0);
      }
    },
  };
}

/** Every driver allocation case for the sizes asked for. */
export function allocCases(settings: BenchSettings): BenchCase[] {
  return [...settings.allocSizes.map((size) => syncPairCase(settings, size)), ...settings.allocSizes.map((size) => asyncPairCase(settings, size))];
}
