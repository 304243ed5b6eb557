/**
 * Foreign memory in the memory table (issue 37, row 11; Accelerate's `LRU.insertUnmanaged` and its
 * dirty-host-data note): a foreign device pointer tied to a host array. vram's writes mark the
 * device side, host writes through `host({ write: true })` the host side; a copy happens only when
 * the side read is stale; nothing is freed or spilled; memoryStats counts it.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DeviceArray } from '../../src/array/device-array.js';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { ForeignMirror } from '../../src/buffer/foreign-mirror.js';
import { ForeignDeviceBuffer } from '../../src/buffer/foreign-device-buffer.js';
import { Device } from '../../src/device.js';
import { VramStateError } from '../../src/errors.js';
import { elementwise, sum } from '../../src/kernels/ops/index.js';
import { memoryStats } from '../../src/observe/memory-stats.js';

const device = Device.get(0);
const backend = device.backend;

/** Device memory a foreign library allocated (and frees itself). */
function foreign(n: number): { ptr: number; buffer: ForeignDeviceBuffer; released: () => boolean } {
  device.makeCurrent();
  const ptr = backend.memAlloc(n * 4);
  let released = false;
  const buffer = DeviceBuffer.fromPointer(ptr, n * 4, {
    onRelease: () => {
      released = true;
    },
  });
  return { ptr, buffer, released: () => released };
}

test('host writes are copied to the device only before vram reads it; vram writes come back only when the host reads', () => {
  const { ptr, buffer } = foreign(256);
  const host = new Float32Array(256);
  const before = memoryStats(device).foreign;
  using mirror = ForeignMirror.tie(buffer, host, 'host');
  assert.equal(memoryStats(device).foreign.mirrors, before.mirrors + 1);
  assert.equal(memoryStats(device).foreign.bytes, before.bytes + 1024);
  (mirror.host({ write: true }) as Float32Array).fill(2); // the host side is current
  assert.equal(mirror.current, 'host');
  const x = DeviceArray.fromBuffer(mirror.buffer, { dtype: 'float32' });
  assert.equal(sum(x), 512, 'the device side was brought up to date before the reduction read it');
  assert.equal(mirror.current, 'both');
  const copied = memoryStats(device).foreign.copiesToDevice;
  assert.equal(copied, before.copiesToDevice + 1);
  assert.equal(sum(x), 512);
  assert.equal(memoryStats(device).foreign.copiesToDevice, copied, 'nothing stale: no second copy');
  elementwise('x = x * 3', { x }); // a vram kernel writes it: the device side is current
  assert.equal(mirror.current, 'device');
  assert.equal(host[0], 2, 'the host array is stale until read through the mirror');
  assert.equal((mirror.host() as Float32Array)[0], 6);
  assert.equal(memoryStats(device).foreign.copiesToHost, before.copiesToHost + 1);
  assert.equal((mirror.host() as Float32Array)[255], 6);
  assert.equal(memoryStats(device).foreign.copiesToHost, before.copiesToHost + 1, 'in step: no second copy');
  mirror.destroy();
  assert.equal(memoryStats(device).foreign.mirrors, before.mirrors);
  buffer.free();
  backend.memFree(ptr);
});

test('vram never frees what it does not own: destroying the mirror frees neither side', () => {
  const { ptr, buffer, released } = foreign(16);
  const host = new Uint8Array(64);
  const mirror = ForeignMirror.tie(buffer, host);
  mirror.destroy();
  assert.equal(released(), false);
  assert.equal(buffer.freed, false);
  assert.throws(() => mirror.host(), VramStateError);
  buffer.free(); // the owner's onRelease, called by the owner's free
  assert.equal(released(), true);
  backend.memFree(ptr);
});

test('refusals: sizes, kinds, a buffer tied twice', () => {
  const { ptr, buffer } = foreign(16);
  assert.throws(() => ForeignMirror.tie(buffer, new Uint8Array(63)), RangeError);
  assert.throws(() => ForeignMirror.tie(buffer, [1, 2] as never), TypeError);
  using own = DeviceBuffer.allocate(64);
  assert.throws(() => ForeignMirror.tie(own as never, new Uint8Array(64)), TypeError);
  using mirror = ForeignMirror.tie(buffer, new Uint8Array(64));
  assert.throws(() => ForeignMirror.tie(buffer, new Uint8Array(64)), VramStateError);
  assert.throws(() => mirror.host({ write: 1 } as never), TypeError);
  mirror.destroy();
  buffer.free();
  backend.memFree(ptr);
});
