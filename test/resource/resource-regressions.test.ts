/**
 * One regression test per defect the hostile test of the resource layer found (issue 6), on both
 * backends. Stream-order defects that need a stream held back on the device are in
 * stream-order.test.ts; the data-checking fuzz is data-fuzz.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Device } from '../../src/device.js';
import { CudaError, InvalidPointerError, isOutOfMemory, OutOfMemoryError, VramError } from '../../src/errors.js';
import { ArenaResource } from '../../src/resource/suballoc/arena.js';
import { AsyncResource } from '../../src/resource/upstream/async-resource.js';
import { BinningResource } from '../../src/resource/suballoc/binning.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { LimitingAdaptor } from '../../src/resource/adaptors/limiting.js';
import { LoggingAdaptor } from '../../src/resource/adaptors/logging.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import { StatisticsAdaptor } from '../../src/resource/adaptors/statistics.js';
import { assertMemoryReturned, deviceMemoryUsed } from '../helpers.js';

const device = Device.get(0);
device.makeCurrent();
const MiB = 1024 * 1024;
const total = device.info.totalMemory;

describe('the size argument never decides where a free goes', () => {
  it('BinningResource: a wrong size is refused and the bin keeps its chunk', () => {
    using pool = new PoolResource();
    using bins = new BinningResource(pool, { minSizeExponent: 8, maxSizeExponent: 12 });
    const reserved = pool.memoryFigures().allocatedBytes.value;
    const p = bins.allocate(300);
    const inBins = pool.memoryFigures().allocatedBytes.value;
    assert.ok(inBins > reserved, 'the 512-byte bin took a chunk from the pool');
    assert.throws(() => bins.deallocate(p, 1 << 20), InvalidPointerError);
    assert.throws(() => bins.deallocate(p, 100), InvalidPointerError);
    assert.equal(pool.memoryFigures().allocatedBytes.value, inBins, "the chunk is still the bin's");
    const q = bins.allocate(300);
    assert.notEqual(q, p, 'the bin does not hand out the live block again');
    bins.deallocate(p, 300);
    bins.deallocate(q, 300);
    assert.throws(() => bins.deallocate(0x7e00_0000_0000, 300), InvalidPointerError);
  });

  it('over CudaResource and AsyncResource a wrong size is refused, so a limit and statistics stay true', () => {
    for (const upstream of [new CudaResource(), new AsyncResource({ pool: {} })]) {
      const stats = new StatisticsAdaptor(upstream);
      const limited = new LimitingAdaptor(stats, 1 * MiB);
      const p = limited.allocate(MiB);
      assert.throws(() => limited.deallocate(p, 64 * MiB), InvalidPointerError);
      assert.throws(
        () => limited.allocate(64 * MiB),
        (e: unknown) => e instanceof OutOfMemoryError && e.reason === 'limit',
      );
      assert.equal(limited.allocatedBytes, MiB);
      assert.equal(stats.memoryFigures().allocatedBytes.value, MiB, 'no negative or shrunken figure');
      limited.deallocate(p, MiB);
      assert.equal(stats.memoryFigures().allocatedBytes.value, 0);
      upstream.destroy();
    }
  });
});

describe('failures keep nothing they took', () => {
  it('a pool whose initial size cannot be had leaves the device as it was', () => {
    const before = deviceMemoryUsed(device);
    assert.throws(
      () => new PoolResource({ initialSize: 2 * total }),
      (e: unknown) => isOutOfMemory(e),
    );
    assertMemoryReturned(before, deviceMemoryUsed(device), 'nothing mapped stays mapped');
    // The device is still usable in full by another allocator.
    const mr = new CudaResource();
    const half = Math.floor(total / 2 / MiB) * MiB;
    mr.deallocate(mr.allocate(half), half);
    mr.destroy();
  });

  it('a pool allocation larger than the device gives back the pages it mapped on the way', () => {
    using pool = new PoolResource();
    const keep = pool.allocate(MiB);
    const before = deviceMemoryUsed(device);
    const reserved = pool.reservedBytes;
    assert.throws(
      () => pool.allocate(total + 64 * MiB),
      (e: unknown) => e instanceof OutOfMemoryError && e.reason === 'device',
    );
    assert.equal(pool.reservedBytes, reserved, 'no new page kept');
    assertMemoryReturned(before, deviceMemoryUsed(device), 'the failed growth unmapped what it mapped');
    const other = new CudaResource();
    const half = Math.floor(total / 2 / MiB) * MiB;
    other.deallocate(other.allocate(half), half);
    other.destroy();
    pool.deallocate(keep, MiB);
  });

  it('a LoggingAdaptor whose sink throws after the upstream allocated does not leak', () => {
    using pool = new PoolResource();
    let fail = false;
    const logging = new LoggingAdaptor(pool, () => {
      if (fail) throw new Error('disk full');
    });
    fail = true;
    assert.throws(() => logging.allocate(4096), /disk full/);
    assert.equal(pool.memoryFigures().allocations.value, 0, 'the block went back upstream');
    fail = false;
    logging.deallocate(logging.allocate(4096), 4096);
    logging.destroy();
  });
});

describe('errors', () => {
  it('OutOfMemoryError is a VramError, not a CudaError, with the driver error as its cause', () => {
    using mr = new CudaResource();
    assert.throws(
      () => mr.allocate(total + 64 * MiB),
      (e: unknown) => {
        assert.ok(e instanceof OutOfMemoryError && e instanceof VramError);
        assert.ok(!(e instanceof CudaError));
        assert.equal(e.reason, 'device');
        assert.ok(e.cause instanceof CudaError && e.cause.errorName === 'CUDA_ERROR_OUT_OF_MEMORY');
        assert.match(e.resource ?? '', /CudaResource/);
        assert.ok(isOutOfMemory(e));
        return true;
      },
    );
  });

  it('an arena that is full says so with reason arena', () => {
    using arena = new ArenaResource({ size: MiB });
    assert.throws(
      () => arena.allocate(2 * MiB),
      (e: unknown) => e instanceof OutOfMemoryError && e.reason === 'arena',
    );
  });

  it('pitched sizes whose product overflows are a RangeError, not a driver error', () => {
    assert.throws(() => DeviceBuffer.allocatePitched(2 ** 30, 2 ** 30), RangeError);
    using arena = new ArenaResource({ size: MiB });
    assert.throws(() => arena.allocatePitched(2 ** 30, 2 ** 30), RangeError);
  });
});
