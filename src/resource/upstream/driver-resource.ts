/**
 * The shared base of the resources that hand out driver memory one call per block (CudaResource,
 * ManagedResource, PinnedHostResource, AsyncResource). What they share is written once here: the
 * live sizes (so a foreign, inner, double or wrongly sized free is a typed error before the driver
 * sees it), the out-of-memory error naming the resource, and `destroy()` freeing what is still live.
 */
import type { Backend, Ptr } from '../../backend/backend.js';
import type { Device } from '../../device.js';
import { CudaError, OutOfMemoryError, outOfMemoryMessage, type OutOfMemoryReason } from '../../errors.js';
import { capturing, refuseDuringCapture, refuseOnLegacyDuringCapture } from '../../graphs/sessions.js';
import { formatBytesExact } from '../../util/size.js';
import { MemoryResource } from '../resource.js';
import { type MemoryFigures } from '../figures.js';
import { type StreamRef } from '../../stream.js';
import { outOfMemoryStatistics, type SnapshotSegment } from '../figures.js';
import { SizeTable } from './size-table.js';
import { largerThanDevice } from '../larger-than-device.js';

/**
 * A resource whose every block is one driver allocation. Subclasses implement `driverAllocate`
 * and `driverFree`; this class keeps the live table and names itself in errors.
 *
 * @example
 * ```ts
 * function driverBlocks(mr: MemoryResource): number | undefined {
 *   return mr instanceof DriverResource ? mr.liveCount : undefined; // one cuMemAlloc-like call per block
 * }
 * ```
 */
export abstract class DriverResource extends MemoryResource {
  /**
   * Refused on a capturing stream: each block is a driver allocation (cuMemAlloc and the like),
   * which a capture forbids (AsyncResource overrides it: its calls become graph memory nodes).
   * @returns `'refuse'`.
   * @example
   * ```ts
   * new CudaResource().capturePolicy; // 'refuse'
   * ```
   */
  override get capturePolicy(): 'private' | 'driver' | 'upstream' | 'refuse' {
    return 'refuse';
  }

  /** The live allocations and their sizes. */
  private readonly table = new SizeTable();

  /**
   * @param owner The device whose backend and context the calls use (for host memory: the device
   *   whose context pins it).
   */
  protected constructor(protected readonly owner: Device) {
    super();
  }

  /**
   * The Device whose context makes the driver calls: the device the memory lives on (for pinned
   * host memory, the one whose context pins it).
   *
   * @throws Never.
   * @example
   * ```ts
   * new CudaResource(0).deviceObject.ordinal; // 0
   * ```
   */
  get deviceObject(): Device {
    return this.owner;
  }

  /**
   * The device ordinal the memory belongs to (pinned host memory overrides it with -1).
   *
   * @throws Never.
   * @example
   * ```ts
   * new CudaResource(0).deviceOrdinal; // 0
   * ```
   */
  get deviceOrdinal(): number {
    return this.owner.ordinal;
  }

  /** The backend of the owning device. */
  protected get backend(): Backend {
    return this.owner.backend;
  }

  /** Number of live allocations. */
  get liveCount(): number {
    return this.table.size;
  }

  /** The bytes of the live allocations: every block is one driver allocation (`memoryFigures().reservedFromAllocated`). */
  override get reservedBytes(): number {
    return this.table.bytes.value;
  }

  /** The high-water mark of the live allocations' bytes. */
  override get peakReservedBytes(): number {
    return this.table.bytes.peak;
  }

  /**
   * The live table's figures. Every block is one driver allocation and nothing is cached, so
   * reserved is allocated; resources over a driver pool (AsyncResource) report the pool's instead.
   */
  override memoryFigures(): MemoryFigures {
    const bytes = this.table.bytes.snapshot();
    return {
      allocatedBytes: bytes,
      allocations: this.table.allocations.snapshot(),
      reservedBytes: bytes.value,
      peakReservedBytes: bytes.peak,
      reservedFromAllocated: true,
    };
  }

  /** Restarts the live table's peaks. */
  override resetPeakFigures(): void {
    this.table.bytes.resetPeak();
    this.table.allocations.resetPeak();
  }

  /** One driver allocation of `bytes` on stream `handle`. */
  protected abstract driverAllocate(bytes: number, handle: number): Ptr;

  /** Frees one driver allocation on stream `handle`. */
  protected abstract driverFree(ptr: Ptr, bytes: number, handle: number): void;

  protected doAllocate(bytes: number, handle: number, _stream: StreamRef | undefined): Ptr {
    if (capturing()) this.checkCapture('allocate', handle);
    let ptr: Ptr;
    try {
      ptr = this.driverAllocate(bytes, handle);
    } catch (error) {
      throw this.nameOutOfMemory(error, bytes);
    }
    this.table.add(ptr, bytes);
    return ptr;
  }

  protected doDeallocate(ptr: Ptr, bytes: number, handle: number, _stream: StreamRef | undefined): void {
    this.table.check(ptr, bytes, this.describe());
    if (capturing()) this.checkCapture('deallocate', handle);
    this.driverFree(ptr, bytes, handle);
    this.table.remove(ptr);
  }

  /**
   * The one capture check of every resource whose block is a driver call, made before the call
   * (see Note [What a capture refuses] in docs/design/stream-capture.md): a capture on the
   * block's own stream was routed by the contract (`capturePolicy`); here, the calls on other
   * streams that would still reach a capture. The synchronous allocator (policy `'refuse'`:
   * cuMemAlloc, cuMemAllocManaged, cuMemHostAlloc and their frees) is refused while a capture in
   * mode global or thread-local lasts; a stream-ordered one (AsyncResource) on the legacy default
   * stream while a blocking stream captures. Nothing changes when it throws: the caller (a
   * buffer's `free()`, a pool's growth) keeps what it had.
   */
  private checkCapture(call: 'allocate' | 'deallocate', handle: number): void {
    const what = `${this.constructor.name}.${call}()`;
    if (this.capturePolicy === 'refuse') {
      refuseDuringCapture(
        what,
        `${this.describe()} ${call}s with the driver's synchronous calls (cuMemAlloc, cuMemFree and the like), ` +
          "which a capture forbids: call it before or after the capture, or capture in mode 'relaxed'",
      );
    } else if (handle === 0) {
      refuseOnLegacyDuringCapture(what, `${this.describe()} ${call}s in stream order on the legacy default stream`);
    }
  }

  /** One segment per live allocation, ascending by address: each is its one block. */
  protected override doMemorySegments(): SnapshotSegment[] {
    return this.table
      .entries()
      .sort((a, b) => a[0] - b[0])
      .map(([address, bytes]) => ({
        address,
        bytes,
        kind: 'allocation',
        pages: null,
        blocks: [{ address, bytes, requestedBytes: bytes, state: 'live', stream: null, stack: null }],
      }));
  }

  /**
   * Hands the live table to the garbage-collection backstop: if the resource is collected before
   * its memory was released, every allocation still live is freed with `free` (on the default
   * stream), then `after` runs (a driver pool the resource created). Called at the end of a
   * subclass's constructor, with functions that must not reference the resource.
   *
   * @param free Frees one driver allocation on stream `handle`.
   * @param after Runs once the allocations are freed; with it, a collected resource is a leak
   *   even with nothing live (it held a driver object).
   */
  protected guardLive(free: (ptr: Ptr, handle: number) => void, after?: () => void): void {
    const table = this.table;
    this.guardMemory(() => {
      const entries = table.entries();
      let bytes = 0;
      for (const [ptr, size] of entries) {
        free(ptr, 0);
        table.remove(ptr);
        bytes += size;
      }
      if (after === undefined) return entries.length > 0 ? bytes : null;
      after();
      return bytes;
    });
  }

  /** Frees every allocation still live (on the default stream), then forgets them. */
  protected override doDestroy(): void {
    for (const [ptr, bytes] of this.table.entries()) {
      this.driverFree(ptr, bytes, 0);
      this.table.remove(ptr);
    }
  }

  /**
   * Why the driver refused `bytes`: the driver's own reason (`device`, `host`) unless a subclass
   * knows better (a pool past its maximum size says `maximum`).
   */
  protected outOfMemoryReason(error: OutOfMemoryError, _bytes: number): OutOfMemoryReason {
    return error.reason;
  }

  /**
   * The driver's out-of-memory error again, naming this resource and its figures, with the
   * driver's error as the cause; other errors unchanged.
   */
  private nameOutOfMemory(error: unknown, bytes: number): unknown {
    if (!(error instanceof OutOfMemoryError) || error.resource !== undefined) return error;
    const live = this.table;
    // Larger than the whole device: that is the cause, whatever the driver ran out of first.
    const tooLarge = this.kind === 'device' ? largerThanDevice(this.owner, bytes) : undefined;
    return new OutOfMemoryError({
      requestedBytes: bytes,
      call: error.call,
      reason: this.outOfMemoryReason(error, bytes),
      resource: this.describe(),
      statistics: outOfMemoryStatistics(this.memoryFigures()),
      // The driver's own words (the cause), not the backend's message, which already named the request.
      message: outOfMemoryMessage(
        bytes,
        this.describe(),
        `${tooLarge === undefined ? (error.cause instanceof Error ? error.cause.message : error.message) : `${tooLarge} (${error.cause instanceof CudaError ? `${error.cause.call} failed: ${error.cause.errorName}` : `${error.call} refused it`})`} ` +
          `(${live.size} live allocations, ${formatBytesExact(live.bytes.value)})`,
      ),
      cause: error.cause ?? error,
    });
  }
}
