/**
 * HostArray: a typed n-dimensional array in pinned (page-locked) host memory, PyCUDA's
 * `pagelocked_empty` family. Pinned memory is what the copy engines read and write directly, so
 * copies between a HostArray and a DeviceArray are DMA-fast and may be asynchronous on a stream.
 *
 * Zero-copy access: `data` is the dtype's TypedArray over the pinned bytes of a contiguous array
 * (components flat: a float3 array's `data` is a Float32Array of 3 * size). A strided array (a
 * slice with steps, a transpose) has no such flat view of its elements; `view()` gives the
 * TypedArray over the bytes it spans, and `elementIndex(...index)` where an element's first
 * component is in it. Reading write-combined memory from JavaScript is very slow: the first view
 * of one emits HostBuffer's one-time VRAM_WRITE_COMBINED_READ warning.
 *
 * Mapped memory (`{ mapped: true }`) is also addressable by the device: `deviceView()` is a
 * DeviceArray over the same bytes that kernels read and write in place (zero-copy, over PCIe).
 *
 * Lifetimes as for DeviceArray: an array that allocated its HostBuffer owns it (`free()`,
 * `using`, or the buffer's garbage-collection backstop); views and TypedArray views keep it
 * reachable and never free it; after an explicit free, TypedArray views must not be used.
 */
import type { Device } from '../device.js';
import { UseAfterFreeError, VramStateError } from '../errors.js';
import { bytesOf, checkWritableMemory } from '../buffer/copy-planning.js';
import { HostBuffer, type HostBufferOptions } from '../buffer/host-buffer.js';
import { checkNonNegativeInteger } from '../validate.js';
import { readOptions } from '../util/options.js';
import { DeviceArray, resolveHostInput, type AsyncCopyOptions, type InferableTypedArray, type InferredDType, type NestedNumbers } from './device-array.js';
import { defaultDType, dtypeOf, hostArrayType, type DefaultDType, type DType, type DTypeName, type HostTypedArray } from './dtype.js';
import { allocateHost, hostElements, type HostInput, type NestedArray } from './host-data.js';
import { byteSpan, checkLayoutFits, checkStrides, contiguousLayout, copyElements, isContiguous, transposeLayout, type Layout } from './layout.js';
import { StridedArray } from './strided-array.js';
import { checkShape, elementCount, formatShape, type Shape, type ShapeInput } from './shape.js';

/** Options of `HostArray.empty` and `zeros`: the pinned-memory flags (or a resource), and the element order. */
export interface HostArrayOptions extends HostBufferOptions {
  /**
   * `'C'` (row-major, the last index fastest; the default) or `'F'` (column-major, Fortran's and
   * PyCUDA's `pagelocked_empty(..., order='F')`: the first index fastest).
   */
  readonly order?: 'C' | 'F';
}

/** Options of `HostArray.emptyLike` and `zerosLike`: as `HostArrayOptions`, with the order kept by default. */
export interface HostArrayLikeOptions extends HostBufferOptions {
  /**
   * `'K'` (the default: keep the source's order, `'F'` for an array that is column-major and not
   * row-major, `'C'` otherwise), or `'C'` or `'F'` to choose.
   */
  readonly order?: 'C' | 'F' | 'K';
}

const HOST_ARRAY_OPTIONS = { device: true, portable: true, mapped: true, writeCombined: true, resource: true, stream: true, order: true } as const;

/** A contiguous layout in row-major (`'C'`) or column-major (`'F'`) order. */
function orderedLayout(shape: Shape, itemSize: number, order: unknown): Layout {
  if (order === undefined || order === 'C') return contiguousLayout(shape, itemSize);
  if (order !== 'F') throw new RangeError(`order must be 'C' or 'F', got ${typeof order === 'string' ? `'${order}'` : typeof order}`);
  return transposeLayout(contiguousLayout([...shape].reverse(), itemSize));
}

/** The order a `_like` array takes: the one asked for, else the source's. */
function likeOrder(like: StridedArray<DTypeName>, order: unknown): 'C' | 'F' {
  if (order === 'C' || order === 'F') return order;
  if (order !== undefined && order !== 'K')
    throw new RangeError(`order must be 'C', 'F' or 'K', got ${typeof order === 'string' ? `'${order}'` : typeof order}`);
  return !like.isContiguous && isContiguous(transposeLayout(like.layout)) ? 'F' : 'C';
}

/** Options of `HostArray.from`: the dtype (inferred from a TypedArray), shape, and the pinned-memory flags. */
export interface HostArrayFromOptions<N extends DTypeName> extends HostBufferOptions {
  /** The element type; inferred from a TypedArray's class when left out. */
  readonly dtype?: N | DType<N>;
  /** The array's shape in elements (one number for one dimension); inferred from the data when left out. */
  readonly shape?: ShapeInput;
}

/** Options of `HostArray.fromBuffer`: how the array lies in the pinned memory. */
export interface HostArrayViewOptions<N extends DTypeName> {
  /** The element type. */
  readonly dtype: N | DType<N>;
  /** The shape; default as many whole elements as fit after `byteOffset`, in one dimension. */
  readonly shape?: Shape;
  /** Strides in elements; default row-major. */
  readonly strides?: readonly number[];
  /** Byte offset of element (0, ..., 0); a multiple of the dtype's alignment. Default 0. */
  readonly byteOffset?: number;
}

/**
 * A typed n-dimensional array in pinned host memory.
 *
 * @example
 * ```ts
 * using h = HostArray.empty([1024, 3], 'float32', { mapped: true });
 * h.data.fill(1);                         // zero-copy
 * using d = DeviceArray.emptyLike(h);
 * await d.copyFromAsync(h, { stream });   // DMA straight from the pinned bytes
 * kernelArgs(h.deviceView().ptr);         // or let a kernel read it in place
 * ```
 */
export class HostArray<N extends DTypeName = DTypeName> extends StridedArray<N> {
  /** The pinned memory the array lives in (shared with its views). */
  readonly buffer: HostBuffer;

  private constructor(dtype: DType<N>, layout: Layout, buffer: HostBuffer, owns: boolean) {
    super(dtype, layout, owns);
    this.buffer = buffer;
  }

  /**
   * A new contiguous array of uninitialised pinned memory (PyCUDA's `pagelocked_empty`).
   *
   * @param shape The shape, or one number for one dimension.
   * @param dtype The element type; default float32 (`defaultDType`, as `DeviceArray.empty`).
   * @param options `portable`, `mapped`, `writeCombined` (cuMemHostAlloc flags), or a pinned
   *   `resource` (a PinnedHostPool) and the `stream` it is allocated and freed on; `order` `'C'`
   *   (default) or `'F'` (column-major).
   * @returns The array; it owns its memory.
   * @throws {TypeError | RangeError} For a bad shape, dtype, flag or order.
   * @throws {OutOfMemoryError} When no pinned memory is left.
   * @example
   * ```ts
   * using staging = HostArray.empty([1080, 1920], 'uchar4', { writeCombined: true });
   * ```
   */
  static empty<N extends DTypeName = DefaultDType>(shape: ShapeInput, dtype?: N | DType<N>, options: HostArrayOptions = {}): HostArray<N> {
    const { order, ...bufferOptions } = readOptions('HostArray.empty', options, HOST_ARRAY_OPTIONS);
    const s = checkShape(shape);
    const dt = dtypeOf(dtype ?? (defaultDType as N));
    const layout = orderedLayout(s, dt.byteSize, order);
    const bytes = elementCount(s) * dt.byteSize;
    // An empty array still holds a (1-byte) buffer, so every array has memory and flags.
    const buffer = HostBuffer.allocate(Math.max(bytes, 1), bufferOptions);
    return new HostArray(dt, layout, buffer, true);
  }

  /**
   * A new contiguous array of zeros in pinned memory (zeroed through a view: for write-combined
   * memory that view emits the one-time write-combined warning).
   *
   * @param shape The shape, or one number for one dimension.
   * @param dtype The element type; default float32.
   * @param options Pinned-memory flags, or a resource and stream.
   * @returns The array.
   * @throws {TypeError | RangeError} For a bad shape, dtype or flag.
   * @throws {OutOfMemoryError} When no pinned memory is left.
   * @example
   * ```ts
   * using counts = HostArray.zeros([256], 'uint32');
   * ```
   */
  static zeros<N extends DTypeName = DefaultDType>(shape: ShapeInput, dtype?: N | DType<N>, options: HostArrayOptions = {}): HostArray<N> {
    options = readOptions('HostArray.zeros', options, HOST_ARRAY_OPTIONS);
    const a = HostArray.empty(shape, dtype, options);
    a.buffer.view().fill(0);
    return a;
  }

  /**
   * A new uninitialised contiguous pinned array of the shape and dtype of `like`, in its order
   * (column-major when `like` is; `order` chooses).
   *
   * @param like A DeviceArray or HostArray.
   * @param options Pinned-memory flags, or a resource and stream; `order` `'K'` (default), `'C'` or `'F'`.
   * @returns The array.
   * @throws {TypeError} When `like` is not an array.
   * @throws {OutOfMemoryError} When no pinned memory is left.
   * @example
   * ```ts
   * using out = HostArray.emptyLike(deviceResult);
   * ```
   */
  static emptyLike<N extends DTypeName>(like: StridedArray<N>, options: HostArrayLikeOptions = {}): HostArray<N> {
    if (!(like instanceof StridedArray)) throw new TypeError('emptyLike expects a DeviceArray or HostArray');
    const { order, ...rest } = readOptions('HostArray.emptyLike', options, HOST_ARRAY_OPTIONS);
    return HostArray.empty(like.shape, like.dtype, { ...rest, order: likeOrder(like, order) });
  }

  /**
   * A new contiguous pinned array of zeros of the shape and dtype of `like`, in its order.
   *
   * @param like A DeviceArray or HostArray.
   * @param options Pinned-memory flags, or a resource and stream; `order` `'K'` (default), `'C'` or `'F'`.
   * @returns The array.
   * @throws {TypeError} When `like` is not an array.
   * @throws {OutOfMemoryError} When no pinned memory is left.
   * @example
   * ```ts
   * using out = HostArray.zerosLike(deviceResult);
   * ```
   */
  static zerosLike<N extends DTypeName>(like: StridedArray<N>, options: HostArrayLikeOptions = {}): HostArray<N> {
    if (!(like instanceof StridedArray)) throw new TypeError('zerosLike expects a DeviceArray or HostArray');
    const { order, ...rest } = readOptions('HostArray.zerosLike', options, HOST_ARRAY_OPTIONS);
    return HostArray.zeros(like.shape, like.dtype, { ...rest, order: likeOrder(like, order) });
  }

  /**
   * A new pinned array holding a copy of host data (as `DeviceArray.from`: the dtype's
   * TypedArray, whose class names the dtype when none is given, raw bytes, or plain arrays, nested
   * or not, of float32 by default).
   *
   * @param data The host data.
   * @param options dtype, shape, and the pinned-memory flags or resource.
   * @returns The array.
   * @throws {TypeError} For data of the wrong type for the dtype, or no dtype for raw bytes.
   * @throws {RangeError} When the shape does not match the data.
   * @throws {OutOfMemoryError} When no pinned memory is left.
   * @example
   * ```ts
   * using h = HostArray.from(new Float32Array(300), { dtype: 'float3', mapped: true });
   * ```
   */
  static from<N extends DTypeName>(data: HostInput<N>, options: HostArrayFromOptions<N> & { readonly dtype: N | DType<N> }): HostArray<N>;
  static from<T extends InferableTypedArray>(data: T, options?: HostArrayFromOptions<InferredDType<T>>): HostArray<InferredDType<T>>;
  static from(data: NestedNumbers, options?: HostArrayFromOptions<DefaultDType>): HostArray<DefaultDType>;
  static from(data: NestedArray, options?: HostArrayFromOptions<DTypeName>): HostArray;
  static from(data: unknown, options: HostArrayFromOptions<DTypeName> = {}): HostArray {
    options = readOptions('HostArray.from', options, {
      dtype: true,
      shape: true,
      ...{ device: true, portable: true, mapped: true, writeCombined: true, resource: true, stream: true },
    });
    const { dtype: dt, shape: given, ...flags } = options;
    const { dtype, bytes, shape } = resolveHostInput(data, dt, given);
    const a = HostArray.empty(shape, dtype, flags);
    a.buffer.view(Uint8Array, { length: bytes.byteLength }).set(bytes);
    return a;
  }

  /**
   * An array over a HostBuffer the caller owns (allocated, or registered JavaScript memory).
   * The array does not own it: free the buffer.
   *
   * @param buffer The pinned memory.
   * @param options dtype (required), shape, strides (elements), byteOffset.
   * @returns The array.
   * @throws {TypeError} When `buffer` is not a HostBuffer, or for bad options.
   * @throws {RangeError} When the layout reaches outside the buffer, or byteOffset is misaligned.
   * @throws {UseAfterFreeError} When the buffer was freed.
   * @example
   * ```ts
   * const pinnedInPlace = HostBuffer.register(samples);
   * const h = HostArray.fromBuffer(pinnedInPlace, { dtype: 'float32' });
   * ```
   */
  static fromBuffer<N extends DTypeName>(buffer: HostBuffer, options: HostArrayViewOptions<N>): HostArray<N> {
    if (!(buffer instanceof HostBuffer)) throw new TypeError('HostArray.fromBuffer expects a HostBuffer');
    options = readOptions('HostArray.fromBuffer', options, { dtype: true, shape: true, strides: true, byteOffset: true });
    const dt = dtypeOf(options.dtype);
    if (buffer.freed) throw new UseAfterFreeError(`HostArray.fromBuffer: ${String(buffer)} was freed`);
    const byteOffset = checkNonNegativeInteger(options.byteOffset ?? 0, 'byteOffset');
    if (byteOffset % dt.alignment !== 0) {
      throw new RangeError(`byteOffset ${byteOffset} is not a multiple of ${dt.name}'s alignment (${dt.alignment})`);
    }
    const shape = Object.freeze(
      (options.shape === undefined ? [Math.floor(Math.max(0, buffer.byteLength - byteOffset) / dt.byteSize)] : checkShape(options.shape)).slice(),
    );
    const layout: Layout =
      options.strides === undefined
        ? contiguousLayout(shape, dt.byteSize, byteOffset)
        : { shape, strides: checkStrides(options.strides, shape.length), byteOffset, itemSize: dt.byteSize };
    checkLayoutFits(layout, buffer.byteLength, 'HostArray.fromBuffer');
    return new HostArray(dt, layout, buffer, false);
  }

  /** True when the device can address the memory (`deviceView()`). */
  get mapped(): boolean {
    return this.buffer.mapped;
  }

  /** True when pinned for every context. */
  get portable(): boolean {
    return this.buffer.portable;
  }

  /** True for write-combined memory: fast for the GPU to read, very slow for JavaScript to read. */
  get writeCombined(): boolean {
    return this.buffer.writeCombined;
  }

  /**
   * The elements as the dtype's TypedArray over the pinned bytes (zero-copy; components flat),
   * for a contiguous array, in memory order: row-major, or column-major for an `order: 'F'` array.
   * Writes through it are the array's elements.
   *
   * @returns The TypedArray, `size * components` long.
   * @throws {VramStateError} For a strided array (use `view()` with `elementIndex`, or `toHost()` for a copy).
   * @throws {UseAfterFreeError} When the memory was freed.
   * @example
   * ```ts
   * h.data.set(samples);
   * ```
   */
  get data(): HostTypedArray<N> {
    this.checkAlive();
    if (!this.isContiguous && !isContiguous(transposeLayout(this.layout))) {
      throw new VramStateError(
        `${String(this)} is strided (strides (${this.strides.join(', ')})): its elements are not one ` +
          'flat run; use view() and elementIndex(), or toHost() for a contiguous copy',
      );
    }
    return this.view();
  }

  /**
   * The dtype's TypedArray over the pinned bytes this array spans (zero-copy). For a contiguous
   * array it is exactly the elements (as `data`); for a strided one it also covers the bytes
   * between them, and `elementIndex(...index)` says where each element is.
   *
   * @returns The TypedArray.
   * @throws {UseAfterFreeError} When the memory was freed.
   * @example
   * ```ts
   * const v = h.T.view();
   * v[h.T.elementIndex(2, 0)] = 1; // h[0, 2]
   * ```
   */
  view(): HostTypedArray<N> {
    this.checkAlive();
    const Type = hostArrayType(this.dtype);
    const { start, end } = byteSpan(this.layout);
    return this.buffer.view(Type, { byteOffset: start, length: (end - start) / Type.BYTES_PER_ELEMENT });
  }

  /**
   * Where element `index` (one whole number per dimension, 0 <= i < extent) has its first
   * component in `view()`: the element's components follow it.
   *
   * @param index The element's index.
   * @returns The position in `view()`.
   * @throws {RangeError} For the wrong number of indices or one out of range.
   * @throws {TypeError} For an index that is not a number.
   * @example
   * ```ts
   * const [x, y, z] = points.view().subarray(points.elementIndex(7), points.elementIndex(7) + 3);
   * ```
   */
  elementIndex(...index: number[]): number {
    if (index.length !== this.ndim) throw new RangeError(`elementIndex: ${index.length} indices for ${this.ndim} dimensions`);
    const components = this.dtype.components;
    const componentBytes = this.dtype.byteSize / components;
    let at = (this.byteOffset - byteSpan(this.layout).start) / componentBytes;
    index.forEach((i, axis) => {
      if (typeof i !== 'number') throw new TypeError(`elementIndex: index ${axis} must be a number, got ${typeof i}`);
      if (!Number.isInteger(i) || i < 0 || i >= this.shape[axis]!) {
        throw new RangeError(`elementIndex: index ${i} is out of range for axis ${axis} with extent ${this.shape[axis]!}`);
      }
      at += i * this.strides[axis]! * components;
    });
    return at;
  }

  /**
   * A DeviceArray over the same bytes, for mapped memory: kernels read and write it in place
   * through `deviceView().ptr` (zero-copy over the bus). It is a view: it does not own the memory.
   *
   * @param options The device whose kernels use it (device 0 by default).
   * @returns The device view (same dtype, shape, strides and offset).
   * @throws {VramStateError} When the memory is not mapped (allocate it with `{ mapped: true }`).
   * @throws {UseAfterFreeError} When the memory was freed.
   * @example
   * ```ts
   * using h = HostArray.zeros([4096], 'float32', { mapped: true });
   * launch(kernel, { args: [h.deviceView().ptr, h.size] });
   * ```
   */
  deviceView(options: { readonly device?: Device | number } = {}): DeviceArray<N> {
    options = readOptions('HostArray.deviceView', options, { device: true });
    this.checkAlive();
    if (!this.buffer.mapped) {
      throw new VramStateError(`${String(this)} is not mapped: allocate it with { mapped: true } for the device to address it`);
    }
    return DeviceArray.fromBuffer(this.buffer, {
      dtype: this.dtype,
      shape: this.shape,
      strides: this.strides,
      byteOffset: this.byteOffset,
      device: options.device,
    });
  }

  /**
   * The elements as a new contiguous TypedArray of the dtype's host type (strides honoured).
   *
   * @returns The copy.
   * @throws {UseAfterFreeError} When the memory was freed.
   * @example
   * ```ts
   * const column = h.slice(null, 0).toHost();
   * ```
   */
  toHost(): HostTypedArray<N> {
    this.checkAlive();
    const out = allocateHost(this.dtype, this.size);
    copyElements(bytesOf(out), contiguousLayout(this.shape, this.dtype.byteSize), this.buffer.view(), this.layout);
    return out;
  }

  /**
   * Copies into this array's elements (strides honoured) from host data of its dtype and shape,
   * another HostArray, or a DeviceArray (a device-to-host copy into the pinned memory). Synchronous.
   *
   * @param src The data.
   * @throws {TypeError} For data of another dtype.
   * @throws {RangeError} For data of another shape or size.
   * @throws {UseAfterFreeError} When either side's memory was freed.
   * @example
   * ```ts
   * h.copyFrom(deviceResult);
   * ```
   */
  copyFrom(src: HostInput<N> | StridedArray<N>): void {
    this.checkAlive();
    if (src instanceof DeviceArray) {
      src.copyTo(this);
      return;
    }
    let bytes: Uint8Array;
    if (src instanceof HostArray) {
      this.checkSame(src, 'copyFrom');
      bytes = bytesOf(src.toHost());
    } else if (src instanceof StridedArray) {
      throw new TypeError('HostArray.copyFrom expects host data, a HostArray or a DeviceArray');
    } else {
      bytes = hostElements(this.dtype, src, this.shape).bytes;
    }
    checkWritableMemory(this.buffer, 'HostArray.copyFrom');
    copyElements(this.buffer.view(), this.layout, bytes, contiguousLayout(this.shape, this.dtype.byteSize));
  }

  /**
   * Copies this array's elements into `dst`: the dtype's TypedArray or raw bytes (row-major;
   * returned), another HostArray, or a DeviceArray (a host-to-device copy from the pinned memory).
   *
   * @param dst The destination.
   * @returns `dst`.
   * @throws {TypeError} For a destination of another dtype.
   * @throws {RangeError} For a destination of another shape or size.
   * @throws {UseAfterFreeError} When either side's memory was freed.
   * @example
   * ```ts
   * h.copyTo(deviceInput);
   * ```
   */
  copyTo<T extends HostTypedArray<N> | ArrayBuffer | DataView | StridedArray<N>>(dst: T): T {
    this.checkAlive();
    if (dst instanceof DeviceArray || dst instanceof HostArray) {
      (dst as DeviceArray<N> | HostArray<N>).copyFrom(this);
      return dst;
    }
    if (dst instanceof StridedArray) throw new TypeError('HostArray.copyTo expects a TypedArray, raw bytes, a HostArray or a DeviceArray');
    if (Array.isArray(dst)) throw new TypeError('HostArray.copyTo: nested arrays cannot be written into; pass a TypedArray');
    const h = hostElements(this.dtype, dst as HostInput<N>, this.shape);
    if (h.copied) throw new TypeError(`HostArray.copyTo: the destination must be a ${this.dtype.name} TypedArray or raw bytes`);
    copyElements(h.bytes, contiguousLayout(this.shape, this.dtype.byteSize), this.buffer.view(), this.layout);
    return dst;
  }

  /**
   * Copies from a DeviceArray on a stream (default the DeviceArray's): the DMA writes the pinned
   * memory directly; resolves once the data is here.
   *
   * @param src The device array (same dtype and shape).
   * @param options The stream.
   * @throws {TypeError | RangeError | UseAfterFreeError} As `copyFrom` (the promise rejects).
   * @example
   * ```ts
   * await h.copyFromAsync(d, { stream });
   * ```
   */
  async copyFromAsync(src: DeviceArray<N>, options: AsyncCopyOptions = {}): Promise<void> {
    if (!(src instanceof DeviceArray)) throw new TypeError('HostArray.copyFromAsync expects a DeviceArray');
    options = readOptions('HostArray.copyFromAsync', options, { stream: true });
    await src.copyToAsync(this, options);
  }

  /**
   * Copies into a DeviceArray on a stream (default the DeviceArray's): the DMA reads the pinned
   * memory directly; resolves once the data is on the device.
   *
   * @param dst The device array (same dtype and shape).
   * @param options The stream.
   * @returns `dst`.
   * @throws {TypeError | RangeError | UseAfterFreeError} As `copyTo` (the promise rejects).
   * @example
   * ```ts
   * await h.copyToAsync(d, { stream });
   * ```
   */
  async copyToAsync(dst: DeviceArray<N>, options: AsyncCopyOptions = {}): Promise<DeviceArray<N>> {
    if (!(dst instanceof DeviceArray)) throw new TypeError('HostArray.copyToAsync expects a DeviceArray');
    options = readOptions('HostArray.copyToAsync', options, { stream: true });
    await dst.copyFromAsync(this, options);
    return dst;
  }

  /**
   * A short description for logs; a freed array still describes itself.
   *
   * @returns `HostArray<float32>(2, 3), mapped`, with its flags (`mapped`, `write-combined`, `view`, `freed`).
   * @throws Never.
   * @example
   * ```ts
   * using h = HostArray.empty([2, 3], 'float32', { mapped: true });
   * String(h); // 'HostArray<float32>(2, 3), mapped'
   * ```
   */
  override toString(): string {
    const flags = [
      this.buffer.mapped ? 'mapped' : '',
      this.buffer.writeCombined ? 'write-combined' : '',
      this.ownsMemory ? '' : 'view',
      this.buffer.freed ? 'freed' : '',
    ].filter(Boolean);
    return `HostArray<${this.dtype.name}>${formatShape(this.shape)}${flags.length > 0 ? `, ${flags.join(', ')}` : ''}`;
  }

  protected withLayout(layout: Layout): this {
    return new HostArray(this.dtype, layout, this.buffer, false) as this;
  }
}
