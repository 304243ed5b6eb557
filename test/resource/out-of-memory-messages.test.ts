/**
 * Out-of-memory messages in one form, whichever resource runs out: `cannot allocate <request in
 * binary units> (<exact bytes>) from <describe()>: <why>`, the request always named. Runs on the
 * emulated backend and, unchanged, on a GPU (a petabyte is more than either device has).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Device } from '../../src/device.js';
import { OutOfMemoryError } from '../../src/errors.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';
import { AsyncResource } from '../../src/resource/upstream/async-resource.js';
import { ArenaResource } from '../../src/resource/suballoc/arena.js';
import { FixedSizeResource } from '../../src/resource/suballoc/fixed-size.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import { LimitingAdaptor } from '../../src/resource/adaptors/limiting.js';
import { RetryOnOutOfMemory } from '../../src/resource/adaptors/retry-on-oom.js';
import type { MemoryResource } from '../../src/resource/resource.js';
import { formatBytesExact } from '../../src/util/size.js';

Device.get(0).makeCurrent();
const MiB = 1024 * 1024;
/** More than any device has. */
const PETABYTE = 2 ** 50;

/** The error `mr.allocate(bytes)` throws, checked to be the one form for `mr`. */
function outOfMemory(mr: MemoryResource, bytes: number): OutOfMemoryError {
  let caught: unknown;
  try {
    mr.deallocate(mr.allocate(bytes), bytes);
  } catch (error) {
    caught = error;
  }
  assert.ok(caught instanceof OutOfMemoryError, `${mr.describe()}: expected an OutOfMemoryError, got ${String(caught)}`);
  assert.equal(caught.requestedBytes, bytes);
  const head = `cannot allocate ${formatBytesExact(bytes)} from ${mr.describe()}: `;
  assert.ok(caught.message.startsWith(head), `${caught.message}\n  should start\n${head}`);
  return caught;
}

test('formatBytesExact: the figure with the exact count after; brief only where the figure rounds', () => {
  assert.equal(formatBytesExact(1610612736), '1.50 GiB (1610612736 bytes)');
  assert.equal(formatBytesExact(512), '512 B');
  assert.equal(formatBytesExact(MiB, true), '1 MiB');
  assert.equal(formatBytesExact(1536, true), '1.50 KiB');
  assert.equal(formatBytesExact(1361, true), '1.33 KiB (1361 bytes)');
  assert.equal(formatBytesExact(200 * 2 ** 30 + 5, true), '200 GiB (214748364805 bytes)');
});

test('every resource names the request, in units and exact bytes, and itself', () => {
  using cuda = new CudaResource();
  assert.match(outOfMemory(cuda, PETABYTE).message, /CUDA_ERROR_OUT_OF_MEMORY.*\(0 live allocations, 0 B\)/);
  using async = new AsyncResource();
  outOfMemory(async, PETABYTE);
  using limited = new LimitingAdaptor(cuda, MiB);
  assert.match(outOfMemory(limited, 2 * MiB).message, /: 0 B of the 1 MiB \(1048576 bytes\) limit in use$/);
  using pool = new PoolResource({ maximumSize: 4 * MiB });
  assert.match(outOfMemory(pool, 6 * MiB).message, /\(live 0 B in 0 blocks, reserved /);
  using arena = new ArenaResource({ size: MiB });
  assert.match(outOfMemory(arena, 2 * MiB).message, /: arena exhausted: 1 MiB \(1048576 bytes\) of 1 MiB \(1048576 bytes\) free/);
  using fixed = new FixedSizeResource(limited, { blockSize: 256 * 1024, blocksToPreallocate: 8 });
  assert.match(outOfMemory(fixed, 1000).message, /: its upstream refused a chunk of 2 MiB \(2097152 bytes\): cannot allocate 2 MiB/);
  using retry = new RetryOnOutOfMemory(limited);
  assert.match(outOfMemory(retry, 3 * MiB).message, /: even after releasing .* of cached memory: cannot allocate 3 MiB \(3145728 bytes\) from LimitingAdaptor/);
});

test('describe() spells sizes as messages do: exact figures bare, others with the count', () => {
  using arena = new ArenaResource({ size: 3 * MiB });
  assert.match(arena.describe(), /^ArenaResource\(size=3 MiB, /);
  using cuda = new CudaResource();
  using limited = new LimitingAdaptor(cuda, MiB + 1);
  assert.equal(limited.describe(), 'LimitingAdaptor(limit=1.00 MiB (1048577 bytes), CudaResource(device=0))');
  using fixed = new FixedSizeResource(cuda, { blockSize: 64 * 1024 });
  assert.match(fixed.describe(), /^FixedSizeResource\(block=64 KiB, /);
});
