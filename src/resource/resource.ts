/**
 * MemoryResource: the one contract every allocator keeps (RMM's device_memory_resource, cuda.core's
 * MemoryResource, in TypeScript's shape). The public methods are not meant to be overridden: they
 * check their arguments and the resource's state before anything changes, then call the
 * subclass's `doAllocate`/`doDeallocate`/`doReleaseCached`/`doDestroy`. So every resource, pool,
 * sub-allocator and adaptor refuses bad sizes, pointers and streams the same way, and a destroyed
 * resource refuses every call with `UseAfterFreeError`, written once here rather than per class.
 *
 * Constructors take one shape: a resource that cannot work without an upstream takes it first,
 * `new FixedSizeResource(upstream, options?)` (sub-allocators over a given resource, adaptors);
 * one whose upstream is optional takes everything in one options object,
 * `new PoolResource({ upstream?, ... })` (pool, arena, pinned host pool), so the common call has no
 * `undefined` placeholder; driver-backed resources take their device, `new CudaResource(device?)`.
 *
 * Allocation is stream-ordered: memory allocated on a stream may be used by work on that stream at
 * once, and memory deallocated on a stream may be handed out again only when that is safe for the
 * stream it is handed to (see `stream-order.ts`).
 */
import type { Ptr } from '../backend/backend.js';
import type { Device } from '../device.js';
import { formatBytes } from '../util/size.js';
import { inspectCustom } from '../util/inspect.js';
import { guard, unguard, type Dropped } from '../backstop.js';
import { isOutOfMemory, StreamCaptureError, UseAfterFreeError } from '../errors.js';
import { captureSessionOf, type CaptureSession } from '../graphs/sessions.js';
import { GraphPool, graphPoolOf } from './suballoc/graph-pool.js';
import { streamHandleOf, type StreamRef } from '../stream.js';
import { retryAfterReleasingCaches, trackResource, withoutHostWait } from './cache-registry.js';
import { memoryFreed, waiting } from './waiting.js';
import type { MemoryFigures, MemoryKind, SnapshotSegment } from './figures.js';
import { checkBytes, checkPointer, checkStreamHandle, MAX_BYTES, readBytes, type ByteSize } from '../validate.js';

/**
 * What the memory history is told of the program's calls (the outermost ones: a resource's calls
 * to its upstream are part of the call that made them). Implemented by `history.ts`; declared
 * here so the base class can call it without importing what lies above it.
 *
 * @internal
 */
export interface AllocationObserver {
  /** `resource.allocate(bytes)` on stream `handle` returned `ptr`. */
  allocated(resource: MemoryResource, ptr: Ptr, bytes: number, handle: number): void;
  /** `resource.deallocate(ptr, bytes)` on stream `handle` returned. */
  deallocated(resource: MemoryResource, ptr: Ptr, bytes: number, handle: number): void;
  /** `resource.allocate(bytes)` on stream `handle` failed for lack of memory. */
  failed(resource: MemoryResource, bytes: number, handle: number): void;
  /** `resource.releaseCached()` returned. */
  releasedCache(resource: MemoryResource): void;
}

/**
 * Told of every out-of-memory error that reaches the program (not those a resource caught from
 * its upstream), before it is thrown: `out-of-memory-observer.ts` sets it.
 *
 * @internal
 */
export type OutOfMemoryObserver = (resource: MemoryResource, error: unknown, bytes: number, handle: number) => void;

/** Calls of allocate (and, while observed, deallocate and releaseCached) in progress. */
let nesting = 0;
let observer: AllocationObserver | null = null;
let outOfMemoryObserver: OutOfMemoryObserver | null = null;
/** Adds what the buffers above know (the program's live allocations) to an error that reaches the program, before any observer. */
let outOfMemoryNote: ((error: unknown) => void) | null = null;
/**
 * Set while a waiting allocation tries (`tryAllocate`): a refusal then is not yet the program's
 * (the wait goes on), so it is neither counted nor observed until the wait ends without memory.
 */
let trying = false;
/** Counts and observes an out-of-memory error that reached the program (set in the class's static block). */
let reachedProgram: (resource: MemoryResource, error: unknown, bytes: number, handle: number) => void = () => {};

/**
 * One try of a waiting allocation: `resource.allocate(bytes, stream)`, with the same release of
 * every cache of the device and retry on a driver refusal (less the device synchronisation: the
 * wait's poll finds memory whose stream-ordered free is still pending once its stream passes), but a refusal is not counted or
 * observed as the program's out-of-memory error (the allocation waits on): `reportOutOfMemory`
 * does that once, when the wait ends without memory.
 *
 * @param resource The resource.
 * @param bytes The size.
 * @param stream The stream.
 * @returns The address.
 * @throws What `allocate` throws.
 * @internal
 */
export function tryAllocate(resource: MemoryResource, bytes: number, stream: StreamRef | undefined): Ptr {
  trying = true;
  try {
    return withoutHostWait(() => resource.allocate(bytes, stream));
  } finally {
    trying = false;
  }
}

/**
 * Counts and observes an out-of-memory error of `resource` that reached the program other than
 * through `allocate` (a waiting allocation that timed out, or one that can never be met), as
 * `allocate` does its own.
 *
 * @param resource The resource asked.
 * @param error The error the program receives.
 * @param bytes The size asked for.
 * @param stream The stream.
 * @internal
 */
export function reportOutOfMemory(resource: MemoryResource, error: unknown, bytes: number, stream: StreamRef | undefined): void {
  reachedProgram(resource, error, bytes, stream === undefined ? 0 : checkStreamHandle(stream));
}

/**
 * Sets (or, with null, removes) the observer of every resource's outermost calls. One at a time:
 * the memory history dispatches to its recorders itself.
 *
 * @param next The observer, or null.
 * @internal
 */
export function setAllocationObserver(next: AllocationObserver | null): void {
  observer = next;
}

/**
 * Sets (or, with null, removes) the observer of out-of-memory errors that reach the program.
 *
 * @param next The observer, or null.
 * @internal
 */
export function setOutOfMemoryObserver(next: OutOfMemoryObserver | null): void {
  outOfMemoryObserver = next;
}

/**
 * Sets what extends every out-of-memory error that reaches the program before the observer sees
 * it (`buffer/dropped-memory.ts`: the live allocations the program holds).
 *
 * @param next The note, or null.
 * @internal
 */
export function setOutOfMemoryNote(next: ((error: unknown) => void) | null): void {
  outOfMemoryNote = next;
}

/** A resource as `JSON.stringify` writes it (`MemoryResource.toJSON`). */
export interface ResourceJSON {
  /** `describe()`: the class, its parameters and its upstream's description. */
  readonly resource: string;
  /** The kind of memory it hands out. */
  readonly kind: MemoryKind;
  /** The device's ordinal, -1 for host memory. */
  readonly device: number;
  /** True once destroyed. */
  readonly destroyed: boolean;
  /** `memoryFigures()`, where the resource keeps figures. */
  readonly figures?: MemoryFigures;
}

/**
 * An allocator of memory, stream-ordered. Subclasses implement the `do*` hooks; callers use
 * `allocate`, `deallocate`, `releaseCached` and `destroy`.
 *
 * @example
 * ```ts
 * using pool = new PoolResource();
 * const ptr = pool.allocate(1 << 20, stream);
 * pool.deallocate(ptr, 1 << 20, stream);
 * ```
 */
export abstract class MemoryResource {
  /** The kind of memory this resource hands out. */
  abstract readonly kind: MemoryKind;
  /** Every pointer this resource returns is a multiple of this (a power of two, >= 256 for device memory). */
  abstract readonly alignment: number;
  /**
   * The ordinal of the device the memory belongs to, -1 for host memory. A number, not a `Device`
   * (which is what `device` is on buffers, arrays, streams and modules): host resources have no
   * device, and the allocation path reads it as a plain field.
   *
   * @returns The ordinal, or -1.
   * @example
   * ```ts
   * new PoolResource().deviceOrdinal; // 0
   * ```
   */
  abstract readonly deviceOrdinal: number;
  /** The resource this one takes its memory from, if any (declared here, set by subclasses). */
  declare readonly upstream?: MemoryResource;
  #destroyed = false;
  /** Set when the memory went back: at `destroy()`, or with the last block live then. */
  #released = false;
  /** Blocks handed out and not yet returned: `destroy()` waits for them. */
  #live = 0;
  /** What the backstop ends if the resource is collected unreleased (`guardMemory`). */
  #dropped: Dropped | undefined;
  #outOfMemoryErrors = 0;

  static {
    reachedProgram = (resource, error, bytes, handle): void => {
      resource.#outOfMemoryErrors += 1;
      outOfMemoryNote?.(error);
      observer?.failed(resource, bytes, handle);
      outOfMemoryObserver?.(resource, error, bytes, handle);
    };
  }

  /** Set once the resource joined its device's cache registry (`joinCacheRegistry`). */
  #joined = false;

  /**
   * A subclass calls it with `super()`. The resource joins its device's cache registry later, once
   * it is whole (its first allocation, or `joinCacheRegistry()`): Note [Cache registry membership]
   * (docs/design/cache-registry-membership.md).
   *
   * @throws Never.
   * @example
   * ```ts
   * abstract class HostHeap extends MemoryResource {
   *   constructor() { super(); } // then the subclass's own set-up, and the hooks it implements
   * }
   * ```
   */
  constructor() {}

  /**
   * Adds the resource to its device's cache registry (once), so a driver refusal anywhere on its
   * device releases its cache too. `allocate` calls it on the first allocation; a subclass that
   * holds cached memory before any (a pool's initial chunk) calls it at the end of its constructor,
   * once every field the registry reads is set. Never from the base constructor: a subclass
   * constructor that throws would leave a half-built resource there, which every later
   * out-of-memory error would read.
   */
  protected joinCacheRegistry(): void {
    if (this.#joined) return;
    this.#joined = true;
    trackResource(this);
  }

  /**
   * Allocates `bytes` usable on `stream` (the default stream when omitted).
   *
   * @param bytes A positive whole number, or a size like `'512M'` (binary units, as the CLI reads them).
   * @param stream Where the memory is first used.
   * @returns The address of the block.
   * @throws {TypeError | RangeError} For a bad size or stream (a raw handle no live stream has), before anything changes.
   * @throws {UseAfterFreeError} When the resource (or the stream) was destroyed.
   * @throws {OutOfMemoryError} When it cannot: where the driver refused, after every cache of
   *   the device was released and the allocation retried once (`cache-registry.ts`); the message
   *   says how much the caches released.
   * @example
   * ```ts
   * const ptr = pool.allocate(1 << 20, stream); // 1 MiB, first used on `stream`
   * ```
   */
  allocate(bytes: ByteSize, stream?: StreamRef): Ptr {
    // The common case inline: a whole number in range passes without a call; a string is read here.
    if (!(typeof bytes === 'number' && bytes > 0 && bytes <= MAX_BYTES && Number.isInteger(bytes))) bytes = readBytes(bytes, 'bytes');
    // The one live-stream check (a caching resource would keep a dead handle with the memory).
    const handle = streamHandleOf(stream);
    if (this.#destroyed) throw this.destroyedError();
    if (!this.#joined) this.joinCacheRegistry();
    const session = captureSessionOf(handle);
    if (session !== undefined) {
      const routed = this.#allocateInCapture(session, bytes, handle);
      if (routed !== undefined) return routed;
    }
    // A try block costs nothing until something throws (measured on the pool's hit pair), so
    // every resource can count what reached its caller without a cost on the common path.
    // `nesting` tells the outermost call (the program's) from a resource's call to its upstream:
    // only that one is recorded, and only its out-of-memory error is the program's.
    let ptr: Ptr;
    nesting += 1;
    try {
      ptr = this.doAllocate(bytes, handle, stream);
    } catch (error) {
      nesting -= 1;
      if (nesting === 0 && isOutOfMemory(error)) return this.#afterOutOfMemory(error, bytes, handle, stream);
      if (isOutOfMemory(error)) this.#outOfMemoryErrors += 1;
      throw error;
    }
    nesting -= 1;
    this.#live += 1;
    if (observer !== null && nesting === 0) observer.allocated(this, ptr, bytes, handle);
    return ptr;
  }

  /**
   * An allocation on a capturing stream, by the resource's `capturePolicy`: from the capture's
   * private pool (made on first use), refused before any driver call, or undefined to go on as
   * usual (the driver's graph memory nodes; an adaptor's upstream decides).
   */
  #allocateInCapture(session: CaptureSession, bytes: number, handle: number): Ptr | undefined {
    const policy = this.capturePolicy;
    if (policy === 'driver' || policy === 'upstream') return undefined;
    if (policy === 'refuse') {
      throw new StreamCaptureError(
        `${this.constructor.name}.allocate()`,
        `${this.describe()} allocates with a call a capture forbids ` +
          '(cuMemAlloc and the like): allocate from an AsyncResource (graph memory nodes) or a PoolResource (the capture-private pool)',
      );
    }
    const pool = (session.pool ??= retained(new GraphPool({ device: session.deviceOrdinal })));
    if (!(pool instanceof GraphPool)) throw new TypeError("the capture's pool is not a GraphPool");
    const ptr = pool.allocate(bytes, handle);
    this.#live += 1;
    if (observer !== null && nesting === 0) observer.allocated(this, ptr, bytes, handle);
    return ptr;
  }

  /**
   * How the contract serves an allocation on a stream being captured: `'private'` (the default,
   * every sub-allocator): from the capture-private pool, so eager work is never handed memory a
   * graph writes; `'driver'`: as usual, the driver makes graph memory nodes (AsyncResource);
   * `'upstream'`: as usual, the upstream decides (adaptors); `'refuse'`: a StreamCaptureError
   * before any driver call (resources whose allocation is a call a capture forbids).
   *
   * @returns The policy.
   * @example
   * ```ts
   * new PoolResource().capturePolicy; // 'private'
   * ```
   */
  get capturePolicy(): 'private' | 'driver' | 'upstream' | 'refuse' {
    return this.deviceOrdinal < 0 ? 'refuse' : 'private';
  }

  /**
   * The program's allocation (the outermost call) ran out of memory. Here, and only here, no
   * resource is in the middle of a call, so a refusal by the driver may release every cache of
   * the device and retry (cache-registry.ts); what still fails is counted and observed.
   */
  #afterOutOfMemory(error: unknown, bytes: number, handle: number, stream: StreamRef | undefined): Ptr {
    let ptr: Ptr;
    try {
      ptr = retryAfterReleasingCaches(error, this.deviceOrdinal, () => {
        nesting += 1;
        try {
          return this.doAllocate(bytes, handle, stream);
        } finally {
          nesting -= 1;
        }
      });
    } catch (failure) {
      if (isOutOfMemory(failure) && !trying) reachedProgram(this, failure, bytes, handle);
      throw failure;
    }
    this.#live += 1;
    observer?.allocated(this, ptr, bytes, handle);
    return ptr;
  }

  /**
   * How many out-of-memory errors this resource's `allocate` threw to its caller. Failures a
   * resource above caught and recovered from (a retry that succeeded) count only here, not above.
   */
  get outOfMemoryErrors(): number {
    return this.#outOfMemoryErrors;
  }

  /**
   * The resource's figures in the shape every resource shares (what `memoryStats()` reads); by
   * default `undefined`: nothing is known. Resources that count override it; adaptors report
   * their upstream's, with what they add.
   *
   * @returns A snapshot of the figures, or `undefined` when the resource keeps none.
   * @throws {UseAfterFreeError} Where reading them needs a resource that was destroyed.
   * @example
   * ```ts
   * new PoolResource().memoryFigures()?.reservedBytes; // 0
   * ```
   */
  memoryFigures(): MemoryFigures | undefined {
    return undefined;
  }

  /**
   * `memoryFigures().reservedBytes`, read without building the figures: bytes held from the driver
   * or the upstream now. Every resource of vram answers it at the cost of a field read (the memory
   * history reads it at each allocation it records); by default it is read from `memoryFigures()`,
   * so a resource that reports figures reports this too, and `undefined` where it keeps none.
   *
   * @returns The bytes, or `undefined` when the resource keeps no figures.
   * @throws {UseAfterFreeError} Where reading them needs a resource that was destroyed.
   * @example
   * ```ts
   * pool.reservedBytes === pool.memoryFigures().reservedBytes; // true
   * ```
   */
  get reservedBytes(): number | undefined {
    return this.memoryFigures()?.reservedBytes;
  }

  /**
   * `memoryFigures().peakReservedBytes`, read without building the figures: the high-water mark of
   * `reservedBytes` since creation or the last `resetPeakFigures()`.
   *
   * @returns The bytes, or `undefined` when the resource keeps no figures.
   * @throws {UseAfterFreeError} Where reading them needs a resource that was destroyed.
   * @example
   * ```ts
   * pool.peakReservedBytes - pool.memoryFigures().allocatedBytes.peak; // what the peak cost beyond its blocks
   * ```
   */
  get peakReservedBytes(): number | undefined {
    return this.memoryFigures()?.peakReservedBytes;
  }

  /**
   * Starts new high-water marks (allocated bytes and count, reserved bytes) from the current
   * figures, here and in what the resource reports; nothing by default.
   *
   * @throws {UseAfterFreeError} Where resetting needs a resource that was destroyed.
   * @example
   * ```ts
   * pool.resetPeakFigures(); // pool.memoryFigures().allocatedBytes.peak === .value
   * ```
   */
  resetPeakFigures(): void {}

  /**
   * How the resource lays out its memory: the ranges it holds (virtual ranges with their mapped
   * pages, chunks, an arena's region, or one driver allocation per block) and the blocks each is
   * cut into, for `memorySnapshot()`. By default `undefined`: an adaptor hands out its upstream's
   * memory, and a resource outside vram says nothing. Not for hot paths: it walks every block.
   *
   * @returns The segments, ascending by address, or `undefined` when the resource does not lay out memory itself.
   * @throws {UseAfterFreeError} When the resource was destroyed.
   * @example
   * ```ts
   * pool.memorySegments()?.[0]?.blocks.filter((b) => b.state === 'free').length;
   * ```
   */
  memorySegments(): SnapshotSegment[] | undefined {
    if (this.#destroyed) throw this.destroyedError();
    return this.doMemorySegments();
  }

  /**
   * Returns a block. Nothing changes when any check fails: the resource stays as it was.
   *
   * @param ptr What `allocate` returned.
   * @param bytes The size it was allocated with.
   * @param stream The stream after whose pending work the block may be reused (default stream
   *   when omitted): the last stream that used it, or one that waited for the others.
   * @throws {TypeError | RangeError} For a bad pointer, size or stream.
   * @throws {InvalidPointerError} For a pointer this resource did not hand out, or a wrong size.
   * @throws {DoubleFreeError} For a block already returned (where the resource can tell).
   * @throws {UseAfterFreeError} When the resource's memory was released (the resource was
   *   destroyed with no block live, or its last live block was freed since), or the stream destroyed.
   * @example
   * ```ts
   * const ptr = pool.allocate(4096, stream);
   * pool.deallocate(ptr, 4096, stream); // the size it was allocated with, and the stream that used it last
   * ```
   */
  deallocate(ptr: Ptr, bytes: number, stream?: StreamRef): void {
    // Number.isInteger, not `% 1`: device addresses are above 2^31, so they are doubles, and a
    // double's `% 1` is a call to fmod on the hit path.
    if (!(typeof ptr === 'number' && ptr >= 0 && ptr <= MAX_BYTES && Number.isInteger(ptr))) checkPointer(ptr);
    if (!(typeof bytes === 'number' && bytes > 0 && bytes <= MAX_BYTES && Number.isInteger(bytes))) checkBytes(bytes);
    const handle = streamHandleOf(stream);
    // A destroyed resource still takes back the blocks live at `destroy()` (see there).
    if (this.#released) throw this.destroyedError();
    const privatePool = graphPoolOf(ptr);
    if (privatePool !== undefined && this.capturePolicy === 'private') {
      // A block a capture allocated: it goes back to the capture's pool, never to this resource's cache.
      privatePool.deallocate(ptr, handle);
      if (observer !== null && nesting === 0) observer.deallocated(this, ptr, bytes, handle);
      this.countReturned();
      return;
    }
    if (observer === null) {
      this.doDeallocate(ptr, bytes, handle, stream);
    } else {
      nesting += 1;
      try {
        this.doDeallocate(ptr, bytes, handle, stream);
      } finally {
        nesting -= 1;
      }
      if (nesting === 0) observer.deallocated(this, ptr, bytes, handle);
    }
    this.countReturned();
    // Allocations waiting for memory try again (host memory has no device to wait on).
    if (waiting !== 0 && this.deviceOrdinal >= 0) memoryFreed(this.deviceOrdinal, handle);
  }

  /**
   * Gives cached but unused memory back to the upstream (or the driver), in stream order, and
   * returns how many bytes were released. Resources that cache nothing return 0. Used by the
   * out-of-memory policy.
   *
   * @returns The bytes released.
   * @throws {UseAfterFreeError} When the resource was destroyed.
   * @example
   * ```ts
   * console.log(`released ${pool.releaseCached()} bytes`);
   * ```
   */
  releaseCached(): number {
    if (this.#destroyed) throw this.destroyedError();
    if (observer === null) return this.doReleaseCached();
    nesting += 1;
    let released: number;
    try {
      released = this.doReleaseCached();
    } finally {
      nesting -= 1;
    }
    if (nesting === 0) observer.releasedCache(this);
    return released;
  }

  /**
   * Ends the resource, as cuMemPoolDestroy ends a pool: it returns at once, every later call but
   * `deallocate` throws `UseAfterFreeError`, and what the resource holds goes back (to its
   * upstream, or the driver) at once when no block is live, else when the last block live now is
   * deallocated (their buffers freed, or collected by the backstop). So memory a live buffer can
   * still reach is never handed out again through the upstream. Resources it created itself (a
   * default upstream, its bins) are destroyed with it; resources it was given are not. A second
   * call does nothing.
   *
   * @throws Never: a destroyed resource's later calls throw, not this one.
   * @example
   * ```ts
   * const inner = new PoolResource({ upstream: outer });
   * const buf = DeviceBuffer.allocate(4096, { resource: inner });
   * inner.destroy(); // inner.released === false: buf's chunk stays taken from outer
   * buf.free();      // inner.released === true: its chunks went back to outer
   * ```
   */
  destroy(): void {
    if (this.#destroyed) return;
    this.#destroyed = true;
    if (this.#live === 0) this.#release();
  }

  /**
   * True once the resource's memory went back: at `destroy()` when no block was live, else with
   * the last block live then. Between the two the resource is destroyed but not released.
   */
  get released(): boolean {
    return this.#released;
  }

  /**
   * Counts a block handed out other than through `allocate` (an arena's pitched blocks), so that
   * `destroy()` waits for it too.
   */
  protected countHandedOut(): void {
    this.#live += 1;
  }

  /**
   * Counts a block returned (by `deallocate`, or a subclass's own path for blocks counted with
   * `countHandedOut`); after `destroy()`, the last one releases the memory.
   */
  protected countReturned(): void {
    if (--this.#live === 0 && this.#destroyed) this.#release();
  }

  /**
   * Hands what the resource holds to the garbage-collection backstop: if the resource is collected
   * before its memory was released, `release` gives it back (live blocks included: nothing can
   * return them through a resource no one can reach) and it counts as a leak. Called once by a
   * subclass's constructor, with a function that must not reference the resource.
   *
   * @param release Gives back everything, returns the bytes it gave back, or null when the
   *   resource held nothing (no memory, no driver object): then it is not counted as a leak.
   */
  protected guardMemory(release: () => number | null): void {
    this.#dropped = { kind: this.constructor.name, ptr: 0, release };
    guard(this, this.#dropped);
  }

  #release(): void {
    this.#released = true;
    if (this.#dropped !== undefined) unguard(this.#dropped);
    this.doDestroy();
  }

  /** `using mr = new PoolResource()` destroys it at the end of the scope. */
  [Symbol.dispose](): void {
    this.destroy();
  }

  /** True once `destroy()` has run (its memory may still wait for live blocks: `released`). */
  get destroyed(): boolean {
    return this.#destroyed;
  }

  /**
   * True when memory from one may be deallocated through the other. By default only the resource
   * itself; resources without per-pointer state widen this.
   *
   * @param other Another resource.
   * @returns Whether `other` may free this one's memory and vice versa.
   * @throws Never.
   * @example
   * ```ts
   * if (!buf.resource.isEqual(mr)) throw new Error('free it through the resource that allocated it');
   * ```
   */
  isEqual(other: MemoryResource): boolean {
    return other === this;
  }

  /**
   * Lets `device` reach the memory at `ptr` for a copy between devices that runs in `device`'s
   * context, where this resource maps its memory for named devices only (cuMemSetAccess): the
   * virtual-memory pool and the SpillableResource grant the access (Note [Peer copies of mapped
   * memory] in docs/design/peer-grants.md). Memory of any other resource needs nothing: false.
   *
   * @param _ptr An address in memory this resource handed out.
   * @param _device The device whose context runs the copy.
   * @param _write Whether the copy writes the memory.
   * @returns True when `ptr` is this resource's mapped memory (granted now or before).
   * @throws {CudaError} When the driver refuses the grant.
   * @example
   * ```ts
   * resource.allowPeerCopy(src.ptr, Device.get(1), false);
   * ```
   * @internal the copy path's, through `allowPeerCopy` below.
   */
  allowPeerCopy(_ptr: Ptr, _device: Device, _write: boolean): boolean {
    return false;
  }

  /**
   * A short description for logs and errors, e.g. `PoolResource(initial=1 GiB)`; it names the
   * resource's class, its parameters and its upstream's description. It works after `destroy()`,
   * since error messages about a destroyed resource use it.
   *
   * @returns The description.
   * @throws Never.
   * @example
   * ```ts
   * console.log(new StatisticsAdaptor(new PoolResource()).describe()); // StatisticsAdaptor(PoolResource(...))
   * ```
   */
  abstract describe(): string;

  /**
   * One readable line for logs, `String(resource)` and `console.log`: its description, the kind of
   * memory, the device, and what it has handed out and holds (from `memoryFigures()`, where it
   * keeps figures). Works after `destroy()`.
   *
   * @returns E.g. `PoolResource(virtual, device=0): device memory on device 0, allocated 1 MiB in 1 block, reserved 2 MiB`.
   * @throws Never.
   * @example
   * ```ts
   * String(new PoolResource()); // 'PoolResource(virtual, device=0): device memory on device 0, allocated 0 B in 0 blocks, reserved 0 B'
   * ```
   */
  toString(): string {
    const where = this.deviceOrdinal < 0 ? 'the host' : `device ${this.deviceOrdinal}`;
    const f = this.#figuresOrUndefined();
    const figures =
      f === undefined
        ? ''
        : `, allocated ${formatBytes(f.allocatedBytes.value)} in ${f.allocations.value} block${f.allocations.value === 1 ? '' : 's'}, reserved ${formatBytes(f.reservedBytes)}`;
    return `${this.describe()}: ${this.kind} memory on ${where}${figures}${this.#destroyed ? ', destroyed' : ''}`;
  }

  /**
   * How `console.log` and `util.inspect` show the resource: `String(resource)`, one line (never
   * the internals: upstreams, heaps, the backend).
   *
   * @returns The line.
   * @throws Never.
   * @example
   * ```ts
   * console.log(new PoolResource()); // PoolResource(virtual, device=0): device memory on device 0, ...
   * ```
   */
  [inspectCustom](): string {
    return this.toString();
  }

  /**
   * What `JSON.stringify` writes: the description, kind, device ordinal and figures (plain data,
   * no circular structure).
   *
   * @returns The resource as plain data.
   * @throws Never.
   * @example
   * ```ts
   * JSON.stringify(new PoolResource()); // {"resource":"PoolResource(virtual, device=0)","kind":"device",...}
   * ```
   */
  toJSON(): ResourceJSON {
    const figures = this.#figuresOrUndefined();
    return {
      resource: this.describe(),
      kind: this.kind,
      device: this.deviceOrdinal,
      destroyed: this.#destroyed,
      ...(figures === undefined ? {} : { figures }),
    };
  }

  /** The figures for display: none where the resource keeps none or can no longer read them. */
  #figuresOrUndefined(): MemoryFigures | undefined {
    try {
      return this.memoryFigures();
    } catch {
      return undefined;
    }
  }

  /** Allocates; `bytes` and `stream` are checked, `handle` is the stream's handle (0 for default). */
  protected abstract doAllocate(bytes: number, handle: number, stream: StreamRef | undefined): Ptr;

  /** Deallocates; arguments are checked in shape, the hook checks ownership and size. */
  protected abstract doDeallocate(ptr: Ptr, bytes: number, handle: number, stream: StreamRef | undefined): void;

  /** The segments `memorySegments` returns (the resource is not destroyed); none by default. */
  protected doMemorySegments(): SnapshotSegment[] | undefined {
    return undefined;
  }

  /** Releases what the resource caches; nothing by default. */
  protected doReleaseCached(): number {
    return 0;
  }

  /** Frees what the resource holds (no block is live by then); nothing by default. */
  protected doDestroy(): void {}

  /** The error for any call after `destroy()`. */
  protected destroyedError(): UseAfterFreeError {
    return new UseAfterFreeError(`${this.describe()} was destroyed`);
  }
}

/**
 * A resource and every resource below it, top first, following `.upstream`. The one walk down a
 * stack that the snapshot, the out-of-memory message and the retry adaptor share; it stops at a
 * resource met before, so a (mis-built) cycle ends the walk instead of looping.
 *
 * @param top The resource to start from.
 * @returns `top`, its upstream, that one's upstream, and so on, each once.
 * @throws Nothing.
 * @example
 * ```ts
 * upstreamChain(new LimitingAdaptor(new PoolResource(), 1 << 30)).map((r) => r.constructor.name);
 * // ['LimitingAdaptor', 'PoolResource']
 * ```
 */
export function upstreamChain(top: MemoryResource): MemoryResource[] {
  const chain: MemoryResource[] = [];
  for (let r: MemoryResource | undefined = top; r !== undefined && !chain.includes(r); r = r.upstream) chain.push(r);
  return chain;
}

/**
 * Lets `device` reach the memory at `ptr`, which `resource` handed out, for a copy between devices
 * that runs in `device`'s context: the first resource down the stack (adaptors, bins, a limit over
 * a pool) whose mappings hold `ptr` grants the access (`MemoryResource.allowPeerCopy`).
 *
 * @param resource The resource the memory came from (a buffer's).
 * @param ptr An address in the memory.
 * @param device The device whose context runs the copy.
 * @param write Whether the copy writes the memory.
 * @throws {CudaError} When the driver refuses the grant.
 * @example
 * ```ts
 * allowPeerCopy(src.resource, src.ptr, stream.device, false);
 * ```
 * @internal the copy path's (`src/buffer/copy-planning.ts`).
 */
export function allowPeerCopy(resource: MemoryResource, ptr: Ptr, device: Device, write: boolean): void {
  for (const r of upstreamChain(resource)) if (r.allowPeerCopy(ptr, device, write)) return;
}

/**
 * Checks that `value` is a MemoryResource (an upstream given by a caller).
 *
 * @param value The argument.
 * @param name Its name, for the message.
 * @returns It, typed.
 * @throws {TypeError} When it is not a MemoryResource.
 * @throws {UseAfterFreeError} When it was destroyed.
 */
export function checkResource(value: unknown, name = 'upstream'): MemoryResource {
  if (!(value instanceof MemoryResource)) throw new TypeError(`${name} must be a MemoryResource`);
  if (value.destroyed) throw new UseAfterFreeError(`${name} ${value.describe()} was destroyed`);
  return value;
}

/**
 * Checks that `part` (an upstream, a bin) hands out the memory `user` hands out: the same kind, on
 * the same device. A resource that called itself device memory while handing out host memory (or
 * the reverse) would send copies, kernels and host views to the wrong memory: on a GPU, a crash.
 *
 * @param part The resource given.
 * @param kind The kind `user` needs.
 * @param device The device ordinal `user` needs (-1 for host memory).
 * @param user What takes it, for the message, e.g. 'PinnedHostPool'.
 * @param name The argument's name, for the message.
 * @returns `part`.
 * @throws {TypeError} When the kinds differ.
 * @throws {RangeError} When the devices differ.
 */
export function checkMemoryOf(part: MemoryResource, kind: MemoryKind, device: number, user: string, name = 'upstream'): MemoryResource {
  if (part.kind !== kind) {
    throw new TypeError(`${user} needs ${kind} memory, but its ${name} ${part.describe()} hands out ${part.kind} memory`);
  }
  if (part.deviceOrdinal !== device) {
    throw new RangeError(`${user} needs memory of ${where(device)}, but its ${name} ${part.describe()} hands out memory of ${where(part.deviceOrdinal)}`);
  }
  return part;
}

function where(device: number): string {
  return device < 0 ? 'the host' : `device ${device}`;
}

/** A new pool with the capture's one hold on it. */
function retained(pool: GraphPool): GraphPool {
  pool.retain();
  return pool;
}
