/**
 * Allocations that wait for memory (`DeviceBuffer.allocateAsync(bytes, { wait: true })`): one queue
 * per device, served in order. The queue knows nothing of buffers or budgets: a waiter brings an
 * `attempt` that either allocates or says what holds it back, and the queue decides when to call it.
 *
 * The rule, per device: waiters are tried oldest first. A waiter held back by the device's memory
 * (its resource refused it, after the cache registry released what every cache of the device holds
 * and retried) stops the walk: no later waiter of that device is tried until it is served, so a
 * later small request never overtakes an earlier large one. A waiter held back by something of its
 * own (its memory budget) does not hold the others back; later waiters of the same budget are then
 * skipped too, so each budget's waiters are also served in order.
 *
 * Wake-ups: every `deallocate` of a device's memory while anyone waits (one integer test in the
 * resource contract when nobody does), every memory budget given bytes back, and a poll with
 * backoff (1 ms doubling to 128 ms, back to 1 ms at each free) for memory that returns later:
 * blocks freed in stream order whose stream has not passed yet (each walk first queries, never
 * waits on, the streams memory was freed on since), and memory other processes free. No host wait
 * and no device synchronisation: a try releases caches without the synchronisation a synchronous
 * allocation ends with (`withoutHostWait`).
 */
import { CounterCell, type Counter } from '../counter.js';
import { Device } from '../device.js';
import { OutOfMemoryError } from '../errors.js';

/**
 * What a waiting allocation needs of an `AbortSignal` (declared here, so the package's types do not
 * need the DOM or Node's declarations): any `AbortSignal` is one.
 */
export interface AbortSignalLike {
  /** True once aborted. */
  readonly aborted: boolean;
  /** What the wait rejects with once aborted. */
  readonly reason: unknown;
  /**
   * Adds the listener called when it aborts.
   * @param type `'abort'`.
   * @param listener The listener.
   * @param options `once`.
   */
  addEventListener(type: 'abort', listener: () => void, options?: { once?: boolean }): void;
  /**
   * Removes a listener.
   * @param type `'abort'`.
   * @param listener The listener.
   */
  removeEventListener(type: 'abort', listener: () => void): void;
}

/** How a waiting allocation ends early. */
export interface WaitOptions {
  /** Rejects with `signal.reason` when aborted. */
  readonly signal?: AbortSignalLike | undefined;
  /** Milliseconds after which the wait rejects with an OutOfMemoryError; Infinity waits for ever. */
  readonly timeout: number;
  /** The call, for the timeout's message, e.g. `DeviceBuffer.allocateAsync`. */
  readonly call: string;
  /** The bytes asked for, for the timeout's message. */
  readonly requestedBytes: number;
  /**
   * The waiter's own limits (its memory budgets, innermost first): while one of them holds an
   * earlier waiter back, later waiters under it are not tried, so each budget serves in order.
   */
  readonly groups: readonly object[];
}

interface Waiter {
  /** One try: a value when it allocated, a Blocked when not; it may throw (not out of memory). */
  readonly attempt: () => unknown;
  readonly groups: readonly object[];
  readonly resolve: (value: unknown) => void;
  readonly reject: (reason: unknown) => void;
  readonly started: number;
  last: OutOfMemoryError | undefined;
  /** Set once the waiter has been through a walk without being served: it waits. */
  queued: boolean;
  cleanup: () => void;
}

/**
 * Waits, retries and their endings, per device: `count` counts allocations that had to wait
 * (`value` waiting now, `peak` most at once, `total` ever), `waitedMs` the time they waited (those
 * that ended), `timeouts` and `aborts` the waits that ended without memory.
 */
export interface AllocationWaits {
  /** Allocations waiting now (`value`), the most at once (`peak`), all that ever waited (`total`). */
  readonly count: Counter;
  /** Milliseconds waited, summed over the waits that ended (`total`), and the longest of them. */
  readonly waitedMs: { readonly total: number; readonly longest: number };
  /** Waits that ended with their timeout. */
  readonly timeouts: number;
  /** Waits that ended because their signal aborted. */
  readonly aborts: number;
}

class DeviceQueue {
  constructor(readonly device: number) {}
  readonly waiters: Waiter[] = [];
  readonly waits = new CounterCell();
  waitedTotal = 0;
  waitedLongest = 0;
  timeouts = 0;
  aborts = 0;
  /** A drain is queued as a microtask. */
  scheduled = false;
  timer: NodeJS.Timeout | undefined;
  backoff = FIRST_POLL_MS;
  /**
   * Streams memory was freed on since the last walk, whose work had not been seen to end: queried
   * (never waited on) before each walk, so the driver sees their work end and can hand out (or a
   * cache give back) memory their frees hold, and forgotten once passed.
   */
  readonly pendingStreams = new Set<number>();
}

const FIRST_POLL_MS = 1;
const LAST_POLL_MS = 128;

const queues = new Map<number, DeviceQueue>();

/**
 * Allocations waiting now, on every device: the resource contract's `deallocate` tests it (one
 * integer) before it calls `memoryFreed`.
 *
 * @internal
 */
export let waiting = 0;

function queueOf(device: number): DeviceQueue {
  let q = queues.get(device);
  if (q === undefined) {
    q = new DeviceQueue(device);
    queues.set(device, q);
  }
  return q;
}

/**
 * Memory of `device` went back (every device when -1: a budget given bytes back): the waiters of
 * that device are tried again, after the call that freed it returns (a free may run inside a
 * resource's own call, which an allocation must not re-enter).
 *
 * @param device The device ordinal, or -1 for every device with waiters.
 * @param stream The handle of the stream it was freed on (0, the default, when none or not known).
 * @internal
 */
export function memoryFreed(device: number, stream = 0): void {
  if (device < 0) {
    for (const [ordinal, q] of queues) if (q.waiters.length > 0) memoryFreed(ordinal);
    return;
  }
  const q = queues.get(device);
  if (q === undefined || q.waiters.length === 0) return;
  if (stream !== 0) q.pendingStreams.add(stream);
  q.backoff = FIRST_POLL_MS;
  if (q.scheduled) return;
  q.scheduled = true;
  queueMicrotask(() => {
    q.scheduled = false;
    drain(q);
  });
}

/**
 * What held a waiter back on a try: the device's memory (`'memory'`: the walk stops there, FIFO per
 * device), or one of its own limits (a budget object). A class, so a value an attempt allocated is
 * never mistaken for one.
 *
 * @internal
 */
export class BlockedResult {
  /**
   * @param by What held the try back.
   * @param error The try's out-of-memory error, for the message when the wait ends without memory.
   */
  constructor(
    readonly by: 'memory' | object,
    readonly error: OutOfMemoryError,
  ) {}
}

/** Asks each stream of `q.pendingStreams` whether its work has ended (no wait); forgets those that have. */
function queryPendingStreams(device: number, q: DeviceQueue): void {
  if (q.pendingStreams.size === 0) return;
  const dev = Device.get(device);
  for (const handle of q.pendingStreams) {
    let passed = true;
    try {
      if (dev.backend.streamKnown(handle)) {
        dev.makeCurrent();
        passed = dev.backend.streamQuery(handle);
      }
    } catch {
      // A stream that failed or went away holds nothing back any more; the try will tell.
    }
    if (passed) q.pendingStreams.delete(handle);
  }
}

/** One walk of the queue in order (the rule in the file's comment); schedules the next poll. */
function drain(q: DeviceQueue): void {
  queryPendingStreams(q.device, q);
  const skipped = new Set<object>();
  for (let i = 0; i < q.waiters.length;) {
    const w = q.waiters[i]!;
    if (w.groups.some((g) => skipped.has(g))) {
      i += 1;
      continue;
    }
    let result: unknown;
    try {
      result = w.attempt();
    } catch (error) {
      settle(q, w, i);
      w.reject(error);
      continue;
    }
    if (!(result instanceof BlockedResult)) {
      settle(q, w, i);
      w.resolve(result);
      continue;
    }
    w.last = result.error;
    if (result.by === 'memory') break;
    // Later waiters under the same budget stay behind this one.
    skipped.add(result.by);
    i += 1;
  }
  for (const w of q.waiters) {
    if (!w.queued) {
      w.queued = true;
      q.waits.add(1);
    }
  }
  poll(q);
}

function poll(q: DeviceQueue): void {
  if (q.timer !== undefined) {
    clearTimeout(q.timer);
    q.timer = undefined;
  }
  if (q.waiters.length === 0) return;
  const delay = q.backoff;
  q.backoff = Math.min(LAST_POLL_MS, q.backoff * 2);
  q.timer = setTimeout(() => {
    q.timer = undefined;
    drain(q);
  }, delay);
}

/** Takes waiter `i` out of the queue and counts its wait, if it waited. */
function settle(q: DeviceQueue, w: Waiter, i: number): void {
  q.waiters.splice(i, 1);
  waiting -= 1;
  w.cleanup();
  if (w.queued) {
    q.waits.sub(1);
    const waited = performance.now() - w.started;
    q.waitedTotal += waited;
    if (waited > q.waitedLongest) q.waitedLongest = waited;
  }
  if (q.waiters.length === 0 && q.timer !== undefined) {
    clearTimeout(q.timer);
    q.timer = undefined;
  }
}

/**
 * Queues `attempt` on `device` behind the waiters already there and walks the queue at once, so a
 * request that can be met now and has nobody ahead is met in this call. The promise resolves with
 * what `attempt` returned once it allocated; it rejects with what `attempt` threw, with
 * `signal.reason` on abort, or with an OutOfMemoryError that says how long it waited on timeout.
 *
 * @param device The device ordinal whose queue it joins.
 * @param attempt One try: a value, or a `BlockedResult`.
 * @param options The signal, timeout and what the messages name.
 * @returns What the successful try returned.
 * @internal
 */
export function waitForMemory<T>(device: number, attempt: () => T | BlockedResult, options: WaitOptions): Promise<T> {
  const q = queueOf(device);
  const signal = options.signal;
  return new Promise<T>((resolve, reject) => {
    if (signal?.aborted === true) {
      reject(abortReason(signal));
      return;
    }
    let timer: NodeJS.Timeout | undefined;
    const onAbort = (): void => {
      const i = q.waiters.indexOf(w);
      if (i < 0) return;
      settle(q, w, i);
      q.aborts += 1;
      reject(abortReason(signal ?? { reason: undefined }));
      // The waiter ahead of the others left: those behind it may fit now.
      memoryFreed(device);
    };
    const w: Waiter = {
      attempt,
      groups: options.groups,
      resolve: resolve as (value: unknown) => void,
      reject,
      started: performance.now(),
      last: undefined,
      queued: false,
      cleanup: () => {
        if (timer !== undefined) clearTimeout(timer);
        try {
          signal?.removeEventListener('abort', onAbort);
        } catch {
          // A signal that cannot remove its listener: the listener finds the waiter gone and does nothing.
        }
      },
    };
    // Listening first: a signal that cannot be listened to rejects the wait before it is queued,
    // so a rejected waiter never stays behind to take memory nobody holds.
    try {
      signal?.addEventListener('abort', onAbort, { once: true });
    } catch (error) {
      reject(error);
      return;
    }
    q.waiters.push(w);
    waiting += 1;
    if (Number.isFinite(options.timeout)) {
      timer = setTimeout(() => {
        const i = q.waiters.indexOf(w);
        if (i < 0) return;
        settle(q, w, i);
        q.timeouts += 1;
        reject(timedOut(w, options));
        memoryFreed(device);
      }, options.timeout);
    }
    drain(q);
  });
}

/**
 * What a wait ended by `signal` rejects with: its `reason`, or where it has none (a signal made
 * by hand, aborted with `undefined`) an `AbortError` DOMException, the error `AbortSignal.abort()`
 * gives by default, so the rejection is never `undefined`.
 *
 * @param signal The aborted signal.
 * @returns The reason.
 * @internal
 */
export function abortReason(signal: Pick<AbortSignalLike, 'reason'>): unknown {
  return signal.reason ?? new DOMException('the wait for memory was aborted', 'AbortError');
}

function timedOut(w: Waiter, options: WaitOptions): OutOfMemoryError {
  const waited = Math.round(performance.now() - w.started);
  const last = w.last;
  return new OutOfMemoryError({
    requestedBytes: options.requestedBytes,
    call: options.call,
    reason: last?.reason ?? 'device',
    resource: last?.resource,
    statistics: last?.statistics,
    message:
      `${options.call}: waited ${waited} ms (timeout ${options.timeout} ms) for ${options.requestedBytes} bytes and none came free` +
      (last === undefined ? '' : `; the last try failed with: ${last.message}`),
    cause: last,
  });
}

/**
 * The wait figures of `device` (all zero where nothing ever waited).
 *
 * @param device The device ordinal.
 * @returns A frozen snapshot.
 * @internal
 */
export function allocationWaits(device: number): AllocationWaits {
  const q = queues.get(device);
  return Object.freeze({
    count: q?.waits.snapshot() ?? Object.freeze({ value: 0, peak: 0, total: 0 }),
    waitedMs: Object.freeze({ total: q?.waitedTotal ?? 0, longest: q?.waitedLongest ?? 0 }),
    timeouts: q?.timeouts ?? 0,
    aborts: q?.aborts ?? 0,
  });
}

/**
 * Starts new high-water marks of `device`'s waits (the most waiting at once, the longest wait).
 *
 * @param device The device ordinal.
 * @internal
 */
export function resetPeakWaits(device: number): void {
  const q = queues.get(device);
  if (q === undefined) return;
  q.waits.resetPeak();
  q.waitedLongest = 0;
}
