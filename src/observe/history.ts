/**
 * The memory history: a ring buffer of what the program's allocations did, as PyTorch's
 * `torch.cuda.memory._record_memory_history`, so a snapshot (or an out-of-memory error) can say
 * not only what is live but how it got there and from where.
 *
 * Events come from the resource base class (`MemoryResource.allocate`/`deallocate`/
 * `releaseCached`), for the outermost call only: the program's call on the top of a stack, not the
 * calls the stack makes to its upstreams. So every resource is recorded the same way, written once,
 * and an adaptor over a pool gives one event per allocation. Reserved bytes are followed the same
 * way: at each allocation and after `releaseCached` the top's `reservedBytes` (which every
 * resource reports, an adaptor its upstream's) is read, and a change is a `reserve` or `release`
 * event (frees are not read: resources give memory back in releaseCached or while growing; spills
 * and reloads are, as they move physical memory). A stack
 * whose reserved bytes are its allocated ones (`memoryFigures().reservedFromAllocated`: one driver
 * allocation per block) or that keeps no figures has no reserve events.
 *
 * Cost, with stacks off: no object is made per event; an event is six numbers written into one
 * Float64Array, a time read from shared memory (`history-clock.ts`: a clock read would cost more
 * than the whole hit pair) and, at allocations, a read of the stack's reserved bytes: under twice
 * the pool's hit pair (bench/results/h100-2026-11-22-history.md). With
 * stacks on, each alloc and oom event captures the call stack as V8 formats it (tens of
 * microseconds); a site seen before costs one Map lookup on the raw stack text, and frames are
 * cleaned once per distinct site.
 */
import { Device } from '../device.js';
import { VramStateError } from '../errors.js';
import { callerFrames, rawStack } from '../util/call-stack.js';
import { TickingClock } from './history-clock.js';
import { setAllocationObserver, type AllocationObserver, type MemoryResource } from '../resource/resource.js';
import type { HistoryEvent, HistoryEventKind, SnapshotBaseline, SnapshotResource, SnapshotStack } from './snapshot-format.js';
import { readOptions } from '../util/options.js';
import { setSpillObserver, type SpillObserver } from '../buffer/spill/spill-manager.js';

/** Options of `recordMemoryHistory`. */
export interface HistoryOptions {
  /**
   * The ring's capacity in events (default 100,000; at most 2^24): when full, each new event
   * drops the oldest. Its array is made at once, 48 bytes an event (4.8 MB by default).
   */
  readonly maxEntries?: number;
  /**
   * Capture the call stack of each alloc and out-of-memory event (tens of microseconds each:
   * bench/results/h100-2026-11-22-history.md); off by default. Frees are not captured: where the
   * memory is held is the question, and a stack would double the cost.
   */
  readonly stacks?: boolean;
  /** The device whose resources are recorded (device 0 by default). */
  readonly device?: Device | number;
}

/** A live block the history saw allocated, with where and when (kept while stacks are on). */
export interface HistoryLiveBlock {
  /** What the caller asked for. */
  readonly bytes: number;
  /** The stream handle it was allocated on. */
  readonly stream: number;
  /** When, in milliseconds on the `performance.now()` clock. */
  readonly time: number;
  /** The id of the stack's top resource (`resourceRecord(mr).id`). */
  readonly resource: number;
  /** The id of the allocating call stack (`MemoryHistory.callStacks()`). */
  readonly stack: number;
}

/** A place in the program that holds live memory: a call stack with its live blocks' bytes. */
export interface LiveSite {
  /** The call stack's frames, innermost first. */
  readonly frames: readonly string[];
  /** Bytes its live blocks asked for. */
  readonly bytes: number;
  /** How many live blocks it made. */
  readonly count: number;
}

/**
 * What the history knows of one resource, process-wide and for the resource's lifetime: its id
 * (what events, blocks and snapshots name it by) and what it was when first seen, kept after the
 * resource itself is garbage-collected. The id, label, class, kind, device and upstream are those
 * the snapshot writes (`label` is the `describe()` of when it was first seen).
 */
export interface ResourceRecord extends Pick<SnapshotResource, 'id' | 'label' | 'className' | 'kind' | 'device' | 'upstream'> {
  /** The resource, while it lives. */
  readonly ref: WeakRef<MemoryResource>;
  /**
   * Whether the history follows the resource's `reservedBytes`: where its figures measure them
   * (not `reservedFromAllocated`, and not none).
   */
  readonly measuresReserved: boolean;
  /** The resource's reserved bytes after the last event recorded on this stack. */
  lastReserved: number;
  /** The history that took this stack's baseline, and the baseline. */
  seenBy: MemoryHistory | null;
  baseline: SnapshotBaseline | null;
}

const KINDS: readonly HistoryEventKind[] = ['alloc', 'free', 'oom', 'reserve', 'release', 'spill', 'reload'];
const ALLOC = 0;
const FREE = 1;
const OOM = 2;
const RESERVE = 3;
const RELEASE = 4;
const SPILL = 5;
const RELOAD = 6;
const DEFAULT_ENTRIES = 100_000;
/** Numbers per event in the ring (see `MemoryHistory.#ring`). */
const SLOTS = 6;
/**
 * Frames a stack capture takes: events come from the outermost call only, so vram's own frames
 * are few (a DeviceArray, its buffer, the resource's allocate, this file: 8 at most) and 20 leave
 * the program's 12 that are kept; each frame more costs formatting time.
 */
const STACK_FRAMES = 20;
/** 2^24 events are 805 MB: a bigger ring is more likely a mistake than a need. */
const MAX_ENTRIES = 2 ** 24;

const records = new WeakMap<MemoryResource, ResourceRecord>();
let nextResourceId = 1;

/**
 * The history's record of `mr` (made on first call): its id, its description when first seen and
 * its upstream's id. Ids are unique in the process and never reused.
 *
 * @param mr A resource.
 * @returns Its record.
 * @example
 * ```ts
 * resourceRecord(pool).id; // what snapshots and events call the pool
 * ```
 */
export function resourceRecord(mr: MemoryResource): ResourceRecord {
  let record = records.get(mr);
  if (record === undefined) {
    const upstream = mr.upstream === undefined ? null : resourceRecord(mr.upstream).id;
    record = {
      id: nextResourceId++,
      label: mr.describe(),
      className: mr.constructor.name,
      kind: mr.kind,
      device: mr.deviceOrdinal,
      upstream,
      ref: new WeakRef(mr),
      measuresReserved: measuresReserved(mr),
      lastReserved: 0,
      seenBy: null,
      baseline: null,
    };
    records.set(mr, record);
  }
  return record;
}

/** Whether `mr`'s figures measure reserved bytes (read once per resource: its figures' kind does not change). */
function measuresReserved(mr: MemoryResource): boolean {
  try {
    const figures = mr.memoryFigures();
    return figures !== undefined && figures.reservedFromAllocated !== true;
  } catch {
    return false; // destroyed: nothing more will be reserved
  }
}

/** The recording history of each device, by ordinal. */
const recorders: Array<MemoryHistory | undefined> = [];
/** The latest history of each device, recording or stopped, for snapshots. */
const latest: Array<MemoryHistory | undefined> = [];
let recording = 0;
// The last resource called, its record and the history recording its device (null for none): a
// program allocates from one stack most of the time, so one compare usually replaces the WeakMap
// and device lookups. Cleared when a recording starts or stops, so the next call looks again (and
// a new history takes its baseline).
let lastResource: MemoryResource | null = null;
let lastRecord: ResourceRecord | null = null;
let lastHistory: MemoryHistory | null = null;

/**
 * Looks `mr` up after its outermost call, takes its stack's baseline if its device's history has
 * not seen it, and caches both. `allocatedChange` is what the call did to the stack's allocated
 * bytes (+bytes for an allocation, -bytes for a free), so the baseline is from before it.
 */
function lookUp(mr: MemoryResource, allocatedChange: number): void {
  const record = resourceRecord(mr);
  const history = (record.device >= 0 ? recorders[record.device] : undefined) ?? null;
  if (history !== null && record.seenBy !== history) history.firstSight(record, mr, allocatedChange);
  lastResource = mr;
  lastRecord = record;
  lastHistory = history;
}

function forgetLast(): void {
  lastResource = null;
  lastRecord = null;
  lastHistory = null;
}

const dispatcher: AllocationObserver = {
  allocated(mr, ptr, bytes, handle) {
    if (mr !== lastResource) lookUp(mr, bytes);
    lastHistory?.add(ALLOC, lastRecord!, mr, ptr, bytes, handle);
  },
  deallocated(mr, ptr, bytes, handle) {
    if (mr !== lastResource) lookUp(mr, -bytes);
    lastHistory?.add(FREE, lastRecord!, mr, ptr, bytes, handle);
  },
  failed(mr, bytes, handle) {
    if (mr !== lastResource) lookUp(mr, 0);
    lastHistory?.add(OOM, lastRecord!, mr, Number.NaN, bytes, handle);
  },
  releasedCache(mr) {
    if (mr !== lastResource) lookUp(mr, 0);
    lastHistory?.reserveReleased(lastRecord!, mr);
  },
};

/** Spills and reloads, recorded as events of the device's SpillableResource. */
const spillDispatcher: SpillObserver = {
  spilled(mr, ptr, bytes) {
    if (mr !== lastResource) lookUp(mr, 0);
    lastHistory?.addMove(SPILL, lastRecord!, mr, ptr, bytes, 0);
  },
  reloaded(mr, ptr, bytes, handle) {
    if (mr !== lastResource) lookUp(mr, 0);
    lastHistory?.addMove(RELOAD, lastRecord!, mr, ptr, bytes, handle);
  },
};

/**
 * A recording of one device's memory events (`recordMemoryHistory` makes it). Keeps its events
 * after `stop()`, for `events()` and snapshots, until the next recording on the device.
 *
 * @example
 * ```ts
 * using history = recordMemoryHistory({ maxEntries: 10_000, stacks: true });
 * runStep();
 * console.log(history.events().filter((e) => e.kind === 'alloc').length);
 * ```
 */
export class MemoryHistory {
  /** The device recorded. */
  readonly device: number;
  /** The ring's capacity. */
  readonly maxEntries: number;
  /** Whether call stacks are captured. */
  readonly stacks: boolean;
  /** When recording started, in milliseconds on the `performance.now()` clock. */
  readonly startTime: number;
  #recording = true;
  /** Where the next event goes: its first number's index in `#ring` (a multiple of SLOTS). */
  #offset = 0;
  /** How many times the ring was filled: with `#offset`, the count of events ever recorded. */
  #wraps = 0;
  readonly #clock: TickingClock;
  /** The clock's shared time, read inline by `add`. */
  readonly #time: Float64Array;
  /** Events until `add` has the clock check its worker is keeping up (`TickingClock.check`). */
  #untilClockCheck = 1;
  /**
   * The events, SLOTS numbers each: kind + 8 * resource id, address (NaN: none), bytes, stream,
   * time, stack id (-1: none). One array rather than one per field: an event is then one field
   * load and one bounds check, not seven.
   */
  readonly #ring: Float64Array;
  /** Raw stack text to id: the one lookup a repeated site costs. */
  readonly #rawIds = new Map<string, number>();
  /** Cleaned frames (joined) to id: raw stacks differing only in vram's frames share a site. */
  readonly #frameIds = new Map<string, number>();
  readonly #frames: string[][] = [];
  /**
   * Live blocks by resource id, then address: one address can be live in two resources of one
   * stack at once (a pool's chunk from its upstream, recorded when the pool reserved it outside
   * an allocation, and the pool's block cut at its start), and a free ends only its own
   * resource's block.
   */
  readonly #live = new Map<number, Map<number, HistoryLiveBlock>>();
  readonly #seen: ResourceRecord[] = [];
  readonly #seenIds = new Set<number>();

  /** @internal Use `recordMemoryHistory`. */
  constructor(device: number, maxEntries: number, stacks: boolean) {
    this.device = device;
    this.maxEntries = maxEntries;
    this.stacks = stacks;
    this.#ring = new Float64Array(maxEntries * SLOTS);
    this.#clock = new TickingClock();
    this.#time = this.#clock.time;
    // The clock's own time, not performance.now(): it may lag by a tick, and no event may come before the start.
    this.startTime = this.#time[0]!;
  }

  /** Whether it is still recording. */
  get recording(): boolean {
    return this.#recording;
  }

  /** Events ever recorded, dropped ones included. */
  get recorded(): number {
    return this.#wraps * this.maxEntries + this.#offset / SLOTS;
  }

  /** Events the ring dropped: `recorded` minus the events kept. */
  get dropped(): number {
    return Math.max(0, this.recorded - this.maxEntries);
  }

  /**
   * Stops recording; the events stay readable. A second call does nothing.
   *
   * @throws Never.
   * @example
   * ```ts
   * const history = recordMemoryHistory();
   * run();
   * history.stop();
   * ```
   */
  stop(): void {
    if (!this.#recording) return;
    this.#recording = false;
    this.#clock.stop();
    recorders[this.device] = undefined;
    recording -= 1;
    forgetLast();
    if (recording === 0) {
      setAllocationObserver(null);
      setSpillObserver(null);
    }
  }

  /** `using history = recordMemoryHistory()` stops it at the end of the scope. */
  [Symbol.dispose](): void {
    this.stop();
  }

  /**
   * The events kept, oldest first, as the snapshot writes them.
   *
   * @returns New objects; the history keeps its own arrays.
   * @throws Never.
   * @example
   * ```ts
   * history.events().at(-1); // { kind: 'free', address: ..., bytes: 1024, stream: 0, time: 12.3, resource: 1, stack: null }
   * ```
   */
  events(): HistoryEvent[] {
    const n = Math.min(this.recorded, this.maxEntries);
    const first = this.#wraps > 0 ? this.#offset / SLOTS : 0;
    const out: HistoryEvent[] = new Array<HistoryEvent>(n);
    const ring = this.#ring;
    for (let k = 0; k < n; k++) {
      let i = first + k;
      if (i >= this.maxEntries) i -= this.maxEntries;
      const o = i * SLOTS;
      const kindAndResource = ring[o]!;
      const address = ring[o + 1]!;
      const stack = ring[o + 5]!;
      out[k] = {
        kind: KINDS[kindAndResource % 8]!,
        address: Number.isNaN(address) ? null : address,
        bytes: ring[o + 2]!,
        stream: ring[o + 3]!,
        time: ring[o + 4]!,
        resource: Math.floor(kindAndResource / 8),
        stack: stack < 0 ? null : stack,
      };
    }
    return out;
  }

  /**
   * The call stacks events and live blocks refer to, by id (empty with stacks off).
   *
   * @returns One entry per distinct site, ordered by id.
   * @throws Never.
   * @example
   * ```ts
   * history.callStacks()[0]?.frames[0]; // 'at loadWeights (file:///app/model.js:41:22)'
   * ```
   */
  callStacks(): SnapshotStack[] {
    return this.#frames.map((frames, id) => ({ id, frames }));
  }

  /**
   * The blocks allocated while recording with stacks and not freed since, by address (where two
   * resources have a live block at one address, a pool's block at the start of its upstream's
   * chunk, the one allocated last; each block names its resource).
   *
   * @returns A new Map (empty with stacks off: without stacks there is nothing to add to what the
   *   resources themselves report).
   * @throws Never.
   * @example
   * ```ts
   * history.liveBlocks().get(ptr)?.stack;
   * ```
   */
  liveBlocks(): Map<number, HistoryLiveBlock> {
    const all = [...this.#live.values()].flatMap((blocks) => [...blocks]);
    return new Map(all.sort((a, b) => a[1].time - b[1].time));
  }

  /**
   * The places holding the most live memory, from the blocks allocated while recording with stacks.
   *
   * @param count How many sites at most.
   * @param resource Only blocks allocated from the stack whose top has this id (all when omitted).
   * @returns Sites by bytes, largest first.
   * @throws Never.
   * @example
   * ```ts
   * for (const site of history.largestLiveSites(3)) console.log(site.bytes, site.frames[0]);
   * ```
   */
  largestLiveSites(count: number, resource?: number): LiveSite[] {
    const bySite = new Map<number, { bytes: number; count: number }>();
    for (const block of [...this.#live.values()].flatMap((blocks) => [...blocks.values()])) {
      if (resource !== undefined && block.resource !== resource) continue;
      const site = bySite.get(block.stack) ?? { bytes: 0, count: 0 };
      site.bytes += block.bytes;
      site.count += 1;
      bySite.set(block.stack, site);
    }
    return [...bySite.entries()]
      .sort((a, b) => b[1].bytes - a[1].bytes)
      .slice(0, count)
      .map(([stack, site]) => ({ frames: this.#frames[stack]!, ...site }));
  }

  /**
   * The records of every resource a call was recorded on, with the resources below each, in the
   * order first seen.
   *
   * @internal
   */
  seenResources(): readonly ResourceRecord[] {
    return this.#seen;
  }

  /**
   * Takes the baseline of a stack first seen by this history, just after its first recorded call
   * (the base class tells the history after a call, not before: one call less per allocation):
   * allocated bytes from before that call (`allocatedChange` taken out), reserved bytes from after
   * it, so a growth the call made is in the baseline rather than a `reserve` event.
   *
   * @internal
   */
  firstSight(record: ResourceRecord, mr: MemoryResource, allocatedChange: number): void {
    record.seenBy = this;
    // The stack below it too, so a snapshot can name every resource of a stack after it is gone.
    for (let r: ResourceRecord | null = record, m: MemoryResource | undefined = mr; r !== null && !this.#seenIds.has(r.id);) {
      this.#seenIds.add(r.id);
      this.#seen.push(r);
      m = m?.upstream;
      r = m === undefined ? null : resourceRecord(m);
    }
    const measured = record.measuresReserved;
    record.lastReserved = measured ? (mr.reservedBytes ?? 0) : 0;
    const allocated = mr.memoryFigures()?.allocatedBytes.value;
    record.baseline = {
      time: this.#time[0]!,
      allocatedBytes: allocated === undefined ? null : allocated - allocatedChange,
      reservedBytes: measured ? record.lastReserved : null,
    };
  }

  /**
   * Records an alloc, free or out-of-memory event of the stack `record` is the top of, with the
   * reserve or release it caused (before an alloc or oom, after a free).
   *
   * @internal
   */
  add(kind: number, record: ResourceRecord, mr: MemoryResource, address: number, bytes: number, stream: number): void {
    // Small, so V8 inlines it into the resource's allocate and deallocate: a double passed to a
    // call that is not inlined is boxed, an allocation per event (measured: `add` written out
    // with the stack and reserve cases was 417 bytes of bytecode, over the inlining budget). The
    // rare cases are in `#addWith`. Reserved bytes are read at allocations only: resources give
    // memory back in releaseCached (recorded there) or while they grow, not when a block is freed.
    if (--this.#untilClockCheck === 0) this.#untilClockCheck = this.#clock.check();
    const time = this.#time[0]!;
    if (this.stacks || (kind !== FREE && record.measuresReserved && mr.reservedBytes !== record.lastReserved)) {
      this.#addWith(kind, record, mr, address, bytes, stream, time);
      return;
    }
    this.#write(kind + 8 * record.id, address, bytes, stream, time, -1);
  }

  /**
   * Records a spill or reload of a spillable buffer (no stack: the move is vram's, not the caller's).
   *
   * @internal
   */
  addMove(kind: number, record: ResourceRecord, mr: MemoryResource, address: number, bytes: number, stream: number): void {
    const time = this.#time[0]!;
    if (record.measuresReserved) {
      const reserved = mr.reservedBytes ?? 0;
      if (reserved !== record.lastReserved) this.#reserveChange(record, reserved, stream, time);
    }
    this.#write(kind + 8 * record.id, address, bytes, stream, time, -1);
  }

  /** `add` with a call stack to capture or a change of reserved bytes to record before the event. */
  #addWith(kind: number, record: ResourceRecord, mr: MemoryResource, address: number, bytes: number, stream: number, time: number): void {
    const stack = this.stacks && kind !== FREE ? this.#stackId() : -1;
    if (kind !== FREE && record.measuresReserved) {
      const reserved = mr.reservedBytes ?? 0;
      if (reserved !== record.lastReserved) this.#reserveChange(record, reserved, stream, time);
    }
    this.#write(kind + 8 * record.id, address, bytes, stream, time, stack);
    if (kind === ALLOC && stack >= 0) {
      let blocks = this.#live.get(record.id);
      if (blocks === undefined) this.#live.set(record.id, (blocks = new Map()));
      blocks.set(address, { bytes, stream, time, resource: record.id, stack });
    } else if (kind === FREE && this.stacks) {
      this.#live.get(record.id)?.delete(address);
    }
  }

  /** Writes one event at the ring's next slot. */
  #write(kindAndResource: number, address: number, bytes: number, stream: number, time: number, stack: number): void {
    const ring = this.#ring;
    const o = this.#offset;
    ring[o] = kindAndResource;
    ring[o + 1] = address;
    ring[o + 2] = bytes;
    ring[o + 3] = stream;
    ring[o + 4] = time;
    ring[o + 5] = stack;
    if (o + SLOTS === ring.length) {
      this.#offset = 0;
      this.#wraps += 1;
    } else {
      this.#offset = o + SLOTS;
    }
  }

  /**
   * Records the release a `releaseCached()` on the stack caused, if any.
   *
   * @internal
   */
  reserveReleased(record: ResourceRecord, mr: MemoryResource): void {
    if (!record.measuresReserved) return;
    const reserved = mr.reservedBytes ?? 0;
    if (reserved !== record.lastReserved) this.#reserveChange(record, reserved, 0, this.#time[0]!);
  }

  /** Records the reserve or release that took the stack's reserved bytes to `reserved`. */
  #reserveChange(record: ResourceRecord, reserved: number, stream: number, time: number): void {
    const change = reserved - record.lastReserved;
    record.lastReserved = reserved;
    this.#write((change > 0 ? RESERVE : RELEASE) + 8 * record.id, Number.NaN, Math.abs(change), stream, time, -1);
  }

  #stackId(): number {
    const raw = rawStack(STACK_FRAMES);
    let id = this.#rawIds.get(raw);
    if (id === undefined) {
      const frames = callerFrames(raw);
      const key = frames.join('\n');
      id = this.#frameIds.get(key);
      if (id === undefined) {
        id = this.#frames.length;
        this.#frames.push(frames);
        this.#frameIds.set(key, id);
      }
      this.#rawIds.set(raw, id);
    }
    return id;
  }
}

/**
 * Starts recording the memory events of a device's resources: every allocation and free the
 * program makes (on any resource of the device, at the top of its stack), out-of-memory errors,
 * and changes of the memory the stacks reserve, in a ring buffer of the latest `maxEntries`
 * events, with call stacks when asked. `memorySnapshot()` includes it; `stop()` ends it.
 *
 * Starting takes some tens of milliseconds, once: the clock's thread starts (see `history-clock.ts`).
 *
 * @param options `maxEntries` (default 100,000), `stacks` (default false), `device` (default 0).
 * @returns The recording.
 * @throws {TypeError | RangeError} For bad options.
 * @throws {VramStateError} When the device is already being recorded (stop that recording first).
 * @throws {VramError} When the clock's thread does not start within 2 s.
 * @example
 * ```ts
 * const history = recordMemoryHistory({ stacks: true });
 * train();
 * writeFileSync('snapshot.json', JSON.stringify(memorySnapshot()));
 * history.stop();
 * ```
 */
export function recordMemoryHistory(options: HistoryOptions = {}): MemoryHistory {
  options = readOptions('recordMemoryHistory', options, { maxEntries: true, stacks: true, device: true });
  const maxEntries = options.maxEntries ?? DEFAULT_ENTRIES;
  if (typeof maxEntries !== 'number' || !Number.isInteger(maxEntries) || maxEntries < 1 || maxEntries > MAX_ENTRIES) {
    throw new RangeError(`maxEntries must be a whole number from 1 to ${MAX_ENTRIES}, got ${String(maxEntries)}`);
  }
  if (options.stacks !== undefined && typeof options.stacks !== 'boolean') throw new TypeError('stacks must be a boolean');
  const device = Device.resolve(options.device).ordinal;
  if (recorders[device] !== undefined) {
    throw new VramStateError(`device ${device}'s memory history is already recording: stop() it first`);
  }
  const history = new MemoryHistory(device, maxEntries, options.stacks === true);
  recorders[device] = history;
  latest[device] = history;
  recording += 1;
  forgetLast();
  setAllocationObserver(dispatcher);
  setSpillObserver(spillDispatcher);
  return history;
}

/**
 * The device's memory history: the one recording now, else the last one stopped.
 *
 * @param device The device (device 0 by default).
 * @returns It, or undefined when none was recorded on the device.
 * @throws {RangeError | TypeError} For a bad device.
 * @example
 * ```ts
 * memoryHistory()?.events().length;
 * ```
 */
export function memoryHistory(device?: Device | number): MemoryHistory | undefined {
  return latest[Device.resolve(device).ordinal];
}
