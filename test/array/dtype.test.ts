/**
 * dtypes and 16-bit floats: every schema has CUDA's sizeof and alignof (the table below is
 * vector_types.h, cuda_fp16.h and cuda_bf16.h written out by hand, not derived by the rule the
 * source uses); schemas are distinct types to the compiler; and float16/bfloat16 conversions are
 * bit-exact against references that share no code with src/array/half.ts: the sorted list of all
 * representable values (nearest by search, ties to the even pattern), every midpoint between
 * neighbours, float32's own rounding for bfloat16, and the runtime's Float16Array/Math.f16round
 * where it has them.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { dtypeOf, dtypes, hostArrayType, isDTypeName, type DType, type DTypeName, type HostTypedArray } from '../../src/array/dtype.js';
import {
  bfloat16Bits,
  decodeBfloat16,
  decodeFloat16,
  encodeBfloat16,
  encodeFloat16,
  float16Bits,
  fromBfloat16Bits,
  fromFloat16Bits,
} from '../../src/array/half.js';

/** name: [sizeof, alignof, components, component, cType], as CUDA 12/13 headers declare them. */
const cuda: Record<DTypeName, [number, number, number, string, string]> = {
  bool: [1, 1, 1, 'bool', 'bool'],
  int8: [1, 1, 1, 'int8', 'signed char'],
  uint8: [1, 1, 1, 'uint8', 'unsigned char'],
  int16: [2, 2, 1, 'int16', 'short'],
  uint16: [2, 2, 1, 'uint16', 'unsigned short'],
  int32: [4, 4, 1, 'int32', 'int'],
  uint32: [4, 4, 1, 'uint32', 'unsigned int'],
  int64: [8, 8, 1, 'int64', 'long long'],
  uint64: [8, 8, 1, 'uint64', 'unsigned long long'],
  float16: [2, 2, 1, 'float16', '__half'],
  bfloat16: [2, 2, 1, 'bfloat16', '__nv_bfloat16'],
  float32: [4, 4, 1, 'float32', 'float'],
  float64: [8, 8, 1, 'float64', 'double'],
  char2: [2, 2, 2, 'int8', 'char2'],
  char3: [3, 1, 3, 'int8', 'char3'],
  char4: [4, 4, 4, 'int8', 'char4'],
  uchar2: [2, 2, 2, 'uint8', 'uchar2'],
  uchar3: [3, 1, 3, 'uint8', 'uchar3'],
  uchar4: [4, 4, 4, 'uint8', 'uchar4'],
  short2: [4, 4, 2, 'int16', 'short2'],
  short3: [6, 2, 3, 'int16', 'short3'],
  short4: [8, 8, 4, 'int16', 'short4'],
  ushort2: [4, 4, 2, 'uint16', 'ushort2'],
  ushort3: [6, 2, 3, 'uint16', 'ushort3'],
  ushort4: [8, 8, 4, 'uint16', 'ushort4'],
  int2: [8, 8, 2, 'int32', 'int2'],
  int3: [12, 4, 3, 'int32', 'int3'],
  int4: [16, 16, 4, 'int32', 'int4'],
  uint2: [8, 8, 2, 'uint32', 'uint2'],
  uint3: [12, 4, 3, 'uint32', 'uint3'],
  uint4: [16, 16, 4, 'uint32', 'uint4'],
  longlong2: [16, 16, 2, 'int64', 'longlong2'],
  longlong3: [24, 8, 3, 'int64', 'longlong3'],
  ulonglong2: [16, 16, 2, 'uint64', 'ulonglong2'],
  ulonglong3: [24, 8, 3, 'uint64', 'ulonglong3'],
  float2: [8, 8, 2, 'float32', 'float2'],
  float3: [12, 4, 3, 'float32', 'float3'],
  float4: [16, 16, 4, 'float32', 'float4'],
  double2: [16, 16, 2, 'float64', 'double2'],
  double3: [24, 8, 3, 'float64', 'double3'],
  half2: [4, 4, 2, 'float16', 'half2'],
  bfloat162: [4, 4, 2, 'bfloat16', 'bfloat162'],
};
const allNames = Object.keys(cuda) as DTypeName[];

test("every dtype has CUDA's sizeof, alignof, components, component and C type", () => {
  assert.deepEqual(Object.keys(dtypes).sort(), [...allNames].sort(), 'the table holds exactly the dtypes CUDA has');
  for (const name of allNames) {
    const [byteSize, alignment, components, component, cType] = cuda[name];
    const d: DType = dtypes[name];
    assert.deepEqual(
      { name: d.name, byteSize: d.byteSize, alignment: d.alignment, components: d.components, component: d.component, cType: d.cType },
      { name, byteSize, alignment, components, component, cType },
      name,
    );
    assert.equal(d.kind, dtypes[d.component].kind, `${name}: the kind is the component's`);
    assert.equal(d.byteSize % d.alignment, 0, `${name}: an array of them keeps every element aligned`);
  }
  assert.equal(dtypes.bool.kind, 'bool');
  assert.equal(dtypes.uchar4.kind, 'uint');
  assert.equal(dtypes.short3.kind, 'int');
  assert.equal(dtypes.half2.kind, 'float');
});

test('schemas are frozen, and dtypeOf resolves names and schemas to them', () => {
  assert.ok(Object.isFrozen(dtypes));
  assert.ok(Object.isFrozen(dtypes.float3));
  assert.throws(() => {
    (dtypes.float3 as { byteSize: number }).byteSize = 16;
  }, TypeError);
  assert.equal(dtypeOf('float3'), dtypes.float3);
  assert.equal(dtypeOf(dtypes.int8), dtypes.int8);
  // A look-alike object is resolved by its name: it cannot bring its own sizes.
  const fake = { ...dtypes.float3, byteSize: 16 };
  assert.equal(dtypeOf(fake).byteSize, 12);
});

test('unknown dtypes are TypeErrors that list the known ones', () => {
  for (const bad of ['float5', 'toString', '', 'Float32', 3, null, undefined, {}, { name: 'nope' }]) {
    assert.throws(
      () => dtypeOf(bad as DTypeName),
      (e: unknown) => e instanceof TypeError && /unknown dtype/.test(e.message) && /float32/.test(e.message) && /bfloat162/.test(e.message),
      String(bad),
    );
    assert.equal(isDTypeName(bad), false);
  }
  for (const name of allNames) assert.equal(isDTypeName(name), true);
});

test("hostArrayType gives the component's TypedArray", () => {
  const expected: Record<string, string> = {
    bool: 'Uint8Array',
    int8: 'Int8Array',
    uint8: 'Uint8Array',
    int16: 'Int16Array',
    uint16: 'Uint16Array',
    int32: 'Int32Array',
    uint32: 'Uint32Array',
    int64: 'BigInt64Array',
    uint64: 'BigUint64Array',
    float16: 'Uint16Array',
    bfloat16: 'Uint16Array',
    float32: 'Float32Array',
    float64: 'Float64Array',
  };
  for (const name of allNames) assert.equal(hostArrayType(name).name, expected[cuda[name][3]], name);
  const xyz: HostTypedArray<'float3'> = new (hostArrayType('float3'))(6);
  assert.ok(xyz instanceof Float32Array);
  assert.throws(() => hostArrayType('vec3' as DTypeName), TypeError);
});

test('dtypes are distinct types to the compiler', () => {
  // @ts-expect-error a float3 schema is not a float32 schema
  const f: DType<'float32'> = dtypes.float3;
  // @ts-expect-error nor is a float32 a float3
  const g: DType<'float3'> = dtypes.float32;
  // @ts-expect-error an int32 array's host data is not a Float32Array
  const h: HostTypedArray<'int32'> = new Float32Array(1);
  // @ts-expect-error 'float5' is not a dtype name (and at run time a TypeError)
  assert.throws(() => dtypeOf('float5'), TypeError);
  const any: DType = dtypes.float3; // every schema is a DType
  const x: HostTypedArray<'float3'> = new Float32Array(3); // float3's host data is Float32Array
  assert.ok(f && g && h && any && x);
});

// ---- 16-bit floats -------------------------------------------------------------------------

interface Format {
  name: string;
  encode: (x: number) => number;
  decode: (bits: number) => number;
  /** Every finite non-negative value in increasing order (index = bit pattern), and the next power. */
  positives: Float64Array;
  /** The power of two just past the largest finite value: rounding reaches it means Infinity. */
  beyond: number;
  maxFinite: number;
}

/**
 * The positive finite values of a format computed from its definition (sign, exponent, mantissa
 * fields), independently of half.ts.
 */
function tableOf(mantissaBits: number, exponentBits: number): Float64Array {
  const bias = 2 ** (exponentBits - 1) - 1;
  const count = (2 ** exponentBits - 1) * 2 ** mantissaBits; // up to, not including, Infinity
  const out = new Float64Array(count);
  for (let bits = 0; bits < count; bits++) {
    const e = Math.floor(bits / 2 ** mantissaBits);
    const m = bits % 2 ** mantissaBits;
    out[bits] = e === 0 ? m * 2 ** (1 - bias - mantissaBits) : (1 + m / 2 ** mantissaBits) * 2 ** (e - bias);
  }
  return out;
}

const f16Table = tableOf(10, 5);
const bf16Table = tableOf(7, 8);
const formats: Format[] = [
  { name: 'float16', encode: float16Bits, decode: fromFloat16Bits, positives: f16Table, beyond: 65536, maxFinite: 65504 },
  { name: 'bfloat16', encode: bfloat16Bits, decode: fromBfloat16Bits, positives: bf16Table, beyond: 2 ** 128, maxFinite: bf16Table[bf16Table.length - 1]! },
];

/** Reference rounding: the nearest representable value by binary search, ties to the even pattern. */
function referenceBits(x: number, f: Format): number {
  if (Number.isNaN(x)) return -1;
  const sign = x < 0 || Object.is(x, -0) ? 0x8000 : 0;
  const a = Math.abs(x);
  const t = f.positives;
  const inf = t.length; // the pattern after the largest finite one is Infinity
  if (a === Infinity) return sign | inf;
  let lo = 0;
  let hi = t.length - 1;
  if (a >= t[hi]!) {
    // Between the largest finite value and the next power of two (which stands for Infinity).
    const below = t[hi]!;
    const mid = below + (f.beyond - below) / 2;
    return sign | (a < mid ? hi : inf); // a tie goes to the even pattern: Infinity's
  }
  while (hi - lo > 1) {
    const m = (lo + hi) >> 1;
    if (t[m]! <= a) lo = m;
    else hi = m;
  }
  const dLo = a - t[lo]!;
  const dHi = t[hi]! - a;
  if (dLo < dHi) return sign | lo;
  if (dHi < dLo) return sign | hi;
  return sign | (lo % 2 === 0 ? lo : hi);
}

function isNaNBits(bits: number, f: Format): boolean {
  return Number.isNaN(f.decode(bits));
}

for (const f of formats) {
  test(`${f.name}: all 65536 patterns decode to the reference value and re-encode to themselves`, () => {
    for (let bits = 0; bits < 0x10000; bits++) {
      const v = f.decode(bits);
      const magnitude = bits & 0x7fff;
      if (magnitude > f.positives.length) {
        assert.ok(Number.isNaN(v), `${bits.toString(16)} is a NaN`);
        assert.ok(isNaNBits(f.encode(v), f), 'NaN encodes to a NaN');
        continue;
      }
      const expected = magnitude === f.positives.length ? Infinity : f.positives[magnitude]!;
      assert.ok(Object.is(v, bits & 0x8000 ? -expected : expected), `${bits.toString(16)} decodes to ${v}`);
      assert.equal(f.encode(v), bits, `${bits.toString(16)} re-encodes`);
    }
  });

  test(`${f.name}: every midpoint rounds to the even neighbour, and one float64 ulp either side to the nearer`, () => {
    const t = f.positives;
    const next = (x: number, dir: 1 | -1): number => {
      // One float64 ulp up or down, read from its bits.
      const buf = new Float64Array([x]);
      const u = new BigUint64Array(buf.buffer);
      u[0] = u[0]! + (dir === 1 ? 1n : -1n);
      return buf[0]!;
    };
    for (let lo = 0; lo < t.length; lo++) {
      const below = t[lo]!;
      const above = lo + 1 < t.length ? t[lo + 1]! : f.beyond;
      const mid = below + (above - below) / 2; // exact in float64
      const even = lo % 2 === 0 ? lo : lo + 1; // lo + 1 === t.length is Infinity
      for (const s of [0, 0x8000]) {
        const sgn = s ? -1 : 1;
        assert.equal(f.encode(sgn * mid), s | even, `midpoint above pattern ${lo}`);
        assert.equal(f.encode(sgn * next(mid, -1)), s | lo, `just below the midpoint above ${lo}`);
        assert.equal(f.encode(sgn * next(mid, 1)), s | (lo + 1), `just above the midpoint above ${lo}`);
      }
    }
  });

  test(`${f.name}: random doubles round like the reference (nearest, ties to even)`, () => {
    const max = f.positives[f.positives.length - 1]!;
    const scaled = fc.tuple(fc.double({ min: -2, max: 2, noNaN: true }), fc.integer({ min: -160, max: 130 })).map(([m, e]) => m * 2 ** e);
    fc.assert(
      fc.property(fc.oneof(fc.double(), scaled, fc.double({ min: -max * 2, max: max * 2 })), (x) => {
        const got = f.encode(x);
        if (Number.isNaN(x)) return isNaNBits(got, f);
        return got === referenceBits(x, f);
      }),
      { numRuns: 20000 },
    );
  });

  test(`${f.name}: special values`, () => {
    assert.equal(f.encode(0), 0);
    assert.equal(f.encode(-0), 0x8000);
    assert.ok(Object.is(f.decode(0x8000), -0));
    assert.equal(f.encode(Infinity), f.positives.length);
    assert.equal(f.encode(-Infinity), 0x8000 | f.positives.length);
    assert.equal(f.encode(f.maxFinite), f.positives.length - 1);
    assert.equal(f.encode(Number.MAX_VALUE), f.positives.length, 'overflow is Infinity');
    assert.equal(f.encode(Number.MIN_VALUE), 0, 'far below the smallest subnormal is 0');
    assert.equal(f.encode(-Number.MIN_VALUE), 0x8000, '... keeping its sign');
    assert.equal(f.encode(f.positives[1]!), 1, 'the smallest subnormal');
    assert.equal(f.encode(f.positives[1]! / 2), 0, 'half of it is a tie, to even: 0');
    assert.equal(f.encode(f.positives[1]! * 1.5), 2, '1.5 of it is a tie, to even: 2');
    assert.ok(isNaNBits(f.encode(NaN), f));
    assert.throws(() => f.decode(0x10000), RangeError);
    assert.throws(() => f.decode(-1), RangeError);
    assert.throws(() => f.decode(1.5), RangeError);
  });
}

test('float16 known values', () => {
  assert.equal(float16Bits(1), 0x3c00);
  assert.equal(float16Bits(-2), 0xc000);
  assert.equal(float16Bits(65504), 0x7bff);
  assert.equal(float16Bits(65519.99), 0x7bff);
  assert.equal(float16Bits(65520), 0x7c00, '65520 is the tie between 65504 and 65536: Infinity');
  assert.equal(float16Bits(2 ** -24), 0x0001);
  assert.equal(float16Bits(2 ** -14), 0x0400, 'the smallest normal');
  assert.equal(float16Bits(2 ** -14 - 2 ** -25), 0x0400, 'the largest subnormal rounds up into the normals');
  assert.equal(float16Bits(NaN), 0x7e00);
  assert.equal(float16Bits(1 / 3), 0x3555);
  // Rounding through float32 first would get this one wrong: it is 1 + 2^-11 (a float16 tie, to
  // even: 1) plus 2^-40, which float32 drops, making the tie; once, from float64, it rounds up.
  assert.equal(float16Bits(1 + 2 ** -11 + 2 ** -40), 0x3c01);
  assert.equal(fromFloat16Bits(0x3555), 0.333251953125);
});

test("bfloat16 matches float32's own rounding (truncated to its top 16 bits, nearest even) for every float32 input", () => {
  const f32 = new Float32Array(1);
  const u32 = new Uint32Array(f32.buffer);
  const viaFloat32 = (x: number): number => {
    f32[0] = x;
    const u = u32[0]!;
    return ((u + 0x7fff + ((u >>> 16) & 1)) >>> 16) & 0xffff;
  };
  fc.assert(
    fc.property(fc.float({ noNaN: true }), (x) => bfloat16Bits(x) === viaFloat32(x)),
    { numRuns: 20000 },
  );
  // Every float32 exponent, with random mantissas.
  for (let bits = 0; bits < 0x7f800000; bits += 0x7fff1) {
    u32[0] = bits;
    const x = f32[0]!;
    assert.equal(bfloat16Bits(x), viaFloat32(x), `float32 bits ${bits.toString(16)}`);
    assert.equal(bfloat16Bits(-x), viaFloat32(-x));
  }
  assert.equal(bfloat16Bits(1), 0x3f80);
  assert.equal(bfloat16Bits(NaN), 0x7fc0);
  // Through float32 first this rounds twice and wrongly: 1 + 2^-8 is a bfloat16 tie (to even: 1);
  // 2^-30 more is lost in float32 but makes it round up.
  assert.equal(bfloat16Bits(1 + 2 ** -8 + 2 ** -30), 0x3f81);
});

const runtime = globalThis as { Float16Array?: new (v: ArrayLike<number>) => ArrayLike<number> & ArrayBufferView; Math: { f16round?: (x: number) => number } };

test(
  "float16 matches the runtime's Math.f16round and Float16Array where it has them",
  {
    skip: runtime.Float16Array === undefined && runtime.Math.f16round === undefined ? 'this runtime has neither (Node.js < 24)' : false,
  },
  () => {
    fc.assert(
      fc.property(fc.double(), (x) => {
        if (runtime.Math.f16round) {
          const r = runtime.Math.f16round(x);
          if (!Object.is(fromFloat16Bits(float16Bits(x)), r) && !(Number.isNaN(r) && Number.isNaN(x))) return false;
        }
        if (runtime.Float16Array) {
          const a = new runtime.Float16Array([x]);
          const bits = new Uint16Array(a.buffer, a.byteOffset, 1)[0]!;
          if (Number.isNaN(x)) return Number.isNaN(fromFloat16Bits(bits));
          if (bits !== float16Bits(x)) return false;
        }
        return true;
      }),
      { numRuns: 20000 },
    );
  },
);

test('bulk encode and decode agree with the one-value forms and check lengths', () => {
  fc.assert(
    fc.property(fc.array(fc.double(), { maxLength: 50 }), (xs) => {
      const h = encodeFloat16(xs);
      const b = encodeBfloat16(xs, new Uint16Array(xs.length));
      return xs.every((x, i) => h[i] === float16Bits(x) && b[i] === bfloat16Bits(x));
    }),
  );
  const bits = Uint16Array.from({ length: 0x10000 }, (_, i) => i);
  const h = decodeFloat16(bits, new Float64Array(bits.length));
  const b = decodeBfloat16(bits);
  for (let i = 0; i < bits.length; i++) {
    assert.ok(Object.is(h[i], fromFloat16Bits(i)), `float16 ${i}`);
    // bfloat16 values are float32 values: the default Float32Array holds them exactly.
    assert.ok(Object.is(b[i], fromBfloat16Bits(i)), `bfloat16 ${i}`);
  }
  assert.ok(decodeFloat16(new Uint16Array([0x3c00])) instanceof Float32Array);
  assert.throws(() => encodeFloat16([1, 2], new Uint16Array(1)), RangeError, 'nothing is dropped');
  assert.throws(() => decodeBfloat16([1, 2], new Float32Array(3)), RangeError);
  assert.throws(() => decodeFloat16([70000]), RangeError, 'a number[] of bits is checked');
  assert.deepEqual([...decodeFloat16([0x3c00, 0xc000], [0, 0])], [1, -2], 'a number[] is a destination too');
});
