/**
 * ManagedResource: unified (managed) memory from cuMemAllocManaged, addressable from the host and
 * every device, migrated by the driver on demand. RMM's managed_memory_resource.
 */
import { MemAttach, type Ptr } from '../../backend/backend.js';
import { Device } from '../../device.js';
import { NotSupportedError } from '../../errors.js';
import { DEVICE_ALIGNMENT, memFree } from './cuda-resource.js';
import { DriverResource } from './driver-resource.js';
import { readOptions } from '../../util/options.js';

/** Where managed memory is first attached: every stream (`global`) or the host (`host`). */
export type ManagedAttach = 'global' | 'host';

/** Options of a ManagedResource. */
export interface ManagedResourceOptions {
  /** The device whose context allocates (device 0 by default). */
  readonly device?: Device | number;
  /** CU_MEM_ATTACH_GLOBAL (default) or CU_MEM_ATTACH_HOST. */
  readonly attach?: ManagedAttach;
}

/**
 * Managed memory, one cuMemAllocManaged per block; frees are checked against the live table.
 *
 * @example
 * ```ts
 * using mr = new ManagedResource({ attach: 'global' });
 * const p = mr.allocate(4096);
 * mr.deallocate(p, 4096);
 * ```
 */
export class ManagedResource extends DriverResource {
  /** Managed memory. */
  readonly kind = 'managed';
  /** 256 bytes, as for cuMemAlloc. */
  readonly alignment = DEVICE_ALIGNMENT;
  /** The attach mode of every allocation. */
  readonly attach: ManagedAttach;

  /**
   * @param options The device and attach mode.
   * @throws {RangeError} For an unknown attach mode.
   * @throws {NotSupportedError} When the device has no managed memory.
   * @example
   * ```ts
   * const unified = new ManagedResource({ device: 0, attach: 'global' }); // memory both the host and the GPU read
   * ```
   */
  constructor(options: ManagedResourceOptions = {}) {
    options = readOptions('new ManagedResource', options, { device: true, attach: true });
    super(Device.resolve(options.device));
    const attach = options.attach ?? 'global';
    if (attach !== 'global' && attach !== 'host') {
      throw new RangeError(`attach must be 'global' or 'host', got '${String(attach)}'`);
    }
    this.attach = attach;
    if (!this.owner.info.managedMemory) {
      throw new NotSupportedError(`device ${this.deviceOrdinal} does not support managed memory`);
    }
    const owner = this.owner;
    this.guardLive((ptr) => memFree(owner, ptr));
  }

  /** `ManagedResource(device=0, attach=global)`. */
  describe(): string {
    return `ManagedResource(device=${this.deviceOrdinal}, attach=${this.attach})`;
  }

  protected driverAllocate(bytes: number): Ptr {
    this.owner.makeCurrent();
    return this.backend.memAllocManaged(bytes, this.attach === 'global' ? MemAttach.GLOBAL : MemAttach.HOST);
  }

  protected driverFree(ptr: Ptr): void {
    memFree(this.owner, ptr);
  }
}
