/** Streams and events: ordering, polling without blocking, timing, lifetimes. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { onGpu } from '../helpers.js';
import { Device } from '../../src/device.js';
import { Event, Stream, pollUntil } from '../../src/stream.js';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { HostBuffer } from '../../src/buffer/host-buffer.js';
import { DoubleFreeError, UseAfterFreeError, VramStateError } from '../../src/errors.js';

test('Stream.create, query, synchronize, destroy', () => {
  const s = Stream.create();
  assert.notEqual(s.handle, 0);
  assert.equal(s.device, Device.get(0));
  assert.equal(s.query(), true);
  s.synchronize();
  s.destroy();
  assert.equal(s.destroyed, true);
  assert.throws(() => s.handle, UseAfterFreeError);
  assert.throws(() => s.query(), UseAfterFreeError);
  assert.throws(() => s.synchronize(), UseAfterFreeError);
  assert.throws(() => s.record(), UseAfterFreeError);
  assert.throws(() => s.destroy(), DoubleFreeError);
  s[Symbol.dispose]();
});

test('Stream options: nonBlocking and priorities in the backend range', () => {
  const [least, greatest] = Device.get(0).backend.streamPriorityRange();
  using hi = Stream.create({ priority: greatest, nonBlocking: true });
  using lo = Stream.create({ priority: least });
  assert.equal(hi.priority, greatest);
  assert.equal(hi.nonBlocking, true);
  assert.equal(lo.priority, least);
  const outside = Math.min(least, greatest) - 1;
  assert.throws(() => Stream.create({ priority: outside }), RangeError);
  assert.throws(() => Stream.create({ priority: Math.max(least, greatest) + 1 }), RangeError);
  assert.throws(() => Stream.create({ priority: 0.5 }), RangeError);
  assert.throws(() => Stream.create({ priority: '0' as unknown as number }), TypeError);
  assert.throws(() => Stream.create({ nonBlocking: 1 as unknown as boolean }), TypeError);
});

test('Stream.default is handle 0 and is never destroyed', () => {
  const s = Stream.default();
  assert.equal(s.handle, 0);
  assert.equal(s.isDefault, true);
  assert.equal(s, Stream.default(Device.get(0)));
  s.destroy();
  assert.equal(s.handle, 0);
  {
    using d = Stream.default();
    void d;
  }
  assert.equal(s.query(), true);
});

test('using-declaration destroys a stream', () => {
  let kept: Stream | undefined;
  {
    using s = Stream.create();
    kept = s;
  }
  assert.equal(kept.destroyed, true);
});

test('stream ordering: async copies through pinned memory, across streams with an event', async () => {
  const n = 1 << 20;
  using src = HostBuffer.allocate(n);
  using dst = HostBuffer.allocate(n);
  using dev = DeviceBuffer.allocate(n);
  const input = src.view();
  for (let i = 0; i < n; i++) input[i] = (i * 31 + 7) & 0xff;
  using s1 = Stream.create({ nonBlocking: true });
  using s2 = Stream.create({ nonBlocking: true });
  dev.memset(0, { stream: s1 });
  dev.copyFromHost(src, { stream: s1 });
  const done = s1.record();
  s2.waitEvent(done);
  dev.copyToHost(dst, { stream: s2 });
  await s2.synchronized();
  assert.equal(s2.query(), true);
  assert.equal(done.query(), true);
  assert.deepEqual(dst.view(), input);
  done.destroy();
});

test('synchronized() polls without blocking the event loop', async () => {
  let ticks = 0;
  let running = true;
  const tick = (): void => {
    ticks++;
    if (running) setImmediate(tick);
  };
  setImmediate(tick);
  try {
    // Polling that blocked the loop would never see the ticks it waits for, and stop at the deadline;
    // a fixed window instead failed on a loaded machine, where 30 ms held only one tick.
    const start = Date.now();
    await pollUntil(() => ticks > 5 || Date.now() - start >= 2000);
    assert.ok(ticks > 5, `the event loop ran ${ticks} times while polling`);

    // A large transfer on a stream; on a GPU it takes milliseconds, during which the loop must run.
    const bytes = onGpu ? 256 << 20 : 1 << 20;
    using host = HostBuffer.allocate(bytes);
    using dev = DeviceBuffer.allocate(bytes);
    using s = Stream.create();
    ticks = 0;
    for (let i = 0; i < 4; i++) dev.copyFromHost(host, { stream: s });
    await s.synchronized();
    assert.equal(s.query(), true);
    if (onGpu) assert.ok(ticks > 0, `the event loop ran ${ticks} times during the transfer`);
  } finally {
    running = false; // a failed assertion must not leave the ticker keeping the process alive
  }
});

test('Event: record, query, synchronize, elapsed time', async () => {
  using s = Stream.create();
  using start = Event.create();
  using end = Event.create({ blockingSync: true });
  assert.equal(start.timing, true);
  assert.throws(() => end.elapsedSince(start), VramStateError);
  start.record(s);
  using dev = DeviceBuffer.allocate(1 << 20);
  dev.memset(1, { stream: s });
  s.record(end);
  await end.synchronized();
  end.synchronize();
  assert.equal(end.query(), true);
  const ms = end.elapsedSince(start);
  assert.equal(typeof ms, 'number');
  assert.ok(ms >= 0 && Number.isFinite(ms));
  assert.throws(() => end.elapsedSince(5 as unknown as Event), TypeError);
});

test('Event without timing cannot measure; destroyed events throw', () => {
  const a = Event.create({ timing: false });
  const b = Event.create({ timing: false });
  a.record();
  b.record(Stream.default());
  b.synchronize();
  assert.throws(() => b.elapsedSince(a), VramStateError);
  a.destroy();
  assert.throws(() => a.record(), UseAfterFreeError);
  assert.throws(() => a.query(), UseAfterFreeError);
  assert.throws(() => b.elapsedSince(a), UseAfterFreeError);
  assert.throws(() => a.destroy(), DoubleFreeError);
  a[Symbol.dispose]();
  b.destroy();
  assert.throws(() => Event.create({ timing: 'yes' as unknown as boolean }), TypeError);
  assert.throws(() => Stream.default().waitEvent({} as Event), TypeError);
  using c = Event.create();
  assert.throws(() => c.record({ handle: 'x' } as unknown as Stream), TypeError);
});

test('a host function that throws rejects the synchronized() that waits for it, and warns once when nothing waits (never an uncaught exception)', async () => {
  const uncaught: unknown[] = [];
  const onUncaught = (error: unknown): void => {
    uncaught.push(error);
  };
  const warnings: Error[] = [];
  const onWarning = (warning: Error): void => {
    if ((warning as { code?: string }).code === 'VRAM_HOST_FUNCTION_ERROR') warnings.push(warning);
  };
  // node:test turns an uncaught exception into a failed test: listen first, so the old behaviour fails here, by name.
  process.prependListener('uncaughtException', onUncaught);
  process.on('warning', onWarning);
  try {
    using stream = Stream.create();
    const boom = new Error('host function failed');
    let after = 0;
    stream.launchHostFunc(() => {
      throw boom;
    });
    stream.launchHostFunc(() => {
      after += 1;
    });
    await assert.rejects(stream.synchronized(), (e: unknown) => e === boom);
    assert.equal(after, 1, 'the stream ran on past the failed function');
    await stream.synchronized(); // the error belonged to the work awaited then, not to later waits
    // Nothing awaits: one warning, however often the function fails.
    stream.launchHostFunc(() => {
      throw new Error('unawaited');
    });
    await new Promise((resolve) => setTimeout(resolve, 20));
    stream.query();
    await new Promise((resolve) => setTimeout(resolve, 20));
    await stream.synchronized();
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(warnings.length, 1);
    assert.match(warnings[0]!.message, /unawaited/);
    assert.deepEqual(uncaught, []);
  } finally {
    process.removeListener('uncaughtException', onUncaught);
    process.removeListener('warning', onWarning);
  }
});
