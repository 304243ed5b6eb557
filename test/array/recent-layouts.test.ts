/**
 * Arrays of a shape allocated a moment ago share its frozen shape and layout (src/array/recent-layouts.ts):
 * what a caller does to its own shape array afterwards changes nothing, every shape is still
 * checked, and arrays of one shape and different element sizes get their own strides.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { DeviceArray } from '../../src/array/device-array.js';
import { recentLayout, recentLayoutOf } from '../../src/array/recent-layouts.js';

describe('recent layouts', () => {
  it('gives arrays of one shape the same frozen shape, unchanged by the caller changing its own array', () => {
    const shape = [2, 3];
    using a = DeviceArray.empty(shape, 'float32');
    using b = DeviceArray.empty([2, 3], 'float32');
    assert.equal(a.shape, b.shape);
    assert.ok(Object.isFrozen(a.shape) && Object.isFrozen(a.strides));
    shape[0] = 5;
    using c = DeviceArray.empty(shape, 'float32');
    assert.deepEqual(a.shape, [2, 3]);
    assert.deepEqual(c.shape, [5, 3]);
    assert.deepEqual(c.strides, [3, 1]);
  });

  it('checks every shape, also one like a shape remembered', () => {
    using a = DeviceArray.empty([4], 'int32');
    assert.deepEqual(a.shape, [4]);
    assert.throws(() => DeviceArray.empty([4, -1], 'int32'), RangeError);
    assert.throws(() => DeviceArray.empty([4.5], 'int32'), RangeError);
    assert.throws(() => DeviceArray.empty(['4'] as unknown as number[], 'int32'), TypeError);
    assert.throws(() => recentLayoutOf({ length: 1, 0: 4 }, 4), TypeError);
    assert.deepEqual(recentLayoutOf(4, 4).shape, [4]);
    assert.equal(recentLayoutOf(4, 4), recentLayoutOf([4], 4));
  });

  it('makes a layout per element size: one shape, two dtypes, their own strides', () => {
    const { shape } = recentLayoutOf([3, 4], 4);
    assert.equal(recentLayoutOf([3, 4], 4), recentLayout(shape, 4));
    assert.equal(recentLayout(shape, 4), recentLayout(shape, 4));
    assert.notEqual(recentLayout(shape, 4), recentLayout(shape, 8));
    assert.equal(recentLayout(shape, 8).itemSize, 8);
    using f = DeviceArray.empty([3, 4], 'float32');
    using d = DeviceArray.empty([3, 4], 'float64');
    assert.equal(f.nbytes, 48);
    assert.equal(d.nbytes, 96);
    assert.deepEqual(d.strides, [4, 1]);
  });

  it("reads each dimension of the caller's shape once", () => {
    using first = DeviceArray.empty([7, 2], 'float32');
    let reads = 0;
    const counted = new Proxy([7, 2], {
      get(target, key, receiver) {
        if (key === '0' || key === '1') reads++;
        return Reflect.get(target, key, receiver) as unknown;
      },
    });
    using again = DeviceArray.empty(counted, 'float32');
    assert.equal(reads, 2);
    assert.equal(again.shape, first.shape);
  });
});
