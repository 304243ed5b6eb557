/**
 * FixedSizeResource: blocks of exactly one size (RMM's fixed_size_memory_resource). Allocation is
 * a pop from a per-stream stack, so it is the cheapest allocator here; it suits the many small
 * same-sized requests of a binning resource. Grows by chunks of `blocksToPreallocate` blocks.
 */
import type { Ptr } from '../backend/backend.js';
import { Device } from '../device.js';
import { DoubleFreeError, InvalidPointerError, OutOfMemoryError } from '../errors.js';
import { alignUp, checkBytes } from '../validate.js';
import { GRANULE } from './pool/free-list.js';
import { StreamStacks } from './pool/stream-stacks.js';
import type { MemoryKind, MemoryResource, ReservingResource, StreamRef } from './resource.js';

/** Options for a FixedSizeResource. */
export interface FixedSizeOptions {
  /** The size of every block (rounded up to 256); default 1 MiB. */
  readonly blockSize?: number;
  /** Blocks taken from upstream per chunk; default 128. */
  readonly blocksToPreallocate?: number;
}

interface Chunk {
  readonly ptr: number;
  readonly bytes: number;
}

/** Equal-sized blocks from chunks of an upstream resource, stream-ordered. */
export class FixedSizeResource implements ReservingResource {
  /** The upstream's kind. */
  readonly kind: MemoryKind;
  /** Blocks are aligned to 256 bytes (block sizes are multiples of 256), or the upstream's lower one. */
  readonly alignment: number;
  /** The upstream's device. */
  readonly device: number;
  /** The size of every block. */
  readonly blockSize: number;
  /** Blocks per chunk. */
  readonly blocksToPreallocate: number;
  private readonly free: StreamStacks;
  private readonly live = new Map<number, number>();
  private readonly chunks: Chunk[] = [];
  private reserved = 0;
  private peakReserved = 0;

  /** Blocks of `blockSize` from `upstream`. */
  constructor(readonly upstream: MemoryResource, options: FixedSizeOptions = {}) {
    if (upstream === null || typeof upstream !== 'object' || typeof upstream.allocate !== 'function') {
      throw new TypeError('upstream must be a MemoryResource');
    }
    this.kind = upstream.kind;
    this.device = upstream.device;
    this.alignment = Math.min(GRANULE, upstream.alignment);
    this.blockSize = alignUp(checkBytes(options.blockSize ?? 1024 * 1024, 'blockSize'), GRANULE);
    this.blocksToPreallocate = checkBytes(options.blocksToPreallocate ?? 128, 'blocksToPreallocate');
    this.free = new StreamStacks(Device.get(upstream.device >= 0 ? upstream.device : 0).backend);
  }

  /** A block of blockSize; `bytes` may be anything up to blockSize (RangeError beyond). */
  allocate(bytes: number, stream?: StreamRef): Ptr {
    checkBytes(bytes);
    if (bytes > this.blockSize) {
      throw new RangeError(`${this.describe()} hands out blocks of ${this.blockSize} bytes; ${bytes} bytes do not fit`);
    }
    const h = stream === undefined ? 0 : stream.handle;
    let ptr = this.free.pop(h);
    if (ptr < 0) {
      this.grow(h, bytes);
      ptr = this.free.pop(h);
    }
    this.live.set(ptr, bytes);
    return ptr;
  }

  /** Returns a block; `bytes` must be what it was allocated with. */
  deallocate(ptr: Ptr, bytes: number, stream?: StreamRef): void {
    checkBytes(bytes);
    const requested = this.live.get(ptr);
    if (requested === undefined) {
      if (this.free.has(ptr)) throw new DoubleFreeError(`deallocate(0x${ptr.toString(16)}): the block is already free`);
      throw new InvalidPointerError(`deallocate(${String(ptr)}): not a block of ${this.describe()}`);
    }
    if (requested !== bytes) {
      throw new InvalidPointerError(`deallocate(0x${ptr.toString(16)}, ${bytes}): the block was allocated with ${requested} bytes`);
    }
    this.live.delete(ptr);
    this.free.push(ptr, stream === undefined ? 0 : stream.handle);
  }

  /** Only this resource may free its blocks. */
  isEqual(other: MemoryResource): boolean {
    return other === this;
  }

  /** Gives chunks with no live block back to upstream; returns the bytes released. */
  releaseCached(): number {
    const busy = new Set<Chunk>();
    for (const ptr of this.live.keys()) {
      const c = this.chunkOf(ptr);
      if (c !== undefined) busy.add(c);
    }
    const idle = this.chunks.filter((c) => !busy.has(c));
    if (idle.length === 0) return 0;
    const idleSet = new Set(idle);
    const lastStream = new Map<Chunk, number>();
    for (const { ptr, stream } of this.free.remove((p) => idleSet.has(this.chunkOf(p)!))) {
      lastStream.set(this.chunkOf(ptr)!, stream);
    }
    let released = 0;
    for (const c of idle) {
      this.chunks.splice(this.chunks.indexOf(c), 1);
      this.upstream.deallocate(c.ptr, c.bytes, { handle: lastStream.get(c) ?? 0 });
      this.reserved -= c.bytes;
      released += c.bytes;
    }
    return released;
  }

  /** Gives every chunk back (live blocks included). */
  destroy(): void {
    this.free.destroy();
    this.live.clear();
    for (const c of this.chunks.splice(0)) this.upstream.deallocate(c.ptr, c.bytes);
    this.reserved = 0;
  }

  /** Bytes held from upstream. */
  get reservedBytes(): number {
    return this.reserved;
  }

  /** High-water mark of reservedBytes. */
  get peakReservedBytes(): number {
    return this.peakReserved;
  }

  /** Restarts the high-water mark. */
  resetPeakReserved(): void {
    this.peakReserved = this.reserved;
  }

  /** Number of live blocks. */
  get liveCount(): number {
    return this.live.size;
  }

  /** `FixedSizeResource(block=1048576, upstream=...)`. */
  describe(): string {
    return `FixedSizeResource(block=${this.blockSize}, upstream=${this.upstream.describe()})`;
  }

  private grow(stream: number, bytes: number): void {
    const chunkBytes = this.blockSize * this.blocksToPreallocate;
    let ptr: number;
    try {
      ptr = this.upstream.allocate(chunkBytes, { handle: stream });
    } catch (error) {
      if (error instanceof OutOfMemoryError) {
        throw new OutOfMemoryError(bytes, 'FixedSizeResource.allocate', this.describe(),
          { currentBytes: this.live.size * this.blockSize, peakBytes: this.peakReserved, currentCount: this.live.size, reservedBytes: this.reserved },
          `cannot take a chunk of ${chunkBytes} bytes from ${this.upstream.describe()}: ${error.message}`);
      }
      throw error;
    }
    this.chunks.push({ ptr, bytes: chunkBytes });
    this.chunks.sort((a, b) => a.ptr - b.ptr);
    this.reserved += chunkBytes;
    if (this.reserved > this.peakReserved) this.peakReserved = this.reserved;
    for (let k = this.blocksToPreallocate - 1; k >= 0; k--) this.free.push(ptr + k * this.blockSize, stream);
  }

  private chunkOf(ptr: number): Chunk | undefined {
    let lo = 0;
    let hi = this.chunks.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const c = this.chunks[mid]!;
      if (ptr < c.ptr) hi = mid - 1;
      else if (ptr >= c.ptr + c.bytes) lo = mid + 1;
      else return c;
    }
    return undefined;
  }
}
