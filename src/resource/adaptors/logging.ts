/**
 * LoggingAdaptor: writes every allocation and deallocation as RMM's CSV allocation log, so a
 * program's real allocation pattern can be kept, replayed through other resources (`vram replay`)
 * and compared with RMM's own tools.
 */
import { closeSync, openSync, writeSync } from 'node:fs';
import { threadId } from 'node:worker_threads';
import type { Ptr } from '../../backend/backend.js';
import { checkBytes } from '../../validate.js';
import { ResourceAdaptor } from './adaptor.js';
import type { MemoryResource } from '../resource.js';
import type { StreamRef } from '../../stream.js';
import { readOptions } from '../../util/options.js';

/** The header line of RMM's allocation log (rmm::mr::logging_resource_adaptor). */
export const ALLOCATION_LOG_HEADER = 'Thread,Time,Action,Pointer,Size,Stream';

/** Where log lines go: a file path (truncated, then buffered) or a function called per line. */
export type LogSink = string | ((line: string) => void);

/** Options of a LoggingAdaptor. */
export interface LoggingOptions {
  /** Buffered lines that trigger a write to a file sink (default 4096). */
  readonly bufferLines?: number;
}

/**
 * Logs each call as `Thread,Time,Action,Pointer,Size,Stream`: Thread is the worker thread id (0 on
 * the main thread); Time is whole microseconds since the adaptor was created (the shared replay
 * traces use this form; RMM itself writes wall-clock `HH:MM:SS.ffffff`, and the replay parser reads
 * both); Action is `allocate`, `free` or, when the upstream fails, `allocate failure` with pointer
 * 0x0 (as RMM does); Pointer is 0x-hex; Stream is the stream handle. A file sink is written in
 * batches and on `flush()` and `destroy()`; call `destroy()` (or `using`) so the tail reaches the
 * file. When the sink throws on an allocation, the call fails with the sink's error and nothing is
 * kept: the block is given back to the upstream first. When it throws on a free, or on the line of
 * an allocation that failed, the call's own outcome stands (the block is freed; the allocation's
 * error is thrown) and the sink's failure is a process warning (code `VRAM_LOG_SINK`): an error
 * there would hide work that was done, and a caller retrying the free would free twice.
 *
 * @example
 * ```ts
 * using logged = new LoggingAdaptor(new PoolResource(), 'allocations.csv');
 * logged.deallocate(logged.allocate(1024), 1024);
 * ```
 */
export class LoggingAdaptor extends ResourceAdaptor {
  private readonly origin = performance.now();
  private readonly emit: ((line: string) => void) | undefined;
  private readonly path: string | undefined;
  private fd: number | undefined;
  private buffer: string[] = [];
  private readonly bufferLines: number;

  /**
   * @param upstream The resource whose calls are logged.
   * @param sink A file path (created or truncated) or a function called with each line.
   * @param options `bufferLines`: lines buffered before a write to a file.
   * @throws {TypeError} When `upstream` is not a MemoryResource.
   * @throws {UseAfterFreeError} When it was destroyed.
   * @throws {TypeError} For a sink that is neither, or `options` with a key other than `bufferLines`.
   * @throws {RangeError} When `bufferLines` is not a positive whole number.
   * @throws {Error} When the file cannot be opened (Node's system error: ENOENT, EACCES, ...).
   * @example
   * ```ts
   * using logged = new LoggingAdaptor(pool, (line) => lines.push(line)); // a function sink: nothing is buffered
   * ```
   */
  constructor(upstream: MemoryResource, sink: LogSink, options: LoggingOptions = {}) {
    super(upstream);
    options = readOptions('new LoggingAdaptor', options, { bufferLines: true });
    this.bufferLines = options.bufferLines === undefined ? 4096 : checkBytes(options.bufferLines, 'bufferLines');
    if (typeof sink === 'string') {
      this.path = sink;
      this.fd = openSync(sink, 'w');
      this.buffer.push(ALLOCATION_LOG_HEADER);
    } else if (typeof sink === 'function') {
      this.emit = sink;
      sink(ALLOCATION_LOG_HEADER);
    } else {
      throw new TypeError('LoggingAdaptor: sink must be a file path or a function taking a line');
    }
  }

  /** Allocates through the upstream and logs it (or logs the failure and rethrows). */
  protected override doAllocate(bytes: number, handle: number, stream: StreamRef | undefined): Ptr {
    let ptr: Ptr;
    try {
      ptr = this.upstream.allocate(bytes, stream);
    } catch (error) {
      this.writeAfterTheFact(`${threadId},${this.now()},allocate failure,0x0,${bytes},${handle}`);
      throw error;
    }
    try {
      this.write(`${threadId},${this.now()},allocate,0x${ptr.toString(16)},${bytes},${handle}`);
    } catch (error) {
      // The caller never sees the pointer, so it must not stay allocated.
      this.upstream.deallocate(ptr, bytes, stream);
      throw error;
    }
    return ptr;
  }

  /** Deallocates through the upstream and logs it (only once it succeeded). */
  protected override doDeallocate(ptr: Ptr, bytes: number, handle: number, stream: StreamRef | undefined): void {
    this.upstream.deallocate(ptr, bytes, stream);
    this.writeAfterTheFact(`${threadId},${this.now()},free,0x${ptr.toString(16)},${bytes},${handle}`);
  }

  /**
   * Writes buffered lines to the file sink (a function sink has nothing buffered), e.g. before
   * reading the log while the adaptor is still in use.
   *
   * @throws {Error} When the write fails (Node's system error: ENOSPC, EIO, ...); the lines stay buffered.
   * @example
   * ```ts
   * logged.flush();
   * const trace = readAllocationLog('allocations.csv');
   * ```
   */
  flush(): void {
    if (this.fd === undefined || this.buffer.length === 0) return;
    writeSync(this.fd, this.buffer.join('\n') + '\n');
    this.buffer = [];
  }

  /** Flushes and closes the file sink; the adaptor refuses later calls. */
  protected override doDestroy(): void {
    if (this.fd === undefined) return;
    try {
      this.flush();
    } finally {
      closeSync(this.fd);
      this.fd = undefined;
    }
  }

  protected override describeParameters(): string {
    return this.path !== undefined ? `file=${this.path}` : 'sink=function';
  }

  private now(): number {
    return Math.round((performance.now() - this.origin) * 1000);
  }

  /** Writes the line of a call whose outcome is already decided: a failing sink is only a warning. */
  private writeAfterTheFact(line: string): void {
    try {
      this.write(line);
    } catch (error) {
      process.emitWarning(`${this.describe()} could not log '${line}': ${error instanceof Error ? error.message : String(error)}`, { code: 'VRAM_LOG_SINK' });
    }
  }

  private write(line: string): void {
    if (this.emit !== undefined) {
      this.emit(line);
    } else if (this.fd !== undefined) {
      this.buffer.push(line);
      if (this.buffer.length >= this.bufferLines) this.flush();
    }
  }
}
