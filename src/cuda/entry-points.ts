/**
 * The driver entry points vram calls, each with the C prototype koffi binds it to and the CUDA
 * version at which that prototype's ABI appeared, and their resolution through cuGetProcAddress.
 *
 * Why a version per entry point rather than the driver's own version: cuGetProcAddress returns the
 * newest variant of a symbol that is not newer than the version asked for. Asking with the
 * driver's version would hand a future driver's `_v3` to a prototype written for `_v2`. Asking
 * with the version each prototype was written for (what cudart and cuda-python do) always yields
 * the ABI declared here: `cuMemAlloc` at 3020 is cuMemAlloc_v2, `cuCtxCreate` at 12050 is
 * cuCtxCreate_v4, `cuMemPrefetchAsync` at 12020 is cuMemPrefetchAsync_v2, and so on. Where the
 * ABI changed, both variants are listed and the backend uses the newest one the driver has.
 *
 * Conventions, for the hot path: handles and device addresses are `uint64_t` (plain JS numbers
 * in, no pointer objects); out-parameters are plain pointers that callers fill with preallocated
 * typed arrays (never `_Out_`, which costs a JS array conversion per call). The allocation calls
 * (cuMemAlloc, cuMemAllocAsync, cuMemAllocFromPoolAsync) go further: their device-pointer
 * out-parameter is declared as an integer and given the address of a native OutSlot as a number,
 * which koffi passes with no per-call typed-array lookup (see out-slot.ts).
 */
import koffi from 'koffi';
import type { IpcHandleValue, Memcpy2DValue, MemAccessDescValue, MemAllocationPropValue, MemLocationValue, MemPoolPropsValue } from './types.js';
// Registers the vram_* struct types used in the prototypes below before they are parsed.
import './types.js';

/** Host memory koffi passes by address (the Backend's HostMemory: the same union, not imported upward). */
type HostMemory = ArrayBufferView | ArrayBuffer;

/** Signature of every bound entry point: a CUresult. */
type R = number;

/** The typed entry points. Optional ones exist only on drivers new (or old) enough. */
export interface DriverFunctions {
  cuGetErrorName(error: number, str: BigUint64Array): R;
  cuGetErrorString(error: number, str: BigUint64Array): R;
  cuDeviceGet(device: Int32Array, ordinal: number): R;
  cuDeviceGetCount(count: Int32Array): R;
  cuDeviceGetName(name: Uint8Array, len: number, dev: number): R;
  cuDeviceGetUuid_v2(uuid: Uint8Array, dev: number): R;
  cuDeviceTotalMem_v2(bytes: BigUint64Array, dev: number): R;
  cuDeviceGetAttribute(value: Int32Array, attribute: number, dev: number): R;
  cuDeviceGetByPCIBusId(dev: Int32Array, busId: string): R;
  cuDeviceGetMemPool(pool: BigUint64Array, dev: number): R;
  cuDeviceSetMemPool(dev: number, pool: number): R;
  cuCtxPushCurrent_v2(ctx: number): R;
  cuCtxPopCurrent_v2(ctx: BigUint64Array): R;
  cuCtxGetDevice(dev: Int32Array): R;
  cuCtxGetFlags(flags: Uint32Array): R;
  cuCtxSetCacheConfig(config: number): R;
  cuCtxGetCacheConfig(config: Int32Array): R;
  cuFuncSetCacheConfig(fn: number, config: number): R;
  cuDeviceGetPCIBusId(busId: Uint8Array, len: number, dev: number): R;
  cuDeviceCanAccessPeer(canAccess: Int32Array, dev: number, peerDev: number): R;
  cuDevicePrimaryCtxRetain(ctx: BigUint64Array, dev: number): R;
  cuDevicePrimaryCtxRelease_v2(dev: number): R;
  cuCtxCreate_v4?: (ctx: BigUint64Array, params: null, flags: number, dev: number) => R;
  cuCtxCreate_v2?: (ctx: BigUint64Array, flags: number, dev: number) => R;
  cuCtxDestroy_v2(ctx: number): R;
  cuCtxSetCurrent(ctx: number): R;
  cuCtxGetCurrent(ctx: BigUint64Array): R;
  cuCtxSynchronize(): R;
  cuCtxEnablePeerAccess(peerCtx: number, flags: number): R;
  cuCtxDisablePeerAccess(peerCtx: number): R;
  cuCtxGetStreamPriorityRange(least: Int32Array, greatest: Int32Array): R;
  cuMemGetInfo_v2(free: BigUint64Array, total: BigUint64Array): R;
  /** `dptr`: the address of an OutSlot (out-slot.ts), as a number. */
  cuMemAlloc_v2(dptr: number, bytes: number): R;
  cuMemFree_v2(dptr: number): R;
  cuMemAllocPitch_v2(dptr: BigUint64Array, pitch: BigUint64Array, widthBytes: number, height: number, elementBytes: number): R;
  cuMemAllocManaged(dptr: BigUint64Array, bytes: number, flags: number): R;
  cuMemPrefetchAsync_v2?: (dptr: number, count: number, location: MemLocationValue, flags: number, stream: number) => R;
  cuMemPrefetchAsync?: (dptr: number, count: number, device: number, stream: number) => R;
  cuMemAdvise_v2?: (dptr: number, count: number, advice: number, location: MemLocationValue) => R;
  cuMemAdvise?: (dptr: number, count: number, advice: number, device: number) => R;
  cuMemHostAlloc(pp: BigUint64Array, bytes: number, flags: number): R;
  cuMemFreeHost(p: number): R;
  cuMemHostGetDevicePointer_v2(dptr: BigUint64Array, p: number, flags: number): R;
  cuMemHostRegister_v2(p: number, bytes: number, flags: number): R;
  cuMemHostUnregister(p: number): R;
  cuMemcpy(dst: number, src: number, bytes: number): R;
  cuMemcpyAsync(dst: number, src: number, bytes: number, stream: number): R;
  cuMemcpyToHostUnified(dst: HostMemory, src: number, bytes: number): R;
  cuMemcpyFromHostUnified(dst: number, src: HostMemory, bytes: number): R;
  cuMemcpyPeer(dst: number, dstCtx: number, src: number, srcCtx: number, bytes: number): R;
  cuMemcpyPeerAsync(dst: number, dstCtx: number, src: number, srcCtx: number, bytes: number, stream: number): R;
  cuMemcpy2D_v2(copy: Memcpy2DValue): R;
  cuMemcpy2DAsync_v2(copy: Memcpy2DValue, stream: number): R;
  cuMemsetD8_v2(dst: number, value: number, count: number): R;
  cuMemsetD16_v2(dst: number, value: number, count: number): R;
  cuMemsetD32_v2(dst: number, value: number, count: number): R;
  cuMemsetD8Async(dst: number, value: number, count: number, stream: number): R;
  cuMemsetD16Async(dst: number, value: number, count: number, stream: number): R;
  cuMemsetD32Async(dst: number, value: number, count: number, stream: number): R;
  cuStreamCreateWithPriority(stream: BigUint64Array, flags: number, priority: number): R;
  cuStreamDestroy_v2(stream: number): R;
  cuStreamSynchronize(stream: number): R;
  cuStreamQuery(stream: number): R;
  cuStreamWaitEvent(stream: number, event: number, flags: number): R;
  cuStreamGetFlags(stream: number, flags: Uint32Array): R;
  cuStreamGetPriority(stream: number, priority: Int32Array): R;
  cuStreamWaitValue32_v2(stream: number, addr: number, value: number, flags: number): R;
  cuStreamWriteValue32_v2(stream: number, addr: number, value: number, flags: number): R;
  /** `fn`: the address of the registered host-function trampoline; `userData`: the function's id. */
  cuLaunchHostFunc(stream: number, fn: number, userData: number): R;
  cuStreamBeginCapture_v2(stream: number, mode: number): R;
  cuStreamEndCapture(stream: number, graph: BigUint64Array): R;
  cuStreamIsCapturing(stream: number, status: Int32Array): R;
  cuStreamGetCaptureInfo_v2?: (stream: number, status: Int32Array, id: BigUint64Array, graph: null, deps: null, count: null) => R;
  cuThreadExchangeStreamCaptureMode(mode: Int32Array): R;
  cuGraphGetNodes(graph: number, nodes: BigUint64Array | null, count: BigUint64Array): R;
  cuGraphNodeGetType(node: number, type: Int32Array): R;
  cuGraphDestroy(graph: number): R;
  cuGraphInstantiateWithFlags(exec: BigUint64Array, graph: number, flags: number): R;
  cuGraphLaunch(exec: number, stream: number): R;
  /** `info`: a CUgraphExecUpdateResultInfo (result, errorNode, errorFromNode: 24 bytes). */
  cuGraphExecUpdate_v2(exec: number, graph: number, info: BigUint64Array): R;
  cuGraphExecDestroy(exec: number): R;
  cuEventCreate(event: BigUint64Array, flags: number): R;
  cuEventDestroy_v2(event: number): R;
  cuEventRecord(event: number, stream: number): R;
  cuEventQuery(event: number): R;
  cuEventSynchronize(event: number): R;
  cuEventElapsedTime_v2?: (ms: Float32Array, start: number, end: number) => R;
  cuEventElapsedTime?: (ms: Float32Array, start: number, end: number) => R;
  /** `dptr`: the address of an OutSlot (out-slot.ts), as a number. */
  cuMemAllocAsync(dptr: number, bytes: number, stream: number): R;
  /** `dptr`: the address of an OutSlot (out-slot.ts), as a number. */
  cuMemAllocFromPoolAsync(dptr: number, bytes: number, pool: number, stream: number): R;
  cuMemFreeAsync(dptr: number, stream: number): R;
  cuDeviceGetDefaultMemPool(pool: BigUint64Array, dev: number): R;
  cuMemPoolCreate(pool: BigUint64Array, props: MemPoolPropsValue): R;
  cuMemPoolDestroy(pool: number): R;
  cuMemPoolTrimTo(pool: number, minBytesToKeep: number): R;
  cuMemPoolSetAttribute(pool: number, attribute: number, value: Int32Array | BigUint64Array): R;
  cuMemPoolGetAttribute(pool: number, attribute: number, value: Int32Array | BigUint64Array): R;
  cuMemPoolSetAccess(pool: number, desc: MemAccessDescValue, count: number): R;
  cuMemPoolGetAccess(flags: Int32Array, pool: number, location: MemLocationValue): R;
  cuMemGetAllocationGranularity(granularity: BigUint64Array, prop: MemAllocationPropValue, option: number): R;
  cuMemAddressReserve(ptr: BigUint64Array, size: number, alignment: number, addr: number, flags: number): R;
  cuMemAddressFree(ptr: number, size: number): R;
  cuMemCreate(handle: BigUint64Array, size: number, prop: MemAllocationPropValue, flags: number): R;
  cuMemRelease(handle: number): R;
  cuMemMap(ptr: number, size: number, offset: number, handle: number, flags: number): R;
  cuMemUnmap(ptr: number, size: number): R;
  cuMemSetAccess(ptr: number, size: number, desc: MemAccessDescValue, count: number): R;
  cuPointerGetAttributes(count: number, attributes: Int32Array, data: BigUint64Array, ptr: number): R;
  cuIpcGetMemHandle(handle: Uint8Array, dptr: number): R;
  cuIpcOpenMemHandle_v2(dptr: BigUint64Array, handle: IpcHandleValue, flags: number): R;
  cuIpcCloseMemHandle(dptr: number): R;
  cuIpcGetEventHandle(handle: Uint8Array, event: number): R;
  cuIpcOpenEventHandle(event: BigUint64Array, handle: IpcHandleValue): R;
  cuMemPoolExportToShareableHandle(handle: Int32Array, pool: number, handleType: number, flags: number): R;
  cuMemPoolImportFromShareableHandle(pool: BigUint64Array, handle: number, handleType: number, flags: number): R;
  cuMemPoolExportPointer(data: Uint8Array, ptr: number): R;
  cuMemPoolImportPointer(ptr: BigUint64Array, pool: number, data: Uint8Array): R;
  cuMemExportToShareableHandle(handle: Int32Array, allocation: number, handleType: number, flags: number): R;
  cuMemImportFromShareableHandle(allocation: BigUint64Array, handle: number, handleType: number): R;
  /** cuMemPoolExportToShareableHandle bound for a fabric handle: the driver writes its 64 bytes. */
  cuMemPoolExportToFabricHandle(handle: Uint8Array, pool: number, handleType: number, flags: number): R;
  /** cuMemPoolImportFromShareableHandle bound for a fabric handle: `handle` points at its 64 bytes. */
  cuMemPoolImportFromFabricHandle(pool: BigUint64Array, handle: Uint8Array, handleType: number, flags: number): R;
  /** cuMemExportToShareableHandle bound for a fabric handle. */
  cuMemExportToFabricHandle(handle: Uint8Array, allocation: number, handleType: number, flags: number): R;
  /** cuMemImportFromShareableHandle bound for a fabric handle. */
  cuMemImportFromFabricHandle(allocation: BigUint64Array, handle: Uint8Array, handleType: number): R;
  cuModuleLoadData(module: BigUint64Array, image: Uint8Array): R;
  cuModuleUnload(module: number): R;
  cuModuleGetFunction(fn: BigUint64Array, module: number, name: string): R;
  cuFuncGetAttribute(value: Int32Array, attribute: number, fn: number): R;
  /** `kernelParams`: the address of the kernel's native `void *[]` (KernelParams.address), as a number; `extra` 0. */
  cuLaunchKernel(
    fn: number,
    gridX: number,
    gridY: number,
    gridZ: number,
    blockX: number,
    blockY: number,
    blockZ: number,
    sharedBytes: number,
    stream: number,
    kernelParams: number,
    extra: number,
  ): R;
  cuOccupancyMaxActiveBlocksPerMultiprocessor(blocks: Int32Array, fn: number, blockSize: number, sharedBytes: number): R;
  cuOccupancyMaxPotentialBlockSize(
    minGridSize: Int32Array,
    blockSize: Int32Array,
    fn: number,
    sharedOfBlockSize: null,
    sharedBytes: number,
    blockSizeLimit: number,
  ): R;
}

/** How one entry point is found: the symbol asked of cuGetProcAddress, at which version, bound how. */
interface EntrySpec {
  readonly symbol: string;
  /** The CUDA version whose ABI `params` describes; also the lowest driver that has it. */
  readonly version: number;
  /** The C parameter list koffi binds (the result is always `int`, a CUresult). */
  readonly params: string;
  /** Optional entries are skipped when the driver is older than `version` (an older variant stands in). */
  readonly optional?: boolean;
}

const U64 = 'uint64_t';
/**
 * A `CUdeviceptr *` out-parameter bound as the integer address of an OutSlot: same ABI (a 64-bit
 * pointer is a 64-bit integer in the same register), but a plain number for koffi to pass, and no
 * pointer parameter, which also lets koffi use its fast call path (no per-call finalisation).
 */
const OUT_SLOT = 'uint64_t';

/** Every entry point vram uses. Versions as in cuda.h / cudaTypedefs.h for CUDA 12-13. */
const SPECS: { readonly [K in keyof DriverFunctions]-?: EntrySpec } = {
  cuGetErrorName: { symbol: 'cuGetErrorName', version: 6000, params: 'int error, uint64_t *str' },
  cuGetErrorString: { symbol: 'cuGetErrorString', version: 6000, params: 'int error, uint64_t *str' },
  cuDeviceGet: { symbol: 'cuDeviceGet', version: 2000, params: 'int *device, int ordinal' },
  cuDeviceGetCount: { symbol: 'cuDeviceGetCount', version: 2000, params: 'int *count' },
  cuDeviceGetName: { symbol: 'cuDeviceGetName', version: 2000, params: 'uint8_t *name, int len, int dev' },
  cuDeviceGetUuid_v2: { symbol: 'cuDeviceGetUuid', version: 11040, params: 'uint8_t *uuid, int dev' },
  cuDeviceTotalMem_v2: { symbol: 'cuDeviceTotalMem', version: 3020, params: 'uint64_t *bytes, int dev' },
  cuDeviceGetAttribute: { symbol: 'cuDeviceGetAttribute', version: 2000, params: 'int *value, int attribute, int dev' },
  cuDeviceGetByPCIBusId: { symbol: 'cuDeviceGetByPCIBusId', version: 4010, params: 'int *dev, const char *pciBusId' },
  cuDeviceGetMemPool: { symbol: 'cuDeviceGetMemPool', version: 11020, params: 'uint64_t *pool, int dev' },
  cuDeviceSetMemPool: { symbol: 'cuDeviceSetMemPool', version: 11020, params: `int dev, ${U64} pool` },
  cuCtxPushCurrent_v2: { symbol: 'cuCtxPushCurrent', version: 4000, params: `${U64} ctx` },
  cuCtxPopCurrent_v2: { symbol: 'cuCtxPopCurrent', version: 4000, params: 'uint64_t *ctx' },
  cuCtxGetDevice: { symbol: 'cuCtxGetDevice', version: 2000, params: 'int *device' },
  cuCtxGetFlags: { symbol: 'cuCtxGetFlags', version: 7000, params: 'uint32_t *flags' },
  cuCtxSetCacheConfig: { symbol: 'cuCtxSetCacheConfig', version: 3020, params: 'int config' },
  cuCtxGetCacheConfig: { symbol: 'cuCtxGetCacheConfig', version: 3020, params: 'int *config' },
  cuFuncSetCacheConfig: { symbol: 'cuFuncSetCacheConfig', version: 3000, params: `${U64} hfunc, int config` },
  cuDeviceGetPCIBusId: { symbol: 'cuDeviceGetPCIBusId', version: 4010, params: 'uint8_t *busId, int len, int dev' },
  cuDeviceCanAccessPeer: { symbol: 'cuDeviceCanAccessPeer', version: 4000, params: 'int *canAccess, int dev, int peerDev' },
  cuDevicePrimaryCtxRetain: { symbol: 'cuDevicePrimaryCtxRetain', version: 7000, params: 'uint64_t *ctx, int dev' },
  cuDevicePrimaryCtxRelease_v2: { symbol: 'cuDevicePrimaryCtxRelease', version: 11000, params: 'int dev' },
  cuCtxCreate_v4: { symbol: 'cuCtxCreate', version: 12050, params: 'uint64_t *ctx, void *params, uint32_t flags, int dev', optional: true },
  cuCtxCreate_v2: { symbol: 'cuCtxCreate', version: 3020, params: 'uint64_t *ctx, uint32_t flags, int dev', optional: true },
  cuCtxDestroy_v2: { symbol: 'cuCtxDestroy', version: 4000, params: `${U64} ctx` },
  cuCtxSetCurrent: { symbol: 'cuCtxSetCurrent', version: 4000, params: `${U64} ctx` },
  cuCtxGetCurrent: { symbol: 'cuCtxGetCurrent', version: 4000, params: 'uint64_t *ctx' },
  cuCtxSynchronize: { symbol: 'cuCtxSynchronize', version: 2000, params: 'void' },
  cuCtxEnablePeerAccess: { symbol: 'cuCtxEnablePeerAccess', version: 4000, params: `${U64} peerCtx, uint32_t flags` },
  cuCtxDisablePeerAccess: { symbol: 'cuCtxDisablePeerAccess', version: 4000, params: `${U64} peerCtx` },
  cuCtxGetStreamPriorityRange: { symbol: 'cuCtxGetStreamPriorityRange', version: 5050, params: 'int *least, int *greatest' },
  cuMemGetInfo_v2: { symbol: 'cuMemGetInfo', version: 3020, params: 'uint64_t *free, uint64_t *total' },
  cuMemAlloc_v2: { symbol: 'cuMemAlloc', version: 3020, params: `${OUT_SLOT} dptr, size_t bytes` },
  cuMemFree_v2: { symbol: 'cuMemFree', version: 3020, params: `${U64} dptr` },
  cuMemAllocPitch_v2: {
    symbol: 'cuMemAllocPitch',
    version: 3020,
    params: 'uint64_t *dptr, uint64_t *pitch, size_t widthBytes, size_t height, uint32_t elementBytes',
  },
  cuMemAllocManaged: { symbol: 'cuMemAllocManaged', version: 6000, params: 'uint64_t *dptr, size_t bytes, uint32_t flags' },
  cuMemPrefetchAsync_v2: {
    symbol: 'cuMemPrefetchAsync',
    version: 12020,
    params: `${U64} dptr, size_t count, vram_CUmemLocation location, uint32_t flags, ${U64} stream`,
    optional: true,
  },
  cuMemPrefetchAsync: { symbol: 'cuMemPrefetchAsync', version: 8000, params: `${U64} dptr, size_t count, int device, ${U64} stream`, optional: true },
  cuMemAdvise_v2: { symbol: 'cuMemAdvise', version: 12020, params: `${U64} dptr, size_t count, int advice, vram_CUmemLocation location`, optional: true },
  cuMemAdvise: { symbol: 'cuMemAdvise', version: 8000, params: `${U64} dptr, size_t count, int advice, int device`, optional: true },
  cuMemHostAlloc: { symbol: 'cuMemHostAlloc', version: 2020, params: 'uint64_t *pp, size_t bytes, uint32_t flags' },
  cuMemFreeHost: { symbol: 'cuMemFreeHost', version: 2000, params: `${U64} p` },
  cuMemHostGetDevicePointer_v2: { symbol: 'cuMemHostGetDevicePointer', version: 3020, params: `uint64_t *dptr, ${U64} p, uint32_t flags` },
  cuMemHostRegister_v2: { symbol: 'cuMemHostRegister', version: 6050, params: `${U64} p, size_t bytes, uint32_t flags` },
  cuMemHostUnregister: { symbol: 'cuMemHostUnregister', version: 4000, params: `${U64} p` },
  cuMemcpy: { symbol: 'cuMemcpy', version: 4000, params: `${U64} dst, ${U64} src, size_t bytes` },
  cuMemcpyAsync: { symbol: 'cuMemcpyAsync', version: 4000, params: `${U64} dst, ${U64} src, size_t bytes, ${U64} stream` },
  // cuMemcpy with one side JavaScript memory: unified addressing infers both sides, so the other may
  // be host memory too (a host NUMA pool's block, which cuMemcpyDtoH/HtoD refuse as not device memory).
  cuMemcpyToHostUnified: { symbol: 'cuMemcpy', version: 4000, params: `void *dst, ${U64} src, size_t bytes` },
  cuMemcpyFromHostUnified: { symbol: 'cuMemcpy', version: 4000, params: `${U64} dst, const void *src, size_t bytes` },
  cuMemcpyPeer: { symbol: 'cuMemcpyPeer', version: 4000, params: `${U64} dst, ${U64} dstCtx, ${U64} src, ${U64} srcCtx, size_t bytes` },
  cuMemcpyPeerAsync: {
    symbol: 'cuMemcpyPeerAsync',
    version: 4000,
    params: `${U64} dst, ${U64} dstCtx, ${U64} src, ${U64} srcCtx, size_t bytes, ${U64} stream`,
  },
  cuMemcpy2D_v2: { symbol: 'cuMemcpy2D', version: 3020, params: 'const vram_CUDA_MEMCPY2D *copy' },
  cuMemcpy2DAsync_v2: { symbol: 'cuMemcpy2DAsync', version: 3020, params: `const vram_CUDA_MEMCPY2D *copy, ${U64} stream` },
  cuMemsetD8_v2: { symbol: 'cuMemsetD8', version: 3020, params: `${U64} dst, uint8_t value, size_t count` },
  cuMemsetD16_v2: { symbol: 'cuMemsetD16', version: 3020, params: `${U64} dst, uint16_t value, size_t count` },
  cuMemsetD32_v2: { symbol: 'cuMemsetD32', version: 3020, params: `${U64} dst, uint32_t value, size_t count` },
  cuMemsetD8Async: { symbol: 'cuMemsetD8Async', version: 3020, params: `${U64} dst, uint8_t value, size_t count, ${U64} stream` },
  cuMemsetD16Async: { symbol: 'cuMemsetD16Async', version: 3020, params: `${U64} dst, uint16_t value, size_t count, ${U64} stream` },
  cuMemsetD32Async: { symbol: 'cuMemsetD32Async', version: 3020, params: `${U64} dst, uint32_t value, size_t count, ${U64} stream` },
  cuStreamCreateWithPriority: { symbol: 'cuStreamCreateWithPriority', version: 5050, params: 'uint64_t *stream, uint32_t flags, int priority' },
  cuStreamDestroy_v2: { symbol: 'cuStreamDestroy', version: 4000, params: `${U64} stream` },
  cuStreamSynchronize: { symbol: 'cuStreamSynchronize', version: 2000, params: `${U64} stream` },
  cuStreamQuery: { symbol: 'cuStreamQuery', version: 2000, params: `${U64} stream` },
  cuStreamWaitEvent: { symbol: 'cuStreamWaitEvent', version: 3020, params: `${U64} stream, ${U64} event, uint32_t flags` },
  cuStreamGetFlags: { symbol: 'cuStreamGetFlags', version: 5050, params: `${U64} stream, uint32_t *flags` },
  cuStreamGetPriority: { symbol: 'cuStreamGetPriority', version: 5050, params: `${U64} stream, int *priority` },
  // The _v2 stream memory operations (CUDA 11.7): always available, no CAN_USE_STREAM_MEM_OPS_V1 opt-in.
  cuStreamWaitValue32_v2: { symbol: 'cuStreamWaitValue32', version: 11070, params: `${U64} stream, ${U64} addr, uint32_t value, uint32_t flags` },
  cuStreamWriteValue32_v2: { symbol: 'cuStreamWriteValue32', version: 11070, params: `${U64} stream, ${U64} addr, uint32_t value, uint32_t flags` },
  cuLaunchHostFunc: { symbol: 'cuLaunchHostFunc', version: 10000, params: `${U64} stream, ${U64} fn, ${U64} userData` },
  cuStreamBeginCapture_v2: { symbol: 'cuStreamBeginCapture', version: 10010, params: `${U64} stream, int mode` },
  cuStreamEndCapture: { symbol: 'cuStreamEndCapture', version: 10000, params: `${U64} stream, uint64_t *graph` },
  cuStreamIsCapturing: { symbol: 'cuStreamIsCapturing', version: 10000, params: `${U64} stream, int *status` },
  // The capture's id (which capture a host function belongs to); the CUDA 11.3 ABI, optional.
  cuStreamGetCaptureInfo_v2: {
    symbol: 'cuStreamGetCaptureInfo',
    version: 11030,
    params: `${U64} stream, int *status, uint64_t *id, void *graph, void *deps, void *count`,
    optional: true,
  },
  cuThreadExchangeStreamCaptureMode: { symbol: 'cuThreadExchangeStreamCaptureMode', version: 10010, params: 'int *mode' },
  cuGraphGetNodes: { symbol: 'cuGraphGetNodes', version: 10000, params: `${U64} graph, void *nodes, size_t *count` },
  cuGraphNodeGetType: { symbol: 'cuGraphNodeGetType', version: 10000, params: `${U64} node, int *type` },
  cuGraphDestroy: { symbol: 'cuGraphDestroy', version: 10000, params: `${U64} graph` },
  cuGraphInstantiateWithFlags: { symbol: 'cuGraphInstantiateWithFlags', version: 11040, params: `uint64_t *exec, ${U64} graph, uint64_t flags` },
  cuGraphLaunch: { symbol: 'cuGraphLaunch', version: 10000, params: `${U64} exec, ${U64} stream` },
  cuGraphExecUpdate_v2: { symbol: 'cuGraphExecUpdate', version: 12000, params: `${U64} exec, ${U64} graph, void *info` },
  cuGraphExecDestroy: { symbol: 'cuGraphExecDestroy', version: 10000, params: `${U64} exec` },
  cuEventCreate: { symbol: 'cuEventCreate', version: 2000, params: 'uint64_t *event, uint32_t flags' },
  cuEventDestroy_v2: { symbol: 'cuEventDestroy', version: 4000, params: `${U64} event` },
  cuEventRecord: { symbol: 'cuEventRecord', version: 2000, params: `${U64} event, ${U64} stream` },
  cuEventQuery: { symbol: 'cuEventQuery', version: 2000, params: `${U64} event` },
  cuEventSynchronize: { symbol: 'cuEventSynchronize', version: 2000, params: `${U64} event` },
  cuEventElapsedTime_v2: { symbol: 'cuEventElapsedTime', version: 12080, params: `float *ms, ${U64} start, ${U64} end`, optional: true },
  cuEventElapsedTime: { symbol: 'cuEventElapsedTime', version: 2000, params: `float *ms, ${U64} start, ${U64} end`, optional: true },
  cuMemAllocAsync: { symbol: 'cuMemAllocAsync', version: 11020, params: `${OUT_SLOT} dptr, size_t bytes, ${U64} stream` },
  cuMemAllocFromPoolAsync: { symbol: 'cuMemAllocFromPoolAsync', version: 11020, params: `${OUT_SLOT} dptr, size_t bytes, ${U64} pool, ${U64} stream` },
  cuMemFreeAsync: { symbol: 'cuMemFreeAsync', version: 11020, params: `${U64} dptr, ${U64} stream` },
  cuDeviceGetDefaultMemPool: { symbol: 'cuDeviceGetDefaultMemPool', version: 11020, params: 'uint64_t *pool, int dev' },
  cuMemPoolCreate: { symbol: 'cuMemPoolCreate', version: 11020, params: 'uint64_t *pool, const vram_CUmemPoolProps *props' },
  cuMemPoolDestroy: { symbol: 'cuMemPoolDestroy', version: 11020, params: `${U64} pool` },
  cuMemPoolTrimTo: { symbol: 'cuMemPoolTrimTo', version: 11020, params: `${U64} pool, size_t minBytesToKeep` },
  cuMemPoolSetAttribute: { symbol: 'cuMemPoolSetAttribute', version: 11020, params: `${U64} pool, int attribute, void *value` },
  cuMemPoolGetAttribute: { symbol: 'cuMemPoolGetAttribute', version: 11020, params: `${U64} pool, int attribute, void *value` },
  cuMemPoolSetAccess: { symbol: 'cuMemPoolSetAccess', version: 11020, params: `${U64} pool, const vram_CUmemAccessDesc *desc, size_t count` },
  cuMemPoolGetAccess: { symbol: 'cuMemPoolGetAccess', version: 11020, params: `int *flags, ${U64} pool, const vram_CUmemLocation *location` },
  cuMemGetAllocationGranularity: {
    symbol: 'cuMemGetAllocationGranularity',
    version: 10020,
    params: 'uint64_t *granularity, const vram_CUmemAllocationProp *prop, int option',
  },
  cuMemAddressReserve: { symbol: 'cuMemAddressReserve', version: 10020, params: `uint64_t *ptr, size_t size, size_t alignment, ${U64} addr, uint64_t flags` },
  cuMemAddressFree: { symbol: 'cuMemAddressFree', version: 10020, params: `${U64} ptr, size_t size` },
  cuMemCreate: { symbol: 'cuMemCreate', version: 10020, params: 'uint64_t *handle, size_t size, const vram_CUmemAllocationProp *prop, uint64_t flags' },
  cuMemRelease: { symbol: 'cuMemRelease', version: 10020, params: `${U64} handle` },
  cuMemMap: { symbol: 'cuMemMap', version: 10020, params: `${U64} ptr, size_t size, size_t offset, ${U64} handle, uint64_t flags` },
  cuMemUnmap: { symbol: 'cuMemUnmap', version: 10020, params: `${U64} ptr, size_t size` },
  cuMemSetAccess: { symbol: 'cuMemSetAccess', version: 10020, params: `${U64} ptr, size_t size, const vram_CUmemAccessDesc *desc, size_t count` },
  cuPointerGetAttributes: { symbol: 'cuPointerGetAttributes', version: 7000, params: `uint32_t count, const int *attributes, uint64_t *data, ${U64} ptr` },
  // The handles are 64-byte structs: written through a pointer, passed to the Open calls by value.
  cuIpcGetMemHandle: { symbol: 'cuIpcGetMemHandle', version: 4010, params: `uint8_t *handle, ${U64} dptr` },
  cuIpcOpenMemHandle_v2: { symbol: 'cuIpcOpenMemHandle', version: 11000, params: 'uint64_t *dptr, vram_CUipcMemHandle handle, uint32_t flags' },
  cuIpcCloseMemHandle: { symbol: 'cuIpcCloseMemHandle', version: 4010, params: `${U64} dptr` },
  cuIpcGetEventHandle: { symbol: 'cuIpcGetEventHandle', version: 4010, params: `uint8_t *handle, ${U64} event` },
  cuIpcOpenEventHandle: { symbol: 'cuIpcOpenEventHandle', version: 4010, params: 'uint64_t *event, vram_CUipcEventHandle handle' },
  // A POSIX file descriptor goes out through an `int *` and comes back in as the pointer-sized `void *handle` itself.
  cuMemPoolExportToShareableHandle: {
    symbol: 'cuMemPoolExportToShareableHandle',
    version: 11020,
    params: `int *handle, ${U64} pool, int handleType, uint64_t flags`,
  },
  cuMemPoolImportFromShareableHandle: {
    symbol: 'cuMemPoolImportFromShareableHandle',
    version: 11020,
    params: `uint64_t *pool, ${U64} handle, int handleType, uint64_t flags`,
  },
  cuMemPoolExportPointer: { symbol: 'cuMemPoolExportPointer', version: 11020, params: `uint8_t *data, ${U64} ptr` },
  cuMemPoolImportPointer: { symbol: 'cuMemPoolImportPointer', version: 11020, params: `uint64_t *ptr, ${U64} pool, const uint8_t *data` },
  // Physical allocations (cuMemCreate) shared the same way: an `int *` out, the descriptor in as the pointer-sized handle.
  cuMemExportToShareableHandle: {
    symbol: 'cuMemExportToShareableHandle',
    version: 10020,
    params: `int *handle, ${U64} allocation, int handleType, uint64_t flags`,
  },
  cuMemImportFromShareableHandle: { symbol: 'cuMemImportFromShareableHandle', version: 10020, params: `uint64_t *allocation, ${U64} handle, int handleType` },
  // The same four calls for CU_MEM_HANDLE_TYPE_FABRIC: the handle is a 64-byte CUmemFabricHandle,
  // written through the `void *` out-parameter and passed in by its address (the `void *handle`
  // points at it), so they are bound a second time with byte pointers (cuda.h: CUDA 12.3 and later).
  cuMemPoolExportToFabricHandle: {
    symbol: 'cuMemPoolExportToShareableHandle',
    version: 11020,
    params: `uint8_t *handle, ${U64} pool, int handleType, uint64_t flags`,
  },
  cuMemPoolImportFromFabricHandle: {
    symbol: 'cuMemPoolImportFromShareableHandle',
    version: 11020,
    params: `uint64_t *pool, const uint8_t *handle, int handleType, uint64_t flags`,
  },
  cuMemExportToFabricHandle: {
    symbol: 'cuMemExportToShareableHandle',
    version: 10020,
    params: `uint8_t *handle, ${U64} allocation, int handleType, uint64_t flags`,
  },
  cuMemImportFromFabricHandle: {
    symbol: 'cuMemImportFromShareableHandle',
    version: 10020,
    params: 'uint64_t *allocation, const uint8_t *handle, int handleType',
  },
  // Modules and kernels. The cuModule* calls rather than cuLibrary*: a module is loaded into the
  // context current at the time, which is the context vram chose for the device, as its memory is.
  cuModuleLoadData: { symbol: 'cuModuleLoadData', version: 2000, params: 'uint64_t *module, const uint8_t *image' },
  cuModuleUnload: { symbol: 'cuModuleUnload', version: 2000, params: `${U64} module` },
  cuModuleGetFunction: { symbol: 'cuModuleGetFunction', version: 2000, params: `uint64_t *fn, ${U64} module, const char *name` },
  cuFuncGetAttribute: { symbol: 'cuFuncGetAttribute', version: 2020, params: `int *value, int attribute, ${U64} fn` },
  // kernelParams and extra as integers (addresses): no pointer parameter, so koffi's fast call
  // path and no per-launch conversion; the kernel's pointer array lives in native memory.
  cuLaunchKernel: {
    symbol: 'cuLaunchKernel',
    version: 4000,
    params:
      `${U64} fn, uint32_t gridX, uint32_t gridY, uint32_t gridZ, uint32_t blockX, uint32_t blockY, uint32_t blockZ, ` +
      `uint32_t sharedBytes, ${U64} stream, ${U64} kernelParams, ${U64} extra`,
  },
  cuOccupancyMaxActiveBlocksPerMultiprocessor: {
    symbol: 'cuOccupancyMaxActiveBlocksPerMultiprocessor',
    version: 6050,
    params: `int *blocks, ${U64} fn, int blockSize, size_t sharedBytes`,
  },
  cuOccupancyMaxPotentialBlockSize: {
    symbol: 'cuOccupancyMaxPotentialBlockSize',
    version: 6050,
    params: `int *minGridSize, int *blockSize, ${U64} fn, void *sharedOfBlockSize, size_t sharedBytes, int blockSizeLimit`,
  },
};

/** cuGetProcAddress_v2, bound by name from the library. */
export type GetProcAddress = (symbol: string, pfn: BigUint64Array, cudaVersion: number, flags: number, status: Int32Array) => number;

/** Why an entry point could not be resolved (CUdriverProcAddressQueryResult). */
const QUERY_RESULT: Readonly<Record<number, string>> = {
  1: 'symbol not found',
  2: 'driver version not sufficient',
};

/**
 * Resolves every entry point with cuGetProcAddress_v2 and binds it to its prototype. Required
 * entry points that are missing throw an Error naming them; optional ones are left undefined.
 */
export function resolveEntryPoints(getProc: GetProcAddress, driverVersion: number, flags: number): DriverFunctions {
  const pfn = new BigUint64Array(1);
  const status = new Int32Array(1);
  const bound: Partial<Record<keyof DriverFunctions, unknown>> = {};
  const missing: string[] = [];
  for (const key of Object.keys(SPECS) as (keyof DriverFunctions)[]) {
    const spec = SPECS[key];
    if (spec.version > driverVersion) {
      if (!spec.optional) missing.push(`${spec.symbol}@${spec.version}: driver ${driverVersion} is older`);
      continue;
    }
    pfn[0] = 0n;
    status[0] = 0;
    const r = getProc(spec.symbol, pfn, spec.version, flags, status);
    if (r !== 0 || pfn[0] === 0n) {
      if (!spec.optional) {
        const why = QUERY_RESULT[status[0] ?? 0];
        missing.push(`${spec.symbol}@${spec.version}: CUresult ${r}${why !== undefined ? `, ${why}` : ''}`);
      }
      continue;
    }
    const proto = koffi.proto(`int (${spec.params})`);
    bound[key] = koffi.decode(pfn[0], proto) as unknown;
  }
  if (missing.length > 0) {
    throw new Error(`the CUDA driver lacks entry points vram needs: ${missing.join('; ')}`);
  }
  return bound as DriverFunctions;
}
