/** The reductions: what reduction-kernels.ts generates and reduction-threads.ts runs on the emulated backend. */
export type ReduceOp = 'sum' | 'min' | 'max' | 'dot';

/** The reductions in source order. */
export const REDUCE_OPS: readonly ReduceOp[] = Object.freeze(['sum', 'min', 'max', 'dot']);
