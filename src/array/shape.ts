/**
 * Array shapes: lists of whole dimensions, row-major (C order) like NumPy and CuPy. Checked once
 * where they enter vram, so every later computation (element counts, strides, byte sizes) works
 * on whole, finite, safe numbers.
 */

/** An array's dimensions, outermost first: `[]` for one element, `[n]` for a vector, `[rows, cols]`. */
export type Shape = readonly number[];

/**
 * A shape as the array factories take it: the dimensions, or one number for a one-dimensional
 * shape (`zeros(1000)` is `zeros([1000])`, as in NumPy and PyTorch).
 */
export type ShapeInput = Shape | number;

/**
 * Checks a shape and returns a frozen copy (so a caller mutating its array afterwards cannot
 * change an array's shape behind its back). A number is a one-dimensional shape.
 *
 * @param shape The dimensions, or one number for a one-dimensional shape.
 * @param what How error messages name it.
 * @returns The dimensions, frozen.
 * @throws TypeError if `shape` is not a number or an array, or a dimension is not a number.
 * @throws RangeError if a dimension is negative, fractional, NaN or infinite, or the product of
 *   its nonzero dimensions exceeds Number.MAX_SAFE_INTEGER.
 * @example
 * ```ts
 * checkShape([3, 4]);  // [3, 4]
 * checkShape([2, -1]); // RangeError: shape[1] must be a whole number >= 0, got -1
 * checkShape(1000);    // [1000]
 * ```
 */
export function checkShape(shape: unknown, what = 'shape'): Shape {
  if (typeof shape === 'number') {
    if (!Number.isSafeInteger(shape) || shape < 0) throw new RangeError(`${what} must be a whole number >= 0 or an array of them, got ${shape}`);
    return Object.freeze([shape]);
  }
  if (!Array.isArray(shape)) {
    throw new TypeError(`${what} must be an array of dimensions or one number, got ${shape === null ? 'null' : typeof shape}`);
  }
  // Copied before it is checked: the caller's array is read once, so what is checked is what is used.
  const dims = (shape as unknown[]).slice();
  // The product of the nonzero dimensions bounds every stride, so it must be safe even when a
  // zero dimension makes the element count 0; each dimension can be safe while the product is not.
  let span = 1;
  for (let i = 0; i < dims.length; i++) {
    const d: unknown = dims[i];
    if (typeof d !== 'number') throw new TypeError(`${what}[${i}] must be a number, got ${typeof d}`);
    if (!Number.isSafeInteger(d) || d < 0) throw new RangeError(`${what}[${i}] must be a whole number >= 0, got ${d}`);
    if (d > 0) span *= d;
  }
  if (span > Number.MAX_SAFE_INTEGER) {
    throw new RangeError(`${what} ${formatShape(dims as number[])} spans more than Number.MAX_SAFE_INTEGER elements`);
  }
  return Object.freeze(dims as number[]);
}

/**
 * The number of elements a shape holds: the product of its dimensions (1 for `[]`).
 *
 * @param shape A checked shape.
 * @returns The element count.
 * @throws Never (the shape is taken as checked).
 * @example
 * ```ts
 * elementCount([3, 4]); // 12
 * elementCount([]);     // 1
 * ```
 */
export function elementCount(shape: Shape): number {
  let count = 1;
  for (let i = 0; i < shape.length; i++) count *= shape[i]!;
  return count;
}

/**
 * Row-major (C order) strides, in elements: the last dimension is contiguous.
 *
 * @param shape A checked shape.
 * @returns One stride per dimension, in elements (not bytes: a stride in bytes would tie the
 *   shape to one dtype).
 * @throws Never.
 * @example
 * ```ts
 * contiguousStrides([2, 3, 4]); // [12, 4, 1]
 * ```
 */
export function contiguousStrides(shape: Shape): number[] {
  const strides = new Array<number>(shape.length);
  let stride = 1;
  for (let i = shape.length - 1; i >= 0; i--) {
    strides[i] = stride;
    stride *= shape[i]!;
  }
  return strides;
}

/**
 * A shape as Python writes a tuple, for messages: NumPy users read shapes this way.
 *
 * @param shape The dimensions.
 * @returns `'(3, 4)'`, `'(5,)'` or `'()'`.
 * @throws Never.
 * @example
 * ```ts
 * formatShape([5]); // '(5,)'
 * ```
 */
export function formatShape(shape: Shape): string {
  return shape.length === 1 ? `(${shape[0]},)` : `(${shape.join(', ')})`;
}
