/**
 * ArenaResource: one fixed region, reserved once, sub-allocated with coalescing best fit (ppl.cv's
 * CUDA memory pool). For programs that know their working set up front: no growth, no driver call
 * after activation, and a clear out-of-memory error when the region is exhausted. Also hands out
 * pitched 2D blocks, pitch rounded to the device's texture pitch alignment.
 */
import type { Ptr } from '../../backend/backend.js';
import { Device } from '../../device.js';
import { streamHandleOf } from '../../stream.js';
import { DoubleFreeError, InvalidPointerError, OutOfMemoryError, outOfMemoryMessage } from '../../errors.js';
import { alignUp, checkBytes, readBytes, type ByteSize, checkPointer, checkPowerOfTwo, MAX_BYTES } from '../../validate.js';
import { formatBytesExact } from '../../util/size.js';
import { CudaResource } from '../upstream/cuda-resource.js';
import { BlockHeap } from './kit/block-heap.js';
import { NIL } from './kit/block-store.js';
import { GRANULE } from './kit/free-list.js';
import { checkMemoryOf, checkResource, MemoryResource } from '../resource.js';
import { type MemoryFigures, type MemoryKind } from '../figures.js';
import { type StreamRef } from '../../stream.js';
import { outOfMemoryStatistics, type SnapshotSegment } from '../figures.js';
import { readOptions } from '../../util/options.js';

/** Options of an ArenaResource. */
export interface ArenaOptions {
  /** Usable bytes in the arena (rounded up to 256): a number, or a size like `'512M'`. */
  readonly size: ByteSize;
  /** Where the region comes from (default a CudaResource on the device, owned by the arena). */
  readonly upstream?: MemoryResource;
  /** The device (default device 0, or the upstream's). */
  readonly device?: Device;
}

/** A pitched 2D block: rows of `pitch` bytes, each starting `pitch` bytes after the previous. */
export interface PitchedBlock {
  readonly ptr: Ptr;
  readonly pitch: number;
}

/** The region start is aligned to this, so pitched blocks need no padding in a fresh arena. */
const REGION_ALIGNMENT = 4096;

/**
 * A fixed region of device memory, sub-allocated.
 *
 * @example
 * ```ts
 * using arena = new ArenaResource({ size: 64 << 20 });
 * const { ptr, pitch } = arena.allocatePitched(1920 * 4, 1080);
 * arena.deallocatePitched(ptr);
 * ```
 */
export class ArenaResource extends MemoryResource {
  /** The upstream's kind. */
  readonly kind: MemoryKind;
  /** 1D blocks are aligned to 256 bytes. */
  readonly alignment = GRANULE;
  /** The device ordinal. */
  readonly deviceOrdinal: number;
  /** Where the region came from. */
  override readonly upstream: MemoryResource;
  /** Usable bytes in the arena. */
  readonly size: number;
  /** Row pitch alignment for pitched blocks (the device's texture pitch alignment). */
  readonly pitchAlignment: number;
  private readonly heap: BlockHeap;
  private readonly region: Ptr;
  private readonly regionBytes: number;
  private readonly start: Ptr;
  /** The upstream was created here (and is destroyed with the arena). */
  private readonly ownsUpstream: boolean;

  /**
   * Reserves an arena of `options.size` bytes (rounded up to 256) from `upstream` (default a
   * CudaResource on the device, owned by the arena); all later allocations come from it.
   * @param options The size (required), the upstream and the device.
   * @throws {TypeError | RangeError} For a bad size or upstream, or an upstream on another device than `device`.
   * @throws {OutOfMemoryError} When the upstream cannot give the region.
   * @example
   * ```ts
   * using arena = new ArenaResource({ size: 256 << 20, upstream: new AsyncResource() }); // one 256 MiB region
   * ```
   */
  constructor(options: ArenaOptions) {
    super();
    options = readOptions('new ArenaResource', options, { size: true, upstream: true, device: true });
    const bytes = readBytes(options.size, 'size');
    const upstream = options.upstream === undefined ? undefined : checkResource(options.upstream);
    const dev = options.device ?? Device.get(upstream !== undefined && upstream.deviceOrdinal >= 0 ? upstream.deviceOrdinal : 0);
    if (upstream !== undefined && upstream.deviceOrdinal >= 0) checkMemoryOf(upstream, upstream.kind, dev.ordinal, 'ArenaResource');
    this.ownsUpstream = upstream === undefined;
    this.upstream = upstream ?? new CudaResource(dev);
    this.kind = this.upstream.kind;
    this.deviceOrdinal = this.upstream.deviceOrdinal;
    this.pitchAlignment = Math.max(GRANULE, dev.info.texturePitchAlignment || 512);
    this.size = alignUp(bytes, GRANULE);
    const slack = this.upstream.alignment >= REGION_ALIGNMENT ? 0 : REGION_ALIGNMENT - Math.min(this.upstream.alignment, GRANULE);
    this.regionBytes = this.size + slack;
    try {
      this.region = this.upstream.allocate(this.regionBytes);
    } catch (error) {
      if (this.ownsUpstream) this.upstream.destroy();
      throw error;
    }
    this.start = alignUp(this.region, REGION_ALIGNMENT);
    const heap = (this.heap = new BlockHeap(dev.backend));
    heap.addRegion(this.start, this.size, -1);
    const { upstream: from, region, regionBytes, ownsUpstream } = this;
    this.guardMemory(() => releaseRegion(heap, from, region, regionBytes, ownsUpstream));
  }

  /**
   * Arena bytes one 1D block of `bytes` takes: `bytes` rounded up to 256.
   * @throws {RangeError} For a bad size, or one whose volume is above 2^53 - 1 bytes.
   * @example
   * ```ts
   * ArenaResource.ceil1DVolume(1000); // 1024
   * ```
   */
  static ceil1DVolume(bytes: number): number {
    return safeVolume(alignUp(checkBytes(bytes), GRANULE), `ceil1DVolume(${bytes})`);
  }

  /**
   * Arena bytes one pitched block takes in the worst case: the pitch (width rounded to
   * `pitchAlignment`) times the rows, plus the padding that aligns its start. Sum these over the
   * blocks you need to size an arena.
   * @throws {RangeError} For a bad argument, a pitchAlignment that is not a power of two, or a
   *   volume above 2^53 - 1 bytes.
   * @example
   * ```ts
   * const size = frames * ArenaResource.ceil2DVolume(1920 * 4, 1080); // room for `frames` RGBA images
   * using arena = new ArenaResource({ size });
   * ```
   */
  static ceil2DVolume(widthBytes: number, height: number, pitchAlignment = 512): number {
    checkBytes(widthBytes, 'widthBytes');
    checkBytes(height, 'height');
    checkPowerOfTwo(pitchAlignment, 'pitchAlignment');
    const what = `ceil2DVolume(${widthBytes}, ${height}, ${pitchAlignment})`;
    // A product above 2^53 - 1 may be rounded, but never down to 2^53 - 1 or less: the checks hold.
    const pitch = safeVolume(alignUp(widthBytes, pitchAlignment), what);
    const area = safeVolume(pitch * height, what);
    return safeVolume(alignUp(area, GRANULE) + Math.max(0, pitchAlignment - GRANULE), what);
  }

  /** A 1D block of `bytes`, best fit; OutOfMemoryError when no free range is large enough. */
  protected doAllocate(bytes: number, h: number): Ptr {
    return this.take(bytes, alignUp(bytes, GRANULE), GRANULE, h);
  }

  /** Returns a 1D block; `bytes` must be what it was allocated with. */
  protected doDeallocate(ptr: Ptr, bytes: number, h: number): void {
    const i = this.liveBlock(ptr);
    const requested = this.heap.store.requested[i]!;
    if (requested !== bytes) {
      throw new InvalidPointerError(`deallocate(0x${ptr.toString(16)}, ${bytes}): the block was allocated with ${requested} bytes`);
    }
    this.heap.unmarkLive(i);
    this.heap.give(i, h);
  }

  /**
   * A pitched 2D block of `height` rows of `widthBytes`; the pitch is rounded to `pitchAlignment`.
   * @param widthBytes Bytes per row.
   * @param height Rows.
   * @param stream Where it is first used.
   * @returns The block's address and pitch.
   * @throws {RangeError} For sizes whose product is larger than any allocation.
   * @throws {OutOfMemoryError} When no free range is large enough.
   * @example
   * ```ts
   * const { ptr, pitch } = arena.allocatePitched(640 * 4, 480, stream); // row r starts at ptr + r * pitch
   * ```
   */
  allocatePitched(widthBytes: number, height: number, stream?: StreamRef): PitchedBlock {
    checkBytes(widthBytes, 'widthBytes');
    checkBytes(height, 'height');
    const h = streamHandleOf(stream);
    if (this.destroyed) throw this.destroyedError();
    const pitch = alignUp(widthBytes, this.pitchAlignment);
    if (pitch * height > MAX_BYTES) {
      throw new RangeError(`allocatePitched(${widthBytes}, ${height}): pitch ${pitch} times ${height} rows is larger than any allocation`);
    }
    const bytes = pitch * height;
    const ptr = this.take(bytes, alignUp(bytes, GRANULE), this.pitchAlignment, h);
    this.countHandedOut();
    return { ptr, pitch };
  }

  /**
   * Returns a pitched block (its size is remembered).
   * @param ptr What allocatePitched returned.
   * @param stream The last stream that used it.
   * @throws {TypeError | RangeError} For a bad pointer or stream.
   * @throws {InvalidPointerError} For a pointer that is not the start of a block of this arena.
   * @throws {DoubleFreeError} For a block already returned.
   * @throws {UseAfterFreeError} When the arena's region was released.
   * @example
   * ```ts
   * const block = arena.allocatePitched(640 * 4, 480, stream);
   * arena.deallocatePitched(block.ptr, stream);
   * ```
   */
  deallocatePitched(ptr: Ptr, stream?: StreamRef): void {
    checkPointer(ptr);
    const h = streamHandleOf(stream);
    // As `deallocate`: a destroyed arena takes back the blocks live at `destroy()`.
    if (this.released) throw this.destroyedError();
    const i = this.liveBlock(ptr);
    this.heap.unmarkLive(i);
    this.heap.give(i, h);
    this.countReturned();
  }

  /** The one region, with every block cut from it. */
  protected override doMemorySegments(): SnapshotSegment[] {
    return [{ address: this.region, bytes: this.regionBytes, kind: 'region', pages: null, blocks: this.heap.layout().flat() }];
  }

  /**
   * Frees the region (live blocks included), on the default stream after every stream that freed
   * blocks in it; an upstream created by the arena goes too. (The region is the point of an
   * arena: `releaseCached` releases nothing.)
   */
  protected override doDestroy(): void {
    releaseRegion(this.heap, this.upstream, this.region, this.regionBytes, this.ownsUpstream);
  }

  /** The bytes taken from upstream, while active. */
  override get reservedBytes(): number {
    return this.released ? 0 : this.regionBytes;
  }

  /** An arena's reservation never changes while active. */
  override get peakReservedBytes(): number {
    return this.regionBytes;
  }

  /** Bytes not in any live block. */
  get freeBytes(): number {
    return this.heap.freeBytes;
  }

  /** Live blocks and the fixed reservation. */
  override memoryFigures(): MemoryFigures {
    const { bytes, allocations } = this.heap.counters();
    return { allocatedBytes: bytes, allocations, reservedBytes: this.reservedBytes, peakReservedBytes: this.peakReservedBytes };
  }

  /** Restarts the live high-water marks (the reservation is fixed). */
  override resetPeakFigures(): void {
    this.heap.resetPeaks();
  }

  /** `ArenaResource(size=..., upstream=...)`. */
  describe(): string {
    return `ArenaResource(size=${formatBytesExact(this.size, true)}, upstream=${this.upstream.describe()})`;
  }

  private take(bytes: number, size: number, alignment: number, h: number): Ptr {
    const i = this.heap.take(size, h, alignment);
    if (i === NIL) {
      const heap = this.heap;
      throw new OutOfMemoryError({
        requestedBytes: bytes,
        call: 'ArenaResource.allocate',
        reason: 'arena',
        resource: this.describe(),
        statistics: outOfMemoryStatistics(this.memoryFigures()),
        message: outOfMemoryMessage(
          bytes,
          this.describe(),
          `arena exhausted: ${formatBytesExact(heap.freeBytes)} of ` +
            `${formatBytesExact(this.size)} free, but no free range is large enough; size it with ArenaResource.ceil1DVolume/ceil2DVolume`,
        ),
      });
    }
    this.heap.markLive(i, bytes);
    return this.heap.store.start[i]!;
  }

  private liveBlock(ptr: Ptr): number {
    const i = typeof ptr === 'number' ? this.heap.live.get(ptr) : NIL;
    if (i !== NIL) return i;
    const s = this.heap.store;
    if (typeof ptr === 'number' && ptr >= this.start && ptr < this.start + this.size) {
      for (const f of this.heap.freeBlocks()) {
        if (ptr >= s.start[f]! && ptr < s.start[f]! + s.size[f]!) {
          return fail(new DoubleFreeError(`deallocate(0x${ptr.toString(16)}): the block is already free (freed twice?)`));
        }
      }
      return fail(new InvalidPointerError(`deallocate(0x${ptr.toString(16)}): not the start of a block of ${this.describe()}`));
    }
    return fail(new InvalidPointerError(`deallocate(${String(ptr)}): the pointer is not from ${this.describe()}`));
  }
}

/**
 * Gives the region back upstream (live blocks included) on the default stream, after every stream
 * that freed blocks in it, with an upstream the arena created; returns the bytes: `destroy()` once
 * no block is live, and the backstop of an arena collected before that.
 */
function releaseRegion(heap: BlockHeap, upstream: MemoryResource, region: Ptr, regionBytes: number, ownsUpstream: boolean): number {
  heap.joinAll(0);
  heap.destroy();
  upstream.deallocate(region, regionBytes);
  if (ownsUpstream) upstream.destroy();
  return regionBytes;
}

function fail(error: Error): never {
  throw error;
}

/** `bytes`, when it is a size a block can have; else a RangeError naming the helper's call. */
function safeVolume(bytes: number, what: string): number {
  if (bytes > MAX_BYTES) throw new RangeError(`ArenaResource.${what}: the volume is more than 2^53 - 1 bytes, larger than any allocation`);
  return bytes;
}
