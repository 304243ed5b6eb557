/**
 * Stream order of the caching resources, checked on the data with a stream held back on the
 * device (cuStreamWaitValue32 on a word of mapped pinned memory, released by a host write): work
 * queued on the held stream has certainly not run when another stream gets the memory, so if the
 * resource forgot to make that stream wait, the held stream's late write shows in the readback.
 * Held work is never synchronised on (that would hang a GPU): every hold is released in `finally`
 * before any synchronisation.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { HostAllocFlags, StreamWaitValueFlags, type Ptr } from '../../src/backend/backend.js';
import { Device } from '../../src/device.js';
import { ArenaResource } from '../../src/resource/suballoc/arena.js';
import { FixedSizeResource } from '../../src/resource/suballoc/fixed-size.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import type { MemoryResource } from '../../src/resource/resource.js';
import { Stream } from '../../src/stream.js';
import { underSanitizer } from '../helpers.js';

const device = Device.get(0);
device.makeCurrent();
const backend = device.backend;
const KiB = 1024;

/** A word of mapped pinned memory that held streams wait on; the host sets it to release them. */
const flagHost = backend.memHostAlloc(4 * KiB, HostAllocFlags.DEVICEMAP | HostAllocFlags.PORTABLE);
const flagDevice = backend.memHostGetDevicePointer(flagHost);
const flag = new Uint32Array(backend.hostView(flagHost, 4 * KiB), 0, 1);
after(() => backend.memFreeHost(flagHost));

/** Runs `body` with stream `held` stopped until `body` returns (or throws). */
function whileHeld(held: Stream, body: () => void): void {
  flag[0] = 0;
  backend.streamWaitValue32(held.handle, flagDevice, 1, StreamWaitValueFlags.GEQ);
  try {
    body();
  } finally {
    flag[0] = 1;
  }
}

/** Every byte of [ptr, ptr + bytes) after both streams finished. */
function readBack(ptr: Ptr, bytes: number, ...streams: Stream[]): Uint8Array {
  for (const s of streams) s.synchronize();
  const out = new Uint8Array(bytes);
  backend.memcpyToHost(out, ptr, bytes);
  return out;
}

function assertAll(bytes: Uint8Array, value: number, what: string): void {
  const bad = bytes.findIndex((b) => b !== value);
  assert.equal(bad, -1, `${what}: byte ${bad} is 0x${bytes[bad]?.toString(16)}, expected 0x${value.toString(16)}`);
}

/**
 * Stream b, held, writes a block and frees it (and, with `destroyB`, is destroyed); stream a gets
 * the same block and writes its own pattern, which must be what remains once b is released.
 */
function handOver(make: () => MemoryResource, destroyB: boolean): void {
  const mr = make();
  const bytes = 1 << 20;
  using a = Stream.create({ nonBlocking: true });
  const b = Stream.create({ nonBlocking: true });
  const p = mr.allocate(bytes, b);
  let q = 0;
  try {
    whileHeld(b, () => {
      backend.memsetAsync(p, 0xbb, 1, bytes, b.handle);
      mr.deallocate(p, bytes, b);
      if (destroyB) b.destroy(); // its work still runs later; its handle must never be used again
      q = mr.allocate(bytes, a);
      assert.equal(q, p, 'the freed block is the one reused');
      backend.memsetAsync(q, 0xaa, 1, bytes, a.handle);
    });
    assertAll(readBack(q, bytes, ...(destroyB ? [a] : [a, b])), 0xaa, "the new owner's data");
  } finally {
    if (!b.destroyed) b.destroy();
  }
  mr.deallocate(q, bytes, a);
  const upstream = mr.upstream;
  mr.destroy();
  upstream?.destroy();
}

// Under compute-sanitizer memcheck (H100, 2026-11-23) this file did not finish within 240 s, while
// every other file passed: its streams wait (cuStreamWaitValue32) on a word the host writes later.
const notUnderSanitizer = { skip: underSanitizer ? 'streams held by cuStreamWaitValue32 do not finish under compute-sanitizer' : false } as const;

describe('stream order, checked with a held stream', notUnderSanitizer, () => {
  it('FixedSizeResource.releaseCached returns a chunk only after every stream that freed a block in it', () => {
    const blockSize = 64 * KiB;
    const chunk = 4 * blockSize;
    // An arena of exactly one chunk, so the next allocation from it must be that chunk's memory.
    using arena = new ArenaResource({ size: chunk });
    using a = Stream.create({ nonBlocking: true });
    using b = Stream.create({ nonBlocking: true });
    const fixed = new FixedSizeResource(arena, { blockSize, blocksToPreallocate: 4 });
    const onA = fixed.allocate(blockSize, a);
    const onB = fixed.allocate(blockSize, b);
    let reused = 0;
    whileHeld(b, () => {
      backend.memsetAsync(onB, 0xbb, 1, blockSize, b.handle); // runs only when b is released
      fixed.deallocate(onB, blockSize, b);
      fixed.deallocate(onA, blockSize, a);
      assert.equal(fixed.releaseCached(), chunk);
      reused = arena.allocate(chunk, a);
      backend.memsetAsync(reused, 0xaa, 1, chunk, a.handle); // must wait for b's write
    });
    assertAll(readBack(reused, chunk, a, b), 0xaa, "the new owner's data");
    arena.deallocate(reused, chunk, a);
    fixed.destroy();
  });

  for (const [name, make] of [
    ['PoolResource', (): MemoryResource => new PoolResource()],
    ['ArenaResource', (): MemoryResource => new ArenaResource({ size: 4 << 20 })],
    ['FixedSizeResource', (): MemoryResource => new FixedSizeResource(new ArenaResource({ size: 4 << 20 }), { blockSize: 1 << 20, blocksToPreallocate: 4 })],
  ] as const) {
    it(`${name}: a block freed on a held stream is reused on another stream only after it`, () => {
      handOver(make, false);
    });

    it(`${name}: blocks freed on a stream destroyed while held are handed over after its last work`, () => {
      handOver(make, true);
    });
  }
});
