/**
 * The pinned host memory a device's spills copy into: one PoolResource over a PinnedHostResource,
 * so host copies are cut from chunks rather than pinned one cuMemHostAlloc each. Pinning costs
 * time in proportion to the bytes (page locking; tens of milliseconds for 256 MiB), so a program
 * that knows how much it will spill reserves it before its work starts (`reserveSpillHost`), as a
 * careful user allocates pinned buffers before timing a loop; spills past the reservation grow the
 * pool on demand, a chunk of at least 64 MiB at a time (a larger copy gets a chunk of its
 * own size), as spilling always did.
 *
 * Stream order: host copies are allocated on the manager's spill stream (their copy out runs
 * there) and freed on it after the streams that used them (the buffer layer's `recordStream`), so a
 * freed copy's memory is handed out again only after the copies that read or wrote it have run.
 * What no copy uses goes back to the driver with `emptyCache()` (or the spill manager's
 * `releaseHost`), and at a refusal of pinned memory anywhere (the cache registry releases every
 * pinned-host cache).
 */
import type { Device } from '../../device.js';
import { PoolResource } from '../../resource/suballoc/pool.js';
import { PinnedHostResource } from '../../resource/upstream/pinned-host-resource.js';
import type { StreamRef } from '../../stream.js';
import { HostBuffer } from '../host-buffer.js';
import { keep } from '../tidy.js';

/** The least a growth past the reservation pins: small host copies share chunks, large ones get their own. */
let growthChunk = 64 * 1024 * 1024;

/**
 * Sets the least a growth past the reservation pins, for pools made from now on (`bench/spill.ts
 * --host-chunk`: whether fewer, larger cuMemHostAlloc calls save time where page locking costs
 * per byte; a larger chunk also holds memory no copy may need).
 *
 * @internal
 * @param bytes The chunk size.
 */
export function setSpillHostChunk(bytes: number): void {
  growthChunk = bytes;
}
/** The most one reservation chunk pins: few cuMemHostAlloc calls, yet chunks that can go back apart. */
const RESERVATION_CHUNK = 1024 * 1024 * 1024;

/** One device's pinned host memory for spilling. */
export class SpillHost {
  #pool: PoolResource | undefined;

  /** @param device The device whose spills it holds (its backend pins the memory). */
  constructor(readonly device: Device) {}

  /** The pool (made at first use: a program that never spills pins nothing). */
  get #resource(): PoolResource {
    if (this.#pool === undefined || this.#pool.destroyed) {
      const upstream = new PinnedHostResource({ device: this.device });
      this.#pool = new PoolResource({ device: this.device, upstream, chunkSize: growthChunk });
    }
    return this.#pool;
  }

  /** A host copy of `bytes`, first written on `stream` (its memory reused only in that stream's order). */
  allocate(bytes: number, stream: StreamRef): HostBuffer {
    // vram's own memory, whatever scope the spill ran in: no `tidy` frees it.
    return keep(HostBuffer.allocate(bytes, { resource: this.#resource, stream }));
  }

  /**
   * Pins host memory until at least `bytes` are held (in use or not), in chunks of up to 1 GiB:
   * blocks of a chunk's size are taken (each one a growth where no free memory is left that size)
   * on `stream`, then all given back there, where the spills' copies will take them. Returns the
   * bytes held. On a refusal, what was pinned stays held and the error is thrown.
   */
  reserve(bytes: number, stream: StreamRef): number {
    const pool = this.#resource;
    const taken: Array<[number, number]> = [];
    try {
      while (pool.reservedBytes < bytes) {
        const size = Math.min(RESERVATION_CHUNK, bytes - pool.reservedBytes);
        taken.push([pool.allocate(size, stream), size]);
      }
    } finally {
      for (const [ptr, size] of taken) pool.deallocate(ptr, size, stream);
    }
    return pool.reservedBytes;
  }

  /** Gives back to the driver every chunk no host copy uses; returns the bytes given back. */
  release(): number {
    const pool = this.#pool;
    return pool === undefined || pool.destroyed ? 0 : pool.releaseCached();
  }

  /** Pinned bytes held now (the reservation and growth past it) and, of those, handed out as host copies. */
  figures(): { readonly reservedBytes: number; readonly allocatedBytes: number } {
    const figures = this.#pool?.memoryFigures();
    return { reservedBytes: figures?.reservedBytes ?? 0, allocatedBytes: figures?.allocatedBytes.value ?? 0 };
  }
}
