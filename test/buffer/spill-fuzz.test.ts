/**
 * The data-checking fuzz with spilling: spillable buffers written on several streams (the legacy
 * default stream, a blocking and two non-blocking streams) by fills and buffer-to-buffer copies,
 * handed between streams with events as a program must, and spilled at random points (a squeeze:
 * a new spillable allocation that pushes the least recently used out; or every buffer that may go,
 * as a driver refusal anywhere on the device does). Every buffer's bytes are modelled on the host;
 * a buffer is checked after every reload and at random, all of them at the end. On the emulated
 * backend a stream's queued work runs only when something waits for it, so a copy out queued
 * before the work that wrote the buffer, or a reload queued after the work that reads it, shows as
 * stale bytes here.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { spillableResource, spillFigures } from '../../src/buffer/spill/spill-manager.js';
import { Device } from '../../src/device.js';
import { withDeviceRoom } from '../helpers.js';
import { Event, Stream } from '../../src/stream.js';
import type { MemoryResource } from '../../src/resource/resource.js';
import type { StreamRef } from '../../src/stream.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';
import { mulberry32 } from '../../src/util/random.js';

const device = Device.get(0);
const CHUNK = 2 << 20;

interface Block {
  readonly buffer: DeviceBuffer;
  readonly model: Uint8Array;
  owner: StreamRef;
}

/** One fuzz run; spillable memory from `resource` where given (it moves on reload), else at fixed addresses. */
function run(seed: number, steps: number, resource?: MemoryResource): void {
  const random = mulberry32(seed);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!;
  const streams: Stream[] = [Stream.create(), Stream.create({ nonBlocking: true }), Stream.create({ nonBlocking: true })];
  const refs: StreamRef[] = [{ handle: 0 }, ...streams];
  const blocks: Block[] = [];
  // The squeezes' own stream: their frees are collected by an event query, which on the emulated
  // backend runs the queried stream's work; a stream of their own keeps the others' work queued.
  const squeezes = Stream.create({ nonBlocking: true });
  const where = (step: number, what: string): string => `seed ${seed}, step ${step}: ${what}`;
  /** Makes `to` wait for the work queued on `from` so far (an event, as a program hands memory over). */
  const handOver = (from: StreamRef, to: StreamRef): void => {
    if (from === to) return;
    const event = Event.create({ timing: false });
    event.record(from);
    (to instanceof Stream ? to : Stream.default(device)).waitEvent(event);
    event.destroy();
  };
  const check = (block: Block, step: number, why: string): void => {
    // The owner's work first: a synchronous copy waits only for the legacy stream.
    // Never the whole device: work other streams left queued must stay queued.
    (block.owner instanceof Stream ? block.owner : Stream.default(device)).synchronize();
    const bytes = block.buffer.copyToHost(new Uint8Array(block.model.length));
    if (Buffer.compare(bytes, block.model) !== 0) {
      const at = bytes.findIndex((b, i) => b !== block.model[i]);
      assert.fail(where(step, `${why}: byte ${at} is ${bytes[at]}, expected ${block.model[at]}`));
    }
  };
  try {
    for (let i = 0; i < 10; i++) {
      const bytes = CHUNK - Math.floor(random() * 4) * 256;
      const owner = pick(refs);
      const buffer = DeviceBuffer.allocate(bytes, { spillable: true, stream: owner, ...(resource !== undefined ? { resource } : {}) });
      const value = i + 1;
      buffer.memset(value, { stream: owner });
      blocks.push({ buffer, model: new Uint8Array(bytes).fill(value), owner });
    }
    for (let step = 0; step < steps; step++) {
      const roll = random();
      const block = pick(blocks);
      const wasResident = block.buffer.resident;
      if (roll < 0.3) {
        const value = Math.floor(random() * 256);
        const offset = Math.floor(random() * block.model.length);
        const count = Math.floor(random() * (block.model.length - offset));
        block.buffer.memset(value, { offset, count, stream: block.owner });
        block.model.fill(value, offset, offset + count);
      } else if (roll < 0.5) {
        const src = pick(blocks);
        if (src === block) continue;
        const bytes = Math.min(src.model.length, block.model.length) - Math.floor(random() * 1024);
        handOver(src.owner, block.owner);
        block.buffer.copyFrom(src.buffer, { bytes, stream: block.owner });
        // The source is read on the destination's stream: it must not be reused before that.
        handOver(block.owner, src.owner);
        block.model.set(src.model.subarray(0, bytes));
      } else if (roll < 0.62) {
        const to = pick(refs);
        handOver(block.owner, to);
        block.owner = to;
      } else if (roll < 0.75) {
        DeviceBuffer.allocate(CHUNK, { spillable: true, stream: squeezes }).free();
      } else if (roll < 0.8) {
        spillableResource().releaseCached();
      } else if (roll < 0.83) {
        check(block, step, 'a random check');
      }
      if (!wasResident && block.buffer.resident) check(block, step, 'after a reload');
    }
    for (const [i, block] of blocks.entries()) check(block, steps, `the final check of block ${i}`);
  } finally {
    for (const block of blocks) block.buffer.free({ stream: block.owner });
    for (const s of streams) s.destroy();
    squeezes.destroy();
  }
}

it("spilling at random points keeps every buffer's bytes, on four streams", () => {
  const before = spillFigures(device);
  withDeviceRoom(6 * CHUNK, () => {
    for (const seed of [1, 2, 3, 4]) run(seed, 160);
  });
  const after = spillFigures(device);
  assert.ok(after.spilledBuffers.total - before.spilledBuffers.total > 20, 'the runs spilled');
  assert.ok(after.reloads - before.reloads > 20, 'and reloaded');
});

it("spilling ahead (VRAM_SPILL_AHEAD: copies out queued early, cancelled by a use) keeps every buffer's bytes, on four streams", () => {
  const before = spillFigures(device);
  const ahead = process.env.VRAM_SPILL_AHEAD;
  process.env.VRAM_SPILL_AHEAD = String(2 * CHUNK); // the default needs eight buffers of room; this room holds six
  try {
    withDeviceRoom(6 * CHUNK, () => {
      for (const seed of [5, 6]) run(seed, 160);
    });
  } finally {
    if (ahead === undefined) delete process.env.VRAM_SPILL_AHEAD;
    else process.env.VRAM_SPILL_AHEAD = ahead;
  }
  const after = spillFigures(device);
  assert.ok(after.spilledAhead - before.spilledAhead > 10, 'spills were queued ahead');
  assert.ok(after.reloads - before.reloads > 10, 'and buffers reloaded');
});

it("spillable memory that moves (from a CudaResource) keeps every buffer's bytes, on four streams", () => {
  using resource = new CudaResource(device);
  const before = spillFigures(device);
  withDeviceRoom(6 * CHUNK, () => {
    for (const seed of [7, 8]) run(seed, 160, resource);
  });
  const after = spillFigures(device);
  assert.ok(after.reloads - before.reloads > 10, 'buffers reloaded');
});
