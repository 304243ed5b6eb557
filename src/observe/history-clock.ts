/**
 * The memory history's clock: a time an event can read for about a nanosecond. A clock read in
 * Node costs 50-60 ns (performance.now() 63 ns, Date.now() 62 ns, process.hrtime.bigint() 85 ns
 * on a 2-core development VM; a pair of hrtime.bigint reads 57 ns on the H100 host, in
 * bench/results), more than the pool's whole allocate+free hit pair (36-43 ns there): stamping
 * each event with one would make recording cost 3.5 times the pair. So a worker thread reads the clock
 * every 0.25 ms and stores it in shared memory, and an event reads that number: times are good to
 * about a quarter of a millisecond (more on a machine whose cores are all busy), order is exact
 * (events are kept in order), and the time keeps moving while the main thread runs a long
 * synchronous loop, as a timer on the main thread's event loop would not. The tick is a trade:
 * the worker costs 16% of a core at 0.1 ms, 12% at 0.25 ms, 5% at 1 ms (process CPU time over a
 * second of idle main thread, on the development VM).
 *
 * On a machine whose cores are all busy the worker may not run for milliseconds, and every event
 * would carry the same time (an out-of-memory report's timeline collapsed to one instant). So the
 * history also reads the clock itself now and then (`check`): every event while the worker is
 * stale, backing off to one event in 1024 while it keeps up.
 */
import { Worker } from 'node:worker_threads';
import { VramError } from '../errors.js';

/** Milliseconds between the worker's clock reads. */
const TICK_MS = 0.25;

/** How long the constructor waits for the worker's first tick (it takes 30-40 ms here). */
const START_TIMEOUT_MS = 2000;

/** A time this far behind a direct read means the worker is not keeping up: two ticks missed. */
const STALE_MS = 2 * TICK_MS;

/** The most events between two direct reads while the worker keeps up. */
const MAX_CHECK_INTERVAL = 1024;

// CommonJS, evaluated by the worker: store the time on the starting thread's clock until told to
// stop; say when the first time is stored. Never a time older than the one there: the starting
// thread may have stored a direct read while this thread was not running.
const WORKER_SOURCE = `
const { workerData } = require('node:worker_threads');
const { shared, origin } = workerData;
const time = new Float64Array(shared, 0, 1);
const stop = new Int32Array(shared, 8, 1);
const started = new Int32Array(shared, 12, 1);
const offset = performance.timeOrigin - origin;
time[0] = offset + performance.now();
Atomics.store(started, 0, 1);
Atomics.notify(started, 0);
while (Atomics.load(stop, 0) === 0) {
  const now = offset + performance.now();
  if (now > time[0]) time[0] = now;
  Atomics.wait(stop, 0, 0, ${TICK_MS});
}`;

/**
 * A clock kept by a worker thread: `time[0]` is the time, a read of shared memory. Started by the
 * history when it starts recording and stopped with it, so no thread runs while nothing records.
 *
 * @example
 * ```ts
 * const clock = new TickingClock();
 * const t = clock.time[0]; // milliseconds on this thread's performance.now() clock, to about 0.25 ms
 * clock.stop();
 * ```
 */
export class TickingClock {
  private readonly shared = new SharedArrayBuffer(16);
  /**
   * Element 0 is the time, in milliseconds on this thread's `performance.now()` clock, as the
   * worker last read it. A field rather than a method, so a hot path reads it inline.
   */
  readonly time = new Float64Array(this.shared, 0, 1);
  private readonly stopFlag = new Int32Array(this.shared, 8, 1);
  /** The last time `check` stored itself; NaN before any. */
  private written = Number.NaN;
  /** Events between direct reads, as `check` last answered. */
  private interval = 1;

  /**
   * Starts the worker and waits for its first tick (some tens of milliseconds, once per recording),
   * so every event has a time from the worker.
   *
   * @throws {VramError} When the worker has not started after 2 s (it is stopped).
   */
  constructor() {
    // No execArgv: the program's flags (`--input-type=module`, say) would change how the source is read.
    const worker = new Worker(WORKER_SOURCE, {
      eval: true,
      execArgv: [],
      workerData: { shared: this.shared, origin: performance.timeOrigin },
    });
    // The clock must not keep a program alive that is otherwise done.
    worker.unref();
    const started = new Int32Array(this.shared, 12, 1);
    if (Atomics.wait(started, 0, 0, START_TIMEOUT_MS) === 'timed-out') {
      this.stop();
      throw new VramError(`the memory history's clock thread did not start within ${START_TIMEOUT_MS} ms`);
    }
  }

  /**
   * Reads the clock directly and, when the worker's time is stale (two ticks behind, or not
   * moved since the last direct read was stored), stores the direct read in its place.
   *
   * @returns How many events until the next check: 1 while the worker is stale, else twice the
   *   last answer, up to 1024 (a clock read costs about as much as the event it stamps).
   */
  check(): number {
    const now = performance.now();
    const shown = this.time[0]!;
    if (shown === this.written || now - shown > STALE_MS) {
      this.time[0] = this.written = now;
      this.interval = 1;
    } else {
      this.interval = Math.min(2 * this.interval, MAX_CHECK_INTERVAL);
    }
    return this.interval;
  }

  /** Stops the worker (it ends at its next tick). A second call does nothing. */
  stop(): void {
    Atomics.store(this.stopFlag, 0, 1);
    Atomics.notify(this.stopFlag, 0);
  }
}
