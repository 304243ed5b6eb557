/**
 * The default resource of a device, as the environment chooses it: a caching allocator, as CuPy
 * and PyTorch users expect (memory freed by the program stays cached for the next allocation and
 * goes back to the driver only when asked, `emptyCache()`), with an optional per-process cap.
 *
 * - `VRAM_ALLOCATOR=async|pool|adaptive|cuda` (in the spirit of PYTORCH_CUDA_ALLOC_CONF's backend):
 *   `async` (the default) is an AsyncResource over a new CUDA memory pool whose release threshold
 *   is at maximum, so freed memory stays in the pool; `pool` is vram's PoolResource; `adaptive`
 *   is PoolResource with `extentSize: 'adaptive'` (large extents while the device has room, one
 *   page when it is short); `cuda` is a plain CudaResource, a cuMemAlloc/cuMemFree per block.
 * - `VRAM_MEMORY_LIMIT=<bytes>` (`16G`, `512M`, ...) or `VRAM_MEMORY_FRACTION=<0 < f <= 1>` of the
 *   device's total memory (torch.cuda.set_per_process_memory_fraction's figure): the default
 *   resource is wrapped in a LimitingAdaptor, so an allocation past the cap is an
 *   OutOfMemoryError of reason 'limit'. Setting both is an error.
 *
 * Why `async` is the default: replaying the shared traces, it was the faster on both, on the first
 * pass and the later ones. PoolResource holds far less memory over the peak live bytes, and its
 * hit pair is a fraction of a cuMemAllocAsync + cuMemFreeAsync pair: `pool` is the choice for a
 * program that is tight on memory or makes many small allocations out of one warm size range.
 * The figures: the README ("The default resource", "Figures") and
 * bench/results/h100-2026-11-23-pool-growth.md.
 *
 * Why a new pool rather than the device's default pool: the release threshold is a property of
 * the pool, and the default pool is shared with every other cudaMallocAsync user in the process
 * (CuPy, PyTorch, a native library); raising its threshold would change how they give memory
 * back, and `emptyCache()` would trim their memory too. A pool of vram's own caches vram's frees
 * only, and its statistics are vram's own. The stacks themselves are built in `stacks.ts`.
 */
import { Device } from '../device.js';
import { NotSupportedError } from '../errors.js';
import { choiceOf, fractionOfOne, sizeInBytes, variableReader, variableText, type EnvironmentValues } from '../util/environment.js';
import { LimitingAdaptor } from './adaptors/limiting.js';
import type { MemoryResource } from './resource.js';
import { createResourceStack } from './stacks.js';

/** The allocators `VRAM_ALLOCATOR` chooses between. */
export type AllocatorName = 'async' | 'pool' | 'adaptive' | 'cuda';

/**
 * Every value of `VRAM_ALLOCATOR`, the default first.
 *
 * @example
 * ```ts
 * console.log(`VRAM_ALLOCATOR=${ALLOCATOR_NAMES.join('|')}`); // VRAM_ALLOCATOR=async|pool|adaptive|cuda
 * ```
 */
export const ALLOCATOR_NAMES: readonly AllocatorName[] = ['async', 'pool', 'adaptive', 'cuda'];

/** The cap on a default resource, as the environment gave it. */
export type MemoryCap = { readonly kind: 'limit'; readonly bytes: number } | { readonly kind: 'fraction'; readonly fraction: number };

/** What the environment says about the default resources. */
export interface DefaultResourceSettings {
  /** The allocator asked for (`async` when `VRAM_ALLOCATOR` is unset or empty). */
  readonly allocator: AllocatorName;
  /** True when `VRAM_ALLOCATOR` was set: then a device that cannot run it is an error, not a fallback. */
  readonly explicit: boolean;
  /** The per-process cap, if one was set. */
  readonly cap?: MemoryCap;
}

/** The environment as these functions read it: `process.env`, or a given object in tests. */
export type { EnvironmentValues };

/**
 * One environment variable, as `vram info` and the README's table describe it (the shape of the
 * table's rows in `src/cli/environment-table.ts`, declared here so this layer need not import that one).
 */
export interface EnvironmentVariableDescription {
  /** The variable, e.g. `VRAM_ALLOCATOR`. */
  readonly name: string;
  /** The values it takes, e.g. `async|pool|adaptive|cuda`. */
  readonly values: string;
  /** What applies when it is unset. */
  readonly default: string;
  /** What it does, in one sentence. */
  readonly meaning: string;
}

/**
 * The variables this module reads, for the table of every `VRAM_*` variable (`vram info`, README).
 *
 * @example
 * ```ts
 * for (const v of DEFAULT_RESOURCE_VARIABLES) console.log(`${v.name}=${v.values} (default ${v.default})`);
 * ```
 */
export const DEFAULT_RESOURCE_VARIABLES: readonly EnvironmentVariableDescription[] = [
  {
    name: 'VRAM_ALLOCATOR',
    values: 'async|pool|adaptive|cuda',
    default: 'async',
    meaning:
      "each device's default resource: a CUDA memory pool that caches what is freed (async), " +
      "vram's PoolResource, which holds the least (pool), PoolResource growing in large extents while the " +
      'device has room and by the page when it is short (adaptive), or cuMemAlloc per block (cuda)',
  },
  {
    name: 'VRAM_MEMORY_LIMIT',
    values: 'size (16G, 512M, bytes)',
    default: 'no limit',
    meaning:
      "a cap on the bytes allocated through each device's default resource; past it, OutOfMemoryError " + "(reason 'limit'); not with VRAM_MEMORY_FRACTION",
  },
  {
    name: 'VRAM_MEMORY_FRACTION',
    values: 'number in (0, 1]',
    default: 'no limit',
    meaning: "the same cap, as a fraction of each device's total memory; not with VRAM_MEMORY_LIMIT",
  },
];

/** `VRAM_ALLOCATOR`'s reader: one of `ALLOCATOR_NAMES`. */
export const ALLOCATOR_VARIABLE = variableReader('VRAM_ALLOCATOR', choiceOf(ALLOCATOR_NAMES));
/** `VRAM_MEMORY_LIMIT`'s reader: a size (`16G`, `512M`, bytes). */
export const MEMORY_LIMIT_VARIABLE = variableReader('VRAM_MEMORY_LIMIT', sizeInBytes);
/** `VRAM_MEMORY_FRACTION`'s reader: a decimal fraction greater than 0 and at most 1. */
export const MEMORY_FRACTION_VARIABLE = variableReader('VRAM_MEMORY_FRACTION', fractionOfOne);

/**
 * Reads `VRAM_ALLOCATOR`, `VRAM_MEMORY_LIMIT` and `VRAM_MEMORY_FRACTION`.
 *
 * @param env The environment to read (`process.env` by default).
 * @returns The allocator and cap they ask for.
 * @throws {RangeError} For an unknown allocator, a size (`parseSize`) or fraction that is not
 *   one or is out of range, or both caps set; the message names the variable and the value.
 * @example
 * ```ts
 * readDefaultResourceSettings({ VRAM_ALLOCATOR: 'pool', VRAM_MEMORY_LIMIT: '8G' });
 * // { allocator: 'pool', explicit: true, cap: { kind: 'limit', bytes: 8589934592 } }
 * ```
 */
export function readDefaultResourceSettings(env: EnvironmentValues = process.env): DefaultResourceSettings {
  const name = ALLOCATOR_VARIABLE.read(env);
  const allocator = name ?? 'async';
  const limitText = variableText(MEMORY_LIMIT_VARIABLE.name, env);
  const fractionText = variableText(MEMORY_FRACTION_VARIABLE.name, env);
  if (limitText !== undefined && fractionText !== undefined) {
    throw new RangeError(`VRAM_MEMORY_LIMIT ('${limitText}') and VRAM_MEMORY_FRACTION ('${fractionText}') are both set; ` + 'set one of them');
  }
  const limit = MEMORY_LIMIT_VARIABLE.read(env);
  const fraction = MEMORY_FRACTION_VARIABLE.read(env);
  const cap: MemoryCap | undefined =
    limit !== undefined ? { kind: 'limit', bytes: limit } : fraction !== undefined ? { kind: 'fraction', fraction } : undefined;
  return cap === undefined ? { allocator, explicit: name !== undefined } : { allocator, explicit: name !== undefined, cap };
}

/**
 * The allocator a device runs: the one asked for, except that the unasked-for default `async`
 * falls back to `pool` (then `cuda`) on a device without stream-ordered memory pools.
 *
 * @param settings What the environment asked for.
 * @param device The device's capabilities.
 * @returns The allocator to build.
 * @throws {NotSupportedError} When `VRAM_ALLOCATOR` names an allocator the device cannot run.
 * @example
 * ```ts
 * chooseAllocator(readDefaultResourceSettings(), Device.get(0).info); // 'async' on an H100
 * ```
 */
export function chooseAllocator(
  settings: DefaultResourceSettings,
  device: { readonly ordinal: number; readonly memoryPoolsSupported: boolean; readonly virtualMemoryManagementSupported: boolean },
): AllocatorName {
  const runs = (a: AllocatorName): boolean => a === 'cuda' || (a === 'async' ? device.memoryPoolsSupported : device.virtualMemoryManagementSupported);
  if (runs(settings.allocator)) return settings.allocator;
  if (settings.explicit) {
    const lacks = settings.allocator === 'async' ? 'stream-ordered memory pools' : 'virtual memory management';
    throw new NotSupportedError(
      `VRAM_ALLOCATOR=${settings.allocator}: device ${device.ordinal} does not support ` + `${lacks}; choose another of ${ALLOCATOR_NAMES.join(', ')}`,
    );
  }
  return runs('pool') ? 'pool' : 'cuda';
}

/** The cap in bytes on `device` (a fraction of its total memory, rounded down). */
function capBytes(cap: MemoryCap, device: Device): number {
  if (cap.kind === 'limit') return cap.bytes;
  const total = device.info.totalMemory;
  const bytes = Math.floor(cap.fraction * total);
  if (bytes < 1) {
    throw new RangeError(`VRAM_MEMORY_FRACTION=${cap.fraction} of device ${device.ordinal}'s ${total} bytes is less than a byte`);
  }
  return bytes;
}

/**
 * Makes the default resource of `device` as the environment asks: the allocator, wrapped in a
 * LimitingAdaptor when a cap is set. `getCurrentResource` calls it on a device's first use.
 *
 * @param device The device (device 0 by default).
 * @param env The environment to read (`process.env` by default).
 * @returns A new resource; the caller owns it.
 * @throws {RangeError} For a bad variable (see `readDefaultResourceSettings`).
 * @throws {NotSupportedError} When `VRAM_ALLOCATOR` names an allocator the device cannot run.
 * @example
 * ```ts
 * const mr = createDefaultResource(0, { VRAM_ALLOCATOR: 'pool', VRAM_MEMORY_FRACTION: '0.5' });
 * mr.describe(); // 'LimitingAdaptor(limit=40 GiB, PoolResource(...))' on an 80 GiB device
 * ```
 */
export function createDefaultResource(device?: Device | number, env: EnvironmentValues = process.env): MemoryResource {
  const dev = Device.resolve(device);
  const settings = readDefaultResourceSettings(env);
  const limit = settings.cap === undefined ? undefined : capBytes(settings.cap, dev);
  // `async`, `pool`, `adaptive` and `cuda` are stacks of one resource: the top is the whole stack, and the caller owns it.
  const resource = createResourceStack(chooseAllocator(settings, dev.info), { device: dev }).resource;
  return limit === undefined ? resource : new LimitingAdaptor(resource, limit);
}
