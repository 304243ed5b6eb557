/**
 * Types that keep precision (issue 25, item 7): whole-array reductions of int64 and uint64 arrays
 * come back as bigints, every bit of them; `map` and `zipWith` return arrays typed with their
 * result's dtype; `DeviceArray.recordStream` delegates to its buffer's recorded streams. The
 * annotations below are checked by the compiler (a wrong one fails `tsc`), the values at run time.
 * Runs on both backends.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DeviceArray } from '../../src/array/device-array.js';
import { Stream } from '../../src/stream.js';
import { dot, map, max, min, sum, zipWith } from '../../src/kernels/ops/index.js';
import { nvrtcAvailable } from '../../src/kernels/compile.js';
import { UseAfterFreeError } from '../../src/errors.js';
import { onGpu } from '../helpers.js';

const TWO60 = 2n ** 60n;

test('sum, min, max and dot of int64 and uint64 arrays are exact bigints (2^60 + 1 comes back as 2^60 + 1)', () => {
  using a = DeviceArray.from(new BigInt64Array([TWO60, 1n]));
  const total: bigint = sum(a);
  assert.equal(total, TWO60 + 1n);
  const lowest: bigint = min(a);
  const highest: bigint = max(a);
  assert.equal(lowest, 1n);
  assert.equal(highest, TWO60);
  using n = DeviceArray.from(new BigInt64Array([-TWO60 - 3n, 2n]));
  assert.equal(sum(n), -TWO60 - 1n);
  using u = DeviceArray.from(new BigUint64Array([2n ** 63n, 2n ** 62n + 1n]));
  const unsigned: bigint = sum(u);
  assert.equal(unsigned, 2n ** 63n + 2n ** 62n + 1n);
  using x = DeviceArray.from(new BigInt64Array([TWO60, 1n]));
  using y = DeviceArray.from(new BigInt64Array([1n, 3n]));
  const d: bigint = dot(x, y);
  assert.equal(d, TWO60 + 3n);
});

test('reductions of other dtypes stay numbers; an array of unknown dtype is typed number | bigint', () => {
  using f = DeviceArray.from(new Float32Array([1.5, 2.5]));
  const s: number = sum(f);
  assert.equal(s, 4);
  using i = DeviceArray.from(new Int32Array([7, -2]));
  assert.equal(sum(i), 5);
  const untyped: DeviceArray = i;
  const either: number | bigint = sum(untyped);
  assert.equal(typeof either, 'number');
});

test("map and zipWith return arrays typed with the result dtype: the input's, or out's", { skip: onGpu && !nvrtcAvailable() ? 'needs NVRTC' : false }, () => {
  using a = DeviceArray.from(new Float32Array([1, -2, 3]));
  using doubled: DeviceArray<'float32'> = map(a, 'x * 2');
  assert.equal(doubled.dtype.name, 'float32');
  assert.deepEqual([...doubled.toHost()], [2, -4, 6]);
  using mask = DeviceArray.empty([3], 'int8');
  const positive: DeviceArray<'int8'> = map(a, 'x > 0', { out: mask });
  assert.equal(positive, mask);
  assert.deepEqual([...positive.toHost()], [1, 0, 1]);
  using b = DeviceArray.from(new Int32Array([1, 1, 1]));
  using same: DeviceArray<'float32'> = zipWith(a, a, 'x + y');
  assert.equal(same.dtype.name, 'float32');
  using s = zipWith(a, b, 'x + y'); // float32 and int32: float64, as NumPy
  assert.equal(s.dtype.name, 'float64');
  assert.deepEqual([...s.toHost()], [2, -1, 4]);
});

test('DeviceArray.recordStream records the stream on the buffer, for every view of it, and refuses once freed', () => {
  using other = Stream.create();
  const a = DeviceArray.zeros([16], 'float32');
  const view = a.slice([0, 8]);
  assert.deepEqual(a.buffer.recordedStreams, []);
  view.recordStream(other);
  assert.deepEqual(a.buffer.recordedStreams, [other]);
  a.recordStream(other); // twice: once
  assert.equal(a.buffer.recordedStreams.length, 1);
  a.free();
  assert.throws(() => a.recordStream(other), UseAfterFreeError);
  assert.throws(() => view.recordStream(other), UseAfterFreeError);
});
