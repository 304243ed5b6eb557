/**
 * The emulated backend: every Backend operation on host memory, with the CUDA driver's semantics
 * (capacity and out-of-memory errors, alignment, stream order, events, pools, virtual memory,
 * pointer attributes and error codes), so the library, its CLI and its whole test suite run on a
 * machine with no GPU. The rules it follows where the driver leaves room are documented on the
 * constants below and in the modules under `emulated/`.
 */
import {
  type Backend, type DeviceInfo, type Handle, type HostMemory, type MemInfo, type MemLocation,
  type MemPoolAttribute, type MemPoolProps, type Memcpy2D, type PointerAttributes, type Ptr,
  MemoryType,
} from './backend.js';
import { CUresult } from '../errors.js';
import { addressRange, IntervalIndex, type Interval } from './emulated/address-space.js';
import type { Allocation, AllocationKind } from './emulated/allocation.js';
import { ContextState, DeviceState } from './emulated/devices.js';
import { checkCount, checkSize, fail, invalidValue, outOfMemory } from './emulated/fail.js';
import { type Block, PoolState, type PoolHost, POOL_SEGMENT_GRANULARITY } from './emulated/pools.js';
import { copySpans, EagerStore, fillPattern, LazyStore, type Span, type Store } from './emulated/store.js';
import { EventState, Scheduler, StreamState, type StreamPoint } from './emulated/streams.js';
import { PhysicalMemory, PhysicalTable, Reservation, VMM_GRANULARITY } from './emulated/vmm.js';

/** Options of `new EmulatedBackend()`. */
export interface EmulatedBackendOptions {
  /** Capacity of each emulated device in bytes; default `VRAM_EMULATED_BYTES`, else 4 GiB. */
  readonly capacityBytes?: number;
  /** Number of emulated devices (default 1; 2 for peer-access tests). */
  readonly deviceCount?: number;
}

/** Default capacity of an emulated device. */
export const DEFAULT_EMULATED_CAPACITY = 4 * 1024 ** 3;

/** Every cuMemAlloc address is a multiple of this (the driver gives at least 256). */
export const DEVICE_ALIGNMENT = 512;
/**
 * Capacity rule of cuMemAlloc: a request of at least `LARGE_ALLOCATION` bytes holds whole 2 MiB
 * pages (and its address is 2 MiB aligned); a smaller one holds its size rounded up to 512 bytes.
 */
export const LARGE_ALLOCATION = 1024 * 1024;
const LARGE_PAGE = 2 * 1024 * 1024;
/** Pinned host memory is page aligned. */
const HOST_ALIGNMENT = 4096;

/** The emulated CUDA driver version (13.0). */
const DRIVER_VERSION = 13000;

/** Which stream priorities streamCreate accepts: [least, greatest]. */
const PRIORITY_RANGE = [0, -5] as const;

/** Reads the default capacity from VRAM_EMULATED_BYTES. */
function defaultCapacity(): number {
  const env = process.env.VRAM_EMULATED_BYTES;
  if (env === undefined || env === '') return DEFAULT_EMULATED_CAPACITY;
  const n = Number(env);
  if (!/^\d+$/.test(env.trim()) || !Number.isSafeInteger(n) || n <= 0) {
    throw new RangeError(`VRAM_EMULATED_BYTES must be a positive whole number of bytes, got '${env}'`);
  }
  return n;
}

/** A plain allocation: device, pitched, managed, pinned or registered memory. */
class PlainAllocation implements Allocation {
  live = true;
  constructor(
    readonly kind: AllocationKind,
    readonly base: number,
    readonly size: number,
    readonly device: number,
    readonly context: number,
    readonly store: Store,
    readonly charged: number,
    readonly flags: number,
  ) {}
}

/** JavaScript memory that was given an address (addressOf), held weakly. */
class PageableBuffer implements Interval {
  live = true;
  constructor(
    readonly base: number,
    readonly size: number,
    readonly buffer: WeakRef<ArrayBufferLike>,
  ) {}
}

/** The memory a HostMemory argument covers, as a buffer range. */
function hostBytes(memory: HostMemory): { buffer: ArrayBufferLike; byteOffset: number; byteLength: number } {
  if (ArrayBuffer.isView(memory)) return { buffer: memory.buffer, byteOffset: memory.byteOffset, byteLength: memory.byteLength };
  const buffer: unknown = memory;
  if (buffer instanceof ArrayBuffer || (typeof SharedArrayBuffer !== 'undefined' && buffer instanceof SharedArrayBuffer)) {
    return { buffer, byteOffset: 0, byteLength: buffer.byteLength };
  }
  throw new TypeError('host memory must be an ArrayBuffer or an ArrayBufferView');
}

/** Host memory emulating a CUDA device, with the driver's semantics. */
export class EmulatedBackend implements Backend {
  /** Always `emulated`: output never pretends this is a GPU. */
  readonly name = 'emulated' as const;

  private readonly devices: DeviceState[];
  private readonly contexts = new Map<number, ContextState>();
  /**
   * The calling thread's context stack, as the driver keeps it: the top is the current context;
   * cuCtxCreate pushes, cuCtxSetCurrent replaces the top, destroying the current context pops it.
   */
  private readonly stack: number[] = [];
  private nextHandle = 0x1000;
  private readonly scheduler = new Scheduler();
  private readonly streams = new Map<number, StreamState>();
  private readonly events = new Map<number, EventState>();
  /**
   * Streams and events that were destroyed (handles are never reused here). Using one is undefined
   * behaviour in CUDA's documentation; the CUDA 13 driver answers CUDA_ERROR_INVALID_CONTEXT for a
   * destroyed stream and CUDA_ERROR_CONTEXT_IS_DESTROYED for a destroyed event (not
   * CUDA_ERROR_INVALID_HANDLE), and the emulation gives the same answers.
   */
  private readonly destroyedStreams = new Set<number>();
  private readonly destroyedEvents = new Set<number>();
  private readonly pools = new Map<number, PoolState>();
  private readonly defaultPools = new Map<number, PoolState>();
  private readonly poolBlocks = new Map<number, Block>();
  private readonly physical = new PhysicalTable();

  private readonly deviceRange = addressRange('device');
  private readonly managedRange = addressRange('managed');
  private readonly virtualRange = addressRange('virtual');
  private readonly pinnedRange = addressRange('pinned');
  private readonly poolRange = addressRange('pool');
  private readonly jsRange = addressRange('javascript');
  private readonly deviceIndex = new IntervalIndex<Allocation>();
  private readonly managedIndex = new IntervalIndex<Allocation>();
  private readonly virtualIndex = new IntervalIndex<Reservation>();
  private readonly pinnedIndex = new IntervalIndex<Allocation>();
  private readonly poolIndex = new IntervalIndex<PoolState>();
  private readonly registeredIndex = new IntervalIndex<Allocation>();
  private readonly pageableIndex = new IntervalIndex<PageableBuffer>();
  private readonly jsAddresses = new WeakMap<ArrayBufferLike, PageableBuffer>();
  private readonly pageableCleanup = new FinalizationRegistry<PageableBuffer>((entry) => this.pageableIndex.remove(entry));

  private readonly poolHost: PoolHost = {
    charge: (pool, bytes, call) => this.devices[pool.device]!.charge(bytes, call),
    uncharge: (pool, bytes) => this.devices[pool.device]!.uncharge(bytes),
  };

  constructor(options: EmulatedBackendOptions = {}) {
    const capacity = options.capacityBytes ?? defaultCapacity();
    const count = options.deviceCount ?? 1;
    if (!Number.isSafeInteger(capacity) || capacity <= 0) throw new RangeError(`capacityBytes must be a positive whole number, got ${capacity}`);
    if (!Number.isInteger(count) || count < 1 || count > 16) throw new RangeError(`deviceCount must be 1 to 16, got ${count}`);
    this.devices = Array.from({ length: count }, (_, i) => new DeviceState(i, capacity));
  }

  // --- Driver and devices ---

  /** 13000: the emulation follows CUDA 13.0's driver API. */
  driverVersion(): number {
    return DRIVER_VERSION;
  }

  /** The number of emulated devices. */
  deviceCount(): number {
    return this.devices.length;
  }

  /** Emulated attributes (see DeviceState.info): capacity as total memory, CC 9.0. */
  deviceInfo(ordinal: number): DeviceInfo {
    return this.device(ordinal, 'cuDeviceGet').info();
  }

  /** True between distinct emulated devices (all share host memory). */
  deviceCanAccessPeer(ordinal: number, peerOrdinal: number): boolean {
    this.device(ordinal, 'cuDeviceCanAccessPeer');
    this.device(peerOrdinal, 'cuDeviceCanAccessPeer');
    return ordinal !== peerOrdinal;
  }

  // --- Contexts ---

  /**
   * Retains the device's primary context; the handle stays the same for the device's lifetime,
   * also when it is retained again after its last release destroyed it (as the driver does).
   */
  primaryContextRetain(ordinal: number): Handle {
    const device = this.device(ordinal, 'cuDevicePrimaryCtxRetain');
    device.primary ??= this.newContext(device, 0, true).handle;
    const ctx = this.contexts.get(device.primary)!;
    if (ctx.destroyed) {
      ctx.destroyed = false;
      ctx.legacy = new StreamState(0, 0, 0, ctx.handle, true);
      this.scheduler.add(ctx.legacy);
    }
    device.primaryRetains++;
    return device.primary;
  }

  /**
   * Releases one retain of the primary context (CUDA_ERROR_INVALID_CONTEXT when none is held).
   * The last release destroys it, as cuDevicePrimaryCtxRelease does: its work completes, its memory
   * and streams go, and calls in it fail with CUDA_ERROR_CONTEXT_IS_DESTROYED until it is retained.
   */
  primaryContextRelease(ordinal: number): void {
    const device = this.device(ordinal, 'cuDevicePrimaryCtxRelease');
    if (device.primaryRetains === 0) fail(CUresult.INVALID_CONTEXT, 'cuDevicePrimaryCtxRelease', 'the primary context is not retained');
    device.primaryRetains--;
    if (device.primaryRetains === 0 && device.primary !== undefined) {
      const ctx = this.contexts.get(device.primary)!;
      this.dropContextResources(ctx);
      ctx.destroyed = true;
    }
  }

  /** Creates a new context on the device and makes it current, as cuCtxCreate does. */
  contextCreate(ordinal: number, flags: number): Handle {
    const device = this.device(ordinal, 'cuCtxCreate');
    if (!Number.isInteger(flags) || (flags & ~0x1f) !== 0) invalidValue('cuCtxCreate', `unknown context flags ${flags}`);
    const ctx = this.newContext(device, flags, false);
    this.stack.push(ctx.handle);
    return ctx.handle;
  }

  /** Destroys a created context: its work completes and its memory is freed. */
  contextDestroy(ctx: Handle): void {
    const context = this.contexts.get(ctx);
    if (context === undefined || context.primary) {
      fail(CUresult.INVALID_CONTEXT, 'cuCtxDestroy', context === undefined ? `unknown context ${ctx}` : 'primary contexts are released, not destroyed');
    }
    this.dropContextResources(context);
    this.contexts.delete(ctx);
    // The driver pops a destroyed context that is current: the one below it (if any) is current again.
    for (let i = this.stack.length - 1; i >= 0; i--) if (this.stack[i] === ctx) this.stack.splice(i, 1);
  }

  /** Makes `ctx` current, replacing the top of the context stack (0: pops it). */
  contextSetCurrent(ctx: Handle): void {
    if (ctx !== 0 && !this.contexts.has(ctx)) fail(CUresult.INVALID_CONTEXT, 'cuCtxSetCurrent', `unknown context ${ctx}`);
    if (ctx === 0) this.stack.pop();
    else if (this.stack.length === 0) this.stack.push(ctx);
    else this.stack[this.stack.length - 1] = ctx;
  }

  /** The current context, 0 when none is. */
  contextGetCurrent(): Handle {
    return this.currentHandle();
  }

  /** Runs all queued work, then releases pool memory above each pool's release threshold. */
  contextSynchronize(): void {
    this.ctx('cuCtxSynchronize');
    this.synchronizeAll();
  }

  /** Enables access from the current context to `peerCtx`'s memory. */
  contextEnablePeerAccess(peerCtx: Handle): void {
    const call = 'cuCtxEnablePeerAccess';
    const ctx = this.ctx(call);
    const peer = this.context(peerCtx, call);
    if (peer.device === ctx.device) fail(CUresult.INVALID_DEVICE, call, 'a context cannot be its own peer');
    if (ctx.peers.has(peerCtx)) fail(CUresult.PEER_ACCESS_ALREADY_ENABLED, call);
    ctx.peers.add(peerCtx);
  }

  /** Disables access from the current context to `peerCtx`'s memory. */
  contextDisablePeerAccess(peerCtx: Handle): void {
    const call = 'cuCtxDisablePeerAccess';
    const ctx = this.ctx(call);
    this.context(peerCtx, call);
    if (!ctx.peers.delete(peerCtx)) fail(CUresult.PEER_ACCESS_NOT_ENABLED, call);
  }

  /** Capacity-based free and total memory of the current context's device. */
  memGetInfo(): MemInfo {
    const device = this.ctx('cuMemGetInfo').device;
    return { free: device.capacity - device.used, total: device.capacity };
  }

  // --- Device memory ---

  /** cuMemAlloc: 512-byte aligned (2 MiB for >= 1 MiB); capacity per LARGE_ALLOCATION's rule. */
  memAlloc(bytes: number): Ptr {
    return this.allocDevice(bytes, 'cuMemAlloc');
  }

  /**
   * cuMemFree: synchronises, then frees device, managed or pool memory allocated at exactly `ptr`.
   * The null pointer is accepted and frees nothing, as on the driver.
   */
  memFree(ptr: Ptr): void {
    const call = 'cuMemFree';
    this.scheduler.drainAll();
    if (ptr === 0) return;
    const block = this.poolBlocks.get(ptr);
    if (block !== undefined) {
      this.poolBlocks.delete(ptr);
      block.pool.free(block, undefined);
      return;
    }
    const index = this.managedRange.contains(ptr) ? this.managedIndex : this.deviceIndex;
    const a = index.find(ptr);
    if (a === undefined || a.base !== ptr || a.kind === 'pool') invalidValue(call, `${hex(ptr)} is not an allocation`);
    this.dropAllocation(index, a);
  }

  /** cuMemAllocPitch: pitch is the width rounded up to the 512-byte texture pitch alignment. */
  memAllocPitch(widthBytes: number, height: number, elementBytes: number): { ptr: Ptr; pitch: number } {
    const call = 'cuMemAllocPitch';
    checkSize(widthBytes, call, 'widthBytes');
    checkSize(height, call, 'height');
    if (elementBytes !== 4 && elementBytes !== 8 && elementBytes !== 16) invalidValue(call, `elementBytes must be 4, 8 or 16, got ${elementBytes}`);
    const pitch = Math.ceil(widthBytes / 512) * 512;
    return { ptr: this.allocDevice(pitch * height, call), pitch };
  }

  /** cuMemAllocManaged: host-backed at once (not charged against device capacity). */
  memAllocManaged(bytes: number, attachFlags: number): Ptr {
    const call = 'cuMemAllocManaged';
    checkSize(bytes, call);
    if (attachFlags !== 0x1 && attachFlags !== 0x2) invalidValue(call, `attach flags must be GLOBAL or HOST, got ${attachFlags}`);
    const ctx = this.ctx(call);
    const store = this.eagerStore(bytes, call);
    const base = this.managedRange.take(bytes, HOST_ALIGNMENT, call);
    this.managedIndex.insert(new PlainAllocation('managed', base, bytes, ctx.device.ordinal, ctx.handle, store, 0, attachFlags));
    return base;
  }

  /** Validates a prefetch of managed memory and records it in stream order (no data moves). */
  memPrefetchAsync(ptr: Ptr, bytes: number, location: MemLocation, stream: Handle): void {
    const call = 'cuMemPrefetchAsync';
    this.checkManaged(ptr, bytes, call);
    this.location(location, call);
    const s = this.stream(stream, call);
    this.enqueue(s, undefined);
  }

  /** Validates advice on managed memory; the emulation has nothing to tune. */
  memAdvise(ptr: Ptr, bytes: number, advice: number, location: MemLocation): void {
    const call = 'cuMemAdvise';
    this.checkManaged(ptr, bytes, call);
    if (!Number.isInteger(advice) || advice < 1 || advice > 6) invalidValue(call, `unknown advice ${advice}`);
    this.location(location, call);
  }

  // --- Pinned host memory ---

  /** cuMemHostAlloc: one real ArrayBuffer per allocation, 4 KiB aligned addresses. */
  memHostAlloc(bytes: number, flags: number): Ptr {
    const call = 'cuMemHostAlloc';
    checkSize(bytes, call);
    if (!Number.isInteger(flags) || (flags & ~0x7) !== 0) invalidValue(call, `unknown flags ${flags}`);
    const ctx = this.ctx(call);
    const store = this.eagerStore(bytes, call);
    const base = this.pinnedRange.take(bytes, HOST_ALIGNMENT, call);
    this.pinnedIndex.insert(new PlainAllocation('pinned', base, bytes, ctx.device.ordinal, ctx.handle, store, 0, flags));
    return base;
  }

  /** cuMemFreeHost: synchronises, then frees pinned memory allocated at exactly `ptr`. */
  memFreeHost(ptr: Ptr): void {
    this.scheduler.drainAll();
    const a = this.pinnedIndex.find(ptr);
    if (a === undefined || a.base !== ptr) invalidValue('cuMemFreeHost', `${hex(ptr)} is not pinned host memory`);
    this.dropAllocation(this.pinnedIndex, a);
  }

  /** The same address (unified addressing) for memory pinned or registered with DEVICEMAP. */
  memHostGetDevicePointer(hostPtr: Ptr): Ptr {
    const call = 'cuMemHostGetDevicePointer';
    const a = this.pinnedRange.contains(hostPtr) ? this.pinnedIndex.find(hostPtr) : this.registeredIndex.find(hostPtr);
    if (a === undefined || (a.flags & 0x2) === 0) invalidValue(call, `${hex(hostPtr)} is not host memory mapped with DEVICEMAP`);
    return hostPtr;
  }

  /**
   * cuMemHostRegister: copies to and from the returned address then read and write the caller's
   * own bytes (zero-copy). Overlapping an existing registration is CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED.
   */
  memHostRegister(memory: HostMemory, flags: number): Ptr {
    const call = 'cuMemHostRegister';
    if (!Number.isInteger(flags) || (flags & ~0xf) !== 0) invalidValue(call, `unknown flags ${flags}`);
    const { buffer, byteOffset, byteLength } = hostBytes(memory);
    if (byteLength === 0) invalidValue(call, 'cannot register 0 bytes');
    const base = this.addressOf(memory);
    if (this.registeredIndex.findOverlap(base, byteLength) !== undefined) fail(CUresult.HOST_MEMORY_ALREADY_REGISTERED, call);
    const ctx = this.ctx(call);
    this.registeredIndex.insert(new PlainAllocation('registered', base, byteLength, ctx.device.ordinal, ctx.handle,
      new EagerStore(buffer, byteOffset, byteLength), 0, flags));
    return base;
  }

  /** cuMemHostUnregister: `hostPtr` must be the start of a registration. */
  memHostUnregister(hostPtr: Ptr): void {
    this.scheduler.drainAll();
    const a = this.registeredIndex.find(hostPtr);
    if (a === undefined || a.base !== hostPtr) fail(CUresult.HOST_MEMORY_NOT_REGISTERED, 'cuMemHostUnregister');
    this.registeredIndex.remove(a);
  }

  /**
   * The ArrayBuffer behind pinned, managed or registered memory, zero-copy. JavaScript cannot alias
   * part of an ArrayBuffer, so `hostPtr` must be the first byte of a backing buffer (a pinned or
   * managed allocation; for registered memory, the caller's ArrayBuffer) and the whole buffer is
   * returned, which may be longer than `bytes`: take views with `new Uint8Array(view, 0, bytes)`.
   * Any other address is CUDA_ERROR_NOT_SUPPORTED.
   */
  hostView(hostPtr: Ptr, bytes: number): ArrayBuffer {
    const call = 'hostView';
    const a = this.lookup(hostPtr);
    if (a === undefined || a.store === undefined || a.store.kind !== 'eager') invalidValue(call, `${hex(hostPtr)} is not host-accessible memory`);
    const store = a.store;
    const offset = hostPtr - a.base;
    if (offset + bytes > a.size) invalidValue(call, 'the range extends past its allocation');
    if (store.byteOffset + offset !== 0 || !(store.buffer instanceof ArrayBuffer)) {
      fail(CUresult.NOT_SUPPORTED, call, 'the emulated backend can only view a backing ArrayBuffer from its first byte; view sub-ranges of that instead');
    }
    return store.buffer;
  }

  /**
   * A stable address for JavaScript memory: each ArrayBuffer gets a base address (held weakly) the
   * first time it is seen, and a view's address is that base plus its byteOffset. Copies may use it
   * (unified addressing copies pageable memory), registered or not.
   */
  addressOf(memory: HostMemory): Ptr {
    const { buffer, byteOffset } = hostBytes(memory);
    let entry = this.jsAddresses.get(buffer);
    if (entry === undefined) {
      const size = Math.max(buffer.byteLength, 1);
      entry = new PageableBuffer(this.jsRange.take(size, 64, 'addressOf'), size, new WeakRef(buffer));
      this.jsAddresses.set(buffer, entry);
      this.pageableIndex.insert(entry);
      this.pageableCleanup.register(buffer, entry);
    }
    return entry.base + byteOffset;
  }

  // --- Copies and fills ---

  /** cuMemcpy: synchronous, after all queued work. */
  memcpy(dst: Ptr, src: Ptr, bytes: number): void {
    const call = 'cuMemcpy';
    checkCount(bytes, call, 'bytes');
    this.scheduler.drainAll();
    if (bytes === 0) return;
    copySpans(this.spans(dst, bytes, true, call), this.spans(src, bytes, false, call));
  }

  /** cuMemcpyAsync: checked now, runs in stream order. */
  memcpyAsync(dst: Ptr, src: Ptr, bytes: number, stream: Handle): void {
    const call = 'cuMemcpyAsync';
    checkCount(bytes, call, 'bytes');
    const s = this.stream(stream, call);
    if (bytes === 0) return;
    const d = this.spans(dst, bytes, true, call);
    const from = this.spans(src, bytes, false, call);
    this.enqueue(s, () => copySpans(d, from));
  }

  /** cuMemcpyHtoD from JavaScript memory; synchronous. */
  memcpyFromHost(dst: Ptr, src: HostMemory, bytes: number): void {
    const call = 'cuMemcpyHtoD';
    checkCount(bytes, call, 'bytes');
    const { buffer, byteOffset, byteLength } = hostBytes(src);
    if (bytes > byteLength) invalidValue(call, `${bytes} bytes requested from host memory of ${byteLength}`);
    this.scheduler.drainAll();
    if (bytes === 0) return;
    copySpans(this.spans(dst, bytes, true, call), [{ store: new EagerStore(buffer, byteOffset, bytes), offset: 0, length: bytes }]);
  }

  /** cuMemcpyDtoH to JavaScript memory; synchronous. */
  memcpyToHost(dst: HostMemory, src: Ptr, bytes: number): void {
    const call = 'cuMemcpyDtoH';
    checkCount(bytes, call, 'bytes');
    const { buffer, byteOffset, byteLength } = hostBytes(dst);
    if (bytes > byteLength) invalidValue(call, `${bytes} bytes requested into host memory of ${byteLength}`);
    this.scheduler.drainAll();
    if (bytes === 0) return;
    copySpans([{ store: new EagerStore(buffer, byteOffset, bytes), offset: 0, length: bytes }], this.spans(src, bytes, false, call));
  }

  /** cuMemcpyPeer: a copy between contexts (no peer access needed). */
  memcpyPeer(dst: Ptr, dstCtx: Handle, src: Ptr, srcCtx: Handle, bytes: number): void {
    const call = 'cuMemcpyPeer';
    this.context(dstCtx, call);
    this.context(srcCtx, call);
    checkCount(bytes, call, 'bytes');
    this.scheduler.drainAll();
    if (bytes === 0) return;
    copySpans(this.spans(dst, bytes, true, call), this.spans(src, bytes, false, call));
  }

  /** cuMemcpyPeerAsync: checked now, runs in stream order. */
  memcpyPeerAsync(dst: Ptr, dstCtx: Handle, src: Ptr, srcCtx: Handle, bytes: number, stream: Handle): void {
    const call = 'cuMemcpyPeerAsync';
    this.context(dstCtx, call);
    this.context(srcCtx, call);
    checkCount(bytes, call, 'bytes');
    const s = this.stream(stream, call);
    if (bytes === 0) return;
    const d = this.spans(dst, bytes, true, call);
    const from = this.spans(src, bytes, false, call);
    this.enqueue(s, () => copySpans(d, from));
  }

  /** cuMemcpy2D: synchronous. */
  memcpy2D(copy: Memcpy2D): void {
    const rows = this.rows(copy, 'cuMemcpy2D');
    this.scheduler.drainAll();
    for (const [d, s] of rows) copySpans(d, s);
  }

  /** cuMemcpy2DAsync: checked now, runs in stream order. */
  memcpy2DAsync(copy: Memcpy2D, stream: Handle): void {
    const call = 'cuMemcpy2DAsync';
    const s = this.stream(stream, call);
    const rows = this.rows(copy, call);
    if (rows.length === 0) return;
    this.enqueue(s, () => { for (const [d, from] of rows) copySpans(d, from); });
  }

  /** cuMemsetD8/D16/D32: synchronous; `ptr` must be aligned to the element size. */
  memset(ptr: Ptr, value: number, elementBytes: 1 | 2 | 4, count: number): void {
    const fill = this.fill(ptr, value, elementBytes, count, `cuMemsetD${elementBytes * 8}`);
    this.scheduler.drainAll();
    fill?.();
  }

  /** cuMemsetD8/D16/D32Async: checked now, runs in stream order. */
  memsetAsync(ptr: Ptr, value: number, elementBytes: 1 | 2 | 4, count: number, stream: Handle): void {
    const call = `cuMemsetD${elementBytes * 8}Async`;
    const s = this.stream(stream, call);
    const fill = this.fill(ptr, value, elementBytes, count, call);
    if (fill !== undefined) this.enqueue(s, fill);
  }

  // --- Streams and events ---

  /** cuStreamCreateWithPriority: priority is clamped to [0, -5] as the driver clamps. */
  streamCreate(flags: number, priority: number): Handle {
    const call = 'cuStreamCreateWithPriority';
    if (flags !== 0 && flags !== 1) invalidValue(call, `unknown stream flags ${flags}`);
    if (!Number.isInteger(priority)) invalidValue(call, `priority must be a whole number, got ${priority}`);
    const ctx = this.ctx(call);
    const clamped = Math.min(PRIORITY_RANGE[0], Math.max(PRIORITY_RANGE[1], priority));
    const stream = new StreamState(this.handle(), flags, clamped, ctx.handle, false);
    this.streams.set(stream.handle, stream);
    this.scheduler.add(stream);
    return stream.handle;
  }

  /** cuStreamDestroy: the stream's queued work still runs (now). */
  streamDestroy(stream: Handle): void {
    const s = this.streams.get(stream);
    if (s === undefined) {
      // Not the legacy stream either: 0 is not a stream that can be destroyed.
      if (this.destroyedStreams.has(stream)) fail(CUresult.INVALID_CONTEXT, 'cuStreamDestroy', `stream ${stream} was destroyed`);
      fail(CUresult.INVALID_HANDLE, 'cuStreamDestroy', `unknown stream ${stream}`);
    }
    this.scheduler.remove(s);
    this.streams.delete(stream);
    this.destroyedStreams.add(stream);
  }

  /** cuStreamSynchronize: runs the stream's work, then releases pool memory above thresholds. */
  streamSynchronize(stream: Handle): void {
    this.stream(stream, 'cuStreamSynchronize').drain();
    this.releasePools();
  }

  /**
   * cuStreamQuery. Deterministic rule: a query runs the stream's queued work and reports true
   * (the emulated device finishes work as soon as anyone looks).
   */
  streamQuery(stream: Handle): boolean {
    this.stream(stream, 'cuStreamQuery').drain();
    return true;
  }

  /** cuStreamWaitEvent: later work on `stream` runs after the event's recorded point. */
  streamWaitEvent(stream: Handle, event: Handle): void {
    const call = 'cuStreamWaitEvent';
    const s = this.stream(stream, call);
    const e = this.event(event, call);
    if (e.recordedAt === undefined || e.completed) return;
    this.enqueue(s, undefined, [e.recordedAt]);
  }

  /** [0, -5], as current GPUs report. */
  streamPriorityRange(): readonly [least: number, greatest: number] {
    return PRIORITY_RANGE;
  }

  /** cuEventCreate. */
  eventCreate(flags: number): Handle {
    if (!Number.isInteger(flags) || (flags & ~0x7) !== 0) invalidValue('cuEventCreate', `unknown event flags ${flags}`);
    if ((flags & 0x4) !== 0 && (flags & 0x2) === 0) invalidValue('cuEventCreate', 'INTERPROCESS events need DISABLE_TIMING');
    this.ctx('cuEventCreate');
    const e = new EventState(this.handle(), flags);
    this.events.set(e.handle, e);
    return e.handle;
  }

  /** cuEventDestroy. */
  eventDestroy(event: Handle): void {
    this.event(event, 'cuEventDestroy');
    this.events.delete(event);
    this.destroyedEvents.add(event);
  }

  /** cuEventRecord: the event completes (and takes its time) when the stream reaches it. */
  eventRecord(event: Handle, stream: Handle): void {
    const call = 'cuEventRecord';
    const e = this.event(event, call);
    const s = this.stream(stream, call);
    const generation = ++e.generation;
    e.completed = false;
    e.recordedAt = this.enqueue(s, () => {
      if (e.generation !== generation) return;
      e.completed = true;
      e.time = performance.now();
    });
  }

  /** cuEventQuery: like streamQuery, runs the work up to the event and reports true. */
  eventQuery(event: Handle): boolean {
    this.runToEvent(this.event(event, 'cuEventQuery'));
    return true;
  }

  /** cuEventSynchronize: runs the work up to the event, then releases pool memory above thresholds. */
  eventSynchronize(event: Handle): void {
    this.runToEvent(this.event(event, 'cuEventSynchronize'));
    this.releasePools();
  }

  /**
   * cuEventElapsedTime: milliseconds between the moments the two records ran. Unrecorded events
   * and events without timing are CUDA_ERROR_INVALID_HANDLE; records not run yet CUDA_ERROR_NOT_READY.
   */
  eventElapsedTime(start: Handle, end: Handle): number {
    const call = 'cuEventElapsedTime';
    const a = this.event(start, call);
    const b = this.event(end, call);
    for (const e of [a, b]) {
      if (e.timingDisabled) fail(CUresult.INVALID_HANDLE, call, 'the event was created with DISABLE_TIMING');
      if (e.recordedAt === undefined) fail(CUresult.INVALID_HANDLE, call, 'the event has not been recorded');
    }
    if (!a.completed || !b.completed) fail(CUresult.NOT_READY, call);
    return b.time - a.time;
  }

  // --- Stream-ordered allocation ---

  /**
   * cuMemAllocAsync from the default pool of the stream's device. 0 bytes succeed and allocate
   * nothing (the driver leaves the pointer unset; the null pointer here), unlike cuMemAlloc.
   */
  memAllocAsync(bytes: number, stream: Handle): Ptr {
    const call = 'cuMemAllocAsync';
    checkCount(bytes, call, 'size');
    const s = this.stream(stream, call);
    if (bytes === 0) return 0;
    // The default pool of the stream's device (the stream carries its context).
    return this.poolAlloc(this.defaultPool(this.context(s.context, call).device.ordinal), bytes, s, call);
  }

  /** cuMemAllocFromPoolAsync; 0 bytes as in memAllocAsync. */
  memAllocFromPoolAsync(bytes: number, pool: Handle, stream: Handle): Ptr {
    const call = 'cuMemAllocFromPoolAsync';
    checkCount(bytes, call, 'size');
    const p = this.pool(pool, call);
    const s = this.stream(stream, call);
    if (bytes === 0) return 0;
    return this.poolAlloc(p, bytes, s, call);
  }

  /**
   * cuMemFreeAsync: the block returns to its pool when `stream` reaches the free. The null pointer
   * (what a 0-byte memAllocAsync returns) is accepted and frees nothing, as on the driver.
   */
  memFreeAsync(ptr: Ptr, stream: Handle): void {
    const call = 'cuMemFreeAsync';
    const s = this.stream(stream, call);
    if (ptr === 0) return;
    const block = this.poolBlocks.get(ptr);
    if (block === undefined) {
      const a = this.deviceIndex.find(ptr);
      if (a !== undefined && a.base === ptr && a.kind === 'device') {
        // The driver accepts cuMemAlloc memory too: it is freed when the stream reaches the free.
        this.enqueue(s, () => { if (a.live) this.dropAllocation(this.deviceIndex, a); });
        return;
      }
      invalidValue(call, `${hex(ptr)} is not a stream-ordered allocation`);
    }
    this.poolBlocks.delete(ptr);
    const complete = block.pool.free(block, s);
    this.enqueue(s, complete);
  }

  /** The device's default pool (created on first use). */
  deviceGetDefaultMemPool(ordinal: number): Handle {
    this.device(ordinal, 'cuDeviceGetDefaultMemPool');
    return this.defaultPool(ordinal).handle;
  }

  /** cuMemPoolCreate. */
  memPoolCreate(props: MemPoolProps): Handle {
    const call = 'cuMemPoolCreate';
    this.device(props.device, call);
    const maxSize = props.maxSize ?? 0;
    const handleTypes = props.handleTypes ?? 0;
    checkCount(maxSize, call, 'maxSize');
    if (handleTypes !== 0 && handleTypes !== 1) invalidValue(call, `unsupported handle types ${handleTypes}`);
    return this.newPool(props.device, maxSize, handleTypes, call).handle;
  }

  /** cuMemPoolDestroy: default pools cannot be destroyed; memory still allocated goes with it. */
  memPoolDestroy(pool: Handle): void {
    const call = 'cuMemPoolDestroy';
    const p = this.pool(pool, call);
    if ([...this.defaultPools.values()].includes(p)) invalidValue(call, 'a default pool cannot be destroyed');
    this.scheduler.drainAll();
    for (const b of p.allocatedBlocks()) this.poolBlocks.delete(b.address);
    p.destroy();
    this.poolIndex.remove(p);
    this.pools.delete(pool);
  }

  /** cuMemPoolTrimTo: releases whole free segments until at most `minBytesToKeep` remain reserved. */
  memPoolTrimTo(pool: Handle, minBytesToKeep: number): void {
    const call = 'cuMemPoolTrimTo';
    const p = this.pool(pool, call);
    checkCount(minBytesToKeep, call, 'minBytesToKeep');
    p.releaseTo(minBytesToKeep);
  }

  /** cuMemPoolGetAttribute. */
  memPoolGetAttribute(pool: Handle, attribute: MemPoolAttribute): number {
    const call = 'cuMemPoolGetAttribute';
    const p = this.pool(pool, call);
    switch (attribute) {
      case 1: case 2: case 3: return p.reuse.get(attribute) ?? 1;
      case 4: return p.releaseThreshold;
      case 5: return p.reserved;
      case 6: return p.reservedHigh;
      case 7: return p.used;
      case 8: return p.usedHigh;
      default: return invalidValue(call, `unknown attribute ${String(attribute)}`);
    }
  }

  /** cuMemPoolSetAttribute: the high-water marks accept only 0 (reset); current values are read-only. */
  memPoolSetAttribute(pool: Handle, attribute: MemPoolAttribute, value: number): void {
    const call = 'cuMemPoolSetAttribute';
    const p = this.pool(pool, call);
    checkCount(value, call, 'value');
    switch (attribute) {
      case 1: case 2: case 3:
        p.reuse.set(attribute, value === 0 ? 0 : 1);
        return;
      case 4:
        p.releaseThreshold = value;
        return;
      case 6: case 8:
        if (value !== 0) invalidValue(call, 'high-water marks can only be reset to 0');
        if (attribute === 6) p.reservedHigh = p.reserved;
        else p.usedHigh = p.used;
        return;
      default:
        invalidValue(call, `attribute ${String(attribute)} cannot be set`);
    }
  }

  /** cuMemPoolSetAccess: access of another device to the pool's memory. */
  memPoolSetAccess(pool: Handle, ordinal: number, flags: number): void {
    const call = 'cuMemPoolSetAccess';
    const p = this.pool(pool, call);
    this.device(ordinal, call);
    if (flags !== 0 && flags !== 1 && flags !== 3) invalidValue(call, `unknown access flags ${flags}`);
    if (ordinal === p.device && flags !== 3) invalidValue(call, "a pool's own device always has read-write access");
    p.access.set(ordinal, flags);
  }

  /** cuMemPoolGetAccess. */
  memPoolGetAccess(pool: Handle, ordinal: number): number {
    const call = 'cuMemPoolGetAccess';
    const p = this.pool(pool, call);
    this.device(ordinal, call);
    return ordinal === p.device ? 3 : p.access.get(ordinal) ?? 0;
  }

  // --- Virtual memory management ---

  /** 2 MiB, as on current GPUs. */
  memGetAllocationGranularity(ordinal: number): number {
    this.device(ordinal, 'cuMemGetAllocationGranularity');
    return VMM_GRANULARITY;
  }

  /** cuMemAddressReserve: a multiple of the granularity, aligned as asked (default 2 MiB); no capacity. */
  memAddressReserve(bytes: number, alignment: number): Ptr {
    const call = 'cuMemAddressReserve';
    checkSize(bytes, call);
    checkCount(alignment, call, 'alignment');
    if (bytes % VMM_GRANULARITY !== 0) invalidValue(call, `size must be a multiple of ${VMM_GRANULARITY}`);
    if (alignment !== 0 && (alignment & (alignment - 1)) !== 0 && Math.log2(alignment) % 1 !== 0) invalidValue(call, 'alignment must be a power of two');
    // A reservation is address space only: the driver needs no current context for it.
    const ctx = this.contextFor(0);
    const base = this.virtualRange.take(bytes, Math.max(alignment, VMM_GRANULARITY), call);
    this.virtualIndex.insert(new Reservation(base, bytes, ctx.device.ordinal, ctx.handle));
    return base;
  }

  /** cuMemAddressFree: the whole reservation; anything still mapped is unmapped. */
  memAddressFree(ptr: Ptr, bytes: number): void {
    const call = 'cuMemAddressFree';
    const r = this.virtualIndex.find(ptr);
    if (r === undefined || r.base !== ptr || r.size !== bytes) invalidValue(call, 'not a reservation');
    this.scheduler.drainAll();
    this.releaseMappings(r.unmapAll());
    this.virtualIndex.remove(r);
  }

  /** cuMemCreate: lazily backed physical memory, charged against capacity. */
  memCreate(bytes: number, ordinal: number): Handle {
    const call = 'cuMemCreate';
    checkSize(bytes, call);
    const device = this.device(ordinal, call);
    if (bytes % VMM_GRANULARITY !== 0) invalidValue(call, `size must be a multiple of ${VMM_GRANULARITY}`);
    device.charge(bytes, call);
    const memory = new PhysicalMemory(this.handle(), bytes, ordinal);
    this.physical.add(memory);
    return memory.handle;
  }

  /** cuMemRelease: capacity goes back once the memory is no longer mapped. */
  memRelease(handle: Handle): void {
    const memory = this.physical.release(handle, 'cuMemRelease');
    if (memory !== undefined) this.devices[memory.device]!.uncharge(memory.size);
  }

  /**
   * cuMemMap: maps a whole physical allocation at `ptr` inside a reservation. As on the driver, a
   * size other than the allocation's is CUDA_ERROR_NOT_SUPPORTED, whatever the address (checked
   * first); a range already mapped is CUDA_ERROR_INVALID_VALUE.
   */
  memMap(ptr: Ptr, bytes: number, handle: Handle): void {
    const call = 'cuMemMap';
    checkSize(bytes, call);
    const memory = this.physical.get(handle, call);
    if (bytes % VMM_GRANULARITY !== 0) invalidValue(call, `size must be a multiple of the ${VMM_GRANULARITY}-byte granularity`);
    if (bytes !== memory.size) {
      fail(CUresult.NOT_SUPPORTED, call, `a mapping of ${bytes} bytes of a ${memory.size}-byte allocation (only whole allocations map)`);
    }
    const r = this.virtualIndex.find(ptr);
    if (r === undefined) invalidValue(call, `${hex(ptr)} is not in a reserved range`);
    r.map(ptr - r.base, bytes, memory, call);
  }

  /** cuMemUnmap: the range must cover whole mappings (a range with none in it is fine). */
  memUnmap(ptr: Ptr, bytes: number): void {
    const call = 'cuMemUnmap';
    checkSize(bytes, call);
    const r = this.virtualIndex.find(ptr);
    if (r === undefined) invalidValue(call, `${hex(ptr)} is not in a reserved range`);
    this.scheduler.drainAll();
    this.releaseMappings(r.unmap(ptr - r.base, bytes, call));
  }

  /** cuMemSetAccess: grants a device access to mapped memory. */
  memSetAccess(ptr: Ptr, bytes: number, ordinal: number, flags: number): void {
    const call = 'cuMemSetAccess';
    checkSize(bytes, call);
    this.device(ordinal, call);
    if (flags !== 0 && flags !== 1 && flags !== 3) invalidValue(call, `unknown access flags ${flags}`);
    const r = this.virtualIndex.find(ptr);
    if (r === undefined || ptr - r.base + bytes > r.size) invalidValue(call, `${hex(ptr)} is not in a reserved range`);
    r.setAccess(ptr - r.base, bytes, ordinal, flags, call);
  }

  // --- Pointer attributes ---

  /** What the emulated driver knows about `ptr`; memoryType 0 and device -1 when nothing. */
  pointerGetAttributes(ptr: Ptr): PointerAttributes {
    const a = typeof ptr === 'number' ? this.lookup(ptr) : undefined;
    if (a === undefined) return { memoryType: 0, device: -1, isManaged: false, rangeStart: 0, rangeSize: 0, context: 0 };
    let rangeStart = a.base;
    let rangeSize = a.size;
    if (a instanceof PoolState) {
      const block = a.blockAt(ptr);
      if (block !== undefined) {
        rangeStart = block.address;
        rangeSize = block.size;
      }
    }
    const memoryType = a.kind === 'managed' ? MemoryType.UNIFIED
      : a.kind === 'pinned' || a.kind === 'registered' ? MemoryType.HOST : MemoryType.DEVICE;
    return { memoryType, device: a.device, isManaged: a.kind === 'managed', rangeStart, rangeSize, context: a.context };
  }

  // --- Emulation internals ---

  /** Bytes of device capacity in use on `ordinal` (for tests and `vram info`). */
  capacityUsed(ordinal = 0): number {
    return this.device(ordinal, 'capacityUsed').used;
  }

  private handle(): number {
    return this.nextHandle++;
  }

  private device(ordinal: number, call: string): DeviceState {
    const device = Number.isInteger(ordinal) ? this.devices[ordinal] : undefined;
    if (device === undefined) fail(CUresult.INVALID_DEVICE, call, `no emulated device ${ordinal}`);
    return device;
  }

  private newContext(device: DeviceState, flags: number, primary: boolean): ContextState {
    const handle = this.handle();
    const legacy = new StreamState(0, 0, 0, handle, true);
    const ctx = new ContextState(handle, device, flags, primary, legacy);
    this.contexts.set(handle, ctx);
    this.scheduler.add(legacy);
    return ctx;
  }

  private context(handle: Handle, call: string): ContextState {
    const ctx = this.contexts.get(handle);
    if (ctx === undefined) fail(CUresult.INVALID_CONTEXT, call, `unknown context ${handle}`);
    return ctx;
  }

  /** What destroying a context takes with it: its queued work runs, its streams, memory and peers go. */
  private dropContextResources(context: ContextState): void {
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

  private currentHandle(): Handle {
    return this.stack.length === 0 ? 0 : this.stack[this.stack.length - 1]!;
  }

  /**
   * The current context, which `call` needs: with none current it fails with
   * CUDA_ERROR_INVALID_CONTEXT, as the driver does (no implicit primary context: that is the
   * runtime API's behaviour, not the driver's, and code that relied on it would fail on a GPU).
   */
  private ctx(call: string): ContextState {
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
  private contextFor(ordinal: number): ContextState {
    const current = this.contexts.get(this.currentHandle());
    if (current !== undefined && !current.destroyed) return current;
    const device = this.devices[ordinal]!;
    device.primary ??= this.newContext(device, 0, true).handle;
    return this.contexts.get(device.primary)!;
  }

  private stream(handle: Handle, call: string): StreamState {
    // 0 and 1 (CU_STREAM_LEGACY) are the current context's legacy default stream.
    if (handle === 0 || handle === 1) return this.ctx(call).legacy;
    const s = this.streams.get(handle);
    if (s === undefined) {
      if (this.destroyedStreams.has(handle)) fail(CUresult.INVALID_CONTEXT, call, `stream ${handle} was destroyed`);
      fail(CUresult.INVALID_HANDLE, call, `unknown stream ${handle}`);
    }
    return s;
  }

  private event(handle: Handle, call: string): EventState {
    const e = this.events.get(handle);
    if (e === undefined) {
      if (this.destroyedEvents.has(handle)) fail(CUresult.CONTEXT_IS_DESTROYED, call, `event ${handle} was destroyed`);
      fail(CUresult.INVALID_HANDLE, call, `unknown event ${handle}`);
    }
    return e;
  }

  private pool(handle: Handle, call: string): PoolState {
    const p = this.pools.get(handle);
    if (p === undefined) invalidValue(call, `unknown memory pool ${handle}`);
    return p;
  }

  private defaultPool(ordinal: number): PoolState {
    let pool = this.defaultPools.get(ordinal);
    if (pool === undefined) {
      pool = this.newPool(ordinal, 0, 0, 'cuDeviceGetDefaultMemPool');
      this.defaultPools.set(ordinal, pool);
    }
    return pool;
  }

  /**
   * A new pool with its own virtual address range: four times the device's capacity (or its
   * maxSize), enough for any fragmentation the capacity allows.
   */
  private newPool(ordinal: number, maxSize: number, handleTypes: number, call: string): PoolState {
    const device = this.devices[ordinal]!;
    const span = Math.ceil((maxSize > 0 ? Math.min(maxSize, device.capacity) : device.capacity) * 4 / POOL_SEGMENT_GRANULARITY)
      * POOL_SEGMENT_GRANULARITY;
    const base = this.poolRange.take(span, POOL_SEGMENT_GRANULARITY, call);
    const pool = new PoolState(this.handle(), ordinal, this.contextFor(ordinal).handle, maxSize, handleTypes, base, span, this.poolHost);
    this.pools.set(pool.handle, pool);
    this.poolIndex.insert(pool);
    return pool;
  }

  private enqueue(stream: StreamState, run: (() => void) | undefined, deps?: readonly StreamPoint[]): StreamPoint {
    const legacy = stream.legacy ? undefined : this.contexts.get(stream.context)?.legacy;
    return this.scheduler.enqueue(stream, run, deps, legacy);
  }

  private runToEvent(e: EventState): void {
    if (e.recordedAt !== undefined) e.recordedAt.stream.runTo(e.recordedAt.position);
  }

  private synchronizeAll(): void {
    this.scheduler.drainAll();
    this.releasePools();
  }

  private releasePools(): void {
    for (const pool of this.pools.values()) pool.releaseAboveThreshold();
  }

  private poolAlloc(pool: PoolState, bytes: number, stream: StreamState, call: string): Ptr {
    const block = pool.allocate(bytes, stream, call);
    this.poolBlocks.set(block.address, block);
    return block.address;
  }

  private allocDevice(bytes: number, call: string): Ptr {
    checkSize(bytes, call);
    const ctx = this.ctx(call);
    const large = bytes >= LARGE_ALLOCATION;
    const charged = large ? Math.ceil(bytes / LARGE_PAGE) * LARGE_PAGE : Math.ceil(bytes / DEVICE_ALIGNMENT) * DEVICE_ALIGNMENT;
    ctx.device.charge(charged, call, bytes);
    const base = this.deviceRange.take(charged, large ? LARGE_PAGE : DEVICE_ALIGNMENT, call);
    this.deviceIndex.insert(new PlainAllocation('device', base, bytes, ctx.device.ordinal, ctx.handle, new LazyStore(bytes), charged, 0));
    return base;
  }

  private dropAllocation(index: IntervalIndex<Allocation>, a: Allocation): void {
    index.remove(a);
    if (a.charged > 0) this.devices[a.device]!.uncharge(a.charged);
  }

  private releaseMappings(memories: readonly PhysicalMemory[]): void {
    for (const m of memories) {
      if (m.released && m.mappings === 0) this.devices[m.device]!.uncharge(m.size);
    }
  }

  private eagerStore(bytes: number, call: string): EagerStore {
    let buffer: ArrayBuffer;
    try {
      buffer = new ArrayBuffer(bytes);
    } catch {
      return outOfMemory(bytes, call, `the host cannot back ${bytes} bytes`);
    }
    return new EagerStore(buffer, 0, bytes);
  }

  private checkManaged(ptr: Ptr, bytes: number, call: string): void {
    checkSize(bytes, call);
    const a = this.managedIndex.find(ptr);
    if (a === undefined || ptr - a.base + bytes > a.size) invalidValue(call, `${hex(ptr)} + ${bytes} is not managed memory`);
  }

  private location(location: MemLocation, call: string): void {
    if (location !== 'host') this.device(location, call);
  }

  /** The allocation containing `address`, of any kind (registered JavaScript memory included). */
  private lookup(address: number): Allocation | undefined {
    if (this.deviceRange.contains(address)) return this.deviceIndex.find(address);
    if (this.managedRange.contains(address)) return this.managedIndex.find(address);
    if (this.virtualRange.contains(address)) return this.virtualIndex.find(address);
    if (this.pinnedRange.contains(address)) return this.pinnedIndex.find(address);
    if (this.poolRange.contains(address)) return this.poolIndex.find(address);
    if (this.jsRange.contains(address)) return this.registeredIndex.find(address);
    return undefined;
  }

  /** The bytes behind [address, address + bytes), or CUDA_ERROR_INVALID_VALUE. */
  private spans(address: number, bytes: number, write: boolean, call: string): Span[] {
    if (typeof address !== 'number' || !Number.isSafeInteger(address)) invalidValue(call, `bad address ${String(address)}`);
    const a = this.lookup(address);
    if (a === undefined) {
      if (this.jsRange.contains(address)) return this.pageableSpans(address, bytes, call);
      invalidValue(call, `${hex(address)} is not in any allocation`);
    }
    const offset = address - a.base;
    if (offset + bytes > a.size) invalidValue(call, `[${hex(address)}, +${bytes}) extends past its allocation of ${a.size} bytes`);
    if (a instanceof Reservation) return a.spans(offset, bytes, this.contextFor(a.device).device.ordinal, write, call);
    return [{ store: a.store!, offset, length: bytes }];
  }

  private pageableSpans(address: number, bytes: number, call: string): Span[] {
    const entry = this.pageableIndex.find(address);
    const buffer = entry?.buffer.deref();
    if (entry === undefined || buffer === undefined) invalidValue(call, `${hex(address)} is not in any allocation`);
    const offset = address - entry.base;
    if (offset + bytes > buffer.byteLength) invalidValue(call, `[${hex(address)}, +${bytes}) extends past its ArrayBuffer`);
    return [{ store: new EagerStore(buffer, 0, buffer.byteLength), offset, length: bytes }];
  }

  private rows(copy: Memcpy2D, call: string): [Span[], Span[]][] {
    const { dst, dstPitch, src, srcPitch, widthBytes, height } = copy;
    checkCount(widthBytes, call, 'widthBytes');
    checkCount(height, call, 'height');
    checkCount(dstPitch, call, 'dstPitch');
    checkCount(srcPitch, call, 'srcPitch');
    if (height > 1 && (dstPitch < widthBytes || srcPitch < widthBytes)) invalidValue(call, 'pitches must be at least the width');
    const rows: [Span[], Span[]][] = [];
    if (widthBytes === 0 || height === 0) return rows;
    for (let r = 0; r < height; r++) {
      rows.push([this.spans(dst + r * dstPitch, widthBytes, true, call), this.spans(src + r * srcPitch, widthBytes, false, call)]);
    }
    return rows;
  }

  private fill(ptr: Ptr, value: number, elementBytes: 1 | 2 | 4, count: number, call: string): (() => void) | undefined {
    if (elementBytes !== 1 && elementBytes !== 2 && elementBytes !== 4) invalidValue(call, `element size must be 1, 2 or 4, got ${String(elementBytes)}`);
    checkCount(count, call, 'count');
    if (!Number.isInteger(value)) invalidValue(call, `value must be a whole number, got ${value}`);
    if (ptr % elementBytes !== 0) invalidValue(call, `${hex(ptr)} is not aligned to ${elementBytes} bytes`);
    if (count === 0) return undefined;
    const spans = this.spans(ptr, count * elementBytes, true, call);
    const pattern = fillPattern(value, elementBytes);
    return () => { for (const s of spans) s.store.fill(s.offset, s.length, pattern); };
  }
}

function hex(address: number): string {
  return typeof address === 'number' ? `0x${address.toString(16)}` : String(address);
}
