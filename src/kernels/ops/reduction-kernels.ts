/**
 * The reduction kernels (sum, min, max, dot) for every dtype they take, in one CUDA source, and
 * their JavaScript twins for the emulated backend, which follow the same per-thread order, warp
 * shuffle tree and block partials, so the emulated backend rounds as the GPU does.
 *
 * Each `vram_<op>_<dtype>` kernel (256 threads a block) runs in one of two modes:
 * - split (the whole array, `m = 1`): every thread of the grid accumulates a grid-stride share of
 *   the `k` elements (16 bytes a load where the operand is contiguous and 16-byte aligned), each
 *   block reduces its threads (warp shuffles, then one warp over the 8 warp results) into one
 *   partial, and `vram_<op>_<dtype>_finish` (one block) reduces the partials. Two passes, not
 *   atomics: the result does not depend on the order blocks finish in, and min/max of floats need
 *   no atomic the hardware lacks. The split grid is 8 blocks a multiprocessor (one wave of 256-thread
 *   blocks): on an H100 the two launches over 256 MiB of float32 took 102 us of device time (CUDA
 *   events, median of 50) against 106 us for `cupy.sum` on the same array, both launched from CuPy
 *   in one process (the `vram bench` row times the same kernels launched from TypeScript).
 * - rows (`axis` reductions): block `b` reduces rows b, b + gridDim, ..., each row's `k` elements
 *   strided over the block's threads, into `out[row]`.
 *
 * Accumulators, as CuPy's (CUB's) and NumPy's: float32, float16 and bfloat16 accumulate in float32
 * (each thread sequentially over about k / (blocks * 256) elements, then a tree), float64 in
 * float64, signed integers in int64 and unsigned in uint64 (wrapping, as NumPy). sum and dot give
 * int64/uint64 for integers and the input dtype for floats; min and max give the input dtype and
 * propagate NaN (NumPy's rule). A float32 sum of n values is off by at most about
 * (n / (blocks * 256) + log2(blocks * 256)) * 2^-24 * sum(|x|); the tests check the looser bound
 * (n - 1) * 2^-24 * sum(|x|) that holds for every summation order.
 */
import type { ScalarName } from '../../array/dtype.js';
import { bfloat16Bits, float16Bits } from '../../array/half.js';
import type { EmulatedKernels, EmulatedLaunch } from '../../backend/backend.js';
import { type EmulatedOperand, operands } from './emulated-operand.js';
import { layoutOffset, layoutSource, layoutSpan, layoutStruct, MAX_KERNEL_DIMS } from './kernel-layout.js';
import { kernelScalar, kernelScalars, scalarConversionsSource } from './scalar.js';
import { REDUCE_OPS, type ReduceOp } from './reduce-op.js';
import { reductionLoops } from './reduction-threads.js';

export { REDUCE_OPS, type ReduceOp };
import { typedOperand } from './typed-access.js';

/** The dtypes every reduction takes (bool and the vector dtypes are refused: astype first). */
export const REDUCE_DTYPES: readonly ScalarName[] = Object.freeze(kernelScalars.filter((name) => name !== 'bool'));

/** The signatures of a reduction's two kernels, `vram_<op>_<dtype>` and its `_finish`. */
export const reduceSignatures = Object.freeze({
  /** a, a's inner layout, a's outer (row) layout, b, b's layout (dot; else a's again), m, k, split, out, partials. */
  main: Object.freeze(['cptr', layoutStruct, layoutStruct, 'cptr', layoutStruct, 'i64', 'i64', 'i32', 'ptr', 'ptr'] as const),
  /** partials, their count, out. */
  finish: Object.freeze(['ptr', 'i64', 'ptr'] as const),
});

/** Threads per block of every reduction kernel (8 warps). */
export const REDUCE_BLOCK = 256;

/** The accumulator kinds, by the dtype that holds a partial. */
type Acc = 'float32' | 'float64' | 'int64' | 'uint64';

const ACC_C: Readonly<Record<Acc, string>> = { float32: 'float', float64: 'double', int64: 'long long', uint64: 'unsigned long long' };

/**
 * The dtype a reduction accumulates in (and its partials are stored as).
 *
 * @param dtype The input dtype (one of REDUCE_DTYPES).
 * @returns float32, float64, int64 or uint64.
 * @throws Never.
 * @example
 * ```ts
 * accumulatorDtype('float16'); // 'float32'
 * ```
 */
export function accumulatorDtype(dtype: ScalarName): Acc {
  if (dtype === 'float64') return 'float64';
  if (kernelScalar[dtype].family === 'float') return 'float32';
  return kernelScalar[dtype].signed ? 'int64' : 'uint64';
}

/**
 * The dtype of a reduction's result.
 *
 * @param op The reduction.
 * @param dtype The input dtype.
 * @returns sum/dot: int64 or uint64 for integers, the input's for floats; min/max: the input's.
 * @throws Never.
 * @example
 * ```ts
 * resultDtype('sum', 'int8');    // 'int64'
 * resultDtype('max', 'float16'); // 'float16'
 * ```
 */
export function resultDtype(op: ReduceOp, dtype: ScalarName): ScalarName {
  if (op === 'min' || op === 'max') return dtype;
  const acc = accumulatorDtype(dtype);
  return acc === 'float32' || acc === 'float64' ? dtype : acc;
}

/**
 * A reduction kernel's name; its second pass is the same name with `_finish`.
 *
 * @param op The reduction.
 * @param dtype The input dtype.
 * @returns `vram_<op>_<dtype>`.
 * @throws Never.
 * @example
 * ```ts
 * reduceKernelName('sum', 'float32'); // 'vram_sum_float32'
 * ```
 */
export function reduceKernelName(op: ReduceOp, dtype: ScalarName): string {
  return `vram_${op}_${dtype}`;
}

function identityC(op: ReduceOp, acc: Acc): string {
  if (op === 'sum' || op === 'dot') return { float32: '0.0f', float64: '0.0', int64: '0LL', uint64: '0ULL' }[acc];
  if (op === 'min') {
    return {
      float32: '__uint_as_float(0x7f800000u)',
      float64: '__longlong_as_double(0x7ff0000000000000LL)',
      int64: '9223372036854775807LL',
      uint64: '0xffffffffffffffffULL',
    }[acc];
  }
  return {
    float32: '__uint_as_float(0xff800000u)',
    float64: '__longlong_as_double((long long)0xfff0000000000000ULL)',
    int64: '(-9223372036854775807LL - 1)',
    uint64: '0ULL',
  }[acc];
}

function combineC(op: ReduceOp): string {
  if (op === 'min') return '#define VRAM_COMBINE(a, b) (((b) < (a) || (b) != (b)) ? (b) : (a))';
  if (op === 'max') return '#define VRAM_COMBINE(a, b) (((b) > (a) || (b) != (b)) ? (b) : (a))';
  return '#define VRAM_COMBINE(a, b) ((a) + (b))';
}

/** The C expression turning a stored value `v` into the accumulator. */
function toAccC(dtype: ScalarName, v: string): string {
  if (dtype === 'float16') return `vram_f16_to_float(${v})`;
  if (dtype === 'bfloat16') return `vram_bf16_to_float(${v})`;
  return `(${ACC_C[accumulatorDtype(dtype)]})(${v})`;
}

/** The C expression turning the accumulator `a` into the result's stored value. */
function fromAccC(out: ScalarName, a: string): string {
  if (out === 'float16') return `vram_float_to_f16(${a})`;
  if (out === 'bfloat16') return `vram_float_to_bf16(${a})`;
  return `(${kernelScalar[out].storage})(${a})`;
}

// Every operand of VRAM_COMBINE goes through a variable first: the macro names its second operand
// up to three times, behind || and ?:, and a shuffle written there ran on part of the warp only
// (min and max hung on an H100 that way).
const BLOCK_REDUCE = [
  '  for (int o = 16; o > 0; o >>= 1) { const ACC_T other = __shfl_down_sync(0xffffffffu, acc, o); acc = VRAM_COMBINE(acc, other); }',
  '  if ((threadIdx.x & 31) == 0) warp[threadIdx.x >> 5] = acc;',
  '  __syncthreads();',
  '  if (threadIdx.x < 32) {',
  '    acc = threadIdx.x < (blockDim.x >> 5) ? warp[threadIdx.x] : VRAM_IDENTITY;',
  '    for (int o = 16; o > 0; o >>= 1) { const ACC_T other = __shfl_down_sync(0xffffffffu, acc, o); acc = VRAM_COMBINE(acc, other); }',
  '  }',
];

function kernelC(op: ReduceOp, dtype: ScalarName): string {
  const name = reduceKernelName(op, dtype);
  const t = kernelScalar[dtype].storage;
  const accName = accumulatorDtype(dtype);
  const acc = ACC_C[accName];
  const out = kernelScalar[resultDtype(op, dtype)].storage;
  const lanes = 16 / kernelScalar[dtype].bytes;
  const elem = (x: string, y: string): string => (op === 'dot' ? `${toAccC(dtype, x)} * ${toAccC(dtype, y)}` : toAccC(dtype, x));
  const flatB = op === 'dot' ? ' && bi.ndim == 1 && bi.strides[0] == 1 && (((unsigned long long)b) & 15) == 0' : '';
  return [
    combineC(op),
    `#define VRAM_IDENTITY (${identityC(op, accName)})`,
    `typedef ${acc} ACC_T;`,
    `extern "C" __global__ void __launch_bounds__(${REDUCE_BLOCK}) ${name}(const ${t}* a, VramLayout ai, VramLayout ao, const ${t}* b, VramLayout bi,`,
    `    long long m, long long k, int split, ${out}* out, ${acc}* partials) {`,
    `  __shared__ ${acc} warp[${REDUCE_BLOCK / 32}];`,
    `  ${acc} acc = VRAM_IDENTITY;`,
    '  if (split) {',
    '    const long long step = (long long)gridDim.x * blockDim.x;',
    '    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;',
    '    long long start = 0;',
    `    if (ai.ndim == 1 && ai.strides[0] == 1 && (((unsigned long long)a) & 15) == 0${flatB}) {`,
    `      const long long chunks = k / ${lanes};`,
    '      for (long long c = t; c < chunks; c += step) {',
    `        union { uint4 raw; ${t} e[${lanes}]; } va${op === 'dot' ? ', vb' : ''};`,
    '        va.raw = ((const uint4*)a)[c];',
    ...(op === 'dot' ? ['        vb.raw = ((const uint4*)b)[c];'] : []),
    '#pragma unroll',
    `        for (int j = 0; j < ${lanes}; ++j) { const ACC_T v = ${elem('va.e[j]', 'vb.e[j]')}; acc = VRAM_COMBINE(acc, v); }`,
    '      }',
    `      start = chunks * ${lanes};`,
    '    }',
    `    for (long long i = start + t; i < k; i += step) { const ACC_T v = ${elem('a[vram_offset(ai, i)]', 'b[vram_offset(bi, i)]')}; acc = VRAM_COMBINE(acc, v); }`,
    ...BLOCK_REDUCE.map((l) => `  ${l}`),
    '    if (threadIdx.x == 0) partials[blockIdx.x] = acc;',
    '    return;',
    '  }',
    '  for (long long row = blockIdx.x; row < m; row += gridDim.x) {',
    '    const long long base = vram_offset(ao, row);',
    '    acc = VRAM_IDENTITY;',
    `    for (long long j = threadIdx.x; j < k; j += blockDim.x) { const ACC_T v = ${elem('a[base + vram_offset(ai, j)]', 'b[vram_offset(bi, j)]')}; acc = VRAM_COMBINE(acc, v); }`,
    ...BLOCK_REDUCE.map((l) => `  ${l}`),
    `    if (threadIdx.x == 0) out[row] = ${fromAccC(resultDtype(op, dtype), 'acc')};`,
    '    __syncthreads();',
    '  }',
    '}',
    `extern "C" __global__ void __launch_bounds__(${REDUCE_BLOCK}) ${name}_finish(const ${acc}* partials, long long g, ${out}* out) {`,
    `  __shared__ ${acc} warp[${REDUCE_BLOCK / 32}];`,
    `  ${acc} acc = VRAM_IDENTITY;`,
    '  for (long long j = threadIdx.x; j < g; j += blockDim.x) { const ACC_T v = partials[j]; acc = VRAM_COMBINE(acc, v); }',
    ...BLOCK_REDUCE,
    `  if (threadIdx.x == 0) out[0] = ${fromAccC(resultDtype(op, dtype), 'acc')};`,
    '}',
    '#undef VRAM_COMBINE',
    '#undef VRAM_IDENTITY',
  ].join('\n');
}

/**
 * The CUDA source of one reduction for one dtype (its two kernels): a module of its own, so the
 * first `sum` of float32 compiles two kernels, not all 96.
 *
 * @param op The reduction.
 * @param dtype The input dtype (one of REDUCE_DTYPES).
 * @returns C source text.
 * @throws Never.
 * @example
 * ```ts
 * reductionSource('sum', 'float32').includes('vram_sum_float32_finish'); // true
 * ```
 */
export function reductionSource(op: ReduceOp, dtype: ScalarName): string {
  return [
    `// vram ${op} of ${dtype} (generated: src/kernels/ops/reduction-kernels.ts)`,
    layoutSource(),
    scalarConversionsSource(),
    kernelC(op, dtype),
    '',
  ].join('\n');
}

// --- The JavaScript twins -------------------------------------------------------------------

type Value = number | bigint;

interface AccOps {
  readonly identity: Value;
  readonly combine: (a: Value, b: Value) => Value;
  /** The element's value in the accumulator (read from a view). */
  readonly read: (view: DataView, byte: number) => Value;
  readonly multiply: (a: Value, b: Value) => Value;
  /** Reads a stored partial. */
  readonly readPartial: (view: DataView, byte: number) => Value;
  readonly writePartial: (view: DataView, byte: number, v: Value) => void;
}

function accOps(op: ReduceOp, dtype: ScalarName): AccOps {
  const acc = accumulatorDtype(dtype);
  const s = kernelScalar[dtype];
  const float = acc === 'float32' || acc === 'float64';
  const round = acc === 'float32' ? Math.fround : (x: number): number => x;
  const wrap = acc === 'int64' ? (x: bigint): bigint => BigInt.asIntN(64, x) : (x: bigint): bigint => BigInt.asUintN(64, x);
  let combine: (a: Value, b: Value) => Value;
  let identity: Value;
  if (op === 'min' || op === 'max') {
    const better = op === 'min' ? (a: Value, b: Value): boolean => b < a : (a: Value, b: Value): boolean => b > a;
    combine = (a, b) => (better(a, b) || b !== b ? b : a);
    if (float) identity = op === 'min' ? Infinity : -Infinity;
    else if (acc === 'int64') identity = op === 'min' ? 2n ** 63n - 1n : -(2n ** 63n);
    else identity = op === 'min' ? 2n ** 64n - 1n : 0n;
  } else {
    combine = float ? (a, b) => round((a as number) + (b as number)) : (a, b) => wrap((a as bigint) + (b as bigint));
    identity = float ? 0 : 0n;
  }
  const read: (view: DataView, byte: number) => Value = float
    ? (v, o) => s.read(v, o)
    : dtype === 'int64'
      ? (v, o) => v.getBigInt64(o, true)
      : dtype === 'uint64'
        ? (v, o) => v.getBigUint64(o, true)
        : (v, o) => BigInt(s.read(v, o));
  const multiply = float
    ? (a: Value, b: Value): Value => round((a as number) * (b as number))
    : (a: Value, b: Value): Value => wrap((a as bigint) * (b as bigint));
  const readPartial: (view: DataView, byte: number) => Value =
    acc === 'float32'
      ? (v, o) => v.getFloat32(o, true)
      : acc === 'float64'
        ? (v, o) => v.getFloat64(o, true)
        : acc === 'int64'
          ? (v, o) => v.getBigInt64(o, true)
          : (v, o) => v.getBigUint64(o, true);
  const writePartial: (view: DataView, byte: number, x: Value) => void =
    acc === 'float32'
      ? (v, o, x) => v.setFloat32(o, x as number, true)
      : acc === 'float64'
        ? (v, o, x) => v.setFloat64(o, x as number, true)
        : acc === 'int64'
          ? (v, o, x) => v.setBigInt64(o, x as bigint, true)
          : (v, o, x) => v.setBigUint64(o, x as bigint, true);
  return { identity, combine, read, multiply, readPartial, writePartial };
}

/** Writes the accumulator as the result dtype (exact for min/max; rounded for half sums). */
function resultWriter(out: ScalarName): (view: DataView, byte: number, v: Value) => void {
  switch (out) {
    case 'float16':
      return (view, o, v) => view.setUint16(o, float16Bits(v as number), true);
    case 'bfloat16':
      return (view, o, v) => view.setUint16(o, bfloat16Bits(v as number), true);
    case 'float32':
      return (view, o, v) => view.setFloat32(o, v as number, true);
    case 'float64':
      return (view, o, v) => view.setFloat64(o, v as number, true);
    case 'int64':
      return (view, o, v) => view.setBigInt64(o, BigInt.asIntN(64, v as bigint), true);
    case 'uint64':
      return (view, o, v) => view.setBigUint64(o, BigInt.asUintN(64, v as bigint), true);
    default: {
      const s = kernelScalar[out];
      return (view, o, v) => s.write(view, o, Number(v));
    }
  }
}

/**
 * The block's result as thread 0 holds it: the warp shuffle tree, then warp 0 over the warp
 * results. Only what reaches lane 0 is computed (lanes l < o at each step, in place: lane l + o
 * still holds the previous step's value, as `__shfl_down_sync` reads it). `threads` is overwritten.
 */
function blockReduce(threads: Value[], ops: AccOps): Value {
  const warpTree = (lanes: Value[], at: number): Value => {
    for (let o = 16; o > 0; o >>= 1) for (let l = 0; l < o; l++) lanes[at + l] = ops.combine(lanes[at + l]!, lanes[at + l + o]!);
    return lanes[at]!;
  };
  const first: Value[] = [];
  for (let w = 0; w * 32 < threads.length; w++) first.push(warpTree(threads, w * 32));
  while (first.length < 32) first.push(ops.identity);
  return warpTree(first, 0);
}

/**
 * The JavaScript twins of the two kernels of `reductionSource(op, dtype)`, by kernel name.
 *
 * @param op The reduction.
 * @param dtype The input dtype.
 * @returns The emulated kernels.
 * @throws Never.
 * @example
 * ```ts
 * Module.compile(reductionSource('sum', 'float32'), { device, emulated: reductionEmulated('sum', 'float32') });
 * ```
 */
export function reductionEmulated(op: ReduceOp, dtype: ScalarName): EmulatedKernels {
  const ops = accOps(op, dtype);
  const size = kernelScalar[dtype].bytes;
  const accSize = kernelScalar[accumulatorDtype(dtype)].bytes;
  const out = resultDtype(op, dtype);
  const outSize = kernelScalar[out].bytes;
  const writeOut = resultWriter(out);
  const lanes = 16 / size;
  const accumulator = accumulatorDtype(dtype);
  const float = accumulator === 'float32' || accumulator === 'float64';
  const loops = reductionLoops(op, dtype, accumulator);
  const main = (launch: EmulatedLaunch): void => {
    const [aPtr, ai, ao, bPtr, bi, mArg, kArg, split, outPtr, partialsPtr] = launch.args as [
      number,
      number[],
      number[],
      number,
      number[],
      number,
      number,
      number,
      number,
      number,
    ];
    const m = Number(mArg);
    const k = Number(kArg);
    const grid = launch.grid[0];
    const blockSize = launch.block[0];
    const inner = layoutSpan(ai, k);
    const outer = split !== 0 ? { lo: 0, hi: 1 } : layoutSpan(ao, m);
    const specs = [
      { ptr: aPtr, lo: k === 0 ? 0 : outer.lo + inner.lo, hi: k === 0 ? 0 : outer.hi + inner.hi - 1, elementBytes: size, access: 'read' as const },
      { ptr: bPtr, ...(op === 'dot' ? layoutSpan(bi, k) : { lo: 0, hi: 0 }), elementBytes: size, access: 'read' as const },
      split !== 0
        ? { ptr: partialsPtr, lo: 0, hi: grid, elementBytes: accSize, access: 'write' as const }
        : { ptr: outPtr, lo: 0, hi: m, elementBytes: outSize, access: 'write' as const },
    ];
    const [a, b, dst] = operands(launch.memory, specs) as [EmulatedOperand, EmulatedOperand, EmulatedOperand];
    // The typed path: the same elements in the same order, accumulated in doubles (exact for the
    // narrow integers while no thread's share can pass 2^53).
    const ta = loops === undefined ? undefined : typedOperand(a, dtype);
    const tb = loops === undefined ? undefined : typedOperand(b, dtype);
    const perThread = split !== 0 ? Math.ceil(k / (grid * blockSize)) * 2 + lanes : Math.ceil(k / blockSize);
    const typed = ta !== undefined && tb !== undefined && blockSize % 32 === 0 && (float || perThread * 2 ** 32 < 2 ** 53);
    const v = typed ? new Float64Array(Math.max(32, blockSize)) : undefined;
    /** The block's result from its threads' accumulations (first, step, chunks as the block loop takes them). */
    const block = (base: number, first: number, step: number, chunks: number): Value => {
      loops!.block(ta!.array, ta!.index, tb!.array, tb!.index, ai, bi, base, first, blockSize, step, chunks, lanes, k, v!);
      if (loops!.tree !== undefined) return loops!.tree(v!, blockSize);
      const threads: Value[] = [];
      for (let th = 0; th < blockSize; th++) threads.push(v![th] === Infinity || v![th] === -Infinity ? ops.identity : BigInt(v![th]!));
      return blockReduce(threads, ops);
    };
    const element = (base: number, j: number): Value => {
      const x = ops.read(a.view, a.base + (base + layoutOffset(ai, j)) * size);
      return op === 'dot' ? ops.multiply(x, ops.read(b.view, b.base + layoutOffset(bi, j) * size)) : x;
    };
    const flatElement = (j: number): Value => {
      const x = ops.read(a.view, a.base + j * size);
      return op === 'dot' ? ops.multiply(x, ops.read(b.view, b.base + j * size)) : x;
    };
    if (split !== 0) {
      const step = grid * blockSize;
      const flat =
        ai[0] === 1 && ai[1 + MAX_KERNEL_DIMS] === 1 && aPtr % 16 === 0 && (op !== 'dot' || (bi[0] === 1 && bi[1 + MAX_KERNEL_DIMS] === 1 && bPtr % 16 === 0));
      const chunks = flat ? Math.floor(k / lanes) : 0;
      for (let blk = 0; blk < grid; blk++) {
        if (typed) {
          ops.writePartial(dst.view, dst.base + blk * accSize, block(0, blk * blockSize, step, chunks));
          continue;
        }
        const threads: Value[] = [];
        for (let th = 0; th < blockSize; th++) {
          const t = blk * blockSize + th;
          let acc = ops.identity;
          for (let c = t; c < chunks; c += step) for (let j = 0; j < lanes; j++) acc = ops.combine(acc, flatElement(c * lanes + j));
          for (let i = chunks * lanes + t; i < k; i += step) acc = ops.combine(acc, element(0, i));
          threads.push(acc);
        }
        ops.writePartial(dst.view, dst.base + blk * accSize, blockReduce(threads, ops));
      }
      return;
    }
    for (let row = 0; row < m; row++) {
      const base = layoutOffset(ao, row);
      if (typed) {
        writeOut(dst.view, dst.base + row * outSize, block(base, 0, blockSize, 0));
        continue;
      }
      const threads: Value[] = [];
      for (let th = 0; th < blockSize; th++) {
        let acc = ops.identity;
        for (let j = th; j < k; j += blockSize) acc = ops.combine(acc, element(base, j));
        threads.push(acc);
      }
      writeOut(dst.view, dst.base + row * outSize, blockReduce(threads, ops));
    }
  };
  const finish = (launch: EmulatedLaunch): void => {
    const [partialsPtr, gArg, outPtr] = launch.args as [number, number, number];
    const g = Number(gArg);
    const blockSize = launch.block[0];
    const [p, dst] = operands(launch.memory, [
      { ptr: partialsPtr, lo: 0, hi: g, elementBytes: accSize },
      { ptr: outPtr, lo: 0, hi: 1, elementBytes: outSize },
    ]) as [EmulatedOperand, EmulatedOperand];
    const threads: Value[] = [];
    for (let th = 0; th < blockSize; th++) {
      let acc = ops.identity;
      for (let j = th; j < g; j += blockSize) acc = ops.combine(acc, ops.readPartial(p.view, p.base + j * accSize));
      threads.push(acc);
    }
    writeOut(dst.view, dst.base, blockReduce(threads, ops));
  };
  const name = reduceKernelName(op, dtype);
  return { [name]: main, [`${name}_finish`]: finish };
}
