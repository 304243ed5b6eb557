/**
 * ArenaResource: one fixed region, reserved once, sub-allocated with coalescing best fit (ppl.cv's
 * CUDA memory pool). For programs that know their working set up front: no growth, no driver call
 * after activation, and a clear out-of-memory error when the region is exhausted. Also hands out
 * pitched 2D blocks, pitch rounded to the device's texture pitch alignment.
 */
import type { Ptr } from '../backend/backend.js';
import { Device } from '../device.js';
import { DoubleFreeError, InvalidPointerError, OutOfMemoryError, UseAfterFreeError } from '../errors.js';
import { alignUp, checkBytes, checkPowerOfTwo } from '../validate.js';
import { CudaResource } from './cuda-resource.js';
import { BlockHeap } from './pool/block-heap.js';
import { NIL } from './pool/block-store.js';
import { GRANULE } from './pool/free-list.js';
import type { MemoryKind, MemoryResource, ReservingResource, StreamRef } from './resource.js';

/** Options for `ArenaResource.activate`. */
export interface ArenaOptions {
  /** The device (default device 0, or the upstream's). */
  readonly device?: Device;
  /** Where the region comes from (default a CudaResource on the device). */
  readonly upstream?: MemoryResource;
}

/** A pitched 2D block: rows of `pitch` bytes, each starting `pitch` bytes after the previous. */
export interface PitchedBlock {
  readonly ptr: Ptr;
  readonly pitch: number;
}

/** The region start is aligned to this, so pitched blocks need no padding in a fresh arena. */
const REGION_ALIGNMENT = 4096;

/** A fixed region of device memory, sub-allocated. */
export class ArenaResource implements ReservingResource {
  /** The upstream's kind. */
  readonly kind: MemoryKind;
  /** 1D blocks are aligned to 256 bytes. */
  readonly alignment = GRANULE;
  /** The device ordinal. */
  readonly device: number;
  /** Where the region came from. */
  readonly upstream: MemoryResource;
  /** Usable bytes in the arena. */
  readonly size: number;
  /** Row pitch alignment for pitched blocks (the device's texture pitch alignment). */
  readonly pitchAlignment: number;
  private readonly heap: BlockHeap;
  private readonly region: Ptr;
  private readonly regionBytes: number;
  private readonly start: Ptr;
  private active = true;

  private constructor(bytes: number, options: ArenaOptions) {
    const upstream = options.upstream;
    const dev = options.device ?? Device.get(upstream !== undefined && upstream.device >= 0 ? upstream.device : 0);
    this.upstream = upstream ?? new CudaResource(dev);
    this.kind = this.upstream.kind;
    this.device = this.upstream.device;
    this.pitchAlignment = Math.max(GRANULE, dev.info.texturePitchAlignment || 512);
    this.size = alignUp(bytes, GRANULE);
    const slack = this.upstream.alignment >= REGION_ALIGNMENT ? 0 : REGION_ALIGNMENT - Math.min(this.upstream.alignment, GRANULE);
    this.regionBytes = this.size + slack;
    this.region = this.upstream.allocate(this.regionBytes);
    this.start = alignUp(this.region, REGION_ALIGNMENT);
    this.heap = new BlockHeap(dev.backend);
    this.heap.addRegion(this.start, this.size, -1);
  }

  /** Reserves an arena of `bytes` (rounded up to 256) once; all later allocations come from it. */
  static activate(bytes: number, options: ArenaOptions = {}): ArenaResource {
    checkBytes(bytes);
    if (options === null || typeof options !== 'object') throw new TypeError('options must be an object');
    return new ArenaResource(bytes, options);
  }

  /** Arena bytes one 1D block of `bytes` takes: `bytes` rounded up to 256. */
  static ceil1DVolume(bytes: number): number {
    return alignUp(checkBytes(bytes), GRANULE);
  }

  /**
   * Arena bytes one pitched block takes in the worst case: the pitch (width rounded to
   * `pitchAlignment`) times the rows, plus the padding that aligns its start. Sum these over the
   * blocks you need to size an arena.
   */
  static ceil2DVolume(widthBytes: number, height: number, pitchAlignment = 512): number {
    checkBytes(widthBytes, 'widthBytes');
    checkBytes(height, 'height');
    checkPowerOfTwo(pitchAlignment, 'pitchAlignment');
    const pitch = alignUp(widthBytes, pitchAlignment);
    return alignUp(pitch * height, GRANULE) + Math.max(0, pitchAlignment - GRANULE);
  }

  /** A 1D block of `bytes`, best fit; OutOfMemoryError when no free range is large enough. */
  allocate(bytes: number, stream?: StreamRef): Ptr {
    checkBytes(bytes);
    return this.take(bytes, alignUp(bytes, GRANULE), GRANULE, stream);
  }

  /** Returns a 1D block; `bytes` must be what it was allocated with. */
  deallocate(ptr: Ptr, bytes: number, stream?: StreamRef): void {
    checkBytes(bytes);
    const i = this.liveBlock(ptr);
    const requested = this.heap.store.requested[i]!;
    if (requested !== bytes) {
      throw new InvalidPointerError(`deallocate(0x${ptr.toString(16)}, ${bytes}): the block was allocated with ${requested} bytes`);
    }
    this.heap.unmarkLive(i);
    this.heap.give(i, stream === undefined ? 0 : stream.handle);
  }

  /** A pitched 2D block of `height` rows of `widthBytes`; the pitch is rounded to `pitchAlignment`. */
  allocatePitched(widthBytes: number, height: number, stream?: StreamRef): PitchedBlock {
    checkBytes(widthBytes, 'widthBytes');
    checkBytes(height, 'height');
    const pitch = alignUp(widthBytes, this.pitchAlignment);
    const bytes = pitch * height;
    checkBytes(bytes, 'pitch * height');
    const ptr = this.take(bytes, alignUp(bytes, GRANULE), this.pitchAlignment, stream);
    return { ptr, pitch };
  }

  /** Returns a pitched block (its size is remembered). */
  deallocatePitched(ptr: Ptr, stream?: StreamRef): void {
    const i = this.liveBlock(ptr);
    this.heap.unmarkLive(i);
    this.heap.give(i, stream === undefined ? 0 : stream.handle);
  }

  /** Only the same arena may free its blocks. */
  isEqual(other: MemoryResource): boolean {
    return other === this;
  }

  /** The region is the point of an arena: nothing is released before `shutdown()`. */
  releaseCached(): number {
    return 0;
  }

  /** Frees the region (live blocks included); later use throws UseAfterFreeError. */
  shutdown(): void {
    if (!this.active) return;
    this.active = false;
    this.heap.destroy();
    this.upstream.deallocate(this.region, this.regionBytes);
  }

  /** `using arena = ArenaResource.activate(...)` shuts it down at the end of the scope. */
  [Symbol.dispose](): void {
    this.shutdown();
  }

  /** The bytes taken from upstream, while active. */
  get reservedBytes(): number {
    return this.active ? this.regionBytes : 0;
  }

  /** An arena's reservation never changes while active. */
  get peakReservedBytes(): number {
    return this.regionBytes;
  }

  /** Nothing to reset: the reservation is fixed. */
  resetPeakReserved(): void {}

  /** Bytes in live blocks (as requested). */
  get liveBytes(): number {
    return this.heap.liveBytes;
  }

  /** Bytes not in any live block. */
  get freeBytes(): number {
    return this.heap.freeBytes;
  }

  /** `ArenaResource(size=..., upstream=...)`. */
  describe(): string {
    return `ArenaResource(size=${this.size}, upstream=${this.upstream.describe()})`;
  }

  private take(bytes: number, size: number, alignment: number, stream?: StreamRef): Ptr {
    this.checkActive();
    const h = stream === undefined ? 0 : stream.handle;
    const i = this.heap.take(size, h, alignment);
    if (i === NIL) {
      const free = this.heap.freeBytes;
      throw new OutOfMemoryError(bytes, 'ArenaResource.allocate', this.describe(), {
        currentBytes: this.heap.liveBytes, peakBytes: this.heap.peakLiveBytes,
        currentCount: this.heap.live.size, reservedBytes: this.regionBytes,
      }, `arena exhausted: cannot allocate ${bytes} bytes from an arena of ${this.size} bytes with ` +
        `${free} bytes free (no free range is large enough); size it with ArenaResource.ceil1DVolume/ceil2DVolume`);
    }
    this.heap.markLive(i, bytes);
    return this.heap.store.start[i]!;
  }

  private liveBlock(ptr: Ptr): number {
    this.checkActive();
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

  private checkActive(): void {
    if (!this.active) throw new UseAfterFreeError(`${this.describe()} was shut down`);
  }
}

function fail(error: Error): never {
  throw error;
}
