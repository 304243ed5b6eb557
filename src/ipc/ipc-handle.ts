/**
 * IpcHandle: what one process gives another so that it can map the same device memory, in a form
 * that travels over any channel (a pipe, a socket, a file, an environment variable, JSON). It is
 * the driver's 64-byte CUipcMemHandle plus the two numbers the driver's handle does not carry in
 * a documented way: how many bytes the receiver may use and where they start in the exported
 * allocation (0 for what vram exports; PyTorch and CuPy share tensors at offsets inside larger
 * cached blocks). The handle is only meaningful on the machine that made it.
 */
import { FABRIC_HANDLE_BYTES, IPC_HANDLE_BYTES } from '../backend/backend.js';
import { checkNonNegativeInteger } from '../validate.js';
import { readOptions } from '../util/options.js';

/**
 * How an IpcHandle's memory is opened: `legacy`, a cuMemAlloc allocation (cuIpcOpenMemHandle of
 * the driver's 64 bytes); `pool`, an allocation of a stream-ordered pool (the pool imported from
 * the exporter's descriptor, then cuMemPoolImportPointer of the 64 bytes); `physical`, a block of
 * a virtual-memory pool (each physical allocation under it imported from the exporter's
 * descriptor and mapped back to back); `fabric-pool` and `fabric-physical`, the same two made
 * with fabric handles (CU_MEM_HANDLE_TYPE_FABRIC), which carry the driver's 64-byte handles
 * themselves and so open in any process of the NVLink domain, on this host or another.
 */
export type IpcHandleKind = 'legacy' | 'pool' | 'physical' | 'fabric-pool' | 'fabric-physical';

/**
 * The driver's fabric handles a `fabric-pool` or `fabric-physical` handle carries: the pool's
 * (cuMemPoolExportToShareableHandle), or one per physical allocation under the block
 * (cuMemExportToShareableHandle) with its size.
 */
export interface IpcFabricHandles {
  /** `fabric-pool` or `fabric-physical`. */
  readonly kind: 'fabric-pool' | 'fabric-physical';
  /** The 64-byte CUmemFabricHandles: the pool's alone, or one per physical allocation. */
  readonly handles: readonly Uint8Array[];
  /** `fabric-physical`: each allocation's size, in order (empty for `fabric-pool`). */
  readonly extentBytes: readonly number[];
}

/**
 * Where a `pool` or `physical` handle's file descriptors are: open in the exporting process (which
 * keeps them until its buffer is freed), copied by the importer with pidfd_getfd.
 */
export interface IpcDescriptors {
  /** `pool` or `physical`. */
  readonly kind: 'pool' | 'physical';
  /** The exporting process. */
  readonly pid: number;
  /** The descriptors, as numbered in the exporting process: the pool's, or one per physical allocation. */
  readonly fds: readonly number[];
  /** `physical`: each allocation's size, in order (empty for `pool`). */
  readonly extentBytes: readonly number[];
  /**
   * The low 32 bits of each descriptor's inode as the exporter saw it (0: not checked): the
   * importer refuses a descriptor number the exporter has since closed and reused for another file.
   */
  readonly inodes?: readonly number[];
}

/** The first bytes of the binary form of a shared handle: 'VRI' and the kind (1 pool, 2 physical, 3 fabric-pool, 4 fabric-physical). */
const MAGIC = [0x56, 0x52, 0x49] as const;
/** Bytes of that form before the kind's own: magic and kind, pid u32, count u32, byteLength u64, offset u64. */
const HEADER_BYTES = 28;

/** The prefix of an IpcHandle's string form. */
const PREFIX = 'vram-ipc:';
/** Bytes of the binary form: the driver's handle, then byteLength and offset as u64 little-endian. */
const ENCODED_BYTES = IPC_HANDLE_BYTES + 16;

/**
 * A legacy CUDA IPC memory handle with the extent it grants. Immutable; `toString()` and
 * `toBytes()` give forms that `IpcHandle.from` reads back.
 *
 * @example
 * ```ts
 * const text = exportIpc(buf).toString();          // send it anywhere
 * using shared = importIpc(IpcHandle.from(text));  // in the other process
 * ```
 */
export class IpcHandle {
  readonly #handle: Uint8Array;

  /**
   * @param handle The driver's 64 bytes (copied).
   * @param byteLength Bytes the receiver may use, from `offset`; undefined when not known (a raw
   *   64-byte handle from another program): the importer then takes the rest of the allocation.
   * @param offset Where those bytes start in the exported allocation.
   * @param descriptors For a `pool` handle (`handle` is then cuMemPoolExportPointer's 64 bytes) or
   *   a `physical` one (`handle` is unused, zeros): where the exporter's descriptors are.
   * @throws {TypeError} When `handle` is not 64 bytes.
   * @throws {RangeError} When `byteLength` or `offset` is not a whole number >= 0 (byteLength > 0).
   * @example
   * ```ts
   * const h = new IpcHandle(driverBytes, 4096); // 64 bytes from cuIpcGetMemHandle, 4096 bytes from offset 0
   * ```
   */
  constructor(
    handle: Uint8Array,
    /** Bytes the receiver may use; undefined: the rest of the allocation from `offset`. */
    readonly byteLength: number | undefined,
    /** Byte offset of the shared range in the exported allocation. */
    readonly offset = 0,
    /** For a `pool` or `physical` handle: the exporter's descriptors; undefined for legacy IPC. */
    readonly descriptors?: IpcDescriptors,
    /** For a `fabric-pool` or `fabric-physical` handle: the driver's fabric handles (copied). */
    fabric?: IpcFabricHandles,
  ) {
    if (!(handle instanceof Uint8Array) || handle.length !== IPC_HANDLE_BYTES) {
      throw new TypeError(`an IPC handle is ${IPC_HANDLE_BYTES} bytes (a Uint8Array), got ${describe(handle)}`);
    }
    if (byteLength !== undefined) {
      checkNonNegativeInteger(byteLength, 'IPC handle byteLength');
      if (byteLength === 0) throw new RangeError('IPC handle byteLength must be > 0');
    }
    checkNonNegativeInteger(offset, 'IPC handle offset');
    if (descriptors !== undefined) checkDescriptors(descriptors);
    if (fabric !== undefined) {
      if (descriptors !== undefined) throw new TypeError('an IPC handle carries descriptors or fabric handles, not both');
      checkFabric(fabric);
      this.fabric = { kind: fabric.kind, handles: fabric.handles.map((h) => h.slice()), extentBytes: [...fabric.extentBytes] };
    }
    this.#handle = handle.slice();
  }

  /** For a `fabric-pool` or `fabric-physical` handle: the driver's fabric handles; undefined otherwise. */
  readonly fabric?: IpcFabricHandles;

  /**
   * How the memory is opened (see `IpcHandleKind`).
   *
   * @returns `legacy`, `pool`, `physical`, `fabric-pool` or `fabric-physical`.
   * @example
   * ```ts
   * exportIpc(DeviceBuffer.allocate(1024)).kind; // 'pool' under VRAM_ALLOCATOR=async
   * ```
   */
  get kind(): IpcHandleKind {
    return this.fabric?.kind ?? this.descriptors?.kind ?? 'legacy';
  }

  /**
   * Reads a handle in any of the forms it travels in: an IpcHandle; its string (`vram-ipc:` and
   * hex) or binary (80 bytes) form; or the driver's bare 64 bytes as a Uint8Array or as 128 hex
   * digits (what `cupy.cuda.runtime.ipcGetMemHandle(ptr).hex()` prints), with `byteLength` and
   * `offset` from `extent` (by default the whole allocation).
   *
   * @param value The handle.
   * @param extent For a bare driver handle: `byteLength` and `offset` of the shared range.
   * @returns The handle.
   * @throws {TypeError} For anything that is not one of those forms.
   * @throws {RangeError} For a bad extent.
   * @example
   * ```ts
   * const h = IpcHandle.from(pythonHex, { byteLength: 4096 });
   * ```
   */
  static from(value: IpcHandle | string | Uint8Array, extent: { byteLength?: number; offset?: number } = {}): IpcHandle {
    if (value instanceof IpcHandle) return value;
    extent = readOptions('IpcHandle.from', extent, { byteLength: true, offset: true }, 'extent');
    if (typeof value === 'string') {
      const text = value.trim();
      if (text.startsWith(PREFIX)) {
        const bytes = hexBytes(text.slice(PREFIX.length));
        return bytes.length === ENCODED_BYTES ? IpcHandle.#decode(bytes) : IpcHandle.#decodeShared(bytes);
      }
      const bytes = hexBytes(text);
      if (bytes.length !== IPC_HANDLE_BYTES) {
        throw new TypeError(`IpcHandle.from: a string handle is 'vram-ipc:...' or ${2 * IPC_HANDLE_BYTES} hex digits, got ${text.length} characters`);
      }
      return new IpcHandle(bytes, extent.byteLength, extent.offset ?? 0);
    }
    if (value instanceof Uint8Array) {
      if (value.length === ENCODED_BYTES) return IpcHandle.#decode(value);
      if (value.length !== IPC_HANDLE_BYTES && MAGIC.every((b, i) => value[i] === b)) return IpcHandle.#decodeShared(value);
      if (value.length === IPC_HANDLE_BYTES) return new IpcHandle(value, extent.byteLength, extent.offset ?? 0);
      throw new TypeError(
        `IpcHandle.from: bytes must be ${IPC_HANDLE_BYTES} (a driver handle), ${ENCODED_BYTES} (IpcHandle.toBytes() of a legacy handle) ` +
          `or a pool or physical handle's toBytes(), got ${value.length}${value.length === 66 ? " (66 bytes is PyTorch's versioned handle: pass the whole tuple storage._share_cuda_() returns, see importIpc)" : ''}`,
      );
    }
    throw new TypeError(`IpcHandle.from expects an IpcHandle, a string or a Uint8Array, got ${describe(value)}`);
  }

  /** Reads the binary form of a `pool`, `physical`, `fabric-pool` or `fabric-physical` handle (`toBytes()`). */
  static #decodeShared(bytes: Uint8Array): IpcHandle {
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const magic = MAGIC.every((b, i) => bytes[i] === b);
    if (magic && (bytes[3] === 3 || bytes[3] === 4)) return IpcHandle.#decodeFabric(bytes, view);
    const kind = !magic ? undefined : bytes[3] === 1 ? 'pool' : bytes[3] === 2 ? 'physical' : undefined;
    const count = bytes.length >= HEADER_BYTES ? view.getUint32(8, true) : -1;
    const expected = kind === 'pool' ? HEADER_BYTES + 8 + IPC_HANDLE_BYTES : HEADER_BYTES + 16 * count;
    if (kind === undefined || count < 1 || (kind === 'pool' && count !== 1) || bytes.length !== expected) {
      throw new TypeError(`IpcHandle.from: ${bytes.length} bytes are not a pool or physical handle's binary form`);
    }
    const pid = view.getUint32(4, true);
    const length = Number(view.getBigUint64(12, true));
    const offset = Number(view.getBigUint64(20, true));
    if (kind === 'pool') {
      const fd = view.getUint32(HEADER_BYTES, true);
      const inode = view.getUint32(HEADER_BYTES + 4, true);
      return new IpcHandle(bytes.subarray(HEADER_BYTES + 8), length, offset, { kind, pid, fds: [fd], extentBytes: [], inodes: [inode] });
    }
    const fds: number[] = [];
    const inodes: number[] = [];
    const extentBytes: number[] = [];
    for (let i = 0; i < count; i++) {
      fds.push(view.getUint32(HEADER_BYTES + 16 * i, true));
      inodes.push(view.getUint32(HEADER_BYTES + 16 * i + 4, true));
      extentBytes.push(Number(view.getBigUint64(HEADER_BYTES + 16 * i + 8, true)));
    }
    return new IpcHandle(new Uint8Array(IPC_HANDLE_BYTES), length, offset, { kind, pid, fds, extentBytes, inodes });
  }

  /** Reads the binary form of a `fabric-pool` or `fabric-physical` handle (see `toBytes`). */
  static #decodeFabric(bytes: Uint8Array, view: DataView): IpcHandle {
    const kind = bytes[3] === 3 ? 'fabric-pool' : 'fabric-physical';
    const count = bytes.length >= HEADER_BYTES ? view.getUint32(8, true) : -1;
    const expected = kind === 'fabric-pool' ? HEADER_BYTES + FABRIC_HANDLE_BYTES + IPC_HANDLE_BYTES : HEADER_BYTES + FABRIC_EXTENT_BYTES * count;
    if (count < 1 || (kind === 'fabric-pool' && count !== 1) || bytes.length !== expected) {
      throw new TypeError(`IpcHandle.from: ${bytes.length} bytes are not a fabric handle's binary form`);
    }
    const length = Number(view.getBigUint64(12, true));
    const offset = Number(view.getBigUint64(20, true));
    if (kind === 'fabric-pool') {
      const pool = bytes.subarray(HEADER_BYTES, HEADER_BYTES + FABRIC_HANDLE_BYTES);
      return new IpcHandle(bytes.subarray(HEADER_BYTES + FABRIC_HANDLE_BYTES), length, offset, undefined, { kind, handles: [pool], extentBytes: [] });
    }
    const handles: Uint8Array[] = [];
    const extentBytes: number[] = [];
    for (let i = 0; i < count; i++) {
      const at = HEADER_BYTES + FABRIC_EXTENT_BYTES * i;
      handles.push(bytes.subarray(at, at + FABRIC_HANDLE_BYTES));
      extentBytes.push(Number(view.getBigUint64(at + FABRIC_HANDLE_BYTES, true)));
    }
    return new IpcHandle(new Uint8Array(IPC_HANDLE_BYTES), length, offset, undefined, { kind, handles, extentBytes });
  }

  static #decode(bytes: Uint8Array): IpcHandle {
    if (bytes.length !== ENCODED_BYTES) throw new TypeError(`IpcHandle.from: an encoded handle is ${ENCODED_BYTES} bytes, got ${bytes.length}`);
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const length = Number(view.getBigUint64(IPC_HANDLE_BYTES, true));
    const offset = Number(view.getBigUint64(IPC_HANDLE_BYTES + 8, true));
    return new IpcHandle(bytes.subarray(0, IPC_HANDLE_BYTES), length === 0 ? undefined : length, offset);
  }

  /**
   * The driver's 64 bytes (a copy), as cuIpcOpenMemHandle and `cupy.cuda.runtime.ipcOpenMemHandle` take them.
   *
   * @returns 64 bytes.
   * @example
   * ```ts
   * child.stdin.write(Buffer.from(h.driverHandle).toString('hex'));
   * ```
   */
  get driverHandle(): Uint8Array {
    return this.#handle.slice();
  }

  /**
   * The binary form. Legacy: 64 driver bytes, byteLength and offset (u64 little-endian; byteLength
   * 0 when not known), 80 bytes. Pool and physical: 'VRI', the kind, the exporter's pid, the
   * descriptor count, byteLength and offset, then the pool's descriptor, its inode and the 64
   * export bytes (100 bytes), or each allocation's descriptor, inode and size (28 + 16 per
   * allocation). Fabric: the same header (pid 0, the count of fabric handles), then the pool's
   * fabric handle and the 64 export bytes (156 bytes), or each allocation's fabric handle and
   * size (28 + 72 per allocation).
   *
   * @returns A new Uint8Array.
   * @throws Never.
   * @example
   * ```ts
   * socket.write(exportIpc(buf).toBytes());
   * ```
   */
  toBytes(): Uint8Array {
    const d = this.descriptors;
    if (d !== undefined) return encodeShared(d, this.#handle, this.byteLength ?? 0, this.offset);
    if (this.fabric !== undefined) return encodeFabric(this.fabric, this.#handle, this.byteLength ?? 0, this.offset);
    const out = new Uint8Array(ENCODED_BYTES);
    out.set(this.#handle, 0);
    const view = new DataView(out.buffer);
    view.setBigUint64(IPC_HANDLE_BYTES, BigInt(this.byteLength ?? 0), true);
    view.setBigUint64(IPC_HANDLE_BYTES + 8, BigInt(this.offset), true);
    return out;
  }

  /**
   * The string form: `vram-ipc:` and the binary form in hex (ASCII only, safe in JSON, URLs and
   * command lines).
   *
   * @returns The string.
   * @throws Never.
   * @example
   * ```ts
   * process.stdout.write(exportIpc(buf).toString() + '\n');
   * ```
   */
  toString(): string {
    return PREFIX + Buffer.from(this.toBytes()).toString('hex');
  }

  /**
   * The string form, so `JSON.stringify` carries the handle.
   *
   * @returns `toString()`.
   * @throws Never.
   * @example
   * ```ts
   * JSON.stringify({ handle: exportIpc(buf) });
   * ```
   */
  toJSON(): string {
    return this.toString();
  }
}

/** The binary form of a `pool` or `physical` handle (see `toBytes`). */
function encodeShared(d: IpcDescriptors, data: Uint8Array, byteLength: number, offset: number): Uint8Array {
  const pool = d.kind === 'pool';
  const out = new Uint8Array(pool ? HEADER_BYTES + 8 + IPC_HANDLE_BYTES : HEADER_BYTES + 16 * d.fds.length);
  const view = new DataView(out.buffer);
  out.set(MAGIC, 0);
  out[3] = pool ? 1 : 2;
  view.setUint32(4, d.pid, true);
  view.setUint32(8, d.fds.length, true);
  view.setBigUint64(12, BigInt(byteLength), true);
  view.setBigUint64(20, BigInt(offset), true);
  if (pool) {
    view.setUint32(HEADER_BYTES, d.fds[0]!, true);
    view.setUint32(HEADER_BYTES + 4, d.inodes?.[0] ?? 0, true);
    out.set(data, HEADER_BYTES + 8);
    return out;
  }
  d.fds.forEach((fd, i) => {
    view.setUint32(HEADER_BYTES + 16 * i, fd, true);
    view.setUint32(HEADER_BYTES + 16 * i + 4, d.inodes?.[i] ?? 0, true);
    view.setBigUint64(HEADER_BYTES + 16 * i + 8, BigInt(d.extentBytes[i]!), true);
  });
  return out;
}

/** Bytes of one allocation in a `fabric-physical` handle's binary form: its fabric handle and its size (u64). */
const FABRIC_EXTENT_BYTES = FABRIC_HANDLE_BYTES + 8;

/** The binary form of a `fabric-pool` or `fabric-physical` handle (see `toBytes`). */
function encodeFabric(f: IpcFabricHandles, data: Uint8Array, byteLength: number, offset: number): Uint8Array {
  const pool = f.kind === 'fabric-pool';
  const out = new Uint8Array(pool ? HEADER_BYTES + FABRIC_HANDLE_BYTES + IPC_HANDLE_BYTES : HEADER_BYTES + FABRIC_EXTENT_BYTES * f.handles.length);
  const view = new DataView(out.buffer);
  out.set(MAGIC, 0);
  out[3] = pool ? 3 : 4;
  view.setUint32(8, f.handles.length, true);
  view.setBigUint64(12, BigInt(byteLength), true);
  view.setBigUint64(20, BigInt(offset), true);
  if (pool) {
    out.set(f.handles[0]!, HEADER_BYTES);
    out.set(data, HEADER_BYTES + FABRIC_HANDLE_BYTES);
    return out;
  }
  f.handles.forEach((h, i) => {
    out.set(h, HEADER_BYTES + FABRIC_EXTENT_BYTES * i);
    view.setBigUint64(HEADER_BYTES + FABRIC_EXTENT_BYTES * i + FABRIC_HANDLE_BYTES, BigInt(f.extentBytes[i]!), true);
  });
  return out;
}

/** Checks a handle's fabric handles: a kind, 64 bytes each (one for a pool), a size per allocation. */
function checkFabric(f: IpcFabricHandles): void {
  if (f.kind !== 'fabric-pool' && f.kind !== 'fabric-physical') {
    throw new TypeError(`IPC fabric handles: kind must be 'fabric-pool' or 'fabric-physical', got ${String(f.kind)}`);
  }
  if (!Array.isArray(f.handles) || f.handles.length === 0) throw new TypeError('IPC fabric handles: handles must be a non-empty array');
  for (const h of f.handles) {
    if (!(h instanceof Uint8Array) || h.length !== FABRIC_HANDLE_BYTES)
      throw new TypeError(`IPC fabric handles: each is ${FABRIC_HANDLE_BYTES} bytes (a Uint8Array)`);
  }
  if (f.kind === 'fabric-pool' && f.handles.length !== 1) throw new TypeError(`IPC fabric handles: a pool handle has one, got ${f.handles.length}`);
  if (f.kind === 'fabric-physical') {
    if (!Array.isArray(f.extentBytes) || f.extentBytes.length !== f.handles.length) throw new TypeError('IPC fabric handles: one size per handle');
    for (const bytes of f.extentBytes) checkNonNegativeInteger(bytes, 'IPC fabric handle extent size');
  }
}

/** Checks a handle's descriptors: a kind, a pid, descriptors (one for a pool, one per extent with its size). */
function checkDescriptors(d: IpcDescriptors): void {
  if (d.kind !== 'pool' && d.kind !== 'physical') throw new TypeError(`IPC handle descriptors: kind must be 'pool' or 'physical', got ${String(d.kind)}`);
  checkNonNegativeInteger(d.pid, 'IPC handle pid');
  if (!Array.isArray(d.fds) || d.fds.length === 0) throw new TypeError('IPC handle descriptors: fds must be a non-empty array');
  for (const fd of d.fds) checkNonNegativeInteger(fd, 'IPC handle descriptor');
  if (d.kind === 'pool' && d.fds.length !== 1) throw new TypeError(`IPC handle descriptors: a pool handle has one descriptor, got ${d.fds.length}`);
  if (d.inodes !== undefined) {
    if (!Array.isArray(d.inodes) || d.inodes.length !== d.fds.length) throw new TypeError('IPC handle descriptors: one inode per descriptor');
    for (const inode of d.inodes) {
      if (!Number.isInteger(inode) || inode < 0 || inode >= 2 ** 32)
        throw new RangeError(`IPC handle descriptors: an inode is the low 32 bits, got ${String(inode)}`);
    }
  }
  if (d.kind === 'physical') {
    if (!Array.isArray(d.extentBytes) || d.extentBytes.length !== d.fds.length) throw new TypeError('IPC handle descriptors: one size per descriptor');
    for (const bytes of d.extentBytes) checkNonNegativeInteger(bytes, 'IPC handle extent size');
  }
}

function hexBytes(text: string): Uint8Array {
  if (!/^(?:[0-9a-fA-F]{2})*$/.test(text)) throw new TypeError('IpcHandle.from: the handle is not hexadecimal');
  return new Uint8Array(Buffer.from(text, 'hex'));
}

function describe(value: unknown): string {
  if (value instanceof Uint8Array) return `${value.length} bytes`;
  return value === null ? 'null' : typeof value;
}
