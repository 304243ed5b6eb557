/**
 * Printing (issue 25, item 2): `console.log`/`util.inspect` of arrays, buffers, resources,
 * streams, events and devices is one readable line or a short block, never the internals;
 * `String()` is readable for each; `JSON.stringify` never throws (no circular structure) and
 * writes what the object is, not an array's data. A large array copies to the host only the
 * values it prints: counted here at the backend's device-to-host copies. Runs on both backends.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { inspect } from 'node:util';
import { getBackend } from '../../src/backend/select.js';
import type { Memcpy2D, Ptr, HostMemory } from '../../src/backend/backend.js';
import { DeviceArray } from '../../src/array/device-array.js';
import { HostArray } from '../../src/array/host-array.js';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { HostBuffer } from '../../src/buffer/host-buffer.js';
import { ManagedBuffer } from '../../src/buffer/managed-buffer.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import { ArenaResource } from '../../src/resource/suballoc/arena.js';
import { BinningResource } from '../../src/resource/suballoc/binning.js';
import { FixedSizeResource } from '../../src/resource/suballoc/fixed-size.js';
import { PinnedHostPool } from '../../src/resource/suballoc/pinned-host-pool.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';
import { ManagedResource } from '../../src/resource/upstream/managed-resource.js';
import { PinnedHostResource } from '../../src/resource/upstream/pinned-host-resource.js';
import { AsyncResource } from '../../src/resource/upstream/async-resource.js';
import { StatisticsAdaptor } from '../../src/resource/adaptors/statistics.js';
import { LimitingAdaptor } from '../../src/resource/adaptors/limiting.js';
import { TrackingAdaptor } from '../../src/resource/adaptors/tracking.js';
import type { MemoryResource } from '../../src/resource/resource.js';
import { Stream, Event } from '../../src/stream.js';
import { Device } from '../../src/device.js';

/** Lines of what `console.log` would print for `value`. */
function printed(value: unknown): string[] {
  return inspect(value).split('\n');
}

/** Asserts one line, of readable length, naming `name`, with no internals (no `[class`, no `{`). */
function assertOneLine(value: unknown, name: RegExp): string {
  const lines = printed(value);
  assert.equal(lines.length, 1, `one line: ${lines.join('\n')}`);
  assert.match(lines[0]!, name);
  assert.ok(lines[0]!.length < 200, lines[0]);
  assert.doesNotMatch(lines[0]!, /\[class|\[Object|\{/, lines[0]);
  assert.doesNotThrow(() => JSON.stringify(value));
  return lines[0]!;
}

/** Bytes the backend copies from device to host while `body` runs. */
function deviceToHostBytes(body: () => void): number {
  const backend = getBackend();
  const toHost = backend.memcpyToHost;
  const copy2D = backend.memcpy2D;
  let bytes = 0;
  backend.memcpyToHost = function (dst: HostMemory, src: Ptr, n: number): void {
    bytes += n;
    toHost.call(this, dst, src, n);
  };
  backend.memcpy2D = function (copy: Memcpy2D): void {
    bytes += copy.widthBytes * copy.height;
    copy2D.call(this, copy);
  };
  try {
    body();
  } finally {
    backend.memcpyToHost = toHost;
    backend.memcpy2D = copy2D;
  }
  return bytes;
}

test('a small array prints its header and every value, as NumPy does: one line for 1-D, a short block for 2-D', () => {
  using a = DeviceArray.from(new Float32Array([1, 2, 3.1]));
  assert.equal(inspect(a), 'DeviceArray<float32>(3,) on device 0 [1, 2, 3.1]');
  using m = DeviceArray.from(
    [
      [1, 2, 3],
      [4, 5, 6],
    ],
    { dtype: 'int32' },
  );
  assert.equal(inspect(m), 'DeviceArray<int32>(2, 3) on device 0\n[[1, 2, 3],\n [4, 5, 6]]');
  using big = DeviceArray.from(new BigInt64Array([2n ** 60n + 1n]));
  assert.match(inspect(big), /\[1152921504606846977\]$/);
  using v = DeviceArray.full([2], [1, 2, 3], 'float3');
  assert.match(inspect(v), /\[\(1, 2, 3\), \(1, 2, 3\)\]$/);
  using s = DeviceArray.full([], 0.5, 'float64');
  assert.equal(inspect(s), 'DeviceArray<float64>() on device 0 0.5');
  using e = DeviceArray.empty([0, 3]);
  assert.match(inspect(e), /\(0, 3\) on device 0 \[\]$/);
  using h = HostArray.from([0.1, 0.25]);
  assert.equal(inspect(h), 'HostArray<float32>(2,) [0.1, 0.25]');
  // Inside other objects too (console.log of a record).
  assert.match(inspect({ a }), /\{ a: DeviceArray<float32>\(3,\) on device 0 \[1, 2, 3\.1\] \}/);
  const f = DeviceArray.zeros(4);
  f.free();
  assert.equal(inspect(f), 'DeviceArray<float32>(4,) on device 0, freed');
});

test('a 10-million-element array prints its first and last 3 values and copies only those to the host', () => {
  using a = DeviceArray.zeros(10_000_000);
  a.slice([0, 3]).copyFrom(new Float32Array([1, 2, 3]));
  a.slice([-3, null]).copyFrom(new Float32Array([7, 8, 9]));
  let text = '';
  const bytes = deviceToHostBytes(() => {
    text = inspect(a);
  });
  assert.equal(text, 'DeviceArray<float32>(10000000,) on device 0 [1, 2, 3, ..., 7, 8, 9]');
  assert.equal(bytes, 6 * 4, `copied ${bytes} bytes`);
  // The counter sees every read: printing the whole array would have counted 40 MB.
  assert.equal(
    deviceToHostBytes(() => a.slice([0, 100]).toHost()),
    400,
  );
});

test('a large matrix prints a short block of 7 rows of 7 values, copying 2 reads of 3 values per printed row', () => {
  using m = DeviceArray.zeros([2000, 3000], 'float64');
  let text = '';
  const bytes = deviceToHostBytes(() => {
    text = inspect(m);
  });
  const lines = text.split('\n');
  assert.equal(lines.length, 8, text);
  assert.equal(lines[1], '[[0, 0, 0, ..., 0, 0, 0],');
  assert.equal(lines[4], ' ...,');
  assert.ok(bytes <= 6 * 6 * 8, `copied ${bytes} bytes`);
});

test('JSON.stringify of an array writes its dtype, shape and device, not its data, and never throws', () => {
  using a = DeviceArray.zeros([2, 3]);
  assert.deepEqual(JSON.parse(JSON.stringify(a)), {
    type: 'DeviceArray',
    dtype: 'float32',
    shape: [2, 3],
    strides: [3, 1],
    nbytes: 24,
    device: 0,
    ownsMemory: true,
    freed: false,
  });
  assert.deepEqual(JSON.parse(JSON.stringify(a.T)).strides, [1, 3]);
  using h = HostArray.zeros(4, 'int8');
  assert.equal(JSON.parse(JSON.stringify(h)).device, undefined);
  assert.doesNotThrow(() => JSON.stringify({ arrays: [a, h] }));
});

test('buffers print one line and stringify to plain data', () => {
  using d = DeviceBuffer.allocate(1024);
  assertOneLine(d, /^DeviceBuffer\(1024 bytes on device 0\)$/);
  assert.deepEqual(JSON.parse(JSON.stringify(d)), {
    type: 'DeviceBuffer',
    byteLength: 1024,
    freed: false,
    description: 'DeviceBuffer(1024 bytes on device 0)',
  });
  using h = HostBuffer.allocate(4096);
  assertOneLine(h, /^HostBuffer\(4096 bytes, pinned/);
  using m = ManagedBuffer.allocate(256);
  assertOneLine(m, /^ManagedBuffer/);
});

test('every resource and adaptor prints one line: its description, kind, device, allocated and reserved', () => {
  const pool = new PoolResource();
  const resources: MemoryResource[] = [
    pool,
    new CudaResource(),
    new ManagedResource(),
    new PinnedHostResource(),
    new AsyncResource(),
    new ArenaResource({ size: '1M' }),
    new BinningResource(pool).addBin(4096),
    new FixedSizeResource(pool, { blocksToPreallocate: 1 }),
    new PinnedHostPool(),
    new StatisticsAdaptor(pool),
    new LimitingAdaptor(pool, '1G'),
    new TrackingAdaptor(pool),
  ];
  try {
    const ptr = pool.allocate(1 << 20);
    const line = assertOneLine(pool, /^PoolResource\(virtual, device=0\): device memory on device 0, allocated 1 MiB in 1 block, reserved \d/);
    assert.equal(String(pool), line);
    for (const r of resources) {
      assertOneLine(r, new RegExp(`^${r.constructor.name}\\(.*\\): [\\w-]+ memory on (device \\d|the host)`));
      const json = JSON.parse(JSON.stringify(r)) as { resource: string; device: number };
      assert.equal(json.resource, r.describe());
      assert.equal(json.device, r.deviceOrdinal);
    }
    pool.deallocate(ptr, 1 << 20);
  } finally {
    for (const r of resources.slice().reverse()) r.destroy();
  }
  assert.match(inspect(pool), /, destroyed$/);
});

test('streams, events and devices print one line and stringify to plain data', () => {
  using s = Stream.create();
  assertOneLine(s, /^Stream\(\d+, device 0\)$/);
  assert.equal(JSON.parse(JSON.stringify(s)).device, 0);
  assertOneLine(Stream.default(), /^Stream\(default, device 0\)$/);
  using e = Event.create();
  e.record(s);
  assertOneLine(e, /^Event\(\d+, device 0, timing, recorded\)$/);
  assert.equal(JSON.parse(JSON.stringify(e)).recorded, true);
  const device = Device.get(0);
  assertOneLine(device, /^Device\(0: .+, [\d.]+ [GM]iB, compute \d+\.\d+, backend (cuda|emulated)\)$/);
  assert.equal(JSON.parse(JSON.stringify(device)).ordinal, 0);
  assert.doesNotThrow(() => JSON.stringify({ s, e, device }));
});
