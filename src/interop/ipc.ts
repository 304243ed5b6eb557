/**
 * Sharing device memory with other processes through CUDA's legacy IPC: `exportIpc` gives a
 * handle to a buffer's memory, any channel carries it (its string or binary form), and
 * `importIpc` in the other process maps the same memory, with no copy. The other side may be
 * another Node process using vram or any CUDA program: PyTorch and CuPy speak the same 64-byte
 * handle (`cupy.cuda.runtime.ipcGetMemHandle` / `ipcOpenMemHandle`).
 *
 * Only memory that is a whole driver allocation from cuMemAlloc can be exported this way: that
 * is what cuIpcGetMemHandle maps. A block of a pool (PoolResource, ArenaResource, a binning or
 * fixed-size resource, an AsyncResource) is a piece of a larger allocation that the pool may hand
 * to someone else after free: exporting it would give the other process the whole allocation, and
 * the driver refuses cuMemAllocAsync memory outright (CUDA_ERROR_INVALID_VALUE). Allocate what is
 * to be shared from a `CudaResource`.
 *
 * Lifetimes: the exporter keeps its buffer until the importers are done with it (tell them; the
 * handle carries no reference count across processes). An importer's mapping stays valid until it
 * closes it, also when the exporter has exited in between. Interprocess events
 * (`Event.create({ interprocess: true })`, `event.ipcHandle()`, `Event.openIpc`) order the two
 * processes' device work.
 */
import { CudaResource } from '../resource/upstream/cuda-resource.js';
import { DeviceBuffer } from '../buffer/device-buffer.js';
import { ResourceAdaptor } from '../resource/adaptors/adaptor.js';
import type { MemoryResource } from '../resource/resource.js';
import { Device } from '../device.js';
import { NotSupportedError } from '../errors.js';
import { IpcBuffer } from './ipc-buffer.js';
import { IpcHandle } from './ipc-handle.js';
import { readOptions } from '../util/options.js';

/** Options of `importIpc`. */
export interface ImportIpcOptions {
  /** The device whose context opens the memory (device 0 by default); another device reaches it through peer access. */
  readonly device?: Device | number;
  /** For a bare 64-byte driver handle: bytes to use (default the rest of the allocation from `offset`). */
  readonly byteLength?: number;
  /** For a bare 64-byte driver handle: where the shared range starts in the allocation (default 0). */
  readonly offset?: number;
}

/**
 * A handle to `buffer`'s memory that another process opens with `importIpc`
 * (cuIpcGetMemHandle). The buffer must be memory from a `CudaResource` (directly or through
 * adaptors such as a LimitingAdaptor), or a pitched buffer; keep it until the importers are done.
 *
 * @param buffer The memory to share.
 * @returns The handle: `toString()` or `toBytes()` to send it.
 * @throws {TypeError} When `buffer` is not a DeviceBuffer.
 * @throws {NotSupportedError} When its memory is not a whole cuMemAlloc allocation (a pool's block), saying why.
 * @throws {UseAfterFreeError} When it was freed.
 * @throws {CudaError} When the driver refuses.
 * @example
 * ```ts
 * const buf = DeviceBuffer.allocate(1 << 20, { resource: new CudaResource(0) });
 * child.stdin.write(exportIpc(buf).toString() + '\n');
 * ```
 */
export function exportIpc(buffer: DeviceBuffer): IpcHandle {
  if (!(buffer instanceof DeviceBuffer)) {
    throw new TypeError(`exportIpc expects a DeviceBuffer, got ${buffer === null ? 'null' : typeof buffer === 'object' ? (buffer as object).constructor.name : typeof buffer}`);
  }
  const ptr = buffer.ptr; // UseAfterFreeError first
  const source = driverSource(buffer.resource);
  if (!(source instanceof CudaResource)) {
    throw new NotSupportedError(`exportIpc: ${buffer.resource.describe()} hands out blocks of larger driver allocations (or memory that is not from cuMemAlloc), ` +
      'and legacy IPC exports whole cuMemAlloc allocations only: the other process would map the whole allocation, blocks the pool gives to others included, ' +
      'and the driver refuses stream-ordered pool memory. Allocate the shared buffer from a CudaResource.');
  }
  const device = buffer.device;
  device.makeCurrent();
  const handle = device.backend.ipcGetMemHandle(ptr);
  return new IpcHandle(handle, buffer.byteLength, 0);
}

/**
 * Maps memory another process exported (with `exportIpc`, or any CUDA program's
 * cuIpcGetMemHandle) into this one, with no copy (cuIpcOpenMemHandle). The result is device
 * memory like any other: copy to and from it, fill it, wrap it with `DeviceArray.fromBuffer`.
 * `free()` (or `using`, or the garbage-collection backstop) closes the mapping exactly once
 * (cuIpcCloseMemHandle) and never frees the memory.
 *
 * @param handle An IpcHandle, its string or binary form, or the driver's bare 64 bytes (Uint8Array or hex).
 * @param options `device`; for a bare driver handle `byteLength` and `offset`.
 * @returns The mapped memory.
 * @throws {TypeError | RangeError} For a handle or option of the wrong form, or an extent past the allocation.
 * @throws {CudaError} From the driver: CUDA_ERROR_INVALID_VALUE for a malformed or stale handle
 *   (its exporter exited or freed the memory), CUDA_ERROR_INVALID_CONTEXT for a handle this
 *   process exported itself. Nothing stays open after an error.
 * @example
 * ```ts
 * using shared = importIpc(line.trim());
 * const floats = DeviceArray.fromBuffer(shared, { dtype: 'float32' });
 * ```
 */
export function importIpc(handle: IpcHandle | string | Uint8Array, options: ImportIpcOptions = {}): IpcBuffer {
  options = readOptions('importIpc', options, { device: true, byteLength: true, offset: true });
  const extent: { byteLength?: number; offset?: number } = {};
  if (options.byteLength !== undefined) extent.byteLength = options.byteLength;
  if (options.offset !== undefined) extent.offset = options.offset;
  const parsed = IpcHandle.from(handle, extent);
  return IpcBuffer.open(parsed, Device.resolve(options.device));
}

/** The resource at the bottom of a chain of adaptors: the one whose memory a buffer really is. */
function driverSource(resource: MemoryResource): MemoryResource {
  let r = resource;
  while (r instanceof ResourceAdaptor) r = r.upstream;
  return r;
}
