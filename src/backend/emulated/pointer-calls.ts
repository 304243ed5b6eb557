/**
 * cuPointerGetAttributes for the emulated driver: what it knows about any address, resolved
 * through the same address-space indexes that copies use.
 */
import { type PointerAttributes, type Ptr, MemoryType } from '../backend.js';
import { PoolState } from './pools.js';
import type { EmulatedState } from './state.js';

/** What the emulated driver knows about `ptr`; memoryType 0 and device -1 when nothing. */
export function pointerAttributes(s: EmulatedState, ptr: Ptr): PointerAttributes {
  const a = typeof ptr === 'number' ? s.lookup(ptr) : undefined;
  if (a === undefined) return { memoryType: 0, device: -1, isManaged: false, rangeStart: 0, rangeSize: 0, context: 0, pool: 0 };
  let rangeStart = a.base;
  let rangeSize = a.size;
  if (a instanceof PoolState) {
    const block = a.blockAt(ptr);
    if (block !== undefined) {
      // As CUDA 13 answers: the size asked for; a block of a pool in host NUMA memory has no start address.
      rangeStart = a.hostNuma === undefined ? block.address : 0;
      rangeSize = block.free ? block.size : block.requested;
    }
  }
  const host = a.kind === 'pinned' || a.kind === 'registered' || (a instanceof PoolState && a.hostNuma !== undefined);
  const memoryType = a.kind === 'managed' ? MemoryType.UNIFIED : host ? MemoryType.HOST : MemoryType.DEVICE;
  const pool = a instanceof PoolState ? a.handle : 0;
  return { memoryType, device: a.device, isManaged: a.kind === 'managed', rangeStart, rangeSize, context: a.context, pool };
}
