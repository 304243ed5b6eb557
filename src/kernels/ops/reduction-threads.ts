/**
 * The threads of a block in the emulated reductions, over typed arrays, as generated
 * JavaScript with the combine and the conversions inlined (Note [Emulated kernels at JavaScript
 * speed]): the same elements in the same order as `reduction-kernels.ts`'s DataView loop, so
 * results round alike. Accumulators that are doubles here: float32 (each step rounded with
 * `Math.fround`) and float64 as the kernels' own; the integers narrower than 64 bits as exact
 * doubles, which the caller turns into the kernel's int64/uint64 (it takes this path only while
 * no partial sum can pass 2^53). The text is built from the fixed tables below, never from input.
 */
import type { ScalarName } from '../../array/dtype.js';
import { MAX_KERNEL_DIMS } from './kernel-layout.js';
import type { ReduceOp } from './reduce-op.js';
import { type ComponentArray, loadSource, typedHelpers } from './typed-access.js';

/**
 * A block's threads' accumulations into `out[0..threads)`: thread `th` starts at `first + th` and
 * takes every `step`-th chunk of `lanes` contiguous elements below `chunks` (split mode over an
 * aligned contiguous operand), then every `step`-th element below `k` (`base` added to a's offsets:
 * the row, in rows mode).
 */
export type BlockLoop = (
  a: ComponentArray,
  ia: number,
  b: ComponentArray,
  ib: number,
  ai: readonly number[],
  bi: readonly number[],
  base: number,
  first: number,
  threads: number,
  step: number,
  chunks: number,
  lanes: number,
  k: number,
  out: Float64Array,
) => void;

/**
 * The block's result as thread 0 holds it, from the threads' accumulations in `v` (a multiple of
 * 32 of them, and room for 32): the warp shuffle tree, then warp 0 over the warp results. Only
 * what reaches lane 0 is computed; `v` is overwritten.
 */
export type BlockTree = (v: Float64Array, count: number) => number;

/** The generated loops of one reduction and dtype. */
export interface ReductionLoops {
  readonly block: BlockLoop;
  /** The tree over double accumulators (float32 and float64 ones); undefined for the integers (the caller's tree, on bigints). */
  readonly tree: BlockTree | undefined;
}

const cache = new Map<string, ReductionLoops>();

/**
 * The generated loops of a reduction, or undefined where it has no double accumulator (64-bit
 * integers, and `dot` of integers, whose products pass 2^53).
 *
 * @param op The reduction.
 * @param dtype The input dtype.
 * @param accumulator The kernel's accumulator dtype.
 * @returns The loops (made once per op and dtype), or undefined.
 * @throws Never.
 * @example
 * ```ts
 * const loops = reductionLoops('sum', 'float32', 'float32');
 * ```
 */
export function reductionLoops(op: ReduceOp, dtype: ScalarName, accumulator: ScalarName): ReductionLoops | undefined {
  const float = accumulator === 'float32' || accumulator === 'float64';
  if (dtype === 'int64' || dtype === 'uint64' || (op === 'dot' && !float)) return undefined;
  const key = `${op}:${dtype}`;
  const known = cache.get(key);
  if (known !== undefined) return known;
  const round = (x: string): string => (accumulator === 'float32' ? `Math.fround(${x})` : x);
  const element = (ea: string, eb: string): string =>
    op === 'dot' ? round(`${loadSource(dtype, `a[${ea}]`)} * ${loadSource(dtype, `b[${eb}]`)}`) : loadSource(dtype, `a[${ea}]`);
  const combine = op === 'min' ? '(x < acc || x !== x ? x : acc)' : op === 'max' ? '(x > acc || x !== x ? x : acc)' : round('acc + x');
  const identity = op === 'min' ? 'Infinity' : op === 'max' ? '-Infinity' : '0';
  const blockText = [
    'return function vram_reduce_block(a, ia, b, ib, ai, bi, base, first, threads, step, chunks, lanes, k, out) {',
    `  const flatA = ai[0] === 1, sa = ai[${1 + MAX_KERNEL_DIMS}], flatB = bi[0] === 1, sb = bi[${1 + MAX_KERNEL_DIMS}];`,
    '  for (let th = 0; th < threads; th++) {',
    '    const start = first + th;',
    `    let acc = ${identity};`,
    '    for (let c = start; c < chunks; c += step) {',
    '      const e = c * lanes;',
    `      for (let j = 0; j < lanes; j++) { const x = ${element('ia + e + j', 'ib + e + j')}; acc = ${combine}; }`,
    '    }',
    '    for (let i = chunks * lanes + start; i < k; i += step) {',
    '      const oa = ia + base + (flatA ? i * sa : H.offset(ai, i));',
    '      const ob = ib + (flatB ? i * sb : H.offset(bi, i));',
    `      const x = ${element('oa', 'ob')}; acc = ${combine};`,
    '    }',
    '    out[th] = acc;',
    '  }',
    '};',
  ].join('\n');
  const step = `for (let o = 16; o > 0; o >>= 1) for (let l = 0; l < o; l++) { const acc = v[w + l], x = v[w + l + o]; v[w + l] = ${combine}; }`;
  const treeText = [
    'return function vram_reduce_tree(v, count) {',
    '  let warps = 0;',
    `  for (let w = 0; w < count; w += 32) { ${step} v[warps++] = v[w]; }`,
    `  for (let l = warps; l < 32; l++) v[l] = ${identity};`,
    `  { const w = 0; ${step} }`,
    '  return v[0];',
    '};',
  ].join('\n');
  const block = (new Function('H', blockText) as (h: typeof typedHelpers) => BlockLoop)(typedHelpers);
  const tree = float ? (new Function(treeText) as () => BlockTree)() : undefined;
  const loops = { block, tree };
  cache.set(key, loops);
  return loops;
}
