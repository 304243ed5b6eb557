/**
 * The captures in progress, below every layer that asks about them (device, stream, resources,
 * buffers, ops): which streams record into which capture, its mode and private pool, and the one
 * check every synchronous path makes before the driver (`refuseDuringCapture`). It imports only
 * errors and the backend's constants, so the device layer can use it too.
 */
import { CaptureMode, type Backend, type Handle } from '../backend/backend.js';
import { CudaError, StreamCaptureError } from '../errors.js';

/**
 * Which calls a capture forbids (CUstreamCaptureMode): `'global'` (the default, as CUDA's and
 * PyTorch's) and `'thread-local'` forbid "potentially unsafe" calls (the driver's synchronous
 * allocator, synchronous copies, synchronisations) while the capture lasts; `'relaxed'` only what
 * conflicts with capturing (waiting for the capturing stream).
 */
export type CaptureModeName = 'global' | 'thread-local' | 'relaxed';

/** A stream's capture status: not capturing, capturing, or capturing but invalidated (ending it fails). */
export type CaptureStatusName = 'none' | 'active' | 'invalidated';

/** The driver's mode numbers by name. */
export const CAPTURE_MODES: Readonly<Record<CaptureModeName, number>> = {
  global: CaptureMode.GLOBAL,
  'thread-local': CaptureMode.THREAD_LOCAL,
  relaxed: CaptureMode.RELAXED,
};

/**
 * Memory a capture allocates from when the resource is not the driver's stream-ordered pool: a
 * capture-private pool (`GraphPool`, src/resource/suballoc/graph-pool.ts), held by each graph and
 * executable graph that may write it, and given back when the last of them lets go.
 */
export interface CapturePool {
  /** One more holder. */
  retain(): void;
  /** One holder fewer; the last one gives the pool's memory back. */
  release(): void;
}

/**
 * What a capture's graph keeps for its nodes' sake, besides its private pool: the leases on the
 * spillable memory the capture used, which keep that memory resident at its address while the
 * graph or an executable graph made from it lives (a node holds a raw address). One hold per
 * graph and executable graph; the last one let go ends them all.
 * @example
 * ```ts
 * session.holds.add(() => lease.release());
 * ```
 */
export class CaptureHolds implements CapturePool {
  #count = 1;
  #ends: (() => void)[] = [];

  /**
   * Keeps something until the last hold goes.
   * @param end What ends it (run once).
   * @throws Never.
   * @example
   * ```ts
   * holds.add(() => lease.release());
   * ```
   */
  add(end: () => void): void {
    this.#ends.push(end);
  }

  /**
   * One more holder (an executable graph).
   * @throws Never.
   * @example
   * ```ts
   * holds.retain();
   * ```
   */
  retain(): void {
    this.#count++;
  }

  /**
   * One holder fewer; the last one ends what was kept.
   * @throws What an end throws (a lease's release never does).
   * @example
   * ```ts
   * holds.release();
   * ```
   */
  release(): void {
    if (--this.#count > 0) return;
    const ends = this.#ends;
    this.#ends = [];
    for (const end of ends) end();
  }
}

/**
 * One capture in progress: its origin stream, the streams joined into it, its private pool.
 * Internal to vram: `beginCapture` makes it.
 * @example
 * ```ts
 * startSession(new CaptureSession(stream.handle, 'global', 0, undefined));
 * ```
 */
export class CaptureSession {
  /** Handles of the origin and the joined streams. */
  readonly streams = new Set<Handle>();
  /** What the graph keeps for its nodes (leases on spillable memory the capture used). */
  readonly holds = new CaptureHolds();
  /**
   * Whether a stream in the capture synchronises with the legacy default stream (made without
   * `nonBlocking`): then work on the legacy stream of its context would join the capture
   * implicitly (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, which invalidates it).
   */
  blocking = false;
  /**
   * @param origin The stream the capture began on.
   * @param mode Its mode.
   * @param deviceOrdinal Its device's ordinal.
   * @param pool The pool its allocations come from (the one given to beginCapture, else made on first use; one hold).
   * @throws Never.
   * @example
   * ```ts
   * new CaptureSession(stream.handle, 'global', 0, undefined);
   * ```
   */
  constructor(
    readonly origin: Handle,
    readonly mode: CaptureModeName,
    readonly deviceOrdinal: number,
    public pool: CapturePool | undefined,
  ) {
    this.streams.add(origin);
  }
}

/** What `GraphExec.launch` takes: a Stream, or anything with a live stream `handle`. */
export interface LaunchStream {
  readonly handle: number;
}

/** Captures in progress, by the handle of each stream in them. */
const sessions = new Map<Handle, CaptureSession>();

/**
 * The capture `handle` records into, if any: one map lookup, none while nothing captures.
 * @param handle A stream handle.
 * @returns The session, or undefined.
 */
export function captureSessionOf(handle: Handle): CaptureSession | undefined {
  return sessions.size === 0 ? undefined : sessions.get(handle);
}

/**
 * Whether any capture is in progress: the one test a hot path makes before building a refusal.
 * @returns True while a capture lasts.
 */
export function capturing(): boolean {
  return sessions.size !== 0;
}

/**
 * Starts tracking a capture begun on `session.origin`.
 * @param session The new session.
 */
export function startSession(session: CaptureSession): void {
  sessions.set(session.origin, session);
}

/**
 * A stream joined `session` (it waited for an event recorded in it).
 * @param session The capture.
 * @param handle The joined stream.
 */
export function joinSession(session: CaptureSession, handle: Handle, blocking: boolean): void {
  session.streams.add(handle);
  if (blocking) session.blocking = true;
  sessions.set(handle, session);
}

/**
 * The capture ended (or failed to end): none of its streams captures any more.
 * @param session The capture.
 */
export function endSession(session: CaptureSession): void {
  for (const h of session.streams) if (sessions.get(h) === session) sessions.delete(h);
}

/**
 * Refuses `call` before any driver call while a capture forbids it: always when `stream` is
 * capturing (its work is recorded, not run: nothing to wait for), when `stream` is the legacy
 * default stream and a blocking stream captures (see `refuseOnLegacyDuringCapture`), and while any
 * capture in mode global or thread-local lasts for the rest (one JavaScript thread: the two modes
 * forbid the same).
 *
 * @param call What the caller asked for, e.g. `stream.synchronize()`.
 * @param why Why it cannot be captured, and what to do instead.
 * @param stream The stream the call waits for or queries, if any.
 * @throws {StreamCaptureError} When a capture forbids it.
 */
export function refuseDuringCapture(call: string, why: string, stream?: Handle): void {
  if (sessions.size === 0) return;
  if (stream !== undefined && sessions.has(stream)) {
    throw new StreamCaptureError(call, `${why} (stream ${stream} is capturing: its work is recorded, not run)`);
  }
  if (stream === 0) refuseOnLegacyDuringCapture(call, why);
  for (const s of sessions.values()) {
    if (s.mode !== 'relaxed') throw new StreamCaptureError(call, `${why} (stream ${s.origin} is capturing in mode '${s.mode}')`);
  }
}

/**
 * Refuses `call`, which orders work on the legacy default stream, while a stream that
 * synchronises with it captures (in any mode): the driver would make the legacy stream wait for
 * the capturing stream, which it refuses by invalidating the capture
 * (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT). One JavaScript thread, so any device's capture counts.
 *
 * @param call What the caller asked for, e.g. `AsyncResource.allocate()`.
 * @param why What the call does on the legacy stream, and what to do instead.
 * @throws {StreamCaptureError} When such a capture lasts.
 */
export function refuseOnLegacyDuringCapture(call: string, why: string): void {
  if (sessions.size === 0) return;
  for (const s of sessions.values()) {
    if (s.blocking) {
      throw new StreamCaptureError(call, `${why} (the legacy default stream would wait for stream ${s.origin}, which is capturing: pass a stream)`);
    }
  }
}

/**
 * Ends the capture `handle` takes part in, if any, without a graph: for a stream destroyed (or
 * collected) while capturing, so that no capture outlives its stream and keeps refusing every
 * later synchronous call. The origin's capture is ended and its partial graph destroyed (a
 * capture the driver invalidated, or one left unjoined, ends all the same); a joined stream
 * leaves its capture, which ends at its origin as the driver says (unjoined, when the stream
 * queued work there the origin never waited for).
 *
 * @param backend The stream's backend.
 * @param handle The stream.
 * @throws Never.
 */
export function abandonCapture(backend: Backend, handle: Handle): void {
  const session = captureSessionOf(handle);
  if (session === undefined) return;
  if (session.origin !== handle) {
    session.streams.delete(handle);
    sessions.delete(handle);
    return;
  }
  try {
    backend.graphDestroy(backend.streamEndCapture(handle));
  } catch {
    // Invalidated or unjoined: the driver ended the capture all the same.
  }
  endSession(session);
  session.pool?.release();
}

/**
 * Runs `fn`, a driver call that a global capture would refuse but that orders nothing on the
 * captured streams (allocating a private pool's memory, loading a module a built-in op needs on
 * first use), in the relaxed capture mode while a capture lasts (cuThreadExchangeStreamCaptureMode,
 * what PyTorch's allocator does around cudaMalloc); as it is otherwise.
 *
 * @param backend The device's backend.
 * @param fn The call.
 * @returns What `fn` returns.
 * @throws What `fn` throws.
 */
export function relaxedDuringCapture<T>(backend: Backend, fn: () => T): T {
  if (sessions.size === 0) return fn();
  const previous = backend.threadExchangeCaptureMode(CaptureMode.RELAXED);
  try {
    return fn();
  } finally {
    backend.threadExchangeCaptureMode(previous);
  }
}

/**
 * The driver's refusal of a call during capture (CUDA_ERROR_STREAM_CAPTURE_*, CAPTURED_EVENT) as
 * a StreamCaptureError naming the call; any other error as it was.
 * @param error What the driver threw.
 * @param call The call, as the user wrote it.
 * @returns The error to throw.
 */
export function captureError(error: unknown, call: string): unknown {
  if (error instanceof CudaError && error.code >= 900 && error.code <= 907) {
    return new StreamCaptureError(call, `the driver refused it (${error.errorName})`, { cause: error });
  }
  return error;
}
