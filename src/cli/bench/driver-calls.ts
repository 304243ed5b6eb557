/**
 * Whether a stretch of benchmark code called the driver for memory, read from the figures the
 * resources keep, so a row is marked a model of the driver (`modelMark`) for what it timed rather
 * than from a list of names.
 */
import { DriverResource } from '../../resource/upstream/driver-resource.js';
import { upstreamChain, type MemoryResource } from '../../resource/resource.js';
import { totalDriverCalls } from '../../resource/figures.js';

/**
 * A figure of `top`'s stack that grows whenever the stack calls the driver for memory: the blocks
 * ever handed out by each resource that is one driver allocation per block (CudaResource,
 * AsyncResource and the like), plus the growth calls each virtual-memory pool reports
 * (`memoryFigures().driverCalls`: cuMemCreate, cuMemMap, ...). Compare two readings; the value is
 * not itself a count of calls (a layer that passes its upstream's figure on counts it again).
 *
 * @param top The stack's top.
 * @returns The tally now.
 * @example
 * ```ts
 * const before = driverCallTally(mr);
 * mr.deallocate(mr.allocate(256), 256);
 * const calledDriver = driverCallTally(mr) !== before; // false for a pool hit
 * ```
 */
export function driverCallTally(top: MemoryResource): number {
  let tally = 0;
  for (const resource of upstreamChain(top)) {
    const figures = resource.memoryFigures();
    if (figures === undefined) continue;
    if (resource instanceof DriverResource) tally += figures.allocations.total;
    if (figures.driverCalls !== undefined) tally += totalDriverCalls(figures.driverCalls);
  }
  return tally;
}
