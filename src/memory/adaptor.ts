/**
 * The shared base of resource adaptors: a resource that wraps an `upstream` and forwards what it
 * does not change. Each adaptor (statistics, limiting, tracking, logging, out-of-memory) then holds
 * only the one thing it adds, and they all describe themselves and compare alike.
 */
import type { Ptr } from '../backend/backend.js';
import type { MemoryKind, MemoryResource, StreamRef } from './resource.js';

/**
 * A resource that wraps another. Subclasses override `allocate`/`deallocate` to add their one
 * concern; kind, alignment, device, cache release and equality are the upstream's, because an
 * adaptor hands out the upstream's memory unchanged.
 */
export abstract class ResourceAdaptor implements MemoryResource {
  /** The resource whose memory this adaptor hands out. */
  readonly upstream: MemoryResource;

  constructor(upstream: MemoryResource) {
    if (upstream === null || typeof upstream !== 'object' || typeof upstream.allocate !== 'function') {
      throw new TypeError(`${new.target.name}: upstream must be a MemoryResource`);
    }
    this.upstream = upstream;
  }

  /** The upstream's kind: an adaptor does not change what memory is handed out. */
  get kind(): MemoryKind {
    return this.upstream.kind;
  }

  /** The upstream's alignment. */
  get alignment(): number {
    return this.upstream.alignment;
  }

  /** The upstream's device. */
  get device(): number {
    return this.upstream.device;
  }

  /** Allocates through the upstream; subclasses add their concern around it. */
  abstract allocate(bytes: number, stream?: StreamRef): Ptr;

  /** Deallocates through the upstream; subclasses add their concern around it. */
  abstract deallocate(ptr: Ptr, bytes: number, stream?: StreamRef): void;

  /** Adaptors cache nothing themselves: releasing is the upstream's job. */
  releaseCached(): number {
    return this.upstream.releaseCached();
  }

  /**
   * Memory from one adaptor may be returned through another of the same class over an equal
   * upstream (RMM's rule); any state the adaptor keeps per pointer (tracking) narrows this.
   */
  isEqual(other: MemoryResource): boolean {
    if (other === this) return true;
    return other instanceof ResourceAdaptor && other.constructor === this.constructor &&
      this.upstream.isEqual(other.upstream);
  }

  /** `ClassName(params, Upstream(...))`, e.g. `StatisticsAdaptor(PoolResource(...))`. */
  describe(): string {
    const params = this.describeParameters();
    return `${this.constructor.name}(${params ? `${params}, ` : ''}${this.upstream.describe()})`;
  }

  /** The adaptor's own parameters for `describe()`, e.g. `limit=1 GiB`; empty when none. */
  protected describeParameters(): string {
    return '';
  }
}

/** Bytes as a short human figure (`1.5 MiB`), for descriptions, reports and errors. */
export function formatBytes(bytes: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let unit = 0;
  while (Math.abs(value) >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  if (unit === 0) return `${bytes} B`;
  const text = value >= 100 || Number.isInteger(value) ? value.toFixed(0) : value.toFixed(value >= 10 ? 1 : 2);
  return `${text} ${units[unit]}`;
}
