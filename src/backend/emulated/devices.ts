/**
 * Emulated devices and contexts: each device has a fixed capacity that allocations are charged
 * against, emulated attributes, and a primary context; contexts remember their device, peers and
 * legacy default stream.
 */
import type { DeviceInfo } from '../backend.js';
import { DEVICE_ATTRIBUTES, type DeviceAttributeName } from '../../cuda/device-attributes.js';
import { outOfMemory } from './fail.js';
import { formatBytesExact } from '../../util/size.js';
import type { StreamState } from './streams.js';

/** One emulated device: its capacity and what is charged against it. */
export class DeviceState {
  /** Bytes of capacity currently charged. */
  used = 0;
  /** Handle of the primary context, created on first retain. */
  primary: number | undefined;
  /** Retain count of the primary context. */
  primaryRetains = 0;

  constructor(
    readonly ordinal: number,
    readonly capacity: number,
    /** Whether pools in host NUMA memory are supported (EmulatedBackendOptions.hostNumaPools). */
    readonly hostNumaPools = true,
    /** Whether fabric handles are supported (EmulatedBackendOptions.fabric). */
    readonly fabric = true,
  ) {}

  /** Charges `bytes` of capacity, or throws OutOfMemoryError naming `call`. */
  charge(bytes: number, call: string, requested = bytes): void {
    if (this.used + bytes > this.capacity) {
      outOfMemory(
        requested,
        call,
        `emulated device ${this.ordinal}: ${formatBytesExact(this.capacity - this.used)} of ${formatBytesExact(this.capacity)} free, ` +
          `${formatBytesExact(bytes)} needed`,
      );
    }
    this.used += bytes;
  }

  /** cuDeviceGetAttribute: the modelled value, 0 for the rest; an unknown attribute is CUDA_ERROR_INVALID_VALUE. */
  attribute(attribute: number): number | undefined {
    if (!KNOWN_ATTRIBUTES.has(attribute)) return undefined;
    const values = emulatedAttributes(this);
    for (const [name, value] of Object.entries(DEVICE_ATTRIBUTES)) {
      if (value === attribute) return values[name as DeviceAttributeName] ?? 0;
    }
    return 0;
  }

  /** Gives `bytes` of capacity back. */
  uncharge(bytes: number): void {
    this.used -= bytes;
  }

  /**
   * The emulated attributes. These are made-up values in the range of a current data-centre GPU
   * (compute capability 9.0, 50 MiB L2, 512-byte texture pitch alignment), not measurements.
   */
  info(): DeviceInfo {
    const ord = this.ordinal.toString(16).padStart(12, '0');
    return {
      ordinal: this.ordinal,
      name: 'vram emulated device',
      uuid: `GPU-7672616d-656d-4c61-7465-${ord}`,
      computeCapability: [9, 0],
      totalMemory: this.capacity,
      pciBusId: `0000:${this.ordinal.toString(16).padStart(2, '0')}:00.0`,
      multiprocessorCount: 132,
      unifiedAddressing: true,
      canMapHostMemory: true,
      memoryPoolsSupported: true,
      virtualMemoryManagementSupported: true,
      concurrentManagedAccess: true,
      managedMemory: true,
      asyncEngineCount: 2,
      l2CacheSize: 50 * 1024 * 1024,
      texturePitchAlignment: 512,
      integrated: false,
    };
  }
}

/** Every attribute value there is, for the name check. */
const KNOWN_ATTRIBUTES = new Set<number>(Object.values(DEVICE_ATTRIBUTES));

/**
 * The CUdevice_attribute values the emulation models, by name (the rest read 0): those of
 * `info()`, the kernel limits (EMULATED_KERNEL_LIMITS), and one host NUMA node (0) nearest every
 * device, whose memory stream-ordered pools can hold. Made-up values like `info()`'s, not measurements.
 */
function emulatedAttributes(device: DeviceState): Partial<Record<DeviceAttributeName, number>> {
  const info = device.info();
  const [bus] = [device.ordinal];
  return {
    maxThreadsPerBlock: 1024,
    maxBlockDimX: 1024,
    maxBlockDimY: 1024,
    maxBlockDimZ: 64,
    maxGridDimX: 2 ** 31 - 1,
    maxGridDimY: 65535,
    maxGridDimZ: 65535,
    maxSharedMemoryPerBlock: 48 * 1024,
    warpSize: 32,
    multiprocessorCount: info.multiprocessorCount,
    integrated: info.integrated ? 1 : 0,
    canMapHostMemory: 1,
    l2CacheSize: info.l2CacheSize,
    asyncEngineCount: info.asyncEngineCount,
    unifiedAddressing: 1,
    texturePitchAlignment: info.texturePitchAlignment,
    computeCapabilityMajor: info.computeCapability[0],
    computeCapabilityMinor: info.computeCapability[1],
    managedMemory: 1,
    concurrentManagedAccess: 1,
    virtualMemoryManagementSupported: 1,
    memoryPoolsSupported: 1,
    handleTypePosixFileDescriptorSupported: 1,
    handleTypeFabricSupported: device.fabric ? 1 : 0,
    // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, and CU_MEM_HANDLE_TYPE_FABRIC where supported.
    mempoolSupportedHandleTypes: device.fabric ? 0x9 : 0x1,
    pciBusId: bus,
    pciDeviceId: 0,
    pciDomainId: 0,
    streamPrioritiesSupported: 1,
    hostRegisterSupported: 1,
    ipcEventSupported: 1,
    concurrentKernels: 1,
    numaConfig: 0,
    numaId: -1,
    hostNumaId: 0,
    hostNumaMemoryPoolsSupported: device.hostNumaPools ? 1 : 0,
  };
}

/** A context: its device, flags, peers and legacy default stream. */
export class ContextState {
  /** Handles of peer contexts this one has enabled access to. */
  readonly peers = new Set<number>();
  /**
   * True for a primary context whose last retain was released: the driver destroyed it, but its
   * handle stays (current where it was, and the same handle again on the next retain). Calls in
   * it fail with CUDA_ERROR_CONTEXT_IS_DESTROYED until it is retained again.
   */
  destroyed = false;
  /** cuCtxSetCacheConfig's preference (CUfunc_cache; none by default). */
  cacheConfig = 0;

  constructor(
    readonly handle: number,
    readonly device: DeviceState,
    readonly flags: number,
    readonly primary: boolean,
    /** The context's legacy default stream (handle 0); a new one when a primary context is retained again. */
    public legacy: StreamState,
  ) {}
}
