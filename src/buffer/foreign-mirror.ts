/**
 * Foreign device memory tied to a host array (Accelerate's `LRU.insertUnmanaged` and its note on
 * dirty host data): vram knows which side is current and copies only when the side read is stale.
 * Note [Which side of a foreign mirror is current] in docs/design/foreign-mirror.md.
 */
import { StreamCaptureError, VramStateError } from '../errors.js';
import { captureSessionOf } from '../graphs/sessions.js';
import { readOptions } from '../util/options.js';
import type { StreamRef } from '../stream.js';
import { ForeignDeviceBuffer } from './foreign-device-buffer.js';
import { setResidency } from './spill/residency.js';

/** Which side holds the current data: both (in step), the device's, or the host array's. */
export type MirrorSide = 'both' | 'device' | 'host';

/** A host array a mirror ties to: a TypedArray or DataView of the buffer's size. */
export type MirrorHost = ArrayBufferView;

/** What the mirrors of a device hold and copied (`memoryStats().foreign`). */
export interface ForeignFigures {
  /** Live mirrors: not destroyed, their buffer not freed, not collected. */
  readonly mirrors: number;
  /** Their device bytes: foreign memory vram never frees or spills (its owner does). */
  readonly bytes: number;
  /** Copies from the host array to the device (the device side was stale when read). */
  readonly copiesToDevice: number;
  /** Copies from the device to the host array (the host side was stale when read). */
  readonly copiesToHost: number;
}

interface Copies {
  copiesToDevice: number;
  copiesToHost: number;
}
const copies = new Map<number, Copies>();

function countsOf(device: number): Copies {
  let c = copies.get(device);
  if (c === undefined) {
    c = { copiesToDevice: 0, copiesToHost: 0 };
    copies.set(device, c);
  }
  return c;
}

/**
 * The mirrors made and not known to be over: a mirror is live until `destroy()`, the free of its
 * buffer, or its collection (a program may drop one without `destroy()`), which the figures
 * read when they are asked for rather than count as they happen (no hook on either).
 */
const mirrors = new Set<WeakRef<ForeignMirror>>();
const collected = new FinalizationRegistry<WeakRef<ForeignMirror>>((ref) => mirrors.delete(ref));

/**
 * The figures of the device's mirrors (zeros where it has none).
 *
 * @param device The device ordinal.
 * @returns A copy of the figures.
 */
export function foreignFigures(device: number): ForeignFigures {
  let live = 0;
  let bytes = 0;
  for (const ref of mirrors) {
    const m = ref.deref();
    if (m === undefined || m.destroyed || m.buffer.freed) {
      mirrors.delete(ref);
      continue;
    }
    if (m.buffer.device.ordinal !== device) continue;
    live++;
    bytes += m.buffer.byteLength;
  }
  const c = copies.get(device);
  return { mirrors: live, bytes, copiesToDevice: c?.copiesToDevice ?? 0, copiesToHost: c?.copiesToHost ?? 0 };
}

/**
 * A foreign device buffer and a host array of its size, kept in step lazily. vram's copies, fills
 * and kernel launches that use the buffer first bring the device side up to date (a copy from the
 * host array when the host side was written since), and those that may write it mark the device
 * side current; `host()` brings the host array up to date (a copy from the device when the device
 * side was written since), and `host({ write: true })` marks the host side current, because
 * writes to a plain TypedArray cannot be seen. Neither side is vram's: `destroy()` unties them and
 * frees nothing; the buffer is never spilled.
 *
 * @example
 * ```ts
 * using mirror = ForeignMirror.tie(DeviceBuffer.fromPointer(ptr, n * 4), new Float32Array(n));
 * mirror.host({ write: true }).fill(1);  // the host side is current
 * scale(DeviceArray.fromBuffer(mirror.buffer, { dtype: 'float32' })); // copied to the device first, then device-current
 * mirror.host()[0];                      // copied back once: the device side was written
 * ```
 */
export class ForeignMirror<H extends MirrorHost = MirrorHost> {
  /** The foreign device memory. */
  readonly buffer: ForeignDeviceBuffer;
  readonly #host: H;
  #side: MirrorSide;
  #syncing = false;
  #destroyed = false;

  private constructor(buffer: ForeignDeviceBuffer, host: H, side: MirrorSide) {
    this.buffer = buffer;
    this.#host = host;
    this.#side = side;
  }

  /**
   * Ties `buffer` to `host`.
   *
   * @param buffer Foreign device memory (`DeviceBuffer.fromPointer`, `ForeignDeviceBuffer.wrap`).
   * @param host A TypedArray or DataView of `buffer.byteLength` bytes.
   * @param current Which side holds the data now (default `'device'`: the producer filled it).
   * @returns The mirror.
   * @throws {TypeError} For a buffer that is not foreign, a host that is not an ArrayBufferView, a bad side.
   * @throws {RangeError} When the sizes differ.
   * @throws {VramStateError} When the buffer is freed or already tied.
   * @example
   * ```ts
   * const mirror = ForeignMirror.tie(buf, new Float32Array(n), 'host');
   * ```
   */
  static tie<H extends MirrorHost>(buffer: ForeignDeviceBuffer, host: H, current: MirrorSide = 'device'): ForeignMirror<H> {
    if (!(buffer instanceof ForeignDeviceBuffer)) throw new TypeError('ForeignMirror.tie expects a ForeignDeviceBuffer (DeviceBuffer.fromPointer)');
    if (!ArrayBuffer.isView(host)) throw new TypeError('ForeignMirror.tie: host must be a TypedArray or DataView');
    if (current !== 'both' && current !== 'device' && current !== 'host')
      throw new TypeError(`current must be 'both', 'device' or 'host', got ${String(current)}`);
    if (host.byteLength !== buffer.byteLength)
      throw new RangeError(`ForeignMirror.tie: the host array has ${host.byteLength} bytes, the buffer ${buffer.byteLength}`);
    if (buffer.freed) throw new VramStateError('ForeignMirror.tie: the buffer was freed');
    if (tied.has(buffer)) throw new VramStateError('ForeignMirror.tie: the buffer is tied to a host array already');
    const mirror = new ForeignMirror(buffer, host, current);
    tied.add(buffer);
    setResidency(buffer, { prepare: (stream, writes) => mirror.#prepare(stream, writes), moves: false });
    const ref = new WeakRef<ForeignMirror>(mirror);
    mirrors.add(ref);
    collected.register(mirror, ref);
    return mirror;
  }

  /** Which side holds the current data. */
  get current(): MirrorSide {
    return this.#side;
  }

  /** True once `destroy()` untied the sides. */
  get destroyed(): boolean {
    return this.#destroyed;
  }

  /**
   * The host array, current: copied from the device first when the device side was written since.
   *
   * @param options `write: true` when the caller will write it (the host side becomes current).
   * @returns The host array given to `tie`.
   * @throws {VramStateError} When destroyed.
   * @example
   * ```ts
   * const values = mirror.host(); // the array given to tie, of its type
   * ```
   */
  host(options: { readonly write?: boolean } = {}): H {
    this.#check();
    const write = readOptions('ForeignMirror.host', options, { write: true }).write ?? false;
    if (typeof write !== 'boolean') throw new TypeError(`write must be a boolean, got ${typeof write}`);
    if (this.#side === 'device') {
      this.#sync(() => this.buffer.copyToHost(this.#host));
      countsOf(this.buffer.device.ordinal).copiesToHost++;
      this.#side = 'both';
    }
    // A read leaves a host side that is ahead of the device ahead: the device copy is still stale.
    if (write) this.#side = 'host';
    return this.#host;
  }

  /**
   * Unties the sides: the buffer and the host array stay their owners' (nothing is freed).
   *
   * @throws Never.
   * @example
   * ```ts
   * mirror.destroy();
   * ```
   */
  destroy(): void {
    if (this.#destroyed) return;
    this.#destroyed = true;
    tied.delete(this.buffer);
    setResidency(this.buffer, { prepare: () => undefined, moves: false });
  }

  [Symbol.dispose](): void {
    this.destroy();
  }

  /** Before a use of the buffer by vram: bring the device side up to date, note a write. */
  #prepare(stream: StreamRef | undefined, writes: boolean): void {
    if (this.#syncing || this.#destroyed) return;
    if (stream !== undefined && captureSessionOf(stream.handle) !== undefined) {
      throw new StreamCaptureError(
        "a use of a ForeignMirror's buffer",
        "a graph's launches would read and write it without the mirror seeing them (the host side would go stale " +
          'unnoticed): use the mirror outside graphs, or untie it (destroy()) and capture its buffer, which is then plain foreign memory',
      );
    }
    if (this.#side === 'host') {
      this.#sync(() => this.buffer.copyFromHost(this.#host));
      countsOf(this.buffer.device.ordinal).copiesToDevice++;
      this.#side = 'both';
    }
    if (writes) this.#side = 'device';
  }

  /** Runs a copy between the sides without it counting as a use of the buffer. */
  #sync(copy: () => void): void {
    this.#syncing = true;
    try {
      copy();
    } finally {
      this.#syncing = false;
    }
  }

  #check(): void {
    if (this.#destroyed) throw new VramStateError('the ForeignMirror was destroyed');
  }
}

const tied = new WeakSet<ForeignDeviceBuffer>();
