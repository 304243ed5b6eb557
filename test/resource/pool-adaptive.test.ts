/**
 * PoolResource with `extentSize: 'adaptive'` (src/resource/suballoc/kit/adaptive-growth.ts): a
 * growth maps a chunk ahead as one extent while the device has room, only the block's pages (one
 * page an extent) when memory is short, and a growth the driver refuses releases free extents and
 * retries page by page before OutOfMemoryError. Memory is made short with `maximumSize` and the
 * driver's refusals with a wrapped cuMemCreate, so every case runs the same on both backends.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Device } from '../../src/device.js';
import { CudaError, CUresult, OutOfMemoryError } from '../../src/errors.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import type { DriverCalls } from '../../src/resource/figures.js';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import {
  adaptiveChunkPages,
  pressurePages,
  HELD_FRACTION,
  LARGE_BLOCK_SHARE,
  LOW_WATER_FRACTION,
  MAX_CHUNK_BYTES,
  MIN_CHUNK_BYTES,
} from '../../src/resource/suballoc/kit/adaptive-growth.js';
import { createResourceStack } from '../../src/resource/stacks.js';
import { patchBackend } from '../helpers.js';

const MiB = 1024 * 1024;
const device = Device.get(0);
const backend = device.backend;
const page = backend.memGetAllocationGranularity(0);

function calls(pool: PoolResource): DriverCalls {
  return pool.growthFigures().driverCalls;
}

/**
 * Takes the pool to the smallest chunk with one block of that size (one extent of its own pages):
 * below it the policy grows page by page, as the default pool does, and maps nothing ahead.
 */
function warm(pool: PoolResource): number {
  const p = pool.allocate(MIN_CHUNK_BYTES);
  assert.equal(pool.reservedBytes, MIN_CHUNK_BYTES, 'a block of a chunk: its own pages, nothing ahead');
  return p;
}

/**
 * Makes cuMemCreate refuse (CUDA_ERROR_OUT_OF_MEMORY) the sizes `refuse` says: a driver short of
 * physical memory while cuMemGetInfo still shows room (another process took it, or the memory is
 * in pieces).
 */
function refuseCreates(refuse: (bytes: number) => boolean): Disposable {
  return patchBackend(backend, 'memCreate', (create) => (bytes, ordinal) => {
    if (refuse(bytes)) throw new CudaError(CUresult.OUT_OF_MEMORY, 'CUDA_ERROR_OUT_OF_MEMORY', 'cuMemCreate');
    return create(bytes, ordinal);
  });
}

describe("PoolResource extentSize 'adaptive'", () => {
  it('maps a chunk ahead as one extent while the device has room, and grows geometrically', () => {
    using pool = new PoolResource({ extentSize: 'adaptive' });
    const w = warm(pool);
    const a = pool.allocate(MiB);
    assert.deepEqual(calls(pool), { create: 2, map: 2, unmap: 0, setAccess: 2, release: 0 }, 'one growth: one create, map, set-access');
    assert.equal(pool.reservedBytes, 2 * MIN_CHUNK_BYTES, 'the smallest chunk, not the one page the block needs');
    assert.equal(pool.growthFigures().pagesMappedAhead, MIN_CHUNK_BYTES / page - 1);
    const more = Array.from({ length: MIN_CHUNK_BYTES / MiB - 2 }, () => pool.allocate(MiB));
    assert.equal(calls(pool).create, 2, 'later blocks land on the pages mapped ahead: no driver call');
    for (const p of [a, ...more]) pool.deallocate(p, MiB);

    // 512 MiB of one-page blocks: a page-granular pool makes 256 growths; this one a few dozen.
    const blocks = Array.from({ length: 256 }, () => pool.allocate(2 * MiB));
    const c = calls(pool);
    assert.ok(c.create <= 34, `${c.create} growths for 256 pages`);
    assert.equal(c.map, c.create, 'one mapping per extent');
    assert.equal(c.setAccess, c.create, 'one set-access per growth');
    const { reservedBytes } = pool;
    assert.ok(
      reservedBytes - 512 * MiB - MIN_CHUNK_BYTES <= Math.max(MIN_CHUNK_BYTES, reservedBytes / 8),
      `reserved ${reservedBytes} for 528 MiB live: at most one chunk ahead`,
    );
    for (const p of blocks) pool.deallocate(p, 2 * MiB);
    pool.deallocate(w, MIN_CHUNK_BYTES);
  });

  it('a block of half a chunk or more gets an extent of its own pages, nothing ahead', () => {
    using pool = new PoolResource({ extentSize: 'adaptive' });
    const chunk = MIN_CHUNK_BYTES;
    const large = chunk * LARGE_BLOCK_SHARE;
    const w = warm(pool);
    const a = pool.allocate(large);
    assert.equal(pool.reservedBytes - MIN_CHUNK_BYTES, large, "the large block's pages only");
    assert.equal(pool.growthFigures().pagesMappedAhead, 0);
    const b = pool.allocate(large - page); // below the share: a chunk is mapped ahead
    assert.equal(pool.reservedBytes - MIN_CHUNK_BYTES - large, chunk);
    assert.deepEqual([calls(pool).create, calls(pool).map], [3, 3]);
    pool.deallocate(w, MIN_CHUNK_BYTES);
    pool.deallocate(a, large);
    pool.deallocate(b, large - page);
  });

  it('reverts to one-page extents as the maximum nears, and fills it exactly', () => {
    const maximum = 64 * MiB;
    const pages = maximum / page;
    using pool = new PoolResource({ extentSize: 'adaptive', maximumSize: maximum });
    const blocks: Array<[number, number]> = [];
    const steps: Array<{ reserved: number; created: number; grew: number }> = [];
    const allocate = (bytes: number): void => {
      const before = { reserved: pool.reservedBytes, create: calls(pool).create };
      blocks.push([pool.allocate(bytes), bytes]);
      steps.push({ reserved: before.reserved, created: calls(pool).create - before.create, grew: pool.reservedBytes - before.reserved });
    };
    for (let k = 0; k < pages - 6; k++) allocate(page);
    // A block of three pages near the maximum: three one-page extents (pages that can move later), not one.
    allocate(3 * page);
    for (let k = 0; k < 3; k++) allocate(page);
    assert.equal(pool.reservedBytes, maximum, 'every page of the maximum in use, none wasted on a chunk past it');
    const small = steps.filter((s) => s.reserved < MIN_CHUNK_BYTES);
    for (const s of small) assert.equal(s.grew, page, `at ${s.reserved} bytes, below the smallest chunk: page by page`);
    const early = steps.filter(
      (s) => s.created > 0 && s.reserved >= MIN_CHUNK_BYTES && s.reserved + page <= (maximum * (1 - LOW_WATER_FRACTION)) / (1 + HELD_FRACTION),
    );
    assert.ok(early.length > 0 && early.every((s) => s.grew > page), 'with room, each growth mapped a chunk');
    const late = steps.filter((s) => s.reserved >= maximum * (1 - LOW_WATER_FRACTION));
    for (const s of late) assert.equal(s.created * page, s.grew, `at ${s.reserved} bytes: one extent per page, nothing ahead`);
    assert.deepEqual(
      late.map((s) => s.created),
      [1, 1, 3, 1, 1, 1],
      'the last quarter: pages 24 to 31',
    );
    assert.throws(
      () => pool.allocate(page),
      (e: unknown) => e instanceof OutOfMemoryError && e.reason === 'maximum',
    );
    for (const [p, bytes] of blocks) pool.deallocate(p, bytes);
  });

  it('under pressure creates the pages the maximum still allows instead of moving cached ones, then moves', () => {
    // Twelve pages: below eight the pool grows page by page (a small pool), from eight on memory is short.
    const maximum = 12 * page;
    using pool = new PoolResource({ extentSize: 'adaptive', maximumSize: maximum });
    const ones: number[] = [];
    for (let k = 0; k < 8; k++) ones.push(pool.allocate(page));
    // Every other page idle: four cached pages, none two in a row, so a three-page block has no place on mapped pages.
    for (let k = 0; k < 8; k += 2) pool.deallocate(ones[k]!, page);
    assert.equal(pool.reservedBytes, 8 * page);
    let before = { ...calls(pool), moves: pool.growthFigures().pageMoves };
    const three = pool.allocate(3 * page);
    let after = calls(pool);
    assert.equal(pool.growthFigures().pageMoves - before.moves, 0, 'the maximum leaves room: nothing moved');
    assert.equal(after.create - before.create, 3, 'three pages created, one extent each');
    assert.equal(after.unmap - before.unmap, 0);
    assert.equal(pool.reservedBytes, 11 * page);
    // The room runs out: the one page the maximum still allows is created, the other moved from an idle page.
    before = { ...after, moves: pool.growthFigures().pageMoves };
    const two = pool.allocate(2 * page);
    after = calls(pool);
    assert.equal(after.create - before.create, 1, 'the page left under the maximum, created');
    assert.equal(pool.growthFigures().pageMoves - before.moves, 1, 'the other moved from an idle page');
    assert.equal(pool.reservedBytes, maximum);
    pool.deallocate(three, 3 * page);
    pool.deallocate(two, 2 * page);
    for (let k = 1; k < 8; k += 2) pool.deallocate(ones[k]!, page);
  });

  it('a growth the driver refuses is retried one page an extent, with nothing mapped ahead', () => {
    using pool = new PoolResource({ extentSize: 'adaptive' });
    const w = warm(pool);
    {
      using _ = refuseCreates((bytes) => bytes > page); // the driver has only one-page pieces left
      const p = pool.allocate(MiB);
      assert.equal(pool.growthFigures().compactions, 1);
      assert.equal(pool.reservedBytes - MIN_CHUNK_BYTES, page, "the block's own page");
      assert.equal(pool.growthFigures().pagesMappedAhead, 0);
      pool.deallocate(p, MiB);
    }
    // With the driver whole again, the next growth maps a chunk ahead again.
    const q = pool.allocate(4 * MiB);
    assert.ok(pool.reservedBytes - MIN_CHUNK_BYTES > 4 * MiB + page);
    pool.deallocate(q, 4 * MiB);
    pool.deallocate(w, MIN_CHUNK_BYTES);
  });

  it('a growth refused after free extents went back is retried page by page; live data stays', () => {
    using pool = new PoolResource({ extentSize: 'adaptive' });
    const chunk = MIN_CHUNK_BYTES;
    // Two chunks: the first wholly free, the second holding a live block with known data.
    const first = DeviceBuffer.allocate(chunk, { resource: pool });
    using kept = DeviceBuffer.allocate(page, { resource: pool });
    kept.copyFromHost(new Uint8Array(page).fill(0x5a));
    assert.equal(pool.reservedBytes, chunk + MIN_CHUNK_BYTES);
    first.free();
    device.synchronize();
    // The driver has room for the pool's memory and one page more, in one-page pieces.
    const budget = pool.reservedBytes + page;
    using _ = refuseCreates((bytes) => bytes > page || pool.reservedBytes + bytes > budget);
    const big = pool.allocate(chunk + 2 * page); // fits neither the free chunk's addresses nor the rest of the second
    const s = pool.growthFigures();
    assert.ok(pool.reservedBytes <= budget, `reserved ${pool.reservedBytes} within the ${budget} bytes the driver had`);
    assert.ok(s.driverCalls.release >= 1, 'the free extent went back to the driver');
    assert.equal(s.compactions, 1);
    const data = kept.copyToHost(new Uint8Array(page));
    assert.equal(
      data.findIndex((b) => b !== 0x5a),
      -1,
      "the live block's data is where it was",
    );
    pool.deallocate(big, chunk + 2 * page);
  });

  it('a refusal that compaction cannot cure is OutOfMemoryError, and the pool is as it was', () => {
    using pool = new PoolResource({ extentSize: 'adaptive' });
    const p = pool.allocate(MiB);
    const reserved = pool.reservedBytes;
    {
      using _ = refuseCreates(() => true);
      assert.throws(
        () => pool.allocate(MIN_CHUNK_BYTES * 2),
        (e: unknown) => e instanceof OutOfMemoryError && e.reason === 'device',
      );
    }
    assert.equal(pool.reservedBytes, reserved, 'the chunk holding a live block stays; nothing else was held');
    pool.deallocate(p, MiB);
  });

  it("reads the device's free memory on the growth path only, never on a hit", () => {
    using pool = new PoolResource({ extentSize: 'adaptive' });
    let reads = 0;
    const memInfo = device.memInfo;
    device.memInfo = function (this: Device) {
      reads++;
      return memInfo.call(this);
    };
    try {
      const w = warm(pool);
      pool.deallocate(pool.allocate(MiB), MiB);
      assert.equal(reads, 2, 'two growths, one read each');
      for (let k = 0; k < 1000; k++) pool.deallocate(pool.allocate(((k % 7) + 1) * MiB), ((k % 7) + 1) * MiB);
      assert.equal(reads, 2, 'hits read nothing');
      pool.deallocate(w, MIN_CHUNK_BYTES);
    } finally {
      delete (device as Partial<Device>).memInfo;
    }
  });

  it('the policy: chunks between the smallest and the largest, page granularity below the thresholds', () => {
    const P = 2 * MiB;
    const GiB = 1024 * MiB;
    const plenty = { pageBytes: P, freeBytes: 70 * GiB, totalBytes: 80 * GiB, maximumBytes: Infinity };
    assert.equal(adaptiveChunkPages({ ...plenty, heldPages: 0, blockPages: 1 }), -1, 'below the smallest chunk: page by page');
    assert.equal(adaptiveChunkPages({ ...plenty, heldPages: 0, blockPages: MIN_CHUNK_BYTES / P }), MIN_CHUNK_BYTES / P, 'a block of a chunk: its own extent');
    assert.equal(adaptiveChunkPages({ ...plenty, heldPages: MIN_CHUNK_BYTES / P, blockPages: 1 }), MIN_CHUNK_BYTES / P);
    assert.equal(adaptiveChunkPages({ ...plenty, heldPages: 2048, blockPages: 1 }), 64, 'a thirty-second of 4 GiB held');
    assert.equal(adaptiveChunkPages({ ...plenty, heldPages: 10240, blockPages: 1 }), MAX_CHUNK_BYTES / P);
    assert.equal(adaptiveChunkPages({ ...plenty, heldPages: 0, blockPages: 500 }), 500, 'never less than the block');
    // The same on a device sized as vram replay sizes it for a trace of 5 GiB peak live: 11 GiB.
    const emulated = { ...plenty, totalBytes: 11 * GiB };
    for (const held of [0, 512, 1024, 2600]) {
      assert.equal(
        adaptiveChunkPages({ ...emulated, freeBytes: 11 * GiB - held * P, heldPages: held, blockPages: 1 }),
        adaptiveChunkPages({ ...plenty, freeBytes: 79 * GiB - held * P, heldPages: held, blockPages: 1 }),
        `held ${held} pages`,
      );
    }
    assert.equal(adaptiveChunkPages({ ...plenty, freeBytes: 19 * GiB, heldPages: 0, blockPages: 1 }), -1, 'under a quarter of the device left');
    assert.equal(adaptiveChunkPages({ ...plenty, freeBytes: 25 * GiB, heldPages: 30 * 1024, blockPages: 1 }), -1, 'less free than half of what the pool holds');
    assert.equal(adaptiveChunkPages({ ...plenty, maximumBytes: 64 * MiB, heldPages: 24, blockPages: 1 }), -1, 'near the maximum');
  });

  it('the pressure rule: the room left under pressure, nothing with plenty', () => {
    const P = 2 * MiB;
    const GiB = 1024 * MiB;
    const plenty = { pageBytes: P, freeBytes: 70 * GiB, totalBytes: 80 * GiB, maximumBytes: Infinity };
    assert.equal(pressurePages({ ...plenty, heldPages: 0, blockPages: 1 }), 0, 'a small pool with room moves pages (its peak stays near live)');
    assert.equal(pressurePages({ ...plenty, heldPages: 512, blockPages: 1 }), 0, 'chunks ahead, no pressure');
    assert.equal(pressurePages({ ...plenty, freeBytes: 1 * GiB, heldPages: 512, blockPages: 1 }), 512, 'a device nearly full: all its free pages');
    assert.equal(pressurePages({ ...plenty, freeBytes: 1 * GiB + P - 1, heldPages: 512, blockPages: 1 }), 512, 'whole pages only');
    assert.equal(pressurePages({ ...plenty, maximumBytes: 64 * MiB, heldPages: 24, blockPages: 1 }), 8, 'near the maximum: what it still allows');
    assert.equal(pressurePages({ ...plenty, maximumBytes: 64 * MiB, heldPages: 32, blockPages: 1 }), 0, 'at the maximum');
  });

  it('the adaptive stack and VRAM_ALLOCATOR=adaptive build it', () => {
    const stack = createResourceStack('adaptive', { device: 0 });
    assert.equal(stack.resource.describe(), 'PoolResource(virtual, device=0, extents=adaptive)');
    assert.equal(stack.pool, stack.resource);
    stack.destroy();
    assert.throws(
      () => new PoolResource({ extentSize: 'adaptve' as 'adaptive' }),
      (e: unknown) => e instanceof RangeError && /extentSize must be a size .*, Infinity or 'adaptive'; got 'adaptve'/.test(e.message),
    );
  });
});
