/**
 * Peer access to pool memory: a PoolResource's pages (mapped now and mapped later) and an
 * AsyncResource's pool made accessible to a second device, checked by that device writing into
 * the memory (a memset queued in its own context) and the owner reading it back. Runs on the
 * emulated backend with two devices and on a machine with two GPUs; skipped with one.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { EmulatedBackend } from '../../src/backend/emulated/emulated-backend.js';
import { setBackend } from '../../src/backend/select.js';
import { Device } from '../../src/device.js';
import { CudaError, NotSupportedError } from '../../src/errors.js';
import { AsyncResource } from '../../src/resource/upstream/async-resource.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import type { MemoryResource } from '../../src/resource/resource.js';
import { onGpu } from '../helpers.js';

if (!onGpu) setBackend(new EmulatedBackend({ deviceCount: 2, capacityBytes: 1 << 30 }));

const MiB = 1024 * 1024;
const twoPeers = Device.count() >= 2 && Device.get(1).canAccessPeer(Device.get(0));
const needsPeers = { skip: twoPeers ? false : 'needs two devices with peer access' } as const;

/** Device 1 writes `value` over the buffer (a memset in its own context); device 0 reads it back. */
function writeFromPeer(buf: DeviceBuffer, value: number): Uint8Array {
  const peer = Device.get(1);
  peer.makeCurrent();
  peer.backend.memset(buf.ptr, value, 1, buf.byteLength);
  peer.synchronize();
  return buf.copyToHost(new Uint8Array(buf.byteLength));
}

function assertAll(bytes: Uint8Array, value: number, what: string): void {
  const bad = bytes.findIndex((b) => b !== value);
  assert.equal(bad, -1, `${what}: byte ${bad} is ${bytes[bad]}, expected ${value}`);
}

describe('peer access to pool memory', () => {
  it('PoolResource.setAccess opens the pages mapped now and those mapped later to the peer', needsPeers, () => {
    const [d0, d1] = [Device.get(0), Device.get(1)];
    using pool = new PoolResource({ device: d0 });
    using before = DeviceBuffer.allocate(3 * MiB + 5, { resource: pool });
    assert.equal(pool.getAccess(d1), 'none');
    assert.equal(pool.getAccess(d0), 'readwrite');
    pool.setAccess(d1, 'readwrite');
    assert.equal(pool.getAccess(d1), 'readwrite');
    assertAll(writeFromPeer(before, 0x5a), 0x5a, 'a block mapped before setAccess');
    // A block far enough away that its pages are mapped after setAccess.
    using after = DeviceBuffer.allocate(16 * MiB, { resource: pool });
    assertAll(writeFromPeer(after, 0xa5), 0xa5, 'a block mapped after setAccess');
    pool.setAccess(d1, 'none');
    assert.equal(pool.getAccess(d1), 'none');
    pool.setAccess(d1, 'read');
    assert.equal(pool.getAccess(d1), 'read');
  });

  it(
    'without access, the emulated peer is refused as the driver refuses it',
    { skip: onGpu || !twoPeers ? 'emulated only: on a GPU an access fault would end the context' : false },
    () => {
      using pool = new PoolResource({ device: Device.get(0) });
      using buf = DeviceBuffer.allocate(MiB, { resource: pool });
      assert.throws(() => writeFromPeer(buf, 1), CudaError);
      Device.get(0).makeCurrent();
    },
  );

  it(
    'revoking access covers the mappings moved pages left behind, so a page moved back is refused too',
    { skip: onGpu || !twoPeers ? 'emulated only: on a GPU an access fault would end the context' : false },
    () => {
      const [d0, d1] = [Device.get(0), Device.get(1)];
      const page = d0.backend.memGetAllocationGranularity(0);
      d0.makeCurrent();
      const S = { handle: d0.backend.streamCreate(0, 0) };
      const pool = new PoolResource({ device: d0 });
      try {
        const a = pool.allocate(8 * page);
        const pin = pool.allocate(page);
        pool.deallocate(a, 8 * page);
        pool.setAccess(d1, 'readwrite');
        const c = pool.allocate(10 * page, S); // a's pages move here, their mappings at a stay behind
        const far = pool.allocate(9 * page, S); // bounds c's free pages (too large for a's old place)
        pool.deallocate(c, 10 * page, S);
        // Three of c's pages live again, so the seven free ones are no place for eight pages, nor,
        // bounded by far, a place where fewer pages are missing than at a's.
        const z = pool.allocate(3 * page, S);
        pool.setAccess(d1, 'none');
        const d = pool.allocate(8 * page); // five back to a's mappings, made when the peer had access
        assert.equal(d, a);
        assert.equal(pool.growthFigures().pageMovesBack, 5);
        d1.makeCurrent();
        for (let k = 0; k < 8; k++) assert.throws(() => d1.backend.memset(d + k * page, 1, 1, page), CudaError, `page ${k}`);
        d0.makeCurrent();
        pool.deallocate(d, 8 * page);
        pool.deallocate(z, 3 * page, S);
        pool.deallocate(far, 9 * page, S);
        pool.deallocate(pin, page);
      } finally {
        d0.makeCurrent();
        pool.destroy();
        d0.backend.streamDestroy(S.handle);
      }
    },
  );

  it('AsyncResource.setAccess opens its pool to the peer', needsPeers, () => {
    const [d0, d1] = [Device.get(0), Device.get(1)];
    using pool = new AsyncResource({ device: d0, pool: {} });
    using buf = DeviceBuffer.allocate(MiB, { resource: pool });
    pool.setAccess(d1, 'readwrite');
    assert.equal(pool.getAccess(d1), 'readwrite');
    d0.synchronize();
    assertAll(writeFromPeer(buf, 0x3c), 0x3c, 'async pool memory');
  });

  it('bad requests are typed errors', () => {
    const d0 = Device.get(0);
    using pool = new PoolResource({ device: d0 });
    assert.throws(() => pool.setAccess(d0, 'readwrite'), RangeError);
    assert.throws(() => pool.setAccess({} as Device, 'readwrite'), TypeError);
    if (Device.count() >= 2) assert.throws(() => pool.setAccess(Device.get(1), 'all' as 'read'), RangeError);
    const upstream: MemoryResource = new CudaResource(d0);
    using chunked = new PoolResource({ upstream });
    if (Device.count() >= 2) assert.throws(() => chunked.setAccess(Device.get(1), 'readwrite'), NotSupportedError);
    pool.destroy();
    if (Device.count() >= 2) assert.throws(() => pool.setAccess(Device.get(1), 'read'));
  });
});
