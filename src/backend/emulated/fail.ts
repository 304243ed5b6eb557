/**
 * Driver-shaped failures for the emulated backend: every error it raises is the `CudaError` the
 * driver would return, with the driver's name and code and the entry point that failed.
 */
import { CudaError, CUresult, CUresultName, OutOfMemoryError, outOfMemoryMessage } from '../../errors.js';

/** Throws the driver's error `code` for `call`; never returns, so callers can `throw` or not. */
export function fail(code: number, call: string, description?: string): never {
  throw new CudaError(code, CUresultName[code] ?? `CUDA_ERROR_${code}`, call, description);
}

/** CUDA_ERROR_INVALID_VALUE, the driver's answer to most bad arguments. */
export function invalidValue(call: string, description?: string): never {
  fail(CUresult.INVALID_VALUE, call, description);
}

/**
 * Out of (emulated) device or host memory, as the CUDA backend reports it: an `OutOfMemoryError`
 * whose cause is the driver's CUDA_ERROR_OUT_OF_MEMORY.
 */
export function outOfMemory(bytes: number, call: string, description: string, reason: 'device' | 'host' = 'device'): never {
  const cause = new CudaError(CUresult.OUT_OF_MEMORY, CUresultName[CUresult.OUT_OF_MEMORY]!, call, description);
  // The message as the CUDA backend's (src/cuda/errors.ts) makes it, so the two read alike.
  const message = bytes > 0 ? outOfMemoryMessage(bytes, undefined, cause.message) : cause.message;
  throw new OutOfMemoryError({ requestedBytes: bytes, call, reason, cause, message });
}

/** Checks a byte count the way the driver sees a size_t: a whole number >= 0 that is exact. */
export function checkCount(value: number, call: string, what: string): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    invalidValue(call, `${what} must be a whole number >= 0, got ${String(value)}`);
  }
  return value;
}

/** Checks a size that must be positive (allocation sizes: 0 is CUDA_ERROR_INVALID_VALUE). */
export function checkSize(value: number, call: string, what = 'size'): number {
  checkCount(value, call, what);
  if (value === 0) invalidValue(call, `${what} must not be 0`);
  return value;
}

/** An address as error messages show it (hex), tolerating a non-number from untyped callers. */
export function hex(address: number): string {
  return typeof address === 'number' ? `0x${address.toString(16)}` : String(address);
}
