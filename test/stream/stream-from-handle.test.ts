/**
 * Streams made elsewhere (issue 19): resources refuse a raw `{ handle }` that nothing in vram
 * vouches for, so another library's stream comes in through `Stream.fromHandle`, which borrows it.
 * vram never destroys a borrowed stream (not on `destroy()`, not when it is collected); it only
 * stops using it, and caching resources retire what they hold on it first. Runs on both backends;
 * the stream order is checked on the data with the borrowed stream held back on the device
 * (cuStreamWaitValue32), as in stream-order.test.ts.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { HostAllocFlags, StreamFlags, StreamWaitValueFlags, type Handle, type Ptr } from '../../src/backend/backend.js';
import { onLeak, type LeakRecord } from '../../src/backstop.js';
import { Device } from '../../src/device.js';
import { CudaError, DoubleFreeError } from '../../src/errors.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import { Stream } from '../../src/stream.js';
import { forceGc, needsGc, onGpu, underSanitizer } from '../helpers.js';

const device = Device.get(0);
device.makeCurrent();
const backend = device.backend;
const bytes = 1 << 20;

/**
 * A stream as another library makes one: a driver stream that nothing in vram vouches for. The
 * backend vouches for the streams it creates itself, so that vouching is withdrawn here; on a GPU
 * this is what a PyTorch or CuPy stream's handle looks like to vram.
 */
function foreignStream(flags: number = StreamFlags.NON_BLOCKING, priority = 0): Handle {
  const raw = backend.streamCreate(flags, priority);
  backend.forgetStream(raw);
  return raw;
}

/** A word of mapped pinned memory that a held stream waits on; the host sets it to release it. */
const flagHost = backend.memHostAlloc(4096, HostAllocFlags.DEVICEMAP | HostAllocFlags.PORTABLE);
const flagDevice = backend.memHostGetDevicePointer(flagHost);
const flag = new Uint32Array(backend.hostView(flagHost, 4096), 0, 1);
after(() => backend.memFreeHost(flagHost));

/** Runs `body` with stream `held` stopped until `body` returns (or throws). */
function whileHeld(held: Handle, body: () => void): void {
  flag[0] = 0;
  backend.streamWaitValue32(held, flagDevice, 1, StreamWaitValueFlags.GEQ);
  try {
    body();
  } finally {
    flag[0] = 1;
  }
}

function assertAll(ptr: Ptr, value: number, what: string): void {
  const out = new Uint8Array(bytes);
  backend.memcpyToHost(out, ptr, bytes);
  const bad = out.findIndex((b) => b !== value);
  assert.equal(bad, -1, `${what}: byte ${bad} is 0x${out[bad]?.toString(16)}, expected 0x${value.toString(16)}`);
}

const notUnderSanitizer = { skip: underSanitizer ? 'streams held by cuStreamWaitValue32 do not finish under compute-sanitizer' : false } as const;

describe('Stream.fromHandle borrows a stream made elsewhere', () => {
  it('refused as a raw handle, accepted once borrowed, its flags and priority read from the driver', () => {
    const [, greatest] = backend.streamPriorityRange();
    const raw = foreignStream(StreamFlags.NON_BLOCKING, greatest);
    let ownerDestroyed = false;
    using pool = new PoolResource({ device });
    try {
      assert.throws(
        () => pool.allocate(4096, { handle: raw }),
        (error: unknown) => error instanceof RangeError && /is not a live stream.*Stream\.fromHandle/.test(error.message),
      );
      const s = Stream.fromHandle(raw, { device });
      assert.equal(s.handle, raw);
      assert.equal(s.borrowed, true);
      assert.equal(s.nonBlocking, true);
      assert.equal(s.priority, greatest);
      assert.equal(s.device, device);
      assert.match(String(s), /borrowed/);
      pool.deallocate(pool.allocate(4096, { handle: raw }), 4096, { handle: raw }); // the raw handle too, now
      pool.deallocate(pool.allocate(4096, s), 4096, s);
      s.destroy();
      assert.throws(() => pool.allocate(4096, { handle: raw }), RangeError, 'refused again once vram is done with it');
      backend.streamDestroy(raw); // its owner destroys it: the pool must not use the handle again
      ownerDestroyed = true;
      using other = Stream.create();
      pool.deallocate(pool.allocate(4096, other), 4096, other); // takes the block cached on the borrowed stream
      pool.releaseCached();
      const blocking = foreignStream(StreamFlags.DEFAULT, 0);
      try {
        using b = Stream.fromHandle(blocking);
        assert.equal(b.nonBlocking, false);
        assert.equal(b.priority, 0);
      } finally {
        backend.streamDestroy(blocking);
      }
    } finally {
      if (!ownerDestroyed) backend.streamDestroy(raw);
    }
  });

  it('a PoolResource frees and reuses its blocks in stream order; destroy() leaves the driver stream to its owner', notUnderSanitizer, () => {
    const raw = foreignStream();
    using pool = new PoolResource({ device });
    using a = Stream.create({ nonBlocking: true });
    try {
      const b = Stream.fromHandle(raw);
      const p = pool.allocate(bytes, b);
      assert.equal(pool.allocate(bytes, b) !== p, true); // two blocks: the first is the one reused below
      let q = 0;
      whileHeld(raw, () => {
        backend.memsetAsync(p, 0xbb, 1, bytes, raw); // runs only when the borrowed stream is released
        pool.deallocate(p, bytes, b);
        assert.equal(pool.allocate(bytes, b), p, 'its own stream takes the block back at once');
        pool.deallocate(p, bytes, b);
        b.destroy(); // vram is done with it: the pool retires what it cached on it
        q = pool.allocate(bytes, a);
        assert.equal(q, p, 'the freed block is the one reused');
        backend.memsetAsync(q, 0xaa, 1, bytes, a.handle); // must wait for the borrowed stream's write
      });
      a.synchronize();
      backend.streamSynchronize(raw); // still a stream: vram did not destroy it
      assertAll(q, 0xaa, "the new owner's data");
      assert.equal(backend.streamQuery(raw), true);
      pool.deallocate(q, bytes, a);
      assert.throws(() => b.destroy(), DoubleFreeError);
    } finally {
      backend.streamDestroy(raw); // the owner's destroy: would fail (or crash a driver) had vram destroyed it
    }
  });

  it('each borrower ends only its own use: another borrower and the creator keep the handle known', () => {
    const raw = foreignStream();
    using pool = new PoolResource({ device });
    try {
      const first = Stream.fromHandle(raw);
      const second = Stream.fromHandle(raw);
      first.destroy();
      pool.deallocate(pool.allocate(4096, { handle: raw }), 4096, { handle: raw });
      second.destroy();
      assert.throws(() => pool.allocate(4096, { handle: raw }), RangeError);
    } finally {
      backend.streamDestroy(raw);
    }
    const own = Stream.create();
    const ownHandle = own.handle;
    Stream.fromHandle(ownHandle).destroy();
    pool.deallocate(pool.allocate(4096, { handle: ownHandle }), 4096, { handle: ownHandle });
    own.destroy();
    assert.throws(() => pool.allocate(4096, { handle: ownHandle }), RangeError);
  });

  it('handle 0 is the default stream', () => {
    const s = Stream.fromHandle(0, { device });
    assert.equal(s, Stream.default(device));
    assert.equal(s.borrowed, false);
    s.destroy(); // a no-op, as for the default stream
    assert.equal(Stream.fromHandle(0).handle, 0);
  });

  it('bad input is a typed error and changes nothing', () => {
    assert.throws(() => Stream.fromHandle('5' as never), TypeError);
    assert.throws(() => Stream.fromHandle(5n as never), TypeError);
    for (const bad of [-1, 1.5, Number.NaN, Infinity, 2 ** 53]) {
      assert.throws(
        () => Stream.fromHandle(bad),
        (error: unknown) => error instanceof RangeError && /Stream\.fromHandle: handle must be a whole number/.test(error.message),
        String(bad),
      );
    }
    assert.throws(() => Stream.fromHandle(1), /CU_STREAM_LEGACY/);
    assert.throws(() => Stream.fromHandle(2), /CU_STREAM_PER_THREAD/);
    assert.throws(() => Stream.fromHandle(0, [] as never), TypeError);
    assert.throws(() => Stream.fromHandle(0, { devcie: device } as never), /device/);
  });

  it(
    'the emulated backend refuses a handle that names none of its streams',
    { skip: onGpu ? "the cuda backend takes the caller's word (asking the driver may crash it)" : false },
    () => {
      assert.throws(
        () => Stream.fromHandle(424242),
        (error: unknown) => error instanceof CudaError && /unknown stream 424242/.test(error.message),
      );
      assert.equal(backend.streamKnown(424242), false, 'nothing was adopted');
      assert.throws(() => backend.adoptStream(424242), CudaError);
      const raw = backend.streamCreate(0, 0);
      backend.streamDestroy(raw);
      assert.throws(() => Stream.fromHandle(raw), CudaError, 'a destroyed stream');
      assert.throws(() => backend.adoptStream(raw), CudaError);
      assert.equal(backend.streamKnown(raw), false);
    },
  );

  it('a borrowed Stream collected undestroyed only stops vram using it: not destroyed, not a leak', needsGc, async () => {
    const raw = foreignStream();
    const seen: LeakRecord[] = [];
    const off = onLeak((leak) => seen.push(leak));
    try {
      (() => {
        Stream.fromHandle(raw);
      })();
      assert.equal(backend.streamKnown(raw), true);
      for (let i = 0; i < 100 && backend.streamKnown(raw); i++) {
        forceGc!();
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      assert.equal(backend.streamKnown(raw), false, 'the collected borrower was forgotten');
      assert.deepEqual(
        seen.filter((l) => l.ptr === raw),
        [],
        'not counted as a leak',
      );
      backend.streamSynchronize(raw);
    } finally {
      off();
      backend.streamDestroy(raw);
    }
  });
});
