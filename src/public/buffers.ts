/// <reference lib="esnext.disposable" preserve="true" />
// Kept in the .d.ts (preserve), as in index.ts: a consumer that imports only this subpath needs `Disposable` too.
/**
 * `vram/buffers`: what lies under the buffers in the root. `DeviceMemory` and `Allocation` (the
 * base classes, for code that accepts any buffer), the option types of the less common buffer
 * methods (2D copies, host registration, views, managed advice), and the settings of the
 * transfers that move ordinary JavaScript memory (staged through pinned chunks, or pinned in place);
 * spilling's lease, figures and resource.
 *
 * @module vram/buffers
 */
export { DeviceMemory } from '../buffer/device-memory.js';
export { Allocation } from '../buffer/lifetime.js';
export type { BufferJSON } from '../buffer/lifetime.js';
export type { Release } from '../buffer/lifetime.js';
export type { Copy2DOptions, Copy2DFromOptions, AllocateAsyncOptions } from '../buffer/device-buffer.js';
export type { AbortSignalLike } from '../resource/waiting.js';
export type { HostRegisterOptions, TypedArrayConstructor, ViewOptions } from '../buffer/host-buffer.js';
export type { ManagedAdvice } from '../buffer/managed-buffer.js';
export { configureTransfers, transferSettings, transferStatistics, releaseTransferCaches } from '../buffer/transfer/transfers.js';
export type { TransferSettings, TransferOptions, TransferStatistics, TransferCount } from '../buffer/transfer/transfers.js';
export type { RegistrationPolicy, RegistrationStatistics } from '../buffer/transfer/registration-cache.js';
export { SpillLease } from '../buffer/spill/lease.js';
export type { LeaseOptions } from '../buffer/spill/lease.js';
export { reserveSpillHost, spillableResource, spillFigures } from '../buffer/spill/spill-manager.js';
export type { ReserveSpillHostOptions, SpillFigures } from '../buffer/spill/spill-manager.js';
