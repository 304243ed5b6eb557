/**
 * The out-of-memory policy: when an allocation fails for lack of memory, give back what the
 * resource stack caches and try once more, and if that fails too, raise an error that says how
 * much was asked for and where the memory went.
 */
import type { Ptr } from '../../backend/backend.js';
import { isOutOfMemory, OutOfMemoryError, outOfMemoryMessage } from '../../errors.js';
import { ResourceAdaptor } from './adaptor.js';
import { formatBytesExact } from '../../util/size.js';
import { checkResource, upstreamChain, type MemoryResource } from '../resource.js';
import { type MemoryFigures } from '../figures.js';
import { type StreamRef } from '../../stream.js';
import { outOfMemoryStatistics } from '../figures.js';
import { readOptions } from '../../util/options.js';

/** Options of RetryOnOutOfMemory. */
export interface RetryOptions {
  /**
   * Other resources whose caches may hold memory the failing stack needs (e.g. a pool on the same
   * device used by another part of the program); their chains are released too.
   */
  readonly roots?: readonly MemoryResource[];
}

/**
 * Retries a failed allocation once after releasing cached memory. On an out-of-memory failure
 * (`isOutOfMemory`) it calls
 * `releaseCached()` on every resource of its upstream chain, top down, and on the chains of
 * `roots`; if the program was started with `--expose-gc` it also runs `gc()`.
 *
 * What gc() can and cannot do here: allocation is synchronous, and a FinalizationRegistry's
 * callbacks never run inside a synchronous call, only in a later task. So buffers the program
 * dropped are found unreachable now, but the lifetime backstop frees their memory only after this
 * call returns: the retry does not see that memory, a later allocation may. For the retry to
 * succeed, memory must be cached (pools, arenas) or freed explicitly.
 *
 * When the retry fails too, it raises an `OutOfMemoryError` with the request, this stack's
 * description and the statistics of the nearest StatisticsAdaptor below it (if any); the
 * upstream's error is its `cause`, and its `reason` is the upstream's.
 *
 * @example
 * ```ts
 * const pool = new PoolResource();
 * const mr = new RetryOnOutOfMemory(new BinningResource(pool), { roots: [otherPool] });
 * ```
 */
export class RetryOnOutOfMemory extends ResourceAdaptor {
  private readonly roots: readonly MemoryResource[];
  private retryCount = 0;
  private recoveredCount = 0;

  /**
   * @param upstream The resource to retry on.
   * @param options `roots`: further resource chains whose caches are released too.
   * @throws {TypeError} When `upstream` is not a MemoryResource.
   * @throws {UseAfterFreeError} When it was destroyed.
   * @throws {TypeError} When `options` has a key other than `roots`, or `roots` is not an array of MemoryResources.
   * @throws {UseAfterFreeError} When one of `roots` was destroyed.
   * @example
   * ```ts
   * const mr = new RetryOnOutOfMemory(new PoolResource()); // retries after releasing the pool's cache
   * ```
   */
  constructor(upstream: MemoryResource, options: RetryOptions = {}) {
    super(upstream);
    options = readOptions('new RetryOnOutOfMemory', options, { roots: true });
    const roots = options.roots ?? [];
    if (!Array.isArray(roots)) throw new TypeError('roots must be an array of MemoryResources');
    this.roots = roots.map((r, k) => checkResource(r, `roots[${k}]`));
  }

  /** How many allocations failed once and were retried. */
  get retries(): number {
    return this.retryCount;
  }

  /** How many of those retries succeeded. */
  get recovered(): number {
    return this.recoveredCount;
  }

  /** The upstream's figures, with this adaptor's retries added to any counted below it. */
  override memoryFigures(): MemoryFigures | undefined {
    const below = this.upstream.memoryFigures();
    if (below === undefined) return undefined;
    return { ...below, allocationRetries: (below.allocationRetries ?? 0) + this.retryCount };
  }

  /** Allocates through the upstream, releasing caches and retrying once on out-of-memory. */
  protected override doAllocate(bytes: number, _handle: number, stream: StreamRef | undefined): Ptr {
    try {
      return this.upstream.allocate(bytes, stream);
    } catch (first) {
      if (!isOutOfMemory(first)) throw first;
      this.retryCount += 1;
      const released = this.releaseAll();
      try {
        const ptr = this.upstream.allocate(bytes, stream);
        this.recoveredCount += 1;
        return ptr;
      } catch (second) {
        if (!isOutOfMemory(second)) throw second;
        throw new OutOfMemoryError({
          requestedBytes: bytes,
          call: 'RetryOnOutOfMemory.allocate',
          resource: this.describe(),
          reason: second instanceof OutOfMemoryError ? second.reason : 'device',
          statistics: outOfMemoryStatistics(this.upstream.memoryFigures()),
          cause: second,
          message: outOfMemoryMessage(bytes, this.describe(), `even after releasing ${formatBytesExact(released)} of cached memory: ${second.message}`),
        });
      }
    }
  }

  /**
   * Releases the caches of its chain and of the roots' chains (skipping destroyed resources), and
   * runs `gc()` when the program was started with `--expose-gc`: what a failed allocation does before
   * its retry, for a program that wants the memory back without failing first.
   *
   * @returns The bytes released.
   * @throws {CudaError} When the driver refuses to free cached memory.
   * @example
   * ```ts
   * const released = mr.releaseAll(); // e.g. between the phases of a program
   * ```
   */
  releaseAll(): number {
    const seen = new Set<MemoryResource>();
    let released = 0;
    for (const start of [this.upstream, ...this.roots]) {
      for (const resource of upstreamChain(start)) {
        if (seen.has(resource) || resource.destroyed) continue;
        seen.add(resource);
        released += resource.releaseCached();
      }
    }
    const gc = (globalThis as { gc?: () => void }).gc;
    if (typeof gc === 'function') gc();
    return released;
  }
}
