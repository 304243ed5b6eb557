/**
 * FixedSizeResource: blocks of exactly one size (RMM's fixed_size_memory_resource). Allocation is
 * a pop from a per-stream stack, so it is the cheapest allocator here; it suits the many small
 * same-sized requests of a binning resource. Grows by chunks of `blocksToPreallocate` blocks.
 */
import type { Ptr } from '../../backend/backend.js';
import { nonZero } from '../../backstop.js';
import { CounterCell } from '../../counter.js';
import { Device } from '../../device.js';
import { DoubleFreeError, InvalidPointerError, isOutOfMemory, OutOfMemoryError, outOfMemoryMessage } from '../../errors.js';
import { alignUp, checkBytes, readBytes, type ByteSize } from '../../validate.js';
import { formatBytesExact } from '../../util/size.js';
import { GRANULE } from './kit/free-list.js';
import { StreamStacks, type StreamStack } from './kit/stream-stacks.js';
import { checkResource, MemoryResource } from '../resource.js';
import { type MemoryKind } from '../figures.js';
import { outOfMemoryStatistics, type MemoryFigures, type SnapshotBlock, type SnapshotSegment } from '../figures.js';
import { readOptions } from '../../util/options.js';

/** Options for a FixedSizeResource. */
export interface FixedSizeOptions {
  /** The size of every block (rounded up to 256); default 1 MiB. */
  readonly blockSize?: ByteSize;
  /** Blocks taken from upstream per chunk; default 128. */
  readonly blocksToPreallocate?: number;
}

interface Chunk {
  readonly ptr: number;
  readonly bytes: number;
}

/**
 * Equal-sized blocks from chunks of an upstream resource, stream-ordered. A chunk goes back
 * upstream (`releaseCached`, `destroy`) only on a stream that waited for every stream that freed
 * one of its blocks.
 *
 * @example
 * ```ts
 * using bins = new FixedSizeResource(new CudaResource(), { blockSize: 4096 });
 * const p = bins.allocate(100, stream);
 * bins.deallocate(p, 100, stream);
 * ```
 */
export class FixedSizeResource extends MemoryResource {
  /** The upstream's kind. */
  readonly kind: MemoryKind;
  /** Blocks are aligned to 256 bytes (block sizes are multiples of 256), or the upstream's lower one. */
  readonly alignment: number;
  /** The upstream's device. */
  readonly deviceOrdinal: number;
  /** The size of every block. */
  readonly blockSize: number;
  /** Blocks per chunk. */
  readonly blocksToPreallocate: number;
  private readonly free: StreamStacks;
  /** The resource chunks come from. */
  override readonly upstream: MemoryResource;
  private readonly live = new Map<number, number>();
  private readonly chunks: Chunk[] = [];
  private readonly reserved = new CounterCell();
  /** Requested bytes and blocks of live allocations (for out-of-memory reports). */
  private readonly liveBytes = new CounterCell();
  private readonly liveBlocks = new CounterCell();

  /**
   * Blocks of `blockSize` from `upstream`.
   * @param upstream Where chunks come from.
   * @param options Block size and blocks per chunk.
   * @throws {TypeError | RangeError} For a bad upstream or option.
   * @example
   * ```ts
   * const small = new FixedSizeResource(new PoolResource(), { blockSize: 4096, blocksToPreallocate: 256 });
   * ```
   */
  constructor(upstream: MemoryResource, options: FixedSizeOptions = {}) {
    super();
    this.upstream = checkResource(upstream);
    options = readOptions('new FixedSizeResource', options, { blockSize: true, blocksToPreallocate: true });
    this.kind = upstream.kind;
    this.deviceOrdinal = upstream.deviceOrdinal;
    this.alignment = Math.min(GRANULE, upstream.alignment);
    this.blockSize = alignUp(readBytes(options.blockSize ?? 1024 * 1024, 'blockSize'), GRANULE);
    this.blocksToPreallocate = checkBytes(options.blocksToPreallocate ?? 128, 'blocksToPreallocate');
    this.free = new StreamStacks(Device.get(upstream.deviceOrdinal >= 0 ? upstream.deviceOrdinal : 0).backend);
    if (this.blockSize * this.blocksToPreallocate > Number.MAX_SAFE_INTEGER) {
      throw new RangeError('blockSize * blocksToPreallocate is larger than any allocation');
    }
    const { free, chunks } = this;
    this.guardMemory(() => nonZero(releaseChunks(free, chunks, upstream)));
  }

  /** A block of blockSize; `bytes` may be anything up to blockSize (RangeError beyond). */
  protected doAllocate(bytes: number, h: number): Ptr {
    if (bytes > this.blockSize) {
      throw new RangeError(`${this.describe()} hands out blocks of ${this.blockSize} bytes; ${bytes} bytes do not fit`);
    }
    let ptr = this.free.pop(h);
    if (ptr < 0) {
      this.grow(h, bytes);
      ptr = this.free.pop(h);
    }
    this.live.set(ptr, bytes);
    this.liveBytes.add(bytes);
    this.liveBlocks.add(1);
    return ptr;
  }

  /** Returns a block; `bytes` must be what it was allocated with. */
  protected doDeallocate(ptr: Ptr, bytes: number, h: number): void {
    const requested = this.live.get(ptr);
    if (requested === undefined) {
      if (this.free.has(ptr)) throw new DoubleFreeError(`deallocate(0x${ptr.toString(16)}): the block is already free`);
      throw new InvalidPointerError(`deallocate(0x${ptr.toString(16)}): not a block of ${this.describe()}`);
    }
    if (requested !== bytes) {
      throw new InvalidPointerError(`deallocate(0x${ptr.toString(16)}, ${bytes}): the block was allocated with ${requested} bytes`);
    }
    this.live.delete(ptr);
    this.liveBytes.sub(bytes);
    this.liveBlocks.sub(1);
    this.free.push(ptr, h);
  }

  /**
   * One `chunk` segment per chunk, cut into its blocks: live ones with the size asked for, the rest
   * free (which stream's list holds a free block is not said: `stream` is null). Walks every block:
   * for a snapshot, not the hot path.
   */
  protected override doMemorySegments(): SnapshotSegment[] {
    return this.chunks.map((chunk) => {
      const blocks: SnapshotBlock[] = [];
      for (let address = chunk.ptr; address < chunk.ptr + chunk.bytes; address += this.blockSize) {
        const requested = this.live.get(address);
        blocks.push({
          address,
          bytes: this.blockSize,
          requestedBytes: requested ?? null,
          state: requested === undefined ? 'free' : 'live',
          stream: null,
          stack: null,
        });
      }
      return { address: chunk.ptr, bytes: chunk.bytes, kind: 'chunk', pages: null, blocks };
    });
  }

  /**
   * Gives chunks with no live block back to upstream; returns the bytes released. Each goes back
   * on a stream that first waited for every other stream that freed one of its blocks.
   */
  protected override doReleaseCached(): number {
    const busy = new Set<Chunk>();
    for (const ptr of this.live.keys()) {
      const c = this.chunkOf(ptr);
      if (c !== undefined) busy.add(c);
    }
    const idle = this.chunks.filter((c) => !busy.has(c));
    if (idle.length === 0) return 0;
    const idleSet = new Set(idle);
    const lanes = new Map<Chunk, Set<StreamStack>>();
    for (const { ptr, stack } of this.free.remove((p) => idleSet.has(this.chunkOf(p)!))) {
      const c = this.chunkOf(ptr)!;
      let set = lanes.get(c);
      if (set === undefined) lanes.set(c, (set = new Set()));
      set.add(stack);
    }
    const order = this.free.order;
    let released = 0;
    for (const c of idle) {
      const holders = [...(lanes.get(c) ?? [])];
      const live = holders.find((l) => !l.retired);
      const stream = live !== undefined ? live.stream : 0;
      for (const l of holders) order.join(l, stream);
      this.chunks.splice(this.chunks.indexOf(c), 1);
      this.upstream.deallocate(c.ptr, c.bytes, { handle: stream });
      this.reserved.sub(c.bytes);
      released += c.bytes;
    }
    return released;
  }

  /** Gives every chunk back, on the default stream after every freeing stream. */
  protected override doDestroy(): void {
    releaseChunks(this.free, this.chunks, this.upstream);
    this.live.clear();
    this.liveBytes.sub(this.liveBytes.value);
    this.liveBlocks.sub(this.liveBlocks.value);
    this.reserved.sub(this.reserved.value);
  }

  /**
   * Its live blocks (the bytes asked for) and the chunks it holds from upstream.
   *
   * @returns The figures; never `undefined`.
   * @example
   * ```ts
   * bins.memoryFigures().reservedBytes; // blockSize * blocksToPreallocate per chunk held
   * ```
   */
  override memoryFigures(): MemoryFigures {
    const reserved = this.reserved;
    return {
      allocatedBytes: this.liveBytes.snapshot(),
      allocations: this.liveBlocks.snapshot(),
      reservedBytes: reserved.value,
      peakReservedBytes: reserved.peak,
    };
  }

  /** Restarts the live and reserved high-water marks. */
  override resetPeakFigures(): void {
    this.liveBytes.resetPeak();
    this.liveBlocks.resetPeak();
    this.reserved.resetPeak();
  }

  /** `memoryFigures().reservedBytes` without building the figures (the memory history reads it per event). */
  override get reservedBytes(): number {
    return this.reserved.value;
  }

  /** `memoryFigures().peakReservedBytes` without building the figures. */
  override get peakReservedBytes(): number {
    return this.reserved.peak;
  }

  /** Number of live blocks. */
  get liveCount(): number {
    return this.live.size;
  }

  /** `FixedSizeResource(block=1048576, upstream=...)`. */
  describe(): string {
    return `FixedSizeResource(block=${formatBytesExact(this.blockSize, true)}, upstream=${this.upstream.describe()})`;
  }

  private grow(stream: number, bytes: number): void {
    const chunkBytes = this.blockSize * this.blocksToPreallocate;
    let ptr: number;
    try {
      ptr = this.upstream.allocate(chunkBytes, { handle: stream });
    } catch (error) {
      if (!isOutOfMemory(error)) throw error;
      throw new OutOfMemoryError({
        requestedBytes: bytes,
        call: 'FixedSizeResource.allocate',
        reason: 'upstream',
        resource: this.describe(),
        statistics: outOfMemoryStatistics(this.memoryFigures()),
        message: outOfMemoryMessage(bytes, this.describe(), `its upstream refused a chunk of ${formatBytesExact(chunkBytes)}: ${(error as Error).message}`),
        cause: error,
      });
    }
    this.chunks.push({ ptr, bytes: chunkBytes });
    this.chunks.sort((a, b) => a.ptr - b.ptr);
    this.reserved.add(chunkBytes);
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

/**
 * Gives every chunk back upstream (live blocks included) on the default stream, after every stream
 * that freed blocks, and returns the bytes: `destroy()` once no block is live, and the backstop
 * of a resource collected before that.
 */
function releaseChunks(free: StreamStacks, chunks: Chunk[], upstream: MemoryResource): number {
  free.joinAll(0);
  free.destroy();
  let bytes = 0;
  for (const c of chunks.splice(0)) {
    upstream.deallocate(c.ptr, c.bytes);
    bytes += c.bytes;
  }
  return bytes;
}
