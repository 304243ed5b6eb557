/**
 * A device without stream-ordered pools in host NUMA memory (the emulated backend's
 * `hostNumaPools: false`): asking for one is a NotSupportedError naming the attribute, before the
 * driver is asked to create the pool. On a GPU this runs only where the device lacks them.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setBackend } from '../../src/backend/select.js';
import { EmulatedBackend } from '../../src/backend/emulated/emulated-backend.js';
import { Device } from '../../src/device.js';
import { NotSupportedError } from '../../src/errors.js';
import { AsyncResource } from '../../src/resource/upstream/async-resource.js';
import { onGpu } from '../helpers.js';

if (!onGpu) setBackend(new EmulatedBackend({ hostNumaPools: false }));
const device = Device.get(0);
const lacks = ((): boolean => {
  try {
    return device.attribute('hostNumaMemoryPoolsSupported') === 0;
  } catch {
    return true;
  }
})();

test(
  'no host NUMA pools: a NotSupportedError that names CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED',
  { skip: lacks ? false : 'this GPU has pools in host NUMA memory' },
  () => {
    assert.throws(
      () => new AsyncResource({ pool: { location: { type: 'host-numa', id: 0 } } }),
      (e: unknown) => e instanceof NotSupportedError && /device 0 .*CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED/.test(e.message),
    );
    // A device pool is still made.
    using mr = new AsyncResource({ pool: {} });
    assert.equal(mr.kind, 'device');
  },
);

test(
  'the emulated backend refuses the pool itself too, as a driver without them does',
  { skip: onGpu ? 'emulation only: a driver call that vram never makes on such a device' : false },
  () => {
    assert.throws(
      () => device.backend.memPoolCreate({ device: 0, hostNumaId: 0 }),
      (e: unknown) => e instanceof Error && /NOT_SUPPORTED/.test(String((e as { errorName?: string }).errorName)),
    );
  },
);
