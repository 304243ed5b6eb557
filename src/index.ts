/// <reference lib="esnext.disposable" preserve="true" />
// The reference above is kept in index.d.ts (preserve) so that a consumer's compiler knows `Disposable`
// and `Symbol.dispose`, which vram's declarations use, without @types/node or `lib: esnext.disposable`
// in their own tsconfig (a `tsc --init` project has `types: []`; an ES2022 lib has neither).
/**
 * vram: CUDA memory management for TypeScript. This root holds what a user of arrays and the default
 * allocator needs: devices, streams, buffers, arrays, the current resource, its statistics and the
 * errors. The rest lives in subpaths, one file each under src/public/ (package.json "exports"; this
 * list is checked against it by test/package/docs.test.ts):
 * - `vram/resources`: memory resources, sub-allocators and adaptors;
 * - `vram/buffers`: every kind of buffer, and copies to and from JavaScript memory;
 * - `vram/arrays`: dtypes, layouts, `DeviceArray` and `HostArray` in full;
 * - `vram/kernels`: modules, kernels and the built-in operations;
 * - `vram/interop`: memory shared with other libraries in the process (DLPack, CAI, foreign pointers);
 * - `vram/ipc`: memory shared with other processes (IPC handles, PyTorch's share tuples, pools over fds);
 * - `vram/observe`: statistics, the memory history and snapshots;
 * - `vram/replay`: RMM allocation logs, replayed;
 * - `vram/backend`: the Backend interface and the emulated backend;
 * - `vram/nccl`: collectives between GPUs and hosts;
 * - `vram/graphs`: CUDA graphs and their memory pool.
 * test/package/exports.test.ts lists the root's names, so adding one here is a visible decision: keep it to
 * what the first page of the README uses.
 *
 * @module vram
 */

// Which backend runs (its name, why `auto` fell back); the Backend interface itself is `vram/backend`.
export { getBackend, backendFallbackReason } from './backend/select.js';

// Errors
export {
  VramError,
  CudaError,
  OutOfMemoryError,
  isOutOfMemory,
  VramStateError,
  UseAfterFreeError,
  DoubleFreeError,
  InvalidPointerError,
  NotSupportedError,
  DetachedBufferError,
  CUresult,
} from './errors.js';
export type { OutOfMemoryStatistics, OutOfMemoryReason, OutOfMemoryDetails } from './errors.js';

// Devices, contexts, streams, events
export { Device, Context } from './device.js';
export type { ContextOptions, ContextSchedule } from './device.js';
export { Stream, Event } from './stream.js';
export type { StreamOptions, EventOptions } from './stream.js';

// Buffers
export { DeviceBuffer, PitchedDeviceBuffer } from './buffer/device-buffer.js';
export type { DeviceBufferOptions, PitchedOptions } from './buffer/device-buffer.js';
export { HostBuffer } from './buffer/host-buffer.js';
export type { HostBufferOptions } from './buffer/host-buffer.js';
export { ManagedBuffer } from './buffer/managed-buffer.js';
export type { ManagedBufferOptions } from './buffer/managed-buffer.js';
export type { CopyEndpoint, CopyOptions, CopyInOptions, CopyOutOptions, HostData, MemsetOptions } from './buffer/copy-planning.js';
export type { FreeOptions } from './buffer/lifetime.js';
export { tidy, keep } from './buffer/tidy.js';

// Typed arrays
export { dtypes, dtypeOf } from './array/dtype.js';
export type { DType, DTypeName, ScalarName, VectorName, HostTypedArray } from './array/dtype.js';
export type { Shape } from './array/shape.js';
export type { HostInput } from './array/host-data.js';
export { DeviceArray } from './array/device-array.js';
export type { DeviceArrayOptions, DeviceArrayFromOptions, AsyncCopyOptions } from './array/device-array.js';
export { HostArray } from './array/host-array.js';
export type { HostArrayFromOptions } from './array/host-array.js';

// The current resource and its statistics (the resources themselves: `vram/resources`)
export { MemoryResource } from './resource/resource.js';
export type { StreamRef } from './stream.js';
export { getCurrentResource, setCurrentResource, emptyCache } from './resource/current.js';
export { memoryStats, resetPeakStats, memorySummary } from './observe/memory-stats.js';
export type { MemoryStats, Gauge } from './observe/memory-stats.js';
export type { Counter } from './counter.js';

// The built-in operations an array user reaches for first (the rest: `vram/kernels`)
export { arange, astype, fill, sum } from './kernels/ops/index.js';
