/**
 * Sharing device memory with other processes: `exportIpc` gives a handle to a buffer's memory,
 * any channel carries it (its string or binary form, JSON), and `importIpc` in the other process
 * maps the same memory, with no copy. Every buffer of the default resource can be exported,
 * whichever allocator `VRAM_ALLOCATOR` chose; `exportIpc` picks the way from where the memory
 * came from, and the handle says which (`IpcHandle.kind`):
 *
 * - `legacy` (a `CudaResource`, the `cuda` allocator): CUDA's legacy IPC, cuIpcGetMemHandle's 64
 *   bytes, opened with cuIpcOpenMemHandle. PyTorch and CuPy speak it too
 *   (`cupy.cuda.runtime.ipcGetMemHandle`; PyTorch's tuple, below).
 * - `pool` (an `AsyncResource` whose pool has POSIX file-descriptor handles: the `async`
 *   allocator's pool is created so): the pool's descriptor and cuMemPoolExportPointer's 64 bytes;
 *   the importer imports the pool and the allocation in it.
 * - `physical` (a `PoolResource` over virtual memory: the `pool` and `adaptive` allocators): the
 *   physical allocations under the block (cuMemExportToShareableHandle, one descriptor each; the
 *   pool's cuMemCreate asks for exportable memory); the importer maps them back to back in a range
 *   of its own and finds the block at the same offset.
 *
 * - `fabric-pool` and `fabric-physical` (an `AsyncResource` or a `PoolResource` made with
 *   `handleTypes: 'fabric'`): the same two with fabric handles (CU_MEM_HANDLE_TYPE_FABRIC), the
 *   driver's 64 bytes per pool or physical allocation, carried in the handle itself; any process
 *   of the NVLink domain imports them, on this host or another (the IMEX daemon connects them).
 *
 * A descriptor means nothing in another process, so the exporter keeps its descriptors open (until
 * the buffer is freed) and the handle names them and the exporting process; the importer copies
 * them with pidfd_getfd (Linux 5.6; same user; under Yama's ptrace_scope 1 the exporter opts in
 * with prctl(PR_SET_PTRACER_ANY) at its first such export). So one handle, sent once over any
 * channel, is all an importer needs, as with legacy IPC.
 *
 * Lifetimes: the exporter keeps its buffer until the importers have opened it (tell them; the
 * handle carries no reference count across processes), and may free it after. An importer's
 * mapping stays valid until it frees it, also when the exporter has exited or freed its buffer in
 * between (`legacy` and `physical`: the mapping holds the memory; `pool`: as CUDA requires, free
 * the import before the exporter frees its allocation). Interprocess events
 * (`Event.create({ interprocess: true })`, `event.ipcHandle()`, `Event.openIpc`) order the two
 * processes' device work.
 *
 * PyTorch: `importIpc` takes the tuple `storage._share_cuda_()` returns (as JSON: see
 * `torch-ipc.ts` and `scripts/torch_ipc.py`), and `torchShareTuple` makes one for legacy handles
 * that `torch.multiprocessing.reductions.rebuild_cuda_tensor` rebuilds a tensor from.
 */
import { CudaResource } from '../resource/upstream/cuda-resource.js';
import { DeviceBuffer } from '../buffer/device-buffer.js';
import { ResourceAdaptor } from '../resource/adaptors/adaptor.js';
import type { MemoryResource } from '../resource/resource.js';
import { Device } from '../device.js';
import { NotSupportedError } from '../errors.js';
import { copyExportedDescriptor, IpcBuffer } from './ipc-buffer.js';
import { IpcHandle } from './ipc-handle.js';
import { readOptions } from '../util/options.js';
import { AsyncResource } from '../resource/upstream/async-resource.js';
import { PoolResource } from '../resource/suballoc/pool.js';
import { graphPoolOf } from '../resource/suballoc/graph-pool.js';
import { MemHandleType } from '../backend/backend.js';
import { fstatSync } from 'node:fs';
import { allowDescriptorCopies, closeFd } from '../cuda/libc.js';
import { afterRelease } from '../buffer/lifetime.js';
import { ImportedPool } from './pool-ipc.js';
import { isTorchShareTuple, parseTorchShare, releaseTorchReference, waitForTorchEvent, type TorchShareTuple } from './torch-ipc.js';

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
 * A handle to `buffer`'s memory that another process opens with `importIpc`, made the way the
 * memory allows (see the module comment): legacy IPC for whole cuMemAlloc allocations
 * (`CudaResource`), the pool's descriptor and cuMemPoolExportPointer for an `AsyncResource` whose
 * pool is exportable (the default `async` allocator's), and the physical allocations under the
 * block for a `PoolResource` over virtual memory (`pool`, `adaptive`). Adaptors in between are
 * looked through. Keep the buffer until the importers have opened the handle; descriptors the
 * export opened are closed when the buffer is freed.
 *
 * @param buffer The memory to share.
 * @returns The handle: `toString()` or `toBytes()` to send it.
 * @throws {TypeError} When `buffer` is not a DeviceBuffer.
 * @throws {NotSupportedError} When its memory cannot be exported (a resource not named above, an
 *   AsyncResource pool made without POSIX descriptors, a pool growing from an upstream, spillable
 *   memory, graph-private memory), saying why.
 * @throws {UseAfterFreeError} When it was freed.
 * @throws {CudaError} When the driver refuses; nothing stays open.
 * @example
 * ```ts
 * const buf = DeviceBuffer.allocate(1 << 20); // the default resource, any VRAM_ALLOCATOR
 * child.stdin.write(exportIpc(buf).toString() + '\n');
 * ```
 */
export function exportIpc(buffer: DeviceBuffer): IpcHandle {
  if (!(buffer instanceof DeviceBuffer)) {
    throw new TypeError(
      `exportIpc expects a DeviceBuffer, got ${buffer === null ? 'null' : typeof buffer === 'object' ? (buffer as object).constructor.name : typeof buffer}`,
    );
  }
  if (buffer.spillable && !buffer.freed) {
    // Before reading `ptr`, which would bring it back and count it as written.
    throw new NotSupportedError(
      `exportIpc: ${String(buffer)} is spillable and cannot be shared with another process: a spill would ` +
        'take its memory (and, where it moves, its address) from under the importer; allocate it without { spillable: true }',
    );
  }
  const ptr = buffer.ptr; // UseAfterFreeError first
  if (graphPoolOf(ptr) !== undefined) {
    throw new NotSupportedError(
      `exportIpc: ${String(buffer)} is graph-private memory (allocated during a capture, from the graph's ` +
        'private pool), which cannot be shared with another process: copy it into a buffer of the default resource',
    );
  }
  const source = driverSource(buffer.resource);
  const device = buffer.device;
  const backend = device.backend;
  if (source instanceof CudaResource) {
    device.makeCurrent();
    return new IpcHandle(backend.ipcGetMemHandle(ptr), buffer.byteLength, 0);
  }
  if (source instanceof AsyncResource && source.handleTypes === 'fabric') {
    // Fabric handles are the driver's own 64 bytes each: nothing is kept open, the handle is all.
    device.makeCurrent();
    const pool = backend.memPoolExportFabricHandle(source.pool);
    return new IpcHandle(backend.memPoolExportPointer(ptr), buffer.byteLength, 0, undefined, { kind: 'fabric-pool', handles: [pool], extentBytes: [] });
  }
  if (source instanceof PoolResource && source.handleTypes === 'fabric') {
    const { extents, offset } = source.physicalExtents(ptr, buffer.byteLength);
    device.makeCurrent();
    const handles = extents.map((extent) => backend.memExportFabricHandle(extent.handle));
    return new IpcHandle(new Uint8Array(64), buffer.byteLength, offset, undefined, {
      kind: 'fabric-physical',
      handles,
      extentBytes: extents.map((e) => e.bytes),
    });
  }
  if (source instanceof AsyncResource) {
    if (!source.exportable) {
      throw new NotSupportedError(
        `exportIpc: ${source.describe()} has a pool made without POSIX file-descriptor handles, which cannot be shared: ` +
          "create it with { pool: { handleTypes: 'posix-fd' } } (the default allocator's is)",
      );
    }
    device.makeCurrent();
    allowDescriptorCopies();
    const fd = backend.memPoolExportToShareableHandle(source.pool, MemHandleType.POSIX_FILE_DESCRIPTOR);
    let data: Uint8Array;
    try {
      data = backend.memPoolExportPointer(ptr);
      afterRelease(buffer, () => closeFd(fd));
    } catch (error) {
      closeFd(fd);
      throw error;
    }
    return new IpcHandle(data, buffer.byteLength, 0, { kind: 'pool', pid: process.pid, fds: [fd], extentBytes: [], inodes: [inodeOf(fd)] });
  }
  if (source instanceof PoolResource) {
    const { extents, offset } = source.physicalExtents(ptr, buffer.byteLength);
    device.makeCurrent();
    allowDescriptorCopies();
    const fds: number[] = [];
    try {
      for (const extent of extents) fds.push(backend.memExportToShareableHandle(extent.handle, MemHandleType.POSIX_FILE_DESCRIPTOR));
      afterRelease(buffer, () => {
        for (const fd of fds) closeFd(fd);
      });
    } catch (error) {
      for (const fd of fds) closeFd(fd);
      throw error;
    }
    return new IpcHandle(new Uint8Array(64), buffer.byteLength, offset, {
      kind: 'physical',
      pid: process.pid,
      fds,
      extentBytes: extents.map((e) => e.bytes),
      inodes: fds.map(inodeOf),
    });
  }
  throw new NotSupportedError(
    `exportIpc: ${buffer.resource.describe()} is not memory vram can export: ` +
      'a CudaResource (legacy IPC), an AsyncResource with an exportable pool, or a PoolResource over virtual memory ' +
      '(the default resource is one of these, whichever VRAM_ALLOCATOR chose); a block of a binning, fixed-size or arena resource is a piece ' +
      'of memory the resource hands to others too. Allocate the shared buffer from one of those.',
  );
}

/**
 * Maps memory another process exported into this one, with no copy: an `exportIpc` handle of any
 * kind (legacy cuIpcOpenMemHandle; a pool's allocation, importing the pool; a pool block's
 * physical allocations, mapped in a range of this process), any CUDA program's bare 64-byte
 * cuIpcGetMemHandle, or the tuple PyTorch's `storage._share_cuda_()` returns (see
 * `TorchShareTuple`: its 'c' handle, at the storage's offset and size; its event waited for on
 * the device; its ref counter given back when the buffer is freed). The result is device memory
 * like any other: copy to and from it, fill it, wrap it with `DeviceArray.fromBuffer`. `free()`
 * (or `using`, or the garbage-collection backstop) undoes the import exactly once and never frees
 * the exporter's memory.
 *
 * @param handle An IpcHandle, its string or binary form, the driver's bare 64 bytes (Uint8Array or hex), or a PyTorch share tuple.
 * @param options `device` (for a PyTorch tuple, default its device); for a bare driver handle `byteLength` and `offset`.
 * @returns The mapped memory.
 * @throws {TypeError | RangeError} For a handle or option of the wrong form, or an extent past the allocation.
 * @throws {NotSupportedError} For a PyTorch 'e' handle (expandable segments), saying how to share it.
 * @throws {SystemCallError} When the exporter's descriptors cannot be copied (it exited or freed the buffer).
 * @throws {VramStateError} When a descriptor number the handle names was reused for another file (a stale handle).
 * @throws {CudaError} From the driver: CUDA_ERROR_INVALID_VALUE for a malformed or stale legacy
 *   handle (its exporter exited or freed the memory), CUDA_ERROR_INVALID_CONTEXT for a legacy
 *   handle this process exported itself. Nothing stays open after an error.
 * @example
 * ```ts
 * using shared = importIpc(line.trim());
 * const floats = DeviceArray.fromBuffer(shared, { dtype: 'float32' });
 * ```
 */
export function importIpc(handle: IpcHandle | string | Uint8Array | TorchShareTuple, options: ImportIpcOptions = {}): IpcBuffer {
  options = readOptions('importIpc', options, { device: true, byteLength: true, offset: true });
  if (isTorchShareTuple(handle)) return importTorch(handle, options);
  const extent: { byteLength?: number; offset?: number } = {};
  if (options.byteLength !== undefined) extent.byteLength = options.byteLength;
  if (options.offset !== undefined) extent.offset = options.offset;
  const parsed = IpcHandle.from(handle, extent);
  const device = Device.resolve(options.device);
  switch (parsed.kind) {
    case 'legacy':
      return IpcBuffer.open(parsed, device);
    case 'physical':
    case 'fabric-physical':
      return IpcBuffer.fromPhysical(parsed, device);
    case 'pool':
      return importPoolAllocation(parsed, device);
    case 'fabric-pool':
      return importFabricPoolAllocation(parsed, device);
  }
}

/** A `fabric-pool` handle: the pool imported from its fabric handle, the allocation from it; freeing frees the import, then the pool. */
function importFabricPoolAllocation(handle: IpcHandle, device: Device): IpcBuffer {
  const pool = ImportedPool.fromFabricHandle(handle.fabric!.handles[0]!, { device });
  return importFromPool(pool, handle);
}

/** A `pool` handle: the pool imported from the exporter's descriptor, the allocation from it; freeing frees the import, then the pool. */
function importPoolAllocation(handle: IpcHandle, device: Device): IpcBuffer {
  const d = handle.descriptors!;
  const fd = copyExportedDescriptor(d, 0);
  let pool: ImportedPool;
  try {
    pool = ImportedPool.fromFd(fd, { device });
  } finally {
    closeFd(fd);
  }
  return importFromPool(pool, handle);
}

/** The allocation `handle` names, imported from `pool`, which is destroyed with the import (or at once, when the import fails). */
function importFromPool(pool: ImportedPool, handle: IpcHandle): IpcBuffer {
  try {
    // The handle's own extent, offset included: checked against the allocation the driver imported.
    const buffer = pool.importPointer(new IpcHandle(handle.driverHandle, handle.byteLength, handle.offset));
    // The import is freed in stream order, and a pool destroyed with frees pending goes once they ran.
    afterRelease(buffer, () => pool.destroy());
    return buffer;
  } catch (error) {
    pool.destroy();
    throw error;
  }
}

/** A PyTorch tuple: its legacy handle opened, its event waited for, its reference given back when freed. */
function importTorch(tuple: TorchShareTuple, options: ImportIpcOptions): IpcBuffer {
  if (options.byteLength !== undefined || options.offset !== undefined) {
    throw new TypeError('importIpc: a PyTorch share tuple carries its own size and offset (options.byteLength and options.offset are for bare driver handles)');
  }
  const share = parseTorchShare(tuple);
  const device = Device.resolve(options.device ?? share.device);
  if (share.event !== undefined) waitForTorchEvent(share.event, device);
  const buffer = IpcBuffer.open(share.handle, device);
  const refCounter = share.refCounter;
  if (refCounter !== undefined) afterRelease(buffer, () => releaseTorchReference(refCounter));
  return buffer;
}

/** The low 32 bits of a descriptor's inode, as the handle carries it (a 0 there goes unchecked). */
function inodeOf(fd: number): number {
  return fstatSync(fd).ino % 2 ** 32;
}

/** The resource at the bottom of a chain of adaptors: the one whose memory a buffer really is. */
function driverSource(resource: MemoryResource): MemoryResource {
  let r = resource;
  while (r instanceof ResourceAdaptor) r = r.upstream;
  return r;
}
