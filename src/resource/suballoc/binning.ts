/**
 * BinningResource: routes each request to the smallest bin that fits (RMM's
 * binning_memory_resource). Small requests go to fixed-size bins (a stack pop each, no
 * fragmentation within a bin); requests larger than every bin go to the upstream.
 *
 * A free goes to the resource that handed the block out, found by its address, never by the size
 * the caller passes: with size routing, `deallocate(ptr, wrongSize)` would hand a bin's block to
 * another bin or to the upstream (freeing a whole chunk the bin still uses). That resource then
 * checks the size itself.
 */
import type { Ptr } from '../../backend/backend.js';
import { InvalidPointerError } from '../../errors.js';
import { checkNonNegativeInteger, readBytes, type ByteSize } from '../../validate.js';
import { formatBytesExact } from '../../util/size.js';
import { FixedSizeResource } from './fixed-size.js';
import { LiveTable } from './kit/live-table.js';
import { checkMemoryOf, checkResource, MemoryResource } from '../resource.js';
import { type MemoryKind } from '../figures.js';
import { type StreamRef } from '../../stream.js';
import type { MemoryFigures, SnapshotSegment } from '../figures.js';
import { CounterCell } from '../../counter.js';
import { readOptions } from '../../util/options.js';

/** Options for a BinningResource. */
export interface BinningOptions {
  /** With maxSizeExponent: a FixedSizeResource bin for each power of two 2^min .. 2^max. */
  readonly minSizeExponent?: number;
  /** See minSizeExponent. */
  readonly maxSizeExponent?: number;
}

/** One bin: requests up to `size` bytes go to `route`. */
interface Bin {
  readonly size: number;
  /** Index of the bin's resource in `routes`. */
  readonly route: number;
}

/** Route 0 is the upstream; bins' resources follow. */
const UPSTREAM = 0;

/**
 * Size-routed allocation over bins and an upstream, ownership-routed deallocation.
 *
 * @example
 * ```ts
 * using bins = new BinningResource(new PoolResource(), { minSizeExponent: 8, maxSizeExponent: 16 });
 * const p = bins.allocate(300);   // from the 512-byte bin
 * bins.deallocate(p, 300);
 * ```
 */
export class BinningResource extends MemoryResource {
  /** The upstream's kind. */
  readonly kind: MemoryKind;
  /** The weakest alignment among the upstream and the bins. */
  alignment: number;
  /** The upstream's device. */
  readonly deviceOrdinal: number;
  /** Where requests larger than every bin go. */
  override readonly upstream: MemoryResource;
  private readonly bins: Bin[] = [];
  /**
   * Every resource a live block may have come from, append-only: a replaced bin stays here so its
   * blocks still go back to it. Route 0 is the upstream.
   */
  private readonly routes: MemoryResource[];
  /** The resources created here (destroyed with this one). */
  private readonly owned = new Set<MemoryResource>();
  /** Live block address -> route. */
  private readonly live = new LiveTable(256);
  /** What this resource handed out (bytes as asked for, blocks), through a bin or the upstream. */
  private readonly allocatedBytes = new CounterCell();
  private readonly allocations = new CounterCell();
  /** Bytes of live requests passed to the upstream whole (reserved, over an upstream that keeps no figures). */
  private readonly passedBytes = new CounterCell();

  /**
   * Bins over `upstream`; with both exponents, power-of-two fixed-size bins between them.
   * @param upstream Where bins take chunks and large requests go.
   * @param options The exponents of the default bins.
   * @throws {TypeError | RangeError} For a bad upstream or exponents.
   * @example
   * ```ts
   * const binned = new BinningResource(new PoolResource(), { minSizeExponent: 8, maxSizeExponent: 16 }); // bins of 256 B .. 64 KiB
   * ```
   */
  constructor(upstream: MemoryResource, options: BinningOptions = {}) {
    super();
    this.upstream = checkResource(upstream);
    options = readOptions('new BinningResource', options, { minSizeExponent: true, maxSizeExponent: true });
    this.kind = upstream.kind;
    this.deviceOrdinal = upstream.deviceOrdinal;
    this.alignment = upstream.alignment;
    this.routes = [upstream];
    const { minSizeExponent: lo, maxSizeExponent: hi } = options;
    if ((lo === undefined) !== (hi === undefined)) {
      throw new TypeError('give both minSizeExponent and maxSizeExponent, or neither');
    }
    if (lo !== undefined && hi !== undefined) {
      checkNonNegativeInteger(lo, 'minSizeExponent');
      checkNonNegativeInteger(hi, 'maxSizeExponent');
      if (lo > hi || hi > 40) throw new RangeError(`need minSizeExponent <= maxSizeExponent <= 40, got ${lo} and ${hi}`);
      for (let e = lo; e <= hi; e++) this.addBin(2 ** e);
    }
  }

  /**
   * Adds a bin for requests up to `allocationSize` bytes, served by `binResource` (default a
   * FixedSizeResource of that block size over the upstream). Replaces a bin of the same size for
   * new requests; blocks the old bin handed out still go back to it.
   * @param allocationSize The largest request the bin serves: bytes, or a size like `'64K'`.
   * @param binResource The bin's resource (kept by the caller), or none for a FixedSizeResource.
   * @returns This resource, for chaining.
   * @throws {TypeError | RangeError} For a bad size, or a bin resource whose memory is of another
   *   kind or device than the upstream's.
   * @throws {UseAfterFreeError} When this resource or the bin resource was destroyed.
   * @example
   * ```ts
   * const binned = new BinningResource(pool).addBin(4096).addBin(1 << 20, new ArenaResource({ size: 64 << 20, upstream: pool }));
   * ```
   */
  addBin(allocationSize: ByteSize, binResource?: MemoryResource): this {
    if (this.destroyed) throw this.destroyedError();
    const bytes = readBytes(allocationSize, 'allocationSize');
    const resource =
      binResource === undefined
        ? new FixedSizeResource(this.upstream, { blockSize: bytes })
        : checkMemoryOf(checkResource(binResource, 'binResource'), this.kind, this.deviceOrdinal, this.describe(), 'binResource');
    if (binResource === undefined) this.owned.add(resource);
    const k = this.bins.findIndex((b) => b.size === bytes);
    if (k >= 0) this.bins.splice(k, 1);
    this.routes.push(resource);
    this.bins.push({ size: bytes, route: this.routes.length - 1 });
    this.bins.sort((a, b) => a.size - b.size);
    this.alignment = Math.min(this.alignment, resource.alignment);
    return this;
  }

  /** The bin sizes, ascending. */
  get binSizes(): number[] {
    return this.bins.map((b) => b.size);
  }

  /** Releases what every bin caches (the upstream is released by whoever walks the chain). */
  protected override doReleaseCached(): number {
    let n = 0;
    for (let r = 1; r < this.routes.length; r++) n += this.routes[r]!.releaseCached();
    return n;
  }

  /** Destroys the bins this resource created (their chunks go back upstream). */
  protected override doDestroy(): void {
    for (const r of this.owned) r.destroy();
    this.owned.clear();
  }

  /**
   * Its bins' segments (a FixedSizeResource's chunks, cut into blocks), then one `allocation`
   * segment per live request it passed upstream whole, as the nearest resource below that lays out
   * memory reports it (none when no resource below does). So a snapshot shows every block of the
   * program here, and the upstream's blocks (the bins' chunks, the passed requests) as memory laid
   * out above it.
   */
  protected override doMemorySegments(): SnapshotSegment[] {
    const segments: SnapshotSegment[] = [];
    for (const bin of new Set(this.routes.slice(1))) segments.push(...(bin.memorySegments() ?? []));
    for (let r: MemoryResource | undefined = this.upstream; r !== undefined; r = r.upstream) {
      const below = r.memorySegments();
      if (below === undefined) continue;
      for (const segment of below) {
        for (const block of segment.blocks) {
          if (block.state !== 'live' || this.live.get(block.address) !== UPSTREAM) continue;
          segments.push({ address: block.address, bytes: block.bytes, kind: 'allocation', pages: null, blocks: [block] });
        }
      }
      break;
    }
    return segments;
  }

  /**
   * What it handed out (through its bins and to the upstream whole), with the upstream's reserved
   * bytes and what the upstream reports beyond them (a limit, page moves): the bins' chunks come
   * from the upstream, so the upstream's reserved bytes are the stack's. A bin given to `addBin`
   * over another resource adds that bin's reserved bytes. Over an upstream that keeps no figures,
   * reserved is what the bins hold plus the requests passed upstream.
   *
   * @returns The figures; never `undefined`.
   * @example
   * ```ts
   * new BinningResource(new PoolResource()).memoryFigures().reservedBytes; // the pool's
   * ```
   */
  override memoryFigures(): MemoryFigures {
    const below = this.upstream.memoryFigures();
    const own = { allocatedBytes: this.allocatedBytes.snapshot(), allocations: this.allocations.snapshot() };
    // Over an upstream that keeps no figures, the peaks of parts that peaked at different times: a bound, not a measured peak.
    const reserved = { reservedBytes: this.reservedBytes, peakReservedBytes: this.peakReservedBytes };
    return below === undefined ? { ...own, ...reserved } : { ...below, ...own, ...reserved };
  }

  /** `memoryFigures().reservedBytes` without building the figures. */
  override get reservedBytes(): number {
    return this.reservedOf(false);
  }

  /** `memoryFigures().peakReservedBytes` without building the figures. */
  override get peakReservedBytes(): number {
    return this.reservedOf(true);
  }

  /**
   * Reserved bytes (or their peak): the upstream's where it keeps figures, with the bins' that do
   * not take from it; over an upstream that keeps none, the bins' and the requests passed upstream.
   */
  private reservedOf(peak: boolean): number {
    const below = peak ? this.upstream.peakReservedBytes : this.upstream.reservedBytes;
    let n = below ?? (peak ? this.passedBytes.peak : this.passedBytes.value);
    for (let r = 1; r < this.routes.length; r++) {
      const bin = this.routes[r]!;
      if (below !== undefined && this.binTakesFromUpstream(bin)) continue;
      n += (peak ? bin.peakReservedBytes : bin.reservedBytes) ?? 0;
    }
    return n;
  }

  /** Restarts its own high-water marks, its bins' and the upstream's. */
  override resetPeakFigures(): void {
    this.allocatedBytes.resetPeak();
    this.allocations.resetPeak();
    this.passedBytes.resetPeak();
    for (const r of new Set(this.routes)) r.resetPeakFigures();
  }

  /** `BinningResource(bins=[256, 512], upstream=...)`. */
  describe(): string {
    return `BinningResource(bins=[${this.binSizes.map((b) => formatBytesExact(b, true)).join(', ')}], upstream=${this.upstream.describe()})`;
  }

  protected doAllocate(bytes: number, _handle: number, stream: StreamRef | undefined): Ptr {
    const route = this.route(bytes);
    const ptr = this.routes[route]!.allocate(bytes, stream);
    this.live.set(ptr, route);
    this.allocatedBytes.add(bytes);
    this.allocations.add(1);
    if (route === UPSTREAM) this.passedBytes.add(bytes);
    return ptr;
  }

  protected doDeallocate(ptr: Ptr, bytes: number, _handle: number, stream: StreamRef | undefined): void {
    const route = this.live.get(ptr);
    if (route < 0) {
      throw new InvalidPointerError(`deallocate(0x${ptr.toString(16)}): not a live block of ${this.describe()} (foreign, or freed before)`);
    }
    // The owner checks the size (and leaves everything as it was if it is wrong).
    this.routes[route]!.deallocate(ptr, bytes, stream);
    this.live.delete(ptr);
    this.allocatedBytes.sub(bytes);
    this.allocations.sub(1);
    if (route === UPSTREAM) this.passedBytes.sub(bytes);
  }

  /** Whether `bin`'s memory comes from this resource's upstream (so the upstream's reserved counts it). */
  private binTakesFromUpstream(bin: MemoryResource): boolean {
    for (let r: MemoryResource | undefined = bin.upstream; r !== undefined; r = r.upstream) if (r === this.upstream) return true;
    return false;
  }

  private route(bytes: number): number {
    const bins = this.bins;
    for (let k = 0; k < bins.length; k++) if (bytes <= bins[k]!.size) return bins[k]!.route;
    return UPSTREAM;
  }
}
