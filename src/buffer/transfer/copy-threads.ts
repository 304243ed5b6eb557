/**
 * CopyThreads: host-side copies between native addresses, split over worker threads, for staged
 * transfers (a pageable ArrayBuffer to or from pinned staging memory). One copy is one batch of
 * pieces in the shared job ring (copy-ring.ts); a synchronous copy blocks on the batch with
 * `Atomics.wait`, an asynchronous one awaits it with `Atomics.waitAsync` and never blocks the event
 * loop. The threads start on first use (about 25 ms each, once per process), are unref'd so they
 * never keep a process alive, and sleep in `Atomics.wait` while idle.
 *
 * A single thread copies at about the speed of the driver's own pageable path (8-9 GB/s on the
 * machines we measured); the copy engine takes 50+ GB/s from pinned memory, so staging is only
 * worth it with several threads copying at once.
 */
import { existsSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { hostMemcpy } from '../../cuda/host-memcpy.js';
import { variableReader, wholeNumberFrom, type EnvironmentValues } from '../../util/environment.js';
import { BATCHES, PIECES, READY, Ring, START_FAILED } from './copy-ring.js';

/** A started copy, to wait for once. */
export interface CopyTicket {
  /** The ring batch it holds; -1 when it was copied on the calling thread (already done). */
  readonly batch: number;
}

/** One host copy: `bytes` from native address `src` to native address `dst`. */
export interface HostCopy {
  readonly dst: number;
  readonly src: number;
  readonly bytes: number;
}

/** Pieces smaller than this are not split further: waking a thread costs more than it saves. */
const MIN_PIECE = 256 * 1024;
/** How long starting the threads may take before copies run on the calling thread instead. */
const START_TIMEOUT_MS = 10_000;
/** The copy threads' module, beside this one in the build. */
const WORKER_URL = new URL('./copy-worker.js', import.meta.url);

/**
 * What each thread runs: an inline script (it always loads) that imports the worker module and,
 * when that fails, says so in the ring's START_FAILED word and wakes the starting thread, which
 * waits in `Atomics.wait` and so would never see the worker's `error` event. The error is thrown
 * again so that event still carries the reason. Only dynamic imports, so it reads the same as
 * CommonJS and as a module (a program run with `--input-type=module` gives its workers that flag).
 */
function bootstrap(url: URL): string {
  return `import('node:worker_threads').then(({ workerData }) => import(${JSON.stringify(url.href)}).catch((error) => {
  const control = new Int32Array(workerData.control);
  Atomics.store(control, ${START_FAILED}, 1);
  Atomics.notify(control, ${READY});
  throw error;
}));`;
}

/**
 * Checks a thread count: a whole number from 0 (copy on the calling thread) to 64.
 *
 * @param threads The count.
 * @param what Names it in the error.
 * @returns The count.
 * @throws {RangeError} For anything else.
 * @example
 * ```ts
 * checkThreadCount(4, 'threads'); // 4
 * ```
 */
export function checkThreadCount(threads: unknown, what: string): number {
  if (typeof threads !== 'number' || !Number.isInteger(threads) || threads < 0 || threads > PIECES) {
    throw new RangeError(`${what} must be a whole number from 0 to ${PIECES}, got ${String(threads)}`);
  }
  return threads;
}

/** `VRAM_COPY_THREADS`: the copy threads' default count, 0 (the calling thread) to 64. */
export const COPY_THREADS_VARIABLE = variableReader('VRAM_COPY_THREADS', wholeNumberFrom(0, PIECES));

/**
 * The default thread count: `VRAM_COPY_THREADS` when set, else half the cores (the copies are
 * memory-bound; more threads than that add contention, not bandwidth), at least 1 and at most 8.
 *
 * @param env The environment (default `process.env`).
 * @returns The count.
 * @throws {RangeError} When `VRAM_COPY_THREADS` is not a whole number from 0 to 64 (`0x4` included).
 * @example
 * ```ts
 * defaultCopyThreads({ VRAM_COPY_THREADS: '2' }); // 2
 * ```
 */
export function defaultCopyThreads(env: EnvironmentValues = process.env): number {
  return COPY_THREADS_VARIABLE.read(env) ?? Math.min(8, Math.max(1, Math.floor(availableParallelism() / 2)));
}

/**
 * A pool of copy threads. `threads: 0` copies on the calling thread (what also happens, with one
 * warning, when the threads cannot start).
 *
 * @example
 * ```ts
 * const threads = new CopyThreads(4);
 * await threads.copyAsync([{ dst: staging, src: nativeAddress(data), bytes: data.byteLength }]);
 * threads.destroy();
 * ```
 */
export class CopyThreads {
  /** Threads copies are split over (0: the calling thread). */
  readonly threads: number;
  private ring: Ring | undefined;
  private workers: Worker[] = [];
  private readonly free: number[] = [];
  private failed = false;
  private destroyed = false;
  /** Asynchronous copies waiting now. */
  private waitingAsync = 0;

  /**
   * @param threads Worker threads, 0 to 64 (default `defaultCopyThreads()`).
   * @param workerUrl The threads' module (tests name a missing or broken one; vram never does).
   * @throws {RangeError} For a bad count.
   */
  constructor(
    threads: number = defaultCopyThreads(),
    private readonly workerUrl: URL = WORKER_URL,
  ) {
    this.threads = checkThreadCount(threads, 'threads');
    for (let b = BATCHES - 1; b >= 0; b--) this.free.push(b);
  }

  /** True when the copies run on worker threads (started, and not failed). */
  get running(): boolean {
    return this.ring !== undefined && !this.failed;
  }

  /**
   * Runs the copies, split over the threads, and returns when all are done (blocking the calling
   * thread, as any synchronous copy does).
   *
   * @param copies The copies; their memory must stay valid until this returns.
   */
  copy(copies: readonly HostCopy[]): void {
    this.wait(this.start(copies));
  }

  /**
   * Runs the copies on the threads and resolves when all are done; the event loop runs meanwhile.
   *
   * @param copies The copies; their memory must stay valid (reachable, not detached) until the
   *   promise settles.
   * @returns A promise that resolves when every byte is copied.
   */
  async copyAsync(copies: readonly HostCopy[]): Promise<void> {
    await this.waitAsync(this.start(copies));
  }

  /**
   * Starts the copies on the threads and returns at once; `wait` or `waitAsync` for the ticket
   * (exactly once: it holds one of the ring's batches until then). A pipeline starts the next
   * chunk's copy before waiting for this one's, so the threads never idle between chunks.
   *
   * @param copies The copies; their memory must stay valid until the ticket is waited for.
   * @returns The ticket.
   */
  start(copies: readonly HostCopy[]): CopyTicket {
    const ring = this.begin();
    const batch = ring === undefined ? undefined : this.free.pop();
    if (ring === undefined || batch === undefined) {
      // No threads, or every batch is in flight: copy here, now (the ticket is already done).
      copyHere(copies);
      return { batch: -1 };
    }
    post(ring, batch, copies, this.threads);
    return { batch };
  }

  /**
   * Blocks until the ticket's copies are done (spinning for a few microseconds first: a chunk's
   * copy usually ends within them, and a futex wake costs tens).
   *
   * @param ticket From `start`.
   */
  wait(ticket: CopyTicket): void {
    if (ticket.batch < 0) return;
    try {
      waitBatch(this.ring!.batches, ticket.batch);
    } finally {
      this.release(ticket.batch);
    }
  }

  /**
   * Resolves when the ticket's copies are done, never blocking the event loop.
   *
   * @param ticket From `start`.
   * @returns A promise that resolves when they are.
   */
  async waitAsync(ticket: CopyTicket): Promise<void> {
    if (ticket.batch < 0) return;
    const batches = this.ring!.batches;
    // A pending Atomics.waitAsync does not keep Node's event loop alive (the threads are unref'd
    // so that idle ones never do): while an asynchronous copy waits, one thread is ref'd.
    if (this.waitingAsync++ === 0) this.workers[0]?.ref();
    try {
      for (;;) {
        const left = Atomics.load(batches, ticket.batch);
        if (left === 0) break;
        const wait = Atomics.waitAsync(batches, ticket.batch, left);
        if (wait.async) await wait.value;
      }
    } finally {
      if (--this.waitingAsync === 0) this.workers[0]?.unref();
      this.release(ticket.batch);
    }
  }

  /** Stops the threads (they finish what was posted); later copies run on the calling thread. */
  destroy(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    this.ring?.stop();
    this.ring = undefined;
    this.workers = [];
  }

  private release(batch: number): void {
    this.free.push(batch);
  }

  /** The ring, starting the threads on first use; undefined to copy on the calling thread. */
  private begin(): Ring | undefined {
    if (this.ring !== undefined) return this.ring;
    if (this.threads === 0 || this.failed || this.destroyed) return undefined;
    // Run from TypeScript sources (tsx) or from a bundle, the module is not there: say so now rather
    // than start threads that can only fail.
    if (this.workerUrl.protocol === 'file:' && !existsSync(fileURLToPath(this.workerUrl))) {
      this.fail(new Error(`${fileURLToPath(this.workerUrl)} does not exist (run from TypeScript sources or a bundle?)`));
      return undefined;
    }
    const ring = new Ring();
    try {
      for (let i = 0; i < this.threads; i++) {
        const worker = new Worker(bootstrap(this.workerUrl), { eval: true, workerData: ring.buffers });
        worker.unref();
        // A thread that fails to start reports here; copies then run on the calling thread.
        worker.on('error', (error) => this.fail(error));
        this.workers.push(worker);
      }
    } catch (error) {
      this.fail(error);
      return undefined;
    }
    const started = ring.waitReady(this.threads, START_TIMEOUT_MS);
    if (started !== 'ready') {
      ring.stop();
      this.fail(
        new Error(
          started === 'failed'
            ? `a copy thread could not load ${this.workerUrl.href}`
            : `only ${ring.readyThreads} of ${this.threads} copy threads started within ${START_TIMEOUT_MS} ms`,
        ),
      );
      return undefined;
    }
    this.ring = ring;
    return ring;
  }

  private fail(error: unknown): void {
    if (this.failed) return;
    this.failed = true;
    this.ring?.stop();
    this.ring = undefined;
    process.emitWarning(
      `vram's copy threads could not start (${error instanceof Error ? error.message : String(error)}); ` +
        'staged copies run on the main thread instead, at single-thread speed.',
      { code: 'VRAM_COPY_THREADS', type: 'PerformanceWarning' },
    );
  }
}

/** Splits `copies` into at most `threads` pieces each (at least MIN_PIECE bytes) and posts them as `batch`. */
function post(ring: Ring, batch: number, copies: readonly HostCopy[], threads: number): void {
  const first = ring.posted;
  let count = 0;
  const total = copies.reduce((sum, c) => sum + c.bytes, 0);
  const perPiece = Math.max(MIN_PIECE, Math.ceil(total / threads));
  for (const c of copies) {
    const pieces = Math.min(PIECES - count - (copies.length - 1), Math.max(1, Math.round(c.bytes / perPiece)));
    const step = Math.ceil(c.bytes / pieces / 4096) * 4096;
    for (let offset = 0; offset < c.bytes; offset += step) {
      const bytes = Math.min(step, c.bytes - offset);
      ring.write(first + count, batch, c.dst + offset, c.src + offset, bytes);
      count++;
    }
  }
  if (count === 0) return;
  ring.post(batch, count);
}

/** Spins on a counter this long before sleeping on it. */
export const SPIN_NS = 20_000;

/** Blocks until batch `batch` has no job left: spins for SPIN_NS, then sleeps on the counter. */
function waitBatch(batches: Int32Array, batch: number): void {
  const spinUntil = process.hrtime.bigint() + BigInt(SPIN_NS);
  while (Atomics.load(batches, batch) !== 0) {
    if (process.hrtime.bigint() > spinUntil) break;
  }
  for (;;) {
    const left = Atomics.load(batches, batch);
    if (left === 0) return;
    Atomics.wait(batches, batch, left);
  }
}

/** The copies, on the calling thread. */
function copyHere(copies: readonly HostCopy[]): void {
  if (copies.length === 0) return;
  const memcpy = hostMemcpy();
  for (const c of copies) if (c.bytes > 0) memcpy(c.dst, c.src, c.bytes);
}
