/**
 * The out-of-memory observer: at the moment an out-of-memory error reaches the program (the
 * outermost `allocate`, not a resource's call to its upstream that a retry may still recover), it
 * adds to the error's message the largest live allocation sites (where the memory history records
 * stacks, or a TrackingAdaptor in the stack captures them) and the fragmentation of the
 * sub-allocator below (its largest free block against its free bytes), writes a memory snapshot to
 * the file `VRAM_OOM_SNAPSHOT` names, and calls the listeners `onOutOfMemory` registered (PyTorch's
 * `_cuda_attach_out_of_memory_observer`). Loaded with the package; before it throws, the error
 * reads as the resource made it.
 */
import { writeFileSync } from 'node:fs';
import { Device } from '../device.js';
import { CudaError, isOutOfMemory, OutOfMemoryError } from '../errors.js';
import { formatBytes } from '../util/size.js';
import { extendMessage } from '../resource/cache-registry.js';
import { memoryHistory, resourceRecord, type LiveSite } from './history.js';
import { setOutOfMemoryObserver, upstreamChain, type MemoryResource } from '../resource/resource.js';
import type { SnapshotSegment } from '../resource/figures.js';
import { takeSnapshot } from './snapshot.js';
import { TrackingAdaptor } from '../resource/adaptors/tracking.js';
import { anyText, variableReader } from '../util/environment.js';

/** The environment variable naming the file the observer writes a snapshot to. */
export const OOM_SNAPSHOT_VARIABLE = 'VRAM_OOM_SNAPSHOT';

/** Its reader: a file name (relative to the working folder, as a shell's would be), read at each error. */
export const OOM_SNAPSHOT = variableReader(OOM_SNAPSHOT_VARIABLE, anyText);

/** How many allocation sites the message names. */
const SITES_NAMED = 3;

/** What a listener of `onOutOfMemory` is told. */
export interface OutOfMemoryEvent {
  /** The error about to be thrown (its message already says where the memory went). */
  readonly error: OutOfMemoryError | CudaError;
  /** The resource whose `allocate` the program called. */
  readonly resource: MemoryResource;
  /** The bytes asked for. */
  readonly requestedBytes: number;
  /** The stream handle of the call. */
  readonly stream: number;
}

const listeners = new Set<(event: OutOfMemoryEvent) => void>();

/**
 * Calls `listener` at every out-of-memory error that reaches the program, before it is thrown
 * (after the snapshot of `VRAM_OOM_SNAPSHOT`, if set, was written). A listener that throws does
 * not replace the error: its failure is a process warning. An out-of-memory error that a listener
 * itself runs into is thrown to it as usual, without calling the listeners again.
 *
 * @param listener Told the error, the resource, the request and the stream.
 * @returns A function that removes the listener.
 * @throws {TypeError} When `listener` is not a function.
 * @example
 * ```ts
 * const remove = onOutOfMemory(({ error }) => log.error(error.message));
 * // ...
 * remove();
 * ```
 */
export function onOutOfMemory(listener: (event: OutOfMemoryEvent) => void): () => void {
  if (typeof listener !== 'function') throw new TypeError('listener must be a function');
  listeners.add(listener);
  return () => {
    listeners.delete(listener);
  };
}

/** The sites holding the most live memory of `top`'s stack: from the history, else a tracking adaptor's stacks. */
function largestSites(top: MemoryResource): LiveSite[] {
  const history = top.deviceOrdinal >= 0 ? memoryHistory(top.deviceOrdinal) : undefined;
  if (history?.recording === true && history.stacks) {
    const sites = history.largestLiveSites(SITES_NAMED, resourceRecord(top).id);
    if (sites.length > 0) return sites;
  }
  const tracking = upstreamChain(top).find((r): r is TrackingAdaptor => r instanceof TrackingAdaptor && r.captureStacks && !r.destroyed);
  if (tracking === undefined) return [];
  const bySite = new Map<string, { bytes: number; count: number }>();
  for (const { stack = '', bytes } of tracking.outstanding()) {
    const site = bySite.get(stack) ?? { bytes: 0, count: 0 };
    site.bytes += bytes;
    site.count += 1;
    bySite.set(stack, site);
  }
  return [...bySite.entries()]
    .sort((a, b) => b[1].bytes - a[1].bytes)
    .slice(0, SITES_NAMED)
    .map(([stack, site]) => ({ frames: stack === '' ? [] : stack.split('\n'), ...site }));
}

/**
 * Free bytes and the largest free block of a sub-allocator's segments. In a virtual range only
 * what lies on mapped pages counts (the rest is address space, not memory).
 */
function freeSpace(segments: readonly SnapshotSegment[]): { free: number; largest: number } {
  let free = 0;
  let largest = 0;
  for (const segment of segments) {
    // Free runs: adjacent free or parked blocks, clipped to mapped pages in a virtual range.
    const ranges: Array<[number, number]> =
      segment.pages === null
        ? [[segment.address, segment.address + segment.bytes]]
        : segment.pages.mapped.map(([first, count]) => [
            segment.address + first * segment.pages!.pageBytes,
            segment.address + (first + count) * segment.pages!.pageBytes,
          ]);
    let run = 0;
    let runEnd = -1; // runs do not cross segments: two chunks may be adjacent, not one block
    for (const block of segment.blocks) {
      if (block.state === 'live') continue;
      for (const [start, end] of ranges) {
        const a = Math.max(start, block.address);
        const b = Math.min(end, block.address + block.bytes);
        if (b <= a) continue;
        free += b - a;
        run = a === runEnd ? run + (b - a) : b - a;
        runEnd = b;
        largest = Math.max(largest, run);
      }
    }
  }
  return { free, largest };
}

/** The fragmentation of the first sub-allocator in the stack that lays out free blocks, in words. */
function fragmentation(top: MemoryResource): string | undefined {
  for (const mr of upstreamChain(top)) {
    if (mr.destroyed) return undefined;
    const segments = mr.memorySegments();
    if (segments === undefined) continue;
    if (segments.every((s) => s.kind === 'allocation')) return undefined; // one driver allocation per block: no free blocks
    const { free, largest } = freeSpace(segments);
    return free === 0
      ? `no free memory cached in ${mr.describe()}`
      : `largest free block ${formatBytes(largest)} of ${formatBytes(free)} free in ${mr.describe()}`;
  }
  return undefined;
}

/** The message's addition: the largest live sites and the fragmentation, where known. */
function diagnosis(top: MemoryResource): string {
  const parts: string[] = [];
  const sites = largestSites(top);
  if (sites.length > 0) {
    parts.push(
      `largest live allocation sites: ${sites
        .map((s) => `${formatBytes(s.bytes)} in ${s.count} block${s.count === 1 ? '' : 's'} ${s.frames[0] ?? 'at an unknown site'}`)
        .join('; ')}`,
    );
  }
  const fragments = fragmentation(top);
  if (fragments !== undefined) parts.push(`fragmentation: ${fragments}`);
  return parts.join('; ');
}

function warn(what: string, error: unknown): void {
  process.emitWarning(`${what}: ${error instanceof Error ? error.message : String(error)}`, { code: 'VRAM_OOM_OBSERVER' });
}

/** Set while an error is being observed: one that a listener (or the snapshot) runs into is not observed again. */
let observing = false;

function observe(resource: MemoryResource, error: unknown, bytes: number, stream: number): void {
  if (!isOutOfMemory(error) || observing) return;
  observing = true;
  try {
    observeOnce(resource, error, bytes, stream);
  } finally {
    observing = false;
  }
}

function observeOnce(resource: MemoryResource, error: OutOfMemoryError | CudaError, bytes: number, stream: number): void {
  // Whatever goes wrong while looking at the memory, the program gets its out-of-memory error.
  try {
    const addition = diagnosis(resource);
    if (addition !== '') extendMessage(error, addition);
  } catch (failure) {
    warn('the out-of-memory observer could not describe the memory', failure);
  }
  const path = OOM_SNAPSHOT.read();
  if (path !== undefined && resource.deviceOrdinal >= 0) {
    try {
      const snapshot = takeSnapshot(Device.get(resource.deviceOrdinal), resource, {
        kind: 'out-of-memory',
        error: {
          message: error.message,
          requestedBytes: bytes,
          resource: resourceRecord(resource).id,
          reason: error instanceof OutOfMemoryError ? error.reason : 'device',
          call: error.call,
        },
      });
      writeFileSync(path, JSON.stringify(snapshot));
    } catch (failure) {
      warn(`the out-of-memory observer could not write a snapshot to ${path} (${OOM_SNAPSHOT_VARIABLE})`, failure);
    }
  }
  for (const listener of listeners) {
    try {
      listener({ error, resource, requestedBytes: bytes, stream });
    } catch (failure) {
      warn('an onOutOfMemory listener failed', failure);
    }
  }
}

setOutOfMemoryObserver(observe);
