/// <reference lib="esnext.disposable" preserve="true" />
// Kept in the .d.ts (preserve), as in index.ts: a consumer that imports only this subpath needs `Disposable` too.
/**
 * `vram/interop`: memory shared with other libraries in the same process. The CUDA Array Interface
 * and DLPack, pointers vram did not allocate (`ForeignDeviceBuffer`, `ForeignMirror`), streams another
 * library created (`Stream.fromHandle`'s options, and `watchStreamDestroy` for libraries that cache
 * per-stream state), and `place()`. Memory shared with other processes is `vram/ipc`.
 *
 * @module vram/interop
 */
export { toCudaArrayInterface, fromCudaArrayInterface, cudaArrayInterfaceInfo } from '../interop/cuda-array-interface.js';
export type {
  CudaArrayInterface,
  ToCudaArrayInterfaceOptions,
  FromCudaArrayInterfaceOptions,
  CudaArrayInterfaceInfo,
} from '../interop/cuda-array-interface.js';
export { toDLPack, fromDLPack, deleteDLPack, dlpackInfo, dlpackExportsHeld } from '../interop/dlpack.js';
export type { ToDLPackOptions, FromDLPackOptions, DLPackImportInfo } from '../interop/dlpack.js';
export { DLDeviceType, DLDataTypeCode, DLPACK_FLAG_READ_ONLY, DLPACK_FLAG_IS_COPIED } from '../cuda/dlpack-abi.js';
export { ForeignDeviceBuffer } from '../buffer/foreign-device-buffer.js';
export { ForeignMirror } from '../buffer/foreign-mirror.js';
export type { ForeignFigures, MirrorHost, MirrorSide } from '../buffer/foreign-mirror.js';
export type { ForeignPointerOptions, ForeignMemoryKind } from '../buffer/foreign-device-buffer.js';
export { watchStreamDestroy } from '../stream.js';
export type { BorrowedStreamOptions, StreamWatcher } from '../stream.js';
export { place, defaultPlacementMargin } from '../interop/place.js';
export type { PlaceOptions, Placement } from '../interop/place.js';
