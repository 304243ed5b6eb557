/// <reference lib="esnext.disposable" preserve="true" />
// Kept in the .d.ts (preserve), as in index.ts: a consumer that imports only this subpath needs `Disposable` too.
/**
 * `vram/ipc`: memory shared with other processes. IPC handles of any default-allocator memory
 * (`exportIpc`, `importIpc`, `IpcHandle`, `IpcBuffer`), PyTorch's share tuples both ways, whole
 * pools shared over file descriptors (`exportPool`, `importPool`, `ImportedPool`), and passing those
 * descriptors between processes (`sendFd`, `receiveFd`). Memory shared with other libraries in the
 * same process is `vram/interop`.
 *
 * @module vram/ipc
 */
export { exportIpc, importIpc } from '../interop/ipc.js';
export type { ImportIpcOptions } from '../interop/ipc.js';
export { IpcHandle } from '../interop/ipc-handle.js';
export type { IpcHandleKind, IpcDescriptors } from '../interop/ipc-handle.js';
export { parseTorchShare, torchShareTuple, isTorchShareTuple, TORCH_HANDLE_BYTES } from '../interop/torch-ipc.js';
export type { TorchShareTuple, TorchShare, TorchBytes } from '../interop/torch-ipc.js';
export { IpcBuffer } from '../interop/ipc-buffer.js';
export { exportPool, exportPoolPointer, importPool, ImportedPool } from '../interop/pool-ipc.js';
export type { ImportPoolOptions, ImportPointerOptions } from '../interop/pool-ipc.js';
export { sendFd, receiveFd } from '../interop/fd-passing.js';
export { closeFd, SystemCallError } from '../cuda/libc.js';
export type { ReceivedFd, ReceiveFdOptions } from '../interop/fd-passing.js';
