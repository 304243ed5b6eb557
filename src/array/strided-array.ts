/**
 * `StridedArray`, what DeviceArray and HostArray share: a dtype and a layout (`layout.ts`) over
 * some memory, with the view operations (slice, reshape, transpose) that only change the layout,
 * and how an array prints and writes itself as JSON (`ArrayJSON`).
 */
import { UseAfterFreeError, VramStateError } from '../errors.js';
import type { Allocation } from '../buffer/lifetime.js';
import { heldMemory } from '../buffer/tidy.js';
import { formatArray } from './array-format.js';
import { inspectCustom } from '../util/inspect.js';
import type { DType, DTypeName, HostTypedArray } from './dtype.js';
import { toNested, type NestedArray } from './host-data.js';
import { isContiguous, reshapeLayout, sliceLayout, transposeLayout, type Layout, type SliceSpec } from './layout.js';
import { elementCount, formatShape, type Shape } from './shape.js';

/**
 * An array as `JSON.stringify` writes it: what it is, not its data (read that with `toArray()`).
 * Plain data, so `device` is the ordinal (docs/architecture.md, "Vocabulary").
 */
export interface ArrayJSON {
  /** `DeviceArray` or `HostArray`. */
  readonly type: string;
  /** The dtype's name. */
  readonly dtype: DTypeName;
  /** The shape. */
  readonly shape: readonly number[];
  /** Strides in elements. */
  readonly strides: readonly number[];
  /** Bytes of element data. */
  readonly nbytes: number;
  /** The device's ordinal, for a DeviceArray. */
  readonly device?: number;
  /** False for a view of another array's memory. */
  readonly ownsMemory: boolean;
  /** True once its memory was freed. */
  readonly freed: boolean;
}

/**
 * The shared part of DeviceArray and HostArray: a dtype and a layout over some memory, with the
 * view operations (slice, reshape, transpose) that only change the layout.
 *
 * @example
 * ```ts
 * function describeLayout(a: StridedArray<DTypeName>): string { // takes a DeviceArray or a HostArray
 *   return `${a.dtype.name}${JSON.stringify(a.shape)} strides ${JSON.stringify(a.strides)}`;
 * }
 * ```
 */
export abstract class StridedArray<N extends DTypeName> {
  /** The element type. */
  readonly dtype: DType<N>;
  /** Extent of each dimension (frozen). */
  readonly shape: Shape;
  /** Elements between neighbours along each dimension (frozen; negative after a reversing slice). */
  readonly strides: readonly number[];
  /** Byte offset of element (0, ..., 0) in the memory the array lives in. */
  readonly byteOffset: number;
  /** The memory the array lives in (shared with its views). */
  abstract readonly buffer: Allocation;

  readonly #owns: boolean;

  /**
   * @param dtype The element type.
   * @param layout A layout already checked against the memory.
   * @param owns True when the array allocated its memory and frees it; false for views.
   */
  protected constructor(dtype: DType<N>, layout: Layout, owns: boolean) {
    this.dtype = dtype;
    this.shape = layout.shape;
    this.strides = layout.strides;
    this.byteOffset = layout.byteOffset;
    this.#owns = owns;
  }

  /**
   * True for an array this class made, false for anything else, a Proxy of an array included: an
   * operation that checked a genuine array's shape and memory can use them, since they never change.
   *
   * @internal
   */
  static isGenuine(value: object): boolean {
    return #owns in value;
  }

  /**
   * The memory the array lives in, for `tidy` and `keep` (an array returned from a scope keeps it).
   *
   * @internal
   */
  get [heldMemory](): Allocation {
    return this.buffer;
  }

  /** True when this array allocated its memory (and frees it); false for views. */
  get ownsMemory(): boolean {
    return this.#owns;
  }

  /**
   * True once the memory is gone (the owner freed it) (the vocabulary: `free` ends it, `freed` says it ended; docs/architecture.md).
   *
   * @returns Whether it ended.
   * @example
   * ```ts
   * const a = DeviceArray.zeros([16], 'int32');
   * a.free();
   * a.freed; // true
   * ```
   */
  get freed(): boolean {
    return this.buffer.freed;
  }

  /**
   * Frees the memory, for an array that owns it (the one `empty`, `zeros`, `from`... returned).
   * Views, and TypedArray views of host memory, must not be used afterwards.
   *
   * @throws {VramStateError} For a view: it does not own the memory (free the array it came from).
   * @throws {DoubleFreeError} When already freed.
   * @example
   * ```ts
   * const a = DeviceArray.zeros([16], 'int32');
   * a.free();
   * ```
   */
  free(): void {
    if (!this.#owns) {
      throw new VramStateError(`${String(this)} is a view and does not own its memory: free the array it came from`);
    }
    this.buffer.free();
  }

  /** `using a = ...` frees an owning array at the end of the scope; views are left alone. */
  [Symbol.dispose](): void {
    if (this.#owns && !this.buffer.freed) this.buffer.free();
  }

  /**
   * The elements as a new contiguous TypedArray of the dtype's host type (strides honoured; a
   * vector dtype's components flat, (N, 3) for float3).
   *
   * @returns The host copy.
   * @throws {UseAfterFreeError} When the memory was freed.
   * @example
   * ```ts
   * const xyz = points.toHost(); // Float32Array of 3 * points.size for float3
   * ```
   */
  abstract toHost(): HostTypedArray<N>;

  /**
   * The elements as nested JavaScript arrays: numbers, bigints for 64-bit dtypes, booleans for
   * bool, decoded floats for float16 and bfloat16, component arrays for vector dtypes. A 0-d array
   * gives a one-element array.
   *
   * @returns The nested arrays.
   * @throws {UseAfterFreeError} When the memory was freed.
   * @example
   * ```ts
   * DeviceArray.from([[1, 2], [3, 4]], { dtype: 'int32' }).T.toArray(); // [[1, 3], [2, 4]]
   * ```
   */
  toArray(): NestedArray {
    return toNested(this.dtype, this.toHost(), this.ndim === 0 ? [1] : this.shape);
  }

  /**
   * How `console.log` and `util.inspect` show the array: its `String()` header and its values, as
   * NumPy prints them; above 1000 elements the first and last 3 of each dimension around `...`,
   * and only those are copied to the host (array-format.ts).
   *
   * @returns One line for a 0-d or 1-D array, a short block for more dimensions.
   * @throws Never: values that cannot be read are said to be, not thrown.
   * @example
   * ```ts
   * console.log(DeviceArray.from([1, 2, 3])); // DeviceArray<float32>(3,) on device 0 [1, 2, 3]
   * ```
   */
  [inspectCustom](): string {
    return formatArray(this);
  }

  /**
   * What `JSON.stringify` writes: the dtype, shape and where the array is, not its data.
   *
   * @returns Plain data (no circular structure: the device is its ordinal).
   * @throws Never.
   * @example
   * ```ts
   * JSON.stringify(DeviceArray.zeros([2, 3])); // {"type":"DeviceArray","dtype":"float32","shape":[2,3],...}
   * ```
   */
  toJSON(): ArrayJSON {
    return {
      type: this.constructor.name,
      dtype: this.dtype.name,
      shape: this.shape,
      strides: this.strides,
      nbytes: this.nbytes,
      ...this.deviceOrdinalForJSON(),
      ownsMemory: this.ownsMemory,
      freed: this.freed,
    };
  }

  /** The `device` field of `toJSON()`: a DeviceArray's ordinal; none for host arrays. */
  protected deviceOrdinalForJSON(): { device?: number } {
    return {};
  }

  /** The array's layout (shape, strides, byte offset, element size). */
  get layout(): Layout {
    return { shape: this.shape, strides: this.strides, byteOffset: this.byteOffset, itemSize: this.dtype.byteSize };
  }

  /** Number of dimensions. */
  get ndim(): number {
    return this.shape.length;
  }

  /** Number of elements. */
  get size(): number {
    return elementCount(this.shape);
  }

  /** Bytes of element data (`size * dtype.byteSize`; a strided array spans more). */
  get nbytes(): number {
    return this.size * this.dtype.byteSize;
  }

  /** True when the elements are row-major and back to back (one linear copy moves them). */
  get isContiguous(): boolean {
    return isContiguous(this.layout);
  }

  /** The transpose (dimensions reversed): a view, no data moves. */
  get T(): this {
    return this.transpose();
  }

  /**
   * A view of part of the array, NumPy-like: an index drops its dimension, `null` keeps it whole,
   * `[start, stop, step]` or `{ start, stop, step }` takes every step-th index (negative steps
   * reverse; negative bounds count from the end). No data moves.
   *
   * @param specs One spec per leading dimension.
   * @returns The view, sharing this array's memory.
   * @throws {RangeError} For an index or bound out of range, a step of 0, or too many specs.
   * @throws {TypeError} For a spec of the wrong type.
   * @throws {UseAfterFreeError} When the memory was freed.
   * @example
   * ```ts
   * const evenRows = a.slice([0, null, 2]);        // a[::2]
   * const column = a.slice(null, 3);               // a[:, 3]
   * const reversed = a.slice({ step: -1 });        // a[::-1]
   * ```
   */
  slice(...specs: SliceSpec[]): this {
    this.checkAlive();
    return this.withLayout(sliceLayout(this.layout, specs));
  }

  /**
   * The same elements under another shape (a view). Only contiguous arrays reshape.
   *
   * @param shape The new shape, as an array or as arguments; one dimension may be -1.
   * @returns The view.
   * @throws {VramStateError} When the array is not contiguous (a slice with steps, a transpose, a pitched array).
   * @throws {RangeError} When the element counts differ, or for a bad dimension.
   * @throws {UseAfterFreeError} When the memory was freed.
   * @example
   * ```ts
   * const m = DeviceArray.zeros([12], 'float32').reshape(3, 4);
   * ```
   */
  reshape(...shape: number[] | [readonly number[]]): this {
    this.checkAlive();
    const dims = shape.length === 1 && Array.isArray(shape[0]) ? shape[0] : shape;
    return this.withLayout(reshapeLayout(this.layout, dims as readonly number[]));
  }

  /**
   * The dimensions permuted (a view: only the strides change).
   *
   * @param axes A permutation of the dimensions; none for the reversed order.
   * @returns The view.
   * @throws {RangeError} When `axes` is not a permutation.
   * @throws {UseAfterFreeError} When the memory was freed.
   * @example
   * ```ts
   * const hwc = chw.transpose(1, 2, 0);
   * ```
   */
  transpose(...axes: number[]): this {
    this.checkAlive();
    return this.withLayout(transposeLayout(this.layout, axes));
  }

  /**
   * Checks that `other` has this array's dtype and shape, as every copy between arrays needs.
   *
   * @param other The other array.
   * @param what Names the operation.
   * @throws {TypeError} For another dtype.
   * @throws {RangeError} For another shape.
   */
  protected checkSame(other: StridedArray<DTypeName>, what: string): void {
    if (other.dtype.name !== this.dtype.name) {
      throw new TypeError(`${what}: a ${this.dtype.name} array and a ${other.dtype.name} array`);
    }
    if (other.shape.length !== this.shape.length || other.shape.some((n, i) => n !== this.shape[i])) {
      throw new RangeError(`${what}: shapes ${formatShape(this.shape)} and ${formatShape(other.shape)} differ`);
    }
  }

  /** A view of the same memory with another layout (built by the subclass, sharing the memory). */
  protected abstract withLayout(layout: Layout): this;

  /** Throws UseAfterFreeError once the memory is gone; every operation on the array calls it first. */
  protected checkAlive(): void {
    if (this.buffer.freed) throw new UseAfterFreeError(`${String(this)}: its memory was freed`);
  }
}
