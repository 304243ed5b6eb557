/**
 * Spillable memory from a resource without virtual memory (`CudaResource`, `AsyncResource`), on
 * both backends with a small device: such a buffer comes back at a new address, allocated from its
 * resource on the stream of the use. vram's copies, fills and kernel launches follow it (the data
 * checks), `buffer.ptr` read after a reload is the new address, a lease keeps the memory (so the
 * address) put, and a buffer freed while spilled gives its resource nothing twice.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { spillFigures } from '../../src/buffer/spill/spill-manager.js';
import { Device } from '../../src/device.js';
import { Module } from '../../src/kernels/module.js';
import type { MemoryResource } from '../../src/resource/resource.js';
import { AsyncResource } from '../../src/resource/upstream/async-resource.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';
import { mulberry32 } from '../../src/util/random.js';
import { onGpu, withDeviceRoom } from '../helpers.js';
import { ADD_BYTES_SOURCE, addBytes, byteOf, CHUNK } from './spill-kit.js';
import { Stream } from '../../src/stream.js';

const device = Device.get(0);

const resources: Array<[string, () => MemoryResource]> = [
  ['CudaResource', () => new CudaResource(device)],
  ['AsyncResource', () => new AsyncResource({ device })],
];

describe('spillable memory whose address moves', () => {
  for (const [name, make] of resources) {
    it(`${name}: twice the room touched in random order by fills, copies and kernels keeps every buffer's bytes at its new address`, () => {
      using module = Module.compile(ADD_BYTES_SOURCE, { emulated: { add_bytes: addBytes } });
      const kernel = module.kernel('add_bytes', ['ptr', 'u32'] as const);
      using stream = Stream.create();
      using resource = make();
      const before = spillFigures(device);
      withDeviceRoom(8 * CHUNK, () => {
        const count = 16;
        const buffers: DeviceBuffer[] = [];
        const model: number[] = [];
        const first: number[] = [];
        try {
          for (let i = 0; i < count; i++) {
            const b = DeviceBuffer.allocate(CHUNK, { spillable: true, resource, stream });
            b.memset(i, { stream });
            buffers.push(b);
            model.push(i);
            first.push(b.ptr);
          }
          assert.equal(buffers[0]!.resource, resource, 'the buffer names the resource its memory comes from');
          const random = mulberry32(2222);
          for (let step = 0; step < 80; step++) {
            const i = Math.floor(random() * count);
            const b = buffers[i]!;
            const what = random();
            if (what < 0.4) {
              kernel.launch({ grid: CHUNK / 256, block: 256, stream }, b, CHUNK);
              model[i] = (model[i]! + 1) & 0xff;
            } else if (what < 0.7) {
              const j = (i + 1 + Math.floor(random() * (count - 1))) % count;
              b.copyFrom(buffers[j]!, { stream }); // both may come back, the second moving the first's room
              model[i] = model[j]!;
            } else {
              b.memset(step & 0xff, { stream });
              model[i] = step & 0xff;
            }
            assert.equal(byteOf(b, stream), model[i], `step ${step}: buffer ${i}`);
          }
          buffers.forEach((b, i) => assert.equal(byteOf(b, stream), model[i], `buffer ${i} at the end`));
          const moved = buffers.filter((b, i) => b.ptr !== first[i]).length;
          // CUDA's pool may give a reload the very range its buffer left (it did on an H100: every
          // buffer came back where it was), so a move is asserted where the allocator is the model's.
          if (!onGpu || name === 'CudaResource') assert.ok(moved > 0, 'some buffer came back at another address');
        } finally {
          for (const b of buffers) b.free();
        }
      });
      const after = spillFigures(device);
      assert.ok(after.reloads > before.reloads, 'buffers came back');
      stream.synchronize();
      assert.equal(resource.memoryFigures()?.allocatedBytes.value, 0, 'every block went back once, spilled or not');
    });
  }

  it('a lease keeps a buffer (so its address) put; ptr read after a reload is the new address', () => {
    using resource = new CudaResource(device);
    withDeviceRoom(4 * CHUNK, () => {
      const held = DeviceBuffer.allocate(CHUNK, { spillable: true, resource });
      const others: DeviceBuffer[] = [];
      try {
        held.memset(7);
        const lease = held.lease();
        const address = lease.ptr;
        for (let i = 0; i < 6; i++) {
          const b = DeviceBuffer.allocate(CHUNK, { spillable: true, resource });
          b.memset(i);
          others.push(b);
        }
        assert.equal(held.resident, true, 'leased, it stays');
        assert.equal(held.ptr, address);
        lease.release();
        for (const b of others) b.memset(1);
        assert.equal(held.resident, false, 'released, it may go');
        using again = held.lease({ readOnly: true });
        assert.equal(held.resident, true);
        assert.equal(again.ptr, held.ptr, 'the lease gives the address it came back at');
        assert.equal(held.copyToHost(new Uint8Array(1), { bytes: 1 })[0], 7);
      } finally {
        for (const b of [held, ...others]) b.free();
      }
    });
  });
});
