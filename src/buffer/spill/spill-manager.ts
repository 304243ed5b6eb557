/**
 * The spill manager of a device: which spillable buffers are on the device, in least recently used
 * order, and the moves between device and pinned host memory. Eviction happens when room is needed
 * (a spillable allocation or a reload finds too little free memory, or the device's use would pass
 * `VRAM_SPILL_LIMIT`), and when the driver refuses any resource of the device (the cache registry
 * calls `releaseCached` on every resource, and the device's SpillableResource hands that to
 * `evictAll`). A buffer is evicted only when no lease holds it and the current operation does not
 * use it; its copy out is queued on the manager's stream after the work queued on every stream that
 * used it (events, as a free orders itself), and a buffer whose host copy is still current (not
 * written since it came back) is evicted without a copy.
 *
 * The one host wait: before the physical memory is unmapped, the host waits for one event recorded
 * after the copy out (cuMemUnmap does not wait for queued work, and the memory must not go while the
 * copy or the work before it still reads it). The rest of the device is never synchronised.
 */
import type { Ptr } from '../../backend/backend.js';
import { EventFlags } from '../../backend/backend.js';
import { CounterCell, type Counter } from '../../counter.js';
import { Device } from '../../device.js';
import { isOutOfMemory } from '../../errors.js';
import { Stream } from '../../stream.js';
import { extendMessage, releaseCaches } from '../../resource/cache-registry.js';
import { SpillableResource } from '../../resource/upstream/spillable-resource.js';
import type { StreamRef } from '../../resource/resource.js';
import { choiceOf, sizeInBytes, variableReader } from '../../util/environment.js';
import { formatBytes } from '../../util/size.js';
import { HostBuffer } from '../host-buffer.js';
import type { Allocation } from '../lifetime.js';
import { heldByCopies, waitForUsesOn } from '../lifetime.js';
import { beginOperation, currentEpoch, type Residency } from './residency.js';

/** `VRAM_SPILL=1`: buffers and arrays allocated without a resource are spillable unless told otherwise. */
export const SPILL_VARIABLE = variableReader('VRAM_SPILL', choiceOf(['0', '1']));
/** `VRAM_SPILL_LIMIT`: the device memory in use (all of it, as cuMemGetInfo counts) that spilling keeps below. */
export const SPILL_LIMIT_VARIABLE = variableReader('VRAM_SPILL_LIMIT', sizeInBytes);

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
  /** Bytes of spillable buffers on the device now. */
  readonly residentBytes: number;
  /** Of those, bytes a lease keeps there. */
  readonly leasedBytes: number;
}

/** What spilling is told of, for the memory history (set by observe/; one listener). */
export interface SpillObserver {
  /** A buffer of `bytes` at `ptr` of `resource` went to the host (`copied`: false when its host copy was current). */
  spilled(resource: SpillableResource, ptr: Ptr, bytes: number, copied: boolean): void;
  /** A buffer came back, on stream `handle`. */
  reloaded(resource: SpillableResource, ptr: Ptr, bytes: number, handle: number): void;
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
  /** Its pinned host copy, made at its first eviction and kept for the next. */
  host: HostBuffer | undefined;
  /** The buffer, weakly: the manager must not keep a dropped buffer alive. */
  owner: WeakRef<Allocation> | undefined;

  constructor(readonly manager: SpillManager, readonly ptr: Ptr, readonly bytes: number) {}

  prepare(stream: StreamRef | undefined, writes: boolean): void {
    this.manager.use(this, stream, writes);
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
 * @param device The device.
 * @returns Its figures.
 * @throws Never.
 * @example
 * ```ts
 * spillFigures(Device.get(0)).reloads;
 * ```
 */
export function spillFigures(device: Device): SpillFigures {
  const manager = managers.get(device);
  if (manager !== undefined) return manager.figures();
  const zero = { value: 0, peak: 0, total: 0 };
  return { spilledBytes: zero, spilledBuffers: zero, copiesOut: 0, copiedOutBytes: 0, reloads: 0, reloadedBytes: 0, residentBytes: 0, leasedBytes: 0 };
}

/** Spill bookkeeping of one device. */
export class SpillManager {
  readonly resource: SpillableResource;
  /** Resident entries, least recently used first (a Map keeps insertion order; a use moves an entry to the end). */
  readonly #lru = new Map<SpillEntry, true>();
  readonly #spilledBytes = new CounterCell();
  readonly #spilledBuffers = new CounterCell();
  #copiesOut = 0;
  #copiedOutBytes = 0;
  #reloads = 0;
  #reloadedBytes = 0;
  #stream: Stream | undefined;
  /** Allocations and reloads of this manager under way: an eviction they cause keeps the operation's buffers. */
  #busy = 0;

  constructor(readonly device: Device) {
    this.resource = new SpillableResource(device);
    this.resource.setEvictor(() => this.evictAll());
  }

  /**
   * A new spillable block of `bytes`, first used on `stream`; evicts others first where the
   * device has too little room (or the limit would be passed).
   */
  allocate(bytes: number, stream: StreamRef): SpillEntry {
    const size = this.#rounded(bytes);
    let ptr: Ptr;
    this.#busy++;
    try {
      this.#makeRoom(size);
      for (;;) {
        try {
          ptr = this.resource.allocate(bytes, stream);
          break;
        } catch (error) {
          if (!isOutOfMemory(error) || this.#evictOne() === 0) throw this.#cannotHelp(error);
        }
      }
    } finally {
      this.#busy--;
    }
    const entry = new SpillEntry(this, ptr, bytes);
    entry.epoch = currentEpoch();
    this.#lru.set(entry, true);
    return entry;
  }

  /** Before a use: back on the device (on `stream`), most recently used, dirty if written. */
  use(entry: SpillEntry, stream: StreamRef | undefined, writes: boolean): void {
    if (entry.freed) return; // the buffer's own checks throw UseAfterFreeError
    entry.epoch = currentEpoch();
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

  /** The buffer was freed: its memory goes back on `stream`, its host copy with it. */
  release(entry: SpillEntry, stream: StreamRef | undefined): void {
    this.resource.deallocate(entry.ptr, entry.bytes, stream);
    entry.freed = true;
    if (this.#lru.delete(entry)) {
      // resident: nothing to uncount
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
   * it starts a new operation: the buffers the last one used may go too.
   */
  evictAll(): number {
    if (this.#busy === 0) beginOperation();
    let bytes = 0;
    for (const entry of [...this.#lru.keys()]) {
      if (this.#evictable(entry)) bytes += this.evict(entry);
    }
    return bytes;
  }

  /**
   * Moves `entry` to the host (a copy out only when dirty) and gives its physical memory back.
   * Returns the bytes given back, 0 when it could not go (no pinned host memory for its copy).
   */
  evict(entry: SpillEntry): number {
    const buffer = entry.owner?.deref();
    // A staged copy in flight queues its later chunks when earlier ones complete: no event covers them yet.
    if (buffer === undefined || buffer.freed || !entry.resident || heldByCopies(buffer)) return 0;
    const device = this.device;
    const copy = entry.dirty || entry.host === undefined;
    if (entry.host === undefined) {
      try {
        entry.host = HostBuffer.allocate(entry.bytes, { device });
      } catch (error) {
        if (isOutOfMemory(error)) return 0;
        throw error;
      }
    }
    const stream = this.#spillStream();
    waitForUsesOn(buffer, stream);
    device.makeCurrent();
    const backend = device.backend;
    if (copy) backend.memcpyAsync(entry.host.ptr, entry.ptr, entry.bytes, stream.handle);
    // The one host wait of a spill: cuMemUnmap does not wait for queued work, so the copy out and
    // the work queued on the buffer before it must have run before its pages go.
    const event = backend.eventCreate(EventFlags.DISABLE_TIMING);
    try {
      backend.eventRecord(event, stream.handle);
      backend.eventSynchronize(event);
    } finally {
      backend.eventDestroy(event);
    }
    const given = this.resource.unback(entry.ptr);
    entry.resident = false;
    entry.dirty = false;
    this.#lru.delete(entry);
    this.#spilledBytes.add(entry.bytes);
    this.#spilledBuffers.add(1);
    if (copy) {
      this.#copiesOut++;
      this.#copiedOutBytes += entry.bytes;
    }
    observer?.spilled(this.resource, entry.ptr, entry.bytes, copy);
    return given;
  }

  /** The figures now. */
  figures(): SpillFigures {
    let resident = 0;
    let leased = 0;
    for (const entry of this.#lru.keys()) {
      resident += entry.bytes;
      if (entry.leases > 0) leased += entry.bytes;
    }
    return {
      spilledBytes: this.#spilledBytes.snapshot(), spilledBuffers: this.#spilledBuffers.snapshot(),
      copiesOut: this.#copiesOut, copiedOutBytes: this.#copiedOutBytes,
      reloads: this.#reloads, reloadedBytes: this.#reloadedBytes, residentBytes: resident, leasedBytes: leased,
    };
  }

  /** Restarts the peaks. */
  resetPeaks(): void {
    this.#spilledBytes.resetPeak();
    this.#spilledBuffers.resetPeak();
  }

  #evictable(entry: SpillEntry): boolean {
    return entry.resident && entry.leases === 0 && entry.epoch !== currentEpoch();
  }

  /** Evicts the least recently used buffer that may go; returns the bytes given back (0: none could). */
  #evictOne(): number {
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

  /** Evicts until `size` bytes fit in the device's free memory and under the limit, or nothing more can go. */
  #makeRoom(size: number): void {
    const { free, total } = this.device.memInfo();
    let room = free;
    const limit = SPILL_LIMIT_VARIABLE.read();
    if (limit !== undefined) room = Math.min(room, limit - (total - free));
    while (room < size) {
      const given = this.#evictOne();
      if (given === 0) return;
      room += given;
    }
  }

  #reload(entry: SpillEntry, stream: StreamRef | undefined): void {
    this.#makeRoom(this.#rounded(entry.bytes));
    let releasedCaches = false;
    for (;;) {
      try {
        this.resource.back(entry.ptr);
        break;
      } catch (error) {
        if (!isOutOfMemory(error)) throw error;
        if (this.#evictOne() > 0) continue;
        // Other resources' caches of the device (the registry's release), once.
        if (!releasedCaches) {
          releasedCaches = true;
          if (releaseCaches(this.device.ordinal) > 0) continue;
        }
        throw this.#cannotHelp(error);
      }
    }
    const host = entry.host!;
    const device = this.device;
    device.makeCurrent();
    const backend = device.backend;
    try {
      if (stream === undefined) backend.memcpy(entry.ptr, host.ptr, entry.bytes);
      else backend.memcpyAsync(entry.ptr, host.ptr, entry.bytes, stream.handle);
    } catch (error) {
      this.resource.unback(entry.ptr); // still spilled: the host copy is the data
      throw error;
    }
    if (stream !== undefined) {
      // A later eviction's copy out, or the free of the host copy, waits for this copy in.
      entry.owner?.deref()?.recordStream(stream);
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
    extendMessage(error, `spilling could not help: ${formatBytes(resident)} of spillable memory on device ${this.device.ordinal} ` +
      `(${formatBytes(leased)} held by leases, ${formatBytes(inUse)} used by this operation, the rest could not be copied out), ` +
      `${formatBytes(spilled)} spilled to host memory`);
    return error;
  }
}
