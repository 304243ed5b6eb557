/**
 * Memory a program drops comes back (issue 35): on a 1 GiB device (the emulated device sized so, a
 * GPU's ballasted down to it), loops that drop a 4 MiB array each step, with a copy as the step
 * (the emulated backend runs it at memory speed). (a) 10,000 steps inside `tidy`: at most 3 arrays
 * live at any time; (b) 3,000 steps of an async loop without `free`/`tidy`: it completes, with the
 * memory held bounded (under pressure the collector runs; a refused asynchronous allocation lets
 * the dropped memory be reclaimed and retries; after pressure asked for a collection, the next
 * asynchronous allocation lets it finish); (c) a synchronous loop that does nothing: an
 * OutOfMemoryError that names the cause, and the dropped memory back after a few turns of the
 * event loop.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

process.env.VRAM_EMULATED_BYTES ??= '1G'; // read when the backend is made, by the first call below

const { DeviceArray } = await import('../../src/array/device-array.js');
const { tidy } = await import('../../src/buffer/tidy.js');
const { liveAllocations, DROPPED_SENTENCE } = await import('../../src/buffer/dropped-memory.js');
const { OutOfMemoryError } = await import('../../src/errors.js');
const { emptyCache } = await import('../../src/resource/current.js');
const { holdDeviceRoom } = await import('../helpers.js');

const MiB = 1024 * 1024;
const n = MiB; // float32: 4 MiB an array
let room: Disposable | undefined;

const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** Turns of the event loop until no more than `most` allocations are live, or 20 turns. */
async function settle(most: number): Promise<void> {
  for (let i = 0; i < 20 && liveAllocations().count > most; i++) await turn();
}

describe('memory a program drops, on a 1 GiB device', () => {
  before(async () => {
    await settle(0);
    room = holdDeviceRoom(1024 * MiB);
  });
  after(() => {
    room?.[Symbol.dispose]();
    emptyCache();
  });

  it('(a) 10,000 steps, each inside tidy and dropping a 4 MiB array: at most 3 arrays live at any time', () => {
    const base = liveAllocations().count;
    let x = DeviceArray.zeros([n]);
    let most = 0;
    for (let i = 0; i < 10_000; i++) {
      const next = tidy(() => {
        const dropped = DeviceArray.empty([n]);
        dropped.copyFrom(x);
        const kept = DeviceArray.empty([n]);
        kept.copyFrom(dropped);
        most = Math.max(most, liveAllocations().count - base);
        return kept;
      });
      x.free();
      x = next;
    }
    most = Math.max(most, liveAllocations().count - base);
    x.free();
    assert.ok(most <= 3, `${most} arrays were live at once`);
    assert.equal(liveAllocations().count, base);
  });

  it('(b) 3,000 steps of an async loop with an await each and no free or tidy: completes, memory bounded', async () => {
    await settle(0);
    const base = liveAllocations().count;
    let x = DeviceArray.zeros([n]);
    let most = 0;
    for (let i = 0; i < 3_000; i++) {
      const y = await DeviceArray.emptyAsync([n]);
      y.copyFrom(x);
      x = y; // the old x is dropped
      most = Math.max(most, liveAllocations().count - base);
    }
    // Pressure asks for a collection each 512 MiB (half the free memory) at most; the next emptyAsync lets it finish.
    assert.ok(most * 4 * MiB <= 640 * MiB, `${most} arrays of 4 MiB held on a 1 GiB device`);
    await settle(base + 1);
  });

  it('(b) with the awaits on the event loop (I/O, timers), pressure alone keeps the memory held well below the device', async () => {
    await settle(0);
    const base = liveAllocations().count;
    let x = DeviceArray.zeros([n]);
    let most = 0;
    for (let i = 0; i < 1_000; i++) {
      const y = DeviceArray.empty([n]);
      y.copyFrom(x);
      x = y;
      await turn();
      most = Math.max(most, liveAllocations().count - base);
    }
    // A collection is asked for each 512 MiB (half the free memory) allocated and not freed, at most.
    assert.ok(most * 4 * MiB <= 640 * MiB, `${most} arrays of 4 MiB held`);
    await settle(base + 1);
  });

  it('(c) a synchronous loop that drops its arrays: an OutOfMemoryError that names the cause, and the memory back after a few turns', async () => {
    await settle(0);
    const base = liveAllocations().count;
    let failure: unknown;
    let steps = 0;
    try {
      let x = DeviceArray.zeros([16]);
      for (; steps < 1_000; steps++) {
        const y = DeviceArray.empty([n]);
        y.fill(steps);
        x = y;
      }
      assert.ok(x.size > 0);
    } catch (error) {
      failure = error;
    }
    assert.ok(failure instanceof OutOfMemoryError, `the loop ran ${steps} steps without an OutOfMemoryError`);
    assert.ok(steps < 1_000 && steps >= 200, `failed after ${steps} steps`);
    assert.match(failure.message, /the program holds \d+ live allocations \([^)]+\) it made and has not freed/);
    assert.ok(failure.message.includes(DROPPED_SENTENCE), failure.message);
    for (let i = 0; i < 5; i++) await turn();
    assert.ok(liveAllocations().count <= base + 1, `${liveAllocations().count - base} still live after five turns`);
    using big = DeviceArray.empty([200 * n]); // 800 MiB: the dropped memory is back
    assert.equal(big.size, 200 * n);
  });
});
