/** ArenaResource: model fuzz, pitched blocks, sizing helpers, exhaustion, shutdown. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { getBackend } from '../../src/backend/select.js';
import { Device } from '../../src/device.js';
import { DoubleFreeError, InvalidPointerError, OutOfMemoryError, UseAfterFreeError } from '../../src/errors.js';
import { ArenaResource } from '../../src/resource/suballoc/arena.js';
import { factories, runModel } from '../fuzz/allocator-model.js';

const backend = getBackend();
Device.get(0).makeCurrent();

test('ArenaResource: random allocate/free on 3 streams keeps every invariant', () => {
  const f = factories.find((x) => x.name === 'ArenaResource')!;
  for (const seed of [11, 12, 13]) runModel(f, { seed, ops: 2000 });
});

test('pitched blocks: pitch rounded to the texture pitch alignment, start aligned, random widths', () => {
  using arena = new ArenaResource({ size: 32 * 1024 * 1024 });
  const align = arena.pitchAlignment;
  assert.equal(align, Math.max(256, Device.get(0).info.texturePitchAlignment));
  const blocks: Array<{ ptr: number; pitch: number; h: number }> = [];
  for (let k = 0; k < 50; k++) {
    const w = 1 + ((k * 7919) % 5000);
    const h = 1 + (k % 37);
    const { ptr, pitch } = arena.allocatePitched(w, h);
    assert.equal(pitch % align, 0);
    assert.ok(pitch >= w && pitch < w + align);
    assert.equal(ptr % align, 0);
    for (const b of blocks) assert.ok(ptr + pitch * h <= b.ptr || b.ptr + b.pitch * b.h <= ptr, 'no overlap');
    blocks.push({ ptr, pitch, h });
  }
  for (const b of blocks) arena.deallocatePitched(b.ptr);
  assert.equal(arena.memoryFigures().allocatedBytes.value, 0);
  assert.equal(arena.freeBytes, arena.size, 'everything coalesced back into one range');
});

test('ceil1DVolume / ceil2DVolume size an arena that fits exactly those blocks', () => {
  assert.equal(ArenaResource.ceil1DVolume(1), 256);
  assert.equal(ArenaResource.ceil1DVolume(256), 256);
  assert.equal(ArenaResource.ceil2DVolume(1000, 10, 512), 1024 * 10 + 256);
  const align = Math.max(256, Device.get(0).info.texturePitchAlignment);
  const need = ArenaResource.ceil1DVolume(1000) + ArenaResource.ceil2DVolume(1000, 3, align) + ArenaResource.ceil1DVolume(5000);
  using arena = new ArenaResource({ size: need });
  arena.allocate(1000);
  arena.allocatePitched(1000, 3);
  arena.allocate(5000);
  assert.throws(() => ArenaResource.ceil2DVolume(10, 10, 300), RangeError);
});

test('ceil1DVolume / ceil2DVolume: exact power-of-two checks and a RangeError where the volume leaves 2^53 - 1', () => {
  // Math.log2(2^53 - 1) rounds to 53: it is not a power of two all the same.
  assert.throws(() => ArenaResource.ceil2DVolume(1, 1, 2 ** 53 - 1), /pitchAlignment must be a power of two/);
  assert.throws(() => ArenaResource.ceil2DVolume(1, 1, 2 ** 40 + 1), /pitchAlignment must be a power of two/);
  assert.throws(() => ArenaResource.ceil2DVolume(2 ** 40, 2 ** 20), /ceil2DVolume\(1099511627776, 1048576, 512\): the volume is more than 2\^53 - 1 bytes/);
  assert.throws(() => ArenaResource.ceil2DVolume(2 ** 53 - 1, 1), RangeError);
  assert.throws(() => ArenaResource.ceil1DVolume(2 ** 53 - 1), /ceil1DVolume\(9007199254740991\): the volume is more than 2\^53 - 1 bytes/);
  // At the edge: the largest sizes that stay safe are still answered exactly.
  assert.equal(ArenaResource.ceil1DVolume(2 ** 53 - 256), 2 ** 53 - 256);
  assert.equal(ArenaResource.ceil2DVolume(1, 1, 2 ** 52), 2 ** 52 + 2 ** 52 - 256);
});

test('exhaustion is an OutOfMemoryError naming the arena size and free bytes', () => {
  using arena = new ArenaResource({ size: 1024 * 1024 });
  const a = arena.allocate(600 * 1024);
  assert.throws(
    () => arena.allocate(600 * 1024),
    (e: unknown) =>
      e instanceof OutOfMemoryError &&
      e.requestedBytes === 600 * 1024 &&
      e.message.startsWith(
        `cannot allocate 600 KiB (614400 bytes) from ${arena.describe()}: arena exhausted: ` +
          '424 KiB (434176 bytes) of 1 MiB (1048576 bytes) free, but no free range is large enough',
      ),
  );
  arena.deallocate(a, 600 * 1024);
  arena.deallocate(arena.allocate(1024 * 1024), 1024 * 1024);
});

test('bad input and use after shutdown', () => {
  const before = backend.memGetInfo().free;
  const arena = new ArenaResource({ size: 1024 * 1024 });
  assert.equal(arena.reservedBytes >= 1024 * 1024, true);
  for (const bad of [0, -5, 0.5, NaN]) assert.throws(() => arena.allocate(bad), RangeError);
  assert.throws(() => new ArenaResource({ size: 0 }), RangeError);
  const a = arena.allocate(1000);
  assert.throws(() => arena.deallocate(a, 999), InvalidPointerError);
  assert.throws(() => arena.deallocate(42, 1000), InvalidPointerError);
  arena.deallocate(a, 1000);
  assert.throws(() => arena.deallocate(a, 1000), DoubleFreeError);
  arena.destroy();
  // Exact on the emulated device; a real GPU's free figure moves with the driver's own use.
  if (backend.name === 'emulated') assert.equal(backend.memGetInfo().free, before);
  assert.throws(() => arena.allocate(1), UseAfterFreeError);
  assert.throws(() => arena.deallocate(a, 1000), UseAfterFreeError);
});
