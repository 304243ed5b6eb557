/**
 * PoolResource with larger extents (`extentSize`) and a peer device: an extent mapped before
 * setAccess, one mapped after it, and one created again from a cached extent taken for growth are
 * all writable by the peer (a memset queued in its own context) and read back by the owner. Runs on
 * the emulated backend with two devices and on a machine with two GPUs; skipped with one.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { EmulatedBackend } from '../../src/backend/emulated/emulated-backend.js';
import { setBackend } from '../../src/backend/select.js';
import { Device } from '../../src/device.js';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import { onGpu } from '../helpers.js';

if (!onGpu) setBackend(new EmulatedBackend({ deviceCount: 2, capacityBytes: 1 << 30 }));

const twoPeers = Device.count() >= 2 && Device.get(1).canAccessPeer(Device.get(0));
const needsPeers = { skip: twoPeers ? false : 'needs two devices with peer access' } as const;

/** Device 1 writes `value` over the buffer; device 0 reads it back; every byte must be `value`. */
function peerWrites(buf: DeviceBuffer, value: number, what: string): void {
  const peer = Device.get(1);
  peer.makeCurrent();
  peer.backend.memset(buf.ptr, value, 1, buf.byteLength);
  peer.synchronize();
  Device.get(0).makeCurrent();
  const bytes = buf.copyToHost(new Uint8Array(buf.byteLength));
  const bad = bytes.findIndex((b) => b !== value);
  assert.equal(bad, -1, `${what}: byte ${bad} is ${bytes[bad]}, expected ${value}`);
}

describe('PoolResource extents and peer access', () => {
  it('extents mapped before and after setAccess, and extents made again from cached ones, are open to the peer', needsPeers, () => {
    const [d0, d1] = [Device.get(0), Device.get(1)];
    const page = d0.backend.memGetAllocationGranularity(0);
    using pool = new PoolResource({ device: d0, extentSize: Infinity });
    const a = DeviceBuffer.allocate(8 * page, { resource: pool });
    pool.setAccess(d1, 'readwrite');
    peerWrites(a, 0x11, 'an extent mapped before setAccess');
    using b = DeviceBuffer.allocate(page, { resource: pool });
    peerWrites(b, 0x22, 'an extent mapped after setAccess');
    a.free();
    // Ten pages do not fit a's range: a's cached extent is released and ten pages made again.
    const calls = pool.growthFigures().driverCalls;
    using c = DeviceBuffer.allocate(10 * page, { resource: pool });
    const after = pool.growthFigures();
    assert.equal(after.driverCalls.release - calls.release, 1, 'the cached extent released');
    assert.equal(after.driverCalls.create - calls.create, 1, 'ten pages made in one allocation');
    assert.equal(after.pageMoves, 8);
    assert.equal(pool.reservedBytes, 11 * page);
    peerWrites(c, 0x33, 'an extent made again from a cached one');
  });
});
