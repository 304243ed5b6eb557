/**
 * Memory the program may have dropped: every live allocation (a buffer or an array's memory, any
 * kind, any device) counted, by allocation site when stacks are captured, and a garbage collection
 * asked for when memory allocated since the last one and not freed grows large beside the device
 * (Note [Dropped memory], docs/design/dropped-memory.md). `lifetime.ts` calls in at each
 * allocation and release; the out-of-memory paths ask for a collection before they give up.
 */
import type { Device } from '../device.js';
import { callerFrames } from '../util/call-stack.js';
import { collectGarbage } from '../util/collect-garbage.js';
import { formatBytes } from '../util/size.js';
import { extendMessage } from '../resource/cache-registry.js';
import { setOutOfMemoryNote } from '../resource/resource.js';

/** Live allocations made at one site (one captured stack). */
interface Site {
  count: number;
  bytes: number;
  /** `count` when `memorySummary` last looked (its growth since is what it points at). */
  seen: number;
}

let liveCount = 0;
let liveBytes = 0;
const sites = new Map<string, Site>();

/** The least memory allocated and not freed between two collections asked for. */
const LEAST_STEP = 64 * 1024 * 1024;
/** Bytes allocated since the last collection asked for and not freed since. */
let unfreed = 0;
/** `unfreed` at which the device is looked at again (the hit path pays one compare). */
let checkAt = LEAST_STEP;

/** Set when pressure asked for a collection; the next asynchronous allocation takes a turn first. */
let turnDue = false;

/** Registers the allocations not yet registered with the backstop (lifetime.ts sets it). */
let beforeCollection: () => void = () => {};

/**
 * Sets what runs before each collection this module asks for: the backstop's registration of the
 * newest allocations (`registerPending`), so that the collection can reclaim them.
 *
 * @param run Called before each collection.
 * @internal
 */
export function setBeforeCollection(run: () => void): void {
  beforeCollection = run;
}

/**
 * Counts a new allocation.
 *
 * @param bytes Its size.
 * @param owner The device that owns it (whose memory the pressure is measured against).
 * @param stack Its stack, when captured.
 * @internal
 */
export function countAllocated(bytes: number, owner: Device, stack: string | undefined): void {
  liveCount += 1;
  liveBytes += bytes;
  if (stack !== undefined) {
    const site = sites.get(stack);
    if (site === undefined) sites.set(stack, { count: 1, bytes, seen: 0 });
    else {
      site.count += 1;
      site.bytes += bytes;
    }
  }
  unfreed += bytes;
  if (unfreed >= checkAt) pressure(owner);
}

/**
 * Counts a release.
 *
 * @param bytes Its size.
 * @param stack Its stack, when captured.
 * @param explicit True for `free()`/`using`/`tidy`, false for the garbage-collection backstop.
 * @internal
 */
export function countReleased(bytes: number, stack: string | undefined, explicit: boolean): void {
  liveCount -= 1;
  liveBytes -= bytes;
  if (stack !== undefined) {
    const site = sites.get(stack);
    if (site !== undefined && --site.count === 0) sites.delete(stack);
    else if (site !== undefined) site.bytes -= bytes;
  }
  if (explicit) {
    unfreed -= bytes;
    if (unfreed < 0) unfreed = 0;
  }
}

/**
 * Asks for a collection when what was allocated and not freed since the last one reaches an
 * eighth of the device's memory or half of what it has free, whichever is less (at least 64 MiB):
 * device memory presses on the collector in proportion to its size. The collection is scheduled
 * (V8 finishes it in the program's own time) and its finalizers run on a later turn of the event
 * loop.
 */
function pressure(owner: Device): void {
  let step = LEAST_STEP;
  try {
    const { free, total } = owner.memInfo();
    step = Math.max(LEAST_STEP, Math.min(total / 8, free / 2));
  } catch {
    // A device that cannot say: the least step.
  }
  checkAt = step;
  if (unfreed < step) return;
  unfreed = 0;
  beforeCollection();
  turnDue = collectGarbage(false);
}

/**
 * For the asynchronous allocation paths: after pressure asked for a collection, that collection
 * finished now and two turns of the event loop (once; finalizers run on the first after a
 * collection, and what they free may queue more), so that the finalizers of what the program
 * dropped run before it allocates more; a loop whose awaits never leave the microtask queue
 * otherwise grows until the device refuses. Undefined when none is due (the hit path pays one
 * compare).
 *
 * @returns The turn to await, or undefined.
 * @internal
 */
export function pressureTurns(): Promise<void> | undefined {
  if (!turnDue) return undefined;
  turnDue = false;
  collectGarbage(true);
  return turns(2);
}

/**
 * After an allocation was refused: when the program holds live allocations (some of which it may
 * have dropped), a full collection now, so that what it dropped is found and its finalizers queued
 * (they run on the next turns of the event loop, which the asynchronous paths then wait for).
 *
 * @returns True when a collection ran.
 * @internal
 */
export function collectDropped(): boolean {
  if (liveCount === 0) return false;
  unfreed = 0;
  beforeCollection();
  return collectGarbage(true);
}

/**
 * `collectDropped`, then two turns of the event loop (finalizers run on the first after a
 * collection; what they free may queue more work), for the asynchronous paths.
 *
 * @returns True when a collection ran.
 * @internal
 */
export async function reclaimDropped(): Promise<boolean> {
  if (!collectDropped()) return false;
  await turns(2);
  return true;
}

/** `count` turns of the event loop. */
async function turns(count: number): Promise<void> {
  for (let i = 0; i < count; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}

/** One allocation site of live memory. */
export interface LiveAllocationSite {
  /** The program's frames of its stack, innermost first (vram's own left out). */
  readonly frames: readonly string[];
  /** Live allocations made there. */
  readonly count: number;
  /** Their bytes. */
  readonly bytes: number;
  /** How many more are live than at the previous `liveAllocations({ since: true })`. */
  readonly growth: number;
}

/** What `liveAllocations` returns. */
export interface LiveAllocations {
  /** Buffers and arrays' memory allocated and not yet freed (nor reclaimed by the backstop). */
  readonly count: number;
  /** Their bytes. */
  readonly bytes: number;
  /** By site, the most live first; empty unless `captureAllocationStacks(true)` was on. */
  readonly sites: readonly LiveAllocationSite[];
}

/**
 * The live allocations the program holds: every buffer and array's memory made and not yet freed
 * (dropped ones included, until the garbage-collection backstop reclaims them).
 *
 * @param mark True: remember each site's count now, so the next call's `growth` is measured from here.
 * @returns Counts, and the sites (most live allocations first) when stacks are captured.
 * @internal
 */
export function liveAllocations(mark = false): LiveAllocations {
  const list: LiveAllocationSite[] = [];
  const byFrames = new Map<string, { frames: string[]; count: number; bytes: number; growth: number }>();
  for (const [stack, site] of sites) {
    const frames = callerFrames(stack);
    const key = frames.join('\n');
    const entry = byFrames.get(key);
    if (entry === undefined) byFrames.set(key, { frames, count: site.count, bytes: site.bytes, growth: site.count - site.seen });
    else {
      entry.count += site.count;
      entry.bytes += site.bytes;
      entry.growth += site.count - site.seen;
    }
    if (mark) site.seen = site.count;
  }
  for (const entry of byFrames.values()) list.push(entry);
  list.sort((a, b) => b.count - a.count || b.bytes - a.bytes);
  return { count: liveCount, bytes: liveBytes, sites: list };
}

/** What an out-of-memory message says of dropped memory. */
export const DROPPED_SENTENCE = 'arrays dropped without `free()`, `using` or `tidy` stay allocated until garbage collection';

/** How many allocation sites the message names. */
const SITES_NAMED = 3;

/**
 * Adds to an out-of-memory error that reaches the program what it holds and may have dropped: its
 * live allocations (by site when stacks are captured) and the sentence that names the cause, after
 * starting the collection that finds the dropped ones (their memory comes back on a later turn of
 * the event loop).
 */
setOutOfMemoryNote((error) => {
  if (liveCount === 0 || !(error instanceof Error)) return;
  const live = liveAllocations();
  collectDropped();
  const named = live.sites.slice(0, SITES_NAMED).map((s) => `${s.count} ${s.frames[0] ?? 'at an unknown site'}`);
  extendMessage(
    error,
    `the program holds ${live.count} live allocation${live.count === 1 ? '' : 's'} (${formatBytes(live.bytes)}) it made and has not freed` +
      (named.length > 0 ? ` (${named.join(', ')})` : ' (captureAllocationStacks(true) names their sites)') +
      `: ${DROPPED_SENTENCE}; a collection was started, and what was dropped comes back after a turn of the event loop ` +
      '(wrap each step in `tidy`, or free what it drops)',
  );
});
