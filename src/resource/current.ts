/**
 * The current memory resource of each device: what buffers and arrays allocate from when the
 * caller names no resource, as RMM's per-device resource. Until the program sets another, it is
 * the default resource the environment chooses (`default-resource.ts`): a caching CUDA memory pool
 * unless `VRAM_ALLOCATOR` says otherwise, capped by `VRAM_MEMORY_LIMIT`/`VRAM_MEMORY_FRACTION`.
 */
import { Device } from '../device.js';
import { createDefaultResource } from './default-resource.js';
import type { MemoryResource } from './resource.js';

const current = new Map<Device, MemoryResource>();

/**
 * The resource buffers on `device` allocate from when none is named. On a device's first use it
 * is made from the environment (`VRAM_ALLOCATOR`, `VRAM_MEMORY_LIMIT`, `VRAM_MEMORY_FRACTION`), so
 * a bad value is reported here, by the first allocation that needs it.
 *
 * @param device The device (device 0 by default).
 * @returns Its current resource.
 * @throws {RangeError} When an environment variable of the default resource is bad.
 * @throws {NotSupportedError} When `VRAM_ALLOCATOR` names an allocator the device cannot run.
 * @example
 * ```ts
 * getCurrentResource().describe(); // 'AsyncResource(device=0, pool=created)'
 * ```
 */
export function getCurrentResource(device?: Device | number): MemoryResource {
  const dev = Device.resolve(device);
  let mr = current.get(dev);
  if (mr === undefined) {
    mr = createDefaultResource(dev);
    current.set(dev, mr);
  }
  return mr;
}

/**
 * The current resource of `device` when one was made or set, without making the default one: for
 * code that looks at memory (a snapshot at an out-of-memory error) and must not allocate any.
 *
 * @param device The device.
 * @returns Its current resource, or undefined when it has none yet.
 * @example
 * ```ts
 * existingCurrentResource(Device.get(0))?.describe();
 * ```
 */
export function existingCurrentResource(device: Device): MemoryResource | undefined {
  return current.get(device);
}

/**
 * Makes `mr` the current resource of `device` and returns the previous one (the default resource
 * when none was set). `mr` must hand out memory of that device (device or managed). The
 * environment's cap applies to the default resource only: a resource set here is used as it is.
 *
 * @param device The device.
 * @param mr The resource buffers on it allocate from from now on.
 * @returns The previous current resource; the caller decides whether to destroy it.
 * @throws {TypeError} When `mr` is not a resource of device memory.
 * @throws {RangeError} When `mr` belongs to another device.
 * @example
 * ```ts
 * const previous = setCurrentResource(0, new PoolResource());
 * ```
 */
export function setCurrentResource(device: Device | number, mr: MemoryResource): MemoryResource {
  const dev = Device.resolve(device);
  if (mr === null || typeof mr !== 'object' || typeof mr.allocate !== 'function' || typeof mr.deallocate !== 'function') {
    throw new TypeError('setCurrentResource expects a MemoryResource');
  }
  if (mr.kind === 'pinned-host') {
    throw new TypeError(`the current resource of a device must hand out device memory, not ${mr.describe()}`);
  }
  if (mr.deviceOrdinal !== dev.ordinal) {
    throw new RangeError(`${mr.describe()} belongs to device ${mr.deviceOrdinal}, not device ${dev.ordinal}`);
  }
  const previous = getCurrentResource(dev);
  current.set(dev, mr);
  return previous;
}

/**
 * Gives the memory the current resources cache back to the driver, as PyTorch's
 * `torch.cuda.empty_cache()` and CuPy's `free_all_blocks()`: memory still allocated stays. The
 * device is synchronised first, so blocks freed on streams whose work is still running are
 * given back too. Devices with no current resource yet are left alone (none is made).
 *
 * @param device One device; every device with a current resource when omitted.
 * @returns The bytes given back.
 * @throws {RangeError | TypeError} For a bad device.
 * @throws {CudaError} When synchronising the device fails (work that failed or cannot complete).
 * @example
 * ```ts
 * buffer.free();
 * emptyCache(); // the freed bytes go back to the driver, for another process or library
 * ```
 */
export function emptyCache(device?: Device | number): number {
  const devices = device === undefined ? [...current.keys()] : [Device.resolve(device)];
  let released = 0;
  for (const dev of devices) {
    const mr = current.get(dev);
    if (mr === undefined || mr.destroyed) continue;
    dev.synchronize();
    released += mr.releaseCached();
  }
  return released;
}
