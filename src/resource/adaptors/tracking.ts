/**
 * TrackingAdaptor: remembers every outstanding allocation (size, stream, time and, when asked, the
 * stack that made it), so "where did my GPU memory go" has an answer: a leak report grouped by the
 * code that allocated, and a typed error when a block is returned that was never handed out.
 */
import type { Ptr } from '../../backend/backend.js';
import { ResourceAdaptor } from './adaptor.js';
import { checkCounted, countedFigures } from './counted-blocks.js';
import { CounterCell } from '../../counter.js';
import { formatBytes } from '../../util/size.js';
import { callerFrames, rawStack } from '../../util/call-stack.js';
import type { MemoryResource } from '../resource.js';
import type { MemoryFigures } from '../figures.js';
import type { StreamRef } from '../../stream.js';
import { readOptions } from '../../util/options.js';

/** One allocation that has not been deallocated yet. */
export interface TrackedAllocation {
  readonly ptr: Ptr;
  readonly bytes: number;
  /** The stream handle it was allocated on (0: the default stream). */
  readonly stream: number;
  /** `performance.now()` when it was allocated, in milliseconds. */
  readonly time: number;
  /** The allocating call stack, without vram's own frames; only with `captureStacks`. */
  readonly stack?: string;
}

/** Options of a TrackingAdaptor. */
export interface TrackingOptions {
  /**
   * Record the call stack of every allocation (costs a stack capture per allocate, some
   * microseconds); off by default.
   */
  readonly captureStacks?: boolean;
}

/**
 * Tracks every outstanding allocation through it. Deallocating a pointer it did not hand out, or
 * with a size other than the one allocated, is an `InvalidPointerError` and is not passed upstream,
 * so a bookkeeping mistake is reported where it happens instead of corrupting a pool.
 *
 * @example
 * ```ts
 * const tracked = new TrackingAdaptor(new PoolResource(), { captureStacks: true });
 * setCurrentResource(0, tracked);
 * runTests();
 * if (tracked.outstandingCount > 0) console.error(tracked.leakReport());
 * ```
 */
export class TrackingAdaptor extends ResourceAdaptor {
  /** Whether allocation stacks are captured. */
  readonly captureStacks: boolean;
  private readonly live = new Map<Ptr, TrackedAllocation>();
  private readonly liveBytes = new CounterCell();
  private readonly liveBlocks = new CounterCell();

  /**
   * @param upstream The resource whose allocations are tracked.
   * @param options `captureStacks` to record where each allocation was made.
   * @throws {TypeError} When `upstream` is not a MemoryResource.
   * @throws {UseAfterFreeError} When it was destroyed.
   * @throws {TypeError} When `options` is not an object or has a key other than `captureStacks`.
   * @example
   * ```ts
   * const tracked = new TrackingAdaptor(pool); // sizes, streams and times; no stacks
   * ```
   */
  constructor(upstream: MemoryResource, options: TrackingOptions = {}) {
    super(upstream);
    options = readOptions('new TrackingAdaptor', options, { captureStacks: true });
    this.captureStacks = options.captureStacks === true;
  }

  /** Allocations outstanding through this adaptor. */
  get outstandingCount(): number {
    return this.live.size;
  }

  /**
   * What is outstanding through this adaptor (the bytes its records asked for, and their count),
   * with the upstream's reserved bytes and what else it reports; over an upstream that keeps no
   * figures, reserved is taken as allocated.
   */
  override memoryFigures(): MemoryFigures {
    return countedFigures(this.upstream.memoryFigures(), this.liveBytes.snapshot(), this.liveBlocks.snapshot());
  }

  /** The upstream's reserved bytes; over one that keeps no figures, the bytes outstanding here. */
  override get reservedBytes(): number {
    return this.upstream.reservedBytes ?? this.liveBytes.value;
  }

  /** The upstream's peak reserved bytes; over one that keeps no figures, the peak outstanding here. */
  override get peakReservedBytes(): number {
    return this.upstream.peakReservedBytes ?? this.liveBytes.peak;
  }

  /** Restarts this adaptor's peaks and the upstream's. */
  override resetPeakFigures(): void {
    this.liveBytes.resetPeak();
    this.liveBlocks.resetPeak();
    super.resetPeakFigures();
  }

  /** Allocates through the upstream and records the block. */
  protected override doAllocate(bytes: number, handle: number, stream: StreamRef | undefined): Ptr {
    const ptr = this.upstream.allocate(bytes, stream);
    const record: TrackedAllocation = this.captureStacks
      ? { ptr, bytes, stream: handle, time: performance.now(), stack: callerFrames(rawStack()).join('\n') }
      : { ptr, bytes, stream: handle, time: performance.now() };
    this.live.set(ptr, record);
    this.liveBytes.add(bytes);
    this.liveBlocks.add(1);
    return ptr;
  }

  /** Checks the block against the record, then deallocates it through the upstream. */
  protected override doDeallocate(ptr: Ptr, bytes: number, _handle: number, stream: StreamRef | undefined): void {
    checkCounted(this.live.get(ptr)?.bytes, ptr, bytes, this);
    this.upstream.deallocate(ptr, bytes, stream);
    this.live.delete(ptr);
    this.liveBytes.sub(bytes);
    this.liveBlocks.sub(1);
  }

  /** Forgets the records (the memory stays the upstream's: an adaptor owns none). */
  protected override doDestroy(): void {
    this.live.clear();
    this.liveBytes.sub(this.liveBytes.value);
    this.liveBlocks.sub(this.liveBlocks.value);
  }

  /** Pointers from another tracking adaptor are unknown to this one: only itself is equal. */
  protected override get keepsOwnCount(): boolean {
    return true;
  }

  /**
   * Every outstanding allocation, oldest first.
   *
   * @returns A new array of the records (the records themselves are not copied).
   * @throws Never.
   * @example
   * ```ts
   * for (const a of tracked.outstanding()) console.log(`0x${a.ptr.toString(16)}`, a.bytes, a.stack ?? '');
   * ```
   */
  outstanding(): TrackedAllocation[] {
    return [...this.live.values()];
  }

  /**
   * A readable report of what is outstanding, grouped by allocating stack (largest total first),
   * e.g. at the end of a test or before exit. Says so when nothing is outstanding.
   *
   * @returns Lines joined by `\n`: a summary, then one line per allocating stack with its frames.
   * @throws Never.
   * @example
   * ```ts
   * process.on('exit', () => { if (tracked.outstandingCount > 0) console.error(tracked.leakReport()); });
   * ```
   */
  leakReport(): string {
    if (this.live.size === 0) return `${this.describe()}: no outstanding allocations`;
    const groups = new Map<string, { bytes: number; count: number; streams: Set<number> }>();
    for (const record of this.live.values()) {
      const key = record.stack ?? '';
      let group = groups.get(key);
      if (group === undefined) {
        group = { bytes: 0, count: 0, streams: new Set() };
        groups.set(key, group);
      }
      group.bytes += record.bytes;
      group.count += 1;
      group.streams.add(record.stream);
    }
    const sorted = [...groups.entries()].sort((a, b) => b[1].bytes - a[1].bytes || b[1].count - a[1].count);
    const lines = [
      `${this.describe()}: ${this.live.size} outstanding allocation(s), ` +
        `${formatBytes(this.liveBytes.value)} (${this.liveBytes.value} bytes), from ${sorted.length} place(s)`,
    ];
    for (const [stack, group] of sorted) {
      const streams = [...group.streams].sort((a, b) => a - b).join(', ');
      lines.push(
        `  ${formatBytes(group.bytes)} in ${group.count} allocation(s) on stream(s) ${streams}` +
          (stack ? ', allocated at:' : ' (stacks not captured: use { captureStacks: true })'),
      );
      if (stack) for (const frame of stack.split('\n')) lines.push(`      ${frame}`);
    }
    return lines.join('\n');
  }

  protected override describeParameters(): string {
    return this.captureStacks ? 'stacks' : '';
  }
}
