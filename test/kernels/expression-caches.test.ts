/**
 * Issue 33, item 16: the caches of elementwise programs and their modules are bounded by memory,
 * not only by count: long expressions, each distinct, must not keep hundreds of programs whatever
 * their size (Note [Bounding the expression caches] in docs/design/expression-caches.md).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { DeviceArray } from '../../src/array/device-array.js';
import { Device } from '../../src/device.js';
import { PROGRAM_CACHE_BYTES, PROGRAM_CACHE_SIZE, map, programCacheBytes, programsCached } from '../../src/kernels/ops/elementwise.js';
import { userModulesLoaded } from '../../src/kernels/ops/builtin-module.js';
import { onGpu } from '../helpers.js';

setFlagsFromString('--expose-gc');
const collect = runInNewContext('gc') as () => void;

/** The heap in use after two full collections. */
function heapAfterGc(): number {
  collect();
  collect();
  return process.memoryUsage().heapUsed;
}

test(
  'distinct long expressions keep at most PROGRAM_CACHE_BYTES of programs, not PROGRAM_CACHE_SIZE of them whatever their size',
  { skip: onGpu ? "measures the emulated backend's programs (a GPU compiles each with NVRTC: minutes)" : false },
  () => {
    const device = Device.get(0);
    using x = DeviceArray.zeros([16], 'float32');
    device.synchronize();
    const before = heapAfterGc();
    const count = 60;
    const terms = 1000;
    for (let i = 0; i < count; i++) {
      // About 15 KB of text each, every one distinct: kept by count alone, 60 of them held about 37 MiB.
      const text = Array.from({ length: terms }, (_, k) => `x * ${i * terms + k}.25`).join(' + ');
      map(x, text, { out: x });
      device.synchronize(); // the emulated stream's queue would hold the launches (and their programs) otherwise
    }
    const held = heapAfterGc() - before;
    assert.ok(held < 3 * PROGRAM_CACHE_BYTES, `${(held / 2 ** 20).toFixed(1)} MiB held after ${count} long expressions`);
    assert.ok(programsCached() < count, `${programsCached()} programs of ${count} kept`);
    assert.ok(userModulesLoaded(device) < count, `${userModulesLoaded(device)} modules of ${count} kept`);
    assert.ok(programCacheBytes() <= PROGRAM_CACHE_BYTES, `${programCacheBytes()} bytes estimated`);
    // Small expressions still fill the cache by count.
    for (let k = 0; k < PROGRAM_CACHE_SIZE + 4; k++) map(x, `x + ${k}`, { out: x });
    assert.equal(programsCached(), PROGRAM_CACHE_SIZE);
  },
);
