/// <reference lib="esnext.disposable" preserve="true" />
// Kept in the .d.ts (preserve), as in index.ts: a consumer that imports only this subpath needs `Disposable` too.
/**
 * `vram/resources`: every memory resource and adaptor, their options and figures, stream order and
 * the named default-resource catalogue. A user who keeps the default allocator needs none of it;
 * one who builds a stack (`new StatisticsAdaptor(new PoolResource())`) or writes a resource does.
 * `MemoryResource` itself is in the root (`getCurrentResource()` returns one).
 *
 * @module vram/resources
 */
export type { ResourceJSON } from '../resource/resource.js';
export type { MemoryKind, MemoryFigures, GrowthFigures, DriverCalls } from '../resource/figures.js';
export { totalDriverCalls } from '../resource/figures.js';
export type { ByteSize } from '../validate.js';
export { ResourceAdaptor } from '../resource/adaptors/adaptor.js';
export { useResource } from '../resource/current.js';
export { memoryPoolUsed } from '../resource/memory-pool-used.js';
export { withMemoryBudget } from '../buffer/budget.js';
export { StreamOrder } from '../resource/stream-order.js';
export { JoinClock } from '../resource/join-clock.js';
export type { Lane, OrderEvents } from '../resource/stream-order.js';
export { ALLOCATOR_NAMES, DEFAULT_RESOURCE_VARIABLES, createDefaultResource, readDefaultResourceSettings } from '../resource/default-resource.js';
export type { AllocatorName, DefaultResourceSettings, EnvironmentValues, EnvironmentVariableDescription, MemoryCap } from '../resource/default-resource.js';
export { DriverResource } from '../resource/upstream/driver-resource.js';
export { CudaResource } from '../resource/upstream/cuda-resource.js';
export { AsyncResource } from '../resource/upstream/async-resource.js';
export type { PoolAccess } from '../resource/pool-access.js';
export type { AsyncResourceOptions, AsyncPoolOptions, AsyncPoolLocation, AsyncHandleTypes } from '../resource/upstream/async-resource.js';
export { FabricUnavailableError } from '../errors.js';
export type { FabricRequirement } from '../errors.js';
export { ManagedResource } from '../resource/upstream/managed-resource.js';
export type { ManagedResourceOptions, ManagedAttach } from '../resource/upstream/managed-resource.js';
export { PinnedHostResource } from '../resource/upstream/pinned-host-resource.js';
export { SpillableResource } from '../resource/upstream/spillable-resource.js';
export type { PinnedHostOptions } from '../resource/upstream/pinned-host-resource.js';
export { PoolResource } from '../resource/suballoc/pool.js';
export type { PoolOptions, PoolHandleTypes } from '../resource/suballoc/pool.js';
export { ArenaResource } from '../resource/suballoc/arena.js';
export type { ArenaOptions, PitchedBlock } from '../resource/suballoc/arena.js';
export { BinningResource } from '../resource/suballoc/binning.js';
export type { BinningOptions } from '../resource/suballoc/binning.js';
export { FixedSizeResource } from '../resource/suballoc/fixed-size.js';
export type { FixedSizeOptions } from '../resource/suballoc/fixed-size.js';
export { PinnedHostPool } from '../resource/suballoc/pinned-host-pool.js';
export type { PinnedHostPoolOptions, PinnedChunk } from '../resource/suballoc/pinned-host-pool.js';
export { StatisticsAdaptor } from '../resource/adaptors/statistics.js';
export { LimitingAdaptor } from '../resource/adaptors/limiting.js';
export { TrackingAdaptor } from '../resource/adaptors/tracking.js';
export type { TrackedAllocation, TrackingOptions } from '../resource/adaptors/tracking.js';
export { LoggingAdaptor, ALLOCATION_LOG_HEADER } from '../resource/adaptors/logging.js';
export type { LogSink, LoggingOptions } from '../resource/adaptors/logging.js';
export { RetryOnOutOfMemory } from '../resource/adaptors/retry-on-oom.js';
export type { RetryOptions } from '../resource/adaptors/retry-on-oom.js';
