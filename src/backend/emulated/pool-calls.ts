/**
 * The emulated driver's stream-ordered allocation calls: default and created pools, their
 * attributes and access, and allocations and frees in stream order.
 */
import type { Handle, MemPoolAttribute, MemPoolProps, Ptr } from '../backend.js';
import { CUresult } from '../../errors.js';
import { checkCount, fail, hex, invalidValue } from './fail.js';
import { GraphAllocation } from './graphs.js';
import { PoolState, POOL_SEGMENT_GRANULARITY } from './pools.js';
import type { EmulatedState } from './state.js';
import type { StreamState } from './streams.js';

/** Stream-ordered pools of one emulated driver. */
export class PoolCalls {
  constructor(private readonly s: EmulatedState) {}

  /**
   * cuMemAllocAsync from the default pool of the stream's device. 0 bytes succeed and allocate
   * nothing (the driver leaves the pointer unset; the null pointer here), unlike cuMemAlloc.
   */
  memAllocAsync(bytes: number, stream: Handle): Ptr {
    const call = 'cuMemAllocAsync';
    checkCount(bytes, call, 'size');
    const s = this.s.stream(stream, call);
    if (bytes === 0) return 0;
    // The current pool of the stream's device (the stream carries its context).
    return this.poolAlloc(this.currentPool(this.s.context(s.context, call).device.ordinal), bytes, s, call);
  }

  /** cuMemAllocFromPoolAsync; 0 bytes as in memAllocAsync. */
  memAllocFromPoolAsync(bytes: number, pool: Handle, stream: Handle): Ptr {
    const call = 'cuMemAllocFromPoolAsync';
    checkCount(bytes, call, 'size');
    const p = this.pool(pool, call);
    const s = this.s.stream(stream, call);
    if (bytes === 0) return 0;
    // A graph memory node never comes from a pool made for sharing: the driver refuses the
    // allocation (probed on a CUDA 13 driver with a POSIX file-descriptor pool).
    if (s.capture !== undefined && p.handleTypes !== 0)
      fail(CUresult.NOT_SUPPORTED, call, 'a pool with shareable handles cannot allocate during stream capture');
    return this.poolAlloc(p, bytes, s, call);
  }

  /**
   * cuMemFreeAsync: the block returns to its pool when `stream` reaches the free. The null pointer
   * (what a 0-byte memAllocAsync returns) is accepted and frees nothing, as on the driver.
   */
  memFreeAsync(ptr: Ptr, stream: Handle): void {
    const call = 'cuMemFreeAsync';
    const s = this.s.stream(stream, call);
    if (ptr === 0) return;
    const block = this.s.poolBlocks.get(ptr);
    if (block === undefined) {
      const a = this.s.deviceIndex.find(ptr);
      if (a !== undefined && a.base === ptr && a.kind === 'device') {
        // The driver accepts cuMemAlloc memory too: it is freed when the stream reaches the free.
        this.s.enqueue(s, () => {
          if (a.live) this.s.dropAllocation(this.s.deviceIndex, a);
        });
        return;
      }
      invalidValue(call, `${hex(ptr)} is not a stream-ordered allocation`);
    }
    const capture = s.capture;
    const graphAllocation = this.s.graphAllocations.get(ptr);
    if (capture !== undefined) {
      // A free node: only graph memory can be freed in a graph; the memory stays the graph's.
      if (graphAllocation === undefined) invalidValue(call, `${hex(ptr)} was not allocated by a graph: a graph can free only graph memory`);
      if (graphAllocation.freedInGraph) invalidValue(call, `${hex(ptr)} was already freed in the graph`);
      this.s.enqueue(s, undefined, undefined, undefined, call);
      graphAllocation.freedInGraph = true;
      return;
    }
    if (graphAllocation !== undefined) {
      // Graph memory the graph left to the program: freed once per launch, kept while the graph lives.
      if (graphAllocation.freedInGraph || graphAllocation.freedOutside) invalidValue(call, `${hex(ptr)}: the graph allocation was already freed`);
      graphAllocation.freedOutside = true;
      this.s.enqueue(s, undefined, undefined, undefined, call);
      return;
    }
    this.s.poolBlocks.delete(ptr);
    const complete = block.pool.free(block, s);
    this.s.enqueue(s, complete, undefined, undefined, call);
  }

  /** The device's default pool (created on first use). */
  deviceGetDefaultMemPool(ordinal: number): Handle {
    this.s.device(ordinal, 'cuDeviceGetDefaultMemPool');
    return this.defaultPool(ordinal).handle;
  }

  /** cuDeviceGetMemPool: the pool set with cuDeviceSetMemPool, else the default pool. */
  deviceGetMemPool(ordinal: number): Handle {
    this.s.device(ordinal, 'cuDeviceGetMemPool');
    return this.currentPool(ordinal).handle;
  }

  /** cuDeviceSetMemPool: a pool of another device is CUDA_ERROR_INVALID_VALUE. */
  deviceSetMemPool(ordinal: number, pool: Handle): void {
    const call = 'cuDeviceSetMemPool';
    this.s.device(ordinal, call);
    const p = this.pool(pool, call);
    if (p.device !== ordinal) invalidValue(call, `pool ${pool} belongs to device ${p.device}, not ${ordinal}`);
    this.s.currentPools.set(ordinal, p);
  }

  /** cuMemPoolCreate. */
  memPoolCreate(props: MemPoolProps): Handle {
    const call = 'cuMemPoolCreate';
    this.s.device(props.device, call);
    const maxSize = props.maxSize ?? 0;
    const handleTypes = props.handleTypes ?? 0;
    checkCount(maxSize, call, 'maxSize');
    if (handleTypes !== 0 && handleTypes !== 1 && handleTypes !== 8) invalidValue(call, `unsupported handle types ${handleTypes}`);
    if (handleTypes === 8 && !this.s.fabric) fail(CUresult.NOT_SUPPORTED, call, 'this device does not support fabric handles');
    const numa = props.hostNumaId;
    if (numa !== undefined) {
      if (!this.s.hostNumaPools) fail(CUresult.NOT_SUPPORTED, call, 'this device does not support pools in host NUMA memory');
      // The emulation has one host NUMA node, 0 (CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID of every device).
      if (numa !== 0) invalidValue(call, `host NUMA node ${String(numa)} does not exist (the emulated host has node 0)`);
    }
    return this.newPool(props.device, maxSize, handleTypes, call, numa).handle;
  }

  /** cuMemPoolDestroy: default pools cannot be destroyed; memory still allocated goes with it. */
  memPoolDestroy(pool: Handle): void {
    const call = 'cuMemPoolDestroy';
    const p = this.pool(pool, call);
    if ([...this.s.defaultPools.values()].includes(p)) invalidValue(call, 'a default pool cannot be destroyed');
    this.s.settle(call, 'none');
    for (const b of p.allocatedBlocks()) this.s.poolBlocks.delete(b.address);
    p.destroy();
    // Destroying a device's current pool makes its default pool current again.
    if (this.s.currentPools.get(p.device) === p) this.s.currentPools.delete(p.device);
    this.s.poolIndex.remove(p);
    this.s.pools.delete(pool);
  }

  /** cuMemPoolTrimTo: releases whole free segments until at most `minBytesToKeep` remain reserved. */
  memPoolTrimTo(pool: Handle, minBytesToKeep: number): void {
    const call = 'cuMemPoolTrimTo';
    const p = this.pool(pool, call);
    checkCount(minBytesToKeep, call, 'minBytesToKeep');
    p.releaseTo(minBytesToKeep);
  }

  /** cuMemPoolGetAttribute. */
  memPoolGetAttribute(pool: Handle, attribute: MemPoolAttribute): number {
    const call = 'cuMemPoolGetAttribute';
    const p = this.pool(pool, call);
    switch (attribute) {
      case 1:
      case 2:
      case 3:
        return p.reuse.get(attribute) ?? 1;
      case 4:
        return p.releaseThreshold;
      case 5:
        return p.reserved;
      case 6:
        return p.reservedHigh;
      case 7:
        return p.used;
      case 8:
        return p.usedHigh;
      default:
        return invalidValue(call, `unknown attribute ${String(attribute)}`);
    }
  }

  /** cuMemPoolSetAttribute: the high-water marks accept only 0 (reset); current values are read-only. */
  memPoolSetAttribute(pool: Handle, attribute: MemPoolAttribute, value: number): void {
    const call = 'cuMemPoolSetAttribute';
    const p = this.pool(pool, call);
    checkCount(value, call, 'value');
    switch (attribute) {
      case 1:
      case 2:
      case 3:
        p.reuse.set(attribute, value === 0 ? 0 : 1);
        return;
      case 4:
        p.releaseThreshold = value;
        return;
      case 6:
      case 8:
        if (value !== 0) invalidValue(call, 'high-water marks can only be reset to 0');
        if (attribute === 6) p.reservedHigh = p.reserved;
        else p.usedHigh = p.used;
        return;
      default:
        invalidValue(call, `attribute ${String(attribute)} cannot be set`);
    }
  }

  /** cuMemPoolSetAccess: access of another device to the pool's memory. */
  memPoolSetAccess(pool: Handle, ordinal: number, flags: number): void {
    const call = 'cuMemPoolSetAccess';
    const p = this.pool(pool, call);
    this.s.device(ordinal, call);
    if (flags !== 0 && flags !== 1 && flags !== 3) invalidValue(call, `unknown access flags ${flags}`);
    if (ordinal === p.device && p.hostNuma === undefined && flags !== 3) invalidValue(call, "a pool's own device always has read-write access");
    p.access.set(ordinal, flags);
  }

  /** cuMemPoolGetAccess. */
  memPoolGetAccess(pool: Handle, ordinal: number): number {
    const call = 'cuMemPoolGetAccess';
    const p = this.pool(pool, call);
    this.s.device(ordinal, call);
    // Host NUMA memory is the host's until access is granted, its creating device's included.
    return ordinal === p.device && p.hostNuma === undefined ? 3 : (p.access.get(ordinal) ?? 0);
  }

  private pool(handle: Handle, call: string): PoolState {
    const p = this.s.pools.get(handle);
    if (p === undefined) invalidValue(call, `unknown memory pool ${handle}`);
    return p;
  }

  private currentPool(ordinal: number): PoolState {
    return this.s.currentPools.get(ordinal) ?? this.defaultPool(ordinal);
  }

  private defaultPool(ordinal: number): PoolState {
    let pool = this.s.defaultPools.get(ordinal);
    if (pool === undefined) {
      pool = this.newPool(ordinal, 0, 0, 'cuDeviceGetDefaultMemPool');
      this.s.defaultPools.set(ordinal, pool);
    }
    return pool;
  }

  /**
   * A new pool with its own virtual address range: four times the device's capacity (or its
   * maxSize), enough for any fragmentation the capacity allows.
   */
  private newPool(ordinal: number, maxSize: number, handleTypes: number, call: string, hostNuma?: number): PoolState {
    const device = this.s.devices[ordinal]!;
    const span = Math.ceil(((maxSize > 0 ? Math.min(maxSize, device.capacity) : device.capacity) * 4) / POOL_SEGMENT_GRANULARITY) * POOL_SEGMENT_GRANULARITY;
    const base = this.s.poolRange.take(span, POOL_SEGMENT_GRANULARITY, call);
    const pool = new PoolState(this.s.handle(), ordinal, this.s.contextFor(ordinal).handle, maxSize, handleTypes, base, span, this.s.poolHost, hostNuma);
    this.s.pools.set(pool.handle, pool);
    this.s.poolIndex.insert(pool);
    return pool;
  }

  private poolAlloc(pool: PoolState, bytes: number, stream: StreamState, call: string): Ptr {
    const capture = stream.capture;
    if (capture?.invalidated === true) fail(CUresult.STREAM_CAPTURE_INVALIDATED, call, 'the capture this stream belongs to was invalidated');
    const block = pool.allocate(bytes, stream, call);
    this.s.poolBlocks.set(block.address, block);
    if (capture !== undefined) {
      // An alloc node: graph memory, at this address for the graph's lifetime (graphs.ts).
      const allocation = new GraphAllocation(block, capture.memory);
      capture.memory.allocations.push(allocation);
      this.s.graphAllocations.set(block.address, allocation);
      this.s.enqueue(stream, undefined, undefined, undefined, call);
    }
    return block.address;
  }
}
