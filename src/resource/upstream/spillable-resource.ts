/**
 * SpillableResource: device memory whose address outlives its physical pages. Each block is its
 * own reserved virtual range (cuMemAddressReserve, rounded up to the allocation granularity: 2 MiB
 * on current GPUs) with its own physical allocation mapped there (cuMemCreate, cuMemMap,
 * cuMemSetAccess). `unback` gives the physical memory back and keeps the range reserved; `back`
 * maps new memory at the same address. So a pointer handed out once (a kernel argument, a foreign
 * library's copy of it) names the same data whenever the block is backed: what spillable buffers
 * (src/buffer/spill/) build on. Four or five driver calls per block (about 100 us on a GPU) make
 * it a resource for large data, not for many small blocks; the rounding says the same.
 *
 * Who moves the data is the buffer layer's job (it copies out before `unback` and in after
 * `back`); this resource only keeps the addresses, the physical memory and the figures. A freed
 * block that was backed keeps its memory until the work queued on its freeing stream has run (an
 * event per block, queried, never waited for), which the figures show as cached and
 * `releaseCached` gives back when it can: the cache registry's protocol for memory freed on a
 * stream.
 */
import { EventFlags, MemAccess, type Handle, type Ptr } from '../../backend/backend.js';
import { CounterCell } from '../../counter.js';
import { Device } from '../../device.js';
import { InvalidPointerError, OutOfMemoryError, isOutOfMemory } from '../../errors.js';
import { outOfMemoryStatistics, type MemoryFigures, type SnapshotSegment } from '../figures.js';
import { MemoryResource, type StreamRef } from '../resource.js';

/** One block: its range, what was asked for, and the physical allocation mapped there (0: none). */
interface Block {
  readonly ptr: Ptr;
  readonly bytes: number;
  readonly size: number;
  handle: Handle;
}

/** A freed block whose memory waits for the work queued on its freeing stream. */
interface Pending {
  readonly block: Block;
  readonly event: Handle;
}

/**
 * Device memory at addresses that stay fixed while its physical pages come and go: the resource
 * behind `{ spillable: true }` buffers and arrays (one per device, `spillableResource(device)` in vram/buffers).
 * Its figures count what is backed now: `allocatedBytes` the backed blocks (a spilled block's bytes
 * are on the host, in `memoryStats().spill`), `reservedBytes` the physical memory held.
 *
 * @example
 * ```ts
 * using mr = new SpillableResource(0);
 * const ptr = mr.allocate(8 << 20);
 * mr.unback(ptr);  // physical memory gone, the address still reserved
 * mr.back(ptr);    // new memory at the same address (its contents are the caller's to restore)
 * mr.deallocate(ptr, 8 << 20);
 * ```
 */
export class SpillableResource extends MemoryResource {
  /**
   * Refused on a capturing stream: each block maps physical memory (cuMemCreate, cuMemMap), and a
   * spilled block's address can lose its memory, which a graph replaying writes cannot allow.
   * @returns `'refuse'`.
   * @example
   * ```ts
   * new SpillableResource().capturePolicy; // 'refuse'
   * ```
   */
  override get capturePolicy(): 'private' | 'driver' | 'upstream' | 'refuse' {
    return 'refuse';
  }

  /** Device memory. */
  readonly kind = 'device';
  /** The allocation granularity: every block starts on a granule of its own. */
  readonly alignment: number;
  readonly #device: Device;
  readonly #blocks = new Map<Ptr, Block>();
  #pending: Pending[] = [];
  readonly #allocated = new CounterCell();
  readonly #allocations = new CounterCell();
  #physical = 0;
  #peakPhysical = 0;
  /** Called by `releaseCached`: the buffer layer's eviction of what may be spilled; returns bytes unbacked. */
  #evictor: (() => number) | undefined;

  /**
   * @param device The device (device 0 by default).
   * @throws {TypeError} For something that is not a Device or an ordinal.
   * @example
   * ```ts
   * const mr = new SpillableResource(Device.get(1));
   * ```
   */
  constructor(device?: Device | number) {
    super();
    this.#device = Device.resolve(device);
    this.#device.makeCurrent();
    this.alignment = this.#device.backend.memGetAllocationGranularity(this.#device.ordinal);
  }

  /**
   * The device ordinal the memory belongs to.
   *
   * @throws Never.
   * @example
   * ```ts
   * new SpillableResource(0).deviceOrdinal; // 0
   * ```
   */
  get deviceOrdinal(): number {
    return this.#device.ordinal;
  }

  /** `SpillableResource(device=0)`. */
  describe(): string {
    return `SpillableResource(device=${this.deviceOrdinal})`;
  }

  /**
   * Sets what `releaseCached` calls first: the spill manager of this device evicting what it may
   * (the cache registry calls `releaseCached` on every resource of a device when the driver refuses
   * an allocation, so spilling answers any resource's refusal).
   *
   * @internal
   * @param evictor Evicts, returning the bytes of physical memory given back.
   */
  setEvictor(evictor: () => number): void {
    this.#evictor = evictor;
  }

  /**
   * True while `ptr`'s block has physical memory mapped.
   *
   * @param ptr A block's address.
   * @returns Whether it is backed.
   * @throws {InvalidPointerError} For an address this resource did not hand out.
   * @example
   * ```ts
   * mr.backed(ptr); // true after allocate and back, false after unback
   * ```
   */
  backed(ptr: Ptr): boolean {
    return this.#block(ptr, 'backed').handle !== 0;
  }

  /**
   * Gives the block's physical memory back to the driver and keeps its address range reserved.
   * The caller makes sure no queued work uses the memory any more (cuMemUnmap does not wait).
   *
   * @param ptr A backed block's address.
   * @returns The bytes of physical memory given back.
   * @throws {InvalidPointerError} For an address this resource did not hand out, or one not backed.
   * @example
   * ```ts
   * mr.unback(ptr);
   * ```
   */
  unback(ptr: Ptr): number {
    const block = this.#block(ptr, 'unback');
    if (block.handle === 0) throw new InvalidPointerError(`SpillableResource.unback: the block at 0x${ptr.toString(16)} has no memory mapped`);
    this.#device.makeCurrent();
    const backend = this.#device.backend;
    backend.memUnmap(block.ptr, block.size);
    backend.memRelease(block.handle);
    block.handle = 0;
    this.#physical -= block.size;
    this.#allocated.sub(block.bytes);
    this.#allocations.sub(1);
    return block.size;
  }

  /**
   * Maps new physical memory at the block's reserved address (its contents undefined).
   *
   * @param ptr An unbacked block's address.
   * @throws {InvalidPointerError} For an address this resource did not hand out, or one backed already.
   * @throws {OutOfMemoryError} When the driver has no memory for it (nothing changes).
   * @example
   * ```ts
   * mr.back(ptr);
   * ```
   */
  back(ptr: Ptr): void {
    const block = this.#block(ptr, 'back');
    if (block.handle !== 0) throw new InvalidPointerError(`SpillableResource.back: the block at 0x${ptr.toString(16)} is backed already`);
    this.#collect();
    block.handle = this.#map(block.ptr, block.size, block.bytes);
    this.#counted(block);
  }

  protected doAllocate(bytes: number, _handle: number, _stream: StreamRef | undefined): Ptr {
    this.#collect();
    const size = Math.ceil(bytes / this.alignment) * this.alignment;
    this.#device.makeCurrent();
    const backend = this.#device.backend;
    const ptr = backend.memAddressReserve(size, this.alignment);
    let handle: Handle;
    try {
      handle = this.#map(ptr, size, bytes);
    } catch (error) {
      backend.memAddressFree(ptr, size);
      throw error;
    }
    const block: Block = { ptr, bytes, size, handle };
    this.#blocks.set(ptr, block);
    this.#counted(block);
    return ptr;
  }

  protected doDeallocate(ptr: Ptr, bytes: number, handle: number, _stream: StreamRef | undefined): void {
    const block = this.#block(ptr, 'deallocate');
    if (block.bytes !== bytes) {
      throw new InvalidPointerError(`${this.describe()}.deallocate: the block at 0x${ptr.toString(16)} has ${block.bytes} bytes, not ${bytes}`);
    }
    this.#blocks.delete(ptr);
    this.#device.makeCurrent();
    const backend = this.#device.backend;
    if (block.handle === 0) {
      backend.memAddressFree(block.ptr, block.size);
      return;
    }
    this.#allocated.sub(block.bytes);
    this.#allocations.sub(1);
    // The memory goes back once the work queued on the freeing stream has run: an event marks it.
    const event = backend.eventCreate(EventFlags.DISABLE_TIMING);
    backend.eventRecord(event, handle);
    this.#pending.push({ block, event });
    this.#collect();
  }

  protected override doReleaseCached(): number {
    const before = this.#physical;
    if (this.#evictor !== undefined) this.#evictor();
    this.#collect();
    return before - this.#physical;
  }

  protected override doDestroy(): void {
    this.#device.makeCurrent();
    const backend = this.#device.backend;
    for (const { event } of this.#pending) backend.eventSynchronize(event);
    this.#collect();
    for (const block of this.#blocks.values()) {
      if (block.handle !== 0) this.unback(block.ptr);
      backend.memAddressFree(block.ptr, block.size);
    }
    this.#blocks.clear();
  }

  /** Backed blocks' bytes and count; reserved is the physical memory held (freed blocks waiting for their stream included). */
  override memoryFigures(): MemoryFigures {
    return {
      allocatedBytes: this.#allocated.snapshot(), allocations: this.#allocations.snapshot(),
      reservedBytes: this.#physical, peakReservedBytes: this.#peakPhysical,
    };
  }

  /** Restarts the peaks. */
  override resetPeakFigures(): void {
    this.#allocated.resetPeak();
    this.#allocations.resetPeak();
    this.#peakPhysical = this.#physical;
  }

  /** One virtual-range segment per block, its one page run mapped or not. */
  protected override doMemorySegments(): SnapshotSegment[] {
    return [...this.#blocks.values()].sort((a, b) => a.ptr - b.ptr).map((block) => ({
      address: block.ptr, bytes: block.size, kind: 'virtual-range',
      pages: { pageBytes: this.alignment, mapped: block.handle === 0 ? [] : [[0, block.size / this.alignment] as const] },
      blocks: [{ address: block.ptr, bytes: block.size, requestedBytes: block.bytes, state: 'live', stream: null, stack: null }],
    }));
  }

  #block(ptr: Ptr, what: string): Block {
    const block = this.#blocks.get(ptr);
    if (block === undefined) throw new InvalidPointerError(`${this.describe()}.${what}: 0x${ptr.toString(16)} is not a block of this resource`);
    return block;
  }

  #counted(block: Block): void {
    this.#physical += block.size;
    if (this.#physical > this.#peakPhysical) this.#peakPhysical = this.#physical;
    this.#allocated.add(block.bytes);
    this.#allocations.add(1);
  }

  /** cuMemCreate, cuMemMap and cuMemSetAccess at `ptr`, undone where a later call fails. */
  #map(ptr: Ptr, size: number, bytes: number): Handle {
    this.#device.makeCurrent();
    const backend = this.#device.backend;
    let handle: Handle;
    try {
      handle = backend.memCreate(size, this.#device.ordinal);
    } catch (error) {
      if (!isOutOfMemory(error)) throw error;
      throw new OutOfMemoryError({
        requestedBytes: bytes, call: 'cuMemCreate', reason: 'device', resource: this.describe(),
        statistics: outOfMemoryStatistics(this.memoryFigures()),
        message: `${error instanceof Error ? error.message : String(error)} (${this.describe()}: ${this.#allocations.value} blocks backed, ${this.#physical} bytes)`,
        cause: error,
      });
    }
    try {
      backend.memMap(ptr, size, handle);
      try {
        backend.memSetAccess(ptr, size, this.#device.ordinal, MemAccess.READWRITE);
      } catch (error) {
        backend.memUnmap(ptr, size);
        throw error;
      }
    } catch (error) {
      backend.memRelease(handle);
      throw error;
    }
    return handle;
  }

  /** Gives back the memory of freed blocks whose freeing stream's work has run (a query each). */
  #collect(): void {
    if (this.#pending.length === 0) return;
    this.#device.makeCurrent();
    const backend = this.#device.backend;
    const waiting: Pending[] = [];
    for (const pending of this.#pending) {
      if (!backend.eventQuery(pending.event)) {
        waiting.push(pending);
        continue;
      }
      backend.eventDestroy(pending.event);
      const { block } = pending;
      backend.memUnmap(block.ptr, block.size);
      backend.memRelease(block.handle);
      backend.memAddressFree(block.ptr, block.size);
      this.#physical -= block.size;
    }
    this.#pending = waiting;
  }
}
