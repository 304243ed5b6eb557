/**
 * An allocation the driver refuses while vram's own caches hold the memory: every cache of the
 * device is released (not only the failing stack's) and the allocation retried once, whichever way
 * it reached the driver (a CudaResource, cuMemAllocPitch, a new pool); an error that remains says
 * how much was released; a refusal of vram's own (a limit) releases nothing; `place()` counts the
 * caches as free. Runs on both backends: the device is filled through its default resource, whose
 * freed memory stays cached.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Ptr } from '../../src/backend/backend.js';
import { DeviceArray } from '../../src/array/device-array.js';
import { Device } from '../../src/device.js';
import { OutOfMemoryError } from '../../src/errors.js';
import { place } from '../../src/interop/place.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';
import { getCurrentResource } from '../../src/resource/current.js';
import { PitchedDeviceBuffer } from '../../src/buffer/device-buffer.js';
import { LimitingAdaptor } from '../../src/resource/adaptors/limiting.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import { StatisticsAdaptor } from '../../src/resource/adaptors/statistics.js';
import { AsyncResource } from '../../src/resource/upstream/async-resource.js';
import { MemoryResource } from '../../src/resource/resource.js';
import { type MemoryFigures } from '../../src/resource/figures.js';

const MiB = 1024 * 1024;
const device = Device.get(0);

/**
 * Fills the device through its default resource until the driver refuses, then frees it all:
 * the memory stays in the default resource's cache, and the device shows (almost) none free.
 */
function fillDefaultCache(): void {
  const mr = getCurrentResource(device);
  const chunk = 256 * MiB;
  const held: Ptr[] = [];
  try {
    for (;;) held.push(mr.allocate(chunk));
  } catch (error) {
    if (!(error instanceof OutOfMemoryError)) throw error;
  }
  for (const ptr of held) mr.deallocate(ptr, chunk);
  assert.ok(held.length > 0);
  assert.ok(device.memInfo().free < chunk, 'the cache holds the device');
}

describe('out of memory while vram caches the memory', () => {
  it('releases every cache of the device and retries: CudaResource, allocate2D, DeviceArray.pitched, a new PoolResource', () => {
    fillDefaultCache();
    using cuda = new CudaResource(device);
    cuda.deallocate(cuda.allocate(128 * MiB), 128 * MiB);

    fillDefaultCache();
    PitchedDeviceBuffer.allocate2D(8192, 16384, { device }).free();

    fillDefaultCache();
    DeviceArray.pitched([4096, 4096], 'float32', { device }).free();

    fillDefaultCache();
    using pool = new PoolResource({ device });
    pool.deallocate(pool.allocate(128 * MiB), 128 * MiB);
  });

  it('releases caches of resources the failing stack does not reach, and the error says how much', () => {
    using other = new PoolResource({ device });
    other.deallocate(other.allocate(256 * MiB), 256 * MiB);
    assert.ok(other.reservedBytes >= 256 * MiB);
    using cuda = new CudaResource(device);
    const tooMuch = device.info.totalMemory + 256 * MiB;
    assert.throws(
      () => cuda.allocate(tooMuch),
      (error: unknown) => {
        assert.ok(error instanceof OutOfMemoryError);
        assert.match(error.message, /vram's caches released \d+(\.\d+)? [MG]iB of device 0's memory to the driver before a retry, which failed too/);
        return true;
      },
    );
    assert.equal(other.reservedBytes, 0, 'the other pool gave its cache back');
    assert.throws(() => cuda.allocate(tooMuch), /vram's caches held none of device 0's memory to release/);
  });

  it("a refusal of vram's own (a limit) releases no cache", () => {
    using other = new PoolResource({ device });
    other.deallocate(other.allocate(64 * MiB), 64 * MiB);
    const cached = other.reservedBytes;
    using limited = new LimitingAdaptor(new CudaResource(device), MiB);
    assert.throws(
      () => limited.allocate(2 * MiB),
      (error: unknown) => error instanceof OutOfMemoryError && error.reason === 'limit',
    );
    assert.equal(other.reservedBytes, cached);
  });

  it('place() counts what the caches hold as free: the data goes to the device', () => {
    fillDefaultCache();
    const data = new Float32Array(16 * MiB);
    const { array, placement } = place(data);
    try {
      assert.equal(placement, 'device');
    } finally {
      array.free();
    }
  });
});

/** A device-wide refusal: the driver says no, and the release-and-retry path runs. */
function assertDeviceOutOfMemory(): void {
  using cuda = new CudaResource(device);
  assert.throws(
    () => cuda.allocate(2 * device.info.totalMemory),
    (error: unknown) => {
      assert.ok(error instanceof OutOfMemoryError, `an OutOfMemoryError, not ${String(error)}`);
      assert.equal(error.reason, 'device');
      return true;
    },
  );
}

describe('the release-and-retry path never turns an out-of-memory error into another', () => {
  // Each constructor throws after MemoryResource's own ran; the half-built object lives (a WeakRef's
  // target is kept until the end of the synchronous job) while the refusal below is handled.
  const constructors: Array<[string, () => unknown]> = [
    ['new StatisticsAdaptor(null)', () => new StatisticsAdaptor(null as unknown as MemoryResource)],
    ['new LimitingAdaptor(null, n)', () => new LimitingAdaptor(null as unknown as MemoryResource, MiB)],
    ['new PoolResource({ extentSize: 2 ** 60 })', () => new PoolResource({ extentSize: 2 ** 60 })],
    ['new AsyncResource with an unknown option', () => new AsyncResource({ bogus: 1 } as never)],
    ['new AsyncResource with an unknown pool option', () => new AsyncResource({ pool: { bogus: 1 } as never })],
  ];
  for (const [name, make] of constructors) {
    it(`after ${name} threw, a refusal is still an OutOfMemoryError`, () => {
      assert.throws(make, (error: unknown) => error instanceof TypeError || error instanceof RangeError);
      assertDeviceOutOfMemory();
    });
  }

  it('a whole resource whose figures cannot be read is skipped with a warning', async () => {
    const warnings: string[] = [];
    const onWarning = (warning: Error & { code?: string }): void => {
      if (warning.code === 'VRAM_CACHE_RELEASE') warnings.push(warning.message);
    };
    process.on('warning', onWarning);
    try {
      const inner = new CudaResource(device);
      class BrokenFigures extends MemoryResource {
        readonly kind = 'device';
        readonly alignment = 256;
        readonly deviceOrdinal = device.ordinal;
        protected doAllocate(bytes: number): number {
          return inner.allocate(bytes);
        }
        protected doDeallocate(ptr: number, bytes: number): void {
          inner.deallocate(ptr, bytes);
        }
        override memoryFigures(): MemoryFigures {
          throw new Error('figures unreadable');
        }
        describe(): string {
          return 'BrokenFigures';
        }
      }
      using broken = new BrokenFigures();
      broken.deallocate(broken.allocate(MiB), MiB); // joins the registry
      assertDeviceOutOfMemory();
      await new Promise((resolve) => setImmediate(resolve));
      assert.ok(
        warnings.some((m) => /BrokenFigures: figures unreadable/.test(m)),
        warnings.join('\n'),
      );
      inner.destroy();
    } finally {
      process.off('warning', onWarning);
    }
  });
});
