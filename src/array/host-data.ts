/**
 * Host interchange: the JavaScript data that arrays are made from and read back into. Three forms
 * are accepted for a dtype, as PyCUDA and CuPy accept NumPy arrays:
 *
 * - the dtype's host TypedArray (`hostArrayType`): used as-is, no copy, its bytes viewed. A vector
 *   dtype takes a TypedArray of its component, components last (a Float32Array of x, y, z, x, y,
 *   z, ... for float3, PyCUDA's `to_float3` layout);
 * - raw bytes, an ArrayBuffer or a DataView, in the device's byte order (little-endian, which is
 *   also the host's on every platform Node.js runs CUDA on): a whole number of elements;
 * - nested JavaScript arrays, converted into a new TypedArray with every value checked: nothing is
 *   rounded to an integer, wrapped or clipped. Floats are rounded to the dtype's precision (to
 *   nearest even), which is what storing them as that dtype means.
 *
 * Errors: a wrong kind of input (a TypedArray of another type, a string where a number belongs,
 * ragged nesting) is a TypeError; a bad value or size (an integer out of range, a fraction for an
 * integer dtype, a shape that does not match the data, bytes that are not whole elements) is a
 * RangeError.
 */
import { checkNonNegativeInteger } from '../validate.js';
import {
  dtypeOf,
  hostArrayType,
  type AnyHostTypedArray,
  type ComponentOf,
  type ComponentsOf,
  type DType,
  type DTypeName,
  type HostTypedArray,
  type ScalarName,
  type VectorName,
} from './dtype.js';
import { bfloat16Bits, encodeBfloat16, float16Bits, fromBfloat16Bits, fromFloat16Bits } from './half.js';
import { checkShape, elementCount, formatShape, type Shape } from './shape.js';

/** A value in nested JavaScript data: a number, bigint or boolean, or a further level of arrays. */
export type NestedElement = number | bigint | boolean | NestedArray;

/** Nested JavaScript arrays, as `[[1, 2], [3, 4]]`; rectangular (ragged nesting is a TypeError). */
export type NestedArray = readonly NestedElement[];

/**
 * A Float16Array, named by its shape rather than its class: TypeScript's ES2022 library has no
 * Float16Array, and Node.js 20 none at run time, so vram accepts one where the runtime has it.
 */
export interface Float16ArrayLike extends ArrayBufferView {
  readonly [Symbol.toStringTag]: 'Float16Array';
  readonly length: number;
  readonly [index: number]: number;
}

/** float16-like dtypes also take a Float16Array (never for the others). */
export type Float16Input<N extends DTypeName> = ComponentOf<N> extends 'float16' | 'bfloat16' ? Float16ArrayLike : never;

/** JavaScript data for an array of dtype N: its TypedArray, raw bytes, or nested JavaScript arrays. */
export type HostInput<N extends DTypeName> = HostTypedArray<N> | Float16Input<N> | ArrayBuffer | SharedArrayBuffer | DataView | NestedArray;

/** Host input resolved to bytes: what `hostElements` returns. */
export interface HostElements {
  /** The elements' bytes, as the device holds them. */
  readonly bytes: Uint8Array;
  /** The array's shape, in elements of the dtype (no component dimension). */
  readonly shape: Shape;
  /**
   * False when `bytes` views the caller's own memory (a TypedArray or raw bytes given as-is), so
   * an asynchronous copy must not let the caller change it before the copy has read it; true
   * when vram converted the input into new memory.
   */
  readonly copied: boolean;
}

/** K components of type T, for a vector dtype's element: a pair, a triple or a quadruple. */
export type ComponentTuple<T, K> = K extends 2 ? readonly [T, T] : K extends 3 ? readonly [T, T, T] : readonly [T, T, T, T];

/** What one component accepts: bigint or a safe integer for 64-bit, boolean or 0/1 for bool. */
export type ComponentInput<C extends ScalarName> = C extends 'int64' | 'uint64' ? bigint | number : C extends 'bool' ? boolean | number : number;

/** What one component reads back as: bigint for 64-bit, boolean for bool, else a number. */
export type ComponentOutput<C extends ScalarName> = C extends 'int64' | 'uint64' ? bigint : C extends 'bool' ? boolean : number;

/** One element of dtype N as input (`encodeScalar`): a component value, or a tuple of them for a vector. */
export type ScalarValue<N extends DTypeName> = N extends VectorName
  ? ComponentTuple<ComponentInput<ComponentOf<N>>, ComponentsOf<N>>
  : ComponentInput<N & ScalarName>;

/** One element of dtype N as read back (`decodeElement`). */
export type ElementValue<N extends DTypeName> = N extends VectorName
  ? ComponentTuple<ComponentOutput<ComponentOf<N>>, ComponentsOf<N>>
  : ComponentOutput<N & ScalarName>;

/** The name JavaScript gives a value's class ('Float32Array', 'ArrayBuffer', 'DataView'), across realms. */
function tagOf(value: object): string {
  return Object.prototype.toString.call(value).slice(8, -1);
}

/** A value for a message: the number itself, or what kind of thing it is. */
function describe(value: unknown): string {
  if (typeof value === 'number' || typeof value === 'boolean') return String(value);
  if (typeof value === 'bigint') return `${value}n`;
  if (typeof value === 'string') return `the string ${JSON.stringify(value.length > 20 ? `${value.slice(0, 20)}...` : value)}`;
  if (value === null || value === undefined) return String(value);
  return Array.isArray(value) ? 'an array' : `a ${typeof value === 'object' ? tagOf(value) : typeof value}`;
}

/** Writable slots of any host TypedArray (bigint ones take bigints; `putters` pair them right). */
interface Slots {
  [index: number]: number | bigint;
}

const OK = 0;
const WRONG_TYPE = 1;
const OUT_OF_RANGE = 2;
type PutResult = typeof OK | typeof WRONG_TYPE | typeof OUT_OF_RANGE;

/**
 * Stores one JavaScript value as a component, or says why not. A result code rather than a throw,
 * so the hot loop allocates nothing and the caller, which knows where the value came from, builds
 * the message.
 */
type Put = (dst: Slots, index: number, value: unknown) => PutResult;

function putFloat(dst: Slots, i: number, v: unknown): PutResult {
  if (typeof v !== 'number') return WRONG_TYPE;
  dst[i] = v;
  return OK;
}

function putInteger(min: number, max: number): Put {
  return (dst, i, v) => {
    if (typeof v !== 'number') return WRONG_TYPE;
    // NaN and the infinities fail Number.isInteger: nothing is wrapped or rounded on the way in.
    if (!Number.isInteger(v) || v < min || v > max) return OUT_OF_RANGE;
    dst[i] = v;
    return OK;
  };
}

function putInteger64(signed: boolean): Put {
  return (dst, i, v) => {
    if (typeof v === 'bigint') {
      if ((signed ? BigInt.asIntN(64, v) : BigInt.asUintN(64, v)) !== v) return OUT_OF_RANGE;
      dst[i] = v;
      return OK;
    }
    if (typeof v !== 'number') return WRONG_TYPE;
    // Only safe integers: a larger number may already have lost its low bits.
    if (!Number.isSafeInteger(v) || (!signed && v < 0)) return OUT_OF_RANGE;
    dst[i] = BigInt(v);
    return OK;
  };
}

function putBool(dst: Slots, i: number, v: unknown): PutResult {
  if (typeof v === 'boolean') dst[i] = v ? 1 : 0;
  else if (typeof v !== 'number') return WRONG_TYPE;
  else if (v === 0 || v === 1) dst[i] = v;
  else return OUT_OF_RANGE;
  return OK;
}

function putBits(encode: (x: number) => number): Put {
  return (dst, i, v) => {
    if (typeof v !== 'number') return WRONG_TYPE;
    dst[i] = encode(v);
    return OK;
  };
}

/** How each component stores a value, and what it accepts (for messages). */
const components: { readonly [C in ScalarName]: { readonly put: Put; readonly accepts: string } } = {
  bool: { put: putBool, accepts: 'true, false, 0 or 1' },
  int8: { put: putInteger(-0x80, 0x7f), accepts: 'whole numbers in [-128, 127]' },
  uint8: { put: putInteger(0, 0xff), accepts: 'whole numbers in [0, 255]' },
  int16: { put: putInteger(-0x8000, 0x7fff), accepts: 'whole numbers in [-32768, 32767]' },
  uint16: { put: putInteger(0, 0xffff), accepts: 'whole numbers in [0, 65535]' },
  int32: { put: putInteger(-0x80000000, 0x7fffffff), accepts: 'whole numbers in [-2147483648, 2147483647]' },
  uint32: { put: putInteger(0, 0xffffffff), accepts: 'whole numbers in [0, 4294967295]' },
  int64: { put: putInteger64(true), accepts: 'bigints in [-2^63, 2^63 - 1] or safe integers' },
  uint64: { put: putInteger64(false), accepts: 'bigints in [0, 2^64 - 1] or safe integers >= 0' },
  float16: { put: putBits(float16Bits), accepts: 'numbers' },
  bfloat16: { put: putBits(bfloat16Bits), accepts: 'numbers' },
  float32: { put: putFloat, accepts: 'numbers' },
  float64: { put: putFloat, accepts: 'numbers' },
};

/** Throws the error a Put result stands for. */
function rejectValue(dt: DType, result: PutResult, value: unknown, where: string): never {
  const message = `${dt.name} values must be ${components[dt.component].accepts}: ${where} is ${describe(value)}`;
  throw result === WRONG_TYPE ? new TypeError(message) : new RangeError(message);
}

/** 'data[1][0]': where in the nested input a value sits. */
function pathOf(path: readonly number[], last?: number): string {
  let s = 'data';
  for (const i of path) s += `[${i}]`;
  return last === undefined ? s : `${s}[${last}]`;
}

/**
 * Checks that `values` component values fit `shape` (given) or infers the shape (n,), and returns
 * it. `bytes`, for raw input, goes into the message so the count can be checked by hand.
 */
function resolveShape(dt: DType, given: Shape | undefined, values: number, bytes?: number): Shape {
  const c = dt.components;
  const have = bytes === undefined ? `${values}` : `${bytes} bytes = ${values} ${dt.component} values`;
  if (given !== undefined) {
    const count = elementCount(given);
    if (count * c !== values) {
      throw new RangeError(
        `shape ${formatShape(given)} holds ${count} ${dt.name} elements` + `${c > 1 ? ` = ${count * c} ${dt.component} values` : ''}; the data has ${have}`,
      );
    }
    return given;
  }
  if (values % c !== 0) {
    throw new RangeError(`${have} ${dt.component} values are not a whole number of ${dt.name} elements (${c} each)`);
  }
  return Object.freeze([values / c]);
}

/** bool is one byte, 0 or 1 (C++'s representation); any other byte is a RangeError, not 'true'. */
function checkBoolBytes(bytes: Uint8Array): void {
  for (let i = 0; i < bytes.length; i++) {
    if (bytes[i]! > 1) throw new RangeError(`bool values must be 0 or 1: value ${bytes[i]} at index ${i}`);
  }
}

function hostClassName(dt: DType): string {
  return hostArrayType(dt).name;
}

/** The Float16Array class where the runtime has one (Node.js 24+); never required. */
function float16ArrayClass(): (new (values: ArrayLike<number>) => Float16ArrayLike) | undefined {
  return (globalThis as { Float16Array?: new (values: ArrayLike<number>) => Float16ArrayLike }).Float16Array;
}

function fromTypedArray(dt: DType, input: ArrayBufferView & { readonly length: number }, given: Shape | undefined): HostElements {
  const tag = tagOf(input);
  const isFloat16 = dt.component === 'float16' || dt.component === 'bfloat16';
  if (tag === hostClassName(dt)) {
    const shape = resolveShape(dt, given, input.length);
    const bytes = new Uint8Array(input.buffer, input.byteOffset, input.byteLength);
    if (dt.kind === 'bool') checkBoolBytes(bytes);
    return { bytes, shape, copied: false };
  }
  if (tag === 'Float16Array' && isFloat16) {
    const shape = resolveShape(dt, given, input.length);
    if (dt.component === 'float16') {
      // A Float16Array's bytes ARE float16 bits: viewed, not copied.
      return { bytes: new Uint8Array(input.buffer, input.byteOffset, input.byteLength), shape, copied: false };
    }
    const bits = encodeBfloat16(input as Float16ArrayLike);
    return { bytes: new Uint8Array(bits.buffer), shape, copied: true };
  }
  throw new TypeError(
    `${dt.name} needs a ${hostClassName(dt)}${isFloat16 ? ' (of raw bits) or a Float16Array' : ''}` +
      `${dt.components > 1 ? ` of its ${dt.component} components` : ''}, got ${tag}`,
  );
}

function fromRawBytes(dt: DType, bytes: Uint8Array, given: Shape | undefined): HostElements {
  if (bytes.byteLength % dt.byteSize !== 0) {
    throw new RangeError(`${bytes.byteLength} bytes are not a whole number of ${dt.name} elements (${dt.byteSize} bytes each)`);
  }
  const shape = resolveShape(dt, given, bytes.byteLength / (dt.byteSize / dt.components), bytes.byteLength);
  if (dt.kind === 'bool') checkBoolBytes(bytes);
  return { bytes, shape, copied: false };
}

/** The dimensions of nested data, read down its first entries (the rest are checked as it is filled). */
function nestedDims(data: NestedArray): number[] {
  const dims: number[] = [];
  let level: unknown = data;
  while (Array.isArray(level)) {
    dims.push(level.length);
    if (level.length === 0) break;
    level = level[0];
  }
  return dims;
}

/**
 * Copies rectangular nested data of dimensions `dims` into `dst`, checking every entry; returns
 * the next index. `path` holds the indices down to `level`, for messages only.
 */
function fillNested(dt: DType, level: readonly unknown[], dims: readonly number[], depth: number, dst: Slots, index: number, put: Put, path: number[]): number {
  if (level.length !== dims[depth]) {
    throw new TypeError(`ragged nesting: ${pathOf(path)} has ${level.length} entries where ` + `${pathOf(path.map(() => 0))} has ${dims[depth]}`);
  }
  const leaf = depth === dims.length - 1;
  for (let i = 0; i < level.length; i++) {
    const v = level[i];
    if (Array.isArray(v) !== !leaf) {
      throw new TypeError(
        `ragged nesting: ${pathOf(path, i)} is ${leaf ? 'an array' : describe(v)} where ` +
          `${pathOf(
            path.map(() => 0),
            0,
          )} is ${leaf ? 'a value' : 'an array'}`,
      );
    }
    if (leaf) {
      const result = put(dst, index, v);
      if (result !== OK) rejectValue(dt, result, v, pathOf(path, i));
      index++;
    } else {
      path.push(i);
      index = fillNested(dt, v as readonly unknown[], dims, depth + 1, dst, index, put, path);
      path.pop();
    }
  }
  return index;
}

function fromNested(dt: DType, data: NestedArray, given: Shape | undefined): HostElements {
  const dims = nestedDims(data);
  let elementShape: Shape = dims;
  const c = dt.components;
  // [] has no component level to see: zero elements of any dtype.
  if (c > 1 && !(dims.length === 1 && dims[0] === 0)) {
    if (dims[dims.length - 1] !== c) {
      throw new RangeError(
        `${dt.name} elements are arrays of ${c} ${dt.component} components: ` + `${pathOf(dims.slice(0, -1).map(() => 0))} has ${dims[dims.length - 1]}`,
      );
    }
    elementShape = dims.slice(0, -1);
  }
  const values = elementCount(dims);
  const shape = given === undefined ? checkShape(elementShape, "the nested data's shape") : resolveShape(dt, given, values);
  const host = new (hostArrayType(dt))(values);
  fillNested(dt, data, dims, 0, host as Slots, 0, components[dt.component].put, []);
  return { bytes: new Uint8Array(host.buffer, host.byteOffset, host.byteLength), shape, copied: true };
}

/**
 * Resolves host input for a dtype to the bytes of its elements and the array's shape.
 *
 * - A TypedArray must be the dtype's host type (`hostArrayType`); it is viewed, not copied.
 *   float16 and bfloat16 (and half2, bfloat162) also take a Float16Array where the runtime has one
 *   (float16 views its bytes; bfloat16 re-encodes its values: a copy). bool's Uint8Array must hold
 *   only 0 and 1.
 * - An ArrayBuffer, SharedArrayBuffer or DataView is raw bytes, viewed, not copied.
 * - Nested arrays are converted into new memory, every value checked; for a vector dtype the
 *   innermost level is the components (`[[x, y, z], ...]` for float3).
 *
 * `shape` (in elements of the dtype) is inferred when not given: the TypedArray's length divided
 * by the components (a vector dtype's data then has shape (n,)), the raw bytes over the element
 * size, or the nesting without its component level. When given it may reshape the data, but its
 * element count must match the data's exactly.
 *
 * @param dtype The dtype, by name or schema.
 * @param input The data.
 * @param shape The array's shape; inferred when left out.
 * @returns The bytes, the shape, and whether the bytes are a copy.
 * @throws TypeError for an unknown dtype, a TypedArray of the wrong type ("float32 needs a
 *   Float32Array, got Int32Array"), input of no accepted kind, ragged nesting, a nested value of
 *   the wrong type (a string, a bigint for float32), or a shape that is not an array of numbers.
 * @throws RangeError for raw bytes that are not a whole number of elements, a shape that does not
 *   match the data ("shape (2, 3) holds 6 float3 elements = 18 float32 values; the data has 17"),
 *   a bad dimension, an integer out of the dtype's range or a fraction for an integer dtype, a
 *   bool that is not 0 or 1, or innermost arrays of the wrong length for a vector dtype.
 * @example
 * ```ts
 * hostElements(dtypes.float3, new Float32Array(30));        // 120 bytes, shape (10,), not copied
 * hostElements(dtypes.int32, [[1, 2, 3], [4, 5, 6]]);       // 24 bytes, shape (2, 3)
 * hostElements(dtypes.float32, new ArrayBuffer(64), [4, 4]); // shape (4, 4)
 * ```
 */
export function hostElements<N extends DTypeName>(dtype: DType<N> | N, input: HostInput<N>, shape?: Shape): HostElements {
  const dt: DType = dtypeOf(dtype);
  const given = shape === undefined ? undefined : checkShape(shape);
  const value: unknown = input;
  if (Array.isArray(value)) return fromNested(dt, value as NestedArray, given);
  if (typeof value === 'object' && value !== null) {
    const tag = tagOf(value);
    if (tag === 'ArrayBuffer' || tag === 'SharedArrayBuffer') {
      return fromRawBytes(dt, new Uint8Array(value as ArrayBufferLike), given);
    }
    if (tag === 'DataView') {
      const view = value as DataView;
      return fromRawBytes(dt, new Uint8Array(view.buffer, view.byteOffset, view.byteLength), given);
    }
    if (ArrayBuffer.isView(value)) return fromTypedArray(dt, value as AnyHostTypedArray, given);
  }
  throw new TypeError(`${dt.name} data must be a ${hostClassName(dt)}, an ArrayBuffer, a DataView or nested arrays, ` + `got ${describe(value)}`);
}

/**
 * The host-side shape of an array: for a vector dtype, the array's shape with the components
 * appended, as the host TypedArray lays them out ((N, 3) for float3, as PyCUDA's to_float3).
 *
 * @param dtype The dtype.
 * @param shape The array's shape, in elements.
 * @returns The shape in component values, frozen.
 * @throws Never.
 * @example
 * ```ts
 * hostShape(dtypes.float3, [10]);   // [10, 3]
 * hostShape(dtypes.float32, [10]);  // [10]
 * ```
 */
export function hostShape(dtype: DType, shape: Shape): Shape {
  return dtype.components === 1 ? shape : Object.freeze([...shape, dtype.components]);
}

/**
 * A new, zeroed TypedArray of the dtype's host type for `count` elements (count * components values).
 *
 * @param dtype The dtype.
 * @param count Elements.
 * @returns The TypedArray.
 * @throws TypeError if `count` is not a number; RangeError if it is not a whole number >= 0.
 * @example
 * ```ts
 * allocateHost(dtypes.float3, 10); // Float32Array(30)
 * ```
 */
export function allocateHost<N extends DTypeName>(dtype: DType<N>, count: number): HostTypedArray<N> {
  const dt = dtypeOf(dtype);
  const n = checkNonNegativeInteger(count, 'count');
  return new (hostArrayType(dt))(n * dt.components);
}

/**
 * The dtype's host TypedArray over bytes (read from the device, say): a view when the bytes are
 * aligned for it, else an aligned copy (a Float64Array cannot start at an odd byte).
 *
 * @param dtype The dtype.
 * @param bytes Whole elements of the dtype.
 * @returns The TypedArray (a view of `bytes` when aligned).
 * @throws TypeError if `bytes` is not a Uint8Array; RangeError if it is not a whole number of elements.
 * @example
 * ```ts
 * hostView(dtypes.float32, new Uint8Array(8)); // Float32Array(2), over the same memory
 * ```
 */
export function hostView<N extends DTypeName>(dtype: DType<N>, bytes: Uint8Array): HostTypedArray<N> {
  const dt = dtypeOf(dtype);
  if (!ArrayBuffer.isView(bytes) || tagOf(bytes) !== 'Uint8Array') {
    throw new TypeError(`hostView needs a Uint8Array of bytes, got ${describe(bytes)}`);
  }
  if (bytes.byteLength % dt.byteSize !== 0) {
    throw new RangeError(`${bytes.byteLength} bytes are not a whole number of ${dt.name} elements (${dt.byteSize} bytes each)`);
  }
  const Host = hostArrayType(dt);
  const source = bytes.byteOffset % Host.BYTES_PER_ELEMENT === 0 ? bytes : bytes.slice();
  return new Host(source.buffer, source.byteOffset, source.byteLength / Host.BYTES_PER_ELEMENT);
}

/** Reads one component back as its JavaScript value. */
type Get = (data: ArrayLike<number | bigint>, index: number) => number | bigint | boolean;

function getter(component: ScalarName): Get {
  switch (component) {
    case 'bool':
      return (d, i) => d[i] !== 0;
    case 'float16':
      return (d, i) => fromFloat16Bits(d[i] as number);
    case 'bfloat16':
      return (d, i) => fromBfloat16Bits(d[i] as number);
    default:
      return (d, i) => d[i]!;
  }
}

/** Checks that `data` is the dtype's host TypedArray (the type says so; plain JavaScript may not). */
function checkHostData(dt: DType, data: unknown, what: string): AnyHostTypedArray {
  const tag = typeof data === 'object' && data !== null ? tagOf(data) : describe(data);
  if (tag !== hostClassName(dt)) throw new TypeError(`${what}: ${dt.name} data is a ${hostClassName(dt)}, got ${tag}`);
  return data as AnyHostTypedArray;
}

/**
 * Nested JavaScript arrays from host data (an array's `toArray()`): numbers, bigints for 64-bit
 * dtypes, booleans for bool, decoded numbers for float16 and bfloat16; a vector dtype's elements
 * are arrays of components.
 *
 * @param dtype The dtype.
 * @param data The dtype's host TypedArray, row-major.
 * @param shape The array's shape, in elements; at least one dimension for a scalar dtype.
 * @returns The nested arrays.
 * @throws TypeError if `data` is not the dtype's host TypedArray.
 * @throws RangeError if the shape's element count does not match the data, or the shape is () for a
 *   scalar dtype (one element is a value, not an array: read it with `decodeElement`).
 * @example
 * ```ts
 * toNested(dtypes.int32, new Int32Array([1, 2, 3, 4]), [2, 2]); // [[1, 2], [3, 4]]
 * toNested(dtypes.float2, new Float32Array([1, 2, 3, 4]), [2]); // [[1, 2], [3, 4]]
 * ```
 */
export function toNested<N extends DTypeName>(dtype: DType<N>, data: HostTypedArray<N>, shape: Shape): NestedArray {
  const dt = dtypeOf(dtype);
  const host = checkHostData(dt, data, 'toNested');
  const s = checkShape(shape);
  resolveShape(dt, s, host.length);
  const dims = hostShape(dt, s);
  if (dims.length === 0) {
    throw new RangeError(`toNested: shape () holds one ${dt.name} value, not an array; read it with decodeElement`);
  }
  const get = getter(dt.component);
  let index = 0;
  const build = (depth: number): NestedElement[] => {
    const out = new Array<NestedElement>(dims[depth]!);
    for (let i = 0; i < out.length; i++) out[i] = depth === dims.length - 1 ? get(host, index++) : build(depth + 1);
    return out;
  };
  return build(0);
}

/**
 * One element of host data, as its JavaScript value (an array of components for a vector dtype).
 *
 * @param dtype The dtype.
 * @param data The dtype's host TypedArray.
 * @param index The element's index in it (flat, in elements).
 * @returns Its value: number, bigint (64-bit), boolean (bool), or a tuple of those.
 * @throws TypeError if `data` is not the dtype's host TypedArray; RangeError if `index` is not a
 *   whole number below the element count.
 * @example
 * ```ts
 * decodeElement(dtypes.float3, new Float32Array([1, 2, 3, 4, 5, 6]), 1); // [4, 5, 6]
 * ```
 */
export function decodeElement<N extends DTypeName>(dtype: DType<N>, data: HostTypedArray<N>, index: number): ElementValue<N> {
  const dt = dtypeOf(dtype);
  const host = checkHostData(dt, data, 'decodeElement');
  const c = dt.components;
  const i = checkNonNegativeInteger(index, 'index');
  if ((i + 1) * c > host.length) {
    throw new RangeError(`index ${i} is past the end of ${host.length / c} ${dt.name} elements`);
  }
  const get = getter(dt.component);
  if (c === 1) return get(host, i) as ElementValue<N>;
  const out: (number | bigint | boolean)[] = [];
  for (let k = 0; k < c; k++) out.push(get(host, i * c + k));
  return out as unknown as ElementValue<N>;
}

/**
 * The bytes of one element of the dtype (for filling an array with it), every component checked
 * as `hostElements` checks nested data.
 *
 * @param dtype The dtype.
 * @param value A number (bigint or safe integer for 64-bit, boolean or 0/1 for bool), or for a
 *   vector dtype an array of exactly its components.
 * @returns `dtype.byteSize` new bytes.
 * @throws TypeError for a value of the wrong type (a number for float3, a string); RangeError for
 *   an out-of-range or fractional integer, or the wrong number of components.
 * @example
 * ```ts
 * encodeScalar(dtypes.float3, [1, 2, 3]); // 12 bytes
 * encodeScalar(dtypes.int64, 2n ** 40n);  // 8 bytes
 * ```
 */
export function encodeScalar<N extends DTypeName>(dtype: DType<N>, value: ScalarValue<N>): Uint8Array {
  const dt = dtypeOf(dtype);
  const c = dt.components;
  const v: unknown = value;
  const parts: readonly unknown[] = c === 1 ? [v] : Array.isArray(v) ? v : [];
  if (c > 1 && !Array.isArray(v)) {
    throw new TypeError(`a ${dt.name} value is an array of ${c} ${dt.component} components, got ${describe(v)}`);
  }
  if (parts.length !== c) {
    throw new RangeError(`a ${dt.name} value has ${c} components, got ${parts.length}`);
  }
  const host = new (hostArrayType(dt))(c);
  const put = components[dt.component].put;
  for (let k = 0; k < c; k++) {
    const result = put(host as Slots, k, parts[k]);
    if (result !== OK) rejectValue(dt, result, parts[k], c === 1 ? 'the value' : `component ${k}`);
  }
  return new Uint8Array(host.buffer);
}

/**
 * A Float16Array of `values` where the runtime has the class (Node.js 24+), for tests and callers
 * that want to hand one over without naming a class Node.js 20 lacks.
 *
 * @param values The numbers.
 * @returns The Float16Array, or undefined where the runtime has none.
 * @throws Never.
 * @example
 * ```ts
 * const f16 = makeFloat16Array([1, 2]);
 * if (f16) hostElements(dtypes.float16, f16);
 * ```
 */
export function makeFloat16Array(values: ArrayLike<number>): Float16ArrayLike | undefined {
  const Float16 = float16ArrayClass();
  return Float16 === undefined ? undefined : new Float16(values);
}
