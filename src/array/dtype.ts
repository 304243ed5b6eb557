/**
 * dtypes: the element types of vram's arrays, as schemas (TypeGPU's `vec3f` is the model). A
 * schema is a value that carries what a kernel sees (CUDA's sizeof and alignof, its C type) and a
 * type the compiler tells apart: `DType<'float3'>` is not a `DType<'float32'>`, so a
 * `DeviceArray<'float3'>` cannot be passed where a `DeviceArray<'float32'>` is expected.
 *
 * The vector types follow CUDA's vector_types.h to the byte, because an array of them is handed
 * to kernels as-is: 2- and 4-component vectors are aligned to their size (at most 16: `int4`,
 * `float4`, `double2`, `longlong2` are 16-aligned), 3-component vectors only to their component
 * (`float3` is 12 bytes, 4-aligned; `double3` 24 bytes, 8-aligned), and `half2`/`bfloat162` are
 * 4 bytes, 4-aligned. Every vector is exactly its components, with no padding.
 */

/** The scalar dtypes. float16 is CUDA's `__half`, bfloat16 its `__nv_bfloat16`. */
export type ScalarName =
  | 'bool'
  | 'int8'
  | 'uint8'
  | 'int16'
  | 'uint16'
  | 'int32'
  | 'uint32'
  | 'int64'
  | 'uint64'
  | 'float16'
  | 'bfloat16'
  | 'float32'
  | 'float64';

/** CUDA's vector types (vector_types.h, cuda_fp16.h, cuda_bf16.h), by CUDA's names. */
export type VectorName =
  | 'char2'
  | 'char3'
  | 'char4'
  | 'uchar2'
  | 'uchar3'
  | 'uchar4'
  | 'short2'
  | 'short3'
  | 'short4'
  | 'ushort2'
  | 'ushort3'
  | 'ushort4'
  | 'int2'
  | 'int3'
  | 'int4'
  | 'uint2'
  | 'uint3'
  | 'uint4'
  | 'longlong2'
  | 'longlong3'
  | 'ulonglong2'
  | 'ulonglong3'
  | 'float2'
  | 'float3'
  | 'float4'
  | 'double2'
  | 'double3'
  | 'half2'
  | 'bfloat162';

/** Every dtype name. */
export type DTypeName = ScalarName | VectorName;

/**
 * The dtype of an array whose factory is given none (`DeviceArray.zeros([3, 4])`, `empty`, `ones`,
 * `full`, and `from` of plain JavaScript numbers): float32, as PyTorch's default. GPU arithmetic is
 * float32-first (float64 runs at 1/2 to 1/64 of its rate, by GPU), half the bytes move per element,
 * and it is what kernels and other libraries (DLPack consumers, cuBLAS calls) most often expect.
 * NumPy's float64 default follows the host's double; ask for it with `'float64'`. Integers in plain
 * data do not change it (PyTorch would infer int64 from `[1, 2, 3]`): name an integer dtype, or
 * pass bigints (int64).
 *
 * @example
 * ```ts
 * DeviceArray.zeros([3, 4]).dtype.name === defaultDType; // 'float32'
 * ```
 */
export const defaultDType = 'float32' satisfies ScalarName;

/** The type of `defaultDType`: what a factory's dtype parameter is when left out. */
export type DefaultDType = typeof defaultDType;

/** What a component is: how host values are checked and converted. */
export type DTypeKind = 'bool' | 'int' | 'uint' | 'float';

/** The C type, size and kind of each scalar: the one table that the rest is derived from. */
const scalarTable = {
  bool: { byteSize: 1, cType: 'bool', kind: 'bool' },
  int8: { byteSize: 1, cType: 'signed char', kind: 'int' },
  uint8: { byteSize: 1, cType: 'unsigned char', kind: 'uint' },
  int16: { byteSize: 2, cType: 'short', kind: 'int' },
  uint16: { byteSize: 2, cType: 'unsigned short', kind: 'uint' },
  int32: { byteSize: 4, cType: 'int', kind: 'int' },
  uint32: { byteSize: 4, cType: 'unsigned int', kind: 'uint' },
  int64: { byteSize: 8, cType: 'long long', kind: 'int' },
  uint64: { byteSize: 8, cType: 'unsigned long long', kind: 'uint' },
  float16: { byteSize: 2, cType: '__half', kind: 'float' },
  bfloat16: { byteSize: 2, cType: '__nv_bfloat16', kind: 'float' },
  float32: { byteSize: 4, cType: 'float', kind: 'float' },
  float64: { byteSize: 8, cType: 'double', kind: 'float' },
} as const satisfies Record<ScalarName, { byteSize: 1 | 2 | 4 | 8; cType: string; kind: DTypeKind }>;

/**
 * Each vector dtype's component and count (its C type is its name): the table the vector schemas
 * and the types `ComponentOf`/`ComponentsOf` are built from.
 *
 * @example
 * ```ts
 * vectorTable.float3; // ['float32', 3]
 * ```
 */
export const vectorTable = {
  char2: ['int8', 2],
  char3: ['int8', 3],
  char4: ['int8', 4],
  uchar2: ['uint8', 2],
  uchar3: ['uint8', 3],
  uchar4: ['uint8', 4],
  short2: ['int16', 2],
  short3: ['int16', 3],
  short4: ['int16', 4],
  ushort2: ['uint16', 2],
  ushort3: ['uint16', 3],
  ushort4: ['uint16', 4],
  int2: ['int32', 2],
  int3: ['int32', 3],
  int4: ['int32', 4],
  uint2: ['uint32', 2],
  uint3: ['uint32', 3],
  uint4: ['uint32', 4],
  longlong2: ['int64', 2],
  longlong3: ['int64', 3],
  ulonglong2: ['uint64', 2],
  ulonglong3: ['uint64', 3],
  float2: ['float32', 2],
  float3: ['float32', 3],
  float4: ['float32', 4],
  double2: ['float64', 2],
  double3: ['float64', 3],
  half2: ['float16', 2],
  bfloat162: ['bfloat16', 2],
} as const satisfies Record<VectorName, readonly [ScalarName, 2 | 3 | 4]>;

/** The component of a dtype: the dtype itself for a scalar, `'float32'` for `'float3'`. */
export type ComponentOf<N extends DTypeName> = N extends VectorName ? (typeof vectorTable)[N][0] : N;

/** The number of components of a dtype: 1 for a scalar, 3 for `'float3'`. */
export type ComponentsOf<N extends DTypeName> = N extends VectorName ? (typeof vectorTable)[N][1] : 1;

/** A dtype schema: a value, and a type the compiler tells apart from every other dtype's. */
export interface DType<N extends DTypeName = DTypeName> {
  /** The dtype's name, e.g. `'float3'`. */
  readonly name: N;
  /** sizeof in CUDA: float3 12, float4 16, double3 24, char3 3, half2 4. */
  readonly byteSize: number;
  /** alignof in CUDA: float3 4, float4 16, float2 8, double2 16, short3 2. */
  readonly alignment: number;
  /** Components per element: 1 for a scalar. */
  readonly components: ComponentsOf<N>;
  /** The component's scalar dtype: float3 -> 'float32', half2 -> 'float16', char3 -> 'int8'. */
  readonly component: ComponentOf<N>;
  /** The C/CUDA type name: 'float3', 'float', '__half', '__nv_bfloat16', 'long long', 'bool'. */
  readonly cType: string;
  /** The component's kind. */
  readonly kind: DTypeKind;
}

/** Every name, scalars first, in the order the tables list them (error messages use it). */
const names: readonly DTypeName[] = Object.freeze([...(Object.keys(scalarTable) as ScalarName[]), ...(Object.keys(vectorTable) as VectorName[])]);

function makeDType(name: DTypeName): DType {
  const [component, components] = name in vectorTable ? vectorTable[name as VectorName] : [name as ScalarName, 1 as const];
  const scalar = scalarTable[component];
  const byteSize = scalar.byteSize * components;
  // vector_types.h: 3-vectors have no __align__ (their component's alignment); 2- and 4-vectors
  // are __align__(sizeof), capped at 16 (the largest CUDA gives, e.g. longlong2, double2, int4).
  const alignment = components === 3 ? scalar.byteSize : Math.min(byteSize, 16);
  return Object.freeze({
    name,
    byteSize,
    alignment,
    components,
    component,
    cType: components === 1 ? scalar.cType : name,
    kind: scalar.kind,
  }) as DType;
}

/**
 * Every dtype's schema, by name (frozen). `dtypes.float3` is the `DType<'float3'>`.
 *
 * @example
 * ```ts
 * dtypes.float3.byteSize;  // 12
 * dtypes.float4.alignment; // 16
 * ```
 */
export const dtypes: { readonly [K in DTypeName]: DType<K> } = Object.freeze(
  Object.fromEntries(names.map((n) => [n, makeDType(n)])) as { readonly [K in DTypeName]: DType<K> },
);

/** The schemas by name, for `dtypeOf`. */
const byName: ReadonlyMap<string, DType<DTypeName>> = new Map(Object.entries(dtypes));
/** The name `dtypeOf` last found, and its dtype. */
let lastAsked: string = 'float32';
let lastFound: DType<DTypeName> = dtypes.float32;

/**
 * True when `value` is a dtype name vram knows.
 *
 * @param value Anything.
 * @returns Whether it is one of the `DTypeName`s.
 * @throws Never.
 * @example
 * ```ts
 * isDTypeName('float3'); // true
 * isDTypeName('float5'); // false
 * ```
 */
export function isDTypeName(value: unknown): value is DTypeName {
  // Object.hasOwn, not `in`: 'toString' is not a dtype.
  return typeof value === 'string' && Object.hasOwn(dtypes, value);
}

/**
 * The schema for a dtype given by name or by schema. A schema is resolved by its name to vram's
 * own (frozen) schema, so a hand-made object cannot bring wrong sizes along.
 *
 * @param dtype A name (`'float32'`) or a schema (`dtypes.float32`).
 * @returns vram's schema for it.
 * @throws TypeError if it is neither a known name nor an object with one, listing the known dtypes.
 * @example
 * ```ts
 * dtypeOf('float3').byteSize; // 12
 * dtypeOf(dtypes.int8).name;  // 'int8'
 * ```
 */
export function dtypeOf<N extends DTypeName>(dtype: N | DType<N>): DType<N> {
  // The allocation path asks for one dtype over and over: the last one found answers first.
  if (dtype === lastAsked) return lastFound as DType<DTypeName> as DType<N>;
  const name: unknown = typeof dtype === 'object' && dtype !== null ? (dtype as { name?: unknown }).name : dtype;
  const found = typeof name === 'string' ? byName.get(name) : undefined;
  if (found !== undefined) {
    if (typeof dtype === 'string') {
      lastAsked = dtype;
      lastFound = found;
    }
    return found as DType<DTypeName> as DType<N>;
  }
  if (!isDTypeName(name)) {
    const shown = typeof name === 'string' ? `'${name}'` : typeof dtype === 'object' && dtype !== null ? 'an object with no dtype name' : String(dtype);
    throw new TypeError(`unknown dtype ${shown}; the known dtypes are ${names.join(', ')}`);
  }
  return dtypes[name] as DType<DTypeName> as DType<N>;
}

/** The TypedArray that holds each scalar on the host (the map `HostTypedArray<N>` reads). */
export interface ScalarHostArrays {
  bool: Uint8Array;
  int8: Int8Array;
  uint8: Uint8Array;
  int16: Int16Array;
  uint16: Uint16Array;
  int32: Int32Array;
  uint32: Uint32Array;
  int64: BigInt64Array;
  uint64: BigUint64Array;
  float16: Uint16Array;
  bfloat16: Uint16Array;
  float32: Float32Array;
  float64: Float64Array;
}

/**
 * The TypedArray that holds a dtype's components on the host: Float32Array for float32 and
 * float2/3/4, BigInt64Array for int64 and longlong2/3, Uint8Array (0/1) for bool, Uint16Array
 * (raw bits) for float16, bfloat16, half2 and bfloat162.
 */
export type HostTypedArray<N extends DTypeName> = ScalarHostArrays[ComponentOf<N>];

/** Any of the host TypedArrays. */
export type AnyHostTypedArray = ScalarHostArrays[ScalarName];

/** A TypedArray class: what `hostArrayType` returns, e.g. `Float32Array`. */
export interface TypedArrayClass<T extends AnyHostTypedArray> {
  /** A zero-filled array of `length` values. */
  new (length: number): T;
  /** A view over `buffer`. */
  new (buffer: ArrayBufferLike, byteOffset?: number, length?: number): T;
  /** Bytes per value. */
  readonly BYTES_PER_ELEMENT: number;
  /** The class's name, e.g. 'Float32Array' (error messages use it). */
  readonly name: string;
}

const hostClasses: { readonly [K in ScalarName]: TypedArrayClass<ScalarHostArrays[K]> } = Object.freeze({
  bool: Uint8Array,
  int8: Int8Array,
  uint8: Uint8Array,
  int16: Int16Array,
  uint16: Uint16Array,
  int32: Int32Array,
  uint32: Uint32Array,
  int64: BigInt64Array,
  uint64: BigUint64Array,
  float16: Uint16Array,
  bfloat16: Uint16Array,
  float32: Float32Array,
  float64: Float64Array,
});

/**
 * The TypedArray class that holds a dtype's components on the host.
 *
 * @param dtype A name or schema.
 * @returns The class: `Float32Array` for 'float3', `Uint16Array` for 'float16', `BigInt64Array` for 'int64'.
 * @throws TypeError for an unknown dtype.
 * @example
 * ```ts
 * const Host = hostArrayType('float3'); // Float32Array
 * const xyz = new Host(3 * 100);        // 100 float3 elements
 * ```
 */
export function hostArrayType<N extends DTypeName>(dtype: N | DType<N>): TypedArrayClass<HostTypedArray<N>> {
  return hostClasses[dtypeOf(dtype).component] as TypedArrayClass<AnyHostTypedArray> as TypedArrayClass<HostTypedArray<N>>;
}
