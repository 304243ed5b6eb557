/**
 * DeviceArray: every dtype round-trips random data at odd sizes; vector dtypes to and from (N, 3)
 * host data; slices, steps, transposes and reshapes against a pure-JavaScript reference (property
 * tests, reads and writes, sync and async); pitched arrays (cuMemAllocPitch and arena blocks);
 * async copies ordered on a real stream; every bad input a typed error that leaves nothing
 * allocated. Runs on the emulated backend and, unchanged, on a GPU.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { assertMemoryReturned, deviceMemoryUsed, forceGc, needsGc, onGpu } from '../helpers.js';
import { setBackend } from '../../src/backend/select.js';
import { EmulatedBackend } from '../../src/backend/emulated/emulated-backend.js';
import { Device } from '../../src/device.js';
import { Stream } from '../../src/stream.js';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { ArenaResource } from '../../src/resource/suballoc/arena.js';
import { bytesOf } from '../../src/buffer/copy-planning.js';
import { onLeak } from '../../src/backstop.js';
import { DoubleFreeError, UseAfterFreeError, VramStateError } from '../../src/errors.js';
import { dtypeOf, dtypes, type DTypeName } from '../../src/array/dtype.js';
import { hostView } from '../../src/array/host-data.js';
import { DeviceArray } from '../../src/array/device-array.js';
import { planRead, planWrite } from '../../src/array/strided-copy.js';
import type { SliceSpec } from '../../src/array/layout.js';

if (!onGpu) setBackend(new EmulatedBackend({ deviceCount: 2, capacityBytes: 1 << 30 }));

const device = Device.get(0);
const allDTypes = Object.keys(dtypes) as DTypeName[];

/** xorshift bytes; never all zero (bool: random 0/1 with at least one 1). */
function randomBytes(n: number, seed: number, bool = false): Uint8Array {
  const out = new Uint8Array(n);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out[i] = bool ? x & 1 : x & 0xff;
  }
  if (n > 0) out[0] = bool ? 1 : out[0]! | 1;
  return out;
}

/** Random host data of `count` elements of the dtype, as its TypedArray. */
function randomData(name: DTypeName, count: number, seed: number): ReturnType<typeof hostView> {
  const dt = dtypeOf(name);
  return hostView(dt, randomBytes(count * dt.byteSize, seed, dt.component === 'bool'));
}

function used(): number {
  return deviceMemoryUsed(device);
}

/** `fn` must throw `type`; afterwards no device memory may stay allocated. */
function throwsAndLeavesNothing(fn: () => unknown, type: new (...args: never[]) => Error, message?: RegExp): void {
  const before = used();
  assert.throws(fn, (error: unknown) => {
    assert.ok(error instanceof type, `expected ${type.name}, got ${String(error)}`);
    if (message !== undefined) assert.match((error as Error).message, message);
    return true;
  });
  assertMemoryReturned(before, used(), 'nothing stays allocated after the error');
}

test('every dtype round-trips random data at sizes 1, 31 and 1025', () => {
  const before = used();
  for (const name of allDTypes) {
    for (const n of [1, 31, 1025]) {
      const data = randomData(name, n, n * 7 + name.length);
      using a = DeviceArray.from(data, { dtype: name });
      assert.equal(a.dtype, dtypes[name]);
      assert.deepEqual(a.shape, [n]);
      assert.equal(a.nbytes, n * dtypes[name].byteSize);
      const back = a.toHost();
      assert.equal(back.constructor, data.constructor, `${name} comes back as its host type`);
      assert.deepEqual(bytesOf(back), bytesOf(data), `${name} x ${n}`);
    }
  }
  assertMemoryReturned(before, used(), 'every array was freed');
});

test('large odd sizes (3 * 2^20 + 7) round-trip, sync and async', async () => {
  const n = 3 * 2 ** 20 + 7;
  using s = Stream.create({ device });
  for (const name of ['uint8', 'float32', 'float3', 'int64'] as const) {
    const data = randomData(name, n, 99);
    using a = DeviceArray.from(data as never, { dtype: name });
    assert.deepEqual(bytesOf(a.toHost()), bytesOf(data), name);
    using b = await DeviceArray.fromAsync(data as never, { dtype: name, stream: s });
    assert.deepEqual(bytesOf(await b.toHostAsync({ stream: s })), bytesOf(data), `${name} async`);
  }
});

test('the dtype is inferred from the TypedArray class; types keep float32 and float3 apart', () => {
  using f = DeviceArray.from(new Float32Array([1, 2, 3]));
  using i = DeviceArray.from(new Int16Array([1, -2]));
  using u = DeviceArray.from(new BigUint64Array([1n, 2n ** 64n - 1n]));
  const f32: DeviceArray<'float32'> = f;
  const i16: DeviceArray<'int16'> = i;
  const u64: DeviceArray<'uint64'> = u;
  assert.equal(f32.dtype.name, 'float32');
  assert.equal(i16.dtype.name, 'int16');
  assert.deepEqual([...u64.toHost()], [1n, 2n ** 64n - 1n]);
  using v = DeviceArray.from(new Float32Array(6), { dtype: 'float3' });
  const v3: DeviceArray<'float3'> = v;
  // @ts-expect-error: a float3 array is not a float32 array
  const wrong: DeviceArray<'float32'> = v3;
  void wrong;
  assert.deepEqual(v3.shape, [2]);
  using plain = DeviceArray.from([1, 2, 3]); // plain numbers: the default dtype (default-dtype.test.ts)
  assert.equal(plain.dtype.name, 'float32');
  assert.throws(() => DeviceArray.from(new ArrayBuffer(8) as unknown as Float32Array), TypeError);
  assert.throws(() => DeviceArray.from(new Uint8ClampedArray(4) as unknown as Uint8Array), TypeError);
});

test('vector dtypes to and from (N, 3) host data', () => {
  const n = 257;
  const xyz = new Float32Array(n * 3).map((_, k) => k + 0.5);
  using a = DeviceArray.from(xyz, { dtype: 'float3' });
  assert.deepEqual(a.shape, [n]);
  assert.equal(a.buffer.byteLength, n * 12, 'float3 is 12 bytes');
  assert.deepEqual(a.toHost(), xyz);
  const nested = a.toArray();
  assert.deepEqual(nested[0], [0.5, 1.5, 2.5]);
  assert.deepEqual(nested[n - 1], [3 * n - 2.5, 3 * n - 1.5, 3 * n - 0.5]);
  using b = DeviceArray.from(nested, { dtype: 'float3' });
  assert.deepEqual(b.toHost(), xyz);
  // A 2D shape of vectors, and every other vector.
  using grid = DeviceArray.from(
    new Int32Array(4 * 5 * 3).map((_, k) => k),
    { dtype: 'int3', shape: [4, 5] },
  );
  assert.deepEqual(grid.slice(2, [0, null, 2]).toArray(), [
    [30, 31, 32],
    [36, 37, 38],
    [42, 43, 44],
  ]);
  using h = DeviceArray.from(
    [
      [1, 2],
      [0.5, -0.25],
    ],
    { dtype: 'half2' },
  );
  assert.deepEqual(h.toArray(), [
    [1, 2],
    [0.5, -0.25],
  ]);
  using d = DeviceArray.full([3], [1.5, -2, 3.25], 'double3');
  assert.deepEqual(d.toHost(), new Float64Array([1.5, -2, 3.25, 1.5, -2, 3.25, 1.5, -2, 3.25]));
  // The shape must hold the data: 17 floats are not whole float3 elements.
  throwsAndLeavesNothing(() => DeviceArray.from(new Float32Array(17), { dtype: 'float3' }), RangeError);
  throwsAndLeavesNothing(() => DeviceArray.from(new Float32Array(18), { dtype: 'float3', shape: [2, 2] }), RangeError);
});

test('empty, zeros, full and fill; 0-d and empty arrays', () => {
  using z = DeviceArray.zeros([3, 4], 'int32');
  assert.deepEqual([...z.toHost()], new Array(12).fill(0));
  using f = DeviceArray.full([5000], 1.5, 'float32'); // a 4-byte pattern: one memset
  assert.ok(f.toHost().every((x) => x === 1.5));
  using g = DeviceArray.full([9000], [1, 2, 3], 'float3'); // no short period: doubled on the device
  assert.deepEqual(g.toHost().subarray(-6), new Float32Array([1, 2, 3, 1, 2, 3]));
  assert.ok(g.toArray().every((v) => JSON.stringify(v) === '[1,2,3]'));
  using l = DeviceArray.full([10], -5n, 'int64');
  assert.deepEqual([...l.toHost()], new Array(10).fill(-5n));
  using b = DeviceArray.full([7], true, 'bool');
  assert.deepEqual(b.toArray(), new Array(7).fill(true));
  using m = DeviceArray.zeros([4, 6], 'uint16');
  m.slice([1, 3], [0, null, 2]).fill(7);
  assert.deepEqual(m.toArray(), [
    [0, 0, 0, 0, 0, 0],
    [7, 0, 7, 0, 7, 0],
    [7, 0, 7, 0, 7, 0],
    [0, 0, 0, 0, 0, 0],
  ]);
  using s = DeviceArray.full([], 42, 'int8');
  assert.deepEqual(s.shape, []);
  assert.equal(s.size, 1);
  assert.deepEqual(s.toArray(), [42]);
  using e = DeviceArray.empty([0, 3], 'float64');
  assert.equal(e.size, 0);
  assert.equal(e.toHost().length, 0);
  e.copyFrom(new Float64Array(0));
  assert.throws(() => DeviceArray.full([2], 300, 'uint8'), RangeError);
  assert.throws(() => DeviceArray.full([2], 1.5, 'int32'), RangeError);
});

// ---------- views against a pure-JavaScript reference ----------

/** The indices a slice spec takes along a dimension of extent n (Python's range, bounds from the end). */
function referenceIndices(spec: SliceSpec, n: number): number[] | number {
  if (typeof spec === 'number') return spec < 0 ? spec + n : spec;
  if (spec === null || spec === undefined) return Array.from({ length: n }, (_, i) => i);
  const range = spec as { start?: number | null; stop?: number | null; step?: number | null };
  const [start, stop, step] = Array.isArray(spec) ? (spec as readonly (number | null | undefined)[]) : [range.start, range.stop, range.step];
  const st = step ?? 1;
  const norm = (v: number): number => (v < 0 ? v + n : v);
  const out: number[] = [];
  if (st > 0) {
    for (let i = start == null ? 0 : norm(start); i < (stop == null ? n : norm(stop)); i += st) out.push(i);
  } else {
    for (let i = start == null ? n - 1 : norm(start); i > (stop == null ? -1 : norm(stop)); i += st) out.push(i);
  }
  return out;
}

/** A view described as operations, applied to a DeviceArray or to the reference index grid. */
interface ViewOps {
  readonly specs: SliceSpec[];
  readonly axes: number[] | undefined;
}

/**
 * The flat (row-major) source index of every element of the view, in the view's row-major order,
 * with the view's shape: the reference the arrays are checked against.
 */
function referenceView(shape: readonly number[], ops: ViewOps): { shape: number[]; flat: number[] } {
  const strides = shape.map((_, i) => shape.slice(i + 1).reduce((a, b) => a * b, 1));
  let dims: { indices: number[]; stride: number }[] = [];
  let base = 0;
  shape.forEach((n, axis) => {
    const taken = referenceIndices(ops.specs[axis] ?? null, n);
    if (typeof taken === 'number') base += taken * strides[axis]!;
    else dims.push({ indices: taken, stride: strides[axis]! });
  });
  if (ops.axes !== undefined) dims = ops.axes.map((a) => dims[a]!);
  const flat: number[] = [];
  const walk = (d: number, at: number): void => {
    if (d === dims.length) {
      flat.push(at);
      return;
    }
    for (const i of dims[d]!.indices) walk(d + 1, at + i * dims[d]!.stride);
  };
  walk(0, base);
  return { shape: dims.map((d) => d.indices.length), flat };
}

function applyOps<N extends DTypeName>(a: DeviceArray<N>, ops: ViewOps): DeviceArray<N> {
  const v = a.slice(...ops.specs);
  return ops.axes === undefined ? v : v.transpose(...ops.axes);
}

/** A random valid slice spec for a dimension of extent n. */
function specArbitrary(n: number): fc.Arbitrary<SliceSpec> {
  const options: fc.Arbitrary<SliceSpec>[] = [fc.constant(null)];
  if (n > 0) options.push(fc.integer({ min: -n, max: n - 1 }));
  const bound = fc.option(
    fc.integer({ min: -n, max: n }).filter((v) => v !== -n || n > 0),
    { nil: null },
  );
  options.push(
    fc
      .tuple(bound, bound, fc.integer({ min: 1, max: 3 }))
      .map(([start, stop, step]) => (step === 1 && start === null ? ([start, stop] as const) : ([start, stop, step] as const))),
  );
  if (n > 0) {
    const down = fc.option(fc.integer({ min: -n, max: n - 1 }), { nil: null });
    options.push(fc.tuple(down, down, fc.integer({ min: -3, max: -1 })).map(([start, stop, step]) => ({ start, stop, step })));
  }
  return fc.oneof(...options);
}

/** A random array (shape, dtype, maybe pitched) and a random view of it. */
interface ViewCase {
  readonly shape: number[];
  readonly dtype: DTypeName;
  readonly specs: SliceSpec[];
  readonly transpose: boolean;
  readonly pitched: boolean;
  readonly seed: number;
}

const viewCase: fc.Arbitrary<ViewCase> = fc.array(fc.integer({ min: 1, max: 6 }), { minLength: 1, maxLength: 4 }).chain((shape) =>
  fc.record({
    shape: fc.constant(shape),
    dtype: fc.constantFrom<DTypeName>('int32', 'uint8', 'float3', 'float64', 'half2', 'short3', 'double2'),
    specs: fc.tuple(...shape.map((n) => specArbitrary(n))),
    transpose: fc.boolean(),
    pitched: fc.boolean(),
    seed: fc.integer(),
  }),
);

/** Takes element `i` (all its bytes) of host data. */
function elementBytes(bytes: Uint8Array, i: number, size: number): Uint8Array {
  return bytes.subarray(i * size, (i + 1) * size);
}

function expectedBytes(data: Uint8Array, flat: readonly number[], size: number): Uint8Array {
  const out = new Uint8Array(flat.length * size);
  flat.forEach((i, k) => out.set(elementBytes(data, i, size), k * size));
  return out;
}

function makeBase(c: { shape: number[]; dtype: DTypeName; pitched: boolean; seed: number }): { a: DeviceArray; data: Uint8Array } {
  const data = randomData(
    c.dtype,
    c.shape.reduce((x, y) => x * y, 1),
    c.seed,
  );
  const a = c.pitched && c.shape.length === 2 ? DeviceArray.pitched(c.shape as [number, number], c.dtype) : DeviceArray.empty(c.shape, c.dtype);
  a.copyFrom(data as never);
  return { a, data: bytesOf(data) };
}

function opsOf(c: { shape: number[]; specs: SliceSpec[]; transpose: boolean }): ViewOps {
  const ndim = c.specs.filter((s) => typeof s !== 'number').length;
  // A rotation of the axes (the reversal for 2D): a transpose that is not its own inverse in 3D+.
  return { specs: c.specs, axes: c.transpose ? Array.from({ length: ndim }, (_, i) => (i + 1) % ndim) : undefined };
}

/** What a view case gives its check: the base array, its data, the view, its reference and element size. */
interface ViewSubject {
  readonly a: DeviceArray;
  readonly data: Uint8Array;
  readonly v: DeviceArray;
  readonly ref: { shape: number[]; flat: number[] };
  readonly size: number;
}

/** Builds the base array and the view of a case, runs `check`, and frees the base array. */
async function withView(c: ViewCase, check: (x: ViewSubject) => void | Promise<void>): Promise<void> {
  const { a, data } = makeBase(c);
  try {
    const ops = opsOf(c);
    const v = applyOps(a, ops);
    await check({ a, data, v, ref: referenceView(c.shape, ops), size: v.dtype.byteSize });
  } finally {
    a.free();
  }
}

/** The base array's bytes after `fresh` was written through the view. */
function afterWrite(x: ViewSubject, fresh: Uint8Array): Uint8Array {
  const expected = x.data.slice();
  x.ref.flat.forEach((i, k) => expected.set(elementBytes(fresh, k, x.size), i * x.size));
  return expected;
}

test('views read what a pure-JavaScript reference of the same slicing reads', async () => {
  const before = used();
  await fc.assert(
    fc.asyncProperty(viewCase, (c) =>
      withView(c, ({ v, ref, data, size }) => {
        assert.deepEqual(v.shape, ref.shape);
        assert.deepEqual(bytesOf(v.toHost()), expectedBytes(data, ref.flat, size));
        // A contiguous copy on the device holds the same, and reshapes.
        using copy = v.copy();
        assert.ok(copy.isContiguous);
        assert.deepEqual(bytesOf(copy.reshape(-1).toHost()), expectedBytes(data, ref.flat, size));
      }),
    ),
    { numRuns: 300 },
  );
  assertMemoryReturned(before, used(), 'every array was freed');
});

test('writes through views land where the reference says and nowhere else (host and device sources)', async () => {
  await fc.assert(
    fc.asyncProperty(viewCase, fc.boolean(), (c, fromDevice) =>
      withView(c, (x) => {
        const fresh = bytesOf(randomData(c.dtype, x.ref.flat.length, c.seed ^ 0x5555));
        if (fromDevice) {
          using src = DeviceArray.from(fresh.slice().buffer, { dtype: c.dtype, shape: x.ref.shape });
          x.v.copyFrom(src);
        } else {
          x.v.copyFrom(hostView(dtypeOf(c.dtype), fresh.slice()) as never);
        }
        assert.deepEqual(bytesOf(x.a.toHost()), afterWrite(x, fresh));
      }),
    ),
    { numRuns: 300 },
  );
});

test('async reads and writes through views match the reference, on one stream', async () => {
  using s = Stream.create({ device });
  await fc.assert(
    fc.asyncProperty(viewCase, (c) =>
      withView(c, async (x) => {
        const fresh = hostView(dtypeOf(c.dtype), bytesOf(randomData(c.dtype, x.ref.flat.length, c.seed + 1)));
        // Copies of JavaScript memory are ordered by their promises: each is awaited before the next.
        assert.deepEqual(bytesOf(await x.v.toHostAsync({ stream: s })), expectedBytes(x.data, x.ref.flat, x.size));
        await x.v.copyFromAsync(fresh as never, { stream: s });
        assert.deepEqual(bytesOf(await x.a.toHostAsync({ stream: s })), afterWrite(x, bytesOf(fresh)));
      }),
    ),
    { numRuns: 60 },
  );
});

test('each layout takes the documented copy path', () => {
  using a = DeviceArray.empty([64, 64], 'float32');
  using p = DeviceArray.pitched([10, 30], 'float32');
  const path = (layout = a.layout): [string, string] => [planRead(layout).path, planWrite(layout).path];
  assert.deepEqual(path(a.layout), ['linear', 'linear']);
  assert.deepEqual(path(a.slice([3, 9]).layout), ['linear', 'linear'], 'whole rows are contiguous');
  assert.deepEqual(path(a.slice(null, [0, 32]).layout), ['2d', '2d'], 'half rows: 128-byte rows at a 256-byte pitch');
  assert.deepEqual(path(a.slice(null, [0, 4]).layout), ['2d', '2d'], 'narrow rows, sparse: still 2D');
  assert.deepEqual(path(a.slice(null, [0, 60]).layout), ['2d', '2d']);
  assert.deepEqual(path(p.layout), ['2d', '2d'], 'a pitched array');
  assert.deepEqual(path(a.slice(null, 5).layout), ['2d', '2d'], 'a column: rows of one element');
  assert.deepEqual(path(a.slice([0, 8], [0, null, 2]).layout), ['gather', '2d'], 'every other element of whole rows: 256 one-element rows');
  assert.deepEqual(path(a.slice([0, 8], [0, 60, 2]).layout), ['gather', 'blocks'], 'dense stepped: gather to read, rows of 2D copies to write');
  assert.equal(planWrite(a.slice([0, 8], [0, 60, 2]).layout).blocks.length, 8);
  assert.deepEqual(path(a.T.layout), ['gather', 'blocks'], 'a transpose: permuted on the host, one copy');
  assert.deepEqual(path(a.slice({ step: -1 }).layout), ['gather', 'blocks']);
  using c = DeviceArray.empty([16, 16, 16], 'float32');
  assert.deepEqual(path(c.slice([0, null, 4], null, [0, 3]).layout), ['blocks', 'blocks'], 'sparse 3D: one 2D copy per outer index');
  assert.equal(planWrite(c.slice([0, null, 4], null, [0, 3]).layout).blocks.length, 4);
  assert.equal(planWrite(a.T.layout).blocks.length, 1, 'a transposed write is one linear copy after a host transpose');
  assert.equal(planRead(a.slice(0, 0).layout).path, 'linear');
  assert.equal(planRead(a.slice([0, 0]).layout).path, 'empty');
});

test('slices, reshapes and transposes are views: no memory, shared data, strides in elements', () => {
  using a = DeviceArray.from(
    new Int32Array(24).map((_, i) => i),
    { shape: [2, 3, 4] },
  );
  const before = used();
  const t = a.transpose(2, 0, 1);
  assert.deepEqual(t.shape, [4, 2, 3]);
  assert.deepEqual(t.strides, [1, 12, 4]);
  assert.deepEqual(a.T.shape, [4, 3, 2]);
  const r = a.reshape(6, 4);
  assert.deepEqual(r.strides, [4, 1]);
  assert.deepEqual(a.reshape([-1]).shape, [24]);
  const s = a.slice(1, [null, null, -1], [1, 4, 2]);
  assert.deepEqual(s.shape, [3, 2]);
  assert.deepEqual(s.strides, [-4, 2]);
  assert.equal(s.byteOffset, (12 + 8 + 1) * 4);
  assert.deepEqual(s.toArray(), [
    [21, 23],
    [17, 19],
    [13, 15],
  ]);
  assert.equal(s.ptr, a.ptr + s.byteOffset);
  assert.equal(s.buffer, a.buffer);
  assert.equal(s.ownsMemory, false);
  assert.equal(used(), before, 'views allocate nothing');
  s.copyFrom(new Int32Array([-1, -2, -3, -4, -5, -6]));
  assert.deepEqual(a.slice(1).toArray(), [
    [12, -5, 14, -6],
    [16, -3, 18, -4],
    [20, -1, 22, -2],
  ]);
  assert.deepEqual(a.slice({ start: -1 }).shape, [1, 3, 4]);
  assert.deepEqual(a.slice(null, { stop: -1 }).shape, [2, 2, 4]);
  // A `using` view is left alone; its owner is not.
  {
    using v = a.slice(0);
    void v;
  }
  assert.equal(a.freed, false);
});

test('pitched 2D arrays: stride = pitch / byteSize, padding skipped by 2D copies, sliced, sync and async', async () => {
  using s = Stream.create({ device });
  for (const [dtype, h, w] of [
    ['float32', 37, 100],
    ['uchar4', 19, 33],
    ['float3', 9, 50],
    ['char3', 5, 7],
    ['double2', 3, 1],
  ] as const) {
    const before = used();
    {
      using p = DeviceArray.pitched([h, w], dtype);
      const b = dtypes[dtype].byteSize;
      const pitch = p.strides[0]! * b;
      assert.ok(pitch >= w * b, 'the pitch covers a row');
      assert.equal(pitch % b, 0, 'the pitch is a whole number of elements');
      assert.deepEqual(p.strides.slice(1), [1]);
      assert.equal(p.isContiguous, w * b === pitch);
      (p.buffer as DeviceBuffer).memset(0xa5); // padding marker
      const data = randomData(dtype, h * w, h * w);
      p.copyFrom(data as never);
      assert.deepEqual(bytesOf(p.toHost()), bytesOf(data), `${dtype} round trip`);
      const raw = (p.buffer as DeviceBuffer).copyToHost(new Uint8Array(p.buffer.byteLength));
      for (let y = 0; y < h; y++) {
        assert.ok(
          raw.subarray(y * pitch + w * b, (y + 1) * pitch).every((x) => x === 0xa5),
          'padding untouched',
        );
      }
      // A window of the image: rows of the pitched layout.
      const win = p.slice([1, h], [0, w, 1]);
      const fresh = randomData(dtype, (h - 1) * w, 3);
      await win.copyFromAsync(fresh as never, { stream: s });
      assert.deepEqual(bytesOf(await win.toHostAsync({ stream: s })), bytesOf(fresh));
      assert.throws(() => p.reshape(-1), VramStateError);
      assert.match(
        String(
          (() => {
            try {
              p.reshape(-1);
            } catch (e) {
              return e;
            }
          })(),
        ),
        /contiguous/,
      );
    }
    assertMemoryReturned(before, used(), `pitched ${dtype} freed`);
  }
});

test("pitched arrays from an ArenaResource's pitched blocks", async () => {
  const arena = new ArenaResource({ size: 4 * ArenaResource.ceil2DVolume(640 * 12, 48) });
  try {
    using s = Stream.create({ device });
    {
      using img = DeviceArray.pitched([48, 640], 'float3', { resource: arena, stream: s });
      const pitch = img.strides[0]! * 12;
      assert.equal(pitch % arena.pitchAlignment, 0);
      assert.equal(pitch % 12, 0);
      assert.ok(arena.memoryFigures().allocatedBytes.value >= pitch * 48);
      const data = randomData('float3', 48 * 640, 17);
      await img.copyFromAsync(data as never, { stream: s });
      assert.deepEqual(bytesOf(await img.toHostAsync()), bytesOf(data));
      using gray = DeviceArray.pitched([48, 641], 'uint8', { resource: arena });
      assert.equal(gray.strides[0]! % arena.pitchAlignment, 0);
      gray.copyFrom(randomData('uint8', 48 * 641, 5) as never);
      assert.throws(() => DeviceArray.pitched([2, 2], 'float32', { resource: {} as ArenaResource }), TypeError);
    }
    assert.equal(arena.memoryFigures().allocatedBytes.value, 0, 'the blocks went back to the arena');
  } finally {
    arena.destroy();
  }
});

test('async copies on a real stream: device copies in stream order, JavaScript memory by promise', async () => {
  using s = Stream.create({ device });
  const n = 100_003;
  const one = randomData('float32', n, 1) as Float32Array;
  const two = randomData('float32', n, 2) as Float32Array;
  using a = DeviceArray.empty([n], 'float32', { stream: s });
  using b = DeviceArray.empty([n], 'float32', { stream: s });
  await a.copyFromAsync(one, { stream: s });
  assert.deepEqual(await a.toHostAsync({ stream: s }), one);
  await a.copyFromAsync(two, { stream: s });
  // Queued at call time, each after the work before it on s: the device copy, then the reads.
  const c = b.copyFromAsync(a, { stream: s });
  const r2 = b.copyToAsync(new Float32Array(n), { stream: s });
  const t = a.slice({ step: -1 }).toHostAsync({ stream: s });
  await c;
  assert.deepEqual(await r2, two);
  assert.deepEqual(await t, two.slice().reverse());
  // The array's own stream is the default of its async copies.
  assert.equal(a.stream, s);
  await a.copyFromAsync(one);
  assert.deepEqual(await a.toHostAsync(), one);
});

test('device to device copies between layouts, and peer copies', () => {
  using a = DeviceArray.from(
    new Float64Array(30).map((_, i) => i),
    { shape: [5, 6] },
  );
  using b = DeviceArray.zeros([6, 5], 'float64');
  b.copyFrom(a.T);
  assert.deepEqual(b.toArray(), a.T.toArray());
  using p = DeviceArray.pitched([5, 6], 'float64');
  p.copyFrom(a);
  a.T.copyTo(b);
  assert.deepEqual(p.toArray(), a.toArray());
  using q = DeviceArray.pitched([5, 6], 'float64');
  q.copyFrom(p);
  assert.deepEqual(q.slice(null, [1, 4]).toArray(), a.slice(null, [1, 4]).toArray());
  assert.throws(() => b.copyFrom(a), RangeError);
  using i = DeviceArray.zeros([5, 6], 'int64');
  assert.throws(() => i.copyFrom(a as unknown as DeviceArray<'int64'>), TypeError);
  if (Device.count() >= 2) {
    using other = DeviceArray.zeros([5, 6], 'float64', { device: 1 });
    assert.equal(other.device, Device.get(1));
    other.copyFrom(a);
    assert.deepEqual(other.toArray(), a.toArray());
  }
});

test('fromBuffer: arrays over memory the caller owns, with strides and offsets checked', () => {
  using buf = DeviceBuffer.allocate(4096);
  buf.copyFromHost(new Float32Array(1024).map((_, i) => i));
  const every4th = DeviceArray.fromBuffer(buf, { dtype: 'float32', shape: [256], strides: [4], byteOffset: 4 });
  assert.deepEqual([...every4th.toHost().subarray(0, 3)], [1, 5, 9]);
  assert.throws(() => every4th.free(), VramStateError);
  const whole = DeviceArray.fromBuffer(buf, { dtype: 'float4' });
  assert.deepEqual(whole.shape, [256]);
  throwsAndLeavesNothing(() => DeviceArray.fromBuffer(buf, { dtype: 'float32', shape: [256], strides: [5] }), RangeError, /outside/);
  throwsAndLeavesNothing(() => DeviceArray.fromBuffer(buf, { dtype: 'float32', shape: [2], strides: [-1] }), RangeError);
  throwsAndLeavesNothing(() => DeviceArray.fromBuffer(buf, { dtype: 'float32', shape: [1025] }), RangeError);
  throwsAndLeavesNothing(() => DeviceArray.fromBuffer(buf, { dtype: 'float4', byteOffset: 8 }), RangeError, /alignment/);
  throwsAndLeavesNothing(() => DeviceArray.fromBuffer(buf, { dtype: 'float32', shape: [2], strides: [1.5] }), RangeError);
  throwsAndLeavesNothing(() => DeviceArray.fromBuffer(buf, { dtype: 'float32', shape: [2, 2], strides: [1] }), RangeError, /2 dimensions/);
  throwsAndLeavesNothing(() => DeviceArray.fromBuffer(new Uint8Array(4) as unknown as DeviceBuffer, { dtype: 'uint8' }), TypeError);
  // Overlapping strides read fine, and refuse writes.
  const overlapping = DeviceArray.fromBuffer(buf, { dtype: 'float32', shape: [3, 3], strides: [1, 1] });
  assert.deepEqual(overlapping.toArray(), [
    [0, 1, 2],
    [1, 2, 3],
    [2, 3, 4],
  ]);
  throwsAndLeavesNothing(() => overlapping.copyFrom(new Float32Array(9)), VramStateError, /overlap/);
});

test('bad input is a typed error before any allocation, and leaves nothing allocated', () => {
  throwsAndLeavesNothing(() => DeviceArray.from(new Int32Array(4) as unknown as Float32Array, { dtype: 'float32' }), TypeError, /Float32Array/);
  throwsAndLeavesNothing(() => DeviceArray.from(new Float64Array(4) as unknown as Float32Array, { dtype: 'float3' }), TypeError);
  throwsAndLeavesNothing(() => DeviceArray.from(new Float32Array(6), { shape: [4, 2] }), RangeError);
  throwsAndLeavesNothing(() => DeviceArray.from([[1, 2], [3]], { dtype: 'int32' }), TypeError);
  for (const dim of [-1, 1.5, Number.NaN, Number.POSITIVE_INFINITY]) {
    throwsAndLeavesNothing(() => DeviceArray.empty([2, dim], 'float32'), RangeError);
    throwsAndLeavesNothing(() => DeviceArray.zeros([dim], 'uint8'), RangeError);
    throwsAndLeavesNothing(() => DeviceArray.pitched([dim, 4], 'float32'), RangeError);
  }
  throwsAndLeavesNothing(() => DeviceArray.empty(['2'] as unknown as number[], 'float32'), TypeError);
  throwsAndLeavesNothing(() => DeviceArray.empty('4' as unknown as number[], 'float32'), TypeError);
  throwsAndLeavesNothing(() => DeviceArray.empty(-4, 'float32'), RangeError);
  throwsAndLeavesNothing(() => DeviceArray.zeros(2.5), RangeError);
  throwsAndLeavesNothing(() => DeviceArray.empty([4], 'float5' as DTypeName), TypeError, /known dtypes/);
  throwsAndLeavesNothing(() => DeviceArray.pitched([0, 4], 'float32'), RangeError);
  throwsAndLeavesNothing(() => DeviceArray.pitched([4] as unknown as [number, number], 'float32'), RangeError);
  throwsAndLeavesNothing(() => DeviceArray.empty([4], 'float32', null as unknown as object), TypeError);
  throwsAndLeavesNothing(() => DeviceArray.empty([2 ** 40, 2 ** 20], 'float32'), RangeError);
  using a = DeviceArray.zeros([4, 6], 'float32');
  const before = used();
  assert.throws(() => a.slice(4), RangeError);
  assert.throws(() => a.slice(-5), RangeError);
  assert.throws(() => a.slice([0, 5, 0]), RangeError, 'step 0');
  assert.throws(() => a.slice([0, 7]), RangeError, 'stop past the end');
  assert.throws(() => a.slice({ start: 4, step: -1 }), RangeError);
  assert.throws(() => a.slice(0, 0, 0), RangeError, 'too many indices');
  assert.throws(() => a.slice(1.5), RangeError);
  assert.throws(() => a.slice('1' as unknown as number), TypeError);
  assert.throws(() => a.reshape(5, 5), RangeError);
  assert.throws(() => a.reshape(-1, -1), RangeError);
  assert.throws(() => a.reshape(7, -1), RangeError);
  assert.throws(() => a.T.reshape(24), VramStateError);
  assert.throws(() => a.transpose(0), RangeError);
  assert.throws(() => a.transpose(0, 0), RangeError);
  assert.throws(() => a.transpose(0, 2), RangeError);
  assert.throws(() => a.copyFrom(new Float32Array(23)), RangeError);
  assert.throws(() => a.copyFrom(new Float64Array(24) as unknown as Float32Array), TypeError);
  assert.throws(() => a.copyTo(new Float32Array(25)), RangeError);
  assert.throws(() => a.copyTo([] as unknown as Float32Array), TypeError);
  assert.throws(() => a.copyFrom(DeviceArray.fromBuffer(a.buffer as DeviceBuffer, { dtype: 'float32', shape: [4, 5] })), RangeError);
  assert.throws(() => a.slice(0).free(), VramStateError, 'views do not own memory');
  assertMemoryReturned(before, used(), 'failed operations allocate nothing');
});

test('async misuse rejects with the same typed errors', async () => {
  using a = DeviceArray.zeros([8], 'int32');
  await assert.rejects(a.copyFromAsync(new Uint32Array(8) as unknown as Int32Array), TypeError);
  await assert.rejects(a.copyFromAsync(new Int32Array(9)), RangeError);
  await assert.rejects(a.toHostAsync({ stream: {} as Stream }), TypeError);
  await assert.rejects(DeviceArray.fromAsync(new Int32Array(3), { shape: [2] }), RangeError);
});

test('use after free: the owner and every view throw UseAfterFreeError; double free is DoubleFreeError', async () => {
  using live = DeviceArray.zeros([8, 8], 'float32');
  const before = used();
  const a = DeviceArray.from(new Float32Array(64), { shape: [8, 8] });
  const v = a.slice([0, null, 2]).T;
  a.free();
  assert.equal(v.freed, true);
  assert.throws(() => a.free(), DoubleFreeError);
  a[Symbol.dispose]();
  for (const x of [a, v]) {
    assert.throws(() => x.toHost(), UseAfterFreeError);
    assert.throws(() => x.ptr, UseAfterFreeError);
    assert.throws(() => x.copyFrom(new Float32Array(x.size)), UseAfterFreeError);
    assert.throws(() => x.copyTo(new Float32Array(x.size)), UseAfterFreeError);
    assert.throws(() => x.slice(0), UseAfterFreeError);
    assert.throws(() => x.reshape(-1), UseAfterFreeError);
    assert.throws(() => x.fill(1), UseAfterFreeError);
    assert.throws(() => x.copy(), UseAfterFreeError);
    await assert.rejects(x.toHostAsync(), UseAfterFreeError);
  }
  assert.throws(() => live.copyFrom(a), UseAfterFreeError);
  assert.throws(() => a.copyTo(live), UseAfterFreeError);
  const buf = DeviceBuffer.allocate(64);
  buf.free();
  assert.throws(() => DeviceArray.fromBuffer(buf, { dtype: 'uint8' }), UseAfterFreeError);
  assertMemoryReturned(before, used(), 'the freed array returned its memory');
  assert.match(String(a), /freed/);
});

test('arrays come from the resource, stream and device asked for', () => {
  using s = Stream.create({ device });
  using a = DeviceArray.empty([100], 'float32', { stream: s });
  assert.equal(a.stream, s);
  assert.equal(a.device, device);
  assert.equal(a.ownsMemory, true);
  assert.ok(a.buffer instanceof DeviceBuffer);
  const arena = new ArenaResource({ size: 1 << 20 });
  try {
    {
      using b = DeviceArray.zeros([1000], 'float64', { resource: arena });
      assert.equal((b.buffer as DeviceBuffer).resource, arena);
      assert.equal(arena.memoryFigures().allocatedBytes.value, 8000);
    }
    assert.equal(arena.memoryFigures().allocatedBytes.value, 0);
  } finally {
    arena.destroy();
  }
  assert.match(String(a), /DeviceArray<float32>\(100,\) on device 0/);
});

test('a view keeps its buffer reachable: the backstop frees it only once the last view is dropped', needsGc, async () => {
  const collect = forceGc!;
  const leaked: number[] = [];
  const off = onLeak((leak) => leaked.push(leak.ptr));
  const settle = async (until: () => boolean): Promise<void> => {
    for (let i = 0; i < 50 && !until(); i++) {
      collect();
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  };
  try {
    // The owning array is dropped at once; only a strided view of it survives.
    let view: DeviceArray<'float32'> | undefined = (() => DeviceArray.full([4096], 3, 'float32').slice([0, null, 2]))();
    const ptr = view.buffer.ptr;
    await settle(() => false);
    assert.ok(!leaked.includes(ptr), 'nothing is freed while the view lives');
    assert.ok(
      view.toHost().every((x) => x === 3),
      'the memory under the view is intact',
    );
    view = undefined;
    await settle(() => leaked.includes(ptr));
    assert.ok(leaked.includes(ptr), 'the backstop freed the buffer once the view was gone');
  } finally {
    off();
  }
});
