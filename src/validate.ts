/**
 * Argument checks shared by every layer: they run before any driver call, so bad input is a
 * `TypeError` or `RangeError` with the argument's name, never a driver error or a crash.
 */

/** The largest byte count vram accepts: addresses and sizes are JavaScript numbers. */
export const MAX_BYTES = Number.MAX_SAFE_INTEGER;

/** Checks that `value` is a positive whole number of bytes and returns it. */
export function checkBytes(value: unknown, name = 'bytes'): number {
  if (typeof value !== 'number') {
    throw new TypeError(`${name} must be a number, got ${typeof value}`);
  }
  if (!Number.isInteger(value) || value <= 0 || value > MAX_BYTES) {
    throw new RangeError(`${name} must be a positive whole number of bytes, got ${value}`);
  }
  return value;
}

/** Checks that `value` is a whole number >= 0 (an offset, a count that may be zero). */
export function checkNonNegativeInteger(value: unknown, name: string): number {
  if (typeof value !== 'number') {
    throw new TypeError(`${name} must be a number, got ${typeof value}`);
  }
  if (!Number.isInteger(value) || value < 0 || value > MAX_BYTES) {
    throw new RangeError(`${name} must be a whole number >= 0, got ${value}`);
  }
  return value;
}

/** Checks that `value` is a power of two. */
export function checkPowerOfTwo(value: unknown, name: string): number {
  const n = checkBytes(value, name);
  if ((n & (n - 1)) !== 0 && n <= 2 ** 30) {
    throw new RangeError(`${name} must be a power of two, got ${n}`);
  }
  if (n > 2 ** 30 && Math.log2(n) % 1 !== 0) {
    throw new RangeError(`${name} must be a power of two, got ${n}`);
  }
  return n;
}

/** Checks that [offset, offset + length) lies inside a region of `size` bytes. */
export function checkRange(offset: number, length: number, size: number, what: string): void {
  checkNonNegativeInteger(offset, `${what} offset`);
  checkNonNegativeInteger(length, `${what} length`);
  if (offset + length > size) {
    throw new RangeError(
      `${what}: range [${offset}, ${offset + length}) exceeds its size of ${size} bytes`);
  }
}

/** Rounds `n` up to a multiple of `alignment` (a power of two no larger than 2^52). */
export function alignUp(n: number, alignment: number): number {
  return Math.ceil(n / alignment) * alignment;
}
