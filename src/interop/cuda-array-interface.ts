/**
 * The CUDA Array Interface (version 3, reading version 2 too) as plain objects: Numba's and
 * CuPy's `__cuda_array_interface__` dictionary, for JavaScript libraries that speak it. Export
 * describes a DeviceArray's memory; import wraps described memory as a DeviceArray without a
 * copy (through `DeviceArray.fromPointer`, so the pointer is checked with cuPointerGetAttributes).
 *
 * The interface has no vector types: a vector dtype exports as its component type with the
 * components as a last dimension (a `float3` array of shape [n] is `<f4` of shape [n, 3]), and
 * imports back with `{ dtype: 'float3' }`. bfloat16 has no typestr (NumPy has no such type), so
 * arrays of it are a NotSupportedError.
 *
 * Streams (v3): the producer names the stream its work on the data was queued on; the consumer
 * makes its own stream wait for that work before using the data. That wait is an event recorded
 * on the producer's stream and `cuStreamWaitEvent` on the consumer's: the host never waits.
 */
import { DEFAULT_STREAM, EventFlags, type Handle } from '../backend/backend.js';
import { DeviceArray } from '../array/device-array.js';
import { dtypeOf, dtypes, type DType, type DTypeName, type ScalarName } from '../array/dtype.js';
import { checkShape } from '../array/shape.js';
import type { Device } from '../device.js';
import { NotSupportedError } from '../errors.js';
import { DeviceMemory } from '../buffer/device-memory.js';
import { DeviceBuffer } from '../buffer/device-buffer.js';
import type { SpillLease } from '../buffer/spill/lease.js';
import { prepareUse } from '../buffer/spill/residency.js';
import { Stream, streamHandleOf, type StreamRef } from '../stream.js';
import { readOptions } from '../util/options.js';

/** A CUDA Array Interface dictionary as a plain object. */
export interface CudaArrayInterface {
  /** Extent of each dimension. */
  readonly shape: readonly number[];
  /** NumPy's type string: `<f4`, `|u1`, `<f2`, `|b1`, `<i8`, ... */
  readonly typestr: string;
  /** `[address, readOnly]`; the address is 0 for an array with no elements. */
  readonly data: readonly [number | bigint, boolean];
  /** Strides in bytes, or null (or absent) for a C-contiguous array. */
  readonly strides?: readonly number[] | null;
  /** 3 (what vram writes); 2 is read too. */
  readonly version: number;
  /** Optional NumPy descr: `[['', typestr]]` for the plain types vram reads. */
  readonly descr?: readonly (readonly [string, string])[];
  /** Must be absent or null: vram has no masked arrays. */
  readonly mask?: unknown;
  /** v3: absent or null (no synchronisation needed), 1 the legacy default stream, 2 per-thread, else a CUstream. */
  readonly stream?: number | bigint | null;
}

/** Options of `toCudaArrayInterface`. */
export interface ToCudaArrayInterfaceOptions {
  /**
   * The stream the array's pending work is on, which consumers wait for; default the array's own
   * stream (its legacy default stream exports as 1). `null` omits it: the data is ready now.
   */
  readonly stream?: StreamRef | null;
}

/** Options of `fromCudaArrayInterface`. */
export interface FromCudaArrayInterfaceOptions {
  /** What keeps the memory alive (the producer's array): held until the returned array is freed. */
  readonly owner?: unknown;
  /** The device that will use the memory (default the one the driver reports for it). */
  readonly device?: Device | number;
  /** The consumer's stream: it waits for the producer's stream, and is the array's default stream. Default the legacy default stream. */
  readonly stream?: StreamRef;
  /**
   * The array's dtype when it is not the typestr's own: a vector dtype whose components are the
   * interface's last dimension (`{ dtype: 'float3' }` for `<f4` of shape [n, 3]).
   */
  readonly dtype?: DTypeName | DType;
}

/** What an imported interface said beyond the layout. */
export interface CudaArrayInterfaceInfo {
  /** The interface's version (2 or 3). */
  readonly version: number;
  /**
   * The producer marked the data read-only. The array is imported read-only: copies, fills and
   * operations refuse to write it (copy it first: `a.copy()`), and exports say it is read-only.
   */
  readonly readOnly: boolean;
  /** The typestr as given. */
  readonly typestr: string;
}

/** The typestr kind and size of each scalar dtype (bfloat16 has none). */
const typestrOf: Readonly<Partial<Record<ScalarName, string>>> = {
  bool: 'b1',
  int8: 'i1',
  uint8: 'u1',
  int16: 'i2',
  uint16: 'u2',
  int32: 'i4',
  uint32: 'u4',
  int64: 'i8',
  uint64: 'u8',
  float16: 'f2',
  float32: 'f4',
  float64: 'f8',
};

/** The scalar dtype of each typestr kind and size. */
const dtypeOfTypestr: ReadonlyMap<string, ScalarName> = new Map(Object.entries(typestrOf).map(([name, code]) => [code, name as ScalarName]));

/** Import info of the arrays `fromCudaArrayInterface` returned. */
const imported = new WeakMap<DeviceArray, CudaArrayInterfaceInfo>();

/** The largest ndim read (NumPy's limit): more is not an array description. */
const MAX_NDIM = 64;

/**
 * Describes a DeviceArray as a CUDA Array Interface v3 object. The object holds a raw address
 * and does not keep the array alive: the producer keeps the array (and the consumer passes it as
 * `owner` when importing with vram) until the consumer is done. Spillable memory is leased while
 * the object lives (until it is garbage-collected): it stays on the device at that address.
 *
 * @param array The array (any layout; a mapped HostArray's `deviceView()` too).
 * @param options `stream`: the stream consumers wait for (default the array's; null: none).
 * @returns `{ shape, typestr, descr, data, strides, version: 3, stream? }`; `data[1]` is true for
 *   memory lent read-only (`array.readOnly`), which the next consumer must not write either.
 * @throws {TypeError} When `array` is not a DeviceArray, or `stream` not a stream.
 * @throws {NotSupportedError} For bfloat16 and bfloat162, which the interface cannot express.
 * @throws {UseAfterFreeError} When the array's memory was freed.
 * @example
 * ```ts
 * using a = DeviceArray.from(new Float32Array(6), { shape: [2, 3] });
 * toCudaArrayInterface(a.T); // { shape: [3, 2], typestr: '<f4', strides: [4, 12], data: [ptr, false], version: 3, stream: 1, ... }
 * ```
 */
export function toCudaArrayInterface(array: DeviceArray, options: ToCudaArrayInterfaceOptions = {}): CudaArrayInterface {
  if (!(array instanceof DeviceArray)) throw new TypeError('toCudaArrayInterface expects a DeviceArray');
  options = readOptions('toCudaArrayInterface', options, { stream: true });
  const dt = array.dtype;
  const code = typestrOf[dt.component];
  if (code === undefined) {
    throw new NotSupportedError(`toCudaArrayInterface: the CUDA Array Interface has no typestr for ${dt.component} (NumPy has no such type)`);
  }
  const typestr = `${code.endsWith('1') ? '|' : '<'}${code}`;
  const given = options.stream; // read once: the stream checked is the stream exported
  const stream = given === undefined ? array.stream : given;
  const streamNumber = stream === null ? undefined : exportedStream(stream);
  const ptr = array.ptr; // UseAfterFreeError once freed
  // Spillable memory stays on the device at its address while the exported object lives.
  const buffer = array.buffer;
  const lease = buffer instanceof DeviceBuffer && buffer.spillable ? buffer.lease({ readOnly: array.readOnly }) : undefined;
  // Other memory meets the residency hook as any use does (a ForeignMirror's host side copied over; the consumer may write).
  if (lease === undefined) prepareUse(buffer, undefined, !array.readOnly);
  const vector = dt.components > 1;
  const itemSize = dt.byteSize / dt.components;
  const shape = vector ? [...array.shape, dt.components] : [...array.shape];
  const strides = array.isContiguous ? null : [...array.strides.map((s) => s * dt.byteSize), ...(vector ? [itemSize] : [])];
  const exported: CudaArrayInterface = {
    shape,
    typestr,
    descr: [['', typestr]],
    data: [array.size === 0 ? 0 : lease === undefined ? ptr : lease.ptr + array.byteOffset, array.readOnly],
    strides,
    version: 3,
    ...(streamNumber === undefined ? {} : { stream: streamNumber }),
  };
  if (lease !== undefined) exportLeases.register(exported, lease);
  return exported;
}

/** The leases of exported interfaces over spillable memory, each released once its object is collected. */
const exportLeases = new FinalizationRegistry<SpillLease>((lease) => lease.release());

/**
 * A DeviceArray over the memory a CUDA Array Interface object describes, without a copy. Every
 * field is checked first; the address then goes through `DeviceArray.fromPointer` (the driver
 * must know it, and the layout must lie inside its allocation). When the interface names a
 * stream, `options.stream` is made to wait for it (an event and a stream wait). The array owns
 * only the wrapper: freeing it drops `owner`. An interface with no elements gives a new empty
 * array (there is no memory to wrap). What the interface said beyond the layout (read-only,
 * version) is `cudaArrayInterfaceInfo(array)`.
 *
 * @param obj The interface object.
 * @param options `owner`, `device`, `stream` (the consumer's), `dtype` (a vector dtype over the last dimension).
 * @returns The array.
 * @throws {TypeError} For a field of the wrong type, or a malformed typestr or descr.
 * @throws {RangeError} For a bad shape, strides that are not whole multiples of the item size,
 *   stream 0 (the spec forbids it), or a dtype that does not match the typestr and last dimension.
 * @throws {NotSupportedError} For a version other than 2 or 3, a mask, a structured descr, or a
 *   type vram does not have (big-endian, complex, ...).
 * @throws {InvalidPointerError} When the driver does not know the address, or the layout reaches
 *   past its allocation (see `DeviceArray.fromPointer`).
 * @example
 * ```ts
 * const cai = toCudaArrayInterface(points); // a float3 array: '<f4' of [n, 3]
 * using back = fromCudaArrayInterface(cai, { owner: points, dtype: 'float3' });
 * ```
 */
export function fromCudaArrayInterface(obj: CudaArrayInterface, options: FromCudaArrayInterfaceOptions = {}): DeviceArray {
  if (obj === null || typeof obj !== 'object') throw new TypeError('fromCudaArrayInterface expects an object');
  options = readOptions('fromCudaArrayInterface', options, { owner: true, device: true, stream: true, dtype: true });
  const version = obj.version;
  if (typeof version !== 'number') throw new TypeError(`version must be a number, got ${typeof version}`);
  if (version !== 2 && version !== 3) throw new NotSupportedError(`CUDA Array Interface version ${version}: vram reads versions 2 and 3`);
  const { typestr, scalar } = parseTypestr(obj.typestr);
  checkDescr(obj.descr, typestr);
  if (obj.mask !== undefined && obj.mask !== null) throw new NotSupportedError('a CUDA Array Interface with a mask: vram has no masked arrays');
  const shape = readShape(obj.shape);
  const itemSize = dtypes[scalar].byteSize;
  const strides = readStrides(obj.strides, shape.length, itemSize);
  const [address, readOnly] = readData(obj.data);
  const producer = readStream(obj.stream);
  if (options.stream !== undefined) streamHandleOf(options.stream);
  const { dt, outShape, outStrides } = fold(scalar, shape, strides, options.dtype);
  const size = outShape.reduce((a, b) => a * b, 1);
  let array: DeviceArray;
  if (size === 0) {
    array = DeviceArray.empty(outShape, dt, { device: options.device, stream: options.stream });
  } else {
    const low = outStrides === undefined ? 0 : outStrides.reduce((sum, s, i) => sum + Math.min(0, s * (outShape[i]! - 1)), 0);
    // The interface points at element (0, ..., 0); fromPointer takes the lowest byte reached.
    array = DeviceArray.fromPointer(address + low * dt.byteSize, outShape, dt, {
      owner: options.owner,
      device: options.device,
      stream: options.stream,
      readOnly,
      byteOffset: Math.abs(low * dt.byteSize),
      ...(outStrides === undefined ? {} : { strides: outStrides }),
    });
    if (producer !== undefined) {
      try {
        waitForProducer(array, producer, options.stream);
      } catch (error) {
        array.free();
        throw error;
      }
    }
  }
  imported.set(array, Object.freeze({ version, readOnly, typestr }));
  return array;
}

/**
 * What `fromCudaArrayInterface` read beyond the layout, for an array it returned.
 *
 * @param array An array.
 * @returns `{ version, readOnly, typestr }`, or undefined for an array not imported that way.
 * @throws Never.
 * @example
 * ```ts
 * const a = fromCudaArrayInterface(cai);
 * const writable = cudaArrayInterfaceInfo(a)?.readOnly ? a.copy() : a;
 * ```
 */
export function cudaArrayInterfaceInfo(array: DeviceArray): CudaArrayInterfaceInfo | undefined {
  return imported.get(array);
}

/** The v3 stream number of a stream: 1 for a legacy default stream, else its handle. */
function exportedStream(stream: StreamRef): number {
  const handle = streamHandleOf(stream);
  return handle === DEFAULT_STREAM ? 1 : handle;
}

/** Checks a typestr and returns it with its scalar dtype. */
function parseTypestr(value: unknown): { typestr: string; scalar: ScalarName } {
  if (typeof value !== 'string') throw new TypeError(`typestr must be a string, got ${typeof value}`);
  const m = /^([<>|=])([a-zA-Z])(\d+)$/.exec(value);
  if (m === null) throw new TypeError(`typestr '${value}' is not a NumPy type string (byte order, kind, size: '<f4')`);
  const [, order, kind, size] = m as unknown as [string, string, string, string];
  const scalar = dtypeOfTypestr.get(`${kind}${size}`);
  if (scalar === undefined) {
    throw new NotSupportedError(`typestr '${value}': vram has no ${kind}${size} type (it reads b1, i1-i8, u1-u8, f2, f4, f8)`);
  }
  if (order === '>' && size !== '1') {
    throw new NotSupportedError(`typestr '${value}' is big-endian; CUDA devices are little-endian`);
  }
  if (order === '|' && size !== '1') throw new TypeError(`typestr '${value}': '|' (no byte order) is only for one-byte types`);
  return { typestr: value, scalar };
}

/** Accepts an absent descr or the plain one, `[['', typestr]]`; a structured descr is not supported. */
function checkDescr(descr: unknown, typestr: string): void {
  if (descr === undefined || descr === null) return;
  if (!Array.isArray(descr)) throw new TypeError('descr must be a list of [name, typestr] pairs');
  const plain = descr.length === 1 && Array.isArray(descr[0]) && descr[0].length === 2 && descr[0][0] === '' && descr[0][1] === typestr;
  if (!plain) throw new NotSupportedError(`a structured descr (${JSON.stringify(descr)}): vram reads the plain [['', '${typestr}']] only`);
}

function readShape(value: unknown): number[] {
  if (!Array.isArray(value)) throw new TypeError('shape must be an array of whole numbers');
  if (value.length > MAX_NDIM) throw new RangeError(`shape has ${value.length} dimensions; at most ${MAX_NDIM} are read`);
  return checkShape(value).slice();
}

/** Strides in bytes, checked and turned into items; undefined for C-contiguous. */
function readStrides(value: unknown, ndim: number, itemSize: number): number[] | undefined {
  if (value === undefined || value === null) return undefined;
  if (!Array.isArray(value)) throw new TypeError('strides must be an array of byte counts, or null');
  if (value.length !== ndim) throw new RangeError(`strides has ${value.length} entries; the shape has ${ndim} dimensions`);
  return (value as unknown[]).map((s, i) => {
    if (typeof s !== 'number') throw new TypeError(`strides[${i}] must be a number, got ${typeof s}`);
    if (!Number.isSafeInteger(s) || s % itemSize !== 0) {
      throw new RangeError(`strides[${i}] = ${s} is not a whole multiple of the item size (${itemSize} bytes)`);
    }
    return s / itemSize;
  });
}

function readData(value: unknown): [number, boolean] {
  if (!Array.isArray(value) || value.length !== 2) throw new TypeError('data must be [address, readOnly]');
  const [address, readOnly] = value as [unknown, unknown];
  if (typeof readOnly !== 'boolean') throw new TypeError(`data[1] (read-only) must be a boolean, got ${typeof readOnly}`);
  return [readAddress(address, 'data[0]'), readOnly];
}

/** A number or bigint that is an address (a whole number from 0 to 2^53). */
function readAddress(value: unknown, name: string): number {
  if (typeof value === 'bigint') {
    if (value < 0n || value > BigInt(Number.MAX_SAFE_INTEGER)) throw new RangeError(`${name} = ${value} is not an address below 2^53`);
    return Number(value);
  }
  if (typeof value !== 'number') throw new TypeError(`${name} must be a number or bigint, got ${typeof value}`);
  if (!Number.isSafeInteger(value) || value < 0) throw new RangeError(`${name} = ${value} is not an address`);
  return value;
}

/** The producer's stream as a handle, or undefined when none was named. */
function readStream(value: unknown): Handle | undefined {
  if (value === undefined || value === null) return undefined;
  const n = readAddress(value, 'stream');
  if (n === 0) throw new RangeError('stream 0 is forbidden by the CUDA Array Interface (ambiguous): 1 is the legacy default stream, 2 the per-thread one');
  // 1 is CU_STREAM_LEGACY (the legacy default stream, handle 0 here); 2 is CU_STREAM_PER_THREAD
  // as the driver spells it; any other number is a CUstream.
  return n === 1 ? DEFAULT_STREAM : n;
}

/** The array's dtype and layout in its elements: the scalar's, or a vector's over the last dimension. */
function fold(
  scalar: ScalarName,
  shape: number[],
  strides: number[] | undefined,
  wanted: DTypeName | DType | undefined,
): { dt: DType; outShape: number[]; outStrides: number[] | undefined } {
  if (wanted === undefined) return { dt: dtypes[scalar], outShape: shape, outStrides: strides };
  const dt = dtypeOf(wanted);
  if (dt.component !== scalar) {
    throw new RangeError(`dtype ${dt.name} is made of ${dt.component}, but the typestr describes ${scalar}`);
  }
  if (dt.components === 1) return { dt, outShape: shape, outStrides: strides };
  const last = shape.length - 1;
  if (last < 0 || shape[last] !== dt.components || (strides !== undefined && strides[last] !== 1)) {
    throw new RangeError(
      `dtype ${dt.name} needs a last dimension of ${dt.components} contiguous components, ` +
        `got shape [${shape.join(', ')}]${strides === undefined ? '' : ` with strides (items) [${strides.join(', ')}]`}`,
    );
  }
  let outStrides: number[] | undefined;
  if (strides !== undefined) {
    outStrides = strides.slice(0, last).map((s, i) => {
      if (s % dt.components !== 0) {
        throw new RangeError(`dtype ${dt.name}: stride ${s} of dimension ${i} is not a whole number of ${dt.name} elements`);
      }
      return s / dt.components;
    });
  }
  return { dt, outShape: shape.slice(0, last), outStrides };
}

/**
 * Makes the consumer's stream wait for the work queued so far on the producer's: an event
 * recorded on the producer's stream in the memory's context (where the producer's stream lives),
 * then cuStreamWaitEvent on the consumer's stream in its own context. No host wait.
 */
function waitForProducer(array: DeviceArray, producer: Handle, consumer: StreamRef | undefined): void {
  const memory = array.buffer;
  const backend = array.device.backend;
  const enter = (): void => {
    if (memory instanceof DeviceMemory) memory.makeCurrent();
    else array.device.makeCurrent();
  };
  enter();
  const event = backend.eventCreate(EventFlags.DISABLE_TIMING);
  try {
    backend.eventRecord(event, producer);
    if (consumer instanceof Stream) consumer.device.makeCurrent();
    else array.device.makeCurrent();
    backend.streamWaitEvent(streamHandleOf(consumer), event);
  } finally {
    // Safe while the wait is pending: the driver keeps what a queued wait needs.
    enter();
    backend.eventDestroy(event);
  }
}
