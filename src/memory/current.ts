/**
 * The current memory resource of each device: what buffers and arrays allocate from when the
 * caller names no resource. A CudaResource until the program sets another (a pool, usually), as
 * RMM's per-device resource.
 */
import { Device } from '../device.js';
import { CudaResource } from './cuda-resource.js';
import type { MemoryResource } from './resource.js';

const current = new Map<Device, MemoryResource>();

/** The resource buffers on `device` (device 0 by default) allocate from when none is named. */
export function getCurrentResource(device?: Device | number): MemoryResource {
  const dev = Device.resolve(device);
  let mr = current.get(dev);
  if (mr === undefined) {
    mr = new CudaResource(dev);
    current.set(dev, mr);
  }
  return mr;
}

/**
 * Makes `mr` the current resource of `device` and returns the previous one (the default
 * CudaResource when none was set). `mr` must hand out memory of that device (device or managed).
 */
export function setCurrentResource(device: Device | number, mr: MemoryResource): MemoryResource {
  const dev = Device.resolve(device);
  if (mr === null || typeof mr !== 'object' || typeof mr.allocate !== 'function' || typeof mr.deallocate !== 'function') {
    throw new TypeError('setCurrentResource expects a MemoryResource');
  }
  if (mr.kind === 'pinned-host') {
    throw new TypeError(`the current resource of a device must hand out device memory, not ${mr.describe()}`);
  }
  if (mr.device !== dev.ordinal) {
    throw new RangeError(`${mr.describe()} belongs to device ${mr.device}, not device ${dev.ordinal}`);
  }
  const previous = getCurrentResource(dev);
  current.set(dev, mr);
  return previous;
}
