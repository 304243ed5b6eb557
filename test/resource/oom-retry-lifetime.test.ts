/**
 * A block that an allocation got only on its second try (the driver refused, every cache of the
 * device was released, the allocation retried: `MemoryResource.allocate`'s out-of-memory path)
 * is live like any other: `destroy()` of its resource while it is live waits for its free before
 * the resource's memory goes back (issue 19). Had it not been counted, the destroy would release
 * a pool's pages under the live block, and the block's free would be refused and leak. Runs on
 * both backends: another pool's cache holds nearly the whole device, so the driver refuses first.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Device } from '../../src/device.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import type { MemoryResource } from '../../src/resource/resource.js';
import { assertMemoryReturned, deviceMemoryUsed } from '../helpers.js';

const MiB = 1024 * 1024;
const device = Device.get(0);
device.makeCurrent();

/** A pool whose cache holds all but 32 MiB of the device's free memory. */
function hogDevice(): PoolResource {
  const hog = new PoolResource({ device });
  const bytes = Math.floor((device.memInfo().free - 32 * MiB) / (2 * MiB)) * 2 * MiB;
  hog.deallocate(hog.allocate(bytes), bytes);
  assert.ok(device.memInfo().free < 128 * MiB, "the hog's cache holds the device");
  return hog;
}

describe('a block allocated after the out-of-memory retry counts as live', () => {
  for (const [name, make] of [
    ['CudaResource', (): MemoryResource => new CudaResource(device)],
    ['PoolResource', (): MemoryResource => new PoolResource({ device })],
  ] as const) {
    it(`${name}: destroy() with that block live releases only when it is freed`, () => {
      const before = deviceMemoryUsed(device);
      using hog = hogDevice();
      const mr = make();
      const bytes = 128 * MiB;
      const ptr = mr.allocate(bytes);
      assert.equal(hog.reservedBytes, 0, "the allocation went through the retry: the hog's cache was released");
      mr.destroy();
      assert.equal(mr.released, false, 'the block is live: the memory waits for it');
      device.backend.memset(ptr, 0x5a, 1, bytes); // still the block's own memory
      const back = new Uint8Array(16);
      device.backend.memcpyToHost(back, ptr + bytes - 16, 16);
      assert.deepEqual([...back], new Array<number>(16).fill(0x5a));
      mr.deallocate(ptr, bytes); // accepted: a destroyed resource takes back the blocks live at destroy()
      assert.equal(mr.released, true, 'its last live block freed: the memory went back');
      hog.destroy();
      assertMemoryReturned(before, deviceMemoryUsed(device), 'nothing kept');
    });
  }
});
