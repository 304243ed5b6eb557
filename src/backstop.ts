/**
 * The garbage-collection backstop for driver objects and the leak report every backstop feeds.
 * Buffers have their own registry (`buffer/lifetime.ts`, which frees in stream order); streams,
 * events and resources dropped without `destroy()` register here, so a program that forgets them
 * gets the driver objects and memory back (and sees them counted) instead of finding them in
 * `nvidia-smi`. It sits below `stream.ts` so streams and events can use it.
 *
 * Who keeps what alive, so the backstop never destroys what is still in use: a buffer holds the
 * resource it came from and the Stream objects it was allocated and recorded on (its release
 * record, held by the buffer registry until it is freed or collected), and a resource holds its
 * upstream (its release record here holds it too, so an upstream outlives every resource over
 * it). Resources remember streams by handle only: a collected stream is destroyed as `destroy()`
 * does, telling them first, so they retire what they cached on it. A raw `{ handle }` or pointer
 * keeps nothing alive: keep the Stream, Event or resource while its handle or memory is used.
 */

/** What a backstop freed on the program's behalf. */
export interface LeakRecord {
  /** What leaked: 'DeviceBuffer', 'HostBuffer', 'Stream', 'Event', 'PoolResource', ... */
  readonly kind: string;
  /** The address of leaked memory, or the driver handle of a leaked stream or event. */
  readonly ptr: number;
  /** The bytes given back (0 for a stream or an event). */
  readonly bytes: number;
  /** The stack of the allocation, when `captureAllocationStacks(true)` was on at the time. */
  readonly stack?: string;
  /** The error the release raised, if returning the memory failed. */
  readonly releaseError?: unknown;
}

/** Totals of everything the backstops have freed since start (or `resetLeakStatistics()`). */
export interface LeakStatistics {
  /** Objects freed: buffers, streams, events and resources. */
  readonly count: number;
  /** Bytes given back with them. */
  readonly bytes: number;
}

/** A listener told about each leak as a backstop frees it (statistics, tracking, logging). */
export type LeakListener = (leak: LeakRecord) => void;

/**
 * How to end a driver object after its owner was collected. It must not reference the owner (or
 * the owner could never be collected); `release` returns the bytes it gave back, or null when the
 * owner held nothing (a resource with no memory and no driver object is no leak).
 *
 * @internal
 */
export interface Dropped {
  readonly kind: string;
  readonly ptr: number;
  release(): number | null;
}

/**
 * What a `Dropped.release` that gave back `bytes` returns: null for none, since a resource that
 * held nothing is no leak.
 *
 * @param bytes The bytes given back.
 * @returns `bytes`, or null for 0.
 * @internal
 */
export function nonZero(bytes: number): number | null {
  return bytes > 0 ? bytes : null;
}

let leakCount = 0;
let leakBytes = 0;
const listeners = new Set<LeakListener>();

/**
 * Counts a leak and tells the listeners (a listener's failure must not stop the others or escape
 * into the garbage collector's callback).
 *
 * @param record What was freed.
 * @internal
 */
export function reportLeak(record: LeakRecord): void {
  leakCount++;
  leakBytes += record.bytes;
  for (const listener of listeners) {
    try {
      listener(record);
    } catch {
      // See above.
    }
  }
}

const registry = new FinalizationRegistry<Dropped>((dropped) => {
  let bytes: number | null = 0;
  let releaseError: unknown;
  try {
    bytes = dropped.release();
  } catch (error) {
    releaseError = error;
  }
  if (bytes === null) return;
  reportLeak({ kind: dropped.kind, ptr: dropped.ptr, bytes, ...(releaseError !== undefined ? { releaseError } : {}) });
});

/**
 * Ends `dropped` when `owner` is collected without having called `unguard(dropped)`.
 *
 * @param owner The Stream, Event or resource.
 * @param dropped How to end what it holds (also the token for `unguard`).
 * @internal
 */
export function guard(owner: object, dropped: Dropped): void {
  registry.register(owner, dropped, dropped);
}

/**
 * Forgets `dropped`: its owner ended it explicitly.
 *
 * @param dropped What `guard` was given.
 * @internal
 */
export function unguard(dropped: Dropped): void {
  registry.unregister(dropped);
}

/**
 * How many objects, and how many bytes, the garbage-collection backstops freed.
 *
 * @returns The totals since start or the last reset.
 * @example
 * ```ts
 * leakStatistics(); // { count: 0, bytes: 0 } in a program that frees and destroys what it makes
 * ```
 * @throws Never.
 */
export function leakStatistics(): LeakStatistics {
  return { count: leakCount, bytes: leakBytes };
}

/**
 * Zeroes the leak totals (tests, or a program that reports leaks per phase).
 * @throws Never.
 * @example
 * ```ts
 * resetLeakStatistics();
 * runPhase();
 * console.log(leakStatistics().count, 'leaked in this phase');
 * ```
 */
export function resetLeakStatistics(): void {
  leakCount = 0;
  leakBytes = 0;
}

/**
 * Calls `listener` for every leak a backstop frees.
 *
 * @param listener Told each LeakRecord.
 * @returns A function that removes it.
 * @throws {TypeError} When `listener` is not a function.
 * @example
 * ```ts
 * const stop = onLeak((leak) => console.warn(`${leak.kind} dropped without free/destroy`));
 * ```
 */
export function onLeak(listener: LeakListener): () => void {
  if (typeof listener !== 'function') throw new TypeError('onLeak expects a function');
  listeners.add(listener);
  return () => listeners.delete(listener);
}
