/**
 * Stream-ordered pools in host memory on a NUMA node (issue 37, row 1): `AsyncResource({ pool: {
 * location: { type: 'host-numa', id } } })`, the node from the device when omitted, zero-copy host
 * views (HostBuffer, HostArray), the pool's figures, trim and release threshold, and the refusals
 * (plain host, the calling thread's node, a device without such pools). IPC of such a pool is in
 * ipc.test.ts (it needs the peer process there).
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { Device } from '../../src/device.js';
import { CudaError, NotSupportedError } from '../../src/errors.js';
import { AsyncResource } from '../../src/resource/upstream/async-resource.js';
import { HostBuffer } from '../../src/buffer/host-buffer.js';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { HostArray } from '../../src/array/host-array.js';
import { DeviceArray } from '../../src/array/device-array.js';
import { Stream } from '../../src/stream.js';
import { onGpu } from '../helpers.js';

const device = Device.get(0);
/** Whether this machine's device has host NUMA pools (on the emulated backend: yes, node 0). */
const supported = ((): boolean => {
  try {
    return device.attribute('hostNumaMemoryPoolsSupported') === 1 && device.attribute('hostNumaId') >= 0;
  } catch {
    return false;
  }
})();
const needsNumaPools = {
  skip: supported ? false : 'the device or driver has no pools in host NUMA memory (CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED)',
} as const;

describe('a pool in host NUMA memory', () => {
  test("takes its node from the device, hands out pinned host memory and is no device's", needsNumaPools, () => {
    using mr = new AsyncResource({ pool: { location: { type: 'host-numa' } } });
    assert.equal(mr.hostNumaId, device.attribute('hostNumaId'));
    assert.equal(mr.kind, 'pinned-host');
    assert.equal(mr.deviceOrdinal, -1);
    assert.equal(mr.deviceObject, device);
    assert.equal(mr.describe(), `AsyncResource(device=0, host-numa=${mr.hostNumaId}, pool=created)`);
    // The driver's rule: host NUMA memory is the host's until access is granted; vram grants its device.
    assert.equal(mr.getAccess(device), 'readwrite');
    using explicit = new AsyncResource({ pool: { location: { type: 'host-numa', id: mr.hostNumaId! } } });
    assert.equal(explicit.hostNumaId, mr.hostNumaId);
  });

  test('its blocks are viewed from the host without a copy and copied to and from the device', needsNumaPools, () => {
    using mr = new AsyncResource({ pool: { location: { type: 'host-numa' } } });
    using stream = Stream.create();
    using h = HostBuffer.allocate(1 << 16, { resource: mr, stream });
    using back = HostBuffer.allocate(1 << 16, { resource: mr, stream });
    stream.synchronize(); // stream-ordered memory: the host touches it once the stream is past the allocation
    const values = h.view(Float32Array);
    for (let i = 0; i < values.length; i++) values[i] = i * 0.5;
    assert.equal(h.view(Float32Array)[7], 3.5, "a second view sees the first one's writes: the same memory");
    using d = DeviceBuffer.allocate(1 << 16);
    d.copyFromHost(h, { stream });
    d.copyToHost(back, { stream });
    stream.synchronize();
    assert.deepEqual(back.view(Float32Array), values);
  });

  test('a HostArray over it: NumPy-style data on the node, to the device and back', needsNumaPools, () => {
    using mr = new AsyncResource({ pool: { location: { type: 'host-numa' } } });
    using stream = Stream.create();
    using a = HostArray.empty([4, 8], 'float32', { resource: mr, stream });
    stream.synchronize();
    a.data.set(Array.from({ length: 32 }, (_, i) => i));
    using d = DeviceArray.empty([4, 8], 'float32');
    d.copyFrom(a);
    assert.deepEqual(
      Array.from(d.toHost()),
      Array.from({ length: 32 }, (_, i) => i),
    );
  });

  test('figures, release threshold and trim work as for a device pool', needsNumaPools, () => {
    using mr = new AsyncResource({ pool: { location: { type: 'host-numa' } } });
    const h = HostBuffer.allocate(3 << 20, { resource: mr });
    const figures = mr.memoryFigures();
    assert.equal(figures.allocatedBytes.value, 3 << 20);
    assert.equal(figures.allocations.value, 1);
    assert.ok(figures.reservedBytes >= 3 << 20, `reserved ${figures.reservedBytes}`);
    assert.ok(mr.usedBytes >= 3 << 20);
    // The driver reserves whole chunks (32 MiB on an H200) and releases past the threshold chunk by chunk.
    mr.releaseThreshold = figures.reservedBytes;
    assert.equal(mr.releaseThreshold, figures.reservedBytes);
    h.free();
    device.synchronize();
    assert.ok(mr.reservedBytes > 0, 'under the release threshold the pool keeps its memory');
    mr.trimTo(0);
    assert.equal(mr.reservedBytes, 0);
    assert.equal(mr.memoryFigures().allocatedBytes.value, 0);
  });

  test('a maximum size is refused before the driver, which does not bound such a pool', () => {
    assert.throws(
      () => new AsyncResource({ pool: { location: { type: 'host-numa' }, maxSize: 4 << 20 } }),
      /pool\.maxSize does not bound a pool on a host NUMA node: the driver ignores it there/,
    );
    // 0 is no bound, as for a device pool.
    if (supported) new AsyncResource({ pool: { location: { type: 'host-numa' }, maxSize: 0 } }).destroy();
  });

  test('a device buffer cannot come from it: its memory is host memory', needsNumaPools, () => {
    using mr = new AsyncResource({ pool: { location: { type: 'host-numa' } } });
    assert.throws(() => DeviceBuffer.allocate(4096, { resource: mr }), TypeError);
  });
});

describe('locations refused before the driver', () => {
  test("plain host and the calling thread's node, as the chapter says; bad ids and keys", () => {
    for (const type of ['host', 'host-numa-current']) {
      assert.throws(
        () => new AsyncResource({ pool: { location: { type } as never } }),
        (e: unknown) => e instanceof RangeError && e.message.includes(`'${type}' is refused for pools`) && e.message.includes('HOST_NUMA'),
        type,
      );
    }
    assert.throws(() => new AsyncResource({ pool: { location: { type: 'numa' } as never } }), RangeError);
    assert.throws(() => new AsyncResource({ pool: { location: { type: 'host-numa', id: -1 } } }), RangeError);
    assert.throws(() => new AsyncResource({ pool: { location: { type: 'host-numa', id: 0.5 } } }), RangeError);
    assert.throws(() => new AsyncResource({ pool: { location: { type: 'host-numa', node: 0 } as never } }), TypeError);
    assert.throws(() => new AsyncResource({ pool: { location: { type: 'device', id: 0 } as never } }), TypeError);
    assert.throws(() => new AsyncResource({ pool: { location: 'host-numa' as never } }), TypeError);
    using plain = new AsyncResource({ pool: { location: { type: 'device' } } });
    assert.equal(plain.kind, 'device');
    assert.equal(plain.hostNumaId, undefined);
  });

  test("a node the host does not have is the driver's error", { skip: onGpu ? 'the emulated host has node 0 only' : false }, () => {
    assert.throws(
      () => new AsyncResource({ pool: { location: { type: 'host-numa', id: 1 } } }),
      (e: unknown) => e instanceof CudaError && e.errorName === 'CUDA_ERROR_INVALID_VALUE',
    );
  });

  test(
    'a device without host NUMA pools: a NotSupportedError naming the attribute',
    { skip: supported ? 'this device has host NUMA pools (host-numa-unsupported.test.ts models one without)' : false },
    () => {
      assert.throws(
        () => new AsyncResource({ pool: { location: { type: 'host-numa' } } }),
        (e: unknown) => e instanceof NotSupportedError && /CU_DEVICE_ATTRIBUTE_HOST_NUMA_(MEMORY_POOLS_SUPPORTED|ID)/.test(e.message),
      );
    },
  );
});
