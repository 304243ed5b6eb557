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
 * `back`); this resource only keeps the addresses, the physical memory and the figures.
 *
 * Spare physical memory: `unback` keeps the allocation it unmaps (a few, `SPARE_LIMIT`) and the
 * next `back` or `allocate` of the same rounded size maps it again, so a spill followed by a reload
 * (the spill manager's steady state) costs cuMemUnmap, cuMemMap and cuMemSetAccess, not
 * cuMemRelease and cuMemCreate as well. Spares count as reserved, not allocated; `releaseCached`
 * (so `emptyCache` and the cache registry at a driver refusal) gives them back. A freed
 * block that was backed keeps its memory until the work queued on its freeing stream has run (an
 * event per block, queried, never waited for), which the figures show as cached and
 * `releaseCached` gives back when it can: the cache registry's protocol for memory freed on a
 * stream.
 */
import { MemAccess, type Handle, type Ptr } from '../../backend/backend.js';
import { recordNewEvent } from '../../backend/record-event.js';
import { CounterCell } from '../../counter.js';
import { Device } from '../../device.js';
import { InvalidPointerError, OutOfMemoryError, VramStateError, isOutOfMemory, outOfMemoryMessage } from '../../errors.js';
import { outOfMemoryStatistics, type MemoryFigures, type SnapshotSegment } from '../figures.js';
import { MemoryResource } from '../resource.js';
import { type StreamRef } from '../../stream.js';
import { refusedBytes } from '../cache-registry.js';
import { largerThanDevice } from '../larger-than-device.js';
import { PeerGrants } from '../peer-grants.js';

/** One block: its range, what was asked for, and the physical allocation mapped there (0: none). */
interface Block {
  readonly ptr: Ptr;
  readonly bytes: number;
  readonly size: number;
  handle: Handle;
}

/**
 * Spare physical allocations kept for reuse: enough for the spill manager's pipeline (one being
 * freed by a spill while another is mapped by a reload) with room for a few sizes; more are released.
 */
const SPARE_LIMIT = 4;

/** An unmapped physical allocation kept for the next block of its size. */
interface Spare {
  readonly size: number;
  readonly handle: Handle;
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
  /** Physical memory held: backed blocks, freed blocks waiting for their stream, and spares. */
  #physical = 0;
  #peakPhysical = 0;
  /** Unmapped physical allocations, oldest first, for the next block of their size. */
  #spares: Spare[] = [];
  #spareBytes = 0;
  /**
   * Called by `releaseCached`: the buffer layer's eviction of what may be spilled (about `bytes`
   * at a refusal, all it may otherwise); returns bytes unbacked.
   */
  #evictor: ((bytes: number | undefined) => number) | undefined;
  /** Peer devices granted access to every block's mapping, now and at every later back (copies between devices grant it). */
  readonly #peers = new PeerGrants();

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
   * an allocation, so spilling answers any resource's refusal, with about the bytes refused). Made
   * the device's own resource by it: `destroy()` is then refused.
   *
   * @internal
   * @param evictor Evicts about `bytes` (undefined: all that may go), returning the bytes of physical memory given back.
   */
  setEvictor(evictor: (bytes: number | undefined) => number): void {
    this.#evictor = evictor;
  }

  /**
   * Ends the resource, as every resource's `destroy()` does; refused for a device's own
   * (`spillableResource(device)`), which the device's spillable buffers come from now and later.
   *
   * @throws {VramStateError} For the resource `spillableResource(device)` returns: the device owns it.
   * @example
   * ```ts
   * const mr = new SpillableResource(0);
   * mr.destroy();
   * ```
   */
  override destroy(): void {
    if (this.#evictor !== undefined) {
      throw new VramStateError(
        `${this.describe()}: the device's spillable resource (spillableResource(${this.deviceOrdinal})) ` +
          'belongs to the device, which takes every spillable allocation from it; it cannot be destroyed (free the spillable buffers instead)',
      );
    }
    super.destroy();
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
   * Unmaps the block's physical memory and keeps its address range reserved. The memory is kept
   * as a spare for the next block of its size (the oldest spare past a few goes back to the
   * driver; `releaseCached` gives them all back). The caller makes sure no queued work uses the
   * memory any more (cuMemUnmap does not wait).
   *
   * @param ptr A backed block's address.
   * @returns The bytes of physical memory unmapped (now spare, or given back).
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
    this.#device.backend.memUnmap(block.ptr, block.size);
    this.#keep(block.size, block.handle);
    block.handle = 0;
    this.#allocated.sub(block.bytes);
    this.#allocations.sub(1);
    return block.size;
  }

  /**
   * Bytes of unmapped physical memory kept for reuse (counted in `reservedBytes`): a `back` or
   * `allocate` of a size kept maps it without cuMemCreate; `releaseCached` gives it back.
   *
   * @returns The bytes.
   * @throws Never.
   * @example
   * ```ts
   * mr.unback(ptr);
   * mr.spareBytes; // the block's rounded size, until the next back of that size
   * ```
   */
  get spareBytes(): number {
    return this.#spareBytes;
  }

  /**
   * True when a spare physical allocation fits a block of `bytes` (its size rounded to the
   * granularity): backing such a block needs no cuMemCreate and no free device memory.
   *
   * @param bytes A block's size.
   * @returns Whether a spare of that rounded size is kept.
   * @throws Never.
   * @example
   * ```ts
   * if (!mr.hasSpare(bytes)) makeRoom(bytes);
   * ```
   */
  hasSpare(bytes: number): boolean {
    const size = Math.ceil(bytes / this.alignment) * this.alignment;
    return this.#spares.some((spare) => spare.size === size);
  }

  /**
   * Gives every spare physical allocation back to the driver (what `releaseCached` does after
   * spilling; for a caller that wants the memory back without spilling anything).
   *
   * @returns The bytes given back.
   * @throws Never.
   * @example
   * ```ts
   * mr.releaseSpares();
   * ```
   */
  releaseSpares(): number {
    if (this.#spares.length === 0) return 0;
    this.#device.makeCurrent();
    const backend = this.#device.backend;
    const given = this.#spareBytes;
    for (const spare of this.#spares) backend.memRelease(spare.handle);
    this.#spares = [];
    this.#physical -= given;
    this.#spareBytes = 0;
    return given;
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

  /**
   * Lets `device` reach the block holding `ptr` for a copy between devices that runs in its
   * context: read access for a source, read-write for a destination, added to what it has, on
   * every backed block and on every block mapped later (a reload maps new memory at the same
   * address, and the grant must hold there too). Note [Peer copies of mapped memory] in
   * docs/design/peer-grants.md.
   *
   * @param ptr An address in a block of this resource.
   * @param device The device whose context runs the copy.
   * @param write Whether the copy writes the block.
   * @returns True when `ptr` is in a block of this resource, false when it is not.
   * @throws {CudaError} When the driver refuses the grant.
   * @example
   * ```ts
   * mr.allowPeerCopy(ptr, Device.get(1), false); // before a copy on a stream of device 1
   * ```
   * @internal the copy path's (`allowPeerCopy` in resource.ts).
   */
  override allowPeerCopy(ptr: Ptr, device: Device, write: boolean): boolean {
    if (this.destroyed || !this.#holds(ptr)) return false;
    const flags = this.#peers.forCopy(this.#device, device, write);
    if (flags === undefined) return true;
    this.#device.makeCurrent();
    const backend = this.#device.backend;
    for (const block of this.#blocks.values()) if (block.handle !== 0) backend.memSetAccess(block.ptr, block.size, device.ordinal, flags);
    this.#peers.set(device.ordinal, flags);
    return true;
  }

  /** Whether `ptr` lies in one of this resource's blocks: one lookup for a block's start, else a scan (copies at an offset). */
  #holds(ptr: Ptr): boolean {
    if (this.#blocks.has(ptr)) return true;
    for (const block of this.#blocks.values()) if (ptr >= block.ptr && ptr < block.ptr + block.size) return true;
    return false;
  }

  protected doAllocate(bytes: number, _handle: number, _stream: StreamRef | undefined): Ptr {
    this.#collect();
    const size = Math.ceil(bytes / this.alignment) * this.alignment;
    // A block is backed on the device whenever it is used: one larger than the device never can be.
    const tooLarge = largerThanDevice(this.#device, bytes);
    if (tooLarge !== undefined) {
      throw new OutOfMemoryError({
        requestedBytes: bytes,
        call: 'SpillableResource.allocate',
        reason: 'device',
        resource: this.describe(),
        statistics: outOfMemoryStatistics(this.memoryFigures()),
        message: outOfMemoryMessage(bytes, this.describe(), tooLarge),
      });
    }
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
    this.#pending.push({ block, event: recordNewEvent(backend, handle) });
    this.#collect();
  }

  /**
   * Gives back what no block uses and spills nothing: the memory and virtual ranges of freed
   * blocks (the host waiting for the work queued on their freeing streams) and the spares.
   * `emptyCache()`'s part for the device's spillable resource.
   *
   * @internal
   * @returns The bytes of physical memory given back.
   */
  releaseUnused(): number {
    const before = this.#physical;
    if (this.#pending.length > 0) {
      this.#device.makeCurrent();
      for (const { event } of this.#pending) this.#device.backend.eventSynchronize(event);
      this.#collect();
    }
    this.releaseSpares();
    return before - this.#physical;
  }

  protected override doReleaseCached(): number {
    const before = this.#physical;
    if (this.#evictor !== undefined) this.#evictor(refusedBytes());
    this.#collect();
    this.releaseSpares();
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
    this.releaseSpares();
  }

  /** Backed blocks' bytes and count; reserved is the physical memory held (freed blocks waiting for their stream included). */
  override memoryFigures(): MemoryFigures {
    return {
      allocatedBytes: this.#allocated.snapshot(),
      allocations: this.#allocations.snapshot(),
      reservedBytes: this.#physical,
      peakReservedBytes: this.#peakPhysical,
    };
  }

  /** `memoryFigures().reservedBytes` without building the figures: the physical memory held. */
  override get reservedBytes(): number {
    return this.#physical;
  }

  /** `memoryFigures().peakReservedBytes` without building the figures. */
  override get peakReservedBytes(): number {
    return this.#peakPhysical;
  }

  /** Restarts the peaks. */
  override resetPeakFigures(): void {
    this.#allocated.resetPeak();
    this.#allocations.resetPeak();
    this.#peakPhysical = this.#physical;
  }

  /** One virtual-range segment per block, its one page run mapped or not. */
  protected override doMemorySegments(): SnapshotSegment[] {
    return [...this.#blocks.values()]
      .sort((a, b) => a.ptr - b.ptr)
      .map((block) => ({
        address: block.ptr,
        bytes: block.size,
        kind: 'virtual-range',
        pages: { pageBytes: this.alignment, mapped: block.handle === 0 ? [] : [[0, block.size / this.alignment] as const] },
        blocks: [{ address: block.ptr, bytes: block.size, requestedBytes: block.bytes, state: 'live', stream: null, stack: null }],
      }));
  }

  #block(ptr: Ptr, what: string): Block {
    const block = this.#blocks.get(ptr);
    if (block === undefined) throw new InvalidPointerError(`${this.describe()}.${what}: 0x${ptr.toString(16)} is not a block of this resource`);
    return block;
  }

  /** Counts a block newly backed (its physical memory is already in `#physical` when it was a spare). */
  #counted(block: Block): void {
    this.#allocated.add(block.bytes);
    this.#allocations.add(1);
  }

  /**
   * Physical memory mapped at `ptr` with access set: a spare of `size` if one is kept, else
   * cuMemCreate (a refusal first gives the spares of other sizes back and tries again); undone
   * where a later call fails (a spare goes back to the spares).
   */
  #map(ptr: Ptr, size: number, bytes: number): Handle {
    this.#device.makeCurrent();
    const backend = this.#device.backend;
    const at = this.#spares.findIndex((spare) => spare.size === size);
    let handle: Handle;
    let created = false;
    if (at >= 0) {
      handle = this.#spares[at]!.handle;
      this.#spares.splice(at, 1);
      this.#spareBytes -= size;
    } else {
      handle = this.#create(size, bytes);
      created = true;
    }
    try {
      backend.memMap(ptr, size, handle);
      try {
        backend.memSetAccess(ptr, size, this.#device.ordinal, MemAccess.READWRITE);
        this.#peers.grant(backend, ptr, size);
      } catch (error) {
        backend.memUnmap(ptr, size);
        throw error;
      }
    } catch (error) {
      if (created) {
        backend.memRelease(handle);
        this.#physical -= size;
      } else {
        this.#spares.push({ size, handle });
        this.#spareBytes += size;
      }
      throw error;
    }
    return handle;
  }

  /** cuMemCreate of `size`, counted as held; a refusal gives the spares back and tries once more. */
  #create(size: number, bytes: number): Handle {
    const backend = this.#device.backend;
    let handle: Handle;
    try {
      handle = backend.memCreate(size, this.#device.ordinal);
    } catch (error) {
      if (!isOutOfMemory(error)) throw error;
      if (this.releaseSpares() > 0) return this.#create(size, bytes);
      throw new OutOfMemoryError({
        requestedBytes: bytes,
        call: 'cuMemCreate',
        reason: 'device',
        resource: this.describe(),
        statistics: outOfMemoryStatistics(this.memoryFigures()),
        message: `${error instanceof Error ? error.message : String(error)} (${this.describe()}: ${this.#allocations.value} blocks backed, ${this.#physical} bytes)`,
        cause: error,
      });
    }
    this.#physical += size;
    if (this.#physical > this.#peakPhysical) this.#peakPhysical = this.#physical;
    return handle;
  }

  /** Keeps an unmapped physical allocation as a spare (still held), the oldest released past the limit. */
  #keep(size: number, handle: Handle): void {
    this.#spares.push({ size, handle });
    this.#spareBytes += size;
    while (this.#spares.length > SPARE_LIMIT) {
      const old = this.#spares.shift()!;
      this.#device.backend.memRelease(old.handle);
      this.#spareBytes -= old.size;
      this.#physical -= old.size;
    }
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
      backend.memAddressFree(block.ptr, block.size);
      this.#keep(block.size, block.handle);
    }
    this.#pending = waiting;
  }
}
