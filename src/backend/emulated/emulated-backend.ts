/**
 * The emulated backend: every Backend operation on host memory, with the CUDA driver's semantics
 * (capacity and out-of-memory errors, alignment, stream order, events, pools, virtual memory,
 * pointer attributes and error codes), so the library, its CLI and its whole test suite run on a
 * machine with no GPU. This class only composes the modules under `emulated/`, one per group of
 * driver calls, over one shared `EmulatedState`; the rules it follows where the driver leaves room
 * are documented there.
 */
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
  MemPoolAttribute,
  MemPoolProps,
  Memcpy2D,
  ModuleImage,
  ParamType,
  PointerAttributes,
  Ptr,
} from '../backend.js';
import { MemAccess } from '../backend.js';
import type { CollectiveTransport } from '../collectives.js';
import { CollectiveCalls } from './collective-calls.js';
import { ContextCalls } from './context-calls.js';
import { CopyCalls } from './copy-calls.js';
import { DeviceMemoryCalls } from './device-memory-calls.js';
import { HostMemoryCalls } from './host-memory-calls.js';
import { IpcCalls } from './ipc-calls.js';
import { KernelCalls } from './kernel-calls.js';
import { pointerAttributes } from './pointer-calls.js';
import { PoolCalls } from './pool-calls.js';
import { EmulatedState } from './state.js';
import { GraphCalls } from './graph-calls.js';
import { StreamCalls } from './stream-calls.js';
import { VirtualMemoryCalls } from './virtual-memory-calls.js';
import { sizeInBytes, variableReader } from '../../util/environment.js';
import { readOptions } from '../../util/options.js';

export { DEVICE_ALIGNMENT, LARGE_ALLOCATION } from './device-memory-calls.js';

/** Options of `new EmulatedBackend()`. */
export interface EmulatedBackendOptions {
  /** Capacity of each emulated device in bytes; default `VRAM_EMULATED_BYTES`, else 4 GiB. */
  readonly capacityBytes?: number;
  /** Number of emulated devices (default 1; 2 for peer-access tests). */
  readonly deviceCount?: number;
  /**
   * Whether the devices support stream-ordered pools in host NUMA memory (default true: one node,
   * 0, nearest every device); false models a driver or device without them
   * (CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED reads 0, cuMemPoolCreate refuses).
   */
  readonly hostNumaPools?: boolean;
  /**
   * Whether the devices support fabric handles (default true, as a GPU of an NVLink domain:
   * CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED reads 1, pools and physical memory take
   * CU_MEM_HANDLE_TYPE_FABRIC); false models one without them (the attribute reads 0, the driver
   * refuses the handle type). The IMEX channel is the host's, not the driver's: see
   * `resource/fabric-support.ts`.
   */
  readonly fabric?: boolean;
}

/** Default capacity of an emulated device. */
export const DEFAULT_EMULATED_CAPACITY = 4 * 1024 ** 3;

/** `VRAM_EMULATED_BYTES`: each emulated device's capacity, bytes or a size such as `16G`. */
export const EMULATED_BYTES_VARIABLE = variableReader('VRAM_EMULATED_BYTES', sizeInBytes);

/** The default capacity: VRAM_EMULATED_BYTES, else 4 GiB. */
function defaultCapacity(): number {
  return EMULATED_BYTES_VARIABLE.read() ?? DEFAULT_EMULATED_CAPACITY;
}

/**
 * Host memory emulating a CUDA device, with the driver's semantics. Each method hands its call to
 * the module that implements that group of driver calls.
 *
 * @example
 * ```ts
 * import { EmulatedBackend, setBackend } from 'vram/backend';
 * setBackend(new EmulatedBackend({ capacityBytes: 1 << 30 })); // a 1 GiB device, before any other vram call
 * ```
 */
export class EmulatedBackend implements Backend {
  /** Always `emulated`: output never pretends this is a GPU. */
  readonly name = 'emulated' as const;
  readonly kernelCode = 'javascript' as const;

  private readonly state: EmulatedState;
  private readonly contexts: ContextCalls;
  private readonly deviceMemory: DeviceMemoryCalls;
  private readonly hostMemory: HostMemoryCalls;
  private readonly copies: CopyCalls;
  private readonly streams: StreamCalls;
  private readonly pools: PoolCalls;
  private readonly virtualMemory: VirtualMemoryCalls;
  private readonly ipc: IpcCalls;
  private readonly kernels: KernelCalls;
  private readonly graphs: GraphCalls;
  private readonly collectiveCalls: CollectiveCalls;

  /**
   * @param options Each device's capacity (default `VRAM_EMULATED_BYTES`, else 4 GiB) and the number of devices (default 1).
   * @throws {TypeError} When `options` is not an object or has a key other than `capacityBytes` and `deviceCount`.
   * @throws {RangeError} When `capacityBytes` is not a positive whole number, `deviceCount` is not 1 to 16, or
   *   `VRAM_EMULATED_BYTES` (read when `capacityBytes` is not given) is not a size.
   * @example
   * ```ts
   * const backend = new EmulatedBackend({ deviceCount: 2 }); // two devices, for peer-access code
   * ```
   */
  constructor(options: EmulatedBackendOptions = {}) {
    options = readOptions('new EmulatedBackend', options, { capacityBytes: true, deviceCount: true, hostNumaPools: true, fabric: true });
    const capacity = options.capacityBytes ?? defaultCapacity();
    const count = options.deviceCount ?? 1;
    if (!Number.isSafeInteger(capacity) || capacity <= 0) throw new RangeError(`capacityBytes must be a positive whole number, got ${capacity}`);
    if (!Number.isInteger(count) || count < 1 || count > 16) throw new RangeError(`deviceCount must be 1 to 16, got ${count}`);
    const hostNumaPools = options.hostNumaPools ?? true;
    if (typeof hostNumaPools !== 'boolean') throw new TypeError(`hostNumaPools must be a boolean, got ${typeof hostNumaPools}`);
    const fabric = options.fabric ?? true;
    if (typeof fabric !== 'boolean') throw new TypeError(`fabric must be a boolean, got ${typeof fabric}`);
    const state = new EmulatedState(count, capacity, hostNumaPools, fabric);
    this.state = state;
    this.contexts = new ContextCalls(state);
    this.deviceMemory = new DeviceMemoryCalls(state);
    this.hostMemory = new HostMemoryCalls(state);
    this.copies = new CopyCalls(state);
    this.streams = new StreamCalls(state);
    this.pools = new PoolCalls(state);
    this.virtualMemory = new VirtualMemoryCalls(state);
    this.ipc = new IpcCalls(state);
    this.kernels = new KernelCalls(state);
    this.graphs = new GraphCalls(state);
    this.collectiveCalls = new CollectiveCalls(this);
  }

  // --- Driver, devices and contexts ---

  driverVersion(): number {
    return this.contexts.driverVersion();
  }

  deviceCount(): number {
    return this.contexts.deviceCount();
  }

  deviceInfo(ordinal: number): DeviceInfo {
    return this.contexts.deviceInfo(ordinal);
  }

  deviceCanAccessPeer(ordinal: number, peerOrdinal: number): boolean {
    return this.contexts.deviceCanAccessPeer(ordinal, peerOrdinal);
  }

  deviceGetAttribute(ordinal: number, attribute: number): number {
    return this.contexts.deviceGetAttribute(ordinal, attribute);
  }

  deviceGetByPciBusId(busId: string): number {
    return this.contexts.deviceGetByPciBusId(busId);
  }

  primaryContextRetain(ordinal: number): Handle {
    return this.contexts.primaryContextRetain(ordinal);
  }

  primaryContextRelease(ordinal: number): void {
    this.contexts.primaryContextRelease(ordinal);
  }

  contextCreate(ordinal: number, flags: number): Handle {
    return this.contexts.contextCreate(ordinal, flags);
  }

  contextDestroy(ctx: Handle): void {
    this.contexts.contextDestroy(ctx);
  }

  contextSetCurrent(ctx: Handle): void {
    this.contexts.contextSetCurrent(ctx);
  }

  contextGetCurrent(): Handle {
    return this.contexts.contextGetCurrent();
  }

  contextSynchronize(): void {
    this.contexts.contextSynchronize();
  }

  contextEnablePeerAccess(peerCtx: Handle): void {
    this.contexts.contextEnablePeerAccess(peerCtx);
  }

  contextDisablePeerAccess(peerCtx: Handle): void {
    this.contexts.contextDisablePeerAccess(peerCtx);
  }

  contextPushCurrent(ctx: Handle): void {
    this.contexts.contextPushCurrent(ctx);
  }

  contextPopCurrent(): Handle {
    return this.contexts.contextPopCurrent();
  }

  contextInfo(ctx: Handle): { readonly ordinal: number; readonly flags: number } {
    return this.contexts.contextInfo(ctx);
  }

  contextSetCacheConfig(config: number): void {
    this.contexts.contextSetCacheConfig(config);
  }

  contextGetCacheConfig(): number {
    return this.contexts.contextGetCacheConfig();
  }

  memGetInfo(): MemInfo {
    return this.contexts.memGetInfo();
  }

  // --- Device and managed memory ---

  memAlloc(bytes: number): Ptr {
    return this.deviceMemory.memAlloc(bytes);
  }

  memFree(ptr: Ptr): void {
    this.deviceMemory.memFree(ptr);
  }

  memAllocPitch(widthBytes: number, height: number, elementBytes: number): { ptr: Ptr; pitch: number } {
    return this.deviceMemory.memAllocPitch(widthBytes, height, elementBytes);
  }

  memAllocManaged(bytes: number, attachFlags: number): Ptr {
    return this.deviceMemory.memAllocManaged(bytes, attachFlags);
  }

  memPrefetchAsync(ptr: Ptr, bytes: number, location: MemLocation, stream: Handle): void {
    this.deviceMemory.memPrefetchAsync(ptr, bytes, location, stream);
  }

  memAdvise(ptr: Ptr, bytes: number, advice: number, location: MemLocation): void {
    this.deviceMemory.memAdvise(ptr, bytes, advice, location);
  }

  // --- Pinned and registered host memory ---

  memHostAlloc(bytes: number, flags: number): Ptr {
    return this.hostMemory.memHostAlloc(bytes, flags);
  }

  memFreeHost(ptr: Ptr): void {
    this.hostMemory.memFreeHost(ptr);
  }

  memHostGetDevicePointer(hostPtr: Ptr): Ptr {
    return this.hostMemory.memHostGetDevicePointer(hostPtr);
  }

  memHostRegister(memory: HostMemory, flags: number): Ptr {
    return this.hostMemory.memHostRegister(memory, flags);
  }

  memHostUnregister(hostPtr: Ptr): void {
    this.hostMemory.memHostUnregister(hostPtr);
  }

  hostView(hostPtr: Ptr, bytes: number): ArrayBuffer {
    return this.hostMemory.hostView(hostPtr, bytes);
  }

  addressOf(memory: HostMemory): Ptr {
    return this.hostMemory.addressOf(memory);
  }

  // --- Copies and fills ---

  memcpy(dst: Ptr, src: Ptr, bytes: number): void {
    this.copies.memcpy(dst, src, bytes);
  }

  memcpyAsync(dst: Ptr, src: Ptr, bytes: number, stream: Handle): void {
    this.copies.memcpyAsync(dst, src, bytes, stream);
  }

  memcpyFromHost(dst: Ptr, src: HostMemory, bytes: number): void {
    this.copies.memcpyFromHost(dst, src, bytes);
  }

  memcpyToHost(dst: HostMemory, src: Ptr, bytes: number): void {
    this.copies.memcpyToHost(dst, src, bytes);
  }

  memcpyPeer(dst: Ptr, dstCtx: Handle, src: Ptr, srcCtx: Handle, bytes: number): void {
    this.copies.memcpyPeer(dst, dstCtx, src, srcCtx, bytes);
  }

  memcpyPeerAsync(dst: Ptr, dstCtx: Handle, src: Ptr, srcCtx: Handle, bytes: number, stream: Handle): void {
    this.copies.memcpyPeerAsync(dst, dstCtx, src, srcCtx, bytes, stream);
  }

  memcpy2D(copy: Memcpy2D): void {
    this.copies.memcpy2D(copy);
  }

  memcpy2DAsync(copy: Memcpy2D, stream: Handle): void {
    this.copies.memcpy2DAsync(copy, stream);
  }

  memset(ptr: Ptr, value: number, elementBytes: 1 | 2 | 4, count: number): void {
    this.copies.memset(ptr, value, elementBytes, count);
  }

  memsetAsync(ptr: Ptr, value: number, elementBytes: 1 | 2 | 4, count: number, stream: Handle): void {
    this.copies.memsetAsync(ptr, value, elementBytes, count, stream);
  }

  // --- Streams and events ---

  streamCreate(flags: number, priority: number): Handle {
    return this.streams.streamCreate(flags, priority);
  }

  streamDestroy(stream: Handle): void {
    this.streams.streamDestroy(stream);
  }

  streamKnown(stream: Handle): boolean {
    return this.streams.streamKnown(stream);
  }

  adoptStream(stream: Handle): void {
    this.streams.adoptStream(stream);
  }

  forgetStream(stream: Handle): void {
    this.streams.forgetStream(stream);
  }

  streamGetFlags(stream: Handle): number {
    return this.streams.streamGetFlags(stream);
  }

  streamGetPriority(stream: Handle): number {
    return this.streams.streamGetPriority(stream);
  }

  streamSynchronize(stream: Handle): void {
    this.streams.streamSynchronize(stream);
  }

  streamQuery(stream: Handle): boolean {
    return this.streams.streamQuery(stream);
  }

  streamWaitEvent(stream: Handle, event: Handle): void {
    this.streams.streamWaitEvent(stream, event);
  }

  streamWaitValue32(stream: Handle, addr: Ptr, value: number, flags: number): void {
    this.streams.streamWaitValue32(stream, addr, value, flags);
  }

  streamWriteValue32(stream: Handle, addr: Ptr, value: number, flags: number): void {
    this.streams.streamWriteValue32(stream, addr, value, flags);
  }

  streamPriorityRange(): readonly [least: number, greatest: number] {
    return this.streams.streamPriorityRange();
  }

  launchHostFunc(stream: Handle, fn: () => void): void {
    this.streams.launchHostFunc(stream, fn);
  }

  // --- Stream capture and graphs ---

  streamBeginCapture(stream: Handle, mode: number): void {
    this.graphs.streamBeginCapture(stream, mode);
  }

  streamEndCapture(stream: Handle): Handle {
    return this.graphs.streamEndCapture(stream);
  }

  streamCaptureStatus(stream: Handle): number {
    return this.graphs.streamCaptureStatus(stream);
  }

  threadExchangeCaptureMode(mode: number): number {
    return this.graphs.threadExchangeCaptureMode(mode);
  }

  graphNodeCount(graph: Handle): number {
    return this.graphs.graphNodeCount(graph);
  }

  graphMemAllocNodeCount(graph: Handle): number {
    return this.graphs.graphMemAllocNodeCount(graph);
  }

  graphDestroy(graph: Handle): void {
    this.graphs.graphDestroy(graph);
  }

  graphInstantiate(graph: Handle): Handle {
    return this.graphs.graphInstantiate(graph);
  }

  graphLaunch(exec: Handle, stream: Handle): void {
    this.graphs.graphLaunch(exec, stream);
  }

  graphExecUpdate(exec: Handle, graph: Handle): number {
    return this.graphs.graphExecUpdate(exec, graph);
  }

  graphExecDestroy(exec: Handle): void {
    this.graphs.graphExecDestroy(exec);
  }

  eventCreate(flags: number): Handle {
    return this.streams.eventCreate(flags);
  }

  eventDestroy(event: Handle): void {
    this.streams.eventDestroy(event);
  }

  eventRecord(event: Handle, stream: Handle): void {
    this.streams.eventRecord(event, stream);
  }

  eventQuery(event: Handle): boolean {
    return this.streams.eventQuery(event);
  }

  eventSynchronize(event: Handle): void {
    this.streams.eventSynchronize(event);
  }

  eventElapsedTime(start: Handle, end: Handle): number {
    return this.streams.eventElapsedTime(start, end);
  }

  // --- Interprocess communication ---

  ipcGetMemHandle(ptr: Ptr): Uint8Array {
    return this.ipc.ipcGetMemHandle(ptr);
  }

  ipcOpenMemHandle(handle: Uint8Array, flags: number): Ptr {
    return this.ipc.ipcOpenMemHandle(handle, flags);
  }

  ipcCloseMemHandle(ptr: Ptr): void {
    this.ipc.ipcCloseMemHandle(ptr);
  }

  ipcGetEventHandle(event: Handle): Uint8Array {
    return this.ipc.ipcGetEventHandle(event);
  }

  ipcOpenEventHandle(handle: Uint8Array): Handle {
    return this.ipc.ipcOpenEventHandle(handle);
  }

  memPoolExportToShareableHandle(pool: Handle, handleType: number): number {
    return this.ipc.memPoolExportToShareableHandle(pool, handleType);
  }

  memPoolImportFromShareableHandle(fd: number, _handleType: number): Handle {
    return this.ipc.memPoolImportFromShareableHandle(fd);
  }

  memExportToShareableHandle(handle: Handle, handleType: number): number {
    return this.ipc.memExportToShareableHandle(handle, handleType);
  }

  memImportFromShareableHandle(fd: number, handleType: number): Handle {
    return this.ipc.memImportFromShareableHandle(fd, handleType);
  }

  memPoolExportPointer(ptr: Ptr): Uint8Array {
    return this.ipc.memPoolExportPointer(ptr);
  }

  memPoolImportPointer(pool: Handle, data: Uint8Array): Ptr {
    return this.ipc.memPoolImportPointer(pool, data);
  }

  memPoolExportFabricHandle(pool: Handle): Uint8Array {
    return this.ipc.memPoolExportFabricHandle(pool);
  }

  memPoolImportFabricHandle(handle: Uint8Array): Handle {
    return this.ipc.memPoolImportFabricHandle(handle);
  }

  memExportFabricHandle(handle: Handle): Uint8Array {
    return this.ipc.memExportFabricHandle(handle);
  }

  memImportFabricHandle(data: Uint8Array): Handle {
    return this.ipc.memImportFabricHandle(data);
  }

  // --- Stream-ordered allocation ---

  memAllocAsync(bytes: number, stream: Handle): Ptr {
    return this.pools.memAllocAsync(bytes, stream);
  }

  memAllocFromPoolAsync(bytes: number, pool: Handle, stream: Handle): Ptr {
    return this.pools.memAllocFromPoolAsync(bytes, pool, stream);
  }

  memFreeAsync(ptr: Ptr, stream: Handle): void {
    if (this.ipc.freeImportedPointer(ptr, stream)) return;
    this.pools.memFreeAsync(ptr, stream);
    this.ipc.poolPointerFreed(ptr);
  }

  deviceGetDefaultMemPool(ordinal: number): Handle {
    return this.pools.deviceGetDefaultMemPool(ordinal);
  }

  deviceGetMemPool(ordinal: number): Handle {
    return this.pools.deviceGetMemPool(ordinal);
  }

  deviceSetMemPool(ordinal: number, pool: Handle): void {
    this.pools.deviceSetMemPool(ordinal, pool);
  }

  memPoolCreate(props: MemPoolProps): Handle {
    return this.pools.memPoolCreate(props);
  }

  memPoolDestroy(pool: Handle): void {
    if (this.ipc.isImportedPool(pool)) return this.ipc.destroyImportedPool(pool);
    const exported = [...(this.state.pools.get(pool)?.allocatedBlocks() ?? [])].map((b) => b.address);
    this.pools.memPoolDestroy(pool);
    this.ipc.poolDestroyed(pool, exported);
  }

  memPoolTrimTo(pool: Handle, minBytesToKeep: number): void {
    this.pools.memPoolTrimTo(pool, minBytesToKeep);
  }

  memPoolGetAttribute(pool: Handle, attribute: MemPoolAttribute): number {
    return this.pools.memPoolGetAttribute(pool, attribute);
  }

  memPoolSetAttribute(pool: Handle, attribute: MemPoolAttribute, value: number): void {
    this.pools.memPoolSetAttribute(pool, attribute, value);
  }

  memPoolSetAccess(pool: Handle, ordinal: number, flags: number): void {
    if (this.ipc.isImportedPool(pool)) return; // the importer's mappings are readable and writable from its devices
    this.pools.memPoolSetAccess(pool, ordinal, flags);
  }

  memPoolGetAccess(pool: Handle, ordinal: number): number {
    if (this.ipc.isImportedPool(pool)) return MemAccess.READWRITE;
    return this.pools.memPoolGetAccess(pool, ordinal);
  }

  // --- Virtual memory management ---

  memGetAllocationGranularity(ordinal: number): number {
    return this.virtualMemory.memGetAllocationGranularity(ordinal);
  }

  memAddressReserve(bytes: number, alignment: number): Ptr {
    return this.virtualMemory.memAddressReserve(bytes, alignment);
  }

  memAddressFree(ptr: Ptr, bytes: number): void {
    this.virtualMemory.memAddressFree(ptr, bytes);
  }

  memCreate(bytes: number, ordinal: number, handleTypes?: number): Handle {
    return this.virtualMemory.memCreate(bytes, ordinal, handleTypes);
  }

  memRelease(handle: Handle): void {
    this.virtualMemory.memRelease(handle);
  }

  memMap(ptr: Ptr, bytes: number, handle: Handle): void {
    this.virtualMemory.memMap(ptr, bytes, handle);
  }

  memUnmap(ptr: Ptr, bytes: number): void {
    this.virtualMemory.memUnmap(ptr, bytes);
  }

  memSetAccess(ptr: Ptr, bytes: number, ordinal: number, flags: number): void {
    this.virtualMemory.memSetAccess(ptr, bytes, ordinal, flags);
  }

  // --- Pointer attributes ---

  pointerGetAttributes(ptr: Ptr): PointerAttributes {
    return pointerAttributes(this.state, ptr);
  }

  // --- Modules and kernels ---

  moduleLoad(image: ModuleImage): Handle {
    return this.kernels.moduleLoad(image);
  }

  moduleUnload(module: Handle): void {
    this.kernels.moduleUnload(module);
  }

  moduleGetFunction(module: Handle, name: string): Handle {
    return this.kernels.moduleGetFunction(module, name);
  }

  functionAttributes(fn: Handle): FunctionAttributes {
    return this.kernels.functionAttributes(fn);
  }

  functionSetCacheConfig(fn: Handle, config: number): void {
    this.kernels.functionSetCacheConfig(fn, config);
  }

  /**
   * The preference cuFuncSetCacheConfig set for `fn` (emulation only: the driver has no getter).
   * @param fn The function handle.
   * @returns Its CUfunc_cache value.
   * @throws {CudaError} For an unknown function (CUDA_ERROR_INVALID_HANDLE).
   * @example
   * ```ts
   * backend.functionCacheConfig(fn); // 0 until cuFuncSetCacheConfig
   * ```
   */
  functionCacheConfig(fn: Handle): number {
    return this.kernels.functionCacheConfig(fn);
  }

  kernelLimits(ordinal: number): KernelLimits {
    return this.kernels.kernelLimits(ordinal);
  }

  kernelParams(types: readonly ParamType[]): KernelParams {
    return this.kernels.kernelParams(types);
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
    this.kernels.launchKernel(fn, gridX, gridY, gridZ, blockX, blockY, blockZ, sharedBytes, stream, params);
  }

  occupancyMaxActiveBlocksPerMultiprocessor(fn: Handle, blockSize: number, sharedBytes: number): number {
    return this.kernels.occupancyMaxActiveBlocksPerMultiprocessor(fn, blockSize, sharedBytes);
  }

  occupancyMaxPotentialBlockSize(fn: Handle, sharedBytes: number, blockSizeLimit: number): { minGridSize: number; blockSize: number } {
    return this.kernels.occupancyMaxPotentialBlockSize(fn, sharedBytes, blockSizeLimit);
  }

  // --- Collectives ---

  collectives(): CollectiveTransport {
    return this.collectiveCalls;
  }

  // --- Emulation internals ---

  /** Bytes of device capacity in use on `ordinal` (for tests and `vram info`). @internal */
  capacityUsed(ordinal = 0): number {
    return this.contexts.capacityUsed(ordinal);
  }
}
