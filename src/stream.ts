/**
 * Streams and events. A stream is an ordered queue of device work; an event marks a point in it.
 * Everything here is explicit: `synchronize()` blocks the thread, `synchronized()` returns a promise
 * that polls without ever blocking the event loop, and nothing synchronises behind the caller's back.
 */
import { guard, unguard, type Dropped } from './backstop.js';
import { DEFAULT_STREAM, EventFlags, StreamFlags, type Handle } from './backend/backend.js';
import { checkIpcHandle } from './backend/argument-checks.js';
import { Device } from './device.js';
import { DoubleFreeError, NotSupportedError, StreamCaptureError, UseAfterFreeError, VramStateError } from './errors.js';
import { checkLiveStreamHandle, checkStreamHandle } from './validate.js';
import { setImmediate as nextTurn, setTimeout as sleep } from 'node:timers/promises';
import { readOptions } from './util/options.js';
import { inspectCustom } from './util/inspect.js';
import { Graph } from './graphs/graph.js';
import {
  CAPTURE_MODES,
  CaptureSession,
  abandonCapture,
  captureError,
  captureSessionOf,
  endSession,
  joinSession,
  refuseDuringCapture,
  startSession,
  type CaptureModeName,
  type CapturePool,
  type CaptureStatusName,
} from './graphs/sessions.js';

/** A `synchronized()` in progress: it waits for the host functions up to `through`, and rejects with the first error of one. */
interface HostFunctionWait {
  readonly through: number;
  error: { readonly error: unknown } | undefined;
}

/** Options of `stream.beginCapture()`. */
export interface CaptureOptions {
  /** Which calls the capture forbids: `'global'` (default), `'thread-local'` or `'relaxed'` (see CaptureModeName). */
  readonly mode?: CaptureModeName;
  /**
   * The capture-private pool allocations during the capture come from (resources other than
   * AsyncResource): a `GraphPool` shared with other graphs that never run at the same time, as
   * PyTorch's `torch.cuda.graph(pool=...)`. Default: a pool of the graph's own.
   */
  readonly pool?: CapturePool;
}

/** Options for `Stream.create`. */
export interface StreamOptions {
  /** The device whose active context owns the stream (device 0 by default). */
  readonly device?: Device | number;
  /** Do not synchronise with the legacy default stream (CU_STREAM_NON_BLOCKING). */
  readonly nonBlocking?: boolean;
  /**
   * Scheduling priority, in the backend's `streamPriorityRange()` (numerically smaller is higher;
   * 0 is the default priority).
   */
  readonly priority?: number;
}

/**
 * Polls `done` until it returns true without blocking the event loop: on setImmediate for the
 * first millisecond (each round lets I/O and timers run, and adds microseconds, not a timer tick,
 * to a short wait), then on timers backing off to 4 ms, so a long wait costs almost no CPU.
 * Measured on an H100 machine: a staged 1 GiB async copy that waits on a DMA event per 8 MiB chunk
 * ran at 6 GB/s when polling moved to 1 ms timers after 32 rounds (about 0.1 ms), the wait of
 * nearly every chunk costing a timer tick.
 */
export async function pollUntil(done: () => boolean): Promise<void> {
  if (done()) return;
  const spinUntil = performance.now() + 1;
  while (performance.now() < spinUntil) {
    await nextTurn();
    if (done()) return;
  }
  let delayMs = 1;
  while (!done()) {
    await sleep(delayMs);
    delayMs = Math.min(delayMs * 2, 4);
  }
}

/** The driver's marker handles for the legacy and the per-thread default stream. */
const CU_STREAM_LEGACY = 1;
const CU_STREAM_PER_THREAD = 2;

/** Anything with a stream handle: a `Stream`, or `{ handle: 0 }` for the default stream. */
export interface StreamRef {
  readonly handle: number;
}

/**
 * The legacy default stream as a bare StreamRef, what the library passes where a stream was left out.
 * Not exported by the package: users name that stream `Stream.default()`.
 */
export const defaultStream: StreamRef = Object.freeze({ handle: 0 });

/**
 * Told just before a `Stream` is destroyed, or before vram stops using a borrowed one
 * (`Stream.fromHandle`, whose owner may destroy it at any time after). Resources that cache
 * memory freed on a stream keep per-stream state keyed by its handle; a destroyed stream's handle
 * must never be used again (the driver may crash on it, or hand the same value to a new stream),
 * so they retire that state while the stream still exists (see `StreamOrder.retire`).
 */
export interface StreamWatcher {
  /** Called with the handle of a stream about to be destroyed; it is still valid during the call. */
  streamDestroying(handle: number): void;
}

/** Watchers, held weakly: a resource dropped without `destroy()` must still be collectable. */
const watchers = new Set<WeakRef<StreamWatcher>>();

/**
 * Registers `watcher` to be told before any `Stream` is destroyed.
 *
 * @param watcher The object to notify (held weakly).
 * @returns A function that unregisters it.
 * @example
 * ```ts
 * const unwatch = watchStreamDestroy({ streamDestroying: (h) => console.log('stream', h, 'ends') });
 * unwatch();
 * ```
 * @throws Never.
 */
export function watchStreamDestroy(watcher: StreamWatcher): () => void {
  const ref = new WeakRef(watcher);
  watchers.add(ref);
  return () => {
    watchers.delete(ref);
  };
}

function notifyStreamDestroying(handle: number): void {
  for (const ref of watchers) {
    const watcher = ref.deref();
    if (watcher === undefined) watchers.delete(ref);
    else watcher.streamDestroying(handle);
  }
}

/** See `onStreamRetiring`. */
let retiring: ((stream: Stream) => void) | undefined;

/**
 * Sets the function told, with the Stream object, just before `destroy()` ends it, while its
 * handle still works: lifetime.ts records one last event there, so that buffers which recorded the
 * stream can still be freed in stream order behind its work. A hook that throws leaves the stream
 * alive. The backstop of a collected Stream does not call it: a buffer that recorded a stream keeps
 * it reachable until freed.
 *
 * @internal
 * @param hook The function (one; a later call replaces it).
 */
export function onStreamRetiring(hook: (stream: Stream) => void): void {
  retiring = hook;
}

/**
 * Destroys a driver stream, telling the watchers first; what `Stream.destroy()` and the backstop
 * of a collected Stream both do, so a dropped stream ends exactly as a destroyed one.
 */
function endStream(device: Device, raw: Handle): number {
  device.makeCurrent();
  // A capture never outlives its stream (it would refuse every later synchronous call).
  abandonCapture(device.backend, raw);
  notifyStreamDestroying(raw);
  device.backend.streamDestroy(raw);
  return 0;
}

/**
 * Ends vram's use of a borrowed stream (`Stream.fromHandle`), what its `destroy()` and its
 * backstop both do: the watchers retire what they cached on it while the handle is still valid,
 * then the backend stops vouching for it. The driver stream lives on: its owner destroys it.
 * Returns null: a borrowed stream collected undestroyed held nothing of vram's, so it is no leak.
 */
function endBorrowedStream(device: Device, raw: Handle): null {
  device.makeCurrent();
  abandonCapture(device.backend, raw);
  notifyStreamDestroying(raw);
  device.backend.forgetStream(raw);
  return null;
}

/** Destroys a driver event (`Event.destroy()` and the backstop of a collected Event). */
function endEvent(device: Device, raw: Handle): number {
  device.makeCurrent();
  device.backend.eventDestroy(raw);
  return 0;
}

/** Options for `Stream.fromHandle`. */
export interface BorrowedStreamOptions {
  /** The device whose context the stream belongs to (device 0 by default). */
  readonly device?: Device | number;
}

/**
 * A CUDA stream: work queued on it runs in order; different streams may run concurrently. A
 * stream dropped without `destroy()` is destroyed when it is collected and counted as a leak
 * (`leakStatistics()`); buffers allocated or recorded on it keep it alive until they are freed.
 * A stream borrowed with `Stream.fromHandle` is never destroyed by vram (see there).
 * @example
 * ```ts
 * using stream = Stream.create({ nonBlocking: true });
 * buf.copyFromHost(data, { stream });
 * await stream.synchronized();
 * ```
 */
export class Stream implements StreamRef {
  static readonly #defaults = new Map<Device, Stream>();
  #destroyed = false;
  /** Host functions queued on this stream outside a capture so far (`launchHostFunc`). */
  #hostFunctions = 0;
  /** The `synchronized()` calls in progress: how many host functions each waits for, and the first error of one. */
  readonly #awaiting = new Set<HostFunctionWait>();
  /** What the backstop ends if this stream is collected undestroyed; undefined for the default stream. */
  readonly #dropped: Dropped | undefined;

  private constructor(
    private readonly raw: Handle,
    /** The device the stream belongs to. */
    readonly device: Device,
    /** Its scheduling priority (0 for the default stream). */
    readonly priority: number,
    /** True when it does not synchronise with the legacy default stream. */
    readonly nonBlocking: boolean,
    /** True for a stream created elsewhere and borrowed with `Stream.fromHandle`. */
    readonly borrowed = false,
  ) {
    if (raw === DEFAULT_STREAM) return;
    this.#dropped = borrowed
      ? { kind: 'Stream', ptr: raw, release: () => endBorrowedStream(device, raw) }
      : { kind: 'Stream', ptr: raw, release: () => endStream(device, raw) };
    guard(this, this.#dropped);
  }

  /**
   * Creates a stream on `device` (device 0 by default). Destroy it with `destroy()` or `using`.
   * @throws {TypeError} When an option is unknown or of the wrong type.
   * @throws {RangeError} When `priority` is outside the device's range.
   * @throws {CudaError} When the driver cannot create the stream.
   * @example
   * ```ts
   * using stream = Stream.create({ device: Device.get(1), priority: -1 });
   * ```
   */
  static create(options: StreamOptions = {}): Stream {
    options = readOptions('Stream.create', options, { device: true, nonBlocking: true, priority: true });
    const device = Device.resolve(options.device);
    const nonBlocking = options.nonBlocking ?? false;
    if (typeof nonBlocking !== 'boolean') throw new TypeError('nonBlocking must be a boolean');
    const priority = options.priority ?? 0;
    if (typeof priority !== 'number') throw new TypeError(`priority must be a number, got ${typeof priority}`);
    device.makeCurrent();
    const [least, greatest] = device.backend.streamPriorityRange();
    const low = Math.min(least, greatest);
    const high = Math.max(least, greatest);
    if (!Number.isInteger(priority) || priority < low || priority > high) {
      throw new RangeError(`priority must be a whole number from ${greatest} (highest) to ${least} (lowest), got ${priority}`);
    }
    const flags = nonBlocking ? StreamFlags.NON_BLOCKING : StreamFlags.DEFAULT;
    return new Stream(device.backend.streamCreate(flags, priority), device, priority, nonBlocking);
  }

  /**
   * Borrows a stream that vram did not create (a PyTorch or CuPy stream's handle, a native
   * addon's CUstream), as cuda.core's `Stream.from_handle` and CuPy's `ExternalStream` do, so
   * resources, copies and kernels can use it like any `Stream` (a raw `{ handle }` of it is
   * refused, since nothing vouches that it is live). vram never destroys it: `destroy()` only
   * ends vram's use of it (caching resources retire what they hold on it, and the backend stops
   * accepting its raw handle), and a borrowed Stream collected without `destroy()` does the same
   * and is not counted as a leak. Call `destroy()` before the stream's owner destroys it.
   *
   * On the cuda backend the handle cannot be checked (asking the driver about an invalid one may
   * crash the process): the caller vouches that it is a live stream of `device`'s context. The
   * emulated backend refuses a handle that names none of its streams. Its `nonBlocking` and
   * `priority` are read from the driver (cuStreamGetFlags, cuStreamGetPriority).
   *
   * @param handle The CUstream as a number; 0 gives the legacy default stream, `Stream.default(device)`.
   * @param options `device`: the device whose context owns the stream (device 0 by default).
   * @returns A Stream that borrows the handle (`borrowed` is true), or the default stream for 0.
   * @throws {TypeError} When `handle` is not a number, or the options are not an options object.
   * @throws {RangeError} When `handle` is not a whole number >= 0 in the safe range, or is 1 or 2
   *   (CU_STREAM_LEGACY, CU_STREAM_PER_THREAD: markers, not streams).
   * @throws {CudaError} When the driver refuses the handle (on the emulated backend: no such stream).
   * @example
   * ```ts
   * const s = Stream.fromHandle(torchStream.cuda_stream); // the number another library gave
   * const buf = DeviceBuffer.allocate(1 << 20, { stream: s });
   * buf.free();
   * s.destroy(); // vram is done with it; the other library still owns the stream
   * ```
   */
  static fromHandle(handle: number, options: BorrowedStreamOptions = {}): Stream {
    options = readOptions('Stream.fromHandle', options, { device: true });
    if (typeof handle !== 'number') throw new TypeError(`Stream.fromHandle: handle must be a number, got ${typeof handle}`);
    if (!Number.isSafeInteger(handle) || handle < 0) {
      throw new RangeError(`Stream.fromHandle: handle must be a whole number from 0 to 2^53 - 1, got ${handle}`);
    }
    if (handle === CU_STREAM_LEGACY || handle === CU_STREAM_PER_THREAD) {
      throw new RangeError(
        `Stream.fromHandle: handle ${handle} is CU_STREAM_${handle === CU_STREAM_LEGACY ? 'LEGACY' : 'PER_THREAD'}, ` +
          'a marker rather than a stream: give 0 for the legacy default stream',
      );
    }
    const device = Device.resolve(options.device);
    if (handle === DEFAULT_STREAM) return Stream.default(device);
    device.makeCurrent();
    const { backend } = device;
    // Read before adopting, so a refused handle leaves the backend as it was.
    const nonBlocking = (backend.streamGetFlags(handle) & StreamFlags.NON_BLOCKING) !== 0;
    const priority = backend.streamGetPriority(handle);
    backend.adoptStream(handle);
    return new Stream(handle, device, priority, nonBlocking, true);
  }

  /**
   * The legacy default stream (handle 0) of `device`; it is never destroyed.
   * @throws {TypeError} When `device` is neither a Device nor an ordinal.
   * @throws {RangeError} When the ordinal is out of range.
   * @example
   * ```ts
   * const legacy = Stream.default(); // handle 0
   * ```
   */
  static default(device?: Device): Stream {
    const dev = Device.resolve(device);
    let stream = Stream.#defaults.get(dev);
    if (stream === undefined) {
      stream = new Stream(DEFAULT_STREAM, dev, 0, false);
      Stream.#defaults.set(dev, stream);
    }
    return stream;
  }

  /** The driver's handle (CUstream); 0 for the default stream. */
  get handle(): Handle {
    if (this.#destroyed) throw new UseAfterFreeError('the stream was destroyed');
    return this.raw;
  }

  /** True for the legacy default stream. */
  get isDefault(): boolean {
    return this.raw === DEFAULT_STREAM;
  }

  /**
   * True once `destroy()` has run (the vocabulary: `destroy` ends it, `destroyed` says it ended; docs/architecture.md).
   *
   * @returns Whether it ended.
   * @example
   * ```ts
   * const s = Stream.create();
   * s.destroy();
   * s.destroyed; // true
   * ```
   */
  get destroyed(): boolean {
    return this.#destroyed;
  }

  /**
   * Records `event` (a new timing-capable event when omitted) at the current end of the stream
   * and returns it.
   * @throws {TypeError} When `event` is not an Event.
   * @throws {UseAfterFreeError} When the stream or the event was destroyed.
   * @example
   * ```ts
   * const done = stream.record();
   * other.waitEvent(done);
   * ```
   */
  record(event?: Event): Event {
    if (event !== undefined && !(event instanceof Event)) throw new TypeError('record expects an Event');
    void this.handle; // throws UseAfterFreeError before an event is created for a destroyed stream
    const ev = event ?? Event.create({ device: this.device });
    ev.record(this);
    return ev;
  }

  /**
   * Makes work queued on this stream from now on wait until `event` has completed; does not block.
   * @throws {TypeError} When `event` is not an Event.
   * @throws {UseAfterFreeError} When the stream or the event was destroyed.
   * @example
   * ```ts
   * consumer.waitEvent(producer.record());
   * ```
   */
  waitEvent(event: Event): this {
    if (!(event instanceof Event)) throw new TypeError('waitEvent expects an Event');
    const handle = this.handle;
    this.device.makeCurrent();
    this.device.backend.streamWaitEvent(handle, event.handle);
    // Waiting for an event recorded in a capture joins this stream into it, as the driver does.
    const session = event.captureSession;
    if (session !== undefined && captureSessionOf(session.origin) === session && captureSessionOf(handle) === undefined) {
      joinSession(session, handle, !this.nonBlocking);
    }
    return this;
  }

  /**
   * True when all work queued so far has completed; never blocks.
   * @throws {UseAfterFreeError} When the stream was destroyed.
   * @throws {CudaError} When queued work failed.
   * @example
   * ```ts
   * if (stream.query()) console.log('idle');
   * ```
   */
  query(): boolean {
    const handle = this.handle;
    if (captureSessionOf(handle) !== undefined) throw new StreamCaptureError('stream.query()', `stream ${handle} is capturing: its work is recorded, not run`);
    this.device.makeCurrent();
    return this.device.backend.streamQuery(handle);
  }

  /**
   * Starts capturing: work queued on this stream from now on (copies, fills, kernel launches,
   * built-in ops, host functions, allocations) is recorded into a graph instead of run, until
   * `endCapture()`. Another stream that waits for an event recorded here joins the capture, and
   * must be joined back (this stream waits for an event recorded there) before the end.
   * Allocations on a capturing stream come from AsyncResource's pool as graph memory nodes, or
   * from a capture-private pool for every other resource (`options.pool`, see GraphPool).
   * While the capture lasts, what cannot be captured throws StreamCaptureError before reaching
   * the driver: a synchronous copy from JavaScript memory, a host wait, `synchronize()`, an
   * allocation from CudaResource (cuMemAlloc), a reduction read back to the host.
   * @param options `mode` (`'global'` by default) and `pool`.
   * @returns This stream.
   * @throws {TypeError} For an unknown option or mode.
   * @throws {StreamCaptureError} On the default stream (the legacy stream cannot be captured), or when this stream is already capturing.
   * @throws {UseAfterFreeError} When the stream was destroyed.
   * @example
   * ```ts
   * stream.beginCapture();
   * step(stream);
   * using graph = stream.endCapture();
   * ```
   */
  beginCapture(options: CaptureOptions = {}): this {
    options = readOptions('Stream.beginCapture', options, { mode: true, pool: true });
    const mode = options.mode ?? 'global';
    if (typeof mode !== 'string' || !Object.hasOwn(CAPTURE_MODES, mode)) {
      throw new TypeError(`beginCapture: mode must be 'global', 'thread-local' or 'relaxed', got ${String(mode)}`);
    }
    const pool = options.pool;
    if (pool !== undefined && (typeof pool !== 'object' || pool === null || typeof pool.retain !== 'function')) {
      throw new TypeError('beginCapture: pool must be a GraphPool');
    }
    const handle = this.handle;
    if (handle === DEFAULT_STREAM)
      throw new StreamCaptureError('beginCapture()', 'the legacy default stream cannot be captured: capture a stream made with Stream.create()');
    if (captureSessionOf(handle) !== undefined) throw new StreamCaptureError('beginCapture()', `stream ${handle} is already capturing`);
    this.device.makeCurrent();
    this.device.backend.streamBeginCapture(handle, CAPTURE_MODES[mode]);
    pool?.retain();
    const session = new CaptureSession(handle, mode, this.device.ordinal, pool);
    session.blocking = !this.nonBlocking;
    startSession(session);
    return this;
  }

  /**
   * Ends the capture begun on this stream and returns what it recorded. The stream runs work
   * again; when the capture failed (a forbidden call invalidated it, a joined stream was not
   * joined back) it still ends, and the error says why.
   * @returns The graph (destroy it, or `using`).
   * @throws {StreamCaptureError} When this stream is not capturing, or the capture was invalidated or left a stream unjoined (`cause`: the driver's error).
   * @throws {UseAfterFreeError} When the stream was destroyed.
   * @example
   * ```ts
   * using graph = stream.endCapture();
   * using exec = graph.instantiate();
   * ```
   */
  endCapture(): Graph {
    const handle = this.handle;
    const session = captureSessionOf(handle);
    if (session === undefined) throw new StreamCaptureError('endCapture()', `stream ${handle} is not capturing`);
    if (session.origin !== handle)
      throw new StreamCaptureError('endCapture()', `stream ${handle} joined a capture begun on stream ${session.origin}: end it there`);
    this.device.makeCurrent();
    let raw: Handle;
    try {
      raw = this.device.backend.streamEndCapture(handle);
    } catch (error) {
      endSession(session);
      session.pool?.release();
      session.holds.release();
      throw captureError(error, 'endCapture()');
    }
    endSession(session);
    return new Graph(raw, this.device, session.pool, session.holds);
  }

  /**
   * Whether the stream is capturing (cuStreamIsCapturing): `'none'`, `'active'`, or
   * `'invalidated'` (a forbidden call invalidated the capture; `endCapture()` will fail).
   * @returns The status.
   * @throws {UseAfterFreeError} When the stream was destroyed.
   * @example
   * ```ts
   * if (stream.captureStatus === 'active') console.log('recording');
   * ```
   */
  get captureStatus(): CaptureStatusName {
    const handle = this.handle;
    this.device.makeCurrent();
    const status = this.device.backend.streamCaptureStatus(handle);
    return status === 0 ? 'none' : status === 1 ? 'active' : 'invalidated';
  }

  /**
   * Queues `fn` to run on the host when the stream reaches this point (cuLaunchHostFunc); the
   * stream's later work waits for it. Captured, it runs at every launch of the graph. Its cost:
   * the driver calls it from its own thread and JavaScript runs it on the main thread when the
   * event loop next turns, so the stream stops there until then (as long as the main thread is
   * busy, at worst; `bench/graph.ts` measures what it adds): never wait for such a stream with
   * `synchronize()` (it would never return), await `synchronized()`. `fn` must not call vram or
   * CUDA. An error it throws is an error of the stream's pending work, never an uncaught
   * exception: every `synchronized()` in progress on this stream that waits for `fn` rejects
   * with it; when none does (nothing awaits the stream, or `fn` was captured and runs at a graph's
   * launch), vram warns once for `fn` (`process.emitWarning`, code `VRAM_HOST_FUNCTION_ERROR`).
   * @param fn What to run.
   * @returns This stream.
   * @throws {TypeError} When `fn` is not a function.
   * @throws {UseAfterFreeError} When the stream was destroyed.
   * @example
   * ```ts
   * stream.launchHostFunc(() => { steps += 1; });
   * await stream.synchronized();
   * ```
   */
  launchHostFunc(fn: () => void): this {
    if (typeof fn !== 'function') throw new TypeError('launchHostFunc expects a function');
    const handle = this.handle;
    // A captured function runs at each launch of the graph, on whichever stream launches it: no
    // `synchronized()` of this stream waits for it, so its error is only warned about.
    const position = captureSessionOf(handle) === undefined ? ++this.#hostFunctions : Infinity;
    const awaiting = this.#awaiting;
    const where = String(this); // not `this`: a graph's node would keep the Stream from its backstop
    let warned = false;
    this.device.makeCurrent();
    this.device.backend.launchHostFunc(handle, () => {
      try {
        fn();
      } catch (error) {
        let claimed = false;
        for (const wait of awaiting) {
          if (wait.through >= position) {
            wait.error ??= { error };
            claimed = true;
          }
        }
        if (!claimed && !warned) {
          warned = true;
          process.emitWarning(`a host function queued on ${where} threw, and nothing awaited the stream: ${String(error)}`, {
            code: 'VRAM_HOST_FUNCTION_ERROR',
            detail: error instanceof Error ? error.stack : undefined,
          });
        }
      }
    });
    return this;
  }

  /**
   * Blocks the calling thread (and the event loop) until all queued work has completed.
   * @throws {UseAfterFreeError} When the stream was destroyed.
   * @throws {StreamCaptureError} While a capture forbids host waits (this stream capturing, or any capture in mode global or thread-local).
   * @throws {CudaError} When queued work failed.
   * @example
   * ```ts
   * stream.synchronize();
   * ```
   */
  synchronize(): void {
    const handle = this.handle;
    refuseDuringCapture('stream.synchronize()', 'a host wait cannot be captured (await stream.synchronized() after endCapture())', handle);
    this.device.makeCurrent();
    this.device.backend.streamSynchronize(handle);
  }

  /**
   * Resolves when all work queued so far has completed, polling the stream without blocking the
   * event loop. Work queued after the call is not waited for: an event marks the point.
   * @throws {UseAfterFreeError} When the stream was destroyed (the promise rejects).
   * @throws {CudaError} When queued work failed (the promise rejects).
   * @throws What a host function queued before the call threw (`launchHostFunc`; the promise rejects, once the stream got there).
   * @example
   * ```ts
   * await stream.synchronized();
   * ```
   */
  async synchronized(): Promise<void> {
    const wait: HostFunctionWait = { through: this.#hostFunctions, error: undefined };
    this.#awaiting.add(wait);
    try {
      if (!this.query()) {
        // An event pins the point to wait for, so later work on the stream does not prolong the wait.
        const event = Event.create({ device: this.device, timing: false });
        try {
          event.record(this);
          await event.synchronized();
        } finally {
          event.destroy();
        }
      }
    } finally {
      this.#awaiting.delete(wait);
    }
    if (wait.error !== undefined) throw wait.error.error;
  }

  /**
   * Destroys the stream. Work already queued still completes; the handle may not be used again.
   * The default stream is never destroyed (a no-op). A borrowed stream (`Stream.fromHandle`) is
   * not destroyed either: this Stream is done with it, and its owner still has it. A stream
   * destroyed while capturing ends the capture first (what it recorded is discarded), so no
   * capture outlives its stream.
   * @throws {DoubleFreeError} When it was already destroyed.
   * @example
   * ```ts
   * const stream = Stream.create();
   * stream.destroy();
   * ```
   */
  destroy(): void {
    if (this.#destroyed) throw new DoubleFreeError('the stream was already destroyed');
    if (this.isDefault) return;
    if (captureSessionOf(this.raw) !== undefined) {
      this.device.makeCurrent();
      abandonCapture(this.device.backend, this.raw);
    }
    retiring?.(this);
    // Resources retire what they cached on this stream while its handle is still valid.
    this.#destroyed = true;
    unguard(this.#dropped!);
    if (this.borrowed) endBorrowedStream(this.device, this.raw);
    else endStream(this.device, this.raw);
  }

  /** `using stream = Stream.create()` destroys it at the end of the scope. */
  [Symbol.dispose](): void {
    if (!this.#destroyed) this.destroy();
  }

  /**
   * A short description for logs.
   * @throws Never.
   * @example
   * ```ts
   * console.log(`${stream}`); // Stream(0x..., device 0)
   * ```
   */
  toString(): string {
    if (this.isDefault) return `Stream(default, device ${this.device.ordinal})`;
    return `Stream(${this.raw}${this.borrowed ? ', borrowed' : ''}, device ${this.device.ordinal}${this.#destroyed ? ', destroyed' : ''})`;
  }

  /**
   * How `console.log` and `util.inspect` show the stream: `String(stream)`, one line.
   *
   * @returns The line.
   * @throws Never.
   * @example
   * ```ts
   * console.log(Stream.create()); // Stream(1, device 0)
   * ```
   */
  [inspectCustom](): string {
    return this.toString();
  }

  /**
   * What `JSON.stringify` writes: the handle, the device's ordinal and the flags (plain data).
   *
   * @returns The stream as plain data.
   * @throws Never.
   * @example
   * ```ts
   * JSON.stringify(Stream.create()); // {"type":"Stream","handle":1,"device":0,...}
   * ```
   */
  toJSON(): { type: 'Stream'; handle: number; device: number; isDefault: boolean; borrowed: boolean; destroyed: boolean } {
    return {
      type: 'Stream',
      handle: Number(this.raw),
      device: this.device.ordinal,
      isDefault: this.isDefault,
      borrowed: this.borrowed,
      destroyed: this.#destroyed,
    };
  }
}

/** Options for `Event.create`. */
export interface EventOptions {
  /** The device whose active context owns the event (device 0 by default). */
  readonly device?: Device | number;
  /** Record timestamps, so `elapsedSince` works (default true, as in CUDA). Off is cheaper. */
  readonly timing?: boolean;
  /** `synchronize()` blocks on an OS primitive instead of spinning (CU_EVENT_BLOCKING_SYNC). */
  readonly blockingSync?: boolean;
  /**
   * Shareable with other processes (CU_EVENT_INTERPROCESS): `ipcHandle()` gives a handle that
   * another process opens with `Event.openIpc` to wait for this process's work. CUDA requires such
   * events to record no timing, so `timing` defaults to false and `timing: true` is a RangeError.
   */
  readonly interprocess?: boolean;
}

/**
 * A CUDA event: a marker in a stream that other streams can wait on and the host can poll. An
 * event dropped without `destroy()` is destroyed when it is collected and counted as a leak.
 * @example
 * ```ts
 * using start = Event.create(), end = Event.create();
 * start.record(stream); // ... work queued on stream ...
 * end.record(stream);
 * await end.synchronized();
 * console.log(end.elapsedSince(start), 'ms');
 * ```
 */
export class Event {
  #destroyed = false;
  #recorded = false;
  /** The capture the latest record was made in, if it was (graphs/graph.ts). */
  #captureSession: CaptureSession | undefined;
  /** What the backstop ends if this event is collected undestroyed. */
  readonly #dropped: Dropped;

  private constructor(
    private readonly raw: Handle,
    /** The device the event belongs to. */
    readonly device: Device,
    /** True when the event records timestamps. */
    readonly timing: boolean,
    /** True when other processes can wait on it (created with `interprocess`, or opened with `openIpc`). */
    readonly interprocess = false,
  ) {
    this.#dropped = { kind: 'Event', ptr: raw, release: () => endEvent(device, raw) };
    guard(this, this.#dropped);
  }

  /**
   * Creates an event; record it on a stream with `record()` or `stream.record(event)`.
   * @throws {TypeError} When an option is unknown or of the wrong type.
   * @throws {RangeError} When `interprocess` is asked with `timing: true`.
   * @throws {CudaError} When the driver cannot create the event.
   * @example
   * ```ts
   * using ev = Event.create({ timing: false, blockingSync: true });
   * ```
   */
  static create(options: EventOptions = {}): Event {
    options = readOptions('Event.create', options, { device: true, timing: true, blockingSync: true, interprocess: true });
    const device = Device.resolve(options.device);
    const interprocess = options.interprocess ?? false;
    if (typeof interprocess !== 'boolean') throw new TypeError('interprocess must be a boolean');
    const timing = options.timing ?? !interprocess;
    const blockingSync = options.blockingSync ?? false;
    if (typeof timing !== 'boolean') throw new TypeError('timing must be a boolean');
    if (typeof blockingSync !== 'boolean') throw new TypeError('blockingSync must be a boolean');
    if (interprocess && timing) {
      throw new RangeError(
        'an interprocess event records no timing (CUDA requires CU_EVENT_DISABLE_TIMING with CU_EVENT_INTERPROCESS): leave timing out or pass false',
      );
    }
    const flags =
      (timing ? EventFlags.DEFAULT : EventFlags.DISABLE_TIMING) | (blockingSync ? EventFlags.BLOCKING_SYNC : 0) | (interprocess ? EventFlags.INTERPROCESS : 0);
    device.makeCurrent();
    return new Event(device.backend.eventCreate(flags), device, timing, interprocess);
  }

  /**
   * Opens an event another process shared (`ipcHandle()` there; cuIpcOpenEventHandle), as an
   * event of `device`'s context: `stream.waitEvent(event)`, `query()` and `synchronize()` then
   * wait for the work the other process recorded it after. Destroy it as any event (the other
   * process's event lives on).
   *
   * @param handle The 64 bytes of the other process's `ipcHandle()`.
   * @param device The device whose context opens it (device 0 by default).
   * @returns The event (interprocess, no timing).
   * @throws {TypeError} When `handle` is not 64 bytes.
   * @throws {CudaError} What the driver answers for a malformed or stale handle.
   * @example
   * ```ts
   * using done = Event.openIpc(handleFromExporter);
   * stream.waitEvent(done); // this stream's later work runs after the exporter's
   * ```
   */
  static openIpc(handle: Uint8Array, device?: Device): Event {
    const dev = Device.resolve(device);
    checkIpcHandle(handle, 'Event.openIpc');
    dev.makeCurrent();
    return new Event(dev.backend.ipcOpenEventHandle(handle), dev, false, true);
  }

  /**
   * The 64-byte handle another process opens with `Event.openIpc` (cuIpcGetEventHandle). Record
   * the event after the work to be waited for, as usual; the other process sees each new record.
   *
   * @returns 64 bytes.
   * @throws {NotSupportedError} When the event was not created with `interprocess: true`.
   * @throws {UseAfterFreeError} When the event was destroyed.
   * @example
   * ```ts
   * const ev = Event.create({ interprocess: true });
   * send(Buffer.from(ev.ipcHandle()).toString('hex'));
   * ```
   */
  ipcHandle(): Uint8Array {
    const handle = this.handle;
    if (!this.interprocess) throw new NotSupportedError('this event cannot be shared with other processes: create it with { interprocess: true }');
    this.device.makeCurrent();
    return this.device.backend.ipcGetEventHandle(handle);
  }

  /** The driver's handle (CUevent). */
  get handle(): Handle {
    if (this.#destroyed) throw new UseAfterFreeError('the event was destroyed');
    return this.raw;
  }

  /**
   * True once `destroy()` has run (the vocabulary: `destroy` ends it, `destroyed` says it ended; docs/architecture.md).
   *
   * @returns Whether it ended.
   * @example
   * ```ts
   * const e = Event.create();
   * e.destroy();
   * e.destroyed; // true
   * ```
   */
  get destroyed(): boolean {
    return this.#destroyed;
  }

  /** True once the event has been recorded on a stream at least once. */
  get isRecorded(): boolean {
    return this.#recorded;
  }

  /**
   * A short description for logs: `Event(3, device 0, timing, recorded)`.
   *
   * @returns The line.
   * @throws Never.
   * @example
   * ```ts
   * String(Event.create()); // 'Event(3, device 0, timing)'
   * ```
   */
  toString(): string {
    const flags = [
      this.timing ? 'timing' : '',
      this.interprocess ? 'interprocess' : '',
      this.#recorded ? 'recorded' : '',
      this.#destroyed ? 'destroyed' : '',
    ].filter(Boolean);
    return `Event(${this.raw}, device ${this.device.ordinal}${flags.length > 0 ? `, ${flags.join(', ')}` : ''})`;
  }

  /**
   * How `console.log` and `util.inspect` show the event: `String(event)`, one line.
   *
   * @returns The line.
   * @throws Never.
   * @example
   * ```ts
   * console.log(Event.create()); // Event(3, device 0, timing)
   * ```
   */
  [inspectCustom](): string {
    return this.toString();
  }

  /**
   * What `JSON.stringify` writes: the handle, the device's ordinal and the flags (plain data).
   *
   * @returns The event as plain data.
   * @throws Never.
   * @example
   * ```ts
   * JSON.stringify(Event.create()); // {"type":"Event","handle":3,"device":0,...}
   * ```
   */
  toJSON(): { type: 'Event'; handle: number; device: number; timing: boolean; interprocess: boolean; recorded: boolean; destroyed: boolean } {
    return {
      type: 'Event',
      handle: Number(this.raw),
      device: this.device.ordinal,
      timing: this.timing,
      interprocess: this.interprocess,
      recorded: this.#recorded,
      destroyed: this.#destroyed,
    };
  }

  /**
   * Records the event at the current end of `stream` (the default stream when omitted).
   * @throws {UseAfterFreeError} When the event was destroyed.
   * @throws {TypeError} When `stream` has no numeric handle.
   * @example
   * ```ts
   * ev.record(stream);
   * ```
   */
  record(stream?: StreamRef): this {
    const handle = this.handle;
    const s = streamHandleOf(stream);
    this.device.makeCurrent();
    this.device.backend.eventRecord(handle, s);
    this.#recorded = true;
    this.#captureSession = captureSessionOf(s);
    return this;
  }

  /**
   * True when the work captured by the event has completed (or it was never recorded).
   * @throws {UseAfterFreeError} When the event was destroyed.
   * @throws {CudaError} When the captured work failed.
   * @example
   * ```ts
   * if (ev.query()) console.log('done');
   * ```
   */
  query(): boolean {
    const handle = this.handle;
    this.#refuseCaptured('event.query()');
    this.device.makeCurrent();
    return this.device.backend.eventQuery(handle);
  }

  /**
   * Blocks the calling thread until the captured work has completed.
   * @throws {UseAfterFreeError} When the event was destroyed.
   * @throws {CudaError} When the captured work failed.
   * @example
   * ```ts
   * ev.synchronize();
   * ```
   */
  synchronize(): void {
    const handle = this.handle;
    this.#refuseCaptured('event.synchronize()');
    refuseDuringCapture('event.synchronize()', 'a host wait cannot be captured (await event.synchronized() after endCapture())');
    this.device.makeCurrent();
    this.device.backend.eventSynchronize(handle);
  }

  /**
   * The capture this event was last recorded in, while it lasts: a stream that waits for the
   * event joins that capture.
   * @internal
   * @returns The session, or undefined.
   * @example
   * ```ts
   * if (event.captureSession !== undefined) console.log('recorded in a capture');
   * ```
   */
  get captureSession(): CaptureSession | undefined {
    const session = this.#captureSession;
    return session !== undefined && captureSessionOf(session.origin) === session ? session : undefined;
  }

  #refuseCaptured(call: string): void {
    if (this.captureSession !== undefined) {
      throw new StreamCaptureError(call, 'the event was recorded in a capture that has not ended: it marks a point in the graph, not in work that runs');
    }
  }

  /**
   * Resolves when the captured work has completed, polling without blocking the event loop.
   * @throws {UseAfterFreeError} When the event was destroyed, before or while awaited (the promise rejects).
   * @example
   * ```ts
   * await ev.synchronized();
   * ```
   */
  async synchronized(): Promise<void> {
    void this.handle;
    await pollUntil(() => {
      if (this.#destroyed) throw new UseAfterFreeError('the event was destroyed while being awaited');
      return this.query();
    });
  }

  /**
   * Milliseconds from `start` to this event; both must have timing on, have been recorded, and
   * have completed (await `end.synchronized()` first: this never waits).
   * @throws {TypeError} When `start` is not an Event.
   * @throws {VramStateError} When either event has timing off or was never recorded.
   * @throws {CudaError} When either has not completed (CUDA_ERROR_NOT_READY).
   * @example
   * ```ts
   * await end.synchronized();
   * const ms = end.elapsedSince(start);
   * ```
   */
  elapsedSince(start: Event): number {
    if (!(start instanceof Event)) throw new TypeError('elapsedSince expects the start Event');
    const end = this.handle;
    const begin = start.handle;
    if (!this.timing || !start.timing) {
      throw new VramStateError('elapsedSince needs two events created with timing: true');
    }
    if (!this.#recorded || !start.#recorded) {
      throw new VramStateError('elapsedSince needs two events that have been recorded');
    }
    return this.device.backend.eventElapsedTime(begin, end);
  }

  /**
   * Destroys the event; safe while work it captured is still pending.
   * @throws {DoubleFreeError} When it was already destroyed.
   * @example
   * ```ts
   * const ev = Event.create();
   * ev.destroy();
   * ```
   */
  destroy(): void {
    if (this.#destroyed) throw new DoubleFreeError('the event was already destroyed');
    this.#destroyed = true;
    unguard(this.#dropped);
    endEvent(this.device, this.raw);
  }

  /** `using ev = Event.create()` destroys it at the end of the scope. */
  [Symbol.dispose](): void {
    if (!this.#destroyed) this.destroy();
  }
}

/**
 * The handle of an optional StreamRef (0, the default stream, when omitted), checked by the one
 * live-stream check (`checkLiveStreamHandle`): a destroyed Stream is a UseAfterFreeError, a raw
 * handle no live stream has a RangeError. Every entry point that takes a stream calls it.
 *
 * @param stream The argument.
 * @param name Its name, for the message.
 * @returns The handle.
 * @throws {TypeError | RangeError} For a malformed handle, or one no live stream has.
 * @throws {UseAfterFreeError} For a destroyed Stream.
 */
export function streamHandleOf(stream: StreamRef | undefined, name = 'stream'): Handle {
  if (stream === undefined || stream === defaultStream) return DEFAULT_STREAM;
  if (stream instanceof Stream) return stream.handle;
  // Every backend vouches for the legacy stream: `{ handle: 0 }` needs no device looked up.
  if (checkStreamHandle(stream, name) === DEFAULT_STREAM) return DEFAULT_STREAM;
  return checkLiveStreamHandle(stream, Device.get(0).backend, name);
}
