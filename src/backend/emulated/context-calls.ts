/**
 * The emulated driver's device and context calls: device attributes and peer access, primary and
 * created contexts, the calling thread's context stack, and the capacity-based memory figures.
 */
import type { DeviceInfo, Handle, MemInfo } from '../backend.js';
import { CUresult } from '../../errors.js';
import { fail, invalidValue } from './fail.js';
import type { EmulatedState } from './state.js';
import { StreamState } from './streams.js';

/** The emulated CUDA driver version (13.0). */
const DRIVER_VERSION = 13000;

/** Devices and contexts of one emulated driver. */
export class ContextCalls {
  constructor(private readonly s: EmulatedState) {}

  /** 13000: the emulation follows CUDA 13.0's driver API. */
  driverVersion(): number {
    return DRIVER_VERSION;
  }

  /** The number of emulated devices. */
  deviceCount(): number {
    return this.s.devices.length;
  }

  /** Emulated attributes (see DeviceState.info): capacity as total memory, CC 9.0. */
  deviceInfo(ordinal: number): DeviceInfo {
    return this.s.device(ordinal, 'cuDeviceGet').info();
  }

  /** True between distinct emulated devices (all share host memory). */
  deviceCanAccessPeer(ordinal: number, peerOrdinal: number): boolean {
    this.s.device(ordinal, 'cuDeviceCanAccessPeer');
    this.s.device(peerOrdinal, 'cuDeviceCanAccessPeer');
    return ordinal !== peerOrdinal;
  }

  /** cuDeviceGetAttribute. */
  deviceGetAttribute(ordinal: number, attribute: number): number {
    const call = 'cuDeviceGetAttribute';
    const value = this.s.device(ordinal, call).attribute(attribute);
    if (value === undefined) invalidValue(call, `unknown device attribute ${String(attribute)}`);
    return value;
  }

  /**
   * cuDeviceGetByPCIBusId: `[domain]:[bus]:[device].[function]`, `[domain]:[bus]:[device]` or
   * `[bus]:[device].[function]`, hexadecimal; CUDA_ERROR_INVALID_VALUE for another form,
   * CUDA_ERROR_INVALID_DEVICE when no device is there.
   */
  deviceGetByPciBusId(busId: string): number {
    const call = 'cuDeviceGetByPCIBusId';
    const wanted = parseBusId(busId);
    if (wanted === undefined) invalidValue(call, `'${String(busId)}' is not a PCI bus id`);
    for (const device of this.s.devices) {
      const here = parseBusId(device.info().pciBusId)!;
      if (here.every((part, i) => part === wanted[i])) return device.ordinal;
    }
    fail(CUresult.INVALID_DEVICE, call, `no device at PCI bus id ${busId}`);
  }

  /**
   * Retains the device's primary context; the handle stays the same for the device's lifetime,
   * also when it is retained again after its last release destroyed it (as the driver does).
   */
  primaryContextRetain(ordinal: number): Handle {
    const device = this.s.device(ordinal, 'cuDevicePrimaryCtxRetain');
    device.primary ??= this.s.newContext(device, 0, true).handle;
    const ctx = this.s.contexts.get(device.primary)!;
    if (ctx.destroyed) {
      ctx.destroyed = false;
      ctx.legacy = new StreamState(0, 0, 0, ctx.handle, true);
      this.s.scheduler.add(ctx.legacy);
    }
    device.primaryRetains++;
    return device.primary;
  }

  /**
   * Releases one retain of the primary context (CUDA_ERROR_INVALID_CONTEXT when none is held).
   * The last release destroys it, as cuDevicePrimaryCtxRelease does: its work completes, its memory
   * and streams go, and calls in it fail with CUDA_ERROR_CONTEXT_IS_DESTROYED until it is retained.
   */
  primaryContextRelease(ordinal: number): void {
    const device = this.s.device(ordinal, 'cuDevicePrimaryCtxRelease');
    if (device.primaryRetains === 0) fail(CUresult.INVALID_CONTEXT, 'cuDevicePrimaryCtxRelease', 'the primary context is not retained');
    // The last release waits for the context's work, as a destroy does.
    if (device.primaryRetains === 1 && device.primary !== undefined) this.s.checkContextNotHeld('cuDevicePrimaryCtxRelease', device.primary);
    device.primaryRetains--;
    if (device.primaryRetains === 0 && device.primary !== undefined) {
      const ctx = this.s.contexts.get(device.primary)!;
      this.s.dropContextResources(ctx);
      ctx.destroyed = true;
    }
  }

  /** Creates a new context on the device and makes it current, as cuCtxCreate does. */
  contextCreate(ordinal: number, flags: number): Handle {
    const device = this.s.device(ordinal, 'cuCtxCreate');
    if (!Number.isInteger(flags) || (flags & ~0x1f) !== 0) invalidValue('cuCtxCreate', `unknown context flags ${flags}`);
    const ctx = this.s.newContext(device, flags, false);
    this.s.stack.push(ctx.handle);
    return ctx.handle;
  }

  /**
   * Destroys a created context: its work completes and its memory is freed. Work held by a wait
   * value fails it with CUDA_ERROR_NOT_READY (the driver waits for that work: forever).
   */
  contextDestroy(ctx: Handle): void {
    const context = this.s.contexts.get(ctx);
    if (context === undefined || context.primary) {
      fail(CUresult.INVALID_CONTEXT, 'cuCtxDestroy', context === undefined ? `unknown context ${ctx}` : 'primary contexts are released, not destroyed');
    }
    this.s.checkContextNotHeld('cuCtxDestroy', ctx);
    this.s.dropContextResources(context);
    this.s.contexts.delete(ctx);
    // The driver pops a destroyed context that is current: the one below it (if any) is current again.
    for (let i = this.s.stack.length - 1; i >= 0; i--) if (this.s.stack[i] === ctx) this.s.stack.splice(i, 1);
  }

  /** Makes `ctx` current, replacing the top of the context stack (0: pops it). */
  contextSetCurrent(ctx: Handle): void {
    if (ctx !== 0 && !this.s.contexts.has(ctx)) fail(CUresult.INVALID_CONTEXT, 'cuCtxSetCurrent', `unknown context ${ctx}`);
    if (ctx === 0) this.s.stack.pop();
    else if (this.s.stack.length === 0) this.s.stack.push(ctx);
    else this.s.stack[this.s.stack.length - 1] = ctx;
  }

  /** cuCtxPushCurrent: `ctx` on top of the stack. */
  contextPushCurrent(ctx: Handle): void {
    const context = this.s.contexts.get(ctx);
    if (context === undefined) fail(CUresult.INVALID_CONTEXT, 'cuCtxPushCurrent', `unknown context ${ctx}`);
    this.s.stack.push(ctx);
  }

  /** cuCtxPopCurrent: CUDA_ERROR_INVALID_CONTEXT when the stack is empty. */
  contextPopCurrent(): Handle {
    const ctx = this.s.stack.pop();
    if (ctx === undefined) fail(CUresult.INVALID_CONTEXT, 'cuCtxPopCurrent', 'no context is current');
    return ctx;
  }

  /** cuCtxGetDevice and cuCtxGetFlags of `ctx`. */
  contextInfo(ctx: Handle): { readonly ordinal: number; readonly flags: number } {
    const context = this.s.contexts.get(ctx);
    if (context === undefined) fail(CUresult.INVALID_CONTEXT, 'cuCtxGetDevice', `unknown context ${ctx}`);
    return { ordinal: context.device.ordinal, flags: context.flags };
  }

  /** cuCtxSetCacheConfig: a CUfunc_cache value (0 to 3) for the current context. */
  contextSetCacheConfig(config: number): void {
    const call = 'cuCtxSetCacheConfig';
    const ctx = this.s.ctx(call);
    ctx.cacheConfig = checkCacheConfig(config, call);
  }

  /** cuCtxGetCacheConfig. */
  contextGetCacheConfig(): number {
    return this.s.ctx('cuCtxGetCacheConfig').cacheConfig;
  }

  /** The current context, 0 when none is. */
  contextGetCurrent(): Handle {
    return this.s.currentHandle();
  }

  /**
   * Runs all queued work, then releases pool memory above each pool's release threshold; work of
   * the context held by a wait value fails it with CUDA_ERROR_NOT_READY (a GPU would never return).
   */
  contextSynchronize(): void {
    this.s.ctx('cuCtxSynchronize');
    this.s.settle('cuCtxSynchronize', 'context');
    this.s.releasePools();
  }

  /** Enables access from the current context to `peerCtx`'s memory. */
  contextEnablePeerAccess(peerCtx: Handle): void {
    const call = 'cuCtxEnablePeerAccess';
    const ctx = this.s.ctx(call);
    const peer = this.s.context(peerCtx, call);
    if (peer.device === ctx.device) fail(CUresult.INVALID_DEVICE, call, 'a context cannot be its own peer');
    if (ctx.peers.has(peerCtx)) fail(CUresult.PEER_ACCESS_ALREADY_ENABLED, call);
    ctx.peers.add(peerCtx);
  }

  /** Disables access from the current context to `peerCtx`'s memory. */
  contextDisablePeerAccess(peerCtx: Handle): void {
    const call = 'cuCtxDisablePeerAccess';
    const ctx = this.s.ctx(call);
    this.s.context(peerCtx, call);
    if (!ctx.peers.delete(peerCtx)) fail(CUresult.PEER_ACCESS_NOT_ENABLED, call);
  }

  /** Capacity-based free and total memory of the current context's device. */
  memGetInfo(): MemInfo {
    const device = this.s.ctx('cuMemGetInfo').device;
    return { free: device.capacity - device.used, total: device.capacity };
  }

  /** Bytes of device capacity in use on `ordinal` (for tests and `vram info`). */
  capacityUsed(ordinal = 0): number {
    return this.s.device(ordinal, 'capacityUsed').used;
  }
}

/** A CUfunc_cache value, checked as the driver does (CUDA_ERROR_INVALID_VALUE outside 0 to 3). */
export function checkCacheConfig(config: number, call: string): number {
  if (!Number.isInteger(config) || config < 0 || config > 3) invalidValue(call, `unknown cache configuration ${String(config)}`);
  return config;
}

/** The numbers of a PCI bus id ([domain, bus, device, function]), or undefined for another form. */
function parseBusId(busId: string): number[] | undefined {
  if (typeof busId !== 'string') return undefined;
  const full = /^([0-9a-f]{1,8}):([0-9a-f]{1,2}):([0-9a-f]{1,2})(?:\.([0-7]))?$/i.exec(busId);
  if (full !== null) return [full[1], full[2], full[3], full[4] ?? '0'].map((part) => parseInt(part!, 16));
  const short = /^([0-9a-f]{1,2}):([0-9a-f]{1,2})\.([0-7])$/i.exec(busId);
  if (short !== null) return [0, ...[short[1], short[2], short[3]].map((part) => parseInt(part!, 16))];
  return undefined;
}
