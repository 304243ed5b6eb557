/**
 * The resource stacks `vram replay` compares, built fresh for each replay so that every figure
 * (peak reserved above all) belongs to that replay alone.
 */
import type { PoolResource } from '../resource/suballoc/pool.js';
import type { MemoryResource } from '../resource/resource.js';
import { createResourceStack, type ResourceStackName } from '../resource/stacks.js';
import { CHUNK_FRACTION, LOW_WATER_FRACTION, MAX_CHUNK_BYTES, MIN_CHUNK_BYTES } from '../resource/suballoc/kit/adaptive-growth.js';
import { formatBytes } from '../util/size.js';
import { alignUp } from '../validate.js';
import type { GrowthFigures } from './engine.js';
import type { AllocationTrace } from './parse.js';

/** A resource stack ready for one replay. */
export interface ReplayStack {
  readonly name: ResourceStackName;
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

/**
 * Builds the named stack of the catalogue (src/resource/stacks.ts says what each one is) for one
 * replay, with how its figures are read:
 * - `cuda`: peak reserved by the replay engine's documented estimate, since the driver reports
 *   nothing per allocation;
 * - `async`: a new CUDA memory pool, so its high-water marks are this replay's; peak reserved =
 *   RESERVED_MEM_HIGH;
 * - `pool`: `options.extentSize` when given;
 * - `adaptive`: PoolResource with `extentSize: 'adaptive'` (`options.extentSize` does not apply);
 * - `binning`: peak reserved is the PoolResource's under the bins;
 * - `arena`: sized by `arenaSizeFor(trace peak live)`; a fixed reservation.
 */
export function createStack(name: ResourceStackName, trace: AllocationTrace, options: StackOptions = {}): ReplayStack {
  const device = options.device ?? 0;
  const poolOptions = { device, ...(options.extentSize === undefined ? {} : { extentSize: options.extentSize }) };
  const poolNotes = options.extentSize === undefined ? [] : [`extentSize ${options.extentSize} bytes`];
  switch (name) {
    case 'cuda': {
      const { resource, close } = createResourceStack(name, { device });
      return { name, resource, notes: ['peak reserved estimated: blocks <= 1 MiB rounded to 512 B, larger to 2 MiB'], close };
    }
    case 'async': {
      const { resource, close } = createResourceStack(name, { device });
      return {
        name, resource, notes: ['new memory pool, release threshold at maximum; peak reserved from RESERVED_MEM_HIGH'],
        close,
      };
    }
    case 'pool': {
      const { resource, close } = createResourceStack(name, poolOptions);
      return { name, resource, growth: () => growthOf(resource), notes: poolNotes, close };
    }
    case 'adaptive': {
      const { resource, close } = createResourceStack(name, { device });
      return {
        name, resource, growth: () => growthOf(resource),
        notes: [`extentSize adaptive: chunks of 1/${Math.round(1 / CHUNK_FRACTION)} of reserved (${formatBytes(MIN_CHUNK_BYTES)} to ` +
          `${formatBytes(MAX_CHUNK_BYTES)}) mapped ahead while ${LOW_WATER_FRACTION * 100}% of the device stays free, one-page extents below`],
        close,
      };
    }
    case 'binning': {
      const { resource, pool, close } = createResourceStack(name, poolOptions);
      return {
        name, resource, growth: () => growthOf(pool),
        notes: ['fixed-size bins 256 KiB .. 4 MiB (as RMM\'s replay benchmark); peak reserved is the PoolResource\'s under them', ...poolNotes],
        close,
      };
    }
    case 'arena': {
      const size = arenaSizeFor(trace.summary.peakLiveBytes);
      const { resource, close } = createResourceStack(name, { size, device });
      return {
        name, resource,
        notes: [`arena of ${formatBytes(size)} (peak live ${formatBytes(trace.summary.peakLiveBytes)} + 25% + 64 MiB); ` +
          'its peak reserved is that fixed size, so its overhead is the headroom chosen, not fragmentation'],
        close,
      };
    }
    default: {
      const unknown: never = name;
      throw new RangeError(`unknown resource stack '${String(unknown)}'`);
    }
  }
}
