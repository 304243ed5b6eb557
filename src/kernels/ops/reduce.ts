/**
 * The reductions: `sum`, `min`, `max` over a whole array or along one axis, and `dot` of two
 * vectors, on the kernels of reduction-kernels.ts (its header says how they split the work and
 * what they accumulate in).
 *
 * A whole-array reduction returns a JavaScript number, which means waiting for it: the result is
 * copied back on the stream it was computed on and that stream alone is synchronised. With
 * `{ out }` (a one-element array of the result dtype) nothing is waited for and the result stays
 * on the device. An `axis` reduction returns a new array (or fills `out`) without waiting.
 */
import { refuseDuringCapture } from '../../graphs/sessions.js';
import { streamHandleOf } from '../../stream.js';
import { DeviceArray } from '../../array/device-array.js';
import type { DTypeName, ScalarName } from '../../array/dtype.js';
import { formatShape } from '../../array/shape.js';
import { getCurrentResource } from '../../resource/current.js';
import type { StreamRef } from '../../stream.js';
import { builtinKernel } from './builtin-module.js';
import { reductionBuiltin } from './builtin-sources.js';
import { mergeDimensions, packLayout } from './kernel-layout.js';
import { checkArray, checkOutput, readResult, sameDevice, streamFor, type OpOptions } from './op-support.js';
import { readOptions } from '../../util/options.js';
import { separateOperands } from './overlap.js';
import { accumulatorDtype, REDUCE_BLOCK, REDUCE_DTYPES, reduceKernelName, reduceSignatures, resultDtype, type ReduceOp } from './reduction-kernels.js';
import { REDUCE_OPS } from './reduce-op.js';
import { kernelScalar } from './scalar.js';

/** Options of `sum`, `min` and `max`. */
export interface ReduceOptions extends OpOptions {
  /** Reduce along this axis only (negative counts from the end); the result is an array. */
  readonly axis?: number;
  /**
   * Where the result goes, on the device: for a whole-array reduction one element (shape [] or
   * [1]), for an axis reduction the shape without that axis; contiguous, of the result dtype.
   */
  readonly out?: DeviceArray;
}

/** Options of `dot`. */
export interface DotOptions extends OpOptions {
  /** A one-element array of the result dtype to write the result into, on the device. */
  readonly out?: DeviceArray;
}

/**
 * What a whole-array reduction of a `DeviceArray<N>` returns: a `bigint` for int64 and uint64
 * (exact, as `toHost()` gives a BigInt64Array: 2^60 + 1 comes back as 2^60 + 1), a number for
 * every other dtype; `number | bigint` when the dtype is not known statically.
 *
 * @example
 * ```ts
 * const counts = DeviceArray.from(new BigInt64Array([1n, 2n]));
 * const total: ReductionValue<'int64'> = sum(counts); // a bigint
 * ```
 */
export type ReductionValue<N extends DTypeName> = [N] extends ['int64' | 'uint64']
  ? bigint
  : [N] extends [Exclude<DTypeName, 'int64' | 'uint64'>]
    ? number
    : number | bigint;

/** Whether a whole-array reduction of `dtype` is read back as a bigint (see ReductionValue). */
function readsBigint(dtype: ScalarName): boolean {
  return dtype === 'int64' || dtype === 'uint64';
}

/**
 * Below this many elements a whole-array reduction is one block and one launch; above, the grid
 * splits the elements and a second launch reduces the blocks' partials. 16 elements a thread of
 * one block: below that the second launch costs more than the parallelism gains.
 */
const SPLIT_THRESHOLD = REDUCE_BLOCK * 16;

function checkDtype(op: ReduceOp, a: DeviceArray): ScalarName {
  const name = a.dtype.name;
  if (!(REDUCE_DTYPES as readonly string[]).includes(name)) {
    throw new TypeError(
      a.dtype.components > 1
        ? `${op}: ${name} is a vector dtype; reduce one component (elementwise into a scalar array) instead`
        : `${op}: ${name} arrays are not reduced; astype(a, 'int32') first (the dtypes are ${REDUCE_DTYPES.join(', ')})`,
    );
  }
  return name as ScalarName;
}

function checkOut(op: ReduceOp, out: unknown, device: DeviceArray['device'], dtype: ScalarName, shape: readonly number[], whole: boolean): DeviceArray {
  const o = checkOutput(out, `${op}: out`);
  if (o.device !== device) throw new RangeError(`${op}: out is on device ${o.device.ordinal}, the input on ${device.ordinal}`);
  if (o.dtype.name !== dtype) throw new TypeError(`${op}: out must be ${dtype} (the result dtype), got ${o.dtype.name}`);
  const fits = whole ? o.size === 1 : o.shape.length === shape.length && o.shape.every((n, i) => n === shape[i]);
  if (!fits) throw new RangeError(`${op}: out must have shape ${whole ? '() or (1)' : formatShape(shape)}, got ${formatShape(o.shape)}`);
  if (!o.isContiguous) throw new RangeError(`${op}: out must be contiguous`);
  return o;
}

/**
 * The blocks, in bytes, that a whole-array `op(a)` without `out` takes from the current resource
 * while it runs (and gives back before it returns), in the order they are allocated: first the
 * one-element array of the result dtype that the value is read back from, then, when `a` has more
 * than 4096 elements, the blocks' partials in the accumulator dtype (one per block of the grid: at
 * most 8 per multiprocessor), a raw block of the current resource (`allocate`/`deallocate`, no
 * array: a memory budget does not count it). With `out`, only the partials. A reduction along an
 * axis takes no scratch (its result is the returned array). Size an arena for them with
 * `ArenaResource.ceil1DVolume` of each (ppl.cv's sizing: the images' `ceil2DVolume` plus these).
 *
 * @param a The array reduced (its size and dtype decide).
 * @param op `'sum'` (default), `'min'`, `'max'` or `'dot'` (of `a` with an array of its shape).
 * @returns The byte counts, in the order they are allocated.
 * @throws {TypeError} For an array or dtype the reductions refuse.
 * @example
 * ```ts
 * const scratch = reductionScratch(image); // [result bytes, partials bytes]
 * const size = 2 * ArenaResource.ceil2DVolume(1920 * 4, 1080) + scratch.reduce((n, b) => n + ArenaResource.ceil1DVolume(b), 0);
 * ```
 */
export function reductionScratch(a: DeviceArray, op: ReduceOp = 'sum'): number[] {
  checkArray(a, 'reductionScratch: a');
  if (!(REDUCE_OPS as readonly string[]).includes(op)) throw new TypeError(`reductionScratch: op must be one of ${REDUCE_OPS.join(', ')}, got ${String(op)}`);
  const dtype = checkDtype(op, a);
  const blocks: number[] = [kernelScalar[resultDtype(op, dtype)].bytes];
  if (a.size > SPLIT_THRESHOLD) blocks.push(splitGrid(a.device, a.size) * kernelScalar[accumulatorDtype(dtype)].bytes);
  return blocks;
}

/** Blocks enough to fill the device once (8 of 256 threads per multiprocessor), each thread taking at least 16 elements. */
function splitGrid(device: DeviceArray['device'], k: number): number {
  return Math.max(1, Math.min(Math.ceil(k / SPLIT_THRESHOLD), device.info.multiprocessorCount * 8));
}

/** Launches the reduction of `k` elements (of each of `m` rows) and returns nothing: the result is in `out`. */
function launchReduce(
  op: ReduceOp,
  dtype: ScalarName,
  a: DeviceArray,
  ai: number[],
  ao: number[],
  b: DeviceArray,
  bi: number[],
  m: number,
  k: number,
  out: DeviceArray,
  stream: StreamRef,
): void {
  const device = a.device;
  const built = reductionBuiltin(op, dtype);
  const name = reduceKernelName(op, dtype);
  const main = builtinKernel(device, built, name, reduceSignatures.main, op);
  if (m === 1 && k > SPLIT_THRESHOLD) {
    const grid = splitGrid(device, k);
    // The partials are scratch no caller sees: a block of the current resource, not an array (which
    // would cost a buffer object, a backstop registration and a budget check on every reduction).
    const resource = getCurrentResource(device);
    const bytes = grid * kernelScalar[accumulatorDtype(dtype)].bytes;
    const partials = resource.allocate(bytes, stream);
    try {
      main.launch({ grid, block: REDUCE_BLOCK, stream }, a, ai, ao, b, bi, 1, k, 1, out, partials);
      const finish = builtinKernel(device, built, `${name}_finish`, reduceSignatures.finish, op);
      finish.launch({ grid: 1, block: REDUCE_BLOCK, stream }, partials, grid, out);
    } finally {
      resource.deallocate(partials, bytes, stream);
    }
    return;
  }
  const grid = Math.max(1, Math.min(m, device.info.multiprocessorCount * 32));
  main.launch({ grid, block: REDUCE_BLOCK, stream }, a, ai, ao, b, bi, m, k, 0, out, out);
}

/** The whole-array result: into `out` (returned), or read back as a number on `stream`. */
function finishWhole(
  op: ReduceOp,
  dtype: ScalarName,
  run: (out: DeviceArray) => void,
  out: DeviceArray | undefined,
  device: DeviceArray['device'],
  stream: StreamRef,
): number | bigint | DeviceArray {
  if (out !== undefined) {
    run(out);
    return out;
  }
  // Before anything is queued or allocated: a value read back to the host cannot be captured.
  refuseDuringCapture(
    `${op}()`,
    `its value is read back to the host: pass \`out\` (a device array of shape () or (1)) to keep it on the device (${op}(a, { out, stream }))`,
    streamHandleOf(stream),
  );
  const result = resultDtype(op, dtype);
  const scratch = DeviceArray.empty([1], result, { device, stream });
  try {
    run(scratch);
    const bytes = readResult(device, scratch, kernelScalar[result].bytes, stream);
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    // A 64-bit integer input reduces to a 64-bit result (sum, min, max, dot): read every bit of it.
    if (readsBigint(dtype)) return result === 'uint64' ? view.getBigUint64(0, true) : view.getBigInt64(0, true);
    return kernelScalar[result].read(view, 0);
  } finally {
    scratch.free();
  }
}

/**
 * Runs `body` with the inputs, or with copies of those that may share bytes with the caller's
 * `out` (a reduction writes `out` while other blocks still read the input).
 */
function apart<T>(op: string, inputs: readonly DeviceArray[], out: DeviceArray | undefined, stream: StreamRef, body: (arrays: readonly DeviceArray[]) => T): T {
  if (out === undefined) return body(inputs);
  const operands = [...inputs.map((array, i) => ({ name: i === 0 ? 'a' : 'b', array, written: false })), { name: 'out', array: out, written: true }];
  const { arrays, release } = separateOperands(op, operands, stream);
  try {
    return body(arrays);
  } finally {
    release();
  }
}

function reduce(op: 'sum' | 'min' | 'max', input: DeviceArray, options: ReduceOptions | undefined): number | bigint | DeviceArray {
  checkArray(input, `${op}: a`);
  const dtype = checkDtype(op, input);
  const opts = readOptions(op, options, { axis: true, out: true, stream: true });
  const stream = streamFor(opts, input, op);
  const axisArg = opts.axis;
  const result = resultDtype(op, dtype);
  if (axisArg === undefined) {
    const k = input.size;
    if (k === 0 && op !== 'sum') throw new RangeError(`${op}: the array is empty, and ${op} of nothing has no value`);
    const out = opts.out === undefined ? undefined : checkOut(op, opts.out, input.device, result, [], true);
    return apart(op, [input], out, stream, ([a]) => {
      const merged = mergeDimensions(a.shape, [a.strides]);
      const ai = packLayout(merged.shape, merged.strides[0]!);
      return finishWhole(op, dtype, (o) => launchReduce(op, dtype, a, ai, packLayout([], []), a, ai, 1, k, o, stream), out, a.device, stream);
    });
  }
  const a = input;
  if (!Number.isInteger(axisArg) || axisArg < -a.ndim || axisArg >= a.ndim) {
    throw new RangeError(`${op}: axis ${String(axisArg)} is out of range for an array of ${a.ndim} dimension(s)`);
  }
  const axis = axisArg < 0 ? axisArg + a.ndim : axisArg;
  const k = a.shape[axis]!;
  const outerShape = a.shape.filter((_, d) => d !== axis);
  const m = outerShape.reduce((p, n) => p * n, 1);
  if (k === 0 && op !== 'sum' && m > 0) throw new RangeError(`${op}: axis ${axisArg} has length 0, and ${op} of nothing has no value`);
  const given = opts.out === undefined ? undefined : checkOut(op, opts.out, a.device, result, outerShape, false);
  const out = given ?? DeviceArray.empty(outerShape, result, { device: a.device, stream });
  try {
    if (m > 0) {
      apart(op, [a], given, stream, ([c]) => {
        const outer = mergeDimensions(outerShape, [c.strides.filter((_, d) => d !== axis)]);
        const inner = mergeDimensions([k], [[c.strides[axis]!]]);
        const ai = packLayout(inner.shape, inner.strides[0]!);
        launchReduce(op, dtype, c, ai, packLayout(outer.shape, outer.strides[0]!), c, ai, m, k, out, stream);
      });
    }
  } catch (error) {
    if (given === undefined) out.free();
    throw error;
  }
  return out;
}

/**
 * The sum of the elements: of the whole array (a number, waiting for that stream; or into
 * `out`), or along `axis` (a new array). Integers sum in 64 bits (int64 for signed, uint64 for
 * unsigned, wrapping), floats in float32 (float16, bfloat16, float32) or float64. The sum of an
 * int64 or uint64 array is a bigint (every bit, as `toHost()` gives them); of a narrower integer
 * array a number, exact below 2^53 (`out` keeps every bit of its int64 sum).
 *
 * @param a The array (int8 to uint64, float16, bfloat16, float32, float64; any layout).
 * @param options `axis`, `out`, `stream` (default `a.stream`).
 * @returns The sum as a number (a bigint for int64 and uint64; whole array, no `out`), or the array of sums.
 * @throws {TypeError} For bool or vector dtypes, or an `out` of the wrong dtype.
 * @throws {RangeError} For an axis out of range, or an `out` of the wrong shape.
 * @throws {UseAfterFreeError} When the array's memory was freed.
 * @example
 * ```ts
 * const total = sum(a);                 // a number
 * using rows = sum(m, { axis: 1 });     // one sum per row
 * sum(a, { out: acc, stream });         // stays on the device
 * ```
 */
export function sum<N extends DTypeName>(a: DeviceArray<N>, options?: OpOptions & { readonly axis?: undefined; readonly out?: undefined }): ReductionValue<N>;
export function sum(a: DeviceArray, options: ReduceOptions): DeviceArray;
export function sum(a: DeviceArray, options?: ReduceOptions): number | bigint | DeviceArray {
  return reduce('sum', a, options);
}

/**
 * The smallest element, of the whole array (a number, waiting for that stream; or into `out`)
 * or along `axis` (a new array). NaN wins, as NumPy's.
 *
 * @param a The array (int8 to uint64, float16, bfloat16, float32, float64; any layout).
 * @param options `axis`, `out`, `stream` (default `a.stream`).
 * @returns The minimum as a number (a bigint for int64 and uint64), or the array of minima.
 * @throws {TypeError} For bool or vector dtypes, or an `out` of the wrong dtype.
 * @throws {RangeError} For an empty array or axis, an axis out of range, or an `out` of the wrong shape.
 * @throws {UseAfterFreeError} When the array's memory was freed.
 * @example
 * ```ts
 * const lowest = min(a);
 * ```
 */
export function min<N extends DTypeName>(a: DeviceArray<N>, options?: OpOptions & { readonly axis?: undefined; readonly out?: undefined }): ReductionValue<N>;
export function min(a: DeviceArray, options: ReduceOptions): DeviceArray;
export function min(a: DeviceArray, options?: ReduceOptions): number | bigint | DeviceArray {
  return reduce('min', a, options);
}

/**
 * The largest element, of the whole array (a number, waiting for that stream; or into `out`)
 * or along `axis` (a new array). NaN wins, as NumPy's.
 *
 * @param a The array (int8 to uint64, float16, bfloat16, float32, float64; any layout).
 * @param options `axis`, `out`, `stream` (default `a.stream`).
 * @returns The maximum as a number (a bigint for int64 and uint64), or the array of maxima.
 * @throws {TypeError} For bool or vector dtypes, or an `out` of the wrong dtype.
 * @throws {RangeError} For an empty array or axis, an axis out of range, or an `out` of the wrong shape.
 * @throws {UseAfterFreeError} When the array's memory was freed.
 * @example
 * ```ts
 * using colMax = max(m, { axis: 0 });
 * ```
 */
export function max<N extends DTypeName>(a: DeviceArray<N>, options?: OpOptions & { readonly axis?: undefined; readonly out?: undefined }): ReductionValue<N>;
export function max(a: DeviceArray, options: ReduceOptions): DeviceArray;
export function max(a: DeviceArray, options?: ReduceOptions): number | bigint | DeviceArray {
  return reduce('max', a, options);
}

/**
 * The dot product of two vectors of one dtype and length (each product in the accumulator's
 * type, then summed as `sum` sums): a number (waiting for that stream), or into `out`.
 *
 * @param a A 1-D array.
 * @param b A 1-D array of a's dtype and length (any strides).
 * @param options `out`, `stream` (default `a.stream`).
 * @returns The dot product as a number (a bigint for int64 and uint64), or `out`.
 * @throws {TypeError} For different dtypes, bool or vector dtypes, or an `out` of the wrong dtype.
 * @throws {RangeError} For arrays that are not 1-D of one length, or on different devices.
 * @throws {UseAfterFreeError} When an array's memory was freed.
 * @example
 * ```ts
 * const d = dot(x, y);
 * ```
 */
export function dot<N extends DTypeName>(a: DeviceArray<N>, b: DeviceArray<N>, options?: DotOptions & { readonly out?: undefined }): ReductionValue<N>;
export function dot(a: DeviceArray, b: DeviceArray, options: DotOptions): number | bigint | DeviceArray;
export function dot(a: DeviceArray, b: DeviceArray, options?: DotOptions): number | bigint | DeviceArray {
  checkArray(a, 'dot: a');
  checkArray(b, 'dot: b');
  const dtype = checkDtype('dot', a);
  if (b.dtype.name !== dtype) throw new TypeError(`dot: a is ${dtype} and b is ${b.dtype.name}; convert one with astype`);
  if (a.ndim !== 1 || b.ndim !== 1 || a.shape[0] !== b.shape[0]) {
    throw new RangeError(`dot: takes two 1-D arrays of one length, got shapes ${formatShape(a.shape)} and ${formatShape(b.shape)}`);
  }
  const device = sameDevice([a, b], 'dot');
  const opts = readOptions('dot', options, { out: true, stream: true });
  const stream = streamFor(opts, a, 'dot');
  const out = opts.out === undefined ? undefined : checkOut('dot', opts.out, device, resultDtype('dot', dtype), [], true);
  const k = a.size;
  return apart('dot', [a, b], out, stream, ([x, y]) => {
    const merged = mergeDimensions(x.shape, [x.strides, y.strides]);
    const ai = packLayout(merged.shape, merged.strides[0]!);
    const bi = packLayout(merged.shape, merged.strides[1]!);
    return finishWhole('dot', dtype, (o) => launchReduce('dot', dtype, x, ai, packLayout([], []), y, bi, 1, k, o, stream), out, device, stream);
  });
}
