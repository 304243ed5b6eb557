/**
 * LimitingAdaptor: a byte cap on what a resource may hand out, so one part of a program (or a test)
 * cannot take the whole device, and exhaustion can be rehearsed without filling a GPU.
 */
import type { Ptr } from '../../backend/backend.js';
import { CounterCell } from '../../counter.js';
import { OutOfMemoryError, outOfMemoryMessage } from '../../errors.js';
import { alignUp, readBytes, type ByteSize } from '../../validate.js';
import { ResourceAdaptor } from './adaptor.js';
import { CountedBlocks } from './counted-blocks.js';
import { formatBytesExact } from '../../util/size.js';
import type { MemoryResource } from '../resource.js';
import type { MemoryFigures } from '../figures.js';
import type { StreamRef } from '../../stream.js';
import { outOfMemoryStatistics } from '../figures.js';

/**
 * Refuses an allocation that would take the bytes outstanding through it past `limitBytes`, with
 * an `OutOfMemoryError` of reason `'limit'` carrying the request, this resource and its figures.
 * Each block counts as its size rounded up to the upstream's alignment (as RMM's limiting adaptor
 * does), since that is what it occupies. A deallocation of a block it did not hand out (another
 * limiting adaptor's over the same upstream, one already freed) or with another size is an
 * `InvalidPointerError`, and one the upstream refuses gives nothing back to the limit. It is equal
 * (`isEqual`) only to itself: two limits over one upstream are two counts.
 *
 * @example
 * ```ts
 * const limited = new LimitingAdaptor(new PoolResource(), 1 << 30);
 * limited.allocate(2 << 30); // OutOfMemoryError, reason 'limit'
 * ```
 */
export class LimitingAdaptor extends ResourceAdaptor {
  /** The cap, in bytes. */
  readonly limitBytes: number;
  private readonly counted = new CounterCell();
  private readonly allocations = new CounterCell();
  private readonly blocks = new CountedBlocks();

  /**
   * @param upstream The resource to cap.
   * @param limitBytes The cap, a positive whole number of bytes.
   * @throws {TypeError} When `upstream` is not a MemoryResource.
   * @throws {UseAfterFreeError} When it was destroyed.
   * @throws {TypeError | RangeError} When `limitBytes` is not a positive whole number of bytes.
   * @example
   * ```ts
   * const limited = new LimitingAdaptor(new PoolResource(), 512 << 20); // at most 512 MiB outstanding
   * ```
   */
  constructor(upstream: MemoryResource, limitBytes: ByteSize) {
    super(upstream);
    this.limitBytes = readBytes(limitBytes, 'limitBytes');
  }

  /** Bytes counted against the limit now. */
  get allocatedBytes(): number {
    return this.counted.value;
  }

  /** Bytes that may still be allocated before the limit. */
  get availableBytes(): number {
    return this.limitBytes - this.counted.value;
  }

  /**
   * The upstream's figures with this limit (the lowest limit wins in a stack of several); over an
   * upstream that keeps none, what this adaptor counts against the limit (sizes rounded to its
   * alignment), with reserved taken as allocated.
   */
  override memoryFigures(): MemoryFigures {
    const below = this.upstream.memoryFigures();
    if (below === undefined) {
      const bytes = this.counted.snapshot();
      return {
        allocatedBytes: bytes,
        allocations: this.allocations.snapshot(),
        reservedBytes: bytes.value,
        peakReservedBytes: bytes.peak,
        reservedFromAllocated: true,
        limitBytes: this.limitBytes,
      };
    }
    const limitBytes = Math.min(this.limitBytes, below.limitBytes ?? Infinity);
    return { ...below, limitBytes };
  }

  /** The upstream's reserved bytes; over one that keeps no figures, the bytes counted against the limit. */
  override get reservedBytes(): number {
    return this.upstream.reservedBytes ?? this.counted.value;
  }

  /** The upstream's peak reserved bytes; over one that keeps no figures, the peak counted against the limit. */
  override get peakReservedBytes(): number {
    return this.upstream.peakReservedBytes ?? this.counted.peak;
  }

  /** Restarts this adaptor's peaks and the upstream's. */
  override resetPeakFigures(): void {
    this.counted.resetPeak();
    this.allocations.resetPeak();
    super.resetPeakFigures();
  }

  protected override doAllocate(bytes: number, _handle: number, stream: StreamRef | undefined): Ptr {
    const counted = alignUp(bytes, this.alignment);
    if (this.counted.value + counted > this.limitBytes) {
      throw new OutOfMemoryError({
        requestedBytes: bytes,
        call: 'LimitingAdaptor.allocate',
        reason: 'limit',
        resource: this.describe(),
        statistics: outOfMemoryStatistics(this.memoryFigures()),
        message: outOfMemoryMessage(
          bytes,
          this.describe(),
          `${formatBytesExact(this.counted.value)} of the ` + `${formatBytesExact(this.limitBytes)} limit in use`,
        ),
      });
    }
    const ptr = this.upstream.allocate(bytes, stream);
    this.blocks.add(ptr, bytes);
    this.counted.add(counted);
    this.allocations.add(1);
    return ptr;
  }

  protected override doDeallocate(ptr: Ptr, bytes: number, _handle: number, stream: StreamRef | undefined): void {
    this.blocks.check(ptr, bytes, this);
    this.upstream.deallocate(ptr, bytes, stream);
    this.blocks.delete(ptr);
    this.counted.sub(alignUp(bytes, this.alignment));
    this.allocations.sub(1);
  }

  /** Counts its own blocks against its limit: equal only to itself; a free it never counted is an InvalidPointerError. */
  protected override get keepsOwnCount(): boolean {
    return true;
  }

  protected override describeParameters(): string {
    return `limit=${formatBytesExact(this.limitBytes, true)}`;
  }
}
