/**
 * StatisticsAdaptor: counts bytes and allocations passing through a resource (current, peak and
 * total), so a program can see how much it uses and an out-of-memory error can say where it went.
 */
import type { Ptr } from '../backend/backend.js';
import { checkBytes } from '../validate.js';
import { ResourceAdaptor } from './adaptor.js';
import type { MemoryResource, StreamRef } from './resource.js';

/** A snapshot of what has passed through a StatisticsAdaptor. */
export interface AllocationStatistics {
  /** Bytes allocated and not yet deallocated. */
  readonly currentBytes: number;
  /** The high-water mark of `currentBytes` since creation or `resetPeaks()`. */
  readonly peakBytes: number;
  /** Bytes ever allocated. */
  readonly totalBytes: number;
  /** Allocations not yet deallocated. */
  readonly currentCount: number;
  /** The high-water mark of `currentCount` since creation or `resetPeaks()`. */
  readonly peakCount: number;
  /** Allocations ever made. */
  readonly totalCount: number;
}

/**
 * Counts what its upstream hands out. Plain number fields, updated only after the upstream call
 * succeeds, so the cost is a few additions per call and a failed call changes nothing.
 */
export class StatisticsAdaptor extends ResourceAdaptor {
  private current = 0;
  private peak = 0;
  private total = 0;
  private count = 0;
  private peakCountValue = 0;
  private totalCountValue = 0;

  constructor(upstream: MemoryResource) {
    super(upstream);
  }

  /** Allocates through the upstream and counts the block. */
  allocate(bytes: number, stream?: StreamRef): Ptr {
    checkBytes(bytes);
    const ptr = this.upstream.allocate(bytes, stream);
    this.current += bytes;
    this.total += bytes;
    this.count += 1;
    this.totalCountValue += 1;
    if (this.current > this.peak) this.peak = this.current;
    if (this.count > this.peakCountValue) this.peakCountValue = this.count;
    return ptr;
  }

  /** Deallocates through the upstream and uncounts the block. */
  deallocate(ptr: Ptr, bytes: number, stream?: StreamRef): void {
    this.upstream.deallocate(ptr, bytes, stream);
    this.current -= bytes;
    this.count -= 1;
  }

  /** A snapshot of the counters. */
  get statistics(): AllocationStatistics {
    return {
      currentBytes: this.current,
      peakBytes: this.peak,
      totalBytes: this.total,
      currentCount: this.count,
      peakCount: this.peakCountValue,
      totalCount: this.totalCountValue,
    };
  }

  /** Bytes allocated and not yet deallocated (no snapshot object: for hot loops). */
  get currentBytes(): number {
    return this.current;
  }

  /** High-water mark of live bytes (no snapshot object: for hot loops). */
  get peakBytes(): number {
    return this.peak;
  }

  /** Starts new high-water marks from the current figures (e.g. per phase of a program). */
  resetPeaks(): void {
    this.peak = this.current;
    this.peakCountValue = this.count;
  }
}
