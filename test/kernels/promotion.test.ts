/**
 * `zipWith`'s result dtype, with no `out`, is NumPy's (`numpy.result_type` of the two arrays), so
 * `int32 + float32` no longer truncates into int32 (issue 35). The table is what NumPy 2 returns.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DeviceArray } from '../../src/array/device-array.js';
import { dtypeOf, type ScalarName } from '../../src/array/dtype.js';
import { resultDType } from '../../src/array/promotion.js';
import { zipWith } from '../../src/kernels/ops/elementwise.js';

const numpy: ReadonlyArray<readonly [ScalarName, ScalarName, ScalarName]> = [
  ['bool', 'bool', 'bool'],
  ['bool', 'int8', 'int8'],
  ['bool', 'float16', 'float16'],
  ['int8', 'uint8', 'int16'],
  ['int16', 'uint16', 'int32'],
  ['int32', 'uint32', 'int64'],
  ['int64', 'uint64', 'float64'],
  ['uint8', 'int16', 'int16'],
  ['uint16', 'int8', 'int32'],
  ['int8', 'int64', 'int64'],
  ['uint8', 'uint32', 'uint32'],
  ['int8', 'float16', 'float16'],
  ['uint8', 'float16', 'float16'],
  ['int16', 'float16', 'float32'],
  ['int32', 'float16', 'float64'],
  ['int64', 'float16', 'float64'],
  ['uint64', 'float16', 'float64'],
  ['int16', 'float32', 'float32'],
  ['int32', 'float32', 'float64'],
  ['int64', 'float32', 'float64'],
  ['uint32', 'float64', 'float64'],
  ['float16', 'float32', 'float32'],
  ['float32', 'float64', 'float64'],
  ['float16', 'bfloat16', 'float32'],
  ['int8', 'bfloat16', 'bfloat16'],
  ['int32', 'bfloat16', 'float64'],
];

test('resultDType is numpy.result_type, in either order', () => {
  for (const [a, b, expected] of numpy) {
    assert.equal(resultDType(dtypeOf(a), dtypeOf(b)).name, expected, `${a} and ${b}`);
    assert.equal(resultDType(dtypeOf(b), dtypeOf(a)).name, expected, `${b} and ${a}`);
  }
});

test('zipWith of int32 and float32 computes in float64, as NumPy: [1, 2] + [0.5, 0.5] is [1.5, 2.5]', () => {
  using a = DeviceArray.from(new Int32Array([1, 2]));
  using b = DeviceArray.from(new Float32Array([0.5, 0.5]));
  using s = zipWith(a, b, 'x + y');
  assert.equal(s.dtype.name, 'float64');
  assert.deepEqual(s.toArray(), [1.5, 2.5]);
  using u = DeviceArray.from(new Uint8Array([200, 255]));
  using i = DeviceArray.from(new Int8Array([-1, -128]));
  using d = zipWith(u, i, 'x + y');
  assert.equal(d.dtype.name, 'int16');
  assert.deepEqual(d.toArray(), [199, 127]);
  using out = DeviceArray.empty([2], 'int32');
  assert.equal(zipWith(a, b, 'x + y', { out }).dtype.name, 'int32', 'out still decides');
});
