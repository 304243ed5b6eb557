/**
 * HostBuffer: pinned (page-locked) host memory, the fast and the only asynchronous path between
 * JavaScript and the GPU. Either allocated pinned (cuMemHostAlloc, through a PinnedHostResource)
 * or existing JavaScript memory pinned in place (cuMemHostRegister). `view()` gives zero-copy
 * TypedArrays over it.
 *
 * Write-combined memory (`writeCombined: true`) is not cached by the CPU: host-to-device transfers
 * from it can be faster, but READING it from JavaScript is very slow (every read goes over the
 * bus). Use it only for buffers the host fills and the GPU reads; `view()` of one warns once per
 * process (warning code VRAM_WRITE_COMBINED_READ).
 *
 * Views keep the buffer alive: while a view is reachable, the garbage-collection backstop does not
 * free the memory under it. An explicit `free()` does: views must not be used after it (they would
 * read and write memory that was unmapped, a crash, or handed to another buffer).
 *
 * A buffer from a stream-ordered resource (a PinnedHostPool) is freed on its stream, so the pool
 * reuses it only once the copies queued on that stream have read or written it.
 */
import { HostRegisterFlags, type Ptr } from '../backend/backend.js';
import { Device, ensureAnyContext } from '../device.js';
import { VramStateError } from '../errors.js';
import { streamHandleOf } from '../stream.js';
import { checkBytes, checkNonNegativeInteger, readBytes, type ByteSize } from '../validate.js';
import { readOptions } from '../util/options.js';
import { bytesOf, isHostData, type HostData } from './copy-planning.js';
import { Allocation, type Release } from './lifetime.js';
import { forgetRegistration } from './transfer/transfers.js';
import { hostAllocFlags, PinnedHostResource, type PinnedHostOptions } from '../resource/upstream/pinned-host-resource.js';
import type { MemoryResource } from '../resource/resource.js';
import type { StreamRef } from '../stream.js';

/** A TypedArray class that `view()` can build over pinned memory. */
export interface TypedArrayConstructor<T extends ArrayBufferView> {
  new (buffer: ArrayBuffer, byteOffset?: number, length?: number): T;
  readonly BYTES_PER_ELEMENT: number;
}

/** Options for `HostBuffer.allocate`. */
export interface HostBufferOptions extends PinnedHostOptions {
  /** A pinned-host resource to allocate from instead (then leave the flags out: they are its own). */
  readonly resource?: MemoryResource;
  /**
   * The stream the buffer is allocated on and freed on (`deallocate(ptr, bytes, stream)`): a
   * caching resource such as PinnedHostPool then reuses it only after the work queued on that
   * stream when it was freed (the async copies reading or writing it) has completed. Default: no
   * stream, which tells the resource the memory is free for reuse at once.
   */
  readonly stream?: StreamRef;
}

/** Options for `HostBuffer.register` (cuMemHostRegister flags). */
export interface HostRegisterOptions {
  /** Pinned for every context (CU_MEMHOSTREGISTER_PORTABLE). */
  readonly portable?: boolean;
  /** Also mapped into the device address space (CU_MEMHOSTREGISTER_DEVICEMAP). */
  readonly mapped?: boolean;
  /**
   * The memory is lent for reading only (CU_MEMHOSTREGISTER_READ_ONLY): the device only reads it,
   * and vram's copies, fills and operations refuse to write into it (`readOnly`). The program's
   * own writes through `view()` or the JavaScript memory itself are its business.
   */
  readonly readOnly?: boolean;
}

/** Options for `view()`. */
export interface ViewOptions {
  /** Byte offset of the view (a multiple of the element size). Default 0. */
  readonly byteOffset?: number;
  /** Elements in the view. Default: as many whole elements as fit after byteOffset. */
  readonly length?: number;
}

/**
 * Checks `view()`'s arguments against a buffer of `byteLength` bytes and resolves the defaults, so
 * every host-accessible buffer rejects the same bad views with the same errors.
 */
export function viewRange(byteLength: number, Type: TypedArrayConstructor<ArrayBufferView>, options: ViewOptions): { byteOffset: number; length: number } {
  if (typeof Type !== 'function' || typeof Type.BYTES_PER_ELEMENT !== 'number') {
    throw new TypeError('view expects a TypedArray class, e.g. Float32Array');
  }
  const size = Type.BYTES_PER_ELEMENT;
  const byteOffset = checkNonNegativeInteger(options.byteOffset ?? 0, 'byteOffset');
  if (byteOffset % size !== 0) throw new RangeError(`byteOffset ${byteOffset} must be a multiple of ${size}`);
  if (byteOffset > byteLength) throw new RangeError(`byteOffset ${byteOffset} is past the end (${byteLength} bytes)`);
  const maxLength = Math.floor((byteLength - byteOffset) / size);
  const length = options.length === undefined ? maxLength : checkNonNegativeInteger(options.length, 'length');
  if (length > maxLength) {
    throw new RangeError(`a view of ${length} elements at byte ${byteOffset} exceeds the buffer's ${byteLength} bytes`);
  }
  return { byteOffset, length };
}

const defaultResources = new Map<number, PinnedHostResource>();
let warnedWriteCombined = false;

/**
 * Pinned host memory owned by the program; free it with `free()` (registered memory too: that
 * unpins it), or `using`.
 * @example
 * ```ts
 * using pinned = HostBuffer.allocate(4096);
 * pinned.view(Float32Array).fill(1);
 * buf.copyFromHost(pinned, { stream });
 * ```
 */
export class HostBuffer extends Allocation {
  /** The resource it came from; undefined for registered JavaScript memory. */
  readonly resource: MemoryResource | undefined;
  /** True when the device can address it directly (`devicePtr`). */
  readonly mapped: boolean;
  /** True when pinned for every context. */
  readonly portable: boolean;
  /** True for write-combined memory (slow to read from the CPU). */
  readonly writeCombined: boolean;
  /** The JavaScript memory pinned in place, for registered buffers. */
  readonly registered: Uint8Array | undefined;
  /**
   * The stream it was allocated on and is freed on unless `free({ stream })` names another;
   * undefined when allocated on no stream (and for registered memory).
   */
  readonly stream: StreamRef | undefined;
  readonly #readOnly: boolean;
  #cachedDevicePtr: Ptr | undefined;

  private constructor(
    ptr: Ptr,
    bytes: number,
    release: Release,
    stream: StreamRef | undefined,
    flags: {
      resource?: MemoryResource;
      mapped: boolean;
      portable: boolean;
      writeCombined: boolean;
      registered?: Uint8Array;
      readOnly?: boolean;
    },
  ) {
    // Host memory belongs to no device; device 0's context is the one host calls use
    // (ensureAnyContext), and its backend the one the memory was allocated through.
    // Registered memory is unpinned by a host call, not in stream order.
    super(ptr, bytes, release, Device.get(0), stream, flags.registered === undefined);
    this.stream = stream;
    this.resource = flags.resource;
    this.mapped = flags.mapped;
    this.portable = flags.portable;
    this.writeCombined = flags.writeCombined;
    this.registered = flags.registered;
    this.#readOnly = flags.readOnly === true;
  }

  /**
   * True for JavaScript memory registered with `{ readOnly: true }`: copies into it (from the
   * device, or into a HostArray over it), and built-in operations writing an array over its mapped
   * address, are refused with VramStateError before anything is written.
   *
   * @returns Whether vram refuses to write into the memory.
   * @example
   * ```ts
   * using h = HostBuffer.register(weights, { readOnly: true, mapped: true });
   * h.readOnly; // true: dev.copyToHost(h) throws VramStateError
   * ```
   */
  override get readOnly(): boolean {
    return this.#readOnly;
  }

  /**
   * Allocates `size` bytes of pinned memory: cuMemHostAlloc with the given flags, or from
   * `options.resource` (a PinnedHostResource or PinnedHostPool) on `options.stream`.
   *
   * @param size Bytes: a whole number, or a size like `'512M'` (binary units, as the CLI reads them).
   * @param options Flags, or a resource; the stream it is allocated and freed on.
   * @returns The buffer; free it with `free()` or `using`.
   * @throws {TypeError | RangeError} For a bad size, flag, resource or stream.
   * @throws {UseAfterFreeError} When `options.stream` was destroyed.
   * @throws {OutOfMemoryError} When no pinned memory is left.
   * @example
   * ```ts
   * const staging = new PinnedHostPool();
   * using h = HostBuffer.allocate(1 << 20, { resource: staging, stream });
   * dev.copyFromHost(h, { stream }); // the pool reuses h only after this copy has read it
   * ```
   */
  static allocate(size: ByteSize, options: HostBufferOptions = {}): HostBuffer {
    const bytes = readBytes(size, 'bytes');
    options = readOptions('HostBuffer.allocate', options, { device: true, portable: true, mapped: true, writeCombined: true, resource: true, stream: true });
    const stream = options.stream;
    if (stream !== undefined) streamHandleOf(stream); // TypeError, or UseAfterFreeError for a destroyed Stream
    let resource: MemoryResource;
    let flags: Readonly<Required<Omit<PinnedHostOptions, 'device'>>>;
    if (options.resource !== undefined) {
      resource = options.resource;
      if (resource === null || typeof resource !== 'object' || resource.kind !== 'pinned-host') {
        throw new TypeError('resource must be a MemoryResource of pinned host memory');
      }
      if (options.portable !== undefined || options.mapped !== undefined || options.writeCombined !== undefined) {
        throw new TypeError('give either a resource or pinned-memory flags, not both');
      }
      flags = resource instanceof PinnedHostResource ? resource.options : { portable: false, mapped: false, writeCombined: false };
    } else {
      const bits = hostAllocFlags(options);
      let pinned = defaultResources.get(bits);
      if (pinned === undefined) {
        pinned = new PinnedHostResource({ device: options.device, portable: options.portable, mapped: options.mapped, writeCombined: options.writeCombined });
        defaultResources.set(bits, pinned);
      }
      resource = pinned;
      flags = pinned.options;
    }
    const ptr = resource.allocate(bytes, stream);
    const mr = resource;
    // Freed on the stream free() resolves (the allocation stream by default), so a caching pool
    // does not hand the memory out while a copy queued on that stream may still read it.
    return new HostBuffer(ptr, bytes, (on) => mr.deallocate(ptr, bytes, on), stream, { resource: mr, ...flags });
  }

  /**
   * Pins existing JavaScript memory in place (cuMemHostRegister) so copies to and from it are
   * DMA-fast and may be asynchronous. The buffer keeps the memory alive until `free()` unpins it.
   * @throws {TypeError} When `memory` is not JavaScript memory, or an option is unknown or not a boolean.
   * @throws {RangeError} When the memory is empty or too large.
   * @throws {CudaError} When the driver refuses to pin it (already registered elsewhere, say).
   * @example
   * ```ts
   * const data = new Float32Array(1 << 20);
   * using pinned = HostBuffer.register(data);
   * await buf.copyToHostAsync(data, { stream });
   * ```
   */
  static register(memory: HostData, options: HostRegisterOptions = {}): HostBuffer {
    if (!isHostData(memory)) throw new TypeError('register expects an ArrayBuffer, TypedArray, Buffer or DataView');
    options = readOptions('HostBuffer.register', options, { portable: true, mapped: true, readOnly: true });
    const bytes = bytesOf(memory);
    checkBytes(bytes.byteLength, 'memory.byteLength');
    let flags = 0;
    for (const [name, bit] of [
      ['portable', HostRegisterFlags.PORTABLE],
      ['mapped', HostRegisterFlags.DEVICEMAP],
      ['readOnly', HostRegisterFlags.READ_ONLY],
    ] as const) {
      const value = options[name];
      if (value === undefined) continue;
      if (typeof value !== 'boolean') throw new TypeError(`${name} must be a boolean, got ${typeof value}`);
      if (value) flags |= bit;
    }
    const backend = Device.get(0).backend;
    ensureAnyContext(backend);
    // The driver registers memory once: undo the transfer layer's registration of it, if any.
    forgetRegistration(backend, bytes);
    const ptr = backend.memHostRegister(bytes, flags);
    // The closure keeps the JavaScript memory alive until it is unregistered, even by the backstop.
    const release = (): void => {
      ensureAnyContext(backend);
      backend.memHostUnregister(ptr);
      void bytes.byteLength;
    };
    return new HostBuffer(ptr, bytes.byteLength, release, undefined, {
      mapped: options.mapped === true,
      portable: options.portable === true,
      writeCombined: false,
      registered: bytes,
      readOnly: options.readOnly === true,
    });
  }

  /** The device address of mapped memory, for kernels and copies that read it in place (zero-copy). */
  get devicePtr(): Ptr {
    const ptr = this.ptr;
    if (!this.mapped) {
      throw new VramStateError('devicePtr needs a mapped HostBuffer: allocate or register it with { mapped: true }');
    }
    if (this.#cachedDevicePtr === undefined) {
      const backend = this.backend;
      ensureAnyContext(backend);
      this.#cachedDevicePtr = backend.memHostGetDevicePointer(ptr);
    }
    return this.#cachedDevicePtr;
  }

  /**
   * A zero-copy TypedArray (Uint8Array by default) over the pinned memory. Reading
   * write-combined memory this way is very slow (warned once per process).
   *
   * The view keeps this buffer alive: the garbage-collection backstop never frees the memory
   * while a view (or its ArrayBuffer) is reachable, even if the buffer object itself is not.
   * An explicit `free()` (or the end of a `using` scope) does free it; using a view after that is
   * the caller's error and is not detected: the memory may be unmapped (the process crashes) or
   * already handed to another buffer (its data is read or overwritten).
   *
   * @param Type The TypedArray class (Uint8Array by default).
   * @param options `byteOffset` (a multiple of the element size) and `length` in elements.
   * @returns The view.
   * @throws {UseAfterFreeError} When the buffer was freed.
   * @throws {TypeError | RangeError} For a bad type, offset or length.
   * @example
   * ```ts
   * using h = HostBuffer.allocate(4096);
   * h.view(Float32Array).fill(1.5);
   * ```
   */
  view<T extends ArrayBufferView = Uint8Array>(
    Type: TypedArrayConstructor<T> = Uint8Array as unknown as TypedArrayConstructor<T>,
    options: ViewOptions = {},
  ): T {
    this.checkLive();
    const { byteOffset, length } = viewRange(this.byteLength, Type, readOptions('HostBuffer.view', options, { byteOffset: true, length: true }));
    if (this.writeCombined && !warnedWriteCombined) {
      warnedWriteCombined = true;
      process.emitWarning(
        'A view of write-combined pinned memory: reading it from the CPU is very slow (uncached). ' +
          'Write-combined memory is for buffers the host only writes.',
        { code: 'VRAM_WRITE_COMBINED_READ', type: 'PerformanceWarning' },
      );
    }
    if (this.registered !== undefined) {
      const r = this.registered;
      return new Type(r.buffer as ArrayBuffer, r.byteOffset + byteOffset, length);
    }
    return this.hostView(Type, byteOffset, length);
  }

  /**
   * A short description for logs; a freed buffer still describes itself.
   *
   * @returns `HostBuffer(4096 bytes, pinned, mapped)`: registered or pinned, then its flags, with `, freed` once freed.
   * @throws Never.
   * @example
   * ```ts
   * using host = HostBuffer.allocate(4096, { mapped: true });
   * String(host); // 'HostBuffer(4096 bytes, pinned, mapped)'
   * ```
   */
  override toString(): string {
    const flags = [
      this.registered ? 'registered' : 'pinned',
      this.mapped ? 'mapped' : '',
      this.portable ? 'portable' : '',
      this.writeCombined ? 'write-combined' : '',
      this.readOnly ? 'read-only' : '',
    ]
      .filter(Boolean)
      .join(', ');
    return `HostBuffer(${this.byteLength} bytes, ${flags}${this.freed ? ', freed' : ''})`;
  }
}
