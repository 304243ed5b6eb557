/**
 * HostArray: pinned arrays with their flags, zero-copy typed views (contiguous and strided),
 * mapped memory viewed from the device, the one-time write-combined warning, copies to and from
 * DeviceArrays (every dtype, strided on either side, sync and ordered on a real stream), and bad
 * input as typed errors that leave nothing allocated. Runs on the emulated backend and, unchanged,
 * on a GPU.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { assertMemoryReturned, captureWarnings, deviceMemoryUsed, onGpu } from '../helpers.js';
import { setBackend } from '../../src/backend/select.js';
import { EmulatedBackend } from '../../src/backend/emulated/emulated-backend.js';
import { Device } from '../../src/device.js';
import { Stream } from '../../src/stream.js';
import { HostBuffer } from '../../src/buffer/host-buffer.js';
import { bytesOf } from '../../src/buffer/copy-planning.js';
import { PinnedHostPool } from '../../src/resource/suballoc/pinned-host-pool.js';
import { DoubleFreeError, UseAfterFreeError, VramStateError } from '../../src/errors.js';
import { dtypeOf, dtypes, type DTypeName } from '../../src/array/dtype.js';
import { hostView } from '../../src/array/host-data.js';
import { DeviceArray } from '../../src/array/device-array.js';
import { HostArray } from '../../src/array/host-array.js';

if (!onGpu) setBackend(new EmulatedBackend({ deviceCount: 1, capacityBytes: 1 << 30 }));

const device = Device.get(0);

/** Random host data of `count` elements, never all zero (bool: 0/1). */
function randomData(name: DTypeName, count: number, seed: number): ReturnType<typeof hostView> {
  const dt = dtypeOf(name);
  const bytes = new Uint8Array(count * dt.byteSize);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < bytes.length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    bytes[i] = dt.component === 'bool' ? x & 1 : x & 0xff;
  }
  if (bytes.length > 0) bytes[0] = 1;
  return hostView(dt, bytes);
}

test("a view of write-combined memory warns once (HostBuffer's VRAM_WRITE_COMBINED_READ)", async () => {
  let beforeRead: string[] = [];
  const warnings = await captureWarnings(async () => {
    using wc = HostArray.empty([256], 'float32', { writeCombined: true });
    assert.equal(wc.writeCombined, true);
    using d = DeviceArray.full([256], 2.5, 'float32');
    beforeRead = await captureWarnings(() => {
      d.copyTo(wc); // the DMA writes it: no JavaScript read, no warning yet
    });
    assert.ok(wc.toHost().every((x) => x === 2.5));
    assert.equal(wc.data[3], 2.5);
    wc.slice([0, null, 2]).toArray();
  });
  assert.deepEqual(beforeRead, []);
  assert.deepEqual(
    warnings.filter((c) => c === 'VRAM_WRITE_COMBINED_READ'),
    ['VRAM_WRITE_COMBINED_READ'],
  );
});

test('empty, zeros, emptyLike, zerosLike and from: flags, shapes, dtypes; no device memory', () => {
  const before = deviceMemoryUsed(device);
  using a = HostArray.zeros([3, 4], 'int16', { portable: true });
  assert.equal(a.portable, true);
  assert.equal(a.mapped, false);
  assert.equal(a.writeCombined, false);
  assert.equal(a.ownsMemory, true);
  assert.ok(a.buffer instanceof HostBuffer);
  assert.deepEqual(a.toArray(), [
    [0, 0, 0, 0],
    [0, 0, 0, 0],
    [0, 0, 0, 0],
  ]);
  using d = DeviceArray.empty([5, 2], 'float3');
  const deviceBytes = deviceMemoryUsed(device) - before;
  using like = HostArray.emptyLike(d, { mapped: true });
  assert.deepEqual(like.shape, [5, 2]);
  assert.equal(like.dtype, dtypes.float3);
  assert.equal(like.mapped, true);
  using z = HostArray.zerosLike(a);
  assert.deepEqual([...z.data], new Array(12).fill(0));
  using f = HostArray.from(new Float64Array([1, 2, 3, 4, 5, 6]), { shape: [3, 2] });
  const typed: HostArray<'float64'> = f;
  assert.deepEqual(typed.T.toArray(), [
    [1, 3, 5],
    [2, 4, 6],
  ]);
  using n = HostArray.from(
    [
      [1, 2, 3],
      [4, 5, 6],
    ],
    { dtype: 'float3' },
  );
  assert.deepEqual(n.shape, [2]);
  assert.deepEqual(n.data, new Float32Array([1, 2, 3, 4, 5, 6]));
  using e = HostArray.empty([0], 'uint8');
  assert.equal(e.data.length, 0);
  const pool = new PinnedHostPool();
  try {
    using s = Stream.create({ device });
    {
      using p = HostArray.empty([1000], 'float32', { resource: pool, stream: s });
      assert.equal(p.buffer.resource, pool);
    }
  } finally {
    pool.destroy();
  }
  assert.match(String(like), /HostArray<float3>\(5, 2\), mapped/);
  assertMemoryReturned(before + deviceBytes, deviceMemoryUsed(device), 'host arrays take no device memory');
});

test("order F: pagelocked_empty(shape, dtype, order='F') is column-major; the _like forms keep the source's order", () => {
  using f = HostArray.empty([2, 3], 'float32', { order: 'F' });
  assert.deepEqual([...f.strides], [1, 2], 'the first index runs fastest');
  assert.equal(f.isContiguous, false);
  f.data.set([0, 10, 1, 11, 2, 12]); // memory order: column by column
  assert.equal(f.data[f.elementIndex(1, 2)], 12);
  using d = DeviceArray.empty([2, 3], 'float32');
  d.copyFrom(f);
  assert.deepEqual([...d.toHost()], [0, 1, 2, 10, 11, 12], 'copied by index into a row-major array');
  using z = HostArray.zeros([4, 5], 'int32', { order: 'F' });
  assert.deepEqual([...z.strides], [1, 4]);
  assert.ok(z.data.every((v) => v === 0));
  using kept = HostArray.emptyLike(f);
  assert.deepEqual([...kept.strides], [1, 2], 'emptyLike keeps F');
  using keptZeros = HostArray.zerosLike(f.transpose());
  assert.deepEqual([...keptZeros.strides], [2, 1], 'the transpose of an F array is C, and zerosLike keeps that');
  using asC = HostArray.emptyLike(f, { order: 'C' });
  assert.deepEqual([...asC.strides], [3, 1]);
  using c = HostArray.empty([2, 3]);
  using likeC = HostArray.emptyLike(c, { order: 'F' });
  assert.deepEqual([...likeC.strides], [1, 2]);
  assert.throws(() => HostArray.empty([2, 3], 'float32', { order: 'A' as 'C' }), RangeError);
  assert.throws(() => HostArray.emptyLike(c, { order: 'Z' as 'K' }), RangeError);
});

test('data is a zero-copy TypedArray of the dtype (components flat); strided arrays use view() and elementIndex', () => {
  using h = HostArray.empty([4, 5], 'float3');
  assert.ok(h.data instanceof Float32Array);
  assert.equal(h.data.length, 60);
  h.data.forEach((_, i, v) => {
    v[i] = i;
  });
  assert.deepEqual(h.toArray()[1], [
    [15, 16, 17],
    [18, 19, 20],
    [21, 22, 23],
    [24, 25, 26],
    [27, 28, 29],
  ]);
  const col = h.slice(null, [4, null, -2]);
  assert.throws(() => col.data, VramStateError);
  const v = col.view();
  assert.equal(v.buffer, h.data.buffer, 'the same pinned memory');
  const nested = col.toArray() as number[][][];
  for (let i = 0; i < col.shape[0]!; i++) {
    for (let j = 0; j < col.shape[1]!; j++) {
      const at = col.elementIndex(i, j);
      assert.deepEqual([...v.subarray(at, at + 3)], nested[i]![j], `element (${i}, ${j})`);
    }
  }
  // Writes through a strided view land in the array.
  v[col.elementIndex(1, 0)] = -1;
  assert.equal(h.data[(1 * 5 + 4) * 3], -1);
  // A contiguous view's data is exactly its elements.
  assert.deepEqual(h.slice(2).data, h.data.subarray(30, 45));
  assert.throws(() => col.elementIndex(0), RangeError);
  assert.throws(() => col.elementIndex(4, 0), RangeError);
  assert.throws(() => col.elementIndex(0, 0.5), RangeError);
  assert.throws(() => col.elementIndex(0, '1' as unknown as number), TypeError);
});

test('every dtype round-trips HostArray -> DeviceArray -> HostArray, sync and on a stream', async () => {
  using s = Stream.create({ device });
  for (const name of Object.keys(dtypes) as DTypeName[]) {
    for (const n of [1, 31, 1025]) {
      const data = randomData(name, n, n + name.length);
      using h = HostArray.from(data as never, { dtype: name });
      using d = DeviceArray.emptyLike(h);
      h.copyTo(d);
      using back = HostArray.emptyLike(d);
      back.copyFrom(d);
      assert.deepEqual(bytesOf(back.data), bytesOf(data), `${name} x ${n}`);
      using again = HostArray.zerosLike(d);
      await h.copyToAsync(d, { stream: s });
      await again.copyFromAsync(d, { stream: s });
      assert.deepEqual(bytesOf(again.toHost()), bytesOf(data), `${name} x ${n} async`);
    }
  }
});

test('a large odd-sized pinned array (3 * 2^20 + 7 float32) goes both ways on a stream', async () => {
  using s = Stream.create({ device });
  const n = 3 * 2 ** 20 + 7;
  using h = HostArray.from(randomData('float32', n, 7) as Float32Array);
  using d = DeviceArray.empty([n], 'float32', { stream: s });
  using back = HostArray.empty([n], 'float32');
  const up = h.copyToAsync(d, { stream: s });
  const down = back.copyFromAsync(d, { stream: s }); // queued after the upload
  await Promise.all([up, down]);
  assert.deepEqual(back.data, h.data);
});

test('strided HostArrays to and from strided DeviceArrays match the same copy done on the host', async () => {
  using s = Stream.create({ device });
  const shapes = fc.tuple(fc.integer({ min: 1, max: 7 }), fc.integer({ min: 1, max: 7 }), fc.integer({ min: 1, max: 4 }));
  await fc.assert(
    fc.asyncProperty(
      shapes,
      fc.constantFrom<DTypeName>('int32', 'uchar3', 'float64'),
      fc.boolean(),
      fc.integer(),
      async ([rows, cols, step], dtype, async, seed) => {
        using h = HostArray.from(randomData(dtype, rows * cols * step, seed) as never, { dtype, shape: [rows, cols * step] });
        using d = DeviceArray.from(randomData(dtype, cols * rows, seed + 1) as never, { dtype, shape: [cols, rows] });
        // A stepped, reversed host view, and a transposed device view of the same shape.
        const hv = h.slice(null, { start: -1, step: -step });
        const dv = d.T;
        const expected = hv.toHost();
        if (async) await hv.copyToAsync(dv, { stream: s });
        else hv.copyTo(dv);
        assert.deepEqual(bytesOf(dv.toHost()), bytesOf(expected), 'host -> device');
        using other = HostArray.zeros([cols * step, rows], dtype);
        const ov = other.slice([0, null, step]).T;
        if (async) await ov.copyFromAsync(dv, { stream: s });
        else ov.copyFrom(dv);
        assert.deepEqual(bytesOf(ov.toHost()), bytesOf(expected), 'device -> host');
        if (step > 1)
          assert.ok(
            other
              .slice(1)
              .toHost()
              .every((x) => Number(x) === 0),
            'rows between untouched',
          );
      },
    ),
    { numRuns: 80 },
  );
});

test('mapped memory: deviceView() is a DeviceArray over the same bytes', () => {
  using h = HostArray.zeros([64, 4], 'int32', { mapped: true });
  const dv = h.deviceView();
  assert.ok(dv instanceof DeviceArray);
  assert.equal(dv.ownsMemory, false);
  assert.equal(dv.ptr, h.buffer.devicePtr);
  assert.deepEqual(dv.shape, [64, 4]);
  h.data.forEach((_, i, v) => {
    v[i] = i * 3;
  });
  // A device copy reads the host's writes in place ...
  using d = DeviceArray.emptyLike(dv);
  d.copyFrom(dv);
  assert.deepEqual(d.toHost(), h.data);
  // ... and device writes into the view are visible to the host without a copy back.
  using ones = DeviceArray.full([4, 64], 1, 'int32');
  h.T.deviceView().copyFrom(ones);
  assert.ok(h.data.every((x) => x === 1));
  const col = h.slice(null, 2).deviceView();
  assert.equal(col.ptr, h.buffer.devicePtr + 8);
  assert.deepEqual(col.strides, [4]);
  using plain = HostArray.zeros([4], 'int32');
  assert.throws(() => plain.deviceView(), VramStateError);
  assert.throws(() => dv.free(), VramStateError, 'a device view does not own the memory');
});

test('registered JavaScript memory as a HostArray, copied on a stream', async () => {
  const js = new Float32Array(1000).map((_, i) => i / 8);
  const reg = HostBuffer.register(js);
  try {
    const h = HostArray.fromBuffer(reg, { dtype: 'float32', shape: [10, 100] });
    assert.equal(h.ownsMemory, false);
    using s = Stream.create({ device });
    using d = DeviceArray.emptyLike(h);
    await d.copyFromAsync(h, { stream: s });
    assert.deepEqual(d.slice(9).toHost(), js.subarray(900));
    assert.throws(() => h.free(), VramStateError);
    assert.throws(() => HostArray.fromBuffer(reg, { dtype: 'float32', shape: [10, 100], strides: [101, 1] }), RangeError);
    assert.throws(() => HostArray.fromBuffer(reg, { dtype: 'float64', byteOffset: 4 }), RangeError);
    assert.throws(() => HostArray.fromBuffer(new Uint8Array(4) as unknown as HostBuffer, { dtype: 'uint8' }), TypeError);
  } finally {
    reg.free();
  }
});

test('bad input is a typed error and leaves nothing allocated', () => {
  using d = DeviceArray.zeros([4, 4], 'float32');
  using wrong = DeviceArray.zeros([4, 4], 'int32');
  const before = deviceMemoryUsed(device);
  assert.throws(() => HostArray.from(new Int32Array(4) as unknown as Float32Array, { dtype: 'float32' }), TypeError);
  assert.throws(() => HostArray.from(new Float32Array(6), { shape: [4, 2] }), RangeError);
  assert.throws(() => HostArray.from(new Float32Array(7), { dtype: 'float3' }), RangeError);
  for (const dim of [-1, 2.5, Number.NaN]) {
    assert.throws(() => HostArray.empty([dim], 'float32'), RangeError);
    assert.throws(() => HostArray.zeros([2, dim], 'int8'), RangeError);
  }
  assert.throws(() => HostArray.empty([4], 'float7' as DTypeName), TypeError);
  assert.throws(() => HostArray.empty([4], 'float32', { mapped: 'yes' as unknown as boolean }), TypeError);
  using h = HostArray.zeros([4, 4], 'float32');
  assert.throws(() => h.copyFrom(new Float32Array(15)), RangeError);
  assert.throws(() => h.copyFrom(d.slice(0)), RangeError);
  assert.throws(() => h.copyFrom(wrong as unknown as DeviceArray<'float32'>), TypeError);
  assert.throws(() => h.copyTo(new Float64Array(16) as unknown as Float32Array), TypeError);
  assert.throws(() => h.copyTo([] as unknown as Float32Array), TypeError);
  assert.throws(() => h.reshape(3, 5), RangeError);
  assert.throws(() => h.T.reshape(16), VramStateError);
  assert.throws(() => h.slice(4), RangeError);
  assert.throws(() => h.slice(0).free(), VramStateError);
  assertMemoryReturned(before, deviceMemoryUsed(device), 'failed operations leave no device memory behind');
});

test('async misuse rejects with typed errors', async () => {
  using h = HostArray.zeros([8], 'int32');
  using d = DeviceArray.zeros([9], 'int32');
  await assert.rejects(h.copyToAsync(d), RangeError);
  await assert.rejects(h.copyFromAsync(h as unknown as DeviceArray<'int32'>), TypeError);
  await assert.rejects(h.copyToAsync(new Int32Array(8) as unknown as DeviceArray<'int32'>), TypeError);
});

test('use after free: the array, its views and device views throw UseAfterFreeError', async () => {
  const h = HostArray.zeros([4, 4], 'float32', { mapped: true });
  const v = h.slice([0, null, 2]);
  const dv = h.deviceView();
  using d = DeviceArray.zeros([4, 4], 'float32');
  h.free();
  assert.equal(v.freed, true);
  assert.throws(() => h.free(), DoubleFreeError);
  for (const x of [h, v]) {
    assert.throws(() => x.data, UseAfterFreeError);
    assert.throws(() => x.view(), UseAfterFreeError);
    assert.throws(() => x.toHost(), UseAfterFreeError);
    assert.throws(() => x.deviceView(), UseAfterFreeError);
    assert.throws(() => x.copyFrom(new Float32Array(x.size)), UseAfterFreeError);
    assert.throws(() => x.T, UseAfterFreeError);
  }
  assert.throws(() => dv.ptr, UseAfterFreeError);
  assert.throws(() => dv.toHost(), UseAfterFreeError);
  assert.throws(() => d.copyFrom(h), UseAfterFreeError);
  assert.throws(() => d.copyTo(h), UseAfterFreeError);
  await assert.rejects(h.copyToAsync(d), UseAfterFreeError);
  await assert.rejects(d.copyToAsync(h), UseAfterFreeError);
  assert.match(String(h), /freed/);
  const buffer = HostBuffer.allocate(64);
  buffer.free();
  assert.throws(() => HostArray.fromBuffer(buffer, { dtype: 'uint8' }), UseAfterFreeError);
});
