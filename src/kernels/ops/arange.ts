/**
 * `arange`: evenly spaced values, computed on the device as NumPy computes them
 * (`start + i * step` in float64, then converted to the dtype).
 */
import { DeviceArray, type DeviceArrayOptions } from '../../array/device-array.js';
import { defaultDType, dtypeOf, type DefaultDType, type DType, type DTypeName, type ScalarName } from '../../array/dtype.js';
import { basicSignatures } from './basic-kernels.js';
import { builtinKernel } from './builtin-module.js';
import { basicBuiltin } from './builtin-sources.js';
import { gridFor, OP_BLOCK } from './op-support.js';
import { kernelScalarOf } from './scalar.js';
import { readOptions } from '../../util/options.js';

/** Options of `arange`: the dtype (default float32, `defaultDType`) and those of `DeviceArray.empty`. */
export interface ArangeOptions<N extends ScalarName = ScalarName> extends DeviceArrayOptions {
  /** Any scalar dtype; default float32, the rule of every array factory. */
  readonly dtype?: N | DType<N>;
}

/**
 * A new 1-D array of `[start, start + step, ...)` below `stop` (above it for a negative step):
 * `ceil((stop - start) / step)` elements, as NumPy's arange, in NumPy's forms: `arange(stop)`,
 * `arange(start, stop)`, `arange(start, stop, step)`, each with `{ dtype }` and the options of
 * `DeviceArray.empty` last. The dtype defaults to float32, as every array factory's (NumPy's is
 * float64 for a float step: pass `{ dtype: 'float64' }`). The older form, a range and a dtype
 * (`arange([0, 1, 0.25], 'float32')`), is still taken.
 *
 * The arguments: `stop`; `start, stop`; or `start, stop, step`; then the options. Or the range (`n`,
 * `[start, stop]`, `[start, stop, step]`), a dtype and the options.
 *
 * @returns The array; it owns its memory.
 * @throws {TypeError} For a vector dtype, a range of another form, a non-number bound, or a dtype given twice.
 * @throws {RangeError} For a non-finite bound, a step of 0, or more elements than an array can hold.
 * @throws {OutOfMemoryError} When the device has no memory for it.
 * @example
 * ```ts
 * using idx = arange(1000, { dtype: 'int32' });  // 0..999
 * using t = arange(0, 1, 0.125);                 // float32 0, 0.125, ..., 0.875
 * ```
 */
export function arange<N extends ScalarName = DefaultDType>(stop: number, options?: ArangeOptions<N>): DeviceArray<N>;
export function arange<N extends ScalarName = DefaultDType>(start: number, stop: number, options?: ArangeOptions<N>): DeviceArray<N>;
export function arange<N extends ScalarName = DefaultDType>(start: number, stop: number, step: number, options?: ArangeOptions<N>): DeviceArray<N>;
export function arange<N extends ScalarName = DefaultDType>(
  range: number | readonly [number, number] | readonly [number, number, number],
  dtype?: N | DType<N>,
  options?: DeviceArrayOptions,
): DeviceArray<N>;
export function arange(...args: unknown[]): DeviceArray {
  const { range, dtype, options } = readArguments(args);
  return arangeOf(range, dtype, options);
}

/** The range, dtype and options of either form. */
function readArguments(args: readonly unknown[]): { range: unknown; dtype: unknown; options: DeviceArrayOptions } {
  const second = args[1];
  const dtypeSecond = typeof second === 'string' || (second !== null && typeof second === 'object' && 'byteSize' in second);
  if (typeof args[0] !== 'number' || dtypeSecond || (args.length === 3 && second === undefined)) {
    // The range form: arange(range, dtype?, options?).
    const options = readOptions('arange', args[2] as DeviceArrayOptions | undefined, { resource: true, stream: true, device: true, spillable: true });
    return { range: args[0], dtype: second ?? defaultDType, options };
  }
  let count = 0;
  while (count < args.length && count < 3 && typeof args[count] === 'number') count++;
  if (args.length > count + 1) {
    throw new TypeError(`arange: takes stop, start and stop, or start, stop and step, then the options; got ${args.length} arguments`);
  }
  const given: ArangeOptions = readOptions('arange', args[count] as ArangeOptions | undefined, {
    dtype: true,
    resource: true,
    stream: true,
    device: true,
    spillable: true,
  });
  const { dtype = defaultDType, ...options } = given;
  return { range: count === 1 ? args[0] : args.slice(0, count), dtype, options };
}

function arangeOf(range: unknown, dtype: unknown, options: DeviceArrayOptions): DeviceArray {
  const [start, stop, step] = bounds(range).map((v, i) => finite(v, (['start', 'stop', 'step'] as const)[i]!)) as [number, number, number];
  if (step === 0) throw new RangeError('arange: step must not be 0');
  const dt = dtypeOf(dtype as DTypeName);
  const scalar = kernelScalarOf(dt.name);
  if (scalar === undefined) throw new TypeError(`arange: ${dt.name} is a vector dtype; arange makes scalars`);
  const n = Math.max(0, Math.ceil((stop - start) / step));
  if (!Number.isSafeInteger(n)) throw new RangeError(`arange: ${n} elements is more than an array can hold`);
  const out = DeviceArray.empty([n], dt, options);
  if (n === 0) return out;
  try {
    const kernel = builtinKernel(out.device, basicBuiltin(), 'vram_arange', basicSignatures.vram_arange, 'arange');
    kernel.launch({ grid: gridFor(out.device, n), block: OP_BLOCK, stream: out.stream }, out, scalar.code, n, start, step);
  } catch (error) {
    out.free();
    throw error;
  }
  return out;
}

/** The range's three numbers, each read once; a TypeError naming the forms for anything else. */
function bounds(range: unknown): [unknown, unknown, unknown] {
  if (typeof range === 'number') return [0, range, 1];
  if (Array.isArray(range)) {
    const items = (range as unknown[]).slice();
    if (items.length === 2 || items.length === 3) return [items[0], items[1], items[2] ?? 1];
    throw new TypeError(
      `arange: the range must be n, [start, stop] or [start, stop, step], got an array of ${items.length} element${items.length === 1 ? '' : 's'}`,
    );
  }
  throw new TypeError(`arange: the range must be n, [start, stop] or [start, stop, step], got ${range === null ? 'null' : typeof range}`);
}

function finite(v: unknown, label: 'start' | 'stop' | 'step'): number {
  if (typeof v !== 'number') throw new TypeError(`arange: ${label} must be a number, got ${typeof v}`);
  if (!Number.isFinite(v)) throw new RangeError(`arange: ${label} must be finite, got ${v}`);
  return v;
}
