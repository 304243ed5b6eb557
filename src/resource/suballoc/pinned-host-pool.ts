/**
 * PinnedHostPool: a caching pool of pinned host buffers for staging copies. cuMemHostAlloc costs
 * milliseconds for large buffers; a staged transfer wants a few chunks it can fill from JavaScript
 * memory while the previous chunk's DMA runs. The host writes into these buffers, which is not
 * stream-ordered, so a buffer given back with a stream is reused only once the work queued on that
 * stream when it was given back has completed (an event per buffer, queried without blocking).
 * A pool dropped without `destroy()` gives its buffers back to its upstream when collected (the
 * garbage-collection backstop), as other resources do: an upstream the program passed in outlives it.
 */
import type { Backend, Ptr } from '../../backend/backend.js';
import { Device } from '../../device.js';
import { nonZero } from '../../backstop.js';
import { DoubleFreeError, InvalidPointerError, isOutOfMemory, UseAfterFreeError } from '../../errors.js';
import { checkNonNegativeInteger, readBytes, type ByteSize } from '../../validate.js';
import { formatBytesExact } from '../../util/size.js';
import { PinnedHostResource } from '../upstream/pinned-host-resource.js';
import { CounterCell } from '../../counter.js';
import { checkMemoryOf, checkResource, MemoryResource } from '../resource.js';
import { type MemoryKind } from '../figures.js';
import { type StreamRef } from '../../stream.js';
import type { MemoryFigures } from '../figures.js';
import { StreamOrder, type Lane } from '../stream-order.js';
import { readOptions } from '../../util/options.js';

/** Options for a PinnedHostPool. */
export interface PinnedHostPoolOptions {
  /** Where buffers come from (default a PinnedHostResource, owned by the pool). */
  readonly upstream?: MemoryResource;
  /** The device whose backend records the events (default device 0). */
  readonly device?: Device | number;
  /** Idle buffers kept beyond this are freed (default 256 MiB). */
  readonly maximumCachedBytes?: ByteSize;
}

/** A pinned staging buffer lent by the pool; give it back with `free(stream?)` (the vocabulary: `free` gives memory back). */
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
  free(stream?: StreamRef): void;
}

/**
 * A cached or lent buffer: a Lane whose stream is the one it was last given back on, and whose
 * event was recorded then.
 */
interface Entry extends Lane {
  readonly ptr: Ptr;
  readonly capacity: number;
  stream: number;
  requested: number;
}

/**
 * Caching pool of pinned host buffers.
 *
 * @example
 * ```ts
 * using staging = new PinnedHostPool({ maximumCachedBytes: 64 << 20 });
 * const chunk = staging.acquire(1 << 20);
 * chunk.view().set(data);
 * copyAsync(device, chunk.ptr, stream);
 * chunk.free(stream); // reused only after the copy has read it
 * ```
 */
export class PinnedHostPool extends MemoryResource {
  /** Pinned host memory. */
  readonly kind: MemoryKind = 'pinned-host';
  /** The upstream's alignment. */
  readonly alignment: number;
  /** Host memory belongs to no device. */
  readonly deviceOrdinal = -1;
  /** Where the buffers come from. */
  override readonly upstream: MemoryResource;
  #maximumCachedBytes: number;
  readonly #backend: Backend;
  /** Idle buffers by size class, oldest first. */
  readonly #idle = new Map<number, Entry[]>();
  readonly #lent = new Map<Ptr, Entry>();
  #cachedBytes = 0;
  /** Bytes held from upstream, idle or lent. */
  readonly #held = new CounterCell();
  /** Bytes lent (as asked for) and buffers lent. */
  readonly #lentBytes = new CounterCell();
  readonly #lentCount = new CounterCell();
  readonly #order: StreamOrder;
  readonly #ownsUpstream: boolean;

  /**
   * A pool over `upstream` (default pinned memory from cuMemHostAlloc).
   * @param options Upstream, device and the idle bytes kept.
   * @throws {TypeError | RangeError} For bad options, or an upstream that does not hand out pinned host memory.
   * @example
   * ```ts
   * using staging = new PinnedHostPool({ upstream: new PinnedHostResource({ portable: true }), maximumCachedBytes: 0 });
   * ```
   */
  constructor(options: PinnedHostPoolOptions = {}) {
    super();
    options = readOptions('new PinnedHostPool', options, { upstream: true, device: true, maximumCachedBytes: true });
    const device = Device.resolve(options.device);
    this.#maximumCachedBytes = options.maximumCachedBytes === undefined ? 256 * 1024 * 1024 : readBytes(options.maximumCachedBytes, 'maximumCachedBytes', true);
    this.#ownsUpstream = options.upstream === undefined;
    this.upstream =
      options.upstream === undefined ? new PinnedHostResource({ device }) : checkMemoryOf(checkResource(options.upstream), 'pinned-host', -1, 'PinnedHostPool');
    this.alignment = this.upstream.alignment;
    this.#backend = device.backend;
    this.#order = new StreamOrder(this.#backend);
    const { upstream } = this;
    const [idle, lent, order, ownsUpstream] = [this.#idle, this.#lent, this.#order, this.#ownsUpstream];
    this.guardMemory(() => nonZero(releaseAll(idle, lent, order, upstream, ownsUpstream)));
  }

  /**
   * The size class of a request: 4 steps per power of two, at least 4 KiB (at most 25% slack).
   *
   * @param bytes The request.
   * @returns The capacity of the buffer the pool lends for it.
   * @throws Never.
   * @example
   * ```ts
   * PinnedHostPool.sizeClass(1000);    // 4096
   * PinnedHostPool.sizeClass(5 << 20); // 5 MiB: 4, 5, 6 and 7 MiB are the classes of [4, 8) MiB
   * ```
   */
  static sizeClass(bytes: number): number {
    if (bytes <= 4096) return 4096;
    const e = Math.floor(Math.log2(bytes));
    const step = 2 ** (e - 2);
    return Math.ceil(bytes / step) * step;
  }

  /**
   * Lends a pinned buffer of at least `bytes`, reusing an idle one whose last use has completed.
   * @param bytes The bytes needed.
   * @returns The chunk; give it back with `free(stream?)`.
   * @throws {TypeError | RangeError} For a bad size.
   * @throws {UseAfterFreeError} When the pool was destroyed.
   * @throws {OutOfMemoryError} When the upstream cannot pin more memory.
   * @example
   * ```ts
   * const chunk = staging.acquire(bytes);
   * chunk.view().set(source);
   * chunk.free(stream); // after the copy queued on `stream` that reads it
   * ```
   */
  acquire(bytes: number): PinnedChunk {
    const ptr = this.allocate(bytes);
    const entry = this.#lent.get(ptr)!;
    const backend = this.#backend;
    let released = false;
    return {
      ptr,
      byteLength: bytes,
      capacity: entry.capacity,
      view: (): Uint8Array => {
        if (released) throw new UseAfterFreeError(`pinned chunk 0x${ptr.toString(16)} was freed`);
        return new Uint8Array(backend.hostView(ptr, bytes));
      },
      free: (stream?: StreamRef): void => {
        if (released) throw new DoubleFreeError(`pinned chunk 0x${ptr.toString(16)} freed twice`);
        released = true;
        this.deallocate(ptr, bytes, stream);
      },
    };
  }

  /** MemoryResource form of `acquire`: a pinned buffer of at least `bytes`. */
  protected doAllocate(bytes: number): Ptr {
    const size = PinnedHostPool.sizeClass(bytes);
    let entry = this.#takeIdle(size);
    if (entry === undefined) {
      let ptr: Ptr;
      try {
        ptr = this.upstream.allocate(size);
      } catch (error) {
        if (!isOutOfMemory(error) || this.doReleaseCached() === 0) throw error;
        ptr = this.upstream.allocate(size);
      }
      entry = { ptr, capacity: size, stream: 0, event: 0, retired: false, requested: bytes };
      this.#held.add(size);
    }
    entry.requested = bytes;
    this.#lent.set(entry.ptr, entry);
    this.#lentBytes.add(bytes);
    this.#lentCount.add(1);
    return entry.ptr;
  }

  /**
   * Gives a buffer back; it is reused only after the work queued on stream `h` so far (the
   * default stream when none was given) has completed: an event recorded now, queried later.
   */
  protected doDeallocate(ptr: Ptr, bytes: number, h: number): void {
    const entry = this.#lent.get(ptr);
    if (entry === undefined) {
      for (const list of this.#idle.values()) {
        if (list.some((e) => e.ptr === ptr)) throw new DoubleFreeError(`deallocate(0x${ptr.toString(16)}): already given back`);
      }
      throw new InvalidPointerError(`deallocate(0x${ptr.toString(16)}): not a buffer of ${this.describe()}`);
    }
    if (entry.requested !== bytes) {
      throw new InvalidPointerError(`deallocate(0x${ptr.toString(16)}, ${bytes}): the buffer was allocated with ${entry.requested} bytes`);
    }
    this.#lent.delete(ptr);
    this.#lentBytes.sub(bytes);
    this.#lentCount.sub(1);
    entry.stream = h;
    this.#order.mark(entry);
    let list = this.#idle.get(entry.capacity);
    if (list === undefined) this.#idle.set(entry.capacity, (list = []));
    list.push(entry);
    this.#cachedBytes += entry.capacity;
    this.#trim(this.#maximumCachedBytes);
  }

  /** Frees every idle buffer (waiting for its last use first); returns the bytes freed. */
  protected override doReleaseCached(): number {
    return this.#trim(0);
  }

  /** Frees everything, lent buffers included, and an upstream the pool created. */
  protected override doDestroy(): void {
    releaseAll(this.#idle, this.#lent, this.#order, this.upstream, this.#ownsUpstream);
    this.#cachedBytes = 0;
    this.#held.sub(this.#held.value);
    this.#lentBytes.sub(this.#lentBytes.value);
    this.#lentCount.sub(this.#lentCount.value);
  }

  /** Idle bytes kept at most. */
  get maximumCachedBytes(): number {
    return this.#maximumCachedBytes;
  }

  /**
   * Changes the idle bytes kept at most; idle buffers beyond the new bound are freed now (waiting
   * for their last use first). The transfer layer sizes its staging pools to its chunk settings.
   *
   * @param bytes A whole number >= 0.
   * @throws {RangeError | TypeError} For a bad value.
   * @example
   * ```ts
   * staging.maximumCachedBytes = 64 << 20;
   * ```
   */
  set maximumCachedBytes(bytes: number) {
    if (this.destroyed) throw this.destroyedError();
    this.#maximumCachedBytes = checkNonNegativeInteger(bytes, 'maximumCachedBytes');
    this.#trim(bytes);
  }

  /**
   * Its lent buffers (the bytes asked for) and the buffers it holds from upstream, lent or idle.
   *
   * @returns The figures; never `undefined`.
   * @example
   * ```ts
   * staging.memoryFigures().reservedBytes - staging.memoryFigures().allocatedBytes.value; // idle and slack
   * ```
   */
  override memoryFigures(): MemoryFigures {
    return {
      allocatedBytes: this.#lentBytes.snapshot(),
      allocations: this.#lentCount.snapshot(),
      reservedBytes: this.#held.value,
      peakReservedBytes: this.#held.peak,
    };
  }

  /** Restarts the lent and held high-water marks. */
  override resetPeakFigures(): void {
    this.#lentBytes.resetPeak();
    this.#lentCount.resetPeak();
    this.#held.resetPeak();
  }

  /** `memoryFigures().reservedBytes` without building the figures: bytes held from upstream, idle or lent. */
  override get reservedBytes(): number {
    return this.#held.value;
  }

  /** `memoryFigures().peakReservedBytes` without building the figures. */
  override get peakReservedBytes(): number {
    return this.#held.peak;
  }

  /** Bytes idle in the cache. */
  get idleBytes(): number {
    return this.#cachedBytes;
  }

  /** `PinnedHostPool(maximumCached=..., upstream=...)`. */
  describe(): string {
    return `PinnedHostPool(maximumCached=${formatBytesExact(this.maximumCachedBytes, true)}, upstream=${this.upstream.describe()})`;
  }

  /** An idle buffer of this class whose last use is complete (oldest first), else undefined. */
  #takeIdle(size: number): Entry | undefined {
    const list = this.#idle.get(size);
    if (list === undefined) return undefined;
    for (let k = 0; k < list.length; k++) {
      const e = list[k]!;
      if (!this.#order.passed(e)) continue;
      list.splice(k, 1);
      this.#cachedBytes -= e.capacity;
      return e;
    }
    return undefined;
  }

  /** Frees idle buffers, oldest first, until at most `keep` idle bytes remain. */
  #trim(keep: number): number {
    let freed = 0;
    for (const [size, list] of this.#idle) {
      while (this.#cachedBytes > keep && list.length > 0) {
        const e = list.shift()!;
        this.#cachedBytes -= e.capacity;
        freeEntry(this.#order, this.upstream, e);
        this.#held.sub(e.capacity);
        freed += e.capacity;
      }
      if (list.length === 0) this.#idle.delete(size);
    }
    return freed;
  }
}

/** Gives one buffer back upstream once its last use has completed (the host touches pinned memory). */
function freeEntry(order: StreamOrder, upstream: MemoryResource, e: Entry): void {
  order.hostWait(e, false);
  order.release(e);
  upstream.deallocate(e.ptr, e.capacity);
}

/**
 * Gives every buffer back upstream, idle and lent ones, and destroys an upstream the pool made:
 * `destroy()`, and the backstop of a pool collected undestroyed (so it must not reference the pool).
 *
 * @returns The bytes given back.
 */
function releaseAll(idle: Map<number, Entry[]>, lent: Map<Ptr, Entry>, order: StreamOrder, upstream: MemoryResource, ownsUpstream: boolean): number {
  let bytes = 0;
  for (const list of idle.values()) {
    for (const e of list) {
      freeEntry(order, upstream, e);
      bytes += e.capacity;
    }
  }
  idle.clear();
  for (const e of lent.values()) {
    freeEntry(order, upstream, e);
    bytes += e.capacity;
  }
  lent.clear();
  if (ownsUpstream) upstream.destroy();
  return bytes;
}
