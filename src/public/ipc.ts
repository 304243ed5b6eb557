/// <reference lib="esnext.disposable" preserve="true" />
// Kept in the .d.ts (preserve), as in index.ts: a consumer that imports only this subpath needs `Disposable` too.
/**
 * `vram/ipc`: memory shared with other processes. IPC handles of any default-allocator memory
 * (`exportIpc`, `importIpc`, `IpcHandle`, `IpcBuffer`), PyTorch's share tuples both ways, whole
 * pools shared over file descriptors (`exportPool`, `importPool`, `ImportedPool`), and passing those
 * descriptors between processes (`sendFd`, `receiveFd`); fabric handles across the hosts of an NVLink
 * domain (`exportPoolFabricHandle`, the `fabric-pool`/`fabric-physical` handle kinds). Memory shared with other libraries in the
 * same process is `vram/interop`.
 *
 * @module vram/ipc
 */
export { exportIpc, importIpc } from '../ipc/ipc.js';
export type { ImportIpcOptions } from '../ipc/ipc.js';
export { IpcHandle } from '../ipc/ipc-handle.js';
export type { IpcHandleKind, IpcDescriptors, IpcFabricHandles } from '../ipc/ipc-handle.js';
export { parseTorchShare, torchShareTuple, isTorchShareTuple, TORCH_HANDLE_BYTES } from '../ipc/torch-ipc.js';
export type { TorchShareTuple, TorchShare, TorchBytes } from '../ipc/torch-ipc.js';
export { IpcBuffer } from '../ipc/ipc-buffer.js';
export { exportPool, exportPoolFabricHandle, exportPoolPointer, importPool, ImportedPool } from '../ipc/pool-ipc.js';
export type { ImportPoolOptions, ImportPointerOptions } from '../ipc/pool-ipc.js';
export { sendFd, receiveFd } from '../ipc/fd-passing.js';
export { closeFd, SystemCallError } from '../cuda/libc.js';
export type { ReceivedFd, ReceiveFdOptions } from '../ipc/fd-passing.js';
