/**
 * Stream order, emulated. Asynchronous work is queued per stream and runs later, in order: when
 * the stream, an event on it, or its context is synchronised or queried, when another stream waits
 * on an event recorded on it, and before any synchronous operation that touches memory. Each queued
 * operation carries the points of other streams it depends on (`streamWaitEvent`, and the legacy
 * default stream's implicit synchronisation with blocking streams), and those run first.
 */

/** A point in a stream's order: everything enqueued on `stream` before `position` ran. */
export interface StreamPoint {
  readonly stream: StreamState;
  readonly position: number;
}

/** One queued operation: its dependencies on other streams, then its effect (if any). */
interface Operation {
  readonly deps: readonly StreamPoint[] | undefined;
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
  push(run: (() => void) | undefined, deps: readonly StreamPoint[] | undefined): StreamPoint {
    this.queue.push({ run, deps });
    this.enqueued++;
    return { stream: this, position: this.enqueued };
  }

  /** Runs queued operations until `position` operations have run. */
  runTo(position: number): void {
    while (this.executed < position) {
      const op = this.queue[this.head];
      this.queue[this.head] = undefined;
      this.head++;
      if (op !== undefined) {
        if (op.deps !== undefined) for (const d of op.deps) d.stream.runTo(d.position);
        op.run?.();
      }
      this.executed++;
    }
    if (this.head > 1024 && this.head * 2 > this.queue.length) {
      this.queue = this.queue.slice(this.head);
      this.head = 0;
    }
  }

  /** Runs everything enqueued so far. */
  drain(): void {
    this.runTo(this.enqueued);
  }
}

/** An event: the stream point of its latest record, and when that point ran. */
export class EventState {
  /** Where the latest record was enqueued; undefined until first recorded. */
  recordedAt: StreamPoint | undefined;
  /** Bumped by each record, so an older record completing does not complete a newer one. */
  generation = 0;
  /** True when the latest record has run. */
  completed = false;
  /** performance.now() when the latest record ran. */
  time = 0;

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

  /** Runs the stream's work and forgets it. */
  remove(stream: StreamState): void {
    stream.drain();
    stream.destroyed = true;
    this.streams.delete(stream);
  }

  /**
   * Enqueues `run` on `stream` after `extraDeps`, adding the legacy default stream's implicit
   * synchronisation: work on the legacy stream waits for all blocking streams of its context, and
   * work on a blocking stream waits for the legacy stream's earlier work.
   */
  enqueue(stream: StreamState, run: (() => void) | undefined, extraDeps?: readonly StreamPoint[], legacy?: StreamState): StreamPoint {
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
    return stream.push(run, deps);
  }

  /** Runs all queued work on every stream. */
  drainAll(): void {
    let again = true;
    while (again) {
      again = false;
      for (const s of this.streams) {
        if (!s.idle) {
          s.drain();
          again = true;
        }
      }
    }
  }

  /** Runs all queued work on the streams of one context. */
  drainContext(context: number): void {
    for (const s of this.streams) if (s.context === context) s.drain();
  }
}
