/**
 * One place for the numbers: what a device's current resource holds, in one flat object and one
 * readable table, as PyTorch's `torch.cuda.memory_stats()` and `memory_summary()`. The figures
 * come from the resources themselves (`MemoryResource.memoryFigures()`), so a stack of adaptors
 * over a pool reports the pool's bytes with what each adaptor adds (a limit, retries).
 */
import type { Counter } from '../counter.js';
import { Device } from '../device.js';
import { formatBytes } from '../util/size.js';
import { getCurrentResource } from '../resource/current.js';
import { leakStatistics, type LeakStatistics } from '../backstop.js';
import { liveAllocations } from '../buffer/dropped-memory.js';
import { checkResource } from '../resource/resource.js';
import { allocationWaits, resetPeakWaits, type AllocationWaits } from '../resource/waiting.js';
import { spillFigures, type SpillFigures } from '../buffer/spill/spill-manager.js';
import { foreignFigures, type ForeignFigures } from '../buffer/foreign-mirror.js';
import { graphPoolsOf } from '../resource/suballoc/graph-pool.js';
import { totalDriverCalls, type DriverCalls } from '../resource/figures.js';

/**
 * A figure now (`value`) and its high-water mark (`peak`): a `Counter` without the running total,
 * for figures that have none (reserved bytes: CUDA's own pool reports only current and peak).
 * Read the same way as a Counter: `.value`, `.peak`.
 */
export type Gauge = Pick<Counter, 'value' | 'peak'>;

/**
 * The figures of one device's current resource (schema version 1): what is always there
 * (`MemoryStatsBase`), and the resource's own figures, which every resource of vram keeps
 * (`ResourceFigureStats`); a resource outside vram that keeps none has them all `undefined`
 * (`NoResourceFigures`), never a 0 that would read as measured. One test narrows them all:
 * `if (stats.allocatedBytes !== undefined) stats.reservedBytes.peak`. Every counter reads `.value`
 * and `.peak` (and `.total` where a running total is kept).
 */
export type MemoryStats = MemoryStatsBase & (ResourceFigureStats | NoResourceFigures);

/** The fields of `memoryStats()` every resource has, whatever figures it keeps. */
export interface MemoryStatsBase {
  /** The schema version of this object; a change of meaning or a removed field raises it. */
  readonly version: 2;
  /** The device ordinal. */
  readonly device: number;
  /** The current resource's `describe()`, e.g. `LimitingAdaptor(limit=64 MiB, PoolResource(...))`. */
  readonly resource: string;
  /**
   * Out-of-memory errors the current resource's `allocate` threw to its callers (failures a
   * RetryOnOutOfMemory recovered from are not among them). Counted per resource: setting another
   * current resource starts from its own count.
   */
  readonly outOfMemoryErrors: number;
  /**
   * Allocations the garbage-collection backstop freed because the program dropped them without
   * `free()`, with their bytes: process-wide, every device and resource together.
   */
  readonly leaks: LeakStatistics;
  /**
   * Allocations of the device that waited for memory (`allocateAsync(n, { wait: true })`, any
   * resource): how many wait now, at most and in all, how long they waited, and how many waits
   * ended with their timeout or their abort signal.
   */
  readonly waits: AllocationWaits;
  /**
   * Spillable memory of the device (`{ spillable: true }`, which does not come from the current
   * resource): bytes and buffers spilled to host memory now, their peaks and totals, the copies out
   * (a buffer whose host copy was current is spilled without one), reloads, and what is on the
   * device now and held there by leases. Zeros where nothing was spillable.
   */
  readonly spill: SpillFigures;
  /**
   * Foreign device memory tied to host arrays (`ForeignMirror`): how many and their bytes, which
   * vram never frees or spills (their owners do), and the copies it made between the sides.
   */
  readonly foreign: ForeignFigures;
  /**
   * Memory CUDA graphs own on the device: the capture-private pools (`GraphPool`) that hold memory
   * now, the bytes they hold from the driver and the bytes in blocks handed out and not freed.
   * That memory does not come from the current resource (a capture allocates from the pool instead);
   * graph memory nodes of `AsyncResource` are in CUDA's pool, not here. Zeros when no graph holds any.
   */
  readonly graphPools: { readonly pools: number; readonly reservedBytes: number; readonly allocatedBytes: number };
}

/**
 * The current resource's figures (`memoryFigures()`), as `memoryStats()` gives them. The first four
 * are there for every resource of vram; the others only where a part of the stack keeps them.
 */
export interface ResourceFigureStats {
  /**
   * Bytes handed out and not yet returned (`value`, as the callers asked for them), their peak,
   * and all bytes ever handed out (`total`). PyTorch's `allocated_bytes`.
   */
  readonly allocatedBytes: Counter;
  /** Live allocations (`value`), their peak and all allocations ever made. PyTorch's `allocation`. */
  readonly allocations: Counter;
  /**
   * Bytes the resource holds from the driver (or its upstream): live blocks, their rounding and
   * what it caches. PyTorch's `reserved_bytes`. For a CudaResource it is the allocated bytes.
   */
  readonly reservedBytes: Gauge;
  /**
   * Reserved minus allocated bytes: what is cached, plus the rounding of live blocks. The most
   * `emptyCache()` can give back (it gives back whole free pages or chunks only), and the memory
   * that looks like a leak in `nvidia-smi` but is the cache.
   */
  readonly cachedBytes: number;
  /** Allocations that failed for lack of memory and were retried (RetryOnOutOfMemory in the stack). */
  readonly allocationRetries: number | undefined;
  /** The byte cap of a LimitingAdaptor in the stack (the lowest, where there are several). */
  readonly limitBytes: number | undefined;
  /** Cached physical pages moved to where live data needed them (virtual-memory PoolResource). */
  readonly pageMoves: number | undefined;
  /** Driver calls made to grow, move and give back pages, by kind (virtual-memory PoolResource). */
  readonly driverCalls: DriverCalls | undefined;
}

/** A current resource that keeps no figures (one from outside vram): none of `ResourceFigureStats`. */
export type NoResourceFigures = { readonly [K in keyof ResourceFigureStats]: undefined };

/**
 * The figures of the current resource of `device`, in one flat object.
 *
 * @param device The device (device 0 by default).
 * @returns A snapshot of its figures; later calls return new objects.
 * @throws {RangeError | TypeError} For a bad device, or a bad environment variable of the default resource.
 * @throws {UseAfterFreeError} When the current resource was destroyed.
 * @example
 * ```ts
 * const stats = memoryStats();
 * console.log(stats.allocatedBytes?.value, stats.cachedBytes);
 * ```
 */
export function memoryStats(device?: Device | number): MemoryStats {
  const dev = Device.resolve(device);
  const mr = checkResource(getCurrentResource(dev), 'the current resource');
  const figures = mr.memoryFigures();
  const own: ResourceFigureStats | NoResourceFigures =
    figures === undefined
      ? NO_FIGURES
      : {
          allocatedBytes: figures.allocatedBytes,
          allocations: figures.allocations,
          reservedBytes: Object.freeze({ value: figures.reservedBytes, peak: figures.peakReservedBytes }),
          cachedBytes: Math.max(0, figures.reservedBytes - figures.allocatedBytes.value),
          allocationRetries: figures.allocationRetries,
          limitBytes: figures.limitBytes,
          pageMoves: figures.pageMoves,
          driverCalls: figures.driverCalls,
        };
  return Object.freeze({
    version: 2,
    device: dev.ordinal,
    resource: mr.describe(),
    ...own,
    outOfMemoryErrors: mr.outOfMemoryErrors,
    leaks: leakStatistics(),
    waits: allocationWaits(dev.ordinal),
    spill: spillFigures(dev),
    foreign: foreignFigures(dev.ordinal),
    graphPools: graphPoolFigures(dev.ordinal),
  } as const);
}

const NO_FIGURES: NoResourceFigures = {
  allocatedBytes: undefined,
  allocations: undefined,
  reservedBytes: undefined,
  cachedBytes: undefined,
  allocationRetries: undefined,
  limitBytes: undefined,
  pageMoves: undefined,
  driverCalls: undefined,
};

/** The capture-private pools of device `ordinal`, summed. */
function graphPoolFigures(ordinal: number): MemoryStats['graphPools'] {
  const pools = graphPoolsOf(ordinal);
  return Object.freeze({
    pools: pools.length,
    reservedBytes: pools.reduce((n, p) => n + p.reservedBytes, 0),
    allocatedBytes: pools.reduce((n, p) => n + p.allocatedBytes, 0),
  });
}

/**
 * Starts new high-water marks (allocated bytes and count, reserved bytes) from the current figures
 * of the current resource of `device` and everything below it, as PyTorch's
 * `reset_peak_memory_stats()`: peaks per phase of a program. Totals and counts of errors stay.
 *
 * @param device The device (device 0 by default).
 * @throws {RangeError | TypeError} For a bad device.
 * @throws {UseAfterFreeError} When the current resource was destroyed.
 * @example
 * ```ts
 * resetPeakStats();
 * runStep();
 * memoryStats().allocatedBytes?.peak; // the step's peak
 * ```
 */
export function resetPeakStats(device?: Device | number): void {
  checkResource(getCurrentResource(device), 'the current resource').resetPeakFigures();
  resetPeakWaits(Device.resolve(device).ordinal);
}

/**
 * The figures of `memoryStats(device)` as a readable table (metric, current, peak, total), as
 * PyTorch's `memory_summary()`; `-` where a column does not apply, `n/a` where the resource
 * keeps no such figure.
 *
 * @param device The device (device 0 by default).
 * @returns Lines ending in a newline.
 * @throws {RangeError | TypeError} For a bad device.
 * @throws {UseAfterFreeError} When the current resource was destroyed.
 * @example
 * ```ts
 * console.log(memorySummary());
 * ```
 */
export function memorySummary(device?: Device | number): string {
  const s = memoryStats(device);
  const na = 'n/a';
  const bytes = (n: number | undefined): string => (n === undefined ? na : formatBytes(n));
  const count = (n: number | undefined): string => (n === undefined ? na : String(n));
  const rows: string[][] = [
    ['Metric', 'Current', 'Peak', 'Total'],
    ['Allocated memory', bytes(s.allocatedBytes?.value), bytes(s.allocatedBytes?.peak), bytes(s.allocatedBytes?.total)],
    ['Allocations', count(s.allocations?.value), count(s.allocations?.peak), count(s.allocations?.total)],
    ['Reserved memory', bytes(s.reservedBytes?.value), bytes(s.reservedBytes?.peak), '-'],
    ['Cached (releasable)', bytes(s.cachedBytes), '-', '-'],
    ['Limit', s.limitBytes === undefined ? '-' : formatBytes(s.limitBytes), '-', '-'],
    ['Allocation retries', '-', '-', count(s.allocationRetries)],
    ['Out-of-memory errors', '-', '-', String(s.outOfMemoryErrors)],
    ['Page moves', '-', '-', count(s.pageMoves)],
    ['Driver calls', '-', '-', count(s.driverCalls === undefined ? undefined : totalDriverCalls(s.driverCalls))],
    ['Waiting allocations', String(s.waits.count.value), String(s.waits.count.peak), String(s.waits.count.total)],
    ['Wait time (longest)', '-', `${Math.round(s.waits.waitedMs.longest)} ms`, `${Math.round(s.waits.waitedMs.total)} ms`],
    ['Wait timeouts, aborts', '-', '-', `${s.waits.timeouts}, ${s.waits.aborts}`],
    ['Leaks (GC backstop)', '-', '-', `${s.leaks.count} (${formatBytes(s.leaks.bytes)})`],
    ['Spilled memory', formatBytes(s.spill.spilledBytes.value), formatBytes(s.spill.spilledBytes.peak), formatBytes(s.spill.spilledBytes.total)],
    ['Spill copies out', '-', '-', `${s.spill.copiesOut} (${formatBytes(s.spill.copiedOutBytes)})`],
    ['Reloads', '-', '-', `${s.spill.reloads} (${formatBytes(s.spill.reloadedBytes)})`],
  ];
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => r[c]!.length)));
  const line = (r: string[]): string => r.map((cell, c) => (c === 0 ? cell.padEnd(widths[c]!) : cell.padStart(widths[c]!))).join('  ');
  const rule = '-'.repeat(widths.reduce((a, w) => a + w, 2 * (widths.length - 1)));
  const title = `vram memory summary, device ${s.device}: ${s.resource}`;
  return [title, rule, line(rows[0]!), rule, ...rows.slice(1).map(line), rule, ...liveLines()].join('\n') + '\n';
}

/**
 * The summary's last lines: the buffers and arrays the program holds (every device), and, when
 * stacks are captured, the site with the most live ones and how many more it holds than at the
 * previous summary: a count that keeps growing there is memory dropped without `free()`.
 */
function liveLines(): string[] {
  const live = liveAllocations(true);
  const lines = [
    `Live buffers and arrays (all devices): ${live.count} (${formatBytes(live.bytes)}); ` +
      (live.sites.length === 0 ? 'captureAllocationStacks(true) names their sites' : 'by site:'),
  ];
  const growing = [...live.sites].sort((a, b) => b.growth - a.growth || b.count - a.count);
  for (const site of growing.slice(0, 3)) {
    const growth = site.growth > 0 ? `, +${site.growth} since the last summary: growing (dropped without free()?)` : '';
    lines.push(`  ${site.count} live (${formatBytes(site.bytes)}) ${site.frames[0] ?? 'at an unknown site'}${growth}`);
  }
  return lines;
}
