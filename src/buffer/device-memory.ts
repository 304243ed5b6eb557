/**
 * DeviceMemory: the base of every buffer that device work can address (DeviceBuffer,
 * ManagedBuffer, ForeignDeviceBuffer, IpcBuffer), with the copies and fills they share. The
 * copies' checks, stream records and driver calls are planned in copy-planning.ts.
 */
import type { Handle } from '../backend/backend.js';
import type { Device } from '../device.js';
import { readOptions, type OptionNames } from '../util/options.js';
import { Allocation } from './lifetime.js';
import {
  copyBetween,
  copyBetweenAsync,
  fill,
  isHostData,
  type CopyEndpoint,
  type CopyInOptions,
  type CopyOutOptions,
  type MemsetOptions,
} from './copy-planning.js';

const COPY_IN: OptionNames<CopyInOptions> = { offset: true, bytes: true, stream: true, register: true, srcOffset: true };
const COPY_OUT: OptionNames<CopyOutOptions> = { offset: true, bytes: true, stream: true, register: true, dstOffset: true };

/**
 * Memory that device work can address: the base of DeviceBuffer and ManagedBuffer, holding the
 * copies and fills they share. `device` is where the memory lives for peer copies (undefined for
 * memory every device reaches through unified addressing, as managed memory).
 * @example
 * ```ts
 * function upload(dst: DeviceMemory, data: Float32Array): void { dst.copyFromHost(data); }
 * upload(DeviceBuffer.allocate(data.byteLength), data);
 * ```
 */
export abstract class DeviceMemory extends Allocation {
  /** The device whose context copies and fills run in. */
  abstract readonly device: Device;

  /** The device the memory lives on, for choosing a peer copy; undefined when not device-resident. */
  abstract readonly residentDevice: Device | undefined;

  /**
   * The context the memory belongs to: the device's active context for memory vram allocated (it
   * allocates in that context), the context the driver reported for a ForeignDeviceBuffer.
   * Peer copies name it.
   *
   * @returns The CUcontext handle.
   * @throws {UseAfterFreeError} When the device's selected Context was destroyed (never for the primary).
   * @example
   * ```ts
   * using buf = DeviceBuffer.allocate(64);
   * buf.context === buf.device.activeContext; // true
   * ```
   */
  get context(): Handle {
    return this.device.activeContext;
  }

  /**
   * Makes the memory's context current on the calling thread: what synchronous copies and fills
   * of it do first. The device's active context for vram's own memory; a ForeignDeviceBuffer
   * enters the context its memory belongs to, also when that is not the device's primary context.
   *
   * @returns Nothing.
   * @throws {CudaError} When the context was destroyed (the driver's error).
   * @example
   * ```ts
   * buf.makeCurrent(); // then raw backend calls on buf.ptr run in its context
   * ```
   */
  makeCurrent(): void {
    this.device.makeCurrent();
  }

  /**
   * True when the memory belongs to a context of its own rather than its device's active one (a
   * ForeignDeviceBuffer's). Synchronous copies of such memory from or to JavaScript memory are
   * single driver copies made in that context, not staged on the device's copy streams (which
   * live in the device's active context).
   *
   * @returns False for memory vram allocated.
   * @example
   * ```ts
   * DeviceBuffer.allocate(64).ownContext; // false
   * ```
   */
  get ownContext(): boolean {
    return false;
  }

  /**
   * Fills elements of 1, 2 or 4 bytes with `value` (an unsigned or signed integer of that width).
   * Synchronous unless `stream` is given.
   * @throws {TypeError} When `value` or an option is of the wrong type, or an option is unknown.
   * @throws {RangeError} When `value` does not fit the element, or the range is outside the buffer.
   * @throws {UseAfterFreeError} When this buffer was freed.
   * @example
   * ```ts
   * buf.memset(0);
   * buf.memset(0xff, { elementBytes: 1, offset: 16, count: 8, stream });
   * ```
   */
  memset(value: number, options: MemsetOptions = {}): void {
    fill(this, value, options);
  }

  /**
   * Copies from JavaScript memory or a HostBuffer into this buffer, synchronously unless `stream`
   * is given (a stream needs a HostBuffer source, else TypeError: use `copyFromHostAsync`).
   * JavaScript memory of 16 MiB or more is staged through pinned memory by the copy threads, or
   * copied straight from where it lies once the registration cache has pinned it (its second copy).
   *
   * @param src The source.
   * @param options `offset` (into this buffer), `srcOffset`, `bytes`, `stream`, `register`.
   * @throws {TypeError | RangeError} For a bad source, option or range.
   * @throws {UseAfterFreeError} When either buffer was freed.
   * @throws {DetachedBufferError} When the JavaScript memory was detached.
   * @example
   * ```ts
   * using buf = DeviceBuffer.allocate(data.byteLength);
   * buf.copyFromHost(data); // a Float32Array of 256 MiB: staged, on the copy threads
   * ```
   */
  copyFromHost(src: CopyEndpoint, options: CopyInOptions = {}): void {
    options = readOptions(`${this.constructor.name}.copyFromHost`, options, COPY_IN);
    checkHostEndpoint(src, 'copyFromHost: src');
    copyBetween(this, options.offset ?? 0, src, options.srcOffset ?? 0, options, 'copyFromHost');
  }

  /**
   * Copies from this buffer into JavaScript memory or a HostBuffer and returns `dst`; synchronous
   * unless `stream` is given (a stream needs a HostBuffer destination: use `copyToHostAsync`).
   * JavaScript memory takes the same paths as in `copyFromHost`.
   *
   * @param dst The destination.
   * @param options `offset` (into this buffer), `dstOffset`, `bytes`, `stream`, `register`.
   * @returns `dst`.
   * @throws {TypeError | RangeError} For a bad destination, option or range.
   * @throws {UseAfterFreeError} When either buffer was freed.
   * @throws {DetachedBufferError} When the JavaScript memory was detached.
   * @example
   * ```ts
   * const out = buf.copyToHost(new Float32Array(buf.byteLength / 4));
   * ```
   */
  copyToHost<T extends CopyEndpoint>(dst: T, options: CopyOutOptions = {}): T {
    options = readOptions(`${this.constructor.name}.copyToHost`, options, COPY_OUT);
    checkHostEndpoint(dst, 'copyToHost: dst');
    copyBetween(dst, options.dstOffset ?? 0, this, options.offset ?? 0, options, 'copyToHost');
    return dst;
  }

  /**
   * Copies from JavaScript memory or a HostBuffer into this buffer on `options.stream` (default
   * the legacy default stream), after the work queued there, and resolves once the data is in
   * device memory. The event loop is never blocked: JavaScript memory is staged through pinned
   * chunks by the copy threads (or copied in place once registered). The source must not be
   * changed or detached until the promise settles.
   *
   * @param src The source.
   * @param options `offset`, `srcOffset`, `bytes`, `stream`, `register`.
   * @returns A promise that resolves when the copy is complete.
   * @throws {TypeError | RangeError} For a bad source, option or range (rejects; nothing is queued).
   * @throws {DetachedBufferError} When the source is detached meanwhile (rejects).
   * @example
   * ```ts
   * await buf.copyFromHostAsync(data, { stream });
   * ```
   */
  async copyFromHostAsync(src: CopyEndpoint, options: CopyInOptions = {}): Promise<void> {
    options = readOptions(`${this.constructor.name}.copyFromHostAsync`, options, COPY_IN);
    checkHostEndpoint(src, 'copyFromHostAsync: src');
    await copyBetweenAsync(this, options.offset ?? 0, src, options.srcOffset ?? 0, options, 'copyFromHostAsync');
  }

  /**
   * Copies from this buffer into JavaScript memory or a HostBuffer on `options.stream` (default
   * the legacy default stream), after the work queued there, and resolves with `dst` once the data
   * is there; the event loop is never blocked. `dst` must not be read, changed or detached until then.
   *
   * @param dst The destination.
   * @param options `offset`, `dstOffset`, `bytes`, `stream`, `register`.
   * @returns A promise of `dst`, resolved when the copy is complete.
   * @throws {TypeError | RangeError} For a bad destination, option or range (rejects; nothing is queued).
   * @throws {DetachedBufferError} When the destination is detached meanwhile (rejects).
   * @example
   * ```ts
   * const out = await buf.copyToHostAsync(new Float32Array(n), { stream });
   * ```
   */
  async copyToHostAsync<T extends CopyEndpoint>(dst: T, options: CopyOutOptions = {}): Promise<T> {
    options = readOptions(`${this.constructor.name}.copyToHostAsync`, options, COPY_OUT);
    checkHostEndpoint(dst, 'copyToHostAsync: dst');
    await copyBetweenAsync(dst, options.dstOffset ?? 0, this, options.offset ?? 0, options, 'copyToHostAsync');
    return dst;
  }

  /**
   * Copies from another device-addressable buffer (a peer copy when they live on different
   * devices). Synchronous unless `stream` is given.
   * @throws {TypeError} When `src` is not device memory or an option is unknown or of the wrong type.
   * @throws {RangeError} When the range is outside either buffer.
   * @throws {UseAfterFreeError} When either buffer was freed.
   * @example
   * ```ts
   * dst.copyFrom(src, { bytes: 1024, stream });
   * ```
   */
  copyFrom(src: DeviceMemory, options: CopyInOptions = {}): void {
    options = readOptions(`${this.constructor.name}.copyFrom`, options, COPY_IN);
    if (!(src instanceof DeviceMemory)) throw new TypeError('copyFrom: src must be a DeviceBuffer or ManagedBuffer');
    copyBetween(this, options.offset ?? 0, src, options.srcOffset ?? 0, options, 'copyFrom');
  }
}

/** TypeError unless `end` is JavaScript memory or a vram buffer (checked before anything else). */
function checkHostEndpoint(end: unknown, what: string): void {
  if (!isHostData(end) && !(end instanceof Allocation)) {
    throw new TypeError(`${what} must be a TypedArray, Buffer, DataView, ArrayBuffer or HostBuffer`);
  }
}
