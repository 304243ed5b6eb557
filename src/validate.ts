/**
 * Argument checks shared by every layer: they run before any driver call, so bad input is a
 * `TypeError` or `RangeError` with the argument's name, never a driver error or a crash.
 */

import { parseSize } from './util/size.js';

/** The largest byte count vram accepts: addresses and sizes are JavaScript numbers. */
export const MAX_BYTES = Number.MAX_SAFE_INTEGER;

/**
 * A byte count as options and `allocate` calls take it: a number of bytes, or a size as the CLI
 * and the environment take it (`'512M'`, `'1G'`, `'64KiB'`: binary units, src/util/size.ts).
 */
export type ByteSize = number | string;

/**
 * Reads a byte count given as a number or as a size string (`'1G'`): the one place options and
 * `allocate` calls turn `'1G'` into bytes, with the parser the CLI and VRAM_* variables use.
 *
 * @param value The count: a number of bytes, or a size like `'512M'`.
 * @param name The argument's name in messages (`maximumSize`).
 * @param zero Whether 0 (or `'0'`) is allowed (a cap that means none, a cache of nothing).
 * @returns The count in bytes.
 * @throws {TypeError} When `value` is neither a number nor a string.
 * @throws {RangeError} When it is not a whole number of bytes in range, or not a size.
 * @example
 * ```ts
 * readBytes('1G', 'maximumSize'); // 1073741824
 * readBytes(4096, 'bytes');       // 4096
 * ```
 */
export function readBytes(value: unknown, name: string, zero = false): number {
  if (typeof value === 'string') return zero && /^\s*0+\s*$/.test(value) ? 0 : parseSize(value, name);
  return zero ? checkNonNegativeInteger(value, name) : checkBytes(value, name);
}

/** Checks that `value` is a positive whole number of bytes and returns it. */
export function checkBytes(value: unknown, name = 'bytes'): number {
  if (typeof value !== 'number') {
    throw new TypeError(`${name} must be a number, got ${typeof value}`);
  }
  if (!Number.isInteger(value) || value <= 0 || value > MAX_BYTES) {
    throw new RangeError(`${name} must be a positive whole number of bytes, at most 2^53 - 1 (${MAX_BYTES}), got ${value}`);
  }
  return value;
}

/** Checks that `value` is a whole number from 0 to 2^53 - 1 (an offset, a count that may be zero). */
export function checkNonNegativeInteger(value: unknown, name: string): number {
  if (typeof value !== 'number') {
    throw new TypeError(`${name} must be a number, got ${typeof value}`);
  }
  if (!Number.isInteger(value) || value < 0 || value > MAX_BYTES) {
    throw new RangeError(`${name} must be a whole number from 0 to 2^53 - 1 (${MAX_BYTES}), got ${value}`);
  }
  return value;
}

/** Checks that `value` is a power of two. */
export function checkPowerOfTwo(value: unknown, name: string): number {
  const n = checkBytes(value, name);
  // Exact for every safe integer: 2 ** k is exact, and a safe integer that is not a power of two
  // differs from the power nearest its (rounded) logarithm. `Math.log2(n) % 1` is not: it rounds
  // 2^53 - 1 to 53.
  if (2 ** Math.round(Math.log2(n)) !== n) {
    throw new RangeError(`${name} must be a power of two, got ${n}`);
  }
  return n;
}

/** Checks that [offset, offset + length) lies inside a region of `size` bytes. */
export function checkRange(offset: number, length: number, size: number, what: string): void {
  checkNonNegativeInteger(offset, `${what} offset`);
  checkNonNegativeInteger(length, `${what} length`);
  if (offset + length > size) {
    throw new RangeError(`${what}: range [${offset}, ${offset + length}) exceeds its size of ${size} bytes`);
  }
}

/** Rounds `n` up to a multiple of `alignment` (a power of two no larger than 2^52). */
export function alignUp(n: number, alignment: number): number {
  return Math.ceil(n / alignment) * alignment;
}

/**
 * Checks a device or host address passed back to vram (a pointer to free, a pointer to wrap) and
 * returns it: a number (TypeError otherwise) that is a whole number >= 0 (RangeError otherwise:
 * NaN, a fraction or a negative number is never an address).
 */
export function checkPointer(value: unknown, name = 'ptr'): number {
  if (typeof value !== 'number') {
    throw new TypeError(`${name} must be a number (an address), got ${typeof value}`);
  }
  if (!Number.isInteger(value) || value < 0 || value > MAX_BYTES) {
    throw new RangeError(`${name} must be an address (a whole number >= 0), got ${value}`);
  }
  return value;
}

/**
 * The handle of an optional stream argument, checked: omitted means the default stream (0); a
 * `Stream` gives its handle (its getter throws UseAfterFreeError once the stream is destroyed);
 * anything else must be an object whose `handle` is a whole number >= 0. A handle of 1.5, -1 or
 * NaN is a RangeError, not a driver call with a garbage handle.
 */
export function checkStreamHandle(stream: unknown, name = 'stream'): number {
  if (stream === undefined) return 0;
  if (stream === null || typeof stream !== 'object') {
    throw new TypeError(`${name} must be a Stream or an object with a numeric handle, got ${stream === null ? 'null' : typeof stream}`);
  }
  const handle = (stream as { readonly handle?: unknown }).handle;
  if (typeof handle !== 'number') {
    throw new TypeError(`${name} must be a Stream or an object with a numeric handle, got a handle of type ${typeof handle}`);
  }
  if (!Number.isInteger(handle) || handle < 0 || handle > MAX_BYTES) {
    throw new RangeError(`${name}.handle must be a whole number >= 0, got ${handle}`);
  }
  return handle;
}

/** What the live-stream check asks of a backend: whether it vouches for a handle (`Backend.streamKnown`). */
export interface StreamVouch {
  /** True for the legacy stream (0) and a live stream created or adopted and not destroyed or forgotten. */
  streamKnown(handle: number): boolean;
}

/**
 * The one live-stream check, for every entry point that takes a stream (allocation, copies,
 * fills, `recordStream`, `lease`, kernel and graph launches): `checkStreamHandle`, then a raw
 * handle (`{ handle }`) that `streams` does not vouch for is refused. A caching resource, a
 * buffer's recorded streams and a graph launch keep such a handle or pass it to the driver, where
 * a destroyed or made-up handle is an error from then on (a buffer that can never be freed), or a
 * crash. One backend serves every device of a process, so any device's backend knows every stream.
 *
 * @param stream The argument.
 * @param streams The backend.
 * @param name The argument's name, for the message.
 * @returns The handle.
 * @throws {TypeError | RangeError} For a malformed handle, or one no live stream has.
 * @throws {UseAfterFreeError} For a destroyed `Stream` (its handle getter).
 * @internal
 */
export function checkLiveStreamHandle(stream: unknown, streams: StreamVouch, name = 'stream'): number {
  const handle = checkStreamHandle(stream, name);
  if (handle !== 0 && !streams.streamKnown(handle)) {
    throw new RangeError(
      `${name}.handle ${handle} is not a live stream vram knows: give a Stream, 0 for the default stream, ` +
        "or for a stream created elsewhere (another library's CUstream) the Stream of Stream.fromHandle(handle)",
    );
  }
  return handle;
}
