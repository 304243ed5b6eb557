/**
 * recordMemoryHistory: a known sequence of allocations gives its events in order (sizes, addresses,
 * streams, the stack's top as the resource, reserve events as the pool maps pages), once per
 * outermost call; call stacks interned per site; the ring drops the oldest; out-of-memory errors
 * reaching the program recorded once; and the options and the one-recording-per-device rule checked.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Ptr } from '../../src/backend/backend.js';
import { OutOfMemoryError, VramStateError } from '../../src/errors.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';
import { SpillableResource } from '../../src/resource/upstream/spillable-resource.js';
import { memoryHistory, recordMemoryHistory, resourceRecord } from '../../src/observe/history.js';
import { TickingClock } from '../../src/observe/history-clock.js';
import { LimitingAdaptor } from '../../src/resource/adaptors/limiting.js';
import { RetryOnOutOfMemory } from '../../src/resource/adaptors/retry-on-oom.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import { Stream } from '../../src/stream.js';

const MiB = 1024 * 1024;

test('a known sequence on a pool: alloc and free in order, with sizes, addresses, stream and reserves as pages are mapped', () => {
  using pool = new PoolResource();
  using stream = Stream.create();
  const history = recordMemoryHistory({ maxEntries: 1000 });
  let a: Ptr, b: Ptr, afterFirst: number;
  try {
    a = pool.allocate(MiB);
    afterFirst = pool.reservedBytes;
    b = pool.allocate(3 * MiB, stream);
    pool.deallocate(a, MiB);
    pool.deallocate(b, 3 * MiB, stream);
  } finally {
    history.stop();
  }
  const id = resourceRecord(pool).id;
  const events = history.events();
  const ours = events.filter((e) => e.kind === 'alloc' || e.kind === 'free');
  assert.deepEqual(
    ours.map((e) => [e.kind, e.address, e.bytes, e.stream, e.resource, e.stack]),
    [
      ['alloc', a, MiB, 0, id, null],
      ['alloc', b, 3 * MiB, stream.handle, id, null],
      ['free', a, MiB, 0, id, null],
      ['free', b, 3 * MiB, stream.handle, id, null],
    ],
  );
  // The first allocation's page is in the baseline (taken just after the stack's first call,
  // allocated bytes from before it); the second block needed more pages: a reserve event just
  // before its alloc. Baseline and reserves add up to what the pool holds; nothing was released.
  const baseline = resourceRecord(pool).baseline!;
  assert.deepEqual([baseline.allocatedBytes, baseline.reservedBytes], [0, afterFirst]);
  assert.ok(afterFirst >= MiB);
  const reserves = events.filter((e) => e.kind === 'reserve');
  assert.ok(reserves.length >= 1, 'the pool reserved pages for the second block');
  assert.equal(events[events.findIndex((e) => e.address === b) - 1]!.kind, 'reserve');
  assert.equal(afterFirst + reserves.reduce((sum, e) => sum + e.bytes, 0), pool.reservedBytes);
  assert.ok(reserves.every((e) => e.address === null && e.resource === id && e.stack === null));
  assert.equal(events.filter((e) => e.kind === 'release').length, 0);
  // Times never step back and lie within the recording.
  for (let k = 1; k < events.length; k++) assert.ok(events[k]!.time >= events[k - 1]!.time, `event ${k} steps back in time`);
  assert.ok(events[0]!.time >= history.startTime && events.at(-1)!.time <= performance.now());
  assert.equal(history.recorded, events.length);
  assert.equal(history.dropped, 0);
  assert.equal(history.recording, false);

  // releaseCached gives the pages back: a release event of what was reserved. (A new recording
  // takes the stack's baseline at its first call, so one allocation first.)
  const again = recordMemoryHistory();
  try {
    const c = pool.allocate(256);
    pool.deallocate(c, 256);
    const reserved = pool.reservedBytes;
    pool.releaseCached();
    assert.deepEqual(
      again.events().map((e) => [e.kind, e.bytes]),
      [
        ['alloc', 256],
        ['free', 256],
        ['release', reserved - pool.reservedBytes],
      ],
    );
    assert.ok(reserved - pool.reservedBytes > 0);
  } finally {
    again.stop();
  }
});

test('only the outermost call is recorded: an adaptor over a pool gives one event per call, naming the adaptor', () => {
  using pool = new PoolResource();
  using limited = new LimitingAdaptor(pool, 64 * MiB);
  using history = recordMemoryHistory();
  const first = limited.allocate(5000); // maps the first page: in the baseline
  const afterFirst = pool.reservedBytes;
  const p = limited.allocate(3 * MiB); // maps more: a reserve event
  limited.deallocate(p, 3 * MiB);
  limited.deallocate(first, 5000);
  const calls = history.events().filter((e) => e.kind === 'alloc' || e.kind === 'free');
  const top = resourceRecord(limited).id;
  assert.deepEqual(
    calls.map((e) => [e.kind, e.address, e.bytes, e.resource]),
    [
      ['alloc', first, 5000, top],
      ['alloc', p, 3 * MiB, top],
      ['free', p, 3 * MiB, top],
      ['free', first, 5000, top],
    ],
  );
  // The reserve is the stack's (the pool below the adaptor maps the pages), under the adaptor's id.
  assert.ok(history.events().some((e) => e.kind === 'reserve' && e.resource === resourceRecord(limited).id));
  // The history knows the whole stack, with the pool as the adaptor's upstream.
  const seen = history.seenResources();
  assert.deepEqual(
    seen.map((r) => r.className),
    ['LimitingAdaptor', 'PoolResource'],
  );
  assert.equal(seen[0]!.upstream, seen[1]!.id);
  assert.deepEqual(seen[0]!.baseline && { a: seen[0]!.baseline.allocatedBytes, r: seen[0]!.baseline.reservedBytes }, { a: 0, r: afterFirst });
});

function fromSiteA(pool: PoolResource): Ptr {
  return pool.allocate(256);
}

function fromSiteB(pool: PoolResource): Ptr {
  return pool.allocate(512);
}

test("reserves follow every resource's reservedBytes where they are measured: a SpillableResource's physical memory, none for a CudaResource", () => {
  using spillable = new SpillableResource();
  using cuda = new CudaResource();
  const history = recordMemoryHistory({ maxEntries: 1000 });
  let held: number;
  try {
    cuda.deallocate(cuda.allocate(MiB), MiB); // reserved is allocated (one driver allocation per block): nothing to follow
    const a = spillable.allocate(MiB);
    const b = spillable.allocate(2 * MiB);
    held = spillable.reservedBytes;
    spillable.deallocate(a, MiB);
    spillable.deallocate(b, 2 * MiB);
  } finally {
    history.stop();
  }
  const id = resourceRecord(spillable).id;
  const baseline = resourceRecord(spillable).baseline!;
  assert.ok(held >= 3 * MiB);
  const reserves = history.events().filter((e) => e.kind === 'reserve' && e.resource === id);
  assert.ok(reserves.length >= 1, 'the second block mapped physical memory: a reserve event');
  assert.equal(baseline.reservedBytes! + reserves.reduce((sum, e) => sum + e.bytes, 0), held, 'baseline and reserves add up to what it held');
  assert.equal(resourceRecord(cuda).baseline!.reservedBytes, null, "a CudaResource's reserved bytes are not measured");
  assert.ok(!history.events().some((e) => (e.kind === 'reserve' || e.kind === 'release') && e.resource === resourceRecord(cuda).id));
});

test("stacks: one id per allocating site, its frames the program's (not vram's), live blocks kept with their site", () => {
  using pool = new PoolResource();
  using history = recordMemoryHistory({ stacks: true });
  const a: Ptr[] = [];
  for (let k = 0; k < 3; k++) a.push(fromSiteA(pool));
  const b = fromSiteB(pool);
  const allocs = history.events().filter((e) => e.kind === 'alloc');
  assert.equal(allocs.length, 4);
  const [siteA, , , siteB] = allocs.map((e) => e.stack);
  assert.ok(siteA !== null && siteB !== null && siteA !== siteB);
  assert.deepEqual(
    allocs.map((e) => e.stack),
    [siteA, siteA, siteA, siteB],
    'the same site, the same id',
  );
  const stacks = history.callStacks();
  assert.match(stacks[siteA!]!.frames[0]!, /fromSiteA/);
  assert.match(stacks[siteB!]!.frames[0]!, /fromSiteB/);
  for (const { frames } of stacks) {
    assert.ok(
      frames.every((f) => !/\/src\/memory\//.test(f)),
      `vram's own frames are left out: ${frames.join(' | ')}`,
    );
  }
  // Live blocks and the largest sites, by bytes.
  assert.deepEqual([...history.liveBlocks().keys()].sort(), [...a, b].sort());
  const sites = history.largestLiveSites(5);
  assert.deepEqual(
    sites.map((s) => [s.bytes, s.count]),
    [
      [768, 3],
      [512, 1],
    ],
  );
  assert.match(sites[0]!.frames[0]!, /fromSiteA/);
  for (const p of a) pool.deallocate(p, 256);
  assert.deepEqual([...history.liveBlocks().keys()], [b]);
  assert.deepEqual(
    history.largestLiveSites(5).map((s) => s.bytes),
    [512],
  );
  pool.deallocate(b, 512);
  const frees = history.events().filter((e) => e.kind === 'free');
  assert.equal(frees.length, 4);
  assert.ok(
    frees.every((e) => e.stack === null),
    'frees are not captured (where memory is held is the question)',
  );
});

test('the ring keeps the latest maxEntries events in order and counts the dropped ones', () => {
  using pool = new PoolResource();
  pool.deallocate(pool.allocate(256), 256); // pages mapped: no reserve events below
  using history = recordMemoryHistory({ maxEntries: 4 });
  const sizes = [256, 512, 768, 1024, 1280];
  for (const n of sizes) pool.deallocate(pool.allocate(n), n);
  assert.equal(history.recorded, 10);
  assert.equal(history.dropped, 6);
  const events = history.events();
  assert.deepEqual(
    events.map((e) => [e.kind, e.bytes]),
    [
      ['alloc', 1024],
      ['free', 1024],
      ['alloc', 1280],
      ['free', 1280],
    ],
  );
});

test('an out-of-memory error reaching the program is one oom event, of the outermost resource; a recovered retry is none', () => {
  using pool = new PoolResource();
  using limited = new LimitingAdaptor(pool, MiB);
  using retry = new RetryOnOutOfMemory(limited);
  using history = recordMemoryHistory();
  assert.throws(() => retry.allocate(2 * MiB), OutOfMemoryError);
  const ooms = history.events().filter((e) => e.kind === 'oom');
  assert.deepEqual(
    ooms.map((e) => [e.address, e.bytes, e.resource]),
    [[null, 2 * MiB, resourceRecord(retry).id]],
  );

  // A pool whose upstream's limit is held by the pool's own cache: the retry releases the cached
  // chunk and succeeds, so the program sees no error and the history no oom.
  using cuda = new CudaResource();
  using cap = new LimitingAdaptor(cuda, 4 * MiB);
  using chunked = new PoolResource({ upstream: cap, chunkSize: 2 * MiB });
  using recovering = new RetryOnOutOfMemory(chunked);
  recovering.deallocate(recovering.allocate(2 * MiB), 2 * MiB);
  const big = recovering.allocate(3 * MiB);
  assert.equal(recovering.recovered, 1, 'the retry recovered');
  recovering.deallocate(big, 3 * MiB);
  assert.equal(history.events().filter((e) => e.kind === 'oom').length, 1);
});

test('options are checked, one recording per device, and nothing is recorded after stop', () => {
  assert.throws(() => recordMemoryHistory({ maxEntries: 0 }), RangeError);
  assert.throws(() => recordMemoryHistory({ maxEntries: 1.5 }), RangeError);
  assert.throws(() => recordMemoryHistory({ maxEntries: 2 ** 30 }), RangeError);
  assert.throws(() => recordMemoryHistory({ stacks: 'yes' as unknown as boolean }), TypeError);
  assert.throws(() => recordMemoryHistory(null as unknown as object), TypeError);
  using pool = new PoolResource();
  const history = recordMemoryHistory({ device: 0 });
  assert.throws(() => recordMemoryHistory(), VramStateError);
  assert.equal(memoryHistory(), history);
  pool.deallocate(pool.allocate(256), 256);
  history.stop();
  history.stop();
  const recorded = history.recorded;
  pool.deallocate(pool.allocate(256), 256);
  assert.equal(history.recorded, recorded, 'nothing after stop');
  assert.equal(memoryHistory(0), history, 'the last history stays for snapshots');
  const next = recordMemoryHistory();
  assert.equal(memoryHistory(), next);
  next.stop();
});

test('a clock whose thread does not run (a busy machine): a direct read stands in, so times still move', () => {
  const clock = new TickingClock();
  clock.stop(); // the thread ends at its next tick: from then on only check() moves the time
  const busy = (ms: number): void => {
    const until = performance.now() + ms;
    while (performance.now() < until);
  };
  busy(5);
  const times: number[] = [];
  for (let i = 0; i < 20; i++) {
    busy(1);
    assert.equal(clock.check(), 1, 'a stale clock is checked at every event');
    times.push(clock.time[0]!);
  }
  for (let i = 1; i < times.length; i++) assert.ok(times[i]! >= times[i - 1]! + 1, `time ${i}: ${times[i]} after ${times[i - 1]}`);
  assert.ok(Math.abs(times.at(-1)! - performance.now()) < 1000, 'on the performance.now() clock');
});

test("times move during a long synchronous loop (the worker's clock is not held up by the main thread)", () => {
  using pool = new PoolResource();
  using history = recordMemoryHistory();
  const start = performance.now();
  // A pair about every 0.2 ms of busy main thread, for 200 ms.
  for (let last = start; last - start < 200;) {
    pool.deallocate(pool.allocate(256), 256);
    const from = performance.now();
    while ((last = performance.now()) - from < 0.2);
  }
  const events = history.events();
  assert.equal(history.dropped, 0);
  const span = events.at(-1)!.time - events[0]!.time;
  assert.ok(span > 150, `the events span ${span} ms of a 200 ms loop`);
  assert.ok(new Set(events.map((e) => e.time)).size > 100, 'many distinct times');
});

function reserveChunk(upstream: PoolResource): PoolResource {
  return new PoolResource({ upstream, initialSize: 1 << 20 });
}

test("a pool's chunk and the block cut at its start are live in two resources: a free ends only its own, so the chunk stays charged to its site", () => {
  using outer = new PoolResource();
  using history = recordMemoryHistory({ stacks: true });
  // The inner pool reserves its chunk from the outer one when made: an allocation of the outer pool's, recorded.
  using inner = reserveChunk(outer);
  const ptr = fromSiteA(inner);
  const [chunk] = history.events().filter((e) => e.kind === 'alloc');
  assert.equal(chunk!.address, ptr, "the inner block starts where the outer pool's chunk does");
  assert.equal(history.liveBlocks().get(ptr)?.bytes, 256, 'by address, the block allocated last');
  inner.deallocate(ptr, 256);
  const sites = history.largestLiveSites(5);
  assert.ok(chunk!.bytes >= 1 << 20);
  assert.deepEqual(
    sites.map((s) => s.bytes),
    [chunk!.bytes],
    "the outer pool's chunk is still live, charged to where it was reserved",
  );
  assert.match(sites[0]!.frames[0]!, /reserveChunk/);
  assert.equal(history.liveBlocks().get(ptr)?.bytes, chunk!.bytes);
});
