/**
 * PinnedHostResource: page-locked host memory from cuMemHostAlloc, RMM's pinned_memory_resource.
 * The DMA engines read and write it directly, so copies to and from it run at the PCIe limit and
 * can be asynchronous; it is the host side of every fast transfer.
 */
import { HostAllocFlags, type Ptr } from '../backend/backend.js';
import { ensureAnyContext } from '../device.js';
import { getBackend } from '../backend/select.js';
import { checkBytes } from '../validate.js';
import { rethrowWithResource } from './cuda-resource.js';
import type { MemoryKind, MemoryResource, StreamRef } from './resource.js';

/**
 * The alignment vram promises for pinned host memory: 256 bytes, the figure RMM's
 * pinned_memory_resource relies on. The driver documents no alignment for cuMemHostAlloc beyond
 * "suitable for any type"; in practice it hands out page-aligned (4096-byte) memory, but only 256
 * is promised here so the contract holds on every backend.
 */
export const PINNED_HOST_ALIGNMENT = 256;

/** Options for pinned host memory (cuMemHostAlloc flags). */
export interface PinnedHostOptions {
  /** Pinned for every context, not only the one current at allocation (CU_MEMHOSTALLOC_PORTABLE). */
  readonly portable?: boolean;
  /** Also mapped into the device address space, for zero-copy access (CU_MEMHOSTALLOC_DEVICEMAP). */
  readonly mapped?: boolean;
  /**
   * Write-combined (CU_MEMHOSTALLOC_WRITECOMBINED): faster host-to-device transfers, but reading it
   * from the CPU is very slow (uncached). Only for buffers the host writes and never reads.
   */
  readonly writeCombined?: boolean;
}

/** The cuMemHostAlloc flags for `options`, checking their types. */
export function hostAllocFlags(options: PinnedHostOptions): number {
  let flags = 0;
  for (const [name, bit] of [['portable', HostAllocFlags.PORTABLE], ['mapped', HostAllocFlags.DEVICEMAP],
    ['writeCombined', HostAllocFlags.WRITECOMBINED]] as const) {
    const value = options[name];
    if (value === undefined) continue;
    if (typeof value !== 'boolean') throw new TypeError(`${name} must be a boolean, got ${typeof value}`);
    if (value) flags |= bit;
  }
  return flags;
}

/** Pinned host memory from cuMemHostAlloc; the stream argument is accepted and ignored. */
export class PinnedHostResource implements MemoryResource {
  /** Page-locked host memory. */
  readonly kind: MemoryKind = 'pinned-host';
  /** See `PINNED_HOST_ALIGNMENT`. */
  readonly alignment = PINNED_HOST_ALIGNMENT;
  /** Host memory belongs to no device. */
  readonly device = -1;
  /** The flags every allocation is made with. */
  readonly options: Readonly<Required<PinnedHostOptions>>;
  private readonly flags: number;

  /** A resource handing out pinned memory with these flags (none by default). */
  constructor(options: PinnedHostOptions = {}) {
    if (options === null || typeof options !== 'object') throw new TypeError('options must be an object');
    this.flags = hostAllocFlags(options);
    this.options = Object.freeze({
      portable: options.portable === true,
      mapped: options.mapped === true,
      writeCombined: options.writeCombined === true,
    });
  }

  /** cuMemHostAlloc; `stream` is ignored. */
  allocate(bytes: number, _stream?: StreamRef): Ptr {
    checkBytes(bytes);
    const backend = getBackend();
    ensureAnyContext(backend);
    try {
      return backend.memHostAlloc(bytes, this.flags);
    } catch (error) {
      rethrowWithResource(error, bytes, this);
    }
  }

  /** cuMemFreeHost. */
  deallocate(ptr: Ptr, _bytes: number, _stream?: StreamRef): void {
    const backend = getBackend();
    ensureAnyContext(backend);
    backend.memFreeHost(ptr);
  }

  /** Pinned memory from any PinnedHostResource may be freed through another (cuMemFreeHost). */
  isEqual(other: MemoryResource): boolean {
    return other instanceof PinnedHostResource;
  }

  /** Caches nothing. */
  releaseCached(): number {
    return 0;
  }

  /** `PinnedHostResource(mapped, portable)`. */
  describe(): string {
    const set = Object.entries(this.options).filter(([, v]) => v).map(([k]) => k);
    return `PinnedHostResource(${set.join(', ')})`;
  }
}
