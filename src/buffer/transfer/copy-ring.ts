/**
 * The shared-memory job ring between the main thread and the copy threads: a fixed array of copy
 * jobs (destination, source, bytes, batch) in SharedArrayBuffers, with counters the threads move
 * with Atomics. The main thread posts a batch of jobs and waits for the batch's counter to reach 0
 * (`Atomics.wait` for a synchronous copy, `Atomics.waitAsync` for an asynchronous one); the threads
 * claim jobs in order and count them done. Nothing here needs an event loop, which is why a
 * synchronous copy can wait for threads at all (koffi's async calls report back through the event
 * loop, which a synchronous call never returns to).
 *
 * Capacity: at most BATCHES batches of at most PIECES jobs are outstanding, so the ring (their
 * product) can never be overrun; a thread reuses a slot only after its job was counted done. The
 * counters are int32 and wrap after 2^31 jobs; every comparison is on their difference, so a
 * long-running process keeps working across the wrap.
 */

/** Outstanding batches at most (concurrent copies); a copy waits for a free one beyond that. */
export const BATCHES = 64;
/** Jobs in one batch at most (one per thread and piece). */
export const PIECES = 64;
const CAPACITY = BATCHES * PIECES; // a power of two: slots are counters masked, which survives wraparound
const MASK = CAPACITY - 1;

/** How long an idle copy thread spins before it sleeps. */
const WORKER_SPIN_NS = 50_000n;

/** Control words. */
const POSTED = 0;
const TAKEN = 1;
/** Threads that started (the starting thread waits on it). */
export const READY = 2;
const STOP = 3;
/** Set by a thread whose copy-worker module failed to load (copy-threads.ts's bootstrap writes it). */
export const START_FAILED = 4;
const CONTROL_WORDS = 5;

/** The shared memory of a ring, as handed to a worker in `workerData`. */
export interface RingBuffers {
  readonly control: SharedArrayBuffer;
  readonly batches: SharedArrayBuffer;
  readonly jobs: SharedArrayBuffer;
  readonly jobBatch: SharedArrayBuffer;
}

/** One side's view of the ring (the main thread and each worker build their own over the same memory). */
export class Ring {
  readonly buffers: RingBuffers;
  private readonly control: Int32Array;
  /** Jobs not yet done, per batch. */
  readonly batches: Int32Array;
  /** dst, src, bytes per job. */
  private readonly jobs: Float64Array;
  private readonly jobBatch: Int32Array;

  /** A new ring, or (given `buffers`) a view of an existing one. */
  constructor(buffers?: RingBuffers) {
    this.buffers = buffers ?? {
      control: new SharedArrayBuffer(CONTROL_WORDS * 4),
      batches: new SharedArrayBuffer(BATCHES * 4),
      jobs: new SharedArrayBuffer(CAPACITY * 3 * 8),
      jobBatch: new SharedArrayBuffer(CAPACITY * 4),
    };
    this.control = new Int32Array(this.buffers.control);
    this.batches = new Int32Array(this.buffers.batches);
    this.jobs = new Float64Array(this.buffers.jobs);
    this.jobBatch = new Int32Array(this.buffers.jobBatch);
  }

  // --- main thread ---

  /**
   * Posts `count` jobs of `batch` (already written with `write`, starting at `first`): sets the
   * batch's counter and wakes the threads.
   */
  post(batch: number, count: number): void {
    Atomics.store(this.batches, batch, count);
    Atomics.add(this.control, POSTED, count);
    Atomics.notify(this.control, POSTED);
  }

  /** The index of the next job to be posted (the first of the batch being written). */
  get posted(): number {
    return Atomics.load(this.control, POSTED);
  }

  /** Writes job `index` (the counter value it will have; its slot is the counter masked). */
  write(index: number, batch: number, dst: number, src: number, bytes: number): void {
    const slot = index & MASK;
    this.jobs[slot * 3] = dst;
    this.jobs[slot * 3 + 1] = src;
    this.jobs[slot * 3 + 2] = bytes;
    this.jobBatch[slot] = batch;
  }

  /** Threads that have started and bound memcpy. */
  get readyThreads(): number {
    return Atomics.load(this.control, READY);
  }

  /**
   * Blocks until `threads` threads are ready, one failed to load, or `timeoutMs` passed. A worker's
   * own `error` event needs the event loop, which a blocked thread never returns to, so a thread
   * that fails says so here (START_FAILED, with a wake-up on READY) and the wait ends at once.
   */
  waitReady(threads: number, timeoutMs: number): 'ready' | 'failed' | 'timeout' {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const ready = Atomics.load(this.control, READY);
      if (Atomics.load(this.control, START_FAILED) !== 0) return 'failed';
      if (ready >= threads) return 'ready';
      const left = deadline - Date.now();
      if (left <= 0) return 'timeout';
      Atomics.wait(this.control, READY, ready, left);
    }
  }

  /** Tells every thread to exit once the jobs posted so far are done. */
  stop(): void {
    Atomics.store(this.control, STOP, 1);
    Atomics.notify(this.control, POSTED);
  }

  // --- worker threads ---

  /** Counts this thread ready. */
  ready(): void {
    Atomics.add(this.control, READY, 1);
    Atomics.notify(this.control, READY);
  }

  /**
   * Claims the next job, waiting for one; -1 when the ring was stopped and nothing is left. An
   * idle thread spins for WORKER_SPIN_NS before it sleeps: between the chunks of a transfer the
   * next job comes within microseconds, and a futex wake-up costs tens of them per thread.
   */
  take(): number {
    let spinUntil = 0n;
    for (;;) {
      const taken = Atomics.load(this.control, TAKEN);
      const posted = Atomics.load(this.control, POSTED);
      if (((posted - taken) | 0) > 0) {
        if (Atomics.compareExchange(this.control, TAKEN, taken, (taken + 1) | 0) === taken) return taken & MASK;
        continue;
      }
      if (Atomics.load(this.control, STOP) !== 0) return -1;
      const now = process.hrtime.bigint();
      if (spinUntil === 0n) spinUntil = now + WORKER_SPIN_NS;
      if (now < spinUntil) continue;
      Atomics.wait(this.control, POSTED, posted);
      spinUntil = 0n;
    }
  }

  dst(slot: number): number {
    return this.jobs[slot * 3]!;
  }

  src(slot: number): number {
    return this.jobs[slot * 3 + 1]!;
  }

  bytes(slot: number): number {
    return this.jobs[slot * 3 + 2]!;
  }

  /** Counts job `slot` done and wakes the waiter when it was its batch's last. */
  done(slot: number): void {
    const batch = this.jobBatch[slot]!;
    if (Atomics.sub(this.batches, batch, 1) === 1) Atomics.notify(this.batches, batch);
  }
}
