/**
 * The row-major layouts of the shapes allocated last: a loop that allocates arrays of one shape
 * gets the same frozen shape and layout each time instead of copying, checking and freezing them
 * anew (which was most of `DeviceArray.empty`'s own cost beside its memory, bench/object-pair).
 * Shapes and layouts are frozen, so arrays can share them.
 */
import { contiguousLayout, type Layout } from './layout.js';
import { checkShape, type Shape, type ShapeInput } from './shape.js';

/** How many shapes are remembered (a loop that allocates a few shapes in turn still hits). */
const SLOTS = 4;

/** The remembered shapes (checked and frozen), newest at `next - 1`. */
const shapes: (Shape | undefined)[] = new Array<Shape | undefined>(SLOTS).fill(undefined);
/** The row-major layout of each remembered shape, and the element size it was made for. */
const layouts: (Layout | undefined)[] = new Array<Layout | undefined>(SLOTS).fill(undefined);
let next = 0;

/** The longest shape looked up among the remembered ones (longer ones are checked as they come). */
const MOST_DIMENSIONS = 8;
/** The dimensions of the shape being looked up, each read once from the caller's array. */
const dims: unknown[] = new Array<unknown>(MOST_DIMENSIONS).fill(0);

/** The remembered shape with the dimensions `input` has, reading each of its dimensions once. */
function remembered(input: ShapeInput): Shape | undefined {
  if (typeof input === 'number') {
    for (const shape of shapes) if (shape !== undefined && shape.length === 1 && shape[0] === input) return shape;
    return undefined;
  }
  if (!Array.isArray(input)) return undefined;
  const length = input.length;
  if (length > MOST_DIMENSIONS) return undefined;
  for (let i = 0; i < length; i++) dims[i] = input[i];
  search: for (const shape of shapes) {
    if (shape === undefined || shape.length !== length) continue;
    for (let i = 0; i < length; i++) if (shape[i] !== dims[i]) continue search;
    return shape;
  }
  return undefined;
}

/**
 * `contiguousLayout(shape, itemSize)`, the same frozen object for the same shape and element size
 * while they are remembered.
 *
 * @param shape A checked shape.
 * @param itemSize Bytes per element.
 * @returns The row-major layout from byte 0.
 * @throws Never.
 * @example
 * ```ts
 * recentLayout(checkShape([2, 3]), 4).strides; // [3, 1]
 * ```
 */
export function recentLayout(shape: Shape, itemSize: number): Layout {
  for (let i = 0; i < SLOTS; i++) {
    const layout = layouts[i];
    if (shapes[i] === shape && layout !== undefined && layout.itemSize === itemSize) return layout;
  }
  const layout = contiguousLayout(shape, itemSize);
  shapes[next] = layout.shape;
  layouts[next] = layout;
  next = (next + 1) % SLOTS;
  return layout;
}

/**
 * `recentLayout(checkShape(input), itemSize)`, the shape answered from the remembered ones when
 * one has the dimensions `input` has (a value equal to a checked dimension is a checked
 * dimension, so nothing needs checking again).
 *
 * @param input The shape as the caller gave it.
 * @param itemSize Bytes per element.
 * @returns The row-major layout from byte 0; its `shape` is the checked, frozen shape.
 * @throws TypeError or RangeError as `checkShape`.
 * @example
 * ```ts
 * recentLayoutOf([2, 3], 4).strides; // [3, 1]
 * ```
 */
export function recentLayoutOf(input: unknown, itemSize: number): Layout {
  const shape = typeof input === 'number' || Array.isArray(input) ? remembered(input as ShapeInput) : undefined;
  return recentLayout(shape ?? checkShape(input), itemSize);
}
