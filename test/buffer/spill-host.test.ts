/**
 * Host memory for spilling reserved ahead (issue 22's first round), on both backends with a small
 * device: spills take their host copies from a reservation without pinning memory (no
 * cuMemHostAlloc while it has room: the backend is spied on), grow past it on demand, and
 * `emptyCache()` gives it back; `reserveSpillHost` checks its arguments before it pins anything.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { reserveSpillHost, spillFigures } from '../../src/buffer/spill/spill-manager.js';
import { Device } from '../../src/device.js';
import { emptyCache } from '../../src/resource/current.js';
import { Stream } from '../../src/stream.js';
import { patchBackend, withDeviceRoom } from '../helpers.js';

const MiB = 1 << 20;
const device = Device.get(0);
/** Buffers of 20 granules: two host copies pass the 64 MiB a growth pins at least. */
const SIZE = 40 * MiB;

/** Counts cuMemHostAlloc and cuMemFreeHost calls on the device's backend while it lives. */
function countHostCalls(): { readonly allocs: number; readonly frees: number } & Disposable {
  const counter = { allocs: 0, frees: 0 };
  const alloc = patchBackend(device.backend, 'memHostAlloc', (memHostAlloc) => (bytes, flags) => {
    counter.allocs++;
    return memHostAlloc(bytes, flags);
  });
  const free = patchBackend(device.backend, 'memFreeHost', (memFreeHost) => (ptr) => {
    counter.frees++;
    memFreeHost(ptr);
  });
  return Object.assign(counter, {
    [Symbol.dispose]: () => {
      alloc[Symbol.dispose]();
      free[Symbol.dispose]();
    },
  });
}

/**
 * Four buffers of SIZE with room for two and a half, each filled with its index, used in turn
 * twice (spills and reloads), data checked; returns the host allocations the spilling made (the
 * check's own copies to JavaScript memory pin staging memory, so they are not counted).
 */
function cycle(stream: Stream): number {
  let allocs = 0;
  withDeviceRoom(100 * MiB, () => {
    const buffers = Array.from({ length: 4 }, () => DeviceBuffer.allocate(SIZE, { spillable: true, stream }));
    try {
      using calls = countHostCalls();
      buffers.forEach((b, i) => b.memset(i, { stream }));
      for (let round = 0; round < 2; round++) {
        for (const b of buffers) b.memset(1, { stream, count: 1 });
      }
      allocs = calls.allocs;
      assert.ok(spillFigures(device).copiesOut > 0, 'buffers were spilled');
      buffers.forEach((b, i) => {
        stream.synchronize();
        const bytes = b.copyToHost(new Uint8Array(SIZE));
        assert.equal(bytes[0], 1);
        assert.ok(
          bytes.subarray(1).every((x) => x === i),
          `buffer ${i} kept its data`,
        );
      });
    } finally {
      for (const b of buffers) b.free();
    }
  });
  return allocs;
}

describe('host memory reserved for spilling', () => {
  it('spills take their host copies from the reservation: no host allocation while it has room', () => {
    using stream = Stream.create();
    emptyCache();
    const held = reserveSpillHost(4 * SIZE);
    assert.ok(held >= 4 * SIZE, `held ${held} bytes, asked for ${4 * SIZE}`);
    assert.ok(spillFigures(device).hostReservedBytes >= 4 * SIZE, 'the figures count the reservation');
    assert.equal(reserveSpillHost(4 * SIZE), held, 'the same size again pins nothing more');
    assert.equal(cycle(stream), 0, 'no cuMemHostAlloc at a spill while the reservation had room');
    assert.equal(spillFigures(device).hostReservedBytes, held, 'spilling used the reservation');
    assert.equal(spillFigures(device).hostAllocatedBytes, 0, 'freed buffers gave their host copies back to it');
  });

  it('grows past the reservation on demand, and emptyCache gives it all back', () => {
    using stream = Stream.create();
    emptyCache();
    assert.equal(spillFigures(device).hostReservedBytes, 0);
    const held = reserveSpillHost(SIZE);
    const grown = cycle(stream);
    assert.ok(grown > 0, 'spills past the reservation pinned more');
    assert.ok(spillFigures(device).hostReservedBytes > held, 'the figures count the growth');
    const before = spillFigures(device).hostReservedBytes;
    using calls = countHostCalls();
    assert.ok(emptyCache() >= before, 'emptyCache counts the host memory it gave back');
    assert.equal(spillFigures(device).hostReservedBytes, 0, 'nothing held after emptyCache');
    assert.ok(calls.frees >= grown + 1, "every chunk went back, the reservation's too");
  });

  it('checks its arguments before it pins anything', () => {
    emptyCache();
    using calls = countHostCalls();
    assert.throws(() => reserveSpillHost('lots'), RangeError);
    assert.throws(() => reserveSpillHost(-1), RangeError);
    assert.throws(() => reserveSpillHost(1.5), RangeError);
    assert.throws(() => reserveSpillHost(MiB, { devise: 0 } as never), /devise/);
    assert.throws(() => reserveSpillHost(MiB, { device: 99 }), RangeError);
    assert.equal(calls.allocs, 0);
    assert.equal(reserveSpillHost(0), 0, 'a reservation of nothing pins nothing');
    assert.equal(calls.allocs, 0);
  });
});
