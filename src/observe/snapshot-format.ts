/**
 * The memory snapshot's format: what `memorySnapshot()` returns and `VRAM_OOM_SNAPSHOT` writes, as
 * plain JSON data (numbers, strings, arrays, null), so a file written by one program can be read
 * by another (`vram view`, a notebook) without vram's classes. docs/snapshot-schema.json says the
 * same as a JSON Schema, and the tests validate snapshots against it; `SNAPSHOT_VERSION` is raised
 * when a field changes meaning or goes away (a new optional field does not raise it).
 *
 * Layout, as PyTorch's `_dump_snapshot` (segments, blocks, a trace of events), with ids instead of
 * nested copies: every resource, call stack and event appears once and the others name it by id,
 * so a 100,000-event history does not repeat the same stack or resource description 100,000 times.
 *
 * Conventions: addresses, sizes and stream handles are JavaScript numbers (every driver address is
 * below 2^53, so JSON keeps them exact); times are milliseconds on the `performance.now()` clock of
 * the process that wrote the snapshot (`timeOrigin + time` is milliseconds since the epoch); a
 * field that is unknown is `null`, never a 0 that would read as measured.
 */
import { VramError } from '../errors.js';
import type { MemoryFigures, SnapshotSegment } from '../resource/figures.js';

// The segment shapes are the resources' own (they lay their memory out in them): defined beside the
// figures, below this layer, and part of the snapshot format from here.

/**
 * The version of the format this code writes. A reader should refuse a snapshot whose `version`
 * it does not know rather than misread it.
 *
 * @example
 * ```ts
 * const snapshot = JSON.parse(text) as MemorySnapshot;
 * if (snapshot.version !== SNAPSHOT_VERSION) throw new Error(`snapshot version ${snapshot.version}`);
 * ```
 */
export const SNAPSHOT_VERSION = 2;

/**
 * What a history event records:
 * - `alloc` / `free`: a block handed to or returned by the caller of a resource stack (recorded at
 *   the outermost `allocate`/`deallocate` only, so an adaptor over a pool gives one event, not two);
 * - `oom`: an allocation that failed with an out-of-memory error reaching the caller;
 * - `reserve` / `release`: the stack's reserved bytes (what it holds from the driver or its
 *   upstream: pages mapped, chunks taken, a CUDA pool grown) rose / fell by `bytes`;
 * - `spill` / `reload`: a spillable buffer of `bytes` at `address` went to pinned host memory / came
 *   back (at the same address), the resource being the device's SpillableResource.
 */
export type HistoryEventKind = 'alloc' | 'free' | 'oom' | 'reserve' | 'release' | 'spill' | 'reload';

/**
 * One event of the history, in the order it happened.
 *
 * @example
 * ```text
 * { kind: 'alloc', address: 140737488355328, bytes: 1048576, stream: 0, time: 812.4, resource: 1, stack: 3 }
 * ```
 */
export interface HistoryEvent {
  /** What happened. */
  readonly kind: HistoryEventKind;
  /** The block's address (`alloc`, `free`, `spill`, `reload`); `null` for `oom`, `reserve` and `release`. */
  readonly address: number | null;
  /**
   * `alloc`/`free`/`oom`: the bytes the caller asked for (before any rounding);
   * `reserve`/`release`: how much the stack's reserved bytes changed (always positive).
   */
  readonly bytes: number;
  /** The stream handle of the call (0: the legacy default stream). */
  readonly stream: number;
  /** When, in milliseconds on the snapshot's clock (see `MemorySnapshot.timeOrigin`). */
  readonly time: number;
  /** The id (in `MemorySnapshot.resources`) of the resource the caller called: the stack's top. */
  readonly resource: number;
  /** The id (in `MemorySnapshot.stacks`) of the caller's call stack (alloc, oom); `null` for the other kinds, or when stacks were off. */
  readonly stack: number | null;
}

/**
 * A call stack, interned: every event and block made from the same place names the same id.
 *
 * @example
 * ```text
 * { id: 3, frames: ['at loadWeights (file:///app/model.js:41:22)', 'at main (file:///app/main.js:9:3)'] }
 * ```
 */
export interface SnapshotStack {
  /** The id events and blocks refer to. */
  readonly id: number;
  /** Frames, innermost first, as V8 prints them (`at fn (file:line:column)`), without vram's own. */
  readonly frames: readonly string[];
}

/**
 * A resource's figures: its `memoryFigures()` as they are (a `Counter` is `{ value, peak, total }`);
 * optional fields are absent where the resource has no such figure. The same type, so the two
 * cannot drift apart.
 */
export type SnapshotFigures = MemoryFigures;

/**
 * Where a resource stands: in use (`active`), `destroyed`, or `collected` (garbage-collected since
 * the history saw it: only what was recorded then is known).
 */
export type ResourceStatus = 'active' | 'destroyed' | 'collected';

/**
 * The figures of a stack when the history first saw it, the start of its time series: start
 * from these and apply the stack's events, its first one included. Taken just after the stack's
 * first recorded call (the history is told after a call, not before: one call less on the hit
 * path), so the allocated bytes are from before that call, and the reserved bytes from after it:
 * a growth the first call made is in the baseline rather than a `reserve` event.
 */
export interface SnapshotBaseline {
  /** When, in milliseconds on the snapshot's clock. */
  readonly time: number;
  /** The stack's allocated bytes before its first recorded call; `null` where the stack does not count them. */
  readonly allocatedBytes: number | null;
  /** The stack's reserved bytes after its first recorded call; `null` where the stack does not know them. */
  readonly reservedBytes: number | null;
}

/**
 * One memory resource: those of the device's current stack (the current resource and everything
 * below it through `upstream`) and every other resource the history recorded a call to.
 */
export interface SnapshotResource {
  /** The id events, blocks and other resources refer to (unique in the process). */
  readonly id: number;
  /** Its `describe()`, e.g. `LimitingAdaptor(limit=64 MiB, PoolResource(virtual, device=0))`. */
  readonly label: string;
  /** Its class's name, e.g. `PoolResource`. */
  readonly className: string;
  /** What memory it hands out: `device`, `managed` or `pinned-host`. */
  readonly kind: string;
  /** The device ordinal (-1 for host memory). */
  readonly device: number;
  /** The id of the resource it takes memory from; `null` when it has none. */
  readonly upstream: number | null;
  /** True for the device's current resource and every resource below it. */
  readonly current: boolean;
  /** In use, destroyed, or collected. */
  readonly status: ResourceStatus;
  /** Its figures now; `null` when it keeps none, or was destroyed or collected. */
  readonly figures: SnapshotFigures | null;
  /**
   * Its segments and their blocks; `null` when it does not lay its memory out itself (adaptors,
   * which hand out their upstream's) or cannot be read (destroyed, collected).
   */
  readonly segments: readonly SnapshotSegment[] | null;
  /** The stack's figures when the history first recorded a call to it as a stack's top; else `null`. */
  readonly baseline: SnapshotBaseline | null;
}

/**
 * A block live now, as its holder's caller sees it: one entry per live block of every resource
 * that lays out its memory (`segments`), plus blocks the history saw allocated that no such
 * resource listed (a stack with no such resource).
 */
export interface SnapshotLiveBlock {
  /** Its address. */
  readonly address: number;
  /** What the caller asked for. */
  readonly bytes: number;
  /** The stream it was allocated on; `null` when unknown. */
  readonly stream: number | null;
  /** When it was allocated, when the history saw it; else `null`. */
  readonly time: number | null;
  /** The id of the resource whose segment holds it (or, from the history alone, the stack's top). */
  readonly resource: number;
  /** The id of the allocating call stack; `null` when not recorded with stacks. */
  readonly stack: number | null;
}

/** The history: a ring buffer of the latest events. */
export interface SnapshotHistory {
  /** Whether it was still recording when the snapshot was taken. */
  readonly recording: boolean;
  /** The ring's capacity: older events than the latest `maxEntries` are dropped. */
  readonly maxEntries: number;
  /** Whether call stacks were captured. */
  readonly stacks: boolean;
  /** When recording started, in milliseconds on the snapshot's clock. */
  readonly startTime: number;
  /** Events ever recorded, dropped ones included. */
  readonly recorded: number;
  /** Events the ring dropped (overwritten by later ones): `recorded - events.length`. */
  readonly dropped: number;
  /** The events kept, oldest first. */
  readonly events: readonly HistoryEvent[];
}

/** Why the snapshot was taken: on request, or by the out-of-memory observer. */
export type SnapshotTriggerKind = 'request' | 'out-of-memory';

/** The out-of-memory error that made the observer write the snapshot. */
export interface SnapshotError {
  /** Its message (with the largest live sites and the fragmentation, where known). */
  readonly message: string;
  /** The bytes asked for. */
  readonly requestedBytes: number;
  /** Its `reason`: `device`, `limit`, `maximum`, `arena`, `upstream`, `address-space` or `host`. */
  readonly reason: string;
  /** The failing call, e.g. `LimitingAdaptor.allocate`. */
  readonly call: string;
  /** The id of the resource whose `allocate` the program called. */
  readonly resource: number;
}

/** Why and when the snapshot was taken. */
export interface SnapshotTrigger {
  /** On request (`memorySnapshot()`) or at an out-of-memory error (`VRAM_OOM_SNAPSHOT`). */
  readonly kind: SnapshotTriggerKind;
  /** The error, for `out-of-memory`; `null` for `request`. */
  readonly error: SnapshotError | null;
}

/**
 * A snapshot of one device's memory: its resources with their segments and blocks, the live
 * blocks with their call stacks, and the history of events.
 *
 * @example
 * ```ts
 * const snapshot: MemorySnapshot = memorySnapshot();
 * const largest = [...snapshot.blocks].sort((a, b) => b.bytes - a.bytes)[0];
 * const frames = snapshot.stacks.find((s) => s.id === largest?.stack)?.frames;
 * ```
 */
export interface MemorySnapshot {
  /** The format's version, `SNAPSHOT_VERSION` when written. */
  readonly version: number;
  /** When it was taken, ISO 8601 (UTC). */
  readonly createdAt: string;
  /** When it was taken, in milliseconds on the clock of the times below. */
  readonly time: number;
  /** `performance.timeOrigin` of the writing process: milliseconds since the epoch at time 0. */
  readonly timeOrigin: number;
  /** The backend that ran it: `cuda` or `emulated`. */
  readonly backend: string;
  /** The device ordinal. */
  readonly device: number;
  /** Why it was taken. */
  readonly trigger: SnapshotTrigger;
  /** The id of the device's current resource (the top of its stack); `null` when none was made yet. */
  readonly currentResource: number | null;
  /** The resources, ordered by id. */
  readonly resources: readonly SnapshotResource[];
  /** Every live block, ascending by address. */
  readonly blocks: readonly SnapshotLiveBlock[];
  /** The call stacks events and blocks refer to, ordered by id. */
  readonly stacks: readonly SnapshotStack[];
  /** The history; `null` when none was recorded on the device. */
  readonly history: SnapshotHistory | null;
}

/**
 * A value that is not a snapshot of this format (docs/snapshot-schema.json), naming the first field
 * that is wrong, as a path from the snapshot's top: `resources[2].segments[0].blocks[5].bytes`.
 *
 * @example
 * ```ts
 * try { validateSnapshot(JSON.parse(text)); }
 * catch (e) { if (e instanceof SnapshotFormatError) console.error(`bad snapshot at ${e.field}`); else throw e; }
 * ```
 */
export class SnapshotFormatError extends VramError {
  /**
   * @param field The path of the wrong field (`snapshot` for the value itself).
   * @param reason What is wrong with it; the message is `field: reason`.
   * @param expected What the field should have been, when its value was of the wrong type or range.
   * @throws Never.
   * @example
   * ```ts
   * throw new SnapshotFormatError('resources[2].segments[0].bytes', 'must be a whole number >= 0', 'integer >= 0');
   * ```
   */
  constructor(
    /** The path of the wrong field (`snapshot` for the value itself). */
    readonly field: string,
    reason: string,
    /** What the field should have been, when its value was of the wrong type or range. */
    readonly expected?: string,
  ) {
    super(`${field}: ${reason}`);
  }
}

/** Checks one value of the format; throws SnapshotFormatError naming `field`. */
type Check = (value: unknown, field: string) => void;

function shown(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'string') return `the string ${JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}...` : value)}`;
  if (typeof value === 'object') return 'an object';
  return `${typeof value} ${String(value)}`;
}

function wrong(field: string, expected: string, value: unknown): never {
  throw new SnapshotFormatError(field, `expected ${expected}, got ${shown(value)}`, expected);
}

function numberCheck(options: { readonly min?: number; readonly integer?: boolean; readonly max?: number } = {}): Check {
  const { min, max, integer = false } = options;
  const expected = `${integer ? 'a whole number' : 'a number'}${min === undefined ? '' : ` >= ${min}`}${max === undefined ? '' : ` <= ${max}`}`;
  return (value, field) => {
    if (
      typeof value !== 'number' ||
      !Number.isFinite(value) ||
      (integer && !Number.isInteger(value)) ||
      (min !== undefined && value < min) ||
      (max !== undefined && value > max)
    )
      wrong(field, expected, value);
  };
}

function stringCheck(pattern?: RegExp, expected = 'a string'): Check {
  return (value, field) => {
    if (typeof value !== 'string' || (pattern !== undefined && !pattern.test(value))) wrong(field, expected, value);
  };
}

const booleanCheck: Check = (value, field) => {
  if (typeof value !== 'boolean') wrong(field, 'true or false', value);
};

const trueCheck: Check = (value, field) => {
  if (value !== true) wrong(field, 'true (or the field absent)', value);
};

function oneOf(values: readonly string[]): Check {
  return (value, field) => {
    if (typeof value !== 'string' || !values.includes(value)) wrong(field, `one of ${values.map((v) => `'${v}'`).join(', ')}`, value);
  };
}

function nullable(check: Check): Check {
  return (value, field) => {
    if (value === null) return;
    try {
      check(value, field);
    } catch (error) {
      // The value itself is wrong (not a field inside it): null would have done too, so say so.
      if (error instanceof SnapshotFormatError && error.field === field && error.expected !== undefined) wrong(field, `${error.expected} or null`, value);
      throw error;
    }
  };
}

function arrayOf(check: Check): Check {
  return (value, field) => {
    if (!Array.isArray(value)) wrong(field, 'an array', value);
    for (let i = 0; i < value.length; i++) check(value[i], `${field}[${i}]`);
  };
}

/** An object with exactly these fields (`optional` ones may be absent), as the schema's additionalProperties: false. */
function objectCheck(fields: Readonly<Record<string, Check>>, optional: Readonly<Record<string, Check>> = {}): Check {
  return (value, field) => {
    if (typeof value !== 'object' || value === null || Array.isArray(value)) wrong(field, 'an object', value);
    const record = value as Record<string, unknown>;
    const at = (key: string): string => (field === 'snapshot' ? key : `${field}.${key}`);
    for (const [key, check] of Object.entries(fields)) {
      if (!Object.hasOwn(record, key)) throw new SnapshotFormatError(at(key), 'missing');
      check(record[key], at(key));
    }
    for (const key of Object.keys(record)) {
      if (Object.hasOwn(fields, key)) continue;
      const check = Object.hasOwn(optional, key) ? optional[key] : undefined;
      if (check === undefined) throw new SnapshotFormatError(at(key), 'not a field of the snapshot format');
      check(record[key], at(key));
    }
  };
}

const address = numberCheck({ min: 0, max: Number.MAX_SAFE_INTEGER, integer: true });
const bytes = numberCheck({ min: 0 });
const time = numberCheck({ min: 0 });
const id = numberCheck({ min: 1, integer: true });
const stackId = nullable(numberCheck({ min: 0, integer: true }));
const count = numberCheck({ min: 0, integer: true });
const counter = objectCheck({ value: numberCheck(), peak: numberCheck(), total: numberCheck() });

const driverCalls = objectCheck({ create: count, map: count, unmap: count, setAccess: count, release: count });

const figuresCheck = objectCheck(
  { allocatedBytes: counter, allocations: counter, reservedBytes: bytes, peakReservedBytes: bytes },
  { allocationRetries: count, limitBytes: bytes, pageMoves: count, driverCalls, reservedFromAllocated: trueCheck },
);

const pageRun: Check = (value, field) => {
  if (!Array.isArray(value) || value.length !== 2) wrong(field, '[first page, page count]', value);
  numberCheck({ min: 0, integer: true })(value[0], `${field}[0]`);
  numberCheck({ min: 1, integer: true })(value[1], `${field}[1]`);
};

const segmentCheck = objectCheck({
  address,
  bytes,
  kind: oneOf(['virtual-range', 'chunk', 'region', 'allocation', 'graph-pool']),
  pages: nullable(objectCheck({ pageBytes: numberCheck({ min: 1, integer: true }), mapped: arrayOf(pageRun) })),
  blocks: arrayOf(
    objectCheck({
      address,
      bytes,
      requestedBytes: nullable(bytes),
      state: oneOf(['live', 'free', 'parked']),
      stream: nullable(numberCheck({ min: 0 })),
      stack: stackId,
    }),
  ),
});

const resourceCheck = objectCheck({
  id,
  label: stringCheck(),
  className: stringCheck(),
  kind: stringCheck(),
  device: numberCheck({ min: -1, integer: true }),
  upstream: nullable(id),
  current: booleanCheck,
  status: oneOf(['active', 'destroyed', 'collected']),
  figures: nullable(figuresCheck),
  segments: nullable(arrayOf(segmentCheck)),
  baseline: nullable(objectCheck({ time, allocatedBytes: nullable(bytes), reservedBytes: nullable(bytes) })),
});

const eventFields = objectCheck({
  kind: oneOf(['alloc', 'free', 'oom', 'reserve', 'release', 'spill', 'reload']),
  address: nullable(address),
  bytes,
  stream: numberCheck({ min: 0 }),
  time,
  resource: id,
  stack: stackId,
});
const eventCheck: Check = (value, field) => {
  eventFields(value, field);
  const event = value as HistoryEvent;
  const placed = event.kind === 'alloc' || event.kind === 'free' || event.kind === 'spill' || event.kind === 'reload';
  if (placed !== (event.address !== null)) {
    wrong(
      `${field}.address`,
      placed ? `an address for a${event.kind === 'alloc' ? 'n' : ''} ${event.kind} event` : `null for a${event.kind === 'oom' ? 'n' : ''} ${event.kind} event`,
      event.address,
    );
  }
};

const snapshotCheck = objectCheck({
  version: (value, field) => {
    if (value !== SNAPSHOT_VERSION) throw new SnapshotFormatError(field, `this vram reads snapshot version ${SNAPSHOT_VERSION}, got ${shown(value)}`);
  },
  createdAt: stringCheck(/^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?Z$/, 'an ISO 8601 time in UTC'),
  time,
  timeOrigin: time,
  backend: stringCheck(),
  device: numberCheck({ min: 0, integer: true }),
  trigger: objectCheck({
    kind: oneOf(['request', 'out-of-memory']),
    error: nullable(objectCheck({ message: stringCheck(), requestedBytes: bytes, reason: stringCheck(), call: stringCheck(), resource: id })),
  }),
  currentResource: nullable(id),
  resources: arrayOf(resourceCheck),
  blocks: arrayOf(objectCheck({ address, bytes, stream: nullable(numberCheck({ min: 0 })), time: nullable(time), resource: id, stack: stackId })),
  stacks: arrayOf(objectCheck({ id: numberCheck({ min: 0, integer: true }), frames: arrayOf(stringCheck()) })),
  history: nullable(
    objectCheck({
      recording: booleanCheck,
      maxEntries: numberCheck({ min: 1, integer: true }),
      stacks: booleanCheck,
      startTime: time,
      recorded: count,
      dropped: count,
      events: arrayOf(eventCheck),
    }),
  ),
});

/**
 * Checks that `value` is a snapshot of this format, field by field as docs/snapshot-schema.json
 * says (types, ranges, enumerations, no unknown fields), and that following `upstream` from any
 * resource ends (a reader walks it). Call it on anything parsed from a file before reading it.
 *
 * @param value A parsed snapshot (e.g. `JSON.parse` of a `VRAM_OOM_SNAPSHOT` file).
 * @returns The same value, typed.
 * @throws {SnapshotFormatError} Naming the first field that is wrong and what it should be.
 * @example
 * ```ts
 * const snapshot = validateSnapshot(JSON.parse(readFileSync('oom.json', 'utf8')));
 * ```
 */
export function validateSnapshot(value: unknown): MemorySnapshot {
  snapshotCheck(value, 'snapshot');
  const snapshot = value as MemorySnapshot;
  const upstreamOf = new Map(snapshot.resources.map((r) => [r.id, r.upstream]));
  snapshot.resources.forEach((r, i) => {
    const seen = new Set<number>([r.id]);
    for (let up = r.upstream; up !== null; up = upstreamOf.get(up) ?? null) {
      if (seen.has(up)) throw new SnapshotFormatError(`resources[${i}].upstream`, `the upstream chain of resource ${r.id} comes back to resource ${up}`);
      seen.add(up);
    }
  });
  return snapshot;
}
