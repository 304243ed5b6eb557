/**
 * ppl.cv's developer API (issue 37, row 10): `memoryPoolUsed()`, and the sizing its documentation
 * gives: an arena of the images' `ceil2DVolume` plus the scratch built-in operations take from the
 * current resource (`reductionScratch`) holds two 1920x1080 float32 images and `sum`'s temporaries.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DeviceArray } from '../../src/array/device-array.js';
import { Device } from '../../src/device.js';
import { OutOfMemoryError } from '../../src/errors.js';
import { max, min, reductionScratch, sum } from '../../src/kernels/ops/index.js';
import { LimitingAdaptor } from '../../src/resource/adaptors/limiting.js';
import { LoggingAdaptor } from '../../src/resource/adaptors/logging.js';
import { useResource } from '../../src/resource/current.js';
import { memoryPoolUsed } from '../../src/resource/memory-pool-used.js';
import { ArenaResource } from '../../src/resource/suballoc/arena.js';
import { BinningResource } from '../../src/resource/suballoc/binning.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import { AsyncResource } from '../../src/resource/upstream/async-resource.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';

const device = Device.get(0);

test("memoryPoolUsed: true for a sub-allocating pool (under adaptors too), false for the driver's allocators", () => {
  using arena = new ArenaResource({ size: '4M' });
  using pool = new PoolResource();
  using binning = new BinningResource(pool);
  using cuda = new CudaResource();
  using async = new AsyncResource();
  using limited = new LimitingAdaptor(arena, '2M');
  for (const [mr, expected] of [
    [arena, true],
    [pool, true],
    [binning, true],
    [limited, true],
    [cuda, false],
    [async, false],
  ] as const) {
    assert.equal(
      useResource(mr, () => memoryPoolUsed(device)),
      expected,
      mr.describe(),
    );
  }
  assert.equal(
    useResource(arena, () => memoryPoolUsed(1 - 1)),
    true,
    'by ordinal',
  );
});

test('reductionScratch: the result read back, then the partials above 4096 elements', () => {
  using small = DeviceArray.zeros([4096], 'float32');
  assert.deepEqual(reductionScratch(small), [4]);
  using image = DeviceArray.zeros([1080, 1920], 'float32');
  const grid = Math.min(Math.ceil((1920 * 1080) / 4096), device.info.multiprocessorCount * 8);
  assert.deepEqual(reductionScratch(image), [4, grid * 4]);
  using ints = DeviceArray.zeros([1 << 20], 'int32');
  assert.deepEqual(reductionScratch(ints, 'max'), [4, Math.min(256, device.info.multiprocessorCount * 8) * 8], 'an int32 result, int64 partials');
  assert.throws(() => reductionScratch(image, 'mean' as never), TypeError);
});

test('reductionScratch is what a whole-array reduction allocates from the current resource, in order', () => {
  using image = DeviceArray.zeros([1080, 1920], 'float32');
  using small = DeviceArray.zeros([100], 'int32');
  for (const [a, op] of [
    [image, 'sum'],
    [image, 'max'],
    [small, 'min'],
  ] as const) {
    const sizes: number[] = [];
    using cuda = new CudaResource();
    using logged = new LoggingAdaptor(cuda, (line) => {
      const [, , action, , size] = line.split(',');
      if (action === 'allocate') sizes.push(Number(size));
    });
    useResource(logged, () => (op === 'sum' ? sum(a) : op === 'max' ? max(a) : min(a)));
    assert.deepEqual(sizes, reductionScratch(a, op), `${op} of ${a.size} elements`);
  }
});

test("two 1920x1080 float32 images and sum's temporaries fit in 2 x ceil2DVolume(1920 * 4, 1080) plus the documented scratch, not in less", () => {
  const images = 2 * ArenaResource.ceil2DVolume(1920 * 4, 1080);
  const run = (size: number): number => {
    using arena = new ArenaResource({ size });
    return useResource(arena, () => {
      using a = DeviceArray.pitched([1080, 1920], 'float32', { resource: arena });
      using b = DeviceArray.pitched([1080, 1920], 'float32', { resource: arena });
      a.fill(1);
      b.fill(2);
      assert.ok(memoryPoolUsed());
      const scratch = reductionScratch(a).reduce((n, bytes) => n + ArenaResource.ceil1DVolume(bytes), 0);
      assert.equal(size, images + scratch, 'the size under test is the documented one');
      return (sum(a) as number) + (sum(b) as number);
    });
  };
  using probe = DeviceArray.zeros([1080, 1920], 'float32');
  const scratch = reductionScratch(probe).reduce((n, bytes) => n + ArenaResource.ceil1DVolume(bytes), 0);
  assert.equal(run(images + scratch), 3 * 1920 * 1080);
  // The images alone: sum has no room for its partials (what ppl.cv's sizing leaves out).
  assert.throws(() => {
    using arena = new ArenaResource({ size: images });
    useResource(arena, () => {
      using a = DeviceArray.pitched([1080, 1920], 'float32', { resource: arena });
      using _b = DeviceArray.pitched([1080, 1920], 'float32', { resource: arena });
      return sum(a);
    });
  }, OutOfMemoryError);
});
