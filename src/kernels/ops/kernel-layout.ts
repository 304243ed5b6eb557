/**
 * The one strided-index scheme every built-in kernel uses: an operand is a pointer to its element
 * (0, ..., 0) and a `VramLayout` passed by value (ndim, then 8 extents, then 8 strides in
 * elements, all 64-bit), and element `i` in row-major order lies at `vram_offset(layout, i)`
 * elements from the pointer. One scheme rather than a kernel per rank or per layout keeps the set
 * of shipped kernels finite: the rank is an argument, not an instantiation.
 *
 * Before a launch the operands' dimensions are merged where every operand allows it (a dimension
 * whose stride is its inner neighbour's extent times stride in every operand), and dimensions of
 * extent 1 dropped, so contiguous operands reach the kernel as one dimension of stride 1: the case
 * `vram_offset` takes without a division, and the one the reductions' vectorised loop tests for.
 */
import type { Shape } from '../../array/shape.js';

/** The most dimensions a kernel operand has after merging (more are refused). */
export const MAX_KERNEL_DIMS = 8;

/** The number of 64-bit fields of a `VramLayout`: ndim, 8 extents, 8 strides. */
export const LAYOUT_FIELDS = 1 + 2 * MAX_KERNEL_DIMS;

/** The kernel-signature struct of a `VramLayout` (17 i64, C layout). */
export const layoutStruct = Object.freeze({ struct: Object.freeze(new Array<'i64'>(LAYOUT_FIELDS).fill('i64')) });

/**
 * The C definition of `VramLayout` and `vram_offset`, shared by every generated source.
 *
 * @returns C source text.
 * @throws Never.
 * @example
 * ```ts
 * layoutSource().includes('vram_offset'); // true
 * ```
 */
export function layoutSource(): string {
  return [
    `struct VramLayout { long long ndim; long long shape[${MAX_KERNEL_DIMS}]; long long strides[${MAX_KERNEL_DIMS}]; };`,
    '// Element i (row-major) of a layout, in elements from element (0, ..., 0). One dimension (every',
    '// contiguous operand, after merging) takes no division.',
    'static __device__ __forceinline__ long long vram_offset(const VramLayout& l, long long i) {',
    '  if (l.ndim == 1) return i * l.strides[0];',
    '  long long off = 0;',
    '  // Not unrolled: the strided path is not the fast one, and 8 unrolled 64-bit divisions at every',
    '  // call site made each reduction kernel 30 KB of PTX.',
    '#pragma unroll 1',
    '  for (int d = (int)l.ndim - 1; d >= 0; --d) {',
    '    long long n = l.shape[d]; long long q = i / n; off += (i - q * n) * l.strides[d]; i = q;',
    '  }',
    '  return off;',
    '}',
  ].join('\n');
}

/** Shape and strides of one operand, in elements. */
export interface OperandLayout {
  readonly shape: Shape;
  readonly strides: readonly number[];
}

/**
 * Merges the dimensions of operands of one shape where all of them allow it, and drops extent-1
 * dimensions: contiguous operands come out as one dimension of stride 1.
 *
 * @param shape The common shape.
 * @param strides Each operand's strides (elements).
 * @returns The merged shape and each operand's merged strides (a 0-d or 1-element shape gives `[]`).
 * @throws {RangeError} When more than MAX_KERNEL_DIMS dimensions remain.
 * @example
 * ```ts
 * mergeDimensions([2, 3], [[3, 1], [3, 1]]); // { shape: [6], strides: [[1], [1]] }
 * mergeDimensions([2, 3], [[3, 1], [1, 2]]); // no merge: the second operand is a transpose
 * ```
 */
export function mergeDimensions(shape: Shape, strides: readonly (readonly number[])[]): { shape: number[]; strides: number[][] } {
  const outShape: number[] = [];
  const outStrides: number[][] = strides.map(() => []);
  for (let d = 0; d < shape.length; d++) {
    const n = shape[d]!;
    if (n === 1) continue;
    const last = outShape.length - 1;
    if (last >= 0 && strides.every((s, k) => outStrides[k]![last] === n * s[d]!)) {
      outShape[last] = outShape[last]! * n;
      strides.forEach((s, k) => {
        outStrides[k]![last] = s[d]!;
      });
    } else {
      outShape.push(n);
      strides.forEach((s, k) => outStrides[k]!.push(s[d]!));
    }
  }
  if (outShape.length > MAX_KERNEL_DIMS) {
    throw new RangeError(`the built-in kernels take at most ${MAX_KERNEL_DIMS} dimensions that do not merge; this layout has ${outShape.length}`);
  }
  return { shape: outShape, strides: outStrides };
}

/**
 * The 17 numbers of a `VramLayout` argument.
 *
 * @param shape Extents (at most MAX_KERNEL_DIMS).
 * @param strides Strides in elements, one per extent.
 * @returns ndim, 8 extents, 8 strides (unused ones 0).
 * @throws Never (callers merge first).
 * @example
 * ```ts
 * packLayout([6], [1]); // [1, 6, 0, 0, 0, 0, 0, 0, 0, 1, 0, ...]
 * ```
 */
export function packLayout(shape: readonly number[], strides: readonly number[]): number[] {
  const out = new Array<number>(LAYOUT_FIELDS).fill(0);
  out[0] = shape.length;
  for (let d = 0; d < shape.length; d++) {
    out[1 + d] = shape[d]!;
    out[1 + MAX_KERNEL_DIMS + d] = strides[d]!;
  }
  return out;
}

/**
 * JavaScript's `vram_offset`: element `i` (row-major) of a packed layout, in elements.
 *
 * @param layout The 17 numbers of a `VramLayout`.
 * @param i The row-major index.
 * @returns The offset in elements from element (0, ..., 0).
 * @throws Never.
 * @example
 * ```ts
 * layoutOffset(packLayout([2, 3], [1, 2]), 4); // 1 * 1 + 1 * 2 = 3
 * ```
 */
export function layoutOffset(layout: readonly number[], i: number): number {
  const ndim = layout[0]!;
  if (ndim === 1) return i * layout[1 + MAX_KERNEL_DIMS]!;
  let off = 0;
  let rest = i;
  for (let d = ndim - 1; d >= 0; d--) {
    const n = layout[1 + d]!;
    const q = Math.floor(rest / n);
    off += (rest - q * n) * layout[1 + MAX_KERNEL_DIMS + d]!;
    rest = q;
  }
  return off;
}

/**
 * The lowest and one-past-highest element offsets a packed layout reaches over its first `count`
 * elements (negative strides reach below element (0, ..., 0)): what the emulated kernels ask
 * emulated memory for.
 *
 * @param layout The 17 numbers of a `VramLayout`.
 * @param count The elements used (a layout's full size, or the first `count` of a 1-D one).
 * @returns `{ lo, hi }` in elements; `{ 0, 0 }` when count is 0.
 * @throws Never.
 * @example
 * ```ts
 * layoutSpan(packLayout([4], [-1]), 4); // { lo: -3, hi: 1 }
 * ```
 */
export function layoutSpan(layout: readonly number[], count: number): { lo: number; hi: number } {
  if (count === 0) return { lo: 0, hi: 0 };
  const ndim = layout[0]!;
  if (ndim === 1) {
    const s = layout[1 + MAX_KERNEL_DIMS]!;
    const far = (count - 1) * s;
    return { lo: Math.min(0, far), hi: Math.max(0, far) + 1 };
  }
  let lo = 0;
  let hi = 0;
  for (let d = 0; d < ndim; d++) {
    const reach = (layout[1 + d]! - 1) * layout[1 + MAX_KERNEL_DIMS + d]!;
    if (reach < 0) lo += reach;
    else hi += reach;
  }
  return { lo, hi: hi + 1 };
}
