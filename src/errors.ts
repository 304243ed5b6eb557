/**
 * Errors raised by vram. Every failure is typed and every vram error is a `VramError`: driver
 * failures are `CudaError` (the emulated backend raises the same names and codes), running out of
 * memory is `OutOfMemoryError` (whoever ran out: the driver, a pool, an arena, a limit), misuse of
 * a buffer or resource is a `VramStateError` subclass. Bad arguments are the built-in `TypeError` /
 * `RangeError`, raised before any driver call.
 */
import type { Counter } from './counter.js';
import { formatBytesExact } from './util/size.js';

/**
 * The base of every error vram raises itself (argument errors excepted: those are the built-in
 * `TypeError`/`RangeError`). `catch (e) { if (e instanceof VramError) ... }` catches them all.
 *
 * @example
 * ```ts
 * try { pool.allocate(2 ** 40); } catch (e) { if (e instanceof VramError) console.error(e.message); }
 * ```
 */
export class VramError extends Error {
  /**
   * @param message What went wrong, in words.
   * @param options `cause`: the error that led to this one.
   * @throws Never.
   * @example
   * ```ts
   * throw new VramError('the pool was closed', { cause: error });
   * ```
   */
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/**
 * A failed driver call, with the driver's own name, code and description, and the call that failed.
 * @example
 * ```ts
 * try { DeviceBuffer.allocate(2 ** 50); } catch (e) { if (e instanceof CudaError) console.error(e.errorName, e.call); }
 * ```
 */
export class CudaError extends VramError {
  /**
   * @param code The driver's CUresult.
   * @param errorName Its symbolic name.
   * @param call The entry point that failed.
   * @param description The driver's description, if it has one.
   * @throws Never.
   * @example
   * ```ts
   * throw new CudaError(CUresult.INVALID_VALUE, 'CUDA_ERROR_INVALID_VALUE', 'cuMemAlloc');
   * ```
   */
  constructor(
    /** The driver's numeric CUresult. */
    readonly code: number,
    /** The driver's symbolic name, e.g. `CUDA_ERROR_OUT_OF_MEMORY`. */
    readonly errorName: string,
    /** The entry point that failed, e.g. `cuMemAlloc`. */
    readonly call: string,
    description?: string,
  ) {
    super(`${call} failed: ${errorName} (${code})${description ? `: ${description}` : ''}`);
  }
}

/** The driver's CUresult codes that vram raises itself or checks for by value. */
export const CUresult = {
  SUCCESS: 0,
  INVALID_VALUE: 1,
  OUT_OF_MEMORY: 2,
  NOT_INITIALIZED: 3,
  NO_DEVICE: 100,
  INVALID_DEVICE: 101,
  INVALID_IMAGE: 200,
  INVALID_CONTEXT: 201,
  MAP_FAILED: 205,
  INVALID_PTX: 218,
  UNSUPPORTED_PTX_VERSION: 222,
  INVALID_HANDLE: 400,
  ILLEGAL_STATE: 401,
  NOT_FOUND: 500,
  NOT_READY: 600,
  ILLEGAL_ADDRESS: 700,
  LAUNCH_OUT_OF_RESOURCES: 701,
  PEER_ACCESS_ALREADY_ENABLED: 704,
  PEER_ACCESS_NOT_ENABLED: 705,
  CONTEXT_IS_DESTROYED: 709,
  HOST_MEMORY_ALREADY_REGISTERED: 712,
  HOST_MEMORY_NOT_REGISTERED: 713,
  LAUNCH_FAILED: 719,
  NOT_SUPPORTED: 801,
  STREAM_CAPTURE_UNSUPPORTED: 900,
  STREAM_CAPTURE_INVALIDATED: 901,
  STREAM_CAPTURE_MERGE: 902,
  STREAM_CAPTURE_UNMATCHED: 903,
  STREAM_CAPTURE_UNJOINED: 904,
  STREAM_CAPTURE_ISOLATION: 905,
  STREAM_CAPTURE_IMPLICIT: 906,
  CAPTURED_EVENT: 907,
  GRAPH_EXEC_UPDATE_FAILURE: 910,
} as const;

/** Names for the codes above, as the driver's cuGetErrorName spells them. */
export const CUresultName: Readonly<Record<number, string>> = {
  0: 'CUDA_SUCCESS',
  1: 'CUDA_ERROR_INVALID_VALUE',
  2: 'CUDA_ERROR_OUT_OF_MEMORY',
  3: 'CUDA_ERROR_NOT_INITIALIZED',
  100: 'CUDA_ERROR_NO_DEVICE',
  101: 'CUDA_ERROR_INVALID_DEVICE',
  200: 'CUDA_ERROR_INVALID_IMAGE',
  201: 'CUDA_ERROR_INVALID_CONTEXT',
  205: 'CUDA_ERROR_MAP_FAILED',
  218: 'CUDA_ERROR_INVALID_PTX',
  222: 'CUDA_ERROR_UNSUPPORTED_PTX_VERSION',
  400: 'CUDA_ERROR_INVALID_HANDLE',
  401: 'CUDA_ERROR_ILLEGAL_STATE',
  500: 'CUDA_ERROR_NOT_FOUND',
  600: 'CUDA_ERROR_NOT_READY',
  700: 'CUDA_ERROR_ILLEGAL_ADDRESS',
  701: 'CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES',
  704: 'CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED',
  705: 'CUDA_ERROR_PEER_ACCESS_NOT_ENABLED',
  709: 'CUDA_ERROR_CONTEXT_IS_DESTROYED',
  712: 'CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED',
  713: 'CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED',
  719: 'CUDA_ERROR_LAUNCH_FAILED',
  801: 'CUDA_ERROR_NOT_SUPPORTED',
  900: 'CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED',
  901: 'CUDA_ERROR_STREAM_CAPTURE_INVALIDATED',
  902: 'CUDA_ERROR_STREAM_CAPTURE_MERGE',
  903: 'CUDA_ERROR_STREAM_CAPTURE_UNMATCHED',
  904: 'CUDA_ERROR_STREAM_CAPTURE_UNJOINED',
  905: 'CUDA_ERROR_STREAM_CAPTURE_ISOLATION',
  906: 'CUDA_ERROR_STREAM_CAPTURE_IMPLICIT',
  907: 'CUDA_ERROR_CAPTURED_EVENT',
  910: 'CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE',
};

/** Figures attached to an out-of-memory failure, when the failing resource keeps them. */
export interface OutOfMemoryStatistics {
  /** Bytes handed out through the resource and not yet returned (as requested), with peak and total. */
  readonly allocatedBytes: Counter;
  /** Live allocations, with peak and total. */
  readonly allocations: Counter;
  /** Bytes the resource holds from the driver or its upstream, for caching resources. */
  readonly reservedBytes?: number;
}

/**
 * Why an allocation could not be satisfied: `device` (the driver has no memory left), `host`
 * (no pinned host memory), `limit` (a LimitingAdaptor's cap), `maximum` (a pool's maximumSize),
 * `arena` (the arena's fixed region has no free range large enough), `upstream` (a sub-allocator's
 * upstream refused it a chunk), `address-space` (a virtual-memory pool's reserved range is full),
 * `budget` (the memory budget of a `withMemoryBudget` scope).
 */
export type OutOfMemoryReason = 'device' | 'host' | 'limit' | 'maximum' | 'arena' | 'upstream' | 'address-space' | 'budget';

/** What an OutOfMemoryError is made from. */
export interface OutOfMemoryDetails {
  /** The number of bytes that were asked for. */
  readonly requestedBytes: number;
  /** The call or method that failed, e.g. `cuMemAlloc` or `PoolResource.allocate`. */
  readonly call: string;
  /** Why it failed. */
  readonly reason: OutOfMemoryReason;
  /** The failing resource's `describe()`, when a resource failed. */
  readonly resource?: string;
  /** That resource's figures at the time. */
  readonly statistics?: OutOfMemoryStatistics;
  /** The message; a default is made from the request and resource. */
  readonly message?: string;
  /** The error underneath: the driver's `CudaError`, or the upstream's `OutOfMemoryError`. */
  readonly cause?: unknown;
}

/**
 * An allocation that could not be satisfied, by the driver or by a resource's own limit. Carries
 * the request, why, and where known the resource and its figures, so a program can log where its
 * memory went. It is not a `CudaError`: a pool or a limit runs out with no driver call failing.
 * Where the driver did fail, its `CudaError` (CUDA_ERROR_OUT_OF_MEMORY) is the `cause`. When the
 * error reaches the program, the message also names the largest live allocation sites (where the
 * memory history records stacks, or a TrackingAdaptor captures them) and the fragmentation of the
 * sub-allocator below (largest free block against free bytes): `observe/out-of-memory-observer.ts`.
 *
 * @example
 * ```ts
 * try { limited.allocate(1 << 30); }
 * catch (e) { if (e instanceof OutOfMemoryError && e.reason === 'limit') shrinkBatch(); else throw e; }
 * ```
 */
export class OutOfMemoryError extends VramError {
  /** The number of bytes that were asked for. */
  readonly requestedBytes: number;
  /** The call or method that failed. */
  readonly call: string;
  /** Why it failed. */
  readonly reason: OutOfMemoryReason;
  /** A name for the resource that failed (its class and parameters). */
  readonly resource: string | undefined;
  /** That resource's statistics at the time of the failure. */
  readonly statistics: OutOfMemoryStatistics | undefined;

  /**
   * @param details The request, the reason and what is known of the resource.
   * @throws Never.
   * @example
   * ```ts
   * throw new OutOfMemoryError({ requestedBytes: 1 << 20, call: 'MyResource.allocate', reason: 'limit', resource: 'MyResource' });
   * ```
   */
  constructor(details: OutOfMemoryDetails) {
    const { requestedBytes, call, reason, resource } = details;
    super(
      details.message ?? outOfMemoryMessage(requestedBytes, resource, `${call} failed (${reason})`),
      details.cause === undefined ? undefined : { cause: details.cause },
    );
    this.requestedBytes = requestedBytes;
    this.call = call;
    this.reason = reason;
    this.resource = resource;
    this.statistics = details.statistics;
  }
}

/**
 * The one form of an out-of-memory message, whichever resource ran out: the request in readable
 * units with the exact count after, where from, and why: `cannot allocate 1.50 GiB (1610612736
 * bytes) from PoolResource(upstream=CudaResource(device=0)): the upstream refused a new chunk`.
 * Internal to vram (not exported from the package): every resource builds its message with it.
 *
 * @param bytes The request.
 * @param from The resource's `describe()`, or undefined for a driver call.
 * @param why What ran out, with the figures that show it.
 * @returns The message.
 * @example
 * ```ts
 * outOfMemoryMessage(1 << 20, this.describe(), `${formatBytes(used)} of the ${formatBytes(limit)} limit in use`);
 * ```
 * @throws Never.
 */
export function outOfMemoryMessage(bytes: number, from: string | undefined, why: string): string {
  return `cannot allocate ${formatBytesExact(bytes)}${from === undefined ? '' : ` from ${from}`}: ${why}`;
}

/**
 * True for every out-of-memory failure: an `OutOfMemoryError`, or a raw driver `CudaError` with
 * CUDA_ERROR_OUT_OF_MEMORY. The one test the library uses, so user code can use it too.
 *
 * @param error Anything caught.
 * @returns Whether it reports a lack of memory.
 * @example
 * ```ts
 * try { buf = DeviceBuffer.allocate(n); } catch (e) { if (!isOutOfMemory(e)) throw e; n >>= 1; }
 * ```
 * @throws Never.
 */
export function isOutOfMemory(error: unknown): error is OutOfMemoryError | CudaError {
  return error instanceof OutOfMemoryError || (error instanceof CudaError && error.code === CUresult.OUT_OF_MEMORY);
}

/**
 * Misuse of a buffer, pointer or resource that the library detects before it could do harm.
 * @example
 * ```ts
 * try { buf.free(); buf.free(); } catch (e) { if (e instanceof VramStateError) console.error(e.message); }
 * ```
 */
export class VramStateError extends VramError {}

/**
 * A buffer or block used after it was freed.
 * @example
 * ```ts
 * buf.free();
 * try { buf.memset(0); } catch (e) { assert(e instanceof UseAfterFreeError); }
 * ```
 */
export class UseAfterFreeError extends VramStateError {}

/**
 * A buffer or block freed a second time.
 * @example
 * ```ts
 * buf.free();
 * try { buf.free(); } catch (e) { assert(e instanceof DoubleFreeError); }
 * ```
 */
export class DoubleFreeError extends VramStateError {}

/**
 * A pointer that the resource or buffer did not allocate (foreign, or with the wrong size).
 * @example
 * ```ts
 * try { pool.deallocate(0x1234, 256); } catch (e) { assert(e instanceof InvalidPointerError); }
 * ```
 */
export class InvalidPointerError extends VramStateError {}

/**
 * An operation that needs a capability the backend or device does not have.
 * @example
 * ```ts
 * try { exportPool(pool); } catch (e) { if (e instanceof NotSupportedError) console.warn('no pool IPC here'); }
 * ```
 */
export class NotSupportedError extends VramError {}

/**
 * What fabric handles (CU_MEM_HANDLE_TYPE_FABRIC) need and this machine lacks: `device-attribute`,
 * the device or driver does not support them (CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED,
 * or for pools CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES); `proc-devices`, the driver
 * registered no `nvidia-caps-imex-channels` device (/proc/devices); `channel-directory`, no
 * /dev/nvidia-caps-imex-channels/; `channel`, no IMEX channel there this user can open.
 */
export type FabricRequirement = 'device-attribute' | 'proc-devices' | 'channel-directory' | 'channel';

/**
 * Fabric handles cannot work here, found before the driver is asked: `missing` says which
 * requirement failed and the message what to run (the CUDA programming guide's IMEX
 * prerequisites: an IMEX channel the user can open, made by the administrator).
 * @example
 * ```ts
 * try { new AsyncResource({ pool: { handleTypes: 'fabric' } }); } catch (e) { if (e instanceof FabricUnavailableError) console.warn(e.missing); }
 * ```
 */
export class FabricUnavailableError extends NotSupportedError {
  /**
   * @param missing The requirement that failed.
   * @param message The whole message: what is missing and what to run.
   * @throws Never.
   * @example
   * ```ts
   * throw new FabricUnavailableError('channel', 'no IMEX channel in /dev/nvidia-caps-imex-channels/');
   * ```
   */
  constructor(
    /** Which requirement failed. */
    readonly missing: FabricRequirement,
    message: string,
  ) {
    super(message);
  }
}

/**
 * JavaScript memory a copy was reading or writing was detached meanwhile (transferred to a worker,
 * or by `ArrayBuffer.prototype.transfer`): the copy stops there, and the bytes it had not reached
 * are not copied.
 * @example
 * ```ts
 * try { await buf.copyToHostAsync(data); } catch (e) { if (e instanceof DetachedBufferError) console.warn('data was transferred meanwhile'); }
 * ```
 */
export class DetachedBufferError extends VramStateError {}

/**
 * A failed NCCL call (or, on the emulated backend, a collective that could not complete), with
 * NCCL's own result name, its text (`ncclGetErrorString`) and the communicator's last error
 * (`ncclGetLastError`), which says what went wrong in NCCL's words.
 * @example
 * ```ts
 * try { comm.allReduce(grads); } catch (e) { if (e instanceof NcclError) console.error(e.call, e.resultName, e.detail); }
 * ```
 */
export class NcclError extends VramError {
  /**
   * @param call The NCCL function (`ncclAllReduce`).
   * @param result Its ncclResult_t.
   * @param text NCCL's text for the result (`ncclGetErrorString`).
   * @param detail The communicator's last error (`ncclGetLastError`), when NCCL gave one.
   * @throws Never.
   * @example
   * ```ts
   * throw new NcclError('ncclCommInitRank', 5, 'invalid usage', 'rank 3 is out of range');
   * ```
   */
  constructor(
    /** The NCCL function that failed, e.g. `ncclAllReduce`. */
    readonly call: string,
    /** NCCL's numeric ncclResult_t. */
    readonly result: number,
    /** NCCL's text for the result. */
    readonly text: string,
    /** The communicator's last error in NCCL's words, '' when there is none. */
    readonly detail = '',
  ) {
    super(`${call} failed: ${ncclResultName(result)} (${result}): ${text}${detail !== '' && detail !== text ? `: ${detail}` : ''}`);
  }

  /** The result's name, e.g. `ncclInvalidUsage`. */
  get resultName(): string {
    return ncclResultName(this.result);
  }
}

/** ncclResult_t names (nccl.h), by code. */
const NCCL_RESULT_NAMES: readonly string[] = [
  'ncclSuccess',
  'ncclUnhandledCudaError',
  'ncclSystemError',
  'ncclInternalError',
  'ncclInvalidArgument',
  'ncclInvalidUsage',
  'ncclRemoteError',
  'ncclInProgress',
];

/** The name of an ncclResult_t, `ncclResult(N)` for a code this table does not know. */
function ncclResultName(result: number): string {
  return NCCL_RESULT_NAMES[result] ?? `ncclResult(${result})`;
}

/**
 * An operation that cannot be part of a stream capture (a synchronous copy from JavaScript memory,
 * a host wait, a synchronisation, an allocation from a resource that calls the driver's
 * synchronous allocator, a reduction that reads its value back to the host), refused before any
 * driver call so the capture stays valid; or the driver's refusal of one (`cause`, a `CudaError`
 * with a `CUDA_ERROR_STREAM_CAPTURE_*` code), which invalidated it.
 * @example
 * ```ts
 * stream.beginCapture();
 * try { stream.synchronize(); } catch (e) { if (e instanceof StreamCaptureError) console.error(e.call); }
 * ```
 */
export class StreamCaptureError extends VramStateError {
  /**
   * @param call What was refused, e.g. `stream.synchronize()`.
   * @param why Why, and what to do instead.
   * @param options `cause`: the driver's error, when the driver refused it.
   * @throws Never.
   * @example
   * ```ts
   * throw new StreamCaptureError('stream.synchronize()', 'a host wait cannot be captured');
   * ```
   */
  constructor(
    /** The call that cannot be captured. */
    readonly call: string,
    why: string,
    options?: { cause?: unknown },
  ) {
    super(`${call} cannot run while a stream is being captured: ${why}`, options);
  }
}

/**
 * A relaunch of an executable graph refused because an allocation its memory node made at the
 * last launch, and that the graph does not free, is still live: the graph owns that memory until
 * the program frees it (the driver answers CUDA_ERROR_INVALID_VALUE, the cause).
 * @example
 * ```ts
 * try { exec.launch(stream); } catch (e) { if (e instanceof GraphMemoryLiveError) { out.free({ stream }); exec.launch(stream); } }
 * ```
 */
export class GraphMemoryLiveError extends VramStateError {}

/**
 * Why `GraphExec.update(graph)` could not take a graph's parameters (CUgraphExecUpdateResult):
 * the executable graph is unchanged and can still be launched.
 * @example
 * ```ts
 * try { exec.update(graph); } catch (e) { if (e instanceof GraphUpdateError) exec = graph.instantiate(); }
 * ```
 */
export class GraphUpdateError extends VramStateError {
  /**
   * @param reason The driver's result, in words (`topology-changed`, `node-type-changed`, ...).
   * @param message The whole message.
   * @throws Never.
   * @example
   * ```ts
   * throw new GraphUpdateError('topology-changed', 'the graphs have different nodes');
   * ```
   */
  constructor(
    /** Why: `error`, `topology-changed`, `node-type-changed`, `function-changed`, `parameters-changed`, `not-supported`, `unsupported-function-change` or `attributes-changed`. */
    readonly reason: string,
    message: string,
  ) {
    super(message);
  }
}
