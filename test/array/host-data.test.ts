/**
 * Host interchange: shapes, and the three forms of host data (TypedArray, raw bytes, nested
 * arrays) for every dtype. Random values of every dtype round-trip nested -> bytes -> host
 * TypedArray -> nested unchanged, and the same bytes come back from each input form; every wrong
 * input is the typed error the issue names (TypeError for a wrong type, RangeError for a bad value
 * or size), and nothing is silently truncated.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { dtypes, type DType, type DTypeName, type ScalarName } from '../../src/array/dtype.js';
import { fromBfloat16Bits, fromFloat16Bits } from '../../src/array/half.js';
import {
  allocateHost,
  decodeElement,
  encodeScalar,
  hostElements,
  hostShape,
  hostView,
  makeFloat16Array,
  toNested,
  type HostInput,
  type NestedArray,
  type NestedElement,
} from '../../src/array/host-data.js';
import { checkShape, contiguousStrides, elementCount, formatShape, type Shape } from '../../src/array/shape.js';

const names = Object.keys(dtypes) as DTypeName[];

/** Asserts that `fn` throws `type` with a message matching `pattern`. */
function throwsWith(fn: () => unknown, type: new (...args: never[]) => Error, pattern: RegExp): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof type, `expected a ${type.name}, got ${String(e)}`);
    assert.match(e.message, pattern);
    return true;
  });
}

// ---- shapes --------------------------------------------------------------------------------

test('checkShape returns a frozen copy and rejects bad dimensions', () => {
  const dims = [3, 4];
  const s = checkShape(dims);
  assert.deepEqual(s, [3, 4]);
  assert.ok(Object.isFrozen(s));
  dims[0] = 99;
  assert.equal(s[0], 3, "a copy: changing the caller's array does not change it");
  assert.deepEqual(checkShape([]), []);
  assert.deepEqual(checkShape([0, 5]), [0, 5]);
  for (const bad of [-1, 1.5, NaN, Infinity, -Infinity, 2 ** 53]) {
    throwsWith(() => checkShape([2, bad]), RangeError, /shape\[1\] must be a whole number >= 0/);
  }
  throwsWith(() => checkShape([2 ** 30, 2 ** 30, 2 ** 30]), RangeError, /MAX_SAFE_INTEGER/);
  throwsWith(() => checkShape([0, 2 ** 30, 2 ** 30]), RangeError, /MAX_SAFE_INTEGER/);
  throwsWith(() => checkShape('3,4'), TypeError, /shape must be an array/);
  throwsWith(() => checkShape(null, 'dims'), TypeError, /dims must be an array of dimensions or one number, got null/);
  throwsWith(() => checkShape([2, '3']), TypeError, /shape\[1\] must be a number, got string/);
  throwsWith(() => checkShape([2n]), TypeError, /got bigint/);
});

test('elementCount, contiguousStrides and formatShape', () => {
  assert.equal(elementCount([]), 1);
  assert.equal(elementCount([3, 4]), 12);
  assert.equal(elementCount([3, 0, 4]), 0);
  assert.deepEqual(contiguousStrides([2, 3, 4]), [12, 4, 1]);
  assert.deepEqual(contiguousStrides([5]), [1]);
  assert.deepEqual(contiguousStrides([]), []);
  assert.equal(formatShape([3, 4]), '(3, 4)');
  assert.equal(formatShape([5]), '(5,)');
  assert.equal(formatShape([]), '()');
});

// ---- round trips ---------------------------------------------------------------------------

/** Values each component holds exactly, with NaN, -0, infinities and the range's ends. */
const componentValues: { readonly [C in ScalarName]: fc.Arbitrary<number | bigint | boolean> } = {
  bool: fc.boolean(),
  int8: fc.integer({ min: -128, max: 127 }),
  uint8: fc.integer({ min: 0, max: 255 }),
  int16: fc.integer({ min: -32768, max: 32767 }),
  uint16: fc.integer({ min: 0, max: 65535 }),
  int32: fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }),
  uint32: fc.integer({ min: 0, max: 2 ** 32 - 1 }),
  int64: fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }),
  uint64: fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }),
  float16: fc.integer({ min: 0, max: 0xffff }).map(fromFloat16Bits),
  bfloat16: fc.integer({ min: 0, max: 0xffff }).map(fromBfloat16Bits),
  float32: fc.float(),
  float64: fc.double(),
};

function isZero(v: number | bigint | boolean): boolean {
  return v === 0 || v === 0n || v === false;
}

/** Nests a flat list into arrays of dimensions `dims` (row-major). */
function nest(flat: readonly NestedElement[], dims: readonly number[]): NestedElement[] {
  let index = 0;
  const build = (depth: number): NestedElement[] => Array.from({ length: dims[depth]! }, () => (depth === dims.length - 1 ? flat[index++]! : build(depth + 1)));
  return build(0);
}

/** A dtype, a shape of 1 to 3 dimensions with at least one element, and values, not all zero. */
function sample(dt: DType): fc.Arbitrary<{ shape: number[]; flat: (number | bigint | boolean)[] }> {
  return fc.array(fc.integer({ min: 1, max: 4 }), { minLength: 1, maxLength: 3 }).chain((shape) => {
    const n = elementCount(shape) * dt.components;
    return fc
      .array(componentValues[dt.component], { minLength: n, maxLength: n })
      .filter((flat) => flat.some((v) => !isZero(v)))
      .map((flat) => ({ shape, flat }));
  });
}

for (const name of names) {
  test(`${name}: random values round-trip nested -> bytes -> host -> nested, and every input form gives the same bytes`, () => {
    const dt = dtypes[name] as DType;
    fc.assert(
      fc.property(sample(dt), ({ shape, flat }) => {
        const nested = nest(flat, hostShape(dt, shape));
        const fromNested = hostElements(dt, nested);
        assert.deepEqual(fromNested.shape, shape);
        assert.equal(fromNested.copied, true);
        assert.equal(fromNested.bytes.byteLength, elementCount(shape) * dt.byteSize);
        assert.ok(
          fromNested.bytes.some((b) => b !== 0),
          'a nonzero value gives nonzero bytes',
        );

        const host = hostView(dt, fromNested.bytes);
        assert.deepEqual(toNested(dt, host, shape), nested, 'nested -> bytes -> nested');

        // The host TypedArray itself: viewed, not copied, same bytes.
        const fromHost = hostElements(dt, host as HostInput<DTypeName>, shape);
        assert.equal(fromHost.copied, false);
        assert.equal(fromHost.bytes.buffer, host.buffer);
        assert.deepEqual(fromHost.bytes, fromNested.bytes);

        // Raw bytes at an odd offset, through a DataView and an ArrayBuffer.
        const raw = new Uint8Array(fromNested.bytes.byteLength + 1);
        raw.set(fromNested.bytes, 1);
        const view = new DataView(raw.buffer, 1);
        assert.deepEqual(hostElements(dt, view, shape).bytes, fromNested.bytes);
        assert.deepEqual(hostElements(dt, fromNested.bytes.slice().buffer).bytes, fromNested.bytes);
        // An unaligned view is copied into an aligned TypedArray with the same values.
        assert.deepEqual(toNested(dt, hostView(dt, raw.subarray(1)), shape), nested);

        // Element by element.
        const count = elementCount(shape);
        const i = count - 1;
        const last = dt.components === 1 ? flat[i]! : flat.slice(i * dt.components, (i + 1) * dt.components);
        assert.deepEqual(decodeElement(dt, host, i), last);
        assert.deepEqual(encodeScalar(dt, last as never), fromNested.bytes.subarray(i * dt.byteSize));
      }),
      { numRuns: 60 },
    );
  });
}

// ---- TypedArrays ---------------------------------------------------------------------------

test('a TypedArray of the right type is viewed without copying, at its offset', () => {
  const backing = new Float32Array([0, 1, 2, 3, 4, 5, 6, 7]);
  const part = backing.subarray(2, 8);
  const r = hostElements(dtypes.float32, part);
  assert.equal(r.bytes.buffer, backing.buffer);
  assert.equal(r.bytes.byteOffset, 8);
  assert.equal(r.bytes.byteLength, 24);
  assert.deepEqual(r.shape, [6]);
  assert.equal(r.copied, false);
  assert.deepEqual(hostElements(dtypes.float3, part).shape, [2], 'a vector dtype: length / components');
  assert.deepEqual(hostElements(dtypes.float32, part, [2, 3]).shape, [2, 3], 'a given shape reshapes');
  assert.deepEqual(hostElements('float2', part, [3]).shape, [3], 'a dtype by name');
  // Node's Buffer is a Uint8Array.
  assert.equal(hostElements(dtypes.uint8, Buffer.from([1, 2, 3])).copied, false);
});

test('a TypedArray of the wrong type is a TypeError naming both', () => {
  throwsWith(() => hostElements(dtypes.float32, new Int32Array(4) as never), TypeError, /^float32 needs a Float32Array, got Int32Array$/);
  throwsWith(() => hostElements(dtypes.float32, new Float64Array(4) as never), TypeError, /got Float64Array/);
  throwsWith(
    () => hostElements(dtypes.float3, new Float64Array(3) as never),
    TypeError,
    /float3 needs a Float32Array of its float32 components, got Float64Array/,
  );
  throwsWith(
    () => hostElements(dtypes.float16, new Float32Array(4) as never),
    TypeError,
    /float16 needs a Uint16Array \(of raw bits\) or a Float16Array, got Float32Array/,
  );
  throwsWith(() => hostElements(dtypes.int64, new Int32Array(4) as never), TypeError, /int64 needs a BigInt64Array, got Int32Array/);
  throwsWith(() => hostElements(dtypes.uint8, new Uint8ClampedArray(4) as never), TypeError, /got Uint8ClampedArray/);
  throwsWith(() => hostElements(dtypes.int8, new Uint8Array(4) as never), TypeError, /int8 needs a Int8Array, got Uint8Array/);
});

test('a TypedArray whose length does not fit the shape or the components is a RangeError', () => {
  throwsWith(
    () => hostElements(dtypes.float3, new Float32Array(17), [2, 3]),
    RangeError,
    /^shape \(2, 3\) holds 6 float3 elements = 18 float32 values; the data has 17$/,
  );
  throwsWith(() => hostElements(dtypes.float32, new Float32Array(5), [2, 3]), RangeError, /^shape \(2, 3\) holds 6 float32 elements; the data has 5$/);
  throwsWith(() => hostElements(dtypes.float3, new Float32Array(10)), RangeError, /not a whole number of float3 elements/);
  throwsWith(() => hostElements(dtypes.float32, new Float32Array(6), [2, -3]), RangeError, /shape\[1\]/);
  throwsWith(() => hostElements(dtypes.float32, new Float32Array(6), [2, 3.5]), RangeError, /shape\[1\]/);
  throwsWith(() => hostElements(dtypes.float32, new Float32Array(6), [NaN]), RangeError, /shape\[0\]/);
  throwsWith(() => hostElements(dtypes.float32, new Float32Array(6), '6' as never), TypeError, /shape must be an array/);
});

test('bool data must be 0 or 1, in a Uint8Array or raw bytes', () => {
  assert.deepEqual(hostElements(dtypes.bool, new Uint8Array([0, 1, 1])).shape, [3]);
  throwsWith(() => hostElements(dtypes.bool, new Uint8Array([0, 2])), RangeError, /bool values must be 0 or 1: value 2 at index 1/);
  throwsWith(() => hostElements(dtypes.bool, new Uint8Array([255]).buffer), RangeError, /bool/);
  throwsWith(() => hostElements(dtypes.bool, [true, 2]), RangeError, /bool values must be true, false, 0 or 1: data\[1\] is 2/);
  throwsWith(() => hostElements(dtypes.bool, ['yes'] as never), TypeError, /data\[0\] is the string "yes"/);
  assert.deepEqual([...hostElements(dtypes.bool, [true, false, 1, 0]).bytes], [1, 0, 1, 0]);
});

test('float16 and bfloat16 take their bits in a Uint16Array, and a Float16Array where the runtime has one', () => {
  const bits = new Uint16Array([0x3c00, 0xc000]);
  const r = hostElements(dtypes.float16, bits);
  assert.equal(r.copied, false);
  assert.deepEqual(toNested(dtypes.float16, bits, [2]), [1, -2]);
  assert.deepEqual(toNested(dtypes.half2, bits, [1]), [[1, -2]]);
  assert.deepEqual([...new Uint16Array(hostElements(dtypes.bfloat16, [1, -2]).bytes.slice().buffer)], [0x3f80, 0xc000]);
  const f16 = makeFloat16Array([1, -2, 0.5]);
  if (f16 === undefined) {
    assert.equal((globalThis as { Float16Array?: unknown }).Float16Array, undefined, 'absent only where the runtime lacks it');
    return;
  }
  const viewed = hostElements(dtypes.float16, f16);
  assert.equal(viewed.copied, false, "a Float16Array's bytes are float16 bits already");
  assert.deepEqual([...new Uint16Array(viewed.bytes.slice().buffer)], [0x3c00, 0xc000, 0x3800]);
  const converted = hostElements(dtypes.bfloat16, f16);
  assert.equal(converted.copied, true);
  assert.deepEqual([...new Uint16Array(converted.bytes.slice().buffer)], [0x3f80, 0xc000, 0x3f00]);
  throwsWith(() => hostElements(dtypes.float32, f16 as never), TypeError, /got Float16Array/);
});

// ---- raw bytes -----------------------------------------------------------------------------

test('raw bytes are viewed, and must be a whole number of elements', () => {
  const buffer = new ArrayBuffer(48);
  const r = hostElements(dtypes.float3, buffer);
  assert.deepEqual(r.shape, [4]);
  assert.equal(r.bytes.buffer, buffer);
  assert.equal(r.copied, false);
  assert.deepEqual(hostElements(dtypes.float4, buffer, [3]).shape, [3]);
  const view = new DataView(buffer, 4, 24);
  const v = hostElements(dtypes.double3, view);
  assert.deepEqual(v.shape, [1]);
  assert.equal(v.bytes.byteOffset, 4);
  assert.deepEqual(hostElements(dtypes.int32, new SharedArrayBuffer(8)).shape, [2]);
  throwsWith(() => hostElements(dtypes.float3, new ArrayBuffer(13)), RangeError, /^13 bytes are not a whole number of float3 elements \(12 bytes each\)$/);
  throwsWith(() => hostElements(dtypes.float64, new DataView(buffer, 0, 12)), RangeError, /12 bytes/);
  throwsWith(
    () => hostElements(dtypes.float3, buffer, [2, 3]),
    RangeError,
    /^shape \(2, 3\) holds 6 float3 elements = 18 float32 values; the data has 48 bytes = 12 float32 values$/,
  );
});

// ---- nested arrays -------------------------------------------------------------------------

test('nested arrays: shapes, vector components, empty levels', () => {
  assert.deepEqual(
    hostElements(dtypes.int32, [
      [1, 2, 3],
      [4, 5, 6],
    ]).shape,
    [2, 3],
  );
  assert.deepEqual(
    hostElements(
      dtypes.int32,
      [
        [1, 2, 3],
        [4, 5, 6],
      ],
      [3, 2],
    ).shape,
    [3, 2],
    'a given shape reshapes',
  );
  assert.deepEqual(
    hostElements(dtypes.float3, [
      [1, 2, 3],
      [4, 5, 6],
    ]).shape,
    [2],
  );
  assert.deepEqual(hostElements(dtypes.float3, [1, 2, 3]).shape, [], 'one float3: shape ()');
  assert.deepEqual(hostElements(dtypes.float32, []).shape, [0]);
  assert.deepEqual(hostElements(dtypes.float3, []).shape, [0]);
  assert.deepEqual(hostElements(dtypes.float32, [[], []]).shape, [2, 0]);
  const bytes = hostElements(dtypes.float3, [
    [1, 2, 3],
    [4, 5, 6],
  ]).bytes;
  assert.deepEqual([...new Float32Array(bytes.slice().buffer)], [1, 2, 3, 4, 5, 6]);
  assert.deepEqual(
    [...new BigInt64Array(hostElements(dtypes.int64, [2n ** 62n, -5, 2 ** 53 - 1]).bytes.slice().buffer)],
    [2n ** 62n, -5n, 2n ** 53n - 1n],
    'bigints and safe integers',
  );
  throwsWith(
    () =>
      hostElements(dtypes.float3, [
        [1, 2],
        [3, 4],
      ]),
    RangeError,
    /^float3 elements are arrays of 3 float32 components: data\[0\] has 2$/,
  );
  throwsWith(() => hostElements(dtypes.float3, [[]]), RangeError, /has 0/);
  throwsWith(() => hostElements(dtypes.float3, [1, 2, 3, 4, 5, 6]), RangeError, /arrays of 3/);
  throwsWith(() => hostElements(dtypes.int32, [[1, 2]], [3]), RangeError, /shape \(3,\) holds 3 int32 elements; the data has 2/);
});

test('ragged nesting is a TypeError that says where', () => {
  throwsWith(() => hostElements(dtypes.float32, [[1, 2], [3]]), TypeError, /^ragged nesting: data\[1\] has 1 entries where data\[0\] has 2$/);
  throwsWith(() => hostElements(dtypes.float32, [[1, 2], 3]), TypeError, /^ragged nesting: data\[1\] is 3 where data\[0\] is an array$/);
  throwsWith(() => hostElements(dtypes.float32, [1, [2]]), TypeError, /^ragged nesting: data\[1\] is an array where data\[0\] is a value$/);
  throwsWith(
    () =>
      hostElements(dtypes.float32, [
        [[1], [2]],
        [[3], [4, 5]],
      ]),
    TypeError,
    /data\[1\]\[1\] has 2 entries where data\[0\]\[0\] has 1/,
  );
  throwsWith(
    () =>
      hostElements(dtypes.float3, [
        [1, 2, 3],
        [4, 5],
      ]),
    TypeError,
    /ragged/,
  );
});

test('nested values of the wrong type are TypeErrors, bad values RangeErrors, nothing truncated', () => {
  const cases: [DTypeName, NestedArray, typeof TypeError | typeof RangeError, RegExp][] = [
    ['int8', [1, 128], RangeError, /^int8 values must be whole numbers in \[-128, 127\]: data\[1\] is 128$/],
    ['uint8', [-1], RangeError, /uint8 values must be whole numbers in \[0, 255\]: data\[0\] is -1/],
    ['int16', [40000], RangeError, /int16/],
    ['uint16', [65536], RangeError, /uint16/],
    ['int32', [[1, 1.5]], RangeError, /data\[0\]\[1\] is 1.5/],
    ['int32', [2 ** 31], RangeError, /int32/],
    ['uint32', [2 ** 32], RangeError, /uint32/],
    ['uint32', [NaN], RangeError, /is NaN/],
    ['int32', [Infinity], RangeError, /is Infinity/],
    ['int64', [2 ** 53], RangeError, /int64 values must be bigints in \[-2\^63, 2\^63 - 1\] or safe integers: data\[0\] is 9007199254740992/],
    ['int64', [2n ** 63n], RangeError, /is 9223372036854775808n/],
    ['int64', [0.5], RangeError, /int64/],
    ['uint64', [-1n], RangeError, /uint64/],
    ['uint64', [-1], RangeError, /uint64/],
    ['uint64', [2n ** 64n], RangeError, /uint64/],
    ['int32', [1n], TypeError, /int32 values must be whole numbers .*: data\[0\] is 1n/],
    ['float32', [1n], TypeError, /float32 values must be numbers: data\[0\] is 1n/],
    ['float32', ['1'] as never, TypeError, /is the string "1"/],
    ['float16', [true], TypeError, /float16 values must be numbers: data\[0\] is true/],
    ['float64', [null] as never, TypeError, /is null/],
    ['int64', [true], TypeError, /is true/],
    ['float3', [[1, 2, undefined]] as never, TypeError, /data\[0\]\[2\] is undefined/],
    ['char3', [[1, 2, 300]], RangeError, /char3 values must be whole numbers in \[-128, 127\]: data\[0\]\[2\] is 300/],
  ];
  for (const [name, data, type, pattern] of cases) throwsWith(() => hostElements(name, data), type, pattern);
  // Floats are rounded to the dtype's precision (what storing them means); -0, NaN and Infinity kept.
  const f = new Float32Array(hostElements(dtypes.float32, [0.1, -0, NaN, -Infinity, 1e40]).bytes.slice().buffer);
  assert.deepEqual([...f], [Math.fround(0.1), -0, NaN, -Infinity, Infinity]);
});

test('input of no accepted kind is a TypeError', () => {
  for (const bad of [3, 'abc', null, undefined, {}, new Map(), { length: 2, 0: 1, 1: 2 }]) {
    throwsWith(
      () => hostElements(dtypes.float32, bad as never),
      TypeError,
      /^float32 data must be a Float32Array, an ArrayBuffer, a DataView or nested arrays, got /,
    );
  }
  throwsWith(() => hostElements('vec3' as DTypeName, [1]), TypeError, /unknown dtype 'vec3'/);
});

// ---- the rest of the API -------------------------------------------------------------------

test('encodeScalar checks its value like nested data', () => {
  assert.deepEqual([...new Float32Array(encodeScalar(dtypes.float3, [1, 2, 3]).buffer)], [1, 2, 3]);
  assert.deepEqual([...encodeScalar(dtypes.bool, true)], [1]);
  assert.deepEqual([...new BigUint64Array(encodeScalar(dtypes.uint64, 2n ** 64n - 1n).buffer)], [2n ** 64n - 1n]);
  assert.deepEqual([...new Uint16Array(encodeScalar(dtypes.half2, [1, -2]).buffer)], [0x3c00, 0xc000]);
  assert.equal(encodeScalar(dtypes.double3, [1, 2, 3]).byteLength, 24);
  throwsWith(() => encodeScalar(dtypes.float3, 1 as never), TypeError, /a float3 value is an array of 3 float32 components, got 1/);
  throwsWith(() => encodeScalar(dtypes.float3, [1, 2] as never), RangeError, /has 3 components, got 2/);
  throwsWith(() => encodeScalar(dtypes.int8, 300), RangeError, /the value is 300/);
  throwsWith(() => encodeScalar(dtypes.int4, [1, 2, 3, 0.5]), RangeError, /component 3 is 0.5/);
  throwsWith(() => encodeScalar(dtypes.float32, '1' as never), TypeError, /float32 values must be numbers/);
});

test('allocateHost, hostShape, hostView', () => {
  const a = allocateHost(dtypes.float3, 10);
  assert.ok(a instanceof Float32Array);
  assert.equal(a.length, 30);
  assert.ok(allocateHost(dtypes.ulonglong2, 2) instanceof BigUint64Array);
  assert.equal(allocateHost(dtypes.int8, 0).length, 0);
  throwsWith(() => allocateHost(dtypes.int8, -1), RangeError, /count/);
  throwsWith(() => allocateHost(dtypes.int8, 1.5), RangeError, /count/);
  throwsWith(() => allocateHost(dtypes.int8, '1' as never), TypeError, /count/);
  assert.deepEqual(hostShape(dtypes.float3, [10]), [10, 3]);
  assert.deepEqual(hostShape(dtypes.float3, []), [3]);
  assert.deepEqual(hostShape(dtypes.float32, [2, 5]), [2, 5]);
  const bytes = new Uint8Array(16);
  const v = hostView(dtypes.float64, bytes);
  assert.equal(v.buffer, bytes.buffer, 'aligned bytes are viewed');
  const odd = new Uint8Array(17).subarray(1);
  const c = hostView(dtypes.float64, odd);
  assert.notEqual(c.buffer, odd.buffer, 'unaligned bytes are copied');
  assert.equal(c.length, 2);
  throwsWith(() => hostView(dtypes.float3, new Uint8Array(13)), RangeError, /13 bytes are not a whole number of float3 elements/);
  throwsWith(() => hostView(dtypes.float32, new Float32Array(2) as never), TypeError, /needs a Uint8Array/);
});

test('toNested and decodeElement check their data and shape', () => {
  assert.deepEqual(toNested(dtypes.int32, new Int32Array([1, 2, 3, 4, 5, 6]), [2, 3]), [
    [1, 2, 3],
    [4, 5, 6],
  ]);
  assert.deepEqual(toNested(dtypes.float2, new Float32Array([1, 2, 3, 4]), [2]), [
    [1, 2],
    [3, 4],
  ]);
  assert.deepEqual(toNested(dtypes.float3, new Float32Array([1, 2, 3]), []), [1, 2, 3], 'one float3 is its components');
  assert.deepEqual(toNested(dtypes.bool, new Uint8Array([1, 0]), [2]), [true, false]);
  assert.deepEqual(toNested(dtypes.int64, new BigInt64Array([-1n]), [1]), [-1n]);
  assert.deepEqual(toNested(dtypes.float32, new Float32Array(0), [2, 0]), [[], []]);
  throwsWith(() => toNested(dtypes.float32, new Float32Array(1), []), RangeError, /decodeElement/);
  throwsWith(() => toNested(dtypes.int32, new Int32Array(5), [2, 3]), RangeError, /shape \(2, 3\) holds 6 int32 elements; the data has 5/);
  throwsWith(() => toNested(dtypes.int32, new Float32Array(6) as never, [6]), TypeError, /int32 data is a Int32Array, got Float32Array/);
  assert.deepEqual(decodeElement(dtypes.float3, new Float32Array([1, 2, 3, 4, 5, 6]), 1), [4, 5, 6]);
  assert.equal(decodeElement(dtypes.bfloat16, new Uint16Array([0x3f80]), 0), 1);
  throwsWith(() => decodeElement(dtypes.float3, new Float32Array(6), 2), RangeError, /index 2 is past the end of 2 float3 elements/);
  throwsWith(() => decodeElement(dtypes.float32, new Float32Array(6), -1), RangeError, /index/);
});

test('dtypes are distinct in the host-data signatures too', () => {
  const shape: Shape = [2];
  // @ts-expect-error an int32 array's nested data is not a Float32Array
  assert.throws(() => toNested(dtypes.int32, new Float32Array(2), shape), TypeError);
  // @ts-expect-error float3 values are arrays of three numbers
  assert.throws(() => encodeScalar(dtypes.float3, 1), TypeError);
  // @ts-expect-error int64 data is a BigInt64Array, not an Int32Array
  assert.throws(() => hostElements(dtypes.int64, new Int32Array(2)), TypeError);
  const ok: HostInput<'float16'> = new Uint16Array(2);
  assert.ok(ok);
});
