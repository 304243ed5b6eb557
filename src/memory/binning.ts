/**
 * BinningResource: routes each request to the smallest bin that fits (RMM's
 * binning_memory_resource). Small requests go to fixed-size bins (a stack pop each, no
 * fragmentation within a bin); requests larger than every bin go to the upstream.
 */
import type { Ptr } from '../backend/backend.js';
import { checkBytes, checkNonNegativeInteger } from '../validate.js';
import { FixedSizeResource } from './fixed-size.js';
import type { MemoryKind, MemoryResource, StreamRef } from './resource.js';

/** Options for a BinningResource. */
export interface BinningOptions {
  /** With maxSizeExponent: a FixedSizeResource bin for each power of two 2^min .. 2^max. */
  readonly minSizeExponent?: number;
  readonly maxSizeExponent?: number;
}

/** One bin: requests up to `size` bytes go to `resource`. */
interface Bin {
  readonly size: number;
  readonly resource: MemoryResource;
  /** Created here (destroyed here), not given by the caller. */
  readonly owned: boolean;
}

/** Size-routed allocation over bins and an upstream. */
export class BinningResource implements MemoryResource {
  /** The upstream's kind. */
  readonly kind: MemoryKind;
  /** The weakest alignment among the upstream and the bins. */
  alignment: number;
  /** The upstream's device. */
  readonly device: number;
  private readonly bins: Bin[] = [];

  /** Bins over `upstream`; with both exponents, power-of-two fixed-size bins between them. */
  constructor(readonly upstream: MemoryResource, options: BinningOptions = {}) {
    if (upstream === null || typeof upstream !== 'object' || typeof upstream.allocate !== 'function') {
      throw new TypeError('upstream must be a MemoryResource');
    }
    this.kind = upstream.kind;
    this.device = upstream.device;
    this.alignment = upstream.alignment;
    const { minSizeExponent: lo, maxSizeExponent: hi } = options;
    if ((lo === undefined) !== (hi === undefined)) {
      throw new TypeError('give both minSizeExponent and maxSizeExponent, or neither');
    }
    if (lo !== undefined && hi !== undefined) {
      checkNonNegativeInteger(lo, 'minSizeExponent');
      checkNonNegativeInteger(hi, 'maxSizeExponent');
      if (lo > hi || hi > 40) throw new RangeError(`need minSizeExponent <= maxSizeExponent <= 40, got ${lo} and ${hi}`);
      for (let e = lo; e <= hi; e++) this.addBin(2 ** e);
    }
  }

  /**
   * Adds a bin for requests up to `allocationSize` bytes, served by `binResource` (default a
   * FixedSizeResource of that block size over the upstream). Replaces a bin of the same size.
   */
  addBin(allocationSize: number, binResource?: MemoryResource): this {
    checkBytes(allocationSize, 'allocationSize');
    const resource = binResource ?? new FixedSizeResource(this.upstream, { blockSize: allocationSize });
    const k = this.bins.findIndex((b) => b.size === allocationSize);
    if (k >= 0) this.bins.splice(k, 1);
    this.bins.push({ size: allocationSize, resource, owned: binResource === undefined });
    this.bins.sort((a, b) => a.size - b.size);
    this.alignment = Math.min(this.alignment, resource.alignment);
    return this;
  }

  /** The bin sizes, ascending. */
  get binSizes(): number[] {
    return this.bins.map((b) => b.size);
  }

  /** Allocates from the smallest bin that fits, or from the upstream. */
  allocate(bytes: number, stream?: StreamRef): Ptr {
    checkBytes(bytes);
    return this.route(bytes).allocate(bytes, stream);
  }

  /** Returns a block to the resource its size routes to. */
  deallocate(ptr: Ptr, bytes: number, stream?: StreamRef): void {
    checkBytes(bytes);
    this.route(bytes).deallocate(ptr, bytes, stream);
  }

  /** Only this resource routes its blocks back correctly. */
  isEqual(other: MemoryResource): boolean {
    return other === this;
  }

  /** Releases what every bin caches. */
  releaseCached(): number {
    let n = 0;
    for (const b of this.bins) n += b.resource.releaseCached();
    return n;
  }

  /** Destroys the bins this resource created (their chunks go back upstream). */
  destroy(): void {
    for (const b of this.bins) if (b.owned && b.resource instanceof FixedSizeResource) b.resource.destroy();
  }

  /** `BinningResource(bins=[256, 512], upstream=...)`. */
  describe(): string {
    return `BinningResource(bins=[${this.binSizes.join(', ')}], upstream=${this.upstream.describe()})`;
  }

  private route(bytes: number): MemoryResource {
    const bins = this.bins;
    for (let k = 0; k < bins.length; k++) if (bytes <= bins[k]!.size) return bins[k]!.resource;
    return this.upstream;
  }
}
