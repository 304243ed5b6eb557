/**
 * The emulated driver's host memory calls: pinned allocations, registration of JavaScript memory,
 * zero-copy views, and the stable addresses JavaScript memory gets for copies.
 */
import type { HostMemory, Ptr } from '../backend.js';
import { CUresult } from '../../errors.js';
import { PlainAllocation, type Allocation } from './allocation.js';
import { checkSize, fail, hex, invalidValue, outOfMemory } from './fail.js';
import { type EmulatedState, PageableBuffer } from './state.js';
import { EagerStore } from './store.js';
import { PoolState } from './pools.js';

/** Pinned host memory is page aligned. */
export const HOST_ALIGNMENT = 4096;

/** The memory a HostMemory argument covers, as a buffer range. */
export function hostBytes(memory: HostMemory): { buffer: ArrayBufferLike; byteOffset: number; byteLength: number } {
  if (ArrayBuffer.isView(memory)) return { buffer: memory.buffer, byteOffset: memory.byteOffset, byteLength: memory.byteLength };
  const buffer: unknown = memory;
  if (buffer instanceof ArrayBuffer || (typeof SharedArrayBuffer !== 'undefined' && buffer instanceof SharedArrayBuffer)) {
    return { buffer, byteOffset: 0, byteLength: buffer.byteLength };
  }
  throw new TypeError('host memory must be an ArrayBuffer or an ArrayBufferView');
}

/** A new host-backed store of `bytes`; a host that cannot back it is out of memory for `call`. */
export function eagerStore(bytes: number, call: string): EagerStore {
  let buffer: ArrayBuffer;
  try {
    buffer = new ArrayBuffer(bytes);
  } catch {
    return outOfMemory(bytes, call, 'the host cannot back it', 'host');
  }
  return new EagerStore(buffer, 0, bytes);
}

/** Pinned, registered and JavaScript host memory of one emulated driver. */
export class HostMemoryCalls {
  constructor(private readonly s: EmulatedState) {}

  /** cuMemHostAlloc: one real ArrayBuffer per allocation, 4 KiB aligned addresses. */
  memHostAlloc(bytes: number, flags: number): Ptr {
    const call = 'cuMemHostAlloc';
    checkSize(bytes, call);
    if (!Number.isInteger(flags) || (flags & ~0x7) !== 0) invalidValue(call, `unknown flags ${flags}`);
    const ctx = this.s.ctx(call);
    const store = eagerStore(bytes, call);
    const base = this.s.pinnedRange.take(bytes, HOST_ALIGNMENT, call);
    this.s.pinnedIndex.insert(new PlainAllocation('pinned', base, bytes, ctx.device.ordinal, ctx.handle, store, 0, flags));
    return base;
  }

  /** cuMemFreeHost: synchronises, then frees pinned memory allocated at exactly `ptr`. */
  memFreeHost(ptr: Ptr): void {
    this.s.settle('cuMemFreeHost', 'context');
    const a = this.s.pinnedIndex.find(ptr);
    if (a === undefined || a.base !== ptr) invalidValue('cuMemFreeHost', `${hex(ptr)} is not pinned host memory`);
    this.s.dropAllocation(this.s.pinnedIndex, a);
  }

  /** The same address (unified addressing) for memory pinned or registered with DEVICEMAP. */
  memHostGetDevicePointer(hostPtr: Ptr): Ptr {
    const call = 'cuMemHostGetDevicePointer';
    const a = this.s.pinnedRange.contains(hostPtr) ? this.s.pinnedIndex.find(hostPtr) : this.s.registeredIndex.find(hostPtr);
    if (a === undefined || (a.flags & 0x2) === 0) invalidValue(call, `${hex(hostPtr)} is not host memory mapped with DEVICEMAP`);
    return hostPtr;
  }

  /**
   * cuMemHostRegister: copies to and from the returned address then read and write the caller's
   * own bytes (zero-copy). Overlapping an existing registration is CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED.
   */
  memHostRegister(memory: HostMemory, flags: number): Ptr {
    const call = 'cuMemHostRegister';
    if (!Number.isInteger(flags) || (flags & ~0xf) !== 0) invalidValue(call, `unknown flags ${flags}`);
    const { buffer, byteOffset, byteLength } = hostBytes(memory);
    if (byteLength === 0) invalidValue(call, 'cannot register 0 bytes');
    const base = this.addressOf(memory);
    if (this.s.registeredIndex.findOverlap(base, byteLength) !== undefined) fail(CUresult.HOST_MEMORY_ALREADY_REGISTERED, call);
    const ctx = this.s.ctx(call);
    this.s.registeredIndex.insert(new RegisteredAllocation(base, byteLength, ctx.device.ordinal, ctx.handle, buffer, byteOffset, flags));
    return base;
  }

  /** cuMemHostUnregister: `hostPtr` must be the start of a registration. */
  memHostUnregister(hostPtr: Ptr): void {
    this.s.settle('cuMemHostUnregister', 'context');
    const a = this.s.registeredIndex.find(hostPtr);
    if (a === undefined || a.base !== hostPtr) fail(CUresult.HOST_MEMORY_NOT_REGISTERED, 'cuMemHostUnregister');
    this.s.registeredIndex.remove(a);
  }

  /**
   * The ArrayBuffer behind pinned, managed or registered memory, zero-copy. JavaScript cannot alias
   * part of an ArrayBuffer, so `hostPtr` must be the first byte of a backing buffer (a pinned or
   * managed allocation; for registered memory, the caller's ArrayBuffer) and the whole buffer is
   * returned, which may be longer than `bytes`: take views with `new Uint8Array(view, 0, bytes)`.
   * Any other address is CUDA_ERROR_NOT_SUPPORTED.
   */
  hostView(hostPtr: Ptr, bytes: number): ArrayBuffer {
    const call = 'hostView';
    const a = this.s.lookup(hostPtr);
    if (a instanceof PoolState && a.hostNuma !== undefined) {
      // A block of a pool in host NUMA memory: its own ArrayBuffer (pools.ts).
      const buffer = a.hostBuffer(hostPtr, bytes);
      if (buffer === undefined) invalidValue(call, `${hex(hostPtr)} does not start an allocation of its host memory pool, or the range extends past it`);
      return buffer;
    }
    if (a === undefined || a.store === undefined || a.store.kind !== 'eager') invalidValue(call, `${hex(hostPtr)} is not host-accessible memory`);
    const store = a.store;
    const offset = hostPtr - a.base;
    if (offset + bytes > a.size) invalidValue(call, 'the range extends past its allocation');
    if (store.byteOffset + offset !== 0 || !(store.buffer instanceof ArrayBuffer)) {
      fail(CUresult.NOT_SUPPORTED, call, 'the emulated backend can only view a backing ArrayBuffer from its first byte; view sub-ranges of that instead');
    }
    return store.buffer;
  }

  /**
   * A stable address for JavaScript memory: each ArrayBuffer gets a base address (held weakly) the
   * first time it is seen, and a view's address is that base plus its byteOffset. Copies may use it
   * (unified addressing copies pageable memory), registered or not.
   */
  addressOf(memory: HostMemory): Ptr {
    const { buffer, byteOffset } = hostBytes(memory);
    let entry = this.s.jsAddresses.get(buffer);
    if (entry === undefined) {
      const size = Math.max(buffer.byteLength, 1);
      entry = new PageableBuffer(this.s.jsRange.take(size, 64, 'addressOf'), size, new WeakRef(buffer));
      this.s.jsAddresses.set(buffer, entry);
      this.s.pageableIndex.insert(entry);
      this.s.pageableCleanup.register(buffer, entry);
    }
    return entry.base + byteOffset;
  }
}

/**
 * Registered JavaScript memory. As with the driver, registering does not keep the memory alive:
 * the registration holds it weakly, and once it is collected its bytes are gone (`store` is
 * undefined and copies through the address fail) until the registration is undone.
 */
class RegisteredAllocation implements Allocation {
  readonly kind = 'registered' as const;
  readonly charged = 0;
  live = true;
  private readonly memory: WeakRef<ArrayBufferLike>;

  constructor(
    readonly base: number,
    readonly size: number,
    readonly device: number,
    readonly context: number,
    buffer: ArrayBufferLike,
    private readonly byteOffset: number,
    readonly flags: number,
  ) {
    this.memory = new WeakRef(buffer);
  }

  /** The registered bytes, while the JavaScript memory lives. */
  get store(): EagerStore | undefined {
    const buffer = this.memory.deref();
    return buffer === undefined ? undefined : new EagerStore(buffer, this.byteOffset, this.size);
  }
}
