/** JoinClock: the joins StreamOrder leaves out because they would order nothing new (docs/design/stream-joins.md). */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Device } from '../../src/device.js';
import { JoinClock } from '../../src/resource/join-clock.js';
import { StreamOrder, type Lane } from '../../src/resource/stream-order.js';
import { Stream } from '../../src/stream.js';

const device = Device.get(0);
device.makeCurrent();

function lane(stream: Stream, n: number): Lane {
  return { stream: stream.handle, event: 0, retired: false, clock: new JoinClock(n) };
}

describe('join clocks', () => {
  it('a lane followed through its last record, nothing freed since, is not joined again', () => {
    using a = Stream.create();
    using b = Stream.create();
    using c = Stream.create();
    const order = new StreamOrder(device.backend);
    const A = lane(a, 1),
      B = lane(b, 2),
      C = lane(c, 3);
    A.clock!.freed = true;
    order.join(A, b.handle, B);
    assert.deepEqual([order.records, order.joins], [1, 1]);
    order.join(A, b.handle, B);
    assert.deepEqual([order.records, order.joins], [1, 1], "b already follows all of a's frees");
    // c follows a through b: b's record comes after its wait on a.
    B.clock!.freed = true;
    order.join(B, c.handle, C);
    assert.deepEqual([order.records, order.joins], [2, 2]);
    order.join(A, c.handle, C);
    assert.deepEqual([order.records, order.joins], [2, 2], 'c follows a through b');
    // A free into a since: a new record, and a wait on it.
    A.clock!.freed = true;
    order.join(A, c.handle, C);
    assert.deepEqual([order.records, order.joins], [3, 3]);
    // Nothing freed into b since c's wait, but a's new frees are not b's: b must wait on the new record.
    order.join(A, b.handle, B);
    assert.deepEqual([order.records, order.joins], [3, 4], 'the last record reused, waited on');
    // Without the taker's lane (a resource giving memory back), every join waits.
    order.join(A, c.handle);
    assert.deepEqual([order.records, order.joins], [3, 5]);
    for (const l of [A, B, C]) order.release(l);
  });

  it('a host wait reuses the last record when nothing was freed since', () => {
    using a = Stream.create();
    const order = new StreamOrder(device.backend);
    const A = lane(a, 1);
    A.clock!.freed = true;
    order.hostWait(A);
    order.hostWait(A);
    assert.equal(order.records, 1);
    A.clock!.freed = true;
    order.hostWait(A);
    assert.equal(order.records, 2);
    const plain: Lane = { stream: a.handle, event: 0, retired: false };
    order.hostWait(plain);
    order.hostWait(plain);
    assert.equal(order.records, 4, 'a lane without a clock records every time');
    order.release(A);
    order.release(plain);
  });

  it('a retired lane is waited on once per follower', () => {
    const order = new StreamOrder(device.backend);
    using b = Stream.create();
    const a = Stream.create();
    const A = lane(a, 1),
      B = lane(b, 2);
    A.clock!.freed = true;
    order.retire(A);
    a.destroy();
    order.join(A, b.handle, B);
    order.join(A, b.handle, B);
    assert.deepEqual([order.records, order.joins], [1, 1]);
    order.release(A);
  });
});
