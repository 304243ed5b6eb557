/**
 * The emulated driver's virtual memory management calls: address reservations, physical
 * allocations charged against capacity, mappings and access.
 */
import { MemHandleType, type Handle, type Ptr } from '../backend.js';
import { CUresult } from '../../errors.js';
import { checkCount, checkSize, fail, hex, invalidValue } from './fail.js';
import type { EmulatedState } from './state.js';
import { PhysicalMemory, PhysicalTable, Reservation, VMM_GRANULARITY } from './vmm.js';

/** Virtual memory management of one emulated driver. */
export class VirtualMemoryCalls {
  constructor(private readonly s: EmulatedState) {}

  /** 2 MiB, as on current GPUs. */
  memGetAllocationGranularity(ordinal: number): number {
    this.s.device(ordinal, 'cuMemGetAllocationGranularity');
    return VMM_GRANULARITY;
  }

  /** cuMemAddressReserve: a multiple of the granularity, aligned as asked (default 2 MiB); no capacity. */
  memAddressReserve(bytes: number, alignment: number): Ptr {
    const call = 'cuMemAddressReserve';
    checkSize(bytes, call);
    checkCount(alignment, call, 'alignment');
    if (bytes % VMM_GRANULARITY !== 0) invalidValue(call, `size must be a multiple of ${VMM_GRANULARITY}`);
    if (alignment !== 0 && (alignment & (alignment - 1)) !== 0 && Math.log2(alignment) % 1 !== 0) invalidValue(call, 'alignment must be a power of two');
    // A reservation is address space only: the driver needs no current context for it.
    const ctx = this.s.contextFor(0);
    const base = this.s.virtualRange.take(bytes, Math.max(alignment, VMM_GRANULARITY), call);
    this.s.virtualIndex.insert(new Reservation(base, bytes, ctx.device.ordinal, ctx.handle));
    return base;
  }

  /** cuMemAddressFree: the whole reservation; anything still mapped is unmapped. */
  memAddressFree(ptr: Ptr, bytes: number): void {
    const call = 'cuMemAddressFree';
    const r = this.s.virtualIndex.find(ptr);
    if (r === undefined || r.base !== ptr || r.size !== bytes) invalidValue(call, 'not a reservation');
    this.s.settle(call, 'none');
    this.s.releaseMappings(r.unmapAll());
    this.s.virtualIndex.remove(r);
  }

  /**
   * cuMemCreate: lazily backed physical memory, charged against capacity, exportable as the handle
   * types asked for (POSIX descriptors when not given, as the CUDA backend asks by default).
   */
  memCreate(bytes: number, ordinal: number, handleTypes: number = MemHandleType.POSIX_FILE_DESCRIPTOR): Handle {
    const call = 'cuMemCreate';
    checkSize(bytes, call);
    const device = this.s.device(ordinal, call);
    if (bytes % VMM_GRANULARITY !== 0) invalidValue(call, `size must be a multiple of ${VMM_GRANULARITY}`);
    if ((handleTypes & ~(MemHandleType.POSIX_FILE_DESCRIPTOR | MemHandleType.FABRIC)) !== 0) invalidValue(call, `unsupported handle types ${handleTypes}`);
    if ((handleTypes & MemHandleType.FABRIC) !== 0 && !device.fabric) fail(CUresult.NOT_SUPPORTED, call, 'this device does not support fabric handles');
    device.charge(bytes, call);
    const memory = new PhysicalMemory(this.s.handle(), bytes, ordinal, handleTypes);
    this.s.physical.add(memory);
    return memory.handle;
  }

  /** cuMemRelease: capacity goes back once the memory is no longer mapped. */
  memRelease(handle: Handle): void {
    const memory = this.s.physical.release(handle, 'cuMemRelease');
    if (memory !== undefined) PhysicalTable.gone(memory, (bytes) => this.s.devices[memory.device]!.uncharge(bytes));
  }

  /**
   * cuMemMap: maps a whole physical allocation at `ptr` inside a reservation. As on the driver, a
   * size other than the allocation's is CUDA_ERROR_NOT_SUPPORTED, whatever the address (checked
   * first); a range already mapped is CUDA_ERROR_INVALID_VALUE.
   */
  memMap(ptr: Ptr, bytes: number, handle: Handle): void {
    const call = 'cuMemMap';
    checkSize(bytes, call);
    const memory = this.s.physical.get(handle, call);
    if (bytes % VMM_GRANULARITY !== 0) invalidValue(call, `size must be a multiple of the ${VMM_GRANULARITY}-byte granularity`);
    if (bytes !== memory.size) {
      fail(CUresult.NOT_SUPPORTED, call, `a mapping of ${bytes} bytes of a ${memory.size}-byte allocation (only whole allocations map)`);
    }
    const r = this.s.virtualIndex.find(ptr);
    if (r === undefined) invalidValue(call, `${hex(ptr)} is not in a reserved range`);
    r.map(ptr - r.base, bytes, memory, call);
  }

  /** cuMemUnmap: the range must cover whole mappings (a range with none in it is fine). */
  memUnmap(ptr: Ptr, bytes: number): void {
    const call = 'cuMemUnmap';
    checkSize(bytes, call);
    const r = this.s.virtualIndex.find(ptr);
    if (r === undefined) invalidValue(call, `${hex(ptr)} is not in a reserved range`);
    this.s.settle(call, 'none');
    this.s.releaseMappings(r.unmap(ptr - r.base, bytes, call));
  }

  /** cuMemSetAccess: grants a device access to mapped memory. */
  memSetAccess(ptr: Ptr, bytes: number, ordinal: number, flags: number): void {
    const call = 'cuMemSetAccess';
    checkSize(bytes, call);
    this.s.device(ordinal, call);
    if (flags !== 0 && flags !== 1 && flags !== 3) invalidValue(call, `unknown access flags ${flags}`);
    const r = this.s.virtualIndex.find(ptr);
    if (r === undefined || ptr - r.base + bytes > r.size) invalidValue(call, `${hex(ptr)} is not in a reserved range`);
    r.setAccess(ptr - r.base, bytes, ordinal, flags, call);
  }
}
