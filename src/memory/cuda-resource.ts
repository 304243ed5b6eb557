/**
 * CudaResource: device memory straight from the driver (cuMemAlloc / cuMemFree), RMM's
 * cuda_memory_resource. Every allocation is a driver call (microseconds to tens of microseconds),
 * so it is the upstream that pools sit on, not what hot loops should allocate from.
 */
import type { Backend, Ptr } from '../backend/backend.js';
import { Device } from '../device.js';
import { OutOfMemoryError } from '../errors.js';
import { checkBytes } from '../validate.js';
import type { MemoryKind, MemoryResource, StreamRef } from './resource.js';

/** cuMemAlloc guarantees 256-byte alignment (CUDA programming guide, "Device Memory"). */
export const DEVICE_ALIGNMENT = 256;

/**
 * Re-raises the backend's out-of-memory error naming the resource that failed, so a log line
 * says which allocator ran dry; other errors pass through unchanged.
 */
export function rethrowWithResource(error: unknown, bytes: number, resource: MemoryResource): never {
  if (error instanceof OutOfMemoryError && error.resource === undefined) {
    throw new OutOfMemoryError(bytes, error.call, resource.describe(), error.statistics);
  }
  throw error;
}

/**
 * Checks `bytes`, then runs `alloc` in `device`'s context, so that the memory belongs to that
 * device and an out-of-memory error names `resource` (see rethrowWithResource).
 */
export function allocateInContext(device: Device, bytes: number, resource: MemoryResource, alloc: (backend: Backend) => Ptr): Ptr {
  checkBytes(bytes);
  device.makeCurrent();
  try {
    return alloc(device.backend);
  } catch (error) {
    rethrowWithResource(error, bytes, resource);
  }
}

/** Device memory from cuMemAlloc; the stream argument is accepted and ignored (allocation is synchronous). */
export class CudaResource implements MemoryResource {
  /** Plain device memory. */
  readonly kind: MemoryKind = 'device';
  /** 256 bytes, what cuMemAlloc guarantees. */
  readonly alignment = DEVICE_ALIGNMENT;
  /** The Device object the memory lives on. */
  readonly deviceObject: Device;

  /** A resource for `device` (device 0 by default). */
  constructor(device?: Device | number) {
    this.deviceObject = Device.resolve(device);
  }

  /** The device ordinal. */
  get device(): number {
    return this.deviceObject.ordinal;
  }

  /** cuMemAlloc; `stream` is ignored (the memory is usable on every stream at once). */
  allocate(bytes: number, _stream?: StreamRef): Ptr {
    return allocateInContext(this.deviceObject, bytes, this, (backend) => backend.memAlloc(bytes));
  }

  /** cuMemFree, which waits for work using the memory to finish (it synchronises the device). */
  deallocate(ptr: Ptr, _bytes: number, _stream?: StreamRef): void {
    const dev = this.deviceObject;
    dev.makeCurrent();
    dev.backend.memFree(ptr);
  }

  /** Any CudaResource of the same device may free this one's memory. */
  isEqual(other: MemoryResource): boolean {
    return other instanceof CudaResource && other.device === this.device;
  }

  /** Caches nothing. */
  releaseCached(): number {
    return 0;
  }

  /** `CudaResource(device=0)`. */
  describe(): string {
    return `CudaResource(device=${this.device})`;
  }
}
