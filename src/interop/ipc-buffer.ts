/**
 * IpcBuffer: device memory another process exported, open in this one: mapped with
 * cuIpcOpenMemHandle (legacy IPC), or imported from a shared pool with cuMemPoolImportPointer. It
 * copies, fills and backs arrays like any DeviceBuffer; freeing it (or the end of a `using` scope,
 * or the garbage-collection backstop) undoes the import exactly once (cuIpcCloseMemHandle, or
 * cuMemFreeAsync of the imported pointer) and never frees the exporter's memory.
 */
import { IpcMemFlags, type Handle, type Ptr } from '../backend/backend.js';
import type { Device } from '../device.js';
import { DeviceMemory } from '../buffer/device-memory.js';
import type { Release } from '../buffer/lifetime.js';
import { defaultStream, type StreamRef } from '../resource/resource.js';
import { streamHandleOf } from '../stream.js';
import type { IpcHandle } from './ipc-handle.js';

/**
 * Another process's device memory, open in this one. Made by `importIpc`.
 *
 * @example
 * ```ts
 * using shared = importIpc(handleText);
 * const values = shared.copyToHost(new Float32Array(shared.byteLength / 4));
 * ```
 */
export class IpcBuffer extends DeviceMemory {
  /** The device whose context the memory is open in (copies and fills run there). */
  readonly device: Device;
  /** The address cuIpcOpenMemHandle returned: the exported allocation's first byte here. */
  readonly mappedBase: Ptr;

  private constructor(ptr: Ptr, bytes: number, mappedBase: Ptr, device: Device, release: Release, stream: StreamRef, ordered: boolean) {
    super(ptr, bytes, release, device, stream, ordered);
    this.device = device;
    this.mappedBase = mappedBase;
  }

  /**
   * Imports one allocation of another process's pool (cuMemPoolImportPointer) into `pool`, a pool
   * this process imported. Freeing the buffer frees the import in stream order (cuMemFreeAsync on
   * `stream`, or the stream `free({ stream })` names); the exporter must not free its allocation
   * before that.
   *
   * @param pool The imported pool's handle.
   * @param data The 64 bytes of cuMemPoolExportPointer.
   * @param bytes The allocation's size (the export data does not say).
   * @param device The device whose context imported the pool.
   * @param stream The stream the import is used on first and freed on.
   * @returns The buffer.
   * @throws {CudaError} What the driver answers (bad data, an allocation the exporter freed).
   * @example
   * ```ts
   * const buf = IpcBuffer.fromPool(pool.handle, data, 4096, Device.get(0), defaultStream);
   * ```
   * @internal ImportedPool.importPointer's; a user imports a pool's allocation with `pool.importPointer(handle)`.
   */
  static fromPool(pool: Handle, data: Uint8Array, bytes: number, device: Device, stream: StreamRef): IpcBuffer {
    const backend = device.backend;
    device.makeCurrent();
    const ptr = backend.memPoolImportPointer(pool, data);
    const release: Release = (on) => {
      device.makeCurrent();
      backend.memFreeAsync(ptr, streamHandleOf(on ?? stream));
    };
    return new IpcBuffer(ptr, bytes, ptr, device, release, stream, true);
  }

  /**
   * Opens `handle` in `device`'s context (cuIpcOpenMemHandle with lazy peer access) and checks
   * its extent against the allocation's size as the driver reports it; on any failure after the
   * open, the mapping is closed again before the error is thrown.
   *
   * @param handle The handle.
   * @param device The importing device.
   * @returns The open buffer.
   * @throws {CudaError} What the driver answers for a malformed or stale handle, or one this
   *   process exported itself.
   * @throws {RangeError} When the handle's offset and byteLength do not fit in the allocation.
   * @example
   * ```ts
   * const shared = IpcBuffer.open(IpcHandle.from(text), Device.get(0));
   * ```
   */
  static open(handle: IpcHandle, device: Device): IpcBuffer {
    const backend = device.backend;
    device.makeCurrent();
    const base = backend.ipcOpenMemHandle(handle.driverHandle, IpcMemFlags.LAZY_ENABLE_PEER_ACCESS);
    // cuIpcCloseMemHandle unmaps: work still using the mapping must finish first, and CUDA does not
    // say that the close waits for it (cuMemFree does), so the release synchronises the context.
    const release: Release = () => {
      device.makeCurrent();
      backend.contextSynchronize();
      backend.ipcCloseMemHandle(base);
    };
    let bytes: number;
    try {
      const size = backend.pointerGetAttributes(base).rangeSize;
      bytes = handle.byteLength ?? size - handle.offset;
      if (handle.offset + bytes > size || bytes <= 0) {
        throw new RangeError(`the IPC handle grants ${handle.byteLength ?? 'the rest'} bytes at offset ${handle.offset}, but the exported allocation has ${size}`);
      }
    } catch (error) {
      release(undefined);
      throw error;
    }
    // Not stream-ordered: closing unmaps at once, so a free with recorded streams waits for them on the host.
    return new IpcBuffer(base + handle.offset, bytes, base, device, release, defaultStream, false);
  }

  /**
   * The memory is device memory, reached from the importing device (peer copies use it).
   *
   * @returns The importing device.
   * @example
   * ```ts
   * shared.residentDevice.ordinal; // 0
   * ```
   */
  get residentDevice(): Device {
    return this.device;
  }

  /**
   * A short description for logs.
   *
   * @returns `IpcBuffer(4096 bytes on device 0)`, with `, closed` once freed.
   * @throws Never.
   * @example
   * ```ts
   * String(shared);
   * ```
   */
  override toString(): string {
    return `IpcBuffer(${this.byteLength} bytes on device ${this.device.ordinal}${this.freed ? ', closed' : ''})`;
  }
}
