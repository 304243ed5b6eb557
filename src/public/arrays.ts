/// <reference lib="esnext.disposable" preserve="true" />
// Kept in the .d.ts (preserve), as in index.ts: a consumer that imports only this subpath needs `Disposable` too.
/**
 * `vram/arrays`: the detail under `DeviceArray` and `HostArray` (in the root): dtype tables and
 * their type-level helpers, half-precision encoding, strided layouts and slices, host-data shapes,
 * and the option types of the less common array methods.
 *
 * @module vram/arrays
 */
export { isDTypeName, hostArrayType, vectorTable, defaultDType } from '../array/dtype.js';
export type { DTypeKind, DefaultDType, ComponentOf, ComponentsOf, AnyHostTypedArray, TypedArrayClass, ScalarHostArrays } from '../array/dtype.js';
export { float16Bits, fromFloat16Bits, bfloat16Bits, fromBfloat16Bits, encodeFloat16, decodeFloat16, encodeBfloat16, decodeBfloat16 } from '../array/half.js';
export type { WritableNumbers } from '../array/half.js';
export type {
  NestedArray,
  NestedElement,
  ScalarValue,
  ElementValue,
  Float16ArrayLike,
  Float16Input,
  ComponentTuple,
  ComponentInput,
  ComponentOutput,
} from '../array/host-data.js';
export { StridedArray } from '../array/strided-array.js';
export type { ArrayJSON } from '../array/strided-array.js';
export type { Layout, SliceSpec, SliceRange } from '../array/layout.js';
export type { ShapeInput } from '../array/shape.js';
export type {
  DeviceArrayViewOptions,
  DeviceArrayAsyncOptions,
  PitchedArrayOptions,
  DeviceArrayMemory,
  InferableTypedArray,
  InferredDType,
  DeviceArrayPointerOptions,
  NestedNumbers,
  PeerCopyOptions,
} from '../array/device-array.js';
export type { HostArrayViewOptions, HostArrayOptions, HostArrayLikeOptions } from '../array/host-array.js';
