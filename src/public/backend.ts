/// <reference lib="esnext.disposable" preserve="true" />
// Kept in the .d.ts (preserve), as in index.ts: a consumer that imports only this subpath needs `Disposable` too.
/**
 * `vram/backend`: the `Backend` interface, the primitives every class above is written in, and its
 * selection. Public for three kinds of user: a test suite or CI job that runs without a GPU
 * (`setBackend(new EmulatedBackend({ capacityBytes }))`), code that needs a driver primitive the classes
 * do not cover (`getBackend().memGetInfo()`, pointer attributes, pool attributes), and a library
 * that hands vram's handles to its own FFI. An array or allocator user needs none of it.
 *
 * @module vram/backend
 */
export { getBackend, setBackend, backendFallbackReason } from '../backend/select.js';
export { EmulatedBackend } from '../backend/emulated/emulated-backend.js';
export type { EmulatedBackendOptions } from '../backend/emulated/emulated-backend.js';
export type { Backend, Ptr, Handle, DeviceInfo, MemInfo, PointerAttributes, MemPoolProps, Memcpy2D, HostMemory, MemLocation } from '../backend/backend.js';
export { MemPoolAttribute } from '../backend/backend.js';
export type { CollectiveDataType, CollectiveTransport, HostReduce, TransportComm, TransportOptions } from '../backend/collectives.js';
export { DEVICE_ATTRIBUTES } from '../cuda/device-attributes.js';
export type { DeviceAttributeName } from '../cuda/device-attributes.js';
export type { CacheConfig, PushedContext } from '../device.js';
