/**
 * Random views of one array's elements, and NumPy's result of an operation whose output shares
 * memory with its inputs: every input read as it was before the first write (as if copied). The
 * data fuzz (data-fuzz.ts) runs built-in operations on such views of a block and compares the
 * block's bytes with `applyAsIfCopied`. A view is what `DeviceArray.slice`, `reshape` and `.T`
 * make, described twice: as the slice arguments, and as the flat element index of each of its
 * elements in C order, which is what the model reads and writes.
 */
import type { SliceSpec } from '../../src/array/layout.js';

/** A view of a flat array of `length` elements. */
export interface View {
  /** `[rows, cols]` to reshape a prefix of the flat array to first, or undefined for a 1-D view. */
  readonly reshape?: readonly [number, number];
  /** The slice arguments, one per dimension of the (reshaped) array. */
  readonly slices: readonly SliceSpec[];
  /** Transposed after slicing (2-D only). */
  readonly transposed: boolean;
  /** The view's shape. */
  readonly shape: readonly number[];
  /** The flat index of each of the view's elements, in C order of `shape`. */
  readonly index: Int32Array;
}

const STEPS = [-3, -2, -1, -1, 1, 1, 1, 2, 3];

/** One dimension's slice of `n` elements with `count` elements taken, or undefined when none fits. */
function sliceOf(random: () => number, n: number, count: number): { spec: SliceSpec; start: number; step: number } | undefined {
  for (let attempt = 0; attempt < 4; attempt++) {
    const step = STEPS[Math.floor(random() * STEPS.length)]!;
    const span = (count - 1) * Math.abs(step) + 1;
    if (span > n) continue;
    const low = Math.floor(random() * (n - span + 1));
    const start = step > 0 ? low : low + span - 1;
    const stop = start + step * count;
    // A negative stop counts from the end in slice syntax (null runs to the first element), and a
    // stop past the end is refused (the end takes the same elements).
    return { spec: [start, stop < 0 ? null : Math.min(stop, n), step], start, step };
  }
  return undefined;
}

/**
 * A random view with `shape` (1-D `[n]` or 2-D `[p, q]`) of a flat array of `length` elements, or
 * undefined when the draw does not fit.
 */
export function drawView(random: () => number, length: number, shape: readonly number[]): View | undefined {
  if (shape.length === 1) {
    const s = sliceOf(random, length, shape[0]!);
    if (s === undefined) return undefined;
    const index = new Int32Array(shape[0]!);
    for (let i = 0; i < index.length; i++) index[i] = s.start + i * s.step;
    return { slices: [s.spec], transposed: false, shape, index };
  }
  const [p, q] = shape as readonly [number, number];
  const transposed = random() < 0.3;
  // Slice a (rows, cols) reshape of a prefix to [a, b], then maybe transpose to [p, q].
  const [a, b] = transposed ? [q, p] : [p, q];
  const cols = b + Math.floor(random() * b * 2);
  const rows = Math.floor(length / cols);
  if (rows < a) return undefined;
  const r = sliceOf(random, rows, a);
  const c = sliceOf(random, cols, b);
  if (r === undefined || c === undefined) return undefined;
  const index = new Int32Array(p * q);
  for (let i = 0; i < p; i++) {
    for (let j = 0; j < q; j++) {
      const [row, col] = transposed ? [j, i] : [i, j];
      index[i * q + j] = (r.start + row * r.step) * cols + c.start + col * c.step;
    }
  }
  return { reshape: [rows, cols], slices: [r.spec, c.spec], transposed, shape, index };
}

/** A random shape of at most `max` elements: 1-D mostly, sometimes 2-D. */
export function drawShape(random: () => number, max: number): number[] {
  const n = 1 + Math.floor(random() * max);
  if (random() < 0.6 || n < 4) return [n];
  const p = 2 + Math.floor(random() * Math.min(30, Math.floor(n / 2) - 1));
  return [p, Math.max(1, Math.floor(n / p))];
}

/**
 * NumPy's result: every input gathered from `memory` first, then `f` of each element's inputs
 * written to the output's elements.
 *
 * @param memory The flat array before the operation (not changed).
 * @param inputs Each input view's flat indices, or a number for a scalar operand.
 * @param output The output view's flat indices.
 * @param f The operation on one element's inputs, in float32 as the kernel computes.
 * @returns The flat array after the operation.
 */
export function applyAsIfCopied(
  memory: Float32Array,
  inputs: ReadonlyArray<Int32Array | number>,
  output: Int32Array,
  f: (args: readonly number[]) => number,
): Float32Array {
  const gathered = inputs.map((x) => (typeof x === 'number' ? x : Float32Array.from(x, (k) => memory[k]!)));
  const result = memory.slice();
  const args: number[] = new Array<number>(inputs.length).fill(0);
  for (let i = 0; i < output.length; i++) {
    for (let k = 0; k < gathered.length; k++) {
      const g = gathered[k]!;
      args[k] = typeof g === 'number' ? g : g[i]!;
    }
    result[output[i]!] = Math.fround(f(args));
  }
  return result;
}
