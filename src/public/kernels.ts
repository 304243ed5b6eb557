/// <reference lib="esnext.disposable" preserve="true" />
// Kept in the .d.ts (preserve), as in index.ts: a consumer that imports only this subpath needs `Disposable` too.
/**
 * `vram/kernels`: CUDA C++ compiled at run time (NVRTC, a disk cache) or loaded, checked launches,
 * the JavaScript twins a kernel runs as on the emulated backend, and the built-in array operations
 * beyond the few the root keeps (`arange`, `astype`, `fill`, `sum`).
 *
 * @module vram/kernels
 */
export { Module } from '../kernels/module.js';
export { CompileError } from '../kernels/compile-error.js';
export { NvrtcUnavailableError } from '../cuda/nvrtc.js';
export { compileStatistics, nvrtcAvailable } from '../kernels/compile.js';
export type { CompileOptions, LoadOptions } from '../kernels/module.js';
export type { CompileStatistics } from '../kernels/compile.js';
export { Kernel } from '../kernels/kernel.js';
export type { LaunchConfig, Dim3 } from '../kernels/launch-config.js';
export type { Signature, ArgsOf, ArgOf, PointerArg } from '../kernels/signature.js';
export type { SuggestedBlockSize } from '../kernels/occupancy.js';
export { threadCount } from '../kernels/emulated-kernel.js';
// A kernel's emulated twin is written against these (Module.compile's `emulated` option).
export type {
  EmulatedAccess,
  EmulatedKernels,
  EmulatedKernel,
  EmulatedLaunch,
  EmulatedMemory,
  FunctionAttributes,
  KernelLimits,
  ParamType,
  ScalarParam,
  KernelParams,
  ParamSlot,
  ModuleImage,
} from '../backend/backend.js';
export { kernelCacheDirectory } from '../kernels/compile-cache.js';
export { NvrtcError } from '../cuda/nvrtc.js';
export { elementwise, map, zipWith, dot, max, min, ascontiguous, reductionScratch } from '../kernels/ops/index.js';
export type { ArangeOptions, ElementwiseValues, MapOptions, OpOptions, DotOptions, ReduceOptions, ReductionValue } from '../kernels/ops/index.js';
export type { ReduceOp } from '../kernels/ops/reduce-op.js';
