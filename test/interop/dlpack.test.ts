/**
 * DLPack export and import (src/interop/dlpack.ts) on both backends: the struct layout against
 * dlpack.h's sizes, JavaScript round trips (every dtype family, strided views, the legacy struct,
 * flags), the deleter called exactly once (explicitly and by the garbage-collection backstop), every
 * bad input a typed error that leaves the tensor with its caller, and round trips through a small C
 * library (test/fixtures/dlpack/dlpack-fixture.c) built here with `cc`: it produces malloc'd
 * (and, on a GPU, cuMemAlloc'd) tensors that vram imports, and consumes vram's exports.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import koffi from 'koffi';
import type { LibraryHandle } from 'koffi';
import { DeviceArray } from '../../src/array/device-array.js';
import { HostArray } from '../../src/array/host-array.js';
import {
  allocateNative,
  callDeleter,
  DLDataTypeCode,
  DLDeviceType,
  DLPACK_FLAG_IS_COPIED,
  DLPACK_FLAG_READ_ONLY,
  freeNative,
  managedLayout,
  nativeBuffer,
  nativeView,
  TENSOR_LAYOUT,
  type NativeBlock,
} from '../../src/cuda/dlpack-abi.js';
import { InvalidPointerError, NotSupportedError, UseAfterFreeError, VramStateError } from '../../src/errors.js';
import type { DeviceMemory } from '../../src/buffer/device-memory.js';
import { deleteDLPack, dlpackExportsHeld, dlpackInfo, fromDLPack, toDLPack } from '../../src/interop/dlpack.js';
import { HostBuffer } from '../../src/buffer/host-buffer.js';
import { ManagedBuffer } from '../../src/buffer/managed-buffer.js';
import { forceGc, gpuOnly, needsGc, onGpu } from '../helpers.js';

/** The fields of a struct at `address`, read the way a C consumer would. */
function readStruct(address: number, versioned: boolean) {
  const L = managedLayout(versioned);
  const v = nativeView(address, L.size);
  const t = L.tensor;
  const T = TENSOR_LAYOUT;
  const ndim = v.getInt32(t + T.ndim, true);
  const shapePtr = Number(v.getBigUint64(t + T.shape, true));
  const stridesPtr = Number(v.getBigUint64(t + T.strides, true));
  const shape: number[] = [];
  const strides: number[] = [];
  if (ndim > 0) {
    const s = nativeView(shapePtr, 8 * ndim);
    // NULL strides (compact row-major, as C producers may write them) are left empty.
    const st = stridesPtr === 0 ? undefined : nativeView(stridesPtr, 8 * ndim);
    for (let i = 0; i < ndim; i++) {
      shape.push(Number(s.getBigInt64(8 * i, true)));
      if (st !== undefined) strides.push(Number(st.getBigInt64(8 * i, true)));
    }
  }
  return {
    version: versioned ? [v.getUint32(L.version, true), v.getUint32(L.version + 4, true)] : undefined,
    flags: versioned ? Number(v.getBigUint64(L.flags, true)) : undefined,
    deleter: Number(v.getBigUint64(L.deleter, true)),
    data: Number(v.getBigUint64(t + T.data, true)),
    deviceType: v.getInt32(t + T.deviceType, true),
    deviceId: v.getInt32(t + T.deviceId, true),
    ndim,
    dtype: [v.getUint8(t + T.code), v.getUint8(t + T.bits), v.getUint16(t + T.lanes, true)],
    shape,
    strides,
    stridesPtr,
    byteOffset: Number(v.getBigUint64(t + T.byteOffset, true)),
  };
}

/** A host copy's values as numbers (the tests use number dtypes). */
function numbers(values: unknown): number[] {
  return Array.from(values as ArrayLike<number>);
}

/** Lets finalizers run: a few rounds of GC and turns of the event loop, until `done` or the rounds run out. */
async function collect(done: () => boolean): Promise<void> {
  for (let i = 0; i < 50 && !done(); i++) {
    forceGc!();
    await new Promise((resolve) => setImmediate(resolve));
  }
}

describe('DLPack ABI', () => {
  test("the structs have dlpack.h's layout on 64-bit targets", () => {
    const v = managedLayout(true);
    const l = managedLayout(false);
    assert.deepEqual(
      { size: v.size, version: v.version, ctx: v.managerCtx, deleter: v.deleter, flags: v.flags, tensor: v.tensor },
      { size: 80, version: 0, ctx: 8, deleter: 16, flags: 24, tensor: 32 },
    );
    assert.deepEqual({ size: l.size, ctx: l.managerCtx, deleter: l.deleter, tensor: l.tensor }, { size: 64, ctx: 48, deleter: 56, tensor: 0 });
    assert.deepEqual(
      { ...TENSOR_LAYOUT },
      {
        size: 48,
        data: 0,
        deviceType: 8,
        deviceId: 12,
        ndim: 16,
        code: 20,
        bits: 21,
        lanes: 22,
        shape: 24,
        strides: 32,
        byteOffset: 40,
      },
    );
  });
});

describe('toDLPack', () => {
  test('writes a DLManagedTensorVersioned 1.1 for a device array: kDLCUDA, dtype, shape, strides, byte_offset', () => {
    using a = DeviceArray.from(new Float32Array([1, 2, 3, 4, 5, 6]), { shape: [2, 3] });
    const held = dlpackExportsHeld();
    const p = toDLPack(a);
    assert.equal(dlpackExportsHeld(), held + 1);
    const s = readStruct(p, true);
    assert.deepEqual(s.version, [1, 1]);
    assert.equal(s.flags, 0);
    assert.equal(s.deviceType, DLDeviceType.kDLCUDA);
    assert.equal(s.deviceId, 0);
    assert.equal(s.data, a.buffer.ptr);
    assert.deepEqual(s.dtype, [DLDataTypeCode.kDLFloat, 32, 1]);
    assert.deepEqual(s.shape, [2, 3]);
    assert.deepEqual(s.strides, [3, 1]);
    assert.equal(s.byteOffset, 0);
    assert.equal(deleteDLPack(p), true);
    assert.equal(dlpackExportsHeld(), held);
  });

  test("views keep their layout: a transpose's strides, a slice's byte_offset, a reversed slice's negative stride", () => {
    using a = DeviceArray.from(
      new Int32Array(12).map((_, i) => i),
      { shape: [3, 4] },
    );
    const cases: [DeviceArray, number[], number[], number][] = [
      [a.T, [4, 3], [1, 4], 0],
      [a.slice(1), [4], [1], 16],
      [a.slice([null, null, -1]), [3, 4], [-4, 1], 32],
      [a.slice(null, [1, null, 2]), [3, 2], [4, 2], 4],
    ];
    for (const [view, shape, strides, byteOffset] of cases) {
      const p = toDLPack(view);
      const s = readStruct(p, true);
      assert.deepEqual([s.shape, s.strides, s.byteOffset], [shape, strides, byteOffset]);
      deleteDLPack(p);
    }
  });

  test('dtypes: ints, uints, floats, bfloat16, bool, and vector types as lanes of their component', () => {
    const expected: Record<string, [number, number, number]> = {
      int8: [0, 8, 1],
      uint16: [1, 16, 1],
      int64: [0, 64, 1],
      float16: [2, 16, 1],
      bfloat16: [4, 16, 1],
      float64: [2, 64, 1],
      bool: [6, 8, 1],
      float3: [2, 32, 3],
      int4: [0, 32, 4],
      half2: [2, 16, 2],
      uchar4: [1, 8, 4],
      bfloat162: [4, 16, 2],
      double2: [2, 64, 2],
    };
    for (const [name, dtype] of Object.entries(expected)) {
      using a = DeviceArray.zeros([5], name as 'int8');
      const p = toDLPack(a);
      assert.deepEqual(readStruct(p, true).dtype, dtype, name);
      const back = fromDLPack(p);
      assert.equal(back.dtype.name, name);
      back.free();
    }
  });

  test('flags (versioned only), the legacy struct, and a 0-d array', () => {
    using a = DeviceArray.full([], 7, 'int32');
    const p = toDLPack(a, { readOnly: true, copied: true });
    const s = readStruct(p, true);
    assert.equal(s.flags, DLPACK_FLAG_READ_ONLY | DLPACK_FLAG_IS_COPIED);
    assert.equal(s.ndim, 0);
    deleteDLPack(p);
    const q = toDLPack(a, { versioned: false });
    const l = readStruct(q, false);
    assert.equal(l.deviceType, DLDeviceType.kDLCUDA);
    assert.deepEqual(l.dtype, [0, 32, 1]);
    deleteDLPack(q, { versioned: false });
    assert.throws(() => toDLPack(a, { versioned: false, readOnly: true }), TypeError);
  });

  test('pinned memory is kDLCUDAHost, managed memory kDLCUDAManaged, both with device_id 0', () => {
    using h = HostArray.from(new Float64Array([1, 2, 3]), { mapped: true });
    const p = toDLPack(h);
    let s = readStruct(p, true);
    assert.deepEqual([s.deviceType, s.deviceId, s.data], [DLDeviceType.kDLCUDAHost, 0, h.buffer.ptr]);
    deleteDLPack(p);
    const q = toDLPack(h.deviceView());
    assert.equal(readStruct(q, true).deviceType, DLDeviceType.kDLCUDAHost);
    deleteDLPack(q);
    using m = ManagedBuffer.allocate(64);
    using ma = DeviceArray.fromBuffer(m, { dtype: 'float32', shape: [16] });
    const r = toDLPack(ma);
    s = readStruct(r, true);
    assert.deepEqual([s.deviceType, s.deviceId], [DLDeviceType.kDLCUDAManaged, 0]);
    deleteDLPack(r);
  });

  test('bad input: not an array, bad options, a freed array', () => {
    assert.throws(() => toDLPack({} as DeviceArray), TypeError);
    assert.throws(() => toDLPack(new Float32Array(3) as unknown as DeviceArray), TypeError);
    using a = DeviceArray.zeros([2], 'float32');
    assert.throws(() => toDLPack(a, null as unknown as object), TypeError);
    assert.throws(() => toDLPack(a, { versioned: 1 as unknown as boolean }), TypeError);
    assert.throws(() => toDLPack(a, { readOnly: 'yes' as unknown as boolean }), TypeError);
    const b = DeviceArray.zeros([2], 'float32');
    b.free();
    const held = dlpackExportsHeld();
    assert.throws(() => toDLPack(b), UseAfterFreeError);
    assert.equal(dlpackExportsHeld(), held, 'nothing held after a refused export');
  });

  test('the export holds the array until the deleter runs, and a second deleter call is harmless', needsGc, async () => {
    let ref: WeakRef<DeviceArray> | undefined;
    let p = 0;
    (() => {
      const a = DeviceArray.from(new Float32Array([1, 2, 3]));
      ref = new WeakRef(a);
      p = toDLPack(a.slice([1, null]));
    })();
    await collect(() => ref!.deref() === undefined);
    // The view is held, and it holds the buffer: the data is still there.
    const s = readStruct(p, true);
    assert.deepEqual(s.shape, [2]);
    const back = fromDLPack(p);
    assert.deepEqual(numbers(back.toHost()), [2, 3]);
    const deleter = s.deleter;
    back.free();
    // A second call of vram's deleter for the same struct (as a buggy consumer would make): ignored.
    const held = dlpackExportsHeld();
    callDeleter(deleter, p);
    assert.equal(dlpackExportsHeld(), held);
  });
});

describe('fromDLPack', () => {
  test('a round trip equals the source, for views of every layout, with the deleter called once', () => {
    using a = DeviceArray.from(
      new Float32Array(24).map((_, i) => i * 0.5),
      { shape: [2, 3, 4] },
    );
    const held = dlpackExportsHeld();
    for (const view of [a, a.T, a.slice(1), a.slice(null, [null, null, -1]), a.transpose(1, 0, 2).slice([0, 2], null, [1, null, 2])]) {
      for (const versioned of [true, false]) {
        const p = toDLPack(view, { versioned });
        const back = fromDLPack(p, { versioned });
        assert.deepEqual(back.shape, view.shape);
        assert.deepEqual(back.strides, view.strides);
        assert.deepEqual(back.toHost(), view.toHost());
        assert.equal(back.ptr, view.ptr, 'no copy: the same element (0, ..., 0)');
        assert.equal(dlpackExportsHeld(), held + 1);
        back.free();
        assert.equal(dlpackExportsHeld(), held, 'free() called the deleter');
      }
    }
  });

  test("the import writes through to the producer's memory; a read-only import refuses writes; info reports the flags", () => {
    using a = DeviceArray.zeros([4], 'int32');
    const b = fromDLPack(toDLPack(a, { readOnly: true, copied: true }));
    assert.deepEqual(dlpackInfo(b), {
      versioned: true,
      version: { major: 1, minor: 1 },
      readOnly: true,
      copied: true,
      deviceType: DLDeviceType.kDLCUDA,
    });
    assert.throws(() => b.copyFrom(new Int32Array([1, 2, 3, 4])), VramStateError);
    assert.throws(() => b.slice([1, 3]).fill(7 as never), VramStateError);
    assert.throws(() => (b.buffer as DeviceMemory).memset(1), VramStateError);
    assert.deepEqual(numbers(b.toHost()), [0, 0, 0, 0], 'reads work, and nothing was written');
    b.free();
    const w = fromDLPack(toDLPack(a, { copied: true }));
    w.copyFrom(new Int32Array([1, 2, 3, 4]));
    assert.deepEqual(numbers(a.toHost()), [1, 2, 3, 4]);
    w.free();
    assert.equal(dlpackInfo(a), undefined);
    using legacy = fromDLPack(toDLPack(a, { versioned: false }), { versioned: false });
    assert.equal(dlpackInfo(legacy)?.version.major, 0);
  });

  test('a mapped pinned HostArray comes back as a DeviceArray over the same bytes', () => {
    using h = HostArray.from(new Uint16Array([5, 6, 7, 8]), { mapped: true });
    using back = fromDLPack(toDLPack(h.slice([1, null])));
    assert.ok(back instanceof DeviceArray);
    assert.deepEqual(numbers(back.toHost()), [6, 7, 8]);
  });

  test('an empty tensor becomes a new empty array and its deleter runs at once', () => {
    using a = DeviceArray.zeros([0, 3], 'float32');
    const held = dlpackExportsHeld();
    using back = fromDLPack(toDLPack(a));
    assert.equal(dlpackExportsHeld(), held);
    assert.deepEqual(back.shape, [0, 3]);
  });

  test('the backstop calls the deleter of an import the program dropped', needsGc, async () => {
    using a = DeviceArray.from(new Float32Array([1, 2]));
    const held = dlpackExportsHeld();
    (() => {
      fromDLPack(toDLPack(a)).toHost();
    })();
    assert.equal(dlpackExportsHeld(), held + 1);
    await collect(() => dlpackExportsHeld() === held);
    assert.equal(dlpackExportsHeld(), held);
  });
});

/** A hand-made struct for the bad-input cases, with a JavaScript deleter that counts its calls. */
class FakeTensor {
  static calls = new Map<number, number>();
  static readonly deleter: number = Number(
    koffi.register((self: bigint) => {
      const at = Number(self);
      FakeTensor.calls.set(at, (FakeTensor.calls.get(at) ?? 0) + 1);
    }, 'vram_DLPackDeleter *'),
  );

  readonly block: NativeBlock;
  readonly view: DataView;
  readonly dims: NativeBlock;

  constructor(
    readonly versioned: boolean,
    data: number,
  ) {
    const L = managedLayout(versioned);
    this.block = allocateNative(L.size);
    FakeTensor.calls.delete(this.block.address); // a freed block's address comes back
    this.view = nativeView(this.block.address, L.size);
    for (let i = 0; i < L.size; i += 8) this.view.setBigUint64(i, 0n, true);
    this.dims = allocateNative(32);
    const d = nativeView(this.dims.address, 32);
    d.setBigInt64(0, 2n, true);
    d.setBigInt64(8, 2n, true);
    d.setBigInt64(16, 2n, true);
    d.setBigInt64(24, 1n, true);
    if (versioned) {
      this.view.setUint32(L.version, 1, true);
      this.view.setUint32(L.version + 4, 1, true);
    }
    this.setU64(L.deleter, FakeTensor.deleter);
    const t = L.tensor;
    this.setU64(t + TENSOR_LAYOUT.data, data);
    this.view.setInt32(t + TENSOR_LAYOUT.deviceType, DLDeviceType.kDLCUDA, true);
    this.view.setInt32(t + TENSOR_LAYOUT.ndim, 2, true);
    this.view.setUint8(t + TENSOR_LAYOUT.code, DLDataTypeCode.kDLFloat);
    this.view.setUint8(t + TENSOR_LAYOUT.bits, 32);
    this.view.setUint16(t + TENSOR_LAYOUT.lanes, 1, true);
    this.setU64(t + TENSOR_LAYOUT.shape, this.dims.address);
    this.setU64(t + TENSOR_LAYOUT.strides, this.dims.address + 16);
  }

  get address(): number {
    return this.block.address;
  }

  get calls(): number {
    return FakeTensor.calls.get(this.address) ?? 0;
  }

  setU64(offset: number, value: number): void {
    this.view.setBigUint64(offset, BigInt(value), true);
  }

  tensor(field: keyof typeof TENSOR_LAYOUT): number {
    return managedLayout(this.versioned).tensor + TENSOR_LAYOUT[field];
  }

  dispose(): void {
    freeNative(this.dims);
    freeNative(this.block);
  }
}

describe('fromDLPack refuses bad input with typed errors and leaves the tensor with its caller', () => {
  const cases: [string, (t: FakeTensor) => void, new (...args: never[]) => Error][] = [
    ['an unknown device type (kDLROCM)', (t) => t.view.setInt32(t.tensor('deviceType'), DLDeviceType.kDLROCM, true), NotSupportedError],
    ['an undefined device type', (t) => t.view.setInt32(t.tensor('deviceType'), 99, true), NotSupportedError],
    ['a NULL deleter', (t) => t.setU64(managedLayout(t.versioned).deleter, 0), NotSupportedError],
    ['ndim < 0', (t) => t.view.setInt32(t.tensor('ndim'), -1, true), RangeError],
    ['ndim > 64', (t) => t.view.setInt32(t.tensor('ndim'), 1000, true), RangeError],
    ['a negative extent', (t) => nativeView(t.dims.address, 8).setBigInt64(0, -2n, true), RangeError],
    ['a complex dtype', (t) => t.view.setUint8(t.tensor('code'), DLDataTypeCode.kDLComplex), NotSupportedError],
    [
      'an fp8 dtype',
      (t) => {
        t.view.setUint8(t.tensor('code'), DLDataTypeCode.kDLFloat8_e4m3fn);
        t.view.setUint8(t.tensor('bits'), 8);
      },
      NotSupportedError,
    ],
    ['float of 24 bits', (t) => t.view.setUint8(t.tensor('bits'), 24), NotSupportedError],
    ['5 lanes', (t) => t.view.setUint16(t.tensor('lanes'), 5, true), NotSupportedError],
    ['0 lanes', (t) => t.view.setUint16(t.tensor('lanes'), 0, true), NotSupportedError],
    ['a NULL shape', (t) => t.setU64(t.tensor('shape'), 0), TypeError],
    ['NULL data with elements', (t) => t.setU64(t.tensor('data'), 0), TypeError],
    ['a negative device id', (t) => t.view.setInt32(t.tensor('deviceId'), -1, true), RangeError],
    ['a data pointer the driver does not know', (t) => t.setU64(t.tensor('data'), 0x1000), InvalidPointerError],
  ];
  for (const versioned of [true, false]) {
    for (const [name, spoil, type] of cases) {
      test(`${name}${versioned ? '' : ' (legacy struct)'}`, () => {
        using a = DeviceArray.zeros([2, 2], 'float32');
        const t = new FakeTensor(versioned, a.buffer.ptr);
        try {
          spoil(t);
          assert.throws(() => fromDLPack(t.address, { versioned }), type);
          assert.equal(t.calls, 0, "the deleter is the caller's to call");
          const hadDeleter = deleteDLPack(t.address, { versioned });
          assert.equal(t.calls, hadDeleter ? 1 : 0);
        } finally {
          t.dispose();
        }
      });
    }
  }

  test('another major version, and a legacy struct read as a versioned one', () => {
    using a = DeviceArray.zeros([2, 2], 'float32');
    const t = new FakeTensor(true, a.buffer.ptr);
    try {
      t.view.setUint32(0, 2, true);
      assert.throws(
        () => fromDLPack(t.address),
        (e: unknown) => e instanceof NotSupportedError && /DLPack 2\.1/.test(e.message),
      );
      assert.equal(deleteDLPack(t.address), true);
      assert.equal(t.calls, 1);
    } finally {
      t.dispose();
    }
    const legacy = new FakeTensor(false, a.buffer.ptr);
    try {
      assert.throws(
        () => fromDLPack(legacy.address),
        (e: unknown) => e instanceof NotSupportedError && /versioned: false/.test(e.message),
      );
      assert.equal(legacy.calls, 0);
    } finally {
      legacy.dispose();
    }
  });

  test('a struct imported while an earlier import of it is live is refused; its deleter runs once', () => {
    using a = DeviceArray.from(new Float32Array([1, 2, 3, 4]), { shape: [2, 2] });
    for (const versioned of [true, false]) {
      const t = new FakeTensor(versioned, a.buffer.ptr);
      try {
        const first = fromDLPack(t.address, { versioned });
        const refused = (e: unknown): boolean => e instanceof VramStateError && /already imported/.test(e.message);
        assert.throws(() => fromDLPack(t.address, { versioned }), refused);
        assert.throws(() => fromDLPack(BigInt(t.address), { versioned }), refused);
        assert.throws(() => deleteDLPack(t.address, { versioned }), refused, 'the array owns it: handing it back would free it twice');
        assert.equal(t.calls, 0);
        assert.deepEqual(numbers(first.toHost()), [1, 2, 3, 4], 'the first import is untouched');
        first.free();
        assert.equal(t.calls, 1, 'the deleter ran once, when the one import was freed');
        // Released: the producer may hand the same address out again, and it imports.
        const again = fromDLPack(t.address, { versioned });
        again.free();
        assert.equal(t.calls, 2);
      } finally {
        t.dispose();
      }
    }
  });

  test('the pointer and options themselves', () => {
    assert.throws(() => fromDLPack(0), TypeError);
    assert.throws(() => fromDLPack(0n), TypeError);
    assert.throws(() => fromDLPack(null as unknown as number), TypeError);
    assert.throws(() => fromDLPack('0x1000' as unknown as number), TypeError);
    assert.throws(() => fromDLPack(-8), RangeError);
    assert.throws(() => fromDLPack(1.5), RangeError);
    assert.throws(() => fromDLPack(2n ** 60n), RangeError);
    assert.throws(() => fromDLPack(4096, null as unknown as object), TypeError);
    assert.throws(() => fromDLPack(4096, { versioned: 'no' as unknown as boolean }), TypeError);
    assert.throws(() => deleteDLPack(0), TypeError);
  });
});

/** The C fixture, built into a temporary directory; undefined (with the reason) where there is no compiler. */
const fixture = ((): { lib: LibraryHandle; dir: string } | string => {
  let cc: string;
  try {
    cc = execFileSync('sh', ['-c', 'command -v cc'], { encoding: 'utf8' }).trim();
  } catch {
    return 'no C compiler (cc) on this machine';
  }
  const dir = mkdtempSync(join(tmpdir(), 'vram-dlpack-'));
  const source = fileURLToPath(new URL('../../../test/fixtures/dlpack/dlpack-fixture.c', import.meta.url));
  const out = join(dir, 'libdlpack-fixture.so');
  try {
    execFileSync(cc, ['-shared', '-fPIC', '-O1', '-o', out, source, '-ldl'], { stdio: 'pipe' });
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    return `cc could not build the fixture: ${String((error as { stderr?: unknown }).stderr ?? error)}`;
  }
  return { lib: koffi.load(out), dir };
})();

const withCc = { skip: typeof fixture === 'string' ? fixture : false } as const;

describe('round trips through C', withCc, () => {
  if (typeof fixture === 'string') return;
  after(() => rmSync(fixture.dir, { recursive: true, force: true }));
  const lib = fixture.lib;
  const make = lib.func(
    'void *fx_make_f32(int versioned, int device_type, int ndim, const int64_t *shape, const int64_t *strides, uint64_t byte_offset, int64_t span_floats, uint64_t flags)',
  );
  const calls = lib.func('int fx_deleter_calls(void)');
  const frees = lib.func('int fx_data_frees(void)');
  const weightedSum = lib.func('double fx_weighted_sum_f32(uintptr_t managed, int versioned)');
  const del = lib.func('int fx_delete(uintptr_t managed, int versioned)');
  const deviceType = lib.func('int fx_device_type(uintptr_t managed, int versioned)');
  const ndimOf = lib.func('int fx_ndim(uintptr_t managed, int versioned)');
  const shapeOf = lib.func('int64_t fx_shape(uintptr_t managed, int versioned, int i)');
  const strideOf = lib.func('int64_t fx_stride(uintptr_t managed, int versioned, int i)');
  const flagsOf = lib.func('uint64_t fx_flags(uintptr_t managed)');

  /** A C-made float32 tensor; its address as a number. */
  function produce(versioned: boolean, device: number, shape: number[], strides: number[] | null, byteOffset: number, span: number, flags = 0): number {
    const p = make(
      versioned ? 1 : 0,
      device,
      shape.length,
      BigInt64Array.from(shape.map(BigInt)),
      strides === null ? null : BigInt64Array.from(strides.map(BigInt)),
      byteOffset,
      span,
      flags,
    ) as unknown;
    assert.notEqual(p, null, 'the fixture made the tensor');
    return Number(koffi.address(p));
  }

  /** What the C side sums for `values` in row-major order. */
  function weighted(values: ArrayLike<number>): number {
    let s = 0;
    for (let k = 0; k < values.length; k++) s += (k + 1) * values[k]!;
    return s;
  }

  for (const versioned of [true, false]) {
    const kind = versioned ? 'versioned' : 'legacy';
    test(`C's malloc'd tensors (${kind}): compact, strided, offset, transposed; the deleter once on free()`, () => {
      const layouts: [number[], number[] | null, number, number, number[]][] = [
        [[3, 4], null, 0, 12, Array.from({ length: 12 }, (_, i) => i)],
        [[2, 3], [1, 2], 0, 6, [0, 2, 4, 1, 3, 5]],
        [[2, 2], [4, 2], 8, 10, [2, 4, 6, 8]],
        [[3], [-2], 16, 8, [4, 2, 0]],
      ];
      for (const [shape, strides, byteOffset, span, expected] of layouts) {
        const before = calls() as number;
        const p = produce(versioned, DLDeviceType.kDLCPU, shape, strides, byteOffset, span);
        const a = fromDLPack(p, { versioned });
        assert.deepEqual(numbers(a.toHost()), expected, `${shape} ${strides}`);
        a.copyFrom(new Float32Array(expected.map((x) => x + 100)));
        assert.equal(weightedSum(p, versioned ? 1 : 0), weighted(expected.map((x) => x + 100)), 'written in place');
        assert.equal(calls(), before);
        a.free();
        assert.equal(calls(), before + 1);
      }
    });
  }

  test("C reads vram's exports: metadata always; the elements where they are host memory", () => {
    using a = DeviceArray.from(
      new Float32Array(12).map((_, i) => i),
      { shape: [3, 4] },
    );
    const before = dlpackExportsHeld();
    const p = toDLPack(a.T, { readOnly: true });
    assert.deepEqual(
      [deviceType(p, 1), ndimOf(p, 1), shapeOf(p, 1, 0), shapeOf(p, 1, 1), strideOf(p, 1, 0), strideOf(p, 1, 1)],
      [DLDeviceType.kDLCUDA, 2, 4n, 3n, 1n, 4n].map((x) => (typeof x === 'bigint' ? Number(x) : x)),
    );
    assert.equal(Number(flagsOf(p)), DLPACK_FLAG_READ_ONLY);
    if (onGpu) assert.equal(weightedSum(p, 1), weighted(a.T.toHost()));
    assert.equal(del(p, 1), 1, 'C called the deleter');
    assert.equal(dlpackExportsHeld(), before);
    const q = toDLPack(a.slice([null, null, -1]), { versioned: false });
    assert.equal(strideOf(q, 0, 0), -4);
    if (onGpu) assert.equal(weightedSum(q, 0), weighted(a.slice([null, null, -1]).toHost()));
    del(q, 0);
    assert.equal(dlpackExportsHeld(), before);
  });

  test("C's tensor dropped without free(): the backstop unpins it and calls the deleter", needsGc, async () => {
    const before = calls() as number;
    (() => {
      fromDLPack(produce(true, DLDeviceType.kDLCPU, [8], null, 0, 8)).toHost();
    })();
    await collect(() => calls() === before + 1);
    assert.equal(calls(), before + 1);
    assert.equal(frees(), calls());
  });

  test("a refused C tensor stays C's: the caller hands it back", () => {
    const before = calls() as number;
    const p = produce(true, DLDeviceType.kDLCPU, [2], null, 2, 3); // element 0 at byte 2: misaligned for float32
    assert.throws(() => fromDLPack(p), RangeError);
    assert.equal(calls(), before);
    deleteDLPack(p);
    assert.equal(calls(), before + 1);
  });

  test('a kDLCPU tensor CUDA already pins is wrapped as it is', gpuOnly, () => {
    const before = calls() as number;
    const p = produce(true, DLDeviceType.kDLCPU, [2, 4], null, 0, 8);
    const pinned = HostBuffer.register(new Uint8Array(nativeBuffer(readStruct(p, true).data, 32)), { mapped: true });
    try {
      const a = fromDLPack(p);
      assert.deepEqual(numbers(a.toHost()), [0, 1, 2, 3, 4, 5, 6, 7]);
      pinned.free(); // the pinning is the test's: undone before the producer frees the memory
      a.free();
    } finally {
      if (!pinned.freed) pinned.free();
    }
    assert.equal(calls(), before + 1);
  });

  test("C's cuMemAlloc'd tensors: imported, read, written, and cuMemFree'd by the deleter on free()", gpuOnly, () => {
    const before = calls() as number;
    const p = produce(true, DLDeviceType.kDLCUDA, [4, 3], [1, 4], 4, 13, DLPACK_FLAG_IS_COPIED);
    const a = fromDLPack(p);
    assert.equal(dlpackInfo(a)?.copied, true);
    const expected = [1, 5, 9, 2, 6, 10, 3, 7, 11, 4, 8, 12];
    assert.deepEqual(numbers(a.toHost()), expected);
    a.fill(2);
    assert.equal(weightedSum(p, 1), weighted(expected.map(() => 2)));
    a.free();
    assert.equal(calls(), before + 1);
    assert.equal(frees(), calls());
  });
});
