/** The upstream memory resources and the current resource per device. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { Device } from '../../src/device.js';
import { Stream } from '../../src/stream.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';
import { AsyncResource } from '../../src/resource/upstream/async-resource.js';
import { ManagedResource } from '../../src/resource/upstream/managed-resource.js';
import { PinnedHostResource } from '../../src/resource/upstream/pinned-host-resource.js';
import { getCurrentResource, setCurrentResource } from '../../src/resource/current.js';
import { createDefaultResource } from '../../src/resource/default-resource.js';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import type { MemoryResource } from '../../src/resource/resource.js';
import { CudaError, OutOfMemoryError, UseAfterFreeError } from '../../src/errors.js';
import { assertMemoryReturned, deviceMemoryUsed, FREE_MEMORY_SLACK } from '../helpers.js';

const device = Device.get(0);

function used(): number {
  return deviceMemoryUsed(device);
}

/** Allocates random sizes, checks alignment and that blocks do not overlap, frees them all. */
function exercise(mr: MemoryResource, stream?: Stream): void {
  fc.assert(
    fc.property(fc.array(fc.integer({ min: 1, max: 1 << 16 }), { minLength: 1, maxLength: 20 }), (sizes) => {
      const blocks = sizes.map((bytes) => ({ ptr: mr.allocate(bytes, stream), bytes }));
      for (const b of blocks) assert.equal(b.ptr % mr.alignment, 0, `${mr.describe()} returned a misaligned pointer`);
      const sorted = [...blocks].sort((a, b) => a.ptr - b.ptr);
      for (let i = 1; i < sorted.length; i++) {
        assert.ok(sorted[i - 1]!.ptr + sorted[i - 1]!.bytes <= sorted[i]!.ptr, 'blocks overlap');
      }
      for (const b of blocks) mr.deallocate(b.ptr, b.bytes, stream);
    }),
    { numRuns: 20 },
  );
}

/** Bad sizes are typed errors for every resource. */
function badSizes(mr: MemoryResource): void {
  assert.throws(() => mr.allocate(0), RangeError);
  assert.throws(() => mr.allocate(-8), RangeError);
  assert.throws(() => mr.allocate(1.25), RangeError);
  assert.throws(() => mr.allocate(Number.NaN), RangeError);
  assert.throws(() => mr.allocate(64n as unknown as number), TypeError);
  assert.throws(() => mr.allocate('64 bytes'), RangeError);
}

test('CudaResource', () => {
  const before = used();
  const mr = new CudaResource();
  assert.equal(mr.kind, 'device');
  assert.equal(mr.deviceOrdinal, 0);
  assert.equal(mr.alignment, 256);
  assert.equal(mr.describe(), 'CudaResource(device=0)');
  // Each resource checks frees against its own live table: only itself is equal.
  assert.ok(mr.isEqual(mr));
  assert.ok(!mr.isEqual(new CudaResource(device)));
  assert.ok(!mr.isEqual(new PinnedHostResource()));
  assert.equal(mr.releaseCached(), 0);
  exercise(mr);
  using s = Stream.create();
  exercise(mr, s);
  badSizes(mr);
  assert.throws(() => mr.allocate(device.info.totalMemory + 1), OutOfMemoryError);
  // A block several times the driver's slack: not giving it back would show on a GPU too.
  const bytes = 4 * FREE_MEMORY_SLACK + (1 << 20);
  const big = mr.allocate(bytes);
  assert.ok(used() - before >= bytes - FREE_MEMORY_SLACK, 'the allocation shows in used memory');
  mr.deallocate(big, bytes);
  assert.equal(device.backend.pointerGetAttributes(big).memoryType, 0, 'the driver freed the block');
  assertMemoryReturned(before, used(), 'CudaResource gave everything back');
});

test('AsyncResource over the default pool', async () => {
  const mr = new AsyncResource();
  assert.equal(mr.kind, 'device');
  assert.equal(mr.alignment, 256);
  assert.equal(mr.ownsPool, false);
  assert.equal(mr.memoryFigures().reservedFromAllocated, undefined, "CUDA's pool measures what it reserves");
  assert.ok(!mr.isEqual(new AsyncResource({ device })), 'live tables are per resource');
  assert.match(mr.describe(), /AsyncResource\(device=0, pool=default\)/);
  using s = Stream.create();
  exercise(mr, s);
  badSizes(mr);
  await s.synchronized();
  assert.equal(mr.usedBytes, 0);
  // destroy() ends the resource; the device's default pool stays the driver's.
  mr.destroy();
  assert.throws(() => mr.allocate(256), UseAfterFreeError);
  assert.doesNotThrow(() => new AsyncResource().destroy());
});

test('AsyncResource over a created pool: attributes, statistics, trim, release', async () => {
  using mr = new AsyncResource({ pool: { maxSize: 0 } });
  assert.equal(mr.ownsPool, true);
  assert.ok(!mr.isEqual(new AsyncResource()));
  using s = Stream.create();
  mr.releaseThreshold = 64 << 20;
  assert.equal(mr.releaseThreshold, 64 << 20);
  for (const name of ['reuseFollowEventDependencies', 'reuseAllowOpportunistic', 'reuseAllowInternalDependencies'] as const) {
    const was = mr[name];
    assert.equal(typeof was, 'boolean');
    mr[name] = !was;
    assert.equal(mr[name], !was);
    mr[name] = was;
    assert.throws(() => {
      mr[name] = 1 as unknown as boolean;
    }, TypeError);
  }
  assert.throws(() => {
    mr.releaseThreshold = -1;
  }, RangeError);
  const bytes = 4 << 20;
  const ptr = mr.allocate(bytes, s);
  assert.ok(mr.usedBytes >= bytes);
  assert.ok(mr.reservedBytes >= bytes);
  assert.ok(mr.peakUsedBytes >= bytes);
  assert.ok(mr.peakReservedBytes >= mr.reservedBytes);
  mr.deallocate(ptr, bytes, s);
  await s.synchronized();
  assert.equal(mr.usedBytes, 0);
  assert.ok(mr.reservedBytes >= bytes, 'the release threshold keeps the memory in the pool');
  mr.resetPeakFigures();
  assert.equal(mr.peakUsedBytes, 0, 'resetPeakFigures restarts the used high-water mark');
  assert.equal(mr.memoryFigures().allocatedBytes.peak, 0);
  // The driver releases memory whose stream-ordered free it has seen complete: a blocking
  // synchronise makes sure it has (a polled event is not enough for cuMemPoolTrimTo).
  device.synchronize();
  const reserved = mr.reservedBytes;
  const released = mr.releaseCached();
  assert.equal(released, reserved - mr.reservedBytes);
  assert.ok(released > 0);
  assert.equal(mr.reservedBytes, 0);
  mr.resetPeakFigures();
  assert.equal(mr.peakReservedBytes, 0);
  mr.trimTo(0);
  assert.throws(() => mr.trimTo(-1), RangeError);
  assert.throws(() => mr.setAccess(device, 'read'), RangeError);
  assert.throws(() => mr.setAccess(device, 'write' as 'read'), RangeError);
  assert.throws(() => mr.setAccess(0 as unknown as Device, 'read'), TypeError);
  assert.equal(mr.getAccess(device), 'readwrite');
  if (Device.count() > 1) {
    const peer = Device.get(1);
    mr.setAccess(peer, 'readwrite');
    assert.equal(mr.getAccess(peer), 'readwrite');
    mr.setAccess(peer, 'none');
  }
});

test('AsyncResource: a bounded pool runs out, and destroy ends its use', () => {
  const mr = new AsyncResource({ pool: { maxSize: 32 << 20 } });
  assert.throws(() => mr.allocate(64 << 20), OutOfMemoryError);
  const ptr = mr.allocate(1 << 20);
  mr.deallocate(ptr, 1 << 20);
  Device.get(0).synchronize();
  mr.destroy();
  assert.throws(() => mr.allocate(16), UseAfterFreeError);
  assert.throws(() => mr.reservedBytes, UseAfterFreeError);
  assert.throws(() => new AsyncResource({ pool: { handleTypes: 'win32' as 'none' } }), RangeError);
  assert.throws(() => new AsyncResource({ pool: 'mine' as 'default' }), TypeError);
  assert.throws(() => new AsyncResource({ pool: { maxSize: -1 } }), RangeError);
});

test('AsyncResource: past its maxSize the out-of-memory reason is maximum, not device', () => {
  using mr = new AsyncResource({ pool: { maxSize: 32 << 20 } });
  assert.equal(mr.maxSize, 32 << 20);
  const ptr = mr.allocate(24 << 20);
  assert.throws(
    () => mr.allocate(16 << 20),
    (e: unknown) => {
      assert.ok(e instanceof OutOfMemoryError);
      assert.equal(e.reason, 'maximum');
      assert.match(e.message, /AsyncResource/);
      return true;
    },
  );
  mr.deallocate(ptr, 24 << 20);
  // Without a maximum, a request larger than the device is the device's refusal.
  using unbounded = new AsyncResource({ pool: {} });
  assert.equal(unbounded.maxSize, 0);
  assert.throws(
    () => unbounded.allocate(device.memInfo().total * 2),
    (e: unknown) => e instanceof OutOfMemoryError && e.reason === 'device',
  );
});

test("the device's current pool: cuMemAllocAsync uses the pool set, the default pool cannot be destroyed, destroying the current pool makes the default current again", () => {
  const backend = device.backend;
  assert.equal(device.memPool, device.defaultMemPool);
  const mr = new AsyncResource({ pool: {} });
  using stream = Stream.create();
  try {
    device.setMemPool(mr);
    assert.equal(device.memPool, mr.pool);
    using current = new AsyncResource({ pool: 'current' });
    assert.equal(current.pool, mr.pool);
    assert.equal(current.ownsPool, false);
    assert.match(current.describe(), /pool=current/);
    // What another library's cudaMallocAsync does: cuMemAllocAsync, from the current pool.
    device.makeCurrent();
    const ptr = backend.memAllocAsync(1 << 20, stream.handle);
    assert.ok(mr.usedBytes >= 1 << 20, 'the allocation came from the pool set');
    backend.memFreeAsync(ptr, stream.handle);
    stream.synchronize();
    // The default pool stays: the driver refuses to destroy it, and an AsyncResource over it leaves it.
    assert.throws(
      () => backend.memPoolDestroy(device.defaultMemPool),
      (e: unknown) => e instanceof CudaError && e.errorName === 'CUDA_ERROR_INVALID_VALUE',
    );
    new AsyncResource().destroy();
    assert.throws(() => device.setMemPool('pool' as unknown as number), TypeError);
  } finally {
    mr.destroy();
  }
  assert.equal(device.memPool, device.defaultMemPool, 'destroying the current pool made the default current again');
});

test('ManagedResource', () => {
  const mr = new ManagedResource();
  assert.equal(mr.kind, 'managed');
  assert.equal(mr.alignment, 256);
  assert.equal(mr.attach, 'global');
  assert.ok(!mr.isEqual(new ManagedResource({ attach: 'host' })), 'live tables are per resource');
  assert.match(mr.describe(), /ManagedResource/);
  assert.equal(mr.releaseCached(), 0);
  exercise(mr);
  badSizes(mr);
  assert.throws(() => new ManagedResource({ attach: 'single' as 'host' }), RangeError);
});

test('PinnedHostResource', () => {
  const mr = new PinnedHostResource({ mapped: true, portable: true });
  assert.equal(mr.kind, 'pinned-host');
  assert.equal(mr.deviceOrdinal, -1);
  assert.equal(mr.alignment, 256);
  assert.deepEqual(mr.options, { portable: true, mapped: true, writeCombined: false });
  assert.equal(mr.describe(), 'PinnedHostResource(portable, mapped)');
  assert.ok(!mr.isEqual(new PinnedHostResource()), 'live tables are per resource');
  assert.ok(!mr.isEqual(new CudaResource()));
  assert.equal(mr.releaseCached(), 0);
  exercise(mr);
  badSizes(mr);
  assert.throws(() => new PinnedHostResource({ writeCombined: 1 as unknown as boolean }), TypeError);
});

test('current resource per device', () => {
  const first = getCurrentResource();
  // The default is what the environment asks for (default-resource.test.ts checks each choice).
  const probe = createDefaultResource(device);
  assert.equal(first.describe(), probe.describe());
  for (let r: MemoryResource | undefined = probe; r !== undefined; r = r.upstream) r.destroy();
  assert.equal(getCurrentResource(device), first);
  assert.equal(getCurrentResource(0), first);
  const pool = new AsyncResource();
  assert.equal(setCurrentResource(device, pool), first);
  assert.equal(getCurrentResource(), pool);
  using buf = DeviceBuffer.allocate(1000);
  assert.equal(buf.resource, pool);
  assert.equal(setCurrentResource(0, first), pool);
  assert.throws(() => setCurrentResource(device, new PinnedHostResource()), TypeError);
  assert.throws(() => setCurrentResource(device, {} as MemoryResource), TypeError);
  if (Device.count() > 1) {
    assert.throws(() => setCurrentResource(device, new CudaResource(1)), RangeError);
    assert.equal(getCurrentResource(1).deviceOrdinal, 1);
  }
  assert.equal(getCurrentResource(), first);
});
