/**
 * The replay engine: runs a recorded allocation trace through a resource stack, in order, without
 * touching the memory, and measures what the stack costs in time and in memory held beyond what
 * the traced program had live (the fragmentation overhead figure replay reports).
 */
import { Device } from '../device.js';
import { VramError } from '../errors.js';
import { type MemoryResource } from '../resource/resource.js';
import { type StreamRef, defaultStream } from '../stream.js';
import type { GrowthFigures, MemoryFigures } from '../resource/figures.js';
import { Stream } from '../stream.js';
import { alignUp } from '../validate.js';
import type { SnapshotSegment } from '../resource/figures.js';
import type { AllocationTrace } from './parse.js';
import { readOptions } from '../util/options.js';

/** How peak reserved bytes were found. */
export type ReservedSource =
  /** The resource's `memoryFigures()` (with what lies below it: the pool under a binning resource). */
  | 'resource'
  /**
   * `estimateDriverReservation` over the live set: the resource keeps no figures, or its reserved
   * bytes are only its allocated ones (`reservedFromAllocated`: one driver allocation per block).
   */
  | 'estimate';

/** Options of a replay. */
export interface ReplayOptions {
  /**
   * Time every operation on its own, for medians (two clock reads per operation, which add
   * roughly 50-100 ns each to the total); off by default, when only the whole loop is timed.
   */
  readonly perOperationTiming?: boolean;
  /**
   * Replays the trace this many times back to back (default 1), each pass with its own pointers;
   * what a pass leaves live is freed after it, untimed. Later passes meet a warm resource: a
   * training loop's steady state.
   */
  readonly repeat?: number;
  /** The stack's growth figures so far (cumulative), read around each pass for its share. */
  readonly growth?: () => GrowthFigures;
  /**
   * Records live and reserved bytes after every operation of the first pass (`timeline` in the
   * result), for `vram replay --html`. That pass runs a loop of its own, so replays without it
   * run the plain one at its full speed; with it, the pass's time includes the readings (a
   * driver call per operation for a CUDA pool). Not with `perOperationTiming`.
   */
  readonly timeline?: boolean;
}

/** A live block at the trace's peak, where the replayed stack put it. */
export interface PeakBlock {
  /** The address the stack returned. */
  readonly address: number;
  readonly bytes: number;
  /** The trace's stream id. */
  readonly stream: number;
}

/** Live and reserved bytes after every operation of a replay's first pass. */
export interface ReplayTimeline {
  /** The trace's time of each operation, in microseconds since its first event. */
  readonly timeUs: Float64Array;
  /** Bytes the traced program had live after each operation. */
  readonly liveBytes: Float64Array;
  /** Bytes the stack held after each operation. */
  readonly reservedBytes: Float64Array;
  /** Where the reserved figures came from (as `ReplayResult.reservedSource`). */
  readonly reservedSource: ReservedSource;
  /** The operation (0-based) after which live bytes first reached their peak. */
  readonly peakOperation: number;
  /** The blocks live then, by address. */
  readonly peakBlocks: readonly PeakBlock[];
  /**
   * The stack's memory then: the segments of the first resource down the stack that lays its
   * memory out (`memorySegments()`), with its `describe()`; null when none does.
   */
  readonly peakSegments: { readonly resource: string; readonly segments: readonly SnapshotSegment[] } | null;
}

/** One pass of a repeated replay. */
export interface ReplayPass {
  /** Wall time of the pass's loop, in nanoseconds. */
  readonly totalNs: number;
  readonly nsPerOperation: number;
  /** The most bytes the stack held during the pass (it starts from what the previous pass kept). */
  readonly peakReservedBytes: number;
  /** The pass's share of the growth figures, when the stack reports them. */
  readonly growth?: GrowthFigures;
}

/** What a replay measured. */
export interface ReplayResult {
  /** The resource stack, as it describes itself. */
  readonly resource: string;
  /** Allocations plus frees replayed. */
  readonly operations: number;
  readonly allocations: number;
  readonly frees: number;
  /** Wall time of the replay loop, in nanoseconds. */
  readonly totalNs: number;
  /** `totalNs / operations`. */
  readonly nsPerOperation: number;
  /** Median allocate and free times, with `perOperationTiming`. */
  readonly medianAllocateNs?: number;
  readonly medianFreeNs?: number;
  /** The most bytes live at once, from the trace's sizes. */
  readonly peakLiveBytes: number;
  /** The most bytes the stack held from the driver at once. */
  readonly peakReservedBytes: number;
  readonly reservedSource: ReservedSource;
  /** `(peakReserved / peakLive - 1) * 100`. */
  readonly overheadPercent: number;
  /**
   * Every pass (one without `repeat`). The fields above describe the first pass, except peak
   * reserved and overhead, which are the highest over all passes.
   */
  readonly passes: readonly ReplayPass[];
  /** With the `timeline` option: the first pass's figures after every operation. */
  readonly timeline?: ReplayTimeline;
}

/** Where a replay stopped: the failing operation, and the traced program's and the stack's state just before it. */
export interface ReplayFailurePoint {
  /** The failing operation, 1-based, counting the trace's allocations and frees (not its recorded failures). */
  readonly operation: number;
  /** The pass it failed in, 1-based (see `ReplayOptions.repeat`). */
  readonly pass: number;
  readonly action: 'allocate' | 'free';
  /** The bytes of the failing request. */
  readonly bytes: number;
  /** Bytes the traced program had live just before the failing operation. */
  readonly liveBytes: number;
  /** Bytes the stack held then, where its figures measure them (absent where replay estimates). */
  readonly reservedBytes?: number;
}

/**
 * A replay that stopped because the resource failed an operation; `cause` is the resource's error,
 * `point` where it stopped.
 *
 * @example
 * ```ts
 * try { replay(trace, new ArenaResource({ size: 1 << 20 })); }
 * catch (e) { if (e instanceof ReplayError) console.error(`line ${e.line}:`, e.cause); else throw e; }
 * ```
 */
export class ReplayError extends VramError {
  /**
   * @param line The failing event's line in the log.
   * @param eventIndex The failing event's index among the log's events (0-based).
   * @param message What failed.
   * @param cause The error the resource threw.
   * @param point Where the replay stopped (the replay engine always gives it).
   * @throws Never.
   * @example
   * ```ts
   * throw new ReplayError(12, 10, 'rmm_log.csv:12: allocate 4096 bytes failed on ArenaResource(...): out of memory', error);
   * ```
   */
  constructor(
    /** The failing event's line in the log. */
    readonly line: number,
    /** The failing event's index among the log's events (0-based). */
    readonly eventIndex: number,
    message: string,
    cause: unknown,
    /** Where the replay stopped: operation, pass, request, live and reserved bytes then. */
    readonly point?: ReplayFailurePoint,
  ) {
    super(message, { cause });
  }
}

/** Blocks at or below this size are packed by the driver into shared pages (see the estimate). */
const SMALL_BLOCK_LIMIT = 1 << 20;
/** The driver's minimum spacing of small cuMemAlloc blocks. */
const SMALL_BLOCK_ROUNDING = 512;
/** The driver's page size for large blocks (CUDA's allocation granularity on current GPUs). */
const LARGE_BLOCK_ROUNDING = 2 << 20;

/**
 * What plain cuMemAlloc is taken to reserve for one block, since the driver does not report it
 * per allocation: a block up to 1 MiB occupies its size rounded up to 512 B (the spacing of
 * consecutive small allocations), a larger one its size rounded up to 2 MiB (the page size the
 * driver maps device memory in). An estimate of the rule, not a measurement.
 */
export function estimateDriverReservation(bytes: number): number {
  return bytes <= SMALL_BLOCK_LIMIT ? alignUp(bytes, SMALL_BLOCK_ROUNDING) : alignUp(bytes, LARGE_BLOCK_ROUNDING);
}

/** The peak, over the trace, of the live blocks' sizes each mapped by `occupied`. */
export function peakOccupied(trace: AllocationTrace, occupied: (bytes: number) => number): number {
  let current = 0;
  let peak = 0;
  for (const event of trace.events) {
    if (event.action === 'allocate') {
      current += occupied(event.size);
      if (current > peak) peak = current;
    } else if (event.action === 'free') {
      current -= occupied(event.size);
    }
  }
  return peak;
}

function median(values: Float64Array): number | undefined {
  if (values.length === 0) return undefined;
  const sorted = values.slice().sort();
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
}

/**
 * Replays `trace` through `resource`: every allocate and free in log order, on the stream the log
 * names (trace stream 0 is the default stream; other ids get new backend streams, destroyed
 * afterwards). Trace pointers map to the resource's pointers through the allocation slots; the
 * memory itself is never read or written. Allocations the log never frees are freed after the
 * timed loop. On failure, everything the replay allocated is returned and a `ReplayError` naming
 * the log line is thrown with the resource's error as its cause.
 * @param trace The checked trace (`parseAllocationLog`, `readAllocationLog`).
 * @param resource The resource to replay it through.
 * @param options What to measure and how many passes.
 * @returns The timings and the figures of each pass.
 * @throws {TypeError} When an option is unknown or of the wrong type.
 * @throws {RangeError} When `repeat` is not a positive whole number.
 * @throws {ReplayError} When the resource fails an operation, naming the log line (its error is the cause).
 * @example
 * ```ts
 * const result = replay(readAllocationLog('rmm_log.csv'), new PoolResource());
 * console.log(result.passes[0]);
 * ```
 */
export function replay(trace: AllocationTrace, resource: MemoryResource, options: ReplayOptions = {}): ReplayResult {
  options = readOptions('replay', options, { perOperationTiming: true, repeat: true, growth: true, timeline: true });
  const events = trace.events;
  const n = events.length;
  // Compile the events into flat arrays so the timed loop does nothing but call the resource.
  const kinds = new Uint8Array(n); // 0 allocate, 1 free, 2 skip
  const sizes = new Float64Array(n);
  const slots = new Int32Array(n);
  const streamOf: StreamRef[] = new Array<StreamRef>(n);
  const repeat = options.repeat ?? 1;
  if (!Number.isInteger(repeat) || repeat < 1) throw new RangeError(`repeat must be a whole number >= 1, got ${repeat}`);
  const perOp = options.perOperationTiming === true;
  if (perOp && options.timeline === true) throw new RangeError("perOperationTiming and timeline cannot be combined: the timeline's readings would be timed");
  const { refs: streamRefs, created } = createTraceStreams(trace, resource);
  for (let i = 0; i < n; i++) {
    const event = events[i]!;
    kinds[i] = event.action === 'allocate' ? 0 : event.action === 'free' ? 1 : 2;
    sizes[i] = event.size;
    slots[i] = event.slot;
    streamOf[i] = streamRefs.get(event.stream) ?? defaultStream;
  }
  const pointers = new Float64Array(trace.summary.allocations);
  const isLive = new Uint8Array(trace.summary.allocations);
  const recorder = options.timeline === true ? new TimelineRecorder(trace, resource) : undefined;
  const allocTimes = new Float64Array(perOp ? trace.summary.allocations : 0);
  const freeTimes = new Float64Array(perOp ? trace.summary.frees : 0);
  const passes: ReplayPass[] = [];
  const operations = trace.summary.operations;
  let reservedSource: ReservedSource = 'estimate';

  // The streams outlive every free made on them (failures included), and no more.
  try {
    for (let pass = 0; pass < repeat; pass++) {
      resource.resetPeakFigures();
      const growthBefore = options.growth?.();
      let i = 0;
      let totalNs = 0;
      try {
        const start = process.hrtime.bigint();
        if (recorder !== undefined && pass === 0) {
          for (; i < n; i++) {
            const kind = kinds[i];
            if (kind === 2) continue;
            const slot = slots[i]!;
            if (kind === 0) pointers[slot] = resource.allocate(sizes[i]!, streamOf[i]);
            else resource.deallocate(pointers[slot]!, sizes[i]!, streamOf[i]);
            isLive[slot] = kind === 0 ? 1 : 0;
            recorder.record(i, kind === 0 ? sizes[i]! : -sizes[i]!, pointers, isLive);
          }
        } else if (!perOp || pass > 0) {
          for (; i < n; i++) {
            const kind = kinds[i];
            if (kind === 0) {
              const slot = slots[i]!;
              pointers[slot] = resource.allocate(sizes[i]!, streamOf[i]);
              isLive[slot] = 1;
            } else if (kind === 1) {
              const slot = slots[i]!;
              resource.deallocate(pointers[slot]!, sizes[i]!, streamOf[i]);
              isLive[slot] = 0;
            }
          }
        } else {
          let a = 0,
            f = 0;
          for (; i < n; i++) {
            const kind = kinds[i];
            if (kind === 2) continue;
            const slot = slots[i]!;
            const t0 = process.hrtime.bigint();
            if (kind === 0) {
              pointers[slot] = resource.allocate(sizes[i]!, streamOf[i]);
              allocTimes[a++] = Number(process.hrtime.bigint() - t0);
              isLive[slot] = 1;
            } else {
              resource.deallocate(pointers[slot]!, sizes[i]!, streamOf[i]);
              freeTimes[f++] = Number(process.hrtime.bigint() - t0);
              isLive[slot] = 0;
            }
          }
        }
        totalNs = Number(process.hrtime.bigint() - start);
      } catch (error) {
        const event = events[i]!;
        // Read before the pass's blocks go back: what the stack held when it failed.
        const point = failurePoint(trace, i, pass, resource);
        freeLive(resource, pointers, isLive, sizes, events);
        const what = event.action === 'allocate' ? `allocate ${event.size} bytes` : `free of ${event.size} bytes`;
        throw new ReplayError(
          event.line,
          i,
          `${trace.source}:${event.line}${repeat > 1 ? ` (pass ${pass + 1} of ${repeat})` : ''}: ${what} failed on ` +
            `${resource.describe()}: ${error instanceof Error ? error.message : String(error)}`,
          error,
          point,
        );
      }
      // Read the stack's high-water mark before the leftovers are freed (freeing does not lower it).
      let peakReservedBytes: number;
      const figures = measuredFigures(resource);
      if (figures !== undefined) {
        peakReservedBytes = figures.peakReservedBytes;
        reservedSource = 'resource';
      } else {
        peakReservedBytes = peakOccupied(trace, estimateDriverReservation);
        reservedSource = 'estimate';
      }
      const growthAfter = options.growth?.();
      freeLive(resource, pointers, isLive, sizes, events);
      passes.push({
        totalNs,
        nsPerOperation: operations > 0 ? totalNs / operations : 0,
        peakReservedBytes,
        ...(growthBefore !== undefined && growthAfter !== undefined ? { growth: growthBetween(growthBefore, growthAfter) } : {}),
      });
    }
  } finally {
    destroyStreams(created);
  }

  const peakLiveBytes = trace.summary.peakLiveBytes;
  const peakReservedBytes = Math.max(...passes.map((p) => p.peakReservedBytes));
  const first = passes[0]!;
  const medianAllocateNs = perOp ? median(allocTimes) : undefined;
  const medianFreeNs = perOp ? median(freeTimes) : undefined;
  return {
    resource: resource.describe(),
    operations,
    allocations: trace.summary.allocations,
    frees: trace.summary.frees,
    totalNs: first.totalNs,
    nsPerOperation: first.nsPerOperation,
    ...(medianAllocateNs !== undefined ? { medianAllocateNs } : {}),
    ...(medianFreeNs !== undefined ? { medianFreeNs } : {}),
    peakLiveBytes,
    peakReservedBytes,
    reservedSource,
    overheadPercent: peakLiveBytes > 0 ? (peakReservedBytes / peakLiveBytes - 1) * 100 : 0,
    passes,
    ...(recorder !== undefined ? { timeline: recorder.result() } : {}),
  };

  function freeLive(mr: MemoryResource, ptrs: Float64Array, live: Uint8Array, sz: Float64Array, evs: AllocationTrace['events']): void {
    // Sizes live by slot: find each live slot's allocation event (rare path: leftovers, failures).
    const slotSize = new Float64Array(ptrs.length);
    const slotStream: StreamRef[] = new Array<StreamRef>(ptrs.length);
    for (let k = 0; k < evs.length; k++) {
      if (evs[k]!.action !== 'allocate') continue;
      slotSize[evs[k]!.slot] = sz[k]!;
      slotStream[evs[k]!.slot] = streamOf[k] ?? defaultStream;
    }
    for (let s = ptrs.length - 1; s >= 0; s--) {
      if (live[s] === 1) {
        mr.deallocate(ptrs[s]!, slotSize[s]!, slotStream[s]);
        live[s] = 0;
      }
    }
  }
}

/**
 * Where a pass stopped at event `index`: the operation's number, and the live bytes before it (a
 * walk over the events before it: the failure path only, never the timed loop's).
 */
function failurePoint(trace: AllocationTrace, index: number, pass: number, resource: MemoryResource): ReplayFailurePoint {
  let operation = 1;
  let liveBytes = 0;
  for (let k = 0; k < index; k++) {
    const event = trace.events[k]!;
    if (event.action === 'allocate') liveBytes += event.size;
    else if (event.action === 'free') liveBytes -= event.size;
    else continue;
    operation++;
  }
  const event = trace.events[index]!;
  let reservedBytes: number | undefined;
  try {
    reservedBytes = measuredFigures(resource)?.reservedBytes;
  } catch {
    // A resource that cannot report after its failure still has its failure reported.
  }
  return {
    operation,
    pass: pass + 1,
    action: event.action === 'free' ? 'free' : 'allocate',
    bytes: event.size,
    liveBytes,
    ...(reservedBytes === undefined ? {} : { reservedBytes }),
  };
}

/**
 * The resource's figures where they measure what it reserves; `undefined` where replay must
 * estimate instead (no figures, or reserved bytes that are only the allocated ones).
 */
function measuredFigures(resource: MemoryResource): MemoryFigures | undefined {
  const figures = resource.memoryFigures();
  return figures === undefined || figures.reservedFromAllocated === true ? undefined : figures;
}

/** Fills a ReplayTimeline as the first pass runs. */
class TimelineRecorder {
  private readonly timeUs: Float64Array;
  private readonly liveBytes: Float64Array;
  private readonly reservedBytes: Float64Array;
  private readonly source: ReservedSource;
  private readonly read: (() => number) | undefined;
  private count = 0;
  private live = 0;
  private estimated = 0;
  private peakOperation = -1;
  private peakBlocks: PeakBlock[] = [];
  private peakSegments: ReplayTimeline['peakSegments'] = null;

  constructor(
    private readonly trace: AllocationTrace,
    private readonly resource: MemoryResource,
  ) {
    const operations = trace.summary.operations;
    this.timeUs = new Float64Array(operations);
    this.liveBytes = new Float64Array(operations);
    this.reservedBytes = new Float64Array(operations);
    if (measuredFigures(resource) !== undefined) {
      this.source = 'resource';
      this.read = () => resource.memoryFigures()!.reservedBytes;
    } else {
      this.source = 'estimate';
      this.read = undefined;
    }
  }

  /** After event `index` changed live bytes by `delta` (negative for a free). */
  record(index: number, delta: number, pointers: Float64Array, isLive: Uint8Array): void {
    const events = this.trace.events;
    const k = this.count++;
    this.live += delta;
    this.estimated += Math.sign(delta) * estimateDriverReservation(Math.abs(delta));
    this.timeUs[k] = events[index]!.timeUs - events[0]!.timeUs;
    this.liveBytes[k] = this.live;
    this.reservedBytes[k] = this.read === undefined ? this.estimated : this.read();
    // Once, at the peak: a walk over the slots, off the per-operation path.
    if (this.peakOperation < 0 && this.live === this.trace.summary.peakLiveBytes) {
      this.peakOperation = k;
      const blocks: PeakBlock[] = [];
      for (let e = 0; e <= index; e++) {
        const event = events[e]!;
        if (event.action === 'allocate' && isLive[event.slot] === 1) {
          blocks.push({ address: pointers[event.slot]!, bytes: event.size, stream: event.stream });
        }
      }
      this.peakBlocks = blocks.sort((a, b) => a.address - b.address);
      for (let r: MemoryResource | undefined = this.resource; r !== undefined; r = r.upstream) {
        const segments = r.memorySegments();
        if (segments === undefined) continue;
        this.peakSegments = { resource: r.describe(), segments };
        break;
      }
    }
  }

  result(): ReplayTimeline {
    return {
      timeUs: this.timeUs,
      liveBytes: this.liveBytes,
      reservedBytes: this.reservedBytes,
      reservedSource: this.source,
      peakOperation: this.peakOperation,
      peakBlocks: this.peakBlocks,
      peakSegments: this.peakSegments,
    };
  }
}

/** The growth figures between two cumulative readings. */
function growthBetween(a: GrowthFigures, b: GrowthFigures): GrowthFigures {
  const c = a.driverCalls;
  const d = b.driverCalls;
  return {
    pageMoves: b.pageMoves - a.pageMoves,
    pageMovesBack: b.pageMovesBack - a.pageMovesBack,
    hostWaits: b.hostWaits - a.hostWaits,
    driverCalls: {
      create: d.create - c.create,
      map: d.map - c.map,
      unmap: d.unmap - c.unmap,
      setAccess: d.setAccess - c.setAccess,
      release: d.release - c.release,
    },
    growthNs: b.growthNs - a.growthNs,
    pagesMappedAhead: b.pagesMappedAhead - a.pagesMappedAhead,
    compactions: b.compactions - a.compactions,
    streamJoins: { records: b.streamJoins.records - a.streamJoins.records, waits: b.streamJoins.waits - a.streamJoins.waits },
  };
}

/**
 * The replay's stream for each of the trace's stream ids (0, the default stream, as itself),
 * created in the resource's device's context (a stream belongs to the context current when it is
 * made; host resources, device -1, use device 0's). They are `Stream`s, not raw driver streams:
 * a caching resource keeps memory freed on a stream keyed by its handle and must be told before
 * that stream is destroyed, which `Stream.destroy` does (a raw destroy left the stack recording
 * events on dead handles when it was closed, a crash on a GPU).
 */
function createTraceStreams(trace: AllocationTrace, resource: MemoryResource): { refs: Map<number, StreamRef>; created: Stream[] } {
  const refs = new Map<number, StreamRef>([[0, defaultStream]]);
  const created: Stream[] = [];
  if (!trace.summary.streams.some((id) => id !== 0)) return { refs, created };
  const device = Device.get(Math.max(resource.deviceOrdinal, 0));
  try {
    for (const id of trace.summary.streams) {
      if (id === 0) continue;
      const stream = Stream.create({ device, nonBlocking: true });
      created.push(stream);
      refs.set(id, stream);
    }
  } catch (error) {
    destroyStreams(created);
    throw error;
  }
  return { refs, created };
}

/** Destroys the replay's streams once their work is done; each resource retires what it cached on them first. */
function destroyStreams(streams: readonly Stream[]): void {
  for (const stream of streams) {
    stream.synchronize();
    stream.destroy();
  }
}
