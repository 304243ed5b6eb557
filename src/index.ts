/// <reference lib="esnext.disposable" preserve="true" />
// The reference above is kept in index.d.ts (preserve) so that a consumer's compiler knows `Disposable`
// and `Symbol.dispose`, which vram's declarations use, without @types/node or `lib: esnext.disposable`
// in their own tsconfig (a `tsc --init` project has `types: []`; an ES2022 lib has neither).
/**
 * vram: CUDA memory management for TypeScript. This module is the public API; the layers below it
 * (src/cuda, src/backend) are reachable through `getBackend()` for code that needs a primitive the
 * classes do not cover.
 */
import './polyfills.js';

// Backend selection and the primitive interface
export { getBackend, setBackend, backendFallbackReason } from './backend/select.js';
export { EmulatedBackend } from './backend/emulated.js';
export type {
  Backend, Ptr, Handle, DeviceInfo, MemInfo, PointerAttributes, MemPoolProps, Memcpy2D, HostMemory, MemLocation,
  ModuleImage, EmulatedKernels, EmulatedKernel, EmulatedLaunch, EmulatedMemory, FunctionAttributes, KernelLimits,
  ParamType, ScalarParam, KernelParams, ParamSlot,
} from './backend/backend.js';
export { MemPoolAttribute } from './backend/backend.js';
export type { EmulatedBackendOptions } from './backend/emulated.js';

// Errors and argument checks
export {
  VramError, CudaError, OutOfMemoryError, isOutOfMemory, VramStateError, UseAfterFreeError, DoubleFreeError,
  InvalidPointerError, NotSupportedError, DetachedBufferError, CUresult,
} from './errors.js';
export type { OutOfMemoryStatistics, OutOfMemoryReason, OutOfMemoryDetails } from './errors.js';
export type { Counter } from './counter.js';

// Devices, contexts, streams, events
export { Device, Context } from './device.js';
export type { ContextOptions, ContextSchedule } from './device.js';
export { Stream, Event, watchStreamDestroy } from './stream.js';
export type { StreamOptions, BorrowedStreamOptions, EventOptions, StreamWatcher } from './stream.js';

// Buffers and lifetimes
export { DeviceBuffer, PitchedDeviceBuffer } from './buffer/device-buffer.js';
export { ForeignDeviceBuffer } from './buffer/foreign-device-buffer.js';
export type { ForeignPointerOptions, ForeignMemoryKind } from './buffer/foreign-device-buffer.js';
export type { DeviceBufferOptions, PitchedOptions, Copy2DOptions, Copy2DFromOptions } from './buffer/device-buffer.js';
export { HostBuffer } from './buffer/host-buffer.js';
export type { HostBufferOptions, HostRegisterOptions, TypedArrayConstructor, ViewOptions } from './buffer/host-buffer.js';
export { ManagedBuffer } from './buffer/managed-buffer.js';
export type { ManagedBufferOptions, ManagedAdvice } from './buffer/managed-buffer.js';
export { leakStatistics, resetLeakStatistics, onLeak, captureAllocationStacks } from './buffer/lifetime.js';
export { Allocation } from './buffer/lifetime.js';
export { DeviceMemory } from './buffer/device-memory.js';
export type { CopyEndpoint, CopyOptions, CopyInOptions, CopyOutOptions, HostData, MemsetOptions } from './buffer/device-memory.js';

// Moving ordinary JavaScript memory: staged through pinned chunks, or pinned in place when reused
export { configureTransfers, transferSettings, transferStatistics, releaseTransferCaches } from './buffer/transfer/transfers.js';
export type { TransferSettings, TransferOptions, TransferStatistics, TransferCount } from './buffer/transfer/transfers.js';
export type { RegistrationPolicy, RegistrationStatistics } from './buffer/transfer/registration-cache.js';
export type { LeakRecord, LeakStatistics, LeakListener, FreeOptions, Release } from './buffer/lifetime.js';

// Typed arrays: dtypes (CUDA's scalar and vector types), DeviceArray, HostArray
export { dtypes, dtypeOf, isDTypeName, hostArrayType, vectorTable } from './array/dtype.js';
export type {
  DType, DTypeName, ScalarName, VectorName, DTypeKind, ComponentOf, ComponentsOf, HostTypedArray, AnyHostTypedArray,
  TypedArrayClass, ScalarHostArrays,
} from './array/dtype.js';
export {
  float16Bits, fromFloat16Bits, bfloat16Bits, fromBfloat16Bits, encodeFloat16, decodeFloat16, encodeBfloat16, decodeBfloat16,
} from './array/half.js';
export type { WritableNumbers } from './array/half.js';
export type { Shape } from './array/shape.js';
export type {
  HostInput, NestedArray, NestedElement, ScalarValue, ElementValue, Float16ArrayLike, Float16Input, ComponentTuple, ComponentInput, ComponentOutput,
} from './array/host-data.js';
export { StridedArray } from './array/layout.js';
export type { Layout, SliceSpec, SliceRange } from './array/layout.js';
export { DeviceArray } from './array/device-array.js';
export type {
  DeviceArrayOptions, DeviceArrayFromOptions, DeviceArrayViewOptions, PitchedArrayOptions, AsyncCopyOptions,
  DeviceArrayMemory, InferableTypedArray, InferredDType, DeviceArrayPointerOptions,
} from './array/device-array.js';
export { HostArray } from './array/host-array.js';
export type { HostArrayFromOptions, HostArrayViewOptions } from './array/host-array.js';

// Interop: CUDA Array Interface, DLPack, placement, IPC between processes
export { toCudaArrayInterface, fromCudaArrayInterface, cudaArrayInterfaceInfo } from './interop/cuda-array-interface.js';
export type {
  CudaArrayInterface, ToCudaArrayInterfaceOptions, FromCudaArrayInterfaceOptions, CudaArrayInterfaceInfo,
} from './interop/cuda-array-interface.js';
export { toDLPack, fromDLPack, deleteDLPack, dlpackInfo, dlpackExportsHeld } from './interop/dlpack.js';
export type { ToDLPackOptions, FromDLPackOptions, DLPackImportInfo } from './interop/dlpack.js';
export { DLDeviceType, DLDataTypeCode, DLPACK_FLAG_READ_ONLY, DLPACK_FLAG_IS_COPIED } from './cuda/dlpack-abi.js';
export { place, defaultPlacementMargin } from './interop/place.js';
export { exportIpc, importIpc } from './interop/ipc.js';
export type { ImportIpcOptions } from './interop/ipc.js';
export { IpcHandle } from './interop/ipc-handle.js';
export { IpcBuffer } from './interop/ipc-buffer.js';
export { exportPool, exportPoolPointer, importPool, ImportedPool } from './interop/pool-ipc.js';
export type { ImportPoolOptions, ImportPointerOptions } from './interop/pool-ipc.js';
export { sendFd, receiveFd, closeFd, SystemCallError } from './interop/fd-passing.js';
export type { ReceivedFd, ReceiveFdOptions } from './interop/fd-passing.js';
export type { PlaceOptions, Placement } from './interop/place.js';

// Memory resources: the interface, upstream resources, sub-allocators, adaptors
export { MemoryResource, defaultStream } from './resource/resource.js';
export type { ReservingResource, StreamRef, MemoryKind, MemoryFigures } from './resource/resource.js';
export { ResourceAdaptor } from './resource/adaptors/adaptor.js';
export { StreamOrder } from './resource/stream-order.js';
export type { Lane, OrderEvents } from './resource/stream-order.js';
export { getCurrentResource, setCurrentResource, emptyCache } from './resource/current.js';
export { memoryStats, resetPeakStats, memorySummary } from './observe/memory-stats.js';
export type { MemoryStats, Gauge } from './observe/memory-stats.js';
export { recordMemoryHistory, memoryHistory, MemoryHistory } from './observe/history.js';
export type { HistoryOptions, HistoryLiveBlock, LiveSite, ResourceRecord } from './observe/history.js';
export { memorySnapshot } from './observe/snapshot.js';
export type { SnapshotOptions } from './observe/snapshot.js';
export { SNAPSHOT_VERSION, validateSnapshot, SnapshotFormatError } from './observe/snapshot-format.js';
export type {
  MemorySnapshot, HistoryEventKind, HistoryEvent, SnapshotStack, SnapshotFigures, BlockState, SnapshotBlock, SegmentKind,
  SnapshotPages, SnapshotSegment, ResourceStatus, SnapshotBaseline, SnapshotResource, SnapshotLiveBlock, SnapshotHistory,
  SnapshotTriggerKind, SnapshotError, SnapshotTrigger,
} from './observe/snapshot-format.js';
export { onOutOfMemory, OOM_SNAPSHOT_VARIABLE } from './observe/out-of-memory-observer.js';
export type { OutOfMemoryEvent } from './observe/out-of-memory-observer.js';
export {
  ALLOCATOR_NAMES, DEFAULT_RESOURCE_VARIABLES, createDefaultResource, readDefaultResourceSettings,
} from './resource/default-resource.js';
export type {
  AllocatorName, DefaultResourceSettings, EnvironmentValues, EnvironmentVariableDescription, MemoryCap,
} from './resource/default-resource.js';
export { DriverResource } from './resource/upstream/driver-resource.js';
export { CudaResource } from './resource/upstream/cuda-resource.js';
export { AsyncResource } from './resource/upstream/async-resource.js';
export type { PoolAccess } from './resource/pool-access.js';
export type { AsyncResourceOptions, AsyncPoolOptions } from './resource/upstream/async-resource.js';
export { ManagedResource } from './resource/upstream/managed-resource.js';
export type { ManagedResourceOptions, ManagedAttach } from './resource/upstream/managed-resource.js';
export { PinnedHostResource } from './resource/upstream/pinned-host-resource.js';
export type { PinnedHostOptions } from './resource/upstream/pinned-host-resource.js';
export { PoolResource } from './resource/suballoc/pool.js';
export type { PoolOptions, PoolStatistics, GrowthCalls } from './resource/suballoc/pool.js';
export { ArenaResource } from './resource/suballoc/arena.js';
export type { ArenaOptions, PitchedBlock } from './resource/suballoc/arena.js';
export { BinningResource } from './resource/suballoc/binning.js';
export type { BinningOptions } from './resource/suballoc/binning.js';
export { FixedSizeResource } from './resource/suballoc/fixed-size.js';
export type { FixedSizeOptions } from './resource/suballoc/fixed-size.js';
export { PinnedHostPool } from './resource/suballoc/pinned-host-pool.js';
export type { PinnedHostPoolOptions, PinnedChunk } from './resource/suballoc/pinned-host-pool.js';
export { StatisticsAdaptor } from './resource/adaptors/statistics.js';
export type { AllocationStatistics } from './resource/adaptors/statistics.js';
export { LimitingAdaptor } from './resource/adaptors/limiting.js';
export { TrackingAdaptor } from './resource/adaptors/tracking.js';
export type { TrackedAllocation, TrackingOptions } from './resource/adaptors/tracking.js';
export { LoggingAdaptor, ALLOCATION_LOG_HEADER } from './resource/adaptors/logging.js';
export type { LogSink, LoggingOptions } from './resource/adaptors/logging.js';
export { RetryOnOutOfMemory } from './resource/adaptors/retry-on-oom.js';
export type { RetryOptions } from './resource/adaptors/retry-on-oom.js';

// Kernels: CUDA C++ compiled at run time (NVRTC, a disk cache) or loaded; checked launches; built-in array operations
export { Module, CompileError, NvrtcUnavailableError, compileStatistics, nvrtcAvailable } from './kernels/module.js';
export type { CompileOptions, LoadOptions, CompileStatistics } from './kernels/module.js';
export { Kernel } from './kernels/kernel.js';
export type { LaunchConfig, Dim3 } from './kernels/launch-config.js';
export type { Signature, ArgsOf, ArgOf, PointerArg } from './kernels/signature.js';
export type { SuggestedBlockSize } from './kernels/occupancy.js';
export { threadCount } from './kernels/emulated-kernel.js';
export { kernelCacheDirectory } from './kernels/compile-cache.js';
export { NvrtcError } from './cuda/nvrtc.js';
export { arange, ascontiguous, astype, elementwise, map, zipWith, fill, dot, max, min, sum } from './kernels/ops/index.js';
export type { ElementwiseValues, MapOptions, OpOptions, DotOptions, ReduceOptions } from './kernels/ops/index.js';

// Allocation logs and their replay
export { parseAllocationLog, readAllocationLog, TraceParseError } from './replay/parse.js';
export { InputFileError } from './util/input-file.js';
export type { AllocationTrace, TraceEvent, TraceAction, TraceSummary } from './replay/parse.js';
export { replay, ReplayError } from './replay/engine.js';
export type {
  ReplayResult, ReplayOptions, ReplayPass, ReservedSource, GrowthFigures, ReplayTimeline, PeakBlock,
} from './replay/engine.js';

// Reports: one self-contained HTML file (uPlot inlined) from a replay, a bench run or a memory snapshot
export { renderReport } from './report/html.js';
export { replayReport } from './report/replay-report.js';
export type { ReplayReportInput, ReplayReportStack } from './report/replay-report.js';
export { benchReport } from './report/bench-report.js';
export type { BenchReportInput, BenchFigure, BenchSkipped } from './report/bench-report.js';
export { snapshotReport } from './report/snapshot-report.js';
export type {
  Report, ReportSection, PlotSection, PlotSeries, PlotAxis, ValueUnit, MemoryMapSection, MapSegment, MapBlock, MapSite,
  TableSection,
} from './report/report.js';
