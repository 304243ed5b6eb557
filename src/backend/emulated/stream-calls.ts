/**
 * The emulated driver's stream and event calls: creation and destruction, ordering between
 * streams, and the deterministic rule that queries and synchronisations run queued work now.
 */
import type { Handle } from '../backend.js';
import { CUresult } from '../../errors.js';
import { fail, invalidValue } from './fail.js';
import type { EmulatedState } from './state.js';
import { EventState, StreamState } from './streams.js';

/** Which stream priorities streamCreate accepts: [least, greatest]. */
const PRIORITY_RANGE = [0, -5] as const;

/** Streams and events of one emulated driver. */
export class StreamCalls {
  constructor(private readonly s: EmulatedState) {}

  /** cuStreamCreateWithPriority: priority is clamped to [0, -5] as the driver clamps. */
  streamCreate(flags: number, priority: number): Handle {
    const call = 'cuStreamCreateWithPriority';
    if (flags !== 0 && flags !== 1) invalidValue(call, `unknown stream flags ${flags}`);
    if (!Number.isInteger(priority)) invalidValue(call, `priority must be a whole number, got ${priority}`);
    const ctx = this.s.ctx(call);
    const clamped = Math.min(PRIORITY_RANGE[0], Math.max(PRIORITY_RANGE[1], priority));
    const stream = new StreamState(this.s.handle(), flags, clamped, ctx.handle, false);
    this.s.streams.set(stream.handle, stream);
    this.s.scheduler.add(stream);
    return stream.handle;
  }

  /** cuStreamDestroy: the stream's queued work still runs (now). */
  streamDestroy(stream: Handle): void {
    const s = this.s.streams.get(stream);
    if (s === undefined) {
      // Not the legacy stream either: 0 is not a stream that can be destroyed.
      if (this.s.destroyedStreams.has(stream)) fail(CUresult.INVALID_CONTEXT, 'cuStreamDestroy', `stream ${stream} was destroyed`);
      fail(CUresult.INVALID_HANDLE, 'cuStreamDestroy', `unknown stream ${stream}`);
    }
    this.s.scheduler.remove(s);
    this.s.streams.delete(stream);
    this.s.destroyedStreams.add(stream);
  }

  /** cuStreamSynchronize: runs the stream's work, then releases pool memory above thresholds. */
  streamSynchronize(stream: Handle): void {
    this.s.stream(stream, 'cuStreamSynchronize').drain();
    this.s.releasePools();
  }

  /**
   * cuStreamQuery. Deterministic rule: a query runs the stream's queued work and reports true
   * (the emulated device finishes work as soon as anyone looks).
   */
  streamQuery(stream: Handle): boolean {
    this.s.stream(stream, 'cuStreamQuery').drain();
    return true;
  }

  /** cuStreamWaitEvent: later work on `stream` runs after the event's recorded point. */
  streamWaitEvent(stream: Handle, event: Handle): void {
    const call = 'cuStreamWaitEvent';
    const s = this.s.stream(stream, call);
    const e = this.s.event(event, call);
    if (e.recordedAt === undefined || e.completed) return;
    this.s.enqueue(s, undefined, [e.recordedAt]);
  }

  /** [0, -5], as current GPUs report. */
  streamPriorityRange(): readonly [least: number, greatest: number] {
    return PRIORITY_RANGE;
  }

  /** cuEventCreate. */
  eventCreate(flags: number): Handle {
    if (!Number.isInteger(flags) || (flags & ~0x7) !== 0) invalidValue('cuEventCreate', `unknown event flags ${flags}`);
    if ((flags & 0x4) !== 0 && (flags & 0x2) === 0) invalidValue('cuEventCreate', 'INTERPROCESS events need DISABLE_TIMING');
    this.s.ctx('cuEventCreate');
    const e = new EventState(this.s.handle(), flags);
    this.s.events.set(e.handle, e);
    return e.handle;
  }

  /** cuEventDestroy. */
  eventDestroy(event: Handle): void {
    this.s.event(event, 'cuEventDestroy');
    this.s.events.delete(event);
    this.s.destroyedEvents.add(event);
  }

  /** cuEventRecord: the event completes (and takes its time) when the stream reaches it. */
  eventRecord(event: Handle, stream: Handle): void {
    const call = 'cuEventRecord';
    const e = this.s.event(event, call);
    const s = this.s.stream(stream, call);
    const generation = ++e.generation;
    e.completed = false;
    e.recordedAt = this.s.enqueue(s, () => {
      if (e.generation !== generation) return;
      e.completed = true;
      e.time = performance.now();
    });
  }

  /** cuEventQuery: like streamQuery, runs the work up to the event and reports true. */
  eventQuery(event: Handle): boolean {
    this.runToEvent(this.s.event(event, 'cuEventQuery'));
    return true;
  }

  /** cuEventSynchronize: runs the work up to the event, then releases pool memory above thresholds. */
  eventSynchronize(event: Handle): void {
    this.runToEvent(this.s.event(event, 'cuEventSynchronize'));
    this.s.releasePools();
  }

  /**
   * cuEventElapsedTime: milliseconds between the moments the two records ran. Unrecorded events
   * and events without timing are CUDA_ERROR_INVALID_HANDLE; records not run yet CUDA_ERROR_NOT_READY.
   */
  eventElapsedTime(start: Handle, end: Handle): number {
    const call = 'cuEventElapsedTime';
    const a = this.s.event(start, call);
    const b = this.s.event(end, call);
    for (const e of [a, b]) {
      if (e.timingDisabled) fail(CUresult.INVALID_HANDLE, call, 'the event was created with DISABLE_TIMING');
      if (e.recordedAt === undefined) fail(CUresult.INVALID_HANDLE, call, 'the event has not been recorded');
    }
    if (!a.completed || !b.completed) fail(CUresult.NOT_READY, call);
    return b.time - a.time;
  }

  private runToEvent(e: EventState): void {
    if (e.recordedAt !== undefined) e.recordedAt.stream.runTo(e.recordedAt.position);
  }
}
