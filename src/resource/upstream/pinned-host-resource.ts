/**
 * PinnedHostResource: page-locked host memory from cuMemHostAlloc, RMM's pinned_memory_resource.
 * The DMA engines read and write it directly, so copies to and from it run at the PCIe limit and
 * can be asynchronous; it is the host side of every fast transfer.
 */
import { HostAllocFlags, type Backend, type Ptr } from '../../backend/backend.js';
import { Device, ensureAnyContext } from '../../device.js';
import { DriverResource } from './driver-resource.js';
import { readOptions } from '../../util/options.js';

/**
 * The alignment vram promises for pinned host memory: 256 bytes, the figure RMM's
 * pinned_memory_resource relies on. The driver documents no alignment for cuMemHostAlloc beyond
 * "suitable for any type"; in practice it hands out page-aligned (4096-byte) memory, but only 256
 * is promised here so the contract holds on every backend.
 */
export const PINNED_HOST_ALIGNMENT = 256;

/** Options for pinned host memory (cuMemHostAlloc flags). */
export interface PinnedHostOptions {
  /** The device whose backend (and, when none is current, whose context) pins it; device 0 by default. */
  readonly device?: Device | number;
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
  for (const [name, bit] of [
    ['portable', HostAllocFlags.PORTABLE],
    ['mapped', HostAllocFlags.DEVICEMAP],
    ['writeCombined', HostAllocFlags.WRITECOMBINED],
  ] as const) {
    const value = options[name];
    if (value === undefined) continue;
    if (typeof value !== 'boolean') throw new TypeError(`${name} must be a boolean, got ${typeof value}`);
    if (value) flags |= bit;
  }
  return flags;
}

/**
 * Pinned host memory from cuMemHostAlloc, one call per block; frees (cuMemFreeHost) are checked
 * against the live table. Allocation and free are synchronous, so the stream argument only names
 * where the memory is first used.
 *
 * @example
 * ```ts
 * using mr = new PinnedHostResource({ mapped: true });
 * const p = mr.allocate(4096);
 * mr.deallocate(p, 4096);
 * ```
 */
export class PinnedHostResource extends DriverResource {
  /** Page-locked host memory. */
  readonly kind = 'pinned-host';
  /** See `PINNED_HOST_ALIGNMENT`. */
  readonly alignment = PINNED_HOST_ALIGNMENT;
  /**
   * Host memory belongs to no device: -1.
   *
   * @throws Never.
   * @example
   * ```ts
   * new PinnedHostResource().deviceOrdinal; // -1
   * ```
   */
  override get deviceOrdinal(): number {
    return -1;
  }
  /** The flags every allocation is made with. */
  readonly options: Readonly<Required<Omit<PinnedHostOptions, 'device'>>>;
  private readonly flags: number;

  /**
   * @param options The cuMemHostAlloc flags (none by default) and the device whose backend pins.
   * @throws {TypeError} For flags that are not booleans.
   * @example
   * ```ts
   * const mapped = new PinnedHostResource({ mapped: true, portable: true }); // visible to every context, and to kernels
   * ```
   */
  constructor(options: PinnedHostOptions = {}) {
    options = readOptions('new PinnedHostResource', options, { device: true, portable: true, mapped: true, writeCombined: true });
    super(Device.resolve(options.device));
    this.flags = hostAllocFlags(options);
    this.options = Object.freeze({
      portable: options.portable === true,
      mapped: options.mapped === true,
      writeCombined: options.writeCombined === true,
    });
    const backend = this.backend;
    this.guardLive((ptr) => memFreeHost(backend, ptr));
  }

  /** `PinnedHostResource(mapped, portable)`. */
  describe(): string {
    const set = Object.entries(this.options)
      .filter(([, v]) => v)
      .map(([k]) => k);
    return `PinnedHostResource(${set.join(', ')})`;
  }

  protected driverAllocate(bytes: number): Ptr {
    ensureAnyContext(this.backend);
    return this.backend.memHostAlloc(bytes, this.flags);
  }

  protected driverFree(ptr: Ptr): void {
    memFreeHost(this.backend, ptr);
  }
}

/** cuMemFreeHost, in any context of `backend`. */
function memFreeHost(backend: Backend, ptr: Ptr): void {
  ensureAnyContext(backend);
  backend.memFreeHost(ptr);
}
