/**
 * Typed-array access for the emulated kernels: an operand's bytes as the typed array of its
 * component dtype (when its element (0, ..., 0) is aligned to a component), and, per dtype, the
 * JavaScript that loads a stored value as a double and stores a double as `scalar.ts`'s DataView
 * accessors do (floats rounded, integers truncated and saturated, NaN to 0, bool as != 0). The
 * fast paths of the emulated kernels (Note [Emulated kernels at JavaScript speed],
 * docs/design/emulated-kernels.md) read and write through these; typed arrays use the host's byte
 * order, so on a big-endian host `typedOperand` gives undefined and the DataView paths run.
 */
import { hostArrayType, type ScalarName } from '../../array/dtype.js';
import { bfloat16Bits, float16Bits, fromBfloat16Bits, fromFloat16Bits } from '../../array/half.js';
import type { EmulatedOperand } from './emulated-operand.js';
import { layoutOffset } from './kernel-layout.js';
import { int64Of, saturate, uint64Of } from './scalar.js';

/** A typed array of any component dtype. */
export type ComponentArray =
  | Uint8Array
  | Int8Array
  | Int16Array
  | Uint16Array
  | Int32Array
  | Uint32Array
  | BigInt64Array
  | BigUint64Array
  | Float32Array
  | Float64Array;

/** True on a little-endian host, where typed arrays read memory as the DataView accessors (little-endian) do. */
export const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** An operand as a typed array of its components: component `c` of element `e` is `array[index + e * components + c]`. */
export interface TypedOperand {
  readonly array: ComponentArray;
  /** The index of element (0, ..., 0)'s first component. */
  readonly index: number;
}

/**
 * An operand's bytes as a typed array of its component dtype.
 *
 * @param op The operand (from `operands`).
 * @param dtype Its component dtype.
 * @returns The typed array and element (0, ..., 0)'s index, or undefined on a big-endian host or
 *   when element (0, ..., 0) is not aligned to a component (the caller takes its DataView path).
 * @throws Never.
 * @example
 * ```ts
 * const t = typedOperand(x, 'float32'); // t.array[t.index + i] is element i of a contiguous x
 * ```
 */
export function typedOperand(op: EmulatedOperand, dtype: ScalarName): TypedOperand | undefined {
  // The host class of the dtype's components (Uint16Array for float16 and bfloat16, as their bits).
  const C = hostArrayType(dtype);
  const bytes = C.BYTES_PER_ELEMENT;
  const v = op.view;
  const at = v.byteOffset + op.base;
  if (!LITTLE_ENDIAN || at % bytes !== 0) return undefined;
  const start = v.byteOffset + (op.base % bytes);
  return { array: new C(v.buffer, start, Math.floor((v.byteLength - (op.base % bytes)) / bytes)), index: Math.floor(op.base / bytes) };
}

/**
 * The helpers generated code calls, passed to it as `H` (generated code names nothing else but
 * `Math`): conversions of the half types and 64-bit integers, the saturating store, and
 * `layoutOffset` for operands of more than one dimension.
 */
export const typedHelpers = Object.freeze({
  saturate,
  f16: fromFloat16Bits,
  bf16: fromBfloat16Bits,
  toF16: float16Bits,
  toBf16: (x: number): number => bfloat16Bits(Math.fround(x)),
  toI64: int64Of,
  toU64: uint64Of,
  offset: layoutOffset,
});

const LIMITS: Partial<Record<ScalarName, readonly [number, number]>> = {
  int8: [-128, 127],
  uint8: [0, 255],
  int16: [-32768, 32767],
  uint16: [0, 65535],
  int32: [-2147483648, 2147483647],
  uint32: [0, 4294967295],
};

/**
 * The JavaScript that turns a stored component (the text `stored`, e.g. `t0[e0]`) into a double.
 *
 * @param dtype The component dtype.
 * @param stored JavaScript text of the typed array element.
 * @returns JavaScript text of a number.
 * @throws Never.
 * @example
 * ```ts
 * loadSource('bool', 't0[e0]'); // '(t0[e0] !== 0 ? 1 : 0)'
 * ```
 */
export function loadSource(dtype: ScalarName, stored: string): string {
  switch (dtype) {
    case 'bool':
      return `(${stored} !== 0 ? 1 : 0)`;
    case 'int64':
    case 'uint64':
      return `Number(${stored})`;
    case 'float16':
      return `H.f16(${stored})`;
    case 'bfloat16':
      return `H.bf16(${stored})`;
    default:
      return stored;
  }
}

/**
 * The JavaScript that turns a double (the text `value`, a local variable) into the value a typed
 * array of `dtype` stores, converted as `kernelScalar[dtype].write` converts it.
 *
 * @param dtype The component dtype.
 * @param value JavaScript text of a number (evaluated once).
 * @returns JavaScript text.
 * @throws Never.
 * @example
 * ```ts
 * storeSource('int8', 'v'); // 'H.saturate(v, -128, 127)'
 * ```
 */
export function storeSource(dtype: ScalarName, value: string): string {
  const limits = LIMITS[dtype];
  if (limits !== undefined) return `H.saturate(${value}, ${limits[0]}, ${limits[1]})`;
  switch (dtype) {
    case 'bool':
      return `(${value} !== 0 ? 1 : 0)`;
    case 'int64':
      return `H.toI64(${value})`;
    case 'uint64':
      return `H.toU64(${value})`;
    case 'float16':
      return `H.toF16(${value})`;
    case 'bfloat16':
      return `H.toBf16(${value})`;
    default:
      return value;
  }
}
