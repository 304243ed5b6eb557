/**
 * PinnedHostPool: a caching pool of pinned host buffers for staging copies. cuMemHostAlloc costs
 * milliseconds for large buffers; a staged transfer wants a few chunks it can fill from JavaScript
 * memory while the previous chunk's DMA runs. The host writes into these buffers, which is not
 * stream-ordered, so a buffer given back with a stream is reused only once the work queued on that
 * stream when it was given back has completed (an event per buffer, queried without blocking).
 */
import type { Backend, Ptr } from '../backend/backend.js';
import { getBackend } from '../backend/select.js';
import { EventFlags } from '../backend/backend.js';
import { DoubleFreeError, InvalidPointerError, OutOfMemoryError, UseAfterFreeError } from '../errors.js';
import { checkBytes, checkNonNegativeInteger } from '../validate.js';
import { PinnedHostResource } from './pinned-host-resource.js';
import type { MemoryKind, MemoryResource, StreamRef } from './resource.js';

/** Options for a PinnedHostPool. */
export interface PinnedHostPoolOptions {
  /** Where buffers come from (default a PinnedHostResource). */
  readonly upstream?: MemoryResource;
  /** Idle buffers kept beyond this are freed (default 256 MiB). */
  readonly maximumCachedBytes?: number;
}

/** A pinned staging buffer lent by the pool; give it back with `release(stream?)`. */
export interface PinnedChunk {
  /** Host address of the buffer. */
  readonly ptr: Ptr;
  /** The bytes asked for. */
  readonly byteLength: number;
  /** The buffer's real size (its size class). */
  readonly capacity: number;
  /** A zero-copy view of the first byteLength bytes. */
  view(): Uint8Array;
  /**
   * Gives the buffer back. With a stream, it is reused only after the work queued on that stream
   * so far (e.g. the async copy reading it) has completed.
   */
  release(stream?: StreamRef): void;
}

/** A cached or lent buffer. */
interface Entry {
  readonly ptr: Ptr;
  readonly capacity: number;
  /** Event recorded when it was given back with a stream; 0 when none. */
  event: number;
  /** True while the event may still be pending. */
  pending: boolean;
  requested: number;
}

/** Caching pool of pinned host buffers. */
export class PinnedHostPool implements MemoryResource {
  /** Pinned host memory. */
  readonly kind: MemoryKind = 'pinned-host';
  /** The upstream's alignment. */
  readonly alignment: number;
  /** Host memory belongs to no device. */
  readonly device = -1;
  /** Where the buffers come from. */
  readonly upstream: MemoryResource;
  /** Idle bytes kept at most. */
  readonly maximumCachedBytes: number;
  private readonly backend: Backend;
  /** Idle buffers by size class, oldest first. */
  private readonly idle = new Map<number, Entry[]>();
  private readonly lent = new Map<Ptr, Entry>();
  private cachedBytes = 0;
  private heldBytes = 0;
  private destroyed = false;

  /** A pool over `upstream` (default pinned memory from cuMemHostAlloc). */
  constructor(options: PinnedHostPoolOptions = {}) {
    if (options === null || typeof options !== 'object') throw new TypeError('options must be an object');
    this.upstream = options.upstream ?? new PinnedHostResource();
    this.alignment = this.upstream.alignment;
    this.maximumCachedBytes = options.maximumCachedBytes === undefined
      ? 256 * 1024 * 1024 : checkNonNegativeInteger(options.maximumCachedBytes, 'maximumCachedBytes');
    this.backend = getBackend();
  }

  /** The size class of a request: 4 steps per power of two, at least 4 KiB (at most 25% slack). */
  static sizeClass(bytes: number): number {
    if (bytes <= 4096) return 4096;
    const e = Math.floor(Math.log2(bytes));
    const step = 2 ** (e - 2);
    return Math.ceil(bytes / step) * step;
  }

  /** Lends a pinned buffer of at least `bytes`, reusing an idle one whose last use has completed. */
  acquire(bytes: number): PinnedChunk {
    const ptr = this.allocate(bytes);
    const entry = this.lent.get(ptr)!;
    const backend = this.backend;
    let released = false;
    return {
      ptr,
      byteLength: bytes,
      capacity: entry.capacity,
      view: (): Uint8Array => {
        if (released) throw new UseAfterFreeError(`pinned chunk 0x${ptr.toString(16)} was released`);
        return new Uint8Array(backend.hostView(ptr, bytes));
      },
      release: (stream?: StreamRef): void => {
        if (released) throw new DoubleFreeError(`pinned chunk 0x${ptr.toString(16)} released twice`);
        released = true;
        this.deallocate(ptr, bytes, stream);
      },
    };
  }

  /** MemoryResource form of `acquire`: a pinned buffer of at least `bytes`. */
  allocate(bytes: number, _stream?: StreamRef): Ptr {
    checkBytes(bytes);
    if (this.destroyed) throw new UseAfterFreeError(`${this.describe()} was destroyed`);
    const size = PinnedHostPool.sizeClass(bytes);
    let entry = this.takeIdle(size);
    if (entry === undefined) {
      let ptr: Ptr;
      try {
        ptr = this.upstream.allocate(size);
      } catch (error) {
        if (!(error instanceof OutOfMemoryError) || this.releaseCached() === 0) throw error;
        ptr = this.upstream.allocate(size);
      }
      entry = { ptr, capacity: size, event: 0, pending: false, requested: bytes };
      this.heldBytes += size;
    }
    entry.requested = bytes;
    this.lent.set(entry.ptr, entry);
    return entry.ptr;
  }

  /** Gives a buffer back; reused only after the work queued on `stream` so far completes. */
  deallocate(ptr: Ptr, bytes: number, stream?: StreamRef): void {
    checkBytes(bytes);
    const entry = this.lent.get(ptr);
    if (entry === undefined) {
      for (const list of this.idle.values()) {
        if (list.some((e) => e.ptr === ptr)) throw new DoubleFreeError(`deallocate(0x${ptr.toString(16)}): already given back`);
      }
      throw new InvalidPointerError(`deallocate(${String(ptr)}): not a buffer of ${this.describe()}`);
    }
    if (entry.requested !== bytes) {
      throw new InvalidPointerError(`deallocate(0x${ptr.toString(16)}, ${bytes}): the buffer was allocated with ${entry.requested} bytes`);
    }
    this.lent.delete(ptr);
    if (stream !== undefined) {
      if (entry.event === 0) entry.event = this.backend.eventCreate(EventFlags.DISABLE_TIMING);
      this.backend.eventRecord(entry.event, stream.handle);
      entry.pending = true;
    }
    let list = this.idle.get(entry.capacity);
    if (list === undefined) this.idle.set(entry.capacity, (list = []));
    list.push(entry);
    this.cachedBytes += entry.capacity;
    this.trim(this.maximumCachedBytes);
  }

  /** Only this pool may take its buffers back. */
  isEqual(other: MemoryResource): boolean {
    return other === this;
  }

  /** Frees every idle buffer (waiting for its last use first); returns the bytes freed. */
  releaseCached(): number {
    return this.trim(0);
  }

  /** Frees everything, lent buffers included; later use throws UseAfterFreeError. */
  destroy(): void {
    if (this.destroyed) return;
    this.trim(0);
    for (const e of this.lent.values()) this.freeEntry(e);
    this.lent.clear();
    this.destroyed = true;
  }

  /** Bytes held from upstream, idle or lent. */
  get reservedBytes(): number {
    return this.heldBytes;
  }

  /** Bytes idle in the cache. */
  get idleBytes(): number {
    return this.cachedBytes;
  }

  /** `PinnedHostPool(maximumCached=..., upstream=...)`. */
  describe(): string {
    return `PinnedHostPool(maximumCached=${this.maximumCachedBytes}, upstream=${this.upstream.describe()})`;
  }

  /** An idle buffer of this class whose last use is complete (oldest first), else undefined. */
  private takeIdle(size: number): Entry | undefined {
    const list = this.idle.get(size);
    if (list === undefined) return undefined;
    for (let k = 0; k < list.length; k++) {
      const e = list[k]!;
      if (e.pending && !this.backend.eventQuery(e.event)) continue;
      e.pending = false;
      list.splice(k, 1);
      this.cachedBytes -= e.capacity;
      return e;
    }
    return undefined;
  }

  /** Frees idle buffers, oldest first, until at most `keep` idle bytes remain. */
  private trim(keep: number): number {
    let freed = 0;
    for (const [size, list] of this.idle) {
      while (this.cachedBytes > keep && list.length > 0) {
        const e = list.shift()!;
        this.cachedBytes -= e.capacity;
        freed += e.capacity;
        this.freeEntry(e);
      }
      if (list.length === 0) this.idle.delete(size);
    }
    return freed;
  }

  private freeEntry(e: Entry): void {
    if (e.event !== 0) {
      if (e.pending) this.backend.eventSynchronize(e.event);
      this.backend.eventDestroy(e.event);
    }
    this.upstream.deallocate(e.ptr, e.capacity);
    this.heldBytes -= e.capacity;
  }
}
