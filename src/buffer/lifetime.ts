/**
 * Lifetimes of the memory vram hands out, once for every buffer class. Freeing is explicit
 * (`free()`, or `using`); a FinalizationRegistry is the backstop for what a program dropped, and
 * counts it as a leak. Frees are stream-ordered behind every stream the buffer recorded
 * (`recordStream`, an event wait, no host wait), including streams destroyed first; a staged copy
 * holds the memory until it settles, and a host view keeps its buffer reachable.
 * (Note [Buffer lifetimes], docs/design/buffer-lifetimes.md)
 */
import type { Backend, Handle, Ptr } from '../backend/backend.js';
import { recordNewEvent } from '../backend/record-event.js';
import { inspectCustom } from '../util/inspect.js';
import { Device } from '../device.js';
import { reportLeak } from '../backstop.js';
import { countAllocated, countReleased, setBeforeCollection } from './dropped-memory.js';
import { DoubleFreeError, UseAfterFreeError } from '../errors.js';
import { defaultStream, Event, onStreamRetiring, Stream, streamHandleOf } from '../stream.js';
import type { StreamRef } from '../stream.js';
import type { MemoryResource } from '../resource/resource.js';
import { readOptions } from '../util/options.js';

/**
 * Returns memory where it came from. `stream` is the stream it is freed on (the one given to
 * `free({ stream })`, else the allocation stream, else the first recorded stream); closures over a
 * resource pass it to `deallocate`, closures that are not stream-ordered ignore it. Built in a
 * buffer's static factory, so that it captures the resource and pointer but never the buffer. Or
 * the resource itself, for memory that goes back as it came (`deallocate(ptr, bytes, stream)`):
 * no closure per buffer.
 *
 * @example
 * ```ts
 * const release: Release = (on) => resource.deallocate(ptr, bytes, on);
 * ```
 */
export type Release = ((stream: StreamRef | undefined) => void) | MemoryResource;

/**
 * Everything needed to free an allocation, held apart from the buffer: the backstop frees from it
 * after the buffer is gone, and it is also the registry's unregister token (one object per
 * allocation, nothing more on the hot path).
 */
interface Held {
  /** The buffer's class, named in the leak report (its `name` read only then). */
  readonly type: { readonly name: string };
  /** PENDING until the backstop registration (`registerPending`), REGISTERED, then RELEASED by `free()`. */
  state: number;
  /** Changes only for spillable memory that moves (`moveAllocation`). */
  ptr: Ptr;
  readonly bytes: number;
  readonly stack: string | undefined;
  readonly release: Release;
  /** Owns the memory: its backend, and the context of plain `{ handle }` stream references. */
  readonly owner: Device;
  /** The allocation stream (freed on by default); undefined when allocated on no stream. */
  readonly stream: StreamRef | undefined;
  /** False when `release` is not stream-ordered (registered memory): free waits on the host. */
  readonly ordered: boolean;
  /** Other streams the memory was used on (`recordStream`); created on the first record only. */
  uses: StreamRef[] | undefined;
  /** Copies in flight that hold the memory (`holdMemory`): while any does, a free is deferred. */
  holds: number;
  /** A free deferred until the last hold ends: the stream it names (undefined: the default). */
  deferred: { readonly stream: StreamRef | undefined } | undefined;
  /** Run once the memory went back (`afterRelease`): what was made for the memory's sake (exported descriptors) goes with it. */
  after: (() => void)[] | undefined;
}

/** An allocation's Held record, for `holdMemory` (set in Allocation's static block: it reads a private field). */
let heldOf: (allocation: Allocation) => Held;

/** A live allocation's address, without what a subclass's `ptr` getter adds (set in Allocation's static block). */
let addressOfLive: (allocation: Allocation) => Ptr;

/** Gives an allocation a new address (set in Allocation's static block). */
let setAddress: (allocation: Allocation, ptr: Ptr) => void;

let captureStacks = false;

/** Told of every new allocation while a `tidy` scope is open anywhere (undefined otherwise: one check). */
let scopeHook: ((allocation: Allocation) => void) | undefined;

/**
 * Sets (or, with undefined, removes) what is told of each allocation as it is made: `tidy` scopes
 * (tidy.ts) while one is open.
 *
 * @internal
 * @param hook Called with each new allocation, after it is registered.
 */
export function setAllocationHook(hook: ((allocation: Allocation) => void) | undefined): void {
  scopeHook = hook;
}

/** A Held record's backstop state (`Held.state`). */
const PENDING = 0;
const REGISTERED = 1;
const RELEASED = 2;

const registry = new FinalizationRegistry<Held>((held) => {
  let releaseError: unknown;
  try {
    releaseHeld(held, undefined);
  } catch (error) {
    releaseError = error;
  }
  countReleased(held.bytes, held.stack, false);
  reportLeak({
    kind: held.type.name,
    ptr: held.ptr,
    bytes: held.bytes,
    ...(held.stack !== undefined ? { stack: held.stack } : {}),
    ...(releaseError !== undefined ? { releaseError } : {}),
  });
});

/**
 * Allocations made since the last `registerPending`, and their records: a buffer is registered
 * with the backstop only if it outlives a batch (docs/design/buffer-lifetimes.md, "Backstop
 * registration"), so an allocate + free pair never touches the registry.
 */
const pendingBuffers: Allocation[] = [];
const pendingHeld: Held[] = [];
/** The batch: a buffer waits at most this many allocations, or until the current job ends. */
const PENDING_BATCH = 64;
/** True while a microtask that registers the batch is queued. */
let flushQueued = false;

/**
 * Registers with the backstop every buffer of the batch not freed yet, and empties the batch: at
 * the end of each job (a microtask), every `PENDING_BATCH` allocations, and before a collection is
 * asked for (what the program dropped must be registered for the collection to reclaim it).
 *
 * @internal
 */
export function registerPending(): void {
  const count = pendingBuffers.length;
  for (let i = 0; i < count; i++) {
    const held = pendingHeld[i]!;
    if (held.state !== PENDING) continue;
    held.state = REGISTERED;
    registry.register(pendingBuffers[i]!, held, held);
  }
  pendingBuffers.length = 0;
  pendingHeld.length = 0;
}

function flushQueuedBatch(): void {
  flushQueued = false;
  registerPending();
}

setBeforeCollection(registerPending);

/**
 * A Stream recorded on live buffers: by how many, and, once it was destroyed, the driver event
 * recorded on it just before (0 while it lives), which marks the end of every piece of work it
 * was given. A raw handle rather than an `Event`, so the backstop never counts it as the program's
 * leak; it is destroyed with the entry, when the last buffer that recorded the stream lets go of it.
 */
interface Recorded {
  users: number;
  final: Handle;
}

/** Streams recorded by live buffers (`recordStream`). Only they hold an entry: the allocation stream has none. */
const recorded = new Map<Stream, Recorded>();

onStreamRetiring((stream) => {
  const entry = recorded.get(stream);
  if (entry === undefined) return;
  const { device } = stream;
  device.makeCurrent();
  entry.final = recordNewEvent(device.backend, stream.handle);
});

/** Counts one more buffer that recorded `stream` (default streams are never destroyed: not counted). */
function track(stream: StreamRef): void {
  if (!(stream instanceof Stream) || stream.isDefault) return;
  const entry = recorded.get(stream);
  if (entry === undefined) recorded.set(stream, { users: 1, final: 0 });
  else entry.users++;
}

/** A buffer lets go of `stream`; the last one destroys the stream's final event. */
function untrack(stream: StreamRef): void {
  if (!(stream instanceof Stream)) return;
  const entry = recorded.get(stream);
  if (entry === undefined || --entry.users > 0) return;
  recorded.delete(stream);
  if (entry.final === 0) return;
  stream.device.makeCurrent();
  stream.device.backend.eventDestroy(entry.final);
}

/** The event recorded as `stream` was destroyed, or 0 when it lives or no buffer recorded it. */
function finalEventOf(stream: StreamRef): Handle {
  return stream instanceof Stream ? (recorded.get(stream)?.final ?? 0) : 0;
}

/**
 * True, letting go of it, for a destroyed stream whose last work has run (a query, never a wait):
 * nothing needs to wait for it any more.
 */
function finished(stream: StreamRef): boolean {
  const final = finalEventOf(stream);
  if (final === 0 || !isDestroyed(stream)) return false;
  const { device } = stream as Stream;
  device.makeCurrent();
  if (!device.backend.eventQuery(final)) return false;
  untrack(stream);
  return true;
}

/**
 * Views -> the buffer that owns their memory. An ephemeron: an entry keeps the buffer alive exactly
 * as long as its key is reachable. The key is the ArrayBuffer over native memory (so every
 * TypedArray over it, however derived, keeps the buffer), or, where the backend itself holds the
 * ArrayBuffer as JavaScript memory (the emulated backend), each TypedArray `view()` returned: an
 * entry keyed by a buffer the backend holds would keep the owner alive forever.
 */
const viewOwners = new WeakMap<ArrayBuffer | ArrayBufferView, Allocation>();

/**
 * Records the JavaScript stack of every allocation made while on, so a leak report says where the
 * leaked memory came from. Off by default: capturing a stack costs microseconds.
 * @param enabled Whether to capture from now on.
 * @throws Never.
 * @example
 * ```ts
 * captureAllocationStacks(true);
 * onLeak((leak) => console.warn(leak.stack));
 * ```
 */
export function captureAllocationStacks(enabled: boolean): void {
  captureStacks = enabled;
}

/**
 * Options of `free()`.
 *
 * @example
 * ```ts
 * buf.free({ stream: consumer }); // reusable by work queued on `consumer` from here on
 * ```
 */
export interface FreeOptions {
  /**
   * Free on this stream instead of the allocation stream: the memory may be handed out again for
   * work queued on it after this point. Work on the allocation stream and on every recorded stream
   * is waited for first, on the device.
   */
  readonly stream?: StreamRef;
}

/** A buffer as `JSON.stringify` writes it (`Allocation.toJSON`). */
export interface BufferJSON {
  /** The class: `DeviceBuffer`, `HostBuffer`, `ManagedBuffer`, ... */
  readonly type: string;
  /** The size in bytes. */
  readonly byteLength: number;
  /** True once freed. */
  readonly freed: boolean;
  /** `String(buffer)`. */
  readonly description: string;
}

/**
 * The base of every buffer: an address and a size that are valid until freed exactly once.
 * Subclasses pass a `release` closure that returns the memory where it came from; it must not
 * capture the buffer (build it in a static factory, not in the constructor).
 * @example
 * ```ts
 * function release(all: readonly Allocation[]): void { for (const a of all) a.free(); }
 * ```
 */
export abstract class Allocation {
  /** Fixed, but for spillable memory from a resource without virtual memory, which moves on reload. */
  #ptr: Ptr;
  readonly #bytes: number;
  #freed = false;
  readonly #held: Held;
  /** The ArrayBuffer over the memory, made on the first `hostView()`. */
  #view: ArrayBuffer | undefined;
  /** True when `#view` is a native-memory ArrayBuffer tied to this buffer in `viewOwners`. */
  #viewTied = false;

  /**
   * @param ptr The address of the first byte.
   * @param byteLength The size in bytes.
   * @param release Returns the memory, on the stream it is given.
   * @param owner The device that owns the memory (for host memory, the device whose context host
   *   calls use: device 0). Its backend is the buffer's, and plain `{ handle }` stream references
   *   are taken to be its streams.
   * @param stream The stream the memory was allocated on and is freed on by default; undefined
   *   for memory allocated on no stream.
   * @param streamOrdered False when `release` is not stream-ordered (registered host memory):
   *   then `free()` waits on the host for the recorded streams instead.
   */
  protected constructor(ptr: Ptr, byteLength: number, release: Release, owner: Device, stream: StreamRef | undefined, streamOrdered = true) {
    this.#ptr = ptr;
    this.#bytes = byteLength;
    const held: Held = {
      type: new.target,
      state: PENDING,
      ptr,
      bytes: byteLength,
      stack: captureStacks ? new Error('allocated here').stack : undefined,
      release,
      owner,
      stream,
      ordered: streamOrdered,
      uses: undefined,
      holds: 0,
      deferred: undefined,
      after: undefined,
    };
    this.#held = held;
    if (pendingBuffers.length === PENDING_BATCH) registerPending();
    pendingBuffers.push(this);
    pendingHeld.push(held);
    if (!flushQueued) {
      flushQueued = true;
      queueMicrotask(flushQueuedBatch);
    }
    countAllocated(byteLength, owner, held.stack);
    if (scopeHook !== undefined) scopeHook(this);
  }

  /** The address of the first byte. Throws `UseAfterFreeError` once freed. */
  get ptr(): Ptr {
    if (this.#freed) this.#throwFreed();
    return this.#ptr;
  }

  /** The size in bytes (still readable after free, for messages). */
  get byteLength(): number {
    return this.#bytes;
  }

  /**
   * How `console.log` and `util.inspect` show the buffer: `String(buffer)`, one line (its class,
   * size, device or flags), never the internals.
   *
   * @returns The line.
   * @throws Never.
   * @example
   * ```ts
   * console.log(DeviceBuffer.allocate(1024)); // DeviceBuffer(1024 bytes on device 0)
   * ```
   */
  [inspectCustom](): string {
    return String(this);
  }

  /**
   * What `JSON.stringify` writes: the class, size, whether freed, and the `String()` line (plain
   * data: no device object, no backend).
   *
   * @returns The buffer as plain data.
   * @throws Never.
   * @example
   * ```ts
   * JSON.stringify(DeviceBuffer.allocate(1024)); // {"type":"DeviceBuffer","byteLength":1024,"freed":false,...}
   * ```
   */
  toJSON(): BufferJSON {
    return { type: this.constructor.name, byteLength: this.#bytes, freed: this.#freed, description: String(this) };
  }

  /**
   * True once `free()` has run (the vocabulary: `free` ends it, `freed` says it ended; docs/architecture.md).
   *
   * @returns Whether it ended.
   * @example
   * ```ts
   * const buf = DeviceBuffer.allocate(64);
   * buf.free();
   * buf.freed; // true
   * ```
   */
  get freed(): boolean {
    return this.#freed;
  }

  /**
   * True for memory lent to vram for reading only (a foreign device buffer wrapped with
   * `readOnly`, JavaScript memory registered with `readOnly`): vram writes nothing into it. Copies
   * and fills check it in one place (`checkWritableMemory`, buffer/copy-planning.ts), arrays and the built-in
   * operations through `DeviceArray.readOnly`, and exports say so. False for vram's own memory.
   *
   * @returns Whether writes into the memory are refused.
   * @example
   * ```ts
   * HostBuffer.register(samples, { readOnly: true }).readOnly; // true
   * ```
   */
  get readOnly(): boolean {
    return false;
  }

  /**
   * The backend that owns the memory: the owning device's, fixed when the memory was allocated.
   * Every operation on the buffer goes through it, never through a process-wide lookup.
   *
   * @returns The backend.
   * @example
   * ```ts
   * using buf = DeviceBuffer.allocate(64);
   * console.log(buf.backend.name); // 'cuda' or 'emulated'
   * ```
   */
  get backend(): Backend {
    return this.#held.owner.backend;
  }

  /**
   * The streams recorded with `recordStream` (not the allocation stream), in the order recorded;
   * empty once freed.
   *
   * @returns A copy of the list.
   * @example
   * ```ts
   * buf.recordStream(other);
   * buf.recordedStreams; // [other]
   * ```
   */
  get recordedStreams(): readonly StreamRef[] {
    return this.#held.uses === undefined ? [] : this.#held.uses.slice();
  }

  /** Throws `UseAfterFreeError` when freed; every method that touches the memory calls it. */
  protected checkLive(): void {
    if (this.#freed) this.#throwFreed();
  }

  /**
   * Says that work on `stream` uses this memory (PyTorch's `record_stream`): when the buffer is
   * freed, the freeing stream first waits for the work queued on `stream` by then, so the memory
   * is not handed to new work while `stream` still reads or writes it. Nothing waits now; the
   * cost (one event record and one stream wait per recorded stream) is paid at free time, on the
   * device. Recording a stream twice, or the allocation stream, does nothing. vram's own copies
   * and fills record their stream themselves; call it for other work (a kernel of your own).
   *
   * @param stream A live `Stream` (any device), or a `{ handle }` reference to a stream of the
   *   buffer's device.
   * @throws {UseAfterFreeError} When the buffer was freed or the stream destroyed.
   * @throws {TypeError} When `stream` is not a stream.
   * @example
   * ```ts
   * using buf = DeviceBuffer.allocate(n, { stream: a, resource: pool });
   * kernel.launch({ grid, block, stream: b }, buf.ptr, n); // b's kernel reads the buffer
   * buf.recordStream(b);
   * buf.free();                                            // on a, after b's kernel: no host wait
   * ```
   */
  recordStream(stream: StreamRef): void {
    this.checkLive();
    const s = checkStream(stream, 'recordStream');
    const held = this.#held;
    if (held.stream !== undefined && sameStream(s, held.stream, held.owner)) return;
    if (held.uses === undefined) {
      held.uses = [s];
      track(s);
      return;
    }
    for (const used of held.uses) if (sameStream(used, s, held.owner)) return;
    // Copies record every stream they run on: a long-lived buffer copied on one short-lived stream
    // after another would keep them all. Those destroyed whose work has run are forgotten.
    if (held.uses.some(isDestroyed)) held.uses = held.uses.filter((u) => !finished(u));
    held.uses.push(s);
    track(s);
  }

  /**
   * Returns the memory to where it came from, in stream order: on `options.stream` when given,
   * else on the allocation stream (else, for memory allocated on no stream, on the first recorded
   * stream). Before that, the freeing stream is made to wait for the work queued so far on the
   * allocation stream and on every recorded stream (an event each and `cuStreamWaitEvent`: the
   * host does not wait; a recorded stream destroyed in the meantime is waited for through the event
   * recorded as it was destroyed). Where that cannot be done on the device (registered host memory,
   * whose release is not stream-ordered, or an allocation stream destroyed before a
   * `free({ stream })`: its device is synchronised), the host waits for that work instead. A second call throws `DoubleFreeError`; any other use
   * afterwards throws `UseAfterFreeError`. Views of the memory must not be used afterwards.
   *
   * @param options `stream`: free on this stream instead of the allocation stream.
   * @throws {DoubleFreeError} When already freed.
   * @throws {TypeError} When `options` is not an object or `options.stream` not a stream.
   * @throws {UseAfterFreeError} When `options.stream` was destroyed, or, without it, the stream
   *   the memory is returned on (its allocation stream) was and the resource needs a live one:
   *   nothing is freed then, and `free({ stream })` with a live stream frees it.
   * @example
   * ```ts
   * const buf = DeviceBuffer.allocate(n, { stream: producer, resource: pool });
   * buf.recordStream(consumer);
   * buf.free({ stream: consumer }); // reusable by work queued on consumer from here on
   * ```
   */
  free(options?: FreeOptions): void {
    if (this.#freed) {
      throw new DoubleFreeError(`${this.constructor.name} of ${this.#bytes} bytes was already freed`);
    }
    let stream: StreamRef | undefined;
    if (options !== undefined) {
      options = readOptions(`${this.constructor.name}.free`, options, { stream: true });
      if (options.stream !== undefined) stream = checkStream(options.stream, 'free');
    }
    // Released first (or put off behind the copies that hold the memory), marked after: a release
    // that throws (its stream was destroyed) changes nothing, so the buffer is not lost to the pool
    // that still counts it live.
    const held = this.#held;
    if (held.holds > 0) held.deferred = { stream };
    else releaseHeld(held, stream);
    this.#freed = true;
    this.#view = undefined;
    this.#viewTied = false;
    if (held.state === REGISTERED) registry.unregister(held);
    held.state = RELEASED;
    countReleased(held.bytes, held.stack, true);
  }

  /** `using buf = ...` frees at the end of the scope (a no-op when already freed). */
  [Symbol.dispose](): void {
    if (!this.#freed) this.free();
  }

  /**
   * A TypedArray over `length` elements from `byteOffset` of the memory, for `view()` of
   * host-accessible memory (one ArrayBuffer per buffer, made through the owner's backend). The view
   * keeps this buffer alive: the backstop cannot free memory under a reachable view. An explicit
   * `free()` can, and is the caller's to order: views used after it read and write memory that
   * was unmapped (a crash) or handed out again (another buffer's data).
   *
   * @param Type The TypedArray class.
   * @param byteOffset Checked by the caller (`viewRange`).
   * @param length Checked by the caller.
   * @returns The view, tied to this buffer.
   * @throws {UseAfterFreeError} When freed.
   */
  protected hostView<T extends ArrayBufferView>(
    Type: new (buffer: ArrayBuffer, byteOffset?: number, length?: number) => T,
    byteOffset: number,
    length: number,
  ): T {
    if (this.#freed) this.#throwFreed();
    if (this.#view === undefined) {
      const backend = this.backend;
      const buffer = backend.hostView(this.#ptr, this.#bytes);
      // A fresh ArrayBuffer per call is a view of native memory (koffi's): tie it, and with it
      // every view ever made over it. A backend that hands out the same ArrayBuffer again holds it
      // itself as JavaScript memory (the emulated backend): it cannot dangle, and tying it would
      // keep this buffer alive as long as the backend holds the memory, that is, forever.
      if (backend.hostView(this.#ptr, this.#bytes) !== buffer) {
        viewOwners.set(buffer, this);
        this.#viewTied = true;
      }
      this.#view = buffer;
    }
    const view = new Type(this.#view, byteOffset, length);
    // Untied memory: each view returned keeps the buffer (views derived from its `.buffer` do not,
    // but over JavaScript memory they cannot crash either).
    if (!this.#viewTied) viewOwners.set(view, this);
    return view;
  }

  #throwFreed(): never {
    throw new UseAfterFreeError(`${this.constructor.name} of ${this.#bytes} bytes was used after free`);
  }

  static {
    heldOf = (allocation) => {
      allocation.checkLive();
      return allocation.#held;
    };
    addressOfLive = (allocation) => {
      if (allocation.#freed) allocation.#throwFreed();
      return allocation.#ptr;
    };
    setAddress = (allocation, ptr) => {
      allocation.#ptr = ptr;
      allocation.#held.ptr = ptr;
    };
  }
}

/**
 * Keeps `allocation`'s memory from being given back until the returned function is called: for
 * an asynchronous copy that queues work on the memory after the call that started it (a staged
 * copy's later chunks). A `free()` in the meantime marks the buffer freed at once (every later use
 * throws `UseAfterFreeError`) and returns the memory when the last hold ends, on the stream it
 * named, behind the streams recorded on the buffer by then. While held, the buffer stays
 * reachable, so the garbage-collection backstop cannot free it either. Ending a hold twice does
 * nothing. A deferred free that fails (the stream it named was destroyed meanwhile, say) cannot
 * throw to its caller, who has returned: it is a warning (code VRAM_DEFERRED_FREE).
 *
 * @internal
 * @param allocation A live buffer.
 * @returns Ends the hold; call it once the copy has settled, also when it failed.
 * @throws {UseAfterFreeError} When the buffer was freed already.
 * @example
 * ```ts
 * const done = holdMemory(buf);
 * try { await copyPageableAsync(copy, stream); } finally { done(); }
 * ```
 */
export function holdMemory(allocation: Allocation): () => void {
  const held = heldOf(allocation);
  held.holds++;
  let holding: Allocation | undefined = allocation; // reachable while the copy can end the hold
  return () => {
    if (holding === undefined) return;
    holding = undefined;
    held.holds--;
    const deferred = held.deferred;
    if (held.holds > 0 || deferred === undefined) return;
    held.deferred = undefined;
    // A stream the free named and the program destroyed since: free as if none had been named
    // (the allocation stream, ordered behind every recorded one), rather than not at all.
    const stream = deferred.stream !== undefined && isDestroyed(deferred.stream) ? undefined : deferred.stream;
    try {
      releaseHeld(held, stream);
    } catch (error) {
      process.emitWarning(
        `${held.type.name} of ${held.bytes} bytes, freed while a copy used it, could not be given back when the copy ended: ` +
          (error instanceof Error ? error.message : String(error)),
        { code: 'VRAM_DEFERRED_FREE' },
      );
    }
  };
}

/**
 * The address of a live allocation as vram's own operations read it: what `ptr` returns, without
 * what a subclass's `ptr` getter does for foreign code (a spillable buffer's getter brings the
 * memory back and counts it as written; vram's operations have done the right part of that
 * already, ordered on their stream).
 *
 * @internal
 * @param allocation A buffer.
 * @returns Its address.
 * @throws {UseAfterFreeError} When freed.
 */
export function addressOf(allocation: Allocation): Ptr {
  return addressOfLive(allocation);
}

/**
 * Moves a live allocation to `ptr`: a spillable buffer whose resource cannot keep its address
 * (no virtual memory) gets new memory on each reload. Its release reads the address it frees from
 * its own bookkeeping, so only what the buffer reports changes here.
 *
 * @internal
 * @param allocation A live device buffer.
 * @param ptr Its new address.
 */
export function moveAllocation(allocation: Allocation, ptr: Ptr): void {
  setAddress(allocation, ptr);
}

/**
 * True while a copy holds the allocation (`holdMemory`): its later chunks are not queued yet, so
 * no stream order covers them and the memory must stay where it is (a spill waits for the copy).
 *
 * @internal
 * @param allocation A live buffer.
 * @returns Whether a copy in flight holds it.
 * @throws {UseAfterFreeError} When the buffer was freed.
 */
export function heldByCopies(allocation: Allocation): boolean {
  return heldOf(allocation).holds > 0;
}

/**
 * Makes `target` wait, on the device, for the work queued so far on every stream that used
 * `allocation` (its allocation stream and the recorded ones, a destroyed one through its last
 * event), as a free does: a spilled buffer's copy out is queued after them this way.
 *
 * @internal
 * @param allocation A live, stream-ordered buffer.
 * @param target A live stream of the buffer's device.
 * @throws {UseAfterFreeError} When the buffer was freed.
 */
export function waitForUsesOn(allocation: Allocation, target: Stream): void {
  waitForUses(heldOf(allocation), target, undefined);
}

/**
 * Checks a stream argument: a live Stream, or an object with a numeric handle.
 * `what` names the method for the message.
 */
function checkStream(stream: unknown, what: string): StreamRef {
  if (stream instanceof Stream) {
    if (stream.destroyed) throw new UseAfterFreeError(`${what}: the stream was destroyed`);
    return stream;
  }
  if (stream === undefined || stream === null || typeof stream !== 'object') {
    throw new TypeError(`${what}: stream must be a Stream or an object with a numeric handle, got ${stream === null ? 'null' : typeof stream}`);
  }
  streamHandleOf(stream as StreamRef); // TypeError (or RangeError) for a malformed handle
  return stream as StreamRef;
}

/**
 * True for a destroyed Stream, and for a raw handle (`{ handle }`) that no live stream has any
 * longer (destroyed where vram could not see it, after it was recorded): neither can be given to
 * the driver again, so their work is waited for as a destroyed stream's is.
 */
function isDestroyed(stream: StreamRef): boolean {
  if (stream instanceof Stream) return stream.destroyed;
  // One backend serves every device of a process: device 0's knows every stream.
  return stream.handle !== 0 && !Device.get(0).backend.streamKnown(stream.handle);
}

/** The device a stream belongs to: a Stream's own, else (a plain `{ handle }`) the owner's. */
function deviceOf(stream: StreamRef, owner: Device): Device {
  return stream instanceof Stream ? stream.device : owner;
}

/**
 * True when `a` and `b` name the same stream: the same object, or the same handle on the same
 * device (handle 0 is each context's own legacy stream). A destroyed Stream equals only itself:
 * its handle may have been given to a new stream since.
 */
function sameStream(a: StreamRef, b: StreamRef, owner: Device): boolean {
  if (a === b) return true;
  if (isDestroyed(a) || isDestroyed(b)) return false;
  return deviceOf(a, owner) === deviceOf(b, owner) && a.handle === b.handle;
}

/**
 * Frees what `held` describes on `freeStream` (else its allocation stream, else its first recorded
 * stream still alive: copies record their streams, which programs often destroy before freeing,
 * else, for stream-ordered memory whose recorded streams were all destroyed, the legacy default
 * stream, where a release on no stream goes anyway), after ordering that stream behind every other
 * stream that used the memory. The common case (no recorded stream, no other freeing stream) goes
 * straight to `release`.
 */
function releaseHeld(held: Held, freeStream: StreamRef | undefined): void {
  const uses = held.uses;
  let target = freeStream ?? held.stream;
  if (target === undefined && uses !== undefined) {
    target = uses.find((s) => !isDestroyed(s)) ?? (held.ordered ? defaultStream : undefined);
  }
  if (uses !== undefined || (freeStream !== undefined && (held.stream !== undefined || !held.ordered))) {
    waitForUses(held, target, freeStream);
  }
  const release = held.release;
  if (typeof release === 'function') release(target);
  else release.deallocate(held.ptr, held.bytes, target);
  // The streams need not stay alive with a freed buffer (after the release: one that throws changes nothing).
  held.uses = undefined;
  if (uses !== undefined) for (const used of uses) untrack(used);
  const after = held.after;
  if (after !== undefined) {
    held.after = undefined;
    for (const run of after) run();
  }
}

/**
 * Runs `run` once `allocation`'s memory has gone back (its `free()`, the end of its `using`
 * scope, or the garbage-collection backstop), after the release: what was made for the memory's
 * sake and must not outlive it (the descriptors an IPC export keeps open for importers) goes too.
 *
 * @param allocation A live allocation.
 * @param run Called once, with no arguments; it must not throw.
 * @throws {UseAfterFreeError} When `allocation` was freed.
 * @example
 * ```ts
 * afterRelease(buf, () => closeFd(fd));
 * ```
 */
export function afterRelease(allocation: Allocation, run: () => void): void {
  const held = heldOf(allocation); // UseAfterFreeError once freed
  (held.after ??= []).push(run);
}

/**
 * Makes `target` wait, on the device, for the work queued so far on every stream that used the
 * memory: the allocation stream and the recorded ones (a destroyed one through the event recorded
 * as it was destroyed). Where that is impossible the host waits: for everything when the target
 * was destroyed or the release is not stream-ordered, and for an allocation stream destroyed with
 * no event to mark its work (its device is synchronised: buffers do not count their allocation
 * stream, which keeps allocation free of bookkeeping).
 */
function waitForUses(held: Held, target: StreamRef | undefined, freeStream: StreamRef | undefined): void {
  const owner = held.owner;
  const onDevice = held.ordered && target !== undefined && !isDestroyed(target);
  let synchronized: Set<Device> | undefined;
  /** Waits for `event` (of `device`): `target` on the device, else the host. */
  const wait = (event: Handle, device: Device): void => {
    const waiter = onDevice ? deviceOf(target!, owner) : device;
    waiter.makeCurrent();
    if (onDevice) waiter.backend.streamWaitEvent(target!.handle, event);
    else waiter.backend.eventSynchronize(event);
  };
  const after = (used: StreamRef): void => {
    if (onDevice && sameStream(used, target, owner)) return;
    const device = deviceOf(used, owner);
    if (isDestroyed(used)) {
      const final = finalEventOf(used);
      if (final !== 0) wait(final, device);
      else if (synchronized?.has(device) !== true) {
        device.synchronize();
        (synchronized ??= new Set()).add(device);
      }
      return;
    }
    const event = Event.create({ device, timing: false });
    try {
      event.record(used);
      wait(event.handle, device);
    } finally {
      // Safe while the wait is pending: the driver keeps what a queued wait needs.
      event.destroy();
    }
  };
  if (held.stream !== undefined) after(held.stream);
  if (held.uses !== undefined) for (const used of held.uses) after(used);
  // Memory released off the device's order also waits for the stream it was freed "on".
  if (!held.ordered && freeStream !== undefined) after(freeStream);
}
