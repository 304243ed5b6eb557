/**
 * StatisticsAdaptor: counts bytes and allocations passing through a resource (current, peak and
 * total), so a program can see how much it uses and an out-of-memory error can say where it went.
 */
import type { Ptr } from '../../backend/backend.js';
import { CounterCell, type Counter } from '../../counter.js';
import { ResourceAdaptor } from './adaptor.js';
import { CountedBlocks } from './counted-blocks.js';
import type { MemoryResource } from '../resource.js';
import type { MemoryFigures } from '../figures.js';
import type { StreamRef } from '../../stream.js';

/** What has passed through a StatisticsAdaptor: two counters of one shape. */
export interface AllocationStatistics {
  /** Bytes allocated and not yet deallocated (value), their high-water mark and all bytes ever allocated. */
  readonly bytes: Counter;
  /** Allocations not yet deallocated, their high-water mark and all allocations ever made. */
  readonly allocations: Counter;
}

/**
 * Counts what its upstream hands out (RMM's statistics_resource_adaptor). The counters change
 * only after the upstream call succeeded, so a failed or refused call (a wrong size, a foreign
 * pointer) changes nothing. It is equal (`isEqual`) only to itself, and a free of a block it did
 * not hand out (or with another size) is an `InvalidPointerError`, passed nowhere.
 *
 * @example
 * ```ts
 * const stats = new StatisticsAdaptor(new PoolResource());
 * const p = stats.allocate(1000);
 * stats.memoryFigures().allocatedBytes; // { value: 1000, peak: 1000, total: 1000 }
 * stats.deallocate(p, 1000);
 * ```
 */
export class StatisticsAdaptor extends ResourceAdaptor {
  private readonly bytesCounter = new CounterCell();
  private readonly allocationsCounter = new CounterCell();
  private readonly blocks = new CountedBlocks();

  /**
   * @param upstream The resource whose traffic is counted.
   * @throws {TypeError} When `upstream` is not a MemoryResource.
   * @throws {UseAfterFreeError} When it was destroyed.
   * @example
   * ```ts
   * const stats = new StatisticsAdaptor(getCurrentResource(0)); // counts what goes through it from now on
   * ```
   */
  constructor(upstream: MemoryResource) {
    super(upstream);
  }

  /**
   * @deprecated use `memoryFigures()` (`allocatedBytes` is `bytes` here); kept for one release.
   * A snapshot of the counters, read from `memoryFigures()`.
   */
  get statistics(): AllocationStatistics {
    const { allocatedBytes, allocations } = this.memoryFigures();
    return { bytes: allocatedBytes, allocations };
  }

  /**
   * @deprecated use `memoryFigures().allocatedBytes.value`; kept for one release.
   * Bytes allocated and not yet deallocated.
   */
  get currentBytes(): number {
    return this.memoryFigures().allocatedBytes.value;
  }

  /**
   * @deprecated use `resetPeakFigures()` (which restarts the upstream's peaks too); kept for one release.
   * Starts new high-water marks from the current figures.
   *
   * @throws Never.
   * @example
   * ```ts
   * stats.resetPeakFigures(); // rather than stats.resetPeaks()
   * ```
   */
  resetPeaks(): void {
    this.bytesCounter.resetPeak();
    this.allocationsCounter.resetPeak();
  }

  /**
   * What passed through this adaptor (allocated bytes as asked for, allocations) with the
   * upstream's reserved bytes and what else it reports; over an upstream that keeps no figures,
   * reserved is taken as allocated (nothing is known of what the upstream caches).
   */
  override memoryFigures(): MemoryFigures {
    const below = this.upstream.memoryFigures();
    const own = { allocatedBytes: this.bytesCounter.snapshot(), allocations: this.allocationsCounter.snapshot() };
    if (below !== undefined) return { ...below, ...own };
    const bytes = own.allocatedBytes;
    return {
      allocatedBytes: bytes,
      allocations: this.allocationsCounter.snapshot(),
      reservedBytes: bytes.value,
      peakReservedBytes: bytes.peak,
      reservedFromAllocated: true,
    };
  }

  /** Restarts this adaptor's peaks and the upstream's. */
  override resetPeakFigures(): void {
    this.bytesCounter.resetPeak();
    this.allocationsCounter.resetPeak();
    super.resetPeakFigures();
  }

  protected override doAllocate(bytes: number, _handle: number, stream: StreamRef | undefined): Ptr {
    const ptr = this.upstream.allocate(bytes, stream);
    this.blocks.add(ptr, bytes);
    this.bytesCounter.add(bytes);
    this.allocationsCounter.add(1);
    return ptr;
  }

  protected override doDeallocate(ptr: Ptr, bytes: number, _handle: number, stream: StreamRef | undefined): void {
    this.blocks.check(ptr, bytes, this);
    this.upstream.deallocate(ptr, bytes, stream);
    this.blocks.delete(ptr);
    this.bytesCounter.sub(bytes);
    this.allocationsCounter.sub(1);
  }

  /** Counts its own blocks: equal only to itself; a free it never counted is an InvalidPointerError. */
  protected override get keepsOwnCount(): boolean {
    return true;
  }
}
