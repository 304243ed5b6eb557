/**
 * Arrays and built-in operations write only where they may (issue 19, items 4 to 6): memory lent
 * read-only is refused by every writing path and exported read-only; an output that shares memory
 * with an input gives the result of reading the input as it was (NumPy's rule), two outputs that
 * share memory in different orders are refused; every value a caller hands over is read once.
 * Runs on both backends: the emulated kernels run their threads one after another, so an
 * overlap shows there as one fixed wrong answer; on a GPU it would be a race.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { DeviceArray } from '../../src/array/device-array.js';
import { mayShareBytes, sameElements, type Layout } from '../../src/array/layout.js';
import { VramStateError } from '../../src/errors.js';
import { cudaArrayInterfaceInfo, fromCudaArrayInterface, toCudaArrayInterface } from '../../src/interop/cuda-array-interface.js';
import { dlpackInfo, fromDLPack, toDLPack } from '../../src/interop/dlpack.js';
import { dot, elementwise, fill, map, max, min, sum, zipWith } from '../../src/kernels/ops/index.js';
import { Stream } from '../../src/stream.js';

const iota = (n: number): Float32Array => new Float32Array(n).map((_, i) => i);

/** A read-only wrapper of `src`'s memory, as a producer that forbids writes would lend it. */
function lentReadOnly(src: DeviceArray<'float32'>): DeviceArray<'float32'> {
  return DeviceArray.fromPointer(src.ptr, src.shape, 'float32', { readOnly: true, owner: src });
}

test('read-only memory: every writing path refuses it before writing, and views keep the flag', () => {
  using src = DeviceArray.from(new Float32Array([1, 2, 3, 4]));
  using other = DeviceArray.from(new Float32Array([5, 6, 7, 8]));
  using ro = lentReadOnly(src);
  const view = ro.slice([null, null, -1]);
  assert.equal(ro.readOnly, true);
  assert.equal(view.readOnly, true);
  assert.equal(src.readOnly, false);
  const refused = (e: Error): boolean => e instanceof VramStateError && /read-only/.test(e.message);
  assert.throws(() => fill(ro, 7), refused);
  assert.throws(() => fill(view, 7), refused);
  assert.throws(() => ro.fill(7), refused);
  assert.throws(() => view.fill(7), refused);
  assert.throws(() => ro.copyFrom(new Float32Array(4)), refused);
  assert.throws(() => ro.copyFrom(ro), refused);
  assert.throws(() => elementwise('y = 5', { y: ro }), refused);
  assert.throws(() => elementwise('y = x', { x: other, y: view }), refused);
  assert.throws(() => map(other, 'x * 3', { out: ro }), refused);
  assert.throws(() => zipWith(other, other, 'x + y', { out: view }), refused);
  assert.throws(() => sum(other, { out: ro.slice([0, 1]) }), refused);
  assert.throws(() => min(other, { out: ro.slice([0, 1]) }), refused);
  assert.throws(() => max(other.reshape(2, 2), { axis: 0, out: ro.slice([0, 2]) }), refused);
  assert.throws(() => dot(other, other, { out: ro.slice([0, 1]) }), refused);
  assert.deepEqual(Array.from(src.toHost()), [1, 2, 3, 4], 'nothing was written');
  // Reading it is what it is lent for.
  assert.equal(sum(ro), 10);
  using doubled = map(ro, 'x * 2');
  assert.deepEqual(doubled.toArray(), [2, 4, 6, 8]);
});

test('read-only memory is exported read-only: DLPack READ_ONLY and CUDA Array Interface data[1], through a round trip', () => {
  using src = DeviceArray.from(iota(6));
  using ro = lentReadOnly(src);
  const cai = toCudaArrayInterface(ro.slice([1, null]));
  assert.equal(cai.data[1], true);
  using back = fromCudaArrayInterface(cai, { owner: ro });
  assert.equal(cudaArrayInterfaceInfo(back)?.readOnly, true);
  assert.equal(back.readOnly, true);
  using again = fromDLPack(toDLPack(back));
  assert.equal(dlpackInfo(again)?.readOnly, true, 'the DLPack export carries READ_ONLY');
  assert.throws(() => fill(again, 0), VramStateError);
  assert.throws(() => toDLPack(ro, { readOnly: false }), VramStateError);
  assert.throws(
    () => toDLPack(ro, { versioned: false }),
    (e: Error) => e instanceof TypeError && /read-only/.test(e.message),
  );
  assert.equal(toCudaArrayInterface(src).data[1], false, "vram's own memory stays writable");
  assert.deepEqual(Array.from(src.toHost()), Array.from(iota(6)));
});

/** Each path writing into memory it also reads, and NumPy's result: the input as it was before the first write. */
const overlapping: readonly {
  readonly name: string;
  readonly shape: readonly number[];
  readonly run: (a: DeviceArray) => void;
  readonly expected: readonly number[];
}[] = [
  {
    name: 'elementwise into the reversed view',
    shape: [8],
    run: (a) => elementwise('y = x', { x: a, y: a.slice([null, null, -1]) }),
    expected: [7, 6, 5, 4, 3, 2, 1, 0],
  },
  {
    name: 'map into the reversed view',
    shape: [8],
    run: (a) => map(a, 'x + 100', { out: a.slice([null, null, -1]) }),
    expected: [107, 106, 105, 104, 103, 102, 101, 100],
  },
  {
    name: 'zipWith into the input shifted by one',
    shape: [8],
    run: (a) => zipWith(a.slice([0, -1]), a.slice([0, -1]), 'x + y', { out: a.slice([1, null]) }),
    expected: [0, 0, 2, 4, 6, 8, 10, 12],
  },
  {
    name: 'row sums into the last row',
    shape: [4, 4],
    run: (a) => sum(a, { axis: 1, out: a.slice(3) }),
    expected: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 6, 22, 38, 54],
  },
  {
    name: 'a 2D copy onto its own rows shifted by one',
    shape: [4, 4],
    run: (a) => a.slice([1, null], [0, 2]).copyFrom(a.slice([0, -1], [0, 2])),
    expected: [0, 1, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15],
  },
  // Emulated copies move bytes as memmove does, so this one shows only on a GPU, where an
  // overlapping cuMemcpy is undefined.
  {
    name: 'a linear copy onto itself shifted by one',
    shape: [8],
    run: (a) => a.slice([1, null]).copyFrom(a.slice([0, -1])),
    expected: [0, 0, 1, 2, 3, 4, 5, 6],
  },
];

for (const c of overlapping) {
  test(`an output overlapping an input gives the input as it was (NumPy): ${c.name}`, () => {
    const n = c.shape.reduce((p, k) => p * k, 1);
    using a = DeviceArray.from(iota(n), { shape: c.shape });
    c.run(a);
    assert.deepEqual(Array.from(a.toHost()), c.expected);
  });
}

test('exact aliasing stays allowed; outputs sharing memory in different orders are refused; interleaved views are apart', () => {
  using a = DeviceArray.from(iota(8));
  map(a, 'x * 2', { out: a });
  elementwise('y = y + x', { x: a, y: a });
  assert.deepEqual(Array.from(a.toHost()), [0, 4, 8, 12, 16, 20, 24, 28]);
  assert.throws(
    () => elementwise('y = 1; z = 2', { y: a, z: a.slice([null, null, -1]) }),
    (e: Error) => e instanceof VramStateError && /y and z are both written/.test(e.message),
  );
  assert.deepEqual(Array.from(a.toHost()), [0, 4, 8, 12, 16, 20, 24, 28], 'the refusal wrote nothing');
  using b = DeviceArray.from(iota(8));
  zipWith(b.slice([0, null, 2]), b.slice([1, null, 2]), 'x * 10 + y', { out: b.slice([1, null, 2]) });
  assert.deepEqual(Array.from(b.toHost()), [0, 1, 2, 23, 4, 45, 6, 67]);
});

test("a stream given: the copy of an overlapping input is made and freed in that stream's order", () => {
  using stream = Stream.create();
  using a = DeviceArray.from(iota(4096));
  map(a, 'x + 1', { out: a.slice([null, null, -1]), stream });
  const host = a.toHost();
  assert.equal(host[0], 4096);
  assert.equal(host[4095], 1);
});

test('every operand is read once: a getter that changes its answer cannot make a kernel write past an array', () => {
  using wide = DeviceArray.zeros([512], 'float64');
  using narrow = DeviceArray.zeros([512], 'uint8');
  using neighbour = DeviceArray.full([4096], 7, 'uint8');
  let reads = 0;
  const values = {
    get y(): DeviceArray {
      reads++;
      return reads === 1 ? wide : narrow;
    },
  };
  elementwise('y = 1', values);
  assert.equal(reads, 1, 'the operands object was read once');
  assert.equal(sum(wide), 512);
  assert.equal(sum(narrow), 0);
  assert.equal(sum(neighbour), 7 * 4096);
});

test('options are read once: an out that a getter takes back is not freed on the error path', () => {
  let outReads = 0;
  using x = DeviceArray.from(iota(4));
  using out = DeviceArray.zeros([4], 'float32');
  const options = {
    get out(): DeviceArray | undefined {
      outReads++;
      return outReads === 1 ? out : undefined;
    },
  };
  assert.throws(() => map(x, 'nosuch(x)', options), /unknown function/);
  assert.equal(outReads, 1, 'options were read once');
  assert.equal(out.freed, false, "the caller's out is not freed on the error path");
});

test('a shape is read once: the dimensions checked are the dimensions allocated', () => {
  let shapeReads = 0;
  const shape = [4];
  Object.defineProperty(shape, 0, { get: () => (shapeReads++ === 0 ? 4 : 1 << 20), enumerable: true });
  using s = DeviceArray.empty(shape, 'float32');
  assert.deepEqual(s.shape, [4]);
  assert.equal(shapeReads, 1, 'the shape was read once');
});

test('a Proxy of an array is not an array: its shape could change between the check and the launch', () => {
  using a = DeviceArray.zeros([4], 'float32');
  const proxy = new Proxy(a, {});
  assert.throws(() => fill(proxy, 1), TypeError);
  assert.throws(() => elementwise('y = 1', { y: proxy }), TypeError);
  assert.throws(() => sum(proxy), TypeError);
});

/** The bytes a layout at `base` touches. */
function bytesOf(l: Layout, base: number): Set<number> {
  const bytes = new Set<number>();
  const index = l.shape.map(() => 0);
  const count = l.shape.reduce((p, n) => p * n, 1);
  for (let k = 0; k < count; k++) {
    let at = base + l.byteOffset;
    index.forEach((i, d) => {
      at += i * l.strides[d]! * l.itemSize;
    });
    for (let b = 0; b < l.itemSize; b++) bytes.add(at + b);
    for (let d = l.shape.length - 1; d >= 0; d--) {
      if (++index[d]! < l.shape[d]!) break;
      index[d] = 0;
    }
  }
  return bytes;
}

const layout = fc.integer({ min: 1, max: 3 }).chain((ndim) =>
  fc.record({
    shape: fc.array(fc.integer({ min: 0, max: 4 }), { minLength: ndim, maxLength: ndim }),
    strides: fc.array(fc.integer({ min: -6, max: 6 }), { minLength: ndim, maxLength: ndim }),
    byteOffset: fc.integer({ min: 0, max: 64 }),
    itemSize: fc.constantFrom(1, 2, 4, 8),
  }),
);

test('mayShareBytes never says "disjoint" of layouts that share a byte; sameElements means the same bytes', () => {
  fc.assert(
    fc.property(layout, layout, fc.integer({ min: 0, max: 48 }), (a, b, base) => {
      const shared = [...bytesOf(a, 0)].some((x) => bytesOf(b, base).has(x));
      if (shared) assert.equal(mayShareBytes(a, 0, b, base), true);
      if (sameElements(a, 0, b, base)) assert.deepEqual([...bytesOf(a, 0)].sort(), [...bytesOf(b, base)].sort());
    }),
    { numRuns: 2000 },
  );
  const even: Layout = { shape: [8], strides: [2], byteOffset: 0, itemSize: 4 };
  assert.equal(mayShareBytes(even, 0, { ...even, byteOffset: 4 }, 0), false, 'odd and even elements are proved apart');
});
