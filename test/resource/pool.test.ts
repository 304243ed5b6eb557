/** PoolResource: random sequences against the model, bad input, stream order, growth and release. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { getBackend } from '../../src/backend/select.js';
import { Device } from '../../src/device.js';
import { DoubleFreeError, InvalidPointerError, isOutOfMemory, OutOfMemoryError, UseAfterFreeError } from '../../src/errors.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import { factories, logUniform, runModel, type SubjectFactory } from '../fuzz/allocator-model.js';
import { runDataFuzz } from '../fuzz/data-fuzz.js';
import type { ResourceFactory } from '../fuzz/resources.js';

const MiB = 1024 * 1024;
const backend = getBackend();
Device.get(0).makeCurrent();

for (const f of factories.filter((x) => x.name.startsWith('PoolResource'))) {
  test(`${f.name}: random allocate/free on 3 streams keeps every invariant`, () => {
    for (const seed of [1, 2, 3]) runModel(f, { seed, ops: 2000 });
  });
}

test('bad sizes are TypeError/RangeError before anything else', () => {
  using pool = new PoolResource();
  for (const bad of [0, -1, 1.5, NaN, Infinity, 2 ** 60]) assert.throws(() => pool.allocate(bad), RangeError);
  assert.throws(() => pool.allocate(8n as unknown as number), TypeError);
  assert.throws(() => pool.allocate('8 bytes please'), /bytes must be a whole number of bytes or a size like 64K/);
  assert.equal(pool.memoryFigures().allocations.value, 0);
});

test('foreign pointer, double free and wrong size are typed errors that leave the pool consistent', () => {
  using pool = new PoolResource();
  const a = pool.allocate(1000);
  const b = pool.allocate(3000);
  const foreign = backend.memAlloc(4096);
  assert.throws(() => pool.deallocate(foreign, 4096), InvalidPointerError);
  backend.memFree(foreign);
  assert.throws(() => pool.deallocate(a, 1024), InvalidPointerError);
  assert.throws(() => pool.deallocate(a + 256, 256), InvalidPointerError);
  pool.deallocate(a, 1000);
  assert.throws(() => pool.deallocate(a, 1000), DoubleFreeError);
  assert.equal(pool.memoryFigures().allocations.value, 1);
  assert.equal(pool.memoryFigures().allocatedBytes.value, 3000);
  pool.deallocate(b, 3000);
  assert.equal(pool.memoryFigures().allocations.value, 0);
});

test('a hit reuses the block just freed on the same stream; reserved stays put', () => {
  using pool = new PoolResource();
  const a = pool.allocate(MiB);
  const reserved = pool.reservedBytes;
  pool.deallocate(a, MiB);
  assert.equal(pool.allocate(MiB), a);
  assert.equal(pool.reservedBytes, reserved);
});

test('virtual growth: physical pages follow live data; cached pages are reused, then released', () => {
  const before = backend.memGetInfo().free;
  const pool = new PoolResource();
  const page = backend.memGetAllocationGranularity(0);
  const a = pool.allocate(8 * page);
  assert.equal(pool.reservedBytes, 8 * page);
  const b = pool.allocate(page);
  assert.equal(pool.reservedBytes, 9 * page);
  pool.deallocate(a, 8 * page);
  assert.equal(pool.reservedBytes, 9 * page, 'freed pages stay mapped as a cache');
  // A request that does not fit the freed range lands on fresh addresses, reusing cached pages:
  // before unmapping them the pool waits only for the stream that freed them (an event), never
  // for the whole device.
  const contextSynchronize = backend.contextSynchronize.bind(backend);
  const record = backend.eventRecord.bind(backend);
  const recorded: number[] = [];
  backend.contextSynchronize = () => assert.fail('growth must not synchronize the device');
  backend.eventRecord = (e, s) => {
    recorded.push(s);
    record(e, s);
  };
  let c: number;
  try {
    c = pool.allocate(10 * page);
  } finally {
    backend.contextSynchronize = contextSynchronize;
    backend.eventRecord = record;
  }
  assert.deepEqual(recorded, [0], 'one event, on the stream that freed the moved pages');
  assert.equal(pool.reservedBytes, 11 * page, 'only 2 new pages: 8 cached ones were moved');
  assert.equal(pool.growthFigures().pageMoves, 8);
  backend.memset(c, 7, 1, 10 * page);
  pool.deallocate(c, 10 * page);
  pool.deallocate(b, page);
  assert.equal(pool.releaseCached(), 11 * page);
  assert.equal(pool.reservedBytes, 0);
  assert.equal(pool.peakReservedBytes, 11 * page);
  pool.destroy();
  // Exact on the emulated device; a real GPU's free figure moves with the driver's own use.
  if (backend.name === 'emulated') assert.equal(backend.memGetInfo().free, before);
  assert.throws(() => pool.allocate(1), UseAfterFreeError);
});

test('virtual growth: a page moved away keeps its old mapping, so moving it back makes no driver call', () => {
  const before = backend.memGetInfo().free;
  const page = backend.memGetAllocationGranularity(0);
  const S = { handle: backend.streamCreate(0, 0) };
  const pool = new PoolResource();
  try {
    const a = pool.allocate(8 * page);
    const pin = pool.allocate(page); // keeps a's pages and c's apart
    pool.deallocate(a, 8 * page);
    // Ten pages on stream S fit nowhere mapped: a's eight pages move there (mapped anew), two are created.
    const c = pool.allocate(10 * page, S);
    assert.equal(pool.growthFigures().pageMoves, 8);
    assert.equal(pool.reservedBytes, 11 * page);
    backend.memset(c, 5, 1, 10 * page);
    // Nine pages on S beyond c (too large for a's old place), so that c's free pages end before them.
    const far = pool.allocate(9 * page, S);
    assert.equal(far, c + 10 * page);
    pool.deallocate(c, 10 * page, S);
    // Three of c's pages live again on S: the seven free ones are no place for eight pages, even
    // after the default stream gathers S's free blocks (nor, bounded by far, a place where fewer
    // pages are missing than at a's old place).
    const z = pool.allocate(3 * page, S);
    assert.equal(z, c);
    // Eight pages on the default stream: a's old place. The five of a's pages that are free move
    // back to their old mappings (no driver call); three more pages come as any growth's do.
    const maps0 = pool.growthFigures().driverCalls.map;
    const d = pool.allocate(8 * page);
    assert.equal(d, a);
    assert.equal(pool.growthFigures().pageMovesBack, 5);
    assert.equal(pool.growthFigures().driverCalls.map - maps0, 3, 'a mapping for each of the three other pages, none for the five');
    // Writable and readable through the old mappings (access was granted when they were made).
    backend.memset(d, 9, 1, 8 * page);
    const out = new Uint8Array(8 * page);
    backend.memcpyToHost(out, d, 8 * page);
    assert.ok(out.every((x) => x === 9));
    pool.deallocate(d, 8 * page);
    pool.deallocate(z, 3 * page, S);
    pool.deallocate(far, 9 * page, S);
    pool.deallocate(pin, page);
    // Every mapping, stale ones included, goes before the memory is released.
    const held = pool.reservedBytes;
    assert.equal(pool.releaseCached(), held);
    assert.equal(pool.reservedBytes, 0);
  } finally {
    pool.destroy();
    backend.streamDestroy(S.handle);
  }
  if (backend.name === 'emulated') assert.equal(backend.memGetInfo().free, before);
});

test('virtual growth: random multi-page blocks stay mapped; releaseCached leaves exactly the pages live blocks touch', () => {
  // Boundary pages are counted per block and interior pages implicitly; this checks the two agree
  // with a plain page-by-page count, and that moving cached pages never takes one a live block uses.
  const page = backend.memGetAllocationGranularity(0);
  let seed = 12345;
  const rand = (n: number): number => {
    seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
    return seed % n;
  };
  const pool = new PoolResource();
  const live: Array<[number, number]> = [];
  const touched = (): number => {
    const pages = new Set<number>();
    for (const [p, n] of live) {
      for (let q = Math.floor(p / page); q <= Math.floor((p + Math.ceil(n / 256) * 256 - 1) / page); q++) pages.add(q);
    }
    return pages.size;
  };
  for (let step = 0; step < 400; step++) {
    if (live.length > 0 && rand(5) < 2) {
      const [p, n] = live.splice(rand(live.length), 1)[0]!;
      pool.deallocate(p, n);
    } else {
      const kind = rand(3);
      const n = kind === 0 ? 256 * (1 + rand(64)) : kind === 1 ? page / 2 + 256 * rand(page / 256) : page * (1 + rand(6)) + 256 * rand(8);
      const p = pool.allocate(n);
      backend.memset(p, step & 0xff, 1, 1);
      backend.memset(p + Math.ceil(n / 256) * 256 - 256, step & 0xff, 1, 256);
      live.push([p, n]);
    }
    assert.ok(pool.reservedBytes >= touched() * page, `step ${step}: live pages must be mapped`);
    if (step % 50 === 49) {
      pool.releaseCached();
      assert.equal(pool.reservedBytes, touched() * page, `step ${step}: only pages live blocks touch remain`);
      for (const [p, n] of live) backend.memset(p, 1, 1, Math.ceil(n / 256) * 256);
    }
  }
  for (const [p, n] of live) pool.deallocate(p, n);
  pool.releaseCached();
  assert.equal(pool.reservedBytes, 0);
  pool.destroy();
});

test('maximumSize caps physical memory with an OutOfMemoryError carrying the request and statistics', () => {
  using pool = new PoolResource({ maximumSize: 4 * MiB });
  const a = pool.allocate(3 * MiB);
  const err = (() => {
    try {
      pool.allocate(2 * MiB);
    } catch (e) {
      return e;
    }
    return undefined;
  })();
  assert.ok(err instanceof OutOfMemoryError);
  assert.equal(err.requestedBytes, 2 * MiB);
  assert.match(err.resource ?? '', /PoolResource/);
  assert.equal(err.statistics?.allocatedBytes.value, 3 * MiB);
  pool.deallocate(a, 3 * MiB);
  const b = pool.allocate(4 * MiB);
  pool.deallocate(b, 4 * MiB);
});

test("sizes that break the pool's own unit are rounded (initial up, maximum down) or refused where it could serve nothing", () => {
  // Upstream growth: blocks are multiples of 256 bytes. 1000031 bytes round up to 1000192, which the maximum holds.
  const upstream = new CudaResource();
  const odd = new PoolResource({ upstream, initialSize: 1000031, maximumSize: 1000192 });
  assert.equal(odd.maximumSize, 1000192);
  const p = odd.allocate(1000031);
  odd.deallocate(p, 1000031);
  odd.destroy();
  assert.equal(new PoolResource({ upstream, maximumSize: 1000191 }).maximumSize, 999936, 'a maximum rounds down');
  assert.throws(() => new PoolResource({ upstream, initialSize: 1000031, maximumSize: 1000100 }), /initialSize \(1000031\) rounds up to 1000192 bytes/);
  assert.throws(() => new PoolResource({ upstream, maximumSize: 255 }), /maximumSize \(255\) is below one granule of 256 bytes/);
  // Virtual growth: the unit is a page. One page is the least a maximum can be; the initial size maps whole pages.
  const page = backend.memGetAllocationGranularity(0);
  assert.throws(() => new PoolResource({ maximumSize: '1M' }), /maximumSize \(1048576\) is below one page/);
  assert.throws(() => new PoolResource({ extentSize: 'adaptive', maximumSize: '1M' }), RangeError, 'it could never allocate');
  assert.throws(() => new PoolResource({ initialSize: 1000031, maximumSize: 1000192 }), RangeError);
  using virtual = new PoolResource({ initialSize: page + 1, maximumSize: 2 * page + 1 });
  assert.equal(virtual.maximumSize, 2 * page);
  assert.equal(virtual.reservedBytes, 2 * page, 'the initial size maps whole pages');
  virtual.deallocate(virtual.allocate(page + 1), page + 1);
  upstream.destroy();
});

test('growth options a pool does not use are refused, not ignored; an extent below a page is refused', () => {
  using upstream = new CudaResource();
  assert.throws(() => new PoolResource({ upstream, extentSize: 'adaptive' }), /extentSize is an option of virtual growth/);
  assert.throws(() => new PoolResource({ upstream, extentSize: 4 * MiB }), TypeError);
  assert.throws(() => new PoolResource({ upstream, addressSpaceSize: '4G' }), /addressSpaceSize is an option of virtual growth/);
  assert.throws(() => new PoolResource({ chunkSize: 4 * MiB }), /chunkSize is an option of growth from an upstream/);
  assert.throws(() => new PoolResource({ extentSize: 1 }), /extentSize \(1\) is below one page/);
  const page = backend.memGetAllocationGranularity(0);
  using rounded = new PoolResource({ extentSize: page + 1 });
  rounded.deallocate(rounded.allocate(2 * page), 2 * page);
});

test('upstream growth: chunks from upstream, wholly free chunks released', () => {
  const before = backend.memGetInfo().free;
  const pool = new PoolResource({ upstream: new CudaResource(), initialSize: 4 * MiB, chunkSize: 8 * MiB });
  assert.equal(pool.reservedBytes, 4 * MiB);
  const a = pool.allocate(MiB);
  const b = pool.allocate(5 * MiB);
  assert.equal(pool.reservedBytes, 12 * MiB);
  pool.deallocate(b, 5 * MiB);
  assert.equal(pool.releaseCached(), 8 * MiB);
  pool.deallocate(a, MiB);
  assert.equal(pool.releaseCached(), 4 * MiB);
  pool.destroy();
  // Exact on the emulated device; a real GPU's free figure moves with the driver's own use.
  if (backend.name === 'emulated') assert.equal(backend.memGetInfo().free, before);
});

/**
 * Runs `body` with two new streams while the backend's event records and stream waits are logged
 * (`record <stream>`, `wait <stream>`), then puts them back and destroys the streams.
 */
function withTwoStreams(body: (A: { handle: number }, B: { handle: number }, calls: string[]) => void): void {
  const calls: string[] = [];
  const waitEvent = backend.streamWaitEvent.bind(backend);
  const record = backend.eventRecord.bind(backend);
  backend.streamWaitEvent = (s, e) => {
    calls.push(`wait ${s}`);
    waitEvent(s, e);
  };
  backend.eventRecord = (e, s) => {
    calls.push(`record ${s}`);
    record(e, s);
  };
  const A = { handle: backend.streamCreate(0, 0) };
  const B = { handle: backend.streamCreate(0, 0) };
  try {
    body(A, B, calls);
  } finally {
    backend.streamWaitEvent = waitEvent;
    backend.eventRecord = record;
    backend.streamDestroy(A.handle);
    backend.streamDestroy(B.handle);
  }
}

/** The 16 bytes that end at `end`, read on `stream` (in order after the work queued there). */
function lastBytesOn(end: number, stream: { handle: number }): number[] {
  const out = new Uint8Array(16);
  const host = backend.memHostAlloc(16, 0);
  backend.memcpyAsync(host, end - 16, 16, stream.handle);
  backend.streamSynchronize(stream.handle);
  backend.memcpyToHost(out, host, 16);
  backend.memFreeHost(host);
  return [...out];
}

for (const mode of ['virtual', 'upstream'] as const) {
  test(`${mode}: a block freed on stream A is reused on stream B only after B waits on A`, () => {
    withTwoStreams((A, B, calls) => {
      const pool =
        mode === 'virtual'
          ? new PoolResource({ maximumSize: 2 * MiB })
          : new PoolResource({ upstream: new CudaResource(), initialSize: 2 * MiB, maximumSize: 2 * MiB });
      const n = 2 * MiB;
      const p = pool.allocate(n, A);
      backend.memsetAsync(p, 0xab, 1, n, A.handle);
      pool.deallocate(p, n, A);
      assert.deepEqual(calls, []);
      const q = pool.allocate(n, B);
      assert.equal(q, p, 'B reuses the block A freed');
      assert.deepEqual(calls, [`record ${A.handle}`, `wait ${B.handle}`]);
      assert.deepEqual(lastBytesOn(q + n, B), new Array(16).fill(0xab), "B's read ran after A's memset");
      pool.deallocate(q, n, B);
      assert.equal(pool.growthFigures().streamJoins.waits, 1);
      pool.destroy();
    });
  });
}

test("virtual: a growth takes another stream's free mapped pages by an event wait, before it moves a page", () => {
  // B's own best fit (its freed page, coalesced with the untouched range) needs a page mapped;
  // A's freed block lies on mapped pages. CUDA's pool reuses it by event dependency: B waits on
  // an event of A (no host wait), and no page moves (a page move is a host wait and driver calls).
  withTwoStreams((A, B, calls) => {
    const page = backend.memGetAllocationGranularity(0);
    const pool = new PoolResource();
    const driverCalls = (): number => Object.values(pool.growthFigures().driverCalls).reduce((a, b) => a + b, 0);
    const p = pool.allocate(2 * page, A);
    const q = pool.allocate(page, B);
    backend.memsetAsync(p, 0xcd, 1, 2 * page, A.handle);
    pool.deallocate(p, 2 * page, A);
    pool.deallocate(q, page, B);
    const before = driverCalls();
    assert.deepEqual(calls, []);
    const r = pool.allocate(2 * page, B);
    assert.equal(r, p, 'B takes the pages A freed');
    assert.deepEqual(calls, [`record ${A.handle}`, `wait ${B.handle}`], 'B waits on A in stream order');
    assert.equal(driverCalls(), before, 'no page mapped or moved');
    assert.equal(pool.growthFigures().pageMoves, 0);
    assert.equal(pool.reservedBytes, 3 * page);
    assert.deepEqual(lastBytesOn(r + 2 * page, B), new Array(16).fill(0xcd), "B's read ran after A's memset");
    pool.deallocate(r, 2 * page, B);
    pool.destroy();
  });
});

test("virtual: a stream about to cut into the top of the range first gathers the other streams' free blocks, which coalesce below it", () => {
  // A frees x and z, B frees y beside x; z lies next to the untouched rest of the range, so A's
  // lists hold the top block, a fit for anything. Before, A cut two pages there (mapped, so no
  // growth yet, but the used span grew past x and y, which stayed split between the streams: a
  // multi-stream loop drifted upwards a step at a time, and each drift past the mapped pages was
  // a growth). Now A takes B's blocks first (an event wait, no host wait), and x and y coalesce
  // into the place for two pages.
  withTwoStreams((A, B, calls) => {
    const page = backend.memGetAllocationGranularity(0);
    const pool = new PoolResource();
    const driverCalls = (): number => Object.values(pool.growthFigures().driverCalls).reduce((a, b) => a + b, 0);
    const x = pool.allocate(page, A);
    const y = pool.allocate(page, B);
    const live = pool.allocate(page);
    const z = pool.allocate(2 * page, A);
    assert.deepEqual([y, live, z], [x + page, x + 2 * page, x + 3 * page]);
    backend.memsetAsync(y, 0xcd, 1, page, B.handle);
    pool.deallocate(x, page, A);
    pool.deallocate(y, page, B);
    pool.deallocate(z, 2 * page, A);
    const before = driverCalls();
    calls.length = 0;
    const r = pool.allocate(2 * page, A);
    assert.equal(r, x, 'x and y, coalesced, rather than the top at z');
    assert.deepEqual(calls, [`record ${B.handle}`, `wait ${A.handle}`], 'A waits on B in stream order');
    assert.equal(driverCalls(), before, 'no page mapped or moved');
    assert.deepEqual(lastBytesOn(r + 2 * page, A), new Array(16).fill(0xcd), "A's read ran after B's memset");
    // The top is still whole: the next two pages on A go there, on z's mapped pages, with no wait.
    calls.length = 0;
    const t = pool.allocate(2 * page, A);
    assert.equal(t, z);
    assert.deepEqual(calls, []);
    assert.equal(pool.reservedBytes, 5 * page);
    pool.deallocate(t, 2 * page, A);
    pool.deallocate(r, 2 * page, A);
    pool.deallocate(live, page);
    pool.destroy();
  });
});

// Larger extents (PoolOptions.extentSize): one physical allocation per run of pages a growth maps.
test('extentSize: one allocation per run grown; cached extents go whole to make room; a live block keeps its extent whole', () => {
  const page = backend.memGetAllocationGranularity(0);
  const pool = new PoolResource({ extentSize: Infinity });
  const calls = (): number[] => {
    const c = pool.growthFigures().driverCalls;
    return [c.create, c.map, c.unmap, c.setAccess, c.release];
  };
  const a = pool.allocate(8 * page);
  assert.deepEqual(calls(), [1, 1, 0, 1, 0], 'eight pages: one create, one map, one set-access');
  const b = pool.allocate(page);
  assert.equal(pool.reservedBytes, 9 * page);
  pool.deallocate(a, 8 * page);
  // Ten pages do not fit a's range: a's cached extent is unmapped and released whole, ten pages created.
  const c = pool.allocate(10 * page);
  assert.deepEqual(calls(), [3, 3, 1, 3, 1]);
  assert.equal(pool.reservedBytes, 11 * page, 'the peak stays at what live data needs');
  assert.equal(pool.growthFigures().pageMoves, 8);
  backend.memset(c, 7, 1, 10 * page);
  pool.deallocate(c, 10 * page);
  // Two pages on c's cached extent: a hit. Its other eight pages cannot go while it lives.
  const d = pool.allocate(2 * page);
  assert.deepEqual(calls(), [3, 3, 1, 3, 1], 'a hit on cached pages');
  assert.ok(d >= c && d < c + 10 * page);
  assert.equal(pool.releaseCached(), 0, 'b and d keep their extents whole');
  assert.equal(pool.reservedBytes, 11 * page);
  pool.deallocate(d, 2 * page);
  pool.deallocate(b, page);
  assert.equal(pool.releaseCached(), 11 * page);
  assert.equal(pool.reservedBytes, 0);
  pool.destroy();
  assert.throws(() => new PoolResource({ extentSize: 0 }), RangeError);
});

for (const [label, extentSize] of [
  ['Infinity', Infinity],
  ['8 MiB', 8 * MiB],
] as const) {
  const name = `PoolResource (virtual memory, extentSize ${label})`;
  const create = (): PoolResource => new PoolResource({ maximumSize: 512 * MiB, extentSize });
  const model: SubjectFactory = {
    name,
    create: () => {
      const pool = create();
      return {
        resource: pool,
        size: (r) => logUniform(r, 24 * MiB),
        live: () => ({ bytes: pool.memoryFigures().allocatedBytes.value, count: pool.memoryFigures().allocations.value }),
        reserved: () => pool.reservedBytes,
        close: () => {
          pool.releaseCached();
          pool.destroy();
        },
      };
    },
  };
  test(`${name}: random allocate/free on 3 streams keeps every invariant`, () => {
    for (const seed of [1, 2, 3]) runModel(model, { seed, ops: 2000 });
  });
  test(`${name}: the data fuzz over its growth path`, () => {
    const target: ResourceFactory = {
      name,
      create: () => {
        const pool = create();
        return { resource: pool, maxBytes: 24 * MiB, close: () => pool.destroy() };
      },
    };
    for (const seed of [101, 202]) {
      const stats = runDataFuzz(target, { seed, ops: 2500 });
      assert.equal(stats.steps, 2500);
      assert.ok(stats.verifications >= 10 && stats.moves > 0 && stats.releases > 0, 'every kind of step ran');
    }
  });
}

test('extentSize: live data survives growth that takes cached extents (random blocks under a cap)', () => {
  const page = backend.memGetAllocationGranularity(0);
  const pool = new PoolResource({ extentSize: Infinity, maximumSize: 24 * page });
  const host = backend.memHostAlloc(256, 0);
  const tagAt = (p: number): number => {
    const out = new Uint8Array(1);
    backend.memcpyAsync(host, p, 256, 0);
    backend.streamSynchronize(0);
    backend.memcpyToHost(out, host, 1);
    return out[0]!;
  };
  let seed = 777;
  const rand = (n: number): number => {
    seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
    return seed % n;
  };
  const live: Array<{ p: number; n: number; tag: number }> = [];
  let refused = 0;
  try {
    for (let step = 0; step < 300; step++) {
      if (live.length > 0 && rand(5) < 2) {
        const { p, n } = live.splice(rand(live.length), 1)[0]!;
        pool.deallocate(p, n);
      } else {
        const n = rand(4) === 0 ? 256 * (1 + rand(64)) : page * (1 + rand(5)) + 256 * rand(4);
        let p: number;
        try {
          p = pool.allocate(n);
        } catch (error) {
          if (!(error instanceof OutOfMemoryError)) throw error;
          refused++;
          continue;
        }
        const tag = 1 + (step % 250);
        const end = Math.ceil(n / 256) * 256 - 256;
        backend.memset(p, tag, 1, 256);
        backend.memset(p + end, tag, 1, 256);
        live.push({ p, n, tag });
      }
      for (const { p, n, tag } of live) {
        assert.equal(tagAt(p), tag, `step ${step}: first bytes of a live block`);
        assert.equal(tagAt(p + Math.ceil(n / 256) * 256 - 256), tag, `step ${step}: last bytes of a live block`);
      }
    }
    assert.ok(pool.growthFigures().pageMoves > 0, 'growth took cached extents');
    assert.ok(refused < 150, 'most allocations fit under the cap');
  } finally {
    backend.memFreeHost(host);
    for (const { p, n } of live) pool.deallocate(p, n);
    pool.destroy();
  }
});

test('virtual growth below the high-water mark takes cached pages when the device has no memory left', () => {
  const page = backend.memGetAllocationGranularity(0);
  const pool = new PoolResource();
  pool.deallocate(pool.allocate(10 * page), 10 * page);
  pool.releaseCached();
  // Nine pages mapped (high-water mark ten), six of them cached in runs of two that fit no three-page block.
  const blocks = [2, 1, 2, 1, 2, 1].map((n) => [pool.allocate(n * page), n * page] as const);
  for (const k of [0, 2, 4]) pool.deallocate(...blocks[k]!);
  assert.equal(pool.reservedBytes, 9 * page);
  const filler: number[] = [];
  try {
    for (let chunk = 2 ** 30; chunk >= page; chunk /= 2) {
      for (;;) {
        try {
          filler.push(backend.memAlloc(chunk));
        } catch (error) {
          if (!isOutOfMemory(error)) throw error;
          break;
        }
      }
    }
    const moves = pool.growthFigures().pageMoves;
    const e = pool.allocate(3 * page);
    assert.equal(pool.growthFigures().pageMoves - moves, 3, 'three cached pages moved, none created');
    assert.equal(pool.reservedBytes, 9 * page);
    backend.memset(e, 1, 1, 3 * page);
    pool.deallocate(e, 3 * page);
  } finally {
    for (const p of filler) backend.memFree(p);
    for (const k of [1, 3, 5]) pool.deallocate(...blocks[k]!);
    pool.destroy();
  }
});

test('virtual growth after releaseCached takes cached pages before creating any, as a fresh pool does', () => {
  const page = backend.memGetAllocationGranularity(0);
  const pool = new PoolResource();
  const a = pool.allocate(8 * page);
  pool.deallocate(a, 8 * page);
  assert.equal(pool.releaseCached(), 8 * page);
  const c = pool.allocate(2 * page);
  const e = pool.allocate(page);
  pool.deallocate(c, 2 * page);
  // Three pages fit nowhere mapped: c's two cached pages move there and one page is created, although
  // the pool once held eight.
  const moves = pool.growthFigures().pageMoves;
  const d = pool.allocate(3 * page);
  assert.equal(pool.growthFigures().pageMoves - moves, 2);
  assert.equal(pool.reservedBytes, 4 * page);
  pool.deallocate(d, 3 * page);
  pool.deallocate(e, page);
  pool.destroy();
});

test('a growth whose best fit misses many pages goes where the fewest pages are missing (a loop of changing sizes moves fewer pages)', () => {
  const page = backend.memGetAllocationGranularity(0);
  const pool = new PoolResource();
  // Pages 0-5 and 6-11 (two blocks), a guard at 12, an eight-page block at 13-20, a guard at 21.
  const low = pool.allocate(6 * page);
  const mid = pool.allocate(6 * page);
  const guard1 = pool.allocate(page);
  const eight = pool.allocate(8 * page);
  const guard2 = pool.allocate(page);
  assert.equal(mid - low, 6 * page);
  assert.equal(eight - low, 13 * page);
  pool.deallocate(mid, 6 * page);
  pool.deallocate(eight, 8 * page);
  assert.equal(pool.releaseCached(), 14 * page);
  pool.deallocate(low, 6 * page);
  // Free now: pages 0-11 (0-5 mapped) and 13-20 (none mapped). An eight-page block fits best at 13
  // and would miss all eight pages there (six moved from 0-5, two created); at 0 it misses two.
  const moves = pool.growthFigures().pageMoves;
  const b = pool.allocate(8 * page);
  assert.equal(b, low, 'placed where six of its eight pages are mapped');
  assert.equal(pool.growthFigures().pageMoves - moves, 0, 'no cached page moved');
  assert.equal(pool.reservedBytes, 10 * page);
  backend.memset(b, 7, 1, 8 * page);
  const out = new Uint8Array(8 * page);
  backend.memcpyToHost(out, b, 8 * page);
  assert.ok(out.every((x) => x === 7));
  pool.deallocate(b, 8 * page);
  pool.deallocate(guard1, page);
  pool.deallocate(guard2, page);
  pool.destroy();
});
