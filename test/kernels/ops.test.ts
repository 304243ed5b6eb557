/**
 * The built-in operations against a float64 host reference, on random nonzero data, at sizes 1,
 * 31 and 1025 (and 5000, past the one-block limit of the whole-array reductions), on contiguous
 * arrays and on views (every other element, reversed, transposed), for every dtype each takes;
 * and every bad input a typed error. Runs on the emulated backend (the JavaScript twins) and,
 * unchanged, on a GPU (the generated CUDA).
 *
 * Tolerances: conversions to a float dtype are checked to half a unit in the last place of that
 * dtype (u = 2^-24 float32, 2^-11 float16, 2^-8 bfloat16, 2^-53 float64); a sum or dot of n
 * values to (n - 1) * u_acc * sum(|x|) + u_out * |result|, the bound of any summation order
 * (u_acc is float32's for float16/bfloat16/float32, float64's for float64); integers exactly.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DeviceArray } from '../../src/array/device-array.js';
import { dtypeOf, dtypes, type DTypeName, type ScalarName } from '../../src/array/dtype.js';
import { Stream } from '../../src/stream.js';
import { VramStateError } from '../../src/errors.js';
import { mulberry32 } from '../../src/util/random.js';
import { arange, ascontiguous, astype, dot, elementwise, fill, map, max, min, sum, zipWith } from '../../src/kernels/ops/index.js';
import { kernelScalar, kernelScalars } from '../../src/kernels/ops/scalar.js';
import { REDUCE_DTYPES } from '../../src/kernels/ops/reduction-kernels.js';
import { PROGRAM_CACHE_SIZE, programsCached } from '../../src/kernels/ops/elementwise.js';
import { USER_MODULE_CACHE_SIZE, userModulesLoaded } from '../../src/kernels/ops/builtin-module.js';
import { nvrtcAvailable } from '../../src/kernels/compile.js';
import { Device } from '../../src/device.js';
import { onGpu } from '../helpers.js';

const SIZES = [1, 31, 1025] as const;

/** Unit roundoff of each float dtype. */
const UNIT: Readonly<Partial<Record<ScalarName, number>>> = { float16: 2 ** -11, bfloat16: 2 ** -8, float32: 2 ** -24, float64: 2 ** -53 };

const rand = mulberry32(0x0b5);

/** A random nonzero value of a dtype's range, small enough that sums of a few thousand stay exact in float64. */
function randomValue(dtype: ScalarName): number {
  const sign = rand() < 0.5 ? -1 : 1;
  switch (dtype) {
    case 'bool':
      return 1;
    case 'int8':
    case 'int16':
    case 'int32':
    case 'int64':
      return sign * (1 + Math.floor(rand() * 100));
    case 'uint8':
    case 'uint16':
    case 'uint32':
    case 'uint64':
      return 1 + Math.floor(rand() * 200);
    default:
      return sign * (0.25 + rand());
  }
}

/** A new array of `shape` with random values, and the values as stored (row-major), as numbers. */
function randomArray(dtype: DTypeName, shape: readonly number[]): { array: DeviceArray; values: number[] } {
  const dt = dtypeOf(dtype);
  const s = kernelScalar[dt.component];
  const count = shape.reduce((p, n) => p * n, 1) * dt.components;
  const bytes = new Uint8Array(count * s.bytes);
  const view = new DataView(bytes.buffer);
  const values: number[] = [];
  for (let i = 0; i < count; i++) {
    s.write(view, i * s.bytes, randomValue(dt.component));
    values.push(s.read(view, i * s.bytes));
  }
  return { array: DeviceArray.from(bytes.buffer, { dtype, shape }), values };
}

/** An array's components as numbers, row-major (strides honoured). */
function valuesOf(a: DeviceArray): number[] {
  const host = a.toHost();
  const view = new DataView(host.buffer, host.byteOffset, host.byteLength);
  const s = kernelScalar[a.dtype.component];
  return Array.from({ length: host.byteLength / s.bytes }, (_, i) => s.read(view, i * s.bytes));
}

/** The layouts each size is checked on: the array itself, every other element, every other reversed. */
interface Case {
  readonly label: string;
  readonly array: DeviceArray;
  /** The view's components, row-major. */
  readonly values: number[];
  readonly base: DeviceArray;
}

function cases(dtype: DTypeName, n: number): Case[] {
  const c = dtypeOf(dtype).components;
  const plain = randomArray(dtype, [n]);
  const wide = randomArray(dtype, [2 * n]);
  const pick = (indices: number[]): number[] => indices.flatMap((i) => wide.values.slice(i * c, i * c + c));
  const even = Array.from({ length: n }, (_, i) => 2 * i);
  return [
    { label: `${dtype}[${n}]`, array: plain.array, values: plain.values, base: plain.array },
    { label: `${dtype}[${2 * n}][::2]`, array: wide.array.slice([0, null, 2]), values: pick(even), base: wide.array },
    { label: `${dtype}[${2 * n}][::-2]`, array: wide.array.slice([null, null, -2]), values: pick(even.map((i) => 2 * n - 1 - i)), base: wide.array },
  ];
}

/** Frees the arrays that own their memory (and have not been freed: cases share bases). */
function free(...arrays: DeviceArray[]): void {
  for (const a of arrays) if (a.ownsMemory && !a.freed) a.free();
}

/** |got - want| <= tolerance, with a message naming the case and index. */
function near(got: number, want: number, tolerance: number, what: string): void {
  assert.ok(Math.abs(got - want) <= tolerance, `${what}: got ${got}, want ${want} (tolerance ${tolerance})`);
}

/** What a store of float64 `v` into `dtype` gives, computed independently of the kernels: the bound it must be within. */
function checkStored(dtype: ScalarName, got: number, v: number, what: string): void {
  const u = UNIT[dtype];
  if (dtype === 'bool') assert.equal(got, v !== 0 ? 1 : 0, what);
  else if (u === undefined) {
    // Truncated toward zero and saturated at the dtype's limits (+ 0 turns -0 into 0).
    const bits = kernelScalar[dtype].bytes * 8;
    const [lo, hi] = kernelScalar[dtype].signed ? [-(2 ** (bits - 1)), 2 ** (bits - 1) - 1] : [0, 2 ** bits - 1];
    assert.equal(got, Math.min(Math.max(Math.trunc(v), lo), hi) + 0, what);
  } else near(got, v, u * Math.abs(v) + (dtype === 'float16' ? 2 ** -25 : 0), what);
}

const ALL_SCALARS = kernelScalars;
const SOME_VECTORS: readonly DTypeName[] = ['float3', 'uchar3', 'double2', 'half2', 'short4', 'longlong3'];

test("fill: every dtype, contiguous and strided views; elements between the view's are untouched", () => {
  for (const dtype of [...ALL_SCALARS, ...SOME_VECTORS]) {
    const dt = dtypeOf(dtype);
    const value = Array.from({ length: dt.components }, () => randomValue(dt.component));
    const element = (dt.components === 1 ? value[0]! : value) as never;
    const expect = value.map((v) => {
      const view = new DataView(new ArrayBuffer(8));
      kernelScalar[dt.component].write(view, 0, v);
      return kernelScalar[dt.component].read(view, 0);
    });
    for (const n of SIZES) {
      const cs = cases(dtype, n);
      for (const c of cs) {
        const before = valuesOf(c.base);
        fill(
          c.array,
          dt.component === 'int64' || dt.component === 'uint64' ? ((dt.components === 1 ? BigInt(value[0]!) : value.map(BigInt)) as never) : element,
        );
        assert.deepEqual(valuesOf(c.array), Array.from({ length: n }, () => expect).flat(), c.label);
        if (c.base !== c.array) {
          const after = valuesOf(c.base);
          const changed = after.filter((v, i) => v !== before[i]).length;
          assert.ok(changed <= n * dt.components, `${c.label}: only the view's elements change`);
          // The elements between the view's (odd indices for [::2], even for [::-2]) keep their values.
          const k = dt.components;
          const untouched = c.label.endsWith('[::2]') ? 1 : 0;
          for (let i = untouched; i < 2 * n; i += 2) assert.deepEqual(after.slice(i * k, i * k + k), before.slice(i * k, i * k + k), `${c.label} element ${i}`);
        }
      }
      free(...cs.map((c) => c.base));
    }
  }
});

test('arange: every scalar dtype, n and [start, stop, step] (negative steps too), against start + i * step', () => {
  for (const dtype of ALL_SCALARS.filter((d) => d !== 'bool')) {
    const signed = !dtype.startsWith('uint');
    for (const range of [31, [1, 1026], signed ? [40, -10, -1.5] : [3, 100, 2.5]] as const) {
      const [start, stop, step] = typeof range === 'number' ? [0, range, 1] : [range[0], range[1], range[2] ?? 1];
      const a = arange(range as never, dtype);
      const n = Math.ceil((stop - start) / step);
      assert.deepEqual(a.shape, [n]);
      valuesOf(a).forEach((got, i) => checkStored(dtype, got, start + i * step, `${dtype} arange ${JSON.stringify(range)} [${i}]`));
      a.free();
    }
  }
  const empty = arange([5, 5], 'int32');
  assert.deepEqual(empty.shape, [0]);
  empty.free();
});

test('ascontiguous: every dtype, from strided, reversed and transposed views, exactly', () => {
  for (const dtype of [...ALL_SCALARS, ...SOME_VECTORS]) {
    for (const n of SIZES) {
      const cs = cases(dtype, n);
      for (const c of cs) {
        const out = ascontiguous(c.array);
        assert.ok(out.isContiguous);
        assert.deepEqual(valuesOf(out), c.values, c.label);
        free(out);
      }
      free(...cs.map((c) => c.base));
    }
    const m = randomArray(dtype, [25, 41]);
    const t = ascontiguous(m.array.T);
    assert.deepEqual(t.shape, [41, 25]);
    assert.deepEqual(valuesOf(t), valuesOf(m.array.T), `${dtype} transpose`);
    free(t, m.array);
  }
});

test('astype: every scalar dtype to every scalar dtype (integers wrap among themselves, floats round, float to integer truncates), and float3 to int3', () => {
  for (const from of ALL_SCALARS) {
    for (const to of ALL_SCALARS) {
      const c = cases(from, 31)[1]!;
      const out = astype(c.array, to);
      assert.equal(out.dtype.name, to);
      const got = valuesOf(out);
      c.values.forEach((v, i) => {
        const what = `${from} -> ${to} [${i}]`;
        if (kernelScalar[from].family === 'int' && kernelScalar[to].family === 'int' && to !== 'bool') {
          const bits = kernelScalar[to].bytes * 8;
          const wrapped = kernelScalar[to].signed ? BigInt.asIntN(bits, BigInt(v)) : BigInt.asUintN(bits, BigInt(v));
          assert.equal(got[i], Number(wrapped), what);
        } else {
          checkStored(to, got[i]!, v, what);
        }
      });
      free(out, c.base);
    }
  }
  const p = randomArray('float3', [31]);
  const q = astype(p.array.slice([null, null, -1]), 'int3');
  const reversed = Array.from({ length: 31 }, (_, i) => p.values.slice((30 - i) * 3, (30 - i) * 3 + 3)).flat();
  assert.deepEqual(
    valuesOf(q),
    reversed.map((v) => Math.trunc(v) + 0),
  );
  free(p.array, q);
});

/** The bound every summation order meets: (n - 1) u_acc sum|x| + u_out |result|. */
function sumTolerance(dtype: ScalarName, terms: readonly number[], result: number): number {
  const uAcc = dtype === 'float64' ? 2 ** -53 : 2 ** -24;
  const uOut = UNIT[dtype] ?? 0;
  if (UNIT[dtype] === undefined) return 0;
  return Math.max(terms.length - 1, 0) * uAcc * terms.reduce((s, x) => s + Math.abs(x), 0) + uOut * Math.abs(result);
}

test('sum, min, max of whole arrays: every dtype they take, every size and view, against float64', () => {
  for (const dtype of REDUCE_DTYPES) {
    for (const n of [...SIZES, 5000]) {
      const cs = cases(dtype, n);
      for (const c of cs) {
        const want = c.values.reduce((s, x) => s + x, 0);
        // int64 and uint64 come back as bigints (exact); the values here are small enough for Number().
        near(Number(sum(c.array)), want, sumTolerance(dtype, c.values, want), `sum ${c.label}`);
        assert.equal(Number(min(c.array)), Math.min(...c.values), `min ${c.label}`);
        assert.equal(Number(max(c.array)), Math.max(...c.values), `max ${c.label}`);
        assert.equal(typeof sum(c.array), dtype === 'int64' || dtype === 'uint64' ? 'bigint' : 'number', `sum ${c.label} type`);
      }
      free(...cs.map((c) => c.base));
    }
  }
});

test('sum, min, max along an axis of a matrix and of its transpose; out on the device', () => {
  for (const dtype of REDUCE_DTYPES) {
    const m = randomArray(dtype, [25, 41]);
    for (const view of [m.array, m.array.T]) {
      const rows = view.shape[0]!;
      const cols = view.shape[1]!;
      const at = (r: number, c: number): number => (view === m.array ? m.values[r * 41 + c]! : m.values[c * 41 + r]!);
      for (const axis of [0, 1, -1]) {
        const keep = axis === 0 ? cols : rows;
        const len = axis === 0 ? rows : cols;
        const line = (j: number): number[] => Array.from({ length: len }, (_, i) => (axis === 0 ? at(i, j) : at(j, i)));
        const s = sum(view, { axis });
        const lo = min(view, { axis });
        const hi = max(view, { axis });
        assert.deepEqual(s.shape, [keep]);
        const sums = valuesOf(s);
        const lows = valuesOf(lo);
        const highs = valuesOf(hi);
        for (let j = 0; j < keep; j++) {
          const terms = line(j);
          const want = terms.reduce((p, x) => p + x, 0);
          near(sums[j]!, want, sumTolerance(dtype, terms, want), `sum ${dtype} axis ${axis} [${j}]`);
          assert.equal(lows[j], Math.min(...terms), `min ${dtype} axis ${axis} [${j}]`);
          assert.equal(highs[j], Math.max(...terms), `max ${dtype} axis ${axis} [${j}]`);
        }
        free(s, lo, hi);
      }
    }
    const out = DeviceArray.empty([1], sum(m.array, { axis: 0 }).dtype);
    assert.equal(sum(m.array, { out }), out);
    const want = m.values.reduce((p, x) => p + x, 0);
    near(valuesOf(out)[0]!, want, sumTolerance(dtype, m.values, want), `sum ${dtype} into out`);
    free(out, m.array);
  }
});

test('dot: every dtype, every size, a strided second operand', () => {
  for (const dtype of REDUCE_DTYPES) {
    for (const n of [...SIZES, 5000]) {
      const [a] = cases(dtype, n);
      const [, b] = cases(dtype, n);
      const products = a!.values.map((x, i) => x * b!.values[i]!);
      const want = products.reduce((s, x) => s + x, 0);
      // Each product is rounded to the accumulator too: one more u_acc per term.
      const uAcc = dtype === 'float64' ? 2 ** -53 : 2 ** -24;
      const tolerance = UNIT[dtype] === undefined ? 0 : sumTolerance(dtype, products, want) + uAcc * products.reduce((s, x) => s + Math.abs(x), 0);
      near(Number(dot(a!.array, b!.array)), want, tolerance, `dot ${dtype}[${n}]`);
      free(a!.base, b!.base);
    }
  }
});

test('empty arrays: sum is 0, min and max refuse, elementwise does nothing', () => {
  const e = DeviceArray.empty([0], 'float32');
  assert.equal(sum(e), 0);
  assert.throws(() => min(e), RangeError);
  assert.throws(() => max(e), /empty/);
  elementwise('e = 1', { e });
  const m = DeviceArray.empty([3, 0], 'int32');
  assert.deepEqual(valuesOf(sum(m, { axis: 1 })), [0, 0, 0]);
  assert.throws(() => max(m, { axis: 1 }), RangeError);
  free(e, m);
});

test('elementwise: a * x + y over every scalar dtype and view, against float64', () => {
  for (const dtype of ALL_SCALARS.filter((d) => d !== 'bool')) {
    for (const n of SIZES) {
      const [x, y, z] = [cases(dtype, n)[1]!, cases(dtype, n)[2]!, cases(dtype, n)[0]!];
      elementwise('z = a * x + y', { x: x.array, y: y.array, z: z.array, a: 3 });
      valuesOf(z.array).forEach((got, i) => {
        checkStored(dtype, got, 3 * x.values[i]! + y.values[i]!, `${dtype}[${n}] [${i}]`);
      });
      free(x.base, y.base, z.base);
    }
  }
});

test('elementwise: several statements, later ones seeing earlier assignments; math functions; mixed dtypes', () => {
  const x = randomArray('float64', [1025]);
  const k = randomArray('int32', [1025]);
  const r = DeviceArray.empty([1025], 'float32');
  const f = DeviceArray.empty([1025], 'float16');
  elementwise('r = sqrt(abs(x)) * k; f = r > 0 ? min(r, 2) : max(-r, 0.5) % 1; r = r + fma(x, 2, 1) - pow(exp(x), 2) / cos(x)', {
    x: x.array,
    k: k.array,
    r,
    f,
  });
  const rs = valuesOf(r);
  const fs = valuesOf(f);
  for (let i = 0; i < 1025; i++) {
    const xv = x.values[i]!;
    const first = Math.fround(Math.sqrt(Math.abs(xv)) * k.values[i]!);
    // r is a local double until the end: the second statement reads the unrounded value.
    const r1 = Math.sqrt(Math.abs(xv)) * k.values[i]!;
    const fv = r1 > 0 ? Math.min(r1, 2) : Math.max(-r1, 0.5) % 1;
    checkStored('float16', fs[i]!, fv, `f [${i}]`);
    const rv = r1 + (xv * 2 + 1) - Math.exp(xv) ** 2 / Math.cos(xv);
    near(rs[i]!, rv, 2 ** -23 * Math.abs(rv) + 1e-12 * Math.abs(first), `r [${i}]`);
  }
  free(x.array, k.array, r, f);
});

test('elementwise: vector dtypes by component (float3 cross product, half2, uchar4)', () => {
  const p = randomArray('float3', [31]);
  const q = randomArray('float3', [31]);
  const nrm = DeviceArray.empty([31], 'float3');
  elementwise('n.x = p.y * q.z - p.z * q.y; n.y = p.z * q.x - p.x * q.z; n.z = p.x * q.y - p.y * q.x', { p: p.array, q: q.array, n: nrm });
  const got = valuesOf(nrm);
  for (let i = 0; i < 31; i++) {
    const [px, py, pz] = p.values.slice(3 * i, 3 * i + 3) as [number, number, number];
    const [qx, qy, qz] = q.values.slice(3 * i, 3 * i + 3) as [number, number, number];
    const want = [py * qz - pz * qy, pz * qx - px * qz, px * qy - py * qx];
    want.forEach((w, c) => near(got[3 * i + c]!, w, 2 ** -24 * Math.abs(w), `cross [${i}].${'xyz'[c]}`));
  }
  const h = randomArray('half2', [31]);
  const s = DeviceArray.empty([31], 'float32');
  elementwise('s = h.x * h.y', { h: h.array, s });
  valuesOf(s).forEach((v, i) => checkStored('float32', v, h.values[2 * i]! * h.values[2 * i + 1]!, `half2 [${i}]`));
  free(p.array, q.array, nrm, h.array, s);
});

test("map and zipWith: default outputs of the inputs' dtype promoted as NumPy does, out of another dtype, strided inputs", () => {
  const a = cases('int32', 1025)[1]!;
  const b = cases('float32', 1025)[2]!;
  const twice = map(a.array, 'x * 2');
  assert.equal(twice.dtype.name, 'int32');
  assert.deepEqual(
    valuesOf(twice),
    a.values.map((v) => v * 2),
  );
  const summed = zipWith(a.array, b.array, 'x + y');
  assert.equal(summed.dtype.name, 'float64'); // int32 and float32: float64, as numpy.result_type
  assert.deepEqual(
    valuesOf(summed),
    a.values.map((v, i) => v + b.values[i]!),
  );
  const out = DeviceArray.empty([1025], 'float64');
  assert.equal(zipWith(a.array, b.array, 'x / y', { out }), out);
  valuesOf(out).forEach((v, i) => assert.equal(v, a.values[i]! / b.values[i]!));
  free(a.base, b.base, twice, summed, out);
});

test('operations run in stream order on the stream given', () => {
  using stream = Stream.create();
  const a = DeviceArray.empty([4096], 'float32', { stream });
  fill(a, 0.5, { stream });
  elementwise('a = a * 4', { a }, { stream });
  assert.equal(sum(a, { stream }), 4096 * 2);
  const i = arange(100, 'int64', { stream });
  assert.equal(sum(i, { stream }), 4950n);
  free(a, i);
});

test('bad input: syntax, unknown names, wrong dtypes for the expression, shapes, devices and options', () => {
  const x = DeviceArray.empty([8], 'float32');
  const y = DeviceArray.empty([9], 'float32');
  const p = DeviceArray.empty([8], 'float3');
  const b = DeviceArray.empty([8], 'bool');
  assert.throws(
    () => elementwise('z = (x + 1', { x, z: x }),
    (e: Error) => e instanceof SyntaxError && /column 11/.test(e.message),
  );
  assert.throws(
    () => elementwise('z = x +* 1', { x, z: x }),
    (e: Error) => e instanceof SyntaxError && /column 8/.test(e.message),
  );
  assert.throws(
    () => elementwise('z = x # 1', { x, z: x }),
    (e: Error) => e instanceof SyntaxError && /unexpected character '#'/.test(e.message),
  );
  assert.throws(() => elementwise('z = 1f', { z: x }), SyntaxError);
  assert.throws(() => elementwise('x = foo(x)', { x }), /unknown function foo/);
  assert.throws(() => elementwise('x = sqrt(x, x)', { x }), /takes 1 argument/);
  assert.throws(() => elementwise('', { x }), SyntaxError);
  assert.throws(
    () => elementwise('x = w + 1', { x }),
    (e: Error) => e instanceof TypeError && /unknown name w/.test(e.message) && /column 5/.test(e.message),
  );
  assert.throws(() => elementwise('z = x + 1', { x }), /unknown name z/);
  assert.throws(() => elementwise('x = p + 1', { x, p }), /p is a float3 array: use its components p.x, p.y, p.z/);
  assert.throws(() => elementwise('x = x.y', { x }), /x is a float32 array: it has no component .y/);
  assert.throws(() => elementwise('x = p.w', { x, p }), /its components are p.x, p.y, p.z/);
  assert.throws(() => elementwise('a = x', { x, a: 2 }), /a is a scalar: only arrays can be assigned/);
  assert.throws(() => elementwise('x = a.x', { x, a: 2 }), /a is a scalar/);
  assert.throws(
    () => elementwise('x = y', { x, y }),
    (e: Error) => e instanceof RangeError && /do not broadcast/.test(e.message),
  );
  assert.throws(() => elementwise('x = 1', { x: 'x' as never }), TypeError);
  assert.throws(() => elementwise('x = 1', null as never), TypeError);
  const overlapping = DeviceArray.fromBuffer(x.buffer as never, { dtype: 'float32', shape: [4, 4], strides: [1, 1] });
  assert.throws(() => elementwise('o = 1', { o: overlapping }), VramStateError);
  assert.throws(() => map(p, 'x.x'), /pass \{ out \}/);
  assert.throws(() => zipWith(x, y, 'x + y'), RangeError);
  assert.throws(() => sum(b), /bool arrays are not reduced/);
  assert.throws(() => sum(p), /vector dtype/);
  assert.throws(() => sum(x, { axis: 1 }), RangeError);
  assert.throws(() => sum(x, { axis: 0.5 }), RangeError);
  assert.throws(() => sum(x, { out: DeviceArray.empty([1], 'float64') }), /out must be float32/);
  assert.throws(() => sum(x, { out: DeviceArray.empty([2], 'float32') }), RangeError);
  assert.throws(() => dot(x, DeviceArray.empty([8], 'float64')), TypeError);
  assert.throws(() => dot(x, y), RangeError);
  assert.throws(() => dot(x.reshape(2, 4), x.reshape(2, 4)), RangeError);
  assert.throws(() => astype(p, 'int32'), /component/);
  assert.throws(() => astype(x, 'float5' as never), TypeError);
  assert.throws(() => arange([0, 10, 0]), /step must not be 0/);
  assert.throws(() => arange([0, Infinity]), RangeError);
  assert.throws(
    () => arange('10' as never),
    (e: Error) => e instanceof TypeError && /range must be n, \[start, stop\] or \[start, stop, step\], got string/.test(e.message),
  );
  assert.throws(
    () => arange([0] as never),
    (e: Error) => e instanceof TypeError && e.message.endsWith('got an array of 1 element'),
  );
  assert.throws(() => arange(10, 'float3' as never), /vector dtype/);
  assert.throws(() => fill(x, 'a' as never), TypeError);
  assert.throws(() => fill(p, 1 as never), TypeError);
  assert.throws(() => sum(new Float32Array(4) as never), /must be a DeviceArray/);
  assert.throws(() => fill(x, 1, 5 as never), /options must be an object/);
  const freed = DeviceArray.empty([4], 'float32');
  freed.free();
  assert.throws(() => sum(freed), /freed/);
  free(x, y, p, b);
  void dtypes;
});

test('expression programs and their modules are bounded caches: the least recently used go, and come back on use', () => {
  const device = Device.get(0);
  using a = DeviceArray.from(new Float32Array([1, 2, 3, 4]));
  const first = map(a, 'x + 0.5');
  first.free();
  for (let k = 1; k <= PROGRAM_CACHE_SIZE + 8; k++) map(a, `x * ${k}`, { out: a });
  assert.equal(programsCached(), PROGRAM_CACHE_SIZE);
  if (!onGpu || nvrtcAvailable()) assert.ok(userModulesLoaded(device) <= USER_MODULE_CACHE_SIZE, `${userModulesLoaded(device)} modules loaded`);
  a.copyFrom(new Float32Array([1, 2, 3, 4]));
  using again = map(a, 'x + 0.5');
  assert.deepEqual(again.toArray(), [1.5, 2.5, 3.5, 4.5], 'an evicted expression is built again');
});
