/**
 * DeviceArray.to: copies between devices queued on a stream of the destination, ordered after
 * the work queued on the source, the source's memory kept until the copy read it; with peer access
 * off, with it enabled between the contexts, and with a pool's peer access granted. Runs on the
 * emulated backend with two devices and on a machine with two GPUs (skipped with one).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { EmulatedBackend } from '../../src/backend/emulated/emulated-backend.js';
import { setBackend } from '../../src/backend/select.js';
import { HostAllocFlags, StreamWaitValueFlags } from '../../src/backend/backend.js';
import { Device } from '../../src/device.js';
import { UseAfterFreeError } from '../../src/errors.js';
import { DeviceArray } from '../../src/array/device-array.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import { Stream } from '../../src/stream.js';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { deviceMemoryUsed, onGpu } from '../helpers.js';

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
      assert.equal(s1.query(), false, "the copy waits for the held work on the source's stream");
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

  it(
    'gives the same bytes with peer access enabled between the contexts, and from a pool that granted access',
    { skip: peers ? false : 'needs two devices with peer access' },
    () => {
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
    },
  );

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

describe('peer copies of blocks from virtual-memory pools (VRAM_ALLOCATOR=pool and adaptive)', () => {
  // A mapping is reachable only from the devices cuMemSetAccess named, where cuMemAlloc's and CUDA's
  // pools' memory is copied by cuMemcpyPeer as it is: the copy grants what it needs.
  for (const extentSize of [undefined, 'adaptive'] as const) {
    it(
      `a block of PoolResource({ extentSize: ${String(extentSize)} }) copies to and from another device, on a stream of either or none, and later pages too`,
      needsTwo,
      () => {
        const [d0, d1] = [Device.get(0), Device.get(1)];
        const before = [deviceMemoryUsed(d0), deviceMemoryUsed(d1)];
        const pool0 = new PoolResource({ device: d0, extentSize });
        const pool1 = new PoolResource({ device: d1, extentSize });
        try {
          using s0 = Stream.create({ device: d0 });
          using s1 = Stream.create({ device: d1 });
          assert.equal(pool0.getAccess(d1), 'none');
          // Read on device 1's stream: device 1 reads pool 0's block.
          using a = DeviceArray.from(iota(5000, 1), { resource: pool0 });
          using b = a.to(d1, { stream: s1 });
          s1.synchronize();
          assert.deepEqual(b.toHost(), iota(5000, 1));
          assert.equal(pool0.getAccess(d1), 'read', 'a source is granted read access only');
          // Written on device 0's stream: device 0 writes pool 1's block.
          using src = DeviceBuffer.allocate(20000, { resource: pool0 });
          src.copyFromHost(iota(5000, 2));
          using c = DeviceBuffer.allocate(20000, { resource: pool1 });
          c.copyFrom(src, { stream: s0 });
          s0.synchronize();
          assert.deepEqual(c.copyToHost(new Float32Array(5000)), iota(5000, 2));
          assert.equal(pool1.getAccess(d0), 'readwrite');
          // A block on pages mapped after the grant (a pool grows by the page or by the chunk; 64 MiB
          // is past any chunk mapped so far), copied synchronously in the destination's context.
          using big = DeviceBuffer.allocate(64 << 20, { resource: pool0 });
          big.memset(7);
          using back = DeviceBuffer.allocate(64 << 20, { resource: pool1 });
          back.copyFrom(big);
          assert.deepEqual(back.copyToHost(new Uint8Array(16), { bytes: 16 }), new Uint8Array(16).fill(7));
          // The other way, device 0's context writing into pool 0 from pool 1: nothing to grant.
          big.memset(0);
          big.copyFrom(back);
          assert.deepEqual(big.copyToHost(new Uint8Array(16), { bytes: 16 }), new Uint8Array(16).fill(7));
        } finally {
          pool0.destroy();
          pool1.destroy();
        }
        // The grants went with the mappings: the pools gave everything back.
        if (!onGpu) assert.deepEqual([deviceMemoryUsed(d0), deviceMemoryUsed(d1)], before);
      },
    );
  }

  it('access granted by setAccess is kept; a copy only adds to it', needsTwo, () => {
    const [d0, d1] = [Device.get(0), Device.get(1)];
    using pool = new PoolResource({ device: d0 });
    pool.setAccess(d1, 'readwrite');
    using a = DeviceArray.from(iota(300), { resource: pool });
    using s1 = Stream.create({ device: d1 });
    using b = a.to(d1, { stream: s1 });
    s1.synchronize();
    assert.equal(pool.getAccess(d1), 'readwrite');
    assert.deepEqual(b.toHost(), iota(300));
  });
});
