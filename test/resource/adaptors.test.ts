/** Adaptors: statistics, limiting, tracking, logging, and the retry-on-out-of-memory policy. */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import type { Ptr } from '../../src/backend/backend.js';
import { CudaError, InvalidPointerError, isOutOfMemory, OutOfMemoryError } from '../../src/errors.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';
import { LimitingAdaptor } from '../../src/resource/adaptors/limiting.js';
import { LoggingAdaptor } from '../../src/resource/adaptors/logging.js';
import { RetryOnOutOfMemory } from '../../src/resource/adaptors/retry-on-oom.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import { MemoryResource, upstreamChain } from '../../src/resource/resource.js';
import { type MemoryKind } from '../../src/resource/figures.js';
import { StatisticsAdaptor } from '../../src/resource/adaptors/statistics.js';
import { TrackingAdaptor } from '../../src/resource/adaptors/tracking.js';
import { replay } from '../../src/replay/engine.js';
import { Stream } from '../../src/stream.js';
import { parseAllocationLog, readAllocationLog } from '../../src/replay/parse.js';
import { captureWarnings } from '../helpers.js';

/**
 * The smallest upstream: hands out distinct 256-aligned addresses from a counter (the adaptors
 * never touch memory, so none is needed) and counts what is live, so a test can see that an
 * adaptor returned everything it took.
 */
class CountingResource extends MemoryResource {
  readonly kind: MemoryKind = 'device';
  readonly alignment = 256;
  readonly deviceOrdinal = 0;
  readonly live = new Map<Ptr, number>();
  private next = 0x7f0000000000;

  protected doAllocate(bytes: number): Ptr {
    const ptr = this.next;
    this.next += Math.ceil(bytes / 256) * 256 + 256;
    this.live.set(ptr, bytes);
    return ptr;
  }

  protected doDeallocate(ptr: Ptr, bytes: number): void {
    const size = this.live.get(ptr);
    if (size === undefined) throw new InvalidPointerError(`upstream: 0x${ptr.toString(16)} is not live`);
    if (size !== bytes) throw new InvalidPointerError(`upstream: 0x${ptr.toString(16)} freed with the wrong size`);
    this.live.delete(ptr);
  }

  describe(): string {
    return 'CountingResource';
  }

  get liveBytes(): number {
    let sum = 0;
    for (const bytes of this.live.values()) sum += bytes;
    return sum;
  }
}

/** A random program: allocate a size, or free the k-th live block. */
type Step = { readonly op: 'alloc'; readonly bytes: number } | { readonly op: 'free'; readonly pick: number };
const steps = fc.array(
  fc.oneof(
    fc.record({ op: fc.constant('alloc' as const), bytes: fc.integer({ min: 1, max: 1 << 20 }) }),
    fc.record({ op: fc.constant('free' as const), pick: fc.nat() }),
  ),
  { maxLength: 200 },
);

/** Runs steps against `mr`; calls `check` after each with the model's figures. */
function run(
  mr: MemoryResource,
  program: readonly Step[],
  check?: (model: { current: number; peak: number; total: number; count: number; peakCount: number; totalCount: number }) => void,
): Array<{ ptr: Ptr; bytes: number }> {
  const live: Array<{ ptr: Ptr; bytes: number }> = [];
  const model = { current: 0, peak: 0, total: 0, count: 0, peakCount: 0, totalCount: 0 };
  for (const step of program) {
    if (step.op === 'alloc') {
      live.push({ ptr: mr.allocate(step.bytes), bytes: step.bytes });
      model.current += step.bytes;
      model.total += step.bytes;
      model.count += 1;
      model.totalCount += 1;
      model.peak = Math.max(model.peak, model.current);
      model.peakCount = Math.max(model.peakCount, model.count);
    } else if (live.length > 0) {
      const [block] = live.splice(step.pick % live.length, 1);
      mr.deallocate(block!.ptr, block!.bytes);
      model.current -= block!.bytes;
      model.count -= 1;
    }
    check?.(model);
  }
  return live;
}

describe('StatisticsAdaptor', () => {
  it('matches a simple model under random allocate/free sequences', () => {
    fc.assert(
      fc.property(steps, (program) => {
        const upstream = new CountingResource();
        const stats = new StatisticsAdaptor(upstream);
        const live = run(stats, program, (m) => {
          const { allocatedBytes, allocations } = stats.memoryFigures();
          assert.deepEqual(
            { allocatedBytes, allocations },
            {
              allocatedBytes: { value: m.current, peak: m.peak, total: m.total },
              allocations: { value: m.count, peak: m.peakCount, total: m.totalCount },
            },
          );
        });
        for (const b of live) stats.deallocate(b.ptr, b.bytes);
        assert.equal(stats.memoryFigures().allocatedBytes.value, 0);
        assert.equal(upstream.live.size, 0);
      }),
    );
  });

  it('resetPeakFigures starts the marks from the current figures', () => {
    const stats = new StatisticsAdaptor(new CountingResource());
    const a = stats.allocate(1000);
    const b = stats.allocate(3000);
    stats.deallocate(b, 3000);
    assert.equal(stats.memoryFigures().allocatedBytes.peak, 4000);
    stats.resetPeakFigures();
    assert.equal(stats.memoryFigures().allocatedBytes.peak, 1000);
    assert.equal(stats.memoryFigures().allocations.peak, 1);
    stats.deallocate(a, 1000);
  });

  it('forwards kind, alignment and device, and describes itself around the upstream', () => {
    const stats = new StatisticsAdaptor(new CountingResource());
    assert.equal(stats.kind, 'device');
    assert.equal(stats.alignment, 256);
    assert.equal(stats.deviceOrdinal, 0);
    assert.equal(stats.describe(), 'StatisticsAdaptor(CountingResource)');
    assert.throws(() => stats.allocate(0), RangeError);
  });
});

describe('LimitingAdaptor', () => {
  it('refuses past the limit with an OutOfMemoryError and leaves nothing allocated', () => {
    const upstream = new CountingResource();
    const limit = new LimitingAdaptor(upstream, 1 << 20);
    const blocks: Ptr[] = [];
    for (let i = 0; i < 4; i++) blocks.push(limit.allocate(256 << 10));
    assert.equal(limit.availableBytes, 0);
    assert.throws(
      () => limit.allocate(1),
      (error: unknown) => {
        assert.ok(error instanceof OutOfMemoryError);
        assert.equal(error.requestedBytes, 1);
        assert.match(error.resource ?? '', /LimitingAdaptor\(limit=1 MiB, CountingResource\)/);
        assert.equal(error.statistics?.allocatedBytes.value, 1 << 20);
        assert.equal(error.statistics?.allocations.value, 4);
        return true;
      },
    );
    assert.equal(upstream.live.size, 4, 'the refused request took nothing upstream');
    for (const p of blocks) limit.deallocate(p, 256 << 10);
    assert.equal(upstream.live.size, 0);
    assert.equal(limit.allocatedBytes, 0);
  });

  it('never lets a random program exceed its limit', () => {
    fc.assert(
      fc.property(steps, fc.integer({ min: 1 << 10, max: 8 << 20 }), (program, cap) => {
        const upstream = new CountingResource();
        const limit = new LimitingAdaptor(upstream, cap);
        const live: Array<{ ptr: Ptr; bytes: number }> = [];
        for (const step of program) {
          if (step.op === 'alloc') {
            try {
              live.push({ ptr: limit.allocate(step.bytes), bytes: step.bytes });
            } catch (error) {
              assert.ok(error instanceof OutOfMemoryError);
            }
          } else if (live.length > 0) {
            const [b] = live.splice(step.pick % live.length, 1);
            limit.deallocate(b!.ptr, b!.bytes);
          }
          assert.ok(limit.allocatedBytes <= cap);
          assert.ok(upstream.liveBytes <= cap);
        }
        for (const b of live) limit.deallocate(b.ptr, b.bytes);
        assert.equal(upstream.live.size, 0);
      }),
    );
  });
});

describe('TrackingAdaptor', () => {
  function allocateTheLeakyBuffer(mr: MemoryResource): Ptr {
    return mr.allocate(4096);
  }

  it('lists outstanding allocations and names the allocating function in the leak report', () => {
    const tracking = new TrackingAdaptor(new CountingResource(), { captureStacks: true });
    const leaked = allocateTheLeakyBuffer(tracking);
    allocateTheLeakyBuffer(tracking);
    const stream = Stream.create();
    const other = tracking.allocate(100, { handle: stream.handle });
    const list = tracking.outstanding();
    assert.equal(list.length, 3);
    assert.equal(list[0]!.ptr, leaked);
    assert.equal(list[0]!.bytes, 4096);
    assert.equal(list[2]!.stream, stream.handle);
    assert.ok(typeof list[0]!.time === 'number');
    assert.ok(!(list[0]!.stack ?? '').includes('tracking.js'), 'vram frames trimmed');
    const report = tracking.leakReport();
    assert.match(report, /allocateTheLeakyBuffer/);
    assert.match(report, /3 outstanding allocation/);
    // Largest group first: the two 4 KiB allocations from one place before the 100 bytes.
    assert.ok(report.indexOf('allocateTheLeakyBuffer') < report.indexOf('100 B'));
    tracking.deallocate(other, 100, { handle: stream.handle });
    stream.destroy();
    assert.equal(tracking.outstandingCount, 2);
  });

  it("reports what is outstanding through it in memoryFigures(), not its upstream's other blocks", () => {
    const pool = new PoolResource();
    try {
      const tracking = new TrackingAdaptor(pool);
      const beside = pool.allocate(5000); // straight from the pool, not through the adaptor
      const p = tracking.allocate(1000);
      const f = tracking.memoryFigures();
      assert.deepEqual(f.allocatedBytes, { value: 1000, peak: 1000, total: 1000 });
      assert.deepEqual(f.allocations, { value: 1, peak: 1, total: 1 });
      assert.equal(f.reservedBytes, pool.reservedBytes, "reserved is the pool's");
      assert.equal(tracking.reservedBytes, pool.reservedBytes);
      tracking.deallocate(p, 1000);
      tracking.resetPeakFigures();
      assert.deepEqual(tracking.memoryFigures().allocatedBytes, { value: 0, peak: 0, total: 1000 });
      pool.deallocate(beside, 5000);
    } finally {
      pool.destroy();
    }
  });

  it('rejects an unknown pointer and a wrong size with InvalidPointerError, passing nothing upstream', () => {
    const upstream = new CountingResource();
    const tracking = new TrackingAdaptor(upstream);
    const p = tracking.allocate(512);
    assert.throws(() => tracking.deallocate(p + 256, 512), InvalidPointerError);
    assert.throws(() => tracking.deallocate(p, 256), InvalidPointerError);
    assert.equal(upstream.live.size, 1);
    tracking.deallocate(p, 512);
    assert.throws(() => tracking.deallocate(p, 512), InvalidPointerError);
    assert.match(tracking.leakReport(), /no outstanding allocations/);
  });
});

describe('an adaptor that keeps its own count is equal only to itself', () => {
  /** Each adaptor that counts, and how to read its count of bytes. */
  const counting: Array<[string, (upstream: MemoryResource) => { mr: MemoryResource; counted: () => number }]> = [
    [
      'LimitingAdaptor',
      (upstream) => {
        const mr = new LimitingAdaptor(upstream, 8192);
        return { mr, counted: () => mr.allocatedBytes };
      },
    ],
    [
      'StatisticsAdaptor',
      (upstream) => {
        const mr = new StatisticsAdaptor(upstream);
        return { mr, counted: () => mr.memoryFigures().allocatedBytes.value };
      },
    ],
    [
      'TrackingAdaptor',
      (upstream) => {
        const mr = new TrackingAdaptor(upstream);
        return { mr, counted: () => mr.memoryFigures().allocatedBytes.value };
      },
    ],
  ];
  for (const [name, make] of counting) {
    it(`${name}: two over one upstream are not equal, and a block of one freed through the other is refused`, () => {
      const upstream = new CountingResource();
      const { mr: a, counted: countedA } = make(upstream);
      const { mr: b, counted: countedB } = make(upstream);
      assert.ok(a.isEqual(a));
      assert.ok(!a.isEqual(b) && !b.isEqual(a));
      const p = a.allocate(4096);
      assert.throws(() => b.deallocate(p, 4096), InvalidPointerError);
      assert.equal(upstream.live.size, 1, 'nothing passed upstream');
      assert.equal(countedA(), 4096);
      assert.equal(countedB(), 0, 'no negative count');
      // A pointer the upstream handed out directly was never counted either.
      const direct = upstream.allocate(256);
      assert.throws(() => a.deallocate(direct, 256), InvalidPointerError);
      assert.throws(() => a.deallocate(p, 512), InvalidPointerError, 'a wrong size moves no count');
      a.deallocate(p, 4096);
      assert.throws(() => a.deallocate(p, 4096), InvalidPointerError, 'nor does a second free');
      assert.equal(countedA(), 0);
      upstream.deallocate(direct, 256);
    });
  }

  it('LimitingAdaptor: a twin can never hand out twice its limit', () => {
    const upstream = new CountingResource();
    const a = new LimitingAdaptor(upstream, 4096);
    const b = new LimitingAdaptor(upstream, 4096);
    const p = a.allocate(4096);
    assert.throws(() => b.deallocate(p, 4096), InvalidPointerError);
    const q = b.allocate(4096);
    assert.throws(
      () => b.allocate(256),
      (e: unknown) => e instanceof OutOfMemoryError && e.reason === 'limit',
    );
    assert.equal(a.availableBytes, 0);
    a.deallocate(p, 4096);
    b.deallocate(q, 4096);
    assert.equal(upstream.live.size, 0);
  });

  it('LoggingAdaptor and RetryOnOutOfMemory count nothing: twins over one upstream stay equal', () => {
    const upstream = new CountingResource();
    assert.ok(new LoggingAdaptor(upstream, () => {}).isEqual(new LoggingAdaptor(upstream, () => {})));
    assert.ok(new RetryOnOutOfMemory(upstream).isEqual(new RetryOnOutOfMemory(upstream)));
  });
});

describe('LoggingAdaptor', () => {
  it('writes a log that parses back and replays to the same peak live', () => {
    fc.assert(
      fc.property(steps, (program) => {
        const lines: string[] = [];
        const stats = new StatisticsAdaptor(new CountingResource());
        const logging = new LoggingAdaptor(stats, (line) => lines.push(line));
        const live = run(logging, program);
        for (const b of live) logging.deallocate(b.ptr, b.bytes, { handle: 0 });
        assert.equal(lines[0], 'Thread,Time,Action,Pointer,Size,Stream');
        const trace = parseAllocationLog(lines.join('\n'), 'logged');
        assert.equal(trace.summary.peakLiveBytes, stats.memoryFigures().allocatedBytes.peak);
        assert.equal(trace.summary.allocations, stats.memoryFigures().allocations.total);
        const again = new StatisticsAdaptor(new CountingResource());
        const result = replay(trace, again);
        assert.equal(result.peakLiveBytes, stats.memoryFigures().allocatedBytes.peak);
        assert.equal(again.memoryFigures().allocatedBytes.peak, stats.memoryFigures().allocatedBytes.peak);
        assert.equal(again.memoryFigures().allocatedBytes.value, 0);
      }),
      { numRuns: 50 },
    );
  });

  it("a sink that throws on a free or a failed allocation's line is a warning: the call's own outcome stands", async () => {
    const counting = new CountingResource();
    let failing = false;
    const logging = new LoggingAdaptor(new LimitingAdaptor(counting, 1 << 20), () => {
      if (failing) throw new Error('disk full');
    });
    const a = logging.allocate(1000);
    failing = true;
    const codes = await captureWarnings(() => {
      logging.deallocate(a, 1000); // freed: no error, so the caller does not free it again
      assert.throws(() => logging.allocate(2 << 20), OutOfMemoryError, "the allocation's error, not the sink's");
    });
    assert.deepEqual(codes, ['VRAM_LOG_SINK', 'VRAM_LOG_SINK']);
    assert.throws(() => logging.deallocate(a, 1000), InvalidPointerError, 'the block was freed once');
    // An allocation whose line cannot be written is still refused, and its block given back.
    assert.throws(() => logging.allocate(1000), /disk full/);
    assert.equal(counting.liveBytes, 0);
    failing = false;
    logging.destroy();
  });

  it('buffers to a file and flushes on close; logs a failed allocation as RMM does', () => {
    const dir = mkdtempSync(join(tmpdir(), 'vram-log-'));
    try {
      const path = join(dir, 'log.csv');
      const logging = new LoggingAdaptor(new LimitingAdaptor(new CountingResource(), 1 << 20), path);
      using stream = Stream.create();
      const a = logging.allocate(1000, { handle: stream.handle });
      assert.throws(() => logging.allocate(2 << 20), OutOfMemoryError);
      logging.deallocate(a, 1000, { handle: stream.handle });
      logging.destroy();
      const trace = readAllocationLog(path);
      assert.deepEqual(
        trace.events.map((e) => e.action),
        ['allocate', 'allocate failure', 'free'],
      );
      assert.equal(trace.events[0]!.pointer, a);
      assert.equal(trace.events[0]!.stream, stream.handle);
      assert.equal(trace.summary.failures, 1);
      assert.equal(trace.summary.peakLiveBytes, 1000);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

/**
 * A caching resource for the retry test: keeps freed blocks for reuse by size and gives them back
 * upstream only on releaseCached(), as a pool does.
 */
class CachingResource extends MemoryResource {
  readonly kind: MemoryKind = 'device';
  readonly alignment = 256;
  readonly deviceOrdinal = 0;
  private readonly cache: Array<{ ptr: Ptr; bytes: number }> = [];
  constructor(override readonly upstream: MemoryResource) {
    super();
  }
  protected doAllocate(bytes: number): Ptr {
    const i = this.cache.findIndex((b) => b.bytes === bytes);
    if (i >= 0) return this.cache.splice(i, 1)[0]!.ptr;
    return this.upstream.allocate(bytes);
  }
  protected doDeallocate(ptr: Ptr, bytes: number): void {
    this.cache.push({ ptr, bytes });
  }
  protected override doReleaseCached(): number {
    let released = 0;
    for (const b of this.cache.splice(0)) {
      this.upstream.deallocate(b.ptr, b.bytes);
      released += b.bytes;
    }
    return released;
  }
  describe(): string {
    return `CachingResource(${this.upstream.describe()})`;
  }
}

describe('RetryOnOutOfMemory', () => {
  it('releases the cache below it and succeeds on the retry', () => {
    const upstream = new CountingResource();
    const cache = new CachingResource(new LimitingAdaptor(upstream, 4 << 20));
    const retry = new RetryOnOutOfMemory(cache);
    const blocks = [retry.allocate(1 << 20), retry.allocate(1 << 20), retry.allocate(1 << 20)];
    for (const p of blocks) retry.deallocate(p, 1 << 20); // cached, still held upstream
    assert.equal(upstream.live.size, 3);
    const big = retry.allocate(3 << 20); // needs the cached 3 MiB back
    assert.equal(retry.retries, 1);
    assert.equal(retry.recovered, 1);
    assert.equal(upstream.live.size, 1);
    retry.deallocate(big, 3 << 20);
    cache.releaseCached();
    assert.equal(upstream.live.size, 0);
  });

  it("releases a PoolResource's cached chunks and succeeds on the retry", () => {
    const limit = new LimitingAdaptor(new CudaResource(), 8 << 20);
    const pool = new PoolResource({ upstream: limit, chunkSize: 4 << 20 });
    const retry = new RetryOnOutOfMemory(pool);
    try {
      const a = retry.allocate(3 << 20);
      retry.deallocate(a, 3 << 20);
      assert.equal(limit.allocatedBytes, 4 << 20, 'the pool keeps its 4 MiB chunk');
      const b = retry.allocate(6 << 20); // a new chunk fits under the limit only once the cached one is released
      assert.equal(retry.retries, 1);
      assert.equal(retry.recovered, 1);
      retry.deallocate(b, 6 << 20);
    } finally {
      pool.destroy();
    }
    assert.equal(limit.allocatedBytes, 0);
  });

  it('releases the caches of roots too', () => {
    const upstream = new CountingResource();
    const limit = new LimitingAdaptor(upstream, 2 << 20);
    const other = new CachingResource(limit);
    const p = other.allocate(2 << 20);
    other.deallocate(p, 2 << 20);
    const retry = new RetryOnOutOfMemory(limit, { roots: [other] });
    const q = retry.allocate(2 << 20);
    assert.equal(retry.recovered, 1);
    retry.deallocate(q, 2 << 20);
  });

  it('raises OutOfMemoryError with the request and the nearest statistics when the retry fails', () => {
    const upstream = new CountingResource();
    const stats = new StatisticsAdaptor(new LimitingAdaptor(upstream, 1 << 20));
    const retry = new RetryOnOutOfMemory(stats);
    const held = retry.allocate(768 << 10);
    assert.throws(
      () => retry.allocate(512 << 10),
      (error: unknown) => {
        assert.ok(error instanceof OutOfMemoryError);
        assert.equal(error.requestedBytes, 512 << 10);
        assert.equal(error.statistics?.allocatedBytes.value, 768 << 10);
        assert.equal(error.statistics?.allocations.value, 1);
        assert.match(error.resource ?? '', /^RetryOnOutOfMemory\(StatisticsAdaptor\(LimitingAdaptor/);
        assert.ok(error.cause instanceof OutOfMemoryError);
        return true;
      },
    );
    retry.deallocate(held, 768 << 10);
    assert.equal(upstream.live.size, 0);
  });

  it('treats a driver CUDA_ERROR_OUT_OF_MEMORY as out of memory, and other errors not', () => {
    assert.ok(isOutOfMemory(new CudaError(2, 'CUDA_ERROR_OUT_OF_MEMORY', 'cuMemAlloc')));
    assert.ok(isOutOfMemory(new OutOfMemoryError({ requestedBytes: 1, call: 'x', reason: 'limit' })));
    assert.ok(!isOutOfMemory(new CudaError(1, 'CUDA_ERROR_INVALID_VALUE', 'cuMemAlloc')));
    assert.ok(!isOutOfMemory(new RangeError('bytes')));
  });
});

describe('upstreamChain', () => {
  it('lists an adaptor stack top first, each resource once', () => {
    const base = new CountingResource();
    const stats = new StatisticsAdaptor(base);
    const top = new LimitingAdaptor(new TrackingAdaptor(stats), 1 << 20);
    const chain = upstreamChain(top);
    assert.deepEqual(
      chain.map((r) => r.constructor.name),
      ['LimitingAdaptor', 'TrackingAdaptor', 'StatisticsAdaptor', 'CountingResource'],
    );
    assert.equal(chain[3], base);
    assert.deepEqual(upstreamChain(base), [base]);
  });
});
