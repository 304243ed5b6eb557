/**
 * The resource stacks `vram replay` compares, built fresh for each replay so that every figure
 * (peak reserved above all) belongs to that replay alone.
 */
import { Device } from '../device.js';
import { AsyncResource } from '../resource/upstream/async-resource.js';
import { ArenaResource } from '../resource/suballoc/arena.js';
import { BinningResource } from '../resource/suballoc/binning.js';
import { CudaResource } from '../resource/upstream/cuda-resource.js';
import { PoolResource } from '../resource/suballoc/pool.js';
import type { MemoryResource } from '../resource/resource.js';
import { formatBytes } from '../resource/adaptors/adaptor.js';
import { alignUp } from '../validate.js';
import type { GrowthFigures } from './engine.js';
import type { AllocationTrace } from './parse.js';

/** The stacks by name, in the order `all` runs them. */
export const STACK_NAMES = ['cuda', 'async', 'pool', 'binning', 'arena'] as const;
/** A stack's name. */
export type StackName = (typeof STACK_NAMES)[number];

/** True when `name` is a stack's name. */
export function isStackName(name: string): name is StackName {
  return (STACK_NAMES as readonly string[]).includes(name);
}

/** A resource stack ready for one replay. */
export interface ReplayStack {
  readonly name: StackName;
  /** The top of the stack: what the replay allocates from. */
  readonly resource: MemoryResource;
  /** The stack's growth figures, cumulative, when it reports them (the pools do). */
  readonly growth?: () => GrowthFigures;
  /** What the reader should know about how the stack was set up (sizes chosen, rules applied). */
  readonly notes: readonly string[];
  /** Gives everything the stack holds back to the driver. */
  close(): void;
}

/** Options of `createStack`. */
export interface StackOptions {
  /** Device ordinal (0 by default). */
  readonly device?: number;
  /** `PoolOptions.extentSize` of the `pool` and `binning` stacks' PoolResource (its default when omitted). */
  readonly extentSize?: number;
}

/**
 * How large an arena `arena` creates for a trace: the trace's peak live bytes plus a quarter, plus
 * 64 MiB, rounded up to 2 MiB. The arena cannot grow, so the headroom absorbs fragmentation; a
 * trace that still exhausts it is reported as a failed replay.
 */
export function arenaSizeFor(peakLiveBytes: number): number {
  return alignUp(Math.ceil(peakLiveBytes * 1.25) + (64 << 20), 2 << 20);
}

/** A PoolResource's growth figures, as the replay engine reads them. */
function growthOf(pool: PoolResource): GrowthFigures {
  const s = pool.statistics();
  return { pageMoves: s.pageMoves, hostWaits: s.synchronizations, driverCalls: s.driverCalls, growthNs: s.growthNs };
}

function dispose(resource: MemoryResource): void {
  const disposeMethod = (resource as Partial<Disposable>)[Symbol.dispose];
  if (typeof disposeMethod === 'function') disposeMethod.call(resource);
  else resource.releaseCached();
}

/**
 * Builds a stack:
 * - `cuda`: CudaResource, cuMemAlloc/cuMemFree per call (peak reserved by the replay engine's
 *   documented estimate, since the driver reports nothing per allocation);
 * - `async`: AsyncResource over a new CUDA memory pool (its high-water marks are this replay's),
 *   release threshold at maximum so it caches like a warm pool; peak reserved = RESERVED_MEM_HIGH;
 * - `pool`: PoolResource with its default (virtual-memory) growth, or `options.extentSize`;
 * - `binning`: BinningResource (power-of-two bins 2^18 .. 2^22) over a PoolResource; peak
 *   reserved is the pool's;
 * - `arena`: ArenaResource sized by `arenaSizeFor(trace peak live)`; a fixed reservation.
 */
export function createStack(name: StackName, trace: AllocationTrace, options: StackOptions = {}): ReplayStack {
  const device = Device.get(options.device ?? 0);
  const poolOptions = { device, ...(options.extentSize === undefined ? {} : { extentSize: options.extentSize }) };
  const poolNotes = options.extentSize === undefined ? [] : [`extentSize ${options.extentSize} bytes`];
  switch (name) {
    case 'cuda': {
      const resource = new CudaResource(device);
      return { name, resource, notes: ['peak reserved estimated: blocks <= 1 MiB rounded to 512 B, larger to 2 MiB'], close: () => dispose(resource) };
    }
    case 'async': {
      const resource = new AsyncResource({ device, pool: {} });
      resource.releaseThreshold = Number.MAX_SAFE_INTEGER;
      return {
        name, resource, notes: ['new memory pool, release threshold at maximum; peak reserved from RESERVED_MEM_HIGH'],
        close: () => resource.destroy(),
      };
    }
    case 'pool': {
      const resource = new PoolResource(poolOptions);
      return { name, resource, growth: () => growthOf(resource), notes: poolNotes, close: () => resource.destroy() };
    }
    case 'binning': {
      const pool = new PoolResource(poolOptions);
      // RMM's replay benchmark bins: fixed-size bins of 256 KiB .. 4 MiB over the pool.
      const resource = new BinningResource(pool, { minSizeExponent: 18, maxSizeExponent: 22 });
      return {
        name, resource, growth: () => growthOf(pool),
        notes: ['fixed-size bins 256 KiB .. 4 MiB (as RMM\'s replay benchmark); peak reserved is the PoolResource\'s under them', ...poolNotes],
        close: () => { resource.destroy(); pool.destroy(); },
      };
    }
    case 'arena': {
      const size = arenaSizeFor(trace.summary.peakLiveBytes);
      const resource = new ArenaResource({ size, device });
      return {
        name, resource,
        notes: [`arena of ${formatBytes(size)} (peak live ${formatBytes(trace.summary.peakLiveBytes)} + 25% + 64 MiB); ` +
          'its peak reserved is that fixed size, so its overhead is the headroom chosen, not fragmentation'],
        close: () => dispose(resource),
      };
    }
    default: {
      const unknown: never = name;
      throw new RangeError(`unknown resource stack '${String(unknown)}'`);
    }
  }
}
