/**
 * The copy and fill logic every buffer shares, with its argument checks in one place: offsets and
 * lengths are checked against both sides before any driver call (RangeError), freed buffers throw
 * UseAfterFreeError, and an asynchronous copy from or to pageable JavaScript memory is refused
 * (TypeError): the garbage collector may move or reclaim that memory while the DMA still runs.
 * A copy is synchronous unless a stream is given; an asynchronous one never synchronises.
 * Every call goes through the backend of the buffers involved (`Allocation.backend`, the owning
 * device's), never through the process-wide `getBackend()`.
 *
 * Streams: every operation here that queues work on a vram buffer records the stream it queues on
 * in the buffer (`recordUse`, PyTorch's host caching allocator does the same for pinned blocks), so
 * that freeing the buffer, on whichever stream, waits for that work on the device and a caching
 * resource cannot hand the memory to a new owner under it: `d.copyFromHost(h, { stream: s });
 * h.free()` is safe without a `recordStream` the caller has to remember. A synchronous operation
 * between device memories counts as queued on the legacy default stream: the driver returns before
 * a device-to-device copy or a memset of device memory is done. An asynchronous copy of JavaScript
 * memory also holds the buffer until it settles (`holdMemory`), as its staged chunks are queued
 * after the call.
 */
import type { Backend, Handle, Ptr } from '../backend/backend.js';
import { Device, ensureAnyContext } from '../device.js';
import { StreamCaptureError, VramStateError } from '../errors.js';
import { captureError, captureSessionOf, refuseDuringCapture } from '../graphs/sessions.js';
import { Event, Stream, streamHandleOf } from '../stream.js';
import { checkNonNegativeInteger, checkRange } from '../validate.js';
import { readOptions } from '../util/options.js';
import { addressOf, Allocation, holdMemory } from './lifetime.js';
import { DeviceMemory } from './device-memory.js';
import { beginOperation, movesOnReload, prepareUse } from './spill/residency.js';
import { MemoryResource } from '../resource/resource.js';
import { defaultStream, type StreamRef } from '../stream.js';
import { allowPeerCopy } from '../resource/suballoc/pool.js';
import { copyPageable, copyPageableAsync, type PageableCopy } from './transfer/transfers.js';

/** JavaScript memory a copy may read or write: any TypedArray, Buffer, DataView or ArrayBuffer. */
export type HostData = ArrayBuffer | ArrayBufferView;

/** One side of a copy: a vram allocation (device, pinned or managed memory) or JavaScript memory. */
export type CopyEndpoint = Allocation | HostData;

/** Options of a linear copy. Offsets are in bytes, also for TypedArrays (from the view's first byte). */
export interface CopyOptions {
  /** Byte offset into this buffer (the destination of copyFrom*, the source of copyTo*). Default 0. */
  readonly offset?: number;
  /** Bytes to copy. Default: everything from the source offset to the end of the source. */
  readonly bytes?: number;
  /**
   * Copy asynchronously on this stream. Omitted: a synchronous copy. For the Async methods, the
   * stream the copy is queued on (default the legacy default stream).
   */
  readonly stream?: StreamRef;
  /**
   * For JavaScript memory: true pins it in place now (the registration cache) so this and later
   * copies run at pinned speed; false never does; omitted, the cache's policy decides (a buffer of
   * 8 MiB or more is pinned on its second copy). See `configureTransfers`.
   */
  readonly register?: boolean;
}

/** Options of a copy into this buffer. */
export interface CopyInOptions extends CopyOptions {
  /** Byte offset into the source. Default 0. */
  readonly srcOffset?: number;
}

/** Options of a copy out of this buffer. */
export interface CopyOutOptions extends CopyOptions {
  /** Byte offset into the destination. Default 0. */
  readonly dstOffset?: number;
}

/** Options of `memset`. */
export interface MemsetOptions {
  /** Width of the pattern: 1, 2 or 4 bytes (default 1). */
  readonly elementBytes?: 1 | 2 | 4;
  /** Byte offset of the first element (a multiple of elementBytes). Default 0. */
  readonly offset?: number;
  /** Elements to fill. Default: from offset to the end (which must then be whole elements). */
  readonly count?: number;
  /** Fill asynchronously on this stream. Omitted: a synchronous fill. */
  readonly stream?: StreamRef;
}

/** A resolved side of a copy: an address, or bytes of JavaScript memory. */
type Side =
  | {
      readonly js: false;
      readonly ptr: Ptr;
      readonly size: number;
      readonly device: Device | undefined;
      /** The context its memory belongs to, for peer copies (the resident device's active one for vram's own). */
      readonly context: Handle | undefined;
    }
  | { readonly js: true; readonly bytes: Uint8Array; readonly size: number };

/** True for the JavaScript memory types copies accept. */
export function isHostData(value: unknown): value is HostData {
  return value instanceof ArrayBuffer || ArrayBuffer.isView(value);
}

/** A Uint8Array over exactly the bytes of `data`. */
export function bytesOf(data: HostData): Uint8Array {
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}

/**
 * The one check of every path that writes into vram memory (copies, 2D copies, fills, copies into
 * pinned arrays): the memory was not lent read-only (`Allocation.readOnly`), device or host.
 * Checked with the other arguments, before any driver call.
 *
 * @param dst The memory about to be written (JavaScript memory passes).
 * @param what Names the operation for the message.
 * @throws {VramStateError} When `dst` is read-only.
 * @example
 * ```ts
 * checkWritableMemory(host.buffer, 'copyTo');
 * ```
 */
export function checkWritableMemory(dst: CopyEndpoint, what: string): void {
  if (dst instanceof Allocation && dst.readOnly) {
    throw new VramStateError(`${what}: the destination is read-only memory (lent or registered with readOnly)`);
  }
}

/**
 * Records on the vram buffers among `a` and `b` that work touching them is queued on `stream`
 * (undefined: a synchronous operation), after every check and before the driver call. Recording
 * the buffer's own stream, or one already recorded, does nothing, so a buffer used on its own
 * stream pays nothing at free. A synchronous operation is recorded on the legacy default stream
 * only when both sides are device memory (a memset has one): the driver may return before such
 * work is done, while a copy with a host side is complete when it returns.
 */
function recordUse(stream: StreamRef | undefined, a: CopyEndpoint, b?: CopyEndpoint): void {
  if (stream === undefined) {
    if (!(a instanceof DeviceMemory) || (b !== undefined && !(b instanceof DeviceMemory))) return;
    stream = defaultStream;
  }
  if (a instanceof Allocation) a.recordStream(stream);
  if (b instanceof Allocation) b.recordStream(stream);
}

/**
 * Brings spilled buffers among the sides back, ordered on `stream` (synchronously without one),
 * after every check and before the driver call: `dst` counts as written, `src` as read. Returns
 * true when a side's address may have changed (spillable memory from a resource without virtual
 * memory): the caller reads the addresses again.
 */
function prepareSides(stream: StreamRef | undefined, dst: CopyEndpoint, src?: CopyEndpoint): boolean {
  beginOperation();
  prepareUse(dst, stream, true);
  if (src !== undefined) prepareUse(src, stream, false);
  return movesOnReload(dst) || movesOnReload(src);
}

function resolve(end: CopyEndpoint, what: string): Side {
  if (end instanceof Allocation) {
    // The address without a spillable buffer's `ptr` getter: the operation brings it back itself,
    // after its checks (`prepareSides`), and reads the address again where the memory moves.
    const ptr = addressOf(end); // UseAfterFreeError for a freed buffer
    const device = end instanceof DeviceMemory ? end.residentDevice : undefined;
    const context = end instanceof DeviceMemory && device !== undefined ? end.context : undefined;
    return { js: false, ptr, size: end.byteLength, device, context };
  }
  if (isHostData(end)) {
    const bytes = bytesOf(end);
    return { js: true, bytes, size: bytes.byteLength };
  }
  throw new TypeError(`${what} must be a buffer or JavaScript memory (TypedArray, Buffer, DataView, ArrayBuffer)`);
}

/**
 * Makes the right context current for a copy: the stream's (work queued on a stream runs in the
 * stream's context; under unified addressing the driver resolves either side's address there),
 * else that of the device memory on one side (its own context, for foreign memory), else any.
 */
function activate(stream: StreamRef | undefined, home: DeviceMemory | undefined, backend: Backend): void {
  if (stream instanceof Stream) stream.device.makeCurrent();
  else if (home !== undefined) home.makeCurrent();
  else ensureAnyContext(backend);
}

/** The backend of a copy: that of its vram buffer (the destination's when both are buffers). */
function backendOf(a: CopyEndpoint, b: CopyEndpoint): Backend {
  if (a instanceof Allocation) return a.backend;
  if (b instanceof Allocation) return b.backend;
  throw new TypeError('a copy needs a vram buffer on one side'); // callers check this first
}

function deviceOf(end: CopyEndpoint): Device | undefined {
  return end instanceof DeviceMemory ? end.device : undefined;
}

/** The device memory of a copy whose context a copy without a stream runs in: the destination's, else the source's. */
function homeOf(a: CopyEndpoint, b: CopyEndpoint): DeviceMemory | undefined {
  if (a instanceof DeviceMemory) return a;
  return b instanceof DeviceMemory ? b : undefined;
}

/** A checked linear copy: both sides resolved, offsets and length within them. */
interface PlannedCopy {
  readonly d: Side;
  readonly s: Side;
  readonly dstOffset: number;
  readonly srcOffset: number;
  readonly bytes: number;
  readonly backend: Backend;
  /** The device whose context the copy runs in (the stream's, else a side's); undefined: any. */
  readonly device: Device | undefined;
  /** The device memory whose context a copy without a stream runs in (see `homeOf`). */
  readonly home: DeviceMemory | undefined;
  /** The two sides as given, for recording the stream the copy is queued on. */
  readonly dst: CopyEndpoint;
  readonly src: CopyEndpoint;
}

/**
 * Checks a linear copy of `options.bytes` (default: the rest of the source) from `src` at
 * `srcOffset` to `dst` at `dstOffset` against both sides, before anything is copied.
 */
function planCopy(dst: CopyEndpoint, dstOffset: number, src: CopyEndpoint, srcOffset: number, options: CopyOptions, what: string): PlannedCopy {
  if (options.register !== undefined && typeof options.register !== 'boolean') {
    throw new TypeError(`${what}: register must be a boolean, got ${typeof options.register}`);
  }
  if (options.stream !== undefined) streamHandleOf(options.stream);
  const d = resolve(dst, `${what}: destination`);
  const s = resolve(src, `${what}: source`);
  checkNonNegativeInteger(dstOffset, `${what}: destination offset`);
  checkNonNegativeInteger(srcOffset, `${what}: source offset`);
  if (srcOffset > s.size) throw new RangeError(`${what}: source offset ${srcOffset} is past the end of the source (${s.size} bytes)`);
  if (dstOffset > d.size) throw new RangeError(`${what}: destination offset ${dstOffset} is past the end of the destination (${d.size} bytes)`);
  const bytes = options.bytes === undefined ? s.size - srcOffset : checkNonNegativeInteger(options.bytes, `${what}: bytes`);
  checkRange(srcOffset, bytes, s.size, `${what}: source`);
  checkRange(dstOffset, bytes, d.size, `${what}: destination`);
  if (d.js && s.js) throw new TypeError(`${what}: one side must be a vram buffer`);
  checkWritableMemory(dst, what);
  const stream = options.stream;
  const device = stream instanceof Stream ? stream.device : (deviceOf(dst) ?? deviceOf(src));
  return { d, s, dstOffset, srcOffset, bytes, backend: backendOf(dst, src), device, home: homeOf(dst, src), dst, src };
}

/**
 * The pageable copy `plan` describes when one side is JavaScript memory and the other device
 * memory (the transfer layer's job), else undefined.
 */
function pageable(plan: PlannedCopy, register: boolean | undefined): PageableCopy | undefined {
  const { d, s, device } = plan;
  if (device === undefined) return undefined;
  if (s.js && !d.js) {
    return {
      direction: 'to-device',
      device,
      devicePtr: d.ptr + plan.dstOffset,
      host: s.bytes.subarray(plan.srcOffset, plan.srcOffset + plan.bytes),
      options: { register },
    };
  }
  if (d.js && !s.js) {
    return {
      direction: 'from-device',
      device,
      devicePtr: s.ptr + plan.srcOffset,
      host: d.bytes.subarray(plan.dstOffset, plan.dstOffset + plan.bytes),
      options: { register },
    };
  }
  return undefined;
}

/**
 * Lets `device`, whose context runs a copy between devices, reach the other device's side of it:
 * the side's memory, when a virtual-memory pool of vram's handed it out (a PoolResource, the
 * `pool` and `adaptive` default allocators), is reachable only from the devices its mappings were
 * granted to, where memory from cuMemAlloc or CUDA's pools is copied by cuMemcpyPeer as it is.
 * The buffer's resource (a DeviceBuffer's) leads to the pool; other memory needs nothing.
 */
function reachFrom(device: Device, end: CopyEndpoint, ptr: Ptr, write: boolean): void {
  const resource = (end as { readonly resource?: unknown }).resource;
  if (resource instanceof MemoryResource) allowPeerCopy(resource, ptr, device, write);
}

/** Queues (or runs, without a stream) the copy between two vram buffers that `plan` describes. */
function issue(plan: PlannedCopy, stream: StreamRef | undefined): void {
  const { d, s, dstOffset, srcOffset, bytes, backend } = plan;
  if (d.js || s.js) throw new TypeError('issue: JavaScript memory goes through the transfer layer'); // callers route it
  const streamHandle = stream === undefined ? undefined : stream.handle;
  recordUse(stream, plan.dst, plan.src);
  const peer = d.device !== undefined && s.device !== undefined && d.device !== s.device;
  if (peer && plan.device !== undefined) {
    // Before `activate`: a grant makes the pool's device current.
    if (s.device !== plan.device) reachFrom(plan.device, plan.src, s.ptr + srcOffset, false);
    if (d.device !== plan.device) reachFrom(plan.device, plan.dst, d.ptr + dstOffset, true);
  }
  activate(stream, plan.home, backend);
  if (peer) {
    const dc = d.context ?? d.device.activeContext;
    const sc = s.context ?? s.device.activeContext;
    if (streamHandle === undefined) backend.memcpyPeer(d.ptr + dstOffset, dc, s.ptr + srcOffset, sc, bytes);
    else backend.memcpyPeerAsync(d.ptr + dstOffset, dc, s.ptr + srcOffset, sc, bytes, streamHandle);
  } else if (streamHandle === undefined) {
    backend.memcpy(d.ptr + dstOffset, s.ptr + srcOffset, bytes);
  } else {
    backend.memcpyAsync(d.ptr + dstOffset, s.ptr + srcOffset, bytes, streamHandle);
  }
}

/**
 * Copies `options.bytes` (default: the rest of the source) from `src` at `srcOffset` to `dst` at
 * `dstOffset`, checking both ranges; synchronous unless `options.stream` is given. JavaScript
 * memory and device memory go through the transfer layer (registered, direct or staged).
 */
export function copyBetween(dst: CopyEndpoint, dstOffset: number, src: CopyEndpoint, srcOffset: number, options: CopyOptions, what: string): void {
  let plan = planCopy(dst, dstOffset, src, srcOffset, options, what);
  const stream = options.stream;
  if (stream !== undefined && (plan.d.js || plan.s.js)) {
    throw new TypeError(
      `${what}: an asynchronous copy needs pinned host memory; JavaScript memory may be moved or ` +
        'collected while the copy runs. Use the Async form of the method (it stages JavaScript memory ' +
        'through pinned memory and resolves when done), copy through a HostBuffer, or omit the stream ' +
        'for a synchronous copy.',
    );
  }
  if (plan.bytes === 0) return;
  if (stream === undefined) {
    refuseDuringCapture(
      `${what}()`,
      plan.d.js || plan.s.js
        ? 'a synchronous copy to or from JavaScript memory waits on the host: copy through a HostBuffer on the capturing stream'
        : 'a synchronous copy (cuMemcpy) cannot be captured: pass the capturing stream',
    );
  }
  if (prepareSides(stream, dst, src)) plan = planCopy(dst, dstOffset, src, srcOffset, options, what);
  if (plan.d.js || plan.s.js) {
    // Memory of a context of its own (foreign memory) is copied by the driver in that context:
    // the transfer layer stages on the device's copy streams, in the device's active context.
    const copy = plan.home?.ownContext === true ? undefined : pageable(plan, options.register);
    if (copy !== undefined) {
      copyPageable(copy);
      return;
    }
    // JavaScript memory and pinned or managed memory with no device to stage for: the driver copies.
    activate(undefined, plan.home, plan.backend);
    const { d, s, dstOffset, srcOffset, bytes, backend } = plan;
    if (d.js && !s.js) backend.memcpyToHost(d.bytes.subarray(dstOffset, dstOffset + bytes), s.ptr + srcOffset, bytes);
    else if (s.js && !d.js) backend.memcpyFromHost(d.ptr + dstOffset, s.bytes.subarray(srcOffset, srcOffset + bytes), bytes);
    return;
  }
  try {
    issue(plan, stream);
  } catch (error) {
    throw captureError(error, `${what}()`);
  }
}

/**
 * The asynchronous form of `copyBetween`: queued on `options.stream` (default the legacy default
 * stream) after the work there, resolving once the data has arrived. JavaScript memory is staged
 * (or registered) by the transfer layer; the event loop is never blocked.
 */
export async function copyBetweenAsync(
  dst: CopyEndpoint,
  dstOffset: number,
  src: CopyEndpoint,
  srcOffset: number,
  options: CopyOptions,
  what: string,
): Promise<void> {
  let plan = planCopy(dst, dstOffset, src, srcOffset, options, what);
  const stream = options.stream ?? defaultStream;
  if (plan.bytes === 0) return;
  const handle = streamHandleOf(stream);
  if (captureSessionOf(handle) !== undefined) {
    throw new StreamCaptureError(
      `${what}()`,
      'an awaited copy waits for its data on the host, and the capturing stream runs nothing: ' +
        'queue the copy with the method that takes a stream (a HostBuffer for host memory), and await after launching the graph',
    );
  }
  if (plan.d.js || plan.s.js) refuseDuringCapture(`${what}()`, 'a copy of JavaScript memory is staged with host waits');
  if (prepareSides(stream, dst, src)) plan = planCopy(dst, dstOffset, src, srcOffset, options, what);
  const copy = pageable(plan, options.register);
  if (copy !== undefined) {
    // pageable() found JavaScript memory on one side, so the other is the buffer.
    const buffer = (dst instanceof Allocation ? dst : src) as Allocation;
    recordUse(stream, buffer);
    const done = holdMemory(buffer);
    try {
      await copyPageableAsync(copy, stream);
    } finally {
      done();
    }
    return;
  }
  if (plan.d.js || plan.s.js) {
    throw new TypeError(`${what}: an asynchronous copy of JavaScript memory needs device memory on the other side`);
  }
  issue(plan, stream);
  const device = plan.device ?? (stream instanceof Stream ? stream.device : Device.get(0));
  const done = Event.create({ device, timing: false });
  try {
    done.record(stream);
    await done.synchronized();
  } finally {
    done.destroy();
  }
}

/** Checks and normalises a memset pattern to the unsigned value of its width. */
export function memsetValue(value: unknown, elementBytes: 1 | 2 | 4): number {
  if (typeof value !== 'number') throw new TypeError(`memset value must be a number, got ${typeof value}`);
  const bits = elementBytes * 8;
  const min = -(2 ** (bits - 1));
  const max = 2 ** bits - 1;
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new RangeError(`memset value must be a whole number from ${min} to ${max} for ${elementBytes}-byte elements, got ${value}`);
  }
  return value < 0 ? value + 2 ** bits : value;
}

/** The memset behind DeviceMemory.memset: checks everything, then one (async) driver call. */
export function fill(target: DeviceMemory, value: number, options: MemsetOptions): void {
  options = readOptions(`${target.constructor.name}.memset`, options, { elementBytes: true, offset: true, count: true, stream: true });
  checkWritableMemory(target, 'memset');
  const elementBytes = options.elementBytes ?? 1;
  if (elementBytes !== 1 && elementBytes !== 2 && elementBytes !== 4) {
    throw new RangeError(`memset: elementBytes must be 1, 2 or 4, got ${String(elementBytes)}`);
  }
  const pattern = memsetValue(value, elementBytes);
  const stream = options.stream === undefined ? undefined : streamHandleOf(options.stream);
  const ptr = addressOf(target);
  const size = target.byteLength;
  const offset = checkNonNegativeInteger(options.offset ?? 0, 'memset offset');
  if (offset % elementBytes !== 0) {
    throw new RangeError(`memset: offset ${offset} must be a multiple of elementBytes (${elementBytes})`);
  }
  if (offset > size) throw new RangeError(`memset: offset ${offset} is past the end of the buffer (${size} bytes)`);
  let count: number;
  if (options.count === undefined) {
    if ((size - offset) % elementBytes !== 0) {
      throw new RangeError(`memset: ${size - offset} bytes from offset ${offset} are not whole ${elementBytes}-byte elements; pass count`);
    }
    count = (size - offset) / elementBytes;
  } else {
    count = checkNonNegativeInteger(options.count, 'memset count');
  }
  checkRange(offset, count * elementBytes, size, 'memset');
  if (count === 0) return;
  if (stream === undefined) refuseDuringCapture('memset()', 'a synchronous fill (cuMemset) cannot be captured: pass the capturing stream');
  const at = prepareSides(options.stream, target) ? addressOf(target) : ptr;
  recordUse(options.stream, target);
  if (options.stream instanceof Stream) options.stream.device.makeCurrent();
  else target.makeCurrent();
  const backend = target.backend;
  try {
    if (stream === undefined) backend.memset(at + offset, pattern, elementBytes, count);
    else backend.memsetAsync(at + offset, pattern, elementBytes, count, stream);
  } catch (error) {
    throw captureError(error, 'memset()');
  }
}

/** One side of a 2D copy: memory, the byte offset of the region's first row, and the row pitch. */
export interface Region2D {
  readonly memory: CopyEndpoint;
  readonly offset: number;
  readonly pitch: number;
}

/**
 * Copies a `widthBytes` x `height` region between pitched layouts, checking that each pitch is at
 * least `widthBytes` and that each region fits its memory. JavaScript memory only synchronously.
 */
export function copy2D(dst: Region2D, src: Region2D, widthBytes: number, height: number, stream: StreamRef | undefined, what: string): void {
  const streamHandle = stream === undefined ? undefined : streamHandleOf(stream);
  let d = resolve(dst.memory, `${what}: destination`);
  let s = resolve(src.memory, `${what}: source`);
  checkNonNegativeInteger(widthBytes, `${what}: widthBytes`);
  checkNonNegativeInteger(height, `${what}: height`);
  for (const [side, region, name] of [
    [d, dst, 'destination'],
    [s, src, 'source'],
  ] as const) {
    checkNonNegativeInteger(region.offset, `${what}: ${name} offset`);
    checkNonNegativeInteger(region.pitch, `${what}: ${name} pitch`);
    if (region.pitch < widthBytes) {
      throw new RangeError(`${what}: ${name} pitch ${region.pitch} is smaller than widthBytes ${widthBytes}`);
    }
    if (widthBytes > 0 && height > 0) {
      checkRange(region.offset, (height - 1) * region.pitch + widthBytes, side.size, `${what}: ${name}`);
    }
  }
  if (d.js && s.js) throw new TypeError(`${what}: one side must be a vram buffer`);
  checkWritableMemory(dst.memory, what);
  if (streamHandle !== undefined && (d.js || s.js)) {
    throw new TypeError(`${what}: an asynchronous 2D copy needs a HostBuffer (pinned memory), not JavaScript memory`);
  }
  if (widthBytes === 0 || height === 0) return;
  if (prepareSides(stream, dst.memory, src.memory)) {
    d = resolve(dst.memory, `${what}: destination`);
    s = resolve(src.memory, `${what}: source`);
  }
  recordUse(stream, dst.memory, src.memory);
  const backend = backendOf(dst.memory, src.memory);
  activate(stream, homeOf(dst.memory, src.memory), backend);
  // JavaScript memory is addressed for the duration of this synchronous call only.
  const dptr = d.js ? backend.addressOf(d.bytes) : d.ptr;
  const sptr = s.js ? backend.addressOf(s.bytes) : s.ptr;
  const copy = {
    dst: dptr + dst.offset,
    dstPitch: dst.pitch,
    src: sptr + src.offset,
    srcPitch: src.pitch,
    widthBytes,
    height,
  };
  if (streamHandle === undefined) backend.memcpy2D(copy);
  else backend.memcpy2DAsync(copy, streamHandle);
}
