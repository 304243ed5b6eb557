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
 * Views are valid only until the buffer is freed: a view used afterwards reads freed memory.
 */
import { HostRegisterFlags, type Ptr } from '../backend/backend.js';
import { getBackend } from '../backend/select.js';
import { ensureAnyContext } from '../device.js';
import { VramStateError } from '../errors.js';
import { checkBytes, checkNonNegativeInteger } from '../validate.js';
import { bytesOf, isHostData, type HostData } from './copy.js';
import { Allocation } from './lifetime.js';
import { hostAllocFlags, PinnedHostResource, type PinnedHostOptions } from './pinned-host-resource.js';
import type { MemoryResource } from './resource.js';

/** A TypedArray class that `view()` can build over pinned memory. */
export interface TypedArrayConstructor<T extends ArrayBufferView> {
  new (buffer: ArrayBuffer, byteOffset?: number, length?: number): T;
  readonly BYTES_PER_ELEMENT: number;
}

/** Options for `HostBuffer.allocate`. */
export interface HostBufferOptions extends PinnedHostOptions {
  /** A pinned-host resource to allocate from instead (then leave the flags out: they are its own). */
  readonly resource?: MemoryResource;
}

/** Options for `HostBuffer.register` (cuMemHostRegister flags). */
export interface HostRegisterOptions {
  /** Pinned for every context (CU_MEMHOSTREGISTER_PORTABLE). */
  readonly portable?: boolean;
  /** Also mapped into the device address space (CU_MEMHOSTREGISTER_DEVICEMAP). */
  readonly mapped?: boolean;
  /** The device only reads it (CU_MEMHOSTREGISTER_READ_ONLY). */
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
export function viewRange(
  byteLength: number,
  Type: TypedArrayConstructor<ArrayBufferView>,
  options: ViewOptions,
): { byteOffset: number; length: number } {
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

/** Pinned host memory owned by the program; free it with `free()` (or `unregister()`), or `using`. */
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
  private cachedDevicePtr: Ptr | undefined;
  private cachedView: ArrayBuffer | undefined;

  private constructor(
    ptr: Ptr, bytes: number, release: () => void,
    flags: { resource?: MemoryResource; mapped: boolean; portable: boolean; writeCombined: boolean; registered?: Uint8Array },
  ) {
    super(ptr, bytes, release);
    this.resource = flags.resource;
    this.mapped = flags.mapped;
    this.portable = flags.portable;
    this.writeCombined = flags.writeCombined;
    this.registered = flags.registered;
  }

  /** Allocates `bytes` of pinned memory (cuMemHostAlloc with the given flags). */
  static allocate(bytes: number, options: HostBufferOptions = {}): HostBuffer {
    checkBytes(bytes);
    if (options === null || typeof options !== 'object') throw new TypeError('options must be an object');
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
      flags = resource instanceof PinnedHostResource
        ? resource.options : { portable: false, mapped: false, writeCombined: false };
    } else {
      const bits = hostAllocFlags(options);
      let pinned = defaultResources.get(bits);
      if (pinned === undefined) {
        pinned = new PinnedHostResource(options);
        defaultResources.set(bits, pinned);
      }
      resource = pinned;
      flags = pinned.options;
    }
    const ptr = resource.allocate(bytes);
    const mr = resource;
    return new HostBuffer(ptr, bytes, () => mr.deallocate(ptr, bytes), { resource: mr, ...flags });
  }

  /**
   * Pins existing JavaScript memory in place (cuMemHostRegister) so copies to and from it are
   * DMA-fast and may be asynchronous. The buffer keeps the memory alive until `unregister()`.
   */
  static register(memory: HostData, options: HostRegisterOptions = {}): HostBuffer {
    if (!isHostData(memory)) throw new TypeError('register expects an ArrayBuffer, TypedArray, Buffer or DataView');
    if (options === null || typeof options !== 'object') throw new TypeError('options must be an object');
    const bytes = bytesOf(memory);
    checkBytes(bytes.byteLength, 'memory.byteLength');
    let flags = 0;
    for (const [name, bit] of [['portable', HostRegisterFlags.PORTABLE], ['mapped', HostRegisterFlags.DEVICEMAP],
      ['readOnly', HostRegisterFlags.READ_ONLY]] as const) {
      const value = options[name];
      if (value === undefined) continue;
      if (typeof value !== 'boolean') throw new TypeError(`${name} must be a boolean, got ${typeof value}`);
      if (value) flags |= bit;
    }
    const backend = getBackend();
    ensureAnyContext(backend);
    const ptr = backend.memHostRegister(bytes, flags);
    // The closure keeps the JavaScript memory alive until it is unregistered, even by the backstop.
    const release = (): void => {
      ensureAnyContext(backend);
      backend.memHostUnregister(ptr);
      void bytes.byteLength;
    };
    return new HostBuffer(ptr, bytes.byteLength, release, {
      mapped: options.mapped === true, portable: options.portable === true, writeCombined: false, registered: bytes,
    });
  }

  /** Unpins registered memory (the same as `free()`); for allocated buffers use `free()`. */
  unregister(): void {
    if (this.registered === undefined) {
      throw new VramStateError('unregister() is for HostBuffer.register buffers; this one was allocated: use free()');
    }
    this.free();
  }

  /** The device address of mapped memory, for kernels and copies that read it in place (zero-copy). */
  get devicePtr(): Ptr {
    const ptr = this.ptr;
    if (!this.mapped) {
      throw new VramStateError('devicePtr needs a mapped HostBuffer: allocate or register it with { mapped: true }');
    }
    if (this.cachedDevicePtr === undefined) {
      const backend = getBackend();
      ensureAnyContext(backend);
      this.cachedDevicePtr = backend.memHostGetDevicePointer(ptr);
    }
    return this.cachedDevicePtr;
  }

  /**
   * A zero-copy TypedArray (Uint8Array by default) over the pinned memory. Valid until the buffer
   * is freed. Reading write-combined memory this way is very slow (warned once per process).
   */
  view<T extends ArrayBufferView = Uint8Array>(
    Type: TypedArrayConstructor<T> = Uint8Array as unknown as TypedArrayConstructor<T>,
    options: ViewOptions = {},
  ): T {
    const ptr = this.ptr;
    const { byteOffset, length } = viewRange(this.byteLength, Type, options);
    if (this.writeCombined && !warnedWriteCombined) {
      warnedWriteCombined = true;
      process.emitWarning(
        'A view of write-combined pinned memory: reading it from the CPU is very slow (uncached). ' +
        'Write-combined memory is for buffers the host only writes.',
        { code: 'VRAM_WRITE_COMBINED_READ', type: 'PerformanceWarning' });
    }
    if (this.registered !== undefined) {
      const r = this.registered;
      return new Type(r.buffer as ArrayBuffer, r.byteOffset + byteOffset, length);
    }
    this.cachedView ??= getBackend().hostView(ptr, this.byteLength);
    return new Type(this.cachedView, byteOffset, length);
  }

  /** `HostBuffer(4096 bytes, mapped)`. */
  override toString(): string {
    const flags = [this.registered ? 'registered' : 'pinned', this.mapped ? 'mapped' : '', this.portable ? 'portable' : '',
      this.writeCombined ? 'write-combined' : ''].filter(Boolean).join(', ');
    return `HostBuffer(${this.byteLength} bytes, ${flags}${this.isFreed ? ', freed' : ''})`;
  }

  /** Drops the cached view with the memory. */
  override free(): void {
    super.free();
    this.cachedView = undefined;
  }
}
