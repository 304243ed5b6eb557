/**
 * ManagedBuffer: unified memory one address serves on the host and every device; the driver
 * migrates pages on demand. `prefetch` moves it ahead of use and `advise` tells the driver how it
 * will be used, which is what makes managed memory fast instead of fault-bound.
 *
 * Host access through `view()` is safe while no device work touches the memory, or at any time on
 * devices with `concurrentManagedAccess`; on others, touching it while a kernel runs faults.
 * Views keep the buffer alive (the backstop never frees memory under a reachable view); an
 * explicit `free()` does not wait for them, and a view used afterwards is the caller's error.
 */
import { MemAdvice, type MemLocation, type Ptr } from '../backend/backend.js';
import { Device } from '../device.js';
import { streamHandleOf } from '../stream.js';
import { checkNonNegativeInteger, readBytes, type ByteSize } from '../validate.js';
import { readOptions } from '../util/options.js';
import { DeviceMemory } from './device-memory.js';
import type { Release } from './lifetime.js';
import { type TypedArrayConstructor, type ViewOptions, viewRange } from './host-buffer.js';
import { ManagedResource, type ManagedAttach } from '../resource/upstream/managed-resource.js';
import { type MemoryResource } from '../resource/resource.js';
import { defaultStream, type StreamRef } from '../stream.js';

/** Options for `ManagedBuffer.allocate`. */
export interface ManagedBufferOptions {
  /** CU_MEM_ATTACH_GLOBAL (default: any stream may use it) or CU_MEM_ATTACH_HOST. */
  readonly attach?: ManagedAttach;
  /** The device whose context allocates (device 0 by default). */
  readonly device?: Device | number;
  /** A managed resource to allocate from instead (then leave `attach` out). */
  readonly resource?: MemoryResource;
  /** The stream it is allocated and freed on; default the legacy default stream. */
  readonly stream?: StreamRef;
}

/** How the memory will be used, for `advise`. */
export type ManagedAdvice = 'read-mostly' | 'preferred-location' | 'accessed-by';

const defaultResources = new Map<string, ManagedResource>();

function toLocation(location: Device | 'host', what: string): MemLocation {
  if (location === 'host') return 'host';
  if (location instanceof Device) return location.ordinal;
  throw new TypeError(`${what}: location must be a Device or 'host'`);
}

/**
 * Managed memory owned by the program; free it with `free()`, or declare it with `using`.
 * @example
 * ```ts
 * using m = ManagedBuffer.allocate(1 << 20);
 * m.prefetch(Device.get(0), stream);
 * ```
 */
export class ManagedBuffer extends DeviceMemory {
  /** The device whose context allocated it (and runs its copies). */
  readonly device: Device;
  /** The resource it was allocated from and is returned to. */
  readonly resource: MemoryResource;
  /** The stream it was allocated on, and is freed on unless `free({ stream })` names another. */
  readonly stream: StreamRef;

  private constructor(ptr: Ptr, bytes: number, resource: MemoryResource, stream: StreamRef, release: Release) {
    const device = Device.get(resource.deviceOrdinal);
    super(ptr, bytes, release, device, stream);
    this.resource = resource;
    this.stream = stream;
    this.device = device;
  }

  /**
   * Allocates `bytes` of managed memory (cuMemAllocManaged).
   * @throws {TypeError} When `bytes` or an option is of the wrong type, an option is unknown, or `resource` and `attach` are both given.
   * @throws {RangeError} When `bytes` is out of range.
   * @throws {OutOfMemoryError} When there is no managed memory for it.
   * @example
   * ```ts
   * using m = ManagedBuffer.allocate(1 << 20, { attach: 'host' });
   * ```
   */
  static allocate(size: ByteSize, options: ManagedBufferOptions = {}): ManagedBuffer {
    const bytes = readBytes(size, 'bytes');
    options = readOptions('ManagedBuffer.allocate', options, { attach: true, device: true, resource: true, stream: true });
    let resource: MemoryResource;
    if (options.resource !== undefined) {
      resource = options.resource;
      if (resource === null || typeof resource !== 'object' || resource.kind !== 'managed') {
        throw new TypeError('resource must be a MemoryResource of managed memory');
      }
      if (options.attach !== undefined) throw new TypeError('give either a resource or attach, not both');
    } else {
      const device = Device.resolve(options.device);
      const attach = options.attach ?? 'global';
      const key = `${device.ordinal}:${String(attach)}`;
      let managed = defaultResources.get(key);
      if (managed === undefined) {
        managed = new ManagedResource({ device, attach });
        defaultResources.set(key, managed);
      }
      resource = managed;
    }
    const stream = options.stream ?? defaultStream;
    streamHandleOf(stream);
    const ptr = resource.allocate(bytes, stream);
    const mr = resource;
    return new ManagedBuffer(ptr, bytes, mr, stream, (on) => mr.deallocate(ptr, bytes, on));
  }

  /** Managed memory is reachable from every device: copies never need the peer path. */
  get residentDevice(): undefined {
    return undefined;
  }

  /**
   * Migrates the memory (or `bytes` of it from `offset`) to `location` ahead of use, on `stream`
   * (asynchronous; the default stream when omitted).
   * @throws {TypeError} When `location` is neither a Device nor 'host', or `stream` has no handle.
   * @throws {RangeError} When the range is outside the buffer.
   * @throws {UseAfterFreeError} When this buffer was freed.
   * @example
   * ```ts
   * m.prefetch('host', stream);
   * ```
   */
  prefetch(location: Device | 'host', stream?: StreamRef, range: { offset?: number; bytes?: number } = {}): void {
    const ptr = this.ptr;
    const loc = toLocation(location, 'prefetch');
    const s = streamHandleOf(stream);
    const { offset, bytes } = this.range(range, 'prefetch');
    if (bytes === 0) return;
    (location instanceof Device ? location : this.device).makeCurrent();
    this.backend.memPrefetchAsync(ptr + offset, bytes, loc, s);
  }

  /**
   * Tells the driver how the memory will be used: 'read-mostly' (replicate read-only copies; no
   * location needed), 'preferred-location' (keep pages at `location`), 'accessed-by' (map it for
   * `location` to avoid faults). `unset` withdraws the advice.
   * @throws {TypeError} When `advice`, `location` or `unset` is not one of its values.
   * @throws {UseAfterFreeError} When this buffer was freed.
   * @example
   * ```ts
   * m.advise('read-mostly');
   * m.advise('preferred-location', Device.get(0));
   * ```
   */
  advise(advice: ManagedAdvice, location?: Device | 'host', unset = false): void {
    const ptr = this.ptr;
    if (typeof unset !== 'boolean') throw new TypeError('unset must be a boolean');
    let code: number;
    switch (advice) {
      case 'read-mostly':
        code = unset ? MemAdvice.UNSET_READ_MOSTLY : MemAdvice.SET_READ_MOSTLY;
        break;
      case 'preferred-location':
        code = unset ? MemAdvice.UNSET_PREFERRED_LOCATION : MemAdvice.SET_PREFERRED_LOCATION;
        break;
      case 'accessed-by':
        code = unset ? MemAdvice.UNSET_ACCESSED_BY : MemAdvice.SET_ACCESSED_BY;
        break;
      default:
        throw new RangeError(`advice must be 'read-mostly', 'preferred-location' or 'accessed-by', got '${String(advice)}'`);
    }
    let loc: MemLocation;
    if (location === undefined) {
      if (advice !== 'read-mostly') throw new TypeError(`advise('${advice}') needs a location: a Device or 'host'`);
      loc = this.device.ordinal;
    } else {
      loc = toLocation(location, 'advise');
    }
    this.device.makeCurrent();
    this.backend.memAdvise(ptr, this.byteLength, code, loc);
  }

  /**
   * A zero-copy TypedArray (Uint8Array by default) over the memory, for host access; see the
   * class note on concurrent access.
   *
   * The view keeps this buffer alive: the garbage-collection backstop never frees the memory
   * while a view (or its ArrayBuffer) is reachable. An explicit `free()` does free it; using a
   * view after that is the caller's error and is not detected: the memory may be unmapped (the
   * process crashes) or already handed to another buffer (its data is read or overwritten).
   *
   * @param Type The TypedArray class (Uint8Array by default).
   * @param options `byteOffset` (a multiple of the element size) and `length` in elements.
   * @returns The view.
   * @throws {UseAfterFreeError} When the buffer was freed.
   * @throws {TypeError | RangeError} For a bad type, offset or length.
   * @example
   * ```ts
   * using m = ManagedBuffer.allocate(4096);
   * m.view(Uint32Array).fill(7);
   * ```
   */
  view<T extends ArrayBufferView = Uint8Array>(
    Type: TypedArrayConstructor<T> = Uint8Array as unknown as TypedArrayConstructor<T>,
    options: ViewOptions = {},
  ): T {
    this.checkLive();
    const { byteOffset, length } = viewRange(this.byteLength, Type, readOptions('ManagedBuffer.view', options, { byteOffset: true, length: true }));
    return this.hostView(Type, byteOffset, length);
  }

  /**
   * A short description for logs; a freed buffer still describes itself.
   *
   * @returns `ManagedBuffer(1024 bytes)`, with `, freed` once freed.
   * @throws Never.
   * @example
   * ```ts
   * using m = ManagedBuffer.allocate(1024);
   * String(m); // 'ManagedBuffer(1024 bytes)'
   * ```
   */
  override toString(): string {
    return `ManagedBuffer(${this.byteLength} bytes${this.freed ? ', freed' : ''})`;
  }

  private range(range: { offset?: number; bytes?: number }, what: string): { offset: number; bytes: number } {
    range = readOptions(`ManagedBuffer.${what}`, range, { offset: true, bytes: true }, 'range');
    const offset = checkNonNegativeInteger(range.offset ?? 0, `${what} offset`);
    if (offset > this.byteLength) throw new RangeError(`${what}: offset ${offset} is past the end (${this.byteLength} bytes)`);
    const bytes = range.bytes === undefined ? this.byteLength - offset : checkNonNegativeInteger(range.bytes, `${what} bytes`);
    if (offset + bytes > this.byteLength) {
      throw new RangeError(`${what}: range [${offset}, ${offset + bytes}) exceeds the buffer's ${this.byteLength} bytes`);
    }
    return { offset, bytes };
  }
}
