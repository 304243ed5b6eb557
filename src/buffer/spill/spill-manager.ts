/**
 * The spill manager of a device: which spillable buffers are on the device, in least recently used
 * order, and the moves between device and pinned host memory. Eviction happens when room is needed
 * (a spillable allocation or a reload finds too little free memory, or the device's use would pass
 * `VRAM_SPILL_LIMIT`), and when the driver refuses any resource of the device (the cache registry
 * calls `releaseCached` on every resource, and the device's SpillableResource hands that to
 * `evictFor`, about the bytes refused: Note [Refusals spill about what they need] in
 * docs/design/spilling-composition.md). A buffer is evicted only when no lease holds it and the
 * current operation does not use it; its copy out is queued on the manager's stream after the work
 * queued on every stream that used it (events, as a free orders itself), and a buffer whose host
 * copy is still current (not written since it came back) is evicted without a copy.
 *
 * Spilling ahead: once spilling has started, a reload or allocation that leaves less than the
 * high-water room free (`VRAM_SPILL_AHEAD`; by default one largest spillable buffer, where at
 * least eight of that size are on the device) queues the copy out of the next least recently used
 * buffers at once, before its own copy in, and leaves their pages mapped. Their pages go when the
 * event after their copy out has passed, seen by a query at a later entry of the manager; only an
 * allocation that needs the memory now waits on the host for it (`hostWaits` in the figures). So the
 * copy out of one buffer runs on one copy engine while the copy in of the next runs on the other,
 * and the pages it gives back are mapped again by the next reload of the same size (the resource's
 * spares: no cuMemRelease and cuMemCreate between them). A buffer used while its spill is queued
 * keeps its pages (the spill is cancelled; a write makes its host copy stale, as any write does).
 *
 * Memory that moves: a spillable buffer from a resource without a virtual range per block
 * (`CudaResource`, `AsyncResource`, a pool) spills the same way, but its memory goes back to that
 * resource (on the spill stream, after its copy out) and a reload allocates new memory there, on
 * the stream of the use, and moves the buffer to it (`moveAllocation`); operations read its address
 * after preparing it (`movesOnReload`).
 *
 * The one host wait: before physical memory is unmapped, its copy out (and the work before it)
 * must have run (cuMemUnmap does not wait for queued work): the event after it is queried, and
 * waited for only when the memory is needed now. The rest of the device is never synchronised.
 */
import type { Ptr } from '../../backend/backend.js';
import { recordNewEvent } from '../../backend/record-event.js';
import { CounterCell, type Counter } from '../../counter.js';
import { Device } from '../../device.js';
import { isOutOfMemory, StreamCaptureError } from '../../errors.js';
import { captureSessionOf, refuseDuringCapture, type CaptureSession } from '../../graphs/sessions.js';
import { Stream } from '../../stream.js';
import { extendMessage, releaseCaches } from '../../resource/cache-registry.js';
import { addCacheRelease } from '../../resource/current.js';
import { SpillableResource } from '../../resource/upstream/spillable-resource.js';
import type { MemoryResource } from '../../resource/resource.js';
import type { StreamRef } from '../../stream.js';
import { choiceOf, sizeInBytes, sizeOrOff, variableReader } from '../../util/environment.js';
import { formatBytes } from '../../util/size.js';
import { readOptions } from '../../util/options.js';
import { readBytes, type ByteSize } from '../../validate.js';
import type { HostBuffer } from '../host-buffer.js';
import type { Allocation } from '../lifetime.js';
import { heldByCopies, moveAllocation, waitForUsesOn } from '../lifetime.js';
import { beginOperation, currentEpoch, type Residency } from './residency.js';
import { SpillHost } from './spill-host.js';
import { SpillLease } from './lease.js';

/** `VRAM_SPILL=1`: buffers and arrays allocated without a resource are spillable unless told otherwise. */
export const SPILL_VARIABLE = variableReader('VRAM_SPILL', choiceOf(['0', '1']));
/** `VRAM_SPILL_LIMIT`: the device memory in use (all of it, as cuMemGetInfo counts) that spilling keeps below. */
export const SPILL_LIMIT_VARIABLE = variableReader('VRAM_SPILL_LIMIT', sizeInBytes);
/** `VRAM_SPILL_AHEAD`: the room spilling keeps free ahead of need once it has started (0: spill only on need). */
export const SPILL_AHEAD_VARIABLE = variableReader('VRAM_SPILL_AHEAD', sizeOrOff);

/**
 * By default spilling ahead keeps one largest spillable buffer's room free, but only where the
 * spillable memory on the device is at least this many of them: with fewer, the room kept idle
 * would be too large a share of it (and a program of a few buffers gains nothing from the overlap).
 */
const AHEAD_MIN_BUFFERS = 8;

/**
 * What spilling did on a device, in `memoryStats().spill`.
 *
 * @example
 * ```ts
 * const { spill } = memoryStats();
 * console.log(spill.spilledBytes.total, spill.copiesOut, spill.reloads);
 * ```
 */
export interface SpillFigures {
  /** Bytes of spillable buffers held on the host now (value), their peak, and every byte ever evicted (total). */
  readonly spilledBytes: Counter;
  /** Spillable buffers on the host now, their peak, and every eviction (total). */
  readonly spilledBuffers: Counter;
  /** Copies out made by evictions: a buffer whose host copy was current was evicted without one. */
  readonly copiesOut: number;
  /** Bytes those copies moved. */
  readonly copiedOutBytes: number;
  /** Spilled buffers brought back on use. */
  readonly reloads: number;
  /** Bytes brought back. */
  readonly reloadedBytes: number;
  /** Spills queued ahead of need (their copy out overlapping other work, their pages given back later). */
  readonly spilledAhead: number;
  /** Spills queued ahead and cancelled: the buffer was used before its pages went, so it stayed. */
  readonly cancelledSpills: number;
  /**
   * Host waits for a copy out: an allocation or reload that needed memory at once and found no
   * spill ahead finished (spilling on demand waits for each copy out in series).
   */
  readonly hostWaits: number;
  /** Bytes of spillable buffers on the device now (a queued spill's included, until its pages go). */
  readonly residentBytes: number;
  /** Of those, bytes a lease keeps there. */
  readonly leasedBytes: number;
  /**
   * Pinned host memory held for spilling: what `reserveSpillHost` reserved and what spills took
   * past it, whether a host copy uses it or not (given back by `emptyCache()`).
   */
  readonly hostReservedBytes: number;
  /** Of those, bytes host copies use (a buffer keeps its host copy while it lives, for a spill without a copy out). */
  readonly hostAllocatedBytes: number;
}

/** What spilling is told of, for the memory history (set by observe/; one listener). */
export interface SpillObserver {
  /** A buffer of `bytes` at `ptr` of `resource` went to the host (`copied`: false when its host copy was current). */
  spilled(resource: MemoryResource, ptr: Ptr, bytes: number, copied: boolean): void;
  /** A buffer came back, on stream `handle`. */
  reloaded(resource: MemoryResource, ptr: Ptr, bytes: number, handle: number): void;
}

let observer: SpillObserver | null = null;

/**
 * Sets (or, with null, removes) the listener to spills and reloads.
 *
 * @internal
 * @param next The listener.
 */
export function setSpillObserver(next: SpillObserver | null): void {
  observer = next;
}

/** One spillable buffer's state. */
export class SpillEntry implements Residency {
  /** On the device (mapped) now. */
  resident = true;
  /** Written since its host copy was made (or never copied out). */
  dirty = true;
  /** Leases alive: while any is, the buffer stays. */
  leases = 0;
  /** The operation that last prepared it (residency.ts). */
  epoch = 0;
  freed = false;
  /** A spill queued ahead: the event after its copy out; its pages go when it has passed (0: none). */
  spilling = 0;
  /** Whether that spill copies the data out (false: the host copy was current). */
  copying = false;
  /** Its pinned host copy, made at its first eviction and kept for the next. */
  host: HostBuffer | undefined;
  /** The buffer, weakly: the manager must not keep a dropped buffer alive. */
  owner: WeakRef<Allocation> | undefined;

  /**
   * @param manager The device's manager.
   * @param ptr The address: fixed over the manager's SpillableResource, new at each reload from a
   *   resource without virtual memory.
   * @param bytes The size.
   * @param moving The resource without virtual memory the memory comes from (undefined: the
   *   manager's SpillableResource, whose addresses stay put).
   */
  constructor(
    readonly manager: SpillManager,
    public ptr: Ptr,
    readonly bytes: number,
    readonly moving?: MemoryResource,
  ) {}

  prepare(stream: StreamRef | undefined, writes: boolean): void {
    this.manager.use(this, stream, writes);
  }

  get moves(): boolean {
    return this.moving !== undefined;
  }
}

const managers = new Map<Device, SpillManager>();

/**
 * The spill manager of `device` (made on first use, with its SpillableResource).
 *
 * @internal
 * @param device The device.
 * @returns Its manager.
 */
export function spillManager(device: Device): SpillManager {
  let manager = managers.get(device);
  if (manager === undefined) {
    manager = new SpillManager(device);
    managers.set(device, manager);
  }
  return manager;
}

/**
 * The SpillableResource that `{ spillable: true }` memory of `device` comes from (its figures count
 * what is on the device; `memoryStats().spill` what was moved).
 *
 * @param device The device (device 0 by default).
 * @returns The resource, one per device.
 * @throws {TypeError | RangeError} For a bad device.
 * @example
 * ```ts
 * spillableResource().memoryFigures().reservedBytes; // physical memory of spillable buffers on device 0
 * ```
 */
export function spillableResource(device?: Device | number): SpillableResource {
  return spillManager(Device.resolve(device)).resource;
}

/**
 * The spill figures of `device` (zeros where nothing was ever spillable there).
 *
 * @param device The device (device 0 by default).
 * @returns Its figures.
 * @throws {TypeError | RangeError} For a bad device.
 * @example
 * ```ts
 * spillFigures(0).reloads;
 * ```
 */
export function spillFigures(device?: Device | number): SpillFigures {
  const manager = managers.get(Device.resolve(device));
  if (manager !== undefined) return manager.figures();
  const zero = { value: 0, peak: 0, total: 0 };
  return {
    spilledBytes: zero,
    spilledBuffers: zero,
    copiesOut: 0,
    copiedOutBytes: 0,
    reloads: 0,
    reloadedBytes: 0,
    spilledAhead: 0,
    cancelledSpills: 0,
    hostWaits: 0,
    residentBytes: 0,
    leasedBytes: 0,
    hostReservedBytes: 0,
    hostAllocatedBytes: 0,
  };
}

/**
 * Leases the resident spillable buffer whose memory holds `ptr`, if there is one: a foreign view
 * of it (`DeviceBuffer.fromPointer(spillable.ptr)`, an import of its export) keeps it on the
 * device at its address until the view is freed, as the buffer's own `lease()` does.
 *
 * @internal
 * @param ptr An address the driver knows (a spilled buffer's has no memory mapped, so none).
 * @param writes Whether the view may write it (its host copy is then stale).
 * @returns The lease, or undefined for memory that is not spillable.
 */
export function leaseSpillableAt(ptr: Ptr, writes: boolean): SpillLease | undefined {
  for (const manager of managers.values()) {
    const lease = manager.leaseAt(ptr, writes);
    if (lease !== undefined) return lease;
  }
  return undefined;
}

/** Options for `reserveSpillHost`. */
export interface ReserveSpillHostOptions {
  /** The device whose spills use the memory (device 0 by default). */
  readonly device?: Device | number;
}

/**
 * Pins host memory for the spills of a device now, so spilling later takes its host copies from it
 * instead of pinning memory (cuMemHostAlloc, tens of milliseconds per 256 MiB) at each buffer's
 * first spill: what a careful user does with the pinned buffers of hand-written copies, before the
 * work starts. Pinned in chunks of up to 1 GiB, until at least `bytes` are held for the device's
 * spills (memory already held counts: calling it again with the same size pins nothing). Spills
 * past it pin more on demand, as without a reservation. Host copies go back to it when their
 * buffers are freed; `emptyCache()` gives back to the driver what no host copy uses.
 *
 * @param bytes The host memory to hold, a number of bytes or a size (`'6G'`); at most the bytes
 *   of spillable memory the program will have spilled at once (each spilled buffer keeps one copy).
 * @param options The device.
 * @returns The bytes of pinned host memory held for the device's spills now.
 * @throws {TypeError | RangeError} For a bad size, an unknown option or a bad device, before anything is pinned.
 * @throws {OutOfMemoryError} When the host cannot pin that much (what was pinned stays held, for spills to use).
 * @example
 * ```ts
 * reserveSpillHost('6G');  // before the clock starts
 * const arrays = sizes.map((n) => DeviceArray.zeros([n], 'float32', { spillable: true }));
 * ```
 */
export function reserveSpillHost(bytes: ByteSize, options?: ReserveSpillHostOptions): number {
  const size = readBytes(bytes, 'bytes', true);
  const { device } = readOptions('reserveSpillHost', options, { device: true });
  return spillManager(Device.resolve(device)).reserveHost(size);
}

/**
 * Gives back to the driver the pinned host memory of spills that no host copy uses, on `device`
 * or every device with spillable memory: `emptyCache()`'s part for spilling.
 *
 * @internal
 * @param device The device, or undefined for all.
 * @returns The bytes given back.
 */
export function releaseSpillHost(device: Device | undefined): number {
  let released = 0;
  for (const [dev, manager] of managers) {
    if (device === undefined || dev === device) released += manager.releaseHost();
  }
  return released;
}
addCacheRelease(releaseSpillHost);

/** Spill bookkeeping of one device. */
export class SpillManager {
  readonly resource: SpillableResource;
  /** Resident entries, least recently used first (a Map keeps insertion order; a use moves an entry to the end). */
  readonly #lru = new Map<SpillEntry, true>();
  /** Entries whose spill is queued ahead and whose pages are still mapped, in the order queued. */
  readonly #spilling = new Set<SpillEntry>();
  readonly #spilledBytes = new CounterCell();
  readonly #spilledBuffers = new CounterCell();
  #copiesOut = 0;
  #copiedOutBytes = 0;
  #reloads = 0;
  #reloadedBytes = 0;
  #spilledAhead = 0;
  #cancelledSpills = 0;
  #hostWaits = 0;
  /** Spilling has started (memory was needed and something had to go): from then on it spills ahead. */
  #pressed = false;
  #stream: Stream | undefined;
  /** The pinned host memory host copies come from. */
  readonly #host: SpillHost;
  /** Allocations and reloads of this manager under way: an eviction they cause keeps the operation's buffers. */
  #busy = 0;

  constructor(readonly device: Device) {
    this.resource = new SpillableResource(device);
    this.#host = new SpillHost(device);
    this.resource.setEvictor((bytes) => (bytes === undefined ? this.evictAll() : this.evictFor(bytes)));
  }

  /**
   * A new spillable block of `bytes`, first used on `stream`; evicts others first where the
   * device has too little room (or the limit would be passed).
   */
  allocate(bytes: number, stream: StreamRef, moving?: MemoryResource): SpillEntry {
    const size = this.#rounded(bytes);
    let ptr: Ptr;
    this.#busy++;
    try {
      this.#makeRoom(size, moving === undefined);
      this.#spillAhead(size);
      ptr = this.#allocateFrom(moving ?? this.resource, bytes, stream);
    } finally {
      this.#busy--;
    }
    const entry = new SpillEntry(this, ptr, bytes, moving);
    entry.epoch = currentEpoch();
    this.#lru.set(entry, true);
    return entry;
  }

  /** Before a use: back on the device (on `stream`), most recently used, dirty if written. */
  use(entry: SpillEntry, stream: StreamRef | undefined, writes: boolean): void {
    if (entry.freed) return; // the buffer's own checks throw UseAfterFreeError
    const capture = stream === undefined ? undefined : captureSessionOf(stream.handle);
    if (capture !== undefined) {
      this.#captured(entry, capture, writes);
      return;
    }
    entry.epoch = currentEpoch();
    if (entry.spilling !== 0) this.#cancel(entry);
    this.#settle();
    if (!entry.resident) {
      this.#busy++;
      try {
        this.#reload(entry, stream);
      } finally {
        this.#busy--;
      }
    } else {
      this.#lru.delete(entry);
      this.#lru.set(entry, true);
    }
    if (writes) entry.dirty = true;
  }

  /**
   * A use recorded into a graph (Note [Spilling under capture] in docs/design/spilling-composition.md):
   * the buffer is leased for the graph's life, since a graph's nodes hold its address; a spilled
   * buffer is refused, its reload would be recorded into the graph rather than run.
   */
  #captured(entry: SpillEntry, capture: CaptureSession, writes: boolean): void {
    if (entry.spilling !== 0) this.#cancel(entry); // its pages are still mapped: it stays
    if (!entry.resident) {
      throw new StreamCaptureError(
        'a use of a spilled buffer',
        'it is spilled to host memory, and bringing it back would be recorded ' +
          'into the graph instead of run: use it (or take a lease) before the capture; the graph then keeps it on the device while it lives',
      );
    }
    entry.epoch = currentEpoch();
    this.#lru.delete(entry);
    this.#lru.set(entry, true);
    // A launch of the graph may write it at any time: its host copy is stale from now on.
    if (writes) entry.dirty = true;
    const lease = new SpillLease(entry.ptr, entry);
    entry.leases++;
    capture.holds.add(() => lease.release());
  }

  /** A lease on the resident buffer whose memory holds `ptr` (see `leaseSpillableAt`). */
  leaseAt(ptr: Ptr, writes: boolean): SpillLease | undefined {
    for (const entry of [...this.#lru.keys(), ...this.#spilling]) {
      if (ptr < entry.ptr || ptr >= entry.ptr + this.#rounded(entry.bytes)) continue;
      if (entry.spilling !== 0) this.#cancel(entry);
      if (writes) entry.dirty = true;
      entry.leases++;
      return new SpillLease(entry.ptr, entry);
    }
    return undefined;
  }

  /** The buffer was freed: its memory goes back on `stream`, its host copy with it. */
  release(entry: SpillEntry, stream: StreamRef | undefined): void {
    // A spill queued ahead: the freeing stream waits for its copy out (the buffer recorded the
    // spill stream when it was queued, so the free is ordered after it, and so is the host copy's).
    if (entry.spilling !== 0) this.#drop(entry);
    // Memory that moves has none on the device while spilled; the SpillableResource keeps the range.
    if (entry.moving === undefined) this.resource.deallocate(entry.ptr, entry.bytes, stream);
    else if (entry.resident) entry.moving.deallocate(entry.ptr, entry.bytes, stream);
    entry.freed = true;
    if (entry.resident) {
      this.#lru.delete(entry);
    } else {
      this.#spilledBytes.sub(entry.bytes);
      this.#spilledBuffers.sub(1);
    }
    const host = entry.host;
    entry.host = undefined;
    if (host !== undefined && !host.freed) host.free();
  }

  /**
   * Evicts every buffer that may go (the cache registry's release); returns the bytes given back.
   * Called from outside an operation of this manager (another resource's refusal, `releaseCached`),
   * it starts a new operation: the buffers the last one used may go too. Every copy out is queued
   * first and the host waits once, for the last.
   */
  evictAll(): number {
    if (this.#busy === 0) beginOperation();
    this.#pressed = true;
    for (const entry of [...this.#lru.keys()]) {
      if (this.#evictable(entry)) this.#queue(entry);
    }
    return this.#finishAll();
  }

  /**
   * Frees about `bytes` (another resource's refusal asked the driver for them): queued spills
   * first, then the least recently used buffers that may go, until that much physical memory went
   * back or nothing more can go; returns the bytes given back. Called from outside an operation of
   * this manager, it starts a new operation, as `evictAll` does.
   */
  evictFor(bytes: number): number {
    if (this.#busy === 0) beginOperation();
    let given = this.#settle();
    while (given < bytes) {
      const one = this.#freeOne();
      if (one === 0) break;
      given += one;
    }
    return given;
  }

  /**
   * Moves `entry` to the host now (a copy out only when dirty) and gives its physical memory back,
   * the host waiting for the copy. Returns the bytes given back, 0 when it could not go (no pinned
   * host memory for its copy).
   */
  evict(entry: SpillEntry): number {
    if (!this.#queue(entry)) return 0;
    this.#waitFor(entry);
    return this.#finish(entry);
  }

  /** The figures now. */
  figures(): SpillFigures {
    let resident = 0;
    let leased = 0;
    const host = this.#host.figures();
    for (const entry of [...this.#lru.keys(), ...this.#spilling]) {
      resident += entry.bytes;
      if (entry.leases > 0) leased += entry.bytes;
    }
    return {
      spilledBytes: this.#spilledBytes.snapshot(),
      spilledBuffers: this.#spilledBuffers.snapshot(),
      copiesOut: this.#copiesOut,
      copiedOutBytes: this.#copiedOutBytes,
      reloads: this.#reloads,
      reloadedBytes: this.#reloadedBytes,
      spilledAhead: this.#spilledAhead,
      cancelledSpills: this.#cancelledSpills,
      hostWaits: this.#hostWaits,
      residentBytes: resident,
      leasedBytes: leased,
      hostReservedBytes: host.reservedBytes,
      hostAllocatedBytes: host.allocatedBytes,
    };
  }

  /**
   * Pins host memory for spills until `bytes` are held (see `reserveSpillHost`); returns the bytes held.
   */
  reserveHost(bytes: number): number {
    return this.#host.reserve(bytes, this.#spillStream());
  }

  /**
   * Gives back the pinned host memory no host copy uses, and the device memory and ranges no
   * spillable buffer uses (freed blocks, spares); returns the bytes given back.
   */
  releaseHost(): number {
    return this.#host.release() + this.resource.releaseUnused();
  }

  /** Restarts the peaks. */
  resetPeaks(): void {
    this.#spilledBytes.resetPeak();
    this.#spilledBuffers.resetPeak();
  }

  #evictable(entry: SpillEntry): boolean {
    return entry.resident && entry.spilling === 0 && entry.leases === 0 && entry.epoch !== currentEpoch();
  }

  /**
   * Queues `entry`'s spill: its copy out (when dirty) on the spill stream after the work of every
   * stream that used it, and an event after that. Its pages stay mapped until `#finish`. False
   * when it cannot go now (dropped, freed, held by a staged copy, or no pinned host memory).
   */
  #queue(entry: SpillEntry): boolean {
    const buffer = entry.owner?.deref();
    // A staged copy in flight queues its later chunks when earlier ones complete: no event covers them yet.
    if (buffer === undefined || buffer.freed || !entry.resident || entry.spilling !== 0 || heldByCopies(buffer)) return false;
    const device = this.device;
    const copy = entry.dirty || entry.host === undefined;
    const stream = this.#spillStream();
    if (entry.host === undefined) {
      try {
        entry.host = this.#host.allocate(entry.bytes, stream);
      } catch (error) {
        if (isOutOfMemory(error)) return false;
        throw error;
      }
    }
    waitForUsesOn(buffer, stream);
    device.makeCurrent();
    const backend = device.backend;
    if (copy) backend.memcpyAsync(entry.host.ptr, entry.ptr, entry.bytes, stream.handle);
    const event = recordNewEvent(backend, stream.handle);
    // A free before the pages go is ordered after the copy out, on the device (the buffer's) and
    // on the host (its host copy's: pinned memory is freed at once).
    buffer.recordStream(stream);
    entry.host.recordStream(stream);
    entry.spilling = event;
    entry.copying = copy;
    // The host copy is current once the copy has run: a write from now on makes it stale again.
    entry.dirty = false;
    this.#lru.delete(entry);
    this.#spilling.add(entry);
    return true;
  }

  /** The host waits for `entry`'s queued spill (its memory is needed now). */
  #waitFor(entry: SpillEntry): void {
    this.device.makeCurrent();
    this.device.backend.eventSynchronize(entry.spilling);
    this.#hostWaits++;
  }

  /**
   * `entry`'s copy out has run: its pages go (kept by the resource for the next reload of its
   * size), or memory that moves goes back to its resource.
   */
  #finish(entry: SpillEntry): number {
    const backend = this.device.backend;
    backend.eventDestroy(entry.spilling);
    entry.spilling = 0;
    this.#spilling.delete(entry);
    let given: number;
    if (entry.moving === undefined) {
      given = this.resource.unback(entry.ptr);
    } else {
      entry.moving.deallocate(entry.ptr, entry.bytes, this.#spillStream());
      given = this.#rounded(entry.bytes);
    }
    entry.resident = false;
    this.#spilledBytes.add(entry.bytes);
    this.#spilledBuffers.add(1);
    if (entry.copying) {
      this.#copiesOut++;
      this.#copiedOutBytes += entry.bytes;
    }
    observer?.spilled(entry.moving ?? this.resource, entry.ptr, entry.bytes, entry.copying);
    return given;
  }

  /** Waits once for the last queued spill (the spill stream runs them in order) and finishes them all. */
  #finishAll(): number {
    let last: SpillEntry | undefined;
    for (const entry of this.#spilling) last = entry;
    if (last === undefined) return 0;
    this.#waitFor(last);
    let given = 0;
    for (const entry of [...this.#spilling]) given += this.#finish(entry);
    return given;
  }

  /**
   * Finishes the queued spills whose copy out has run (a query each, in order, up to the first
   * still running); returns the bytes their pages gave back.
   */
  #settle(): number {
    let given = 0;
    if (this.#spilling.size === 0) return given;
    this.device.makeCurrent();
    const backend = this.device.backend;
    for (const entry of [...this.#spilling]) {
      if (!backend.eventQuery(entry.spilling)) break;
      given += this.#finish(entry);
    }
    return given;
  }

  /** A queued spill whose buffer is used again: it keeps its pages (the copy out may still run; its result is used only if nothing writes). */
  #cancel(entry: SpillEntry): void {
    this.#drop(entry);
    this.#lru.set(entry, true);
    this.#cancelledSpills++;
  }

  /** Forgets `entry`'s queued spill (the event's work still runs; nothing waits for it here). */
  #drop(entry: SpillEntry): void {
    this.device.makeCurrent();
    this.device.backend.eventDestroy(entry.spilling);
    entry.spilling = 0;
    this.#spilling.delete(entry);
  }

  /**
   * Frees memory for an allocation that needs it now: the oldest queued spill (the host waits for
   * its copy out), else the least recently used buffer that may go, spilled at once. Returns the
   * bytes given back (0: nothing could go).
   */
  #freeOne(): number {
    this.#pressed = true;
    const queued = this.#spilling.values().next();
    if (queued.done !== true) {
      this.#waitFor(queued.value);
      return this.#finish(queued.value);
    }
    for (const entry of this.#lru.keys()) {
      if (!this.#evictable(entry)) continue;
      const given = this.evict(entry);
      if (given > 0) return given;
    }
    return 0;
  }

  #rounded(bytes: number): number {
    const granule = this.resource.alignment;
    return Math.ceil(bytes / granule) * granule;
  }

  /** The device's free memory, less what the limit keeps back (spare pages not counted). */
  #freeRoom(): number {
    const { free, total } = this.device.memInfo();
    const limit = SPILL_LIMIT_VARIABLE.read();
    return limit === undefined ? free : Math.min(free, limit - (total - free));
  }

  /**
   * Makes room for a block of `size`: nothing to do where a spare of that size is kept (its pages
   * are mapped again); else spares of other sizes go back, then queued spills finish and buffers
   * spill until it fits in the device's free memory and under the limit, or nothing more can go.
   */
  #makeRoom(size: number, spareFits: boolean): void {
    this.#settle();
    for (;;) {
      if (spareFits && this.resource.hasSpare(size)) return;
      let room = this.#freeRoom();
      if (room < size && this.resource.releaseSpares() > 0) room = this.#freeRoom();
      if (room >= size || this.#freeOne() === 0) return;
    }
  }

  /**
   * Once spilling has started, queues the spills of the least recently used buffers that may go
   * until the room left after a block of `size` is mapped, with the spills already queued, is the
   * high-water room: their copies out run while this block is copied in and used.
   */
  #spillAhead(size: number): void {
    if (!this.#pressed) return;
    const ahead = this.#aheadBytes(size);
    if (ahead === 0) return;
    let room = this.#freeRoom() + this.resource.spareBytes - size;
    for (const entry of this.#spilling) room += this.#rounded(entry.bytes);
    for (const entry of [...this.#lru.keys()]) {
      if (room >= ahead) return;
      if (!this.#evictable(entry) || !this.#queue(entry)) continue;
      this.#spilledAhead++;
      room += this.#rounded(entry.bytes);
    }
  }

  /**
   * The high-water room: `VRAM_SPILL_AHEAD`, else the largest spillable buffer where eight or more
   * of it are on the device (counting the block of `size` about to be mapped and those whose spill
   * is queued).
   */
  #aheadBytes(size: number): number {
    const set = SPILL_AHEAD_VARIABLE.read();
    if (set !== undefined) return set;
    let largest = size;
    let resident = size;
    for (const entry of [...this.#lru.keys(), ...this.#spilling]) {
      const size = this.#rounded(entry.bytes);
      resident += size;
      if (size > largest) largest = size;
    }
    return resident >= AHEAD_MIN_BUFFERS * largest ? largest : 0;
  }

  #reload(entry: SpillEntry, stream: StreamRef | undefined): void {
    // A synchronous copy in: refused before anything moves while a capture forbids it.
    if (stream === undefined) refuseDuringCapture('a synchronous use of a spilled buffer', 'bringing it back copies synchronously: use it on a stream');
    const size = this.#rounded(entry.bytes);
    const moving = entry.moving;
    this.#makeRoom(size, moving === undefined);
    // Queued before this copy in, so the spills' copies out run beside it on the other copy engine.
    this.#spillAhead(size);
    let ptr = entry.ptr;
    if (moving === undefined) this.#retried(() => this.resource.back(entry.ptr));
    else ptr = this.#allocateFrom(moving, entry.bytes, stream);
    const host = entry.host!;
    const device = this.device;
    device.makeCurrent();
    const backend = device.backend;
    try {
      if (stream === undefined) backend.memcpy(ptr, host.ptr, entry.bytes);
      else backend.memcpyAsync(ptr, host.ptr, entry.bytes, stream.handle);
    } catch (error) {
      // Still spilled: the host copy is the data.
      if (moving === undefined) this.resource.unback(ptr);
      else moving.deallocate(ptr, entry.bytes, stream);
      throw error;
    }
    const buffer = entry.owner?.deref();
    if (moving !== undefined) {
      entry.ptr = ptr;
      if (buffer !== undefined) moveAllocation(buffer, ptr);
    }
    if (stream !== undefined) {
      // A later eviction's copy out, or the free of the host copy, waits for this copy in.
      buffer?.recordStream(stream);
      host.recordStream(stream);
    }
    entry.resident = true;
    entry.dirty = false;
    this.#lru.set(entry, true);
    this.#spilledBytes.sub(entry.bytes);
    this.#spilledBuffers.sub(1);
    this.#reloads++;
    this.#reloadedBytes += entry.bytes;
    observer?.reloaded(this.resource, entry.ptr, entry.bytes, stream === undefined ? 0 : stream.handle);
  }

  /** `resource.allocate`, spilling on refusal (see `#retried`). */
  #allocateFrom(resource: MemoryResource, bytes: number, stream: StreamRef | undefined): Ptr {
    let ptr = 0;
    this.#retried(() => {
      ptr = resource.allocate(bytes, stream);
    });
    return ptr;
  }

  /**
   * Runs `take` (an allocation or a mapping), and on an out-of-memory refusal frees what spilling
   * can (queued spills, then least recently used buffers), then the other resources' caches of the
   * device once, retrying after each; the refusal, with a line on what was spillable, when nothing helps.
   */
  #retried(take: () => void): void {
    let releasedCaches = false;
    for (;;) {
      try {
        take();
        return;
      } catch (error) {
        if (!isOutOfMemory(error)) throw error;
        if (this.#freeOne() > 0) continue;
        if (!releasedCaches) {
          releasedCaches = true;
          if (releaseCaches(this.device.ordinal) > 0) continue;
        }
        throw this.#cannotHelp(error);
      }
    }
  }

  /** The stream copies out are queued on (made on the first eviction). */
  #spillStream(): Stream {
    this.#stream ??= Stream.create({ device: this.device });
    return this.#stream;
  }

  /** The out-of-memory error with a line on what spilling could do. */
  #cannotHelp(error: unknown): unknown {
    if (!(error instanceof Error) || !isOutOfMemory(error)) return error;
    const epoch = currentEpoch();
    let resident = 0;
    let leased = 0;
    let inUse = 0;
    for (const entry of this.#lru.keys()) {
      resident += entry.bytes;
      if (entry.leases > 0) leased += entry.bytes;
      else if (entry.epoch === epoch) inUse += entry.bytes;
    }
    const spilled = this.#spilledBytes.value;
    extendMessage(
      error,
      `spilling could not help: ${formatBytes(resident)} of spillable memory on device ${this.device.ordinal} ` +
        `(${formatBytes(leased)} held by leases, ${formatBytes(inUse)} used by this operation, the rest could not be copied out), ` +
        `${formatBytes(spilled)} spilled to host memory`,
    );
    return error;
  }
}
