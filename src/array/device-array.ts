/**
 * DeviceArray: a typed n-dimensional array in device memory. A dtype, a shape, strides in
 * elements and a byte offset over a buffer: a DeviceBuffer it allocated from the current resource
 * (or the one given) and owns, another array's buffer (a view: slices, reshapes, transposes), a
 * pitched 2D allocation, or a mapped HostBuffer's device address (`HostArray.deviceView()`).
 *
 * Lifetimes: an array that allocated its buffer owns it and frees it with `free()` or at the end
 * of a `using` scope; the buffer's garbage-collection backstop returns it if the program drops it
 * instead. Views hold the buffer (so it stays reachable, and the backstop leaves it alone, while
 * any view is), never own it, and throw UseAfterFreeError once the owner freed it.
 *
 * Copies honour the layout: see strided-copy.ts for which copy path each layout takes.
 */
import type { Ptr } from '../backend/backend.js';
import { Device } from '../device.js';
import { NotSupportedError, UseAfterFreeError, VramStateError } from '../errors.js';
import { ArenaResource } from '../resource/suballoc/arena.js';
import { DeviceMemory } from '../buffer/device-memory.js';
import { bytesOf, checkWritableMemory } from '../buffer/copy-planning.js';
import { DeviceBuffer, PitchedDeviceBuffer, type AllocateAsyncOptions, type DeviceBufferOptions } from '../buffer/device-buffer.js';
import { ForeignDeviceBuffer, type ForeignPointerOptions } from '../buffer/foreign-device-buffer.js';
import { HostBuffer } from '../buffer/host-buffer.js';
import type { AbortSignalLike } from '../resource/waiting.js';
import { ArenaPitchedBuffer } from '../buffer/arena-pitched-buffer.js';
import { type MemoryResource } from '../resource/resource.js';
import { defaultStream, type StreamRef } from '../stream.js';
import { Stream, streamHandleOf } from '../stream.js';
import { refuseDuringCapture } from '../graphs/sessions.js';
import { addressOf, waitForUsesOn } from '../buffer/lifetime.js';
import { checkNonNegativeInteger } from '../validate.js';
import { readOptions } from '../util/options.js';
import { defaultDType, dtypeOf, type DefaultDType, type DType, type DTypeName, type HostTypedArray } from './dtype.js';
import { allocateHost, encodeScalar, hostElements, type Float16ArrayLike, type HostInput, type NestedArray, type ScalarValue } from './host-data.js';
import { byteSpan, checkLayoutFits, checkStrides, contiguousLayout, gcd, type Layout } from './layout.js';
import { StridedArray } from './strided-array.js';
import { checkShape, elementCount, formatShape, type Shape, type ShapeInput } from './shape.js';
import { recentLayout, recentLayoutOf } from './recent-layouts.js';
import {
  copyOnDevice,
  pinnedSink,
  pinnedSource,
  readElements,
  readElementsAsync,
  streamDone,
  writeElements,
  writeElementsAsync,
  type HostBytes,
} from './strided-copy.js';

/** Options of `DeviceArray.to`. */
export interface PeerCopyOptions {
  /** A stream of the destination device: the copy and the new array's allocation are queued on it (default its legacy default stream). */
  readonly stream?: Stream;
  /** The destination device's resource to allocate from (default its current resource). */
  readonly resource?: MemoryResource;
}

/** Where a new array's memory comes from. */
export interface DeviceArrayOptions {
  /** The resource to allocate from; default the device's current resource (`getCurrentResource`). */
  readonly resource?: MemoryResource;
  /** The stream it is allocated on and freed on, and the default stream of its async copies. */
  readonly stream?: StreamRef;
  /** The device, when no resource is named (device 0 by default). */
  readonly device?: Device | number;
  /**
   * May be spilled to pinned host memory when the device runs short and brought back, at the same
   * address, by the next operation that uses it (see `DeviceBufferOptions.spillable`).
   */
  readonly spillable?: boolean;
}

/**
 * Options of `DeviceArray.emptyAsync` and `zerosAsync`: those of `empty`, and whether and how long
 * to wait for memory (as `DeviceBuffer.allocateAsync`).
 */
export interface DeviceArrayAsyncOptions extends DeviceArrayOptions {
  /** Wait for memory other tasks free instead of failing (default false). */
  readonly wait?: boolean;
  /** Ends the wait: the promise rejects with `signal.reason`. */
  readonly signal?: AbortSignalLike;
  /** The most milliseconds to wait (default Infinity). */
  readonly timeout?: number;
}

/** Options of `DeviceArray.from`: the dtype (inferred from a TypedArray) and shape of the data. */
export interface DeviceArrayFromOptions<N extends DTypeName> extends DeviceArrayOptions {
  /** The element type; inferred from a TypedArray's class when left out (Float32Array -> float32). */
  readonly dtype?: N | DType<N>;
  /** The array's shape in elements (one number for one dimension); inferred from the data when left out. */
  readonly shape?: ShapeInput;
}

/** Plain JavaScript numbers, nested or not (`[1, 2, 3]`, `[[1, 2], [3, 4]]`): `from` gives them the default dtype. */
export type NestedNumbers = readonly (number | NestedNumbers)[];

/** Options of `DeviceArray.pitched`. */
export interface PitchedArrayOptions {
  /** An ArenaResource to take a pitched block from; default cuMemAllocPitch on the device. */
  readonly resource?: ArenaResource;
  /** The device, for cuMemAllocPitch (device 0 by default). */
  readonly device?: Device | number;
  /** The stream an arena block is allocated and freed on, and the default stream of async copies. */
  readonly stream?: StreamRef;
}

/** Options of `DeviceArray.fromBuffer`: how the array lies in the memory. */
export interface DeviceArrayViewOptions<N extends DTypeName> {
  /** The element type. */
  readonly dtype: N | DType<N>;
  /** The shape; default as many whole elements as fit after `byteOffset`, in one dimension. */
  readonly shape?: Shape;
  /** Strides in elements; default row-major. */
  readonly strides?: readonly number[];
  /** Byte offset of element (0, ..., 0); a multiple of the dtype's alignment. Default 0. */
  readonly byteOffset?: number;
  /** For a mapped HostBuffer: the device whose kernels read it (device 0 by default). */
  readonly device?: Device | number;
  /** The default stream of the array's async copies; default the buffer's own stream. */
  readonly stream?: StreamRef;
}

/** Options of `DeviceArray.fromPointer`: the foreign memory's owner and release, and the layout in it. */
export interface DeviceArrayPointerOptions extends ForeignPointerOptions {
  /** Strides in elements; default row-major. Negative strides reach below element (0, ..., 0). */
  readonly strides?: readonly number[];
  /**
   * Byte offset of element (0, ..., 0) from `ptr`; a multiple of the dtype's alignment. Default 0.
   * Elements a negative stride reaches lie between `ptr` and there.
   */
  readonly byteOffset?: number;
  /** The default stream of the array's async copies; default the legacy default stream. */
  readonly stream?: StreamRef;
}

/**
 * Options of the asynchronous copies. Each is queued after the work already on `stream` and
 * resolves when its data has arrived. With pinned memory (a HostArray) or another DeviceArray on
 * the other side, the device copies are queued at call time, so later work on the stream sees the
 * data. With ordinary JavaScript memory a contiguous copy is staged through pinned chunks as
 * earlier chunks complete (at the host's memory bandwidth, never blocking the event loop): queue
 * work that depends on it after awaiting the promise, and leave the JavaScript memory alone until then.
 */
export interface AsyncCopyOptions {
  /** The stream the copies are queued on; default the array's stream. */
  readonly stream?: StreamRef;
}

/** The TypedArrays whose class names a dtype, for `DeviceArray.from` without a dtype. */
export type InferableTypedArray =
  | Float32Array
  | Float64Array
  | Int8Array
  | Uint8Array
  | Int16Array
  | Uint16Array
  | Int32Array
  | Uint32Array
  | BigInt64Array
  | BigUint64Array
  | Float16ArrayLike;

/** The dtype `DeviceArray.from` infers from a TypedArray's class. */
export type InferredDType<T> = T extends Float16ArrayLike
  ? 'float16'
  : T extends Float32Array
    ? 'float32'
    : T extends Float64Array
      ? 'float64'
      : T extends Int8Array
        ? 'int8'
        : T extends Uint8Array
          ? 'uint8'
          : T extends Int16Array
            ? 'int16'
            : T extends Uint16Array
              ? 'uint16'
              : T extends Int32Array
                ? 'int32'
                : T extends Uint32Array
                  ? 'uint32'
                  : T extends BigInt64Array
                    ? 'int64'
                    : T extends BigUint64Array
                      ? 'uint64'
                      : never;

const inferable: Readonly<Record<string, DTypeName>> = Object.freeze({
  Float16Array: 'float16',
  Float32Array: 'float32',
  Float64Array: 'float64',
  Int8Array: 'int8',
  Uint8Array: 'uint8',
  Int16Array: 'int16',
  Uint16Array: 'uint16',
  Int32Array: 'int32',
  Uint32Array: 'uint32',
  BigInt64Array: 'int64',
  BigUint64Array: 'uint64',
});

/**
 * The dtype and bytes of host input for a new array: the dtype given, or the one a TypedArray's
 * class names; plain JavaScript arrays (nested or not) take the default dtype (float32) for
 * numbers, int64 for bigints, bool for booleans, by their first element; raw bytes need the
 * dtype spelled out.
 *
 * @param data The host input.
 * @param dtype The dtype, if given.
 * @param shape The shape, if given.
 * @returns The dtype schema, the bytes (row-major) and the shape.
 * @throws {TypeError} When no dtype is given and none can be inferred, or the data does not fit the dtype.
 * @throws {RangeError} When the shape does not match the data.
 * @example
 * ```ts
 * resolveHostInput(new Float32Array(6), undefined, [2, 3]).dtype.name; // 'float32'
 * ```
 */
export function resolveHostInput(
  data: unknown,
  dtype: DTypeName | DType | undefined,
  shape: ShapeInput | undefined,
): { dtype: DType; bytes: Uint8Array; shape: Shape } {
  let dt: DType;
  if (dtype !== undefined) {
    dt = dtypeOf(dtype);
  } else if (Array.isArray(data)) {
    dt = dtypeOf(plainArrayDtype(data));
  } else {
    const tag = ArrayBuffer.isView(data) ? Object.prototype.toString.call(data).slice(8, -1) : undefined;
    const name = tag === undefined ? undefined : inferable[tag];
    if (name === undefined) {
      throw new TypeError(
        'the dtype cannot be inferred from ' +
          `${tag ?? typeof data}: pass { dtype } (TypedArrays other than Uint8ClampedArray and DataView name their own; plain arrays of numbers are ${defaultDType})`,
      );
    }
    dt = dtypeOf(name);
  }
  const h = hostElements(dt, data as HostInput<DTypeName>, shape === undefined ? undefined : checkShape(shape));
  return { dtype: dt, bytes: h.bytes, shape: h.shape };
}

/** The options of `DeviceBuffer.allocate` among an array factory's (checked) options; undefined when none is set. */
function bufferOptions(options: DeviceArrayOptions): DeviceBufferOptions | undefined {
  const { resource, stream, device, spillable } = options;
  if (resource === undefined && stream === undefined && device === undefined && spillable === undefined) return undefined;
  return { resource, stream, device, spillable };
}

/**
 * The dtype of plain JavaScript data given none, by its first element (every other element is
 * then checked against it): numbers take the default dtype, bigints int64, booleans bool. An
 * empty list is the default dtype too.
 */
function plainArrayDtype(data: readonly unknown[]): DTypeName {
  let first: unknown = data;
  while (Array.isArray(first) && first.length > 0) first = first[0];
  if (typeof first === 'bigint') return 'int64';
  if (typeof first === 'boolean') return 'bool';
  return defaultDType;
}

/** The memory a DeviceArray lives in: device (or managed) memory, or a mapped HostBuffer. */
export type DeviceArrayMemory = DeviceMemory | HostBuffer;

/** The largest power of two dividing `n` (n > 0): a lower bound of the alignment a pitch was rounded to. */
function powerOfTwoIn(n: number): number {
  let p = 1;
  while (n % (p * 2) === 0) p *= 2;
  return p;
}

/**
 * The device address of element (0, ..., 0) without a spillable buffer's `ptr` getter: no reload
 * and no write counted, for comparing addresses (which arrays share memory). An operation that
 * uses the memory prepares it itself (copies, fills, kernel launches).
 *
 * @internal
 * @param array A device array.
 * @returns The address (for spilled memory that moves, the last one it had).
 * @throws {UseAfterFreeError} When its memory was freed.
 */
export function addressOfArray(array: DeviceArray): Ptr {
  const buffer = array.buffer;
  if (buffer.freed) return array.ptr; // UseAfterFreeError, worded by the array
  return (buffer instanceof HostBuffer ? buffer.devicePtr : addressOf(buffer)) + array.byteOffset;
}

/**
 * A typed n-dimensional array in device memory (generic over its dtype name, so a
 * `DeviceArray<'float32'>` and a `DeviceArray<'float3'>` are different types).
 *
 * @example
 * ```ts
 * using a = DeviceArray.from(new Float32Array([1, 2, 3, 4, 5, 6]), { shape: [2, 3] });
 * a.T.toHost();                                  // Float32Array [1, 4, 2, 5, 3, 6]
 * using p = DeviceArray.from(xyz, { dtype: 'float3' }); // a Float32Array of N * 3 as N float3
 * ```
 */
export class DeviceArray<N extends DTypeName = DTypeName> extends StridedArray<N> {
  /** The memory the array lives in (shared with its views). */
  readonly buffer: DeviceArrayMemory;
  /** The device whose context runs its copies. */
  readonly device: Device;
  /** The default stream of its asynchronous copies (the stream it was allocated on). */
  readonly stream: StreamRef;

  private constructor(dtype: DType<N>, layout: Layout, buffer: DeviceArrayMemory, device: Device, stream: StreamRef, owns: boolean) {
    super(dtype, layout, owns);
    this.buffer = buffer;
    this.device = device;
    this.stream = stream;
  }

  /**
   * A new contiguous array of uninitialised memory.
   *
   * @param shape The shape (whole numbers >= 0), or one number for one dimension.
   * @param dtype The element type; default float32 (`defaultDType`: PyTorch's default, and what
   *   GPU arithmetic runs fastest in; pass `'float64'` for NumPy's).
   * @param options Resource, stream and device.
   * @returns The array; it owns its memory.
   * @throws {TypeError | RangeError} For a bad shape, dtype or options.
   * @throws {OutOfMemoryError} When the resource has no memory left.
   * @example
   * ```ts
   * using a = DeviceArray.empty([1080, 1920], 'uchar4');
   * using v = DeviceArray.empty(1000);            // float32, 1000 elements
   * ```
   */
  static empty<N extends DTypeName = DefaultDType>(shape: ShapeInput, dtype?: N | DType<N>, options?: DeviceArrayOptions): DeviceArray<N> {
    const dt = dtypeOf(dtype ?? (defaultDType as N));
    const layout = recentLayoutOf(shape, dt.byteSize);
    if (options !== undefined) options = readOptions('DeviceArray.empty', options, { resource: true, stream: true, device: true, spillable: true });
    return DeviceArray.allocateLayout(dt, layout, options);
  }

  /**
   * `empty`, as a promise; with `wait: true` it waits for memory other tasks free instead of
   * failing, in order, as `DeviceBuffer.allocateAsync` (which says the rule).
   *
   * @param shape The shape (whole numbers >= 0).
   * @param dtype The element type.
   * @param options Resource, stream, device, and `wait`, `signal`, `timeout` (milliseconds).
   * @returns The array, once its memory is allocated.
   * @throws {TypeError | RangeError} For a bad shape, dtype or options (the promise rejects).
   * @throws {OutOfMemoryError} As `DeviceBuffer.allocateAsync`: without `wait` when there is no
   *   memory; with it when the request can never be met, or after `timeout`.
   * @throws The signal's `reason` when `signal` aborts the wait.
   * @example
   * ```ts
   * using batch = await DeviceArray.emptyAsync([4096, 4096], 'float32', { wait: true, timeout: 60_000 });
   * ```
   */
  static async emptyAsync<N extends DTypeName = DefaultDType>(
    shape: ShapeInput,
    dtype?: N | DType<N>,
    options: DeviceArrayAsyncOptions = {},
  ): Promise<DeviceArray<N>> {
    const s = checkShape(shape);
    const dt = dtypeOf(dtype ?? (defaultDType as N));
    options = readOptions('DeviceArray.emptyAsync', options, {
      resource: true,
      stream: true,
      device: true,
      spillable: true,
      wait: true,
      signal: true,
      timeout: true,
    });
    const allocateOptions: AllocateAsyncOptions = options;
    const buffer = await DeviceBuffer.allocateAsync(Math.max(elementCount(s) * dt.byteSize, 1), allocateOptions);
    return new DeviceArray(dt, contiguousLayout(s, dt.byteSize), buffer, buffer.device, buffer.stream, true);
  }

  /**
   * `zeros`, as a promise: `emptyAsync` (waiting for memory under `wait: true`), then one memset.
   *
   * @param shape The shape.
   * @param dtype The element type.
   * @param options Resource, stream, device, and `wait`, `signal`, `timeout` (milliseconds).
   * @returns The array of zeros.
   * @throws {TypeError | RangeError} For a bad shape, dtype or options (the promise rejects).
   * @throws {OutOfMemoryError} As `emptyAsync`.
   * @throws The signal's `reason` when `signal` aborts the wait.
   * @example
   * ```ts
   * using acc = await DeviceArray.zerosAsync([256], 'float64', { wait: true });
   * ```
   */
  static async zerosAsync<N extends DTypeName = DefaultDType>(
    shape: ShapeInput,
    dtype?: N | DType<N>,
    options: DeviceArrayAsyncOptions = {},
  ): Promise<DeviceArray<N>> {
    options = readOptions('DeviceArray.zerosAsync', options, {
      resource: true,
      stream: true,
      device: true,
      spillable: true,
      wait: true,
      signal: true,
      timeout: true,
    });
    const a = await DeviceArray.emptyAsync(shape, dtype, options);
    (a.buffer as DeviceMemory).memset(0);
    return a;
  }

  /**
   * A new contiguous array of zeros (one memset).
   *
   * @param shape The shape, or one number for one dimension.
   * @param dtype The element type; default float32 (see `empty`).
   * @param options Resource, stream and device.
   * @returns The array.
   * @throws {TypeError | RangeError} For a bad shape, dtype or options.
   * @throws {OutOfMemoryError} When the resource has no memory left.
   * @example
   * ```ts
   * using acc = DeviceArray.zeros([256], 'float64');
   * using m = DeviceArray.zeros([3, 4]);          // float32
   * ```
   */
  static zeros<N extends DTypeName = DefaultDType>(shape: ShapeInput, dtype?: N | DType<N>, options: DeviceArrayOptions = {}): DeviceArray<N> {
    options = readOptions('DeviceArray.zeros', options, { resource: true, stream: true, device: true, spillable: true });
    refuseSynchronousFill('DeviceArray.zeros()', options.stream);
    return zeroed(DeviceArray.empty(shape, dtype, options), options.stream);
  }

  /**
   * A new contiguous array with every element `value` (NumPy's `full(shape, fill_value, dtype)`).
   *
   * @param shape The shape, or one number for one dimension.
   * @param value One element of the dtype: a number, bigint (64-bit), boolean (bool), or an array of components.
   * @param dtype The element type; default float32 (see `empty`).
   * @param options Resource, stream and device.
   * @returns The array.
   * @throws {TypeError | RangeError} For a bad shape or dtype, or a value the dtype cannot hold.
   * @throws {OutOfMemoryError} When the resource has no memory left.
   * @example
   * ```ts
   * using ones = DeviceArray.full([4, 4], 1, 'float32');
   * using up = DeviceArray.full([100], [0, 1, 0], 'float3');
   * using half = DeviceArray.full(8, 0.5);        // float32
   * ```
   */
  static full<N extends DTypeName = DefaultDType>(
    shape: ShapeInput,
    value: ScalarValue<N>,
    dtype?: N | DType<N>,
    options: DeviceArrayOptions = {},
  ): DeviceArray<N> {
    options = readOptions('DeviceArray.full', options, { resource: true, stream: true, device: true, spillable: true });
    const dt = dtypeOf(dtype ?? (defaultDType as N));
    const pattern = encodeScalar(dt, value);
    refuseSynchronousFill('DeviceArray.full()', options.stream);
    const a = DeviceArray.empty(shape, dt, options);
    try {
      fillContiguous(a.buffer as DeviceMemory, a.byteOffset, a.size, pattern, options.stream);
    } catch (error) {
      a.free();
      throw error;
    }
    return a;
  }

  /**
   * A new contiguous array of ones (NumPy's and PyTorch's `ones`): `full(shape, 1, dtype)`.
   *
   * @param shape The shape, or one number for one dimension.
   * @param dtype A scalar element type; default float32 (see `empty`).
   * @param options Resource, stream and device.
   * @returns The array.
   * @throws {TypeError | RangeError} For a bad shape or dtype (a vector dtype: use `full` with its components).
   * @throws {OutOfMemoryError} When the resource has no memory left.
   * @example
   * ```ts
   * using w = DeviceArray.ones([4, 4]);           // float32
   * using n = DeviceArray.ones(16, 'int64');
   * ```
   */
  static ones<N extends DTypeName = DefaultDType>(shape: ShapeInput, dtype?: N | DType<N>, options: DeviceArrayOptions = {}): DeviceArray<N> {
    options = readOptions('DeviceArray.ones', options, { resource: true, stream: true, device: true, spillable: true });
    const dt = dtypeOf(dtype ?? (defaultDType as N));
    if (dt.components > 1) throw new TypeError(`DeviceArray.ones: ${dt.name} is a vector dtype; use full(shape, [1, ...], '${dt.name}')`);
    const one = dt.name === 'int64' || dt.name === 'uint64' ? 1n : dt.name === 'bool' ? true : 1;
    return DeviceArray.full(shape, one as ScalarValue<N>, dt, options);
  }

  /**
   * A new uninitialised contiguous array of the shape and dtype of `like`.
   *
   * @param like Any array.
   * @param options Resource, stream and device (default `like`'s device).
   * @returns The array.
   * @throws {OutOfMemoryError} When the resource has no memory left.
   * @example
   * ```ts
   * using out = DeviceArray.emptyLike(input);
   * ```
   */
  static emptyLike<N extends DTypeName>(like: StridedArray<N>, options: DeviceArrayOptions = {}): DeviceArray<N> {
    if (!(like instanceof StridedArray)) throw new TypeError('emptyLike expects a DeviceArray or HostArray');
    options = readOptions('DeviceArray.emptyLike', options, { resource: true, stream: true, device: true, spillable: true });
    const device = options.device ?? (like instanceof DeviceArray && options.resource === undefined ? like.device : undefined);
    return DeviceArray.empty(like.shape, like.dtype, { ...options, device });
  }

  /**
   * A new contiguous array of zeros of the shape and dtype of `like`.
   *
   * @param like Any array.
   * @param options Resource, stream and device.
   * @returns The array.
   * @throws {OutOfMemoryError} When the resource has no memory left.
   * @example
   * ```ts
   * using grad = DeviceArray.zerosLike(weights);
   * ```
   */
  static zerosLike<N extends DTypeName>(like: StridedArray<N>, options: DeviceArrayOptions = {}): DeviceArray<N> {
    options = readOptions('DeviceArray.zerosLike', options, { resource: true, stream: true, device: true, spillable: true });
    refuseSynchronousFill('DeviceArray.zerosLike()', options.stream);
    return zeroed(DeviceArray.emptyLike(like, options), options.stream);
  }

  /**
   * A new array holding a copy of host data: the dtype's TypedArray (its class names the dtype
   * when none is given), raw bytes (ArrayBuffer, DataView: give the dtype) or plain JavaScript
   * arrays, nested or not (numbers are float32 when no dtype is given, bigints int64, booleans
   * bool: see `defaultDType`). A vector dtype takes its components flat: `from(f32, { dtype: 'float3' })` reads an
   * (N * 3) Float32Array as N float3 elements; nested data is `[[x, y, z], ...]`.
   *
   * @param data The host data.
   * @param options dtype, shape, resource, stream, device.
   * @returns The array (synchronously filled).
   * @throws {TypeError} For a TypedArray of the wrong class for the dtype, or no dtype for raw bytes.
   * @throws {RangeError} When the shape does not match the data.
   * @throws {OutOfMemoryError} When the resource has no memory left.
   * @example
   * ```ts
   * using a = DeviceArray.from(new Float32Array(12), { shape: [3, 4] }); // DeviceArray<'float32'>
   * using b = DeviceArray.from([[1, 2], [3, 4]], { dtype: 'int32' });
   * using c = DeviceArray.from([1, 2, 3]);                               // DeviceArray<'float32'>
   * ```
   */
  static from<N extends DTypeName>(data: HostInput<N>, options: DeviceArrayFromOptions<N> & { readonly dtype: N | DType<N> }): DeviceArray<N>;
  static from<T extends InferableTypedArray>(data: T, options?: DeviceArrayFromOptions<InferredDType<T>>): DeviceArray<InferredDType<T>>;
  static from(data: NestedNumbers, options?: DeviceArrayFromOptions<DefaultDType>): DeviceArray<DefaultDType>;
  static from(data: NestedArray, options?: DeviceArrayFromOptions<DTypeName>): DeviceArray;
  static from(data: unknown, options: DeviceArrayFromOptions<DTypeName> = {}): DeviceArray {
    options = readOptions('DeviceArray.from', options, { dtype: true, shape: true, resource: true, stream: true, device: true, spillable: true });
    const { dtype, bytes, shape } = resolveHostInput(data, options.dtype, options.shape);
    // Refused before the memory is allocated: a refusal after it would free it, a call a capture may refuse too.
    refuseDuringCapture(
      'DeviceArray.from()',
      'it copies JavaScript memory synchronously, with host waits: DeviceArray.fromAsync before ' +
        'the capture, or copy from a HostBuffer on the capturing stream',
      options.stream === undefined ? 0 : streamHandleOf(options.stream),
    );
    const a = DeviceArray.allocate(dtype, shape, options);
    try {
      writeElements(a.buffer, a.layout, bytes, 'DeviceArray.from');
    } catch (error) {
      a.free();
      throw error;
    }
    return a;
  }

  /**
   * `from`, with the copy queued on `options.stream` (default the legacy default stream); the
   * promise resolves once the data is on the device. The memory is allocated on that stream.
   *
   * @param data The host data.
   * @param options dtype, shape, resource, stream, device.
   * @returns The array, once filled.
   * @throws {TypeError | RangeError} As `from` (the promise rejects, before anything is allocated).
   * @example
   * ```ts
   * const a = await DeviceArray.fromAsync(samples, { stream });
   * ```
   */
  static fromAsync<N extends DTypeName>(data: HostInput<N>, options: DeviceArrayFromOptions<N> & { readonly dtype: N | DType<N> }): Promise<DeviceArray<N>>;
  static fromAsync<T extends InferableTypedArray>(data: T, options?: DeviceArrayFromOptions<InferredDType<T>>): Promise<DeviceArray<InferredDType<T>>>;
  static fromAsync(data: NestedNumbers, options?: DeviceArrayFromOptions<DefaultDType>): Promise<DeviceArray<DefaultDType>>;
  static fromAsync(data: NestedArray, options?: DeviceArrayFromOptions<DTypeName>): Promise<DeviceArray>;
  static async fromAsync(data: unknown, options: DeviceArrayFromOptions<DTypeName> = {}): Promise<DeviceArray> {
    options = readOptions('DeviceArray.fromAsync', options, { dtype: true, shape: true, resource: true, stream: true, device: true, spillable: true });
    const { dtype, bytes, shape } = resolveHostInput(data, options.dtype, options.shape);
    const a = DeviceArray.allocate(dtype, shape, options);
    try {
      await writeElementsAsync(a.buffer, a.layout, bytes, a.stream, a.device, 'DeviceArray.fromAsync');
    } catch (error) {
      a.free();
      throw error;
    }
    return a;
  }

  /**
   * An array over memory the caller owns: a DeviceBuffer, ManagedBuffer, or mapped HostBuffer
   * (for kernels that read host memory in place). The array does not own it: free the buffer.
   *
   * @param memory The memory.
   * @param options dtype (required), shape, strides (elements), byteOffset, device, stream.
   * @returns The array.
   * @throws {TypeError} For memory of another kind, or bad options.
   * @throws {RangeError} When the layout reaches outside the memory, or byteOffset is misaligned.
   * @throws {VramStateError} For a HostBuffer that is not mapped.
   * @throws {UseAfterFreeError} When the memory was freed.
   * @example
   * ```ts
   * using buf = DeviceBuffer.allocate(4096);
   * const every4th = DeviceArray.fromBuffer(buf, { dtype: 'float32', shape: [256], strides: [4] });
   * ```
   */
  static fromBuffer<N extends DTypeName>(memory: DeviceArrayMemory, options: DeviceArrayViewOptions<N>): DeviceArray<N> {
    options = readOptions('DeviceArray.fromBuffer', options, { dtype: true, shape: true, strides: true, byteOffset: true, device: true, stream: true });
    const dt = dtypeOf(options.dtype);
    let device: Device;
    let stream: StreamRef;
    if (memory instanceof HostBuffer) {
      if (!memory.mapped) {
        throw new VramStateError('DeviceArray.fromBuffer: a HostBuffer needs to be mapped ({ mapped: true }) for the device to address it');
      }
      device = Device.resolve(options.device);
      stream = memory.stream ?? defaultStream;
    } else if (memory instanceof DeviceMemory) {
      device = memory.device;
      // DeviceBuffer and ManagedBuffer remember their allocation stream; other device memory has none.
      stream = (memory as { readonly stream?: StreamRef }).stream ?? defaultStream;
    } else {
      throw new TypeError('DeviceArray.fromBuffer expects a DeviceBuffer, ManagedBuffer or mapped HostBuffer');
    }
    if (memory.freed) throw new UseAfterFreeError(`DeviceArray.fromBuffer: ${String(memory)} was freed`);
    const byteOffset = checkNonNegativeInteger(options.byteOffset ?? 0, 'byteOffset');
    if (byteOffset % dt.alignment !== 0) {
      throw new RangeError(`byteOffset ${byteOffset} is not a multiple of ${dt.name}'s alignment (${dt.alignment})`);
    }
    const shape = options.shape === undefined ? [Math.floor(Math.max(0, memory.byteLength - byteOffset) / dt.byteSize)] : checkShape(options.shape);
    const layout: Layout =
      options.strides === undefined
        ? contiguousLayout(Object.freeze(shape.slice()), dt.byteSize, byteOffset)
        : { shape: Object.freeze(shape.slice()), strides: checkStrides(options.strides, shape.length), byteOffset, itemSize: dt.byteSize };
    checkLayoutFits(layout, memory.byteLength, 'DeviceArray.fromBuffer');
    return new DeviceArray(dt, layout, memory, device, options.stream ?? stream, false);
  }

  /**
   * An array over memory vram did not allocate, without a copy: `ptr` is a device address (a
   * `CUdeviceptr` from C code, another runtime's tensor; mapped host memory's device pointer),
   * checked with cuPointerGetAttributes as `DeviceBuffer.fromPointer` does, over the bytes the
   * layout reaches. The array owns the wrapper, not the memory: `free()`, `using` or the backstop
   * call `onRelease` exactly once and drop `owner`; vram never frees the memory. Its views hold
   * the wrapper like any other array's. Synchronous copies run in the memory's own context.
   *
   * @param ptr The address of the first byte the layout may reach (element (0, ..., 0) is at `ptr + byteOffset`).
   * @param shape The shape.
   * @param dtype The element type.
   * @param options owner, onRelease, strides (elements), byteOffset, device, stream.
   * @returns The array; it owns the ForeignDeviceBuffer around the memory.
   * @throws {TypeError | RangeError} For a bad pointer, shape, dtype, strides or offset (no driver call yet).
   * @throws {InvalidPointerError} For memory the driver does not know, unmapped host memory,
   *   another device's memory without peer access, or a layout reaching past the allocation.
   * @example
   * ```ts
   * const ptr = native.makeMatrix(rows, cols); // cuMemAlloc'd and filled in C
   * using m = DeviceArray.fromPointer(ptr, [rows, cols], 'float32', { onRelease: () => native.free(ptr) });
   * m.T.toHost();
   * ```
   */
  static fromPointer<N extends DTypeName>(ptr: number, shape: Shape, dtype: N | DType<N>, options: DeviceArrayPointerOptions = {}): DeviceArray<N> {
    options = readOptions('DeviceArray.fromPointer', options, {
      owner: true,
      onRelease: true,
      device: true,
      readOnly: true,
      strides: true,
      byteOffset: true,
      stream: true,
    });
    const s = Object.freeze(checkShape(shape).slice());
    const dt = dtypeOf(dtype);
    const byteOffset = checkNonNegativeInteger(options.byteOffset ?? 0, 'byteOffset');
    if (byteOffset % dt.alignment !== 0) {
      throw new RangeError(`byteOffset ${byteOffset} is not a multiple of ${dt.name}'s alignment (${dt.alignment})`);
    }
    const layout: Layout =
      options.strides === undefined
        ? contiguousLayout(s, dt.byteSize, byteOffset)
        : { shape: s, strides: checkStrides(options.strides, s.length), byteOffset, itemSize: dt.byteSize };
    const { start, end } = byteSpan(layout);
    if (start < 0) {
      throw new RangeError(
        `DeviceArray.fromPointer: strides (${layout.strides.join(', ')}) reach ${-start} bytes ` +
          'before ptr: pass the address of the lowest element as ptr and its distance to element (0, ..., 0) as byteOffset',
      );
    }
    if (typeof ptr === 'number' && (ptr + byteOffset) % dt.alignment !== 0) {
      throw new RangeError(
        `DeviceArray.fromPointer: element (0, ..., 0) at 0x${(ptr + byteOffset).toString(16)} is not aligned to ${dt.name}'s ${dt.alignment} bytes`,
      );
    }
    if (options.stream !== undefined) streamHandleOf(options.stream);
    const { strides: _strides, byteOffset: _byteOffset, stream: _stream, ...foreign } = options;
    const buffer = ForeignDeviceBuffer.wrap(ptr, end, foreign);
    return new DeviceArray(dt, layout, buffer, buffer.device, options.stream ?? buffer.stream, true);
  }

  /**
   * A 2D array of `height` rows of `width` elements, each row starting at a pitch chosen for
   * coalesced access: cuMemAllocPitch, or a pitched block of `options.resource` (an
   * ArenaResource). Strides are `[pitch / byteSize, 1]`; for dtypes whose size is not a power of
   * two (float3, char3, ...) the rows are padded further so the pitch is a whole number of
   * elements. Copies to and from the host are 2D copies that skip the padding.
   *
   * @param shape `[height, width]`, both at least 1.
   * @param dtype The element type.
   * @param options An arena to take the block from, the device, the stream.
   * @returns The array; it owns its memory.
   * @throws {RangeError} For a shape that is not two positive dimensions.
   * @throws {TypeError} For a resource that is not an ArenaResource.
   * @throws {OutOfMemoryError} When there is no memory (or no arena range) left.
   * @throws {NotSupportedError} When no pitch is a whole number of elements (not seen on any device).
   * @example
   * ```ts
   * using img = DeviceArray.pitched([1080, 1920], 'uchar4');
   * img.copyFrom(rgba); // one 2D copy
   * ```
   */
  static pitched<N extends DTypeName>(shape: readonly [number, number], dtype: N | DType<N>, options: PitchedArrayOptions = {}): DeviceArray<N> {
    const s = checkShape(shape);
    const dt = dtypeOf(dtype);
    options = readOptions('DeviceArray.pitched', options, { resource: true, device: true, stream: true });
    if (s.length !== 2 || s[0] === 0 || s[1] === 0) {
      throw new RangeError(`DeviceArray.pitched needs [height, width] with both at least 1, got ${formatShape(s)}`);
    }
    const [height, width] = s as [number, number];
    const b = dt.byteSize;
    const widthBytes = width * b;
    const resource = options.resource;
    let buffer: DeviceBuffer;
    let pitch: number;
    if (resource !== undefined) {
      if (!(resource instanceof ArenaResource)) {
        throw new TypeError('DeviceArray.pitched: resource must be an ArenaResource (its pitched blocks); leave it out for cuMemAllocPitch');
      }
      const stream = options.stream ?? defaultStream;
      // The arena rounds the width up to its pitch alignment: ask for a width that rounds to a
      // whole number of elements.
      const a = resource.pitchAlignment;
      const unit = (b * a) / gcd(b, a);
      const asked = (Math.ceil(widthBytes / a) * a) % b === 0 ? widthBytes : Math.ceil(widthBytes / unit) * unit;
      ({ buffer, pitch } = ArenaPitchedBuffer.take(resource, asked, height, stream));
    } else {
      const elementBytes = b % 16 === 0 ? 16 : b % 8 === 0 ? 8 : 4;
      const device = Device.resolve(options.device);
      let p = PitchedDeviceBuffer.allocate2D(widthBytes, height, { elementBytes, device });
      if (p.pitch % b !== 0) {
        // The driver's pitch is a multiple of its alignment (a power of two); a width that is a
        // multiple of both that and the element size comes back as its own pitch.
        const a = powerOfTwoIn(p.pitch);
        p.free();
        const unit = (b * a) / gcd(b, a);
        p = PitchedDeviceBuffer.allocate2D(Math.ceil(widthBytes / unit) * unit, height, { elementBytes, device });
      }
      buffer = p;
      pitch = p.pitch;
    }
    if (pitch % b !== 0) {
      buffer.free();
      throw new NotSupportedError(`DeviceArray.pitched: the pitch ${pitch} is not a whole number of ${dt.name} elements (${b} bytes)`);
    }
    const layout: Layout = { shape: s, strides: Object.freeze([pitch / b, 1]), byteOffset: 0, itemSize: b };
    return new DeviceArray(dt, layout, buffer, buffer.device, options.stream ?? buffer.stream, true);
  }

  /** Allocates a contiguous array's buffer; the one place arrays take memory from a resource. */
  private static allocate<N extends DTypeName>(dt: DType<N>, shape: Shape, options: DeviceArrayOptions | undefined): DeviceArray<N> {
    return DeviceArray.allocateLayout(dt, recentLayout(shape, dt.byteSize), options);
  }

  /** `allocate` with the contiguous layout already made (`empty` looks shape and layout up at once). */
  private static allocateLayout<N extends DTypeName>(dt: DType<N>, layout: Layout, options: DeviceArrayOptions | undefined): DeviceArray<N> {
    const bytes = elementCount(layout.shape) * dt.byteSize;
    // An empty array still holds a (1-byte) buffer, so it has an address and a device like any other.
    const given = options === undefined ? undefined : bufferOptions(options);
    const buffer = given === undefined ? DeviceBuffer.allocateDefault(Math.max(bytes, 1)) : DeviceBuffer.allocate(Math.max(bytes, 1), given);
    return new DeviceArray(dt, layout, buffer, buffer.device, buffer.stream, true);
  }

  /**
   * True when the memory was lent for reading only (`fromPointer(..., { readOnly: true })`, a
   * DLPack tensor flagged READ_ONLY, a CUDA Array Interface with `data[1]` true), and so for
   * every view of it: copies, fills and built-in operations refuse to write it, and exports say so.
   */
  get readOnly(): boolean {
    return this.buffer.readOnly;
  }

  /** The device address of element (0, ..., 0), for kernel arguments. */
  get ptr(): Ptr {
    this.checkAlive();
    const base = this.buffer instanceof HostBuffer ? this.buffer.devicePtr : this.buffer.ptr;
    return base + this.byteOffset;
  }

  /**
   * Says that work on `stream` uses this array's memory (PyTorch's `tensor.record_stream`): when
   * the memory is freed, the freeing stream first waits for the work queued on `stream` by then.
   * Delegates to the buffer (`recordStream` of src/buffer/lifetime.ts), so it holds for every view
   * of the same memory. Nothing waits now. vram's own copies and operations record their streams
   * themselves; call it for a kernel of your own on another stream.
   *
   * @param stream A live `Stream`, or a `{ handle }` reference to a stream of the array's device.
   * @throws {UseAfterFreeError} When the memory was freed or the stream destroyed.
   * @throws {TypeError} When `stream` is not a stream.
   * @example
   * ```ts
   * using a = DeviceArray.zeros([1024], 'float32', { stream: s1 });
   * kernel.launch({ grid, block, stream: s2 }, a, a.size);
   * a.recordStream(s2);
   * a.free(); // on s1, after s2's kernel: no host wait
   * ```
   */
  recordStream(stream: StreamRef): void {
    this.checkAlive();
    this.buffer.recordStream(stream);
  }

  /**
   * The elements as a new contiguous TypedArray of the dtype's host type (strides honoured; a
   * vector dtype's components flat, (N, 3) for float3).
   *
   * @returns The host copy.
   * @throws {UseAfterFreeError} When the memory was freed.
   * @example
   * ```ts
   * const xyz = points.toHost(); // Float32Array of 3 * points.size
   * ```
   */
  toHost(): HostTypedArray<N> {
    this.checkAlive();
    const out = allocateHost(this.dtype, this.size);
    readElements(this.buffer, this.layout, bytesOf(out), 'toHost');
    return out;
  }

  /**
   * `toHost()` as a promise: the copies are queued on `options.stream` (default the array's) and
   * the promise resolves once the data has arrived; the event loop is never blocked.
   *
   * @param options The stream.
   * @returns The host copy.
   * @throws {UseAfterFreeError} When the memory was freed.
   * @example
   * ```ts
   * const host = await a.toHostAsync({ stream });
   * ```
   */
  async toHostAsync(options: AsyncCopyOptions = {}): Promise<HostTypedArray<N>> {
    const stream = this.streamOf(options, 'toHostAsync');
    const out = allocateHost(this.dtype, this.size);
    await readElementsAsync(this.buffer, this.layout, bytesOf(out), stream, this.device, 'toHostAsync');
    return out;
  }

  /**
   * Copies into this array's elements (strides honoured) from host data of its dtype and shape,
   * a HostArray, or another DeviceArray of the same dtype and shape. Synchronous.
   *
   * @param src The data.
   * @throws {TypeError} For data of another dtype (a TypedArray of the wrong class).
   * @throws {RangeError} For data of another shape or size.
   * @throws {VramStateError} When this array's elements overlap (caller-given strides), or its memory was lent read-only.
   * @throws {UseAfterFreeError} When either side's memory was freed.
   * @example
   * ```ts
   * a.slice([0, null, 2]).copyFrom(new Float32Array(a.shape[0] / 2)); // every other element
   * ```
   */
  copyFrom(src: HostInput<N> | StridedArray<N>): void {
    this.checkAlive();
    checkWritable(this, 'copyFrom');
    if (src instanceof DeviceArray) {
      this.checkSame(src, 'copyFrom');
      if (copyOnDevice(this.buffer, this.layout, src.buffer, src.layout, undefined, 'copyFrom')) return;
      const staged = new Uint8Array(src.nbytes);
      readElements(src.buffer, src.layout, staged, 'copyFrom');
      writeElements(this.buffer, this.layout, staged, 'copyFrom');
      return;
    }
    writeElements(this.buffer, this.layout, this.sourceBytes(src, 'copyFrom'), 'copyFrom');
  }

  /**
   * Copies this array's elements into `dst`: the dtype's TypedArray or raw bytes of exactly
   * `nbytes` (filled row-major; returned), a HostArray, or a DeviceArray of the same dtype and shape.
   *
   * @param dst The destination.
   * @returns `dst`.
   * @throws {TypeError} For a destination of another dtype, or nested arrays (nothing to write into).
   * @throws {RangeError} For a destination of another size or shape.
   * @throws {UseAfterFreeError} When either side's memory was freed.
   * @example
   * ```ts
   * const out = a.copyTo(new Float32Array(a.size));
   * ```
   */
  copyTo<T extends HostTypedArray<N> | ArrayBuffer | DataView | StridedArray<N>>(dst: T): T {
    this.checkAlive();
    if (dst instanceof DeviceArray) {
      dst.copyFrom(this);
      return dst;
    }
    if (dst instanceof StridedArray) {
      const sink = this.sinkOf(dst, 'copyTo');
      readElements(this.buffer, this.layout, sink.bytes, 'copyTo');
      sink.commit();
      return dst;
    }
    readElements(this.buffer, this.layout, this.destinationBytes(dst as HostTypedArray<N> | ArrayBuffer | DataView, 'copyTo'), 'copyTo');
    return dst;
  }

  /**
   * `copyFrom` queued on a stream (default the array's); resolves once the data is in place.
   * Host data is staged through pinned memory before the call returns (a HostArray's pinned
   * memory is read directly), so `src` may change as soon as it has.
   *
   * @param src The data.
   * @param options The stream.
   * @throws {TypeError | RangeError | VramStateError | UseAfterFreeError} As `copyFrom` (the promise rejects).
   * @example
   * ```ts
   * await a.copyFromAsync(frame, { stream });
   * ```
   */
  async copyFromAsync(src: HostInput<N> | StridedArray<N>, options: AsyncCopyOptions = {}): Promise<void> {
    const stream = this.streamOf(options, 'copyFromAsync');
    if (src instanceof DeviceArray) {
      this.checkSame(src, 'copyFromAsync');
      src.checkAlive();
      if (copyOnDevice(this.buffer, this.layout, src.buffer, src.layout, stream, 'copyFromAsync')) {
        await streamDone(stream, this.device);
        return;
      }
      // Neither side's layout is expressible in device copies alone: the data goes through the
      // host, and the write is queued only once the read has arrived.
      const staged = new Uint8Array(src.nbytes);
      await readElementsAsync(src.buffer, src.layout, staged, stream, this.device, 'copyFromAsync');
      await writeElementsAsync(this.buffer, this.layout, staged, stream, this.device, 'copyFromAsync');
      return;
    }
    await writeElementsAsync(this.buffer, this.layout, this.sourceBytes(src, 'copyFromAsync'), stream, this.device, 'copyFromAsync');
  }

  /**
   * `copyTo` queued on a stream (default the array's); resolves with `dst` once the data has arrived.
   *
   * @param dst The destination.
   * @param options The stream.
   * @returns `dst`, filled.
   * @throws {TypeError | RangeError | UseAfterFreeError} As `copyTo` (the promise rejects).
   * @example
   * ```ts
   * const pinned = HostArray.emptyLike(a);
   * await a.copyToAsync(pinned, { stream });
   * ```
   */
  async copyToAsync<T extends HostTypedArray<N> | ArrayBuffer | DataView | StridedArray<N>>(dst: T, options: AsyncCopyOptions = {}): Promise<T> {
    const stream = this.streamOf(options, 'copyToAsync');
    if (dst instanceof DeviceArray) {
      await dst.copyFromAsync(this, { stream });
      return dst;
    }
    if (dst instanceof StridedArray) {
      const sink = this.sinkOf(dst, 'copyToAsync');
      await readElementsAsync(this.buffer, this.layout, sink.bytes, stream, this.device, 'copyToAsync');
      sink.commit();
      return dst;
    }
    await readElementsAsync(
      this.buffer,
      this.layout,
      this.destinationBytes(dst as HostTypedArray<N> | ArrayBuffer | DataView, 'copyToAsync'),
      stream,
      this.device,
      'copyToAsync',
    );
    return dst;
  }

  /**
   * Sets every element to `value` (strides honoured): a memset where the element's bytes repeat
   * every 1, 2 or 4 bytes, else a pattern written once and doubled on the device.
   *
   * @param value One element of the dtype.
   * @returns This array.
   * @throws {TypeError | RangeError} For a value the dtype cannot hold.
   * @throws {VramStateError} When the memory was lent read-only.
   * @throws {UseAfterFreeError} When the memory was freed.
   * @example
   * ```ts
   * a.slice(0).fill(1); // the first row
   * ```
   */
  fill(value: ScalarValue<N>): this {
    this.checkAlive();
    checkWritable(this, 'fill');
    const pattern = encodeScalar(this.dtype, value);
    if (this.isContiguous && this.buffer instanceof DeviceMemory) {
      fillContiguous(this.buffer, this.byteOffset, this.size, pattern);
    } else {
      const bytes = new Uint8Array(this.nbytes);
      for (let i = 0; i < bytes.length; i += pattern.length) bytes.set(pattern, i);
      writeElements(this.buffer, this.layout, bytes, 'fill');
    }
    return this;
  }

  /**
   * A new contiguous array holding a copy of these elements (also how to reshape a strided view).
   *
   * @param options Resource, stream and device (default this array's device).
   * @returns The copy; it owns its memory.
   * @throws {UseAfterFreeError} When the memory was freed.
   * @throws {OutOfMemoryError} When the resource has no memory left.
   * @example
   * ```ts
   * using t = a.T.copy().reshape(-1);
   * ```
   */
  copy(options: DeviceArrayOptions = {}): DeviceArray<N> {
    options = readOptions('DeviceArray.copy', options, { resource: true, stream: true, device: true, spillable: true });
    this.checkAlive();
    const a = DeviceArray.emptyLike(this, options);
    try {
      a.copyFrom(this);
    } catch (error) {
      a.free();
      throw error;
    }
    return a;
  }

  /**
   * A copy of this array on another device, queued on `stream` (a stream of that device; default
   * its legacy default stream) and returned at once, with no wait on the host: the stream first
   * waits, on the device, for the work already queued on this array's memory (its stream and the
   * streams recorded on it), then the copy runs (cuMemcpyPeerAsync: directly over NVLink or PCIe
   * where peer access is enabled between the devices or a pool granted it, through the host where
   * not), and this array's memory is not reused before the copy has read it. The new array is
   * allocated on `stream` from the device's current resource (or `resource`), and is usable by
   * work queued on `stream` after this call. On the same device it is `copy` on `stream`.
   *
   * @param device The destination device.
   * @param options `stream` (of the destination device) and `resource` (of the destination device).
   * @returns The new array, on `device`, whose stream is `stream`.
   * @throws {RangeError} When `stream` or `resource` belongs to another device, or the ordinal is out of range.
   * @throws {UseAfterFreeError} When this array's memory was freed.
   * @throws {OutOfMemoryError | CudaError} From the allocation or the copy; nothing is left allocated.
   * @example
   * ```ts
   * using onOne = a.to(Device.get(1), { stream: Stream.create({ device: 1 }) }); // queued; a's memory waits for it
   * ```
   */
  to(device: Device | number, options: PeerCopyOptions = {}): DeviceArray<N> {
    options = readOptions('DeviceArray.to', options, { stream: true, resource: true });
    this.checkAlive();
    const target = Device.resolve(device);
    const stream = options.stream ?? Stream.default(target);
    if (!(stream instanceof Stream)) throw new TypeError('DeviceArray.to: stream must be a Stream (of the destination device)');
    if (stream.device !== target) {
      throw new RangeError(
        `DeviceArray.to: the stream is device ${stream.device.ordinal}'s; the copy runs on a stream of the destination, device ${target.ordinal}`,
      );
    }
    if (options.resource !== undefined && options.resource.deviceOrdinal !== target.ordinal) {
      throw new RangeError(`DeviceArray.to: the resource is device ${options.resource.deviceOrdinal}'s, not device ${target.ordinal}'s`);
    }
    const a = DeviceArray.empty(this.shape, this.dtype, { device: target, stream, ...(options.resource === undefined ? {} : { resource: options.resource }) });
    try {
      // The copy reads what the work already queued on this memory writes: ordered on the device.
      waitForUsesOn(this.buffer, stream);
      // Between devices only a linear copy goes (cuMemcpy2DAsync refuses two devices' memory with
      // CUDA_ERROR_INVALID_VALUE on a CUDA 13 driver); on one device any layout a 2-D copy expresses.
      const linearOnly = target !== this.device && !this.isContiguous;
      if (linearOnly || !copyOnDevice(a.buffer, a.layout, this.buffer, this.layout, stream, 'DeviceArray.to')) {
        // Contiguous on this device first, then one copy.
        using packed = this.copy({ stream: this.stream });
        waitForUsesOn(packed.buffer, stream);
        copyOnDevice(a.buffer, a.layout, packed.buffer, packed.layout, stream, 'DeviceArray.to');
      }
    } catch (error) {
      a.free();
      throw error;
    }
    return a;
  }

  /**
   * A short description for logs; a freed array still describes itself.
   *
   * @returns `DeviceArray<float32>(2, 3) on device 0`, with `, view` for a view and `, freed` once freed.
   * @throws Never.
   * @example
   * ```ts
   * using a = DeviceArray.zeros([2, 3], 'float32');
   * String(a); // 'DeviceArray<float32>(2, 3) on device 0'
   * ```
   */
  override toString(): string {
    const view = this.ownsMemory ? '' : ', view';
    return `DeviceArray<${this.dtype.name}>${formatShape(this.shape)} on device ${this.device.ordinal}${view}${this.buffer.freed ? ', freed' : ''}`;
  }

  protected override deviceOrdinalForJSON(): { device: number } {
    return { device: this.device.ordinal };
  }

  protected withLayout(layout: Layout): this {
    return new DeviceArray(this.dtype, layout, this.buffer, this.device, this.stream, false) as this;
  }

  private streamOf(options: AsyncCopyOptions, what: string): StreamRef {
    options = readOptions(`DeviceArray.${what}`, options, { stream: true });
    this.checkAlive();
    return options.stream ?? this.stream;
  }

  /** Row-major bytes of host data or a HostArray, checked against this array's dtype and shape. */
  private sourceBytes(src: HostInput<N> | StridedArray<N>, what: string): HostBytes {
    if (src instanceof StridedArray) {
      this.checkSame(src, what);
      const host = pinnedArray(src, what);
      return pinnedSource(host.buffer, src.layout);
    }
    return hostElements(this.dtype, src, this.shape).bytes;
  }

  /** The bytes of a TypedArray or raw bytes to read into, checked against this array's dtype and size. */
  private destinationBytes(dst: HostTypedArray<N> | ArrayBuffer | DataView, what: string): Uint8Array {
    if (Array.isArray(dst)) throw new TypeError(`${what}: nested arrays cannot be written into; pass a TypedArray`);
    const h = hostElements(this.dtype, dst as HostInput<N>, this.shape);
    // A converted input (nested arrays, a Float16Array) is a copy: nothing would reach the caller.
    if (h.copied) throw new TypeError(`${what}: the destination must be a ${this.dtype.name} TypedArray or raw bytes to write into`);
    return h.bytes;
  }

  private sinkOf(dst: StridedArray<N>, what: string): { bytes: HostBytes; commit(): void } {
    this.checkSame(dst, what);
    const { buffer } = pinnedArray(dst, what);
    checkWritableMemory(buffer, what); // a strided destination is written by the host, not by a checked copy
    return pinnedSink(buffer, dst.layout);
  }
}

/**
 * The one check every path that writes an array's elements makes first (its copies and fills,
 * and every built-in operation's outputs): the memory is not lent read-only. The property lives
 * on the memory (`DeviceMemory.readOnly`), so views and re-wrapped arrays carry it.
 *
 * @param array The array about to be written.
 * @param what Names the operation and argument (`map: out`).
 * @throws {VramStateError} When its memory was lent read-only.
 * @example
 * ```ts
 * checkWritable(out, 'map: out');
 * ```
 */
export function checkWritable(array: DeviceArray, what: string): void {
  if (array.readOnly) {
    throw new VramStateError(`${what}: the array is read-only memory (lent with readOnly by its producer); write into a copy (a.copy())`);
  }
}

/** The HostBuffer of a HostArray (a StridedArray over pinned memory that is not a DeviceArray), alive. */
function pinnedArray(array: StridedArray<DTypeName>, what: string): { buffer: HostBuffer } {
  const buffer = array.buffer;
  if (array instanceof DeviceArray || !(buffer instanceof HostBuffer)) {
    throw new TypeError(`${what}: expected a HostArray or DeviceArray`);
  }
  if (buffer.freed) throw new UseAfterFreeError(`${what}: the HostArray's memory was freed`);
  return { buffer };
}

/**
 * Fills `count` contiguous elements at `byteOffset` with `pattern` (one element's bytes): one
 * memset when the pattern repeats every 1, 2 or 4 bytes, else the pattern written once for up to
 * 4096 elements and doubled with device-to-device copies (log2(count / 4096) of them).
 */
/**
 * A factory that fills synchronously (no stream given) is refused during a capture before it
 * allocates: refused after, the memory would have to be freed, itself a call a capture may refuse.
 */
function refuseSynchronousFill(call: string, stream: StreamRef | undefined): void {
  if (stream === undefined) refuseDuringCapture(call, 'a synchronous fill (cuMemset) cannot be captured: pass the capturing stream');
}

/** `a` filled with zero bytes on `stream` (synchronously without one); freed if the fill throws. */
function zeroed<N extends DTypeName>(a: DeviceArray<N>, stream: StreamRef | undefined): DeviceArray<N> {
  try {
    (a.buffer as DeviceMemory).memset(0, { stream });
  } catch (error) {
    a.free();
    throw error;
  }
  return a;
}

function fillContiguous(memory: DeviceMemory, byteOffset: number, count: number, pattern: Uint8Array, stream?: StreamRef): void {
  if (count === 0) return;
  const b = pattern.length;
  for (const w of [1, 2, 4] as const) {
    if (b % w !== 0 || byteOffset % w !== 0) continue;
    let periodic = true;
    for (let i = w; i < b && periodic; i++) periodic = pattern[i] === pattern[i - w];
    if (!periodic) continue;
    let value = 0;
    for (let i = w - 1; i >= 0; i--) value = value * 256 + pattern[i]!;
    memory.memset(value, { elementBytes: w, offset: byteOffset, count: (count * b) / w, stream });
    return;
  }
  const first = Math.min(count, 4096);
  const chunk = new Uint8Array(first * b);
  for (let i = 0; i < chunk.length; i += b) chunk.set(pattern, i);
  memory.copyFromHost(chunk, { offset: byteOffset });
  for (let filled = first; filled < count;) {
    const n = Math.min(filled, count - filled);
    memory.copyFrom(memory, { offset: byteOffset + filled * b, srcOffset: byteOffset, bytes: n * b });
    filled += n;
  }
}
