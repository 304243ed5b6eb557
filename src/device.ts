/**
 * Devices and contexts. By default every device is used through its primary context, the one
 * cudart, CuPy and PyTorch share, so pointers interoperate with them in the same process.
 *
 * A program that wants an explicit context (other scheduling flags, host mapping) creates one with
 * `Context.create(device)`; while it is the device's selected context (after `makeCurrent()`, until
 * it is destroyed or the primary is selected again), every vram operation on that device runs in it.
 */
import { ContextFlags, FuncCache, type Backend, type DeviceInfo, type Handle, type MemInfo } from './backend/backend.js';
import { DEVICE_ATTRIBUTES, type DeviceAttributeName } from './cuda/device-attributes.js';
import { claimBackend, getBackend } from './backend/select.js';
import { CUresult, CudaError, UseAfterFreeError, VramStateError } from './errors.js';
import { checkNonNegativeInteger } from './validate.js';
import { refuseDuringCapture } from './graphs/sessions.js';
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
  /** By ordinal (an array: `get` is on every allocation's path). */
  static readonly #devices: (Device | undefined)[] = [];
  #primaryContext: Handle | undefined;
  #cachedInfo: DeviceInfo | undefined;
  /** The explicit context selected for this device, if any; undefined means the primary context. */
  #selected: Context | undefined;

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
    let device = typeof ordinal === 'number' ? Device.#devices[ordinal] : undefined;
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
      Device.#devices[ordinal] = device;
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

  /**
   * The device at a PCI bus id (cuDeviceGetByPCIBusId), as `nvidia-smi` and `info.pciBusId` write
   * it: `[domain]:[bus]:[device].[function]`, `[domain]:[bus]:[device]` or `[bus]:[device].[function]`,
   * hexadecimal.
   * @param busId E.g. `'0000:3b:00.0'`.
   * @returns The same Device object `Device.get` gives for its ordinal.
   * @throws {TypeError} When `busId` is not a string.
   * @throws {RangeError} When it is not of one of those forms.
   * @throws {CudaError} When no device is at that address (CUDA_ERROR_INVALID_DEVICE).
   * @example
   * ```ts
   * const device = Device.fromPciBusId('0000:3b:00.0');
   * ```
   */
  static fromPciBusId(busId: string): Device {
    if (typeof busId !== 'string') throw new TypeError(`busId must be a string, got ${typeof busId}`);
    if (!/^(?:[0-9a-f]{1,8}:[0-9a-f]{1,2}:[0-9a-f]{1,2}(?:\.[0-7])?|[0-9a-f]{1,2}:[0-9a-f]{1,2}\.[0-7])$/i.test(busId)) {
      throw new RangeError(`busId must be [domain]:[bus]:[device].[function] in hexadecimal (like '0000:3b:00.0'), got '${busId}'`);
    }
    return Device.get(getBackend().deviceGetByPciBusId(busId));
  }

  /**
   * Any CUdevice_attribute of the device (cuDeviceGetAttribute), by its name: the enum's suffix
   * in camelCase (`CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID` is `'hostNumaId'`). `info` holds the ones a
   * memory library reads often; this reads every other.
   * @param name The attribute (`DeviceAttributeName`).
   * @returns The driver's value (flags are 0 or 1).
   * @throws {TypeError} When `name` is not a string.
   * @throws {RangeError} When it names no attribute.
   * @throws {CudaError} When the driver refuses (an attribute newer than the driver).
   * @example
   * ```ts
   * Device.get(0).attribute('maxSharedMemoryPerBlockOptin'); // 232448 on an H100
   * ```
   */
  attribute(name: DeviceAttributeName): number {
    if (typeof name !== 'string') throw new TypeError(`attribute name must be a string, got ${typeof name}`);
    if (!Object.hasOwn(DEVICE_ATTRIBUTES, name)) {
      throw new RangeError(`'${name}' is not a device attribute (the CU_DEVICE_ATTRIBUTE_ suffix in camelCase, like 'hostNumaId')`);
    }
    return this.backend.deviceGetAttribute(this.ordinal, DEVICE_ATTRIBUTES[name]);
  }

  /**
   * The pool `cuMemAllocAsync` (cudaMallocAsync) on this device allocates from: its default pool
   * unless `setMemPool` chose another (cuDeviceGetMemPool).
   * @returns The CUmemoryPool handle.
   * @throws {CudaError} When the driver refuses (no stream-ordered pools).
   * @example
   * ```ts
   * device.memPool === device.defaultMemPool; // until setMemPool
   * ```
   */
  get memPool(): Handle {
    return this.backend.deviceGetMemPool(this.ordinal);
  }

  /**
   * The device's default pool (cuDeviceGetDefaultMemPool): the one current until `setMemPool`, and
   * again after the pool set is destroyed; it cannot be destroyed.
   * @returns The CUmemoryPool handle.
   * @throws {CudaError} When the driver refuses (no stream-ordered pools).
   * @example
   * ```ts
   * const pool = device.defaultMemPool;
   * ```
   */
  get defaultMemPool(): Handle {
    return this.backend.deviceGetDefaultMemPool(this.ordinal);
  }

  /**
   * Makes `pool` the one `cuMemAllocAsync` on this device uses (cuDeviceSetMemPool; cudaDeviceSetMemPool).
   * Destroying that pool makes the default pool current again (the driver's rule).
   * @param pool A pool of this device: an `AsyncResource` (anything with its `pool` handle) or a handle.
   * @throws {TypeError} When `pool` is neither.
   * @throws {CudaError} When the driver refuses (a pool of another device: CUDA_ERROR_INVALID_VALUE).
   * @example
   * ```ts
   * using mr = new AsyncResource({ pool: { maxSize: '1G' } });
   * device.setMemPool(mr); // other libraries' cudaMallocAsync on this device now use it
   * ```
   */
  setMemPool(pool: Handle | { readonly pool: Handle }): void {
    const handle = typeof pool === 'number' ? pool : pool !== null && typeof pool === 'object' ? pool.pool : undefined;
    if (typeof handle !== 'number' || !Number.isSafeInteger(handle) || handle <= 0) {
      throw new TypeError('setMemPool expects an AsyncResource (anything with a pool handle) or a pool handle');
    }
    this.makeCurrent();
    this.backend.deviceSetMemPool(this.ordinal, handle);
  }

  /** Name, memory, compute capability and the attributes a memory library needs. */
  get info(): DeviceInfo {
    this.#cachedInfo ??= this.backend.deviceInfo(this.ordinal);
    return this.#cachedInfo;
  }

  /** The device's primary context, retained on first use. */
  get context(): Handle {
    this.#primaryContext ??= this.backend.primaryContextRetain(this.ordinal);
    return this.#primaryContext;
  }

  /**
   * The context vram uses for this device: the explicit `Context` last made current for it, or
   * the primary context. Peer copies and peer access name this context.
   */
  get activeContext(): Handle {
    return this.#selected?.handle ?? this.context;
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
    this.backend.contextSetCurrent(this.#selected?.handle ?? this.context);
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
    this.#selected = ctx;
  }

  /** The explicit context selected for this device, if any. @internal */
  get selectedContext(): Context | undefined {
    return this.#selected;
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
  /**
   * Keep local memory at the largest size a launch needed instead of shrinking it after the
   * launch (CU_CTX_LMEM_RESIZE_TO_MAX). Default false.
   */
  readonly lmemResizeToMax?: boolean;
}

/** The preferred split of on-chip memory between L1 cache and shared memory (CUfunc_cache). */
export type CacheConfig = 'prefer-none' | 'prefer-shared' | 'prefer-l1' | 'prefer-equal';

const cacheConfigs: Readonly<Record<CacheConfig, number>> = {
  'prefer-none': FuncCache.PREFER_NONE,
  'prefer-shared': FuncCache.PREFER_SHARED,
  'prefer-l1': FuncCache.PREFER_L1,
  'prefer-equal': FuncCache.PREFER_EQUAL,
};

/**
 * The CUfunc_cache value of a cache configuration, checked (contexts and kernels share it).
 * @param config One of `CacheConfig`.
 * @returns The driver's value.
 * @throws {RangeError} For anything else.
 * @example
 * ```ts
 * cacheConfigValue('prefer-l1'); // 2
 * ```
 */
export function cacheConfigValue(config: CacheConfig): number {
  if (typeof config !== 'string' || !Object.hasOwn(cacheConfigs, config)) {
    throw new RangeError(`cache configuration must be 'prefer-none', 'prefer-shared', 'prefer-l1' or 'prefer-equal', got '${String(config)}'`);
  }
  return cacheConfigs[config];
}

const scheduleFlags: Readonly<Record<ContextSchedule, number>> = {
  auto: ContextFlags.SCHED_AUTO,
  spin: ContextFlags.SCHED_SPIN,
  yield: ContextFlags.SCHED_YIELD,
  'blocking-sync': ContextFlags.SCHED_BLOCKING_SYNC,
};

/**
 * A context pushed with `ctx.push()`: `pop()` (or the end of a `using` scope) takes it off the
 * calling thread's context stack again, and the device goes back to the context vram used before.
 * @example
 * ```ts
 * { using _pushed = ctx.push(); work(); } // popped here
 * ```
 */
export interface PushedContext {
  /** The context that was pushed. */
  readonly context: Context;
  /** True once popped. */
  readonly popped: boolean;
  /** Pops it (cuCtxPopCurrent); it must be the last context pushed and not popped. */
  pop(): void;
  /** `using`: pops it unless already popped. */
  [Symbol.dispose](): void;
}

/** The contexts pushed with `push()` and not popped yet, most recent last, with the selection each replaced. */
const pushed: { readonly scope: PushedScope; readonly previous: Context | undefined }[] = [];

class PushedScope implements PushedContext {
  #popped = false;

  constructor(readonly context: Context) {}

  get popped(): boolean {
    return this.#popped;
  }

  pop(): void {
    if (this.#popped) throw new VramStateError(`${String(this.context)} was already popped`);
    const top = pushed[pushed.length - 1];
    if (top?.scope !== this) {
      throw new VramStateError(`${String(this.context)} is not the last context pushed: pop contexts in the reverse order of their push`);
    }
    pushed.pop();
    this.#popped = true;
    const { device } = this.context;
    const backend = device.backend;
    // vram's own calls replace the top of the stack (cuCtxSetCurrent); put this one back on top
    // so that the pop takes off what push put on.
    if (!this.context.destroyed) backend.contextSetCurrent(this.context.handle);
    backend.contextPopCurrent();
    device.select(top.previous?.destroyed === true ? undefined : top.previous);
  }

  [Symbol.dispose](): void {
    if (!this.#popped) this.pop();
  }
}

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
    /** True for a context made elsewhere and adopted with `fromHandle`: vram never destroys it. */
    readonly borrowed = false,
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
    const flags = contextFlags('Context.create', options);
    const handle = device.backend.contextCreate(device.ordinal, flags);
    const ctx = new Context(device, handle, false, flags);
    device.backend.contextSetCurrent(handle);
    device.select(ctx);
    return ctx;
  }

  /**
   * PyCUDA's `make_default_context`: a context on the first device, in ordinal order, that
   * accepts one (a device in exclusive-process mode held by another process, or one that is
   * unavailable, refuses), created as `Context.create` does.
   * @param options As for `Context.create`.
   * @returns The new context, selected for its device.
   * @throws {TypeError | RangeError} For bad options (before any device is tried).
   * @throws {VramStateError} When no device accepts a context (the last refusal as its cause).
   * @example
   * ```ts
   * using ctx = Context.makeDefault();
   * console.log(ctx.device.ordinal);
   * ```
   */
  static makeDefault(options: ContextOptions = {}): Context {
    // Read once (a snapshot), checked before any device is tried.
    options = readOptions('Context.makeDefault', options, CONTEXT_OPTIONS);
    contextFlags('Context.makeDefault', options);
    const count = Device.count();
    let last: unknown;
    for (let ordinal = 0; ordinal < count; ordinal++) {
      try {
        return Context.create(Device.get(ordinal), options);
      } catch (error) {
        if (!(error instanceof CudaError)) throw error;
        last = error;
      }
    }
    throw new VramStateError(`no device accepted a context (${count} tried)`, { cause: last });
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

  /**
   * Adopts a context made elsewhere (another library's CUcontext, as Accelerate's
   * `createTargetFromContext` does): usable wherever a Context is (`makeCurrent`, `push`), borrowed,
   * so vram never destroys it (`destroy()` refuses; `using` leaves it).
   * @param handle The CUcontext, as a number.
   * @returns A borrowed Context on the context's device (`isPrimary` when it is that device's primary context).
   * @throws {TypeError} When `handle` is not a positive whole number.
   * @throws {CudaError} When the driver refuses the handle (the emulated driver: CUDA_ERROR_INVALID_CONTEXT
   *   for one it does not know). The real driver does not check a number that is no live context (made
   *   up, or destroyed): it reads through it, and the process may crash (measured: SIGSEGV for a
   *   made-up one, CUDA 13). Pass only live handles.
   * @example
   * ```ts
   * const ctx = Context.fromHandle(otherLibrary.contextHandle());
   * ctx.makeCurrent();
   * ```
   */
  static fromHandle(handle: Handle): Context {
    if (typeof handle !== 'number' || !Number.isSafeInteger(handle) || handle <= 0) {
      throw new TypeError(`a context handle must be a positive whole number, got ${String(handle)}`);
    }
    const { ordinal, flags } = getBackend().contextInfo(handle);
    const device = Device.get(ordinal);
    return new Context(device, handle, handle === device.context, flags, true);
  }

  /**
   * The calling thread's current context (cuCtxGetCurrent): the one vram selected, the one last
   * pushed, or one another library made current (adopted as with `fromHandle`).
   * @returns The context, or undefined when none is current.
   * @throws {CudaError} When the driver cannot say.
   * @example
   * ```ts
   * Context.current?.device.ordinal;
   * ```
   */
  static get current(): Context | undefined {
    const handle = getBackend().contextGetCurrent();
    if (handle === 0) return undefined;
    for (let i = pushed.length - 1; i >= 0; i--) {
      const ctx = pushed[i]!.scope.context;
      if (!ctx.destroyed && ctx.ctx === handle) return ctx;
    }
    const { ordinal, flags } = getBackend().contextInfo(handle);
    const device = Device.get(ordinal);
    const selected = device.selectedContext;
    if (selected !== undefined && !selected.destroyed && selected.ctx === handle) return selected;
    return new Context(device, handle, handle === device.context, flags, true);
  }

  /**
   * PyCUDA's `Context.pop()`: pops the context pushed last with `push()` and not popped yet.
   * @returns That context.
   * @throws {VramStateError} When no pushed context is left.
   * @example
   * ```ts
   * ctx.push();
   * Context.pop() === ctx; // true
   * ```
   */
  static pop(): Context {
    const top = pushed[pushed.length - 1];
    if (top === undefined) throw new VramStateError('no context pushed with push() is left to pop');
    top.scope.pop();
    return top.scope.context;
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
   * Pushes this context on the calling thread's context stack (cuCtxPushCurrent, PyCUDA's
   * `ctx.push()`) and selects it for its device until it is popped: `pop()` on what this returns,
   * `Context.pop()`, or the end of a `using` scope, which pops what it pushed.
   * @returns The pushed context's scope.
   * @throws {UseAfterFreeError} When the context was destroyed.
   * @example
   * ```ts
   * {
   *   using _pushed = ctx.push();
   *   DeviceBuffer.allocate(1024); // in ctx
   * } // popped: the device's previous context is used again
   * ```
   */
  push(): PushedContext {
    const handle = this.handle;
    const previous = this.device.selectedContext;
    this.device.backend.contextPushCurrent(handle);
    this.device.select(this.isPrimary ? undefined : this);
    const scope = new PushedScope(this);
    pushed.push({ scope, previous });
    return scope;
  }

  /**
   * Sets the context's preferred split between L1 cache and shared memory (cuCtxSetCacheConfig),
   * for kernels with no preference of their own (`kernel.setCacheConfig`). A preference: the
   * driver may choose otherwise, and devices with a fixed split ignore it.
   * @param config `'prefer-none'` (the default), `'prefer-shared'`, `'prefer-l1'` or `'prefer-equal'`.
   * @throws {RangeError} For another value.
   * @throws {UseAfterFreeError} When the context was destroyed.
   * @throws {CudaError} When the driver refuses.
   * @example
   * ```ts
   * ctx.setCacheConfig('prefer-l1'); // Chroma's create_cuda_context
   * ```
   */
  setCacheConfig(config: CacheConfig): void {
    const value = cacheConfigValue(config);
    this.#inside(() => this.device.backend.contextSetCacheConfig(value));
  }

  /**
   * The context's cache preference (cuCtxGetCacheConfig).
   * @returns One of `CacheConfig`.
   * @throws {UseAfterFreeError} When the context was destroyed.
   * @example
   * ```ts
   * ctx.cacheConfig; // 'prefer-none' until setCacheConfig
   * ```
   */
  get cacheConfig(): CacheConfig {
    const value = this.#inside(() => this.device.backend.contextGetCacheConfig());
    const name = (Object.keys(cacheConfigs) as CacheConfig[]).find((key) => cacheConfigs[key] === value);
    if (name === undefined) throw new VramStateError(`the driver answered an unknown cache configuration ${value}`);
    return name;
  }

  /**
   * Destroys the context and every allocation, stream and event made in it; the device goes back
   * to its primary context. The primary context cannot be destroyed (it is shared), nor can a
   * borrowed one (its owner destroys it).
   * @throws {VramStateError} When it is the primary context or borrowed.
   * @throws {UseAfterFreeError} When it was already destroyed.
   * @example
   * ```ts
   * const ctx = Context.create(Device.get(0));
   * ctx.destroy();
   * ```
   */
  destroy(): void {
    if (this.isPrimary) throw new VramStateError('the primary context is shared and cannot be destroyed');
    if (this.borrowed) throw new VramStateError('the context is borrowed (Context.fromHandle): its owner destroys it, never vram');
    if (this.#destroyed) throw new UseAfterFreeError('the context was already destroyed');
    this.#destroyed = true;
    if (this.device.selectedContext === this) this.device.select(undefined);
    this.device.backend.contextDestroy(this.ctx);
  }

  /** `using ctx = Context.create(...)` destroys it at the end of the scope (a primary or borrowed one stays). */
  [Symbol.dispose](): void {
    if (!this.#destroyed && !this.isPrimary && !this.borrowed) this.destroy();
  }

  /**
   * One line for logs.
   * @returns E.g. `Context(0x5a1, device 0, primary)`.
   * @throws Never.
   * @example
   * ```ts
   * String(Context.primary()); // 'Context(0x..., device 0, primary)'
   * ```
   */
  toString(): string {
    const kind = this.isPrimary ? ', primary' : this.borrowed ? ', borrowed' : '';
    return `Context(0x${this.ctx.toString(16)}, device ${this.device.ordinal}${kind}${this.#destroyed ? ', destroyed' : ''})`;
  }

  /** Runs `fn` with this context pushed (and pops it again), leaving vram's selection alone. */
  #inside<T>(fn: () => T): T {
    const backend = this.device.backend;
    backend.contextPushCurrent(this.handle);
    try {
      return fn();
    } finally {
      backend.contextPopCurrent();
    }
  }
}

const CONTEXT_OPTIONS = { schedule: true, mapHost: true, lmemResizeToMax: true } as const;

/** The CUctx_flags of `options`, checked. */
function contextFlags(what: string, options: ContextOptions): number {
  options = readOptions(what, options, CONTEXT_OPTIONS);
  const schedule = options.schedule ?? 'auto';
  if (!Object.hasOwn(scheduleFlags, schedule)) {
    throw new RangeError(`schedule must be 'auto', 'spin', 'yield' or 'blocking-sync', got '${String(schedule)}'`);
  }
  for (const key of ['mapHost', 'lmemResizeToMax'] as const) {
    if (options[key] !== undefined && typeof options[key] !== 'boolean') throw new TypeError(`${key} must be a boolean, got ${typeof options[key]}`);
  }
  return (
    scheduleFlags[schedule] | (options.mapHost === true ? ContextFlags.MAP_HOST : 0) | (options.lmemResizeToMax === true ? ContextFlags.LMEM_RESIZE_TO_MAX : 0)
  );
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
