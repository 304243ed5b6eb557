/**
 * Sharing a stream-ordered pool with another process (CUDA's "IPC with stream-ordered
 * allocation"): the exporter creates an `AsyncResource` whose pool has POSIX file-descriptor
 * handles (`{ pool: { handleTypes: 'posix-fd' } }`), exports the pool once as a file descriptor
 * (`exportPool`) that travels over a Unix socket (`sendFd` / `receiveFd`: a descriptor is only
 * usable by the process the kernel gave it to), and then exports single allocations from it as 64
 * bytes each (`exportPoolPointer`) over any channel. The importer opens the pool (`importPool`)
 * and each allocation in it (`ImportedPool.importPointer`).
 *
 * Order of frees, as CUDA requires: the importer frees its imports (in stream order) before the
 * exporter frees the allocations; the imported pool is destroyed after its imports. Ordering the
 * two processes' device work is the application's: an interprocess event (`Event.openIpc`) or a
 * message once the work is synchronised.
 *
 * The emulated backend does all of this between processes of one machine too (an allocation's
 * pages move into shared memory when it is exported). `exportIpc` of a buffer of such a pool
 * makes one handle that carries the pool and the allocation, with no socket: see `ipc.ts`.
 */
import { FABRIC_HANDLE_BYTES, MemAccess, MemHandleType, type Handle } from '../backend/backend.js';
import { Device } from '../device.js';
import { UseAfterFreeError } from '../errors.js';
import { AsyncResource } from '../resource/upstream/async-resource.js';
import { DeviceBuffer } from '../buffer/device-buffer.js';
import { HostBuffer } from '../buffer/host-buffer.js';
import { defaultStream, type StreamRef } from '../stream.js';
import { streamHandleOf } from '../stream.js';
import { checkNonNegativeInteger } from '../validate.js';
import { IpcBuffer } from './ipc-buffer.js';
import { IpcHandle } from './ipc-handle.js';
import { readOptions } from '../util/options.js';
import { checkFabricSupport } from '../resource/fabric-support.js';

/**
 * The pool of `resource` as a new file descriptor (cuMemPoolExportToShareableHandle). Send it with
 * `sendFd`, then close it with `closeFd`.
 *
 * @param resource An AsyncResource created with `{ pool: { handleTypes: 'posix-fd' } }`.
 * @returns The descriptor (this process's; meaningless elsewhere until sent with SCM_RIGHTS).
 * @throws {TypeError} When `resource` is not an AsyncResource.
 * @throws {UseAfterFreeError} When it was destroyed.
 * @throws {CudaError} When the pool was created without POSIX file-descriptor handles (the driver refuses).
 * @example
 * ```ts
 * using mr = new AsyncResource({ pool: { handleTypes: 'posix-fd' } });
 * const fd = exportPool(mr);
 * sendFd(peerSocket, fd, 'pool');
 * closeFd(fd);
 * ```
 */
export function exportPool(resource: AsyncResource): number {
  if (!(resource instanceof AsyncResource)) throw new TypeError('exportPool expects an AsyncResource');
  const pool = resource.pool;
  const device = resource.deviceObject;
  device.makeCurrent();
  return device.backend.memPoolExportToShareableHandle(pool, MemHandleType.POSIX_FILE_DESCRIPTOR);
}

/**
 * The pool of `resource` as a fabric handle (cuMemPoolExportToShareableHandle with
 * CU_MEM_HANDLE_TYPE_FABRIC): 64 bytes that any channel carries to a process of the NVLink
 * domain, on this host or another, which imports it with `importPool`. Nothing to close.
 *
 * @param resource An AsyncResource created with `{ pool: { handleTypes: 'fabric' } }`.
 * @returns The 64 bytes.
 * @throws {TypeError} When `resource` is not an AsyncResource.
 * @throws {UseAfterFreeError} When it was destroyed.
 * @throws {CudaError} When the pool was created without fabric handles (the driver refuses).
 * @example
 * ```ts
 * using mr = new AsyncResource({ pool: { handleTypes: 'fabric' } });
 * socket.write(Buffer.from(exportPoolFabricHandle(mr)).toString('hex') + '\n');
 * ```
 */
export function exportPoolFabricHandle(resource: AsyncResource): Uint8Array {
  if (!(resource instanceof AsyncResource)) throw new TypeError('exportPoolFabricHandle expects an AsyncResource');
  const pool = resource.pool;
  const device = resource.deviceObject;
  device.makeCurrent();
  return device.backend.memPoolExportFabricHandle(pool);
}

/**
 * The handle of one allocation of an exported pool (cuMemPoolExportPointer): the driver's 64 bytes
 * and the buffer's size, in the IpcHandle forms (`toString()`, `toBytes()`).
 *
 * @param buffer A DeviceBuffer allocated from an AsyncResource whose pool is exportable, or a
 *   HostBuffer from one whose pool is in host NUMA memory.
 * @returns The handle; import it with `ImportedPool.importPointer`, not `importIpc`.
 * @throws {TypeError} When `buffer` is not a DeviceBuffer or HostBuffer of an AsyncResource.
 * @throws {UseAfterFreeError} When it was freed.
 * @throws {CudaError} When its pool is not exportable.
 * @example
 * ```ts
 * const buf = DeviceBuffer.allocate(4096, { resource: mr, stream });
 * socket.write(exportPoolPointer(buf).toString() + '\n');
 * ```
 */
export function exportPoolPointer(buffer: DeviceBuffer | HostBuffer): IpcHandle {
  if (!(buffer instanceof DeviceBuffer || buffer instanceof HostBuffer) || !(buffer.resource instanceof AsyncResource)) {
    throw new TypeError('exportPoolPointer expects a DeviceBuffer (or HostBuffer) allocated from an AsyncResource');
  }
  const ptr = buffer.ptr;
  const device = buffer.resource.deviceObject;
  device.makeCurrent();
  return new IpcHandle(device.backend.memPoolExportPointer(ptr), buffer.byteLength, 0);
}

/** Options of `importPool`. */
export interface ImportPoolOptions {
  /** The device whose context imports the pool and reads its memory (device 0 by default). */
  readonly device?: Device | number;
}

/** Options of `ImportedPool.importPointer`. */
export interface ImportPointerOptions {
  /** The stream the memory is used on and freed on (default the legacy default stream). */
  readonly stream?: StreamRef;
}

/**
 * Another process's stream-ordered pool, imported into this one. Import allocations from it with
 * `importPointer`; destroy it (or `using`) after freeing them.
 *
 * @example
 * ```ts
 * const { fd } = await receiveFd(path);
 * using pool = importPool(fd);
 * closeFd(fd);
 * using buf = pool.importPointer(line.trim());
 * ```
 */
export class ImportedPool {
  /** The importing device. */
  readonly device: Device;
  readonly #pool: Handle;
  #destroyed = false;

  private constructor(pool: Handle, device: Device) {
    this.#pool = pool;
    this.device = device;
  }

  /**
   * Imports the pool behind `fd` (cuMemPoolImportFromShareableHandle) and gives `device`
   * read-write access to its memory when it has none yet (cuMemPoolSetAccess). `fd` stays open:
   * close it with `closeFd`.
   *
   * @param fd A descriptor received with `receiveFd` (or Python's `recv_fds`).
   * @param options `device`.
   * @returns The pool.
   * @throws {RangeError} When `fd` is not a whole number >= 0.
   * @throws {CudaError} When the driver refuses the descriptor (closed, or not a pool's).
   * @example
   * ```ts
   * using pool = ImportedPool.fromFd(fd);
   * ```
   */
  static fromFd(fd: number, options: ImportPoolOptions = {}): ImportedPool {
    checkNonNegativeInteger(fd, 'importPool: fd');
    options = readOptions('importPool', options, { device: true });
    const device = Device.resolve(options.device);
    const backend = device.backend;
    device.makeCurrent();
    return ImportedPool.#withAccess(backend.memPoolImportFromShareableHandle(fd, MemHandleType.POSIX_FILE_DESCRIPTOR), device);
  }

  /**
   * Imports the pool behind a fabric handle (cuMemPoolImportFromShareableHandle with
   * CU_MEM_HANDLE_TYPE_FABRIC), exported by a process of this host or another of the NVLink
   * domain, and gives `device` read-write access to its memory when it has none yet.
   *
   * @param handle The 64 bytes `exportPoolFabricHandle` gave.
   * @param options `device`.
   * @returns The pool.
   * @throws {TypeError} When `handle` is not 64 bytes.
   * @throws {FabricUnavailableError} When this machine lacks what fabric handles need (checked first).
   * @throws {CudaError} When the driver refuses the handle (stale, or not a pool's).
   * @example
   * ```ts
   * using pool = ImportedPool.fromFabricHandle(new Uint8Array(Buffer.from(line, 'hex')));
   * ```
   */
  static fromFabricHandle(handle: Uint8Array, options: ImportPoolOptions = {}): ImportedPool {
    if (!(handle instanceof Uint8Array) || handle.length !== FABRIC_HANDLE_BYTES) {
      throw new TypeError(`importPool: a fabric handle is ${FABRIC_HANDLE_BYTES} bytes (a Uint8Array)`);
    }
    options = readOptions('importPool', options, { device: true });
    const device = Device.resolve(options.device);
    // The importer needs an IMEX channel of its own, as the exporter did.
    checkFabricSupport(device, 'pool', 'importPool');
    device.makeCurrent();
    return ImportedPool.#withAccess(device.backend.memPoolImportFabricHandle(handle), device);
  }

  /** `pool`, imported in `device`'s context, readable and writable from it (destroyed again when that fails). */
  static #withAccess(pool: Handle, device: Device): ImportedPool {
    const backend = device.backend;
    try {
      if (backend.memPoolGetAccess(pool, device.ordinal) !== MemAccess.READWRITE) {
        backend.memPoolSetAccess(pool, device.ordinal, MemAccess.READWRITE);
      }
    } catch (error) {
      backend.memPoolDestroy(pool);
      throw error;
    }
    return new ImportedPool(pool, device);
  }

  /**
   * The driver's handle of the imported pool.
   *
   * @returns The CUmemoryPool.
   * @throws {UseAfterFreeError} Once destroyed.
   * @example
   * ```ts
   * backend.memPoolGetAttribute(pool.handle, MemPoolAttribute.USED_MEM_CURRENT);
   * ```
   */
  get handle(): Handle {
    if (this.#destroyed) throw new UseAfterFreeError('the imported pool was destroyed');
    return this.#pool;
  }

  /**
   * Imports one allocation the exporter shared with `exportPoolPointer` (cuMemPoolImportPointer).
   * Free it (in stream order, on `stream`) before the exporter frees its allocation.
   *
   * @param handle The handle, in any of the IpcHandle forms; a bare 64-byte handle needs `byteLength` in it.
   * @param options `stream`.
   * @returns The memory.
   * @throws {TypeError | RangeError} For a handle of the wrong form or without a size, or whose
   *   offset and size do not fit in the allocation the exporter shared (the import is freed again).
   * @throws {UseAfterFreeError} When the pool was destroyed.
   * @throws {CudaError} When the driver refuses the data.
   * @example
   * ```ts
   * using buf = pool.importPointer(text, { stream });
   * ```
   */
  importPointer(handle: IpcHandle | string | Uint8Array, options: ImportPointerOptions = {}): IpcBuffer {
    const pool = this.handle;
    options = readOptions('ImportedPool.importPointer', options, { stream: true });
    const stream = options.stream ?? defaultStream;
    streamHandleOf(stream);
    const parsed = IpcHandle.from(handle);
    if (parsed.byteLength === undefined) throw new RangeError('importPointer: the handle does not say how many bytes the allocation has');
    return IpcBuffer.fromPool(pool, parsed, this.device, stream);
  }

  /**
   * Destroys the imported pool (cuMemPoolDestroy); free its imported buffers first.
   *
   * @throws {UseAfterFreeError} When already destroyed.
   * @example
   * ```ts
   * pool.destroy();
   * ```
   */
  destroy(): void {
    const pool = this.handle;
    this.#destroyed = true;
    this.device.makeCurrent();
    this.device.backend.memPoolDestroy(pool);
  }

  /**
   * True once `destroy()` has run (the vocabulary: `destroy` ends it, `destroyed` says it ended;
   * docs/architecture.md).
   *
   * @returns Whether it ended.
   * @example
   * ```ts
   * pool.destroy();
   * pool.destroyed; // true
   * ```
   */
  get destroyed(): boolean {
    return this.#destroyed;
  }

  /**
   * `using pool = importPool(fd)` destroys it at the end of the scope (a no-op once destroyed).
   *
   * @example
   * ```ts
   * { using pool = importPool(fd); }
   * ```
   */
  [Symbol.dispose](): void {
    if (!this.#destroyed) this.destroy();
  }
}

/**
 * Same as `ImportedPool.fromFd` for a descriptor, `ImportedPool.fromFabricHandle` for a fabric handle's 64 bytes.
 *
 * @param handle The received descriptor (left open), or a fabric handle.
 * @param options `device`.
 * @returns The pool.
 * @throws {CudaError | RangeError | TypeError} As `ImportedPool.fromFd` and `ImportedPool.fromFabricHandle`.
 * @example
 * ```ts
 * using pool = importPool(fd);
 * ```
 */
export function importPool(handle: number | Uint8Array, options: ImportPoolOptions = {}): ImportedPool {
  return handle instanceof Uint8Array ? ImportedPool.fromFabricHandle(handle, options) : ImportedPool.fromFd(handle, options);
}
