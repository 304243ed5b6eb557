/**
 * The shared base of resource adaptors: a resource that wraps an `upstream` and forwards what it
 * does not change. Each adaptor (statistics, limiting, tracking, logging, out-of-memory) then holds
 * only the one thing it adds, and they all describe themselves and compare alike.
 */
import type { Ptr } from '../../backend/backend.js';
import { checkResource, MemoryResource } from '../resource.js';
import { type MemoryFigures, type MemoryKind } from '../figures.js';
import { type StreamRef } from '../../stream.js';

/**
 * A resource that wraps another. Subclasses add their one concern around `doAllocate`/
 * `doDeallocate` (by default plain forwarding); kind, alignment, device, cache release and
 * equality are the upstream's, because an adaptor hands out the upstream's memory unchanged.
 * Destroying an adaptor ends the adaptor only: the upstream was given to it, not made by it.
 *
 * @example
 * ```ts
 * class CountingAdaptor extends ResourceAdaptor {
 *   calls = 0;
 *   protected override doAllocate(bytes: number, handle: number, stream?: StreamRef): Ptr {
 *     this.calls++;
 *     return super.doAllocate(bytes, handle, stream);
 *   }
 * }
 * ```
 */
export abstract class ResourceAdaptor extends MemoryResource {
  /** The resource whose memory this adaptor hands out. */
  override readonly upstream: MemoryResource;

  /**
   * On a capturing stream an adaptor passes the allocation on as usual: its upstream's policy decides.
   * @returns `'upstream'`.
   * @example
   * ```ts
   * new StatisticsAdaptor(new PoolResource()).capturePolicy; // 'upstream'
   * ```
   */
  override get capturePolicy(): 'private' | 'driver' | 'upstream' | 'refuse' {
    return 'upstream';
  }

  /**
   * @param upstream The resource to wrap.
   * @throws {TypeError} When `upstream` is not a MemoryResource.
   * @throws {UseAfterFreeError} When it was destroyed.
   * @example
   * ```ts
   * const counting = new CountingAdaptor(new PoolResource()); // a subclass's constructor calls super(upstream)
   * ```
   */
  constructor(upstream: MemoryResource) {
    super();
    this.upstream = checkResource(upstream);
  }

  /** The upstream's kind: an adaptor does not change what memory is handed out. */
  get kind(): MemoryKind {
    return this.upstream.kind;
  }

  /** The upstream's alignment. */
  get alignment(): number {
    return this.upstream.alignment;
  }

  /** The upstream's device ordinal. */
  get deviceOrdinal(): number {
    return this.upstream.deviceOrdinal;
  }

  /** Forwards to the upstream with the caller's stream. */
  protected doAllocate(bytes: number, _handle: number, stream: StreamRef | undefined): Ptr {
    return this.upstream.allocate(bytes, stream);
  }

  /** Forwards to the upstream, which checks ownership and size before anything changes. */
  protected doDeallocate(ptr: Ptr, bytes: number, _handle: number, stream: StreamRef | undefined): void {
    this.upstream.deallocate(ptr, bytes, stream);
  }

  /** Adaptors cache nothing themselves: releasing is the upstream's job. */
  protected override doReleaseCached(): number {
    return this.upstream.releaseCached();
  }

  /** The upstream's figures: an adaptor hands out the upstream's memory unchanged. */
  override memoryFigures(): MemoryFigures | undefined {
    return this.upstream.memoryFigures();
  }

  /** The upstream's reserved bytes: an adaptor holds nothing itself. */
  override get reservedBytes(): number | undefined {
    return this.upstream.reservedBytes;
  }

  /** The upstream's peak reserved bytes. */
  override get peakReservedBytes(): number | undefined {
    return this.upstream.peakReservedBytes;
  }

  /** Restarts the upstream's peaks (an adaptor that counts restarts its own too). */
  override resetPeakFigures(): void {
    this.upstream.resetPeakFigures();
  }

  /**
   * Memory from one adaptor may be returned through another of the same class over an equal
   * upstream (RMM's rule), unless the adaptor keeps a count or a record of its own
   * (`keepsOwnCount`: statistics, limiting, tracking): then it is equal only to itself, as RMM's
   * current rule has it, since a block freed through its twin would move the wrong count.
   */
  override isEqual(other: MemoryResource): boolean {
    if (other === this) return true;
    return !this.keepsOwnCount && other instanceof ResourceAdaptor && other.constructor === this.constructor && this.upstream.isEqual(other.upstream);
  }

  /**
   * True for an adaptor that counts or records what passes through it (and so refuses, with
   * `InvalidPointerError`, a free it never counted); false (the default) for one that only
   * passes calls on (logging, retry on out of memory).
   */
  protected get keepsOwnCount(): boolean {
    return false;
  }

  /** `ClassName(params, Upstream(...))`, e.g. `StatisticsAdaptor(PoolResource(...))`. */
  describe(): string {
    const params = this.describeParameters();
    return `${this.constructor.name}(${params ? `${params}, ` : ''}${this.upstream.describe()})`;
  }

  /** The adaptor's own parameters for `describe()`, e.g. `limit=1 GiB`; empty when none. */
  protected describeParameters(): string {
    return '';
  }
}
