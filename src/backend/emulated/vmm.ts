/**
 * Virtual memory management (cuMemCreate / cuMemAddressReserve / cuMemMap / cuMemSetAccess),
 * emulated. Physical allocations are lazily backed stores that count against capacity; a
 * reservation is a range of the virtual address space that costs nothing; a mapping puts a whole
 * physical allocation at an offset of a reservation, so two mappings of one handle share their bytes.
 * Memory is accessible through a mapping only after memSetAccess grants it: a copy through an
 * inaccessible mapping is CUDA_ERROR_INVALID_VALUE. Releasing a handle that is still mapped defers
 * giving its capacity back until its last mapping goes, as the driver does.
 */
import { CUresult } from '../../errors.js';
import type { Allocation } from './allocation.js';
import { fail, invalidValue } from './fail.js';
import { LazyStore, type Span } from './store.js';

/** The allocation granularity of cuMemCreate and cuMemMap (2 MiB, as on current GPUs). */
export const VMM_GRANULARITY = 2 * 1024 * 1024;

/** A physical allocation (CUmemGenericAllocationHandle). */
export class PhysicalMemory {
  readonly store: LazyStore;
  /** Number of live mappings of it. */
  mappings = 0;
  /** True once memRelease was called; capacity goes back when `mappings` reaches 0. */
  released = false;
  /**
   * Set once the memory is in a shared file (exported with cuMemExportToShareableHandle, or
   * imported from another process's): undoes the sharing once the memory is gone.
   */
  shared: { readonly fd: number; readonly token?: string; readonly release: () => void } | undefined;
  /** Another process's memory (cuMemImportFromShareableHandle): it charges no capacity here. */
  imported = false;

  constructor(
    readonly handle: number,
    readonly size: number,
    readonly device: number,
    /** The shareable handle types it was created with (MemHandleType bits; imports: the type they came by). */
    readonly handleTypes: number = 0x1,
  ) {
    this.store = new LazyStore(size);
  }
}

/** One physical allocation mapped into a reservation. */
interface Mapping {
  /** Offset of the mapping in its reservation. */
  readonly offset: number;
  readonly size: number;
  readonly memory: PhysicalMemory;
  /** Access granted per device ordinal (CUmemAccess_flags). */
  readonly access: Map<number, number>;
}

/** A reserved virtual address range and what is mapped into it. */
export class Reservation implements Allocation {
  readonly kind = 'reservation' as const;
  live = true;
  readonly store = undefined;
  readonly charged = 0;
  readonly flags = 0;
  /** Mappings sorted by offset. */
  private readonly mappings: Mapping[] = [];

  constructor(
    readonly base: number,
    readonly size: number,
    readonly device: number,
    readonly context: number,
  ) {}

  /** True when anything is mapped into the reservation. */
  get mapped(): boolean {
    return this.mappings.length > 0;
  }

  /** Maps `memory` at [offset, offset + size). */
  map(offset: number, size: number, memory: PhysicalMemory, call: string): void {
    if (offset % VMM_GRANULARITY !== 0 || size % VMM_GRANULARITY !== 0) {
      invalidValue(call, `address and size must be multiples of the ${VMM_GRANULARITY}-byte granularity`);
    }
    // The driver maps whole allocations only: part of one, or more than it, is not supported.
    if (size !== memory.size) {
      fail(CUresult.NOT_SUPPORTED, call, `a mapping of ${size} bytes of a ${memory.size}-byte allocation (only whole allocations map)`);
    }
    if (offset + size > this.size) invalidValue(call, 'the range extends past its reservation');
    for (const m of this.mappings) {
      if (m.offset < offset + size && offset < m.offset + m.size) {
        invalidValue(call, 'the range overlaps an existing mapping');
      }
    }
    let i = 0;
    while (i < this.mappings.length && this.mappings[i]!.offset < offset) i++;
    this.mappings.splice(i, 0, { offset, size, memory, access: new Map() });
    memory.mappings++;
  }

  /**
   * Unmaps every mapping in [offset, offset + size), which must cover them whole; returns them.
   * A range with nothing mapped in it unmaps nothing, without an error (as on the driver).
   */
  unmap(offset: number, size: number, call: string): PhysicalMemory[] {
    const inRange = this.mappings.filter((m) => m.offset < offset + size && offset < m.offset + m.size);
    for (const m of inRange) {
      if (m.offset < offset || m.offset + m.size > offset + size) {
        invalidValue(call, 'the range must cover whole mappings');
      }
    }
    for (const m of inRange) {
      this.mappings.splice(this.mappings.indexOf(m), 1);
      m.memory.mappings--;
    }
    return inRange.map((m) => m.memory);
  }

  /** Unmaps everything (memAddressFree of a reservation still mapped); returns what was mapped. */
  unmapAll(): PhysicalMemory[] {
    const all = this.mappings.splice(0).map((m) => m.memory);
    for (const memory of all) memory.mappings--;
    return all;
  }

  /** Grants `flags` to `device` on the mappings of [offset, offset + size), which must be mapped whole. */
  setAccess(offset: number, size: number, device: number, flags: number, call: string): void {
    const covered = this.cover(offset, size, call);
    for (const m of covered) m.access.set(device, flags);
  }

  /** The bytes behind [offset, offset + length), checked for `device`'s access. */
  spans(offset: number, length: number, device: number, write: boolean, call: string): Span[] {
    const spans: Span[] = [];
    for (const m of this.cover(offset, length, call)) {
      const access = m.access.get(device) ?? 0;
      if ((access & (write ? 0x2 : 0x1)) === 0) {
        invalidValue(call, `the mapping is not accessible (${write ? 'read-write' : 'read'}) from device ${device}; call memSetAccess`);
      }
      const from = Math.max(offset, m.offset);
      const to = Math.min(offset + length, m.offset + m.size);
      spans.push({ store: m.memory.store, offset: from - m.offset, length: to - from });
    }
    return spans;
  }

  /** The mappings covering [offset, offset + length) with no hole. */
  private cover(offset: number, length: number, call: string): Mapping[] {
    const covered: Mapping[] = [];
    let at = offset;
    for (const m of this.mappings) {
      if (m.offset + m.size <= at) continue;
      if (at >= offset + length) break;
      if (m.offset > at) break;
      covered.push(m);
      at = m.offset + m.size;
    }
    if (length > 0 && at < offset + length) invalidValue(call, 'the range is not (entirely) mapped');
    return covered;
  }
}

/** The physical allocations of one backend, by handle. */
export class PhysicalTable {
  private readonly byHandle = new Map<number, PhysicalMemory>();

  /** Records a new physical allocation. */
  add(memory: PhysicalMemory): void {
    this.byHandle.set(memory.handle, memory);
  }

  /** The live (not released) allocation with this handle. */
  get(handle: number, call: string): PhysicalMemory {
    const memory = this.byHandle.get(handle);
    if (memory === undefined || memory.released) fail(CUresult.INVALID_VALUE, call, `unknown allocation handle ${handle}`);
    return memory;
  }

  /** Memory is gone (released and unmapped): its capacity back to `uncharge`, its shared file closed. */
  static gone(memory: PhysicalMemory, uncharge: (bytes: number) => void): void {
    if (!memory.imported) uncharge(memory.size);
    memory.shared?.release();
    memory.shared = undefined;
  }

  /** Marks released; returns true when it is unmapped and its capacity can go back now. */
  release(handle: number, call: string): PhysicalMemory | undefined {
    const memory = this.get(handle, call);
    memory.released = true;
    this.byHandle.delete(handle);
    return memory.mappings === 0 ? memory : undefined;
  }
}
