/**
 * Devices and contexts. By default every device is used through its primary context, the one
 * cudart, CuPy and PyTorch share, so pointers interoperate with them in the same process.
 */
import type { Backend, DeviceInfo, Handle, MemInfo } from './backend/backend.js';
import { getBackend } from './backend/select.js';
import { checkNonNegativeInteger } from './validate.js';

/** A CUDA device (or an emulated one), with its primary context retained on first use. */
export class Device {
  private static readonly devices = new Map<number, Device>();
  private primaryContext: Handle | undefined;
  private cachedInfo: DeviceInfo | undefined;

  private constructor(
    /** The device's ordinal, as the driver numbers them. */
    readonly ordinal: number,
    /** The backend that drives it. */
    readonly backend: Backend,
  ) {}

  /** How many devices the backend sees. */
  static count(): number {
    return getBackend().deviceCount();
  }

  /** The device with this ordinal (0 by default); the same object for every call. */
  static get(ordinal = 0): Device {
    checkNonNegativeInteger(ordinal, 'device ordinal');
    let device = Device.devices.get(ordinal);
    if (device === undefined) {
      const backend = getBackend();
      const count = backend.deviceCount();
      if (ordinal >= count) {
        throw new RangeError(`device ordinal ${ordinal} is out of range: the ${backend.name} backend has ${count} device(s)`);
      }
      device = new Device(ordinal, backend);
      Device.devices.set(ordinal, device);
    }
    return device;
  }

  /** Name, memory, compute capability and the attributes a memory library needs. */
  get info(): DeviceInfo {
    this.cachedInfo ??= this.backend.deviceInfo(this.ordinal);
    return this.cachedInfo;
  }

  /** The device's primary context, retained on first use. */
  get context(): Handle {
    this.primaryContext ??= this.backend.primaryContextRetain(this.ordinal);
    return this.primaryContext;
  }

  /** Makes this device's primary context current on the calling thread. */
  makeCurrent(): this {
    this.backend.contextSetCurrent(this.context);
    return this;
  }

  /** Free and total memory on this device. */
  memInfo(): MemInfo {
    this.makeCurrent();
    return this.backend.memGetInfo();
  }

  /** Blocks until all work on this device's primary context has completed. */
  synchronize(): void {
    this.makeCurrent();
    this.backend.contextSynchronize();
  }
}
