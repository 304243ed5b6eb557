/**
 * CUDA Array Interface v3: export then import is the same memory (no copy) with the same
 * elements, strides in bytes for transposes, slices and reversed views, vector dtypes as a last
 * dimension, the producer's stream waited for on the device, and malformed objects rejected with
 * typed errors before anything is wrapped.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { DeviceArray } from '../../src/array/device-array.js';
import { HostAllocFlags, StreamWaitValueFlags, StreamWriteValueFlags } from '../../src/backend/backend.js';
import { getBackend } from '../../src/backend/select.js';
import { Device } from '../../src/device.js';
import { InvalidPointerError, NotSupportedError, VramStateError } from '../../src/errors.js';
import { cudaArrayInterfaceInfo, fromCudaArrayInterface, toCudaArrayInterface, type CudaArrayInterface } from '../../src/interop/cuda-array-interface.js';
import { leakStatistics } from '../../src/backstop.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';
import { Event, Stream } from '../../src/stream.js';
import { gpuOnly } from '../helpers.js';

const device = Device.get(0);

function iota(n: number): Float32Array {
  return Float32Array.from({ length: n }, (_, i) => i);
}

describe('toCudaArrayInterface', () => {
  it('a contiguous array: shape, typestr, data, null strides, version 3, the legacy stream as 1', () => {
    using a = DeviceArray.from(iota(6), { shape: [2, 3] });
    const cai = toCudaArrayInterface(a);
    assert.deepEqual(cai, {
      shape: [2, 3],
      typestr: '<f4',
      descr: [['', '<f4']],
      data: [a.ptr, false],
      strides: null,
      version: 3,
      stream: 1,
    });
    assert.equal(JSON.stringify(JSON.parse(JSON.stringify(cai))), JSON.stringify(cai), 'a plain object');
  });

  it('typestrs of every scalar the interface has; bfloat16 is NotSupportedError', () => {
    const expected: Record<string, string> = {
      bool: '|b1',
      int8: '|i1',
      uint8: '|u1',
      int16: '<i2',
      uint16: '<u2',
      int32: '<i4',
      uint32: '<u4',
      int64: '<i8',
      uint64: '<u8',
      float16: '<f2',
      float32: '<f4',
      float64: '<f8',
    };
    for (const [dtype, typestr] of Object.entries(expected)) {
      using a = DeviceArray.empty([2], dtype as 'float32');
      assert.equal(toCudaArrayInterface(a).typestr, typestr, dtype);
    }
    using b = DeviceArray.empty([2], 'bfloat16');
    assert.throws(() => toCudaArrayInterface(b), NotSupportedError);
    using b2 = DeviceArray.empty([2], 'bfloat162');
    assert.throws(() => toCudaArrayInterface(b2), NotSupportedError);
  });

  it('strides in bytes for a transpose, a stepped slice and a reversed view; data at element 0', () => {
    using a = DeviceArray.from(iota(12), { shape: [3, 4] });
    assert.deepEqual(toCudaArrayInterface(a.T).strides, [4, 16]);
    const stepped = a.slice(null, [0, null, 2]);
    assert.deepEqual(toCudaArrayInterface(stepped).strides, [16, 8]);
    assert.deepEqual(toCudaArrayInterface(stepped).shape, [3, 2]);
    const reversed = a.slice([null, null, -1]);
    const cai = toCudaArrayInterface(reversed);
    assert.deepEqual(cai.strides, [-16, 4]);
    assert.equal(cai.data[0], a.ptr + 32, 'data points at element (0, 0) of the view');
  });

  it('vector dtypes export as their component with the components as a last dimension', () => {
    using p = DeviceArray.from(iota(12), { dtype: 'float3' });
    const cai = toCudaArrayInterface(p);
    assert.deepEqual([cai.shape, cai.typestr, cai.strides], [[4, 3], '<f4', null]);
    const everyOther = toCudaArrayInterface(p.slice([0, null, 2]));
    assert.deepEqual(
      [everyOther.shape, everyOther.strides],
      [
        [2, 3],
        [24, 4],
      ],
    );
    using h = DeviceArray.empty([5], 'half2');
    assert.deepEqual([toCudaArrayInterface(h).shape, toCudaArrayInterface(h).typestr], [[5, 2], '<f2']);
  });

  it("the stream: a Stream's handle, null omits it; an empty array has address 0", () => {
    using stream = Stream.create();
    using a = DeviceArray.zeros([4], 'int32', { stream });
    assert.equal(toCudaArrayInterface(a).stream, stream.handle);
    assert.equal(toCudaArrayInterface(a, { stream: Stream.default() }).stream, 1);
    assert.equal('stream' in toCudaArrayInterface(a, { stream: null }), false);
    using e = DeviceArray.empty([0, 3], 'float32');
    assert.deepEqual(toCudaArrayInterface(e).data, [0, false]);
    assert.throws(() => toCudaArrayInterface(new Float32Array(4) as unknown as DeviceArray), TypeError);
  });
});

describe('fromCudaArrayInterface', () => {
  it('export then import: the same memory, the same elements, no copy; freeing drops the owner only', () => {
    const a = DeviceArray.from(iota(6), { shape: [2, 3] });
    const b = fromCudaArrayInterface(toCudaArrayInterface(a), { owner: a });
    assert.equal(b.ptr, a.ptr);
    assert.deepEqual(b.shape, [2, 3]);
    assert.equal(b.dtype.name, 'float32');
    assert.deepEqual(b.toHost(), iota(6));
    b.fill(5);
    assert.deepEqual(a.toHost(), new Float32Array(6).fill(5), "a write through the import reaches the producer's memory");
    b.free();
    assert.deepEqual(a.toHost(), new Float32Array(6).fill(5), "the producer's memory is still there");
    a.free();
  });

  it('round trips of transposes, stepped and reversed slices', () => {
    using a = DeviceArray.from(iota(24), { shape: [4, 6] });
    for (const view of [a.T, a.slice(null, [1, null, 2]), a.slice([null, null, -1], [null, null, -2]), a.slice(2)]) {
      using back = fromCudaArrayInterface(toCudaArrayInterface(view), { owner: a });
      assert.deepEqual(back.shape, view.shape);
      assert.deepEqual(back.strides, view.strides);
      assert.deepEqual(back.toHost(), view.toHost());
    }
  });

  it('vector dtypes: the last dimension folds back with { dtype }, else stays a dimension', () => {
    using p = DeviceArray.from(iota(24), { dtype: 'float3' });
    const view = p.slice([1, null, 3]);
    using same = fromCudaArrayInterface(toCudaArrayInterface(view), { owner: p, dtype: 'float3' });
    assert.equal(same.dtype.name, 'float3');
    assert.deepEqual(same.shape, view.shape);
    assert.deepEqual(same.toHost(), view.toHost());
    using flat = fromCudaArrayInterface(toCudaArrayInterface(p), { owner: p });
    assert.deepEqual([flat.dtype.name, flat.shape], ['float32', [8, 3]]);
    assert.throws(() => fromCudaArrayInterface(toCudaArrayInterface(p), { dtype: 'float4' }), RangeError);
    assert.throws(() => fromCudaArrayInterface(toCudaArrayInterface(p), { dtype: 'int3' }), RangeError);
    using u = DeviceArray.from(new Uint8Array(16).fill(7), { dtype: 'uchar4' });
    using u2 = fromCudaArrayInterface(toCudaArrayInterface(u), { dtype: 'uchar4' });
    assert.deepEqual(u2.toHost(), new Uint8Array(16).fill(7));
  });

  it('version 2, a bigint address, a read-only flag (enforced), an empty interface', () => {
    using a = DeviceArray.from(new Int16Array([1, -2, 3]));
    const cai = toCudaArrayInterface(a);
    using v2 = fromCudaArrayInterface({ ...cai, version: 2, data: [BigInt(a.ptr), true], stream: undefined });
    assert.deepEqual(v2.toHost(), new Int16Array([1, -2, 3]));
    assert.deepEqual(cudaArrayInterfaceInfo(v2), { version: 2, readOnly: true, typestr: '<i2' });
    assert.throws(() => v2.copyFrom(new Int16Array([4, 5, 6])), VramStateError);
    assert.deepEqual(v2.toHost(), new Int16Array([1, -2, 3]));
    assert.equal(cudaArrayInterfaceInfo(a), undefined);
    using empty = fromCudaArrayInterface({ shape: [0, 4], typestr: '<f8', data: [0, false], version: 3 });
    assert.deepEqual([empty.shape, empty.dtype.name], [[0, 4], 'float64']);
    using mapped = fromCudaArrayInterface({ shape: [3], typestr: '=i2', data: [a.ptr, false], version: 3 });
    assert.deepEqual(mapped.toHost(), new Int16Array([1, -2, 3]));
  });

  it("the consumer's stream waits for the producer's on the device (no host wait)", async () => {
    const backend = getBackend();
    device.makeCurrent();
    const flag = backend.memHostAlloc(4, HostAllocFlags.DEVICEMAP);
    const word = new Uint32Array(backend.hostView(flag, 4), 0, 1);
    word[0] = 0;
    try {
      using producer = Stream.create({ nonBlocking: true });
      using consumer = Stream.create({ nonBlocking: true });
      using a = DeviceArray.zeros([4], 'float32', { stream: producer });
      producer.synchronize();
      // Hold the producer's stream until the host writes 1 into the flag.
      backend.streamWaitValue32(producer.handle, backend.memHostGetDevicePointer(flag), 1, StreamWaitValueFlags.GEQ);
      const cai = toCudaArrayInterface(a, { stream: producer });
      using b = fromCudaArrayInterface(cai, { owner: a, stream: consumer });
      assert.equal(b.stream, consumer);
      const after = Event.create({ timing: false });
      after.record(consumer);
      assert.equal(after.query(), false, 'the consumer waits for the held producer');
      word[0] = 1;
      await after.synchronized();
      after.destroy();
      backend.streamWriteValue32(producer.handle, backend.memHostGetDevicePointer(flag), 0, StreamWriteValueFlags.DEFAULT);
      producer.synchronize();
    } finally {
      word[0] = 1;
      backend.memFreeHost(flag);
    }
  });

  it("the per-thread default stream (2) as the producer's stream", gpuOnly, () => {
    using a = DeviceArray.from(iota(4));
    using b = fromCudaArrayInterface({ ...toCudaArrayInterface(a), stream: 2 }, { owner: a });
    assert.deepEqual(b.toHost(), iota(4));
  });

  it('bad objects are typed errors, with nothing wrapped or leaked', () => {
    using a = DeviceArray.from(iota(8));
    const good = toCudaArrayInterface(a);
    const leaks = leakStatistics().count;
    const bad = (patch: Record<string, unknown>, error: new (...args: never[]) => Error, what: string): void => {
      assert.throws(() => fromCudaArrayInterface({ ...good, ...patch } as unknown as CudaArrayInterface), error, what);
    };
    assert.throws(() => fromCudaArrayInterface(null as unknown as CudaArrayInterface), TypeError);
    assert.throws(() => fromCudaArrayInterface(good, null as unknown as object), TypeError);
    bad({ version: '3' }, TypeError, 'version as a string');
    bad({ version: 1 }, NotSupportedError, 'version 1');
    bad({ version: 4 }, NotSupportedError, 'version 4');
    bad({ mask: good }, NotSupportedError, 'a mask');
    bad({ typestr: 'float32' }, TypeError, 'not a typestr');
    bad({ typestr: 4 }, TypeError, 'typestr not a string');
    bad({ typestr: '<c8' }, NotSupportedError, 'complex');
    bad({ typestr: '>f4' }, NotSupportedError, 'big-endian');
    bad({ typestr: '|f4' }, TypeError, '| for a 4-byte type');
    bad(
      {
        descr: [
          ['x', '<f4'],
          ['y', '<f4'],
        ],
      },
      NotSupportedError,
      'structured descr',
    );
    bad({ descr: 'f4' }, TypeError, 'descr not a list');
    bad({ shape: [-1] }, RangeError, 'negative extent');
    bad({ shape: '8' }, TypeError, 'shape not an array');
    bad({ strides: [2] }, RangeError, 'stride not a multiple of the item size');
    bad({ strides: [4, 4] }, RangeError, 'strides of the wrong length');
    bad({ strides: ['4'] }, TypeError, 'stride not a number');
    bad({ data: [a.ptr] }, TypeError, 'data not a pair');
    bad({ data: [a.ptr, 0] }, TypeError, 'read-only not a boolean');
    bad({ data: ['0x10', false] }, TypeError, 'address as a string');
    bad({ data: [-4, false] }, RangeError, 'negative address');
    bad({ stream: 0 }, RangeError, 'stream 0 is forbidden');
    bad({ stream: 1.5 }, RangeError, 'fractional stream');
    bad({ data: [0x1234_0000, false] }, InvalidPointerError, 'an address the driver does not know');
    // The check sees the driver's allocation (cuPointerGetAttributes' range), which is the block
    // only for memory of one cuMemAlloc per block: a sub-allocator's block lies in a larger range
    // (a pool's chunk, or its whole virtual range under VRAM_ALLOCATOR=pool or adaptive). So this
    // case names the resource it assumes.
    using perBlock = new CudaResource(device);
    using whole = DeviceArray.from(iota(8), { resource: perBlock });
    assert.throws(() => fromCudaArrayInterface({ ...toCudaArrayInterface(whole), shape: [2 ** 26] }), InvalidPointerError, 'past the allocation');
    bad({ data: [a.ptr + 2, false] }, RangeError, 'misaligned');
    assert.throws(() => fromCudaArrayInterface(good, { dtype: 'int32' }), RangeError);
    assert.equal(leakStatistics().count, leaks);
  });
});
