/**
 * LimitingAdaptor: a byte cap on what a resource may hand out, so one part of a program (or a test)
 * cannot take the whole device, and exhaustion can be rehearsed without filling a GPU.
 */
import type { Ptr } from '../backend/backend.js';
import { OutOfMemoryError } from '../errors.js';
import { alignUp, checkBytes } from '../validate.js';
import { ResourceAdaptor, formatBytes } from './adaptor.js';
import type { MemoryResource, StreamRef } from './resource.js';

/**
 * Refuses an allocation that would take the bytes outstanding through it past `limitBytes`, with
 * an `OutOfMemoryError` carrying the request, this resource and its figures. Each block counts as
 * its size rounded up to the upstream's alignment (as RMM's limiting adaptor does), since that is
 * what it occupies.
 */
export class LimitingAdaptor extends ResourceAdaptor {
  /** The cap, in bytes. */
  readonly limitBytes: number;
  private allocated = 0;
  private peak = 0;
  private count = 0;

  constructor(upstream: MemoryResource, limitBytes: number) {
    super(upstream);
    this.limitBytes = checkBytes(limitBytes, 'limitBytes');
  }

  /** Bytes counted against the limit now. */
  get allocatedBytes(): number {
    return this.allocated;
  }

  /** Bytes that may still be allocated before the limit. */
  get availableBytes(): number {
    return this.limitBytes - this.allocated;
  }

  /** Allocates through the upstream when the request fits under the limit. */
  allocate(bytes: number, stream?: StreamRef): Ptr {
    checkBytes(bytes);
    const counted = alignUp(bytes, this.alignment);
    if (this.allocated + counted > this.limitBytes) {
      throw new OutOfMemoryError(bytes, 'LimitingAdaptor.allocate', this.describe(),
        { currentBytes: this.allocated, peakBytes: this.peak, currentCount: this.count },
        `cannot allocate ${bytes} bytes: ${formatBytes(this.allocated)} of the ${formatBytes(this.limitBytes)} limit in use`);
    }
    const ptr = this.upstream.allocate(bytes, stream);
    this.allocated += counted;
    this.count += 1;
    if (this.allocated > this.peak) this.peak = this.allocated;
    return ptr;
  }

  /** Deallocates through the upstream and gives the block's bytes back to the limit. */
  deallocate(ptr: Ptr, bytes: number, stream?: StreamRef): void {
    this.upstream.deallocate(ptr, bytes, stream);
    this.allocated -= alignUp(bytes, this.alignment);
    this.count -= 1;
  }

  protected override describeParameters(): string {
    return `limit=${formatBytes(this.limitBytes)}`;
  }
}
