/**
 * Stream order for every caching resource, in one place (RMM keeps it in
 * stream_ordered_memory_resource; here the pool, the arena, the fixed-size resource and the pinned
 * host pool all use this). A caching resource keeps what was freed on a stream in a "lane" for
 * that stream: those blocks may be reused on the same stream at once, because anything queued
 * there later runs after the work that used them. Everything else goes through this class:
 *
 * - `join(lane, waiter)`: another stream takes the lane's blocks. An event is recorded on the
 *   lane's stream (capturing every free made there so far) and the taking stream waits on it. No
 *   host synchronisation, and no event per free, so the allocation hit path makes no driver call.
 * - `settle(lane)`: memory of the lane goes back upstream. Returned on the lane's own stream, it
 *   stays in order; a retired lane's memory is first joined into the default stream.
 * - `hostWait(lane)` / `passed(lane)`: the host itself must not touch memory (unmap a page, write a
 *   staging buffer) before the lane's queued work has run.
 * - `retire(lane)`: the lane's stream is about to be destroyed. Its handle must never be used again
 *   (the driver may crash on a destroyed stream or give the handle to a new stream), so one last
 *   event is recorded while it is valid, and from then on only that event is waited on. The blocks
 *   are not lost and not poisoned: any stream may still take them after waiting on that event.
 */
import { EventFlags } from '../backend/backend.js';
import type { JoinClock } from './join-clock.js';

/** The driver calls stream order needs; a Backend has them. */
export interface OrderEvents {
  eventCreate(flags: number): number;
  eventRecord(event: number, stream: number): void;
  eventQuery(event: number): boolean;
  eventSynchronize(event: number): void;
  eventDestroy(event: number): void;
  streamWaitEvent(stream: number, event: number): void;
}

/**
 * Memory freed on one stream and not yet handed to another. `stream` is the handle (-1: memory no
 * stream has used, which needs no wait); `event` is a reusable event on it (0 until first needed);
 * `retired` is set when the stream was destroyed, after which `event` marks the end of its work.
 */
export interface Lane {
  readonly stream: number;
  event: number;
  retired: boolean;
  /**
   * The lane's join clock, where the resource keeps one (setting `freed` on every free into the
   * lane): joins and host waits that would order nothing new are then left out.
   */
  readonly clock?: JoinClock;
}

/** The stream handle of memory that no stream has touched. */
export const NO_STREAM = -1;

/**
 * The stream-ordering operations of one resource, with counts of what they cost.
 *
 * @example
 * ```ts
 * const order = new StreamOrder(device.backend);
 * const lane: Lane = { stream: streamA.handle, event: 0, retired: false }; // blocks freed on stream A
 * order.join(lane, streamB.handle); // stream B may now reuse them
 * ```
 */
export class StreamOrder {
  /** Times a stream waited on another's event (a cross-stream reuse). */
  joins = 0;
  /** Times the host blocked on an event because the work had not completed yet. */
  hostWaits = 0;
  /** Events recorded on a lane's stream (for joins, host waits and retirement). */
  records = 0;

  /**
   * @param events The backend of the resource's device.
   * @throws Never: no driver call is made until an operation needs one.
   * @example
   * ```ts
   * const order = new StreamOrder(Device.get(0).backend);
   * ```
   */
  constructor(private readonly events: OrderEvents) {}

  /**
   * Makes stream `waiter` wait for all work queued so far on `lane`'s stream (for a retired lane:
   * all work queued before its stream was destroyed). Nothing to do for the lane's own stream or
   * for untouched memory.
   * @param lane The lane whose memory `waiter` takes.
   * @param waiter The taking stream's handle.
   * @param waiterLane The taking stream's own lane, when the resource keeps join clocks: what its
   *   stream already follows is not joined again.
   * @throws {CudaError} When the driver refuses an event call.
   * @example
   * ```ts
   * order.join(lane, stream.handle); // before handing the lane's block out on `stream`
   * ```
   */
  join(lane: Lane, waiter: number, waiterLane?: Lane): void {
    const clock = lane.clock;
    const follower = waiterLane?.clock;
    if (!lane.retired) {
      if (lane.stream === waiter || lane.stream === NO_STREAM) return;
      // Nothing freed into the lane since a record its taker already follows: no record, no wait.
      if (clock !== undefined && follower !== undefined && follower.followsAll(clock)) return;
      // Nothing freed since the last record: the taker waits on that one.
      if (clock === undefined || clock.freed || clock.epoch === 0) this.mark(lane);
    } else if (clock !== undefined && follower !== undefined && follower.followsLast(clock)) {
      return;
    }
    this.events.streamWaitEvent(waiter, lane.event);
    this.joins++;
    if (clock !== undefined && follower !== undefined) follower.waited(clock);
  }

  /**
   * The stream on which the lane's memory may be given back upstream, in order: its own stream
   * while it lives, else the default stream after joining the lane's last event.
   * @param lane The lane whose memory goes back.
   * @returns A live stream handle (0 for the default stream).
   * @throws {CudaError} When the driver refuses an event call.
   * @example
   * ```ts
   * upstream.deallocate(ptr, bytes, order.settle(lane));
   * ```
   */
  settle(lane: Lane): number {
    if (!lane.retired) return lane.stream === NO_STREAM ? 0 : lane.stream;
    this.join(lane, 0);
    return 0;
  }

  /**
   * Records, now, the point after which the lane's memory is free of queued work (for `passed`
   * and `hostWait` later, e.g. a pinned buffer given back with a stream).
   * @param lane The lane.
   * @throws {CudaError} When the driver refuses an event call.
   * @example
   * ```ts
   * order.mark(lane); // the block was given back with `stream`: its copies are queued before this point
   * ```
   */
  mark(lane: Lane): void {
    if (lane.retired || lane.stream === NO_STREAM) return;
    if (lane.event === 0) lane.event = this.events.eventCreate(EventFlags.DISABLE_TIMING);
    this.events.eventRecord(lane.event, lane.stream);
    this.records++;
    lane.clock?.recorded();
  }

  /**
   * True when the work marked on the lane has completed (a query, never a wait).
   * @param lane A lane marked with `mark` (or retired).
   * @returns Whether the host may touch the lane's memory now.
   * @throws {CudaError} When the driver refuses an event call.
   * @example
   * ```ts
   * if (order.passed(lane)) reuseForHostWrites(ptr); // else take another buffer instead of waiting
   * ```
   */
  passed(lane: Lane): boolean {
    return lane.event === 0 || this.events.eventQuery(lane.event);
  }

  /**
   * Blocks the host until the lane's queued work has completed: recorded now, then queried, and
   * waited on only if still pending.
   * @param lane The lane.
   * @param markFirst Record a new event first (false: wait for the last `mark`).
   * @throws {CudaError} When the driver refuses an event call.
   * @example
   * ```ts
   * order.hostWait(lane); // before unmapping the lane's pages
   * ```
   */
  hostWait(lane: Lane, markFirst = true): void {
    // A lane with a join clock and nothing freed since its last record: that record covers its memory.
    const clock = lane.clock;
    if (markFirst && (clock === undefined || clock.freed || clock.epoch === 0)) this.mark(lane);
    if (this.passed(lane)) return;
    this.events.eventSynchronize(lane.event);
    this.hostWaits++;
  }

  /**
   * The lane's stream is being destroyed: record its last event while the handle is valid.
   * @param lane The lane.
   * @throws {CudaError} When the driver refuses an event call.
   * @example
   * ```ts
   * order.retire(lane); // from a stream's destroy hook, before cuStreamDestroy
   * ```
   */
  retire(lane: Lane): void {
    if (lane.retired) return;
    this.mark(lane);
    lane.retired = true;
  }

  /**
   * Destroys the lane's event (the lane is going away).
   * @param lane The lane.
   * @throws {CudaError} When the driver refuses an event call.
   * @example
   * ```ts
   * order.release(lane); // its blocks went back upstream
   * ```
   */
  release(lane: Lane): void {
    if (lane.event !== 0) this.events.eventDestroy(lane.event);
    lane.event = 0;
  }
}
