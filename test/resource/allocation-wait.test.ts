/**
 * Allocations that wait for memory (`DeviceBuffer.allocateAsync(n, { wait: true })`,
 * `DeviceArray.emptyAsync`): served in order per device, woken by frees and by the poll, ended by
 * an abort signal or a timeout with nothing left queued or allocated, and refused at once when no
 * wait can help; and the statistics of the waits. Memory is made short with a LimitingAdaptor over
 * a CudaResource, so the same cases run on both backends without filling the device.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { setImmediate as nextTurn, setTimeout as sleep } from 'node:timers/promises';
import type { Ptr } from '../../src/backend/backend.js';
import { DeviceArray } from '../../src/array/device-array.js';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { Device } from '../../src/device.js';
import { OutOfMemoryError } from '../../src/errors.js';
import { LimitingAdaptor } from '../../src/resource/adaptors/limiting.js';
import { MemoryResource } from '../../src/resource/resource.js';
import { type StreamRef } from '../../src/stream.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';
import { memoryStats } from '../../src/observe/memory-stats.js';

const KiB = 1024;
const MiB = 1024 * KiB;
const device = Device.get(0);

function limited(bytes: number): LimitingAdaptor {
  return new LimitingAdaptor(new CudaResource(device), bytes);
}

/** Resolves `promise`'s state after the event loop has turned a few times: 'pending' or 'settled'. */
async function stateOf(promise: Promise<unknown>): Promise<'pending' | 'settled'> {
  let settled = false;
  promise.then(
    () => {
      settled = true;
    },
    () => {
      settled = true;
    },
  );
  for (let i = 0; i < 5; i++) await nextTurn();
  await sleep(20);
  return settled ? 'settled' : 'pending';
}

/** A resource that refuses everything while `open` is false, as memory held by another process would. */
class Gate extends MemoryResource {
  readonly kind = 'device' as const;
  readonly alignment = 256;
  readonly deviceOrdinal = 0;
  open = false;
  tries = 0;
  readonly below = new CudaResource(device);
  describe(): string {
    return 'Gate';
  }
  protected doAllocate(bytes: number, _handle: number, stream: StreamRef | undefined): Ptr {
    this.tries += 1;
    if (!this.open) throw new OutOfMemoryError({ requestedBytes: bytes, call: 'Gate.allocate', reason: 'limit', resource: 'Gate' });
    return this.below.allocate(bytes, stream);
  }
  protected doDeallocate(ptr: Ptr, bytes: number, _handle: number, stream: StreamRef | undefined): void {
    this.below.deallocate(ptr, bytes, stream);
  }
}

// A generous limit, so that a wait that never ends fails the suite instead of hanging it.
describe('allocateAsync with wait', { timeout: 60_000 }, () => {
  it('is served at once when memory is there, and fails as allocate does without wait', async () => {
    using mr = limited(256 * KiB);
    const a = await DeviceBuffer.allocateAsync(128 * KiB, { resource: mr, wait: true });
    assert.equal(a.byteLength, 128 * KiB);
    await assert.rejects(DeviceBuffer.allocateAsync(192 * KiB, { resource: mr }), (e: unknown) => e instanceof OutOfMemoryError && e.reason === 'limit');
    a.free();
  });

  it('serves waiters in order: a later small request does not overtake an earlier large one', async () => {
    using mr = limited(1024 * KiB);
    const held = DeviceBuffer.allocate(768 * KiB, { resource: mr });
    const served: string[] = [];
    const large = DeviceBuffer.allocateAsync(512 * KiB, { resource: mr, wait: true }).then((b) => {
      served.push('large');
      return b;
    });
    // 64 KiB would fit now (768 + 64 <= 1024), but the 512 KiB request came first.
    const small = DeviceBuffer.allocateAsync(64 * KiB, { resource: mr, wait: true }).then((b) => {
      served.push('small');
      return b;
    });
    assert.equal(await stateOf(small), 'pending', 'the small request waits behind the large one');
    assert.equal(memoryStats(device).waits.count.value >= 2, true);
    held.free(); // wakes the queue: the large one first, then the small one fits too
    // Microtasks only, so no timer (the poll) can run: the free itself woke them.
    for (let i = 0; i < 10; i++) await Promise.resolve();
    assert.deepEqual(served, ['large', 'small']);
    const [l, s] = await Promise.all([large, small]);
    assert.deepEqual(served, ['large', 'small']);
    assert.equal(mr.memoryFigures().allocatedBytes.value, 576 * KiB);
    l.free();
    s.free();
  });

  it('an abort signal rejects with its reason and leaves nothing queued or allocated', async () => {
    using mr = limited(256 * KiB);
    const held = DeviceBuffer.allocate(256 * KiB, { resource: mr });
    const before = memoryStats(device).waits;
    const controller = new AbortController();
    const reason = new Error('no longer needed');
    const waiting = DeviceBuffer.allocateAsync(128 * KiB, { resource: mr, wait: true, signal: controller.signal });
    assert.equal(await stateOf(waiting), 'pending');
    controller.abort(reason);
    await assert.rejects(waiting, (e: unknown) => e === reason);
    const after = memoryStats(device).waits;
    assert.equal(after.aborts, before.aborts + 1);
    assert.equal(after.count.value, before.count.value);
    held.free();
    await sleep(10);
    assert.equal(mr.memoryFigures().allocatedBytes.value, 0, 'the aborted request took nothing when memory came free');
    // An already aborted signal rejects before anything is tried.
    await assert.rejects(
      DeviceBuffer.allocateAsync(128 * KiB, { resource: mr, wait: true, signal: AbortSignal.abort() }),
      (e: unknown) => e instanceof DOMException && e.name === 'AbortError',
    );
  });

  it('a signal whose addEventListener throws rejects the wait, and the waiter is gone', async () => {
    using mr = limited(256 * KiB);
    const held = DeviceBuffer.allocate(256 * KiB, { resource: mr });
    const before = memoryStats(device).waits;
    const refusal = new Error('cannot listen');
    const deaf = {
      aborted: false,
      reason: undefined,
      addEventListener(): void {
        throw refusal;
      },
      removeEventListener(): void {},
    };
    await assert.rejects(DeviceBuffer.allocateAsync(128 * KiB, { resource: mr, wait: true, signal: deaf }), (e: unknown) => e === refusal);
    assert.equal(memoryStats(device).waits.count.value, before.count.value, 'not queued');
    held.free();
    await sleep(20);
    assert.equal(mr.memoryFigures().allocatedBytes.value, 0, 'the rejected request took nothing when memory came free');
    // The queue is not blocked: a later request is served.
    const later = await DeviceBuffer.allocateAsync(256 * KiB, { resource: mr, wait: true, timeout: 5_000 });
    later.free();
  });

  it('a signal aborted with no reason rejects with an AbortError, not undefined', async () => {
    using mr = limited(256 * KiB);
    const isAbortError = (e: unknown): boolean => e instanceof DOMException && e.name === 'AbortError';
    const listeners: Array<() => void> = [];
    const bare = {
      aborted: false,
      reason: undefined,
      addEventListener(_type: 'abort', listener: () => void): void {
        listeners.push(listener);
      },
      removeEventListener(): void {},
    };
    await assert.rejects(DeviceBuffer.allocateAsync(KiB, { resource: mr, wait: true, signal: { ...bare, aborted: true } }), isAbortError);
    const held = DeviceBuffer.allocate(256 * KiB, { resource: mr });
    const waiting = DeviceBuffer.allocateAsync(128 * KiB, { resource: mr, wait: true, signal: bare });
    assert.equal(await stateOf(waiting), 'pending');
    bare.aborted = true;
    for (const listener of listeners) listener();
    await assert.rejects(waiting, isAbortError);
    held.free();
  });

  it('takes every size allocate takes: a size string too', async () => {
    using mr = limited(4 * MiB);
    const a = await DeviceBuffer.allocateAsync('1M', { resource: mr });
    const b = await DeviceBuffer.allocateAsync('1M', { resource: mr, wait: true });
    assert.equal(a.byteLength, MiB);
    assert.equal(b.byteLength, MiB);
    a.free();
    b.free();
    await assert.rejects(DeviceBuffer.allocateAsync('1 lot', { resource: mr }), /bytes must be a whole number of bytes or a size like 64K/);
  });

  it('a timeout rejects with an OutOfMemoryError that says how long it waited, and leaves nothing queued', async () => {
    using mr = limited(256 * KiB);
    const held = DeviceBuffer.allocate(256 * KiB, { resource: mr });
    const before = memoryStats(device).waits;
    const errorsBefore = mr.outOfMemoryErrors;
    await assert.rejects(
      DeviceBuffer.allocateAsync(128 * KiB, { resource: mr, wait: true, timeout: 30 }),
      (e: unknown) => e instanceof OutOfMemoryError && /waited \d+ ms \(timeout 30 ms\)/.test(e.message) && e.reason === 'limit',
    );
    const after = memoryStats(device).waits;
    assert.equal(after.timeouts, before.timeouts + 1);
    assert.equal(after.count.value, before.count.value);
    assert.equal(after.count.total, before.count.total + 1);
    assert.ok(after.waitedMs.total > before.waitedMs.total);
    assert.equal(mr.outOfMemoryErrors, errorsBefore + 1, 'the retries are not counted, the timeout once');
    held.free();
    await sleep(10);
    assert.equal(mr.memoryFigures().allocatedBytes.value, 0);
  });

  it('a request that can never be met fails at once, without waiting', async () => {
    using mr = limited(256 * KiB);
    const before = memoryStats(device).waits.count.total;
    await assert.rejects(
      DeviceBuffer.allocateAsync(512 * KiB, { resource: mr, wait: true }),
      (e: unknown) => e instanceof OutOfMemoryError && e.reason === 'limit' && /can never be allocated/.test(e.message),
    );
    // Whole 2 MiB pages, the virtual-memory granularity of GPUs.
    using pool = new PoolResource({ maximumSize: 4 * MiB });
    await assert.rejects(
      DeviceBuffer.allocateAsync(8 * MiB, { resource: pool, wait: true }),
      (e: unknown) => e instanceof OutOfMemoryError && e.reason === 'maximum',
    );
    using plain = new CudaResource(device);
    const total = device.memInfo().total;
    await assert.rejects(
      DeviceBuffer.allocateAsync(total + 1, { resource: plain, wait: true }),
      (e: unknown) => e instanceof OutOfMemoryError && e.reason === 'device' && /larger than device 0's/.test(e.message),
    );
    assert.equal(memoryStats(device).waits.count.total, before, 'none of them waited');
  });

  it('memory freed outside vram (no free to wake it) is found by the poll', async () => {
    using gate = new Gate();
    const waiting = DeviceBuffer.allocateAsync(4 * KiB, { resource: gate, wait: true });
    assert.equal(await stateOf(waiting), 'pending');
    gate.open = true;
    const buf = await waiting;
    assert.ok(gate.tries >= 2);
    buf.free();
    gate.below.destroy();
  });

  it('DeviceArray.emptyAsync and zerosAsync wait too', async () => {
    using mr = limited(64 * KiB);
    const held = DeviceArray.empty([16 * KiB], 'float32', { resource: mr });
    const zeros = DeviceArray.zerosAsync([1024], 'float32', { resource: mr, wait: true });
    assert.equal(await stateOf(zeros), 'pending');
    held.free();
    const z = await zeros;
    assert.deepEqual(
      [...z.toHost()].filter((x) => x !== 0),
      [],
    );
    z.free();
    await assert.rejects(DeviceArray.emptyAsync([1 << 20], 'float32', { resource: mr, wait: true }), OutOfMemoryError);
    await assert.rejects(DeviceArray.emptyAsync([4], 'float32', { resource: mr, wait: 'yes' as unknown as boolean }), TypeError);
    await assert.rejects(DeviceArray.emptyAsync([4], 'float32', { resource: mr, timeout: -1 }), RangeError);
  });
});
