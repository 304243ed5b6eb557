/**
 * The backstop registers a buffer only once it outlives its batch (the allocations of one job, at
 * most 64: docs/design/buffer-lifetimes.md, "Backstop registration"): what a program drops still comes back, also when it was
 * dropped among buffers freed at once, and what it freed is never reported, registered or not.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { forceGc, needsGc } from '../helpers.js';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { leakStatistics } from '../../src/backstop.js';

const turn = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, 5));

/** Turns of the event loop (with a collection each when `collect`) until `count` leaks more than `from` were reported, or 50 turns. */
async function leaksAfter(from: number, count: number, collect: boolean): Promise<number> {
  for (let i = 0; i < 50 && leakStatistics().count < from + count; i++) {
    if (collect) forceGc!();
    await turn();
  }
  return leakStatistics().count - from;
}

describe('backstop registration', () => {
  it('reclaims a buffer dropped among buffers freed at once, in one job', needsGc, async () => {
    const before = leakStatistics().count;
    (() => {
      DeviceBuffer.allocate(4096); // dropped
      for (let i = 0; i < 200; i++) DeviceBuffer.allocate(4096).free();
    })();
    assert.equal(await leaksAfter(before, 1, true), 1, 'the dropped buffer came back, and only it');
  });

  it('never reports a buffer freed before its batch was registered, nor one freed after', needsGc, async () => {
    await leaksAfter(leakStatistics().count, 0, true); // nothing of the earlier test left to finalize
    const before = leakStatistics().count;
    const early = DeviceBuffer.allocate(4096);
    early.free();
    const late = DeviceBuffer.allocate(4096);
    await turn(); // registered at the end of the job
    late.free();
    assert.equal(await leaksAfter(before, 1, true), 0);
  });
});
