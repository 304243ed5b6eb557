/**
 * The emulated driver's stream and event calls: creation and destruction, ordering between
 * streams, and the deterministic rule that queries and synchronisations run queued work now.
 */
import type { Handle, Ptr } from '../backend.js';
import { checkStreamValue32 } from '../argument-checks.js';
import { LiveStreams } from '../live-streams.js';
import { CUresult } from '../../errors.js';
import { fail, hex, invalidValue } from './fail.js';
import type { EmulatedState } from './state.js';
import type { Span } from './store.js';
import type { Hold } from './hold.js';
import { EventState, StreamState } from './streams.js';

/** Which stream priorities streamCreate accepts: [least, greatest]. */
const PRIORITY_RANGE = [0, -5] as const;

/** Streams and events of one emulated driver. */
export class StreamCalls {
  /** Streams created here or adopted, and not destroyed or forgotten: what streamKnown vouches for. */
  private readonly live = new LiveStreams();

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
    this.live.hold(stream.handle);
    return stream.handle;
  }

  /**
   * The legacy stream (0), or a live stream of this driver that was created here or adopted and
   * not forgotten: a lookup, as the CUDA backend's (a destroyed context took its streams along).
   */
  streamKnown(stream: Handle): boolean {
    return stream === 0 || (this.live.has(stream) && this.s.streams.has(stream));
  }

  /**
   * Vouches for a stream made elsewhere; unlike the cuda backend, this driver can tell whether
   * the handle names one of its streams, and refuses it (as cuStreamQuery would) when not.
   */
  adoptStream(stream: Handle): void {
    if (stream === 0) return;
    this.s.stream(stream, 'adoptStream');
    this.live.hold(stream);
  }

  /** Withdraws one vouching (see Backend.forgetStream). */
  forgetStream(stream: Handle): void {
    this.live.release(stream);
  }

  /** cuStreamGetFlags (the legacy stream: 0). */
  streamGetFlags(stream: Handle): number {
    return this.s.stream(stream, 'cuStreamGetFlags').flags;
  }

  /** cuStreamGetPriority: the priority as clamped at creation (the legacy stream: 0). */
  streamGetPriority(stream: Handle): number {
    return this.s.stream(stream, 'cuStreamGetPriority').priority;
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
    this.live.destroyed(stream);
  }

  /**
   * cuStreamSynchronize: runs the stream's work (for the legacy default stream, its blocking
   * streams' work too), then releases pool memory above thresholds. Work held by a wait value the
   * host has not released fails with CUDA_ERROR_NOT_READY (a GPU would wait forever).
   */
  streamSynchronize(stream: Handle): void {
    const call = 'cuStreamSynchronize';
    const st = this.s.stream(stream, call);
    this.s.unsafe(call, st);
    const held = this.s.runStream(st);
    if (held !== undefined) this.s.heldError(call, held);
    this.s.releasePools();
  }

  /**
   * cuStreamQuery. Deterministic rule: a query runs the stream's queued work and reports true
   * (the emulated device finishes work as soon as anyone looks), or false while a wait value
   * holds some of it.
   */
  streamQuery(stream: Handle): boolean {
    const s = this.s.stream(stream, 'cuStreamQuery');
    if (s.capture !== undefined) this.s.unsafe('cuStreamQuery', s);
    return this.s.runStream(s) === undefined;
  }

  /** cuStreamWaitEvent: later work on `stream` runs after the event's recorded point. */
  streamWaitEvent(stream: Handle, event: Handle): void {
    const call = 'cuStreamWaitEvent';
    const s = this.s.stream(stream, call);
    const e = this.s.event(event, call);
    if (this.joinCapture(s, e, call)) return;
    const shared = e.shared?.words;
    if (shared !== undefined) {
      // An interprocess event: wait for the latest record of any process, read from shared memory.
      const target = Atomics.load(shared, 0);
      if (Atomics.load(shared, 1) >= target) return;
      const deps = e.recordedAt === undefined || e.completed ? undefined : [e.recordedAt];
      this.s.enqueue(s, undefined, deps, {
        ready: () => Atomics.load(shared, 1) >= target,
        progress: () => this.s.scheduler.drainAll(),
        describe: () => `interprocess event ${event}, whose work another process has not run yet (it runs when that process synchronises)`,
      });
      return;
    }
    if (e.recordedAt === undefined || e.completed) return;
    this.s.enqueue(s, undefined, [e.recordedAt]);
  }

  /**
   * cuStreamWaitValue32: later work on the stream is held until the 32-bit word at `addr`
   * satisfies the condition. The word is read whenever the queue runs (at sync points and
   * queries), so a value the host writes releases the stream at the next one.
   */
  streamWaitValue32(stream: Handle, addr: Ptr, value: number, flags: number): void {
    const call = 'cuStreamWaitValue32';
    checkStreamValue32('streamWaitValue32', addr, value, flags);
    const s = this.s.stream(stream, call);
    const spans = this.word(addr, false, call);
    const test = WAIT_CONDITIONS[flags]!;
    const ready = (): boolean => test(readWord(spans), value);
    const describe = (): string =>
      `the cuStreamWaitValue32 on ${this.s.streamName(s)} for the word at ${hex(addr)} ${WAIT_NAMES[flags]!(value)} (it is ${readWord(spans)})`;
    const progress = (): void => this.s.scheduler.drainAll();
    this.s.enqueue(s, undefined, undefined, { ready, progress, describe }, call);
  }

  /**
   * cuLaunchHostFunc: `fn` runs when the stream reaches it, but not before the event loop's next
   * turn, as on a GPU (the driver's thread waits for JavaScript's main thread): a synchronous wait
   * for it before then fails with CUDA_ERROR_NOT_READY, where a GPU would never return.
   */
  launchHostFunc(stream: Handle, fn: () => void): void {
    const call = 'cuLaunchHostFunc';
    if (typeof fn !== 'function') invalidValue(call, 'fn must be a function');
    const s = this.s.stream(stream, call);
    const makeHold = (): Hold => {
      let turned = false;
      setImmediate(() => {
        turned = true;
      });
      return {
        ready: () => turned,
        progress: () => this.s.scheduler.drainAll(),
        describe: () => `a host function (cuLaunchHostFunc), which runs on JavaScript's main thread when the event loop turns (await instead of synchronising)`,
      };
    };
    const capture = s.capture;
    if (capture !== undefined) {
      if (capture.invalidated) fail(CUresult.STREAM_CAPTURE_INVALIDATED, call, 'the capture this stream belongs to was invalidated');
      capture.record(s, 'host', fn, makeHold);
      return;
    }
    this.s.enqueue(s, fn, undefined, makeHold(), call);
  }

  /**
   * The capture side of cuStreamWaitEvent; true when it handled the wait. Waiting for an event
   * recorded in a capture joins the stream into it (or joins its work into the waiting stream's);
   * a capturing stream may not wait for an event recorded outside its capture.
   */
  private joinCapture(s: StreamState, e: EventState, call: string): boolean {
    const captured = e.captured;
    if (captured !== undefined && this.s.captures.has(captured.capture)) {
      const capture = captured.capture;
      if (capture.invalidated) fail(CUresult.STREAM_CAPTURE_INVALIDATED, call, 'the capture the event was recorded in was invalidated');
      if (s.capture === undefined) {
        s.capture = capture;
        s.frontier = captured.frontier;
        capture.streams.add(s);
      } else if (s.capture === capture) {
        s.frontier = [...new Set([...s.frontier, ...captured.frontier])];
      } else {
        s.capture.invalidated = true;
        fail(CUresult.STREAM_CAPTURE_MERGE, call, 'the event was recorded in another capture');
      }
      return true;
    }
    if (s.capture !== undefined) {
      s.capture.invalidated = true;
      fail(CUresult.STREAM_CAPTURE_ISOLATION, call, 'a capturing stream cannot wait for an event recorded outside its capture');
    }
    return false;
  }

  /** cuStreamWriteValue32: writes the 32-bit word at `addr` in stream order. */
  streamWriteValue32(stream: Handle, addr: Ptr, value: number, flags: number): void {
    const call = 'cuStreamWriteValue32';
    checkStreamValue32('streamWriteValue32', addr, value, flags);
    const s = this.s.stream(stream, call);
    const spans = this.word(addr, true, call);
    const bytes = new Uint8Array(4);
    new DataView(bytes.buffer).setUint32(0, value, true);
    this.s.enqueue(
      s,
      () => {
        for (const sp of spans) sp.store.write(sp.offset, bytes);
      },
      undefined,
      undefined,
      call,
    );
  }

  /**
   * The 4 bytes a stream memory operation reads or writes: device memory (plain, pool or mapped
   * virtual memory) or page-locked host memory (pinned or registered; its address is its device
   * address under unified addressing). Managed memory and pageable JavaScript memory are
   * CUDA_ERROR_INVALID_VALUE, as for the driver, which cannot use them there.
   */
  private word(addr: Ptr, write: boolean, call: string): Span[] {
    const a = this.s.lookup(addr);
    if (a === undefined && this.s.jsRange.contains(addr)) invalidValue(call, `${hex(addr)} is pageable host memory (register it first)`);
    if (a?.kind === 'managed') invalidValue(call, `${hex(addr)} is managed memory, which stream memory operations cannot use`);
    return this.s.spans(addr, 4, write, call);
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
    const e = this.s.event(event, 'cuEventDestroy');
    e.shared?.release();
    this.s.events.delete(event);
    this.s.destroyedEvents.add(event);
  }

  /** cuEventRecord: the event completes (and takes its time) when the stream reaches it. */
  eventRecord(event: Handle, stream: Handle): void {
    const call = 'cuEventRecord';
    const e = this.s.event(event, call);
    const s = this.s.stream(stream, call);
    if (s.capture !== undefined) {
      // Recorded in a capture: no node, a point in the graph that other streams may wait for.
      if (s.capture.invalidated) fail(CUresult.STREAM_CAPTURE_INVALIDATED, call, 'the capture this stream belongs to was invalidated');
      e.captured = { capture: s.capture, frontier: s.frontier };
      return;
    }
    e.captured = undefined;
    const generation = ++e.generation;
    e.completed = false;
    const shared = e.shared?.words;
    const sharedGeneration = shared === undefined ? 0 : Atomics.add(shared, 0, 1) + 1;
    e.recordedAt = this.s.enqueue(s, () => {
      // The other processes see this record complete unless a newer record (of any process) followed it.
      if (shared !== undefined && Atomics.load(shared, 0) === sharedGeneration) Atomics.store(shared, 1, sharedGeneration);
      if (e.generation !== generation) return;
      e.completed = true;
      e.time = performance.now();
    });
  }

  /**
   * cuEventQuery: like streamQuery, runs the work up to the event and reports true, or false
   * while a wait value holds that work.
   */
  eventQuery(event: Handle): boolean {
    const e = this.s.event(event, 'cuEventQuery');
    this.checkCaptured(e, 'cuEventQuery');
    const ran = this.runToEvent(e);
    const shared = e.shared?.words;
    return shared === undefined ? ran : ran && Atomics.load(shared, 1) >= Atomics.load(shared, 0);
  }

  /**
   * cuEventSynchronize: runs the work up to the event, then releases pool memory above thresholds;
   * CUDA_ERROR_NOT_READY when a wait value the host has not released holds that work.
   */
  eventSynchronize(event: Handle): void {
    const call = 'cuEventSynchronize';
    const e = this.s.event(event, call);
    this.checkCaptured(e, call);
    if (!this.runToEvent(e)) this.s.heldError(call, e.recordedAt!.stream);
    const shared = e.shared?.words;
    if (shared !== undefined) waitForOtherProcess(shared, call, event);
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

  /** CUDA_ERROR_CAPTURED_EVENT for an event whose latest record is in a capture that still lasts. */
  private checkCaptured(e: EventState, call: string): void {
    if (e.captured !== undefined && this.s.captures.has(e.captured.capture)) {
      fail(CUresult.CAPTURED_EVENT, call, 'the event was last recorded in a capture that has not ended');
    }
  }

  /** Runs the work up to the event's record; true when it ran (or the event was never recorded). */
  private runToEvent(e: EventState): boolean {
    return e.recordedAt === undefined || e.recordedAt.stream.runTo(e.recordedAt.position);
  }
}

/**
 * How long cuEventSynchronize on an interprocess event waits for another process to run the
 * recorded work. That process's emulated stream work runs only when it makes a call that drains
 * its queue, which it may never do: the emulation fails with CUDA_ERROR_NOT_READY after this
 * instead of hanging, as it does for held streams.
 */
const OTHER_PROCESS_WAIT_MS = 10_000;
const sleeper = new Int32Array(new SharedArrayBuffer(4));

/** Blocks until the latest record of an interprocess event has run in whichever process made it. */
function waitForOtherProcess(shared: Int32Array, call: string, event: Handle): void {
  const deadline = performance.now() + OTHER_PROCESS_WAIT_MS;
  while (Atomics.load(shared, 1) < Atomics.load(shared, 0)) {
    if (performance.now() > deadline) {
      fail(
        CUresult.NOT_READY,
        call,
        `interprocess event ${event}: the process that recorded it has not run that work in ` +
          `${OTHER_PROCESS_WAIT_MS / 1000} s (its emulated stream work runs when it synchronises); on a GPU this would keep waiting`,
      );
    }
    Atomics.wait(sleeper, 0, 0, 1);
  }
}

/** The 32-bit word little-endian at `spans` (4 bytes, one span: the address is 4-aligned). */
function readWord(spans: readonly Span[]): number {
  const bytes = new Uint8Array(4);
  let done = 0;
  for (const sp of spans) {
    sp.store.read(sp.offset, bytes.subarray(done, done + sp.length));
    done += sp.length;
  }
  return new DataView(bytes.buffer).getUint32(0, true);
}

/** The conditions of CUstreamWaitValue_flags, by flag value, on unsigned 32-bit words. */
const WAIT_CONDITIONS: readonly ((word: number, value: number) => boolean)[] = [
  (word, value) => ((word - value) | 0) >= 0, // GEQ: (int32_t)(word - value) >= 0, cyclic
  (word, value) => word === value, // EQ
  (word, value) => (word & value) !== 0, // AND
  (word, value) => ~(word | value) !== 0, // NOR
];

/** How error messages spell each condition. */
const WAIT_NAMES: readonly ((value: number) => string)[] = [
  (value) => `to reach ${value} (GEQ, cyclic)`,
  (value) => `to equal ${value} (EQ)`,
  (value) => `to share a set bit with ${hex(value)} (AND)`,
  (value) => `to have a bit clear that is also clear in ${hex(value)} (NOR)`,
];
