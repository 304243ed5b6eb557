/**
 * The current memory resource of each device: what buffers and arrays allocate from when the
 * caller names no resource, as RMM's per-device resource. Until the program sets another, it is
 * the default resource the environment chooses (`default-resource.ts`): a caching CUDA memory pool
 * unless `VRAM_ALLOCATOR` says otherwise, capped by `VRAM_MEMORY_LIMIT`/`VRAM_MEMORY_FRACTION`.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { Device } from '../device.js';
import { UseAfterFreeError, VramStateError } from '../errors.js';
import { createDefaultResource } from './default-resource.js';
import { MemoryResource } from './resource.js';

/** By device ordinal (an array: every allocation without a resource looks here). */
const current: (MemoryResource | undefined)[] = [];

/** One `useResource` scope: its resource, the scope around it, and whether `fn` is still running. */
interface ResourceScope {
  readonly resource: MemoryResource;
  readonly outer: ResourceScope | undefined;
  open: boolean;
}

const scopes = new AsyncLocalStorage<ResourceScope>();
/**
 * Scopes whose `fn` has not ended yet, in the whole process: while it is 0 (no scope anywhere),
 * the allocation path does not ask the AsyncLocalStorage at all.
 */
let openScopes = 0;

/** The innermost open scope's resource for `device` (any device when undefined), if any. */
function scopedResource(device: Device | number | undefined): MemoryResource | undefined {
  const ordinal = device === undefined ? undefined : Device.resolve(device).ordinal;
  for (let s = scopes.getStore(); s !== undefined; s = s.outer) {
    if (s.open && (ordinal === undefined || s.resource.deviceOrdinal === ordinal)) return s.resource;
  }
  return undefined;
}

/**
 * Runs `fn` with `resource` as the current resource of its device for every allocation made inside
 * it that names no resource, following its asynchronous work across every `await`, timer and
 * callback it starts (AsyncLocalStorage): PyTorch's `use_mem_pool` and CuPy's `using_allocator`,
 * which hold only for synchronous code of one thread. An allocation that names no device (and no
 * resource) uses the innermost scope's resource, on its device; one that names a device uses the
 * innermost scope's resource of that device, else the device's current resource. Concurrent tasks
 * each see their own scopes; nested scopes stack. The scope ends when `fn` returns, or when the
 * promise it returns settles: work it leaves running after that allocates as if outside it.
 * Inside it, `setCurrentResource` for the scope's device is refused (`VramStateError`), as CuPy
 * refuses `set_allocator` inside `using_allocator`: it would have no effect there and take effect
 * silently once the scope ends; nest another `useResource` instead.
 *
 * @param resource A resource of device (or managed) memory, not destroyed.
 * @param fn The code to run; its result (a promise for an async function) is returned.
 * @returns What `fn` returned.
 * @throws {TypeError} When `resource` is not a MemoryResource of device memory or `fn` not a function.
 * @throws {UseAfterFreeError} When `resource` was destroyed.
 * @example
 * ```ts
 * using pool = new PoolResource();
 * await useResource(pool, async () => {
 *   const a = DeviceArray.zeros([1024], 'float32'); // from `pool`
 *   await a.toHostAsync();
 *   const b = DeviceArray.empty([1024], 'float32'); // from `pool` too, after the await
 * });
 * ```
 */
export function useResource<T>(resource: MemoryResource, fn: () => T): T {
  if (!(resource instanceof MemoryResource)) throw new TypeError('useResource: resource must be a MemoryResource');
  if (resource.kind === 'pinned-host') {
    throw new TypeError(`useResource: buffers and arrays need device memory, and ${resource.describe()} hands out pinned host memory`);
  }
  if (resource.destroyed) throw new UseAfterFreeError(`useResource: ${resource.describe()} was destroyed`);
  if (typeof fn !== 'function') throw new TypeError('useResource: fn must be a function');
  const scope: ResourceScope = { resource, outer: scopes.getStore(), open: true };
  return runScope(
    scopes,
    scope,
    fn,
    () => {
      scope.open = false;
      openScopes -= 1;
    },
    () => {
      openScopes += 1;
    },
  );
}

/**
 * Runs `fn` inside `store`'s context, calling `opened` first and `closed` once `fn` has returned,
 * or once the promise (any thenable) it returned has settled. Shared by `useResource` and
 * `withMemoryBudget`.
 *
 * @param storage The AsyncLocalStorage.
 * @param store The scope.
 * @param fn The code.
 * @param closed Called once when the scope ends.
 * @param opened Called once before `fn` runs.
 * @returns What `fn` returned.
 * @throws What `fn` throws.
 * @internal
 */
export function runScope<S, T>(storage: AsyncLocalStorage<S>, store: S, fn: () => T, closed: () => void, opened: () => void): T {
  opened();
  let result: T;
  try {
    result = storage.run(store, fn);
  } catch (error) {
    closed();
    throw error;
  }
  if (result !== null && typeof result === 'object' && typeof (result as { then?: unknown }).then === 'function') {
    (result as unknown as PromiseLike<unknown>).then(closed, closed);
  } else {
    closed();
  }
  return result;
}

/**
 * The resource buffers on `device` allocate from when none is named: inside `useResource(mr, fn)`,
 * the innermost such scope's resource for that device (any device's, when `device` is omitted and
 * a scope is active), else the one set for the device. On a device's first use it
 * is made from the environment (`VRAM_ALLOCATOR`, `VRAM_MEMORY_LIMIT`, `VRAM_MEMORY_FRACTION`), so
 * a bad value is reported here, by the first allocation that needs it.
 *
 * @param device The device (device 0 by default).
 * @returns Its current resource.
 * @throws {RangeError} When an environment variable of the default resource is bad.
 * @throws {NotSupportedError} When `VRAM_ALLOCATOR` names an allocator the device cannot run.
 * @example
 * ```ts
 * getCurrentResource().describe(); // 'AsyncResource(device=0, pool=created)'
 * ```
 */
export function getCurrentResource(device?: Device | number): MemoryResource {
  if (openScopes !== 0) {
    const scoped = scopedResource(device);
    if (scoped !== undefined) return scoped;
  } else if (device === undefined) {
    // Device 0 without a scope, once it has its resource: every allocation without options asks this.
    const mr = current[0];
    if (mr !== undefined) return mr;
  }
  return baseResource(Device.resolve(device));
}

/** The resource set for `dev` (or its default, made now), whatever scope is active. */
function baseResource(dev: Device): MemoryResource {
  let mr = current[dev.ordinal];
  if (mr === undefined) {
    mr = createDefaultResource(dev);
    current[dev.ordinal] = mr;
  }
  return mr;
}

/**
 * The current resource of `device` when one was made or set, without making the default one: for
 * code that looks at memory (a snapshot at an out-of-memory error) and must not allocate any.
 *
 * @param device The device.
 * @returns Its current resource, or undefined when it has none yet.
 * @example
 * ```ts
 * existingCurrentResource(Device.get(0))?.describe();
 * ```
 */
export function existingCurrentResource(device: Device): MemoryResource | undefined {
  return current[device.ordinal];
}

/**
 * Makes `mr` the current resource of `device` and returns the previous one (the default resource
 * when none was set). `mr` must hand out memory of that device (device or managed). The
 * environment's cap applies to the default resource only: a resource set here is used as it is.
 *
 * @param device The device.
 * @param mr The resource buffers on it allocate from from now on.
 * @returns The previous current resource; the caller decides whether to destroy it.
 * @throws {TypeError} When `mr` is not a resource of device memory.
 * @throws {RangeError} When `mr` belongs to another device.
 * @throws {VramStateError} Inside a `useResource` scope of the device (CuPy refuses `set_allocator`
 *   inside `using_allocator` alike): there the scope's resource stays current, so the call would
 *   have no effect until the scope ended. Set it outside the scope, or nest another `useResource`.
 * @example
 * ```ts
 * const previous = setCurrentResource(0, new PoolResource());
 * ```
 */
export function setCurrentResource(device: Device | number, mr: MemoryResource): MemoryResource {
  const dev = Device.resolve(device);
  if (mr === null || typeof mr !== 'object' || typeof mr.allocate !== 'function' || typeof mr.deallocate !== 'function') {
    throw new TypeError('setCurrentResource expects a MemoryResource');
  }
  if (mr.kind === 'pinned-host') {
    throw new TypeError(`the current resource of a device must hand out device memory, not ${mr.describe()}`);
  }
  if (mr.deviceOrdinal !== dev.ordinal) {
    throw new RangeError(`${mr.describe()} belongs to device ${mr.deviceOrdinal}, not device ${dev.ordinal}`);
  }
  const scoped = openScopes === 0 ? undefined : scopedResource(dev);
  if (scoped !== undefined) {
    throw new VramStateError(
      `setCurrentResource(${dev.ordinal}) inside useResource(${scoped.describe()}): the scope's resource stays ` +
        'current there, so it would take effect only once the scope ends; set it outside the scope, or nest another useResource',
    );
  }
  const previous = baseResource(dev);
  current[dev.ordinal] = mr;
  return previous;
}

/** What layers above add to `emptyCache` (the pinned host memory of spills): each gives back its cache. */
const cacheReleases: Array<(device: Device | undefined) => number> = [];

/**
 * Adds what `emptyCache` also gives back: a cache of a layer above the resources (spilling's
 * pinned host memory), which this layer cannot import.
 *
 * @internal
 * @param release Gives back what the cache holds unused, on one device or (undefined) all; returns the bytes.
 */
export function addCacheRelease(release: (device: Device | undefined) => number): void {
  cacheReleases.push(release);
}

/**
 * Gives the memory the current resources cache back to the driver, as PyTorch's
 * `torch.cuda.empty_cache()` and CuPy's `free_all_blocks()`: memory still allocated stays. The
 * device is synchronised first, so blocks freed on streams whose work is still running are
 * given back too. Devices with no current resource yet are left alone (none is made). The pinned host
 * memory held for spills (`reserveSpillHost`) that no host copy uses goes back as well, and so
 * does what the device's spillable resource keeps for buffers that are gone (freed blocks' memory
 * and ranges, spare pages), without spilling anything.
 *
 * @param device One device; every device with a current resource when omitted.
 * @returns The bytes given back.
 * @throws {RangeError | TypeError} For a bad device.
 * @throws {CudaError} When synchronising the device fails (work that failed or cannot complete).
 * @example
 * ```ts
 * buffer.free();
 * emptyCache(); // the freed bytes go back to the driver, for another process or library
 * ```
 */
export function emptyCache(device?: Device | number): number {
  const devices = device === undefined ? current.flatMap((mr, ordinal) => (mr === undefined ? [] : [Device.get(ordinal)])) : [Device.resolve(device)];
  let released = 0;
  for (const dev of devices) {
    const mr = current[dev.ordinal];
    if (mr === undefined || mr.destroyed) continue;
    dev.synchronize();
    released += mr.releaseCached();
  }
  for (const release of cacheReleases) released += release(device === undefined ? undefined : Device.resolve(device));
  return released;
}
