/**
 * IpcBuffer: device memory another process exported, open in this one: mapped with
 * cuIpcOpenMemHandle (legacy IPC), imported from a shared pool with cuMemPoolImportPointer, or
 * mapped from the physical allocations under a block of another process's virtual-memory pool. It
 * copies, fills and backs arrays like any DeviceBuffer; freeing it (or the end of a `using` scope,
 * or the garbage-collection backstop) undoes the import exactly once (cuIpcCloseMemHandle, or
 * cuMemFreeAsync of the imported pointer) and never frees the exporter's memory.
 */
import { IpcMemFlags, MemAccess, MemHandleType, type Handle, type Ptr } from '../backend/backend.js';
import { closeFd, copyDescriptor } from '../cuda/libc.js';
import type { Device } from '../device.js';
import { DeviceMemory } from '../buffer/device-memory.js';
import type { Release } from '../buffer/lifetime.js';
import { defaultStream, type StreamRef } from '../stream.js';
import { streamHandleOf } from '../stream.js';
import type { IpcDescriptors, IpcHandle } from './ipc-handle.js';
import { fstatSync } from 'node:fs';
import { VramStateError } from '../errors.js';
import { checkFabricSupport } from '../resource/fabric-support.js';

/**
 * This process's copy of descriptor `i` of an exporter (pidfd_getfd), checked against the inode
 * the exporter saw: a descriptor number the exporter closed (its buffer freed) and reused for
 * another file is refused, instead of importing whatever that file is.
 *
 * @param d The handle's descriptors.
 * @param i Which one.
 * @returns The copy; close it with `closeFd`.
 * @throws {SystemCallError} When the exporter is gone (ESRCH) or the descriptor is closed (EBADF).
 * @throws {VramStateError} When the number now names another file: the handle is stale.
 * @example
 * ```ts
 * const fd = copyExportedDescriptor(handle.descriptors!, 0);
 * ```
 */
export function copyExportedDescriptor(d: IpcDescriptors, i: number): number {
  const mine = copyDescriptor(d.pid, d.fds[i]!);
  const expected = d.inodes?.[i] ?? 0;
  if (expected !== 0 && fstatSync(mine).ino % 2 ** 32 !== expected) {
    closeFd(mine);
    throw new VramStateError(
      `importIpc: descriptor ${d.fds[i]} of process ${d.pid} is no longer the one exported ` +
        '(the exporter freed the buffer and the number was reused): the handle is stale',
    );
  }
  return mine;
}

/**
 * The bytes `handle` grants from its offset, checked against `exported`, the bytes the exporter
 * really shared as this side's driver sees them (an allocation's size, the physical allocations
 * mapped, an imported pool allocation's range): the one check every handle kind makes, so a handle
 * whose offset or size was forged never reaches memory outside what was exported.
 *
 * @param handle The handle.
 * @param exported The bytes shared, from the handle's base.
 * @param what What they are, for the message.
 * @returns The bytes the buffer gets: `handle.byteLength`, or the rest from the offset.
 * @throws {RangeError} When the range does not fit in what was exported.
 */
function grantedBytes(handle: IpcHandle, exported: number, what: string): number {
  const bytes = handle.byteLength ?? exported - handle.offset;
  if (bytes <= 0 || handle.offset + bytes > exported) {
    throw new RangeError(`the IPC handle grants ${handle.byteLength ?? 'the rest'} bytes at offset ${handle.offset}, but ${what} has ${exported}`);
  }
  return bytes;
}

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
   * this process imported, and gives `handle.byteLength` bytes from `handle.offset` on as the
   * buffer, checked against the imported allocation's range as the driver reports it (the import
   * is freed again when they do not fit). Freeing the buffer frees the import in stream order
   * (cuMemFreeAsync on `stream`, or the stream `free({ stream })` names); the exporter must not
   * free its allocation before that.
   *
   * @param pool The imported pool's handle.
   * @param handle Its driver bytes are cuMemPoolExportPointer's 64; its extent, what the buffer gets.
   * @param device The device whose context imported the pool.
   * @param stream The stream the import is used on first and freed on.
   * @returns The buffer.
   * @throws {CudaError} What the driver answers (bad data, an allocation the exporter freed).
   * @throws {RangeError} When the handle's offset and byteLength do not fit in the allocation.
   * @example
   * ```ts
   * const buf = IpcBuffer.fromPool(pool.handle, IpcHandle.from(text), Device.get(0), defaultStream);
   * ```
   * @internal ImportedPool.importPointer's; a user imports a pool's allocation with `pool.importPointer(handle)`.
   */
  static fromPool(pool: Handle, handle: IpcHandle, device: Device, stream: StreamRef): IpcBuffer {
    const backend = device.backend;
    device.makeCurrent();
    const ptr = backend.memPoolImportPointer(pool, handle.driverHandle);
    const release: Release = (on) => {
      device.makeCurrent();
      backend.memFreeAsync(ptr, streamHandleOf(on ?? stream));
    };
    let bytes: number;
    try {
      // The import is the allocation's first byte; where the driver gives no start, the size alone.
      const { rangeStart, rangeSize } = backend.pointerGetAttributes(ptr);
      bytes = grantedBytes(handle, rangeStart === 0 ? rangeSize : rangeStart + rangeSize - ptr, 'the exported pool allocation');
    } catch (error) {
      release(undefined);
      throw error;
    }
    return new IpcBuffer(ptr + handle.offset, bytes, ptr, device, release, stream, true);
  }

  /**
   * Maps another process's physical allocations (cuMemImportFromShareableHandle of each
   * descriptor, copied from the exporter with pidfd_getfd, or of each fabric handle of a
   * `fabric-physical` handle) back to back in a range reserved here,
   * readable and writable from `device`, and gives the range `handle.offset` on as the buffer.
   * The physical handles are released once mapped (the mappings keep the memory), so freeing the
   * buffer (unmap, then free the range, after the device's work) leaves nothing behind, whether
   * the exporter lives or not. On any failure, everything done so far is undone.
   *
   * @param handle A `physical` or `fabric-physical` handle.
   * @param device The importing device.
   * @returns The mapped memory.
   * @throws {SystemCallError} When a descriptor cannot be copied (the exporter exited or freed the buffer: ESRCH, EBADF).
   * @throws {VramStateError} When a descriptor number now names another file (a stale handle).
   * @throws {FabricUnavailableError} For fabric handles, when this machine lacks what they need (checked first).
   * @throws {CudaError} What the driver answers.
   * @throws {RangeError} When the extent does not fit in the mapped allocations.
   * @example
   * ```ts
   * const shared = IpcBuffer.fromPhysical(IpcHandle.from(text), Device.get(0));
   * ```
   * @internal importIpc's.
   */
  static fromPhysical(handle: IpcHandle, device: Device): IpcBuffer {
    const d = handle.descriptors;
    const f = handle.fabric;
    const backend = device.backend;
    if (f !== undefined && f.kind === 'fabric-physical') {
      checkFabricSupport(device, 'physical', 'importIpc');
      return IpcBuffer.#mapExtents(handle, device, f.extentBytes, (i) => backend.memImportFabricHandle(f.handles[i]!));
    }
    if (d === undefined || d.kind !== 'physical') throw new TypeError('fromPhysical needs a physical or fabric-physical handle');
    return IpcBuffer.#mapExtents(handle, device, d.extentBytes, (i) => {
      const mine = copyExportedDescriptor(d, i);
      try {
        return backend.memImportFromShareableHandle(mine, MemHandleType.POSIX_FILE_DESCRIPTOR);
      } finally {
        closeFd(mine);
      }
    });
  }

  /** Maps the allocations `importExtent` imports, of `extentBytes` each, back to back (see `fromPhysical`). */
  static #mapExtents(handle: IpcHandle, device: Device, extentBytes: readonly number[], importExtent: (i: number) => Handle): IpcBuffer {
    const total = extentBytes.reduce((a, b) => a + b, 0);
    const bytes = grantedBytes(handle, total, 'what the exported allocations map');
    const backend = device.backend;
    device.makeCurrent();
    const undo: (() => void)[] = [];
    const rollback = (): void => {
      for (const step of undo.reverse()) step();
    };
    let base: Ptr;
    try {
      const granularity = backend.memGetAllocationGranularity(device.ordinal);
      base = backend.memAddressReserve(total, granularity);
      const reserved = base;
      undo.push(() => backend.memAddressFree(reserved, total));
      let at = 0;
      for (let i = 0; i < extentBytes.length; i++) {
        const physical = importExtent(i);
        try {
          backend.memMap(reserved + at, extentBytes[i]!, physical);
        } finally {
          // The mapping holds the memory from here on (or nothing does, after a failed map).
          backend.memRelease(physical);
        }
        const mappedAt = reserved + at;
        const size = extentBytes[i]!;
        undo.push(() => backend.memUnmap(mappedAt, size));
        at += size;
      }
      backend.memSetAccess(reserved, total, device.ordinal, MemAccess.READWRITE);
    } catch (error) {
      rollback();
      throw error;
    }
    // Unmapping while work still uses the range would fault it: the device's work finishes first.
    const release: Release = () => {
      device.makeCurrent();
      backend.contextSynchronize();
      rollback();
    };
    return new IpcBuffer(base + handle.offset, bytes, base, device, release, defaultStream, false);
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
      bytes = grantedBytes(handle, backend.pointerGetAttributes(base).rangeSize, 'the exported allocation');
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
