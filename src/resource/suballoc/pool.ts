/**
 * PoolResource: the general-purpose sub-allocator. Allocation and deallocation on a hit are plain
 * number arithmetic in TypeScript (segregated best-fit free lists over typed arrays, one Map of live
 * blocks): no FFI call, no object allocated, so a pair costs a fraction of a microsecond.
 *
 * Growth, by default, is through the virtual memory management API: one large virtual range is
 * reserved up front, addresses are sub-allocated in it, and physical pages are mapped only where
 * live blocks need them, so address fragmentation costs no physical memory (see
 * `kit/virtual-growth.ts`; `extentSize: 'adaptive'` maps chunks ahead while memory is plentiful:
 * `kit/adaptive-growth.ts`). With an `upstream` resource, the pool grows RMM style, in chunks.
 */
import { MemAccess, MemHandleType, type Backend, type Ptr } from '../../backend/backend.js';
import { nonZero } from '../../backstop.js';
import { Device } from '../../device.js';
import { DoubleFreeError, InvalidPointerError, NotSupportedError, OutOfMemoryError, type OutOfMemoryReason, outOfMemoryMessage } from '../../errors.js';
import { readBytes, type ByteSize } from '../../validate.js';
import { formatBytesExact } from '../../util/size.js';
import { accessFlags, poolAccess, type PoolAccess } from '../pool-access.js';
import { BlockHeap, PARKED } from './kit/block-heap.js';
import { NIL } from './kit/block-store.js';
import { GRANULE } from './kit/free-list.js';
import { UpstreamChunks } from './kit/upstream-growth.js';
import { CALL_CREATE, CALL_MAP, CALL_RELEASE, CALL_SET_ACCESS, CALL_UNMAP, PhysicalExhausted, VirtualPages } from './kit/virtual-growth.js';
import { checkMemoryOf, checkResource, MemoryResource } from '../resource.js';
import { type DriverCalls, type GrowthFigures, type MemoryFigures, type MemoryKind } from '../figures.js';
import { outOfMemoryStatistics, type SnapshotSegment } from '../figures.js';
import { largerThanDevice } from '../larger-than-device.js';
import { readOptions } from '../../util/options.js';
import { checkFabricSupport } from '../fabric-support.js';

/**
 * Options for a PoolResource.
 *
 * Sizes are rounded to the pool's own unit of growth, never refused for not being a multiple of
 * it: a page (the device's allocation granularity, 2 MiB on current GPUs) for virtual growth, 256
 * bytes (the granule every block is a multiple of) for growth from an upstream. `initialSize`
 * rounds up (the pool holds at least what was asked, so an allocation of `initialSize` is served
 * from it), `maximumSize` and `extentSize` round down (a cap is never exceeded). What the pool
 * could never serve is refused with a `RangeError` before any memory is taken: a `maximumSize`
 * below one unit, an `initialSize` above `maximumSize` once both are rounded, an `extentSize`
 * below one page. `maximumSize` (the `maximumSize` getter) and `describe()` give the rounded sizes.
 * The options of the other kind of growth (`chunkSize` without an upstream; `extentSize` or
 * `addressSpaceSize` with one) are refused with a `TypeError`, not ignored.
 */
export interface PoolOptions {
  /** The device (default: device 0, or the upstream's device). */
  readonly device?: Device;
  /** Grow in chunks from this resource instead of through virtual memory. */
  readonly upstream?: MemoryResource;
  /** Bytes to take (upstream) or map (virtual) at creation, rounded up to the pool's unit; default 0. */
  readonly initialSize?: ByteSize;
  /**
   * Cap on reserved bytes (physical bytes for virtual growth), rounded down to the pool's unit;
   * OutOfMemoryError (reason `maximum`) beyond it.
   */
  readonly maximumSize?: ByteSize;
  /** Upstream growth only: the smallest chunk taken after the first (default 32 MiB). */
  readonly chunkSize?: ByteSize;
  /** Virtual growth only: bytes of address space to reserve (default twice the device's memory). */
  readonly addressSpaceSize?: ByteSize;
  /**
   * Virtual growth only: the most bytes one physical allocation may hold, rounded down to whole
   * pages, at least one (default: one page, the device's allocation granularity, 2 MiB on current
   * GPUs; Infinity: one per run of pages mapped). One page keeps peak reserved closest to peak
   * live (the driver frees an allocation only whole); larger extents grow with fewer driver calls
   * and hold more memory. `'adaptive'`: chunks mapped ahead while memory is plentiful, one page
   * per extent below that, free extents released and the growth retried when the driver refuses.
   * (Note [Extent size], docs/design/extent-size.md)
   */
  readonly extentSize?: ByteSize | 'adaptive';
  /**
   * Virtual growth only: how the pool's physical memory can be shared with other processes
   * (`exportIpc` of its blocks). 'posix-fd' (the default): POSIX descriptors, where the driver
   * allows them (otherwise plain memory); 'fabric': fabric handles (CU_MEM_HANDLE_TYPE_FABRIC),
   * which processes on other hosts of the NVLink domain import too; needs an IMEX channel,
   * checked at creation (`FabricUnavailableError`).
   */
  readonly handleTypes?: PoolHandleTypes;
}

/** How a virtual-memory pool's physical allocations can be shared (`PoolOptions.handleTypes`). */
export type PoolHandleTypes = 'posix-fd' | 'fabric';

/**
 * `extentSize` in bytes, rounded down to whole pages; a bad value's error names every form the
 * option takes, `'adaptive'` too, and one below a page (no physical allocation is smaller) is refused.
 */
function readExtentSize(size: ByteSize, page: number): number {
  let bytes: number;
  try {
    bytes = readBytes(size, 'extentSize');
  } catch (error) {
    throw new RangeError(
      `extentSize must be a size (a number of bytes or text like '64M'), Infinity or 'adaptive'; got ${typeof size === 'string' ? `'${size}'` : String(size)}`,
      { cause: error },
    );
  }
  if (bytes < page) {
    throw new RangeError(
      `extentSize (${bytes}) is below one page of the device's allocation granularity (${page} bytes): ` +
        'no physical allocation is smaller (omit it for one page per extent)',
    );
  }
  return Math.floor(bytes / page) * page;
}

/** The options of the growth a pool does not do: given, they would be ignored. */
function refuseOtherGrowthOptions(options: PoolOptions, overUpstream: boolean): void {
  const ignored = overUpstream
    ? (['extentSize', 'addressSpaceSize', 'handleTypes'] as const).filter((key) => options[key] !== undefined)
    : (['chunkSize'] as const).filter((key) => options[key] !== undefined);
  if (ignored.length === 0) return;
  throw new TypeError(
    overUpstream
      ? `new PoolResource: ${ignored.join(' and ')} ${ignored.length > 1 ? 'are options' : 'is an option'} of virtual growth (no upstream); ` +
          'a pool over an upstream grows in chunks (chunkSize)'
      : 'new PoolResource: chunkSize is an option of growth from an upstream; a pool over virtual memory grows by pages (extentSize)',
  );
}

/**
 * `initialSize` and `maximumSize` in the pool's unit of growth (`PoolOptions` says how): the
 * initial size up to whole units, the maximum down; a maximum below one unit, or an initial size
 * above the maximum once rounded, is refused, since the pool could serve no allocation of it.
 */
function roundSizes(initialAsked: number, maximumAsked: number, unit: number, what: string): { initial: number; maximum: number } {
  const initial = Math.ceil(initialAsked / unit) * unit;
  const maximum = maximumAsked === Infinity ? Infinity : Math.floor(maximumAsked / unit) * unit;
  if (maximum === 0) {
    throw new RangeError(`maximumSize (${maximumAsked}) is below one ${what} (${unit} bytes): the pool could never allocate`);
  }
  if (initial > maximum) {
    throw new RangeError(
      `initialSize (${initialAsked}) rounds up to ${initial} bytes, whole ${what}s, which exceeds ` +
        `maximumSize (${maximumAsked}) rounded down to ${maximum}`,
    );
  }
  return { initial, maximum };
}

const DEFAULT_CHUNK = 32 * 1024 * 1024;

function growthCalls(pages: VirtualPages | null): DriverCalls {
  const c = pages?.calls;
  if (c === undefined) return { create: 0, map: 0, unmap: 0, setAccess: 0, release: 0 };
  return { create: c[CALL_CREATE]!, map: c[CALL_MAP]!, unmap: c[CALL_UNMAP]!, setAccess: c[CALL_SET_ACCESS]!, release: c[CALL_RELEASE]! };
}

/**
 * A stream-ordered pool allocator over virtual memory pages or an upstream resource. A failed
 * growth (at creation or in `allocate`) gives back what it took before it throws. With virtual
 * growth its memory belongs to the device, not to the context current when it was made: every
 * context of the device uses it, and destroying an explicit `Context` leaves it and its blocks
 * alone (the pool ends with `destroy()`).
 *
 * @example
 * ```ts
 * using pool = new PoolResource({ initialSize: 1 << 30 });
 * const p = pool.allocate(1 << 20, stream);
 * pool.deallocate(p, 1 << 20, stream);
 * ```
 */
export class PoolResource extends MemoryResource {
  /** Device memory, or the upstream's kind. */
  readonly kind: MemoryKind;
  /** Every block is a multiple of 256 bytes, aligned to 256. */
  readonly alignment = GRANULE;
  /** The device ordinal. */
  readonly deviceOrdinal: number;
  /** How its physical memory can be shared ('posix-fd' also for a pool over an upstream, whose memory is the upstream's). */
  readonly handleTypes: PoolHandleTypes;
  /** The upstream resource, when growing from one. */
  declare readonly upstream?: MemoryResource;
  private readonly heap: BlockHeap;
  private readonly pages: VirtualPages | null;
  private readonly chunks: UpstreamChunks | null;
  private readonly backend: Backend;
  private readonly options: PoolOptions;
  /** `options.maximumSize` read once, in bytes rounded down to the pool's unit (Infinity when unbounded). */
  private readonly maximumBytes: number;
  /** `options.initialSize` read once, in bytes rounded up to the pool's unit (0 for none). */
  private readonly initialBytes: number;
  /** The device the pool's memory lives on. */
  private readonly owner: Device;
  /** The device's total memory for device memory, else Infinity: no request above it can be met. */
  private readonly deviceBytes: number;

  /**
   * A pool on `device` (virtual growth) or over `upstream` (chunked growth).
   * @param options Device or upstream, initial and maximum size, growth parameters.
   * @throws {TypeError | RangeError} For bad options, or an upstream on another device than `device`.
   * @throws {NotSupportedError} For virtual growth on a device without virtual memory management.
   * @throws {OutOfMemoryError} When the initial size cannot be had (nothing is kept).
   * @example
   * ```ts
   * using pool = new PoolResource({ initialSize: 1 << 30, maximumSize: 8 << 30 }); // 1 GiB now, at most 8 GiB
   * ```
   */
  constructor(options: PoolOptions = {}) {
    super();
    options = readOptions('new PoolResource', options, {
      device: true,
      upstream: true,
      initialSize: true,
      maximumSize: true,
      chunkSize: true,
      addressSpaceSize: true,
      extentSize: true,
      handleTypes: true,
    });
    this.options = options;
    const handleTypes = options.handleTypes ?? 'posix-fd';
    if (handleTypes !== 'posix-fd' && handleTypes !== 'fabric') {
      throw new RangeError(`handleTypes must be 'posix-fd' or 'fabric', got ${JSON.stringify(handleTypes)}`);
    }
    this.handleTypes = handleTypes;
    const maximumAsked = options.maximumSize === undefined ? Infinity : readBytes(options.maximumSize, 'maximumSize');
    const initialAsked = options.initialSize === undefined || options.initialSize === 0 ? 0 : readBytes(options.initialSize, 'initialSize');
    if (initialAsked > maximumAsked) throw new RangeError(`initialSize (${initialAsked}) exceeds maximumSize (${maximumAsked})`);
    const upstream = options.upstream === undefined ? undefined : checkResource(options.upstream);
    refuseOtherGrowthOptions(options, upstream !== undefined);
    const dev = options.device ?? Device.get(upstream !== undefined && upstream.deviceOrdinal >= 0 ? upstream.deviceOrdinal : 0);
    // Device memory of another device than the one named would be mapped, accessed and reported as this one's.
    if (upstream !== undefined && upstream.deviceOrdinal >= 0) checkMemoryOf(upstream, upstream.kind, dev.ordinal, 'PoolResource');
    this.backend = dev.backend;
    this.owner = dev;
    this.deviceBytes = upstream === undefined || upstream.kind === 'device' ? dev.info.totalMemory : Infinity;
    if (upstream === undefined && !dev.info.virtualMemoryManagementSupported) {
      throw new NotSupportedError(
        `${dev.info.name} does not support virtual memory management; ` + 'give PoolResource an upstream (e.g. new CudaResource(device))',
      );
    }
    if (handleTypes === 'fabric') checkFabricSupport(dev, 'physical', 'new PoolResource');
    // The pool's own unit of growth: a 256-byte granule of a chunk, or a page of virtual memory.
    const unit = upstream !== undefined ? GRANULE : this.backend.memGetAllocationGranularity(dev.ordinal);
    const { initial, maximum } = roundSizes(initialAsked, maximumAsked, unit, upstream !== undefined ? 'granule of 256 bytes' : 'page');
    this.maximumBytes = maximum;
    this.initialBytes = initial;
    // Over virtual memory, streams gather each other's free blocks before cutting into the range's
    // top (where the pages grow): see block-heap.ts.
    const heap = (this.heap = new BlockHeap(this.backend, upstream === undefined));
    // Over locals, not `this`: the backstop's release holds the heap, and a heap that held the pool
    // would keep the pool from ever being collected.
    let virtual: VirtualPages | null = null;
    heap.onUnpark = (i) => {
      virtual?.release(heap.store.start[i]!, heap.store.size[i]!);
    };
    if (upstream !== undefined) {
      this.upstream = upstream;
      this.kind = upstream.kind;
      this.deviceOrdinal = upstream.deviceOrdinal;
      const chunk = options.chunkSize === undefined ? DEFAULT_CHUNK : readBytes(options.chunkSize, 'chunkSize');
      this.pages = null;
      this.chunks = new UpstreamChunks(upstream, this.heap, chunk, maximum);
      if (initial > 0 && this.chunks.grow(initial, -1, initial) !== null) {
        throw new OutOfMemoryError({
          requestedBytes: initial,
          call: 'new PoolResource',
          reason: 'upstream',
          resource: this.describe(),
          message: outOfMemoryMessage(initial, this.describe(), 'the upstream refused the initial size'),
        });
      }
      const chunks = this.chunks;
      // Nothing taken from upstream, nothing leaked (a virtual pool always holds its address range).
      this.guardMemory(() => nonZero(releasePool(null, chunks, heap)));
      // The initial chunk is cache a refusal elsewhere on the device may need before any allocation here.
      if (initial > 0) this.joinCacheRegistry();
    } else {
      this.kind = 'device';
      this.deviceOrdinal = dev.ordinal;
      dev.makeCurrent();
      const range = options.addressSpaceSize === undefined ? 2 * dev.info.totalMemory : readBytes(options.addressSpaceSize, 'addressSpaceSize');
      const size = options.extentSize;
      const adaptive = size === 'adaptive';
      const extent = adaptive || size === undefined ? 0 : size === Infinity ? size : readExtentSize(size, unit);
      // The device's free memory, for the adaptive policy's one threshold (growth path only).
      const memInfo = adaptive ? () => dev.memInfo() : null;
      // The range is the device's, not a context's: mappings and their access are per device, so
      // every context of the device uses them. Reserved with the primary context current (vram
      // holds it for the process), so that destroying an explicit context that happened to be
      // current does not take the pool's range, and every block in it, along: the device's default
      // resource is made on the first allocation that needs it, in whatever context that runs.
      this.backend.contextSetCurrent(dev.context);
      try {
        const types = handleTypes === 'fabric' ? MemHandleType.FABRIC : undefined;
        this.pages = virtual = new VirtualPages(this.backend, dev.ordinal, Math.max(range, initial), maximum, this.heap, extent, memInfo, types);
      } finally {
        dev.makeCurrent();
      }
      this.chunks = null;
      const pages = virtual;
      this.guardMemory(() => releasePool(pages, null, heap));
      if (initial > 0) {
        // Map the first pages now, so the first allocations hit. If that fails, the failed growth
        // has unmapped its pages; the address range goes too, since no one can destroy this pool.
        try {
          this.deallocate(this.allocate(initial), initial);
        } catch (error) {
          this.destroy();
          throw error;
        }
      }
    }
  }

  /**
   * A hit is pure TypeScript; growth maps pages or takes a chunk from upstream. Arguments are
   * checked by MemoryResource.allocate.
   */
  protected doAllocate(bytes: number, h: number): Ptr {
    const size = bytes % GRANULE === 0 ? bytes : (Math.floor(bytes / GRANULE) + 1) * GRANULE;
    const heap = this.heap;
    const parked = heap.takeParked(size, bytes, h);
    // The block this stream freed last, of exactly this size, live again: its pages are still counted.
    if (parked !== NIL) return heap.store.start[parked]!;
    // Before growth maps the whole device page by page (or asks the upstream) only to fail on the last.
    if (bytes > this.deviceBytes) throw this.outOfMemory(bytes, largerThanDevice(this.owner, bytes)!, 'device');
    const pages = this.pages;
    let i = heap.take(size, h);
    if (heap.parkedCount > 0 && (i === NIL || (pages !== null && !pages.covers(heap.store.start[i]!, size)))) {
      // Growth ahead: first give parked blocks back, so it sees every free byte and cached page
      // (placement on mapped pages and donor pages are chosen from the lists, after this).
      heap.unparkAll();
      if (i === NIL) i = heap.take(size, h);
    }
    if (i === NIL) i = this.growAndTake(size, h, bytes);
    if (pages !== null) {
      try {
        i = pages.commit(i, size, h);
      } catch (error) {
        if (error instanceof PhysicalExhausted) throw this.outOfMemory(bytes, error.message, error.reason, error.cause);
        throw error;
      }
    }
    heap.markLive(i, bytes);
    return heap.store.start[i]!;
  }

  /**
   * Returns a block, reusable at once on stream `h` and, after an event wait, on other streams.
   * Throws InvalidPointerError (not from this pool, or wrong size) or DoubleFreeError, leaving
   * the pool unchanged.
   */
  protected doDeallocate(ptr: Ptr, bytes: number, h: number): void {
    const heap = this.heap;
    const i = heap.live.get(ptr);
    if (i === NIL) throw this.badPointer(ptr);
    const s = heap.store;
    if (s.requested[i] !== bytes) {
      if (s.requested[i] === PARKED) throw new DoubleFreeError(`deallocate(${hex(ptr)}): the block is already free (freed twice?)`);
      throw new InvalidPointerError(`deallocate(${hex(ptr)}, ${bytes}): the block was allocated with ${s.requested[i]} bytes`);
    }
    // Parked: the stream's next allocation of this size takes it back as it is (pages still counted).
    if (heap.park(i, h)) return;
    heap.unmarkLive(i);
    if (this.pages !== null) this.pages.release(ptr, s.size[i]!);
    heap.give(i, h);
  }

  /**
   * The physical allocations under a live block, each whole, in address order, and where the
   * block starts in the first: what `exportIpc` shares so that another process maps them back to
   * back (cuMemExportToShareableHandle of each) and finds the block at the same offset.
   *
   * @param ptr The block's address.
   * @param bytes Its size.
   * @returns The extents' physical handles and sizes, and the block's offset in the first.
   * @throws {NotSupportedError} When the pool grows from an upstream resource (its memory is the upstream's).
   * @throws {InvalidPointerError} When `ptr` is not a live block of this pool.
   * @example
   * ```ts
   * const { extents, offset } = pool.physicalExtents(buf.ptr, buf.byteLength);
   * ```
   * @internal exportIpc's; share a block with `exportIpc(buffer)`.
   */
  physicalExtents(ptr: Ptr, bytes: number): { readonly extents: readonly { readonly handle: number; readonly bytes: number }[]; readonly offset: number } {
    if (this.pages === null) {
      throw new NotSupportedError(
        `${this.describe()} grows from ${this.upstream!.describe()}: its blocks are that resource's memory, ` +
          'which cannot be exported a block at a time; use a PoolResource over virtual memory (no upstream), or an AsyncResource',
      );
    }
    if (this.heap.live.get(ptr) === NIL) throw this.badPointer(ptr);
    return this.pages.extentsUnder(ptr, bytes);
  }

  /**
   * Lets `peer` access (or stops it accessing) this pool's memory: every page mapped now and every
   * page mapped later (cuMemSetAccess for the peer beside the pool's own device), so blocks from
   * the pool can be read and written by kernels and copies running on `peer`. Copies between
   * devices (`copyFrom`, `DeviceArray.to`) need no call: they grant what they need themselves.
   *
   * @param peer Another device that can access this one (`peer.canAccessPeer(device)`).
   * @param access 'none', 'read' or 'readwrite'.
   * @throws {TypeError | RangeError} For a bad device or access, or the pool's own device.
   * @throws {NotSupportedError} When the devices cannot access each other, or the pool grows from an
   *   upstream (its memory's access is the upstream's: enable peer access between the contexts).
   * @example
   * ```ts
   * const pool = new PoolResource({ device: Device.get(0) });
   * pool.setAccess(Device.get(1), 'readwrite');
   * ```
   */
  setAccess(peer: Device, access: PoolAccess): void {
    if (!(peer instanceof Device)) throw new TypeError('peer must be a Device');
    const flags = accessFlags(access);
    if (this.destroyed) throw this.destroyedError();
    const own = this.owner;
    if (peer === own) throw new RangeError("a pool's own device always has read-write access");
    const pages = this.pages;
    if (pages === null) {
      throw new NotSupportedError(
        `${this.describe()} grows from ${this.upstream!.describe()}, whose memory's peer access ` +
          'is set on the contexts: call device.enablePeerAccess(peer) on both devices instead',
      );
    }
    if (access !== 'none' && !peer.canAccessPeer(own)) {
      throw new NotSupportedError(`device ${peer.ordinal} cannot access device ${own.ordinal}'s memory (no peer access between them)`);
    }
    own.makeCurrent();
    pages.setPeerAccess(peer.ordinal, flags);
  }

  /**
   * How `device` may access this pool's memory.
   *
   * @param device A device.
   * @returns 'readwrite' for the pool's own device; for another, what `setAccess` granted, or a
   *   copy between devices run on it (read for a source, read-write for a destination).
   * @throws {TypeError} For a non-device.
   * @example
   * ```ts
   * pool.getAccess(Device.get(1)); // 'none' until setAccess
   * ```
   */
  getAccess(device: Device): PoolAccess {
    if (!(device instanceof Device)) throw new TypeError('device must be a Device');
    if (device === this.owner) return 'readwrite';
    return poolAccess(this.pages === null ? MemAccess.NONE : this.pages.peers.of(device.ordinal));
  }

  /**
   * Lets `device` reach the block at `ptr` for a copy between devices that runs in its context:
   * read access for a source, read-write for a destination, added to what it has, over every page
   * mapped now and later, as `setAccess` grants it (Note [Peer copies of mapped memory] in
   * docs/design/peer-grants.md).
   *
   * @param ptr An address in a live block of this pool.
   * @param device The device whose context runs the copy.
   * @param write Whether the copy writes the block.
   * @returns True when `ptr` is this pool's memory (granted now or before), false when it is not.
   * @throws {CudaError} When the driver refuses the grant.
   * @example
   * ```ts
   * pool.allowPeerCopy(src.ptr, Device.get(1), false); // before a copy on a stream of device 1
   * ```
   * @internal the copy path's (`allowPeerCopy` in resource.ts); programs grant access with `setAccess`.
   */
  override allowPeerCopy(ptr: Ptr, device: Device, write: boolean): boolean {
    const pages = this.pages;
    if (pages === null || !pages.contains(ptr)) return false;
    if (this.released) return true;
    const flags = pages.peers.forCopy(this.owner, device, write);
    if (flags === undefined) return true;
    this.owner.makeCurrent();
    pages.setPeerAccess(device.ordinal, flags);
    return true;
  }

  /**
   * Gives unused memory back: cached physical pages (virtual growth; waits, on the host, only for
   * the streams that freed blocks on those pages) or wholly free chunks (upstream growth, each on
   * the stream that freed it). Returns the bytes released.
   */
  protected override doReleaseCached(): number {
    this.heap.unparkAll();
    if (this.pages !== null) return this.pages.releaseCached();
    return this.chunks!.releaseCached();
  }

  /**
   * Virtual growth: the reserved range, its mapped pages and every block cut from it; upstream
   * growth: one chunk per region taken from the upstream.
   */
  protected override doMemorySegments(): SnapshotSegment[] {
    const regions = this.heap.layout();
    const pages = this.pages;
    if (pages === null) {
      return regions.map((blocks) => ({
        address: blocks[0]!.address,
        bytes: blocks.reduce((sum, b) => sum + b.bytes, 0),
        kind: 'chunk',
        pages: null,
        blocks,
      }));
    }
    // Runs of mapped pages, probed page by page (tens of thousands of pages: a snapshot, not a hot path).
    const mapped: Array<[number, number]> = [];
    const count = pages.rangeBytes / pages.pageBytes;
    for (let p = 0; p < count; p++) {
      if (!pages.covers(pages.base + p * pages.pageBytes, pages.pageBytes)) continue;
      const last = mapped[mapped.length - 1];
      if (last !== undefined && last[0] + last[1] === p) last[1] += 1;
      else mapped.push([p, 1]);
    }
    return [
      {
        address: pages.base,
        bytes: pages.rangeBytes,
        kind: 'virtual-range',
        pages: { pageBytes: pages.pageBytes, mapped },
        blocks: regions.flat(),
      },
    ];
  }

  /** Frees everything the pool holds (pages or chunks). */
  protected override doDestroy(): void {
    releasePool(this.pages, this.chunks, this.heap);
  }

  /** Bytes obtained from the driver (physical) or upstream. */
  override get reservedBytes(): number {
    return this.pages !== null ? this.pages.reservedBytes : this.chunks!.reservedBytes;
  }

  /** High-water mark of reservedBytes. */
  override get peakReservedBytes(): number {
    return this.pages !== null ? this.pages.peakReservedBytes : this.chunks!.peakReservedBytes;
  }

  /**
   * What the pool spent on growing since it was made: page moves (and of those, moves back), host
   * waits, driver calls by kind, growth time, pages mapped ahead and compactions (`extentSize:
   * 'adaptive'`), and its stream joins. Figures beside `memoryFigures()` (which has what it holds),
   * read the same way.
   *
   * @returns The figures now.
   * @throws Never: it reads counters the pool keeps (after `destroy()`, the last figures).
   * @example
   * ```ts
   * pool.growthFigures().driverCalls.map; // cuMemMap calls so far
   * ```
   */
  growthFigures(): GrowthFigures {
    const pages = this.pages;
    return {
      pageMoves: pages !== null ? pages.pageMoves : 0,
      pageMovesBack: pages !== null ? pages.pageMovesBack : 0,
      hostWaits: pages !== null ? pages.hostWaits : 0,
      driverCalls: growthCalls(pages),
      growthNs: pages !== null ? pages.growthNs : 0,
      pagesMappedAhead: pages !== null ? pages.pagesAhead : 0,
      compactions: pages !== null ? pages.compactions : 0,
      streamJoins: { records: this.heap.order.records, waits: this.heap.steals },
    };
  }

  /** Live blocks and reserved bytes; page moves and driver calls with virtual growth only. */
  override memoryFigures(): MemoryFigures {
    const { bytes, allocations } = this.heap.counters();
    const figures = { allocatedBytes: bytes, allocations, reservedBytes: this.reservedBytes, peakReservedBytes: this.peakReservedBytes };
    if (this.pages === null) return figures;
    return { ...figures, pageMoves: this.pages.pageMoves, driverCalls: growthCalls(this.pages) };
  }

  /** Restarts the reserved and live high-water marks. */
  override resetPeakFigures(): void {
    if (this.pages !== null) this.pages.resetPeak();
    else this.chunks!.peakReservedBytes = this.chunks!.reservedBytes;
    this.heap.resetPeaks();
  }

  /**
   * The most the pool will ever hold (`maximumSize`), Infinity when unbounded: an allocation larger
   * than this can never be met, so a waiting allocation fails at once.
   *
   * @returns The bytes, or Infinity.
   * @throws Never.
   * @example
   * ```ts
   * new PoolResource({ maximumSize: 1 << 30 }).maximumSize; // 1073741824
   * ```
   */
  get maximumSize(): number {
    return this.maximumBytes;
  }

  /** E.g. `PoolResource(virtual, maximum=8 GiB)` or `PoolResource(upstream=CudaResource(device=0))`. */
  describe(): string {
    const parts = [this.upstream !== undefined ? `upstream=${this.upstream.describe()}` : `virtual, device=${this.deviceOrdinal}`];
    if (this.initialBytes > 0) parts.push(`initial=${formatBytesExact(this.initialBytes, true)}`);
    if (this.maximumBytes !== Infinity) parts.push(`maximum=${formatBytesExact(this.maximumBytes, true)}`);
    if (this.options.extentSize === 'adaptive') parts.push('extents=adaptive');
    if (this.handleTypes === 'fabric') parts.push('fabric');
    return `PoolResource(${parts.join(', ')})`;
  }

  private growAndTake(size: number, stream: number, bytes: number): number {
    const chunks = this.chunks;
    if (chunks !== null) {
      const refusal = chunks.grow(size, stream);
      if (refusal === null) {
        const i = this.heap.take(size, stream);
        if (i !== NIL) return i;
      }
      throw this.outOfMemory(
        bytes,
        refusal === 'maximum' ? 'the maximum size refused a new chunk' : 'the upstream refused a new chunk',
        refusal ?? 'upstream',
        chunks.lastRefusal,
      );
    }
    throw this.outOfMemory(bytes, 'the virtual address range is exhausted', 'address-space');
  }

  private outOfMemory(bytes: number, why: string, reason: OutOfMemoryReason, cause?: unknown): OutOfMemoryError {
    const heap = this.heap;
    return new OutOfMemoryError({
      requestedBytes: bytes,
      call: 'PoolResource.allocate',
      reason,
      resource: this.describe(),
      statistics: outOfMemoryStatistics(this.memoryFigures()),
      cause,
      message: outOfMemoryMessage(
        bytes,
        this.describe(),
        `${why} ` + `(live ${formatBytesExact(heap.liveBytes)} in ${heap.liveCount} blocks, reserved ${formatBytesExact(this.reservedBytes)})`,
      ),
    });
  }

  /** The error for a pointer that is not a live block: freed before, or never from this pool. */
  private badPointer(ptr: number): Error {
    const inRange = this.pages !== null ? this.pages.contains(ptr) : this.chunks!.contains(ptr);
    if (inRange) {
      const s = this.heap.store;
      for (const i of this.heap.freeBlocks()) {
        if (ptr >= s.start[i]! && ptr < s.start[i]! + s.size[i]!) {
          return new DoubleFreeError(`deallocate(${hex(ptr)}): the block is already free (freed twice?)`);
        }
      }
      return new InvalidPointerError(`deallocate(${hex(ptr)}): not the start of a block from ${this.describe()}`);
    }
    return new InvalidPointerError(`deallocate(${hex(ptr)}): the pointer is not from ${this.describe()}`);
  }
}

/**
 * Gives back everything a pool holds, live blocks included, and returns the bytes: `destroy()`
 * once no block is live, and the backstop of a pool collected before that.
 */
function releasePool(pages: VirtualPages | null, chunks: UpstreamChunks | null, heap: BlockHeap): number {
  const bytes = pages !== null ? pages.reservedBytes : chunks!.reservedBytes;
  if (pages !== null) pages.destroy();
  else chunks!.destroy();
  heap.destroy();
  return bytes;
}

function hex(ptr: number): string {
  return Number.isFinite(ptr) ? `0x${ptr.toString(16)}` : String(ptr);
}
