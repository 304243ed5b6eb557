/**
 * Sizes as strings (issue 25, item 6): every byte count an option or an `allocate` call takes may
 * be written as the CLI and the VRAM_* variables write it (`'512M'`, `'1G'`, `'64KiB'`), read by
 * the one parser (src/util/size.ts) through `readBytes`; a bad one is refused naming the option.
 * Runs on both backends.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readBytes } from '../../src/validate.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import { ArenaResource } from '../../src/resource/suballoc/arena.js';
import { FixedSizeResource } from '../../src/resource/suballoc/fixed-size.js';
import { BinningResource } from '../../src/resource/suballoc/binning.js';
import { PinnedHostPool } from '../../src/resource/suballoc/pinned-host-pool.js';
import { LimitingAdaptor } from '../../src/resource/adaptors/limiting.js';
import { createResourceStack } from '../../src/resource/stacks.js';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { HostBuffer } from '../../src/buffer/host-buffer.js';
import { OutOfMemoryError } from '../../src/errors.js';
import { configureTransfers, transferSettings } from '../../src/buffer/transfer/transfers.js';

const KiB = 1024;
const MiB = 1024 * KiB;

test('readBytes: numbers as checkBytes reads them, strings as the CLI reads them, 0 only where allowed', () => {
  assert.equal(readBytes(4096, 'bytes'), 4096);
  assert.equal(readBytes('1G', 'maximumSize'), 1024 * MiB);
  assert.equal(readBytes('512M', 'maximumSize'), 512 * MiB);
  assert.equal(readBytes('64KiB', 'x'), 64 * KiB);
  assert.equal(readBytes('0', 'cap', true), 0);
  assert.equal(readBytes(0, 'cap', true), 0);
  assert.throws(() => readBytes('0', 'maximumSize'), /maximumSize must be positive/);
  assert.throws(() => readBytes('lots', 'maximumSize'), /maximumSize must be a whole number of bytes or a size like 64K/);
  assert.throws(() => readBytes(true, 'maximumSize'), TypeError);
  assert.throws(() => readBytes(-1, 'cap', true), RangeError);
});

test('resources take sizes as strings in their options', () => {
  using pool = new PoolResource({ maximumSize: '1M', upstream: new PoolResource() });
  const p = pool.allocate('512K');
  assert.throws(() => pool.allocate('1M'), OutOfMemoryError);
  pool.deallocate(p, 512 * KiB);
  assert.throws(() => new PoolResource({ maximumSize: '1 gigabyte' }), /maximumSize must be/);
  assert.throws(() => new PoolResource({ initialSize: '2M', maximumSize: '1M' }), /initialSize \(2097152\) exceeds maximumSize \(1048576\)/);
  using arena = new ArenaResource({ size: '1M' });
  assert.equal(arena.size, MiB);
  using fixed = new FixedSizeResource(pool, { blockSize: '64K', blocksToPreallocate: 1 });
  assert.equal(fixed.blockSize, 64 * KiB);
  using binned = new BinningResource(pool).addBin('4K');
  assert.deepEqual(binned.binSizes, [4 * KiB]);
  using limited = new LimitingAdaptor(pool, '256K');
  assert.equal(limited.limitBytes, 256 * KiB);
  using staging = new PinnedHostPool({ maximumCachedBytes: '0' });
  assert.ok(staging);
});

test('the named stacks take their sizes as strings too', () => {
  const stack = createResourceStack('arena', { size: '2M' });
  try {
    const ptr = stack.resource.allocate('1M');
    stack.resource.deallocate(ptr, MiB);
  } finally {
    stack.destroy();
  }
});

test('allocate calls take sizes as strings: buffers and resources', () => {
  using d = DeviceBuffer.allocate('1K');
  assert.equal(d.byteLength, KiB);
  using h = HostBuffer.allocate('4KiB');
  assert.equal(h.byteLength, 4 * KiB);
  assert.throws(() => DeviceBuffer.allocate('1.5'), /bytes must come to a whole number of bytes/);
});

test('configureTransfers takes its byte counts as size strings; the settings hold bytes', () => {
  const before = transferSettings();
  try {
    const next = configureTransfers({ chunkBytes: '4M', stagingThreshold: '0', registration: { minimumBytes: '1M', maximumBytes: '1G' } });
    assert.equal(next.chunkBytes, 4 * MiB);
    assert.equal(next.stagingThreshold, 0);
    assert.equal(next.registration.minimumBytes, MiB);
    assert.equal(next.registration.maximumBytes, 1024 * MiB);
    assert.throws(() => configureTransfers({ chunkBytes: 'big' }), /chunkBytes must be a whole number of bytes or a size/);
    assert.equal(transferSettings().chunkBytes, 4 * MiB, 'a refused change changes nothing');
  } finally {
    configureTransfers({ chunkBytes: before.chunkBytes, stagingThreshold: before.stagingThreshold, registration: before.registration });
  }
});

test("sizes: '1GB' and the other decimal-looking units are refused as ambiguous, naming both readings", () => {
  assert.throws(
    () => readBytes('1GB', 'size'),
    (e: unknown) =>
      e instanceof RangeError && /'1GB' is ambiguous/.test(e.message) && /write 1G or 1GiB/.test(e.message) && /1000000000 for 1 x 1000\^3/.test(e.message),
  );
  for (const text of ['64KB', '512mb', '2 TB', '1.5GB']) assert.throws(() => readBytes(text, 'size'), /is ambiguous/, text);
  assert.equal(readBytes('1G', 'size'), 2 ** 30);
  assert.equal(readBytes('1GiB', 'size'), 2 ** 30);
  assert.equal(readBytes('64kib', 'size'), 65536);
  assert.equal(readBytes('512B', 'size'), 512);
  assert.throws(() => DeviceBuffer.allocate('1GB'), /is ambiguous/);
});
