/**
 * `elementwise`, `map` and `zipWith`: user expressions over arrays, in the spirit of PyCUDA's
 * ElementwiseKernel. The expression is parsed by our own parser (expression.ts), checked against
 * the arrays' dtypes and compiled to a CUDA kernel and its JavaScript twin
 * (elementwise-program.ts), one per expression and dtypes.
 * Expressions are user code: on a GPU they need NVRTC (no PTX can ship for them).
 */
import { DeviceArray } from '../../array/device-array.js';
import type { DType, DTypeName } from '../../array/dtype.js';
import { resultDType } from '../../array/promotion.js';
import { elementCount, formatShape, type Shape } from '../../array/shape.js';
import { broadcastShape, broadcastStrides } from './broadcast.js';
import { LruMap } from '../../util/lru.js';
import { builtinKernel, type BuiltinSource } from './builtin-module.js';
import { ELEMENTWISE_KERNEL, elementwiseProgram, type ElementwiseProgram, type ProgramOperand } from './elementwise-program.js';
import { parseExpression, parseStatements, type Statement } from './expression.js';
import { mergeDimensions, packLayout } from './kernel-layout.js';
import { checkArray, checkOutput, gridFor, OP_BLOCK, sameDevice, streamFor, type OpOptions } from './op-support.js';
import { readOptions } from '../../util/options.js';
import { separateOperands } from './overlap.js';

/** What an expression's names stand for: arrays (one element each) and scalars (one value for all). */
export type ElementwiseValues = Readonly<Record<string, DeviceArray | number | bigint>>;

/** Options of `map` and `zipWith`; `O` is the result's dtype when `out` gives it. */
export interface MapOptions<O extends DTypeName = DTypeName> extends OpOptions {
  /** The array to write (any layout, the input's shape, a scalar dtype); default a new array of the (first) input's dtype. */
  readonly out?: DeviceArray<O>;
}

/**
 * The programs of the expressions used most recently. Every distinct expression (and dtypes) is a
 * program of its own, so the cache is bounded, by count and by memory (PROGRAM_CACHE_BYTES): one
 * used again after eviction is generated again (microseconds) and its module comes from the
 * compile cache.
 */
export const PROGRAM_CACHE_SIZE = 256;

/**
 * The most memory the cached programs may hold together, as `programBytes` estimates it: one
 * expression can be any length, and what its program keeps (parsed form, generated source, the
 * JavaScript twin, and its loaded module) grows with it, so a count alone bounds nothing. The 256
 * most recent small expressions fit (Note [Bounding the expression caches] in
 * docs/design/expression-caches.md).
 */
export const PROGRAM_CACHE_BYTES = 8 * 1024 * 1024;

/**
 * What a cached program and its loaded module hold, estimated from its expression's length: a
 * fixed part and a part per character, as measured on the emulated backend (the note above).
 */
function programBytes(text: string): number {
  return 28 * 1024 + 40 * text.length;
}

const programs = new LruMap<string, { readonly program: ElementwiseProgram; readonly built: BuiltinSource }>(PROGRAM_CACHE_SIZE, undefined, {
  weigh: (entry) => entry.built.weight ?? 0,
  limit: PROGRAM_CACHE_BYTES,
});

/** The name the result of `map` and `zipWith` is bound to: not an identifier, so no expression can name it. */
const RESULT = '$result';

/**
 * How much memory the cached expression programs hold, as estimated (at most PROGRAM_CACHE_BYTES,
 * but for one program larger than that alone, kept while it is the most recent).
 *
 * @returns Bytes.
 * @throws Never.
 * @example
 * ```ts
 * programCacheBytes() <= PROGRAM_CACHE_BYTES; // true
 * ```
 */
export function programCacheBytes(): number {
  return programs.weight;
}

/**
 * How many expression programs are cached now (at most PROGRAM_CACHE_SIZE).
 *
 * @returns The count.
 * @throws Never.
 * @example
 * ```ts
 * programsCached() <= PROGRAM_CACHE_SIZE; // true
 * ```
 */
export function programsCached(): number {
  return programs.size;
}

function compiled(
  key: string,
  text: string,
  statements: () => readonly Statement[],
  operands: readonly ProgramOperand[],
): { program: ElementwiseProgram; built: BuiltinSource } {
  const fullKey = `${key}\u0000${operands
    .map((o) => `${o.name}:${o.kind === 'array' ? o.dtype.name : 'scalar'}`)
    .sort()
    .join(',')}`;
  const entry = programs.get(fullKey);
  if (entry !== undefined) return entry;
  const program = elementwiseProgram(text, statements(), operands);
  const built = { name: undefined, source: program.source, emulated: { [ELEMENTWISE_KERNEL]: program.emulated }, weight: programBytes(text) };
  return programs.set(fullKey, { program, built });
}

/**
 * Checks the values, runs the program over the arrays it uses. `values` is the caller's object:
 * each of its entries is read exactly once, and the check and the launch use those reads.
 */
function run(what: string, key: string, text: string, statements: () => readonly Statement[], values: ElementwiseValues, options: Readonly<OpOptions>): void {
  if (values === null || typeof values !== 'object' || Array.isArray(values)) {
    throw new TypeError(`${what}: the second argument names the arrays and scalars, e.g. { x, y, z, a: 2 }`);
  }
  const snapshot = new Map<string, unknown>(Object.entries(values));
  const operands: ProgramOperand[] = [];
  for (const [name, v] of snapshot) {
    if (typeof v === 'number' || typeof v === 'bigint') operands.push({ name, kind: 'scalar' });
    else operands.push({ name, kind: 'array', dtype: checkArray(v, `${what}: ${name}`).dtype });
  }
  const { program, built } = compiled(key, text, statements, operands);
  const used = program.arrays.map((a) => {
    const written = a.writes.length > 0;
    const name = a.name === RESULT ? 'out' : a.name;
    const value = snapshot.get(a.name);
    return { name, array: written ? checkOutput(value, `${what}: ${name}`) : checkArray(value, `${what}: ${name}`), written };
  });
  if (used.length === 0) throw new TypeError(`${what}: the expression uses no array`);
  const first = used[0]!.array;
  // NumPy's broadcasting: inputs of extent 1 (or fewer dimensions) are read again along the
  // result's larger dimensions; an array written must have the result's whole shape.
  const shape = broadcastShape(
    used.map(({ name, array }) => ({ name, shape: array.shape })),
    what,
  );
  for (const { name, array: a, written } of used) {
    if (written && !sameShape(a.shape, shape)) {
      throw new RangeError(
        `${what}: ${name} is written and has shape ${formatShape(a.shape)}, but the operands broadcast to ${formatShape(shape)}; ` +
          'an array written must have the whole shape',
      );
    }
  }
  const device = sameDevice(
    used.map((u) => u.array),
    what,
  );
  const stream = streamFor(options, first, what);
  const n = elementCount(shape);
  if (n === 0) return;
  const kernel = builtinKernel(device, built, ELEMENTWISE_KERNEL, program.signature, what);
  const { arrays, release } = separateOperands(what, used, stream);
  try {
    const merged = mergeDimensions(
      shape,
      arrays.map((a) => broadcastStrides(a.shape, a.strides, shape)),
    );
    const args: (DeviceArray | number | number[])[] = [n];
    arrays.forEach((a, k) => args.push(a, packLayout(merged.shape, merged.strides[k]!)));
    for (const s of program.scalars) args.push(Number(snapshot.get(s)));
    (kernel.launch as (config: Parameters<typeof kernel.launch>[0], ...rest: unknown[]) => void)(
      { grid: gridFor(device, n), block: OP_BLOCK, stream },
      ...args,
    );
  } finally {
    release();
  }
}

function sameShape(a: Shape, b: Shape): boolean {
  return a.length === b.length && a.every((n, d) => n === b[d]);
}

/**
 * Runs a C-like program over every element of the arrays it names: statements separated by ';',
 * each assigning an expression to an array (or one component of a vector array: `p.x = ...`).
 * Names are the keys of `values`: arrays (any layouts) and scalars (numbers, the same for every
 * element). Arrays broadcast as NumPy's do: shapes aligned at their last dimension, an extent of 1
 * (or a missing leading dimension) is read again along the others' (`m = m - mean` with `m` of
 * (1000, 3) and `mean` of (3,)); an array written must have the whole broadcast shape. Expressions have numbers, the names,
 * components `.x .y .z .w` of vector dtypes, `+ - * / %`, comparisons, `&& || !`, `c ? a : b`,
 * parentheses, and sqrt, exp, log, sin, cos, tan, tanh, abs, floor, ceil, min, max, pow, fma.
 * Everything is computed in float64 and converted to each output's dtype on the store (floats
 * rounded, integers truncated and saturated, bool as != 0); `/` is true division.
 *
 * @param expression The program, e.g. `'z = a * x + y'`.
 * @param values The arrays and scalars by name.
 * @param options The stream (default the first array's, by name).
 * @returns Nothing: the outputs are written in stream order (no wait).
 * @throws {SyntaxError} For text outside the language, naming the column.
 * @throws {TypeError} For an unknown name, a scalar assigned, a vector array used without a
 *   component, a component its dtype lacks, or a value that is neither an array nor a number.
 * @throws {RangeError} For arrays whose shapes do not broadcast (naming both shapes), a written
 *   array smaller than the broadcast shape, or arrays on different devices.
 * @throws {VramStateError} For an output whose strides make elements overlap, an output lent
 *   read-only, or two outputs sharing memory in different element orders. An input sharing memory
 *   with an output (a reversed or shifted view of it) is read as it was before the first write.
 * @throws {NotSupportedError} On a GPU without NVRTC (expressions are compiled at run time).
 * @throws {UseAfterFreeError} When an array's memory was freed.
 * @example
 * ```ts
 * elementwise('z = a * x + y', { x, y, z, a: 2.0 });
 * elementwise('n.x = p.y * q.z - p.z * q.y; n.y = p.z * q.x - p.x * q.z; n.z = p.x * q.y - p.y * q.x', { p, q, n });
 * ```
 */
export function elementwise(expression: string, values: ElementwiseValues, options?: OpOptions): void {
  const opts = readOptions('elementwise', options, { stream: true });
  run('elementwise', `s\u0000${String(expression)}`, expression, () => parseStatements(expression), values, opts);
}

function resultArray(
  what: string,
  like: DeviceArray,
  inputs: Readonly<Record<string, DeviceArray>>,
  out: DeviceArray | undefined,
  options: Readonly<MapOptions>,
): DeviceArray {
  if (out === undefined) {
    if (like.dtype.components > 1) throw new TypeError(`${what}: the input is ${like.dtype.name}; pass { out } with a scalar dtype for the result`);
    const shape = broadcastShape(
      Object.entries(inputs).map(([name, a]) => ({ name: name === 'x' ? 'a' : 'b', shape: a.shape })),
      what,
    );
    // NumPy's promotion over the inputs (array/promotion.ts): int32 and float32 give float64, not a truncation to int32.
    let dtype = like.dtype as DType;
    for (const input of Object.values(inputs)) if (input.dtype.components === 1) dtype = resultDType(dtype, input.dtype);
    return DeviceArray.empty(shape, dtype, { device: like.device, stream: streamFor(options, like, what) });
  }
  checkOutput(out, `${what}: out`);
  if (out.dtype.components > 1)
    throw new TypeError(`${what}: out is ${out.dtype.name}; the result of an expression is one number (use elementwise for components)`);
  return out;
}

function mapped(
  what: string,
  inputs: Readonly<Record<string, DeviceArray>>,
  like: DeviceArray,
  expression: string,
  options: MapOptions | undefined,
): DeviceArray {
  const opts = readOptions(what, options, { out: true, stream: true });
  for (const [name, a] of Object.entries(inputs)) checkArray(a, `${what}: ${name === 'x' ? 'a' : 'b'}`);
  const out = resultArray(what, like, inputs, opts.out, opts);
  try {
    const statement = (): Statement[] => [{ target: RESULT, value: parseExpression(expression), pos: 0 }];
    run(what, `e\u0000${String(expression)}`, expression, statement, { ...inputs, [RESULT]: out }, opts);
  } catch (error) {
    if (opts.out === undefined) out.free();
    throw error;
  }
  return out;
}

/**
 * Applies an expression of `x` (each element of `a`) to every element.
 *
 * @param a The array (a scalar dtype, or a vector dtype with `x.x`, `x.y`, ... and an `out`).
 * @param expression An expression of `x`, e.g. `'x * 2'` or `'sqrt(abs(x))'`.
 * @param options `out` (default a new array of a's dtype and shape) and `stream`.
 * @returns `out`, or the new array (owned by the caller): typed with `out`'s dtype, else `a`'s.
 * @throws As `elementwise`.
 * @example
 * ```ts
 * using doubled = map(a, 'x * 2');                 // DeviceArray<'float32'> for a float32 `a`
 * map(a, 'x > 0', { out: mask });                  // DeviceArray<'bool'> for a bool `mask`
 * ```
 */
export function map<N extends DTypeName>(a: DeviceArray<N>, expression: string, options?: MapOptions<N> & { readonly out?: undefined }): DeviceArray<N>;
export function map<O extends DTypeName>(a: DeviceArray, expression: string, options: MapOptions<O> & { readonly out: DeviceArray<O> }): DeviceArray<O>;
export function map(a: DeviceArray, expression: string, options?: MapOptions): DeviceArray;
export function map(a: DeviceArray, expression: string, options?: MapOptions): DeviceArray {
  return mapped('map', { x: a }, a, expression, options);
}

/**
 * Combines two arrays of one shape element by element with an expression of `x` (from `a`) and
 * `y` (from `b`): Accelerate's zipWith.
 *
 * @param a The first array.
 * @param b The second array (any dtype and layout; its shape and a's broadcast, as NumPy's).
 * @param expression An expression of `x` and `y`, e.g. `'x + y'`.
 * @param options `out` (default a new array of the dtype NumPy promotes a's and b's to, `numpy.result_type`:
 *   int32 and float32 give float64; of the shape a and b broadcast to) and `stream`.
 * @returns `out`, or the new array (owned by the caller): typed with `out`'s dtype, else the promoted one.
 * @throws As `elementwise`.
 * @example
 * ```ts
 * using s = zipWith(a, b, 'x + y');               // float64 for int32 a and float32 b, as NumPy
 * using centred = zipWith(m, mean, 'x - y');      // (1000, 3) minus (3,): every row
 * ```
 */
export function zipWith<N extends DTypeName>(
  a: DeviceArray<N>,
  b: DeviceArray<N>,
  expression: string,
  options?: MapOptions<N> & { readonly out?: undefined },
): DeviceArray<N>;
export function zipWith<O extends DTypeName>(
  a: DeviceArray,
  b: DeviceArray,
  expression: string,
  options: MapOptions<O> & { readonly out: DeviceArray<O> },
): DeviceArray<O>;
export function zipWith(a: DeviceArray, b: DeviceArray, expression: string, options?: MapOptions): DeviceArray;
export function zipWith(a: DeviceArray, b: DeviceArray, expression: string, options?: MapOptions): DeviceArray {
  return mapped('zipWith', { x: a, y: b }, a, expression, options);
}
