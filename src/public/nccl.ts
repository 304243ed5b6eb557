/// <reference lib="esnext.disposable" preserve="true" />
// Kept in the .d.ts (preserve), as in index.ts: a consumer that imports only this subpath needs `Disposable` too.
/**
 * `vram/nccl`: collectives between GPUs and hosts through NCCL. A `UniqueId` made on one rank and
 * passed to the others by any channel, a `Communicator` per rank with all-reduce, all-gather,
 * reduce-scatter, broadcast, send and receive on `DeviceArray`s and device buffers, `group` for
 * grouped calls, and user-buffer registration. On the emulated backend the same API runs between
 * processes of one machine.
 *
 * @module vram/nccl
 */
export { Communicator, Registration, group, ncclVersion } from '../nccl/communicator.js';
export type { CollectiveMemory, CommunicatorOptions, CollectiveOptions, CollectiveReduceOptions, BroadcastOptions } from '../nccl/communicator.js';
export type { CollectiveReduceOp } from '../backend/collectives.js';
export { UniqueId } from '../nccl/unique-id.js';
export { NcclError } from '../errors.js';
export { NcclUnavailableError } from '../cuda/nccl-library.js';
