/**
 * The fixed set of built-in sources: `basic` (fill, copy, astype, arange) and one per reduction
 * and dtype (`sum-float32`, ...), 49 in all. This is the whole set the package ships PTX for:
 * every runtime choice (dtype, rank, layout) of the fixed operations is an argument of one of
 * these kernels, never a new instantiation.
 */
import type { ScalarName } from '../../array/dtype.js';
import { basicEmulated, basicSource } from './basic-kernels.js';
import type { BuiltinSource } from './builtin-module.js';
import { REDUCE_DTYPES, REDUCE_OPS, reductionEmulated, reductionSource, type ReduceOp } from './reduction-kernels.js';

let basic: BuiltinSource | undefined;
const reductions = new Map<string, BuiltinSource>();

/**
 * The `basic` source (fill, copy, astype, arange), generated once.
 *
 * @returns Its name, source and JavaScript twins.
 * @throws Never.
 * @example
 * ```ts
 * builtinKernel(device, basicBuiltin(), 'vram_fill', basicSignatures.vram_fill, 'fill');
 * ```
 */
export function basicBuiltin(): BuiltinSource {
  basic ??= { name: 'basic', source: basicSource(), emulated: basicEmulated() };
  return basic;
}

/**
 * The source of one reduction for one dtype, generated once.
 *
 * @param op The reduction.
 * @param dtype The input dtype (one of REDUCE_DTYPES).
 * @returns Its name (`sum-float32`), source and JavaScript twins.
 * @throws Never.
 * @example
 * ```ts
 * reductionBuiltin('sum', 'float32').name; // 'sum-float32'
 * ```
 */
export function reductionBuiltin(op: ReduceOp, dtype: ScalarName): BuiltinSource {
  const name = `${op}-${dtype}`;
  let r = reductions.get(name);
  if (r === undefined) reductions.set(name, (r = { name, source: reductionSource(op, dtype), emulated: reductionEmulated(op, dtype) }));
  return r;
}

/**
 * Every fixed built-in source, in a stable order: what scripts/generate-builtin-ptx.mjs compiles
 * and test/kernels/ops-ptx.test.ts checks.
 *
 * @returns name and source of each.
 * @throws Never.
 * @example
 * ```ts
 * builtinSources().length; // 49
 * ```
 */
export function builtinSources(): { readonly name: string; readonly source: string }[] {
  const all = [basicBuiltin()];
  for (const op of REDUCE_OPS) for (const dtype of REDUCE_DTYPES) all.push(reductionBuiltin(op, dtype));
  return all.map((b) => ({ name: b.name!, source: b.source }));
}
