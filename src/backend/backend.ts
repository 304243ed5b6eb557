/**
 * The Backend interface: the few primitive operations everything above it is written in terms of.
 * `cuda.ts` implements it over the driver API; `emulated/emulated-backend.ts` over host memory with the same
 * semantics (capacity, errors, alignment, stream order), so the library and its whole test suite
 * run on a machine with no GPU.
 *
 * Conventions, chosen for the hot path:
 * - Addresses (device, host, managed, virtual) are JavaScript numbers. Every address the driver
 *   hands out on x86-64 and aarch64 lies below 2^53, so numbers are exact; both backends check it.
 * - Handles (contexts, streams, events, pools, physical allocations, modules) are opaque numbers.
 *   Stream 0 is the legacy default stream.
 * - Every failure throws a `CudaError` (or `OutOfMemoryError`) naming the call.
 * - Calls act on the calling thread's current context (see `contextSetCurrent`).
 */
import type { CollectiveTransport } from './collectives.js';

/** A device, host or virtual address. */
export type Ptr = number;
/** An opaque handle (CUcontext, CUstream, CUevent, CUmemoryPool, CUmemGenericAllocationHandle). */
export type Handle = number;

/** The legacy default stream. */
export const DEFAULT_STREAM: Handle = 0;

/** What a memory library needs to know about a device. */
export interface DeviceInfo {
  readonly ordinal: number;
  readonly name: string;
  /** The device UUID as `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`. */
  readonly uuid: string;
  readonly computeCapability: readonly [major: number, minor: number];
  readonly totalMemory: number;
  /** `domain:bus:device.function`, e.g. `0000:17:00.0`. */
  readonly pciBusId: string;
  readonly multiprocessorCount: number;
  readonly unifiedAddressing: boolean;
  readonly canMapHostMemory: boolean;
  readonly memoryPoolsSupported: boolean;
  readonly virtualMemoryManagementSupported: boolean;
  readonly concurrentManagedAccess: boolean;
  readonly managedMemory: boolean;
  readonly asyncEngineCount: number;
  readonly l2CacheSize: number;
  /** Pitch alignment the driver uses for 2D allocations (texture pitch alignment). */
  readonly texturePitchAlignment: number;
  readonly integrated: boolean;
}

/** Free and total memory of the current context's device, in bytes. */
export interface MemInfo {
  readonly free: number;
  readonly total: number;
}

/** Context creation flags (CUctx_flags). */
export const ContextFlags = {
  SCHED_AUTO: 0x0,
  SCHED_SPIN: 0x1,
  SCHED_YIELD: 0x2,
  SCHED_BLOCKING_SYNC: 0x4,
  MAP_HOST: 0x8,
  LMEM_RESIZE_TO_MAX: 0x10,
} as const;

/** CUfunc_cache: the preferred split between L1 cache and shared memory (cuCtxSetCacheConfig, cuFuncSetCacheConfig). */
export const FuncCache = {
  PREFER_NONE: 0,
  PREFER_SHARED: 1,
  PREFER_L1: 2,
  PREFER_EQUAL: 3,
} as const;

/** cuMemHostAlloc flags. */
export const HostAllocFlags = {
  PORTABLE: 0x1,
  DEVICEMAP: 0x2,
  WRITECOMBINED: 0x4,
} as const;

/** cuMemHostRegister flags. */
export const HostRegisterFlags = {
  PORTABLE: 0x1,
  DEVICEMAP: 0x2,
  IOMEMORY: 0x4,
  READ_ONLY: 0x8,
} as const;

/** cuMemAllocManaged attach flags. */
export const MemAttach = {
  GLOBAL: 0x1,
  HOST: 0x2,
  SINGLE: 0x4,
} as const;

/** cuMemAdvise advice values (CUmem_advise). */
export const MemAdvice = {
  SET_READ_MOSTLY: 1,
  UNSET_READ_MOSTLY: 2,
  SET_PREFERRED_LOCATION: 3,
  UNSET_PREFERRED_LOCATION: 4,
  SET_ACCESSED_BY: 5,
  UNSET_ACCESSED_BY: 6,
} as const;

/** Where managed memory is prefetched to or advised about: a device ordinal, or the host. */
export type MemLocation = number | 'host';

/** Stream creation flags. */
export const StreamFlags = {
  DEFAULT: 0x0,
  NON_BLOCKING: 0x1,
} as const;

/** Event creation flags. */
export const EventFlags = {
  DEFAULT: 0x0,
  BLOCKING_SYNC: 0x1,
  DISABLE_TIMING: 0x2,
  INTERPROCESS: 0x4,
} as const;

/**
 * Conditions of `streamWaitValue32` (CUstreamWaitValue_flags). The stream's later work waits until
 * the 32-bit word at the address satisfies the condition against `value`:
 * - GEQ: `(int32_t)(word - value) >= 0`, a cyclic greater-or-equal that ignores wraparound;
 * - EQ: `word == value`;
 * - AND: `(word & value) != 0`;
 * - NOR: `~(word | value) != 0`.
 * (CU_STREAM_WAIT_VALUE_FLUSH is not offered: few platforms can flush remote writes; an H100 on
 * x86-64 answered CUDA_ERROR_NOT_SUPPORTED.)
 */
export const StreamWaitValueFlags = {
  GEQ: 0x0,
  EQ: 0x1,
  AND: 0x2,
  NOR: 0x3,
} as const;

/**
 * Flags of `streamWriteValue32` (CUstreamWriteValue_flags). DEFAULT, the only one: the write comes
 * after a memory barrier, so whoever sees it also sees the stream's earlier writes.
 * CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER is not supported by the v2 entry point vram binds (the
 * driver answers CUDA_ERROR_INVALID_VALUE, as NVIDIA documents and an H100 confirmed).
 */
export const StreamWriteValueFlags = {
  DEFAULT: 0x0,
} as const;

/**
 * Stream capture modes (CUstreamCaptureMode): which calls a capture forbids. GLOBAL and
 * THREAD_LOCAL forbid "potentially unsafe" calls (cuMemAlloc, cuMemFree, synchronous copies and
 * fills, synchronisations) while the capture lasts (GLOBAL from any thread, THREAD_LOCAL from the
 * capturing thread; one JavaScript thread sees no difference); such a call fails with
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture. RELAXED forbids only what
 * conflicts with capture itself (synchronising or querying the capturing stream).
 */
export const CaptureMode = {
  GLOBAL: 0,
  THREAD_LOCAL: 1,
  RELAXED: 2,
} as const;

/** Whether a stream is capturing (CUstreamCaptureStatus). */
export const CaptureStatus = {
  NONE: 0,
  ACTIVE: 1,
  /** Capturing, but a forbidden call invalidated the capture: ending it fails. */
  INVALIDATED: 2,
} as const;

/** What cuGraphExecUpdate answered (CUgraphExecUpdateResult); SUCCESS when the executable graph took the new parameters. */
export const GraphUpdateResult = {
  SUCCESS: 0,
  ERROR: 1,
  TOPOLOGY_CHANGED: 2,
  NODE_TYPE_CHANGED: 3,
  FUNCTION_CHANGED: 4,
  PARAMETERS_CHANGED: 5,
  NOT_SUPPORTED: 6,
  UNSUPPORTED_FUNCTION_CHANGE: 7,
  ATTRIBUTES_CHANGED: 8,
} as const;

/** Size of a legacy IPC handle (CUipcMemHandle, CUipcEventHandle): 64 opaque bytes. */
export const IPC_HANDLE_BYTES = 64;

/**
 * Flags of `ipcOpenMemHandle` (CUipcMem_flags). LAZY_ENABLE_PEER_ACCESS lets the driver enable
 * peer access when the memory lives on another device than the current context's; the driver
 * requires it (it is the only flag, and the runtime passes it for cudaIpcMemLazyEnablePeerAccess).
 */
export const IpcMemFlags = {
  LAZY_ENABLE_PEER_ACCESS: 0x1,
} as const;

/** Attributes of a stream-ordered memory pool (CUmemPool_attribute). */
export const MemPoolAttribute = {
  REUSE_FOLLOW_EVENT_DEPENDENCIES: 1,
  REUSE_ALLOW_OPPORTUNISTIC: 2,
  REUSE_ALLOW_INTERNAL_DEPENDENCIES: 3,
  RELEASE_THRESHOLD: 4,
  RESERVED_MEM_CURRENT: 5,
  RESERVED_MEM_HIGH: 6,
  USED_MEM_CURRENT: 7,
  USED_MEM_HIGH: 8,
} as const;
/** One of MemPoolAttribute's values, so attribute arguments are checked at compile time. */
export type MemPoolAttribute = (typeof MemPoolAttribute)[keyof typeof MemPoolAttribute];

/** Handle types a pool's memory can be exported as (CUmemAllocationHandleType). */
export const MemHandleType = {
  NONE: 0x0,
  POSIX_FILE_DESCRIPTOR: 0x1,
  /** CU_MEM_HANDLE_TYPE_FABRIC: a 64-byte CUmemFabricHandle, importable across hosts of one NVLink domain (IMEX). */
  FABRIC: 0x8,
} as const;

/** Bytes of a CUmemFabricHandle (CU_IPC_HANDLE_SIZE). */
export const FABRIC_HANDLE_BYTES = 64;

/** Properties of a new stream-ordered memory pool (a subset of CUmemPoolProps). */
export interface MemPoolProps {
  /** Device ordinal the pool's memory lives on. */
  readonly device: number;
  /** Handle types for IPC export; `MemHandleType.NONE` when not shared. */
  readonly handleTypes?: number;
  /** Upper bound on the pool's reserved memory in bytes; 0 for no bound. */
  readonly maxSize?: number;
  /**
   * The host NUMA node whose pinned memory the pool holds (CU_MEM_LOCATION_TYPE_HOST_NUMA); the
   * pool is then host memory, reachable from `device` only once cuMemPoolSetAccess grants it.
   * Omitted: the pool holds `device`'s memory.
   */
  readonly hostNumaId?: number;
}

/** Access flags for peers of a pool or a mapping (CUmemAccess_flags). */
export const MemAccess = {
  NONE: 0x0,
  READ: 0x1,
  READWRITE: 0x3,
} as const;

/** Memory type as reported for a pointer (CUmemorytype). */
export const MemoryType = {
  HOST: 1,
  DEVICE: 2,
  ARRAY: 3,
  UNIFIED: 4,
} as const;

/** What the driver knows about an address. */
export interface PointerAttributes {
  /** `MemoryType` value; 0 when the address is not known to the driver. */
  readonly memoryType: number;
  /** Device ordinal the memory belongs to; -1 for unknown. */
  readonly device: number;
  readonly isManaged: boolean;
  /**
   * Start of the allocation that contains the address; 0 where the driver gives no address for it
   * (for a pool in host NUMA memory CUDA 13 reports the block's offset in the pool, not its address:
   * Note [Pointer ranges of host NUMA pools], docs/design/host-numa-pools.md).
   */
  readonly rangeStart: Ptr;
  /** Size of that allocation in bytes (given also where its start is not). */
  readonly rangeSize: number;
  /** The memory pool it was allocated from (CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE); 0 when none. */
  readonly pool: Handle;
  /** The context the allocation belongs to (0 when none). */
  readonly context: Handle;
}

/** A 2D copy between pitched regions (a subset of CUDA_MEMCPY2D, addresses only). */
export interface Memcpy2D {
  readonly dst: Ptr;
  readonly dstPitch: number;
  readonly src: Ptr;
  readonly srcPitch: number;
  readonly widthBytes: number;
  readonly height: number;
}

/** JavaScript memory a copy may read from or write to. */
export type HostMemory = ArrayBufferView | ArrayBuffer;

/** A scalar kernel parameter: C's fixed-width types (`i32` is int32_t, `f32` float, `u64` uint64_t...). */
export type ScalarParam = 'i8' | 'u8' | 'i16' | 'u16' | 'i32' | 'u32' | 'i64' | 'u64' | 'f32' | 'f64';

/**
 * A kernel parameter as the launch primitive packs it: a device address (`ptr`, 8 bytes; `cptr`
 * for one the kernel only reads, C's `const T*`, packed the same), a scalar, or a struct of
 * scalars passed by value with C's layout (each member at its natural alignment, the size rounded
 * up to the largest alignment).
 */
export type ParamType = 'ptr' | 'cptr' | ScalarParam | { readonly struct: readonly ScalarParam[] };

/** Where one parameter lies in a parameter block, and the C layout of its members. */
export interface ParamSlot {
  readonly type: ParamType;
  /** Byte offset of the parameter in the block (aligned to `align`). */
  readonly offset: number;
  readonly bytes: number;
  readonly align: number;
  /** For a struct: the byte offset of each member inside it; empty otherwise. */
  readonly memberOffsets: readonly number[];
}

/**
 * A kernel's parameter block, made once per kernel by `Backend.kernelParams` and rewritten in
 * place before each launch: the launch path allocates nothing. `data` covers the values (each
 * parameter at its slot's offset, little-endian); on the cuda backend it is native memory and
 * `address` is that of the `void *[]` array of pointers to each value that cuLaunchKernel takes.
 */
export interface KernelParams {
  readonly slots: readonly ParamSlot[];
  /** The values, written at each slot's offset. */
  readonly data: DataView;
  /** The native `void **kernelParams` (cuda); 0 on the emulated backend. */
  readonly address: Ptr;
}

/** Code for `moduleLoad`: PTX text or a CUBIN, plus the JavaScript the emulated backend runs instead. */
export interface ModuleImage {
  readonly kind: 'ptx' | 'cubin';
  /** The image's bytes (PTX need not end with NUL: the cuda backend adds one when missing). */
  readonly data: Uint8Array;
  /** By kernel name: the functions the emulated backend runs in place of device code. */
  readonly emulated?: EmulatedKernels;
}

/** A kernel function's attributes (cuFuncGetAttribute). */
export interface FunctionAttributes {
  /** The most threads a block of this kernel may have (registers and shared memory allowing). */
  readonly maxThreadsPerBlock: number;
  /** Statically allocated shared memory per block. */
  readonly sharedSizeBytes: number;
  readonly constSizeBytes: number;
  /** Local memory per thread. */
  readonly localSizeBytes: number;
  /** Registers per thread. */
  readonly numRegs: number;
  /** PTX and binary architecture versions, major * 10 + minor (e.g. 90). */
  readonly ptxVersion: number;
  readonly binaryVersion: number;
  /** The most dynamic shared memory a launch may ask for without raising the limit. */
  readonly maxDynamicSharedSizeBytes: number;
}

/** A device's launch limits (cuDeviceGetAttribute), checked before each launch. */
export interface KernelLimits {
  readonly maxThreadsPerBlock: number;
  readonly maxBlockDim: readonly [number, number, number];
  readonly maxGridDim: readonly [number, number, number];
  /** Shared memory a block may use without opting in. */
  readonly maxSharedBytesPerBlock: number;
  readonly warpSize: number;
}

/**
 * Emulated memory as a kernel's JavaScript sees it: `bytes(ptr, byteLength)` is a Uint8Array over
 * [ptr, ptr + byteLength) of device, managed or (mapped) host memory, range-checked as the GPU
 * would fault (an address outside every allocation is CUDA_ERROR_ILLEGAL_ADDRESS). Host memory
 * is viewed in place; device memory (backed lazily) is copied in when first asked for and written
 * back when the kernel returns: within one launch, a range inside one already asked for shares
 * its bytes, but two ranges that overlap otherwise are separate copies (written back in the order
 * asked for), so ask for each array's whole range once.
 *
 * `access` lets a kernel spare the copies it does not need: `'read'` promises the kernel writes
 * none of the range (it is not written back), `'write'` that it writes every byte of it before
 * reading any (it is not copied in: its bytes start unspecified, and after a kernel that throws it
 * is not written back). The default, `'readwrite'`, is always right; a promise broken loses writes
 * or reads garbage, on the emulated backend only. The bytes are valid until the kernel returns.
 */
export interface EmulatedMemory {
  bytes(ptr: Ptr, byteLength: number, access?: EmulatedAccess): Uint8Array;
}

/** What a kernel does with a range of emulated memory (`EmulatedMemory.bytes`). */
export type EmulatedAccess = 'read' | 'write' | 'readwrite';

/**
 * One launch as the emulated backend hands it to a kernel's JavaScript: the launch configuration
 * and the arguments decoded from the parameter block. Pointers are addresses (numbers); 64-bit
 * integers are numbers when exact (|v| < 2^53), bigints beyond; a struct is its members in order.
 */
export interface EmulatedLaunch {
  readonly grid: readonly [number, number, number];
  readonly block: readonly [number, number, number];
  readonly sharedBytes: number;
  readonly args: readonly (number | bigint | readonly number[])[];
  readonly memory: EmulatedMemory;
}

/** What the emulated backend runs in place of a kernel's device code: the whole grid, in one call. */
export type EmulatedKernel = (launch: EmulatedLaunch) => void;

/** JavaScript kernels by name (the name `moduleGetFunction` is asked for: a lowered name for templates). */
export type EmulatedKernels = Readonly<Record<string, EmulatedKernel>>;

/** The primitive operations vram needs from a GPU (or from its stand-in). */
export interface Backend {
  /** `cuda` for the real driver, `emulated` for host memory standing in for a device. */
  readonly name: 'cuda' | 'emulated';
  /**
   * What a module's kernels run as: `device`, the device's own code (PTX or CUBIN; CUDA C compiled
   * by NVRTC first), or `javascript`, the JavaScript a module is given for each kernel (`emulated`),
   * with no compiler and no device code. Code above the backend asks this, never `name`.
   */
  readonly kernelCode: 'device' | 'javascript';

  // --- Driver and devices ---
  /** The driver's CUDA version, e.g. 13000 for 13.0. */
  driverVersion(): number;
  deviceCount(): number;
  deviceInfo(ordinal: number): DeviceInfo;
  deviceCanAccessPeer(ordinal: number, peerOrdinal: number): boolean;
  /** cuDeviceGetAttribute: one CUdevice_attribute (src/cuda/device-attributes.ts) of the device. */
  deviceGetAttribute(ordinal: number, attribute: number): number;
  /**
   * cuDeviceGetByPCIBusId: the ordinal of the device at `busId` (`[domain]:[bus]:[device].[function]`,
   * hexadecimal, as cuDeviceGetPCIBusId writes it).
   */
  deviceGetByPciBusId(busId: string): number;

  // --- Contexts ---
  /** Retains the device's primary context (the one cudart, CuPy and PyTorch share). */
  primaryContextRetain(ordinal: number): Handle;
  primaryContextRelease(ordinal: number): void;
  contextCreate(ordinal: number, flags: number): Handle;
  contextDestroy(ctx: Handle): void;
  /** Makes `ctx` current on the calling thread; cheap when it already is. */
  contextSetCurrent(ctx: Handle): void;
  /** The calling thread's current context, 0 when none. */
  contextGetCurrent(): Handle;
  /** Blocks until all work in the current context has completed. */
  contextSynchronize(): void;
  contextEnablePeerAccess(peerCtx: Handle): void;
  contextDisablePeerAccess(peerCtx: Handle): void;
  /** cuCtxPushCurrent: `ctx` goes on top of the calling thread's context stack (current until popped). */
  contextPushCurrent(ctx: Handle): void;
  /** cuCtxPopCurrent: takes the current context off the stack and returns it; the one below is current again. */
  contextPopCurrent(): Handle;
  /** cuCtxGetDevice and cuCtxGetFlags of `ctx` (pushed for the calls, then popped). */
  contextInfo(ctx: Handle): { readonly ordinal: number; readonly flags: number };
  /** cuCtxSetCacheConfig for the current context (a FuncCache value). */
  contextSetCacheConfig(config: number): void;
  /** cuCtxGetCacheConfig of the current context. */
  contextGetCacheConfig(): number;
  memGetInfo(): MemInfo;

  // --- Device memory ---
  memAlloc(bytes: number): Ptr;
  memFree(ptr: Ptr): void;
  /** Pitched 2D allocation; `elementBytes` is 4, 8 or 16 as for cuMemAllocPitch. */
  memAllocPitch(widthBytes: number, height: number, elementBytes: number): { ptr: Ptr; pitch: number };
  memAllocManaged(bytes: number, attachFlags: number): Ptr;
  memPrefetchAsync(ptr: Ptr, bytes: number, location: MemLocation, stream: Handle): void;
  memAdvise(ptr: Ptr, bytes: number, advice: number, location: MemLocation): void;

  // --- Pinned host memory ---
  memHostAlloc(bytes: number, flags: number): Ptr;
  memFreeHost(ptr: Ptr): void;
  /** The device address of mapped host memory (allocated with DEVICEMAP or registered with it). */
  memHostGetDevicePointer(hostPtr: Ptr): Ptr;
  /** Page-locks JavaScript memory in place; returns its host address. */
  memHostRegister(memory: HostMemory, flags: number): Ptr;
  memHostUnregister(hostPtr: Ptr): void;
  /** A zero-copy view of host-accessible memory (pinned or managed) as an ArrayBuffer. */
  hostView(hostPtr: Ptr, bytes: number): ArrayBuffer;
  /** The address of JavaScript memory (the first byte of the view). */
  addressOf(memory: HostMemory): Ptr;

  // --- Copies and fills (unified addressing: any address to any address) ---
  memcpy(dst: Ptr, src: Ptr, bytes: number): void;
  memcpyAsync(dst: Ptr, src: Ptr, bytes: number, stream: Handle): void;
  /** Copies from JavaScript memory (pageable) to an address; synchronous. */
  memcpyFromHost(dst: Ptr, src: HostMemory, bytes: number): void;
  /** Copies from an address to JavaScript memory (pageable); synchronous. */
  memcpyToHost(dst: HostMemory, src: Ptr, bytes: number): void;
  memcpyPeer(dst: Ptr, dstCtx: Handle, src: Ptr, srcCtx: Handle, bytes: number): void;
  memcpyPeerAsync(dst: Ptr, dstCtx: Handle, src: Ptr, srcCtx: Handle, bytes: number, stream: Handle): void;
  memcpy2D(copy: Memcpy2D): void;
  memcpy2DAsync(copy: Memcpy2D, stream: Handle): void;
  /** Fills `count` elements of 1, 2 or 4 bytes with `value`. */
  memset(ptr: Ptr, value: number, elementBytes: 1 | 2 | 4, count: number): void;
  memsetAsync(ptr: Ptr, value: number, elementBytes: 1 | 2 | 4, count: number, stream: Handle): void;

  // --- Streams and events ---
  streamCreate(flags: number, priority: number): Handle;
  streamDestroy(stream: Handle): void;
  streamSynchronize(stream: Handle): void;
  /** True when all work on the stream has completed. */
  streamQuery(stream: Handle): boolean;
  streamWaitEvent(stream: Handle, event: Handle): void;
  /** [least, greatest] stream priority; greatest is numerically smallest. */
  streamPriorityRange(): readonly [least: number, greatest: number];
  /**
   * True for the legacy default stream (0) and for a stream vouched for as live: one this backend
   * created and has not destroyed, or one adopted with `adoptStream` and not forgotten since. A
   * raw handle that may reach the driver (an unknown or destroyed one may crash it). A lookup,
   * never a driver call.
   */
  streamKnown(stream: Handle): boolean;
  /**
   * Vouches that `stream`, a stream created elsewhere (another library's CUstream), is live, so
   * `streamKnown` accepts it until as many `forgetStream` calls as adoptions (or `streamDestroy`).
   * The emulated backend refuses a handle that names none of its streams, as the driver would
   * misbehave on it; the cuda backend cannot ask the driver safely whether a handle is a stream
   * (an invalid one may crash it), so there the caller's word is taken.
   */
  adoptStream(stream: Handle): void;
  /**
   * Withdraws one `adoptStream` (or the creation's own vouching): the stream lives on in the
   * driver, but `streamKnown` refuses it once nothing vouches for it. An unknown handle is ignored.
   */
  forgetStream(stream: Handle): void;
  /** cuStreamGetFlags: the StreamFlags the stream was created with (0 for the legacy stream). */
  streamGetFlags(stream: Handle): number;
  /** cuStreamGetPriority: the stream's priority, as clamped at creation (0 for the legacy stream). */
  streamGetPriority(stream: Handle): number;
  /**
   * cuStreamWaitValue32: later work on `stream` waits until the 32-bit word at device address
   * `addr` satisfies `flags` (a StreamWaitValueFlags condition) against `value`; the call itself
   * returns at once. `addr` is device memory, or (the usual case) the device pointer of mapped
   * pinned host memory: `memHostAlloc(bytes, HostAllocFlags.DEVICEMAP)`, then
   * `memHostGetDevicePointer`. Managed and pageable memory are CUDA_ERROR_INVALID_VALUE.
   *
   * This is how a test holds a stream back deterministically on a real GPU: the stream stops at
   * the wait, and the host releases it by writing a satisfying value into the memory's host view
   * (`new Uint32Array(backend.hostView(hostPtr, 4))[0] = value`); until then the stream, events
   * recorded on it after the wait and streams waiting on those events stay pending
   * (`streamQuery`/`eventQuery` report false). Never synchronise on held work before the host
   * releases it: on a GPU that call never returns; the emulated backend fails it with
   * CUDA_ERROR_NOT_READY, saying which wait holds it, instead of hanging. What waits, as probed
   * on an H100: stream, event and context synchronisation, cuMemFree, cuMemFreeHost,
   * cuMemHostUnregister and destroying the context wait for held work on any stream; copies and
   * fills that involve host or managed memory, and synchronising the legacy default stream, wait
   * for held *blocking* streams only (hold a NON_BLOCKING stream to read memory meanwhile);
   * copies and fills between device addresses never block the host, but behind a held blocking
   * stream they run only once it is released. Allocating and streamDestroy do not wait.
   */
  streamWaitValue32(stream: Handle, addr: Ptr, value: number, flags: number): void;
  /**
   * cuStreamWriteValue32: writes the 32-bit `value` to device address `addr` in stream order,
   * after a memory barrier (`flags`: StreamWriteValueFlags.DEFAULT); the same memory as for
   * streamWaitValue32. Pairs with a streamWaitValue32 on another stream to order two streams
   * through memory.
   */
  streamWriteValue32(stream: Handle, addr: Ptr, value: number, flags: number): void;
  /**
   * cuLaunchHostFunc: `fn` runs once the stream reaches this point, and the stream's later work
   * waits for it to return. On a GPU the driver calls it from its own thread, and JavaScript runs
   * it on the main thread when the event loop next turns: until then the stream is stopped, so a
   * synchronous wait on that stream from the main thread never returns (the emulation fails such
   * a wait with CUDA_ERROR_NOT_READY). `fn` must not make CUDA calls. Captured, it is a host node
   * run by every launch of the graph.
   */
  launchHostFunc(stream: Handle, fn: () => void): void;

  // --- Stream capture and graphs ---
  /** cuStreamBeginCapture: work queued on `stream` from now on is recorded into a graph instead of run (`mode`: a CaptureMode). */
  streamBeginCapture(stream: Handle, mode: number): void;
  /**
   * cuStreamEndCapture: ends the capture begun on `stream` and returns the graph. Every stream
   * joined into the capture must have joined back (CUDA_ERROR_STREAM_CAPTURE_UNJOINED); an
   * invalidated capture ends with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED and no graph.
   */
  streamEndCapture(stream: Handle): Handle;
  /** cuStreamIsCapturing: a CaptureStatus. */
  streamCaptureStatus(stream: Handle): number;
  /** cuThreadExchangeStreamCaptureMode: sets the calling thread's capture mode and returns the previous one. */
  threadExchangeCaptureMode(mode: number): number;
  /** cuGraphGetNodes with no array: how many nodes the graph has. */
  graphNodeCount(graph: Handle): number;
  /**
   * cuGraphGetNodes and cuGraphNodeGetType: how many of the graph's nodes are memory-allocation
   * nodes (CU_GRAPH_NODE_TYPE_MEM_ALLOC, what cuMemAllocAsync becomes in a capture).
   */
  graphMemAllocNodeCount(graph: Handle): number;
  /** cuGraphDestroy. Executable graphs made from it live on. */
  graphDestroy(graph: Handle): void;
  /** cuGraphInstantiateWithFlags (no flags): an executable graph. */
  graphInstantiate(graph: Handle): Handle;
  /** cuGraphLaunch: the whole graph, in order on `stream`, for the cost of one call. */
  graphLaunch(exec: Handle, stream: Handle): void;
  /**
   * cuGraphExecUpdate: gives `exec` the parameters of `graph`'s nodes when its topology is the
   * same. Returns GraphUpdateResult.SUCCESS, or why not (`exec` is then unchanged); other
   * failures throw.
   */
  graphExecUpdate(exec: Handle, graph: Handle): number;
  /** cuGraphExecDestroy: a launch already queued still runs (the driver frees it once done). */
  graphExecDestroy(exec: Handle): void;

  eventCreate(flags: number): Handle;
  eventDestroy(event: Handle): void;
  eventRecord(event: Handle, stream: Handle): void;
  /** True when the work captured by the event has completed. */
  eventQuery(event: Handle): boolean;
  eventSynchronize(event: Handle): void;
  /** Milliseconds between two completed events. */
  eventElapsedTime(start: Handle, end: Handle): number;

  // --- Interprocess communication (legacy cuIpc* handles) ---
  /**
   * cuIpcGetMemHandle: a 64-byte handle to the cuMemAlloc allocation containing `ptr`, which
   * another process opens with `ipcOpenMemHandle`. Pool (cuMemAllocAsync), virtual-memory, managed
   * and host memory are CUDA_ERROR_INVALID_VALUE.
   */
  ipcGetMemHandle(ptr: Ptr): Uint8Array;
  /**
   * cuIpcOpenMemHandle: maps memory another process exported into the current context and returns
   * its base address; `flags` is `IpcMemFlags.LAZY_ENABLE_PEER_ACCESS`. Opening a handle the
   * context already opened returns the same address and counts one more open.
   */
  ipcOpenMemHandle(handle: Uint8Array, flags: number): Ptr;
  /** cuIpcCloseMemHandle: undoes one `ipcOpenMemHandle`; the last close unmaps the memory. */
  ipcCloseMemHandle(ptr: Ptr): void;
  /** cuIpcGetEventHandle: a 64-byte handle to an event created with INTERPROCESS | DISABLE_TIMING. */
  ipcGetEventHandle(event: Handle): Uint8Array;
  /** cuIpcOpenEventHandle: the event another process exported, as an event of the current context. */
  ipcOpenEventHandle(handle: Uint8Array): Handle;

  // --- Interprocess pools (cuMemPool*ShareableHandle, cuMemPool*Pointer) ---
  /**
   * cuMemPoolExportToShareableHandle: a file descriptor for a pool created with
   * `handleTypes: MemHandleType.POSIX_FILE_DESCRIPTOR` (the caller owns it and closes it).
   */
  memPoolExportToShareableHandle(pool: Handle, handleType: number): number;
  /** cuMemPoolImportFromShareableHandle: the pool behind another process's descriptor (the caller still closes `fd`). */
  memPoolImportFromShareableHandle(fd: number, handleType: number): Handle;
  /** cuMemPoolExportPointer: the 64 bytes (CUmemPoolPtrExportData) naming an allocation of an exportable pool. */
  memPoolExportPointer(ptr: Ptr): Uint8Array;
  /** cuMemPoolImportPointer: that allocation in an imported pool; free it with memFreeAsync before the exporter frees it. */
  memPoolImportPointer(pool: Handle, data: Uint8Array): Ptr;
  /**
   * cuMemPoolExportToShareableHandle with CU_MEM_HANDLE_TYPE_FABRIC: the 64-byte CUmemFabricHandle
   * of a pool created with `handleTypes: MemHandleType.FABRIC`, which any process of the NVLink
   * domain imports (no descriptor to pass, nothing to close).
   */
  memPoolExportFabricHandle(pool: Handle): Uint8Array;
  /** cuMemPoolImportFromShareableHandle with CU_MEM_HANDLE_TYPE_FABRIC: the pool behind a fabric handle. */
  memPoolImportFabricHandle(handle: Uint8Array): Handle;

  // --- Stream-ordered allocation (CUDA memory pools) ---
  memAllocAsync(bytes: number, stream: Handle): Ptr;
  memAllocFromPoolAsync(bytes: number, pool: Handle, stream: Handle): Ptr;
  memFreeAsync(ptr: Ptr, stream: Handle): void;
  deviceGetDefaultMemPool(ordinal: number): Handle;
  /** cuDeviceGetMemPool: the pool cuMemAllocAsync on the device allocates from (its default pool unless set). */
  deviceGetMemPool(ordinal: number): Handle;
  /** cuDeviceSetMemPool: makes `pool` (a pool of that device) the one cuMemAllocAsync uses. */
  deviceSetMemPool(ordinal: number, pool: Handle): void;
  memPoolCreate(props: MemPoolProps): Handle;
  memPoolDestroy(pool: Handle): void;
  memPoolTrimTo(pool: Handle, minBytesToKeep: number): void;
  memPoolGetAttribute(pool: Handle, attribute: MemPoolAttribute): number;
  /** Sets a pool attribute; the high-water marks accept only 0 (reset). */
  memPoolSetAttribute(pool: Handle, attribute: MemPoolAttribute, value: number): void;
  memPoolSetAccess(pool: Handle, ordinal: number, flags: number): void;
  memPoolGetAccess(pool: Handle, ordinal: number): number;

  // --- Virtual memory management ---
  /** Minimum granularity of cuMemCreate/cuMemMap on the device (2 MiB on current GPUs). */
  memGetAllocationGranularity(ordinal: number): number;
  memAddressReserve(bytes: number, alignment: number): Ptr;
  memAddressFree(ptr: Ptr, bytes: number): void;
  /**
   * Creates `bytes` of physical device memory (a multiple of the granularity). `handleTypes`
   * (MemHandleType bits) asks for exactly those shareable handles, and a refusal is the driver's
   * error; omitted, the CUDA backend asks for POSIX descriptors where the driver allows them.
   */
  memCreate(bytes: number, ordinal: number, handleTypes?: number): Handle;
  /**
   * cuMemExportToShareableHandle: a new POSIX file descriptor for a physical allocation (the
   * caller owns it and closes it). The CUDA backend creates physical memory exportable where the
   * driver allows (see `memCreate`); memory created without it is CUDA_ERROR_INVALID_VALUE here.
   */
  memExportToShareableHandle(handle: Handle, handleType: number): number;
  /** cuMemImportFromShareableHandle: another process's physical allocation (the caller still closes `fd`); map it, then memRelease. */
  memImportFromShareableHandle(fd: number, handleType: number): Handle;
  /**
   * cuMemExportToShareableHandle with CU_MEM_HANDLE_TYPE_FABRIC: the 64-byte CUmemFabricHandle of
   * a physical allocation created with `MemHandleType.FABRIC`.
   */
  memExportFabricHandle(handle: Handle): Uint8Array;
  /** cuMemImportFromShareableHandle with CU_MEM_HANDLE_TYPE_FABRIC: another process's physical allocation; map it, then memRelease. */
  memImportFabricHandle(data: Uint8Array): Handle;
  memRelease(handle: Handle): void;
  memMap(ptr: Ptr, bytes: number, handle: Handle): void;
  memUnmap(ptr: Ptr, bytes: number): void;
  memSetAccess(ptr: Ptr, bytes: number, ordinal: number, flags: number): void;

  // --- Pointer attributes ---
  pointerGetAttributes(ptr: Ptr): PointerAttributes;

  // --- Modules and kernels ---
  /** cuModuleLoadData in the current context: PTX (JIT-compiled for the device) or a CUBIN. */
  moduleLoad(image: ModuleImage): Handle;
  /** cuModuleUnload. */
  moduleUnload(module: Handle): void;
  /** cuModuleGetFunction: the kernel named `name` (its mangled or lowered name); CUDA_ERROR_NOT_FOUND when absent. */
  moduleGetFunction(module: Handle, name: string): Handle;
  /** cuFuncGetAttribute, every attribute of FunctionAttributes. */
  functionAttributes(fn: Handle): FunctionAttributes;
  /** cuFuncSetCacheConfig: the kernel's preferred split of L1 and shared memory (a FuncCache value). */
  functionSetCacheConfig(fn: Handle, config: number): void;
  /** The launch limits of device `ordinal` (max block and grid dimensions, shared memory, warp size). */
  kernelLimits(ordinal: number): KernelLimits;
  /** A parameter block for a kernel with these parameters (made once, rewritten per launch). */
  kernelParams(types: readonly ParamType[]): KernelParams;
  /**
   * cuLaunchKernel of `fn` on `stream` with the values now in `params`. The grid and block are six
   * numbers, not arrays, so a launch allocates nothing. The driver copies the parameters during
   * the call: `params` may be rewritten as soon as it returns.
   */
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
  ): void;
  /** cuOccupancyMaxActiveBlocksPerMultiprocessor. */
  occupancyMaxActiveBlocksPerMultiprocessor(fn: Handle, blockSize: number, sharedBytes: number): number;
  /** cuOccupancyMaxPotentialBlockSize with a fixed dynamic shared memory size; `blockSizeLimit` 0 for none. */
  occupancyMaxPotentialBlockSize(fn: Handle, sharedBytes: number, blockSizeLimit: number): { readonly minGridSize: number; readonly blockSize: number };

  // --- Collectives ---
  /** The collective transport (collectives.ts): NCCL on the cuda backend, processes of one machine on the emulated one. */
  collectives(): CollectiveTransport;
}
