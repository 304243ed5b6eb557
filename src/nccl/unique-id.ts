/**
 * The unique id that names a communicator: NCCL's 128-byte ncclUniqueId on a GPU (made by
 * ncclGetUniqueId on one rank, holding the address where that rank listens for the others), 128
 * random bytes on the emulated backend (naming the rendezvous folder). Either way it is plain
 * bytes, passed to the other ranks by any channel: argv, an environment variable, a file, a
 * socket, a key-value store.
 */
import { getBackend } from '../backend/select.js';
import { NCCL_UNIQUE_ID_BYTES } from '../cuda/nccl.js';
import { inspectCustom } from '../util/inspect.js';

/**
 * A communicator's unique id, serialisable to bytes or base64 for the other ranks.
 *
 * @example
 * ```ts
 * const id = UniqueId.create();               // on rank 0
 * spawn(process.execPath, ['worker.js'], { env: { ...process.env, NCCL_ID: id.toBase64() } });
 * const same = UniqueId.fromBase64(process.env.NCCL_ID!); // in the worker
 * ```
 */
export class UniqueId {
  readonly #bytes: Uint8Array;

  private constructor(bytes: Uint8Array) {
    this.#bytes = bytes;
  }

  /**
   * Makes a new id: ncclGetUniqueId on the cuda backend (NCCL starts listening for the other
   * ranks on this host), random bytes on the emulated one. Call it once, on one rank.
   *
   * @returns The id.
   * @throws {NcclUnavailableError} On the cuda backend, when NCCL cannot be loaded.
   * @throws {NcclError} When ncclGetUniqueId fails (no network interface NCCL can use, for one).
   * @example
   * ```ts
   * const id = UniqueId.create();
   * ```
   */
  static create(): UniqueId {
    return new UniqueId(getBackend().collectives().uniqueId());
  }

  /**
   * The id from its bytes, as `bytes` gave them.
   *
   * @param bytes 128 bytes.
   * @returns The id (holding a copy).
   * @throws {TypeError} When `bytes` is not a Uint8Array.
   * @throws {RangeError} When it is not 128 bytes long.
   * @example
   * ```ts
   * const id = UniqueId.fromBytes(new Uint8Array(message));
   * ```
   */
  static fromBytes(bytes: Uint8Array): UniqueId {
    if (!(bytes instanceof Uint8Array)) throw new TypeError('UniqueId.fromBytes: bytes must be a Uint8Array');
    if (bytes.byteLength !== NCCL_UNIQUE_ID_BYTES) {
      throw new RangeError(`UniqueId.fromBytes: bytes must be ${NCCL_UNIQUE_ID_BYTES} long (an ncclUniqueId), got ${bytes.byteLength}`);
    }
    return new UniqueId(new Uint8Array(bytes));
  }

  /**
   * The id from its base64 text, as `toBase64` wrote it.
   *
   * @param text Base64 of 128 bytes.
   * @returns The id.
   * @throws {TypeError} When `text` is not a string.
   * @throws {RangeError} When it is not base64 of 128 bytes.
   * @example
   * ```ts
   * const id = UniqueId.fromBase64(process.argv[2]!);
   * ```
   */
  static fromBase64(text: string): UniqueId {
    if (typeof text !== 'string') throw new TypeError('UniqueId.fromBase64: text must be a string');
    const trimmed = text.trim();
    if (!/^[A-Za-z0-9+/]*={0,2}$/.test(trimmed)) throw new RangeError(`UniqueId.fromBase64: text must be base64, got '${text.slice(0, 40)}'`);
    const bytes = new Uint8Array(Buffer.from(trimmed, 'base64'));
    if (bytes.byteLength !== NCCL_UNIQUE_ID_BYTES) {
      throw new RangeError(`UniqueId.fromBase64: text must hold ${NCCL_UNIQUE_ID_BYTES} bytes (an ncclUniqueId), got ${bytes.byteLength}`);
    }
    return new UniqueId(bytes);
  }

  /**
   * A copy of the 128 bytes.
   *
   * @returns The bytes.
   * @example
   * ```ts
   * socket.write(id.bytes);
   * ```
   */
  get bytes(): Uint8Array {
    return new Uint8Array(this.#bytes);
  }

  /**
   * The bytes as base64 (172 characters), for argv, an environment variable or JSON.
   *
   * @returns The text.
   * @throws Never.
   * @example
   * ```ts
   * const text = id.toBase64();
   * ```
   */
  toBase64(): string {
    return Buffer.from(this.#bytes).toString('base64');
  }

  /**
   * The base64 text, so `JSON.stringify` writes the id as a string `fromBase64` reads back.
   *
   * @returns The base64 text.
   * @throws Never.
   * @example
   * ```ts
   * JSON.stringify({ id }); // '{"id":"..."}'
   * ```
   */
  toJSON(): string {
    return this.toBase64();
  }

  /**
   * One line: `UniqueId(<first 8 bytes in hex>...)`; the whole id is `toBase64()`.
   *
   * @returns The line.
   * @throws Never.
   * @example
   * ```ts
   * String(id); // 'UniqueId(0200a1b2c0a80001...)'
   * ```
   */
  toString(): string {
    return `UniqueId(${Buffer.from(this.#bytes.subarray(0, 8)).toString('hex')}...)`;
  }

  /** How `console.log` shows it: the same line as `String(id)`. */
  [inspectCustom](): string {
    return this.toString();
  }
}
