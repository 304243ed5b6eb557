/**
 * Layouts: where the elements of an n-dimensional array lie in the bytes of its memory. A layout
 * is a shape, strides in ELEMENTS (NumPy counts bytes; CUDA code indexes `T*` pointers, so
 * elements are what a kernel needs), the byte offset of element (0, ..., 0), and the element size.
 * Slices, reshapes and transposes are pure functions from layout to layout: the memory is never
 * touched, so a view costs no device work. The arrays hold one (`strided-array.ts`).
 *
 * Strides may be negative (a slice with a negative step), zero only along dimensions of size 0
 * or 1, and are never larger than the memory: every layout an array holds has been checked to
 * lie inside its memory (`checkLayoutFits`), so copies never address a byte outside it.
 */
import { VramStateError } from '../errors.js';
import { checkShape, contiguousStrides, elementCount, formatShape, type Shape } from './shape.js';

/** Where an array's elements are: shape, strides in elements, byte offset of the first, element size. */
export interface Layout {
  /** Extent of each dimension (frozen). */
  readonly shape: Shape;
  /** Elements from one index to the next along each dimension (may be negative). */
  readonly strides: readonly number[];
  /** Byte offset of element (0, ..., 0) in the memory. */
  readonly byteOffset: number;
  /** Bytes per element (the dtype's byteSize). */
  readonly itemSize: number;
}

/**
 * One dimension of a slice, NumPy-like: an index (drops the dimension; negative counts from the
 * end), `null`/`undefined` (the whole dimension), `[start, stop, step]` (any part may be null or
 * left out), or `{ start, stop, step }`.
 */
export type SliceSpec = number | null | undefined | readonly [start?: number | null, stop?: number | null, step?: number | null] | SliceRange;

/** `{ start, stop, step }`: the object form of a slice of one dimension. */
export interface SliceRange {
  /** First index (default 0, or the last index for a negative step). Negative counts from the end. */
  readonly start?: number | null;
  /** Index to stop before (default past the end, or before the first for a negative step). */
  readonly stop?: number | null;
  /** Distance between taken indices, not 0 (default 1). */
  readonly step?: number | null;
}

/**
 * The row-major layout of `shape` starting at `byteOffset`.
 *
 * @param shape A checked shape.
 * @param itemSize Bytes per element.
 * @param byteOffset Byte offset of the first element (default 0).
 * @returns The layout.
 * @throws Never.
 * @example
 * ```ts
 * contiguousLayout([2, 3], 4).strides; // [3, 1]
 * ```
 */
export function contiguousLayout(shape: Shape, itemSize: number, byteOffset = 0): Layout {
  return freeze(shape, contiguousStrides(shape), byteOffset, itemSize);
}

/**
 * True when the elements lie row-major and back to back from the first one, so one linear copy of
 * `size * itemSize` bytes moves them all. Dimensions of extent 1 may have any stride; an empty
 * array is contiguous.
 *
 * @param layout The layout.
 * @returns Whether it is C-contiguous.
 * @throws Never.
 * @example
 * ```ts
 * isContiguous(contiguousLayout([4, 4], 4)); // true
 * ```
 */
export function isContiguous(layout: Layout): boolean {
  const { shape, strides } = layout;
  if (elementCount(shape) === 0) return true;
  let expected = 1;
  for (let i = shape.length - 1; i >= 0; i--) {
    const n = shape[i]!;
    if (n === 1) continue;
    if (strides[i] !== expected) return false;
    expected *= n;
  }
  return true;
}

/**
 * The bytes a layout touches: from the lowest element's first byte to the end of the highest
 * element. An empty layout touches nothing: `start === end === byteOffset`.
 *
 * @param layout The layout.
 * @returns `{ start, end }`, byte offsets into the memory (end exclusive). Start may be negative
 *   for a layout that does not fit its memory (`checkLayoutFits` rejects those).
 * @throws Never.
 * @example
 * ```ts
 * byteSpan(contiguousLayout([10], 4, 8)); // { start: 8, end: 48 }
 * ```
 */
export function byteSpan(layout: Layout): { start: number; end: number } {
  const { shape, strides, byteOffset, itemSize } = layout;
  if (elementCount(shape) === 0) return { start: byteOffset, end: byteOffset };
  let low = 0;
  let high = 0;
  for (let i = 0; i < shape.length; i++) {
    const reach = (shape[i]! - 1) * strides[i]!;
    if (reach < 0) low += reach;
    else high += reach;
  }
  return { start: byteOffset + low * itemSize, end: byteOffset + (high + 1) * itemSize };
}

/**
 * Checks that every element of `layout` lies inside memory of `byteLength` bytes.
 *
 * @param layout The layout.
 * @param byteLength The size of the memory.
 * @param what Names the operation in the message.
 * @throws {RangeError} When an element would lie before byte 0 or past the end.
 * @example
 * ```ts
 * checkLayoutFits({ shape: [4], strides: [2], byteOffset: 0, itemSize: 4 }, 16, 'view'); // RangeError: reaches byte 28
 * ```
 */
export function checkLayoutFits(layout: Layout, byteLength: number, what: string): void {
  const { start, end } = byteSpan(layout);
  if (start < 0 || end > byteLength) {
    throw new RangeError(
      `${what}: shape ${formatShape(layout.shape)} with strides (${layout.strides.join(', ')}) ` +
        `from byte ${layout.byteOffset} reaches bytes [${start}, ${end}), outside the ${byteLength} bytes of its memory`,
    );
  }
}

/**
 * Checks strides given by a caller: one whole number per dimension.
 *
 * @param strides The strides, in elements.
 * @param ndim The number of dimensions they must match.
 * @returns A frozen copy.
 * @throws {TypeError} When not an array of numbers.
 * @throws {RangeError} For a count other than `ndim`, or a stride that is not a safe integer.
 * @example
 * ```ts
 * checkStrides([4, 1], 2); // [4, 1]
 * ```
 */
export function checkStrides(strides: unknown, ndim: number): readonly number[] {
  if (!Array.isArray(strides)) throw new TypeError('strides must be an array of whole numbers (elements)');
  // Copied before it is checked: the caller's array is read once, so what is checked is what is used.
  const copy = (strides as unknown[]).slice();
  if (copy.length !== ndim) throw new RangeError(`strides has ${copy.length} entries; the shape has ${ndim} dimensions`);
  for (const s of copy) {
    if (typeof s !== 'number') throw new TypeError(`strides must be numbers, got ${typeof s}`);
    if (!Number.isSafeInteger(s)) throw new RangeError(`strides must be whole numbers of elements, got ${s}`);
  }
  return Object.freeze(copy as number[]);
}

function freeze(shape: Shape, strides: readonly number[], byteOffset: number, itemSize: number): Layout {
  return Object.freeze({
    shape: Object.isFrozen(shape) ? shape : Object.freeze(shape.slice()),
    strides: Object.isFrozen(strides) ? strides : Object.freeze(strides.slice()),
    byteOffset,
    itemSize,
  });
}

function checkIndexNumber(value: unknown, what: string): number {
  if (typeof value !== 'number') throw new TypeError(`${what} must be a number, got ${typeof value}`);
  if (!Number.isSafeInteger(value)) throw new RangeError(`${what} must be a whole number, got ${value}`);
  return value;
}

/** Normalises one slice spec of a dimension of extent n: start, length and step, NumPy's rules. */
function resolveSlice(spec: Exclude<SliceSpec, number>, n: number, axis: number): { start: number; length: number; step: number } {
  let start: number | null | undefined;
  let stop: number | null | undefined;
  let step: number | null | undefined;
  if (spec === null || spec === undefined) {
    return { start: 0, length: n, step: 1 };
  } else if (Array.isArray(spec)) {
    if (spec.length > 3) throw new RangeError(`slice of axis ${axis}: [start, stop, step] has at most 3 entries, got ${spec.length}`);
    [start, stop, step] = spec as readonly [number?, number?, number?];
  } else if (typeof spec === 'object') {
    ({ start, stop, step } = spec as SliceRange);
  } else {
    throw new TypeError(`slice of axis ${axis}: expected an index, null, [start, stop, step] or { start, stop, step }`);
  }
  const s = step === null || step === undefined ? 1 : checkIndexNumber(step, `slice step of axis ${axis}`);
  if (s === 0) throw new RangeError(`slice of axis ${axis}: step must not be 0`);
  const where = `slice of axis ${axis} (extent ${n})`;
  // Negative bounds count from the end, as in NumPy; unlike NumPy, a bound outside the dimension
  // is an error rather than clamped, so an off-by-one shows instead of silently shrinking the view.
  const bound = (value: number, name: string, low: number, high: number): number => {
    const v = checkIndexNumber(value, `${name} of ${where}`);
    const at = v < 0 ? v + n : v;
    if (at < low || at > high) throw new RangeError(`${where}: ${name} ${v} is out of range`);
    return at;
  };
  let first: number;
  let last: number; // exclusive, in the direction of the step
  if (s > 0) {
    first = start === null || start === undefined ? 0 : bound(start, 'start', 0, n);
    last = stop === null || stop === undefined ? n : bound(stop, 'stop', 0, n);
    return { start: first, length: Math.max(0, Math.ceil((last - first) / s)), step: s };
  }
  if (n === 0) {
    if (start !== null && start !== undefined) throw new RangeError(`${where}: start ${String(start)} is out of range`);
    return { start: 0, length: 0, step: s };
  }
  first = start === null || start === undefined ? n - 1 : bound(start, 'start', 0, n - 1);
  last = stop === null || stop === undefined ? -1 : bound(stop, 'stop', 0, n - 1);
  return { start: first, length: Math.max(0, Math.ceil((first - last) / -s)), step: s };
}

/**
 * The layout of a slice, NumPy-like: one spec per leading dimension (missing trailing ones are
 * whole). An index drops its dimension; a range keeps it with stride times step.
 *
 * @param layout The layout sliced.
 * @param specs One `SliceSpec` per dimension, at most `ndim`.
 * @returns The view's layout (same memory).
 * @throws {RangeError} For more specs than dimensions, an index or bound out of range, or a step of 0.
 * @throws {TypeError} For a spec of the wrong type.
 * @example
 * ```ts
 * sliceLayout(contiguousLayout([4, 6], 4), [[0, 4, 2], -1]); // shape [2], strides [12], byteOffset 20
 * ```
 */
export function sliceLayout(layout: Layout, specs: readonly SliceSpec[]): Layout {
  const { shape, strides, itemSize } = layout;
  if (specs.length > shape.length) {
    throw new RangeError(`slice: ${specs.length} indices for an array of ${shape.length} dimensions ${formatShape(shape)}`);
  }
  let offset = 0; // in elements
  const outShape: number[] = [];
  const outStrides: number[] = [];
  const taken: { start: number; length: number }[] = [];
  for (let axis = 0; axis < shape.length; axis++) {
    const n = shape[axis]!;
    const stride = strides[axis]!;
    const spec = axis < specs.length ? specs[axis] : null;
    if (typeof spec === 'number') {
      const i = checkIndexNumber(spec, `index of axis ${axis}`);
      if (i < -n || i >= n) throw new RangeError(`index ${i} is out of range for axis ${axis} with extent ${n}`);
      offset += (i < 0 ? i + n : i) * stride;
      continue;
    }
    const { start, length, step } = resolveSlice(spec, n, axis);
    taken.push({ start, length });
    outShape.push(length);
    outStrides.push(stride * step);
    offset += start * stride;
  }
  // An empty view keeps the original offset: its start may be one past the end of a dimension,
  // and an offset outside the memory would fail `checkLayoutFits` for a view that touches nothing.
  const empty = taken.some((t) => t.length === 0);
  return freeze(Object.freeze(outShape), outStrides, empty ? layout.byteOffset : layout.byteOffset + offset * itemSize, itemSize);
}

/**
 * The layout of a reshape: the same elements in the same row-major order under another shape.
 * Only contiguous layouts reshape without a copy (the new strides must address the same bytes in
 * the same order); one dimension may be -1, inferred from the others.
 *
 * @param layout A contiguous layout.
 * @param shape The new shape; its element count must equal the old one's.
 * @returns The view's layout.
 * @throws {VramStateError} When `layout` is not contiguous (a slice with steps, a transpose, a pitched array).
 * @throws {RangeError} When the element counts differ, or for a bad dimension.
 * @throws {TypeError} When `shape` is not an array of numbers.
 * @example
 * ```ts
 * reshapeLayout(contiguousLayout([6], 4), [2, -1]).shape; // [2, 3]
 * ```
 */
export function reshapeLayout(layout: Layout, shape: readonly number[]): Layout {
  if (!Array.isArray(shape)) throw new TypeError('reshape expects a shape (an array of whole numbers)');
  const count = elementCount(layout.shape);
  const wanted = shape.slice();
  const inferred = wanted.indexOf(-1);
  if (inferred >= 0) {
    if (wanted.indexOf(-1, inferred + 1) >= 0) throw new RangeError('reshape: at most one dimension may be -1');
    const rest = elementCount(
      checkShape(
        wanted.filter((_, i) => i !== inferred),
        'reshape shape',
      ),
    );
    if (rest === 0 || count % rest !== 0) {
      throw new RangeError(`reshape: cannot infer the -1 in (${shape.join(', ')}) for ${count} elements`);
    }
    wanted[inferred] = count / rest;
  }
  const next = checkShape(wanted, 'reshape shape');
  if (elementCount(next) !== count) {
    throw new RangeError(`reshape: shape ${formatShape(next)} holds ${elementCount(next)} elements; the array ${formatShape(layout.shape)} has ${count}`);
  }
  if (!isContiguous(layout)) {
    throw new VramStateError(
      `reshape needs a contiguous array; this one ${formatShape(layout.shape)} has strides ` +
        `(${layout.strides.join(', ')}) from a slice, transpose or pitched allocation: reshape a contiguous copy (copy())`,
    );
  }
  return contiguousLayout(next, layout.itemSize, layout.byteOffset);
}

/**
 * The layout of a transpose: the dimensions permuted, strides with them; no data moves.
 *
 * @param layout The layout.
 * @param axes A permutation of 0..ndim-1; default the reversed order (the matrix transpose in 2D).
 * @returns The view's layout.
 * @throws {RangeError} When `axes` is not a permutation of the dimensions.
 * @example
 * ```ts
 * transposeLayout(contiguousLayout([2, 3], 4)).strides; // [1, 3]
 * ```
 */
export function transposeLayout(layout: Layout, axes?: readonly number[]): Layout {
  const ndim = layout.shape.length;
  const order = axes === undefined || axes.length === 0 ? layout.shape.map((_, i) => ndim - 1 - i) : axes.slice();
  const seen = new Set<number>();
  for (const a of order) {
    if (typeof a !== 'number') throw new TypeError(`transpose: axes must be numbers, got ${typeof a}`);
    if (!Number.isInteger(a) || a < -ndim || a >= ndim) throw new RangeError(`transpose: axis ${a} is out of range for ${ndim} dimensions`);
    seen.add(a < 0 ? a + ndim : a);
  }
  if (order.length !== ndim || seen.size !== ndim) {
    throw new RangeError(`transpose: axes (${order.join(', ')}) are not a permutation of the ${ndim} dimensions`);
  }
  const norm = order.map((a) => (a < 0 ? a + ndim : a));
  return freeze(
    Object.freeze(norm.map((a) => layout.shape[a]!)),
    norm.map((a) => layout.strides[a]!),
    layout.byteOffset,
    layout.itemSize,
  );
}

/**
 * The fewest dimensions that address the same elements in the same order: dimensions of extent 1
 * dropped, and a dimension merged into its outer neighbour where that steps exactly over it
 * (`stride[i] === shape[i + 1] * stride[i + 1]`). Used to find the one-copy and 2D-copy paths.
 *
 * @param layout The layout.
 * @returns Shape and strides; empty for a single element.
 * @throws Never.
 * @example
 * ```ts
 * coalesce(contiguousLayout([2, 3, 4], 4)); // { shape: [24], strides: [1] }
 * ```
 */
export function coalesce(layout: Layout): { shape: number[]; strides: number[] } {
  const shape: number[] = [];
  const strides: number[] = [];
  for (let i = 0; i < layout.shape.length; i++) {
    const n = layout.shape[i]!;
    const s = layout.strides[i]!;
    if (n === 1) continue;
    const last = shape.length - 1;
    if (last >= 0 && strides[last] === n * s) {
      shape[last] = shape[last]! * n;
      strides[last] = s;
    } else {
      shape.push(n);
      strides.push(s);
    }
  }
  return { shape, strides };
}

/**
 * Calls `visit(dst, src)` with the byte offsets of each element in row-major index order, for
 * two layouts of the same shape, and with run lengths: where both step by exactly one element
 * along the last dimension, one call covers the whole run (`count` elements), so contiguous rows
 * move with one `set`. The workhorse of every host-side gather, scatter and permutation.
 *
 * @param shape The common shape.
 * @param dst Strides (elements) and byte offset of the destination.
 * @param src Strides (elements) and byte offset of the source.
 * @param itemSize Bytes per element.
 * @param visit Receives the destination and source byte offsets and the element count of a run.
 * @throws Whatever `visit` throws.
 * @example
 * ```ts
 * forEachRun([2, 2], { strides: [2, 1], byteOffset: 0 }, { strides: [1, 2], byteOffset: 0 }, 4, (d, s, n) => {});
 * ```
 */
export function forEachRun(
  shape: Shape,
  dst: { readonly strides: readonly number[]; readonly byteOffset: number },
  src: { readonly strides: readonly number[]; readonly byteOffset: number },
  itemSize: number,
  visit: (dstByte: number, srcByte: number, count: number) => void,
): void {
  const ndim = shape.length;
  if (elementCount(shape) === 0) return;
  if (ndim === 0) {
    visit(dst.byteOffset, src.byteOffset, 1);
    return;
  }
  const inner = shape[ndim - 1]!;
  const ds = dst.strides[ndim - 1]! * itemSize;
  const ss = src.strides[ndim - 1]! * itemSize;
  const runs = dst.strides[ndim - 1] === 1 && src.strides[ndim - 1] === 1;
  const index = new Array<number>(ndim - 1).fill(0);
  let d = dst.byteOffset;
  let s = src.byteOffset;
  for (;;) {
    if (runs) visit(d, s, inner);
    else for (let k = 0; k < inner; k++) visit(d + k * ds, s + k * ss, 1);
    // Odometer over the outer dimensions, keeping the byte offsets in step.
    let axis = ndim - 2;
    while (axis >= 0) {
      index[axis]!++;
      d += dst.strides[axis]! * itemSize;
      s += src.strides[axis]! * itemSize;
      if (index[axis]! < shape[axis]!) break;
      d -= shape[axis]! * dst.strides[axis]! * itemSize;
      s -= shape[axis]! * src.strides[axis]! * itemSize;
      index[axis] = 0;
      axis--;
    }
    if (axis < 0) return;
  }
}

/**
 * Copies the elements of one strided byte layout into another of the same shape, on the host.
 *
 * @param dst Destination bytes.
 * @param dstLayout Where the elements go in `dst` (offsets relative to `dst[0]`).
 * @param src Source bytes.
 * @param srcLayout Where the elements are in `src`.
 * @throws {RangeError} From `Uint8Array.set` when a run lies outside `dst` (layouts checked against their bytes never do).
 * @example
 * ```ts
 * copyElements(out, contiguousLayout(v.shape, 4), covering, { ...v.layout, byteOffset: v.byteOffset - span.start });
 * ```
 */
export function copyElements(dst: Uint8Array, dstLayout: Layout, src: Uint8Array, srcLayout: Layout): void {
  const size = dstLayout.itemSize;
  forEachRun(dstLayout.shape, dstLayout, srcLayout, size, (d, s, n) => {
    const bytes = n * size;
    if (bytes <= 8) for (let b = 0; b < bytes; b++) dst[d + b] = src[s + b]!;
    else dst.set(src.subarray(s, s + bytes), d);
  });
}

/**
 * True when no two elements of the layout share a byte, proved the simple way: with the
 * dimensions sorted by |stride|, each stride steps over everything the inner ones reach. Layouts
 * made by slicing and transposing always pass; a caller's `strides` may not (then writes into it
 * are refused: which of two overlapping elements wins would be up to the copy engine).
 *
 * @param layout The layout.
 * @returns Whether its elements are disjoint.
 * @throws Never.
 * @example
 * ```ts
 * isNonOverlapping({ shape: [3, 3], strides: [1, 1], byteOffset: 0, itemSize: 4 }); // false
 * ```
 */
export function isNonOverlapping(layout: Layout): boolean {
  const { shape, strides } = coalesce(layout);
  const dims = shape.map((n, i) => ({ n, s: Math.abs(strides[i]!) })).sort((a, b) => a.s - b.s);
  let reach = 1; // elements spanned by the inner dimensions so far
  for (const { n, s } of dims) {
    if (s < reach) return false;
    reach = (n - 1) * s + reach;
  }
  return true;
}

/**
 * True unless two layouts are proved to share no byte, each placed at an address of its own (so
 * two wrappers of the same memory, a view from `fromBuffer` or a re-imported export, compare by
 * where their bytes are). Proved disjoint when their byte spans do not meet, or when the element
 * starts of both lie on one grid of the strides' greatest common divisor and each element of one
 * fits between two of the other (odd and even elements of one array). Anything else may overlap:
 * exact answers are NumPy's bounded `may_share_memory` search, and callers only need to know when
 * to stage a copy.
 *
 * @param a One layout.
 * @param aBase The address its byte offsets count from.
 * @param b The other layout.
 * @param bBase The address its byte offsets count from.
 * @returns False when no byte is shared; true when one may be.
 * @throws Never.
 * @example
 * ```ts
 * const even = { shape: [4], strides: [2], byteOffset: 0, itemSize: 4 };
 * mayShareBytes(even, 0, { ...even, byteOffset: 4 }, 0); // false: the odd elements
 * ```
 */
export function mayShareBytes(a: Layout, aBase: number, b: Layout, bBase: number): boolean {
  if (elementCount(a.shape) === 0 || elementCount(b.shape) === 0) return false;
  const sa = byteSpan(a);
  const sb = byteSpan(b);
  if (aBase + sa.end <= bBase + sb.start || bBase + sb.end <= aBase + sa.start) return false;
  let g = 0;
  for (const l of [a, b]) {
    l.shape.forEach((n, i) => {
      if (n > 1) g = gcd(g, Math.abs(l.strides[i]!) * l.itemSize);
    });
  }
  if (g === 0) return true; // one element each, and their spans meet
  const d = (((bBase + b.byteOffset - (aBase + a.byteOffset)) % g) + g) % g;
  return !(d >= a.itemSize && d + b.itemSize <= g);
}

/**
 * True when two layouts at their addresses name the same elements in the same index order: an
 * elementwise operation that reads and writes them touches each element from one thread only.
 *
 * @param a One layout.
 * @param aBase The address its byte offsets count from.
 * @param b The other layout.
 * @param bBase The address its byte offsets count from.
 * @returns Whether element i of one is element i of the other, for every i.
 * @throws Never.
 * @example
 * ```ts
 * sameElements(x.layout, x.buffer.ptr, x.layout, x.buffer.ptr); // true
 * ```
 */
export function sameElements(a: Layout, aBase: number, b: Layout, bBase: number): boolean {
  if (aBase + a.byteOffset !== bBase + b.byteOffset || a.itemSize !== b.itemSize || a.shape.length !== b.shape.length) return false;
  return a.shape.every((n, i) => n === b.shape[i] && (n === 1 || a.strides[i] === b.strides[i]));
}

/**
 * The greatest common divisor of two whole numbers >= 0 (gcd(0, n) is n).
 *
 * @param a A whole number.
 * @param b A whole number.
 * @returns Their greatest common divisor.
 * @throws Never.
 * @example
 * ```ts
 * gcd(12, 18); // 6
 * ```
 */
export function gcd(a: number, b: number): number {
  while (b !== 0) [a, b] = [b, a % b];
  return a;
}
