/**
 * The memory history's clock: a time an event can read for about a nanosecond. A clock read in
 * Node costs 50-60 ns (performance.now() 63 ns, Date.now() 62 ns, process.hrtime.bigint() 85 ns
 * on this project's CI machine; a pair of hrtime.bigint reads 57 ns on the H100 host, in
 * bench/results), more than the pool's whole allocate+free hit pair (36-43 ns): stamping each
 * event with one would make recording cost 3.5 times the pair. So a worker thread reads the clock
 * every 0.1 ms and stores it in shared memory, and an event reads that number: times are good to
 * about 0.1 ms (the sleep's timer slack included), order is exact (events are kept in order), and
 * the time keeps moving while the main thread runs a long synchronous loop, as a timer on the main
 * thread's event loop would not.
 */
import { Worker } from 'node:worker_threads';

/** Milliseconds between the worker's clock reads. */
const TICK_MS = 0.1;

// CommonJS, evaluated by the worker: store the time (ms since the epoch) until told to stop.
const WORKER_SOURCE = `
const { workerData } = require('node:worker_threads');
const now = new Float64Array(workerData, 0, 1);
const stop = new Int32Array(workerData, 8, 1);
const ticking = new Int32Array(workerData, 12, 1);
now[0] = performance.timeOrigin + performance.now();
Atomics.store(ticking, 0, 1);
while (Atomics.load(stop, 0) === 0) {
  now[0] = performance.timeOrigin + performance.now();
  Atomics.wait(stop, 0, 0, ${TICK_MS});
}`;

/**
 * A clock kept by a worker thread; `now()` is a read of shared memory. Started by the history
 * when it starts recording and stopped with it, so no thread runs while nothing records.
 *
 * @example
 * ```ts
 * const clock = new TickingClock();
 * const t = clock.now(); // milliseconds on the performance.now() clock, to about 0.1 ms
 * clock.stop();
 * ```
 */
export class TickingClock {
  private readonly shared = new SharedArrayBuffer(16);
  /** Milliseconds since the epoch, as the worker last read them. */
  private readonly epochMs = new Float64Array(this.shared, 0, 1);
  private readonly stopFlag = new Int32Array(this.shared, 8, 1);
  /** Set by the worker once it keeps the time: until then (some milliseconds) `now()` reads the clock itself. */
  private readonly ticking = new Int32Array(this.shared, 12, 1);
  /** This thread's `performance.timeOrigin` (a getter call each time otherwise). */
  private readonly origin = performance.timeOrigin;
  private readonly worker: Worker;

  /** Starts the worker; until it runs, `now()` reads the clock itself. */
  constructor() {
    this.worker = new Worker(WORKER_SOURCE, { eval: true, workerData: this.shared });
    // The clock must not keep a program alive that is otherwise done.
    this.worker.unref();
  }

  /**
   * The time, to about 0.1 ms.
   *
   * @returns Milliseconds on this thread's `performance.now()` clock.
   */
  now(): number {
    if (this.ticking[0] === 0) return performance.now();
    return this.epochMs[0]! - this.origin;
  }

  /** Stops the worker (it ends at its next tick). A second call does nothing. */
  stop(): void {
    Atomics.store(this.stopFlag, 0, 1);
    Atomics.notify(this.stopFlag, 0);
  }
}
