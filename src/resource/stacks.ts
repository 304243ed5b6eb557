/**
 * The named resource stacks, built in one place: the default resource (`VRAM_ALLOCATOR`), `vram
 * replay` and `vram bench` compare and choose between the same `async`, `pool`, `cuda`, `binning`
 * and `arena`, so a stack's name means one construction everywhere, and a change to one (a bin
 * range, a release threshold) reaches all of them.
 *
 * - `cuda`: CudaResource, a cuMemAlloc/cuMemFree per block.
 * - `async`: AsyncResource over a new CUDA memory pool whose release threshold is at maximum, so
 *   freed memory stays in the pool until trimmed. A new pool rather than the device's default one:
 *   the threshold is a property of the pool, and the default pool is shared with every other
 *   cudaMallocAsync user in the process, whose frees it would then keep too.
 *   Its pool is created with POSIX file-descriptor handles, so each allocation can be shared with
 *   another process (`exportIpc`), unless the driver refuses such pools (then a plain one).
 * - `pool`: PoolResource, virtual-memory growth by default, or `extentSize`.
 * - `adaptive`: PoolResource with `extentSize: 'adaptive'`: chunks mapped ahead as large extents
 *   while the device has room, one-page extents when it is short, compaction before failing.
 * - `binning`: BinningResource with power-of-two bins of 256 KiB .. 4 MiB (RMM's binning benchmark
 *   and replay use these) over a PoolResource, which the stack owns.
 * - `arena`: ArenaResource of a fixed `size`; it cannot grow.
 */
import { Device } from '../device.js';
import { CudaError, CUresult } from '../errors.js';
import { readOptions, type OptionNames } from '../util/options.js';
import type { ByteSize } from '../validate.js';
import { ArenaResource } from './suballoc/arena.js';
import { AsyncResource } from './upstream/async-resource.js';
import { BinningResource } from './suballoc/binning.js';
import { CudaResource } from './upstream/cuda-resource.js';
import { PoolResource } from './suballoc/pool.js';

/**
 * Every named stack, in the order `vram replay -r all` runs them.
 *
 * @example
 * ```ts
 * console.log(RESOURCE_STACK_NAMES.join(', ')); // cuda, async, pool, adaptive, binning, arena
 * ```
 */
export const RESOURCE_STACK_NAMES = ['cuda', 'async', 'pool', 'adaptive', 'binning', 'arena'] as const;

/** A named stack. */
export type ResourceStackName = (typeof RESOURCE_STACK_NAMES)[number];

/**
 * True when `name` names a stack.
 *
 * @param name Any text (a CLI argument, an environment variable).
 * @returns Whether it is one of `RESOURCE_STACK_NAMES`.
 * @throws Nothing.
 * @example
 * ```ts
 * isResourceStackName('binning'); // true
 * ```
 */
export function isResourceStackName(name: string): name is ResourceStackName {
  return (RESOURCE_STACK_NAMES as readonly string[]).includes(name);
}

/** Options every stack takes. */
export interface DeviceStackOptions {
  /** The device (device 0 by default). */
  readonly device?: Device | number;
}

/** Options of the `pool` and `binning` stacks. */
export interface PoolStackOptions extends DeviceStackOptions {
  /** `PoolOptions.extentSize` of the stack's PoolResource (its default when omitted). */
  readonly extentSize?: ByteSize;
}

/** Options of the `arena` stack. */
export interface ArenaStackOptions extends DeviceStackOptions {
  /** The arena's fixed size in bytes (required: an arena cannot grow, so the caller sizes it). */
  readonly size: ByteSize;
}

/** Per stack: the options it takes, the resource on top, and the PoolResource under it if any. */
interface StackKinds {
  cuda: { options: DeviceStackOptions; resource: CudaResource; pool: undefined };
  async: { options: DeviceStackOptions; resource: AsyncResource; pool: undefined };
  pool: { options: PoolStackOptions; resource: PoolResource; pool: PoolResource };
  adaptive: { options: DeviceStackOptions; resource: PoolResource; pool: PoolResource };
  binning: { options: PoolStackOptions; resource: BinningResource; pool: PoolResource };
  arena: { options: ArenaStackOptions; resource: ArenaResource; pool: undefined };
}

/** The options `name` takes. */
export type ResourceStackOptions<N extends ResourceStackName = ResourceStackName> = StackKinds[N]['options'];

/** One built stack: its top, the pool under it, and how to end all of it. */
export interface ResourceStack<N extends ResourceStackName = ResourceStackName> {
  readonly name: N;
  /** The top of the stack: what a program allocates from. */
  readonly resource: StackKinds[N]['resource'];
  /** The PoolResource of the `pool` and `adaptive` (the top itself) and `binning` (under the bins) stacks. */
  readonly pool: StackKinds[N]['pool'];
  /** Destroys every resource the stack made, top first (each waits for its live blocks). */
  destroy(): void;
}

const DEVICE_ONLY: OptionNames<DeviceStackOptions> = { device: true };
const POOL_NAMES: OptionNames<PoolStackOptions> = { device: true, extentSize: true };
const ARENA_NAMES: OptionNames<ArenaStackOptions> = { device: true, size: true };

/** Never release: the pool keeps every freed byte until trimmed, as a warm cache does. */
const KEEP_EVERYTHING = Number.MAX_SAFE_INTEGER;

/**
 * Builds the named stack, fresh: none of its resources is shared with another stack, so every
 * figure it reports (peak reserved above all) is its own.
 *
 * @param name Which stack.
 * @param options Its options: `device` for every stack, `extentSize` for `pool` and `binning`,
 *   `size` (required) for `arena`.
 * @returns The stack; the caller owns it and ends it with `destroy()` (for `cuda`, `async` and
 *   `pool` and `adaptive`, the top is the whole stack, so destroying it is the same).
 * @throws {TypeError} For an unknown name, options that are not an object, a key the stack does
 *   not take (the message names the valid ones), or an `arena` without `size`.
 * @throws {RangeError} For a bad device, extent size or arena size (as the resource checks them).
 * @example
 * ```ts
 * const stack = createResourceStack('binning', { device: 0, extentSize: 64 << 20 });
 * const ptr = stack.resource.allocate(1 << 20);
 * stack.resource.deallocate(ptr, 1 << 20);
 * stack.destroy();
 * ```
 */
export function createResourceStack<N extends ResourceStackName>(name: N, options?: ResourceStackOptions<N>): ResourceStack<N> {
  return buildStack(name, options) as ResourceStack<N>;
}

function buildStack(name: ResourceStackName, options: ResourceStackOptions | undefined): ResourceStack {
  const what = `resource stack '${name}'`;
  switch (name) {
    case 'cuda': {
      const { device } = readOptions(what, options, DEVICE_ONLY);
      const resource = new CudaResource(Device.resolve(device));
      return { name, resource, pool: undefined, destroy: () => resource.destroy() };
    }
    case 'async': {
      const { device } = readOptions(what, options, DEVICE_ONLY);
      const resource = exportableAsyncResource(Device.resolve(device));
      resource.releaseThreshold = KEEP_EVERYTHING;
      return { name, resource, pool: undefined, destroy: () => resource.destroy() };
    }
    case 'pool': {
      const resource = new PoolResource(poolOptions(what, options));
      return { name, resource, pool: resource, destroy: () => resource.destroy() };
    }
    case 'adaptive': {
      const { device } = readOptions(what, options, DEVICE_ONLY);
      const resource = new PoolResource({ device: Device.resolve(device), extentSize: 'adaptive' });
      return { name, resource, pool: resource, destroy: () => resource.destroy() };
    }
    case 'binning': {
      const pool = new PoolResource(poolOptions(what, options));
      const resource = new BinningResource(pool, { minSizeExponent: 18, maxSizeExponent: 22 });
      // The bins were given the pool, so destroying them leaves it: the stack made it, and ends it.
      return {
        name,
        resource,
        pool,
        destroy: () => {
          resource.destroy();
          pool.destroy();
        },
      };
    }
    case 'arena': {
      const { device, size } = readOptions(what, options as ArenaStackOptions | undefined, ARENA_NAMES);
      if (size === undefined) throw new TypeError(`${what}: options.size (the arena's bytes) is required`);
      const resource = new ArenaResource({ size, device: Device.resolve(device) });
      return { name, resource, pool: undefined, destroy: () => resource.destroy() };
    }
    default: {
      const unknown: never = name;
      throw new TypeError(`unknown resource stack '${String(unknown)}'; valid: ${RESOURCE_STACK_NAMES.join(', ')}`);
    }
  }
}

/**
 * The `async` stack's resource: a new pool whose memory can be exported to other processes
 * (cuMemPoolExportPointer), or, where the driver does not create such pools (the error a device
 * without IPC support gives), a plain one. Creating the pool exportable costs nothing per
 * allocation: the handle type is a property of the pool.
 */
function exportableAsyncResource(device: Device): AsyncResource {
  try {
    return new AsyncResource({ device, pool: { handleTypes: 'posix-fd' } });
  } catch (error) {
    if (!(error instanceof CudaError) || (error.code !== CUresult.INVALID_VALUE && error.code !== CUresult.NOT_SUPPORTED)) throw error;
    return new AsyncResource({ device, pool: {} });
  }
}

/** The PoolResource options of the `pool` and `binning` stacks. */
function poolOptions(what: string, options: ResourceStackOptions | undefined): { device: Device; extentSize?: ByteSize } {
  const { device, extentSize } = readOptions(what, options as PoolStackOptions | undefined, POOL_NAMES);
  return { device: Device.resolve(device), ...(extentSize === undefined ? {} : { extentSize }) };
}
