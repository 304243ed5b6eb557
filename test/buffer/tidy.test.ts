/**
 * `tidy(fn)` frees what `fn` made and did not return or `keep()`: nested scopes, async functions
 * (across awaits, concurrent scopes apart), errors thrown inside, results returned in objects,
 * arrays, Maps and Sets, views, buffers of every kind.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { DeviceArray } from '../../src/array/device-array.js';
import { HostArray } from '../../src/array/host-array.js';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { HostBuffer } from '../../src/buffer/host-buffer.js';
import { keep, tidy } from '../../src/buffer/tidy.js';
import { map } from '../../src/kernels/ops/elementwise.js';

const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

describe('tidy', () => {
  it('frees what fn made and keeps what it returns, whose values are right', () => {
    let temporary: DeviceArray | undefined;
    const result = tidy(() => {
      temporary = DeviceArray.from(new Float32Array([1, 2, 3]));
      return map(temporary, 'x * 2 + 1');
    });
    assert.equal(temporary!.freed, true);
    assert.equal(result.freed, false);
    assert.deepEqual(result.toArray(), [3, 5, 7]);
    result.free();
  });

  it('frees buffers and host arrays too, and leaves memory made outside alone', () => {
    using outside = DeviceArray.zeros([4]);
    const made: { freed: boolean }[] = [];
    tidy(() => {
      made.push(DeviceBuffer.allocate(64), HostBuffer.allocate(64), HostArray.zeros([4]), DeviceArray.zeros([4]));
      outside.fill(1);
    });
    assert.deepEqual(
      made.map((m) => m.freed),
      [true, true, true, true],
    );
    assert.equal(outside.freed, false);
  });

  it('keeps what is returned in arrays, plain objects, Maps and Sets, and the memory a returned view views', () => {
    let dropped: DeviceArray | undefined;
    const out = tidy(() => {
      dropped = DeviceArray.zeros([2]);
      const base = DeviceArray.zeros([8]);
      return {
        list: [DeviceArray.zeros([1])],
        nested: { deeper: { buffer: DeviceBuffer.allocate(16) } },
        map: new Map([['k', DeviceArray.zeros([1])]]),
        set: new Set([DeviceArray.zeros([1])]),
        view: base.slice([2, 6]),
      };
    });
    assert.equal(dropped!.freed, true);
    assert.equal(out.list[0]!.freed, false);
    assert.equal(out.nested.deeper.buffer.freed, false);
    assert.equal(out.map.get('k')!.freed, false);
    assert.equal([...out.set][0]!.freed, false);
    assert.equal(out.view.freed, false);
    assert.deepEqual(out.view.toArray(), [0, 0, 0, 0]);
    for (const a of [out.list[0]!, out.nested.deeper.buffer, out.map.get('k')!, [...out.set][0]!]) a.free();
    out.view.buffer.free();
  });

  it('nests: what an inner scope returns belongs to the outer one, which frees it unless it returns it too', () => {
    let inner: DeviceArray | undefined;
    let innerTemporary: DeviceArray | undefined;
    const kept = tidy(() => {
      inner = tidy(() => {
        innerTemporary = DeviceArray.zeros([4]);
        return DeviceArray.zeros([4]);
      });
      assert.equal(innerTemporary!.freed, true);
      assert.equal(inner.freed, false);
      return tidy(() => DeviceArray.zeros([2]));
    });
    assert.equal(inner!.freed, true, 'the outer scope freed what the inner returned and it dropped');
    assert.equal(kept.freed, false, 'what both returned lives on');
    kept.free();
  });

  it('keep() exempts memory from every enclosing scope', () => {
    let kept: DeviceArray | undefined;
    tidy(() =>
      tidy(() => {
        kept = keep(DeviceArray.zeros([4]));
      }),
    );
    assert.equal(kept!.freed, false);
    kept!.free();
  });

  it('an error thrown inside still frees everything made, and passes on', () => {
    let made: DeviceArray | undefined;
    assert.throws(
      () =>
        tidy(() => {
          made = DeviceArray.zeros([4]);
          throw new Error('step failed');
        }),
      /step failed/,
    );
    assert.equal(made!.freed, true);
  });

  it('follows an async function across awaits, frees on rejection, and keeps concurrent scopes apart', async () => {
    let before: DeviceArray | undefined;
    let afterAwait: DeviceArray | undefined;
    const result = await tidy(async () => {
      before = DeviceArray.zeros([4]);
      await turn();
      afterAwait = await DeviceArray.zerosAsync([4]);
      await turn();
      return DeviceArray.zeros([1]);
    });
    assert.equal(before!.freed, true);
    assert.equal(afterAwait!.freed, true);
    assert.equal(result.freed, false);
    result.free();

    let rejected: DeviceArray | undefined;
    await assert.rejects(
      tidy(async () => {
        await turn();
        rejected = DeviceArray.zeros([4]);
        throw new Error('async step failed');
      }),
      /async step failed/,
    );
    assert.equal(rejected!.freed, true);

    // Two scopes in flight at once: each frees its own, never the other's.
    let a: DeviceArray | undefined;
    let b: DeviceArray | undefined;
    let bAtEndOfA = true;
    const first = tidy(async () => {
      a = DeviceArray.zeros([4]);
      await turn();
    });
    const second = tidy(async () => {
      b = DeviceArray.zeros([4]);
      await first;
      bAtEndOfA = b.freed;
      await turn();
    });
    await Promise.all([first, second]);
    assert.equal(bAtEndOfA, false, 'the first scope did not free what the second made');
    assert.equal(a!.freed, true);
    assert.equal(b!.freed, true);
  });

  it('memory freed inside the scope is not freed again; fn must be a function', () => {
    tidy(() => {
      const a = DeviceArray.zeros([4]);
      a.free();
    });
    assert.throws(() => tidy(42 as unknown as () => void), TypeError);
  });
});
