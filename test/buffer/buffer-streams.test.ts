/**
 * Buffers used across streams: `recordStream(stream)` (PyTorch's record_stream) and
 * `free({ stream })` (cuda.core's close(stream)). Each hazard is staged so that, without the
 * ordering, the emulated backend (which runs queued work only when something depends on it) shows
 * the next owner's data in place of the old work's: the old work is queued, the block is freed and
 * handed out again, the new owner overwrites it, and only then is the old work made to run. On a
 * GPU the same tests pass when the ordering is right (the race they guard against is real there,
 * only not forced). Freeing never waits on the host: the backend's synchronising calls are counted.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { onGpu } from '../helpers.js';
import { setBackend } from '../../src/backend/select.js';
import { EmulatedBackend } from '../../src/backend/emulated/emulated-backend.js';
import { HostAllocFlags, StreamWaitValueFlags, type Backend } from '../../src/backend/backend.js';
import { Device } from '../../src/device.js';
import { Event, Stream } from '../../src/stream.js';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { HostBuffer } from '../../src/buffer/host-buffer.js';
import { ManagedBuffer } from '../../src/buffer/managed-buffer.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';
import { ManagedResource } from '../../src/resource/upstream/managed-resource.js';
import { PinnedHostPool } from '../../src/resource/suballoc/pinned-host-pool.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import { type MemoryResource } from '../../src/resource/resource.js';
import { defaultStream, type StreamRef } from '../../src/stream.js';
import { DoubleFreeError, UseAfterFreeError } from '../../src/errors.js';

if (!onGpu) setBackend(new EmulatedBackend({ deviceCount: 2, capacityBytes: 1 << 30 }));

const device = Device.get(0);
const n = 64 * 1024;

function pattern(bytes: number, seed: number): Uint8Array {
  const out = new Uint8Array(bytes);
  for (let i = 0; i < bytes; i++) out[i] = (i * 31 + seed) & 0xff;
  return out;
}

/** The backend calls that block the host until device work is done. */
const hostWaits = ['streamSynchronize', 'eventSynchronize', 'contextSynchronize'] as const;

/** Runs `fn` and returns how many times it made the host wait for the device (on `backend`). */
function hostWaitsDuring(fn: () => void, backend: Backend = device.backend): number {
  let count = 0;
  const target = backend as unknown as Record<string, unknown>;
  const saved = hostWaits.map((name) => [name, Object.getOwnPropertyDescriptor(backend, name)] as const);
  for (const name of hostWaits) {
    const original = backend[name] as (...args: unknown[]) => unknown;
    target[name] = (...args: unknown[]): unknown => {
      count++;
      return original.apply(backend, args);
    };
  }
  try {
    fn();
  } finally {
    for (const [name, descriptor] of saved) {
      if (descriptor === undefined) delete target[name];
      else Object.defineProperty(backend, name, descriptor);
    }
  }
  return count;
}

/** `mr`, with the stream of every `deallocate` call written down. */
function spyOnDeallocate<T extends MemoryResource>(mr: T): { resource: T; streams: (StreamRef | undefined)[] } {
  const streams: (StreamRef | undefined)[] = [];
  const resource = new Proxy(mr, {
    get(target, key): unknown {
      if (key === 'deallocate') {
        return (ptr: number, bytes: number, stream?: StreamRef): void => {
          streams.push(stream);
          target.deallocate(ptr, bytes, stream);
        };
      }
      const value: unknown = Reflect.get(target, key, target);
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
  return { resource, streams };
}

test('recordStream: the allocation stream does not reuse the block before the recorded stream is done with it', async () => {
  using pool = new PoolResource();
  using a = Stream.create({ nonBlocking: true });
  using b = Stream.create({ nonBlocking: true });
  using out = HostBuffer.allocate(n);
  const data = pattern(n, 1);
  const buf = DeviceBuffer.allocate(n, { resource: pool, stream: a });
  const ptr = buf.ptr;
  buf.copyFromHost(data);
  buf.copyToHost(out, { stream: b }); // b reads the block...
  buf.recordStream(b);
  assert.equal(
    hostWaitsDuring(() => buf.free()),
    0,
    'free() orders on the device, it does not wait',
  );
  using next = DeviceBuffer.allocate(n, { resource: pool, stream: a });
  assert.equal(next.ptr, ptr, 'the pool hands the same block to its stream at once');
  next.memset(0xee, { stream: a }); // ...while a's next owner overwrites it
  await a.synchronized();
  await b.synchronized();
  assert.deepEqual(out.view(), data, "b read the data, not the next owner's");
});

test('free({ stream }): freed on that stream, after the allocation stream is done with the memory', async () => {
  using pool = new PoolResource();
  const spy = spyOnDeallocate(pool);
  using a = Stream.create({ nonBlocking: true });
  using b = Stream.create({ nonBlocking: true });
  using out = HostBuffer.allocate(n);
  const data = pattern(n, 2);
  const buf = DeviceBuffer.allocate(n, { resource: spy.resource, stream: a });
  const ptr = buf.ptr;
  buf.copyFromHost(data);
  buf.copyToHost(out, { stream: a }); // the allocation stream still reads it
  assert.equal(
    hostWaitsDuring(() => buf.free({ stream: b })),
    0,
  );
  assert.deepEqual(spy.streams, [b], 'deallocated on the stream given');
  using next = DeviceBuffer.allocate(n, { resource: pool, stream: b });
  assert.equal(next.ptr, ptr, "freed on b, the block is b's to reuse at once");
  next.memset(0xee, { stream: b });
  await b.synchronized();
  await a.synchronized();
  assert.deepEqual(out.view(), data);
});

test('free({ stream }) waits for every recorded stream except itself, and frees a buffer of the default stream too', async () => {
  using pool = new PoolResource();
  const spy = spyOnDeallocate(pool);
  using b = Stream.create({ nonBlocking: true });
  using c = Stream.create({ nonBlocking: true });
  using outB = HostBuffer.allocate(n);
  using outC = HostBuffer.allocate(n);
  const data = pattern(n, 3);
  const buf = DeviceBuffer.allocate(n, { resource: spy.resource });
  assert.equal(buf.stream, defaultStream);
  const ptr = buf.ptr;
  buf.copyFromHost(data);
  buf.copyToHost(outB, { stream: b });
  buf.copyToHost(outC, { stream: c });
  buf.recordStream(b);
  buf.recordStream(c);
  assert.equal(
    hostWaitsDuring(() => buf.free({ stream: c })),
    0,
  );
  assert.deepEqual(spy.streams, [c]);
  using next = DeviceBuffer.allocate(n, { resource: pool, stream: c });
  assert.equal(next.ptr, ptr);
  next.memset(0xee, { stream: c });
  await c.synchronized();
  await b.synchronized();
  assert.deepEqual(outB.view(), data);
  assert.deepEqual(outC.view(), data);
});

test(
  "recordStream across devices: a peer copy on the other device's stream is waited for",
  {
    skip: Device.count() < 2 ? 'needs two devices' : false,
  },
  async () => {
    const other = Device.get(1);
    // Chunks from cuMemAlloc: plain device memory, which peer copies reach without access grants.
    using pool = new PoolResource({ upstream: new CudaResource(device) });
    using a = Stream.create({ nonBlocking: true });
    using b = Stream.create({ device: other, nonBlocking: true });
    using dst = DeviceBuffer.allocate(n, { device: other });
    const data = pattern(n, 4);
    const buf = DeviceBuffer.allocate(n, { resource: pool, stream: a });
    const ptr = buf.ptr;
    buf.copyFromHost(data);
    dst.copyFrom(buf, { stream: b }); // device 1's stream reads device 0's block
    buf.recordStream(b);
    assert.equal(
      hostWaitsDuring(() => buf.free()),
      0,
    );
    using next = DeviceBuffer.allocate(n, { resource: pool, stream: a });
    assert.equal(next.ptr, ptr);
    next.memset(0xee, { stream: a });
    await a.synchronized();
    await b.synchronized();
    assert.deepEqual(dst.copyToHost(new Uint8Array(n)), data);
  },
);

test('HostBuffer from a PinnedHostPool with a stream is freed on it: the pool does not lend it out under a pending copy', async () => {
  const pool = new PinnedHostPool();
  const spy = spyOnDeallocate(pool);
  using s = Stream.create({ nonBlocking: true });
  using dev = DeviceBuffer.allocate(n);
  const data = pattern(n, 5);
  const first = HostBuffer.allocate(n, { resource: spy.resource, stream: s });
  assert.equal(first.stream, s);
  first.view().set(data);
  dev.copyFromHost(first, { stream: s }); // queued: reads `first`
  first.free();
  assert.deepEqual(spy.streams, [s], 'deallocated with its stream');
  const second = HostBuffer.allocate(n, { resource: pool, stream: s });
  second.view().fill(0xee); // the next owner writes its own data
  await s.synchronized();
  assert.deepEqual(dev.copyToHost(new Uint8Array(n)), data, "the copy read the first owner's data");
  second.free();
  pool.destroy();
});

test('HostBuffer allocated on no stream, used on one: recordStream makes free() go through that stream', async () => {
  const pool = new PinnedHostPool();
  const spy = spyOnDeallocate(pool);
  using s = Stream.create({ nonBlocking: true });
  using dev = DeviceBuffer.allocate(n);
  const data = pattern(n, 6);
  const first = HostBuffer.allocate(n, { resource: spy.resource });
  assert.equal(first.stream, undefined);
  first.view().set(data);
  dev.copyFromHost(first, { stream: s });
  first.recordStream(s);
  assert.equal(
    hostWaitsDuring(() => first.free()),
    0,
  );
  assert.deepEqual(spy.streams, [s]);
  const second = HostBuffer.allocate(n, { resource: pool });
  second.view().fill(0xee);
  await s.synchronized();
  assert.deepEqual(dev.copyToHost(new Uint8Array(n)), data);
  second.free();
  pool.destroy();
});

test('registered memory: free() waits on the host for the recorded streams before unpinning', () => {
  using s = Stream.create({ nonBlocking: true });
  using dev = DeviceBuffer.allocate(n);
  const data = pattern(n, 7);
  dev.copyFromHost(data);
  const js = new Uint8Array(n);
  const reg = HostBuffer.register(js);
  dev.copyToHost(reg, { stream: s }); // the DMA writes the pinned JavaScript memory
  reg.recordStream(s);
  reg.free();
  assert.deepEqual(js, data, 'the copy had completed when the memory was unpinned');
});

test('ManagedBuffer: recordStream and free({ stream }) reach its resource', async () => {
  const spy = spyOnDeallocate(new ManagedResource());
  using a = Stream.create({ nonBlocking: true });
  using b = Stream.create({ nonBlocking: true });
  const m = ManagedBuffer.allocate(n, { resource: spy.resource, stream: a });
  m.memset(1, { stream: b });
  m.recordStream(b);
  assert.deepEqual(m.recordedStreams, [b]);
  m.free({ stream: b });
  assert.deepEqual(spy.streams, [b]);
  await b.synchronized();
});

test('recordStream: the same stream twice, or the allocation stream, records nothing more', () => {
  using a = Stream.create();
  using b = Stream.create();
  using buf = DeviceBuffer.allocate(256, { stream: a });
  assert.deepEqual(buf.recordedStreams, []);
  buf.recordStream(a);
  assert.deepEqual(buf.recordedStreams, [], 'the allocation stream is always waited for');
  buf.recordStream(b);
  buf.recordStream(b);
  buf.recordStream({ handle: b.handle });
  assert.deepEqual(buf.recordedStreams, [b]);
  // The default stream, as the frozen reference or as the device's Stream object, is one stream.
  using d = DeviceBuffer.allocate(256);
  d.recordStream(Stream.default(device));
  d.recordStream(defaultStream);
  assert.deepEqual(d.recordedStreams, []);
  d.free();
  assert.deepEqual(d.recordedStreams, []);
});

test('recordStream and free({ stream }): bad streams and freed buffers are typed errors that change nothing', () => {
  using buf = DeviceBuffer.allocate(256);
  for (const bad of [undefined, null, 42, 'stream', {}, { handle: '1' }]) {
    assert.throws(() => buf.recordStream(bad as unknown as Stream), TypeError, String(bad));
  }
  const gone = Stream.create();
  gone.destroy();
  assert.throws(() => buf.recordStream(gone), UseAfterFreeError);
  assert.deepEqual(buf.recordedStreams, []);
  // A free that is refused frees nothing: the buffer stays usable.
  assert.throws(() => buf.free({ stream: gone }), UseAfterFreeError);
  assert.throws(() => buf.free({ stream: 7 as unknown as Stream }), TypeError);
  assert.throws(() => buf.free(null as unknown as object), TypeError);
  assert.equal(buf.freed, false);
  buf.memset(0);
  const freed = DeviceBuffer.allocate(256);
  freed.free();
  using s = Stream.create();
  assert.throws(() => freed.recordStream(s), UseAfterFreeError);
  assert.throws(() => freed.free({ stream: s }), DoubleFreeError);
});

test('a recorded stream destroyed before the free: the free does not wait on the host, and the memory still goes back', () => {
  using pool = new PoolResource();
  const spy = spyOnDeallocate(pool);
  using a = Stream.create({ nonBlocking: true });
  const b = Stream.create({ nonBlocking: true });
  const buf = DeviceBuffer.allocate(n, { resource: spy.resource, stream: a });
  buf.memset(3, { stream: b });
  buf.recordStream(b);
  b.destroy();
  assert.equal(
    hostWaitsDuring(() => buf.free()),
    0,
    'its work is waited for on the device, through its last event',
  );
  assert.deepEqual(spy.streams, [a]);
  assert.equal(buf.freed, true);
});

/**
 * Holds `stream` back on the device (cuStreamWaitValue32 on a word of mapped pinned memory): work
 * queued on it from now on has certainly not run, on a GPU as on the emulation, until the returned
 * function writes the word; the caller then waits for the stream and frees the word with `free`.
 */
function holdBack(stream: Stream): { release: () => void; free: () => void } {
  const backend = device.backend;
  device.makeCurrent();
  const word = backend.memHostAlloc(4096, HostAllocFlags.DEVICEMAP | HostAllocFlags.PORTABLE);
  const flag = new Uint32Array(backend.hostView(word, 4096), 0, 1);
  flag[0] = 0;
  backend.streamWaitValue32(stream.handle, backend.memHostGetDevicePointer(word), 1, StreamWaitValueFlags.GEQ);
  return {
    release: () => {
      flag[0] = 1;
    },
    free: () => backend.memFreeHost(word),
  };
}

/**
 * Runs `body` with `stream` held back on the device (`holdBack`), released when `body` returns or
 * throws. Held work is never synchronised on (a GPU would wait forever).
 */
async function whileHeld(stream: Stream, body: () => void): Promise<void> {
  const held = holdBack(stream);
  try {
    body();
  } finally {
    held.release();
    await stream.synchronized();
    held.free();
  }
}

/**
 * Gives the work queued on `stream` up to `ms` to run (polling, never waiting on it): the next
 * owner's work then runs before the held stream's where nothing orders it after, on either backend
 * (the emulation runs queued work when something asks for it).
 */
function letRun(stream: Stream, ms = 50): void {
  const deadline = performance.now() + ms;
  const pause = new Int32Array(new SharedArrayBuffer(4));
  while (!stream.query() && performance.now() < deadline) Atomics.wait(pause, 0, 0, 1);
}

// Without a recordStream from the program: the copy or fill records the stream it is queued on.
for (const [what, direction] of [
  ['read by', 'to-device'],
  ['written by', 'to-host'],
] as const) {
  test(`a pooled pinned HostBuffer ${what} a copy on another stream is not lent out before the copy is done`, async () => {
    const pool = new PinnedHostPool();
    using s = Stream.create({ nonBlocking: true });
    using dev = DeviceBuffer.allocate(n);
    const data = pattern(n, 8);
    if (direction === 'to-host') {
      dev.copyFromHost(data);
      device.synchronize();
    }
    const first = HostBuffer.allocate(n, { resource: pool }); // on no stream
    if (direction === 'to-device') first.view().set(data);
    let second: HostBuffer | undefined;
    await whileHeld(s, () => {
      if (direction === 'to-device') dev.copyFromHost(first, { stream: s });
      else dev.copyToHost(first, { stream: s });
      assert.equal(
        hostWaitsDuring(() => first.free()),
        0,
        'free() does not wait',
      );
      second = HostBuffer.allocate(n, { resource: pool });
      second.view().fill(0xee); // the next owner writes its own data while the copy is held
    });
    if (direction === 'to-device') {
      assert.deepEqual(dev.copyToHost(new Uint8Array(n)), data, "the copy read the first owner's data");
    } else {
      assert.ok(
        second!.view().every((b) => b === 0xee),
        'the copy did not write into the next owner',
      );
    }
    second!.free();
    pool.destroy();
  });
}

{
  const ops: readonly (readonly [string, (buf: DeviceBuffer, s: Stream, out: HostBuffer, other: DeviceBuffer) => void])[] = [
    ['copyFromHost(HostBuffer, { stream })', (buf, s, out) => buf.copyFromHost(out, { stream: s })],
    ['copyFrom(DeviceBuffer, { stream })', (buf, s, _out, other) => buf.copyFrom(other, { stream: s })],
    ['memset(value, { stream })', (buf, s) => buf.memset(0x42, { stream: s })],
    ['copyToHost(HostBuffer, { stream })', (buf, s, out) => buf.copyToHost(out, { stream: s })],
  ];
  for (const [what, op] of ops) {
    test(`${what} on another stream, then free(): the block is not reused before that work`, async () => {
      using pool = new PoolResource();
      using a = Stream.create({ nonBlocking: true });
      using s = Stream.create({ nonBlocking: true });
      using out = HostBuffer.allocate(n);
      using other = DeviceBuffer.allocate(n);
      const data = pattern(n, 9);
      out.view().set(data);
      other.copyFromHost(data);
      const buf = DeviceBuffer.allocate(n, { resource: pool, stream: a });
      buf.copyFromHost(data);
      device.synchronize();
      const reads = what.startsWith('copyToHost');
      if (reads) out.view().fill(0);
      let next: DeviceBuffer | undefined;
      await whileHeld(s, () => {
        op(buf, s, out, other);
        assert.equal(
          hostWaitsDuring(() => buf.free()),
          0,
          'free() orders on the device, it does not wait',
        );
        next = DeviceBuffer.allocate(n, { resource: pool, stream: a });
        next.memset(0xee, { stream: a });
        letRun(a);
      });
      await a.synchronized();
      if (reads) assert.deepEqual(out.view(), data, "the copy read the data, not the next owner's");
      assert.ok(
        next!.copyToHost(new Uint8Array(n)).every((b) => b === 0xee),
        "the next owner's data stayed",
      );
      next!.free();
    });
  }
}

test('synchronous work that may outlive the call (device to device, memset) records the legacy default stream; copies with a host side do not', () => {
  using a = Stream.create({ nonBlocking: true });
  using buf = DeviceBuffer.allocate(n, { stream: a });
  using other = DeviceBuffer.allocate(n, { stream: a });
  using pinned = HostBuffer.allocate(n);
  buf.copyFromHost(pattern(n, 10));
  buf.copyToHost(pinned);
  other.copyFromHost(pinned);
  assert.deepEqual([buf.recordedStreams, other.recordedStreams, pinned.recordedStreams], [[], [], []], 'a copy with a host side is complete when it returns');
  other.copyFrom(buf); // cuMemcpyDtoD returns before the copy is done, on the legacy default stream
  assert.deepEqual([buf.recordedStreams, other.recordedStreams], [[defaultStream], [defaultStream]]);
  using c = DeviceBuffer.allocate(n, { stream: a });
  c.memset(1);
  assert.deepEqual(c.recordedStreams, [defaultStream]);
});

test('a buffer copied on one short-lived stream after another forgets the destroyed ones whose work has run', async () => {
  using buf = DeviceBuffer.allocate(n);
  using pinned = HostBuffer.allocate(n);
  for (let i = 0; i < 20; i++) {
    const s = Stream.create({ nonBlocking: true });
    buf.copyToHost(pinned, { stream: s });
    await s.synchronized();
    s.destroy();
  }
  assert.equal(buf.recordedStreams.length, 1, 'only the last one recorded');
  assert.ok(buf.recordedStreams.every((s) => s instanceof Stream && s.destroyed));
  assert.equal(
    hostWaitsDuring(() => buf.free()),
    0,
    'nothing waits on the host for the destroyed streams',
  );
});

/**
 * Runs `body` with `stream` held back on the device as `whileHeld` does, for a body that destroys
 * the stream with the function it is given: that records an event on the stream first, through
 * which the host, once it released the stream, waits until the stream's work has run.
 */
async function whileHeldThenDestroyed(stream: Stream, body: (destroy: () => void) => void): Promise<void> {
  const held = holdBack(stream);
  const drained = Event.create({ timing: false });
  try {
    body(() => {
      drained.record(stream);
      stream.destroy();
    });
  } finally {
    held.release();
    if (drained.isRecorded) await drained.synchronized();
    drained.destroy();
    held.free();
  }
}

/** The driver events made during `fn`, and which of them were destroyed by its end (by handle). */
async function eventsDuring(fn: () => Promise<void>): Promise<{ made: number[]; left: number[] }> {
  const backend = device.backend;
  const made: number[] = [];
  const destroyed = new Set<number>();
  const target = backend as unknown as Record<string, unknown>;
  const saved = (['eventCreate', 'eventDestroy'] as const).map((name) => [name, Object.getOwnPropertyDescriptor(backend, name)] as const);
  const create = backend.eventCreate;
  const destroy = backend.eventDestroy;
  target.eventCreate = (flags: number): number => {
    const event = create.call(backend, flags);
    made.push(event);
    return event;
  };
  target.eventDestroy = (event: number): void => {
    destroyed.add(event);
    destroy.call(backend, event);
  };
  try {
    await fn();
  } finally {
    for (const [name, descriptor] of saved) {
      if (descriptor === undefined) delete target[name];
      else Object.defineProperty(backend, name, descriptor);
    }
  }
  return { made, left: made.filter((e) => !destroyed.has(e)) };
}

for (const [what, op] of [
  [
    'read by a copy',
    (buf: DeviceBuffer, s: Stream, out: HostBuffer): void => {
      buf.copyToHost(out, { stream: s });
    },
  ],
  ['written by a fill', (buf: DeviceBuffer, s: Stream): void => buf.memset(0x42, { stream: s })],
] as const) {
  test(`a pool buffer ${what} on a stream destroyed before the free: not reused before that work, and no host wait`, async () => {
    using pool = new PoolResource();
    using a = Stream.create({ nonBlocking: true });
    const s = Stream.create({ nonBlocking: true });
    const data = pattern(n, 11);
    const events = await eventsDuring(async () => {
      const out = HostBuffer.allocate(n);
      const buf = DeviceBuffer.allocate(n, { resource: pool, stream: a });
      const ptr = buf.ptr;
      buf.copyFromHost(data);
      device.synchronize();
      out.view().fill(0);
      let next: DeviceBuffer | undefined;
      await whileHeldThenDestroyed(s, (destroy) => {
        op(buf, s, out);
        destroy(); // as `using s` declared after the buffer does, before the buffer is freed
        assert.equal(
          hostWaitsDuring(() => buf.free()),
          0,
          'free() orders on the device, it does not wait',
        );
        next = DeviceBuffer.allocate(n, { resource: pool, stream: a });
        assert.equal(next.ptr, ptr, 'the pool hands the same block to the next owner');
        next.memset(0xee, { stream: a });
        letRun(a);
      });
      await a.synchronized();
      if (what.startsWith('read')) assert.deepEqual(out.view(), data, "the copy read the data, not the next owner's");
      assert.ok(
        next!.copyToHost(new Uint8Array(n)).every((b) => b === 0xee),
        "the next owner's data stayed",
      );
      next!.free();
      out.free(); // the copy recorded the stream on it too: the last buffer to let go of the stream
    });
    assert.deepEqual(events.left, [], "the event that marked the destroyed stream's work went with the last buffer that recorded it");
  });
}

test('a pooled pinned HostBuffer on no stream, copied on a stream destroyed before the free: not lent out before the copy, no host wait', async () => {
  const pool = new PinnedHostPool();
  const spy = spyOnDeallocate(pool);
  const s = Stream.create({ nonBlocking: true });
  using dev = DeviceBuffer.allocate(n);
  const data = pattern(n, 12);
  const first = HostBuffer.allocate(n, { resource: spy.resource }); // on no stream
  first.view().set(data);
  let second: HostBuffer | undefined;
  await whileHeldThenDestroyed(s, (destroy) => {
    dev.copyFromHost(first, { stream: s });
    destroy();
    assert.equal(
      hostWaitsDuring(() => first.free()),
      0,
      'free() does not wait',
    );
    assert.deepEqual(spy.streams, [defaultStream], 'freed on the legacy default stream, behind the destroyed one');
    second = HostBuffer.allocate(n, { resource: pool });
    second.view().fill(0xee);
  });
  assert.deepEqual(dev.copyToHost(new Uint8Array(n)), data, "the copy read the first owner's data");
  second!.free();
  pool.destroy();
});
