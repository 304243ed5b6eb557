/**
 * Devices and contexts. By default every device is used through its primary context, the one
 * cudart, CuPy and PyTorch share, so pointers interoperate with them in the same process.
 *
 * A program that wants an explicit context (other scheduling flags, host mapping) creates one with
 * `Context.create(device)`; while it is the device's selected context (after `makeCurrent()`, until
 * it is destroyed or the primary is selected again), every vram operation on that device runs in it.
 */
import { ContextFlags, type Backend, type DeviceInfo, type Handle, type MemInfo } from './backend/backend.js';
import { claimBackend, getBackend } from './backend/select.js';
import { CUresult, CudaError, UseAfterFreeError, VramStateError } from './errors.js';
import { checkNonNegativeInteger } from './validate.js';
import { refuseDuringCapture } from './graph/sessions.js';
import { formatBytes } from './util/size.js';
import { inspectCustom } from './util/inspect.js';
import { readOptions } from './util/options.js';

/**
 * A CUDA device (or an emulated one), with its primary context retained on first use.
 * @example
 * ```ts
 * const device = Device.get(0);
 * console.log(device.info.name, device.memInfo().free);
 * ```
 */
export class Device {
  private static readonly devices = new Map<number, Device>();
  private primaryContext: Handle | undefined;
  private cachedInfo: DeviceInfo | undefined;
  /** The explicit context selected for this device, if any; undefined means the primary context. */
  private selected: Context | undefined;

  private constructor(
    /** The device's ordinal, as the driver numbers them. */
    readonly ordinal: number,
    /** The backend that drives it. */
    readonly backend: Backend,
  ) {}

  /**
   * How many devices the backend sees.
   * @throws {CudaError} When the driver cannot be initialised.
   * @example
   * ```ts
   * for (let i = 0; i < Device.count(); i++) console.log(Device.get(i).toString());
   * ```
   */
  static count(): number {
    return getBackend().deviceCount();
  }

  /**
   * The device with this ordinal (0 by default); the same object for every call. The first call
   * fixes the process's backend (`setBackend` refuses another one afterwards).
   * @throws {RangeError} When `ordinal` is not a whole number below `Device.count()`.
   * @example
   * ```ts
   * const second = Device.get(1);
   * ```
   */
  static get(ordinal = 0): Device {
    let device = Device.devices.get(ordinal);
    if (device === undefined) {
      checkNonNegativeInteger(ordinal, 'device ordinal');
      const backend = getBackend();
      const count = backend.deviceCount();
      if (ordinal >= count) {
        throw new RangeError(`device ordinal ${ordinal} is out of range: the ${backend.name} backend has ${count} device(s)`);
      }
      // From here on the backend is fixed: this device's contexts and handles belong to it.
      claimBackend();
      device = new Device(ordinal, backend);
      Device.devices.set(ordinal, device);
    }
    return device;
  }

  /**
   * Resolves the optional `device` argument every API takes: a Device, an ordinal, or undefined
   * for device 0. One place, so every layer reports a bad device the same way.
   * @throws {TypeError} When `device` is neither a Device nor a number.
   * @throws {RangeError} When the ordinal is out of range.
   * @example
   * ```ts
   * const device = Device.resolve(options.device);
   * ```
   */
  static resolve(device: Device | number | undefined): Device {
    if (device === undefined) return Device.get(0);
    if (device instanceof Device) return device;
    if (typeof device === 'number') return Device.get(device);
    throw new TypeError(`device must be a Device or an ordinal, got ${typeof device}`);
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

  /**
   * The context vram uses for this device: the explicit `Context` last made current for it, or
   * the primary context. Peer copies and peer access name this context.
   */
  get activeContext(): Handle {
    return this.selected?.handle ?? this.context;
  }

  /**
   * Makes this device's active context (primary unless an explicit Context was selected) current
   * on the calling thread. Cheap when it already is, so every operation calls it.
   * @throws {CudaError} When the driver fails the call.
   * @example
   * ```ts
   * Device.get(1).makeCurrent(); // before a call into another CUDA library
   * ```
   */
  makeCurrent(): this {
    this.backend.contextSetCurrent(this.selected?.handle ?? this.context);
    return this;
  }

  /**
   * Free and total memory on this device.
   * @throws {CudaError} When the driver fails the call.
   * @example
   * ```ts
   * const { free, total } = Device.get(0).memInfo();
   * ```
   */
  memInfo(): MemInfo {
    this.makeCurrent();
    return this.backend.memGetInfo();
  }

  /**
   * Blocks until all work in this device's active context has completed.
   * @throws {StreamCaptureError} While a capture in mode global or thread-local lasts (before the driver).
   * @throws {CudaError} When the driver fails, or reports an error of earlier asynchronous work.
   * @example
   * ```ts
   * Device.get(0).synchronize();
   * ```
   */
  synchronize(): void {
    refuseDuringCapture('device.synchronize()', 'a host wait cannot be captured (await stream.synchronized() after endCapture())');
    this.makeCurrent();
    this.backend.contextSynchronize();
  }

  /**
   * True when kernels and copies on this device can address `other`'s memory directly.
   * @throws {TypeError} When `other` is not a Device.
   * @example
   * ```ts
   * if (Device.get(0).canAccessPeer(Device.get(1))) Device.get(0).enablePeerAccess(Device.get(1));
   * ```
   */
  canAccessPeer(other: Device): boolean {
    checkDevice(other, 'other');
    if (other === this) return false;
    return this.backend.deviceCanAccessPeer(this.ordinal, other.ordinal);
  }

  /**
   * Lets this device's context address `other`'s memory (one direction; call it on both for both).
   * Idempotent: enabling access that is already enabled is not an error.
   * @throws {TypeError} When `other` is not a Device.
   * @throws {RangeError} When `other` is this device.
   * @throws {VramStateError} When this device cannot access `other` (see `canAccessPeer`).
   * @example
   * ```ts
   * Device.get(0).enablePeerAccess(Device.get(1));
   * ```
   */
  enablePeerAccess(other: Device): void {
    checkDevice(other, 'other');
    if (other === this) throw new RangeError('a device cannot enable peer access to itself');
    if (!this.canAccessPeer(other)) {
      throw new VramStateError(`device ${this.ordinal} cannot access device ${other.ordinal} as a peer`);
    }
    this.makeCurrent();
    try {
      this.backend.contextEnablePeerAccess(other.activeContext);
    } catch (error) {
      if (!(error instanceof CudaError && error.code === CUresult.PEER_ACCESS_ALREADY_ENABLED)) throw error;
    }
  }

  /**
   * Revokes access enabled by `enablePeerAccess`; idempotent like it.
   * @throws {TypeError} When `other` is not a Device.
   * @throws {RangeError} When `other` is this device.
   * @example
   * ```ts
   * Device.get(0).disablePeerAccess(Device.get(1));
   * ```
   */
  disablePeerAccess(other: Device): void {
    checkDevice(other, 'other');
    if (other === this) throw new RangeError('a device cannot disable peer access to itself');
    this.makeCurrent();
    try {
      this.backend.contextDisablePeerAccess(other.activeContext);
    } catch (error) {
      if (!(error instanceof CudaError && error.code === CUresult.PEER_ACCESS_NOT_ENABLED)) throw error;
    }
  }

  /** Selects `ctx` (or the primary context, for undefined) as the one vram uses for this device. @internal */
  select(ctx: Context | undefined): void {
    this.selected = ctx;
  }

  /** The explicit context selected for this device, if any. @internal */
  get selectedContext(): Context | undefined {
    return this.selected;
  }

  /**
   * A short description for logs: `Device(0: NVIDIA H200)`.
   * @throws {CudaError} When the device's name cannot be read (the first time only).
   * @example
   * ```ts
   * console.log(`${Device.get(0)}`);
   * ```
   */
  toString(): string {
    return `Device(${this.ordinal}: ${this.info.name})`;
  }

  /**
   * How `console.log` and `util.inspect` show the device: its ordinal, name, memory and compute
   * capability on one line (never the backend's internals).
   *
   * @returns The line; `Device(0)` and the reason when the driver cannot say more.
   * @throws Never.
   * @example
   * ```ts
   * console.log(Device.get(0)); // Device(0: NVIDIA H100 80GB HBM3, 79.1 GiB, compute 9.0, backend cuda)
   * ```
   */
  [inspectCustom](): string {
    try {
      const info = this.info;
      return `Device(${this.ordinal}: ${info.name}, ${formatBytes(info.totalMemory)}, compute ${info.computeCapability.join('.')}, backend ${this.backend.name})`;
    } catch (error) {
      return `Device(${this.ordinal}: ${error instanceof Error ? error.message : String(error)})`;
    }
  }

  /**
   * What `JSON.stringify` writes: the ordinal, name, memory and compute capability (plain data:
   * no backend, no contexts).
   *
   * @returns The device as plain data.
   * @throws {CudaError} When the device's attributes cannot be read (the first time only).
   * @example
   * ```ts
   * JSON.stringify(Device.get(0)); // {"ordinal":0,"name":"NVIDIA H100 80GB HBM3",...}
   * ```
   */
  toJSON(): { ordinal: number; name: string; totalMemory: number; computeCapability: readonly number[]; backend: string } {
    const info = this.info;
    return { ordinal: this.ordinal, name: info.name, totalMemory: info.totalMemory, computeCapability: info.computeCapability, backend: this.backend.name };
  }
}

/** How the host thread waits for the device (CUctx_flags scheduling). */
export type ContextSchedule = 'auto' | 'spin' | 'yield' | 'blocking-sync';

/** Options for `Context.create`. */
export interface ContextOptions {
  /** How synchronising calls wait: spin, yield, or block on an OS primitive. Default 'auto'. */
  readonly schedule?: ContextSchedule;
  /** Allow mapped pinned host memory in this context (CU_CTX_MAP_HOST). Default false. */
  readonly mapHost?: boolean;
}

const scheduleFlags: Readonly<Record<ContextSchedule, number>> = {
  auto: ContextFlags.SCHED_AUTO,
  spin: ContextFlags.SCHED_SPIN,
  yield: ContextFlags.SCHED_YIELD,
  'blocking-sync': ContextFlags.SCHED_BLOCKING_SYNC,
};

/**
 * An explicit CUDA context. Most programs never need one: the primary context is shared with
 * every other CUDA library in the process. Create one for different scheduling flags, or to
 * isolate a component's allocations; memory allocated in it is invalid once it is destroyed.
 * @example
 * ```ts
 * using ctx = Context.create(Device.get(0), { schedule: 'blocking-sync' });
 * const buf = DeviceBuffer.allocate(1024); // allocated in ctx
 * ```
 */
export class Context {
  #destroyed = false;

  private constructor(
    /** The device the context belongs to. */
    readonly device: Device,
    private readonly ctx: Handle,
    /** True for the device's primary context, which cannot be destroyed. */
    readonly isPrimary: boolean,
    /** The CUctx_flags it was created with (0 for the primary context as seen here). */
    readonly flags: number,
  ) {}

  /**
   * Creates a context on `device` and selects it: vram operations on that device run in it until
   * it is destroyed or another context is made current. The driver makes it current, too.
   * @throws {TypeError} When `device` is not a Device or an option is unknown or of the wrong type.
   * @throws {RangeError} When `schedule` is not one of its values.
   * @throws {CudaError} When the driver cannot create the context.
   * @example
   * ```ts
   * using ctx = Context.create(Device.get(0), { mapHost: true });
   * ```
   */
  static create(device: Device, options: ContextOptions = {}): Context {
    checkDevice(device, 'device');
    options = readOptions('Context.create', options, { schedule: true, mapHost: true });
    const schedule = options.schedule ?? 'auto';
    if (!Object.hasOwn(scheduleFlags, schedule)) {
      throw new RangeError(`schedule must be 'auto', 'spin', 'yield' or 'blocking-sync', got '${String(schedule)}'`);
    }
    const flags = scheduleFlags[schedule] | (options.mapHost === true ? ContextFlags.MAP_HOST : 0);
    const handle = device.backend.contextCreate(device.ordinal, flags);
    const ctx = new Context(device, handle, false, flags);
    device.backend.contextSetCurrent(handle);
    device.select(ctx);
    return ctx;
  }

  /**
   * The device's primary context, as a Context (making it current selects the primary again).
   * @throws {TypeError} When `device` is not a Device.
   * @example
   * ```ts
   * Context.primary(Device.get(0)).makeCurrent(); // back to the shared context
   * ```
   */
  static primary(device: Device = Device.get(0)): Context {
    checkDevice(device, 'device');
    return new Context(device, device.context, true, 0);
  }

  /** The driver's handle (CUcontext). */
  get handle(): Handle {
    if (this.#destroyed) throw new UseAfterFreeError('the context was destroyed');
    return this.ctx;
  }

  /**
   * True once `destroy()` has run (the vocabulary: `destroy` ends it, `destroyed` says it ended; docs/architecture.md).
   *
   * @returns Whether it ended.
   * @example
   * ```ts
   * const ctx = Context.create(Device.get(0));
   * ctx.destroy();
   * ctx.destroyed; // true
   * ```
   */
  get destroyed(): boolean {
    return this.#destroyed;
  }

  /**
   * Makes this context current on the calling thread and selects it for its device.
   * @throws {UseAfterFreeError} When the context was destroyed.
   * @example
   * ```ts
   * ctx.makeCurrent();
   * ```
   */
  makeCurrent(): this {
    const handle = this.handle;
    this.device.backend.contextSetCurrent(handle);
    this.device.select(this.isPrimary ? undefined : this);
    return this;
  }

  /**
   * Destroys the context and every allocation, stream and event made in it; the device goes back
   * to its primary context. The primary context cannot be destroyed (it is shared).
   * @throws {VramStateError} When it is the primary context.
   * @throws {UseAfterFreeError} When it was already destroyed.
   * @example
   * ```ts
   * const ctx = Context.create(Device.get(0));
   * ctx.destroy();
   * ```
   */
  destroy(): void {
    if (this.isPrimary) throw new VramStateError('the primary context is shared and cannot be destroyed');
    if (this.#destroyed) throw new UseAfterFreeError('the context was already destroyed');
    this.#destroyed = true;
    if (this.device.selectedContext === this) this.device.select(undefined);
    this.device.backend.contextDestroy(this.ctx);
  }

  /** `using ctx = Context.create(...)` destroys it at the end of the scope. */
  [Symbol.dispose](): void {
    if (!this.#destroyed && !this.isPrimary) this.destroy();
  }
}

/**
 * Makes some context current when none is: host-memory calls (pinned allocation, registration)
 * need a context but belong to no device in particular; device 0's active context serves.
 */
export function ensureAnyContext(backend: Backend = getBackend()): void {
  if (backend.contextGetCurrent() === 0) Device.get(0).makeCurrent();
}

function checkDevice(value: unknown, name: string): asserts value is Device {
  if (!(value instanceof Device)) throw new TypeError(`${name} must be a Device`);
}
