/**
 * ManagedResource: unified (managed) memory from cuMemAllocManaged, RMM's managed_memory_resource.
 * The same address works on the host and on every device; the driver migrates pages on demand,
 * so it suits data larger than the device or touched by both sides, not bandwidth-bound kernels.
 */
import { MemAttach, type Ptr } from '../backend/backend.js';
import { Device } from '../device.js';
import { allocateInContext, DEVICE_ALIGNMENT } from './cuda-resource.js';
import type { MemoryKind, MemoryResource, StreamRef } from './resource.js';

/** Which streams may touch new managed memory: all ('global') or only the host until attached ('host'). */
export type ManagedAttach = 'global' | 'host';

/** Options for `new ManagedResource`. */
export interface ManagedResourceOptions {
  /** The device whose context allocates (device 0 by default); the memory is usable everywhere. */
  readonly device?: Device | number;
  /** CU_MEM_ATTACH_GLOBAL (default) or CU_MEM_ATTACH_HOST. */
  readonly attach?: ManagedAttach;
}

/** Managed memory from cuMemAllocManaged; the stream argument is accepted and ignored. */
export class ManagedResource implements MemoryResource {
  /** Managed (unified) memory. */
  readonly kind: MemoryKind = 'managed';
  /** 256 bytes, what cuMemAllocManaged guarantees (as cuMemAlloc). */
  readonly alignment = DEVICE_ALIGNMENT;
  /** The Device object whose context allocates. */
  readonly deviceObject: Device;
  /** The attach mode of every allocation. */
  readonly attach: ManagedAttach;

  /** A resource for `device` (device 0 by default), attaching globally unless told otherwise. */
  constructor(options: ManagedResourceOptions = {}) {
    this.deviceObject = Device.resolve(options.device);
    const attach = options.attach ?? 'global';
    if (attach !== 'global' && attach !== 'host') {
      throw new RangeError(`attach must be 'global' or 'host', got '${String(attach)}'`);
    }
    this.attach = attach;
    if (!this.deviceObject.info.managedMemory) {
      throw new TypeError(`device ${this.device} does not support managed memory`);
    }
  }

  /** The device ordinal. */
  get device(): number {
    return this.deviceObject.ordinal;
  }

  /** cuMemAllocManaged; `stream` is ignored. */
  allocate(bytes: number, _stream?: StreamRef): Ptr {
    const attach = this.attach === 'global' ? MemAttach.GLOBAL : MemAttach.HOST;
    return allocateInContext(this.deviceObject, bytes, this, (backend) => backend.memAllocManaged(bytes, attach));
  }

  /** cuMemFree. */
  deallocate(ptr: Ptr, _bytes: number, _stream?: StreamRef): void {
    const dev = this.deviceObject;
    dev.makeCurrent();
    dev.backend.memFree(ptr);
  }

  /** Any ManagedResource may free another's memory (it is all cuMemFree). */
  isEqual(other: MemoryResource): boolean {
    return other instanceof ManagedResource;
  }

  /** Caches nothing. */
  releaseCached(): number {
    return 0;
  }

  /** `ManagedResource(device=0, attach=global)`. */
  describe(): string {
    return `ManagedResource(device=${this.device}, attach=${this.attach})`;
  }
}
