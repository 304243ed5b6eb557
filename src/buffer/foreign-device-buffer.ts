/**
 * ForeignDeviceBuffer: memory vram did not allocate (a `CUdeviceptr` from C code, another
 * runtime's tensor, an imported interface), wrapped without a copy so copies and arrays treat it
 * like any DeviceMemory. vram never frees it: `free()`, `using` and the garbage-collection
 * backstop call the producer's `onRelease` exactly once and drop the reference to its `owner`.
 *
 * The pointer is checked with cuPointerGetAttributes before anything is wrapped: the driver must
 * know it as device or managed memory, or as host memory mapped for the device (the device
 * pointer of pinned DEVICEMAP memory), and [ptr, ptr + bytes) must lie inside the one allocation
 * the driver reports (RANGE_START_ADDR / RANGE_SIZE). Anything else is an InvalidPointerError
 * that says what the driver reported. The context the driver reports for the memory is recorded,
 * and synchronous copies and fills of it run in that context (`makeCurrent`), also when it is not
 * its device's primary context; work queued on a stream runs in the stream's context, where the
 * driver resolves the address through unified addressing.
 */
import { MemAccess, MemoryType, type Handle, type PointerAttributes, type Ptr } from '../backend/backend.js';
import { Device } from '../device.js';
import { CudaError, InvalidPointerError } from '../errors.js';
import { checkNonNegativeInteger, checkPointer } from '../validate.js';
import { readOptions } from '../util/options.js';
import { DeviceMemory } from './device-memory.js';
import { leaseSpillableAt } from './spill/spill-manager.js';
import type { FreeOptions, Release } from './lifetime.js';
import { defaultStream, type StreamRef } from '../stream.js';

/** Options of `DeviceBuffer.fromPointer` (and the buffer part of `DeviceArray.fromPointer`). */
export interface ForeignPointerOptions {
  /**
   * Anything that keeps the memory alive while vram uses it (the producer's tensor, a handle
   * object): held by the buffer until it is freed, then dropped.
   */
  readonly owner?: unknown;
  /**
   * Called exactly once when the buffer is freed (`free()`, `using`, or the backstop when it is
   * dropped): hand the memory back here. It must not refer to the buffer (the backstop could never
   * collect it); an error it throws reaches `free()`'s caller (the backstop records it as the
   * leak's `releaseError`).
   */
  readonly onRelease?: () => void;
  /**
   * The device that will use the memory (default: the one the driver reports). Memory of another
   * device is accepted only when this device can access it as a peer (`Device.canAccessPeer`; enable
   * the access with `enablePeerAccess` before kernels use it); the buffer's `device` stays the one
   * the memory lives on, whose context runs its copies. For mapped host and managed memory, the
   * device whose kernels read it.
   */
  readonly device?: Device | number;
  /**
   * The producer lends the memory for reading only (DLPack's READ_ONLY flag, the CUDA Array
   * Interface's `data[1]`): every copy, 2D copy or fill into it (through the buffer or any array
   * over it) is then a VramStateError before any driver call. Default false.
   */
  readonly readOnly?: boolean;
}

/** What the driver said the memory is. */
export type ForeignMemoryKind = 'device' | 'managed' | 'mapped-host';

/** The checked facts about a foreign pointer: where it lives and which context owns it. */
interface Checked {
  readonly device: Device;
  readonly resident: Device | undefined;
  readonly context: Handle | undefined;
  readonly kind: ForeignMemoryKind;
}

const hex = (n: number): string => `0x${n.toString(16)}`;

/**
 * Device-addressable memory that vram did not allocate and never frees.
 *
 * @example
 * ```ts
 * const ptr = cLibrary.makeBuffer(n); // a CUdeviceptr from cuMemAlloc
 * using buf = DeviceBuffer.fromPointer(ptr, n * 4, { onRelease: () => cLibrary.freeBuffer(ptr) });
 * buf.copyToHost(new Float32Array(n));
 * ```
 */
export class ForeignDeviceBuffer extends DeviceMemory {
  /** The device whose context runs its copies: where device memory lives, else the device asked for. */
  readonly device: Device;
  /** The device the memory lives on; undefined for managed and mapped host memory. */
  readonly residentDevice: Device | undefined;
  /** What the driver reported the memory to be. */
  readonly kind: ForeignMemoryKind;
  /** The legacy default stream: the default stream of arrays over it (no allocation stream). */
  readonly stream: StreamRef = defaultStream;
  /** The context the driver reported, when one (stream-ordered and VMM memory report none). */
  readonly #context: Handle | undefined;
  readonly #readOnly: boolean;
  #owner: unknown;

  private constructor(ptr: Ptr, bytes: number, checked: Checked, owner: unknown, release: Release, readOnly: boolean) {
    // Not stream-ordered: `onRelease` hands the memory back at once, so `free()` first waits on
    // the host for the streams recorded as using it.
    super(ptr, bytes, release, checked.device, undefined, false);
    this.device = checked.device;
    this.residentDevice = checked.resident;
    this.kind = checked.kind;
    this.#context = checked.context;
    this.#owner = owner;
    this.#readOnly = readOnly;
  }

  /** True when the producer lent the memory read-only: writes into it are refused. */
  override get readOnly(): boolean {
    return this.#readOnly;
  }

  /**
   * Wraps [ptr, ptr + bytes) after checking it with cuPointerGetAttributes (see the module
   * comment). Same as `DeviceBuffer.fromPointer`.
   *
   * @param ptr The device address (a CUdeviceptr as a number; for mapped host memory, its device pointer).
   * @param bytes The size of the range in bytes (0 is allowed: an empty range inside an allocation).
   * @param options `owner`, `onRelease`, `device`.
   * @returns The buffer; free it (or `using`) to call `onRelease`.
   * @throws {TypeError | RangeError} For a malformed pointer, size or option (before any driver call).
   * @throws {InvalidPointerError} For an address the driver does not know (a pageable host
   *   pointer, freed memory), host memory not mapped for the device, memory of a device the asked
   *   device cannot access, or a range running past its allocation; the message says which and
   *   what the driver reported. `onRelease` is not called then: the memory stays the caller's.
   * @example
   * ```ts
   * using buf = ForeignDeviceBuffer.wrap(ptr, 4096, { owner: tensor });
   * ```
   */
  static wrap(ptr: number, bytes: number, options: ForeignPointerOptions = {}): ForeignDeviceBuffer {
    checkPointer(ptr, 'ptr');
    if (ptr === 0) throw new RangeError('ptr is the null pointer: there is no memory to wrap');
    checkNonNegativeInteger(bytes, 'bytes');
    options = readOptions('ForeignDeviceBuffer.wrap', options, { owner: true, onRelease: true, device: true, readOnly: true });
    const onRelease = options.onRelease;
    if (onRelease !== undefined && typeof onRelease !== 'function') {
      throw new TypeError(`onRelease must be a function, got ${typeof onRelease}`);
    }
    if (options.readOnly !== undefined && typeof options.readOnly !== 'boolean') {
      throw new TypeError(`readOnly must be a boolean, got ${typeof options.readOnly}`);
    }
    const asked = options.device === undefined ? undefined : Device.resolve(options.device);
    const checked = checkForeignPointer(ptr, bytes, asked);
    // A view of vram's spillable memory keeps it resident at its address while the view lives.
    const lease = leaseSpillableAt(ptr, options.readOnly !== true);
    // Built here, so it captures the callback and never the buffer; Allocation calls it once.
    const release: Release = () => {
      lease?.release();
      onRelease?.();
    };
    return new ForeignDeviceBuffer(ptr, bytes, checked, options.owner, release, options.readOnly === true);
  }

  /**
   * The context the memory belongs to, as the driver reported it; the device's active context
   * for memory that belongs to none (stream-ordered or VMM allocations).
   *
   * @returns The CUcontext handle.
   * @throws {UseAfterFreeError} When the device's selected Context was destroyed (contextless memory only).
   * @example
   * ```ts
   * buf.context; // the C library's context, even if it is not the primary one
   * ```
   */
  override get context(): Handle {
    return this.#context ?? this.device.activeContext;
  }

  /**
   * Makes the memory's own context current (the device's active context for contextless memory).
   *
   * @returns Nothing.
   * @throws {CudaError} When that context was destroyed meanwhile (the driver's error).
   * @example
   * ```ts
   * buf.makeCurrent();
   * ```
   */
  override makeCurrent(): void {
    if (this.#context === undefined) this.device.makeCurrent();
    else this.backend.contextSetCurrent(this.#context);
  }

  /** True when the memory belongs to a context other than its device's active one. */
  override get ownContext(): boolean {
    return this.#context !== undefined && this.#context !== this.device.activeContext;
  }

  /**
   * The `owner` given to `fromPointer`, until the buffer is freed (undefined afterwards).
   *
   * @returns The owner.
   * @example
   * ```ts
   * buf.owner === tensor; // true until buf.free()
   * ```
   */
  get owner(): unknown {
    return this.freed ? undefined : this.#owner;
  }

  /**
   * Calls `onRelease` (once; vram never frees the memory) and drops the owner. Waits on the host
   * for streams recorded with `recordStream` first, since handing the memory back is not stream-ordered.
   *
   * @param options `stream`: work queued on it so far is waited for too.
   * @throws {DoubleFreeError} When already freed.
   * @example
   * ```ts
   * buf.free(); // onRelease runs now
   * ```
   */
  override free(options?: FreeOptions): void {
    try {
      super.free(options);
    } finally {
      if (this.freed) this.#owner = undefined;
    }
  }

  /**
   * A short description for logs; a freed wrapper still describes itself.
   *
   * @returns `ForeignDeviceBuffer(1024 bytes of device memory on device 0)`, with `, freed` once freed.
   * @throws Never.
   * @example
   * ```ts
   * using buf = DeviceBuffer.fromPointer(ptr, 1024);
   * String(buf); // 'ForeignDeviceBuffer(1024 bytes of device memory on device 0)'
   * ```
   */
  override toString(): string {
    return `ForeignDeviceBuffer(${this.byteLength} bytes of ${this.kind} memory on device ${this.device.ordinal}${this.freed ? ', freed' : ''})`;
  }
}

/**
 * Asks the driver about [ptr, ptr + bytes) and says where it lives, or throws InvalidPointerError.
 * Every device check is made before anything is wrapped, so a refusal leaves nothing behind.
 */
function checkForeignPointer(ptr: Ptr, bytes: number, asked: Device | undefined): Checked {
  const probe = asked ?? Device.get(0);
  const backend = probe.backend;
  // cuPointerGetAttributes needs no particular context, but cuMemHostGetDevicePointer needs one.
  probe.makeCurrent();
  let a: PointerAttributes;
  try {
    a = backend.pointerGetAttributes(ptr);
  } catch (error) {
    // cuPointerGetAttributes answers unknown addresses with zeros, but a driver may still refuse one.
    if (!(error instanceof CudaError)) throw error;
    throw new InvalidPointerError(`fromPointer: cuPointerGetAttributes refused ${hex(ptr)}: ${error.errorName}`, { cause: error });
  }
  const at = hex(ptr);
  if (a.memoryType === 0) {
    throw new InvalidPointerError(
      `fromPointer: ${at} is not memory the driver knows (cuPointerGetAttributes ` +
        'reported no memory type): a pageable host pointer (malloc or JavaScript memory, which the device cannot ' +
        'address: pin it with HostBuffer.register({ mapped: true }) or copy it), freed memory, or no address at all',
    );
  }
  if (a.memoryType === MemoryType.ARRAY) {
    throw new InvalidPointerError(`fromPointer: ${at} is a CUDA array (cuPointerGetAttributes reported CU_MEMORYTYPE_ARRAY), which has no linear address`);
  }
  if (a.rangeStart === 0 && a.rangeSize > 0) {
    // The driver gives the allocation's size but not its start: the view cannot be larger.
    if (bytes > a.rangeSize) {
      throw new InvalidPointerError(
        `fromPointer: ${bytes} bytes at ${at} are more than its allocation's ${a.rangeSize} (cuPointerGetAttributes RANGE_SIZE; ` +
          'the driver gives no start address for this memory, so where the view ends in it is not checked)',
      );
    }
  } else if (a.rangeSize <= 0 || ptr < a.rangeStart || ptr + bytes > a.rangeStart + a.rangeSize) {
    const end = a.rangeStart + a.rangeSize;
    throw new InvalidPointerError(
      `fromPointer: [${at}, ${hex(ptr + bytes)}) runs past its allocation ` +
        `[${hex(a.rangeStart)}, ${hex(end)}) of ${a.rangeSize} bytes (cuPointerGetAttributes RANGE_START_ADDR/RANGE_SIZE)` +
        (ptr + bytes > end ? `: ${ptr + bytes - end} bytes too many` : ''),
    );
  }
  const count = backend.deviceCount();
  const reported = a.device >= 0 && a.device < count ? Device.get(a.device) : undefined;
  const context = a.context === 0 ? undefined : a.context;
  // Managed memory first: the driver may report it as device or host memory, wherever it lies now.
  if (a.isManaged || a.memoryType === MemoryType.UNIFIED) {
    return { device: asked ?? reported ?? probe, resident: undefined, context, kind: 'managed' };
  }
  if (a.memoryType === MemoryType.HOST && a.pool !== 0) {
    // A pool's host memory (a host NUMA node's) is the device's at the same address once the pool
    // grants it access; cuMemHostGetDevicePointer knows only cuMemHostAlloc'd and registered memory.
    const user = asked ?? probe;
    if ((backend.memPoolGetAccess(a.pool, user.ordinal) & MemAccess.READ) === 0) {
      throw new InvalidPointerError(
        `fromPointer: ${at} is host memory of a memory pool that device ${user.ordinal} has no access to ` +
          '(cuMemPoolGetAccess reported none): grant it first (AsyncResource.setAccess, cuMemPoolSetAccess)',
      );
    }
    return { device: user, resident: undefined, context, kind: 'mapped-host' };
  }
  if (a.memoryType === MemoryType.HOST) {
    let devicePtr: Ptr;
    try {
      // Asked in the memory's own context: pinned memory that is not portable is mapped only there.
      if (context !== undefined) backend.contextSetCurrent(context);
      devicePtr = backend.memHostGetDevicePointer(ptr);
    } catch (error) {
      if (!(error instanceof CudaError)) throw error;
      throw new InvalidPointerError(
        `fromPointer: ${at} is pinned host memory that is not mapped for the device ` +
          `(cuPointerGetAttributes reported CU_MEMORYTYPE_HOST; cuMemHostGetDevicePointer failed: ${error.errorName}): ` +
          'allocate or register it with DEVICEMAP',
        { cause: error },
      );
    }
    if (devicePtr !== ptr) {
      throw new InvalidPointerError(
        `fromPointer: ${at} is the host address of mapped memory whose device address is ` +
          `${hex(devicePtr)} (cuMemHostGetDevicePointer): pass the device address`,
      );
    }
    return { device: asked ?? reported ?? probe, resident: undefined, context, kind: 'mapped-host' };
  }
  const home = reported ?? probe;
  if (asked !== undefined && asked !== home && !asked.canAccessPeer(home)) {
    throw new InvalidPointerError(
      `fromPointer: ${at} is memory of device ${home.ordinal}` +
        `${context === undefined ? '' : ` (context ${hex(context)})`}, which device ${asked.ordinal} cannot access ` +
        '(cuDeviceCanAccessPeer reported no peer access)',
    );
  }
  return { device: home, resident: home, context, kind: 'device' };
}
