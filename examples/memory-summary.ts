/**
 * The README's `memorySummary()` table ("Where did my memory go?"), made as the README says: a 64 MiB
 * `LimitingAdaptor` over a `PoolResource` as the current resource, 10 MiB and 20 MiB allocated, the 20 MiB freed,
 * then a 100 MiB request refused by the limit. test/package/examples.test.ts checks the README shows exactly what this
 * prints on the emulated backend.
 */
import assert from 'node:assert/strict';
import { Device, DeviceBuffer, isOutOfMemory, memorySummary, setCurrentResource } from '../src/index.js';
import { LimitingAdaptor, PoolResource } from '../src/public/resources.js';

const MiB = 1 << 20;
const device = Device.get(0);
const limited = new LimitingAdaptor(new PoolResource({ device }), 64 * MiB);
const previous = setCurrentResource(device, limited);
using kept = DeviceBuffer.allocate(10 * MiB);
DeviceBuffer.allocate(20 * MiB).free();
assert.throws(() => DeviceBuffer.allocate(100 * MiB), isOutOfMemory);
process.stdout.write(memorySummary());   // the table ends in a newline of its own
assert.equal(kept.byteLength, 10 * MiB);
setCurrentResource(device, previous);
