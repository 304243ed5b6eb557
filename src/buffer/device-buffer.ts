/**
 * DeviceBuffer: an owned block of device memory that remembers the resource, stream and size it
 * came from and returns there on `free()` (or at the end of a `using` scope). PitchedDeviceBuffer
 * adds the driver-chosen row pitch of a 2D allocation and 2D copies.
 */
import type { Ptr } from '../backend/backend.js';
import { Device } from '../device.js';
import { streamHandleOf } from '../stream.js';
import { checkBytes, MAX_BYTES, readBytes, type ByteSize } from '../validate.js';
import { readOptions } from '../util/options.js';
import { DeviceMemory } from './device-memory.js';
import { copy2D, type CopyEndpoint } from './copy-planning.js';
import { allocateReleasingCaches } from '../resource/cache-registry.js';
import { CudaResource } from '../resource/upstream/cuda-resource.js';
import { ForeignDeviceBuffer, type ForeignPointerOptions } from './foreign-device-buffer.js';
import { getCurrentResource } from '../resource/current.js';
import type { Release } from './lifetime.js';
import { reportOutOfMemory, tryAllocate, upstreamChain, MemoryResource } from '../resource/resource.js';
import { defaultStream, type StreamRef } from '../stream.js';
import { isOutOfMemory, OutOfMemoryError, type OutOfMemoryReason } from '../errors.js';
import { abortReason, BlockedResult, memoryFreed, waitForMemory, waiting, type AbortSignalLike } from '../resource/waiting.js';
import { ArenaResource } from '../resource/suballoc/arena.js';
import { PoolResource } from '../resource/suballoc/pool.js';
import { LimitingAdaptor } from '../resource/adaptors/limiting.js';
import { activeBudgets, chargeAllocated, chargeBudgets, overBudget, smallestBudget } from './budget.js';
import { formatBytes } from '../util/size.js';
import { deviceMemoryWords } from '../resource/larger-than-device.js';
import { collectDropped, pressureTurns, reclaimDropped } from './dropped-memory.js';
import { spillManager, SPILL_VARIABLE, type SpillEntry } from './spill/spill-manager.js';
import { beginOperation, setResidency } from './spill/residency.js';
import { SpillLease, type LeaseOptions } from './spill/lease.js';
import { SpillableResource } from '../resource/upstream/spillable-resource.js';

/** Options for `DeviceBuffer.allocate`. */
export interface DeviceBufferOptions {
  /** Where the memory comes from; default the device's current resource (`getCurrentResource`). */
  readonly resource?: MemoryResource;
  /** The stream the memory is allocated on and later freed on; default the legacy default stream. */
  readonly stream?: StreamRef;
  /** The device, when no resource is named (device 0 by default). */
  readonly device?: Device | number;
  /**
   * May be moved to pinned host memory when the device runs short, and brought back by the next
   * vram operation that uses it (`VRAM_SPILL=1` makes it the default where no resource is named).
   * Without `resource` (or with a SpillableResource) it comes back at the same address: the memory
   * is its own virtual range rounded up to the allocation granularity (2 MiB), so it is for large
   * data. With another device resource (`CudaResource`, `AsyncResource`, a pool: memory without a
   * virtual range of its own) it comes back at a new address, allocated from that resource on the
   * stream of the use: vram's own operations follow it, foreign code reads `buffer.ptr` after the
   * reload and holds a `lease()` while it uses it (a lease keeps the memory, so the address, put).
   * Host and managed resources are refused.
   */
  readonly spillable?: boolean;
}

/** Options for `DeviceBuffer.allocateAsync`: those of `allocate`, and whether and how long to wait. */
export interface AllocateAsyncOptions extends DeviceBufferOptions {
  /**
   * Wait for memory other tasks free instead of failing (default false: fail as `allocate` does).
   * Waiters of a device are served in order (see `allocateAsync`).
   */
  readonly wait?: boolean;
  /** Ends the wait: the promise rejects with `signal.reason`, and nothing stays queued. */
  readonly signal?: AbortSignalLike;
  /** The most milliseconds to wait (default Infinity); then an OutOfMemoryError saying how long it waited. */
  readonly timeout?: number;
}

/**
 * Device memory owned by the program: free it with `free()`, or declare it with `using`.
 * @example
 * ```ts
 * using buf = DeviceBuffer.allocate(1024);
 * buf.copyFromHost(new Float32Array(256).fill(1));
 * ```
 */
export class DeviceBuffer extends DeviceMemory {
  /** The device the memory lives on. */
  readonly device: Device;
  /** The resource it was allocated from and is returned to. */
  readonly resource: MemoryResource;
  /** The stream it was allocated on, and is freed on unless `free({ stream })` names another. */
  readonly stream: StreamRef;
  /** Its spill state, for spillable memory (set once, by `allocateSpillable`). */
  #spill: SpillEntry | undefined;

  protected constructor(ptr: Ptr, bytes: number, resource: MemoryResource, stream: StreamRef, release: Release) {
    const device = Device.get(resource.deviceOrdinal);
    super(ptr, bytes, release, device, stream);
    this.resource = resource;
    this.stream = stream;
    this.device = device;
  }

  /**
   * The address of the first byte. For spillable memory, reading it brings the memory back if it
   * was spilled (synchronously) and counts it as written (foreign code may write through it); the
   * address is the same every time (but for spillable memory from a resource other than a
   * SpillableResource, which comes back at a new address: read `ptr` again after a reload), and the
   * memory is there only while the buffer is resident: hold a `lease()` while foreign code uses it.
   *
   * @returns The address.
   * @throws {UseAfterFreeError} Once freed.
   * @throws {OutOfMemoryError} When spilled memory cannot be brought back.
   * @example
   * ```ts
   * native.process(buf.ptr, buf.byteLength);
   * ```
   */
  override get ptr(): Ptr {
    const spill = this.#spill;
    if (spill !== undefined && !this.freed) {
      beginOperation();
      spill.prepare(undefined, true);
    }
    return super.ptr;
  }

  /**
   * True for memory allocated with `{ spillable: true }`.
   *
   * @returns Whether it may be spilled.
   * @throws Never.
   * @example
   * ```ts
   * DeviceBuffer.allocate(8 << 20, { spillable: true }).spillable; // true
   * ```
   */
  get spillable(): boolean {
    return this.#spill !== undefined;
  }

  /**
   * True while the memory is on the device: always for memory that is not spillable, and for
   * spillable memory until it is spilled (the next use brings it back).
   *
   * @returns Whether it is on the device now.
   * @throws Never.
   * @example
   * ```ts
   * if (!buf.resident) console.log('spilled to host memory');
   * ```
   */
  get resident(): boolean {
    return this.#spill === undefined || this.#spill.resident;
  }

  /**
   * Keeps the memory on the device until the lease is disposed: for foreign code that uses its
   * address (a native library, an exported DLPack tensor). Brings it back first if it was spilled,
   * ordered on `options.stream` (synchronously without one), and counts it as written unless
   * `readOnly`. On memory that is not spillable a lease holds nothing and costs nothing.
   *
   * @param options `stream`: bring the memory back on it; `readOnly`: the foreign code only reads.
   * @returns The lease: `ptr`, and `release()` / `using`.
   * @throws {TypeError} For an unknown option, a `readOnly` that is not a boolean, or a bad stream.
   * @throws {UseAfterFreeError} When the buffer was freed.
   * @throws {OutOfMemoryError} When spilled memory cannot be brought back.
   * @example
   * ```ts
   * {
   *   using lease = buf.lease({ stream });
   *   native.launch(lease.ptr, stream.handle); // resident until the end of the block
   * }
   * ```
   */
  lease(options: LeaseOptions = {}): SpillLease {
    options = readOptions('DeviceBuffer.lease', options, { stream: true, readOnly: true });
    if (options.readOnly !== undefined && typeof options.readOnly !== 'boolean') {
      throw new TypeError(`DeviceBuffer.lease: readOnly must be a boolean, got ${typeof options.readOnly}`);
    }
    if (options.stream !== undefined) streamHandleOf(options.stream);
    const ptr = super.ptr; // UseAfterFreeError
    const spill = this.#spill;
    if (spill === undefined) return new SpillLease(ptr, undefined);
    beginOperation();
    spill.prepare(options.stream, options.readOnly !== true);
    spill.leases++;
    // Read after the reload: memory from a resource without virtual memory came back elsewhere.
    return new SpillLease(super.ptr, spill);
  }

  /**
   * Allocates `bytes` from `options.resource` (default: the device's current resource) on
   * `options.stream`. Bad sizes are TypeError/RangeError; no memory is OutOfMemoryError.
   * @param size Bytes: a whole number, or a size like `'512M'` (binary units, as the CLI reads them).
   * @param options Resource, stream and device.
   * @returns The buffer; it owns its memory.
   * @throws {TypeError} When `size` is neither a number nor a size string, or an option is unknown or of the wrong type.
   * @throws {RangeError} When `size` is negative, fractional, too large, or not a size.
   * @throws {OutOfMemoryError} When the resource has no memory for it.
   * @example
   * ```ts
   * using buf = DeviceBuffer.allocate(1 << 20, { stream });
   * using big = DeviceBuffer.allocate('256M');
   * ```
   */
  static allocate(size: ByteSize, options?: DeviceBufferOptions): DeviceBuffer {
    const bytes = readBytes(size, 'bytes');
    if (options === undefined) return DeviceBuffer.allocateDefault(bytes);
    options = readOptions('DeviceBuffer.allocate', options, { resource: true, stream: true, device: true, spillable: true });
    const stream = options.stream ?? defaultStream;
    if (isSpillable(options)) return DeviceBuffer.#allocateSpillable(bytes, options, stream);
    const resource = pickResource(options);
    streamHandleOf(stream);
    const budgets = activeBudgets();
    if (budgets.length === 0) {
      const ptr = resource.allocate(bytes, stream);
      return new DeviceBuffer(ptr, bytes, resource, stream, resource);
    }
    const over = overBudget(budgets, bytes, 'DeviceBuffer.allocate');
    if (over !== undefined) throw over.error;
    return DeviceBuffer.#charged(resource.allocate(bytes, stream), bytes, resource, stream, budgets);
  }

  /**
   * `allocate(bytes)` with no options, for a caller that has checked `bytes` (the resource contract
   * checks it again): with no budget open and spilling not the default, straight to the current
   * resource of device 0 (or the `useResource` scope's) on the default stream.
   *
   * @param bytes A whole number of bytes, at least 1.
   * @returns The buffer; it owns its memory.
   * @internal DeviceArray's allocation path; a user calls `allocate`.
   */
  static allocateDefault(bytes: number): DeviceBuffer {
    if (activeBudgets().length !== 0 || isSpillable(NO_OPTIONS)) return DeviceBuffer.allocate(bytes, NO_OPTIONS);
    const resource = getCurrentResource(undefined);
    return new DeviceBuffer(resource.allocate(bytes, defaultStream), bytes, resource, defaultStream, resource);
  }

  /** A buffer whose bytes count against `budgets` until it is freed. */
  static #charged(ptr: Ptr, bytes: number, resource: MemoryResource, stream: StreamRef, budgets: ReturnType<typeof activeBudgets>): DeviceBuffer {
    const refund = chargeBudgets(budgets, bytes);
    return new DeviceBuffer(ptr, bytes, resource, stream, (on) => {
      resource.deallocate(ptr, bytes, on);
      refund?.();
    });
  }

  /**
   * `allocate`, as a promise; with `wait: true` it waits for memory other tasks free instead of
   * failing. The resource, stream, device and memory budgets are those of the call (its
   * `useResource` and `withMemoryBudget` scopes). A waiting allocation first tries as `allocate`
   * does (a driver refusal releases every cache of the device and retries), and then waits:
   * every free of the device's memory, every budget given bytes back, and a poll with backoff
   * (up to 128 ms, for stream-ordered frees and other processes) try it again. The order, per
   * device: first come, first served; a request waiting for the device's memory holds back every
   * later request of that device, so a small one never overtakes an earlier large one, while one
   * waiting only on its own memory budget holds back only later requests under that budget.
   *
   * @param size Bytes, as `allocate` takes them: a whole number, or a size like `'512M'`.
   * @param options Those of `allocate`, and `wait`, `signal`, `timeout` (milliseconds).
   * @returns The buffer, once allocated.
   * @throws {TypeError | RangeError} For bad arguments or options (the promise rejects; nothing is queued).
   * @throws {OutOfMemoryError} Without `wait`, as `allocate`. With it: at once when the request
   *   can never be met (larger than the device's memory, the stack's limit or maximum, an arena, or
   *   the memory budget; the message says which), or after `timeout` ms (the message says how long
   *   it waited, the cause is the last try's error).
   * @throws The signal's `reason` when `signal` aborts (an `AbortError` DOMException by default,
   *   and where the signal has no reason); a signal whose `addEventListener` throws rejects with
   *   that error, and nothing is queued.
   * @example
   * ```ts
   * using buf = await DeviceBuffer.allocateAsync(1 << 30, { wait: true, timeout: 30_000, signal });
   * ```
   */
  static async allocateAsync(size: ByteSize, options: AllocateAsyncOptions = {}): Promise<DeviceBuffer> {
    const bytes = readBytes(size, 'bytes');
    options = readOptions('DeviceBuffer.allocateAsync', options, {
      resource: true,
      stream: true,
      device: true,
      spillable: true,
      wait: true,
      signal: true,
      timeout: true,
    });
    const { wait = false, signal, timeout = Infinity } = options;
    if (typeof wait !== 'boolean') throw new TypeError(`DeviceBuffer.allocateAsync: wait must be a boolean, got ${typeof wait}`);
    if (signal !== undefined && (signal === null || typeof signal !== 'object' || typeof signal.addEventListener !== 'function')) {
      throw new TypeError('DeviceBuffer.allocateAsync: signal must be an AbortSignal');
    }
    if (typeof timeout !== 'number' || Number.isNaN(timeout) || timeout < 0) {
      throw new RangeError(`DeviceBuffer.allocateAsync: timeout must be a number of milliseconds >= 0 (or Infinity), got ${String(timeout)}`);
    }
    if (signal?.aborted === true) throw abortReason(signal);
    const due = pressureTurns();
    if (due !== undefined) await due;
    const stream = options.stream ?? defaultStream;
    // Spillable memory makes room by spilling other spillable buffers, not by waiting.
    if (isSpillable(options)) return DeviceBuffer.#allocateSpillable(bytes, options, stream);
    const resource = pickResource(options);
    streamHandleOf(stream);
    const call = 'DeviceBuffer.allocateAsync';
    const budgets = activeBudgets();
    /** One try; a refusal is returned, not thrown, and is not yet the program's (no observer sees it). */
    const attempt = (): DeviceBuffer | BlockedResult => {
      const over = overBudget(budgets, bytes, call);
      if (over !== undefined) return new BlockedResult(over.budget, over.error);
      let ptr: Ptr;
      try {
        ptr = tryAllocate(resource, bytes, stream);
      } catch (error) {
        if (!isOutOfMemory(error)) throw error;
        return new BlockedResult(
          'memory',
          error instanceof OutOfMemoryError
            ? error
            : new OutOfMemoryError({ requestedBytes: bytes, call, reason: 'device', resource: resource.describe(), cause: error }),
        );
      }
      return DeviceBuffer.#charged(ptr, bytes, resource, stream, budgets);
    };
    if (!wait) {
      // A refusal first lets what the program dropped be reclaimed (a collection and two turns of
      // the event loop, for the finalizers); then the allocation as `allocate` makes it.
      const first = attempt();
      if (!(first instanceof BlockedResult)) return first;
      await reclaimDropped();
      return DeviceBuffer.allocate(bytes, { resource, stream });
    }
    const never = neverMet(resource, bytes, smallestBudget(budgets), call);
    if (never !== undefined) {
      reportOutOfMemory(resource, never, bytes, stream);
      throw never;
    }
    let collected = false;
    const waited = (): DeviceBuffer | BlockedResult => {
      const result = attempt();
      // The first refusal starts a collection: the wait's next tries find what its finalizers freed.
      if (result instanceof BlockedResult && !collected) {
        collected = true;
        collectDropped();
      }
      return result;
    };
    try {
      return await waitForMemory(resource.deviceOrdinal, waited, { signal, timeout, call, requestedBytes: bytes, groups: budgets });
    } catch (error) {
      if (error instanceof OutOfMemoryError) reportOutOfMemory(resource, error, bytes, stream);
      throw error;
    }
  }

  /** `allocate` of spillable memory: from the device's SpillableResource, through its spill manager. */
  static #allocateSpillable(bytes: number, options: DeviceBufferOptions, stream: StreamRef): DeviceBuffer {
    const given = options.resource;
    if (given !== undefined && !(given instanceof MemoryResource && given.kind === 'device')) {
      throw new TypeError(
        `DeviceBuffer.allocate: spillable memory comes from device memory, which ${
          given === null || typeof given !== 'object' || typeof given.describe !== 'function' ? 'that resource' : given.describe()
        } is not; ` + "leave resource out (the device's SpillableResource is used), name a device resource, or drop spillable",
      );
    }
    if (given !== undefined && options.device !== undefined && Device.resolve(options.device).ordinal !== given.deviceOrdinal) {
      throw new RangeError(`${given.describe()} belongs to device ${given.deviceOrdinal}, not the device asked for`);
    }
    const device = given !== undefined ? Device.get(given.deviceOrdinal) : Device.resolve(options.device);
    streamHandleOf(stream);
    // Charged to the memory budgets of the call like every other allocation, before anything spills for it.
    const budgets = activeBudgets();
    const over = overBudget(budgets, bytes, 'DeviceBuffer.allocate');
    if (over !== undefined) throw over.error;
    beginOperation();
    const manager = spillManager(device);
    // Memory of another resource moves when it comes back; the SpillableResource's keeps its address.
    const moving = given === undefined || given instanceof SpillableResource ? undefined : given;
    const entry = manager.allocate(bytes, stream, moving);
    const refund = chargeBudgets(budgets, bytes);
    const buffer = new DeviceBuffer(entry.ptr, bytes, moving ?? manager.resource, stream, (on) => {
      manager.release(entry, on);
      refund?.();
    });
    buffer.#spill = entry;
    entry.owner = new WeakRef(buffer);
    setResidency(buffer, entry);
    return buffer;
  }

  /**
   * Allocates a 2D region of `height` rows of `widthBytes` each, padded to a pitch the driver
   * picks for coalesced access (cuMemAllocPitch; straight from the driver, returned with cuMemFree).
   * @throws {TypeError} When an argument or option is of the wrong type, or an option is unknown.
   * @throws {RangeError} When a size is out of range or `elementBytes` is not 4, 8 or 16.
   * @throws {OutOfMemoryError} When the device has no memory for it.
   * @example
   * ```ts
   * using image = DeviceBuffer.allocatePitched(640 * 4, 480);
   * console.log(image.pitch);
   * ```
   */
  static allocatePitched(widthBytes: number, height: number, options: PitchedOptions = {}): PitchedDeviceBuffer {
    return PitchedDeviceBuffer.allocate2D(widthBytes, height, readOptions('DeviceBuffer.allocatePitched', options, { elementBytes: true, device: true }));
  }

  /**
   * Wraps device memory vram did not allocate (a `CUdeviceptr` from C code or another runtime)
   * without copying it. vram never frees it: `free()`, `using` and the garbage-collection backstop
   * call `options.onRelease` exactly once and drop `options.owner`. The pointer is checked with
   * cuPointerGetAttributes first: device or managed memory, or mapped host memory's device
   * pointer, with [ptr, ptr + bytes) inside one allocation; the context the driver reports is
   * recorded, and synchronous copies and fills of the buffer run in it.
   *
   * @param ptr The device address.
   * @param bytes The size of the range in bytes.
   * @param options `owner` (kept alive until freed), `onRelease` (hands the memory back), `device`
   *   (the device that will use it; memory of another device needs peer access).
   * @returns A ForeignDeviceBuffer: a DeviceMemory (copies, memset and `DeviceArray.fromBuffer` take it),
   *   not a DeviceBuffer, since it has no resource or allocation stream to return to.
   * @throws {TypeError | RangeError} For a malformed pointer, size or option.
   * @throws {InvalidPointerError} For an address the driver does not know, unmapped host memory,
   *   another device's memory without peer access, or a range past its allocation (the message
   *   says which, and what the driver reported).
   * @example
   * ```ts
   * const ptr = native.allocateAndFill(1024); // cuMemAlloc + cuMemcpyHtoD in C
   * using buf = DeviceBuffer.fromPointer(ptr, 1024, { onRelease: () => native.free(ptr) });
   * const bytes = buf.copyToHost(new Uint8Array(1024));
   * ```
   */
  static fromPointer(ptr: number, bytes: number, options: ForeignPointerOptions = {}): ForeignDeviceBuffer {
    return ForeignDeviceBuffer.wrap(
      ptr,
      bytes,
      readOptions('DeviceBuffer.fromPointer', options, { owner: true, onRelease: true, device: true, readOnly: true }),
    );
  }

  /** Device memory is resident on its device (peer copies use it). */
  get residentDevice(): Device {
    return this.device;
  }

  /**
   * A short description for logs; a freed buffer still describes itself.
   *
   * @returns `DeviceBuffer(1024 bytes on device 0)`, named after the subclass, with `, freed` once freed.
   * @throws Never.
   * @example
   * ```ts
   * using buf = DeviceBuffer.allocate(1024);
   * String(buf); // 'DeviceBuffer(1024 bytes on device 0)'
   * ```
   */
  override toString(): string {
    return `${this.constructor.name}(${this.byteLength} bytes on device ${this.device.ordinal}${this.freed ? ', freed' : ''})`;
  }
}

/**
 * The out-of-memory error of a request that no amount of waiting can meet, or undefined: larger than
 * the device's memory (device memory; managed memory may exceed it), than a LimitingAdaptor's
 * limit, a pool's maximum or an arena's size in the resource's stack, or than a memory budget.
 */
function neverMet(resource: MemoryResource, bytes: number, budget: number, call: string): OutOfMemoryError | undefined {
  let most = budget;
  let what = `the memory budget of ${formatBytes(budget)} (withMemoryBudget)`;
  let reason: OutOfMemoryReason = 'budget';
  const consider = (limit: number, why: OutOfMemoryReason, text: string): void => {
    if (limit < most) {
      most = limit;
      reason = why;
      what = text;
    }
  };
  for (const r of upstreamChain(resource)) {
    if (r instanceof LimitingAdaptor) consider(r.limitBytes, 'limit', `the limit of ${formatBytes(r.limitBytes)} of ${r.describe()}`);
    else if (r instanceof PoolResource) consider(r.maximumSize, 'maximum', `the maximum of ${formatBytes(r.maximumSize)} of ${r.describe()}`);
    else if (r instanceof ArenaResource) consider(r.size, 'arena', `the ${formatBytes(r.size)} of ${r.describe()}`);
  }
  if (resource.kind === 'device') {
    const device = Device.get(resource.deviceOrdinal);
    consider(device.info.totalMemory, 'device', deviceMemoryWords(device));
  }
  if (bytes <= most) return undefined;
  return new OutOfMemoryError({
    requestedBytes: bytes,
    call,
    reason,
    resource: resource.describe(),
    message: `${call}: ${formatBytes(bytes)} can never be allocated from ${resource.describe()}, so it does not wait: it is larger than ${what}`,
  });
}

/** `VRAM_SPILL`, read at the first allocation that could use it (process.env costs a lookup per read). */
let spillByDefault: boolean | undefined;
/** The options of a call that gave none. */
const NO_OPTIONS: DeviceBufferOptions = Object.freeze({});

/**
 * Whether an allocation is spillable: as asked, else `VRAM_SPILL=1` where no resource is named.
 *
 * @internal
 * @param options The allocation's options (checked by readOptions).
 * @returns True for spillable memory.
 * @throws {TypeError} When `spillable` is not a boolean.
 * @throws {RangeError} When `VRAM_SPILL` is neither 0 nor 1.
 */
export function isSpillable(options: { readonly spillable?: boolean; readonly resource?: MemoryResource }): boolean {
  const spillable = options.spillable;
  if (spillable === undefined) return options.resource === undefined && (spillByDefault ??= SPILL_VARIABLE.read() === '1');
  if (typeof spillable !== 'boolean') throw new TypeError(`spillable must be a boolean, got ${typeof spillable}`);
  return spillable;
}

function pickResource(options: DeviceBufferOptions): MemoryResource {
  const resource = options.resource;
  if (resource === undefined) return getCurrentResource(options.device);
  if (resource === null || typeof resource !== 'object' || typeof resource.allocate !== 'function') {
    throw new TypeError('resource must be a MemoryResource');
  }
  if (resource.kind === 'pinned-host') {
    throw new TypeError(`DeviceBuffer needs device memory; ${resource.describe()} hands out pinned host memory (use HostBuffer)`);
  }
  if (options.device !== undefined && Device.resolve(options.device).ordinal !== resource.deviceOrdinal) {
    throw new RangeError(`${resource.describe()} belongs to device ${resource.deviceOrdinal}, not the device asked for`);
  }
  return resource;
}

/** Options for `DeviceBuffer.allocatePitched`. */
export interface PitchedOptions {
  /** Size of the elements the rows hold (4, 8 or 16), which the driver's pitch choice considers. Default 4. */
  readonly elementBytes?: 4 | 8 | 16;
  /** The device (device 0 by default). */
  readonly device?: Device | number;
}

/** Options of a 2D copy: the region copied and the other side's pitch. */
export interface Copy2DOptions {
  /** Bytes per row to copy; default the buffer's `widthBytes`. */
  readonly widthBytes?: number;
  /** Rows to copy; default the buffer's `height`. */
  readonly height?: number;
  /** Row pitch of the host or other side in bytes; default its `widthBytes` (packed rows). */
  readonly hostPitch?: number;
  /** Byte offset of the first row on the host or other side. Default 0. */
  readonly hostOffset?: number;
  /** Copy asynchronously on this stream (needs a HostBuffer on the host side). */
  readonly stream?: StreamRef;
}

/** Options of a device-to-device 2D copy. */
export interface Copy2DFromOptions {
  readonly widthBytes?: number;
  readonly height?: number;
  readonly stream?: StreamRef;
}

/**
 * A 2D device allocation whose rows start `pitch` bytes apart (pitch >= widthBytes).
 * @example
 * ```ts
 * using image = PitchedDeviceBuffer.allocate2D(640 * 4, 480);
 * image.copy2DFromHost(pixels);
 * ```
 */
export class PitchedDeviceBuffer extends DeviceBuffer {
  private constructor(
    ptr: Ptr,
    resource: MemoryResource,
    release: Release,
    /** Bytes from the start of one row to the next, chosen by the driver. */
    readonly pitch: number,
    /** Bytes of data in each row. */
    readonly widthBytes: number,
    /** Number of rows. */
    readonly height: number,
  ) {
    super(ptr, pitch * height, resource, defaultStream, release);
  }

  /**
   * Same as `DeviceBuffer.allocatePitched`.
   * @throws {TypeError} When an argument or option is of the wrong type, or an option is unknown.
   * @throws {RangeError} When a size is out of range or `elementBytes` is not 4, 8 or 16.
   * @throws {OutOfMemoryError} When the device has no memory for it.
   * @example
   * ```ts
   * using image = PitchedDeviceBuffer.allocate2D(640 * 4, 480, { elementBytes: 16 });
   * ```
   */
  static allocate2D(widthBytes: number, height: number, options: PitchedOptions = {}): PitchedDeviceBuffer {
    checkBytes(widthBytes, 'widthBytes');
    const h = checkBytes(height, 'height');
    options = readOptions('PitchedDeviceBuffer.allocate2D', options, { elementBytes: true, device: true });
    const elementBytes = options.elementBytes ?? 4;
    if (elementBytes !== 4 && elementBytes !== 8 && elementBytes !== 16) {
      throw new RangeError(`elementBytes must be 4, 8 or 16, got ${String(elementBytes)}`);
    }
    if (widthBytes * h > MAX_BYTES) {
      throw new RangeError(`allocatePitched(${widthBytes}, ${h}): ${widthBytes} bytes times ${h} rows is larger than any allocation`);
    }
    const device = Device.resolve(options.device);
    // cuMemAllocPitch memory is plain cuMemAlloc memory to free (cuMemFree), but it does not come
    // from a resource: the buffer names a CudaResource of its device for `resource` and frees the
    // pointer itself.
    const resource = new CudaResource(device);
    const { ptr, pitch } = allocateReleasingCaches(device.ordinal, () => {
      device.makeCurrent();
      return device.backend.memAllocPitch(widthBytes, h, elementBytes);
    });
    // cuMemFree synchronises the device, so the stream a free names needs no ordering here.
    const memFree = (): void => {
      device.makeCurrent();
      device.backend.memFree(ptr);
      // Not through a resource, so the waiting allocations are told here.
      if (waiting !== 0) memoryFreed(device.ordinal);
    };
    const refund = chargeAllocated(pitch * h, 'DeviceBuffer.allocatePitched', memFree);
    const free =
      refund === undefined
        ? memFree
        : (): void => {
            memFree();
            refund();
          };
    return new PitchedDeviceBuffer(ptr, resource, free, pitch, widthBytes, h);
  }

  /**
   * Copies rows from host memory (JavaScript memory, or a HostBuffer for a stream copy) into this buffer.
   * @throws {TypeError} When `src` is not host memory or an option is unknown or of the wrong type.
   * @throws {RangeError} When the region or the host side is out of bounds.
   * @throws {UseAfterFreeError} When this buffer was freed.
   * @example
   * ```ts
   * image.copy2DFromHost(new Uint8Array(640 * 4 * 480));
   * ```
   */
  copy2DFromHost(src: CopyEndpoint, options: Copy2DOptions = {}): void {
    options = readOptions('PitchedDeviceBuffer.copy2DFromHost', options, { widthBytes: true, height: true, hostPitch: true, hostOffset: true, stream: true });
    const { widthBytes, height } = this.#region(options, 'copy2DFromHost');
    copy2D(
      { memory: this, offset: 0, pitch: this.pitch },
      { memory: src, offset: options.hostOffset ?? 0, pitch: options.hostPitch ?? widthBytes },
      widthBytes,
      height,
      options.stream,
      'copy2DFromHost',
    );
  }

  /**
   * Copies rows from this buffer into host memory and returns `dst`.
   * @throws {TypeError} When `dst` is not host memory or an option is unknown or of the wrong type.
   * @throws {RangeError} When the region or the host side is out of bounds.
   * @throws {UseAfterFreeError} When this buffer was freed.
   * @example
   * ```ts
   * const pixels = image.copy2DToHost(new Uint8Array(640 * 4 * 480));
   * ```
   */
  copy2DToHost<T extends CopyEndpoint>(dst: T, options: Copy2DOptions = {}): T {
    options = readOptions('PitchedDeviceBuffer.copy2DToHost', options, { widthBytes: true, height: true, hostPitch: true, hostOffset: true, stream: true });
    const { widthBytes, height } = this.#region(options, 'copy2DToHost');
    copy2D(
      { memory: dst, offset: options.hostOffset ?? 0, pitch: options.hostPitch ?? widthBytes },
      { memory: this, offset: 0, pitch: this.pitch },
      widthBytes,
      height,
      options.stream,
      'copy2DToHost',
    );
    return dst;
  }

  /**
   * Copies rows from another pitched buffer (each side with its own pitch).
   * @throws {TypeError} When `src` is not a PitchedDeviceBuffer or an option is unknown or of the wrong type.
   * @throws {RangeError} When the region exceeds either buffer.
   * @throws {UseAfterFreeError} When this buffer was freed.
   * @example
   * ```ts
   * copy.copy2DFrom(image, { stream });
   * ```
   */
  copy2DFrom(src: PitchedDeviceBuffer, options: Copy2DFromOptions = {}): void {
    if (!(src instanceof PitchedDeviceBuffer)) throw new TypeError('copy2DFrom: src must be a PitchedDeviceBuffer');
    options = readOptions('PitchedDeviceBuffer.copy2DFrom', options, { widthBytes: true, height: true, stream: true });
    const { widthBytes, height } = this.#region(options, 'copy2DFrom');
    if (widthBytes > src.widthBytes || height > src.height) {
      throw new RangeError(`copy2DFrom: ${widthBytes} x ${height} exceeds the source's ${src.widthBytes} x ${src.height}`);
    }
    copy2D({ memory: this, offset: 0, pitch: this.pitch }, { memory: src, offset: 0, pitch: src.pitch }, widthBytes, height, options.stream, 'copy2DFrom');
  }

  #region(options: Copy2DFromOptions, what: string): { widthBytes: number; height: number } {
    this.checkLive();
    const widthBytes = options.widthBytes ?? this.widthBytes;
    const height = options.height ?? this.height;
    checkBytes(widthBytes, `${what}: widthBytes`);
    checkBytes(height, `${what}: height`);
    if (widthBytes > this.widthBytes || height > this.height) {
      throw new RangeError(`${what}: ${widthBytes} x ${height} exceeds the buffer's ${this.widthBytes} x ${this.height}`);
    }
    return { widthBytes, height };
  }
}
