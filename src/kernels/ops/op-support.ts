/**
 * What the built-in operations share: their options, the argument checks that run before any
 * device work, the launch geometry, and reading a one-element result back to JavaScript while
 * synchronising only the stream it was computed on.
 */
import { addressOfArray, checkWritable, DeviceArray } from '../../array/device-array.js';
import { isNonOverlapping } from '../../array/layout.js';
import { StridedArray } from '../../array/strided-array.js';
import type { Device } from '../../device.js';
import { VramStateError } from '../../errors.js';
import { HostBuffer } from '../../buffer/host-buffer.js';
import { keep } from '../../buffer/tidy.js';
import type { StreamRef } from '../../stream.js';
import { Stream, streamHandleOf } from '../../stream.js';

/** Options every built-in operation takes. */
export interface OpOptions {
  /**
   * The stream the kernels are queued on; default the stream of the (first) array, the one its
   * asynchronous copies use. Nothing synchronises unless the operation returns a JavaScript value.
   */
  readonly stream?: StreamRef;
}

/** Threads per block of the elementwise-style kernels (one element a thread, grid-stride). */
export const OP_BLOCK = 256;

/**
 * The grid of a grid-stride kernel over `n` elements: one thread an element up to 32 blocks of
 * 256 per multiprocessor (a full H100 is 16 blocks of 256 resident a multiprocessor, so two
 * waves), then each thread strides.
 *
 * @param device The device.
 * @param n Elements (> 0).
 * @returns Blocks.
 * @throws Never.
 * @example
 * ```ts
 * gridFor(device, 1025); // 5
 * ```
 */
export function gridFor(device: Device, n: number): number {
  return Math.max(1, Math.min(Math.ceil(n / OP_BLOCK), device.info.multiprocessorCount * 32));
}

/**
 * Checks that `value` is a live DeviceArray.
 *
 * @param value Anything.
 * @param what The operation and argument, for the message (`sum: a`).
 * @returns The array.
 * @throws {TypeError} For anything but a DeviceArray.
 * @throws {UseAfterFreeError} When its memory was freed.
 * @example
 * ```ts
 * const a = checkArray(input, 'sum: a');
 * ```
 */
export function checkArray(value: unknown, what: string): DeviceArray {
  if (!(value instanceof DeviceArray) || !StridedArray.isGenuine(value)) {
    throw new TypeError(`${what} must be a DeviceArray, got ${value === null ? 'null' : typeof value === 'object' ? value.constructor.name : typeof value}`);
  }
  // Not `value.ptr`: on spillable memory that getter reloads it and counts a write.
  addressOfArray(value); // throws UseAfterFreeError once freed
  return value;
}

/**
 * Checks that `value` is a live DeviceArray an operation may write: the one check of every
 * built-in operation's outputs (its memory not lent read-only, no two of its elements sharing bytes).
 *
 * @param value Anything.
 * @param what The operation and argument, for the message (`map: out`).
 * @returns The array.
 * @throws {TypeError} For anything but a DeviceArray.
 * @throws {VramStateError} When its memory was lent read-only, or its strides make elements overlap.
 * @throws {UseAfterFreeError} When its memory was freed.
 * @example
 * ```ts
 * const out = checkOutput(options.out, 'map: out');
 * ```
 */
export function checkOutput(value: unknown, what: string): DeviceArray {
  const a = checkArray(value, what);
  checkWritable(a, what);
  if (!isNonOverlapping(a.layout)) throw new VramStateError(`${what} is written, and its strides make elements overlap`);
  return a;
}

/**
 * Checks the options object and returns the stream to launch on.
 *
 * @param options The options (or undefined).
 * @param a The array whose stream is the default.
 * @param what The operation, for the message.
 * @returns The stream.
 * @throws {TypeError} When options is not an object.
 * @example
 * ```ts
 * const stream = streamFor(options, a, 'fill');
 * ```
 */
export function streamFor(options: OpOptions | undefined, a: DeviceArray, what: string): StreamRef {
  if (options === undefined) return a.stream;
  if (options === null || typeof options !== 'object') throw new TypeError(`${what}: options must be an object`);
  const stream = options.stream; // read once: the stream checked is the stream used
  if (stream === undefined) return a.stream;
  streamHandleOf(stream);
  return stream;
}

/**
 * Checks that every array is on one device (the first's), where the module is loaded.
 *
 * @param arrays The arrays.
 * @param what The operation.
 * @returns That device.
 * @throws {RangeError} When an array is on another device.
 * @example
 * ```ts
 * const device = sameDevice([x, y], 'zipWith');
 * ```
 */
export function sameDevice(arrays: readonly DeviceArray[], what: string): Device {
  const device = arrays[0]!.device;
  for (const a of arrays) {
    if (a.device !== device) throw new RangeError(`${what}: arrays on devices ${device.ordinal} and ${a.device.ordinal}; copy one over first`);
  }
  return device;
}

const staging = new WeakMap<Device, HostBuffer>();

/**
 * Reads a device array's first element bytes into JavaScript: an asynchronous copy on `stream`
 * into a small pinned buffer kept per device, then that stream alone is synchronised (a
 * synchronous cuMemcpy would wait on the legacy default stream, and through it on other streams).
 *
 * @param device The device.
 * @param src The array (its first `bytes` bytes are read).
 * @param bytes How many (at most 16).
 * @param stream The stream the result was computed on.
 * @returns A copy of the bytes.
 * @throws {CudaError} When the copy or the synchronisation fails (a kernel's fault surfaces here).
 * @example
 * ```ts
 * const bytes = readResult(device, scratch, 8, stream);
 * ```
 */
export function readResult(device: Device, src: DeviceArray, bytes: number, stream: StreamRef): Uint8Array {
  let host = staging.get(device);
  if (host === undefined || host.freed) {
    device.makeCurrent();
    host = keep(HostBuffer.allocate(16)); // a cache of vram's: no `tidy` frees it
    staging.set(device, host);
  }
  const memory = src.buffer;
  if (!(memory instanceof HostBuffer)) {
    memory.copyToHost(host, { offset: src.byteOffset, bytes, stream });
  }
  if (stream instanceof Stream) {
    stream.synchronize();
  } else {
    device.makeCurrent();
    device.backend.streamSynchronize(streamHandleOf(stream));
  }
  if (memory instanceof HostBuffer) return memory.view(Uint8Array, { byteOffset: src.byteOffset, length: bytes }).slice();
  return host.view(Uint8Array, { length: bytes }).slice();
}
