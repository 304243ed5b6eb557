/**
 * Turning a nonzero CUresult into vram's typed errors, with the driver's own name and description
 * (cuGetErrorName / cuGetErrorString). Only ever runs on the failure path.
 */
import koffi from 'koffi';
import { CudaError, CUresult, CUresultName, OutOfMemoryError, outOfMemoryMessage } from '../errors.js';

/** cuGetErrorName / cuGetErrorString in the shape both are bound with. */
export type ErrorStringFn = (error: number, str: BigUint64Array) => number;

/**
 * The API name users read for an entry point: `cuMemAlloc`, not the ABI variant `cuMemAlloc_v2`
 * that cuGetProcAddress resolved (the emulated backend reports the same names).
 */
export function apiName(call: string): string {
  return call.replace(/_v\d+$/, '');
}

/** Builds CudaError / OutOfMemoryError values for a loaded driver. */
export class CudaErrorFactory {
  private readonly out = new BigUint64Array(1);

  constructor(
    private readonly getName: ErrorStringFn,
    private readonly getString: ErrorStringFn,
  ) {}

  /** The driver's symbolic name for `code`, e.g. `CUDA_ERROR_INVALID_VALUE`. */
  name(code: number): string {
    return this.lookup(this.getName, code) ?? CUresultName[code] ?? `CUDA_ERROR_${code}`;
  }

  /** The driver's description of `code`, if it has one. */
  description(code: number): string | undefined {
    return this.lookup(this.getString, code);
  }

  /**
   * The error for a failed `call`. Out-of-memory becomes `OutOfMemoryError` carrying the request
   * (`requestedBytes`, 0 when the call allocates nothing of its own).
   */
  error(code: number, call: string, requestedBytes = 0): CudaError | OutOfMemoryError {
    const description = this.description(code);
    const api = apiName(call);
    const driverError = new CudaError(code, this.name(code), api, description);
    if (code === CUresult.OUT_OF_MEMORY) {
      // cuMemHostAlloc and cuMemHostRegister run out of pinned host memory, the rest of device memory.
      const reason = api.includes('Host') ? 'host' : 'device';
      const message = requestedBytes > 0 ? outOfMemoryMessage(requestedBytes, undefined, driverError.message) : driverError.message;
      return new OutOfMemoryError({ requestedBytes, call: api, reason, cause: driverError, message });
    }
    return driverError;
  }

  private lookup(fn: ErrorStringFn, code: number): string | undefined {
    this.out[0] = 0n;
    if (fn(code, this.out) !== 0 || this.out[0] === 0n) return undefined;
    return koffi.decode.string(this.out[0]);
  }
}
