/**
 * The built-in array operations: functions over DeviceArrays (the array layer does not import
 * kernels), each a generated CUDA kernel with a JavaScript twin for the emulated backend.
 */
export { arange, type ArangeOptions } from './arange.js';
export { ascontiguous } from './ascontiguous.js';
export { astype } from './astype.js';
export { elementwise, map, zipWith, type ElementwiseValues, type MapOptions } from './elementwise.js';
export { fill } from './fill.js';
export type { OpOptions } from './op-support.js';
export { dot, max, min, reductionScratch, sum, type DotOptions, type ReduceOptions, type ReductionValue } from './reduce.js';
