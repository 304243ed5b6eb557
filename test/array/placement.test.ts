/**
 * place(): data on the device when memInfo shows room beyond the margin, otherwise in mapped
 * pinned memory the device reads in place; the mapped array owns its HostArray (free, using, the
 * backstop), and bad options are typed errors before anything is allocated.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { DeviceArray } from '../../src/array/device-array.js';
import { HostArray } from '../../src/array/host-array.js';
import { Device } from '../../src/device.js';
import { defaultPlacementMargin, place } from '../../src/interop/place.js';
import { ForeignDeviceBuffer } from '../../src/buffer/foreign-device-buffer.js';
import { deviceMemoryUsed, assertMemoryReturned, forceGc, needsGc } from '../helpers.js';

const device = Device.get(0);

function iota(n: number): Float32Array {
  return Float32Array.from({ length: n }, (_, i) => i * 0.5);
}

describe('place', () => {
  it('puts data that fits on the device', () => {
    const data = iota(1 << 16);
    const { array, placement, host } = place(data, { shape: [256, 256] });
    try {
      assert.equal(placement, 'device');
      assert.equal(host, undefined);
      assert.deepEqual(array.shape, [256, 256]);
      assert.equal(array.dtype.name, 'float32');
      assert.deepEqual(array.toHost(), data);
      assert.equal(array.ownsMemory, true);
    } finally {
      array.free();
    }
  });

  it('falls back to mapped pinned memory when the margin leaves no room, read and written in place', () => {
    const before = deviceMemoryUsed();
    const data = iota(3000);
    const total = device.memInfo().total;
    const { array, placement, host } = place(data, { minFree: total, dtype: 'float3' });
    assert.equal(placement, 'mapped');
    assert.ok(host instanceof HostArray);
    assert.ok(array.buffer instanceof ForeignDeviceBuffer);
    assert.equal(array.dtype.name, 'float3');
    assert.deepEqual(array.shape, [1000]);
    assert.equal(array.ptr, host.deviceView().ptr, "the device array is the host array's device view");
    assert.deepEqual(array.toHost(), data);
    assert.deepEqual(host.toHost(), data);
    array.slice([0, 10]).fill([1, 2, 3]); // the device writes; the host sees it in place
    assert.deepEqual(Array.from(host.toHost().subarray(0, 6)), [1, 2, 3, 1, 2, 3]);
    assertMemoryReturned(before, deviceMemoryUsed(), 'no device memory for mapped data');
    array.free();
    assert.equal(host.freed, true, 'freeing the array freed its HostArray');
  });

  it('write-combined fallback: the device reads what was placed (no host read of the memory)', () => {
    const data = new Int32Array([5, -6, 7, -8]);
    let warned = false;
    const onWarning = (w: Error & { code?: string }): void => {
      if (w.code === 'VRAM_WRITE_COMBINED_READ') warned = true;
    };
    process.on('warning', onWarning);
    try {
      using placed = place(data, { minFree: Number.MAX_SAFE_INTEGER - 8, writeCombined: true }).array;
      assert.ok(placed.buffer instanceof ForeignDeviceBuffer && placed.buffer.kind === 'mapped-host');
      using copy = placed.copy();
      assert.deepEqual(copy.toHost(), data);
    } finally {
      process.off('warning', onWarning);
    }
    assert.equal(warned, false, 'placing write-combined memory does not read it on the host');
  });

  it('using frees the mapped HostArray; nested data and a stream', () => {
    let host: HostArray | undefined;
    {
      const placed = place(
        [
          [1, 2],
          [3, 4],
        ],
        { dtype: 'int16', minFree: Number.MAX_SAFE_INTEGER - 8, stream: { handle: 0 } },
      );
      using array = placed.array;
      host = placed.host;
      assert.deepEqual(array.toHost(), new Int16Array([1, 2, 3, 4]));
    }
    assert.equal(host?.freed, true);
  });

  it("the backstop frees a dropped mapped placement's HostArray", needsGc, async () => {
    let hostRef: WeakRef<HostArray> | undefined;
    let freedSeen = false;
    (() => {
      const { host } = place(iota(64), { minFree: Number.MAX_SAFE_INTEGER - 8 });
      hostRef = new WeakRef(host!);
    })();
    for (let i = 0; i < 50; i++) {
      forceGc!();
      await nextTurn();
      const h = hostRef!.deref();
      if (h === undefined || h.freed) {
        freedSeen = true;
        break;
      }
    }
    assert.ok(freedSeen, 'the HostArray was freed (or collected) once its device array was dropped');
  });

  it('the default margin: local memory for every resident thread, plus 64 MiB', () => {
    const sms = device.info.multiprocessorCount;
    assert.equal(defaultPlacementMargin(device), sms * 2048 * 1024 + 64 * 1024 * 1024);
    assert.equal(defaultPlacementMargin(), defaultPlacementMargin(0));
  });

  it('bad options are typed errors before anything is allocated', () => {
    const before = deviceMemoryUsed();
    const data = iota(4);
    assert.throws(() => place(data, null as unknown as object), TypeError);
    assert.throws(() => place(data, { prefer: 'host' as 'device' }), RangeError);
    assert.throws(() => place(data, { fallback: 'disk' as 'mapped' }), RangeError);
    assert.throws(() => place(data, { minFree: -1 }), RangeError);
    assert.throws(() => place(data, { minFree: 2 ** 60 }), /minFree must be a whole number from 0 to 2\^53 - 1 \(9007199254740991\), got 1152921504606847000/);
    assert.throws(() => place(data, { minFree: true as unknown as number }), TypeError);
    assert.throws(() => place(data, { minFree: 'a little' }), RangeError);
    assert.throws(() => place(data, { writeCombined: 1 as unknown as boolean }), TypeError);
    assert.throws(() => place(data, { shape: [5] }), RangeError);
    assert.throws(() => place(new ArrayBuffer(8) as unknown as Float32Array, {}), TypeError, 'raw bytes need a dtype');
    assert.throws(() => place(data, { device: 99 }), RangeError);
    assertMemoryReturned(before, deviceMemoryUsed(), 'nothing allocated');
  });

  it('DeviceArray results of both placements interoperate (device copy from mapped)', () => {
    const data = iota(512);
    const mapped = place(data, { minFree: Number.MAX_SAFE_INTEGER - 8 });
    const onDevice = place(data);
    try {
      const out = DeviceArray.zeros([512], 'float32');
      out.copyFrom(mapped.array);
      assert.deepEqual(out.toHost(), onDevice.array.toHost());
      out.free();
    } finally {
      mapped.array.free();
      onDevice.array.free();
    }
  });
});
