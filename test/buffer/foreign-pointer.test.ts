/**
 * Foreign pointers: DeviceBuffer.fromPointer and DeviceArray.fromPointer over memory the backend
 * allocated behind vram's back (as C code would, with cuMemAlloc), round trips through them,
 * onRelease called exactly once (free, using, the backstop), the owner kept alive until then, the
 * memory's own context used for its copies, and every bad pointer an InvalidPointerError with
 * nothing leaked. Runs on the emulated backend with two devices (the second without peer access
 * when a test asks) and on a GPU.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { DeviceArray } from '../../src/array/device-array.js';
import { HostAllocFlags } from '../../src/backend/backend.js';
import { EmulatedBackend } from '../../src/backend/emulated/emulated-backend.js';
import { getBackend, setBackend } from '../../src/backend/select.js';
import { Device } from '../../src/device.js';
import { DoubleFreeError, InvalidPointerError, UseAfterFreeError } from '../../src/errors.js';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { ForeignDeviceBuffer } from '../../src/buffer/foreign-device-buffer.js';
import { AsyncResource } from '../../src/resource/upstream/async-resource.js';
import { leakStatistics } from '../../src/backstop.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import { Stream } from '../../src/stream.js';
import { forceGc, needsGc, onGpu } from '../helpers.js';

/** Two emulated devices; `peers` turns their peer access off for the no-peer case. */
class TwoDevices extends EmulatedBackend {
  peers = true;
  override deviceCanAccessPeer(ordinal: number, peerOrdinal: number): boolean {
    return this.peers && super.deviceCanAccessPeer(ordinal, peerOrdinal);
  }
}
const emulated = onGpu ? undefined : new TwoDevices({ deviceCount: 2, capacityBytes: 1 << 28 });
if (emulated !== undefined) setBackend(emulated);

const device = Device.get(0);
const backend = getBackend();

/** Memory "C code" allocated and filled: cuMemAlloc + cuMemcpyHtoD in the current context. */
function cAlloc(bytes: number, fill?: Uint8Array): number {
  const ptr = backend.memAlloc(bytes);
  if (fill !== undefined) backend.memcpyFromHost(ptr, fill, fill.byteLength);
  return ptr;
}

function cFree(ptr: number): void {
  device.makeCurrent();
  backend.memFree(ptr);
}

function random(bytes: number): Uint8Array {
  const out = new Uint8Array(bytes);
  for (let i = 0; i < bytes; i++) out[i] = (i * 2654435761 + 12345) >>> 24;
  return out;
}

describe('DeviceBuffer.fromPointer', () => {
  it('wraps foreign device memory without copying: reads, writes and memset reach the same bytes', () => {
    device.makeCurrent();
    const data = random(4096);
    const ptr = cAlloc(4096, data);
    let released = 0;
    const buf = DeviceBuffer.fromPointer(ptr, 4096, { onRelease: () => released++ });
    assert.ok(buf instanceof ForeignDeviceBuffer);
    assert.equal(buf.ptr, ptr);
    assert.equal(buf.kind, 'device');
    assert.equal(buf.device, device);
    assert.equal(buf.residentDevice, device);
    assert.deepEqual(buf.copyToHost(new Uint8Array(4096)), data);
    buf.memset(7, { offset: 100, count: 10 });
    const back = new Uint8Array(4096);
    backend.memcpyToHost(back, ptr, 4096); // the C side sees vram's write
    assert.deepEqual(back.subarray(100, 110), new Uint8Array(10).fill(7));
    assert.equal(back[99], data[99]);
    buf.free();
    assert.equal(released, 1);
    assert.throws(() => buf.free(), DoubleFreeError);
    assert.throws(() => buf.ptr, UseAfterFreeError);
    assert.equal(released, 1);
    // vram never freed it: the C side still reads and frees it.
    backend.memcpyToHost(back, ptr, 16);
    cFree(ptr);
  });

  it('a sub-range of an allocation, device to device copies both ways, and async copies on a stream', async () => {
    device.makeCurrent();
    const ptr = cAlloc(1 << 16, random(1 << 16));
    {
      using inner = DeviceBuffer.fromPointer(ptr + 4096, 8192);
      using mine = DeviceBuffer.allocate(8192);
      mine.copyFrom(inner);
      assert.deepEqual(mine.copyToHost(new Uint8Array(8192)), random(1 << 16).subarray(4096, 4096 + 8192));
      mine.memset(3);
      inner.copyFrom(mine);
      using stream = Stream.create();
      const got = await inner.copyToHostAsync(new Uint8Array(8192), { stream });
      assert.deepEqual(got, new Uint8Array(8192).fill(3));
    }
    cFree(ptr);
  });

  it('onRelease runs exactly once at the end of a using scope, and the owner is dropped then', () => {
    device.makeCurrent();
    const ptr = cAlloc(256);
    let released = 0;
    const owner = { name: 'tensor' };
    let seen: ForeignDeviceBuffer;
    {
      using buf = DeviceBuffer.fromPointer(ptr, 256, { owner, onRelease: () => released++ });
      seen = buf;
      assert.equal(buf.owner, owner);
    }
    assert.equal(released, 1);
    assert.equal(seen.freed, true);
    assert.equal(seen.owner, undefined);
    cFree(ptr);
  });

  it('the backstop calls onRelease once for a dropped buffer, and holds the owner until then', needsGc, async () => {
    device.makeCurrent();
    const ptr = cAlloc(512);
    let released = 0;
    let ownerRef: WeakRef<object> | undefined;
    const leaksBefore = leakStatistics().count;
    (() => {
      const owner = { big: new Float64Array(1024) };
      ownerRef = new WeakRef(owner);
      DeviceBuffer.fromPointer(ptr, 512, { owner, onRelease: () => released++ });
    })();
    for (let i = 0; i < 50 && released === 0; i++) {
      forceGc!();
      await nextTurn();
    }
    assert.equal(released, 1);
    assert.ok(leakStatistics().count >= leaksBefore + 1, 'counted as a leak');
    forceGc!();
    await nextTurn();
    assert.equal(ownerRef!.deref(), undefined);
    assert.equal(released, 1);
    cFree(ptr);
  });

  it('keeps the owner alive while the buffer lives, and lets it go after free', needsGc, async () => {
    device.makeCurrent();
    const ptr = cAlloc(64);
    let ownerRef: WeakRef<object> | undefined;
    const buf = ((): ForeignDeviceBuffer => {
      const owner = {};
      ownerRef = new WeakRef(owner);
      return DeviceBuffer.fromPointer(ptr, 64, { owner });
    })();
    forceGc!();
    await nextTurn();
    forceGc!();
    assert.notEqual(ownerRef!.deref(), undefined);
    buf.free();
    forceGc!();
    await nextTurn();
    forceGc!();
    assert.equal(ownerRef!.deref(), undefined);
    assert.equal(buf.freed, true);
    cFree(ptr);
  });

  it('records the context of memory allocated in a non-primary context, and copies run there', () => {
    const ctx = backend.contextCreate(0, 0); // the "C library" has a context of its own (now current)
    try {
      const data = random(1024);
      const ptr = cAlloc(1024, data);
      device.makeCurrent(); // back to vram's (primary) context
      const buf = DeviceBuffer.fromPointer(ptr, 1024);
      assert.equal(buf.context, ctx);
      assert.notEqual(buf.context, device.context);
      assert.equal(buf.ownContext, true);
      device.makeCurrent();
      assert.deepEqual(buf.copyToHost(new Uint8Array(1024)), data);
      assert.equal(backend.contextGetCurrent(), ctx, "the synchronous copy ran in the memory's context");
      device.makeCurrent();
      buf.memset(9);
      assert.equal(backend.contextGetCurrent(), ctx, "the memset ran in the memory's context");
      using arr = DeviceArray.fromBuffer(buf, { dtype: 'uint8' });
      assert.deepEqual(arr.slice([0, 4]).toHost(), new Uint8Array(4).fill(9));
      buf.free();
      backend.contextSetCurrent(ctx);
      backend.memFree(ptr);
    } finally {
      backend.contextDestroy(ctx);
      device.makeCurrent();
    }
  });

  it('mapped pinned memory: its device pointer is accepted and read in place', () => {
    device.makeCurrent();
    const host = backend.memHostAlloc(4096, HostAllocFlags.DEVICEMAP);
    try {
      new Uint8Array(backend.hostView(host, 4096), 0, 4096).set(random(4096));
      const dptr = backend.memHostGetDevicePointer(host);
      using buf = DeviceBuffer.fromPointer(dptr, 4096);
      assert.equal(buf.kind, 'mapped-host');
      assert.equal(buf.residentDevice, undefined);
      assert.deepEqual(buf.copyToHost(new Uint8Array(4096)), random(4096));
    } finally {
      backend.memFreeHost(host);
    }
  });

  it('stream-ordered pool memory and PoolResource (virtual memory) blocks are accepted', () => {
    using async = new AsyncResource();
    using pool = new PoolResource();
    for (const resource of [async, pool]) {
      using mine = DeviceBuffer.allocate(8192, { resource });
      mine.copyFromHost(random(8192));
      const attrs = backend.pointerGetAttributes(mine.ptr);
      using theirs = DeviceBuffer.fromPointer(mine.ptr + 1024, 4096);
      assert.equal(theirs.kind, 'device');
      // The context the driver reports (possibly none: such memory belongs to no context).
      assert.equal(theirs.context, attrs.context === 0 ? device.activeContext : attrs.context);
      assert.deepEqual(theirs.copyToHost(new Uint8Array(4096)), random(8192).subarray(1024, 5120));
    }
  });

  it('managed memory is accepted', () => {
    device.makeCurrent();
    const ptr = backend.memAllocManaged(1024, 1);
    try {
      using buf = DeviceBuffer.fromPointer(ptr, 1024);
      assert.equal(buf.kind, 'managed');
      buf.memset(5);
      assert.deepEqual(buf.copyToHost(new Uint8Array(4), { bytes: 4 }), new Uint8Array(4).fill(5));
    } finally {
      backend.memFree(ptr);
    }
  });
});

describe('DeviceArray.fromPointer', () => {
  it('an array over foreign memory: shape, strides, byteOffset, views, and free calls onRelease once', () => {
    device.makeCurrent();
    const values = Float32Array.from({ length: 12 }, (_, i) => i);
    const ptr = cAlloc(64, new Uint8Array(values.buffer));
    let released = 0;
    const a = DeviceArray.fromPointer(ptr, [3, 4], 'float32', { onRelease: () => released++ });
    assert.deepEqual(a.toHost(), values);
    assert.deepEqual(a.T.toHost(), Float32Array.from([0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11]));
    const col = a.slice(null, 1);
    a.fill(1);
    assert.deepEqual(col.toHost(), new Float32Array(3).fill(1));
    assert.equal(a.ownsMemory, true);
    a.free();
    assert.equal(released, 1);
    assert.throws(() => col.toHost(), UseAfterFreeError);
    {
      // Every other element from the second, by strides and a byte offset.
      backend.memcpyFromHost(ptr, new Uint8Array(values.buffer), 48);
      using b = DeviceArray.fromPointer(ptr, [5], 'float32', { strides: [2], byteOffset: 4 });
      assert.deepEqual(b.toHost(), Float32Array.from([1, 3, 5, 7, 9]));
      // A vector dtype over the same bytes.
      using c = DeviceArray.fromPointer(ptr, [4], 'float3');
      assert.deepEqual(c.toHost(), values);
      assert.equal(released, 1);
    }
    cFree(ptr);
  });

  it('bad layouts are RangeErrors before any driver call', () => {
    device.makeCurrent();
    const ptr = cAlloc(64);
    assert.throws(() => DeviceArray.fromPointer(ptr, [4], 'float32', { byteOffset: 2 }), RangeError);
    assert.throws(() => DeviceArray.fromPointer(ptr + 2, [4], 'float32'), RangeError);
    assert.throws(() => DeviceArray.fromPointer(ptr, [4], 'float32', { strides: [-1] }), RangeError);
    assert.throws(() => DeviceArray.fromPointer(ptr, [-1], 'float32'), RangeError);
    assert.throws(() => DeviceArray.fromPointer(ptr, [4], 'float5' as 'float32'), TypeError);
    cFree(ptr);
  });
});

describe('bad pointers are InvalidPointerErrors, with nothing leaked', () => {
  function refused(ptr: number, bytes: number, pattern: RegExp, options: { device?: number } = {}): void {
    let released = 0;
    const leaks = leakStatistics().count;
    assert.throws(
      () => DeviceBuffer.fromPointer(ptr, bytes, { ...options, onRelease: () => released++ }),
      (e: unknown) => e instanceof InvalidPointerError && pattern.test(e.message),
    );
    assert.equal(released, 0, 'onRelease is not called for a refused pointer');
    assert.equal(leakStatistics().count, leaks);
  }

  it('malformed pointers and sizes are TypeError/RangeError', () => {
    assert.throws(() => DeviceBuffer.fromPointer('0x1000' as unknown as number, 4), TypeError);
    assert.throws(() => DeviceBuffer.fromPointer(0, 4), RangeError);
    assert.throws(() => DeviceBuffer.fromPointer(-4096, 4), RangeError);
    assert.throws(() => DeviceBuffer.fromPointer(1.5, 4), RangeError);
    assert.throws(() => DeviceBuffer.fromPointer(4096, -1), RangeError);
    assert.throws(() => DeviceBuffer.fromPointer(4096, 4, { onRelease: 'no' as unknown as () => void }), TypeError);
  });

  it('an unknown address, and freed memory', () => {
    device.makeCurrent();
    refused(0x1234_5000, 16, /not memory the driver knows/);
    const ptr = cAlloc(4096);
    cFree(ptr);
    refused(ptr, 16, /not memory the driver knows/);
  });

  it('a pageable host pointer (JavaScript memory)', () => {
    device.makeCurrent();
    const js = new Uint8Array(4096);
    refused(backend.addressOf(js), 4096, /pageable host pointer/);
  });

  it('pinned host memory that is not mapped (as the driver documents cuMemHostGetDevicePointer)', () => {
    device.makeCurrent();
    const host = backend.memHostAlloc(4096, 0);
    try {
      let mapped = true;
      try {
        backend.memHostGetDevicePointer(host);
      } catch {
        mapped = false;
      }
      // Under unified addressing a GPU may map every cuMemHostAlloc allocation anyway; then it is accepted.
      if (mapped) DeviceBuffer.fromPointer(host, 4096).free();
      else refused(host, 4096, /not mapped for the device.*cuMemHostGetDevicePointer failed: CUDA_ERROR_INVALID_VALUE/);
    } finally {
      backend.memFreeHost(host);
    }
  });

  it('memory whose start the driver does not give (a pool on a host NUMA node): its size still bounds the view', (t) => {
    let supported = false;
    try {
      supported = device.attribute('hostNumaMemoryPoolsSupported') === 1 && device.attribute('hostNumaId') >= 0;
    } catch {
      // A driver without the attribute has no such pools.
    }
    if (!supported) return t.skip('the device has no pools in host NUMA memory');
    using mr = new AsyncResource({ pool: { location: { type: 'host-numa' } } });
    const ptr = mr.allocate(384);
    try {
      device.synchronize();
      assert.equal(backend.pointerGetAttributes(ptr).rangeStart, 0, 'CUDA 13 gives such a block a size and no start');
      assert.equal(backend.pointerGetAttributes(ptr).rangeSize, 384);
      // Host memory of a pool the device was granted (AsyncResource grants its device): same address on the device.
      using view = DeviceArray.fromPointer(ptr, [96], 'float32');
      view.fill(2);
      assert.deepEqual([...view.toHost().slice(0, 2)], [2, 2]);
      refused(ptr, 385, /385 bytes at 0x[0-9a-f]+ are more than its allocation's 384 \(cuPointerGetAttributes RANGE_SIZE/);
    } finally {
      mr.deallocate(ptr, 384);
    }
    // A pool that never granted the device access: refused, before any copy could fault.
    const raw = backend.memPoolCreate({ device: 0, hostNumaId: device.attribute('hostNumaId') });
    const s = backend.streamCreate(1, 0);
    try {
      const p = backend.memAllocFromPoolAsync(4096, raw, s);
      backend.streamSynchronize(s);
      refused(p, 4096, /host memory of a memory pool that device 0 has no access to \(cuMemPoolGetAccess reported none\)/);
      backend.memFreeAsync(p, s);
      backend.streamSynchronize(s);
    } finally {
      backend.streamDestroy(s);
      backend.memPoolDestroy(raw);
    }
  });

  it('a range past the end of its allocation, and one starting inside and running out', () => {
    device.makeCurrent();
    const ptr = cAlloc(4096);
    // The driver may round the allocation up: the range it reports is what counts.
    const size = backend.pointerGetAttributes(ptr).rangeSize;
    assert.ok(size >= 4096);
    refused(ptr, size + 1, /runs past its allocation.*: 1 bytes too many/);
    refused(ptr + size - 100, 200, /runs past its allocation/);
    DeviceBuffer.fromPointer(ptr + size - 100, 100).free();
    assert.throws(() => DeviceArray.fromPointer(ptr, [size / 4 + 1], 'float32'), InvalidPointerError);
    cFree(ptr);
  });

  it("another device's memory without peer access; accepted with it", { skip: Device.count() < 2 ? 'needs two devices' : false }, () => {
    const other = Device.get(1);
    other.makeCurrent();
    const ptr = backend.memAlloc(1024);
    try {
      if (emulated !== undefined) emulated.peers = false;
      if (!device.canAccessPeer(other)) {
        refused(ptr, 1024, /memory of device 1 .*which device 0 cannot access/, { device: 0 });
      }
      if (emulated !== undefined) emulated.peers = true;
      if (device.canAccessPeer(other)) {
        using buf = DeviceBuffer.fromPointer(ptr, 1024, { device: 0 });
        assert.equal(buf.device, other, 'its copies run on the device it lives on');
        buf.memset(4);
        using mine = DeviceBuffer.allocate(1024);
        mine.copyFrom(buf); // a peer copy between the two contexts
        assert.deepEqual(mine.copyToHost(new Uint8Array(4), { bytes: 4 }), new Uint8Array(4).fill(4));
      }
    } finally {
      if (emulated !== undefined) emulated.peers = true;
      other.makeCurrent();
      backend.memFree(ptr);
      device.makeCurrent();
    }
  });
});
