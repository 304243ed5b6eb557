/**
 * The real GPU backend: every Backend operation over the CUDA driver API (libcuda) through koffi.
 *
 * Hot-path rules (a koffi call costs ~45 ns; anything more shows in allocate+free pairs): handles
 * and addresses pass as plain numbers, out-parameters are preallocated typed arrays read with
 * `Number(out[0])`, and the allocation calls are one FFI call plus one `r !== 0` test, with error
 * construction kept out of line. The allocation calls write their pointer into a native OutSlot
 * whose address is passed as a number and which is read as two 32-bit words (no typed-array
 * pointer argument, no BigInt): see src/cuda/out-slot.ts and bench/ffi-overhead/run.mjs.
 */
import koffi from 'koffi';
import type {
  Backend,
  DeviceInfo,
  FunctionAttributes,
  Handle,
  HostMemory,
  KernelLimits,
  KernelParams,
  MemInfo,
  MemLocation,
  Memcpy2D,
  MemPoolAttribute,
  MemPoolProps,
  ModuleImage,
  ParamType,
  PointerAttributes,
  Ptr,
} from './backend.js';
import { DEFAULT_STREAM, FABRIC_HANDLE_BYTES, IPC_HANDLE_BYTES, MemHandleType } from './backend.js';
import { checkIpcHandle, checkStreamValue32 } from './argument-checks.js';
import { LiveStreams } from './live-streams.js';
import { paramLayout } from './param-layout.js';
import { CUresult, CudaError, type OutOfMemoryError } from '../errors.js';
import type { CollectiveTransport } from './collectives.js';
import { ncclCollectives } from './nccl-collectives.js';
import { loadOnce } from '../util/load-once.js';
import { checkBytes, checkNonNegativeInteger } from '../validate.js';
import { openDriver, type CudaDriver } from '../cuda/driver.js';
import type { DriverFunctions } from '../cuda/entry-points.js';
import { HIGH_WORD_MAX, OutSlot, TWO_32, beyondExactError } from '../cuda/out-slot.js';
import {
  AllocationGranularity,
  DeviceAttribute,
  DEVICE_CPU,
  FunctionAttribute,
  GraphNodeType,
  MemAllocationType,
  MEMORYTYPE_UNIFIED,
  MemLocationType,
  PointerAttribute,
  type Memcpy2DValue,
  type MemAllocationPropValue,
  type MemLocationValue,
} from '../cuda/types.js';

/** Largest address or handle a JS number holds exactly. */
const MAX_EXACT = Number.MAX_SAFE_INTEGER;

/** The pointer attributes fetched by pointerGetAttributes, in slot order (8 bytes per slot). */
const POINTER_ATTRIBUTES = [
  PointerAttribute.CONTEXT,
  PointerAttribute.MEMORY_TYPE,
  PointerAttribute.IS_MANAGED,
  PointerAttribute.DEVICE_ORDINAL,
  PointerAttribute.RANGE_START_ADDR,
  PointerAttribute.RANGE_SIZE,
  PointerAttribute.MEMPOOL_HANDLE,
] as const;

/**
 * Frees a kernel's native parameter block once nothing can reach it: the block's ArrayBuffer (a
 * view of the native memory) is what KernelParams holds, so when it is collected no launch can
 * use the memory any more (the driver copies the parameters during cuLaunchKernel itself).
 */
const paramBlocks = new FinalizationRegistry<bigint>((base) => koffi.free(base));

/** Pool attributes whose value is an `int` (the reuse policies); the rest are cuuint64_t. */
function isIntPoolAttribute(attribute: number): boolean {
  return attribute >= 1 && attribute <= 3;
}

/** The Backend over libcuda. One instance per process (see loadCudaBackend). */
class CudaBackend implements Backend {
  readonly name = 'cuda' as const;
  readonly kernelCode = 'device' as const;
  private readonly fn: DriverFunctions;
  // Preallocated out-parameters: no allocation per call.
  private readonly u64 = new BigUint64Array(1);
  private readonly u64b = new BigUint64Array(1);
  private readonly i32 = new Int32Array(1);
  private readonly i32b = new Int32Array(1);
  private readonly u32 = new Uint32Array(1);
  private readonly f32 = new Float32Array(1);
  // The allocation calls' out-parameter (native memory): its address, its two 32-bit words, and
  // a double alias to clear it in one store. Fields of their own, read straight off `this`.
  private readonly outAddress: number;
  private readonly outWords: Uint32Array;
  private readonly outZero: Float64Array;
  private readonly text = new Uint8Array(256);
  /** CUdevice for each ordinal, looked up once. */
  private readonly devices: number[] = [];
  /** Streams created here or adopted, not destroyed or forgotten (the driver cannot be asked safely: see streamKnown). */
  private readonly liveStreams = new LiveStreams();
  /** The context this thread last made current through this backend; undefined when unknown. */
  private currentContext: Handle | undefined;
  /** Reused descriptor objects (koffi copies them in on each call). */
  private readonly location: MemLocationValue = { type: MemLocationType.DEVICE, id: 0 };
  private readonly accessDesc = { location: this.location, flags: 0 };
  /** False once the driver refused exportable physical memory (cuMemCreate with POSIX descriptors): later ones are plain. */
  private exportableMemory = true;
  private readonly copy2D: Memcpy2DValue = {
    srcXInBytes: 0,
    srcY: 0,
    srcMemoryType: MEMORYTYPE_UNIFIED,
    srcHost: 0,
    srcDevice: 0,
    srcArray: 0,
    srcPitch: 0,
    dstXInBytes: 0,
    dstY: 0,
    dstMemoryType: MEMORYTYPE_UNIFIED,
    dstHost: 0,
    dstDevice: 0,
    dstArray: 0,
    dstPitch: 0,
    WidthInBytes: 0,
    Height: 0,
  };
  /** Stable native memory the driver writes pointer attributes into, and the pointers to its slots. */
  private readonly attrSlots: DataView;
  private readonly attrSlotPointers: BigUint64Array;
  private readonly attrList = Int32Array.from(POINTER_ATTRIBUTES);
  // Hot entry points held in fields of their own: the table of all of them is a large object
  // built key by key, which V8 keeps in (slower) dictionary mode.
  private readonly allocAsync: DriverFunctions['cuMemAllocAsync'];
  private readonly allocFromPoolAsync: DriverFunctions['cuMemAllocFromPoolAsync'];
  private readonly freeAsync: DriverFunctions['cuMemFreeAsync'];
  private readonly alloc: DriverFunctions['cuMemAlloc_v2'];
  private readonly free: DriverFunctions['cuMemFree_v2'];
  private readonly copyAsync: DriverFunctions['cuMemcpyAsync'];
  private readonly setCurrent: DriverFunctions['cuCtxSetCurrent'];
  private readonly queryStream: DriverFunctions['cuStreamQuery'];
  private readonly recordEvent: DriverFunctions['cuEventRecord'];
  private readonly queryEvent: DriverFunctions['cuEventQuery'];
  private readonly launch: DriverFunctions['cuLaunchKernel'];
  /** Host functions by id (cuLaunchHostFunc's userData), with how many graphs and executable graphs hold each. */
  private readonly hostFns = new Map<number, { readonly fn: () => void; once: boolean; refs: number }>();
  private nextHostFn = 1;
  /** The ids of host functions captured, by capture id (0: the driver cannot say which capture). */
  private readonly capturedHostFns = new Map<number, number[]>();
  /** The ids of host functions each graph or executable graph holds. */
  private readonly graphHostFns = new Map<Handle, number[]>();
  /** The registered trampoline the driver calls for every host function, and its address. */
  private hostTrampoline: number | undefined;
  private readonly launchGraph: DriverFunctions['cuGraphLaunch'];
  /** kernelLimits per ordinal, read once (they are fixed for the device). */
  private readonly limits: KernelLimits[] = [];

  constructor(private readonly driver: CudaDriver) {
    const fn = driver.fn;
    this.fn = fn;
    const out = new OutSlot();
    this.outAddress = out.address;
    this.outWords = out.words;
    this.outZero = out.zero;
    this.allocAsync = fn.cuMemAllocAsync;
    this.allocFromPoolAsync = fn.cuMemAllocFromPoolAsync;
    this.freeAsync = fn.cuMemFreeAsync;
    this.alloc = fn.cuMemAlloc_v2;
    this.free = fn.cuMemFree_v2;
    this.copyAsync = fn.cuMemcpyAsync;
    this.setCurrent = fn.cuCtxSetCurrent;
    this.queryStream = fn.cuStreamQuery;
    this.recordEvent = fn.cuEventRecord;
    this.queryEvent = fn.cuEventQuery;
    this.launch = fn.cuLaunchKernel;
    this.launchGraph = fn.cuGraphLaunch;
    const slotBytes = 8 * POINTER_ATTRIBUTES.length;
    const base = koffi.alloc('uint64_t', POINTER_ATTRIBUTES.length) as bigint;
    this.attrSlots = new DataView(koffi.view(base, slotBytes));
    this.attrSlotPointers = BigUint64Array.from(POINTER_ATTRIBUTES, (_, i) => base + BigInt(8 * i));
  }

  // --- Failure paths (kept out of the hot functions) ---

  private fail(r: number, call: string, requestedBytes = 0): CudaError | OutOfMemoryError {
    return this.driver.errors.error(r, call, requestedBytes);
  }

  private check(r: number, call: string): void {
    if (r !== 0) throw this.fail(r, call);
  }

  /** Reads the 64-bit out-parameter as a number, refusing values a number cannot hold exactly. */
  private outNumber(call: string, out: BigUint64Array = this.u64): number {
    const value = Number(out[0]);
    if (value > MAX_EXACT) {
      throw new RangeError(`${call} returned 0x${(out[0] ?? 0n).toString(16)}, beyond 2^53: not representable as a JavaScript number`);
    }
    return value;
  }

  private device(ordinal: number): number {
    let dev = this.devices[ordinal];
    if (dev === undefined) {
      checkNonNegativeInteger(ordinal, 'device ordinal');
      this.check(this.fn.cuDeviceGet(this.i32, ordinal), 'cuDeviceGet');
      dev = this.i32[0] ?? 0;
      this.devices[ordinal] = dev;
    }
    return dev;
  }

  private attribute(dev: number, attribute: number): number {
    this.check(this.fn.cuDeviceGetAttribute(this.i32, attribute, dev), 'cuDeviceGetAttribute');
    return this.i32[0] ?? 0;
  }

  private readText(): string {
    const end = this.text.indexOf(0);
    return Buffer.from(this.text.buffer, this.text.byteOffset, end < 0 ? this.text.length : end).toString('utf8');
  }

  private setLocation(location: MemLocation): MemLocationValue {
    if (location === 'host') {
      this.location.type = MemLocationType.HOST;
      this.location.id = 0;
    } else {
      this.location.type = MemLocationType.DEVICE;
      this.location.id = this.device(location);
    }
    return this.location;
  }

  private deviceLocation(ordinal: number): MemLocationValue {
    this.location.type = MemLocationType.DEVICE;
    this.location.id = this.device(ordinal);
    return this.location;
  }

  private allocationProp(ordinal: number, handleTypes: number = MemHandleType.NONE): MemAllocationPropValue {
    return {
      type: MemAllocationType.PINNED,
      requestedHandleTypes: handleTypes,
      location: { type: MemLocationType.DEVICE, id: this.device(ordinal) },
      win32HandleMetaData: 0,
      compressionType: 0,
      gpuDirectRDMACapable: 0,
      usage: 0,
    };
  }

  // --- Driver and devices ---

  driverVersion(): number {
    return this.driver.version;
  }

  deviceCount(): number {
    this.check(this.fn.cuDeviceGetCount(this.i32), 'cuDeviceGetCount');
    return this.i32[0] ?? 0;
  }

  deviceInfo(ordinal: number): DeviceInfo {
    const dev = this.device(ordinal);
    this.text.fill(0);
    this.check(this.fn.cuDeviceGetName(this.text, this.text.length, dev), 'cuDeviceGetName');
    const name = this.readText();
    const uuidBytes = new Uint8Array(16);
    this.check(this.fn.cuDeviceGetUuid_v2(uuidBytes, dev), 'cuDeviceGetUuid');
    this.check(this.fn.cuDeviceTotalMem_v2(this.u64, dev), 'cuDeviceTotalMem');
    const totalMemory = this.outNumber('cuDeviceTotalMem');
    this.text.fill(0);
    this.check(this.fn.cuDeviceGetPCIBusId(this.text, 64, dev), 'cuDeviceGetPCIBusId');
    const pciBusId = this.readText().toLowerCase();
    const flag = (attribute: number): boolean => this.attribute(dev, attribute) !== 0;
    return {
      ordinal,
      name,
      uuid: formatUuid(uuidBytes),
      computeCapability: [this.attribute(dev, DeviceAttribute.COMPUTE_CAPABILITY_MAJOR), this.attribute(dev, DeviceAttribute.COMPUTE_CAPABILITY_MINOR)],
      totalMemory,
      pciBusId,
      multiprocessorCount: this.attribute(dev, DeviceAttribute.MULTIPROCESSOR_COUNT),
      unifiedAddressing: flag(DeviceAttribute.UNIFIED_ADDRESSING),
      canMapHostMemory: flag(DeviceAttribute.CAN_MAP_HOST_MEMORY),
      memoryPoolsSupported: flag(DeviceAttribute.MEMORY_POOLS_SUPPORTED),
      virtualMemoryManagementSupported: flag(DeviceAttribute.VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED),
      concurrentManagedAccess: flag(DeviceAttribute.CONCURRENT_MANAGED_ACCESS),
      managedMemory: flag(DeviceAttribute.MANAGED_MEMORY),
      asyncEngineCount: this.attribute(dev, DeviceAttribute.ASYNC_ENGINE_COUNT),
      l2CacheSize: this.attribute(dev, DeviceAttribute.L2_CACHE_SIZE),
      texturePitchAlignment: this.attribute(dev, DeviceAttribute.TEXTURE_PITCH_ALIGNMENT),
      integrated: flag(DeviceAttribute.INTEGRATED),
    };
  }

  deviceCanAccessPeer(ordinal: number, peerOrdinal: number): boolean {
    this.check(this.fn.cuDeviceCanAccessPeer(this.i32, this.device(ordinal), this.device(peerOrdinal)), 'cuDeviceCanAccessPeer');
    return this.i32[0] !== 0;
  }

  deviceGetAttribute(ordinal: number, attribute: number): number {
    return this.attribute(this.device(ordinal), attribute);
  }

  deviceGetByPciBusId(busId: string): number {
    if (typeof busId !== 'string' || busId.includes('\0')) throw new TypeError('deviceGetByPciBusId: the bus id must be a string without NUL');
    this.check(this.fn.cuDeviceGetByPCIBusId(this.i32, busId), 'cuDeviceGetByPCIBusId');
    const dev = this.i32[0]!;
    const count = this.deviceCount();
    for (let ordinal = 0; ordinal < count; ordinal++) if (this.device(ordinal) === dev) return ordinal;
    throw new CudaError(CUresult.INVALID_DEVICE, 'CUDA_ERROR_INVALID_DEVICE', 'cuDeviceGetByPCIBusId', `device ${dev} has no ordinal`);
  }

  // --- Contexts ---

  primaryContextRetain(ordinal: number): Handle {
    this.check(this.fn.cuDevicePrimaryCtxRetain(this.u64, this.device(ordinal)), 'cuDevicePrimaryCtxRetain');
    return this.outNumber('cuDevicePrimaryCtxRetain');
  }

  primaryContextRelease(ordinal: number): void {
    this.check(this.fn.cuDevicePrimaryCtxRelease_v2(this.device(ordinal)), 'cuDevicePrimaryCtxRelease');
    // The last release destroys the context, which may have been current: no longer known.
    this.currentContext = undefined;
  }

  contextCreate(ordinal: number, flags: number): Handle {
    const dev = this.device(ordinal);
    const { cuCtxCreate_v4, cuCtxCreate_v2 } = this.fn;
    if (cuCtxCreate_v4 !== undefined) {
      this.check(cuCtxCreate_v4(this.u64, null, flags, dev), 'cuCtxCreate');
    } else if (cuCtxCreate_v2 !== undefined) {
      this.check(cuCtxCreate_v2(this.u64, flags, dev), 'cuCtxCreate');
    } else {
      throw new CudaError(CUresult.NOT_SUPPORTED, 'CUDA_ERROR_NOT_SUPPORTED', 'cuCtxCreate', 'the driver has no cuCtxCreate');
    }
    const ctx = this.outNumber('cuCtxCreate');
    // cuCtxCreate pushes the new context: it is now current on this thread.
    this.currentContext = ctx;
    return ctx;
  }

  contextDestroy(ctx: Handle): void {
    this.check(this.fn.cuCtxDestroy_v2(ctx), 'cuCtxDestroy');
    if (this.currentContext === ctx) this.currentContext = undefined;
  }

  contextSetCurrent(ctx: Handle): void {
    if (ctx === this.currentContext) return;
    const r = this.setCurrent(ctx);
    if (r !== 0) throw this.fail(r, 'cuCtxSetCurrent');
    this.currentContext = ctx;
  }

  contextGetCurrent(): Handle {
    this.check(this.fn.cuCtxGetCurrent(this.u64), 'cuCtxGetCurrent');
    const ctx = this.outNumber('cuCtxGetCurrent');
    this.currentContext = ctx;
    return ctx;
  }

  contextSynchronize(): void {
    this.check(this.fn.cuCtxSynchronize(), 'cuCtxSynchronize');
  }

  contextPushCurrent(ctx: Handle): void {
    this.check(this.fn.cuCtxPushCurrent_v2(ctx), 'cuCtxPushCurrent');
    this.currentContext = ctx;
  }

  contextPopCurrent(): Handle {
    // Whatever happens, the current context is no longer known without asking.
    this.currentContext = undefined;
    this.check(this.fn.cuCtxPopCurrent_v2(this.u64), 'cuCtxPopCurrent');
    return this.outNumber('cuCtxPopCurrent');
  }

  contextInfo(ctx: Handle): { readonly ordinal: number; readonly flags: number } {
    this.contextPushCurrent(ctx);
    try {
      this.check(this.fn.cuCtxGetDevice(this.i32), 'cuCtxGetDevice');
      const dev = this.i32[0]!;
      this.check(this.fn.cuCtxGetFlags(this.u32), 'cuCtxGetFlags');
      const flags = this.u32[0]!;
      const count = this.deviceCount();
      for (let ordinal = 0; ordinal < count; ordinal++) if (this.device(ordinal) === dev) return { ordinal, flags };
      throw new CudaError(CUresult.INVALID_DEVICE, 'CUDA_ERROR_INVALID_DEVICE', 'cuCtxGetDevice', `device ${dev} has no ordinal`);
    } finally {
      this.contextPopCurrent();
    }
  }

  contextSetCacheConfig(config: number): void {
    this.check(this.fn.cuCtxSetCacheConfig(config), 'cuCtxSetCacheConfig');
  }

  contextGetCacheConfig(): number {
    this.check(this.fn.cuCtxGetCacheConfig(this.i32), 'cuCtxGetCacheConfig');
    return this.i32[0]!;
  }

  contextEnablePeerAccess(peerCtx: Handle): void {
    this.check(this.fn.cuCtxEnablePeerAccess(peerCtx, 0), 'cuCtxEnablePeerAccess');
  }

  contextDisablePeerAccess(peerCtx: Handle): void {
    this.check(this.fn.cuCtxDisablePeerAccess(peerCtx), 'cuCtxDisablePeerAccess');
  }

  memGetInfo(): MemInfo {
    this.check(this.fn.cuMemGetInfo_v2(this.u64, this.u64b), 'cuMemGetInfo');
    return { free: this.outNumber('cuMemGetInfo'), total: this.outNumber('cuMemGetInfo', this.u64b) };
  }

  // --- Device memory (memAlloc/memFree are hot: one call, one test) ---

  memAlloc(bytes: number): Ptr {
    const r = this.alloc(this.outAddress, bytes);
    if (r !== 0) throw this.fail(r, 'cuMemAlloc', bytes);
    const words = this.outWords;
    const low = words[0];
    const high = words[1];
    if (high > HIGH_WORD_MAX) throw beyondExactError('cuMemAlloc', low, high);
    return low + high * TWO_32;
  }

  memFree(ptr: Ptr): void {
    const r = this.free(ptr);
    if (r !== 0) throw this.fail(r, 'cuMemFree');
  }

  memAllocPitch(widthBytes: number, height: number, elementBytes: number): { ptr: Ptr; pitch: number } {
    const r = this.fn.cuMemAllocPitch_v2(this.u64, this.u64b, widthBytes, height, elementBytes);
    if (r !== 0) throw this.fail(r, 'cuMemAllocPitch', widthBytes * height);
    return { ptr: this.outNumber('cuMemAllocPitch'), pitch: this.outNumber('cuMemAllocPitch', this.u64b) };
  }

  memAllocManaged(bytes: number, attachFlags: number): Ptr {
    const r = this.fn.cuMemAllocManaged(this.u64, bytes, attachFlags);
    if (r !== 0) throw this.fail(r, 'cuMemAllocManaged', bytes);
    return this.outNumber('cuMemAllocManaged');
  }

  memPrefetchAsync(ptr: Ptr, bytes: number, location: MemLocation, stream: Handle): void {
    const { cuMemPrefetchAsync_v2, cuMemPrefetchAsync } = this.fn;
    if (cuMemPrefetchAsync_v2 !== undefined) {
      this.check(cuMemPrefetchAsync_v2(ptr, bytes, this.setLocation(location), 0, stream), 'cuMemPrefetchAsync');
    } else if (cuMemPrefetchAsync !== undefined) {
      const device = location === 'host' ? DEVICE_CPU : this.device(location);
      this.check(cuMemPrefetchAsync(ptr, bytes, device, stream), 'cuMemPrefetchAsync');
    } else {
      throw new CudaError(CUresult.NOT_SUPPORTED, 'CUDA_ERROR_NOT_SUPPORTED', 'cuMemPrefetchAsync', 'the driver has no cuMemPrefetchAsync');
    }
  }

  memAdvise(ptr: Ptr, bytes: number, advice: number, location: MemLocation): void {
    const { cuMemAdvise_v2, cuMemAdvise } = this.fn;
    if (cuMemAdvise_v2 !== undefined) {
      this.check(cuMemAdvise_v2(ptr, bytes, advice, this.setLocation(location)), 'cuMemAdvise');
    } else if (cuMemAdvise !== undefined) {
      const device = location === 'host' ? DEVICE_CPU : this.device(location);
      this.check(cuMemAdvise(ptr, bytes, advice, device), 'cuMemAdvise');
    } else {
      throw new CudaError(CUresult.NOT_SUPPORTED, 'CUDA_ERROR_NOT_SUPPORTED', 'cuMemAdvise', 'the driver has no cuMemAdvise');
    }
  }

  // --- Pinned host memory ---

  memHostAlloc(bytes: number, flags: number): Ptr {
    const r = this.fn.cuMemHostAlloc(this.u64, bytes, flags);
    if (r !== 0) throw this.fail(r, 'cuMemHostAlloc', bytes);
    return this.outNumber('cuMemHostAlloc');
  }

  memFreeHost(ptr: Ptr): void {
    this.check(this.fn.cuMemFreeHost(ptr), 'cuMemFreeHost');
  }

  memHostGetDevicePointer(hostPtr: Ptr): Ptr {
    this.check(this.fn.cuMemHostGetDevicePointer_v2(this.u64, hostPtr, 0), 'cuMemHostGetDevicePointer');
    return this.outNumber('cuMemHostGetDevicePointer');
  }

  memHostRegister(memory: HostMemory, flags: number): Ptr {
    const bytes = checkBytes(memory.byteLength, 'memory.byteLength');
    const address = this.addressOf(memory);
    this.check(this.fn.cuMemHostRegister_v2(address, bytes, flags), 'cuMemHostRegister');
    return address;
  }

  memHostUnregister(hostPtr: Ptr): void {
    this.check(this.fn.cuMemHostUnregister(hostPtr), 'cuMemHostUnregister');
  }

  hostView(hostPtr: Ptr, bytes: number): ArrayBuffer {
    checkBytes(bytes);
    if (hostPtr === 0) throw new RangeError('hostView: address is null');
    return koffi.view(hostPtr, bytes);
  }

  addressOf(memory: HostMemory): Ptr {
    // koffi.address honours a view's byteOffset and pins an on-heap typed array's storage
    // off-heap first, so the address stays valid for the memory's lifetime.
    const address = Number(koffi.address(memory));
    if (address > MAX_EXACT) throw new RangeError('addressOf: address beyond 2^53');
    return address;
  }

  // --- Copies and fills ---

  memcpy(dst: Ptr, src: Ptr, bytes: number): void {
    this.check(this.fn.cuMemcpy(dst, src, bytes), 'cuMemcpy');
  }

  memcpyAsync(dst: Ptr, src: Ptr, bytes: number, stream: Handle): void {
    const r = this.copyAsync(dst, src, bytes, stream);
    if (r !== 0) throw this.fail(r, 'cuMemcpyAsync');
  }

  memcpyFromHost(dst: Ptr, src: HostMemory, bytes: number): void {
    checkHostRange(src, bytes, 'memcpyFromHost');
    // koffi passes the view's data pointer, byteOffset included.
    this.check(this.fn.cuMemcpyFromHostUnified(dst, src, bytes), 'cuMemcpy');
  }

  memcpyToHost(dst: HostMemory, src: Ptr, bytes: number): void {
    checkHostRange(dst, bytes, 'memcpyToHost');
    this.check(this.fn.cuMemcpyToHostUnified(dst, src, bytes), 'cuMemcpy');
  }

  memcpyPeer(dst: Ptr, dstCtx: Handle, src: Ptr, srcCtx: Handle, bytes: number): void {
    this.check(this.fn.cuMemcpyPeer(dst, dstCtx, src, srcCtx, bytes), 'cuMemcpyPeer');
  }

  memcpyPeerAsync(dst: Ptr, dstCtx: Handle, src: Ptr, srcCtx: Handle, bytes: number, stream: Handle): void {
    this.check(this.fn.cuMemcpyPeerAsync(dst, dstCtx, src, srcCtx, bytes, stream), 'cuMemcpyPeerAsync');
  }

  private fill2D(copy: Memcpy2D): Memcpy2DValue {
    const c = this.copy2D;
    c.srcDevice = copy.src;
    c.srcPitch = copy.srcPitch;
    c.dstDevice = copy.dst;
    c.dstPitch = copy.dstPitch;
    c.WidthInBytes = copy.widthBytes;
    c.Height = copy.height;
    return c;
  }

  memcpy2D(copy: Memcpy2D): void {
    this.check(this.fn.cuMemcpy2D_v2(this.fill2D(copy)), 'cuMemcpy2D');
  }

  memcpy2DAsync(copy: Memcpy2D, stream: Handle): void {
    this.check(this.fn.cuMemcpy2DAsync_v2(this.fill2D(copy), stream), 'cuMemcpy2DAsync');
  }

  memset(ptr: Ptr, value: number, elementBytes: 1 | 2 | 4, count: number): void {
    switch (elementBytes) {
      case 1:
        return this.check(this.fn.cuMemsetD8_v2(ptr, value & 0xff, count), 'cuMemsetD8');
      case 2:
        return this.check(this.fn.cuMemsetD16_v2(ptr, value & 0xffff, count), 'cuMemsetD16');
      case 4:
        return this.check(this.fn.cuMemsetD32_v2(ptr, value >>> 0, count), 'cuMemsetD32');
      default:
        throw new RangeError(`memset: elementBytes must be 1, 2 or 4, got ${String(elementBytes)}`);
    }
  }

  memsetAsync(ptr: Ptr, value: number, elementBytes: 1 | 2 | 4, count: number, stream: Handle): void {
    switch (elementBytes) {
      case 1:
        return this.check(this.fn.cuMemsetD8Async(ptr, value & 0xff, count, stream), 'cuMemsetD8Async');
      case 2:
        return this.check(this.fn.cuMemsetD16Async(ptr, value & 0xffff, count, stream), 'cuMemsetD16Async');
      case 4:
        return this.check(this.fn.cuMemsetD32Async(ptr, value >>> 0, count, stream), 'cuMemsetD32Async');
      default:
        throw new RangeError(`memsetAsync: elementBytes must be 1, 2 or 4, got ${String(elementBytes)}`);
    }
  }

  // --- Streams and events ---

  streamCreate(flags: number, priority: number): Handle {
    this.check(this.fn.cuStreamCreateWithPriority(this.u64, flags, priority), 'cuStreamCreateWithPriority');
    const stream = this.outNumber('cuStreamCreateWithPriority');
    this.liveStreams.hold(stream);
    return stream;
  }

  streamDestroy(stream: Handle): void {
    this.check(this.fn.cuStreamDestroy_v2(stream), 'cuStreamDestroy');
    this.liveStreams.destroyed(stream);
  }

  streamKnown(stream: Handle): boolean {
    return stream === DEFAULT_STREAM || this.liveStreams.has(stream);
  }

  /** The caller's word is taken: asking the driver about an invalid handle may crash it. */
  adoptStream(stream: Handle): void {
    if (stream !== DEFAULT_STREAM) this.liveStreams.hold(stream);
  }

  forgetStream(stream: Handle): void {
    this.liveStreams.release(stream);
  }

  streamGetFlags(stream: Handle): number {
    this.check(this.fn.cuStreamGetFlags(stream, this.u32), 'cuStreamGetFlags');
    return this.u32[0] ?? 0;
  }

  streamGetPriority(stream: Handle): number {
    this.check(this.fn.cuStreamGetPriority(stream, this.i32), 'cuStreamGetPriority');
    return this.i32[0] ?? 0;
  }

  streamSynchronize(stream: Handle): void {
    this.check(this.fn.cuStreamSynchronize(stream), 'cuStreamSynchronize');
  }

  streamQuery(stream: Handle): boolean {
    const r = this.queryStream(stream);
    if (r === 0) return true;
    if (r === CUresult.NOT_READY) return false;
    throw this.fail(r, 'cuStreamQuery');
  }

  streamWaitEvent(stream: Handle, event: Handle): void {
    this.check(this.fn.cuStreamWaitEvent(stream, event, 0), 'cuStreamWaitEvent');
  }

  streamWaitValue32(stream: Handle, addr: Ptr, value: number, flags: number): void {
    checkStreamValue32('streamWaitValue32', addr, value, flags);
    this.check(this.fn.cuStreamWaitValue32_v2(stream, addr, value, flags), 'cuStreamWaitValue32');
  }

  streamWriteValue32(stream: Handle, addr: Ptr, value: number, flags: number): void {
    checkStreamValue32('streamWriteValue32', addr, value, flags);
    this.check(this.fn.cuStreamWriteValue32_v2(stream, addr, value, flags), 'cuStreamWriteValue32');
  }

  streamPriorityRange(): readonly [least: number, greatest: number] {
    this.check(this.fn.cuCtxGetStreamPriorityRange(this.i32, this.i32b), 'cuCtxGetStreamPriorityRange');
    return [this.i32[0] ?? 0, this.i32b[0] ?? 0];
  }

  launchHostFunc(stream: Handle, fn: () => void): void {
    if (typeof fn !== 'function') throw new TypeError('launchHostFunc: fn must be a function');
    const capture = this.captureId(stream);
    const id = this.nextHostFn++;
    // Captured, the function runs at every launch of the graph: it lives while a graph holds it.
    this.hostFns.set(id, { fn, once: capture === undefined, refs: 0 });
    const r = this.fn.cuLaunchHostFunc(stream, this.trampoline(), id);
    if (r !== 0) {
      this.hostFns.delete(id);
      throw this.fail(r, 'cuLaunchHostFunc');
    }
    if (capture !== undefined) {
      const ids = this.capturedHostFns.get(capture);
      if (ids === undefined) this.capturedHostFns.set(capture, [id]);
      else ids.push(id);
    }
  }

  /** The address of the one trampoline the driver calls (from its own thread; koffi runs it on the main thread). */
  private trampoline(): number {
    if (this.hostTrampoline === undefined) {
      const proto = koffi.proto('void vram_host_fn(uint64_t userData)');
      const registered = koffi.register((userData: number | bigint) => this.runHostFn(Number(userData)), koffi.pointer(proto));
      this.hostTrampoline = Number(koffi.address(registered));
    }
    return this.hostTrampoline;
  }

  private runHostFn(id: number): void {
    const entry = this.hostFns.get(id);
    if (entry === undefined) return;
    if (entry.once) this.hostFns.delete(id);
    entry.fn();
  }

  /** The id of the capture `stream` records into (0 when the driver cannot say which), undefined when not capturing. */
  private captureId(stream: Handle): number | undefined {
    // Never throws: where the driver cannot say (the legacy stream beside a capture), the call
    // that follows reports the driver's error itself.
    const info = this.fn.cuStreamGetCaptureInfo_v2;
    if (info !== undefined) {
      if (info(stream, this.i32, this.u64, null, null, null) !== 0) return undefined;
      return this.i32[0] === 0 ? undefined : Number(this.u64[0]);
    }
    if (this.fn.cuStreamIsCapturing(stream, this.i32) !== 0) return undefined;
    return this.i32[0] === 0 ? undefined : 0;
  }

  /** Counts one more holder of each host function. */
  private holdHostFns(handle: Handle, ids: readonly number[]): void {
    if (ids.length === 0) return;
    for (const id of ids) {
      const entry = this.hostFns.get(id);
      if (entry !== undefined) entry.refs++;
    }
    this.graphHostFns.set(handle, [...(this.graphHostFns.get(handle) ?? []), ...ids]);
  }

  /** Lets go of the host functions `handle` held; the last holder's going ends them. */
  private dropHostFns(handle: Handle): void {
    const ids = this.graphHostFns.get(handle);
    if (ids === undefined) return;
    this.graphHostFns.delete(handle);
    for (const id of ids) {
      const entry = this.hostFns.get(id);
      if (entry !== undefined && --entry.refs <= 0) this.hostFns.delete(id);
    }
  }

  streamBeginCapture(stream: Handle, mode: number): void {
    this.check(this.fn.cuStreamBeginCapture_v2(stream, mode), 'cuStreamBeginCapture');
  }

  streamEndCapture(stream: Handle): Handle {
    const capture = this.captureId(stream);
    const r = this.fn.cuStreamEndCapture(stream, this.u64);
    const ids = capture === undefined ? [] : (this.capturedHostFns.get(capture) ?? []);
    if (capture !== undefined) this.capturedHostFns.delete(capture);
    if (r !== 0) {
      for (const id of ids) this.hostFns.delete(id);
      throw this.fail(r, 'cuStreamEndCapture');
    }
    const graph = this.outNumber('cuStreamEndCapture');
    this.holdHostFns(graph, ids);
    return graph;
  }

  streamCaptureStatus(stream: Handle): number {
    this.check(this.fn.cuStreamIsCapturing(stream, this.i32), 'cuStreamIsCapturing');
    return this.i32[0]!;
  }

  threadExchangeCaptureMode(mode: number): number {
    this.i32b[0] = mode;
    this.check(this.fn.cuThreadExchangeStreamCaptureMode(this.i32b), 'cuThreadExchangeStreamCaptureMode');
    return this.i32b[0]!;
  }

  graphNodeCount(graph: Handle): number {
    this.u64[0] = 0n;
    this.check(this.fn.cuGraphGetNodes(graph, null, this.u64), 'cuGraphGetNodes');
    return Number(this.u64[0]);
  }

  graphMemAllocNodeCount(graph: Handle): number {
    const count = this.graphNodeCount(graph);
    if (count === 0) return 0;
    const nodes = new BigUint64Array(count);
    this.u64[0] = BigInt(count);
    this.check(this.fn.cuGraphGetNodes(graph, nodes, this.u64), 'cuGraphGetNodes');
    let allocs = 0;
    for (let i = 0; i < Number(this.u64[0]); i++) {
      this.check(this.fn.cuGraphNodeGetType(Number(nodes[i]!), this.i32), 'cuGraphNodeGetType');
      if (this.i32[0] === GraphNodeType.MEM_ALLOC) allocs++;
    }
    return allocs;
  }

  graphDestroy(graph: Handle): void {
    this.check(this.fn.cuGraphDestroy(graph), 'cuGraphDestroy');
    this.dropHostFns(graph);
  }

  graphInstantiate(graph: Handle): Handle {
    this.check(this.fn.cuGraphInstantiateWithFlags(this.u64, graph, 0), 'cuGraphInstantiate');
    const exec = this.outNumber('cuGraphInstantiate');
    this.holdHostFns(exec, this.graphHostFns.get(graph) ?? []);
    return exec;
  }

  graphLaunch(exec: Handle, stream: Handle): void {
    const r = this.launchGraph(exec, stream);
    if (r !== 0) throw this.fail(r, 'cuGraphLaunch');
  }

  graphExecUpdate(exec: Handle, graph: Handle): number {
    const info = new BigUint64Array(3);
    const r = this.fn.cuGraphExecUpdate_v2(exec, graph, info);
    if (r === CUresult.GRAPH_EXEC_UPDATE_FAILURE) return Number(info[0]! & 0xffffffffn) || 1;
    if (r !== 0) throw this.fail(r, 'cuGraphExecUpdate');
    // The executable graph now runs the new graph's host functions too.
    this.holdHostFns(exec, this.graphHostFns.get(graph) ?? []);
    return 0;
  }

  graphExecDestroy(exec: Handle): void {
    this.check(this.fn.cuGraphExecDestroy(exec), 'cuGraphExecDestroy');
    this.dropHostFns(exec);
  }

  eventCreate(flags: number): Handle {
    this.check(this.fn.cuEventCreate(this.u64, flags), 'cuEventCreate');
    return this.outNumber('cuEventCreate');
  }

  eventDestroy(event: Handle): void {
    this.check(this.fn.cuEventDestroy_v2(event), 'cuEventDestroy');
  }

  eventRecord(event: Handle, stream: Handle): void {
    const r = this.recordEvent(event, stream);
    if (r !== 0) throw this.fail(r, 'cuEventRecord');
  }

  eventQuery(event: Handle): boolean {
    const r = this.queryEvent(event);
    if (r === 0) return true;
    if (r === CUresult.NOT_READY) return false;
    throw this.fail(r, 'cuEventQuery');
  }

  eventSynchronize(event: Handle): void {
    this.check(this.fn.cuEventSynchronize(event), 'cuEventSynchronize');
  }

  eventElapsedTime(start: Handle, end: Handle): number {
    const elapsed = this.fn.cuEventElapsedTime_v2 ?? this.fn.cuEventElapsedTime;
    if (elapsed === undefined) {
      throw new CudaError(CUresult.NOT_SUPPORTED, 'CUDA_ERROR_NOT_SUPPORTED', 'cuEventElapsedTime', 'the driver has no cuEventElapsedTime');
    }
    this.check(elapsed(this.f32, start, end), 'cuEventElapsedTime');
    return this.f32[0] ?? 0;
  }

  // --- Interprocess communication ---

  ipcGetMemHandle(ptr: Ptr): Uint8Array {
    const handle = new Uint8Array(IPC_HANDLE_BYTES);
    this.check(this.fn.cuIpcGetMemHandle(handle, ptr), 'cuIpcGetMemHandle');
    return handle;
  }

  ipcOpenMemHandle(handle: Uint8Array, flags: number): Ptr {
    const reserved = checkIpcHandle(handle, 'cuIpcOpenMemHandle');
    this.check(this.fn.cuIpcOpenMemHandle_v2(this.u64, { reserved }, flags), 'cuIpcOpenMemHandle');
    return this.outNumber('cuIpcOpenMemHandle');
  }

  ipcCloseMemHandle(ptr: Ptr): void {
    this.check(this.fn.cuIpcCloseMemHandle(ptr), 'cuIpcCloseMemHandle');
  }

  ipcGetEventHandle(event: Handle): Uint8Array {
    const handle = new Uint8Array(IPC_HANDLE_BYTES);
    this.check(this.fn.cuIpcGetEventHandle(handle, event), 'cuIpcGetEventHandle');
    return handle;
  }

  ipcOpenEventHandle(handle: Uint8Array): Handle {
    const reserved = checkIpcHandle(handle, 'cuIpcOpenEventHandle');
    this.check(this.fn.cuIpcOpenEventHandle(this.u64, { reserved }), 'cuIpcOpenEventHandle');
    return this.outNumber('cuIpcOpenEventHandle');
  }

  memPoolExportToShareableHandle(pool: Handle, handleType: number): number {
    this.i32[0] = -1;
    this.check(this.fn.cuMemPoolExportToShareableHandle(this.i32, pool, handleType, 0), 'cuMemPoolExportToShareableHandle');
    return this.i32[0] ?? -1;
  }

  memPoolImportFromShareableHandle(fd: number, handleType: number): Handle {
    checkNonNegativeInteger(fd, 'file descriptor');
    this.check(this.fn.cuMemPoolImportFromShareableHandle(this.u64, fd, handleType, 0), 'cuMemPoolImportFromShareableHandle');
    return this.outNumber('cuMemPoolImportFromShareableHandle');
  }

  memPoolExportPointer(ptr: Ptr): Uint8Array {
    const data = new Uint8Array(IPC_HANDLE_BYTES);
    this.check(this.fn.cuMemPoolExportPointer(data, ptr), 'cuMemPoolExportPointer');
    return data;
  }

  memPoolImportPointer(pool: Handle, data: Uint8Array): Ptr {
    checkIpcHandle(data, 'cuMemPoolImportPointer');
    this.check(this.fn.cuMemPoolImportPointer(this.u64, pool, data), 'cuMemPoolImportPointer');
    return this.outNumber('cuMemPoolImportPointer');
  }

  memPoolExportFabricHandle(pool: Handle): Uint8Array {
    const handle = new Uint8Array(FABRIC_HANDLE_BYTES);
    this.check(this.fn.cuMemPoolExportToFabricHandle(handle, pool, MemHandleType.FABRIC, 0), 'cuMemPoolExportToShareableHandle');
    return handle;
  }

  memPoolImportFabricHandle(handle: Uint8Array): Handle {
    checkIpcHandle(handle, 'cuMemPoolImportFromShareableHandle');
    this.check(this.fn.cuMemPoolImportFromFabricHandle(this.u64, handle, MemHandleType.FABRIC, 0), 'cuMemPoolImportFromShareableHandle');
    return this.outNumber('cuMemPoolImportFromShareableHandle');
  }

  // --- Stream-ordered allocation (hot: one call, one test) ---

  memAllocAsync(bytes: number, stream: Handle): Ptr {
    // The driver accepts 0 bytes and then leaves the out-parameter as it was: clear it, or the
    // previous call's pointer would come back as this allocation's.
    this.outZero[0] = 0;
    const r = this.allocAsync(this.outAddress, bytes, stream);
    if (r !== 0) throw this.fail(r, 'cuMemAllocAsync', bytes);
    const words = this.outWords;
    const low = words[0];
    const high = words[1];
    if (high > HIGH_WORD_MAX) throw beyondExactError('cuMemAllocAsync', low, high);
    return low + high * TWO_32;
  }

  memAllocFromPoolAsync(bytes: number, pool: Handle, stream: Handle): Ptr {
    this.outZero[0] = 0; // as in memAllocAsync: 0 bytes succeed without writing the pointer
    const r = this.allocFromPoolAsync(this.outAddress, bytes, pool, stream);
    if (r !== 0) throw this.fail(r, 'cuMemAllocFromPoolAsync', bytes);
    const words = this.outWords;
    const low = words[0];
    const high = words[1];
    if (high > HIGH_WORD_MAX) throw beyondExactError('cuMemAllocFromPoolAsync', low, high);
    return low + high * TWO_32;
  }

  memFreeAsync(ptr: Ptr, stream: Handle): void {
    const r = this.freeAsync(ptr, stream);
    if (r !== 0) throw this.fail(r, 'cuMemFreeAsync');
  }

  deviceGetDefaultMemPool(ordinal: number): Handle {
    this.check(this.fn.cuDeviceGetDefaultMemPool(this.u64, this.device(ordinal)), 'cuDeviceGetDefaultMemPool');
    return this.outNumber('cuDeviceGetDefaultMemPool');
  }

  deviceGetMemPool(ordinal: number): Handle {
    this.check(this.fn.cuDeviceGetMemPool(this.u64, this.device(ordinal)), 'cuDeviceGetMemPool');
    return this.outNumber('cuDeviceGetMemPool');
  }

  deviceSetMemPool(ordinal: number, pool: Handle): void {
    this.check(this.fn.cuDeviceSetMemPool(this.device(ordinal), pool), 'cuDeviceSetMemPool');
  }

  memPoolCreate(props: MemPoolProps): Handle {
    const r = this.fn.cuMemPoolCreate(this.u64, {
      allocType: MemAllocationType.PINNED,
      handleTypes: props.handleTypes ?? MemHandleType.NONE,
      location:
        props.hostNumaId === undefined
          ? { type: MemLocationType.DEVICE, id: this.device(props.device) }
          : { type: MemLocationType.HOST_NUMA, id: props.hostNumaId },
      win32SecurityAttributes: 0,
      maxSize: props.maxSize ?? 0,
      usage: 0,
    });
    if (r !== 0) throw this.fail(r, 'cuMemPoolCreate', props.maxSize ?? 0);
    return this.outNumber('cuMemPoolCreate');
  }

  memPoolDestroy(pool: Handle): void {
    this.check(this.fn.cuMemPoolDestroy(pool), 'cuMemPoolDestroy');
  }

  memPoolTrimTo(pool: Handle, minBytesToKeep: number): void {
    this.check(this.fn.cuMemPoolTrimTo(pool, minBytesToKeep), 'cuMemPoolTrimTo');
  }

  memPoolGetAttribute(pool: Handle, attribute: MemPoolAttribute): number {
    if (isIntPoolAttribute(attribute)) {
      this.check(this.fn.cuMemPoolGetAttribute(pool, attribute, this.i32), 'cuMemPoolGetAttribute');
      return this.i32[0] ?? 0;
    }
    this.check(this.fn.cuMemPoolGetAttribute(pool, attribute, this.u64), 'cuMemPoolGetAttribute');
    return this.outNumber('cuMemPoolGetAttribute');
  }

  memPoolSetAttribute(pool: Handle, attribute: MemPoolAttribute, value: number): void {
    checkNonNegativeInteger(value, 'pool attribute value');
    if (isIntPoolAttribute(attribute)) {
      this.i32[0] = value;
      this.check(this.fn.cuMemPoolSetAttribute(pool, attribute, this.i32), 'cuMemPoolSetAttribute');
      return;
    }
    this.u64[0] = BigInt(value);
    this.check(this.fn.cuMemPoolSetAttribute(pool, attribute, this.u64), 'cuMemPoolSetAttribute');
  }

  memPoolSetAccess(pool: Handle, ordinal: number, flags: number): void {
    this.deviceLocation(ordinal);
    this.accessDesc.flags = flags;
    this.check(this.fn.cuMemPoolSetAccess(pool, this.accessDesc, 1), 'cuMemPoolSetAccess');
  }

  memPoolGetAccess(pool: Handle, ordinal: number): number {
    this.check(this.fn.cuMemPoolGetAccess(this.i32, pool, this.deviceLocation(ordinal)), 'cuMemPoolGetAccess');
    return this.i32[0] ?? 0;
  }

  // --- Virtual memory management ---

  memGetAllocationGranularity(ordinal: number): number {
    this.check(this.fn.cuMemGetAllocationGranularity(this.u64, this.allocationProp(ordinal), AllocationGranularity.MINIMUM), 'cuMemGetAllocationGranularity');
    return this.outNumber('cuMemGetAllocationGranularity');
  }

  memAddressReserve(bytes: number, alignment: number): Ptr {
    const r = this.fn.cuMemAddressReserve(this.u64, bytes, alignment, 0, 0);
    if (r !== 0) throw this.fail(r, 'cuMemAddressReserve', bytes);
    return this.outNumber('cuMemAddressReserve');
  }

  memAddressFree(ptr: Ptr, bytes: number): void {
    this.check(this.fn.cuMemAddressFree(ptr, bytes), 'cuMemAddressFree');
  }

  memCreate(bytes: number, ordinal: number, handleTypes?: number): Handle {
    if (handleTypes !== undefined) {
      // Exactly what the caller asked for (fabric memory, say): a refusal is the caller's to report.
      const r = this.fn.cuMemCreate(this.u64, bytes, this.allocationProp(ordinal, handleTypes), 0);
      if (r !== 0) throw this.fail(r, 'cuMemCreate', bytes);
      return this.outNumber('cuMemCreate');
    }
    // Physical memory is made exportable as a POSIX descriptor (so a pool's blocks can be shared
    // with other processes), unless the driver refused that once: then plain memory, as before.
    // Growth only: a pool's hit path makes no driver call.
    if (this.exportableMemory) {
      const r = this.fn.cuMemCreate(this.u64, bytes, this.allocationProp(ordinal, MemHandleType.POSIX_FILE_DESCRIPTOR), 0);
      if (r === 0) return this.outNumber('cuMemCreate');
      if (r !== CUresult.INVALID_VALUE && r !== CUresult.NOT_SUPPORTED) throw this.fail(r, 'cuMemCreate', bytes);
      this.exportableMemory = false;
    }
    const r = this.fn.cuMemCreate(this.u64, bytes, this.allocationProp(ordinal), 0);
    if (r !== 0) throw this.fail(r, 'cuMemCreate', bytes);
    return this.outNumber('cuMemCreate');
  }

  memExportToShareableHandle(handle: Handle, handleType: number): number {
    this.i32[0] = -1;
    this.check(this.fn.cuMemExportToShareableHandle(this.i32, handle, handleType, 0), 'cuMemExportToShareableHandle');
    return this.i32[0] ?? -1;
  }

  memImportFromShareableHandle(fd: number, handleType: number): Handle {
    checkNonNegativeInteger(fd, 'file descriptor');
    this.check(this.fn.cuMemImportFromShareableHandle(this.u64, fd, handleType), 'cuMemImportFromShareableHandle');
    return this.outNumber('cuMemImportFromShareableHandle');
  }

  memExportFabricHandle(handle: Handle): Uint8Array {
    const data = new Uint8Array(FABRIC_HANDLE_BYTES);
    this.check(this.fn.cuMemExportToFabricHandle(data, handle, MemHandleType.FABRIC, 0), 'cuMemExportToShareableHandle');
    return data;
  }

  memImportFabricHandle(data: Uint8Array): Handle {
    checkIpcHandle(data, 'cuMemImportFromShareableHandle');
    this.check(this.fn.cuMemImportFromFabricHandle(this.u64, data, MemHandleType.FABRIC), 'cuMemImportFromShareableHandle');
    return this.outNumber('cuMemImportFromShareableHandle');
  }

  memRelease(handle: Handle): void {
    this.check(this.fn.cuMemRelease(handle), 'cuMemRelease');
  }

  memMap(ptr: Ptr, bytes: number, handle: Handle): void {
    this.check(this.fn.cuMemMap(ptr, bytes, 0, handle, 0), 'cuMemMap');
  }

  memUnmap(ptr: Ptr, bytes: number): void {
    this.check(this.fn.cuMemUnmap(ptr, bytes), 'cuMemUnmap');
  }

  memSetAccess(ptr: Ptr, bytes: number, ordinal: number, flags: number): void {
    this.deviceLocation(ordinal);
    this.accessDesc.flags = flags;
    this.check(this.fn.cuMemSetAccess(ptr, bytes, this.accessDesc, 1), 'cuMemSetAccess');
  }

  // --- Modules and kernels ---

  moduleLoad(image: ModuleImage): Handle {
    let data = image.data;
    if (!(data instanceof Uint8Array) || data.length === 0) throw new TypeError('moduleLoad: the image must be a non-empty Uint8Array');
    // PTX is read as a C string: it must end with NUL, which text encoders do not add.
    if (image.kind === 'ptx' && data[data.length - 1] !== 0) {
      const terminated = new Uint8Array(data.length + 1);
      terminated.set(data);
      data = terminated;
    }
    this.check(this.fn.cuModuleLoadData(this.u64, data), 'cuModuleLoadData');
    return this.outNumber('cuModuleLoadData');
  }

  moduleUnload(module: Handle): void {
    this.check(this.fn.cuModuleUnload(module), 'cuModuleUnload');
  }

  moduleGetFunction(module: Handle, name: string): Handle {
    if (typeof name !== 'string' || name.includes('\0')) throw new TypeError('moduleGetFunction: the name must be a string without NUL');
    this.check(this.fn.cuModuleGetFunction(this.u64, module, name), 'cuModuleGetFunction');
    return this.outNumber('cuModuleGetFunction');
  }

  functionSetCacheConfig(fn: Handle, config: number): void {
    this.check(this.fn.cuFuncSetCacheConfig(fn, config), 'cuFuncSetCacheConfig');
  }

  functionAttributes(fn: Handle): FunctionAttributes {
    const get = (attribute: number): number => {
      this.check(this.fn.cuFuncGetAttribute(this.i32, attribute, fn), 'cuFuncGetAttribute');
      return this.i32[0] ?? 0;
    };
    return {
      maxThreadsPerBlock: get(FunctionAttribute.MAX_THREADS_PER_BLOCK),
      sharedSizeBytes: get(FunctionAttribute.SHARED_SIZE_BYTES),
      constSizeBytes: get(FunctionAttribute.CONST_SIZE_BYTES),
      localSizeBytes: get(FunctionAttribute.LOCAL_SIZE_BYTES),
      numRegs: get(FunctionAttribute.NUM_REGS),
      ptxVersion: get(FunctionAttribute.PTX_VERSION),
      binaryVersion: get(FunctionAttribute.BINARY_VERSION),
      maxDynamicSharedSizeBytes: get(FunctionAttribute.MAX_DYNAMIC_SHARED_SIZE_BYTES),
    };
  }

  kernelLimits(ordinal: number): KernelLimits {
    let limits = this.limits[ordinal];
    if (limits === undefined) {
      const dev = this.device(ordinal);
      const get = (attribute: number): number => this.attribute(dev, attribute);
      limits = {
        maxThreadsPerBlock: get(DeviceAttribute.MAX_THREADS_PER_BLOCK),
        maxBlockDim: [get(DeviceAttribute.MAX_BLOCK_DIM_X), get(DeviceAttribute.MAX_BLOCK_DIM_Y), get(DeviceAttribute.MAX_BLOCK_DIM_Z)],
        maxGridDim: [get(DeviceAttribute.MAX_GRID_DIM_X), get(DeviceAttribute.MAX_GRID_DIM_Y), get(DeviceAttribute.MAX_GRID_DIM_Z)],
        maxSharedBytesPerBlock: get(DeviceAttribute.MAX_SHARED_MEMORY_PER_BLOCK),
        warpSize: get(DeviceAttribute.WARP_SIZE),
      };
      this.limits[ordinal] = limits;
    }
    return limits;
  }

  kernelParams(types: readonly ParamType[]): KernelParams {
    const { slots, bytes } = paramLayout(types);
    // One native block: the values, then the `void *[]` cuLaunchKernel takes, pointing at them.
    const pointers = Math.max(1, slots.length);
    const base = koffi.alloc('uint8_t', bytes + 8 * pointers) as bigint;
    const address = Number(base);
    if (BigInt(address) !== base) {
      koffi.free(base);
      throw new RangeError(`native memory at 0x${base.toString(16)} is beyond 2^53`);
    }
    const memory = koffi.view(base, bytes + 8 * pointers);
    new Uint8Array(memory).fill(0);
    const array = new BigUint64Array(memory, bytes, pointers);
    slots.forEach((slot, i) => {
      array[i] = base + BigInt(slot.offset);
    });
    paramBlocks.register(memory, base);
    return { slots, data: new DataView(memory, 0, bytes), address: address + bytes };
  }

  launchKernel(
    fn: Handle,
    gridX: number,
    gridY: number,
    gridZ: number,
    blockX: number,
    blockY: number,
    blockZ: number,
    sharedBytes: number,
    stream: Handle,
    params: KernelParams,
  ): void {
    const r = this.launch(fn, gridX, gridY, gridZ, blockX, blockY, blockZ, sharedBytes, stream, params.address, 0);
    if (r !== 0) throw this.fail(r, 'cuLaunchKernel');
  }

  occupancyMaxActiveBlocksPerMultiprocessor(fn: Handle, blockSize: number, sharedBytes: number): number {
    this.check(this.fn.cuOccupancyMaxActiveBlocksPerMultiprocessor(this.i32, fn, blockSize, sharedBytes), 'cuOccupancyMaxActiveBlocksPerMultiprocessor');
    return this.i32[0] ?? 0;
  }

  occupancyMaxPotentialBlockSize(fn: Handle, sharedBytes: number, blockSizeLimit: number): { minGridSize: number; blockSize: number } {
    this.check(this.fn.cuOccupancyMaxPotentialBlockSize(this.i32, this.i32b, fn, null, sharedBytes, blockSizeLimit), 'cuOccupancyMaxPotentialBlockSize');
    return { minGridSize: this.i32[0] ?? 0, blockSize: this.i32b[0] ?? 0 };
  }

  // --- Collectives ---

  collectives(): CollectiveTransport {
    return ncclCollectives;
  }

  // --- Pointer attributes ---

  pointerGetAttributes(ptr: Ptr): PointerAttributes {
    const slots = this.attrSlots;
    for (let offset = 0; offset < slots.byteLength; offset += 8) slots.setBigUint64(offset, 0n, true);
    // Unlike cuPointerGetAttribute, this does not fail for addresses the driver does not know:
    // it leaves the defaults (zeros), which map to memoryType 0 and device -1 below.
    this.check(this.fn.cuPointerGetAttributes(this.attrList.length, this.attrList, this.attrSlotPointers, ptr), 'cuPointerGetAttributes');
    const memoryType = slots.getUint32(8, true);
    const known = memoryType !== 0;
    const rangeStart = slotNumber(slots, 32);
    const rangeSize = slotNumber(slots, 40);
    return {
      context: slotNumber(slots, 0),
      memoryType,
      isManaged: slots.getUint32(16, true) !== 0,
      device: known ? slots.getInt32(24, true) : -1,
      // A start whose range does not hold the address is no address (a host NUMA pool's block offset).
      rangeStart: ptr >= rangeStart && ptr < rangeStart + rangeSize ? rangeStart : 0,
      rangeSize,
      pool: slotNumber(slots, 48),
    };
  }
}

/** A 64-bit slot as a number, refusing values beyond 2^53. */
function slotNumber(slots: DataView, offset: number): number {
  const value = Number(slots.getBigUint64(offset, true));
  if (value > MAX_EXACT) throw new RangeError('cuPointerGetAttributes returned a value beyond 2^53');
  return value;
}

/** Checks that `bytes` fits in `memory` before the driver reads or writes it. */
function checkHostRange(memory: HostMemory, bytes: number, what: string): void {
  checkNonNegativeInteger(bytes, `${what} bytes`);
  if (bytes > memory.byteLength) {
    throw new RangeError(`${what}: ${bytes} bytes do not fit in JavaScript memory of ${memory.byteLength} bytes`);
  }
}

/** 16 UUID bytes as `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` (nvidia-smi's spelling). */
function formatUuid(bytes: Uint8Array): string {
  const hex = Buffer.from(bytes).toString('hex');
  return `GPU-${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20, 32)}`;
}

const loadCudaBackendOnce = loadOnce((): Backend => new CudaBackend(openDriver()));

/**
 * The CUDA backend, loaded once per process. Throws a clear Error when libcuda cannot be found or
 * initialised (listing what was tried); the same failure is rethrown on later calls.
 */
export function loadCudaBackend(): Backend {
  return loadCudaBackendOnce();
}
