/**
 * What the emulated address space records for each allocation: its kind, device, context, bytes
 * and the capacity it holds. One shape for every kind, so copies and pointer attributes resolve
 * any address the same way.
 */
import type { Interval } from './address-space.js';
import type { Store } from './store.js';

/** The kinds of memory the emulated driver hands out. */
/** ('ipc': another process's device memory mapped with cuIpcOpenMemHandle, see ipc-calls.ts.) */
export type AllocationKind = 'device' | 'managed' | 'pinned' | 'registered' | 'pool' | 'reservation' | 'ipc';

/** A live (or freed) allocation in the emulated address space. */
export interface Allocation extends Interval {
  readonly kind: AllocationKind;
  /** Device ordinal the memory belongs to (the current context's device for host memory). */
  readonly device: number;
  /** Handle of the context it was allocated in. */
  readonly context: number;
  /** Its bytes; undefined for virtual reservations, whose bytes live in mapped physical memory. */
  readonly store: Store | undefined;
  /** Bytes of device capacity it holds (0 for host memory and reservations). */
  readonly charged: number;
  /** cuMemHostAlloc / cuMemHostRegister / cuMemAllocManaged flags. */
  readonly flags: number;
}

/** A plain allocation: device, pitched, managed, pinned or registered memory. */
export class PlainAllocation implements Allocation {
  live = true;
  constructor(
    readonly kind: AllocationKind,
    readonly base: number,
    readonly size: number,
    readonly device: number,
    readonly context: number,
    readonly store: Store,
    readonly charged: number,
    readonly flags: number,
  ) {}
}
