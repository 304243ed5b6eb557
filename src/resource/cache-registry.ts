/**
 * Every live resource once it is whole (its first allocation: Note [Cache registry membership],
 * docs/design/cache-registry-membership.md), weakly held, so that an allocation the driver refuses
 * can release what all of vram's resources on that device cache and retry once (PyTorch's rule for
 * cudaMalloc failures).
 * A program often holds several caches on one device (the default resource's pool, a pool of its
 * own, a binning stack): memory one of them caches is memory the driver refuses to the others, so
 * releasing only the stack that failed is not enough. Held weakly: a resource the program dropped
 * must stay collectable, and until it is, its cache is released like any other.
 *
 * Used at the two kinds of place a driver allocation can fail: the outermost `allocate` of any
 * resource (`MemoryResource.allocate`; no resource is then in the middle of a call, so releasing
 * their caches cannot re-enter one) and the few allocations that do not go through a resource
 * (cuMemAllocPitch).
 */
import { Device } from '../device.js';
import { isOutOfMemory, OutOfMemoryError } from '../errors.js';
import { formatBytes } from '../util/size.js';
import type { MemoryFigures, MemoryKind } from './figures.js';

/**
 * What the registry needs of a resource: the part of MemoryResource's contract that releases and
 * measures a cache (declared here, so the contract can use the registry without a cycle).
 */
export interface CachingResource {
  readonly kind: MemoryKind;
  readonly deviceOrdinal: number;
  readonly upstream?: CachingResource;
  readonly destroyed: boolean;
  /** True once a destroyed resource's memory went back (its last live block returned). */
  readonly released: boolean;
  releaseCached(): number;
  memoryFigures(): MemoryFigures | undefined;
  describe(): string;
}

/** Which caches a refusal concerns: device (or managed) memory of one device ordinal, or pinned host memory. */
export type CachedMemory = number | 'pinned-host';

const live = new Set<WeakRef<CachingResource>>();
const collected = new FinalizationRegistry<WeakRef<CachingResource>>((ref) => {
  live.delete(ref);
});
/** Set while caches are being released: a release never starts another. */
let releasing = false;
/** The bytes the refusal being answered asked for (`releaseCaches`' `bytes`): what spilling frees at most about. */
let wanted: number | undefined;
/** Set while an allocation that waits tries (`withoutHostWait`): releasing caches must not synchronise the device. */
let hostWaitRefused = false;
/** The resources a release has warned of (`guarded`): each once per `releaseCaches`. */
const warned = new Set<CachingResource>();

/**
 * Runs `fn` (one try of an allocation that waits for memory) with the release of caches kept from
 * synchronising the device: memory freed on a stream whose work is still running stays cached, and
 * the waiting allocation's next poll finds it once that stream has passed. A waiting allocation
 * has time; a device-wide synchronisation would stall every stream for it.
 *
 * @param fn The try.
 * @returns What `fn` returned.
 * @throws What `fn` threw.
 * @internal
 */
export function withoutHostWait<T>(fn: () => T): T {
  const before = hostWaitRefused;
  hostWaitRefused = true;
  try {
    return fn();
  } finally {
    hostWaitRefused = before;
  }
}

/** Release-and-retry passes an allocation the driver refused makes at most (each frees about what it asked for). */
const MAX_RELEASE_PASSES = 8;

/**
 * While caches are released for a refusal (`releaseCaches` with `bytes`): the bytes it asked the
 * driver for. A cache that costs work to give back (spilling copies data out) gives back about
 * that much, least recently used first, not all it holds; undefined otherwise (give back all).
 *
 * @returns The bytes, or undefined.
 * @internal
 */
export function refusedBytes(): number | undefined {
  return wanted;
}

/**
 * Adds `resource` to the registry (`MemoryResource.joinCacheRegistry` calls it, once the resource
 * is whole: never from a constructor, see Note [Cache registry membership]).
 *
 * @param resource The resource (held weakly).
 * @internal
 */
export function trackResource(resource: CachingResource): void {
  const ref = new WeakRef(resource);
  live.add(ref);
  collected.register(resource, ref);
}

/** `resource.describe()`, or its class's name where even that throws (for a warning about it). */
function nameOf(resource: CachingResource): string {
  try {
    return resource.describe();
  } catch {
    return resource.constructor.name;
  }
}

/**
 * What `read` returns, or `fallback` with a process warning (code `VRAM_CACHE_RELEASE`) when it
 * throws: the release path runs inside an out-of-memory error's handling, and a resource it
 * cannot read (a subclass of the program's that is broken) must not turn that error into another.
 */
function guarded<T>(resource: CachingResource, what: string, read: () => T, fallback: T): T {
  try {
    return read();
  } catch (error) {
    // Once per resource and release: its figures are read before and after each pass, and three
    // copies of one warning say no more than one.
    if (!warned.has(resource)) {
      warned.add(resource);
      process.emitWarning(`could not ${what} ${nameOf(resource)}: ${error instanceof Error ? error.message : String(error)}`, { code: 'VRAM_CACHE_RELEASE' });
    }
    return fallback;
  }
}

function holds(resource: CachingResource, memory: CachedMemory): boolean {
  // Over a destroyed resource (an adaptor whose upstream was destroyed) nothing is held to release:
  // skipped, not warned of as a resource that cannot be read.
  const seen = new Set<CachingResource>();
  for (let r: CachingResource | undefined = resource; r !== undefined && !seen.has(r); r = r.upstream) {
    if (r.destroyed) return false;
    seen.add(r);
  }
  return memory === 'pinned-host' ? resource.kind === 'pinned-host' : resource.kind !== 'pinned-host' && resource.deviceOrdinal === memory;
}

/** How many resources lie below `resource`. */
function depth(resource: CachingResource): number {
  const seen = new Set<CachingResource>();
  for (let r: CachingResource | undefined = resource.upstream; r !== undefined && !seen.has(r); r = r.upstream) seen.add(r);
  return seen.size;
}

/** A driver-backed resource's figures (undefined for one with an upstream, a destroyed one, or one that cannot give them). */
function driverFigures(resource: CachingResource): MemoryFigures | undefined {
  return guarded(
    resource,
    'read the figures of',
    () => (resource.upstream !== undefined || resource.destroyed ? undefined : resource.memoryFigures()),
    undefined,
  );
}

/** Bytes the resources that take memory from the driver itself (no upstream) hold from it now. */
function driverReserved(resources: readonly CachingResource[]): number {
  let bytes = 0;
  for (const r of resources) bytes += driverFigures(r)?.reservedBytes ?? 0;
  return bytes;
}

/**
 * What vram's resources hold of `memory` now, by their own figures: `reservedBytes`, what every
 * resource that takes its memory from the driver itself (no upstream) holds from it, and
 * `allocatedBytes`, what every resource has handed out, summed over all (a block of a pool over
 * another resource counts at both, so a block left live anywhere in a stack shows). Resources
 * that have not given their memory back count, a destroyed one whose memory waits for its last
 * live blocks included; one whose figures cannot be read counts nothing. vram's own count, where
 * the driver's (cuMemGetInfo) is the whole device's, which other processes and libraries (an IPC
 * peer, NCCL) move too.
 *
 * @param memory A device ordinal, or 'pinned-host'.
 * @returns The bytes.
 * @internal the tests' checks that memory went back.
 */
export function heldByResources(memory: CachedMemory): { readonly reservedBytes: number; readonly allocatedBytes: number } {
  let reservedBytes = 0;
  let allocatedBytes = 0;
  for (const ref of live) {
    const r = ref.deref();
    if (r === undefined || r.released) continue;
    if (memory === 'pinned-host' ? r.kind !== 'pinned-host' : r.kind === 'pinned-host' || r.deviceOrdinal !== memory) continue;
    try {
      const figures = r.memoryFigures();
      if (figures === undefined) continue;
      allocatedBytes += figures.allocatedBytes.value;
      if (r.upstream === undefined) reservedBytes += figures.reservedBytes;
    } catch {
      // A resource (the program's own subclass) whose figures cannot be read holds nothing vram can count.
    }
  }
  return { reservedBytes, allocatedBytes };
}

/** Bytes the driver-backed resources among `resources` hold from the driver beyond what they hand out. */
function driverCached(resources: readonly CachingResource[]): number {
  let bytes = 0;
  for (const r of resources) {
    const figures = driverFigures(r);
    if (figures !== undefined) bytes += Math.max(0, figures.reservedBytes - figures.allocatedBytes.value);
  }
  return bytes;
}

/**
 * Releases what every live resource holding `memory` caches (`releaseCached()`), top of each stack
 * first, so what a sub-allocator gives back is released by the resource below it in the same
 * pass. A resource whose release fails (or that cannot even say what it holds) is skipped with a
 * process warning (code `VRAM_CACHE_RELEASE`): the others' memory still goes back. When memory
 * stays cached after that and `memory` is a device's, the device is synchronised and the caches
 * released once more: memory freed on a stream whose work is still running cannot go back to the
 * driver before that work ends, and the allocation that asked cannot wait on a stream (a driver
 * allocation is synchronous). This is the one host wait on the path, and it is taken only when the
 * alternative is an out-of-memory error.
 *
 * @param memory A device ordinal (its device and managed memory), or 'pinned-host'.
 * @param bytes The bytes a refused allocation asked for (`refusedBytes()` while they are released):
 *   spilling frees about that much. Omitted: every cache gives back all it can.
 * @returns The bytes given back to the driver (0 while a release is already under way).
 * @throws {CudaError} When synchronising the device fails (work that failed).
 * @example
 * ```ts
 * const released = releaseCaches(0); // every cache of device 0, not only the current resource's
 * ```
 */
export function releaseCaches(memory: CachedMemory, bytes?: number): number {
  if (releasing) return 0;
  releasing = true;
  wanted = bytes;
  try {
    const resources: CachingResource[] = [];
    const depths = new Map<CachingResource, number>();
    for (const ref of live) {
      const resource = ref.deref();
      if (resource === undefined) live.delete(ref);
      else if (guarded(resource, 'read the memory of', () => holds(resource, memory), false)) {
        resources.push(resource);
        depths.set(
          resource,
          guarded(resource, 'walk the upstreams of', () => depth(resource), 0),
        );
      }
    }
    resources.sort((a, b) => depths.get(b)! - depths.get(a)!);
    const released = releaseAll(resources);
    if (memory === 'pinned-host' || hostWaitRefused || driverCached(resources) === 0) return released;
    // Something is still cached: memory freed on a stream whose work has not ended, which a
    // stream-ordered pool cannot give back yet (CUDA's pool counts such frees as outstanding until
    // the host has seen them complete). Checked on what is left, not on whether the first pass
    // gave anything back: a small cache released elsewhere says nothing about the large one here.
    Device.get(memory).synchronize();
    return released + releaseAll(resources);
  } finally {
    releasing = false;
    wanted = undefined;
    warned.clear();
  }
}

/** Releases the caches of `resources` in order; returns the bytes that went back to the driver. */
function releaseAll(resources: readonly CachingResource[]): number {
  const before = driverReserved(resources);
  for (const resource of resources) guarded(resource, 'release the cache of', () => resource.releaseCached(), 0);
  return Math.max(0, before - driverReserved(resources));
}

/**
 * The memory a failed allocation was refused by the driver: the reason of the first
 * out-of-memory error along its causes that is not a resource's refusal of its upstream's
 * failure. Undefined for a refusal of vram's own (a limit, a pool's maximum, an arena's size),
 * which no released cache changes.
 */
function refusedMemory(error: unknown, device: number): { memory: CachedMemory; bytes: number | undefined } | undefined {
  let bytes: number | undefined;
  for (let e: unknown = error; e instanceof Error; e = e.cause) {
    if (!(e instanceof OutOfMemoryError)) continue;
    bytes = e.requestedBytes;
    if (e.reason === 'upstream') continue;
    if (e.reason === 'device') return { memory: device, bytes };
    return e.reason === 'host' ? { memory: 'pinned-host', bytes } : undefined;
  }
  return undefined;
}

/**
 * Adds `addition` to the error's message and to the first line of its stack (which V8 formatted
 * from the old message).
 *
 * @param error The error to extend.
 * @param addition Text appended after `; `.
 * @internal
 */
export function extendMessage(error: Error, addition: string): void {
  const stack = error.stack;
  const header = `${error.name}: ${error.message}`;
  error.message = `${error.message}; ${addition}`;
  if (stack?.startsWith(header) === true) error.stack = `${error.name}: ${error.message}${stack.slice(header.length)}`;
}

/**
 * After an allocation failed with `error`: when the driver refused it, releases every cache of
 * that memory (`releaseCaches`, spilling about the bytes refused) and, while that gives anything
 * back, calls `retry` again. An out-of-memory error that remains says how much was released;
 * other errors pass unchanged.
 *
 * @param error The first failure.
 * @param device The device ordinal whose memory was asked for.
 * @param retry The same allocation again.
 * @returns What `retry` returned.
 * @throws The first error, or the retry's, when the allocation cannot be had.
 * @internal
 */
export function retryAfterReleasingCaches<T>(error: unknown, device: number, retry: () => T): T {
  const refused = refusedMemory(error, device);
  if (refused === undefined || !(error instanceof Error)) throw error;
  const { memory, bytes } = refused;
  let failure: unknown = error;
  let released = 0;
  // Spilling gives back about what was asked for at each pass (least recently used first), so a
  // retry that still fails releases again while something goes back: a bounded number of passes,
  // as a cache that reports bytes given back each time (a driver pool's trim) must not loop forever.
  for (let pass = 0; pass < MAX_RELEASE_PASSES; pass++) {
    let given: number;
    try {
      given = releaseCaches(memory, bytes);
    } catch (release) {
      // Releasing must never turn the out-of-memory error into another one (a failed
      // synchronisation's CudaError): the program still gets its OutOfMemoryError, which says why.
      if (failure instanceof Error) extendMessage(failure, `releasing vram's caches failed: ${release instanceof Error ? release.message : String(release)}`);
      throw failure;
    }
    released += given;
    if (given === 0) break;
    try {
      return retry();
    } catch (next) {
      if (!isOutOfMemory(next)) throw next;
      failure = next;
    }
  }
  const what = memory === 'pinned-host' ? 'pinned host memory' : `device ${memory}'s memory`;
  if (failure instanceof Error) {
    extendMessage(
      failure,
      released > 0
        ? `vram's caches released ${formatBytes(released)} of ${what} to the driver before a retry, which failed too`
        : `vram's caches held none of ${what} to release`,
    );
  }
  throw failure;
}

/**
 * Runs a driver allocation that no resource makes (cuMemAllocPitch), releasing every cache of the
 * device and retrying once when the driver refuses it, as resources' allocations do.
 *
 * @param device The device ordinal.
 * @param allocate The driver call.
 * @returns What it returned.
 * @throws What it threw, when a retry cannot help or fails too.
 * @internal
 */
export function allocateReleasingCaches<T>(device: number, allocate: () => T): T {
  try {
    return allocate();
  } catch (error) {
    return retryAfterReleasingCaches(error, device, allocate);
  }
}
