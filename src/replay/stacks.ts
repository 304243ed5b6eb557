/**
 * The resource stacks `vram replay` compares, built fresh for each replay so that every figure
 * (peak reserved above all) belongs to that replay alone.
 */
import type { MemoryResource } from '../resource/resource.js';
import type { GrowthFigures } from '../resource/figures.js';
import { createResourceStack, type ResourceStack, type ResourceStackName } from '../resource/stacks.js';
import { CHUNK_FRACTION, LOW_WATER_FRACTION, MAX_CHUNK_BYTES, MIN_CHUNK_BYTES } from '../resource/suballoc/kit/adaptive-growth.js';
import { formatBytes } from '../util/size.js';
import { alignUp } from '../validate.js';
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
  destroy(): void;
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

/**
 * Builds the named stack of the catalogue (src/resource/stacks.ts says what each one is) for one
 * replay, with how its figures are read:
 * - `cuda`: peak reserved by the replay engine's documented estimate, since the driver reports
 *   nothing per allocation;
 * - `async`: a new CUDA memory pool, so its high-water marks are this replay's; peak reserved =
 *   RESERVED_MEM_HIGH;
 * - `pool`, `binning`: `options.extentSize` when given; binning's peak reserved is the
 *   PoolResource's under the bins;
 * - `adaptive`: PoolResource with `extentSize: 'adaptive'` (`options.extentSize` does not apply);
 * - `arena`: sized by `arenaSizeFor(trace peak live)`; a fixed reservation;
 * - any other stack of the catalogue: built with the device alone.
 * Every stack with a PoolResource in it (the catalogue's `pool`) reports that pool's growth
 * figures, whatever its name, so a stack added to the catalogue gets them with no change here.
 */
export function createStack(name: ResourceStackName, trace: AllocationTrace, options: StackOptions = {}): ReplayStack {
  const device = options.device ?? 0;
  const { stack, notes } = buildStack(name, trace, device, options.extentSize);
  const pool = stack.pool;
  return {
    name,
    resource: stack.resource,
    notes,
    destroy: () => stack.destroy(),
    ...(pool === undefined ? {} : { growth: () => pool.growthFigures() }),
  };
}

/** The catalogue's stack with the options this replay gives it, and the notes that say how. */
function buildStack(
  name: ResourceStackName,
  trace: AllocationTrace,
  device: number,
  extentSize: number | undefined,
): { stack: ResourceStack; notes: readonly string[] } {
  const extentNotes = extentSize === undefined ? [] : [`extentSize ${extentSize} bytes`];
  switch (name) {
    case 'cuda':
      return { stack: createResourceStack(name, { device }), notes: ['peak reserved estimated: blocks <= 1 MiB rounded to 512 B, larger to 2 MiB'] };
    case 'async':
      return {
        stack: createResourceStack(name, { device }),
        notes: ['new memory pool, release threshold at maximum; peak reserved from RESERVED_MEM_HIGH'],
      };
    case 'pool':
      return { stack: createResourceStack(name, { device, ...(extentSize === undefined ? {} : { extentSize }) }), notes: extentNotes };
    case 'adaptive':
      return {
        stack: createResourceStack(name, { device }),
        notes: [
          `extentSize adaptive: chunks of 1/${Math.round(1 / CHUNK_FRACTION)} of reserved (${formatBytes(MIN_CHUNK_BYTES)} to ` +
            `${formatBytes(MAX_CHUNK_BYTES)}) mapped ahead while ${LOW_WATER_FRACTION * 100}% of the device stays free, one-page extents below`,
        ],
      };
    case 'binning':
      return {
        stack: createResourceStack(name, { device, ...(extentSize === undefined ? {} : { extentSize }) }),
        notes: ["fixed-size bins 256 KiB .. 4 MiB (as RMM's replay benchmark); peak reserved is the PoolResource's under them", ...extentNotes],
      };
    case 'arena': {
      const size = arenaSizeFor(trace.summary.peakLiveBytes);
      return {
        stack: createResourceStack(name, { size, device }),
        notes: [
          `arena of ${formatBytes(size)} (peak live ${formatBytes(trace.summary.peakLiveBytes)} + 25% + 64 MiB); ` +
            'its peak reserved is that fixed size, so its overhead is the headroom chosen, not fragmentation',
        ],
      };
    }
    default:
      // A stack this file does not know by name: the options every stack takes.
      return { stack: createResourceStack(name as ResourceStackName, { device }), notes: [] };
  }
}
