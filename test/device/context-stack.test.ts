/**
 * PyCUDA's contexts and devices on both backends: the context stack (push, pop, current, `using`),
 * make_default_context's rule, context flags and cache configuration, contexts adopted from a
 * handle, devices by PCI bus id and every CUdevice_attribute by name.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ContextFlags } from '../../src/backend/backend.js';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { DEVICE_ATTRIBUTES, type DeviceAttributeName } from '../../src/cuda/device-attributes.js';
import { Context, Device } from '../../src/device.js';
import { CudaError, UseAfterFreeError, VramStateError } from '../../src/errors.js';
import { Module } from '../../src/kernels/module.js';
import { AXPB, AXPB_SOURCE, axpb } from '../../bench/axpb.js';
import { gpuOnly, onGpu } from '../helpers.js';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const device = Device.get(0);

test('push selects a context until it is popped; using pops what it pushed; Context.current follows', () => {
  device.makeCurrent();
  const primary = Context.current;
  assert.ok(primary !== undefined && primary.isPrimary, 'the primary context is current after makeCurrent');
  const ctx = Context.create(device);
  Context.primary(device).makeCurrent();
  try {
    {
      using pushed = ctx.push();
      assert.equal(pushed.context, ctx);
      assert.equal(Context.current, ctx);
      assert.equal(device.activeContext, ctx.handle, 'vram uses the pushed context for its device');
      // A vram call on the device (it makes the selected context current) keeps the stack as pushed.
      using buf = DeviceBuffer.allocate(4096);
      assert.ok(buf.ptr > 0);
      assert.equal(Context.current, ctx);
    }
    assert.equal(device.activeContext, device.context, 'after the scope the device is back on its primary context');
    assert.equal(Context.current?.handle, device.context);
    // PyCUDA's spelling: ctx.push() ... Context.pop().
    ctx.push();
    assert.equal(Context.pop(), ctx);
    assert.throws(() => Context.pop(), VramStateError, 'nothing pushed is left');
  } finally {
    ctx.destroy();
  }
});

test('pushed contexts pop in reverse order only', () => {
  const a = Context.create(device);
  const b = Context.create(device);
  try {
    const pa = a.push();
    const pb = b.push();
    assert.throws(() => pa.pop(), VramStateError, 'a is not the last pushed');
    pb.pop();
    assert.throws(() => pb.pop(), VramStateError, 'already popped');
    assert.equal(Context.current, a);
    pa.pop();
    assert.equal(pa.popped, true);
  } finally {
    a.destroy();
    b.destroy();
  }
  assert.throws(() => a.push(), UseAfterFreeError);
});

test('Context.makeDefault makes a context on the first device that accepts one; options are checked first', () => {
  using ctx = Context.makeDefault({ schedule: 'blocking-sync' });
  assert.equal(ctx.device.ordinal, 0);
  assert.equal(ctx.flags & ContextFlags.SCHED_BLOCKING_SYNC, ContextFlags.SCHED_BLOCKING_SYNC);
  assert.throws(() => Context.makeDefault({ schedule: 'fast' as 'auto' }), RangeError);
  assert.throws(() => Context.makeDefault({ bogus: 1 } as never), TypeError);
});

test('lmemResizeToMax sets CU_CTX_LMEM_RESIZE_TO_MAX; the driver reports the flags of an adopted context', () => {
  using ctx = Context.create(device, { lmemResizeToMax: true, mapHost: true });
  assert.equal(ctx.flags & ContextFlags.LMEM_RESIZE_TO_MAX, ContextFlags.LMEM_RESIZE_TO_MAX);
  const adopted = Context.fromHandle(ctx.handle);
  assert.equal(adopted.flags & (ContextFlags.LMEM_RESIZE_TO_MAX | ContextFlags.MAP_HOST), ContextFlags.LMEM_RESIZE_TO_MAX | ContextFlags.MAP_HOST);
  assert.throws(() => Context.create(device, { lmemResizeToMax: 1 as unknown as boolean }), TypeError);
});

test("cache configuration: a context's is set and read back; a kernel's is accepted; other values are RangeErrors", () => {
  using ctx = Context.create(device);
  assert.equal(ctx.cacheConfig, 'prefer-none');
  ctx.setCacheConfig('prefer-l1');
  // Devices with a fixed split may answer their own; the emulation keeps what was set.
  if (!onGpu) assert.equal(ctx.cacheConfig, 'prefer-l1');
  assert.throws(() => ctx.setCacheConfig('prefer-l2' as 'prefer-l1'), RangeError);
  Context.primary(device).makeCurrent();
  const m = Module.compile(AXPB_SOURCE, { emulated: { axpb } });
  try {
    const kernel = m.kernel('axpb', AXPB);
    for (const config of ['prefer-shared', 'prefer-equal', 'prefer-l1', 'prefer-none'] as const) kernel.setCacheConfig(config);
    assert.throws(() => kernel.setCacheConfig('none' as 'prefer-none'), RangeError);
  } finally {
    m.destroy();
  }
});

test('Context.fromHandle adopts a context made elsewhere, borrowed: usable, never destroyed by vram', () => {
  const owner = Context.create(device);
  try {
    const borrowed = Context.fromHandle(owner.handle);
    assert.equal(borrowed.borrowed, true);
    assert.equal(borrowed.isPrimary, false);
    assert.equal(borrowed.device, device);
    assert.match(String(borrowed), /borrowed/);
    borrowed.makeCurrent();
    assert.equal(device.activeContext, owner.handle);
    using buf = DeviceBuffer.allocate(1024);
    assert.ok(buf.ptr > 0);
    {
      using _borrowed = borrowed;
      using _pushed = borrowed.push();
    }
    assert.throws(() => borrowed.destroy(), VramStateError);
    assert.equal(borrowed.destroyed, false);
    assert.equal(Context.fromHandle(device.context).isPrimary, true);
  } finally {
    Context.primary(device).makeCurrent();
    owner.destroy();
  }
  assert.throws(() => Context.fromHandle(0), TypeError);
  assert.throws(() => Context.fromHandle(-5), TypeError);
  // The real driver reads through a made-up handle and crashes the process (SIGSEGV, CUDA 13): only
  // the emulated driver can be asked about one.
  if (!onGpu) assert.throws(() => Context.fromHandle(0x7777_7777), CudaError, 'a handle the driver does not know');
});

test("Device.fromPciBusId finds a device by the bus id it reports, in each of the driver's forms", () => {
  const busId = device.info.pciBusId;
  assert.equal(Device.fromPciBusId(busId), device);
  assert.equal(Device.fromPciBusId(busId.toUpperCase()), device);
  assert.equal(Device.fromPciBusId(busId.replace(/\.0$/, '')), device, '[domain]:[bus]:[device]');
  assert.equal(Device.fromPciBusId(busId.replace(/^[0-9a-f]+:/i, '')), device, '[bus]:[device].[function]');
  assert.throws(() => Device.fromPciBusId('not a bus'), RangeError);
  assert.throws(() => Device.fromPciBusId(3 as unknown as string), TypeError);
  assert.throws(() => Device.fromPciBusId('00ff:fe:1f.7'), CudaError, 'no device there');
});

test('device.attribute reads every CUdevice_attribute by name and agrees with DeviceInfo', () => {
  const info = device.info;
  assert.equal(device.attribute('multiprocessorCount'), info.multiprocessorCount);
  assert.equal(device.attribute('computeCapabilityMajor'), info.computeCapability[0]);
  assert.equal(device.attribute('l2CacheSize'), info.l2CacheSize);
  assert.equal(device.attribute('memoryPoolsSupported'), info.memoryPoolsSupported ? 1 : 0);
  assert.equal(device.attribute('warpSize'), 32);
  assert.equal(DEVICE_ATTRIBUTES.hostNumaId, 134);
  assert.equal(Object.keys(DEVICE_ATTRIBUTES).length, 147, 'CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK (1) to ONLY_PARTIAL_HOST_NATIVE_ATOMIC_SUPPORTED (147)');
  const driver = device.backend.driverVersion();
  for (const name of Object.keys(DEVICE_ATTRIBUTES) as DeviceAttributeName[]) {
    try {
      assert.equal(typeof device.attribute(name), 'number', name);
    } catch (error) {
      // A driver older than the attribute refuses it; the emulation knows every one.
      assert.ok(onGpu && error instanceof CudaError && error.errorName === 'CUDA_ERROR_INVALID_VALUE', `${name} on driver ${driver}: ${String(error)}`);
    }
  }
  assert.throws(() => device.attribute('clockRateGHz' as DeviceAttributeName), RangeError);
  assert.throws(() => device.attribute(7 as unknown as DeviceAttributeName), TypeError);
});

test('on a GPU, the host NUMA id attribute is a node or -1', gpuOnly, () => {
  const id = device.attribute('hostNumaId');
  assert.ok(Number.isInteger(id) && id >= -1, `hostNumaId ${id}`);
});

test('examples/contexts.ts runs and prints what it checked', () => {
  const compiled = fileURLToPath(new URL('../../examples/contexts.js', import.meta.url));
  const output = execFileSync(process.execPath, [compiled], { encoding: 'utf8', env: process.env });
  assert.equal(
    output,
    [
      'pushed: current is ctx true, 1048576 bytes allocated in it',
      'popped: current is the primary true',
      'adopted: device 0, borrowed true',
      'current pool set: true',
      '',
    ].join('\n'),
  );
});
