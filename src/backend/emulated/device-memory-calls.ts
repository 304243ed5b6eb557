/**
 * The emulated driver's device and managed memory calls (cuMemAlloc, cuMemAllocPitch,
 * cuMemAllocManaged and friends), with the driver's alignment and capacity rules.
 */
import type { Handle, MemLocation, Ptr } from '../backend.js';
import { PlainAllocation } from './allocation.js';
import { checkSize, hex, invalidValue } from './fail.js';
import { eagerStore, HOST_ALIGNMENT } from './host-memory-calls.js';
import type { EmulatedState } from './state.js';
import { LazyStore } from './store.js';

/** Every cuMemAlloc address is a multiple of this (the driver gives at least 256). */
export const DEVICE_ALIGNMENT = 512;
/**
 * Capacity rule of cuMemAlloc: a request of at least `LARGE_ALLOCATION` bytes holds whole 2 MiB
 * pages (and its address is 2 MiB aligned); a smaller one holds its size rounded up to 512 bytes.
 */
export const LARGE_ALLOCATION = 1024 * 1024;
const LARGE_PAGE = 2 * 1024 * 1024;

/** Device, pitched and managed memory of one emulated driver. */
export class DeviceMemoryCalls {
  constructor(private readonly s: EmulatedState) {}

  /** cuMemAlloc: 512-byte aligned (2 MiB for >= 1 MiB); capacity per LARGE_ALLOCATION's rule. */
  memAlloc(bytes: number): Ptr {
    return this.allocDevice(bytes, 'cuMemAlloc');
  }

  /**
   * cuMemFree: synchronises, then frees device, managed or pool memory allocated at exactly `ptr`.
   * The null pointer is accepted and frees nothing, as on the driver.
   */
  memFree(ptr: Ptr): void {
    const call = 'cuMemFree';
    this.s.settle(call, 'context');
    if (ptr === 0) return;
    const block = this.s.poolBlocks.get(ptr);
    if (block !== undefined) {
      this.s.poolBlocks.delete(ptr);
      block.pool.free(block, undefined);
      return;
    }
    const index = this.s.managedRange.contains(ptr) ? this.s.managedIndex : this.s.deviceIndex;
    const a = index.find(ptr);
    if (a === undefined || a.base !== ptr || a.kind === 'pool') invalidValue(call, `${hex(ptr)} is not an allocation`);
    // Memory opened with cuIpcOpenMemHandle is closed with cuIpcCloseMemHandle, never freed here.
    if (a.kind === 'ipc') invalidValue(call, `${hex(ptr)} was opened with cuIpcOpenMemHandle: close it with cuIpcCloseMemHandle`);
    this.s.dropAllocation(index, a);
  }

  /** cuMemAllocPitch: pitch is the width rounded up to the 512-byte texture pitch alignment. */
  memAllocPitch(widthBytes: number, height: number, elementBytes: number): { ptr: Ptr; pitch: number } {
    const call = 'cuMemAllocPitch';
    checkSize(widthBytes, call, 'widthBytes');
    checkSize(height, call, 'height');
    if (elementBytes !== 4 && elementBytes !== 8 && elementBytes !== 16) invalidValue(call, `elementBytes must be 4, 8 or 16, got ${elementBytes}`);
    const pitch = Math.ceil(widthBytes / 512) * 512;
    return { ptr: this.allocDevice(pitch * height, call), pitch };
  }

  /** cuMemAllocManaged: host-backed at once (not charged against device capacity). */
  memAllocManaged(bytes: number, attachFlags: number): Ptr {
    const call = 'cuMemAllocManaged';
    checkSize(bytes, call);
    if (attachFlags !== 0x1 && attachFlags !== 0x2) invalidValue(call, `attach flags must be GLOBAL or HOST, got ${attachFlags}`);
    const ctx = this.s.ctx(call);
    this.s.unsafe(call);
    const store = eagerStore(bytes, call);
    const base = this.s.managedRange.take(bytes, HOST_ALIGNMENT, call);
    this.s.managedIndex.insert(new PlainAllocation('managed', base, bytes, ctx.device.ordinal, ctx.handle, store, 0, attachFlags));
    return base;
  }

  /** Validates a prefetch of managed memory and records it in stream order (no data moves). */
  memPrefetchAsync(ptr: Ptr, bytes: number, location: MemLocation, stream: Handle): void {
    const call = 'cuMemPrefetchAsync';
    this.checkManaged(ptr, bytes, call);
    this.location(location, call);
    const s = this.s.stream(stream, call);
    this.s.enqueue(s, undefined, undefined, undefined, call);
  }

  /** Validates advice on managed memory; the emulation has nothing to tune. */
  memAdvise(ptr: Ptr, bytes: number, advice: number, location: MemLocation): void {
    const call = 'cuMemAdvise';
    this.checkManaged(ptr, bytes, call);
    if (!Number.isInteger(advice) || advice < 1 || advice > 6) invalidValue(call, `unknown advice ${advice}`);
    this.location(location, call);
  }

  private allocDevice(bytes: number, call: string): Ptr {
    checkSize(bytes, call);
    const ctx = this.s.ctx(call);
    this.s.unsafe(call);
    const large = bytes >= LARGE_ALLOCATION;
    const charged = large ? Math.ceil(bytes / LARGE_PAGE) * LARGE_PAGE : Math.ceil(bytes / DEVICE_ALIGNMENT) * DEVICE_ALIGNMENT;
    ctx.device.charge(charged, call, bytes);
    const base = this.s.deviceRange.take(charged, large ? LARGE_PAGE : DEVICE_ALIGNMENT, call);
    this.s.deviceIndex.insert(new PlainAllocation('device', base, bytes, ctx.device.ordinal, ctx.handle, new LazyStore(bytes), charged, 0));
    return base;
  }

  private checkManaged(ptr: Ptr, bytes: number, call: string): void {
    checkSize(bytes, call);
    const a = this.s.managedIndex.find(ptr);
    if (a === undefined || ptr - a.base + bytes > a.size) invalidValue(call, `${hex(ptr)} + ${bytes} is not managed memory`);
  }

  private location(location: MemLocation, call: string): void {
    if (location !== 'host') this.s.device(location, call);
  }
}
