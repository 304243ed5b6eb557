/**
 * memorySnapshot: every snapshot is validated against docs/snapshot-schema.json (a JSON Schema,
 * with ajv), and its contents checked against known sequences of allocations: the pool's virtual
 * range with its mapped pages and blocks, live blocks with their sites, a chunked pool whose
 * upstream's chunks are not counted as the program's blocks, an arena, destroyed resources, the
 * history with its ring overflow, and a snapshot with no history.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { Ajv2020 } from 'ajv/dist/2020.js';
import type { Ptr } from '../../src/backend/backend.js';
import { ArenaResource } from '../../src/resource/suballoc/arena.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';
import { BinningResource } from '../../src/resource/suballoc/binning.js';
import { FixedSizeResource } from '../../src/resource/suballoc/fixed-size.js';
import { setCurrentResource } from '../../src/resource/current.js';
import { recordMemoryHistory, resourceRecord } from '../../src/observe/history.js';
import { LimitingAdaptor } from '../../src/resource/adaptors/limiting.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import type { MemoryResource } from '../../src/resource/resource.js';
import { SNAPSHOT_VERSION, type MemorySnapshot, type SnapshotResource } from '../../src/observe/snapshot-format.js';
import { memorySnapshot } from '../../src/observe/snapshot.js';

const MiB = 1024 * 1024;
const schema = JSON.parse(readFileSync(new URL('../../../docs/snapshot-schema.json', import.meta.url), 'utf8')) as object;
const validate = new Ajv2020({ strict: true, allErrors: true }).compile(schema);

/** The snapshot as a file holds it (through JSON), checked against the schema. */
function validated(snapshot: MemorySnapshot): MemorySnapshot {
  const copy = JSON.parse(JSON.stringify(snapshot)) as MemorySnapshot;
  assert.ok(validate(copy), `the snapshot does not match the schema: ${JSON.stringify(validate.errors, null, 1)}`);
  assert.deepEqual(copy, snapshot, 'JSON keeps every field as it was (no undefined, NaN or Infinity)');
  return copy;
}

/** Runs `body` with `mr` as device 0's current resource, then puts the previous one back. */
function withCurrent(mr: MemoryResource, body: () => void): void {
  const previous = setCurrentResource(0, mr);
  try {
    body();
  } finally {
    setCurrentResource(0, previous);
  }
}

function resourceOf(snapshot: MemorySnapshot, mr: MemoryResource): SnapshotResource {
  const found = snapshot.resources.find((r) => r.id === resourceRecord(mr).id);
  assert.ok(found, `${mr.describe()} is in the snapshot`);
  return found;
}

function loadWeights(mr: MemoryResource): Ptr {
  return mr.allocate(3 * MiB);
}

function scratch(mr: MemoryResource): Ptr {
  return mr.allocate(1000);
}

test('a pool under a limit, recorded with stacks: resources, the virtual range with its pages and blocks, live blocks with their sites, the history', () => {
  using pool = new PoolResource();
  using limited = new LimitingAdaptor(pool, 64 * MiB);
  using history = recordMemoryHistory({ stacks: true, maxEntries: 1000 });
  withCurrent(limited, () => {
    const w = loadWeights(limited);
    const s = scratch(limited);
    const gone = scratch(limited);
    limited.deallocate(gone, 1000);
    const snapshot = validated(memorySnapshot());

    assert.equal(snapshot.version, SNAPSHOT_VERSION);
    assert.equal(snapshot.trigger.kind, 'request');
    assert.equal(snapshot.device, 0);
    assert.equal(snapshot.currentResource, resourceRecord(limited).id);
    assert.ok(Math.abs(Date.parse(snapshot.createdAt) - (snapshot.timeOrigin + snapshot.time)) < 1);

    const top = resourceOf(snapshot, limited);
    const below = resourceOf(snapshot, pool);
    assert.deepEqual([top.className, top.upstream, top.current, top.status, top.segments], ['LimitingAdaptor', below.id, true, 'active', null]);
    assert.equal(top.figures?.limitBytes, 64 * MiB);
    // From before the first call, with the pages it mapped for the weights.
    assert.equal(top.baseline?.allocatedBytes, 0);
    assert.ok(top.baseline.reservedBytes! >= 3 * MiB && top.baseline.reservedBytes! <= pool.reservedBytes);
    assert.equal(below.className, 'PoolResource');
    assert.deepEqual(below.figures?.allocatedBytes, { value: 3 * MiB + 1000, peak: 3 * MiB + 2000, total: 3 * MiB + 2000 });

    // One virtual range; its mapped pages hold the live blocks; blocks tile the part cut so far.
    const [range] = below.segments!;
    assert.equal(below.segments!.length, 1);
    assert.equal(range!.kind, 'virtual-range');
    const pages = range!.pages!;
    const mappedBytes = pages.mapped.reduce((sum, [, count]) => sum + count * pages.pageBytes, 0);
    assert.equal(mappedBytes, pool.reservedBytes);
    let at = range!.address;
    for (const block of range!.blocks) {
      assert.equal(block.address, at, 'blocks are contiguous and ascending');
      at += block.bytes;
    }
    assert.ok(at <= range!.address + range!.bytes);
    const live = range!.blocks.filter((b) => b.state === 'live');
    assert.deepEqual(
      live.map((b) => [b.address, b.requestedBytes]),
      [
        [w, 3 * MiB],
        [s, 1000],
      ].sort((a, b) => a[0]! - b[0]!),
    );
    const isMapped = (address: number): boolean =>
      pages.mapped.some(([first, count]) => {
        const page = Math.floor((address - range!.address) / pages.pageBytes);
        return page >= first && page < first + count;
      });
    assert.ok(
      live.every((b) => isMapped(b.address) && isMapped(b.address + b.bytes - 1)),
      'live blocks lie on mapped pages',
    );
    // The freed block went back: parked (the pool's hit path) or free, not live.
    assert.ok(range!.blocks.some((b) => b.address === gone && b.state !== 'live'));

    // Live blocks: the two the program holds, with the sites that made them.
    const site = (stack: number | null): string => snapshot.stacks.find((x) => x.id === stack)!.frames[0]!;
    assert.deepEqual(
      snapshot.blocks.map((b) => [b.address, b.bytes, b.resource]),
      [
        [w, 3 * MiB, below.id],
        [s, 1000, below.id],
      ].sort((a, b) => a[0]! - b[0]!),
    );
    assert.match(site(snapshot.blocks.find((b) => b.address === w)!.stack), /loadWeights/);
    assert.match(site(snapshot.blocks.find((b) => b.address === s)!.stack), /scratch/);
    assert.ok(snapshot.blocks.every((b) => b.time !== null && b.time >= history.startTime));
    assert.match(site(live.find((b) => b.address === w)!.stack), /loadWeights/, 'segment blocks carry their site too');

    // The history, in order: the weights, two scratch blocks, one freed.
    const h = snapshot.history!;
    assert.deepEqual([h.recording, h.stacks, h.maxEntries, h.dropped], [true, true, 1000, 0]);
    assert.deepEqual(
      h.events.filter((e) => e.kind === 'alloc' || e.kind === 'free').map((e) => [e.kind, e.address, e.bytes]),
      [
        ['alloc', w, 3 * MiB],
        ['alloc', s, 1000],
        ['alloc', gone, 1000],
        ['free', gone, 1000],
      ],
    );
    assert.ok(h.events.every((e) => e.resource === top.id));
    limited.deallocate(w, 3 * MiB);
    limited.deallocate(s, 1000);
  });
});

test("a chunked pool: its chunks are segments, and the upstream's allocations (the chunks, through an adaptor) are not the program's blocks", () => {
  using cuda = new CudaResource();
  using capped = new LimitingAdaptor(cuda, 64 * MiB);
  using pool = new PoolResource({ upstream: capped, chunkSize: 4 * MiB });
  withCurrent(pool, () => {
    const a = pool.allocate(MiB);
    const b = pool.allocate(5 * MiB);
    const snapshot = validated(memorySnapshot());
    assert.equal(snapshot.history === null || !snapshot.history.recording, true);
    const chunks = resourceOf(snapshot, pool).segments!;
    assert.ok(chunks.length >= 2 && chunks.every((c) => c.kind === 'chunk' && c.pages === null));
    assert.equal(
      chunks.reduce((sum, c) => sum + c.bytes, 0),
      pool.reservedBytes,
    );
    const driver = resourceOf(snapshot, cuda);
    assert.ok(driver.segments!.every((segment) => segment.kind === 'allocation' && segment.blocks.length === 1));
    assert.equal(driver.segments!.length, chunks.length, 'each chunk is one driver allocation');
    assert.deepEqual(
      snapshot.blocks.map((x) => [x.address, x.bytes, x.resource, x.stack]),
      [
        [a, MiB, resourceRecord(pool).id, null],
        [b, 5 * MiB, resourceRecord(pool).id, null],
      ].sort((x, y) => x[0]! - y[0]!),
    );
    pool.deallocate(a, MiB);
    pool.deallocate(b, 5 * MiB);
  });
});

test('an arena: its region, its blocks, and a CudaResource: one segment per allocation', () => {
  using arena = new ArenaResource({ size: 4 * MiB });
  const p = arena.allocate(5000);
  const snapshot = validated(
    (() => {
      let taken: MemorySnapshot | undefined;
      withCurrent(arena, () => {
        taken = memorySnapshot();
      });
      return taken!;
    })(),
  );
  const [region] = resourceOf(snapshot, arena).segments!;
  assert.equal(region!.kind, 'region');
  assert.deepEqual(
    region!.blocks.filter((b) => b.state === 'live').map((b) => [b.address, b.requestedBytes]),
    [[p, 5000]],
  );
  assert.deepEqual(
    snapshot.blocks.map((b) => b.address),
    [p],
  );
  arena.deallocate(p, 5000);

  using cuda = new CudaResource();
  const q = cuda.allocate(3000);
  withCurrent(cuda, () => {
    const s = validated(memorySnapshot());
    assert.deepEqual(
      resourceOf(s, cuda).segments!.map((x) => [x.kind, x.address, x.bytes]),
      [['allocation', q, 3000]],
    );
    assert.deepEqual(
      s.blocks.map((b) => [b.address, b.bytes]),
      [[q, 3000]],
    );
  });
  cuda.deallocate(q, 3000);
});

test('a FixedSizeResource: one chunk segment cut into its blocks, live ones with their requested size', () => {
  using pool = new PoolResource();
  using fixed = new FixedSizeResource(pool, { blockSize: 64 * 1024, blocksToPreallocate: 4 });
  const a = fixed.allocate(1000);
  const b = fixed.allocate(64 * 1024);
  withCurrent(fixed, () => {
    const snapshot = validated(memorySnapshot());
    const segments = resourceOf(snapshot, fixed).segments!;
    assert.equal(segments.length, 1);
    const [chunk] = segments;
    assert.deepEqual([chunk!.kind, chunk!.bytes, chunk!.blocks.length], ['chunk', 4 * 64 * 1024, 4]);
    assert.deepEqual(
      chunk!.blocks
        .filter((x) => x.state === 'live')
        .map((x) => [x.address, x.requestedBytes])
        .sort((x, y) => x[0]! - y[0]!),
      [
        [a, 1000],
        [b, 64 * 1024],
      ].sort((x, y) => x[0]! - y[0]!),
    );
    assert.ok(chunk!.blocks.every((x, k) => x.address === chunk!.address + k * 64 * 1024 && x.bytes === 64 * 1024));
  });
  fixed.deallocate(a, 1000);
  fixed.deallocate(b, 64 * 1024);
});

test("a BinningResource: its bins' chunks and the requests it passed upstream are its segments; the pool below holds none of the program's blocks", () => {
  using pool = new PoolResource();
  using binning = new BinningResource(pool, { minSizeExponent: 10, maxSizeExponent: 12 });
  const small = binning.allocate(700);
  const large = binning.allocate(3 * 1024 * 1024 + 5);
  withCurrent(binning, () => {
    const snapshot = validated(memorySnapshot());
    const segments = resourceOf(snapshot, binning).segments!;
    const chunks = segments.filter((x) => x.kind === 'chunk');
    assert.equal(chunks.length, 1, 'the 1 KiB bin took one chunk');
    assert.deepEqual(
      chunks[0]!.blocks.filter((x) => x.state === 'live').map((x) => [x.address, x.requestedBytes]),
      [[small, 700]],
    );
    const passed = segments.filter((x) => x.kind === 'allocation');
    assert.deepEqual(
      passed.map((x) => [x.address, x.blocks.length, x.blocks[0]!.requestedBytes]),
      [[large, 1, 3 * 1024 * 1024 + 5]],
    );
    assert.deepEqual(
      snapshot.blocks.map((b) => [b.address, b.bytes, b.resource]).sort((x, y) => x[0]! - y[0]!),
      [
        [small, 700, resourceRecord(binning).id],
        [large, 3 * 1024 * 1024 + 5, resourceRecord(binning).id],
      ].sort((x, y) => x[0]! - y[0]!),
    );
  });
  binning.deallocate(small, 700);
  binning.deallocate(large, 3 * 1024 * 1024 + 5);
});

test('the ring overflowed: the snapshot says how many events were dropped; a destroyed stack keeps its id and label', () => {
  const pool = new PoolResource();
  using history = recordMemoryHistory({ maxEntries: 3 });
  for (let k = 0; k < 4; k++) pool.deallocate(pool.allocate(256 * (k + 1)), 256 * (k + 1));
  const id = resourceRecord(pool).id;
  pool.destroy();
  const snapshot = validated(memorySnapshot());
  assert.equal(snapshot.history!.recorded, history.recorded);
  assert.equal(snapshot.history!.dropped, history.recorded - 3);
  assert.deepEqual(
    snapshot.history!.events.map((e) => [e.kind, e.bytes]),
    [
      ['free', 768],
      ['alloc', 1024],
      ['free', 1024],
    ],
  );
  const gone = snapshot.resources.find((r) => r.id === id)!;
  assert.deepEqual([gone.status, gone.figures, gone.segments, gone.current], ['destroyed', null, null, false]);
  assert.match(gone.label, /^PoolResource\(/);
});

test('while nothing records: the blocks have no sites, the last history stays, stopped', () => {
  using pool = new PoolResource();
  withCurrent(pool, () => {
    const p = pool.allocate(4096);
    const snapshot = validated(memorySnapshot({ device: 0 }));
    assert.equal(snapshot.history?.recording ?? false, false);
    assert.deepEqual(
      snapshot.blocks.filter((b) => b.resource === resourceRecord(pool).id).map((b) => [b.address, b.bytes, b.stack, b.time]),
      [[p, 4096, null, null]],
    );
    pool.deallocate(p, 4096);
  });
  assert.throws(() => memorySnapshot(null as unknown as object), TypeError);
  assert.throws(() => memorySnapshot({ device: -1 }), RangeError);
});

test('the schema refuses what the format does not allow (so the validation above can fail)', () => {
  using pool = new PoolResource();
  using _history = recordMemoryHistory();
  pool.deallocate(pool.allocate(256), 256);
  const good = JSON.parse(JSON.stringify(memorySnapshot())) as Record<string, unknown> & MemorySnapshot;
  assert.ok(validate(good));
  const broken: Array<[string, (s: Record<string, unknown> & MemorySnapshot) => unknown]> = [
    ['another version', (s) => ({ ...s, version: 1 })],
    ['an unknown field', (s) => ({ ...s, extra: 1 })],
    [
      'a missing field',
      (s) => {
        const { history: _, ...rest } = s;
        return rest;
      },
    ],
    ['an alloc without an address', (s) => ({ ...s, history: { ...s.history!, events: s.history!.events.map((e) => ({ ...e, address: null })) } })],
    ['an unknown event kind', (s) => ({ ...s, history: { ...s.history!, events: s.history!.events.map((e) => ({ ...e, kind: 'malloc' })) } })],
    ['a negative size', (s) => ({ ...s, resources: s.resources.map((r) => ({ ...r, segments: r.segments?.map((g) => ({ ...g, bytes: -1 })) ?? null })) })],
    ['a bad date', (s) => ({ ...s, createdAt: 'yesterday' })],
  ];
  for (const [what, make] of broken) assert.equal(validate(make(good)), false, `the schema accepts ${what}`);
});
