/**
 * NumPy's type promotion (`numpy.result_type` of two arrays, NumPy 2's rules: no value-based
 * casting): the dtype an operation of two arrays computes into when no `out` names one. The
 * result holds every value of both inputs where one dtype can: bool gives way to anything; ints
 * widen; a signed int and an unsigned one meet in a signed int twice the unsigned one's size
 * (int64 and uint64 in float64); an int and a float meet in the smallest float, no smaller than
 * the float given, whose significand holds the int exactly (int8 and float16 in float16, int16 and
 * float16 in float32, int32 and float32 in float64, int64 in float64 by NumPy's fiat). bfloat16,
 * which NumPy lacks, is promoted as ml_dtypes does: with float16 in float32, as float16 with ints.
 */
import type { DType, ScalarName } from './dtype.js';
import { dtypeOf } from './dtype.js';

const floatsBySize: Readonly<Record<number, ScalarName>> = { 2: 'float16', 4: 'float32', 8: 'float64' };
const intsBySize = (signed: boolean): Readonly<Record<number, ScalarName>> =>
  signed ? { 1: 'int8', 2: 'int16', 4: 'int32', 8: 'int64' } : { 1: 'uint8', 2: 'uint16', 4: 'uint32', 8: 'uint64' };

/** The smallest float that holds every int of `bytes` bytes exactly (8-byte ints: float64, as NumPy). */
function floatFor(intBytes: number): number {
  return intBytes === 1 ? 2 : intBytes === 2 ? 4 : 8;
}

/**
 * The dtype NumPy computes `a op b` in, for two scalar dtypes.
 *
 * @param a The first input's dtype.
 * @param b The second's.
 * @returns The promoted dtype.
 * @throws Never (vector dtypes are the caller's to refuse).
 * @example
 * ```ts
 * resultDType(dtypes.int32, dtypes.float32).name; // 'float64', as numpy.result_type
 * ```
 */
export function resultDType(a: DType, b: DType): DType {
  if (a.name === b.name) return a;
  if (a.kind === 'bool') return b;
  if (b.kind === 'bool') return a;
  if (a.kind === 'float' && b.kind === 'float') {
    if (a.byteSize !== b.byteSize) return a.byteSize > b.byteSize ? a : b;
    return dtypeOf('float32'); // float16 and bfloat16: neither holds the other
  }
  if (a.kind === 'float' || b.kind === 'float') {
    const [f, i] = a.kind === 'float' ? [a, b] : [b, a];
    const bytes = Math.max(f.byteSize, floatFor(i.byteSize));
    return bytes === f.byteSize ? f : dtypeOf(floatsBySize[bytes]!);
  }
  if (a.kind === b.kind) return a.byteSize >= b.byteSize ? a : b;
  const [s, u] = a.kind === 'int' ? [a, b] : [b, a];
  if (u.byteSize < s.byteSize) return s;
  return u.byteSize === 8 ? dtypeOf('float64') : dtypeOf(intsBySize(true)[u.byteSize * 2]!);
}
