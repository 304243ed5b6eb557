/**
 * Array factories as CuPy and PyTorch users call them (issue 25, item 6): the default dtype
 * (float32, `defaultDType`) when none is given, a number as a one-dimensional shape, plain
 * (non-nested) and nested JavaScript arrays accepted by `from` without a dtype, and `ones`.
 * The annotations are checked by the compiler; the values at run time. Runs on both backends.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DeviceArray } from '../../src/array/device-array.js';
import { HostArray } from '../../src/array/host-array.js';
import { defaultDType } from '../../src/array/dtype.js';

test('the default dtype is float32, for every factory that takes a dtype', () => {
  assert.equal(defaultDType, 'float32');
  using z: DeviceArray<'float32'> = DeviceArray.zeros([3, 4]);
  assert.equal(z.dtype.name, 'float32');
  assert.deepEqual(z.shape, [3, 4]);
  assert.deepEqual([...z.toHost()], new Array(12).fill(0));
  using e: DeviceArray<'float32'> = DeviceArray.empty([2]);
  assert.equal(e.dtype.name, 'float32');
  using f: DeviceArray<'float32'> = DeviceArray.full([2, 2], 0.5);
  assert.deepEqual([...f.toHost()], [0.5, 0.5, 0.5, 0.5]);
  using o: DeviceArray<'float32'> = DeviceArray.ones(3);
  assert.deepEqual([...o.toHost()], [1, 1, 1]);
  using h: HostArray<'float32'> = HostArray.zeros(5);
  assert.equal(h.dtype.name, 'float32');
  using he: HostArray<'float32'> = HostArray.empty([2, 2]);
  assert.deepEqual(he.shape, [2, 2]);
});

test('a number is a one-dimensional shape; a bad one is refused naming it', () => {
  using a = DeviceArray.zeros(1000, 'float32');
  assert.deepEqual(a.shape, [1000]);
  using b = DeviceArray.full(4, 7n, 'int64');
  assert.deepEqual([...b.toHost()], [7n, 7n, 7n, 7n]);
  using c = DeviceArray.from([1, 2, 3, 4, 5, 6], { shape: 6 });
  assert.deepEqual(c.shape, [6]);
  using empty = DeviceArray.empty(0);
  assert.equal(empty.size, 0);
  assert.throws(() => DeviceArray.zeros(-1), /shape must be a whole number >= 0 or an array of them, got -1/);
  assert.throws(() => DeviceArray.zeros(1.5), RangeError);
});

test('ones: every scalar dtype, bigints for 64-bit and true for bool; a vector dtype is pointed to full', () => {
  using i = DeviceArray.ones([2], 'int64');
  assert.deepEqual([...i.toHost()], [1n, 1n]);
  using u = DeviceArray.ones([2], 'uint8');
  assert.deepEqual([...u.toHost()], [1, 1]);
  using b = DeviceArray.ones([2], 'bool');
  assert.deepEqual([...b.toHost()], [1, 1]);
  using d = DeviceArray.ones([2], 'float64');
  assert.deepEqual([...d.toHost()], [1, 1]);
  assert.throws(() => DeviceArray.ones([2], 'float3'), /float3 is a vector dtype; use full/);
});

test('from: plain and nested arrays of numbers without a dtype are float32; bigints int64; booleans bool', () => {
  using a: DeviceArray<'float32'> = DeviceArray.from([1, 2, 3]);
  assert.equal(a.dtype.name, 'float32');
  assert.deepEqual(a.shape, [3]);
  assert.deepEqual([...a.toHost()], [1, 2, 3]);
  using m = DeviceArray.from([
    [1, 2],
    [3, 4.5],
  ]);
  assert.equal(m.dtype.name, 'float32');
  assert.deepEqual(m.shape, [2, 2]);
  assert.deepEqual([...m.toHost()], [1, 2, 3, 4.5]);
  using big = DeviceArray.from([2n ** 60n + 1n, 2n]);
  assert.equal(big.dtype.name, 'int64');
  assert.deepEqual([...big.toHost()], [2n ** 60n + 1n, 2n]);
  using flags = DeviceArray.from([true, false]);
  assert.equal(flags.dtype.name, 'bool');
  using nothing = DeviceArray.from([]);
  assert.equal(nothing.dtype.name, 'float32');
  assert.equal(nothing.size, 0);
  // A given dtype still wins; mixed data is refused naming the element.
  using ints = DeviceArray.from([1, 2, 3], { dtype: 'int32' });
  assert.equal(ints.dtype.name, 'int32');
  assert.throws(() => DeviceArray.from([1, 2n] as unknown as number[]), TypeError);
  using h: HostArray<'float32'> = HostArray.from([0.25, 0.5]);
  assert.deepEqual([...h.toHost()], [0.25, 0.5]);
});

test('from of plain numbers, async: the same default', async () => {
  using a = await DeviceArray.fromAsync([[1], [2]]);
  assert.equal(a.dtype.name, 'float32');
  assert.deepEqual(a.shape, [2, 1]);
});
