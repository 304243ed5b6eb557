/**
 * Scopes per async context: `useResource(mr, fn)` makes every allocation inside `fn` that names no
 * resource use `mr`, and `withMemoryBudget(bytes, fn)` counts every allocation inside `fn` against
 * a budget; both follow `await`s and timers, nest, stay apart between concurrent tasks, and end
 * with `fn`. Both backends: the resources are small pools and limits, nothing fills the device.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { setImmediate as nextTurn, setTimeout as sleep } from 'node:timers/promises';
import { DeviceArray } from '../../src/array/device-array.js';
import { withMemoryBudget } from '../../src/buffer/budget.js';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { Device } from '../../src/device.js';
import { OutOfMemoryError, UseAfterFreeError, VramStateError } from '../../src/errors.js';
import { LimitingAdaptor } from '../../src/resource/adaptors/limiting.js';
import { getCurrentResource, setCurrentResource, useResource } from '../../src/resource/current.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';

const KiB = 1024;
const device = Device.get(0);

const isBudget = (e: unknown): boolean => e instanceof OutOfMemoryError && e.reason === 'budget' && /budget/.test(e.message);

describe('useResource', () => {
  it("routes allocations that name no resource to the scope's resource, across awaits and timers", async () => {
    using pool = new PoolResource({ device });
    const outside = getCurrentResource(device);
    const seen = await useResource(pool, async () => {
      const a = DeviceBuffer.allocate(256);
      await sleep(1);
      const b = DeviceArray.zeros([16], 'float32');
      const c = await new Promise<DeviceBuffer>((resolve) => setTimeout(() => resolve(DeviceBuffer.allocate(256)), 1));
      const named = new CudaResource(device);
      const d = DeviceBuffer.allocate(256, { resource: named }); // a named resource is used as named
      const out = [a.resource, (b.buffer as DeviceBuffer).resource, c.resource, d.resource === named, getCurrentResource()];
      for (const x of [a, b, c, d]) x.free();
      named.destroy();
      return out;
    });
    assert.deepEqual(seen, [pool, pool, pool, true, pool]);
    assert.equal(getCurrentResource(device), outside, 'the scope ends with fn');
    const after = DeviceBuffer.allocate(256);
    assert.equal(after.resource, outside);
    after.free();
  });

  it('nests, and concurrent tasks each keep their own resource', async () => {
    using a = new PoolResource({ device });
    using b = new PoolResource({ device });
    const task = async (expected: PoolResource): Promise<boolean> => {
      let ok = true;
      for (let i = 0; i < 5; i++) {
        await nextTurn();
        const buf = DeviceBuffer.allocate(256);
        ok &&= buf.resource === expected;
        buf.free();
      }
      return ok;
    };
    assert.deepEqual(await Promise.all([useResource(a, () => task(a)), useResource(b, () => task(b))]), [true, true]);
    await useResource(a, async () => {
      await useResource(b, async () => {
        await nextTurn();
        assert.equal(getCurrentResource(), b);
      });
      await nextTurn();
      assert.equal(getCurrentResource(), a, 'the outer scope is back after the inner one ends');
    });
  });

  it('ends with a synchronous fn, also when it throws, and checks its arguments', () => {
    using pool = new PoolResource({ device });
    const outside = getCurrentResource(device);
    assert.equal(
      useResource(pool, () => getCurrentResource()),
      pool,
    );
    assert.throws(
      () =>
        useResource(pool, () => {
          throw new Error('boom');
        }),
      /boom/,
    );
    assert.equal(getCurrentResource(device), outside);
    assert.throws(() => useResource({} as PoolResource, () => 0), TypeError);
    const dead = new PoolResource({ device });
    dead.destroy();
    assert.throws(() => useResource(dead, () => 0), UseAfterFreeError);
  });

  it("refuses setCurrentResource for the scope's device inside it (as CuPy refuses set_allocator inside using_allocator)", async () => {
    using pool = new PoolResource({ device });
    using other = new PoolResource({ device });
    const outside = getCurrentResource(device);
    await useResource(pool, async () => {
      assert.throws(
        () => setCurrentResource(device, other),
        (e: unknown) => e instanceof VramStateError && /inside useResource/.test(e.message),
      );
      await sleep(1);
      assert.throws(() => setCurrentResource(0, other), VramStateError, 'after an await too');
      assert.equal(getCurrentResource(device), pool);
    });
    assert.equal(getCurrentResource(device), outside, 'nothing took effect after the scope');
    // Outside every scope it is accepted, as before.
    const previous = setCurrentResource(device, other);
    assert.equal(setCurrentResource(device, previous), other);
  });
});

// A generous limit, so that a wait that never ends fails the suite instead of hanging it.
describe('withMemoryBudget', { timeout: 60_000 }, () => {
  it('counts buffers and arrays across awaits, refuses past the budget, and counts frees back', async () => {
    using mr = new CudaResource(device);
    await useResource(mr, () =>
      withMemoryBudget(4 * KiB, async () => {
        const a = DeviceBuffer.allocate(2 * KiB);
        await sleep(1);
        const b = DeviceArray.empty([256], 'float32'); // 1 KiB
        await nextTurn();
        assert.throws(() => DeviceBuffer.allocate(2 * KiB), isBudget);
        await assert.rejects(DeviceArray.emptyAsync([512], 'float32'), isBudget);
        const c = DeviceBuffer.allocate(1 * KiB); // exactly the budget
        a.free();
        const d = DeviceBuffer.allocate(2 * KiB); // room again
        for (const x of [b, c, d]) x.free();
      }),
    );
  });

  it('nested budgets each count, and concurrent scopes do not count each other', async () => {
    using mr = new CudaResource(device);
    await useResource(mr, () =>
      withMemoryBudget(4 * KiB, async () => {
        const outer = DeviceBuffer.allocate(1 * KiB);
        await withMemoryBudget(2 * KiB, async () => {
          const inner = DeviceBuffer.allocate(2 * KiB);
          await nextTurn();
          assert.throws(() => DeviceBuffer.allocate(256), isBudget, 'the inner budget is full');
          inner.free();
          const big = DeviceBuffer.allocate(2 * KiB);
          big.free();
        });
        const rest = DeviceBuffer.allocate(3 * KiB); // the outer one's remaining room
        assert.throws(() => DeviceBuffer.allocate(256), isBudget, 'the outer budget counts the inner allocations too');
        outer.free();
        rest.free();
      }),
    );
    const task = (): Promise<void> =>
      withMemoryBudget(2 * KiB, async () => {
        const held: DeviceBuffer[] = [];
        for (let i = 0; i < 4; i++) {
          await nextTurn();
          held.push(DeviceBuffer.allocate(512, { resource: mr }));
        }
        assert.throws(() => DeviceBuffer.allocate(256, { resource: mr }), isBudget);
        for (const h of held) h.free();
      });
    await Promise.all([task(), task()]);
  });

  it('an allocation that waits is served when memory of the same budget is freed', async () => {
    using mr = new CudaResource(device);
    await withMemoryBudget(4 * KiB, async () => {
      const held = DeviceBuffer.allocate(4 * KiB, { resource: mr });
      const waiting = DeviceBuffer.allocateAsync(2 * KiB, { resource: mr, wait: true });
      setTimeout(() => held.free(), 5);
      const buf = await waiting;
      assert.equal(buf.byteLength, 2 * KiB);
      buf.free();
      await assert.rejects(
        DeviceBuffer.allocateAsync(8 * KiB, { resource: mr, wait: true }),
        (e: unknown) => isBudget(e) && /can never be allocated/.test((e as Error).message),
      );
    });
  });

  it("a request waiting on its budget does not hold back the device's other requests", async () => {
    using mr = new LimitingAdaptor(new CudaResource(device), 64 * KiB);
    let held: DeviceBuffer | undefined;
    let waiting: Promise<DeviceBuffer> | undefined;
    await withMemoryBudget(4 * KiB, () => {
      held = DeviceBuffer.allocate(4 * KiB, { resource: mr });
      waiting = DeviceBuffer.allocateAsync(4 * KiB, { resource: mr, wait: true });
    });
    // Outside the budget, with room under the limit: served at once, past the budget's waiter.
    const other = await DeviceBuffer.allocateAsync(8 * KiB, { resource: mr, wait: true });
    other.free();
    held!.free();
    const late = await waiting!;
    late.free();
    assert.equal(mr.memoryFigures().allocatedBytes.value, 0);
  });

  it('counts pitched allocations, whose size the driver or arena picks', () => {
    withMemoryBudget(4 * KiB, () => {
      assert.throws(() => DeviceBuffer.allocatePitched(1024, 8), isBudget);
      const rows = DeviceBuffer.allocatePitched(256, 2); // at most one pitch (<= 2 KiB on every device) times 2 rows
      assert.throws(() => DeviceBuffer.allocatePitched(256, 8), isBudget, 'the first one counts');
      rows.free();
      DeviceBuffer.allocatePitched(256, 4).free();
    });
  });

  it('checks its arguments and takes sizes as text', () => {
    assert.throws(() => withMemoryBudget(0, () => 0), RangeError);
    assert.throws(() => withMemoryBudget('lots', () => 0), RangeError);
    assert.throws(() => withMemoryBudget(1024, 'fn' as unknown as () => number), TypeError);
    assert.equal(
      withMemoryBudget('1K', () => 7),
      7,
    );
  });
});
