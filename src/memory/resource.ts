/**
 * The MemoryResource interface shared by every allocator (RMM's device_memory_resource in
 * TypeScript's shape). Upstream resources talk to the Backend; sub-allocators and adaptors wrap an
 * `upstream` resource. Allocation is stream-ordered: memory allocated on a stream may be used by
 * work on that stream at once, and memory deallocated on a stream may be handed out again only
 * when that is safe for the stream it is handed to.
 */
import type { Ptr } from '../backend/backend.js';

/** Anything with a stream handle: a `Stream`, or `{ handle: 0 }` for the default stream. */
export interface StreamRef {
  readonly handle: number;
}

/** The legacy default stream, as a StreamRef. */
export const defaultStream: StreamRef = Object.freeze({ handle: 0 });

/** What kind of memory a resource hands out. */
export type MemoryKind = 'device' | 'managed' | 'pinned-host';

/** An allocator of memory, stream-ordered. */
export interface MemoryResource {
  /** The kind of memory this resource hands out. */
  readonly kind: MemoryKind;
  /** Every pointer this resource returns is a multiple of this (a power of two, >= 256 for device memory). */
  readonly alignment: number;
  /** The device ordinal the memory belongs to (-1 for host memory). */
  readonly device: number;
  /** The resource this one takes its memory from, if any. */
  readonly upstream?: MemoryResource;
  /**
   * Allocates `bytes` (a positive whole number) usable on `stream` (default stream when omitted).
   * Throws `RangeError`/`TypeError` for bad sizes and `OutOfMemoryError` when it cannot.
   */
  allocate(bytes: number, stream?: StreamRef): Ptr;
  /**
   * Returns a block to the resource. `bytes` must be the size it was allocated with; `stream` the
   * stream after whose pending work the block may be reused.
   */
  deallocate(ptr: Ptr, bytes: number, stream?: StreamRef): void;
  /** True when memory from one may be deallocated through the other. */
  isEqual(other: MemoryResource): boolean;
  /**
   * Gives cached but unused memory back to the upstream (or the driver) and returns how many bytes
   * were released. Resources that cache nothing return 0. Used by the out-of-memory policy.
   */
  releaseCached(): number;
  /** A short description for logs and errors, e.g. `PoolResource(initial=1 GiB)`. */
  describe(): string;
}

/**
 * Implemented by resources that hold memory from the driver beyond what is live (pools, arenas),
 * so replay and statistics can report fragmentation overhead: peak reserved over peak live.
 */
export interface ReservingResource extends MemoryResource {
  /** Bytes currently obtained from the driver (physical memory, for virtual-memory pools). */
  readonly reservedBytes: number;
  /** The high-water mark of `reservedBytes` since creation or the last reset. */
  readonly peakReservedBytes: number;
  resetPeakReserved(): void;
}

/** True when `mr` reports the memory it reserves from the driver. */
export function isReserving(mr: MemoryResource): mr is ReservingResource {
  return typeof (mr as Partial<ReservingResource>).peakReservedBytes === 'number';
}
