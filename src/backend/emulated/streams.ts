/**
 * Stream order, emulated. Asynchronous work is queued per stream and runs later, in order: when
 * the stream, an event on it, or its context is synchronised or queried, when another stream waits
 * on an event recorded on it, and before any synchronous operation that touches memory. Each queued
 * operation carries the points of other streams it depends on (`streamWaitEvent`, and the legacy
 * default stream's implicit synchronisation with blocking streams), and those run first.
 *
 * An operation may also carry a condition (cuStreamWaitValue32): while it is false the operation
 * is held, and so is everything behind it: running a queue stops there, and work on other streams
 * that depends on a point past it stops too. Nothing is lost: the next time anyone runs the queue
 * (a sync point) the condition is read again, so once the host writes the value the work runs.
 */

import type { CaptureState } from './graphs.js';
import type { Hold } from './hold.js';

/** A capture sequence over these streams. */
export type StreamCapture = CaptureState<StreamState>;

/** A point in a stream's order: everything enqueued on `stream` before `position` ran. */
export interface StreamPoint {
  readonly stream: StreamState;
  readonly position: number;
}

/** One queued operation: its dependencies on other streams, its condition, then its effect (if any). */
interface Operation {
  readonly deps: readonly StreamPoint[] | undefined;
  readonly hold: Hold | undefined;
  readonly run: (() => void) | undefined;
}

/** A stream's queue and progress. */
export class StreamState {
  private queue: (Operation | undefined)[] = [];
  private head = 0;
  /** How many operations were ever enqueued. */
  enqueued = 0;
  /** How many have run. */
  executed = 0;
  /** Set by streamDestroy. */
  destroyed = false;
  /** The capture sequence the stream records into (graphs.ts); undefined when not capturing. */
  capture: StreamCapture | undefined = undefined;
  /** While capturing: the nodes the stream's next node depends on. */
  frontier: readonly number[] = [];
  /** True while runTo runs this queue (a hold's progress may come back to it: it then waits). */
  private running = false;

  constructor(
    /** The stream's handle (0 for a context's legacy default stream). */
    readonly handle: number,
    /** CU_STREAM_* flags. */
    readonly flags: number,
    /** The clamped priority. */
    readonly priority: number,
    /** Handle of the context the stream belongs to. */
    readonly context: number,
    /** True for the legacy default stream. */
    readonly legacy: boolean,
  ) {}

  /** True for streams that synchronise with the legacy default stream (not NON_BLOCKING). */
  get blocking(): boolean {
    return (this.flags & 1) === 0;
  }

  /** True when every enqueued operation has run. */
  get idle(): boolean {
    return this.executed === this.enqueued;
  }

  /** Appends an operation; returns the stream point just after it. */
  push(run: (() => void) | undefined, deps: readonly StreamPoint[] | undefined, hold?: Hold): StreamPoint {
    this.queue.push({ run, deps, hold });
    this.enqueued++;
    return { stream: this, position: this.enqueued };
  }

  /**
   * Runs queued operations until `position` operations have run, or until one is held (its
   * condition is false, or a point it depends on is held). True when `position` was reached.
   */
  runTo(position: number): boolean {
    // Dependencies are points enqueued before the operation that has them, so a run that comes
    // back to this queue meanwhile (through them, or a hold's progress) never needs to run more.
    if (this.running) return this.executed >= position;
    this.running = true;
    let reached = true;
    try {
      while (this.executed < position) {
        const op = this.queue[this.head];
        if (op !== undefined && !this.satisfied(op)) {
          reached = false;
          break;
        }
        this.queue[this.head] = undefined;
        this.head++;
        try {
          op?.run?.();
        } finally {
          // A kernel's JavaScript may throw (a fault, reported at the synchronising call as on a
          // GPU): the operation still counts as run, so the queue stays consistent behind it.
          this.executed++;
        }
      }
    } finally {
      this.running = false;
    }
    if (this.head > 1024 && this.head * 2 > this.queue.length) {
      this.queue = this.queue.slice(this.head);
      this.head = 0;
    }
    return reached;
  }

  /** Runs everything enqueued so far that can run; true when nothing is left (not held). */
  drain(): boolean {
    return this.runTo(this.enqueued);
  }

  /**
   * What holds the stream at its next operation, after a run stopped there: the description of
   * the unsatisfied wait, followed through the points it depends on; undefined when nothing does.
   */
  heldBy(): string | undefined {
    if (this.idle) return undefined;
    const op = this.queue[this.head];
    if (op === undefined) return undefined;
    if (op.deps !== undefined) {
      for (const d of op.deps) if (d.stream.executed < d.position) return d.stream.heldBy();
    }
    if (op.hold !== undefined && !op.hold.ready()) return op.hold.describe();
    return undefined;
  }

  /**
   * Runs the operation's dependencies and reads its condition (again after letting the other
   * streams run, when it is false at first): true when the operation may run now.
   */
  private satisfied(op: Operation): boolean {
    if (op.deps !== undefined) for (const d of op.deps) if (!d.stream.runTo(d.position)) return false;
    const hold = op.hold;
    if (hold === undefined || hold.ready()) return true;
    hold.progress();
    return hold.ready();
  }
}

/** An event: the stream point of its latest record, and when that point ran. */
/** An interprocess event's shared words and how to let go of them (unmap) when it is destroyed. */
export interface SharedEventWords {
  readonly words: Int32Array;
  readonly release: () => void;
}

/** A CUDA event of the emulation. */
export class EventState {
  /** Where the latest record was enqueued; undefined until first recorded. */
  recordedAt: StreamPoint | undefined;
  /** Bumped by each record, so an older record completing does not complete a newer one. */
  generation = 0;
  /** True when the latest record has run. */
  completed = false;
  /** performance.now() when the latest record ran. */
  time = 0;
  /**
   * Set once the event is shared with other processes (ipc-calls.ts): two 32-bit words in shared memory,
   * [0] the number of the latest record in any process, [1] the number of the latest record whose
   * work has run. Records, queries and waits then go by these words too.
   */
  shared: SharedEventWords | undefined;
  /** Set when the latest record was captured: the capture and the nodes before the record. */
  captured: { readonly capture: StreamCapture; readonly frontier: readonly number[] } | undefined;

  constructor(
    /** The event's handle. */
    readonly handle: number,
    /** CU_EVENT_* flags. */
    readonly flags: number,
  ) {}

  /** True when created with CU_EVENT_DISABLE_TIMING. */
  get timingDisabled(): boolean {
    return (this.flags & 0x2) !== 0;
  }
}

/** The set of streams of one backend, and the legacy default stream rules between them. */
export class Scheduler {
  private readonly streams = new Set<StreamState>();

  /** Tracks a new stream (including legacy default streams). */
  add(stream: StreamState): void {
    this.streams.add(stream);
  }

  /**
   * Destroys a stream: its work runs, as cuStreamDestroy lets it finish. Work held by a wait
   * value stays queued (the driver also returns at once and finishes it later, as probed on an
   * H100): the stream is forgotten once a later run completes it.
   */
  remove(stream: StreamState): void {
    stream.destroyed = true;
    if (stream.drain()) this.streams.delete(stream);
  }

  /**
   * Enqueues `run` on `stream` after `extraDeps`, adding the legacy default stream's implicit
   * synchronisation: work on the legacy stream waits for all blocking streams of its context, and
   * work on a blocking stream waits for the legacy stream's earlier work.
   */
  enqueue(stream: StreamState, run: (() => void) | undefined, extraDeps?: readonly StreamPoint[], legacy?: StreamState, hold?: Hold): StreamPoint {
    let deps: StreamPoint[] | undefined = extraDeps === undefined ? undefined : [...extraDeps];
    if (stream.legacy) {
      for (const s of this.streams) {
        if (s !== stream && s.blocking && !s.idle && s.context === stream.context) {
          (deps ??= []).push({ stream: s, position: s.enqueued });
        }
      }
    } else if (stream.blocking && legacy !== undefined && !legacy.idle) {
      (deps ??= []).push({ stream: legacy, position: legacy.enqueued });
    }
    return stream.push(run, deps, hold);
  }

  /**
   * Runs all queued work on every stream, except work held by a wait value (and what depends on
   * it), which stays queued. Destroyed streams whose held work has now run are forgotten.
   */
  drainAll(): void {
    let progress = true;
    while (progress) {
      progress = false;
      for (const s of this.streams) {
        if (s.idle) continue;
        const before = s.executed;
        if (s.drain() && s.destroyed) this.streams.delete(s);
        if (s.executed !== before) progress = true;
      }
    }
  }

  /** Runs all queued work on the streams of one context (except work held by a wait value). */
  drainContext(context: number): void {
    for (const s of this.streams) if (s.context === context) s.drain();
  }

  /** The streams of `context`, destroyed ones with held work included. */
  *streamsOf(context: number): IterableIterator<StreamState> {
    for (const s of this.streams) if (s.context === context) yield s;
  }

  /**
   * The first stream of `context` that still has queued work (after a drainAll: work held by a
   * wait value) and that `waitsFor` says the caller would wait for; undefined when none.
   */
  held(context: number, waitsFor: (stream: StreamState) => boolean): StreamState | undefined {
    for (const s of this.streams) if (s.context === context && !s.idle && waitsFor(s)) return s;
    return undefined;
  }
}
