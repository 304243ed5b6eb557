/**
 * IpcHandle: what one process gives another so that it can map the same device memory, in a form
 * that travels over any channel (a pipe, a socket, a file, an environment variable, JSON). It is
 * the driver's 64-byte CUipcMemHandle plus the two numbers the driver's handle does not carry in
 * a documented way: how many bytes the receiver may use and where they start in the exported
 * allocation (0 for what vram exports; PyTorch and CuPy share tensors at offsets inside larger
 * cached blocks). The handle is only meaningful on the machine that made it.
 */
import { IPC_HANDLE_BYTES } from '../backend/backend.js';
import { checkNonNegativeInteger } from '../validate.js';
import { readOptions } from '../util/options.js';

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
  ) {
    if (!(handle instanceof Uint8Array) || handle.length !== IPC_HANDLE_BYTES) {
      throw new TypeError(`an IPC handle is ${IPC_HANDLE_BYTES} bytes (a Uint8Array), got ${describe(handle)}`);
    }
    if (byteLength !== undefined) {
      checkNonNegativeInteger(byteLength, 'IPC handle byteLength');
      if (byteLength === 0) throw new RangeError('IPC handle byteLength must be > 0');
    }
    checkNonNegativeInteger(offset, 'IPC handle offset');
    this.#handle = handle.slice();
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
      if (text.startsWith(PREFIX)) return IpcHandle.decode(hexBytes(text.slice(PREFIX.length)));
      const bytes = hexBytes(text);
      if (bytes.length !== IPC_HANDLE_BYTES) {
        throw new TypeError(`IpcHandle.from: a string handle is 'vram-ipc:...' or ${2 * IPC_HANDLE_BYTES} hex digits, got ${text.length} characters`);
      }
      return new IpcHandle(bytes, extent.byteLength, extent.offset ?? 0);
    }
    if (value instanceof Uint8Array) {
      if (value.length === ENCODED_BYTES) return IpcHandle.decode(value);
      if (value.length === IPC_HANDLE_BYTES) return new IpcHandle(value, extent.byteLength, extent.offset ?? 0);
      throw new TypeError(`IpcHandle.from: bytes must be ${IPC_HANDLE_BYTES} (a driver handle) or ${ENCODED_BYTES} (IpcHandle.toBytes()), got ${value.length}`);
    }
    throw new TypeError(`IpcHandle.from expects an IpcHandle, a string or a Uint8Array, got ${describe(value)}`);
  }

  private static decode(bytes: Uint8Array): IpcHandle {
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
   * The binary form: 64 driver bytes, byteLength and offset (u64 little-endian; byteLength 0 when
   * not known). 80 bytes.
   *
   * @returns A new Uint8Array.
   * @throws Never.
   * @example
   * ```ts
   * socket.write(exportIpc(buf).toBytes());
   * ```
   */
  toBytes(): Uint8Array {
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

function hexBytes(text: string): Uint8Array {
  if (!/^(?:[0-9a-fA-F]{2})*$/.test(text)) throw new TypeError('IpcHandle.from: the handle is not hexadecimal');
  return new Uint8Array(Buffer.from(text, 'hex'));
}

function describe(value: unknown): string {
  if (value instanceof Uint8Array) return `${value.length} bytes`;
  return value === null ? 'null' : typeof value;
}
