/**
 * float16 (IEEE 754 binary16, CUDA's `__half`) and bfloat16 (CUDA's `__nv_bfloat16`) on the host:
 * JavaScript has no 16-bit float type everywhere (Float16Array and Math.f16round are recent), so
 * the host holds their raw bits in a Uint16Array and these functions convert.
 *
 * Encoding rounds the JavaScript number (a float64) to nearest, ties to even, in ONE step. Going
 * through float32 first (Math.fround, then to 16 bits) would round twice and get values just past
 * a 16-bit midpoint wrong; here every finite number is scaled by exact powers of two and rounded
 * once. Subnormals are kept (not flushed to zero), numbers past the largest finite value round to
 * Infinity as IEEE says (65520 and up for float16), and NaN becomes the quiet NaN 0x7e00 (float16)
 * or 0x7fc0 (bfloat16).
 */

/** The two 16-bit float formats, by their mantissa width; both have a sign bit at bit 15. */
interface Format16 {
  /** Mantissa (fraction) bits: 10 for float16, 7 for bfloat16. */
  readonly mantissaBits: number;
  /** Exponent bias: 15 for float16, 127 for bfloat16 (also the largest finite exponent). */
  readonly bias: number;
  /** Bits of +Infinity: the exponent all ones, mantissa zero. */
  readonly infinity: number;
  /** The quiet NaN produced for any NaN input. */
  readonly nan: number;
  /** The smallest normal value, 2^(1 - bias): below it the value is subnormal. */
  readonly minNormal: number;
  /** 2^(bias - 1 + mantissaBits): scales a subnormal to its integer mantissa, exactly. */
  readonly subnormalScale: number;
  /**
   * The midpoint between the largest finite value and 2^(bias + 1): it and anything above round
   * to Infinity (a tie goes to the even neighbour, and the largest finite mantissa is odd).
   */
  readonly overflow: number;
}

function format(mantissaBits: number, bias: number): Format16 {
  const exponentAllOnes = 2 * bias + 1;
  return {
    mantissaBits,
    bias,
    infinity: exponentAllOnes << mantissaBits,
    nan: (exponentAllOnes << mantissaBits) | (1 << (mantissaBits - 1)),
    minNormal: 2 ** (1 - bias),
    subnormalScale: 2 ** (bias - 1 + mantissaBits),
    overflow: (2 - 2 ** -(mantissaBits + 1)) * 2 ** bias,
  };
}

const FLOAT16 = format(10, 15);
const BFLOAT16 = format(7, 127);

/** Rounds q >= 0 (below 2^52, so q - floor(q) is exact) to the nearest integer, ties to even. */
function roundHalfEven(q: number): number {
  const f = Math.floor(q);
  const d = q - f;
  if (d > 0.5) return f + 1;
  if (d < 0.5) return f;
  return f % 2 === 0 ? f : f + 1;
}

/** The 16 bits of `x` in format `fmt`, rounded to nearest even in one step. */
function encode(x: number, fmt: Format16): number {
  if (x !== x) return fmt.nan;
  // -0 has its sign bit too: 1 / -0 is -Infinity.
  const sign = x < 0 || (x === 0 && 1 / x < 0) ? 0x8000 : 0;
  const a = Math.abs(x);
  if (a >= fmt.overflow) return sign | fmt.infinity;
  if (a < fmt.minNormal) {
    // Subnormal: the integer mantissa is a / 2^(1 - bias - mantissaBits). Rounding up to
    // 2^mantissaBits gives the smallest normal's bits, which is the right answer.
    return sign | roundHalfEven(a * fmt.subnormalScale);
  }
  // Normal: a = m * 2^e with m in [1, 2). Math.log2 may be off by one next to a power of two,
  // so the exponent is corrected against exact powers of two.
  let e = Math.floor(Math.log2(a));
  if (2 ** e > a) e--;
  else if (2 ** (e + 1) <= a) e++;
  // a / 2^e, m - 1 and the scaling by 2^mantissaBits are all exact in float64.
  const fraction = roundHalfEven((a / 2 ** e - 1) * (1 << fmt.mantissaBits));
  // A fraction that rounds up to 2^mantissaBits carries into the exponent, as it should.
  return sign | (((e + fmt.bias) << fmt.mantissaBits) + fraction);
}

/** The number that 16 bits in format `fmt` hold (exact: every such value is a float64). */
function decode(bits: number, fmt: Format16): number {
  const m = fmt.mantissaBits;
  const exponent = (bits >>> m) & (2 * fmt.bias + 1);
  const fraction = bits & ((1 << m) - 1);
  let value: number;
  if (exponent === 0) value = fraction / fmt.subnormalScale;
  else if (exponent === 2 * fmt.bias + 1) value = fraction === 0 ? Infinity : NaN;
  else value = (fraction + (1 << m)) * 2 ** (exponent - fmt.bias - m);
  return bits & 0x8000 ? -value : value;
}

/**
 * Checks that `bits` is a 16-bit pattern: a value outside 0..65535 is a bug upstream, and masking
 * it would silently decode some other value.
 */
function checkBits(bits: number, what: string): number {
  if (!Number.isInteger(bits) || bits < 0 || bits > 0xffff) {
    throw new RangeError(`${what} bits must be a whole number in [0, 65535], got ${bits}`);
  }
  return bits;
}

/**
 * The float16 (binary16) bits of a number, rounded to nearest, ties to even.
 *
 * @param x Any number; NaN gives 0x7e00, |x| >= 65520 gives +-Infinity (0x7c00 / 0xfc00).
 * @returns The 16 bits, 0..65535.
 * @throws Never: every number has an encoding.
 * @example
 * ```ts
 * float16Bits(1);        // 0x3c00
 * float16Bits(65504);    // 0x7bff, the largest finite float16
 * float16Bits(2 ** -24); // 0x0001, the smallest subnormal
 * ```
 */
export function float16Bits(x: number): number {
  return encode(x, FLOAT16);
}

/**
 * The number that float16 bits hold (exactly: every float16 is a JavaScript number).
 *
 * @param bits A 16-bit pattern, 0..65535.
 * @returns Its value; NaN for the NaN patterns, -0 for 0x8000.
 * @throws RangeError if `bits` is not a whole number in [0, 65535].
 * @example
 * ```ts
 * fromFloat16Bits(0x3c00); // 1
 * fromFloat16Bits(0xfc00); // -Infinity
 * ```
 */
export function fromFloat16Bits(bits: number): number {
  return decode(checkBits(bits, 'float16'), FLOAT16);
}

/**
 * The bfloat16 bits of a number (float32's sign and exponent, 7 mantissa bits), rounded to
 * nearest, ties to even, directly from the float64 (not through float32, which would round twice).
 *
 * @param x Any number; NaN gives 0x7fc0, numbers past the largest finite bfloat16 give +-Infinity.
 * @returns The 16 bits, 0..65535.
 * @throws Never: every number has an encoding.
 * @example
 * ```ts
 * bfloat16Bits(1);    // 0x3f80
 * bfloat16Bits(-2);   // 0xc000
 * ```
 */
export function bfloat16Bits(x: number): number {
  return encode(x, BFLOAT16);
}

/**
 * The number that bfloat16 bits hold (exactly).
 *
 * @param bits A 16-bit pattern, 0..65535.
 * @returns Its value; NaN for the NaN patterns, -0 for 0x8000.
 * @throws RangeError if `bits` is not a whole number in [0, 65535].
 * @example
 * ```ts
 * fromBfloat16Bits(0x3f80); // 1
 * ```
 */
export function fromBfloat16Bits(bits: number): number {
  return decode(checkBits(bits, 'bfloat16'), BFLOAT16);
}

/** Something indexable and writable by number: a Float32Array, a Float64Array, a number[]. */
export interface WritableNumbers {
  readonly length: number;
  [index: number]: number;
}

function checkLengths(srcLength: number, dstLength: number, what: string): void {
  if (srcLength !== dstLength) {
    throw new RangeError(`${what}: the source has ${srcLength} values, the destination ${dstLength}; they must match`);
  }
}

function encodeAll(src: ArrayLike<number>, dst: Uint16Array, fmt: Format16, what: string): Uint16Array {
  checkLengths(src.length, dst.length, what);
  for (let i = 0; i < src.length; i++) dst[i] = encode(src[i]!, fmt);
  return dst;
}

function decodeAll<T extends WritableNumbers>(src: ArrayLike<number>, dst: T, fmt: Format16, what: string): T {
  checkLengths(src.length, dst.length, what);
  for (let i = 0; i < src.length; i++) {
    const bits = src[i]!;
    // Free for a Uint16Array; a plain number[] holding 70000 must not decode as some other value.
    if ((bits & 0xffff) !== bits) checkBits(bits, what);
    dst[i] = decode(bits, fmt);
  }
  return dst;
}

/**
 * Encodes numbers to float16 bits in bulk (for a whole host array).
 *
 * @param src The numbers.
 * @param dst Where the bits go; a new Uint16Array of src's length by default.
 * @returns `dst`.
 * @throws RangeError if `dst` is given and its length differs from `src`'s (nothing is dropped).
 * @example
 * ```ts
 * const bits = encodeFloat16([1, 0.5, 65504]); // Uint16Array [0x3c00, 0x3800, 0x7bff]
 * ```
 */
export function encodeFloat16(src: ArrayLike<number>, dst: Uint16Array = new Uint16Array(src.length)): Uint16Array {
  return encodeAll(src, dst, FLOAT16, 'encodeFloat16');
}

/**
 * Decodes float16 bits in bulk.
 *
 * @param src The bits (a Uint16Array, usually).
 * @param dst Where the numbers go; a new Float32Array by default (every float16 is exactly a float32).
 * @returns `dst`.
 * @throws RangeError if `dst`'s length differs from `src`'s.
 * @example
 * ```ts
 * decodeFloat16(new Uint16Array([0x3c00, 0xc000])); // Float32Array [1, -2]
 * ```
 */
export function decodeFloat16<T extends WritableNumbers = Float32Array>(src: ArrayLike<number>, dst?: T): T {
  return decodeAll(src, dst ?? (new Float32Array(src.length) as WritableNumbers as T), FLOAT16, 'decodeFloat16');
}

/**
 * Encodes numbers to bfloat16 bits in bulk.
 *
 * @param src The numbers.
 * @param dst Where the bits go; a new Uint16Array of src's length by default.
 * @returns `dst`.
 * @throws RangeError if `dst` is given and its length differs from `src`'s.
 * @example
 * ```ts
 * const bits = encodeBfloat16([1, -2]); // Uint16Array [0x3f80, 0xc000]
 * ```
 */
export function encodeBfloat16(src: ArrayLike<number>, dst: Uint16Array = new Uint16Array(src.length)): Uint16Array {
  return encodeAll(src, dst, BFLOAT16, 'encodeBfloat16');
}

/**
 * Decodes bfloat16 bits in bulk.
 *
 * @param src The bits.
 * @param dst Where the numbers go; a new Float32Array by default (every bfloat16 is exactly a float32).
 * @returns `dst`.
 * @throws RangeError if `dst`'s length differs from `src`'s.
 * @example
 * ```ts
 * decodeBfloat16(new Uint16Array([0x3f80])); // Float32Array [1]
 * ```
 */
export function decodeBfloat16<T extends WritableNumbers = Float32Array>(src: ArrayLike<number>, dst?: T): T {
  return decodeAll(src, dst ?? (new Float32Array(src.length) as WritableNumbers as T), BFLOAT16, 'decodeBfloat16');
}
