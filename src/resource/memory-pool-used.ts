/**
 * ppl.cv's `memoryPoolUsed()`: whether the current resource of a device is a pool that
 * sub-allocates memory the program reserved (so sizing it is the program's job).
 */
import type { Device } from '../device.js';
import { ResourceAdaptor } from './adaptors/adaptor.js';
import { getCurrentResource } from './current.js';
import { ArenaResource } from './suballoc/arena.js';
import { BinningResource } from './suballoc/binning.js';
import { FixedSizeResource } from './suballoc/fixed-size.js';
import { PoolResource } from './suballoc/pool.js';

/**
 * True when the current resource of `device` (in this async context: `useResource` scopes count)
 * is, itself or under its adaptors, one of vram's sub-allocating pools: `PoolResource`,
 * `ArenaResource`, `BinningResource` or `FixedSizeResource` (ppl.cv's `activateGpuMemoryPool`
 * makes it true). False for the driver's allocators, `CudaResource` and `AsyncResource` (the
 * default `async` stack included): each block is a driver call, and the driver's pool is not
 * memory the program reserved and sized. Built-in operations take their scratch from the current
 * resource either way (`reductionScratch` says how much a reduction takes).
 *
 * @param device The device (device 0 by default).
 * @returns Whether a pool is the current resource.
 * @throws {TypeError | RangeError} For a bad device.
 * @example
 * ```ts
 * useResource(new ArenaResource({ size: '64M' }), () => memoryPoolUsed()); // true
 * ```
 */
export function memoryPoolUsed(device?: Device | number): boolean {
  let mr = getCurrentResource(device);
  while (mr instanceof ResourceAdaptor) mr = mr.upstream;
  return mr instanceof PoolResource || mr instanceof ArenaResource || mr instanceof BinningResource || mr instanceof FixedSizeResource;
}
