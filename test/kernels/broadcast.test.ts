/**
 * Broadcasting in `elementwise`, `map` and `zipWith` (issue 25, item 6), NumPy's rules: shapes
 * aligned at their last dimension, extents of 1 and missing leading dimensions read again along
 * the others; scalars apply everywhere; an array written must have the whole shape; shapes that
 * do not broadcast are a RangeError naming both. Checked against a JavaScript reference, on both
 * backends (the CUDA kernel and its JavaScript twin index operands the same way).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DeviceArray } from '../../src/array/device-array.js';
import { elementwise, zipWith } from '../../src/kernels/ops/index.js';
import { broadcastShape, broadcastStrides } from '../../src/kernels/ops/broadcast.js';
import { nvrtcAvailable } from '../../src/kernels/compile.js';
import { onGpu } from '../helpers.js';

const needsCompiler = { skip: onGpu && !nvrtcAvailable() ? 'expressions need NVRTC on a GPU' : false } as const;

/** 0, 1, 2, ... as a float64 array of `shape`. */
function iota(shape: number[]): DeviceArray<'float64'> {
  const n = shape.reduce((p, d) => p * d, 1);
  return DeviceArray.from(
    Float64Array.from({ length: n }, (_, i) => i),
    { shape },
  );
}

test('broadcastShape and broadcastStrides follow NumPy', () => {
  const named = (...shapes: number[][]): { name: string; shape: number[] }[] => shapes.map((shape, i) => ({ name: `a${i}`, shape }));
  assert.deepEqual(broadcastShape(named([2, 3], [3]), 'op'), [2, 3]);
  assert.deepEqual(broadcastShape(named([3, 1], [1, 4]), 'op'), [3, 4]);
  assert.deepEqual(broadcastShape(named([5, 1, 2], [4, 1], []), 'op'), [5, 4, 2]);
  assert.deepEqual(broadcastShape(named([0], [1]), 'op'), [0]);
  assert.throws(() => broadcastShape(named([2, 3], [4]), 'op'), /op: a0 has shape \(2, 3\) and a1 \(4,\), which do not broadcast/);
  assert.throws(() => broadcastShape(named([2, 1], [1, 3], [3, 3]), 'op'), /a0 has shape \(2, 1\) and a2 \(3, 3\)/);
  assert.deepEqual(broadcastStrides([3], [1], [2, 3]), [0, 1]);
  assert.deepEqual(broadcastStrides([3, 1], [1, 1], [3, 4]), [1, 0]);
  assert.deepEqual(broadcastStrides([1], [1], [1]), [1]);
});

test('elementwise: a row, a column and a scalar broadcast over a matrix', needsCompiler, () => {
  using m = iota([3, 4]);
  using row = DeviceArray.from(new Float64Array([10, 20, 30, 40]));
  using col = DeviceArray.from(new Float64Array([100, 200, 300]), { shape: [3, 1] });
  using z = DeviceArray.zeros([3, 4], 'float64');
  elementwise('z = m + row + col + k', { m, row, col, z, k: 0.5 });
  const want = Array.from({ length: 12 }, (_, i) => i + 10 * (1 + (i % 4)) + 100 * (1 + Math.floor(i / 4)) + 0.5);
  assert.deepEqual([...z.toHost()], want);
  // A transposed (strided) operand broadcasts the same way.
  using t = iota([4, 3]);
  elementwise('z = t + row', { t: t.T, row, z });
  assert.deepEqual(
    [...z.toHost()],
    Array.from({ length: 12 }, (_, i) => (i % 4) * 3 + Math.floor(i / 4) + 10 * (1 + (i % 4))),
  );
});

test('zipWith: the result has the broadcast shape; a column and a row make a table', needsCompiler, () => {
  using col = DeviceArray.from(new Int32Array([1, 2, 3]), { shape: [3, 1] });
  using row = DeviceArray.from(new Int32Array([10, 20, 30, 40]));
  using table = zipWith(col, row, 'x * y');
  assert.deepEqual(table.shape, [3, 4]);
  assert.deepEqual([...table.toHost()], [10, 20, 30, 40, 20, 40, 60, 80, 30, 60, 90, 120]);
  using m = iota([2, 3]);
  using mean = DeviceArray.from(new Float64Array([1, 2, 3]));
  using centred = zipWith(m, mean, 'x - y');
  assert.deepEqual(centred.shape, [2, 3]);
  assert.deepEqual([...centred.toHost()], [-1, -1, -1, 2, 2, 2]);
});

test("an input broadcast from the output's own memory is read as it was before the first write", needsCompiler, () => {
  using m = iota([3, 2]);
  elementwise('m = m - first', { m, first: m.slice(0) });
  assert.deepEqual([...m.toHost()], [0, 0, 2, 2, 4, 4]);
});

test('shapes that do not broadcast, and a written array smaller than the result, are RangeErrors naming the shapes', () => {
  using m = DeviceArray.zeros([2, 3], 'float32');
  using v = DeviceArray.zeros([4], 'float32');
  using row = DeviceArray.zeros([3], 'float32');
  assert.throws(() => elementwise('m = m + v', { m, v }), /elementwise: m has shape \(2, 3\) and v \(4,\), which do not broadcast/);
  assert.throws(() => zipWith(m, v, 'x + y'), /zipWith: a has shape \(2, 3\) and b \(4,\), which do not broadcast/);
  assert.throws(() => elementwise('row = m', { m, row }), /row is written and has shape \(3,\), but the operands broadcast to \(2, 3\)/);
  assert.throws(() => zipWith(row, m, 'x + y', { out: row }), /out is written and has shape \(3,\)/);
});
