/**
 * How the built-in kernels see each scalar dtype: the C storage type, a runtime code for the
 * kernels that switch on the dtype, the C and JavaScript conversions to and from float64, and
 * the DataView accessors the emulated kernels read and write memory with.
 *
 * The two sides must round alike, because the emulated backend stands in for the GPU in CI:
 * - float16 and bfloat16 are raw bits in `unsigned short` (no cuda_fp16.h, so the sources need
 *   no header on any NVRTC): float16 converts with PTX `cvt` (exact to float, round-to-nearest-
 *   even from float64, as `float16Bits` does from a JavaScript number); bfloat16 goes through
 *   float32 (JavaScript: `Math.fround` first), because PTX has no float64-to-bfloat16 `cvt`
 *   below sm_90 and the shipped PTX targets less.
 * - float-to-integer conversions saturate (NaN gives 0), spelled out in C, because C leaves an
 *   out-of-range conversion undefined and the emulated backend must give what the GPU gives.
 */
import type { ScalarName } from '../../array/dtype.js';
import { bfloat16Bits, float16Bits, fromBfloat16Bits, fromFloat16Bits } from '../../array/half.js';

/** The scalar dtypes in runtime-code order: `kernelScalars[code]`. */
export const kernelScalars: readonly ScalarName[] = Object.freeze([
  'bool',
  'int8',
  'uint8',
  'int16',
  'uint16',
  'int32',
  'uint32',
  'int64',
  'uint64',
  'float16',
  'bfloat16',
  'float32',
  'float64',
]);

/** How one scalar dtype is stored, converted and accessed by the built-in kernels. */
export interface KernelScalar {
  /** The dtype. */
  readonly name: ScalarName;
  /** Its index in `kernelScalars`, the code the switching kernels take. */
  readonly code: number;
  /** Bytes per value. */
  readonly bytes: 1 | 2 | 4 | 8;
  /** The C type it is stored as (`unsigned short` for both half types, `unsigned char` for bool). */
  readonly storage: string;
  /** 'int' for bool and the integers (converted among themselves through 64 bits), else 'float'. */
  readonly family: 'int' | 'float';
  /** True for the signed integers. */
  readonly signed: boolean;
  /** The C function that turns a stored value into a double: `vram_ld_<name>`. */
  readonly load: string;
  /** The C function that turns a double into a stored value (rounding or saturating): `vram_st_<name>`. */
  readonly store: string;
  /** Reads the value at `byteOffset` as a double (JavaScript's side of `load`). */
  readonly read: (view: DataView, byteOffset: number) => number;
  /** Writes a double at `byteOffset`, converted as `store` converts it. */
  readonly write: (view: DataView, byteOffset: number, value: number) => void;
}

/** Truncates toward zero and clamps to [lo, hi]; NaN gives 0 (the C side spells out the same). */
export function saturate(value: number, lo: number, hi: number): number {
  if (value !== value) return 0;
  if (value <= lo) return lo;
  if (value >= hi) return hi;
  return Math.trunc(value);
}

const TWO63 = 2 ** 63;
const TWO64 = 2 ** 64;

/** A double as int64, truncated and saturated (NaN gives 0). */
export function int64Of(value: number): bigint {
  if (value !== value) return 0n;
  if (value <= -TWO63) return -(2n ** 63n);
  if (value >= TWO63) return 2n ** 63n - 1n;
  return BigInt(Math.trunc(value));
}

/** A double as uint64, truncated and saturated (NaN and negatives give 0). */
export function uint64Of(value: number): bigint {
  if (value !== value || value <= 0) return 0n;
  if (value >= TWO64) return 2n ** 64n - 1n;
  return BigInt(Math.trunc(value));
}

type Accessors = Pick<KernelScalar, 'read' | 'write'>;

const accessors: { readonly [K in ScalarName]: Accessors } = {
  bool: { read: (v, o) => (v.getUint8(o) !== 0 ? 1 : 0), write: (v, o, x) => v.setUint8(o, x !== 0 ? 1 : 0) },
  int8: { read: (v, o) => v.getInt8(o), write: (v, o, x) => v.setInt8(o, saturate(x, -128, 127)) },
  uint8: { read: (v, o) => v.getUint8(o), write: (v, o, x) => v.setUint8(o, saturate(x, 0, 255)) },
  int16: { read: (v, o) => v.getInt16(o, true), write: (v, o, x) => v.setInt16(o, saturate(x, -32768, 32767), true) },
  uint16: { read: (v, o) => v.getUint16(o, true), write: (v, o, x) => v.setUint16(o, saturate(x, 0, 65535), true) },
  int32: { read: (v, o) => v.getInt32(o, true), write: (v, o, x) => v.setInt32(o, saturate(x, -2147483648, 2147483647), true) },
  uint32: { read: (v, o) => v.getUint32(o, true), write: (v, o, x) => v.setUint32(o, saturate(x, 0, 4294967295), true) },
  int64: { read: (v, o) => Number(v.getBigInt64(o, true)), write: (v, o, x) => v.setBigInt64(o, int64Of(x), true) },
  uint64: { read: (v, o) => Number(v.getBigUint64(o, true)), write: (v, o, x) => v.setBigUint64(o, uint64Of(x), true) },
  float16: { read: (v, o) => fromFloat16Bits(v.getUint16(o, true)), write: (v, o, x) => v.setUint16(o, float16Bits(x), true) },
  bfloat16: { read: (v, o) => fromBfloat16Bits(v.getUint16(o, true)), write: (v, o, x) => v.setUint16(o, bfloat16Bits(Math.fround(x)), true) },
  float32: { read: (v, o) => v.getFloat32(o, true), write: (v, o, x) => v.setFloat32(o, x, true) },
  float64: { read: (v, o) => v.getFloat64(o, true), write: (v, o, x) => v.setFloat64(o, x, true) },
};

const storage: { readonly [K in ScalarName]: string } = {
  bool: 'unsigned char',
  int8: 'signed char',
  uint8: 'unsigned char',
  int16: 'short',
  uint16: 'unsigned short',
  int32: 'int',
  uint32: 'unsigned int',
  int64: 'long long',
  uint64: 'unsigned long long',
  float16: 'unsigned short',
  bfloat16: 'unsigned short',
  float32: 'float',
  float64: 'double',
};

const sizes: { readonly [K in ScalarName]: 1 | 2 | 4 | 8 } = {
  bool: 1,
  int8: 1,
  uint8: 1,
  int16: 2,
  uint16: 2,
  int32: 4,
  uint32: 4,
  int64: 8,
  uint64: 8,
  float16: 2,
  bfloat16: 2,
  float32: 4,
  float64: 8,
};

/**
 * Every scalar dtype's kernel view, by name (frozen).
 *
 * @example
 * ```ts
 * kernelScalar.float16.storage; // 'unsigned short'
 * kernelScalar.int8.load;       // 'vram_ld_int8'
 * ```
 */
export const kernelScalar: { readonly [K in ScalarName]: KernelScalar } = Object.freeze(
  Object.fromEntries(
    kernelScalars.map((name, code) => [
      name,
      Object.freeze({
        name,
        code,
        bytes: sizes[name],
        storage: storage[name],
        family: name.startsWith('float') || name === 'bfloat16' ? 'float' : 'int',
        signed: name.startsWith('int'),
        load: `vram_ld_${name}`,
        store: `vram_st_${name}`,
        ...accessors[name],
      } satisfies KernelScalar),
    ]),
  ) as { readonly [K in ScalarName]: KernelScalar },
);

/** The C limits each integer's saturating store clamps to, as C literals (and as doubles). */
const limits: Partial<Record<ScalarName, readonly [string, string]>> = {
  int8: ['-128', '127'],
  uint8: ['0', '255'],
  int16: ['-32768', '32767'],
  uint16: ['0', '65535'],
  int32: ['(-2147483647 - 1)', '2147483647'],
  uint32: ['0u', '4294967295u'],
  int64: ['(-9223372036854775807LL - 1)', '9223372036854775807LL'],
  uint64: ['0ull', '18446744073709551615ull'],
};

/** The double thresholds of the same clamps (C compares the double against these). */
const thresholds: Partial<Record<ScalarName, readonly [string, string]>> = {
  int8: ['-128.0', '127.0'],
  uint8: ['0.0', '255.0'],
  int16: ['-32768.0', '32767.0'],
  uint16: ['0.0', '65535.0'],
  int32: ['-2147483648.0', '2147483647.0'],
  uint32: ['0.0', '4294967295.0'],
  int64: ['-9223372036854775808.0', '9223372036854775808.0'],
  uint64: ['0.0', '18446744073709551616.0'],
};

/**
 * The C conversions every generated source starts with: each dtype's `vram_ld_<name>` (stored
 * value to double) and `vram_st_<name>` (double to stored value), the half-type helpers, and
 * nothing else (no header), so any NVRTC and nvcc compile it alike.
 *
 * @returns C source text.
 * @throws Never.
 * @example
 * ```ts
 * scalarConversionsSource().includes('vram_st_float16'); // true
 * ```
 */
export function scalarConversionsSource(): string {
  const lines: string[] = [
    '// float16 through PTX cvt (exact widening; round-to-nearest-even narrowing, from double directly).',
    'static __device__ __forceinline__ float vram_f16_to_float(unsigned short h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }',
    'static __device__ __forceinline__ unsigned short vram_float_to_f16(float f) { unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }',
    'static __device__ __forceinline__ unsigned short vram_double_to_f16(double d) { unsigned short h; asm("cvt.rn.f16.f64 %0, %1;" : "=h"(h) : "d"(d)); return h; }',
    '// bfloat16: the top half of a float32; narrowing rounds to nearest even, NaN to the quiet 0x7fc0.',
    'static __device__ __forceinline__ float vram_bf16_to_float(unsigned short h) { return __uint_as_float(((unsigned int)h) << 16); }',
    'static __device__ __forceinline__ unsigned short vram_float_to_bf16(float f) {',
    '  unsigned int u = __float_as_uint(f);',
    '  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)0x7fc0u;',
    '  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);',
    '}',
  ];
  for (const name of kernelScalars) {
    const s = kernelScalar[name];
    const ld =
      name === 'bool'
        ? '(double)(v != 0)'
        : name === 'float16'
          ? '(double)vram_f16_to_float(v)'
          : name === 'bfloat16'
            ? '(double)vram_bf16_to_float(v)'
            : '(double)v';
    lines.push(`static __device__ __forceinline__ double ${s.load}(${s.storage} v) { return ${ld}; }`);
    let st: string;
    if (name === 'bool') st = 'return (unsigned char)(d != 0.0);';
    else if (name === 'float16') st = 'return vram_double_to_f16(d);';
    else if (name === 'bfloat16') st = 'return vram_float_to_bf16((float)d);';
    else if (name === 'float32') st = 'return (float)d;';
    else if (name === 'float64') st = 'return d;';
    else {
      const [lo, hi] = limits[name]!;
      const [dlo, dhi] = thresholds[name]!;
      st = `return d != d ? (${s.storage})0 : d <= ${dlo} ? (${s.storage})${lo} : d >= ${dhi} ? (${s.storage})${hi} : (${s.storage})d;`;
    }
    lines.push(`static __device__ __forceinline__ ${s.storage} ${s.store}(double d) { ${st} }`);
  }
  return lines.join('\n');
}

/**
 * Checks that a dtype name is one of the scalar dtypes the built-in kernels take.
 *
 * @param name The dtype name.
 * @returns The kernel view of it, or undefined for a vector dtype.
 * @throws Never.
 * @example
 * ```ts
 * kernelScalarOf('float3'); // undefined
 * ```
 */
export function kernelScalarOf(name: string): KernelScalar | undefined {
  return Object.hasOwn(kernelScalar, name) ? kernelScalar[name as ScalarName] : undefined;
}
