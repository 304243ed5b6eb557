/** Devices, contexts and peer access, on whichever backend VRAM_BACKEND selects. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { deviceMemoryUsed, onGpu } from '../helpers.js';
import { Context, Device } from '../../src/device.js';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import { UseAfterFreeError, VramStateError } from '../../src/errors.js';
import { getBackend } from '../../src/backend/select.js';

test('Device.count and Device.get', () => {
  assert.ok(Device.count() >= 1);
  const d = Device.get();
  assert.equal(d, Device.get(0));
  assert.equal(d.ordinal, 0);
  assert.equal(d.backend, getBackend());
  assert.equal(Device.resolve(undefined), d);
  assert.equal(Device.resolve(0), d);
  assert.throws(() => Device.get(Device.count()), RangeError);
  assert.throws(() => Device.get(-1), RangeError);
  assert.throws(() => Device.get(0.5), RangeError);
  assert.throws(() => Device.get('0' as unknown as number), TypeError);
  assert.throws(() => Device.resolve({} as unknown as number), TypeError);
});

test('device info and memory info', () => {
  const d = Device.get(0);
  const info = d.info;
  assert.equal(info.ordinal, 0);
  assert.equal(typeof info.name, 'string');
  assert.ok(info.totalMemory > 0);
  const mem = d.memInfo();
  assert.ok(mem.free > 0 && mem.free <= mem.total);
  assert.equal(mem.total, info.totalMemory);
  assert.ok(d.context !== 0);
  assert.equal(d.activeContext, d.context);
  d.makeCurrent();
  assert.equal(getBackend().contextGetCurrent(), d.context);
  d.synchronize();
  assert.match(d.toString(), /^Device\(0: /);
});

test('peer access: a device is not its own peer; bad arguments are typed', () => {
  const d = Device.get(0);
  assert.equal(d.canAccessPeer(d), false);
  assert.throws(() => d.enablePeerAccess(d), RangeError);
  assert.throws(() => d.disablePeerAccess(d), RangeError);
  assert.throws(() => d.canAccessPeer(0 as unknown as Device), TypeError);
});

test('peer access between two devices is idempotent', { skip: Device.count() < 2 ? 'needs two devices' : false }, () => {
  const a = Device.get(0);
  const b = Device.get(1);
  if (!a.canAccessPeer(b)) {
    assert.throws(() => a.enablePeerAccess(b), VramStateError);
    return;
  }
  a.enablePeerAccess(b);
  a.enablePeerAccess(b);
  a.disablePeerAccess(b);
  a.disablePeerAccess(b);
});

test('explicit context: create, select, allocate in it, destroy', () => {
  const d = Device.get(0);
  // Used memory less the current resource's cache (a caching pool keeps what buf.free() returns).
  const before = deviceMemoryUsed(d);
  const ctx = Context.create(d, { schedule: 'blocking-sync' });
  try {
    assert.notEqual(ctx.handle, 0);
    assert.equal(ctx.isPrimary, false);
    assert.equal(ctx.device, d);
    assert.equal(d.activeContext, ctx.handle);
    assert.equal(getBackend().contextGetCurrent(), ctx.handle);
    const buf = DeviceBuffer.allocate(1024);
    buf.copyFromHost(new Uint8Array(1024).fill(7));
    assert.deepEqual(buf.copyToHost(new Uint8Array(4), { bytes: 4 }), new Uint8Array([7, 7, 7, 7]));
    buf.free();
    Context.primary(d).makeCurrent();
    assert.equal(d.activeContext, d.context);
    ctx.makeCurrent();
    assert.equal(d.activeContext, ctx.handle);
  } finally {
    ctx.destroy();
  }
  assert.equal(d.activeContext, d.context);
  assert.equal(ctx.destroyed, true);
  assert.throws(() => ctx.handle, UseAfterFreeError);
  assert.throws(() => ctx.makeCurrent(), UseAfterFreeError);
  assert.throws(() => ctx.destroy(), UseAfterFreeError);
  ctx[Symbol.dispose]();
  d.makeCurrent();
  if (!onGpu) assert.equal(deviceMemoryUsed(d), before);
});

for (const extentSize of [undefined, 'adaptive'] as const) {
  test(`a PoolResource({ extentSize: ${String(extentSize)} }) made in an explicit context outlives it: its range is the device's`, () => {
    // The device's default resource is made by the first allocation that needs it, in whatever
    // context is current then (VRAM_ALLOCATOR=pool or adaptive makes it a PoolResource).
    const d = Device.get(0);
    const before = deviceMemoryUsed(d);
    const ctx = Context.create(d);
    const pool = new PoolResource({ device: d, extentSize });
    let buf: DeviceBuffer;
    try {
      buf = DeviceBuffer.allocate(4096, { resource: pool });
      buf.copyFromHost(new Uint8Array(4096).fill(5));
    } finally {
      ctx.destroy();
    }
    try {
      assert.deepEqual(buf.copyToHost(new Uint8Array(4), { bytes: 4 }), new Uint8Array(4).fill(5));
      const more = DeviceBuffer.allocate(8 << 20, { resource: pool });
      more.copyFrom(buf, { bytes: 4096 });
      assert.deepEqual(more.copyToHost(new Uint8Array(4), { bytes: 4 }), new Uint8Array(4).fill(5));
      more.free();
      buf.free();
      assert.ok(pool.releaseCached() > 0, 'its cached pages go back');
    } finally {
      pool.destroy();
    }
    if (!onGpu) assert.equal(deviceMemoryUsed(d), before);
  });
}

test('explicit context: using-declaration destroys it; primary cannot be destroyed', () => {
  const d = Device.get(0);
  let handle = 0;
  {
    using ctx = Context.create(d, { mapHost: true });
    handle = ctx.handle;
    assert.notEqual(handle, 0);
  }
  assert.equal(d.activeContext, d.context);
  const primary = Context.primary(d);
  assert.equal(primary.handle, d.context);
  assert.throws(() => primary.destroy(), VramStateError);
  primary[Symbol.dispose]();
  assert.throws(() => Context.create(d, { schedule: 'fast' as 'auto' }), RangeError);
  assert.throws(() => Context.create(0 as unknown as Device), TypeError);
});
