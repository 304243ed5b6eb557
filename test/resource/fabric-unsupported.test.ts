/**
 * A device without fabric handles (the emulated backend's `fabric: false`): asking for fabric
 * memory is a FabricUnavailableError naming CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED,
 * before the host's IMEX files are read and before the driver is asked. On a GPU this runs only
 * where the device lacks them.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setBackend } from '../../src/backend/select.js';
import { EmulatedBackend } from '../../src/backend/emulated/emulated-backend.js';
import { MemHandleType } from '../../src/backend/backend.js';
import { Device } from '../../src/device.js';
import { FabricUnavailableError } from '../../src/errors.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import { AsyncResource } from '../../src/resource/upstream/async-resource.js';
import { onGpu } from '../helpers.js';
import { plantImex, withImexRoot } from '../imex.js';

if (!onGpu) setBackend(new EmulatedBackend({ fabric: false }));
const device = Device.get(0);
const lacks = ((): boolean => {
  try {
    return device.attribute('handleTypeFabricSupported') === 0;
  } catch {
    return true;
  }
})();

test(
  'no fabric handles on the device: FabricUnavailableError naming CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, whatever the host has',
  { skip: lacks ? false : 'this GPU supports fabric handles' },
  () => {
    // Every host piece is there: the device's answer decides.
    const planted = plantImex();
    try {
      withImexRoot(planted.root, () => {
        for (const make of [() => new AsyncResource({ pool: { handleTypes: 'fabric' } }), () => new PoolResource({ handleTypes: 'fabric' })]) {
          assert.throws(
            make,
            (e: unknown) =>
              e instanceof FabricUnavailableError &&
              e.missing === 'device-attribute' &&
              /device 0: .*CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED is 0.*'posix-fd'/.test(e.message),
          );
        }
      });
    } finally {
      planted.remove();
    }
    // POSIX descriptors still work.
    using mr = new AsyncResource({ pool: { handleTypes: 'posix-fd' } });
    assert.equal(mr.exportable, true);
  },
);

test(
  'the emulated backend refuses fabric pools and physical memory itself too, as a driver without them does',
  { skip: onGpu ? 'emulation only: driver calls that vram never makes on such a device' : false },
  () => {
    const notSupported = (e: unknown): boolean => e instanceof Error && /NOT_SUPPORTED/.test(String((e as { errorName?: string }).errorName));
    assert.throws(() => device.backend.memPoolCreate({ device: 0, handleTypes: MemHandleType.FABRIC }), notSupported);
    assert.throws(() => device.backend.memCreate(device.backend.memGetAllocationGranularity(0), 0, MemHandleType.FABRIC), notSupported);
  },
);
