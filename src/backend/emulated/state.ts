/**
 * The emulated driver's shared state: devices, the context stack, streams, events, pools and the
 * address-space indexes, with the look-ups every group of driver calls needs (the current context,
 * a stream or event by handle, the bytes behind an address). Each module of calls under
 * `emulated/` works on one `EmulatedState`, so they all see one driver.
 */
import type { Handle } from '../backend.js';
import { CUresult } from '../../errors.js';
import { addressRange, IntervalIndex, type Interval } from './address-space.js';
import type { Allocation } from './allocation.js';
import { ContextState, DeviceState } from './devices.js';
import { fail, hex, invalidValue } from './fail.js';
import { nodeKind, type ExecState, type GraphAllocation, type GraphState } from './graphs.js';
import type { Block, PoolState, PoolHost } from './pools.js';
import { EagerStore, type Span } from './store.js';
import type { Hold } from './hold.js';
import { EventState, Scheduler, StreamState, type StreamCapture, type StreamPoint } from './streams.js';
import { type PhysicalMemory, PhysicalTable, Reservation } from './vmm.js';

/** JavaScript memory that was given an address (addressOf), held weakly. */
export class PageableBuffer implements Interval {
  live = true;
  constructor(
    readonly base: number,
    readonly size: number,
    readonly buffer: WeakRef<ArrayBufferLike>,
  ) {}
}

/** The streams a call ordered on the legacy default stream waits for: it and the blocking streams. */
function waitsForLegacy(stream: StreamState): boolean {
  return stream.legacy || stream.blocking;
}

/** One emulated driver's state, shared by the modules that implement its calls. */
export class EmulatedState {
  readonly devices: DeviceState[];
  readonly contexts = new Map<number, ContextState>();
  /**
   * The calling thread's context stack, as the driver keeps it: the top is the current context;
   * cuCtxCreate pushes, cuCtxSetCurrent replaces the top, destroying the current context pops it.
   */
  readonly stack: number[] = [];
  private nextHandle = 0x1000;
  readonly scheduler = new Scheduler();
  readonly streams = new Map<number, StreamState>();
  readonly events = new Map<number, EventState>();
  /**
   * Streams and events that were destroyed (handles are never reused here). Using one is undefined
   * behaviour in CUDA's documentation; the CUDA 13 driver answers CUDA_ERROR_INVALID_CONTEXT for a
   * destroyed stream and CUDA_ERROR_CONTEXT_IS_DESTROYED for a destroyed event (not
   * CUDA_ERROR_INVALID_HANDLE), and the emulation gives the same answers.
   */
  readonly destroyedStreams = new Set<number>();
  readonly destroyedEvents = new Set<number>();
  readonly pools = new Map<number, PoolState>();
  readonly defaultPools = new Map<number, PoolState>();
  /** Pools made current with cuDeviceSetMemPool, per device (absent: the default pool). */
  readonly currentPools = new Map<number, PoolState>();
  readonly poolBlocks = new Map<number, Block>();
  readonly physical = new PhysicalTable();
  /**
   * Told when a plain allocation is dropped (freed, or its context destroyed): the IPC module
   * (ipc-calls.ts) unmaps the shared memory of exported and imported allocations there.
   */
  onDrop: ((a: Allocation) => void) | undefined = undefined;
  /** Capture sequences in progress (graphs.ts). */
  readonly captures = new Set<StreamCapture>();
  /** The calling thread's capture mode (cuThreadExchangeStreamCaptureMode), GLOBAL by default. */
  threadCaptureMode = 0;
  readonly graphs = new Map<number, GraphState>();
  readonly execs = new Map<number, ExecState>();
  /** Pool blocks that graphs' alloc nodes made, by address. */
  readonly graphAllocations = new Map<number, GraphAllocation>();

  readonly deviceRange = addressRange('device');
  readonly managedRange = addressRange('managed');
  readonly virtualRange = addressRange('virtual');
  readonly pinnedRange = addressRange('pinned');
  readonly poolRange = addressRange('pool');
  readonly jsRange = addressRange('javascript');
  readonly deviceIndex = new IntervalIndex<Allocation>();
  readonly managedIndex = new IntervalIndex<Allocation>();
  readonly virtualIndex = new IntervalIndex<Reservation>();
  readonly pinnedIndex = new IntervalIndex<Allocation>();
  readonly poolIndex = new IntervalIndex<PoolState>();
  readonly registeredIndex = new IntervalIndex<Allocation>();
  readonly pageableIndex = new IntervalIndex<PageableBuffer>();
  readonly jsAddresses = new WeakMap<ArrayBufferLike, PageableBuffer>();
  readonly pageableCleanup = new FinalizationRegistry<PageableBuffer>((entry) => this.pageableIndex.remove(entry));

  /** How pools charge and uncharge their device's capacity. */
  readonly poolHost: PoolHost = {
    // A pool in host NUMA memory takes none of the device's capacity (the host's is not modelled).
    charge: (pool, bytes, call) => {
      if (pool.hostNuma === undefined) this.devices[pool.device]!.charge(bytes, call);
    },
    uncharge: (pool, bytes) => {
      if (pool.hostNuma === undefined) this.devices[pool.device]!.uncharge(bytes);
    },
  };

  constructor(
    deviceCount: number,
    capacity: number,
    readonly hostNumaPools = true,
    /** Whether the devices take fabric handles (EmulatedBackendOptions.fabric). */
    readonly fabric = true,
  ) {
    this.devices = Array.from({ length: deviceCount }, (_, i) => new DeviceState(i, capacity, hostNumaPools, fabric));
  }

  /** A fresh handle (handles are never reused). */
  handle(): number {
    return this.nextHandle++;
  }

  /** Device `ordinal`, or CUDA_ERROR_INVALID_DEVICE for `call`. */
  device(ordinal: number, call: string): DeviceState {
    const device = Number.isInteger(ordinal) ? this.devices[ordinal] : undefined;
    if (device === undefined) fail(CUresult.INVALID_DEVICE, call, `no emulated device ${ordinal}`);
    return device;
  }

  /** Creates a context with its legacy default stream (not pushed on the stack). */
  newContext(device: DeviceState, flags: number, primary: boolean): ContextState {
    const handle = this.handle();
    const legacy = new StreamState(0, 0, 0, handle, true);
    const ctx = new ContextState(handle, device, flags, primary, legacy);
    this.contexts.set(handle, ctx);
    this.scheduler.add(legacy);
    return ctx;
  }

  /** The context `handle`, or CUDA_ERROR_INVALID_CONTEXT for `call`. */
  context(handle: Handle, call: string): ContextState {
    const ctx = this.contexts.get(handle);
    if (ctx === undefined) fail(CUresult.INVALID_CONTEXT, call, `unknown context ${handle}`);
    return ctx;
  }

  /** What destroying a context takes with it: its queued work runs, its streams, memory and peers go. */
  dropContextResources(context: ContextState): void {
    const ctx = context.handle;
    this.scheduler.drainAll();
    for (const [handle, stream] of this.streams) {
      if (stream.context === ctx) {
        this.scheduler.remove(stream);
        this.streams.delete(handle);
        this.destroyedStreams.add(handle);
      }
    }
    this.scheduler.remove(context.legacy);
    for (const index of [this.deviceIndex, this.managedIndex, this.pinnedIndex, this.registeredIndex]) {
      for (const a of [...index.values()]) {
        if (a.context === ctx && a.kind !== 'pool') this.dropAllocation(index, a);
      }
    }
    for (const r of [...this.virtualIndex.values()]) {
      if (r.context === ctx) {
        this.releaseMappings(r.unmapAll());
        this.virtualIndex.remove(r);
      }
    }
    for (const other of this.contexts.values()) other.peers.delete(ctx);
  }

  /** The handle on top of the context stack, 0 when it is empty. */
  currentHandle(): Handle {
    return this.stack.length === 0 ? 0 : this.stack[this.stack.length - 1]!;
  }

  /**
   * The current context, which `call` needs: with none current it fails with
   * CUDA_ERROR_INVALID_CONTEXT, as the driver does (no implicit primary context: that is the
   * runtime API's behaviour, not the driver's, and code that relied on it would fail on a GPU).
   */
  ctx(call: string): ContextState {
    const ctx = this.contexts.get(this.currentHandle());
    if (ctx === undefined) fail(CUresult.INVALID_CONTEXT, call, 'no context is current on the calling thread');
    if (ctx.destroyed) fail(CUresult.CONTEXT_IS_DESTROYED, call, 'the current (primary) context was released and destroyed');
    return ctx;
  }

  /**
   * The context of calls that name their device or memory rather than use the current context
   * (pools, reservations, copies between known addresses): the current one, else the primary
   * context of device `ordinal` (which the emulation creates without retaining it).
   */
  contextFor(ordinal: number): ContextState {
    const current = this.contexts.get(this.currentHandle());
    if (current !== undefined && !current.destroyed) return current;
    const device = this.devices[ordinal]!;
    device.primary ??= this.newContext(device, 0, true).handle;
    return this.contexts.get(device.primary)!;
  }

  /** The stream `handle` (0 and 1: the current context's legacy stream), or the driver's error. */
  stream(handle: Handle, call: string): StreamState {
    // 0 and 1 (CU_STREAM_LEGACY) are the current context's legacy default stream.
    if (handle === 0 || handle === 1) return this.ctx(call).legacy;
    const s = this.streams.get(handle);
    if (s === undefined) {
      if (this.destroyedStreams.has(handle)) fail(CUresult.INVALID_CONTEXT, call, `stream ${handle} was destroyed`);
      fail(CUresult.INVALID_HANDLE, call, `unknown stream ${handle}`);
    }
    return s;
  }

  /** The event `handle`, or the driver's error for an unknown or destroyed one. */
  event(handle: Handle, call: string): EventState {
    const e = this.events.get(handle);
    if (e === undefined) {
      if (this.destroyedEvents.has(handle)) fail(CUresult.CONTEXT_IS_DESTROYED, call, `event ${handle} was destroyed`);
      fail(CUresult.INVALID_HANDLE, call, `unknown event ${handle}`);
    }
    return e;
  }

  /**
   * Queues `run` on `stream` (after `hold`'s condition, if any); work on other streams of the
   * context also waits for its legacy stream.
   */
  enqueue(stream: StreamState, run: (() => void) | undefined, deps?: readonly StreamPoint[], hold?: Hold, call = 'cuStreamWaitEvent'): StreamPoint {
    const capture = stream.capture;
    if (capture !== undefined) {
      // Recorded into the capture instead of queued (graphs.ts); the point is where the stream stands.
      if (capture.invalidated) fail(CUresult.STREAM_CAPTURE_INVALIDATED, call, 'the capture this stream belongs to was invalidated');
      capture.record(stream, nodeKind(call), run, hold === undefined ? undefined : () => hold);
      return { stream, position: stream.enqueued };
    }
    if (stream.legacy && this.captures.size > 0) this.checkImplicit(stream, call);
    const legacy = stream.legacy ? undefined : this.contexts.get(stream.context)?.legacy;
    return this.scheduler.enqueue(stream, run, deps, legacy, hold);
  }

  /**
   * What a synchronous call does first: runs all queued work that can run, then fails with
   * CUDA_ERROR_NOT_READY if work the call waits for is still held by a wait value
   * (cuStreamWaitValue32) that the host never released, where on a GPU the call would never
   * return. What each call waits for, as probed on an H100 (CUDA 13) with a stream held:
   * - `legacy`: the current context's legacy default stream and its blocking streams (not the
   *   non-blocking ones): synchronous copies and fills that involve host or managed memory
   *   (cuMemcpyHtoD/DtoH, cuMemcpy to or from pinned memory, cuMemset of pinned or managed memory);
   * - `context`: every stream of the current context: cuCtxSynchronize, cuMemFree,
   *   cuMemFreeHost, cuMemHostUnregister;
   * - `none`: no held work (cuMemAddressFree, cuMemUnmap, cuMemPoolDestroy, cuMemAlloc...).
   * Copies and fills between device addresses do not make the host wait: see `runOnDevice`.
   */
  settle(call: string, waitsFor: 'legacy' | 'context' | 'none'): void {
    if (waitsFor !== 'none') this.unsafe(call);
    this.scheduler.drainAll();
    if (waitsFor === 'none') return;
    const held = this.scheduler.held(this.currentHandle(), waitsFor === 'context' ? () => true : waitsForLegacy);
    if (held !== undefined) this.heldError(call, held);
  }

  /**
   * A "potentially unsafe" call (cuMemAlloc, cuMemFree, synchronous copies and fills,
   * synchronisations): while a capture that is not RELAXED lasts, and the thread's mode is not
   * RELAXED either, it fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the
   * captures that forbid it. `stream`: a stream the call synchronises or queries, which may not be
   * capturing in any mode.
   */
  unsafe(call: string, stream?: StreamState): void {
    if (this.captures.size === 0) return;
    const own = stream?.capture;
    if (own !== undefined) {
      own.invalidated = true;
      fail(CUresult.STREAM_CAPTURE_UNSUPPORTED, call, `${this.streamName(stream!)} is capturing: its work is recorded, not run, so it cannot be waited for`);
    }
    if (this.threadCaptureMode === 2) return;
    let refused = false;
    for (const c of this.captures) {
      if (c.mode !== 2) {
        c.invalidated = true;
        refused = true;
      }
    }
    if (refused) fail(CUresult.STREAM_CAPTURE_UNSUPPORTED, call, 'a potentially unsafe call during a stream capture (the capture is invalidated)');
  }

  /** The legacy stream used while a blocking stream of its context captures: CUDA_ERROR_STREAM_CAPTURE_IMPLICIT. */
  private checkImplicit(legacy: StreamState, call: string): void {
    for (const c of this.captures) {
      for (const s of c.streams) {
        if (s.blocking && s.context === legacy.context) {
          c.invalidated = true;
          fail(CUresult.STREAM_CAPTURE_IMPLICIT, call, `the legacy default stream would synchronise with capturing stream ${s.handle}`);
        }
      }
    }
  }

  /**
   * A synchronous copy or fill between device addresses (cuMemcpy, cuMemcpy2D, cuMemcpyPeer,
   * cuMemset of device memory): the host does not wait for it (CUDA's API synchronisation rules),
   * it is ordered on the legacy default stream. It runs now, after all queued work that can run,
   * unless the legacy stream or a blocking stream of the current context is held: then it is
   * queued on the legacy stream, behind them, and runs once they are released (as probed: the
   * driver returns at once and the copy lands after the held work).
   */
  runOnDevice(run: () => void, call: string): void {
    this.unsafe(call);
    this.scheduler.drainAll();
    const ctx = this.contexts.get(this.currentHandle());
    if (ctx !== undefined && !ctx.destroyed && this.scheduler.held(ctx.handle, waitsForLegacy) !== undefined) {
      this.enqueue(ctx.legacy, run);
      return;
    }
    run();
  }

  /** True for device memory (plain, pool or virtual): not host, managed or pageable memory. */
  isDeviceMemory(address: number): boolean {
    const kind = this.lookup(address)?.kind;
    return kind === 'device' || kind === 'pool' || kind === 'reservation' || kind === 'ipc';
  }

  /**
   * Runs the work that synchronising `stream` waits for: its queue (with what it depends on),
   * and for a legacy default stream the queues of the blocking streams of its context too
   * (cuStreamSynchronize(0) waits for them, as probed). Returns the stream whose work a wait
   * value holds, or undefined when all of it ran.
   */
  runStream(stream: StreamState): StreamState | undefined {
    if (!stream.drain()) return stream;
    if (stream.legacy) {
      for (const s of this.scheduler.streamsOf(stream.context)) if (s.blocking && !s.drain()) return s;
    }
    return undefined;
  }

  /** Fails `call` (which would destroy `context`) when a wait value holds work of the context. */
  checkContextNotHeld(call: string, context: number): void {
    this.scheduler.drainAll();
    const held = this.scheduler.held(context, () => true);
    if (held !== undefined) this.heldError(call, held);
  }

  /** The error of a synchronisation `call` that would wait forever on `stream`'s held work. */
  heldError(call: string, stream: StreamState): never {
    const by = stream.heldBy() ?? 'a cuStreamWaitValue32';
    fail(
      CUresult.NOT_READY,
      call,
      `emulated ${this.streamName(stream)} is blocked: it waits for ${by}, which the host never ` +
        "released; on a GPU this call would never return (write the value into the memory's host view before synchronising)",
    );
  }

  /** A stream as messages name it. */
  streamName(stream: StreamState): string {
    return stream.legacy ? `the legacy default stream of context ${stream.context}` : `stream ${stream.handle}`;
  }

  /** Releases pool memory above each pool's release threshold, as a synchronisation does. */
  releasePools(): void {
    for (const pool of this.pools.values()) pool.releaseAboveThreshold();
  }

  /** Removes a plain allocation from its index and gives its capacity back. */
  dropAllocation(index: IntervalIndex<Allocation>, a: Allocation): void {
    index.remove(a);
    this.onDrop?.(a);
    if (a.charged > 0) this.devices[a.device]!.uncharge(a.charged);
  }

  /** Gives back the capacity of released physical memory that is no longer mapped anywhere. */
  releaseMappings(memories: readonly PhysicalMemory[]): void {
    for (const m of memories) {
      if (m.released && m.mappings === 0) PhysicalTable.gone(m, (bytes) => this.devices[m.device]!.uncharge(bytes));
    }
  }

  /** The allocation containing `address`, of any kind (registered JavaScript memory included). */
  lookup(address: number): Allocation | undefined {
    if (this.deviceRange.contains(address)) return this.deviceIndex.find(address);
    if (this.managedRange.contains(address)) return this.managedIndex.find(address);
    if (this.virtualRange.contains(address)) return this.virtualIndex.find(address);
    if (this.pinnedRange.contains(address)) return this.pinnedIndex.find(address);
    if (this.poolRange.contains(address)) return this.poolIndex.find(address);
    if (this.jsRange.contains(address)) return this.registeredIndex.find(address);
    return undefined;
  }

  /** The bytes behind [address, address + bytes), or CUDA_ERROR_INVALID_VALUE. */
  spans(address: number, bytes: number, write: boolean, call: string): Span[] {
    if (typeof address !== 'number' || !Number.isSafeInteger(address)) invalidValue(call, `bad address ${String(address)}`);
    const a = this.lookup(address);
    if (a === undefined) {
      if (this.jsRange.contains(address)) return this.pageableSpans(address, bytes, call);
      invalidValue(call, `${hex(address)} is not in any allocation`);
    }
    const offset = address - a.base;
    if (offset + bytes > a.size) invalidValue(call, `[${hex(address)}, +${bytes}) extends past its allocation of ${a.size} bytes`);
    if (a instanceof Reservation) return a.spans(offset, bytes, this.contextFor(a.device).device.ordinal, write, call);
    const store = a.store;
    if (store === undefined) invalidValue(call, `${hex(address)} is registered JavaScript memory that was collected`);
    return [{ store, offset, length: bytes }];
  }

  private pageableSpans(address: number, bytes: number, call: string): Span[] {
    const entry = this.pageableIndex.find(address);
    const buffer = entry?.buffer.deref();
    if (entry === undefined || buffer === undefined) invalidValue(call, `${hex(address)} is not in any allocation`);
    const offset = address - entry.base;
    if (offset + bytes > buffer.byteLength) invalidValue(call, `[${hex(address)}, +${bytes}) extends past its ArrayBuffer`);
    return [{ store: new EagerStore(buffer, 0, buffer.byteLength), offset, length: bytes }];
  }
}
