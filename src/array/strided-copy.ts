/**
 * Strided copies: moving the elements a layout selects between device memory and contiguous,
 * row-major host bytes (or another device layout). One plan per layout and direction, so every
 * array copy takes the cheapest exact path and says which:
 *
 * - `linear`: the elements are contiguous (or one row) -> one copy of `size * itemSize` bytes.
 * - `2d`: rows of contiguous elements a constant positive pitch apart (a pitched array, a column
 *   range `a.slice(null, [2, 10])`, every k-th element `a.slice([0, null, k])` as rows of one
 *   element) -> one 2D copy (cuMemcpy2D), which skips the padding. Pitches above the driver's
 *   CU_DEVICE_ATTRIBUTE_MAX_PITCH (2^31 - 1 bytes on every GPU so far) are split into one
 *   linear copy per row; the emulated backend has no such limit, only pitch >= width.
 * - `gather` (reads only): the covering byte range is copied with one linear copy and the
 *   elements are gathered on the host. Chosen when the range is at most 4 times the data (dense
 *   layouts: transposes, reversed or stepped slices), and for rows narrower than 64 bytes that
 *   dense, where one large DMA beats a 2D copy of tiny rows. Writes never take it: writing the
 *   range back would overwrite the bytes between the elements with stale values.
 * - `blocks`: everything else. The dimensions are put in canonical order (negative strides
 *   flipped, sorted by stride, merged where they can be), the host data is permuted into that
 *   order on the host, and the device side is moved as a series of 2D copies, one per index of
 *   the outer dimensions (a transpose so becomes one linear copy plus a host permutation).
 *   Exact for writes and, for sparse layouts, far less traffic than the covering range.
 *
 * Asynchronous copies come in two orders. From or to pinned memory (a HostArray, a HostBuffer)
 * every device copy is queued on the stream at call time, so work queued on the stream after the
 * call sees the data: `a.copyFromAsync(pinned, { stream }); a.toHostAsync({ stream })` reads it.
 * From or to ordinary JavaScript memory, a contiguous array goes through the transfer layer's
 * staged copy (`copyFromHostAsync`): pinned chunks filled by the copy threads while the previous
 * chunk's DMA runs, at the host's memory bandwidth and without blocking the event loop, which
 * means its chunks are queued as earlier ones complete: it is ordered after the work queued on
 * the stream before the call, and work that depends on it is queued after awaiting the promise.
 * A strided array to or from JavaScript memory is permuted on the calling thread into a pinned
 * staging buffer of the whole array and then queued at call time, as for pinned memory.
 * Either way the promise resolves when the copies have completed and any host-side gather is done.
 */
import type { Device } from '../device.js';
import { VramStateError } from '../errors.js';
import { DeviceMemory } from '../buffer/device-memory.js';
import { copy2D, copyBetween, type CopyEndpoint } from '../buffer/copy-planning.js';
import { HostBuffer } from '../buffer/host-buffer.js';
import { addressOf, Allocation } from '../buffer/lifetime.js';
import type { StreamRef } from '../stream.js';
import { Event, Stream } from '../stream.js';
import { byteSpan, coalesce, contiguousLayout, copyElements, isContiguous, isNonOverlapping, mayShareBytes, sameElements, type Layout } from './layout.js';
import { contiguousStrides, elementCount, formatShape } from './shape.js';

/** The largest row pitch the driver's 2D copies accept (CU_DEVICE_ATTRIBUTE_MAX_PITCH). */
export const MAX_COPY_PITCH = 2 ** 31 - 1;
/** Rows narrower than this read through the covering range when the layout is dense. */
const SMALL_ROW_BYTES = 64;
/** A read gathers from the covering range when it is at most this many times the data. */
const DENSE_FACTOR = 4;

/** Which of the documented paths a plan takes. */
export type CopyPath = 'empty' | 'linear' | '2d' | 'gather' | 'blocks';

/** One device-side copy: `height` rows of `widthBytes`, `pitch` apart on the device, packed on the host side. */
export interface CopyBlock {
  /** Byte offset of the first row in the device memory. */
  readonly device: number;
  /** Byte offset of the first row in the host (staging) bytes. */
  readonly host: number;
  readonly widthBytes: number;
  readonly height: number;
  /** Device-side row pitch in bytes. */
  readonly pitch: number;
}

/** How the elements of a layout move: the device copies, and the host-side arrangement. */
export interface CopyPlan {
  readonly path: CopyPath;
  readonly blocks: readonly CopyBlock[];
  /**
   * Where each element (by logical index) lies in the staging bytes the blocks fill or drain;
   * undefined when the blocks move the row-major data as it is (no staging needed).
   */
  readonly staging: Layout | undefined;
  /** Size of the staging bytes (0 without staging). */
  readonly stagingBytes: number;
}

/** Contiguous host bytes of a whole array, row-major: JavaScript memory, or part of a HostBuffer. */
export type HostBytes = Uint8Array | PinnedRegion;

/** `bytes` bytes of a HostBuffer from `offset`: a host side that asynchronous copies use directly. */
export interface PinnedRegion {
  readonly buffer: HostBuffer;
  readonly offset: number;
}

/** A 2D form of a layout as-is: rows of contiguous elements at a constant positive pitch. */
function rowsOf(layout: Layout): CopyBlock | undefined {
  const b = layout.itemSize;
  const { shape, strides } = coalesce(layout);
  const device = layout.byteOffset;
  if (shape.length === 0) return { device, host: 0, widthBytes: b, height: 1, pitch: b };
  if (shape.length === 1) {
    const n = shape[0]!;
    const s = strides[0]!;
    if (s === 1) return { device, host: 0, widthBytes: n * b, height: 1, pitch: n * b };
    if (s > 1) return { device, host: 0, widthBytes: b, height: n, pitch: s * b };
    return undefined;
  }
  if (shape.length === 2 && strides[1] === 1 && strides[0]! >= shape[1]!) {
    return { device, host: 0, widthBytes: shape[1]! * b, height: shape[0]!, pitch: strides[0]! * b };
  }
  return undefined;
}

function plan(path: CopyPath, blocks: readonly CopyBlock[], staging?: Layout, stagingBytes = 0): CopyPlan {
  return { path, blocks, staging, stagingBytes };
}

/**
 * The canonical plan: dimensions flipped to positive strides and sorted by stride (largest
 * first), the host data permuted into that order (`staging`), and one 2D copy per index of the
 * dimensions outside the last one or two.
 */
function blocksPlan(layout: Layout): CopyPlan {
  const { shape, strides, itemSize: b } = layout;
  const dims = shape
    .map((_, i) => i)
    .filter((i) => shape[i] !== 1)
    .sort((x, y) => Math.abs(strides[y]!) - Math.abs(strides[x]!));
  const cShape = dims.map((i) => shape[i]!);
  const cStrides = dims.map((i) => Math.abs(strides[i]!));
  let base = layout.byteOffset;
  for (const i of dims) if (strides[i]! < 0) base += (shape[i]! - 1) * strides[i]! * b;
  // Where the element of each logical index lands in the canonical (row-major, sorted) order.
  const packed = contiguousStrides(cShape);
  const stagingStrides = shape.map(() => 0);
  let stagingOffset = 0;
  dims.forEach((i, k) => {
    const flip = strides[i]! < 0;
    stagingStrides[i] = flip ? -packed[k]! : packed[k]!;
    if (flip) stagingOffset += (shape[i]! - 1) * packed[k]!;
  });
  const logical = contiguousStrides(shape);
  const identity = stagingOffset === 0 && shape.every((n, i) => n === 1 || stagingStrides[i] === logical[i]);
  const staging: Layout | undefined = identity ? undefined : { shape, strides: stagingStrides, byteOffset: stagingOffset * b, itemSize: b };
  const c = coalesce({ shape: cShape, strides: cStrides, byteOffset: base, itemSize: b });
  const m = c.shape.length;
  let block: { widthBytes: number; height: number; pitch: number };
  let outer: number;
  if (m === 0) {
    block = { widthBytes: b, height: 1, pitch: b };
    outer = 0;
  } else if (c.strides[m - 1] === 1) {
    block =
      m >= 2
        ? { widthBytes: c.shape[m - 1]! * b, height: c.shape[m - 2]!, pitch: c.strides[m - 2]! * b }
        : { widthBytes: c.shape[0]! * b, height: 1, pitch: c.shape[0]! * b };
    outer = Math.max(0, m - 2);
  } else {
    block = { widthBytes: b, height: c.shape[m - 1]!, pitch: c.strides[m - 1]! * b };
    outer = m - 1;
  }
  const blockBytes = block.widthBytes * block.height;
  const blocks: CopyBlock[] = [];
  const index = new Array<number>(outer).fill(0);
  let device = base;
  for (let host = 0; ; host += blockBytes) {
    blocks.push({ device, host, ...block });
    let axis = outer - 1;
    while (axis >= 0) {
      index[axis]!++;
      device += c.strides[axis]! * b;
      if (index[axis]! < c.shape[axis]!) break;
      device -= c.shape[axis]! * c.strides[axis]! * b;
      index[axis] = 0;
      axis--;
    }
    if (axis < 0) break;
  }
  return plan('blocks', blocks, staging, staging === undefined ? 0 : elementCount(shape) * b);
}

/**
 * How to read the elements of `layout` into row-major host bytes.
 *
 * @param layout A layout that fits its memory.
 * @returns The plan (see the module comment for the paths).
 * @throws Never.
 * @example
 * ```ts
 * planRead(a.slice(null, [0, 10]).layout).path; // '2d'
 * ```
 */
export function planRead(layout: Layout): CopyPlan {
  const count = elementCount(layout.shape);
  const b = layout.itemSize;
  if (count === 0) return plan('empty', []);
  if (isContiguous(layout)) {
    return plan('linear', [{ device: byteSpan(layout).start, host: 0, widthBytes: count * b, height: 1, pitch: count * b }]);
  }
  const span = byteSpan(layout);
  const dense = span.end - span.start <= DENSE_FACTOR * count * b;
  const rows = rowsOf(layout);
  if (rows !== undefined && !(dense && rows.widthBytes < SMALL_ROW_BYTES)) return plan('2d', [rows]);
  if (dense || !isNonOverlapping(layout)) {
    const bytes = span.end - span.start;
    return plan(
      'gather',
      [{ device: span.start, host: 0, widthBytes: bytes, height: 1, pitch: bytes }],
      { ...layout, byteOffset: layout.byteOffset - span.start },
      bytes,
    );
  }
  return blocksPlan(layout);
}

/**
 * How to write row-major host bytes into the elements of `layout`, touching no other byte.
 *
 * @param layout A layout that fits its memory.
 * @returns The plan (never `gather`).
 * @throws {VramStateError} When elements of the layout overlap (caller-given strides): which write wins would be undefined.
 * @example
 * ```ts
 * planWrite(a.T.layout).path; // 'blocks': a host transpose, then one linear copy
 * ```
 */
export function planWrite(layout: Layout): CopyPlan {
  const count = elementCount(layout.shape);
  if (count === 0) return plan('empty', []);
  if (isContiguous(layout)) return planRead(layout);
  if (!isNonOverlapping(layout)) {
    throw new VramStateError(
      `cannot write into shape ${formatShape(layout.shape)} with strides (${layout.strides.join(', ')}): ` +
        'its elements overlap, so which value lands would be undefined',
    );
  }
  const rows = rowsOf(layout);
  if (rows !== undefined) return plan('2d', [rows]);
  return blocksPlan(layout);
}

/** Runs the device copies of a plan between `device` and `host` (from byte `hostBase`). */
function runBlocks(
  device: CopyEndpoint,
  host: CopyEndpoint,
  hostBase: number,
  blocks: readonly CopyBlock[],
  toDevice: boolean,
  stream: StreamRef | undefined,
  what: string,
): void {
  const rows = (deviceOffset: number, hostOffset: number, widthBytes: number, height: number, pitch: number): void => {
    const d = { memory: device, offset: deviceOffset, pitch };
    const h = { memory: host, offset: hostBase + hostOffset, pitch: widthBytes };
    if (toDevice) copy2D(d, h, widthBytes, height, stream, what);
    else copy2D(h, d, widthBytes, height, stream, what);
  };
  // Mapped host memory (a HostArray's deviceView) and JavaScript memory: a one-row 2D copy, whose
  // unified-addressing form infers both sides' memory types (the linear form once handed a host
  // address to cuMemcpyHtoD/DtoH as if it were device memory; it is cuMemcpy now, which infers too).
  const hostToHost = device instanceof HostBuffer && !(host instanceof Allocation);
  const linear = (deviceOffset: number, hostOffset: number, bytes: number): void => {
    if (hostToHost) rows(deviceOffset, hostOffset, bytes, 1, bytes);
    else if (toDevice) copyBetween(device, deviceOffset, host, hostBase + hostOffset, { bytes, stream }, what);
    else copyBetween(host, hostBase + hostOffset, device, deviceOffset, { bytes, stream }, what);
  };
  for (const k of blocks) {
    if (k.height === 1 || k.pitch === k.widthBytes) {
      linear(k.device, k.host, k.widthBytes * k.height);
    } else if (k.pitch <= MAX_COPY_PITCH) {
      rows(k.device, k.host, k.widthBytes, k.height, k.pitch);
    } else {
      for (let r = 0; r < k.height; r++) linear(k.device + r * k.pitch, k.host + r * k.widthBytes, k.widthBytes);
    }
  }
}

/** The bytes of a host side (a view of the pinned memory for a PinnedRegion). */
function bytesOfHost(host: HostBytes, bytes: number): Uint8Array {
  if (host instanceof Uint8Array) return host;
  return host.buffer.view(Uint8Array, { byteOffset: host.offset, length: bytes });
}

/** The copy endpoint of a host side, and the byte its data starts at. */
function endpointOf(host: HostBytes): CopyEndpoint {
  return host instanceof Uint8Array ? host : host.buffer;
}

function baseOf(host: HostBytes): number {
  return host instanceof Uint8Array ? 0 : host.offset;
}

/**
 * The elements of a strided array over pinned memory as row-major bytes: the pinned region itself
 * when the array is contiguous (so asynchronous copies DMA straight from it), else a gathered copy.
 *
 * @param buffer The pinned memory.
 * @param layout The array's layout in it.
 * @returns The bytes.
 * @throws {UseAfterFreeError} When the buffer was freed.
 * @example
 * ```ts
 * writeElements(dev.buffer, dev.layout, pinnedSource(host.buffer, host.layout), 'copyFrom');
 * ```
 */
export function pinnedSource(buffer: HostBuffer, layout: Layout): HostBytes {
  if (isContiguous(layout)) return { buffer, offset: byteSpan(layout).start };
  const out = new Uint8Array(elementCount(layout.shape) * layout.itemSize);
  copyElements(out, contiguousLayout(layout.shape, layout.itemSize), buffer.view(), layout);
  return out;
}

/**
 * Where to put row-major bytes meant for a strided array over pinned memory: the pinned region
 * itself when contiguous, else a JavaScript buffer that `commit()` scatters into the array.
 *
 * @param buffer The pinned memory.
 * @param layout The array's layout in it.
 * @returns The bytes to fill, and the step that lands them.
 * @throws {UseAfterFreeError} When the buffer was freed (at commit for a strided array).
 * @example
 * ```ts
 * const sink = pinnedSink(host.buffer, host.layout);
 * readElements(dev.buffer, dev.layout, sink.bytes, 'copyTo');
 * sink.commit();
 * ```
 */
export function pinnedSink(buffer: HostBuffer, layout: Layout): { bytes: HostBytes; commit(): void } {
  if (isContiguous(layout)) return { bytes: { buffer, offset: byteSpan(layout).start }, commit: () => {} };
  const bytes = new Uint8Array(elementCount(layout.shape) * layout.itemSize);
  const commit = (): void => copyElements(buffer.view(), layout, bytes, contiguousLayout(layout.shape, layout.itemSize));
  return { bytes, commit };
}

function checkHostSize(host: HostBytes, bytes: number, what: string): void {
  const size = host instanceof Uint8Array ? host.byteLength : host.buffer.byteLength - host.offset;
  if (size < bytes) throw new RangeError(`${what}: the host side has ${size} bytes; the array needs ${bytes}`);
}

/**
 * Moves the elements between `memory` and row-major host bytes, either way, synchronously: the
 * plan's device copies, with the host-side permutation before (writes) or after (reads).
 */
function move(toDevice: boolean, memory: Allocation, layout: Layout, host: HostBytes, what: string): CopyPath {
  const p = toDevice ? planWrite(layout) : planRead(layout);
  const bytes = elementCount(layout.shape) * layout.itemSize;
  checkHostSize(host, bytes, what);
  if (p.staging === undefined) {
    runBlocks(memory, endpointOf(host), baseOf(host), p.blocks, toDevice, undefined, what);
    return p.path;
  }
  const staging = new Uint8Array(p.stagingBytes);
  const logical = contiguousLayout(layout.shape, layout.itemSize);
  if (toDevice) copyElements(staging, p.staging, bytesOfHost(host, bytes), logical);
  runBlocks(memory, staging, 0, p.blocks, toDevice, undefined, what);
  if (!toDevice) copyElements(bytesOfHost(host, bytes), logical, staging, p.staging);
  return p.path;
}

/**
 * Copies the elements `layout` selects in `memory` into `out`, row-major, synchronously.
 *
 * @param memory Device memory (or mapped host memory) the layout addresses.
 * @param layout The elements.
 * @param out At least `size * itemSize` bytes: JavaScript memory or a pinned region.
 * @param what Names the operation in errors.
 * @returns The path taken.
 * @throws {RangeError} When `out` is too small.
 * @throws {UseAfterFreeError} When `memory` was freed.
 * @example
 * ```ts
 * readElements(array.buffer, array.layout, new Uint8Array(array.nbytes), 'toHost');
 * ```
 */
export function readElements(memory: Allocation, layout: Layout, out: HostBytes, what: string): CopyPath {
  return move(false, memory, layout, out, what);
}

/**
 * Copies row-major bytes from `src` into the elements `layout` selects in `memory`, synchronously;
 * no other byte of `memory` is written.
 *
 * @param memory Device memory (or mapped host memory) the layout addresses.
 * @param layout The elements.
 * @param src At least `size * itemSize` bytes: JavaScript memory or a pinned region.
 * @param what Names the operation in errors.
 * @returns The path taken.
 * @throws {VramStateError} When the layout's elements overlap.
 * @throws {RangeError} When `src` is too small.
 * @throws {UseAfterFreeError} When `memory` was freed.
 * @example
 * ```ts
 * writeElements(array.buffer, array.layout, bytes, 'copyFrom');
 * ```
 */
export function writeElements(memory: Allocation, layout: Layout, src: HostBytes, what: string): CopyPath {
  return move(true, memory, layout, src, what);
}

/**
 * Resolves once the work queued on `stream` so far has completed, without blocking the event
 * loop (an event recorded now and polled).
 *
 * @param stream The stream.
 * @param device The device of a plain `{ handle }` stream reference (a Stream names its own).
 * @returns A promise that resolves when the work is done.
 * @throws {UseAfterFreeError} When the stream was destroyed (the promise rejects).
 * @example
 * ```ts
 * await streamDone(stream, array.device); // after queuing the copy's blocks on stream
 * ```
 */
export async function streamDone(stream: StreamRef, device: Device): Promise<void> {
  const event = Event.create({ device: stream instanceof Stream ? stream.device : device, timing: false });
  try {
    event.record(stream);
    await event.synchronized();
  } finally {
    event.destroy();
  }
}

/**
 * `move` on a stream: every device copy is queued before the first await, from or into pinned
 * memory (the caller's region when no permutation is needed, else a pinned staging buffer that
 * is filled first for writes and drained after the copies for reads).
 */
async function moveAsync(
  toDevice: boolean,
  memory: Allocation,
  layout: Layout,
  host: HostBytes,
  stream: StreamRef,
  device: Device,
  what: string,
): Promise<CopyPath> {
  const p = toDevice ? planWrite(layout) : planRead(layout);
  const bytes = elementCount(layout.shape) * layout.itemSize;
  checkHostSize(host, bytes, what);
  if (p.path === 'empty') return p.path;
  memory.recordStream(stream);
  const only = p.blocks.length === 1 ? p.blocks[0]! : undefined;
  if (p.path === 'linear' && only !== undefined && host instanceof Uint8Array && memory instanceof DeviceMemory) {
    // Contiguous, JavaScript memory: the staged pipeline (copy threads, the event loop free).
    const n = only.widthBytes * only.height;
    if (toDevice) await memory.copyFromHostAsync(host, { offset: only.device, srcOffset: only.host, bytes: n, stream });
    else await memory.copyToHostAsync(host, { offset: only.device, dstOffset: only.host, bytes: n, stream });
    return p.path;
  }
  if (p.staging === undefined && !(host instanceof Uint8Array)) {
    runBlocks(memory, host.buffer, host.offset, p.blocks, toDevice, stream, what);
    await streamDone(stream, device);
    return p.path;
  }
  const pinned = HostBuffer.allocate(p.staging === undefined ? bytes : p.stagingBytes);
  try {
    const staged = pinned.view();
    const logical = contiguousLayout(layout.shape, layout.itemSize);
    if (toDevice) {
      if (p.staging === undefined) staged.set(bytesOfHost(host, bytes).subarray(0, bytes));
      else copyElements(staged, p.staging, bytesOfHost(host, bytes), logical);
    }
    runBlocks(memory, pinned, 0, p.blocks, toDevice, stream, what);
    await streamDone(stream, device);
    if (!toDevice) {
      if (p.staging === undefined) bytesOfHost(host, bytes).set(staged.subarray(0, bytes));
      else copyElements(bytesOfHost(host, bytes), logical, staged, p.staging);
    }
  } finally {
    pinned.free();
  }
  return p.path;
}

/**
 * Queues the copies of `layout`'s elements into `out` on `stream`; the promise resolves once they
 * have arrived (and, where the plan needs it, been gathered on the host). The device copies are
 * queued before the call returns, in stream order.
 *
 * @param memory Device memory the layout addresses.
 * @param layout The elements.
 * @param out Host bytes: a PinnedRegion is written directly by the DMA when no gather is needed;
 *   JavaScript memory goes through a pinned staging buffer.
 * @param stream The stream.
 * @param device The device whose context waits for the stream (the memory's).
 * @param what Names the operation in errors.
 * @returns The path taken, once done.
 * @throws {UseAfterFreeError} When `memory` was freed (before anything is queued).
 * @example
 * ```ts
 * await readElementsAsync(array.buffer, array.layout, out, stream, array.device, 'toHostAsync');
 * ```
 */
export function readElementsAsync(memory: Allocation, layout: Layout, out: HostBytes, stream: StreamRef, device: Device, what: string): Promise<CopyPath> {
  return moveAsync(false, memory, layout, out, stream, device, what);
}

/**
 * Queues the copies of row-major `src` into `layout`'s elements on `stream`; the promise resolves
 * once they have completed. JavaScript memory is copied into pinned staging before the call
 * returns, so `src` may be changed as soon as it has.
 *
 * @param memory Device memory the layout addresses.
 * @param layout The elements.
 * @param src Host bytes: a PinnedRegion is read directly by the DMA when no permutation is needed.
 * @param stream The stream.
 * @param device The device whose context waits for the stream.
 * @param what Names the operation in errors.
 * @returns The path taken, once done.
 * @throws {VramStateError} When the layout's elements overlap.
 * @throws {UseAfterFreeError} When `memory` was freed.
 * @example
 * ```ts
 * await writeElementsAsync(array.buffer, array.layout, bytes, stream, array.device, 'copyFromAsync');
 * ```
 */
export function writeElementsAsync(memory: Allocation, layout: Layout, src: HostBytes, stream: StreamRef, device: Device, what: string): Promise<CopyPath> {
  return moveAsync(true, memory, layout, src, stream, device, what);
}

/**
 * A device-to-device copy between two layouts of the same shape, when it can be done with device
 * copies alone: both contiguous (one copy), one side contiguous and the other's plan needing no
 * host permutation (its linear, 2D or block copies run device to device), or both 2D with the same
 * rows. Returns false, copying nothing, when it cannot, or when the two sides may share bytes
 * (then the caller stages through the host: the whole source is read before anything is written).
 * The same elements on both sides need no copy at all.
 *
 * @param dst Destination memory and layout.
 * @param dstLayout The destination elements.
 * @param src Source memory.
 * @param srcLayout The source elements.
 * @param stream The stream, or undefined for a synchronous copy.
 * @param what Names the operation in errors.
 * @returns True when the copy was done (or queued).
 * @throws {VramStateError} When the destination's elements overlap.
 * @throws {UseAfterFreeError} When either memory was freed.
 * @example
 * ```ts
 * const queued = copyOnDevice(b.buffer, b.layout, a.buffer, a.layout, undefined, 'copyTo'); // false: copy another way
 * ```
 */
export function copyOnDevice(dst: Allocation, dstLayout: Layout, src: Allocation, srcLayout: Layout, stream: StreamRef | undefined, what: string): boolean {
  if (elementCount(dstLayout.shape) === 0) return true;
  // Not `ptr`: on spillable memory that getter reloads it and counts a write (the copy prepares its sides).
  const dstPtr = addressOf(dst);
  const srcPtr = addressOf(src);
  if (sameElements(dstLayout, dstPtr, srcLayout, srcPtr)) return true;
  // A device copy between bytes it also reads (a shifted or reversed view of one array) is
  // undefined for the driver and order-dependent row by row: staged through the host, the
  // destination gets the source as it was, as NumPy's assignment does.
  if (mayShareBytes(dstLayout, dstPtr, srcLayout, srcPtr)) return false;
  if (isContiguous(srcLayout)) {
    const p = planWrite(dstLayout);
    if (p.staging !== undefined) return false;
    runBlocks(dst, src, byteSpan(srcLayout).start, p.blocks, true, stream, what);
    return true;
  }
  if (isContiguous(dstLayout)) {
    const p = planRead(srcLayout);
    if (p.staging !== undefined) return false;
    runBlocks(src, dst, byteSpan(dstLayout).start, p.blocks, false, stream, what);
    return true;
  }
  const d = rowsOf(dstLayout);
  const s = rowsOf(srcLayout);
  if (d === undefined || s === undefined || d.widthBytes !== s.widthBytes || d.height !== s.height) return false;
  if (d.pitch > MAX_COPY_PITCH || s.pitch > MAX_COPY_PITCH || !isNonOverlapping(dstLayout)) return false;
  copy2D({ memory: dst, offset: d.device, pitch: d.pitch }, { memory: src, offset: s.device, pitch: s.pitch }, d.widthBytes, d.height, stream, what);
  return true;
}
