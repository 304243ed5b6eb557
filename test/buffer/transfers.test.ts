/**
 * Pageable transfers: ordinary JavaScript memory to and from the device through the staging
 * pipeline (chunk sizes that do not divide the data, odd sizes, offsets, the calling-thread
 * fallback), the async forms (ordered on a stream held back on the device, the event loop free
 * meanwhile), the registration cache (hit, opt-in and opt-out, eviction, unregistration when the
 * buffer is collected, HostBuffer.register of a cached buffer), a buffer detached mid-copy, and bad
 * input. Runs on the emulated backend and, unchanged, on a GPU.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { after, afterEach, describe, it } from 'node:test';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { HostAllocFlags, StreamWaitValueFlags } from '../../src/backend/backend.js';
import { Device } from '../../src/device.js';
import { DetachedBufferError, UseAfterFreeError } from '../../src/errors.js';
import { DeviceArray } from '../../src/array/device-array.js';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { HostBuffer } from '../../src/buffer/host-buffer.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import { configureTransfers, releaseTransferCaches, transferSettings, transferStatistics, type TransferSettings } from '../../src/buffer/transfer/transfers.js';
import { Stream } from '../../src/stream.js';
import { CopyThreads } from '../../src/buffer/transfer/copy-threads.js';
import { nativeAddress } from '../../src/cuda/host-memcpy.js';
import { runDataFuzzAsync } from '../fuzz/data-fuzz.js';
import { resourceFactories } from '../fuzz/resources.js';
import { assertMemoryReturned, captureWarnings, deviceMemoryUsed, forceGc, needsGc, randomBytes } from '../helpers.js';

const device = Device.get(0);
device.makeCurrent();
const backend = device.backend;
const KiB = 1024;
const MiB = 1024 * KiB;
const defaults: TransferSettings = transferSettings();

afterEach(() => {
  configureTransfers({ ...defaults });
  releaseTransferCaches();
});

function assertSame(actual: Uint8Array, expected: Uint8Array, what: string): void {
  assert.equal(actual.byteLength, expected.byteLength, `${what}: length`);
  const bad = actual.findIndex((b, i) => b !== expected[i]);
  assert.equal(bad, -1, `${what}: byte ${bad} differs (${actual[bad]} != ${expected[bad]})`);
}

/** A word of mapped pinned memory that held streams wait on; the host sets it to release them. */
const flagHost = backend.memHostAlloc(4 * KiB, HostAllocFlags.DEVICEMAP | HostAllocFlags.PORTABLE);
const flagDevice = backend.memHostGetDevicePointer(flagHost);
const flag = new Uint32Array(backend.hostView(flagHost, 4 * KiB), 0, 1);
after(() => backend.memFreeHost(flagHost));

/** Holds `stream` on the device until `release()` (never synchronise on it before that). */
function hold(stream: Stream): { release: () => void } {
  flag[0] = 0;
  backend.streamWaitValue32(stream.handle, flagDevice, 1, StreamWaitValueFlags.GEQ);
  return {
    release: () => {
      flag[0] = 1;
    },
  };
}

describe('staged copies of JavaScript memory', () => {
  const sizes = [1, 31, 1025, 3 * MiB + 7];

  for (const threads of [defaults.threads, 0]) {
    it(`round-trip every size, synchronously and async, chunks that do not divide the data (${threads} threads)`, async () => {
      // A small threshold and odd chunks, so that even 1025 bytes are staged in several chunks.
      configureTransfers({ threads, chunkBytes: 1000, stagingThreshold: 0, depth: 2, registration: { enabled: false } });
      const before = deviceMemoryUsed();
      for (const [k, n] of sizes.entries()) {
        if (n > 64 * KiB) configureTransfers({ chunkBytes: 256 * KiB + 4097 });
        const data = randomBytes(n, 11 + k);
        using buf = DeviceBuffer.allocate(n);
        buf.copyFromHost(data);
        assertSame(buf.copyToHost(new Uint8Array(n)), data, `sync ${n}`);
        const again = randomBytes(n, 99 + k);
        await buf.copyFromHostAsync(again);
        assertSame(await buf.copyToHostAsync(new Uint8Array(n)), again, `async ${n}`);
      }
      const stats = transferStatistics();
      assert.ok(stats.staged.copies >= 4 * sizes.length, `every copy was staged: ${JSON.stringify(stats.staged)}`);
      assertMemoryReturned(before, deviceMemoryUsed(), 'staged copies');
    });
  }

  it('honours offsets on both sides and TypedArray views with a byteOffset', async () => {
    configureTransfers({ chunkBytes: 64 * KiB + 1, stagingThreshold: 0, registration: { enabled: false } });
    const n = MiB + 333;
    const data = new Float32Array(randomBytes(n * 4, 5).buffer);
    const view = data.subarray(1001, 1001 + n - 2000); // byteOffset 4004
    using buf = DeviceBuffer.allocate(n * 4);
    buf.memset(0);
    buf.copyFromHost(view, { offset: 8, srcOffset: 12, bytes: view.byteLength - 12 });
    const out = new Float32Array(n);
    buf.copyToHost(out, { offset: 8, dstOffset: 4, bytes: view.byteLength - 12 });
    assert.deepEqual(out.subarray(1, 1 + view.length - 3), view.subarray(3));
    assert.equal(out[0], 0);
    const asyncOut = new Float32Array(n);
    await buf.copyToHostAsync(asyncOut, { offset: 8, dstOffset: 4, bytes: view.byteLength - 12 });
    assert.deepEqual(asyncOut, out);
  });

  it('small synchronous copies go straight to the driver', () => {
    configureTransfers({ stagingThreshold: MiB });
    const before = transferStatistics();
    using buf = DeviceBuffer.allocate(64 * KiB);
    const data = randomBytes(64 * KiB, 3);
    buf.copyFromHost(data);
    assertSame(buf.copyToHost(new Uint8Array(64 * KiB)), data, 'direct');
    assert.equal(transferStatistics().direct.copies, before.direct.copies + 2);
    assert.equal(transferStatistics().staged.copies, before.staged.copies);
  });
});

describe('async copies are ordered on their stream and never block the event loop', () => {
  for (const direction of ['to the device', 'from the device'] as const) {
    it(`a copy ${direction} on a held stream waits for it, while the event loop runs`, async () => {
      configureTransfers({ chunkBytes: 128 * KiB, depth: 2, registration: { enabled: false } });
      const n = MiB + 5;
      const stream = Stream.create({ device, nonBlocking: true });
      using buf = DeviceBuffer.allocate(n);
      const first = randomBytes(n, 1);
      buf.copyFromHost(first);
      const data = randomBytes(n, 2);
      const out = new Uint8Array(n);
      let settled = false;
      const held = hold(stream);
      let copy: Promise<unknown>;
      try {
        // On the held stream, after a write of `data`'s future value: the copy must come after it.
        buf.copyFromHost(data.subarray(0, 4096), { stream: undefined });
        copy = direction === 'to the device' ? buf.copyFromHostAsync(data, { stream }) : buf.copyToHostAsync(out, { stream });
        void copy.then(
          () => {
            settled = true;
          },
          () => {
            settled = true;
          },
        );
        let turns = 0;
        for (let i = 0; i < 50; i++, turns++) await nextTurn();
        assert.equal(turns, 50, 'the event loop ran');
        assert.equal(settled, false, 'the copy waits for the held stream');
      } finally {
        held.release();
      }
      await copy;
      stream.synchronize();
      if (direction === 'to the device') {
        assertSame(buf.copyToHost(new Uint8Array(n)), data, 'the data arrived after the hold');
      } else {
        const expected = first.slice();
        expected.set(data.subarray(0, 4096));
        assertSame(out, expected, 'the copy read the buffer after the writes before it');
      }
      stream.destroy();
    });
  }

  it('a JavaScript buffer detached during an async copy rejects with DetachedBufferError and leaks nothing', async () => {
    configureTransfers({ chunkBytes: 64 * KiB, depth: 2, registration: { enabled: false } });
    const n = MiB;
    const stream = Stream.create({ device, nonBlocking: true });
    const before = deviceMemoryUsed();
    const buf = DeviceBuffer.allocate(n);
    for (const direction of ['to', 'from'] as const) {
      const host = randomBytes(n, 7);
      const held = hold(stream);
      let copy: Promise<unknown>;
      try {
        copy = direction === 'to' ? buf.copyFromHostAsync(host, { stream }) : buf.copyToHostAsync(host, { stream });
        copy.catch(() => undefined);
        for (let i = 0; i < 10; i++) await nextTurn();
        structuredClone(host.buffer, { transfer: [host.buffer as ArrayBuffer] }); // detaches `host`
        assert.equal(host.byteLength, 0);
      } finally {
        held.release();
      }
      await assert.rejects(copy, DetachedBufferError);
    }
    stream.synchronize();
    buf.free();
    stream.destroy();
    assertMemoryReturned(before, deviceMemoryUsed(), 'detached copies');
  });
});

describe('memory freed while an async staged copy still uses it', () => {
  // The copy's stream is held, so every chunk is queued after the free: without the copy holding
  // the memory, the pool hands it to the next owner on the same stream at once, the next owner's
  // fill is queued before the copy's later chunks, and they overwrite it (or read it).
  const chunk = 64 * KiB;
  const n = 16 * chunk;
  /** A buffer of `n` bytes from `pool` on `stream`, its copies, and how it is freed. */
  interface Target {
    readonly into: (data: Uint8Array) => Promise<unknown>;
    readonly outOf: (out: Uint8Array) => Promise<unknown>;
    readonly fill: (value: number) => void;
    readonly free: () => void;
    /** What a `using` declaration frees. */
    readonly owner: Disposable;
  }
  const buffer = (pool: PoolResource, stream: Stream): Target => {
    const b = DeviceBuffer.allocate(n, { resource: pool, stream });
    return {
      into: (data) => b.copyFromHostAsync(data, { stream }),
      outOf: (out) => b.copyToHostAsync(out, { stream }),
      fill: (value) => b.memset(value, { stream }),
      free: () => b.free(),
      owner: b,
    };
  };
  const array = (pool: PoolResource, stream: Stream): Target => {
    const a = DeviceArray.empty([n], 'uint8', { resource: pool, stream });
    return {
      into: (data) => a.copyFromAsync(data),
      outOf: (out) => a.copyToAsync(out),
      fill: (value) => (a.buffer as DeviceBuffer).memset(value, { stream }),
      free: () => a.free(),
      owner: a,
    };
  };
  const ways: readonly (readonly [string, (pool: PoolResource, stream: Stream) => Target, boolean])[] = [
    ['DeviceBuffer.free()', buffer, false],
    ['the end of a using scope', buffer, true],
    ['DeviceArray.free()', array, false],
  ];

  for (const direction of ['to the device', 'from the device'] as const) {
    for (const [how, make, scoped] of ways) {
      it(`${direction}, freed by ${how}: the next owner's data stays, and the memory goes back when the copy settles`, async () => {
        configureTransfers({ chunkBytes: chunk, depth: 2, registration: { enabled: false } });
        using pool = new PoolResource();
        using stream = Stream.create({ device, nonBlocking: true });
        const allocated = (): number => pool.memoryFigures()!.allocatedBytes.value;
        const data = randomBytes(n, 51);
        const out = new Uint8Array(n);
        let copy: Promise<unknown> | undefined;
        let next: DeviceBuffer | undefined;
        const start = (target: Target): void => {
          target.fill(0x11);
          copy = direction === 'to the device' ? target.into(data) : target.outOf(out);
          copy.catch(() => undefined);
        };
        const held = hold(stream);
        try {
          const target = make(pool, stream);
          if (scoped) {
            using owner = target.owner;
            start(target);
            void owner;
          } else {
            start(target);
            target.free();
          }
          assert.ok(allocated() >= n, "the freed memory is still the copy's");
          next = DeviceBuffer.allocate(n, { resource: pool, stream });
          next.memset(0x99, { stream });
          for (let i = 0; i < 10; i++) await nextTurn();
        } finally {
          held.release();
        }
        await copy;
        await stream.synchronized();
        const seen = next.copyToHost(new Uint8Array(n));
        assertSame(seen, new Uint8Array(n).fill(0x99), "the next owner's bytes");
        if (direction === 'from the device') assertSame(out, new Uint8Array(n).fill(0x11), 'the bytes the copy delivered');
        assert.equal(allocated(), n, "once the copy settled, only the next owner's memory is allocated");
        next.free();
      });
    }
  }
});

describe('a free deferred behind a copy', () => {
  it('free({ stream }) names a stream destroyed before the copy settles: the memory still goes back, without a warning', async () => {
    configureTransfers({ chunkBytes: 64 * KiB, depth: 2, registration: { enabled: false } });
    using pool = new PoolResource();
    using stream = Stream.create({ device, nonBlocking: true });
    const allocated = (): number => pool.memoryFigures()!.allocatedBytes.value;
    const n = MiB;
    const buf = DeviceBuffer.allocate(n, { resource: pool, stream });
    let copy: Promise<unknown> | undefined;
    const warnings = await captureWarnings(async () => {
      const held = hold(stream);
      try {
        copy = buf.copyFromHostAsync(randomBytes(n, 61), { stream });
        copy.catch(() => undefined);
        const other = Stream.create({ device, nonBlocking: true });
        buf.free({ stream: other });
        other.destroy();
        assert.equal(buf.freed, true, 'freed for the program at once');
        assert.equal(allocated(), n, "the memory is still the copy's");
      } finally {
        held.release();
      }
      await copy;
    });
    assert.deepEqual(warnings, []);
    assert.equal(allocated(), 0, 'given back once the copy settled');
  });
});

describe('the data fuzz with copies through vram buffers, freed while in use', () => {
  // Each of these found wrong data in its first 1,500 operations before copies held and recorded.
  const targets = ['PoolResource (virtual memory)', 'PoolResource (upstream chunks)', 'FixedSizeResource (upstream shared PoolResource)', 'PinnedHostPool'];
  for (const name of targets) {
    it(`${name}: seeds 1 and 2, 1,500 operations each`, async () => {
      const factory = resourceFactories.find((f) => f.name === name);
      assert.ok(factory !== undefined, `no fuzz target ${name}`);
      for (const seed of [1, 2]) {
        const stats = await runDataFuzzAsync(factory, { seed, ops: 1500, copies: true });
        assert.ok(stats.copies >= 20 && stats.freedInUse >= 10, `seed ${seed}: ${stats.copies} copies, ${stats.freedInUse} freed in use`);
      }
    });
  }
});

describe('the registration cache', () => {
  it('pins a buffer on its second copy and copies from it in place afterwards', async () => {
    configureTransfers({ registration: { minimumBytes: MiB, afterUses: 2 } });
    const n = 2 * MiB + 3;
    const data = randomBytes(n, 21);
    using buf = DeviceBuffer.allocate(n);
    const s0 = transferStatistics();
    buf.copyFromHost(data);
    assert.equal(transferStatistics().registration.registrations, s0.registration.registrations, 'not on the first copy');
    buf.copyFromHost(data);
    const s1 = transferStatistics();
    assert.equal(s1.registration.registrations, s0.registration.registrations + 1, 'registered on the second');
    buf.copyFromHost(data.subarray(1), { offset: 1 }); // another view of the same buffer hits
    const out = new Uint8Array(n);
    await buf.copyToHostAsync(data.subarray(0, 0), { bytes: 0 }); // zero bytes: nothing happens
    assertSame(buf.copyToHost(out), data, 'through the registration');
    const s2 = transferStatistics();
    assert.equal(s2.registration.hits, s1.registration.hits + 1);
    assert.equal(s2.registered.copies, s1.registered.copies + 1);
    assert.equal(s2.registration.bytes.value, s1.registration.bytes.value);
  });

  it('register: true pins at once, register: false never uses the cache', () => {
    const n = 64 * KiB;
    using buf = DeviceBuffer.allocate(n);
    const data = randomBytes(n, 4);
    const s0 = transferStatistics();
    for (let i = 0; i < 3; i++) buf.copyFromHost(data, { register: false });
    assert.equal(transferStatistics().registration.registrations, s0.registration.registrations);
    buf.copyFromHost(data, { register: true });
    assert.equal(transferStatistics().registration.registrations, s0.registration.registrations + 1);
    assertSame(buf.copyToHost(new Uint8Array(n)), data, 'opt-in');
    configureTransfers({ registration: { enabled: false } });
    const s1 = transferStatistics();
    buf.copyFromHost(data);
    assert.equal(transferStatistics().registration.hits, s1.registration.hits, 'disabled globally');
  });

  it('stays within maximumBytes by unregistering the least recently used buffer', () => {
    configureTransfers({ registration: { minimumBytes: 0, afterUses: 1, maximumBytes: 3 * MiB } });
    using buf = DeviceBuffer.allocate(MiB);
    const buffers = [randomBytes(MiB, 1), randomBytes(MiB, 2), randomBytes(MiB, 3), randomBytes(MiB, 4)];
    const s0 = transferStatistics().registration;
    for (const b of buffers.slice(0, 3)) buf.copyFromHost(b);
    buf.copyFromHost(buffers[0]!); // now the most recently used
    buf.copyFromHost(buffers[3]!); // evicts buffers[1]
    const s1 = transferStatistics().registration;
    assert.equal(s1.registrations - s0.registrations, 4);
    assert.equal(s1.evictions - s0.evictions, 1);
    assert.ok(s1.bytes.value - s0.bytes.value <= 3 * MiB);
    buf.copyFromHost(buffers[0]!);
    assert.equal(transferStatistics().registration.hits, s1.hits + 1, 'buffers[0] stayed registered');
    buf.copyFromHost(buffers[1]!);
    assert.equal(transferStatistics().registration.registrations, s1.registrations + 1, 'buffers[1] had been evicted');
    for (const [k, b] of buffers.entries()) {
      buf.copyFromHost(b);
      assertSame(buf.copyToHost(new Uint8Array(MiB)), b, `buffer ${k}`);
    }
  });

  it('HostBuffer.register of a buffer the cache pinned takes it over', () => {
    const data = randomBytes(256 * KiB, 8);
    using buf = DeviceBuffer.allocate(data.byteLength);
    buf.copyFromHost(data, { register: true });
    const pinned = HostBuffer.register(data);
    try {
      buf.copyFromHost(pinned);
      assertSame(buf.copyToHost(new Uint8Array(data.byteLength)), data, "through the program's registration");
    } finally {
      pinned.free();
    }
  });

  it('unregisters a buffer once it is garbage-collected', needsGc, async () => {
    const collect = forceGc!;
    using buf = DeviceBuffer.allocate(MiB);
    const s0 = transferStatistics().registration;
    (() => {
      const data = randomBytes(MiB, 9);
      buf.copyFromHost(data, { register: true });
    })();
    assert.equal(transferStatistics().registration.bytes.value, s0.bytes.value + MiB);
    for (let i = 0; i < 50 && transferStatistics().registration.collected === s0.collected; i++) {
      collect();
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    const s1 = transferStatistics().registration;
    assert.equal(s1.collected, s0.collected + 1);
    assert.equal(s1.bytes.value, s0.bytes.value);
  });
});

describe('bad input', () => {
  it('is a typed error before anything is copied', async () => {
    using buf = DeviceBuffer.allocate(MiB);
    const data = new Uint8Array(MiB);
    await assert.rejects(buf.copyFromHostAsync(data, { offset: 1 }), RangeError);
    await assert.rejects(buf.copyToHostAsync(data, { bytes: MiB + 1 }), RangeError);
    await assert.rejects(buf.copyFromHostAsync(data, { register: 'yes' as unknown as boolean }), TypeError);
    await assert.rejects(buf.copyFromHostAsync(42 as unknown as Uint8Array), TypeError);
    assert.throws(() => buf.copyFromHost(data, { stream: { handle: 0 } }), /Async form/);
    assert.throws(() => configureTransfers({ chunkBytes: 0 }), RangeError);
    assert.throws(() => configureTransfers({ depth: 17 }), RangeError);
    assert.throws(() => configureTransfers({ threads: -1 }), RangeError);
    assert.throws(() => configureTransfers({ registration: { enabled: 1 as unknown as boolean } }), TypeError);
    const freed = DeviceBuffer.allocate(16);
    freed.free();
    await assert.rejects(freed.copyFromHostAsync(new Uint8Array(16)), UseAfterFreeError);
  });
});

describe('copy threads whose module cannot load', () => {
  /**
   * Copies 3 MiB with `threads`, synchronously and then asynchronously; the bytes must arrive
   * whichever thread copies them. Returns the warnings, as `code: message`.
   */
  async function copyWith(threads: CopyThreads): Promise<string[]> {
    const src = randomBytes(3 * MiB, 25);
    const dst = new Uint8Array(3 * MiB);
    const warnings: string[] = [];
    const original = process.emitWarning;
    process.emitWarning = ((warning: string | Error, options?: { code?: string }) => {
      warnings.push(`${options?.code ?? ''}: ${String(warning)}`);
    }) as typeof process.emitWarning;
    try {
      threads.copy([{ dst: nativeAddress(dst), src: nativeAddress(src), bytes: src.byteLength }]);
      assertSame(dst, src, 'copied on the calling thread');
      dst.fill(0);
      await threads.copyAsync([{ dst: nativeAddress(dst), src: nativeAddress(src), bytes: src.byteLength }]);
      assertSame(dst, src, 'copied on the calling thread, asynchronously');
    } finally {
      process.emitWarning = original;
      threads.destroy();
    }
    assert.equal(threads.running, false);
    return warnings;
  }

  // The start used to wait out its whole 10 s timeout, then blame the time: the warning now names
  // the cause, which it can only know by not waiting (the test timeout is the "does not hang").
  it('a missing worker file (TypeScript sources, a bundle): one warning naming it, copies on the calling thread', { timeout: 30_000 }, async () => {
    const path = join(tmpdir(), 'vram-no-such-dir', 'copy-worker.js');
    const warnings = await copyWith(new CopyThreads(2, pathToFileURL(path)));
    assert.equal(warnings.length, 1, warnings.join('\n'));
    assert.ok(warnings[0]!.startsWith('VRAM_COPY_THREADS: '), warnings[0]);
    assert.ok(warnings[0]!.includes(`${path} does not exist`), warnings[0]);
  });

  it('start in a program run with --input-type=module (its threads inherit the flag)', { timeout: 60_000 }, () => {
    const threads = new URL('../../src/buffer/transfer/copy-threads.js', import.meta.url).href;
    const memcpy = new URL('../../src/cuda/host-memcpy.js', import.meta.url).href;
    const program = `import { CopyThreads } from '${threads}';
      import { nativeAddress } from '${memcpy}';
      const t = new CopyThreads(2);
      const src = new Uint8Array(4 << 20).fill(7), dst = new Uint8Array(4 << 20);
      t.copy([{ dst: nativeAddress(dst), src: nativeAddress(src), bytes: src.length }]);
      console.log(JSON.stringify({ running: t.running, copied: dst.every((b) => b === 7) }));
      t.destroy();`;
    const run = spawnSync(process.execPath, ['--input-type=module', '-e', program], { encoding: 'utf8', timeout: 50_000 });
    assert.equal(run.status, 0, run.stderr);
    assert.deepEqual(JSON.parse(run.stdout), { running: true, copied: true });
    assert.doesNotMatch(run.stderr, /VRAM_COPY_THREADS/);
  });

  it('a worker module that throws as it loads: the start ends at once, one warning naming it', { timeout: 30_000 }, async () => {
    const dir = mkdtempSync(join(tmpdir(), 'vram-copy-worker-'));
    try {
      const broken = pathToFileURL(join(dir, 'copy-worker.mjs'));
      writeFileSync(broken, "throw new Error('this copy worker does not load');\n");
      const warnings = await copyWith(new CopyThreads(2, broken));
      assert.equal(warnings.length, 1, warnings.join('\n'));
      assert.ok(warnings[0]!.includes(`a copy thread could not load ${broken.href}`), warnings[0]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
