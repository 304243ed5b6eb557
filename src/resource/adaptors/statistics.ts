/**
 * StatisticsAdaptor: counts bytes and allocations passing through a resource (current, peak and
 * total), so a program can see how much it uses and an out-of-memory error can say where it went.
 */
import type { Ptr } from '../../backend/backend.js';
import { CounterCell } from '../../counter.js';
import { ResourceAdaptor } from './adaptor.js';
import { CountedBlocks, countedFigures } from './counted-blocks.js';
import type { MemoryResource } from '../resource.js';
import type { MemoryFigures } from '../figures.js';
import type { StreamRef } from '../../stream.js';

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
   * What passed through this adaptor (allocated bytes as asked for, allocations) with the
   * upstream's reserved bytes and what else it reports; over an upstream that keeps no figures,
   * reserved is taken as allocated (nothing is known of what the upstream caches).
   */
  override memoryFigures(): MemoryFigures {
    return countedFigures(this.upstream.memoryFigures(), this.bytesCounter.snapshot(), this.allocationsCounter.snapshot());
  }

  /** The upstream's reserved bytes; over one that keeps no figures, the bytes counted here. */
  override get reservedBytes(): number {
    return this.upstream.reservedBytes ?? this.bytesCounter.value;
  }

  /** The upstream's peak reserved bytes; over one that keeps no figures, the peak counted here. */
  override get peakReservedBytes(): number {
    return this.upstream.peakReservedBytes ?? this.bytesCounter.peak;
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
