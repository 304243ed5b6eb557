/**
 * DeviceArray.to: copies between devices queued on a stream of the destination, ordered after
 * the work queued on the source, the source's memory kept until the copy read it; with peer access
 * off, with it enabled between the contexts, and with a pool's peer access granted. Runs on the
 * emulated backend with two devices and on a machine with two GPUs (skipped with one).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { EmulatedBackend } from '../src/backend/emulated.js';
import { setBackend } from '../src/backend/select.js';
import { HostAllocFlags, StreamWaitValueFlags } from '../src/backend/backend.js';
import { Device } from '../src/device.js';
import { UseAfterFreeError } from '../src/errors.js';
import { DeviceArray } from '../src/array/device-array.js';
import { PoolResource } from '../src/resource/suballoc/pool.js';
import { Stream } from '../src/stream.js';
import { onGpu } from './helpers.js';

if (!onGpu) setBackend(new EmulatedBackend({ deviceCount: 2, capacityBytes: 1 << 30 }));

const twoDevices = Device.count() >= 2;
const needsTwo = { skip: twoDevices ? false : 'needs two devices (the nvidia-h100-x2 kind)' } as const;
const peers = twoDevices && Device.get(1).canAccessPeer(Device.get(0));

function iota(n: number, from = 0): Float32Array {
  return Float32Array.from({ length: n }, (_, i) => from + i);
}

describe('DeviceArray.to', () => {
  it('copies to another device on a stream of it, after the work queued on the source, and returns at once', needsTwo, async () => {
    const [d0, d1] = [Device.get(0), Device.get(1)];
    using s0 = Stream.create({ device: d0, nonBlocking: true });
    using s1 = Stream.create({ device: d1, nonBlocking: true });
    const n = 1 << 20;
    const a = DeviceArray.from(iota(n), { device: d0, stream: s0 });
    using later = DeviceArray.from(iota(n, 7), { device: d0 });
    // The source's stream is held on a flag in mapped host memory, with a write queued behind the
    // hold (a device copy is queued before copyFromAsync's first await): the copy must come after it.
    const backend = d0.backend;
    d0.makeCurrent();
    const flagHost = backend.memHostAlloc(4096, HostAllocFlags.DEVICEMAP | HostAllocFlags.PORTABLE);
    const flag = new Uint32Array(backend.hostView(flagHost, 4096), 0, 1);
    let written: Promise<void> | undefined;
    let b: DeviceArray<'float32'>;
    try {
      backend.streamWaitValue32(s0.handle, backend.memHostGetDevicePointer(flagHost), 1, StreamWaitValueFlags.GEQ);
      written = a.copyFromAsync(later, { stream: s0 });
      b = a.to(d1, { stream: s1 });
      assert.equal(b.device, d1);
      assert.equal(b.stream, s1);
      assert.deepEqual(b.shape, a.shape);
      assert.equal(s1.query(), false, 'the copy waits for the held work on the source\'s stream');
      // Freed before the copy has run: the memory waits for it (no reuse until s1 passes the copy).
      a.free();
    } finally {
      Atomics.store(flag, 0, 1);
    }
    s1.synchronize();
    s0.synchronize();
    d0.makeCurrent();
    backend.memFreeHost(flagHost);
    assert.deepEqual(b.toHost(), iota(n, 7));
    b.free();
    await written;
  });

  it('gives the same bytes with peer access enabled between the contexts, and from a pool that granted access', { skip: peers ? false : 'needs two devices with peer access' }, () => {
    const [d0, d1] = [Device.get(0), Device.get(1)];
    using s1 = Stream.create({ device: d1 });
    d1.enablePeerAccess(d0);
    try {
      using a = DeviceArray.from(iota(4096, 3), { device: d0 });
      using b = a.to(d1, { stream: s1 });
      s1.synchronize();
      assert.deepEqual(b.toHost(), iota(4096, 3));
    } finally {
      d1.disablePeerAccess(d0);
    }
    using pool = new PoolResource({ device: d0 });
    pool.setAccess(d1, 'read');
    using a = DeviceArray.from(iota(5000, 11), { resource: pool });
    using b = a.to(d1, { stream: s1 });
    s1.synchronize();
    assert.deepEqual(b.toHost(), iota(5000, 11));
  });

  it('packs a strided view into a contiguous array on the other device', needsTwo, () => {
    const [d0, d1] = [Device.get(0), Device.get(1)];
    using s1 = Stream.create({ device: d1 });
    using a = DeviceArray.from(iota(64 * 32), { device: d0 }).reshape([64, 32]);
    const view = a.slice([0, 64, 2], [1, 32, 3]);
    using b = view.to(d1, { stream: s1 });
    s1.synchronize();
    assert.deepEqual(b.shape, view.shape);
    assert.deepEqual(b.toHost(), view.toHost());
  });

  it('on the same device it is a copy on the stream', () => {
    const d0 = Device.get(0);
    using s0 = Stream.create({ device: d0 });
    using a = DeviceArray.from(iota(100), { device: d0 });
    using b = a.to(d0, { stream: s0 });
    s0.synchronize();
    assert.notEqual(b.buffer.ptr, a.buffer.ptr);
    assert.deepEqual(b.toHost(), iota(100));
  });

  it('refuses a stream or resource of another device, and a freed array, allocating nothing', needsTwo, () => {
    const [d0, d1] = [Device.get(0), Device.get(1)];
    using s0 = Stream.create({ device: d0 });
    using a = DeviceArray.from(iota(16), { device: d0 });
    assert.throws(() => a.to(d1, { stream: s0 }), RangeError);
    using pool0 = new PoolResource({ device: d0 });
    assert.throws(() => a.to(d1, { resource: pool0 }), RangeError);
    assert.throws(() => a.to(d1, { strem: s0 } as object), TypeError);
    const freed = DeviceArray.from(iota(16), { device: d0 });
    freed.free();
    assert.throws(() => freed.to(d1), UseAfterFreeError);
  });
});
