/**
 * Spilling without waiting in series (issue 22's speed work), on both backends with a small device:
 * the physical memory a spill unmaps is mapped again by the next reload of its size (no cuMemCreate
 * once the working set has cycled); once spilling has started, a reload queues the next victim's
 * copy out before its own copy in, so reloads find room without spilling on demand; a buffer used
 * while its spill is queued keeps its pages and its data; random orders of writes, reads, kernel
 * passes and leases keep every buffer's bytes (checked after every operation, so after every reload).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { spillableResource, spillFigures } from '../../src/buffer/spill/spill-manager.js';
import { Device } from '../../src/device.js';
import { Module } from '../../src/kernels/module.js';
import { onGpu, patchBackend, withDeviceRoom } from '../helpers.js';
import { ADD_BYTES_SOURCE, addBytes, byteOf, CHUNK } from './spill-kit.js';
import { Stream } from '../../src/stream.js';

const device = Device.get(0);

/** Counts cuMemCreate calls on the device's backend while it lives. */
function countCreates(): { readonly count: number } & Disposable {
  const counter = { count: 0 };
  const patch = patchBackend(device.backend, 'memCreate', (create) => (bytes, ordinal) => {
    counter.count++;
    return create(bytes, ordinal);
  });
  return Object.assign(counter, { [Symbol.dispose]: () => patch[Symbol.dispose]() });
}

describe('spilling ahead', () => {
  it('maps the physical memory a spill gave back for the next reload of its size: a second cycle creates none', () => {
    using stream = Stream.create();
    withDeviceRoom(4 * CHUNK, () => {
      const buffers = Array.from({ length: 5 }, () => DeviceBuffer.allocate(CHUNK, { spillable: true, stream }));
      try {
        buffers.forEach((b, i) => b.memset(i, { stream }));
        using creates = countCreates();
        for (let round = 0; round < 2; round++) {
          for (const b of buffers) b.memset(1, { stream, count: 1 }); // each use reloads: five buffers, room for four
        }
        assert.ok(spillFigures(device).reloads > 0, 'buffers came back');
        assert.equal(creates.count, 0, 'every reload mapped memory a spill had unmapped');
        buffers.forEach((b, i) => {
          stream.synchronize();
          const bytes = b.copyToHost(new Uint8Array(2), { bytes: 2 });
          assert.deepEqual(Array.from(bytes), [1, i]);
        });
      } finally {
        for (const b of buffers) b.free();
      }
      const mr = spillableResource();
      mr.releaseCached();
      assert.equal(mr.spareBytes, 0, 'releaseCached gives the spare memory back');
      assert.equal(mr.memoryFigures().reservedBytes, mr.memoryFigures().allocatedBytes.value);
    });
  });

  it('once spilling has started, reloads find room queued ahead: nothing is spilled on demand', () => {
    using module = Module.compile(ADD_BYTES_SOURCE, { emulated: { add_bytes: addBytes } });
    const kernel = module.kernel('add_bytes', ['ptr', 'u32'] as const);
    using stream = Stream.create();
    withDeviceRoom(10 * CHUNK, () => {
      const count = 14;
      const buffers = Array.from({ length: count }, () => DeviceBuffer.allocate(CHUNK, { spillable: true, stream }));
      try {
        buffers.forEach((b) => b.memset(0, { stream }));
        const pass = (): void => {
          for (const b of buffers) kernel.launch({ grid: CHUNK / 256, block: 256, stream }, b, CHUNK);
        };
        pass(); // spilling starts
        const start = spillFigures(device);
        pass();
        pass();
        const end = spillFigures(device);
        const reloads = end.reloads - start.reloads;
        const spills = end.spilledBuffers.total - start.spilledBuffers.total;
        const ahead = end.spilledAhead - start.spilledAhead;
        assert.equal(reloads, 2 * count, 'every use found its buffer spilled (least recently used order)');
        assert.ok(ahead >= reloads - 1, `${ahead} spills queued ahead for ${reloads} reloads`);
        // A spill queued ahead finishes at a later entry of the manager: at most one either side.
        assert.ok(Math.abs(spills - ahead) <= 1, `${spills} spills, ${ahead} of them queued ahead`);
        assert.equal(end.cancelledSpills, start.cancelledSpills);
        // The emulated device runs a stream's work when it is queried, so nothing is ever waited
        // for; a GPU may still be copying when the next reload needs the memory.
        if (!onGpu) assert.equal(end.hostWaits - start.hostWaits, 0, 'no host wait for a copy out');
        buffers.forEach((b, i) => assert.equal(byteOf(b, stream), 3, `buffer ${i}`));
      } finally {
        for (const b of buffers) b.free();
      }
    });
  });

  it('a buffer used while its spill is queued keeps its pages and its data (written or only read)', () => {
    using stream = Stream.create();
    withDeviceRoom(10 * CHUNK, () => {
      const buffers = Array.from({ length: 10 }, (_, i) => {
        const b = DeviceBuffer.allocate(CHUNK, { spillable: true });
        b.memset(i);
        return b;
      });
      try {
        const start = spillFigures(device);
        // No room: buffer 0 is spilled now, and buffer 1's spill is queued ahead.
        buffers.push(DeviceBuffer.allocate(CHUNK, { spillable: true }));
        assert.equal(buffers[0]!.resident, false);
        const queued = spillFigures(device);
        assert.equal(queued.spilledAhead - start.spilledAhead, 1, 'one spill queued ahead');
        buffers[1]!.memset(11); // written while its copy out is queued
        assert.equal(spillFigures(device).cancelledSpills - queued.cancelledSpills, 1, 'the spill was cancelled');
        assert.equal(buffers[1]!.resident, true);
        // Again: buffer 2 spilled now, buffer 3 queued, then only read.
        buffers.push(DeviceBuffer.allocate(CHUNK, { spillable: true }));
        assert.equal(buffers[2]!.resident, false);
        assert.equal(buffers[3]!.copyToHost(new Uint8Array(1), { bytes: 1 })[0], 3);
        assert.equal(buffers[3]!.resident, true);
        for (const b of buffers.slice(10)) b.memset(20);
        // Everything that may go goes; buffer 3, read only since its copy out, needs no copy.
        const before = spillFigures(device);
        spillableResource().releaseCached();
        const after = spillFigures(device);
        assert.equal(buffers[3]!.resident, false);
        const spilled = after.spilledBuffers.total - before.spilledBuffers.total;
        assert.equal(after.copiesOut - before.copiesOut, spilled - 1, "every spill but buffer 3's copied");
        const expected = [0, 11, 2, 3, 4, 5, 6, 7, 8, 9, 20, 20];
        buffers.forEach((b, i) => assert.equal(byteOf(b, stream), expected[i], `buffer ${i}`));
      } finally {
        for (const b of buffers) b.free();
      }
    });
  });

  it("random orders of writes, reads, kernel passes and leases keep every buffer's bytes, checked after each", () => {
    using module = Module.compile(ADD_BYTES_SOURCE, { emulated: { add_bytes: addBytes } });
    const kernel = module.kernel('add_bytes', ['ptr', 'u32'] as const);
    using stream = Stream.create();
    const count = 12;
    const op = fc.record({
      index: fc.nat(count - 1),
      kind: fc.constantFrom('fill', 'kernel', 'read', 'lease'),
      value: fc.nat(255),
    });
    fc.assert(
      fc.property(fc.array(op, { minLength: 1, maxLength: 30 }), (ops) => {
        withDeviceRoom(9 * CHUNK, () => {
          const buffers: DeviceBuffer[] = [];
          const model: number[] = [];
          try {
            for (let i = 0; i < count; i++) {
              const b = DeviceBuffer.allocate(CHUNK, { spillable: true, stream });
              b.memset(i, { stream });
              buffers.push(b);
              model.push(i);
            }
            for (const { index, kind, value } of ops) {
              const b = buffers[index]!;
              if (kind === 'fill') {
                b.memset(value, { stream });
                model[index] = value;
              } else if (kind === 'kernel') {
                kernel.launch({ grid: CHUNK / 256, block: 256, stream }, b, CHUNK);
                model[index] = (model[index]! + 1) & 0xff;
              } else if (kind === 'lease') {
                using lease = b.lease({ stream, readOnly: true });
                assert.equal(lease.ptr, b.ptr);
              }
              assert.equal(byteOf(b, stream), model[index], `buffer ${index} after ${kind}`);
            }
            buffers.forEach((b, i) => assert.equal(byteOf(b, stream), model[i], `buffer ${i} at the end`));
          } finally {
            for (const b of buffers) b.free();
          }
        });
      }),
      { numRuns: 12, seed: 22 },
    );
  });
});
