/**
 * Errors raised by vram. Every failure is typed: driver failures are `CudaError` (the emulated
 * backend raises the same names and codes), misuse of a buffer or resource is a `VramStateError`
 * subclass, and bad arguments are the built-in `TypeError` / `RangeError`, raised before any
 * driver call.
 */

/** A failed driver call, with the driver's own name, code and description, and the call that failed. */
export class CudaError extends Error {
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
    this.name = 'CudaError';
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
  INVALID_CONTEXT: 201,
  MAP_FAILED: 205,
  INVALID_HANDLE: 400,
  NOT_FOUND: 500,
  NOT_READY: 600,
  PEER_ACCESS_ALREADY_ENABLED: 704,
  PEER_ACCESS_NOT_ENABLED: 705,
  CONTEXT_IS_DESTROYED: 709,
  HOST_MEMORY_ALREADY_REGISTERED: 712,
  HOST_MEMORY_NOT_REGISTERED: 713,
  NOT_SUPPORTED: 801,
} as const;

/** Names for the codes above, as the driver's cuGetErrorName spells them. */
export const CUresultName: Readonly<Record<number, string>> = {
  0: 'CUDA_SUCCESS',
  1: 'CUDA_ERROR_INVALID_VALUE',
  2: 'CUDA_ERROR_OUT_OF_MEMORY',
  3: 'CUDA_ERROR_NOT_INITIALIZED',
  100: 'CUDA_ERROR_NO_DEVICE',
  101: 'CUDA_ERROR_INVALID_DEVICE',
  201: 'CUDA_ERROR_INVALID_CONTEXT',
  205: 'CUDA_ERROR_MAP_FAILED',
  400: 'CUDA_ERROR_INVALID_HANDLE',
  500: 'CUDA_ERROR_NOT_FOUND',
  600: 'CUDA_ERROR_NOT_READY',
  704: 'CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED',
  705: 'CUDA_ERROR_PEER_ACCESS_NOT_ENABLED',
  709: 'CUDA_ERROR_CONTEXT_IS_DESTROYED',
  712: 'CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED',
  713: 'CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED',
  801: 'CUDA_ERROR_NOT_SUPPORTED',
};

/** Statistics attached to an out-of-memory failure, when the failing resource keeps them. */
export interface OutOfMemoryStatistics {
  readonly currentBytes: number;
  readonly peakBytes: number;
  readonly currentCount: number;
  readonly reservedBytes?: number;
}

/**
 * An allocation that could not be satisfied, by the driver or by a resource's own limit.
 * Carries the request and, where known, the resource and its statistics, so a program can log
 * where its memory went.
 */
export class OutOfMemoryError extends CudaError {
  constructor(
    /** The number of bytes that were asked for. */
    readonly requestedBytes: number,
    call: string,
    /** A name for the resource that failed (its class and parameters). */
    readonly resource?: string,
    /** That resource's statistics at the time of the failure. */
    readonly statistics?: OutOfMemoryStatistics,
    description?: string,
  ) {
    super(CUresult.OUT_OF_MEMORY, 'CUDA_ERROR_OUT_OF_MEMORY', call,
      description ?? `cannot allocate ${requestedBytes} bytes${resource ? ` from ${resource}` : ''}`);
    this.name = 'OutOfMemoryError';
  }
}

/** Misuse of a buffer, pointer or resource that the library detects before it could do harm. */
export class VramStateError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/** A buffer or block used after it was freed. */
export class UseAfterFreeError extends VramStateError {}

/** A buffer or block freed a second time. */
export class DoubleFreeError extends VramStateError {}

/** A pointer that the resource or buffer did not allocate (foreign, or with the wrong size). */
export class InvalidPointerError extends VramStateError {}

/** An operation that needs a capability the backend or device does not have. */
export class NotSupportedError extends VramStateError {}
