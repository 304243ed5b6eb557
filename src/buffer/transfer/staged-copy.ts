/**
 * Staged copies between pageable JavaScript memory and the device: the data goes through a few
 * pinned chunks lent by a PinnedHostPool, pipelined, so the host-side copy of one chunk (on the copy
 * threads) runs while the copy engine moves another. To the device: chunk i is copied into a free
 * staging chunk, then its DMA is queued and the next chunk is copied meanwhile; a staging chunk is
 * refilled only after the event recorded behind its last DMA has completed. From the device: the
 * DMAs of the first `depth` chunks are queued at once; as each completes its chunk is copied out
 * and the staging chunk's next DMA queued.
 *
 * The pipeline is written once, as a generator that yields its steps (wait for an event, start host
 * copies, wait for them); `runStaged` drives it blocking (Atomics.wait, cuEventSynchronize) and
 * `runStagedAsync` without ever blocking the event loop (Atomics.waitAsync, polled events). Either way the
 * generator's `finally` gives every chunk back, on the stream, so the pool reuses a chunk only after
 * the DMA that reads or writes it, even when a copy fails halfway.
 *
 * JavaScript memory is addressed natively for the duration of the copy; the caller keeps it
 * reachable. It can still be detached (transferred to a worker, `ArrayBuffer.prototype.transfer`)
 * while an asynchronous copy yields: that is checked before and after each chunk's host copy, and
 * ends the copy with a DetachedBufferError. (A transfer keeps the bytes alive in the receiving
 * buffer, so a host copy already running when it happens reads or writes live memory.)
 */
import type { Backend, Ptr } from '../../backend/backend.js';
import { nativeAddress } from '../../cuda/host-memcpy.js';
import type { Device } from '../../device.js';
import { DetachedBufferError } from '../../errors.js';
import { Event, type StreamRef } from '../../stream.js';
import type { PinnedChunk, PinnedHostPool } from '../../resource/suballoc/pinned-host-pool.js';
import type { CopyThreads, CopyTicket, HostCopy } from './copy-threads.js';

/** A staged copy: which way, between what, through which pool and threads. */
export interface StagedCopy {
  /** 'to-device' (JavaScript memory -> device) or 'from-device'. */
  readonly direction: 'to-device' | 'from-device';
  /** The device whose context the DMAs are queued in. */
  readonly device: Device;
  /** The stream the DMAs are queued on (the legacy default stream for synchronous copies). */
  readonly stream: StreamRef;
  /** Device address of the first byte. */
  readonly devicePtr: Ptr;
  /** The JavaScript memory, exactly the bytes copied. */
  readonly host: Uint8Array;
  /** Bytes per staging chunk. */
  readonly chunkBytes: number;
  /** Staging chunks in flight at most (2 or more for overlap). */
  readonly depth: number;
  readonly pool: PinnedHostPool;
  readonly threads: CopyThreads;
}

/** A step of the pipeline: wait for an event, start host copies (answered with their ticket), or wait for them. */
type Step =
  | { readonly kind: 'event'; readonly event: Event }
  | { readonly kind: 'start'; readonly copies: readonly HostCopy[] }
  | { readonly kind: 'finish'; readonly ticket: CopyTicket };

/** The pipeline's generator: yields steps, is answered with a ticket after each 'start'. */
type Pipeline = Generator<Step, void, CopyTicket | undefined>;

/**
 * Runs a staged copy to the end, blocking the calling thread.
 *
 * @param copy What to copy.
 * @throws {DetachedBufferError} When the JavaScript memory is detached.
 * @throws {CudaError | OutOfMemoryError} From the driver or the staging pool.
 */
export function runStaged(copy: StagedCopy): void {
  const steps = pipeline(copy);
  let next = steps.next();
  while (next.done !== true) {
    const step = next.value;
    let answer: CopyTicket | undefined;
    try {
      if (step.kind === 'event') step.event.synchronize();
      else if (step.kind === 'start') answer = copy.threads.start(step.copies);
      else copy.threads.wait(step.ticket);
    } catch (error) {
      next = steps.throw(error); // runs the pipeline's finally, then rethrows
      continue;
    }
    next = steps.next(answer);
  }
}

/**
 * Runs a staged copy to the end without blocking the event loop.
 *
 * @param copy What to copy.
 * @returns A promise that resolves when every byte has arrived.
 * @throws {DetachedBufferError} When the JavaScript memory is detached meanwhile (rejects).
 * @throws {CudaError | OutOfMemoryError} From the driver or the staging pool (rejects).
 */
export async function runStagedAsync(copy: StagedCopy): Promise<void> {
  const steps = pipeline(copy);
  let next = steps.next();
  while (next.done !== true) {
    const step = next.value;
    let answer: CopyTicket | undefined;
    try {
      if (step.kind === 'event') await step.event.synchronized();
      else if (step.kind === 'start') answer = copy.threads.start(step.copies);
      else await copy.threads.waitAsync(step.ticket);
    } catch (error) {
      next = steps.throw(error);
      continue;
    }
    next = steps.next(answer);
  }
}

/**
 * The pipeline of either direction. The host copy of chunk i + 1 is started before the one of
 * chunk i is waited for, so the copy threads go from one chunk to the next without idling while
 * the main thread queues a DMA; `finally` waits for any host copy still running (only after an
 * error: a short blocking wait), then gives the staging chunks back on the stream.
 */
function* pipeline(copy: StagedCopy): Pipeline {
  const { device, stream, host, chunkBytes } = copy;
  const bytes = host.byteLength;
  const chunks = Math.ceil(bytes / chunkBytes);
  // Two slots at least when there are two chunks: chunk i + 1's host copy runs beside chunk i's.
  const slots = Math.min(Math.max(2, copy.depth), chunks);
  const backend: Backend = device.backend;
  const hostAddress = nativeAddress(host);
  const toDevice = copy.direction === 'to-device';
  const staging: PinnedChunk[] = [];
  const stagingAddress: number[] = [];
  const events: Event[] = [];
  /** Host copies started and not yet waited for, by chunk. */
  const running = new Map<number, CopyTicket>();
  const attached = (): void => {
    if (host.byteLength !== bytes) {
      throw new DetachedBufferError(`a staged copy of ${bytes} bytes: the JavaScript memory was detached while it was being copied`);
    }
  };
  /** Queues the DMA of chunk `i` through its staging chunk, and the event behind it. */
  const dma = (i: number): void => {
    const k = i % slots;
    const offset = i * chunkBytes;
    const length = Math.min(chunkBytes, bytes - offset);
    device.makeCurrent();
    if (toDevice) backend.memcpyAsync(copy.devicePtr + offset, staging[k]!.ptr, length, stream.handle);
    else backend.memcpyAsync(staging[k]!.ptr, copy.devicePtr + offset, length, stream.handle);
    events[k]!.record(stream);
  };
  /**
   * Starts the host copy of chunk `i` once its staging chunk is ready: to the device, when the
   * DMA that last read the staging chunk is done; from it, when the chunk's own DMA is.
   */
  function* startHostCopy(i: number): Pipeline {
    const k = i % slots;
    if (!toDevice || i >= slots) yield { kind: 'event', event: events[k]! };
    attached();
    const offset = i * chunkBytes;
    const length = Math.min(chunkBytes, bytes - offset);
    const copies = [
      toDevice ? { dst: stagingAddress[k]!, src: hostAddress + offset, bytes: length } : { dst: hostAddress + offset, src: stagingAddress[k]!, bytes: length },
    ];
    const ticket = yield { kind: 'start', copies };
    if (ticket === undefined) throw new TypeError('staged copy: the driver answered a start with no ticket');
    running.set(i, ticket);
  }
  try {
    for (let k = 0; k < slots; k++) {
      const chunk = copy.pool.acquire(Math.min(chunkBytes, bytes));
      staging.push(chunk);
      stagingAddress.push(nativeAddress(chunk.view()));
      events.push(Event.create({ device, timing: false }));
    }
    if (!toDevice) for (let i = 0; i < slots; i++) dma(i);
    yield* startHostCopy(0);
    for (let i = 0; i < chunks; i++) {
      if (i + 1 < chunks) yield* startHostCopy(i + 1);
      const ticket = running.get(i)!;
      running.delete(i);
      yield { kind: 'finish', ticket };
      attached();
      if (toDevice) dma(i);
      else if (i + slots < chunks) dma(i + slots);
    }
    // To the device, stream order: the last DMA's event completes after every earlier one.
    if (toDevice) yield { kind: 'event', event: events[(chunks - 1) % slots]! };
  } finally {
    for (const ticket of running.values()) copy.threads.wait(ticket);
    // Pending events may be destroyed (the driver keeps what queued work needs); the chunks go
    // back on the stream, so a copy that failed halfway cannot hand them out under a running DMA.
    for (const event of events) event.destroy();
    for (const chunk of staging) chunk.free(stream);
  }
}
