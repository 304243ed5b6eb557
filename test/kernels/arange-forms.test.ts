/**
 * `arange` in NumPy's forms with `{ dtype }`, default float32 as every array factory (issue 35:
 * `arange(5)` was float64 and `arange(0, 1, 0.25)` threw "options must be an object").
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { arange } from '../../src/kernels/ops/arange.js';

test('arange(stop), arange(start, stop), arange(start, stop, step), with { dtype }; float32 by default', () => {
  using a = arange(5);
  assert.equal(a.dtype.name, 'float32');
  assert.deepEqual(a.toArray(), [0, 1, 2, 3, 4]);
  using b = arange(0, 1, 0.25);
  assert.equal(b.dtype.name, 'float32');
  assert.deepEqual(b.toArray(), [0, 0.25, 0.5, 0.75]);
  using c = arange(2, 5, { dtype: 'int32' });
  assert.equal(c.dtype.name, 'int32');
  assert.deepEqual(c.toArray(), [2, 3, 4]);
  using d = arange(3, { dtype: 'float64' });
  assert.equal(d.dtype.name, 'float64');
  using e = arange(10, 0, -4, { dtype: 'int16' });
  assert.deepEqual(e.toArray(), [10, 6, 2]);
  using old = arange([0, 1, 0.5], 'float64'); // the range form still works
  assert.deepEqual(old.toArray(), [0, 0.5]);
  assert.throws(() => arange(0, 1, { dtpye: 'int32' } as never), /dtpye/);
  assert.throws(() => arange(0, 1, 1, 1 as never), TypeError);
});
