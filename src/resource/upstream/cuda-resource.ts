/**
 * CudaResource: device memory straight from the driver (cuMemAlloc / cuMemFree), RMM's
 * cuda_memory_resource. Every allocation is a driver call (microseconds to tens of microseconds),
 * so it is the upstream that pools sit on, not what hot loops should allocate from.
 */
import type { Ptr } from '../../backend/backend.js';
import { Device } from '../../device.js';
import { DriverResource } from './driver-resource.js';

/** cuMemAlloc guarantees 256-byte alignment (CUDA programming guide, "Device Memory"). */
export const DEVICE_ALIGNMENT = 256;

/**
 * Device memory from cuMemAlloc. Allocation is synchronous, so the memory is usable on every
 * stream at once and the stream argument only names where it is first used; cuMemFree waits for
 * work using the memory to finish (it synchronises the device), so any stream may free it.
 * Only the same resource may free its memory: it checks every free against its live table.
 *
 * @example
 * ```ts
 * using mr = new CudaResource(Device.get(0));
 * const p = mr.allocate(1 << 20);
 * mr.deallocate(p, 1 << 20);
 * ```
 */
export class CudaResource extends DriverResource {
  /** Plain device memory. */
  readonly kind = 'device';
  /** 256 bytes, what cuMemAlloc guarantees. */
  readonly alignment = DEVICE_ALIGNMENT;

  /**
   * @param device The device (device 0 by default).
   * @throws {TypeError} For something that is not a Device or an ordinal.
   * @example
   * ```ts
   * const direct = new CudaResource(1); // cuMemAlloc and cuMemFree on device 1, nothing cached
   * ```
   */
  constructor(device?: Device | number) {
    super(Device.resolve(device));
    const owner = this.owner;
    this.guardLive((ptr) => memFree(owner, ptr));
  }

  /** `CudaResource(device=0)`. */
  describe(): string {
    return `CudaResource(device=${this.deviceOrdinal})`;
  }

  protected driverAllocate(bytes: number): Ptr {
    this.owner.makeCurrent();
    return this.backend.memAlloc(bytes);
  }

  protected driverFree(ptr: Ptr): void {
    memFree(this.owner, ptr);
  }
}

/** cuMemFree in `owner`'s context (device and managed memory alike). */
export function memFree(owner: Device, ptr: Ptr): void {
  owner.makeCurrent();
  owner.backend.memFree(ptr);
}
