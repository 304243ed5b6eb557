/**
 * Buffers: every copy path and JavaScript memory type round-trips random data; fills; pitched 2D
 * copies; lifetimes (free, using, the garbage-collection backstop); and every bad input is a typed
 * error that leaves nothing allocated. Runs on the emulated backend (with two devices, so peer
 * copies run too) and, unchanged, on a real GPU.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { assertMemoryReturned, captureWarnings, deviceMemoryUsed, forceGc, FREE_MEMORY_SLACK, gpuOnly, onGpu, randomBytes } from '../helpers.js';
import { setBackend, getBackend } from '../../src/backend/select.js';
import { EmulatedBackend } from '../../src/backend/emulated/emulated-backend.js';
import { Device } from '../../src/device.js';
import { Stream } from '../../src/stream.js';
import { DeviceBuffer, PitchedDeviceBuffer } from '../../src/buffer/device-buffer.js';
import { HostBuffer } from '../../src/buffer/host-buffer.js';
import { ManagedBuffer } from '../../src/buffer/managed-buffer.js';
import { captureAllocationStacks } from '../../src/buffer/lifetime.js';
import { leakStatistics, onLeak, type LeakRecord } from '../../src/backstop.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';
import { getCurrentResource } from '../../src/resource/current.js';
import { PinnedHostResource } from '../../src/resource/upstream/pinned-host-resource.js';
import { DoubleFreeError, OutOfMemoryError, UseAfterFreeError, VramStateError } from '../../src/errors.js';
import type { Backend } from '../../src/backend/backend.js';

if (!onGpu) setBackend(new EmulatedBackend({ deviceCount: 2, capacityBytes: 1 << 30 }));

const device = Device.get(0);

/** Device memory in use, as the driver (or the emulated device) reports it. */
function used(d: Device = device): number {
  return deviceMemoryUsed(d);
}

/**
 * Runs `fn`, which must throw `type`, and checks that no device memory stayed allocated (exactly
 * on the emulated device; on a GPU within the driver's own bookkeeping, FREE_MEMORY_SLACK).
 */
function throwsAndLeavesNothing(fn: () => unknown, type: new (...args: never[]) => Error): void {
  const before = used();
  assert.throws(fn, type);
  assertMemoryReturned(before, used(), 'nothing stays allocated after the error');
}

const kinds = ['Uint8Array', 'Float32Array+offset', 'ArrayBuffer', 'Buffer', 'DataView', 'HostBuffer'] as const;
type Kind = (typeof kinds)[number];

/** Makes host memory of `kind` holding `data` (length a multiple of 4); returns it and a reader. */
function hostOf(kind: Kind, data: Uint8Array): { mem: ArrayBuffer | ArrayBufferView | HostBuffer; read: () => Uint8Array; done: () => void } {
  const n = data.byteLength;
  switch (kind) {
    case 'Uint8Array': {
      const a = data.slice();
      return { mem: a, read: () => a, done: () => {} };
    }
    case 'Float32Array+offset': {
      const backing = new ArrayBuffer(n + 16);
      const f = new Float32Array(backing, 8, n / 4);
      new Uint8Array(backing, 8, n).set(data);
      return { mem: f, read: () => new Uint8Array(backing, 8, n), done: () => {} };
    }
    case 'ArrayBuffer': {
      const ab = data.slice().buffer;
      return { mem: ab, read: () => new Uint8Array(ab), done: () => {} };
    }
    case 'Buffer': {
      const b = Buffer.from(data);
      return { mem: b, read: () => new Uint8Array(b.buffer, b.byteOffset, b.byteLength), done: () => {} };
    }
    case 'DataView': {
      const ab = new ArrayBuffer(n + 4);
      new Uint8Array(ab, 4).set(data);
      return { mem: new DataView(ab, 4, n), read: () => new Uint8Array(ab, 4, n), done: () => {} };
    }
    case 'HostBuffer': {
      const h = HostBuffer.allocate(n);
      h.view().set(data);
      return { mem: h, read: () => h.view(), done: () => h.free() };
    }
  }
}

test('round trip of random data through every host memory type, sync', () => {
  fc.assert(
    fc.property(fc.constantFrom(...kinds), fc.constantFrom(...kinds), fc.integer({ min: 1, max: 4096 }), fc.integer(), (inKind, outKind, words, seed) => {
      const n = words * 4;
      const data = randomBytes(n, seed);
      const src = hostOf(inKind, data);
      const dst = hostOf(outKind, new Uint8Array(n));
      using buf = DeviceBuffer.allocate(n);
      buf.copyFromHost(src.mem);
      buf.copyToHost(dst.mem);
      assert.deepEqual(dst.read(), data);
      src.done();
      dst.done();
    }),
    { numRuns: 60 },
  );
});

test('copies with offsets and byte counts land exactly where asked', () => {
  fc.assert(
    fc.property(fc.integer({ min: 1, max: 2048 }), fc.nat(), fc.nat(), fc.nat(), fc.integer(), (size, a, b, c, seed) => {
      const srcOffset = a % size;
      const offset = b % size;
      const bytes = c % (Math.min(size - srcOffset, size - offset) + 1);
      const data = randomBytes(size, seed);
      using buf = DeviceBuffer.allocate(size);
      buf.memset(0xee);
      buf.copyFromHost(data, { offset, srcOffset, bytes });
      const back = buf.copyToHost(new Uint8Array(size));
      const expected = new Uint8Array(size).fill(0xee);
      expected.set(data.subarray(srcOffset, srcOffset + bytes), offset);
      assert.deepEqual(back, expected);
      const part = new Uint8Array(bytes + 3);
      buf.copyToHost(part, { offset, bytes, dstOffset: 3 });
      assert.deepEqual(part.subarray(3), data.subarray(srcOffset, srcOffset + bytes));
    }),
    { numRuns: 80 },
  );
});

test('asynchronous copies through HostBuffers on a stream', async () => {
  const n = 64 * 1024 + 12;
  const data = randomBytes(n, 42);
  using host = HostBuffer.allocate(n);
  using back = HostBuffer.allocate(n);
  using a = DeviceBuffer.allocate(n);
  using b = DeviceBuffer.allocate(n);
  using s = Stream.create();
  host.view().set(data);
  a.copyFromHost(host, { stream: s });
  b.copyFrom(a, { stream: s });
  b.copyToHost(back, { stream: s });
  await s.synchronized();
  assert.deepEqual(back.view(), data);
  // A registered (pinned in place) JavaScript buffer is a HostBuffer too.
  const js = new Uint8Array(n);
  const reg = HostBuffer.register(js);
  b.copyToHost(reg, { stream: s });
  s.synchronize();
  assert.deepEqual(js, data);
  assert.deepEqual(reg.view(), data);
  reg.free();
  assert.throws(() => reg.free(), DoubleFreeError);
});

test('an asynchronous copy from or to pageable JavaScript memory is refused', () => {
  using buf = DeviceBuffer.allocate(64);
  using s = Stream.create();
  assert.throws(() => buf.copyFromHost(new Uint8Array(64), { stream: s }), /HostBuffer/);
  assert.throws(() => buf.copyFromHost(new Uint8Array(64), { stream: s }), TypeError);
  assert.throws(() => buf.copyToHost(new ArrayBuffer(64), { stream: s }), TypeError);
  assert.throws(() => buf.copyToHost(Buffer.alloc(64), { stream: Stream.default() }), TypeError);
});

test('device to device copies, sync and async, with offsets', () => {
  const data = randomBytes(1000, 7);
  using a = DeviceBuffer.allocate(1000);
  using b = DeviceBuffer.allocate(1200);
  a.copyFromHost(data);
  b.memset(0);
  b.copyFrom(a, { offset: 100, srcOffset: 10, bytes: 500 });
  const out = b.copyToHost(new Uint8Array(1200));
  assert.deepEqual(out.subarray(100, 600), data.subarray(10, 510));
  assert.equal(out[99], 0);
  assert.equal(out[600], 0);
  b.copyFrom(a);
  assert.deepEqual(b.copyToHost(new Uint8Array(1000), { bytes: 1000 }), data);
  // A larger source does not fit a smaller destination unless bytes says so.
  assert.throws(() => a.copyFrom(b), RangeError);
  a.copyFrom(b, { bytes: 1000 });
});

test('peer copies between two devices', { skip: Device.count() < 2 ? 'needs two devices' : false }, async () => {
  const other = Device.get(1);
  const data = randomBytes(4096, 9);
  using a = DeviceBuffer.allocate(4096, { device: 0 });
  using b = DeviceBuffer.allocate(4096, { device: other });
  assert.equal(b.device, other);
  a.copyFromHost(data);
  b.copyFrom(a);
  assert.deepEqual(b.copyToHost(new Uint8Array(4096)), data);
  using s = Stream.create({ device: other });
  a.memset(0);
  a.copyFrom(b, { stream: s });
  await s.synchronized();
  assert.deepEqual(a.copyToHost(new Uint8Array(4096)), data);
});

test('memset of 8, 16 and 32-bit patterns, whole and in part, sync and async', async () => {
  using buf = DeviceBuffer.allocate(256);
  buf.memset(0xab);
  assert.ok(buf.copyToHost(new Uint8Array(256)).every((x) => x === 0xab));
  buf.memset(0x1234, { elementBytes: 2 });
  assert.ok(buf.copyToHost(new Uint16Array(128)).every((x) => x === 0x1234));
  buf.memset(0xdeadbeef, { elementBytes: 4 });
  assert.ok(buf.copyToHost(new Uint32Array(64)).every((x) => x === 0xdeadbeef));
  buf.memset(-1, { elementBytes: 4, offset: 16, count: 2 });
  const words = buf.copyToHost(new Uint32Array(64));
  assert.equal(words[3], 0xdeadbeef);
  assert.equal(words[4], 0xffffffff);
  assert.equal(words[5], 0xffffffff);
  assert.equal(words[6], 0xdeadbeef);
  using s = Stream.create();
  buf.memset(7, { stream: s, offset: 255, count: 1 });
  await s.synchronized();
  assert.equal(buf.copyToHost(new Uint8Array(256))[255], 7);
  // Bad fills.
  assert.throws(() => buf.memset(256), RangeError);
  assert.throws(() => buf.memset(1.5), RangeError);
  assert.throws(() => buf.memset('1' as unknown as number), TypeError);
  assert.throws(() => buf.memset(0, { elementBytes: 3 as 4 }), RangeError);
  assert.throws(() => buf.memset(0, { elementBytes: 4, offset: 2 }), RangeError);
  assert.throws(() => buf.memset(0, { offset: 257 }), RangeError);
  assert.throws(() => buf.memset(0, { offset: 250, count: 7 }), RangeError);
  using odd = DeviceBuffer.allocate(10);
  assert.throws(() => odd.memset(0, { elementBytes: 4 }), RangeError);
  odd.memset(0, { elementBytes: 4, count: 2 });
});

test('pitched 2D allocation round trip with a padded host layout', () => {
  const width = 100;
  const height = 37;
  using p = DeviceBuffer.allocatePitched(width, height, { elementBytes: 4 });
  assert.ok(p instanceof PitchedDeviceBuffer);
  assert.ok(p.pitch >= width);
  assert.equal(p.byteLength, p.pitch * height);
  assert.equal(p.widthBytes, width);
  assert.equal(p.height, height);
  const hostPitch = 128;
  const src = randomBytes(hostPitch * height, 3);
  p.copy2DFromHost(src, { hostPitch });
  const dst = p.copy2DToHost(new Uint8Array(width * height));
  for (let y = 0; y < height; y++) {
    assert.deepEqual(dst.subarray(y * width, (y + 1) * width), src.subarray(y * hostPitch, y * hostPitch + width));
  }
  using q = DeviceBuffer.allocatePitched(width, height);
  q.copy2DFrom(p);
  assert.deepEqual(q.copy2DToHost(new Uint8Array(width * height)), dst);
  // A pinned host side allows a stream copy.
  using h = HostBuffer.allocate(width * height);
  using s = Stream.create();
  q.copy2DToHost(h, { stream: s });
  s.synchronize();
  assert.deepEqual(h.view(), dst);
  // Checks: host pitch below the width, regions that do not fit, async from JavaScript memory.
  assert.throws(() => p.copy2DFromHost(src, { hostPitch: width - 1 }), RangeError);
  assert.throws(() => p.copy2DFromHost(new Uint8Array(width * height - 1)), RangeError);
  assert.throws(() => p.copy2DToHost(new Uint8Array(width * height), { hostOffset: 1 }), RangeError);
  assert.throws(() => p.copy2DFromHost(src, { widthBytes: width + 1 }), RangeError);
  assert.throws(() => p.copy2DFromHost(src, { height: height + 1 }), RangeError);
  assert.throws(() => p.copy2DFromHost(src, { hostPitch, stream: s }), TypeError);
  using flat = DeviceBuffer.allocate(4);
  assert.throws(() => p.copy2DFrom(flat as PitchedDeviceBuffer), TypeError);
  assert.throws(() => DeviceBuffer.allocatePitched(0, 1), RangeError);
  assert.throws(() => DeviceBuffer.allocatePitched(4, 1.5), RangeError);
  assert.throws(() => DeviceBuffer.allocatePitched(4, 4, { elementBytes: 2 as 4 }), RangeError);
});

test('every buffer remembers its resource, stream and size', () => {
  const mr = new CudaResource(device);
  using s = Stream.create();
  using buf = DeviceBuffer.allocate(1000, { resource: mr, stream: s });
  assert.equal(buf.resource, mr);
  assert.equal(buf.stream, s);
  assert.equal(buf.byteLength, 1000);
  assert.equal(buf.device, device);
  assert.equal(buf.ptr % mr.alignment, 0);
  assert.match(String(buf), /1000 bytes/);
  using def = DeviceBuffer.allocate(10);
  assert.equal(def.stream.handle, 0);
  assert.equal(def.resource, getCurrentResource(device));
  assert.throws(() => DeviceBuffer.allocate(16, { resource: new PinnedHostResource() }), TypeError);
  assert.throws(() => DeviceBuffer.allocate(16, { resource: {} as CudaResource }), TypeError);
});

test('using-declarations free buffers at the end of the scope', () => {
  // Several times the driver's slack, so that memory not given back shows on a GPU too.
  const bytes = 4 * FREE_MEMORY_SLACK + (1 << 20);
  // cuMemAlloc/cuMemFree, so that the driver's view of the address shows the free (the default
  // resource is a pool that keeps the address mapped for reuse).
  const driverMemory = new CudaResource(device);
  const before = used();
  let kept: DeviceBuffer | undefined;
  let address = 0;
  {
    using buf = DeviceBuffer.allocate(bytes, { resource: driverMemory });
    kept = buf;
    address = buf.ptr;
    assert.ok(used() - before >= bytes - FREE_MEMORY_SLACK, 'the allocation shows in used memory');
  }
  assert.equal(kept.freed, true);
  // The driver no longer knows the address (exact on both backends), and the memory is back.
  assert.equal(getBackend().pointerGetAttributes(address).memoryType, 0, 'the driver freed the allocation');
  assertMemoryReturned(before, used(), 'the using-declaration gave the memory back');
  assert.throws(() => kept.ptr, UseAfterFreeError);
});

test('freed buffers and double frees are typed errors', () => {
  const buf = DeviceBuffer.allocate(64);
  const host = HostBuffer.allocate(64);
  const managed = ManagedBuffer.allocate(64);
  buf.free();
  host.free();
  managed.free();
  for (const b of [buf, host, managed]) {
    assert.throws(() => b.free(), DoubleFreeError);
    assert.throws(() => b.ptr, UseAfterFreeError);
    b[Symbol.dispose]();
  }
  assert.throws(() => buf.copyFromHost(new Uint8Array(64)), UseAfterFreeError);
  assert.throws(() => buf.copyToHost(new Uint8Array(64)), UseAfterFreeError);
  assert.throws(() => buf.memset(0), UseAfterFreeError);
  assert.throws(() => host.view(), UseAfterFreeError);
  assert.throws(() => managed.view(), UseAfterFreeError);
  using live = DeviceBuffer.allocate(64);
  assert.throws(() => live.copyFrom(buf), UseAfterFreeError);
  assert.throws(() => live.copyFromHost(host), UseAfterFreeError);
  assert.throws(() => managed.prefetch(device), UseAfterFreeError);
});

test('bad sizes are typed errors before any allocation', () => {
  for (const [bytes, type] of [
    [-1, RangeError],
    [0, RangeError],
    [1.5, RangeError],
    [Number.NaN, RangeError],
    [Number.POSITIVE_INFINITY, RangeError],
    ['eight', RangeError],
    ['1.5', RangeError],
    ['0', RangeError],
    [8n, TypeError],
    [undefined, TypeError],
    [2 ** 60, RangeError],
  ] as const) {
    throwsAndLeavesNothing(() => DeviceBuffer.allocate(bytes as number), type);
    throwsAndLeavesNothing(() => HostBuffer.allocate(bytes as number), type);
    throwsAndLeavesNothing(() => ManagedBuffer.allocate(bytes as number), type);
  }
});

test('a request larger than the device is OutOfMemoryError and leaves nothing allocated', () => {
  const total = device.info.totalMemory;
  throwsAndLeavesNothing(() => DeviceBuffer.allocate(total + 1), OutOfMemoryError);
  try {
    DeviceBuffer.allocate(total + 4096);
    assert.fail('expected OutOfMemoryError');
  } catch (error) {
    assert.ok(error instanceof OutOfMemoryError);
    assert.equal(error.requestedBytes, total + 4096);
    assert.equal(error.resource, getCurrentResource(device).describe());
  }
  throwsAndLeavesNothing(() => DeviceBuffer.allocatePitched(total, 2), OutOfMemoryError);
});

test('offsets and lengths past the end are RangeErrors and copy nothing', () => {
  using buf = DeviceBuffer.allocate(100);
  buf.memset(1);
  const src = new Uint8Array(100).fill(9);
  assert.throws(() => buf.copyFromHost(src, { offset: 101 }), RangeError);
  assert.throws(() => buf.copyFromHost(src, { offset: 1 }), RangeError);
  assert.throws(() => buf.copyFromHost(src, { srcOffset: 101 }), RangeError);
  assert.throws(() => buf.copyFromHost(src, { bytes: 101 }), RangeError);
  assert.throws(() => buf.copyFromHost(new Uint8Array(101)), RangeError);
  assert.throws(() => buf.copyFromHost(src, { offset: -1 }), RangeError);
  assert.throws(() => buf.copyFromHost(src, { offset: 0.5 }), RangeError);
  assert.throws(() => buf.copyFromHost(src, { bytes: Number.NaN }), RangeError);
  assert.throws(() => buf.copyToHost(new Uint8Array(99)), RangeError);
  assert.throws(() => buf.copyToHost(new Uint8Array(100), { offset: 1, bytes: 100 }), RangeError);
  assert.throws(() => buf.copyToHost(new Uint8Array(100), { dstOffset: 1 }), RangeError);
  assert.ok(
    buf.copyToHost(new Uint8Array(100)).every((x) => x === 1),
    'nothing was copied',
  );
  buf.copyFromHost(src, { offset: 100, bytes: 0 });
});

test('wrong types are TypeErrors', () => {
  using buf = DeviceBuffer.allocate(16);
  assert.throws(() => buf.copyFromHost([1, 2, 3] as unknown as Uint8Array), TypeError);
  assert.throws(() => buf.copyFromHost('abc' as unknown as Uint8Array), TypeError);
  assert.throws(() => buf.copyToHost({} as Uint8Array), TypeError);
  assert.throws(() => buf.copyFrom(new Uint8Array(16) as unknown as DeviceBuffer), TypeError);
  assert.throws(() => buf.copyFromHost(new Uint8Array(16), { stream: 0 as unknown as Stream }), TypeError);
  assert.throws(() => buf.copyFromHost(new Uint8Array(16), null as unknown as object), TypeError);
  assert.throws(() => DeviceBuffer.allocate(16, { device: 'gpu' as unknown as number }), TypeError);
  assert.throws(() => DeviceBuffer.allocate(16, { device: 99 }), RangeError);
  assert.throws(() => DeviceBuffer.allocate(16, { stream: {} as Stream }), TypeError);
  assert.throws(() => HostBuffer.allocate(16, { mapped: 'yes' as unknown as boolean }), TypeError);
  assert.throws(() => HostBuffer.register(new Array(4) as unknown as Uint8Array), TypeError);
  assert.throws(() => HostBuffer.register(new Uint8Array(0)), RangeError);
});

test('HostBuffer: flags, views of every type, devicePtr only when mapped', () => {
  using h = HostBuffer.allocate(4096);
  assert.equal(h.mapped, false);
  assert.equal(h.ptr % 256, 0);
  assert.ok(h.resource instanceof PinnedHostResource);
  const f = h.view(Float32Array);
  assert.equal(f.length, 1024);
  f[1] = 1.5;
  assert.equal(h.view(Float32Array)[1], 1.5);
  assert.equal(h.view(Float64Array, { byteOffset: 8, length: 2 }).length, 2);
  assert.throws(() => h.view(Float32Array, { byteOffset: 2 }), RangeError);
  assert.throws(() => h.view(Uint8Array, { length: 4097 }), RangeError);
  assert.throws(() => h.view(Object as unknown as Uint8ArrayConstructor), TypeError);
  assert.throws(() => h.devicePtr, VramStateError);
  using m = HostBuffer.allocate(4096, { mapped: true, portable: true });
  assert.equal(m.mapped, true);
  assert.equal(typeof m.devicePtr, 'number');
  assert.throws(() => HostBuffer.allocate(16, { resource: new PinnedHostResource(), mapped: true }), TypeError);
  using r = HostBuffer.allocate(16, { resource: new PinnedHostResource({ mapped: true }) });
  assert.equal(r.mapped, true);
});

test('a view of write-combined memory warns once (VRAM_WRITE_COMBINED_READ)', async () => {
  const warnings = await captureWarnings(() => {
    using wc = HostBuffer.allocate(1024, { writeCombined: true });
    assert.equal(wc.writeCombined, true);
    wc.view().fill(3);
    wc.view();
    using d = DeviceBuffer.allocate(1024);
    d.copyFromHost(wc);
    assert.ok(d.copyToHost(new Uint8Array(1024)).every((x) => x === 3));
  });
  assert.deepEqual(
    warnings.filter((c) => c === 'VRAM_WRITE_COMBINED_READ'),
    ['VRAM_WRITE_COMBINED_READ'],
  );
});

test('ManagedBuffer: host view, copies, prefetch and advice', async () => {
  using m = ManagedBuffer.allocate(4096);
  assert.equal(m.ptr % 256, 0);
  const v = m.view(Uint32Array);
  v.fill(0x01020304);
  using s = Stream.create();
  m.prefetch(device, s);
  m.advise('read-mostly');
  m.advise('read-mostly', undefined, true);
  m.advise('preferred-location', device);
  m.advise('accessed-by', device);
  m.advise('preferred-location', 'host', true);
  await s.synchronized();
  using d = DeviceBuffer.allocate(4096);
  d.copyFrom(m);
  assert.ok(d.copyToHost(new Uint32Array(1024)).every((x) => x === 0x01020304));
  m.memset(0);
  m.copyFromHost(new Uint8Array([9, 8, 7]), { offset: 1 });
  m.prefetch('host', s);
  await s.synchronized();
  assert.deepEqual([...m.view().subarray(0, 5)], [0, 9, 8, 7, 0]);
  assert.throws(() => m.advise('often' as 'read-mostly', device), RangeError);
  assert.throws(() => m.advise('preferred-location'), TypeError);
  assert.throws(() => m.prefetch('gpu' as 'host'), TypeError);
  assert.throws(() => m.prefetch(device, undefined, { offset: 4097 }), RangeError);
  using h = ManagedBuffer.allocate(64, { attach: 'host' });
  assert.throws(() => ManagedBuffer.allocate(64, { attach: 'device' as 'host' }), RangeError);
  void h;
});

test('setBackend refuses another backend once a Device exists, and accepts the one in use', () => {
  const inUse = device.backend;
  assert.equal(getBackend(), inUse);
  // Devices, streams and buffers already hold this backend's contexts, handles and addresses.
  assert.throws(() => setBackend(new EmulatedBackend()), VramStateError);
  assert.throws(() => setBackend(new EmulatedBackend()), /before the first Device\.get/);
  assert.equal(getBackend(), inUse, 'a refused setBackend changes nothing');
  setBackend(inUse);
  assert.equal(getBackend(), inUse);
  assert.throws(() => setBackend(null as unknown as Backend), TypeError);
  assert.throws(() => setBackend('cuda' as unknown as Backend), TypeError);
});

test("buffers, copies and fills go through the owning device's backend", () => {
  using d = DeviceBuffer.allocate(64);
  using h = HostBuffer.allocate(64);
  using m = ManagedBuffer.allocate(64);
  for (const b of [d, h, m]) assert.equal(b.backend, device.backend);
  // Count the calls on the device's backend: every operation below must go through it.
  const backend = device.backend;
  const calls: string[] = [];
  const target = backend as unknown as Record<string, unknown>;
  const names = ['memcpyFromHost', 'memcpyToHost', 'memcpy', 'memset', 'hostView'] as const;
  const saved = names.map((name) => [name, Object.getOwnPropertyDescriptor(backend, name)] as const);
  for (const name of names) {
    const original = backend[name] as (...args: unknown[]) => unknown;
    target[name] = (...args: unknown[]): unknown => {
      calls.push(name);
      return original.apply(backend, args);
    };
  }
  try {
    d.copyFromHost(new Uint8Array(64).fill(3));
    d.memset(4, { count: 8 });
    d.copyToHost(h);
    m.copyFrom(d);
    m.copyToHost(new Uint8Array(64));
    assert.equal(h.view()[0], 4);
    assert.equal(m.view()[63], 3);
  } finally {
    for (const [name, descriptor] of saved) {
      if (descriptor === undefined) delete target[name];
      else Object.defineProperty(backend, name, descriptor);
    }
  }
  assert.deepEqual(
    calls.filter((c) => c !== 'hostView'),
    ['memcpyFromHost', 'memset', 'memcpy', 'memcpy', 'memcpyToHost'],
  );
  assert.ok(calls.includes('hostView'));
});

const gc = forceGc;

test(
  'the FinalizationRegistry backstop frees dropped buffers and counts them as leaks',
  { skip: gc === undefined ? 'no way to force garbage collection here (run node with --expose-gc)' : false },
  async () => {
    const collect = gc as () => void;
    // Several times the driver's slack, so that memory the backstop did not free shows on a GPU too.
    const deviceBytes = 4 * FREE_MEMORY_SLACK + (1 << 20);
    // cuMemAlloc/cuMemFree, so that the driver's view of the address shows the backstop's free.
    const driverMemory = new CudaResource(device);
    const before = used();
    const stats = leakStatistics();
    const seen: LeakRecord[] = [];
    const off = onLeak((leak) => seen.push(leak));
    captureAllocationStacks(true);
    (() => {
      DeviceBuffer.allocate(deviceBytes, { resource: driverMemory });
      HostBuffer.allocate(4096);
    })();
    captureAllocationStacks(false);
    // An explicitly freed buffer is never counted.
    DeviceBuffer.allocate(512).free();
    for (let i = 0; i < 50 && leakStatistics().count < stats.count + 2; i++) {
      collect();
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    off();
    const after = leakStatistics();
    assert.equal(after.count, stats.count + 2);
    assert.equal(after.bytes, stats.bytes + deviceBytes + 4096);
    assert.deepEqual(
      seen.map((l) => l.releaseError),
      [undefined, undefined],
      'the backstop returned both without an error',
    );
    const leaked = seen.find((l) => l.kind === 'DeviceBuffer')!;
    assert.equal(getBackend().pointerGetAttributes(leaked.ptr).memoryType, 0, 'the driver freed the leaked allocation');
    assertMemoryReturned(before, used(), 'the leaked device memory went back');
    assert.deepEqual(seen.map((l) => l.kind).sort(), ['DeviceBuffer', 'HostBuffer']);
    assert.ok(seen.every((l) => typeof l.stack === 'string' && l.stack.includes('buffers.test')));
  },
);

test('mapped host memory is visible to the device', gpuOnly, () => {
  using h = HostBuffer.allocate(1 << 16, { mapped: true });
  const data = randomBytes(1 << 16, 11);
  h.view().set(data);
  using d = DeviceBuffer.allocate(1 << 16);
  getBackend().memcpy(d.ptr, h.devicePtr, 1 << 16);
  assert.deepEqual(d.copyToHost(new Uint8Array(1 << 16)), data);
});

test('a large write-combined pinned allocation round-trips to the device', gpuOnly, () => {
  const n = 64 << 20;
  using wc = HostBuffer.allocate(n, { writeCombined: true, portable: true });
  const data = randomBytes(n, 5);
  wc.view().set(data);
  using d = DeviceBuffer.allocate(n);
  d.copyFromHost(wc);
  assert.deepEqual(d.copyToHost(new Uint8Array(n)), data);
});

test('managed memory prefetched to the device and back keeps its contents', gpuOnly, async () => {
  if (!device.info.concurrentManagedAccess) return;
  const n = 32 << 20;
  using m = ManagedBuffer.allocate(n);
  const data = randomBytes(n, 13);
  m.view().set(data);
  using s = Stream.create();
  m.prefetch(device, s);
  await s.synchronized();
  m.memset(0x5a, { offset: 0, count: 16, stream: s });
  m.prefetch('host', s);
  await s.synchronized();
  const v = m.view();
  assert.ok(v.subarray(0, 16).every((x) => x === 0x5a));
  assert.deepEqual(v.subarray(16), data.subarray(16));
});
