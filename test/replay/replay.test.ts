/** Replay: the RMM log parser, the replay engine, and the real traces through real stacks. */
import assert from 'node:assert/strict';
import { describe, it, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EmulatedBackend } from '../../src/backend/emulated/emulated-backend.js';
import { setBackend } from '../../src/backend/select.js';
import { replayCommand } from '../../src/cli/replay.js';
import { Device } from '../../src/device.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';
import { LimitingAdaptor } from '../../src/resource/adaptors/limiting.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import { MemoryResource } from '../../src/resource/resource.js';
import { StatisticsAdaptor } from '../../src/resource/adaptors/statistics.js';
import { CounterCell } from '../../src/counter.js';
import type { MemoryFigures } from '../../src/resource/figures.js';
import { ReplayError, estimateDriverReservation, peakOccupied, replay } from '../../src/replay/engine.js';
import { TraceParseError, parseAllocationLog, readAllocationLog } from '../../src/replay/parse.js';
import { createStack, type StackOptions } from '../../src/replay/stacks.js';
import { RESOURCE_STACK_NAMES, createResourceStack } from '../../src/resource/stacks.js';
import { arenaSizeFor } from '../../src/replay/stacks.js';
import { checkCapacity, holdBallast, pagesAtPeak } from '../../src/replay/ballast.js';
import { FREE_MEMORY_SLACK, assertMemoryReturned, deviceMemoryUsed, onGpu } from '../helpers.js';

// resnet50_train peaks at 5.4 GiB live: give an emulated device room for it (its memory is lazily
// backed, so this costs nothing); a real GPU is what it is.
if (!onGpu) setBackend(new EmulatedBackend({ capacityBytes: 16 * 2 ** 30 }));

const HEADER = 'Thread,Time,Action,Pointer,Size,Stream';
/** The real allocation traces the project keeps in its fixtures. */
const traces = fileURLToPath(new URL('../../../test/fixtures/traces/', import.meta.url));

function log(...lines: string[]): string {
  return [HEADER, ...lines].join('\n') + '\n';
}

function parseFails(text: string, line: number, reason: RegExp): void {
  assert.throws(
    () => parseAllocationLog(text, 't.csv'),
    (error: unknown) => {
      assert.ok(error instanceof TraceParseError, String(error));
      assert.equal(error.line, line);
      assert.match(error.message, new RegExp(`^t\\.csv:${line}: `));
      assert.match(error.message, reason);
      return true;
    },
  );
}

describe('allocation log parser', () => {
  it('reports malformed lines with their line numbers', () => {
    parseFails('', 1, /empty/);
    parseFails('Thread,Time,Action,Pointer\n', 1, /missing column\(s\) Size, Stream/);
    parseFails(log('0,0,allocate,0x1000,256,0', '0,1,allocate,0x2000,256'), 3, /expected 6 fields, got 5/);
    parseFails(log('0,0,alloc,0x1000,256,0'), 2, /Action 'alloc'/);
    parseFails(log('0,0,allocate,0xzz,256,0'), 2, /Pointer '0xzz'/);
    parseFails(log('0,0,allocate,0x1000,-5,0'), 2, /Size '-5'/);
    parseFails(log('0,soon,allocate,0x1000,5,0'), 2, /Time 'soon'/);
    parseFails(log('x,0,allocate,0x1000,5,0'), 2, /Thread 'x'/);
    parseFails(log('0,0,allocate,0x1000,5,s'), 2, /Stream 's'/);
    parseFails(log('0,0,allocate,0x1000,0,0'), 2, /0 bytes/);
  });

  it('rejects a free of an unknown pointer, a double allocation and a size mismatch, naming the line', () => {
    parseFails(log('0,0,allocate,0x1000,256,0', '0,1,free,0x2000,256,0'), 3, /free of 0x2000, which is not allocated/);
    parseFails(log('0,0,allocate,0x1000,256,0', '0,1,free,0x1000,256,0', '0,2,free,0x1000,256,0'), 4, /not allocated/);
    parseFails(log('0,0,allocate,0x1000,256,0', '0,1,allocate,0x1000,256,0'), 3, /still live \(allocated at line 2\)/);
    parseFails(log('0,0,allocate,0x1000,256,0', '0,1,free,0x1000,512,0'), 3, /512 bytes, allocated with 256 at line 2/);
  });

  it("reads RMM's own form: wall-clock time, allocate failure with (nil), CRLF, extra blank lines", () => {
    const text = [
      HEADER,
      '140213,12:00:01.000250,allocate,0x7f00,100,0x0',
      '140213,12:00:01.000300,allocate failure,(nil),999,0',
      '',
      '140213,12:00:01.001250,free,0x7f00,100,0',
      '',
    ].join('\r\n');
    const trace = parseAllocationLog(text);
    assert.deepEqual(
      trace.events.map((e) => e.action),
      ['allocate', 'allocate failure', 'free'],
    );
    assert.equal(trace.summary.durationUs, 1000);
    assert.equal(trace.summary.failures, 1);
    assert.equal(trace.summary.operations, 2);
    assert.deepEqual(trace.summary.threads, [140213]);
  });

  it('summarises a synthetic trace with a known peak live', () => {
    // live: 100 -> 300 -> 200 -> 700 (peak) -> 400 -> 450; 450 left over
    const trace = parseAllocationLog(
      log(
        '0,0,allocate,0x1000,100,0',
        '0,1,allocate,0x2000,200,0',
        '0,2,free,0x1000,100,0',
        '0,3,allocate,0x3000,500,0',
        '0,4,free,0x3000,500,0',
        '0,5,allocate,0x3000,200,0',
        '0,6,allocate,0x1000,50,0',
      ),
    );
    const s = trace.summary;
    assert.equal(s.peakLiveBytes, 700);
    assert.equal(s.peakLiveCount, 3);
    assert.equal(s.allocations, 5);
    assert.equal(s.frees, 2);
    assert.equal(s.operations, 7);
    assert.equal(s.leftoverCount, 3);
    assert.equal(s.leftoverBytes, 450);
    assert.equal(s.largestAllocation, 500);
    assert.deepEqual(s.streams, [0]);
    assert.deepEqual(
      trace.events.map((e) => e.slot),
      [0, 1, 0, 2, 2, 3, 4],
    );
  });
});

/** An upstream that hands out distinct addresses and remembers nothing but what is live. */
class Addresses extends MemoryResource {
  readonly kind = 'device';
  readonly alignment = 256;
  readonly deviceOrdinal = 0;
  private next = 0x10000;
  private readonly live = new Map<number, number>();
  protected doAllocate(bytes: number): number {
    const p = this.next;
    this.next += bytes + 256;
    this.live.set(p, bytes);
    return p;
  }
  protected doDeallocate(ptr: number, bytes: number): void {
    assert.equal(this.live.get(ptr), bytes);
    this.live.delete(ptr);
  }
  describe(): string {
    return 'Addresses';
  }
}

function addresses(): StatisticsAdaptor {
  return new StatisticsAdaptor(new Addresses());
}

describe('replay engine', () => {
  const synthetic = parseAllocationLog(
    log(
      '0,0,allocate,0x1000,100,0',
      '0,1,allocate,0x2000,200,0',
      '0,2,free,0x1000,100,0',
      '0,3,allocate,0x3000,500,0',
      '0,4,free,0x3000,500,0',
      '0,5,allocate,0x3000,200,0',
      '0,6,allocate,0x1000,50,0',
    ),
    'synthetic',
  );

  it("replays in order to the trace's peak live and frees the leftovers", () => {
    const mr = addresses();
    const result = replay(synthetic, mr);
    assert.equal(mr.memoryFigures().allocatedBytes.peak, 700);
    assert.equal(mr.memoryFigures().allocations.total, 5);
    assert.equal(mr.memoryFigures().allocatedBytes.value, 0, 'leftovers freed after the timed loop');
    assert.equal(result.operations, 7);
    assert.equal(result.peakLiveBytes, 700);
    assert.ok(result.totalNs > 0);
    assert.equal(result.nsPerOperation, result.totalNs / 7);
    assert.equal(result.reservedSource, 'estimate');
    assert.equal(result.peakReservedBytes, 3 * 512); // three small blocks live at the end
    assert.equal(result.overheadPercent, (1536 / 700 - 1) * 100);
  });

  it("reads peak reserved from the resource's memoryFigures(), and medians with per-operation timing", () => {
    /** Reserves twice what it hands out, as its figures say (measured: no `reservedFromAllocated`). */
    class Doubling extends Addresses {
      #live = new CounterCell();
      #count = new CounterCell();
      protected override doAllocate(bytes: number): number {
        this.#live.add(bytes);
        this.#count.add(1);
        return super.doAllocate(bytes);
      }
      protected override doDeallocate(ptr: number, bytes: number): void {
        super.doDeallocate(ptr, bytes);
        this.#live.sub(bytes);
        this.#count.sub(1);
      }
      override memoryFigures(): MemoryFigures {
        return {
          allocatedBytes: this.#live.snapshot(),
          allocations: this.#count.snapshot(),
          reservedBytes: 2 * this.#live.value,
          peakReservedBytes: 2 * this.#live.peak,
        };
      }
      override resetPeakFigures(): void {
        this.#live.resetPeak();
      }
    }
    const result = replay(synthetic, new Doubling(), { perOperationTiming: true });
    assert.equal(result.reservedSource, 'resource');
    assert.equal(result.peakReservedBytes, 1400);
    assert.equal(result.overheadPercent, 100);
    assert.ok((result.medianAllocateNs ?? -1) >= 0);
    assert.ok((result.medianFreeNs ?? -1) >= 0);
  });

  it('stops at a failing operation, names its line and where it stood, and returns everything it took', () => {
    const mr = addresses();
    const limited = new LimitingAdaptor(mr, 512);
    assert.throws(
      () => replay(synthetic, limited),
      (error: unknown) => {
        assert.ok(error instanceof ReplayError);
        assert.equal(error.line, 5);
        assert.match(error.message, /^synthetic:5: allocate 500 bytes failed on LimitingAdaptor/);
        // The fourth operation, with 200 bytes live before it (100 and 200 allocated, 100 freed).
        const { reservedBytes: _, ...point } = error.point!;
        assert.deepEqual(point, { operation: 4, pass: 1, action: 'allocate', bytes: 500, liveBytes: 200 });
        return true;
      },
    );
    assert.equal(mr.memoryFigures().allocatedBytes.value, 0);
  });

  it("a failure in a later pass names that pass, and the pass's blocks go back", () => {
    // Eight allocations allowed: the first pass makes five, the second fails at its fourth.
    let allowed = 5 + 3;
    class Tokens extends Addresses {
      protected override doAllocate(bytes: number): number {
        if (allowed-- <= 0) throw new Error('out of tokens');
        return super.doAllocate(bytes);
      }
    }
    const mr = new StatisticsAdaptor(new Tokens());
    assert.throws(
      () => replay(synthetic, mr, { repeat: 2 }),
      (error: unknown) => {
        assert.ok(error instanceof ReplayError);
        assert.equal(error.point?.pass, 2);
        assert.equal(error.point?.operation, 6, "the second pass's fourth allocation: operation 6 of 7");
        assert.match(error.message, /\(pass 2 of 2\)/);
        return true;
      },
    );
    assert.equal(mr.memoryFigures().allocatedBytes.value, 0);
  });

  it('repeats the trace back to back: each pass its own pointers, figures and growth share', () => {
    const mr = addresses();
    const result = replay(synthetic, mr, { repeat: 3 });
    assert.equal(result.passes.length, 3);
    assert.equal(mr.memoryFigures().allocations.total, 15, 'five allocations a pass');
    assert.equal(mr.memoryFigures().allocatedBytes.value, 0, "every pass's leftovers freed");
    assert.equal(mr.memoryFigures().allocatedBytes.peak, 700, "a pass's leftovers never overlap the next pass");
    assert.equal(result.totalNs, result.passes[0]!.totalNs);
    assert.throws(() => replay(synthetic, addresses(), { repeat: 0 }), RangeError);

    using pool = new PoolResource();
    const warm = replay(synthetic, pool, { repeat: 2, growth: () => pool.growthFigures() });
    const [first, second] = warm.passes;
    assert.ok(first!.growth!.driverCalls.create >= 1 && first!.growth!.driverCalls.map >= 1, 'the first pass maps a page');
    assert.ok(first!.growth!.growthNs > 0);
    assert.deepEqual(second!.growth!.driverCalls, { create: 0, map: 0, unmap: 0, setAccess: 0, release: 0 }, 'a warm pool makes no driver call');
    assert.equal(second!.peakReservedBytes, first!.peakReservedBytes);
    const stats = pool.growthFigures();
    assert.equal(stats.driverCalls.map, stats.driverCalls.setAccess, 'one set-access per map (no peers)');
  });

  it('estimates what cuMemAlloc reserves by the documented rule', () => {
    assert.equal(estimateDriverReservation(1), 512);
    assert.equal(estimateDriverReservation(1 << 20), 1 << 20);
    assert.equal(estimateDriverReservation((1 << 20) + 1), 2 << 20);
    assert.equal(
      peakOccupied(synthetic, (b) => b),
      700,
    );
  });
});

describe('replay of the real traces', () => {
  const resnet = readAllocationLog(`${traces}resnet50_train.csv`);
  const bert = readAllocationLog(`${traces}bert_dynamic_infer.csv`);

  it('parses both shared traces', () => {
    assert.equal(resnet.summary.operations, 5081);
    assert.equal(bert.summary.operations, 16798);
    assert.deepEqual(resnet.summary.streams, [0]);
    assert.ok(resnet.summary.peakLiveBytes > 0);
  });

  it('replays resnet50_train through cuda with peak reserved >= peak live', () => {
    // Through the Device (which makes its context current), not the bare backend: driver calls
    // act on the current context, and the replay may be the first thing this process does.
    const before = deviceMemoryUsed(Device.get(0));
    const counted = new StatisticsAdaptor(new CudaResource());
    const result = replay(resnet, counted);
    assert.equal(result.operations, 5081);
    // The replay held exactly the trace's live set at its peak, and gave every block back.
    assert.equal(counted.memoryFigures().allocatedBytes.peak, result.peakLiveBytes);
    assert.equal(counted.memoryFigures().allocations.total, resnet.summary.allocations);
    assert.equal(counted.memoryFigures().allocatedBytes.value, 0, 'every block returned to the resource');
    // cuMemAlloc reports nothing per block: peak reserved is the documented estimate over the live set.
    assert.equal(result.reservedSource, 'estimate');
    assert.equal(result.peakReservedBytes, peakOccupied(resnet, estimateDriverReservation));
    assert.ok(result.peakReservedBytes >= result.peakLiveBytes);
    assertMemoryReturned(before, deviceMemoryUsed(Device.get(0)), 'every block returned to the driver');
  });

  it('replays resnet50_train through pool with peak reserved >= peak live', () => {
    const pool = new PoolResource();
    try {
      const result = replay(resnet, pool);
      assert.equal(result.reservedSource, 'resource');
      assert.ok(result.peakReservedBytes >= result.peakLiveBytes, `peak reserved ${result.peakReservedBytes} < peak live ${result.peakLiveBytes}`);
    } finally {
      pool.releaseCached();
    }
  });

  // The fragmentation figure is a property of the pool's algorithm, not of the GPU: the emulated
  // backend reproduces the driver's 2 MiB VMM granularity, so both backends must give these exact
  // bytes. (Measured 2026-11-23 on the emulated backend after mapped places stopped allowing one
  // page more than the best fit; before that 5,869,928,448 for resnet50_train, bert unchanged, and
  // before parking came in 5,851,054,080 and 937,426,944 there and on an H200. `npm run test:gpu`
  // checks the GPU agrees. A deliberate change to the pool's placement policy changes them:
  // re-measure on both backends.)
  for (const [name, expected] of [
    ['resnet50_train', 5857345536],
    ['bert_dynamic_infer', 941621248],
  ] as const) {
    it(`${name} through pool: the same peak reserved bytes on every backend`, () => {
      const trace = name === 'resnet50_train' ? resnet : bert;
      const pool = new PoolResource();
      try {
        const result = replay(trace, pool);
        assert.equal(result.peakReservedBytes, expected);
        assert.ok(result.peakReservedBytes < result.peakLiveBytes * 1.01, 'overhead under 1%');
      } finally {
        pool.destroy();
      }
    });
  }

  it('createStack passes extentSize to the pool: fewer driver calls on the first pass, and it says so', () => {
    const calls = (options: StackOptions): { calls: number; notes: readonly string[] } => {
      const stack = createStack('pool', bert, options);
      try {
        const result = replay(bert, stack.resource, { ...(stack.growth ? { growth: stack.growth } : {}) });
        const growth = result.passes[0]?.growth;
        assert.ok(growth, 'the pool reports its growth');
        return { calls: Object.values(growth.driverCalls).reduce((sum, n) => sum + n, 0), notes: stack.notes };
      } finally {
        stack.destroy();
      }
    };
    const plain = calls({});
    const extents = calls({ extentSize: 64 * 2 ** 20 });
    assert.deepEqual(plain.notes, []);
    assert.deepEqual(extents.notes, [`extentSize ${64 * 2 ** 20} bytes`]);
    assert.ok(extents.calls < plain.calls, `64 MiB extents: ${extents.calls} driver calls against ${plain.calls}`);
  });
});

describe('the 4-stream variants of the real traces (scripts/deal-streams.mjs)', () => {
  for (const [name, original] of [
    ['resnet50_train', 5081],
    ['bert_dynamic_infer', 16798],
  ] as const) {
    const base = readAllocationLog(`${traces}${name}.csv`);
    for (const mode of ['same', 'cross'] as const) {
      it(`${name}_4s_${mode}: the trace dealt round-robin over 4 streams, freed on ${mode === 'same' ? 'the allocating' : 'the next'} stream`, () => {
        const dealt = readAllocationLog(`${traces}${name}_4s_${mode}.csv`);
        assert.equal(dealt.summary.operations, original);
        assert.equal(dealt.summary.peakLiveBytes, base.summary.peakLiveBytes, 'only the streams differ');
        assert.deepEqual(dealt.summary.streams, [1, 2, 3, 4]);
        const allocatedOn = new Map<number, number>();
        let allocations = 0;
        for (const e of dealt.events) {
          if (e.action === 'allocate') {
            assert.equal(e.stream, 1 + (allocations++ % 4), 'dealt in turn');
            allocatedOn.set(e.slot, e.stream);
          } else if (e.action === 'free') {
            const on = allocatedOn.get(e.slot)!;
            assert.equal(e.stream, mode === 'same' ? on : 1 + (on % 4));
          }
        }
      });
    }
  }

  it("replay reports each pass's stream joins (event records and waits) beside its driver calls", () => {
    const cross = readAllocationLog(`${traces}resnet50_train_4s_cross.csv`);
    const stack = createStack('pool', cross);
    try {
      const result = replay(cross, stack.resource, { repeat: 2, growth: stack.growth! });
      const joins = result.passes.map((p) => p.growth!.streamJoins!);
      assert.ok(joins[0]!.waits > 0, 'blocks freed on the next stream are taken back by a join');
      assert.ok(joins.every((j) => j.records >= 0 && j.waits >= 0));
      assert.ok(joins[1]!.waits > 0, "a later pass's joins are its own (counted between its readings)");
    } finally {
      stack.destroy();
    }
    const single = readAllocationLog(`${traces}resnet50_train.csv`);
    const one = createStack('pool', single);
    try {
      const result = replay(single, one.resource, { repeat: 2, growth: one.growth! });
      // Its records are the host waits' before page moves (one-page extents), never a join's.
      assert.deepEqual(
        result.passes.map((p) => p.growth!.streamJoins!.waits),
        [0, 0],
        'one stream joins nothing',
      );
    } finally {
      one.destroy();
    }
  });
});

describe('replay of a multi-stream trace', () => {
  // Three streams, and blocks freed on another stream than the one they were allocated on, in
  // sizes that reach the binning stack's bins and its pool, and the arena's small and large lists.
  const multi = readAllocationLog(`${traces}multi_stream.csv`);

  it('parses its streams', () => {
    assert.deepEqual(multi.summary.streams, [0, 0x55d0c0a0, 0x55d0c1f0]);
    const allocatedOn = new Map<number, number>();
    let crossed = 0;
    for (const e of multi.events) {
      if (e.action === 'allocate') allocatedOn.set(e.slot, e.stream);
      else if (e.action === 'free' && allocatedOn.get(e.slot) !== e.stream) crossed++;
    }
    assert.ok(crossed >= 5, `${crossed} frees on another stream than the allocation's`);
  });

  for (const name of ['adaptive', 'pool'] as const) {
    it(`through ${name}, no driver call and no page moved after the first pass, at the first pass's peak`, () => {
      // A stream that would cut into the top of the range gathers the other streams' free blocks
      // first (an event wait each), so each pass meets the free space coalesced as the first pass
      // left it and places every block where that pass did. Before, the stream holding the top
      // cut it while the others' blocks lay split below: adaptive made 9 driver calls in passes 2-4
      // (a growth in each of passes 2 and 3) and held 28 MiB; pool, 26 calls over passes 2-20.
      const stack = createStack(name, multi);
      try {
        const result = replay(multi, stack.resource, { repeat: 8, ...(stack.growth ? { growth: stack.growth } : {}) });
        const later = result.passes.slice(1).map((pass) => {
          assert.ok(pass.growth, 'the pool reports its growth');
          return Object.values(pass.growth.driverCalls).reduce((sum, n) => sum + n, 0) + pass.growth.pageMoves;
        });
        assert.deepEqual(later, [0, 0, 0, 0, 0, 0, 0], 'driver calls plus page moves, passes 2-8');
        const first = result.passes[0]!.peakReservedBytes;
        assert.ok(
          result.passes.every((pass) => pass.peakReservedBytes === first),
          'no pass holds more than the first',
        );
        const page = Device.get(0).backend.memGetAllocationGranularity(0);
        assert.ok(first <= 7 * page, `${first} bytes: the 7 pages peak live needs`);
      } finally {
        stack.destroy();
      }
    });
  }

  // Each stack caches memory freed on the replay's streams; closing it after the replay must not
  // touch a stream the replay destroyed (it did: binning and arena recorded events on them, an
  // error here and a crash on a GPU).
  for (const name of RESOURCE_STACK_NAMES) {
    for (const timeline of [false, true]) {
      it(`replays through ${name}${timeline ? ' with the timeline' : ''} and closes the stack`, () => {
        const before = deviceMemoryUsed(Device.get(0));
        const stack = createStack(name, multi);
        try {
          const result = replay(multi, stack.resource, {
            repeat: timeline ? 1 : 2,
            timeline,
          });
          assert.equal(result.operations, multi.summary.operations);
          if (timeline)
            assert.ok(
              result.timeline!.peakBlocks.some((b) => b.stream !== 0),
              'blocks of other streams at the peak',
            );
        } finally {
          stack.destroy();
        }
        assertMemoryReturned(before, deviceMemoryUsed(Device.get(0)), `${name}: everything given back`);
      });
    }
  }
});

describe('vram replay', () => {
  it('exits 2 on usage errors, 1 on a bad log, 0 on a replay that succeeds', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'vram-replay-'));
    const quiet = { stdout: process.stdout.write, stderr: process.stderr.write };
    process.stdout.write = process.stderr.write = (() => true) as typeof process.stdout.write;
    try {
      const good = join(dir, 'good.csv');
      const bad = join(dir, 'bad.csv');
      writeFileSync(good, log('0,0,allocate,0x1000,100,0', '0,1,free,0x1000,100,0'));
      writeFileSync(bad, log('0,0,free,0x1000,100,0'));
      assert.equal(await replayCommand([]), 2);
      assert.equal(await replayCommand([join(dir, 'missing.csv')]), 2);
      assert.equal(await replayCommand([good, '--resource', 'nope']), 2);
      assert.equal(await replayCommand([good, '--bogus']), 2);
      assert.equal(await replayCommand([bad]), 1);
      assert.equal(await replayCommand([good, '-r', 'cuda', '-r', 'pool', '--json']), 0);
      assert.equal(await replayCommand([good, '--resource', 'all']), 0);
      assert.equal(await replayCommand([good, '-r', 'pool', '-r', 'async', '--repeat', '3']), 0);
      for (const bad of ['0', '-1', '1.5', 'x', '1001']) assert.equal(await replayCommand([good, '--repeat', bad]), 2, `--repeat ${bad}`);
      assert.equal(await replayCommand([good, '-r', 'pool', '-r', 'binning', '--extent-size', '64M']), 0);
      for (const bad of ['0', '-1', 'x', '']) assert.equal(await replayCommand([good, '--extent-size', bad]), 2, `--extent-size ${bad}`);
    } finally {
      process.stdout.write = quiet.stdout;
      process.stderr.write = quiet.stderr;
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

/** Runs `vram replay` in this process, its output captured. */
async function replayCaptured(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const saved = { stdout: process.stdout.write, stderr: process.stderr.write };
  let stdout = '';
  let stderr = '';
  process.stdout.write = ((chunk: string | Uint8Array) => {
    stdout += String(chunk);
    return true;
  }) as typeof process.stdout.write;
  process.stderr.write = ((chunk: string | Uint8Array) => {
    stderr += String(chunk);
    return true;
  }) as typeof process.stderr.write;
  try {
    return { code: await replayCommand(args), stdout, stderr };
  } finally {
    process.stdout.write = saved.stdout;
    process.stderr.write = saved.stderr;
  }
}

test('vram replay --repeat 2 names the one later pass "pass 2", not "passes 2-2", and prints counts as whole numbers', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'vram-repeat-'));
  try {
    const trace = join(dir, 'two.csv');
    writeFileSync(trace, log('0,0,allocate,0x1000,100,0', '0,1,free,0x1000,100,0'));
    const two = await replayCaptured(trace, '-r', 'pool', '--repeat', '2');
    assert.equal(two.code, 0, two.stderr);
    assert.match(two.stdout, /the first, then pass 2 \(/);
    assert.doesNotMatch(two.stdout, /2-2/, 'nor in the column headings');
    assert.match(two.stdout, /^resource +us\/op first +us\/op pass 2 +growth ms first +growth ms pass 2 +page moves first +page moves pass 2 /m);
    // Page moves, driver calls and joins (first and later) are counts: whole numbers.
    const row = /^pool {2,}.*$/m.exec(two.stdout.slice(two.stdout.indexOf('passes (--repeat')))?.[0].split(/ {2,}/) ?? [];
    assert.equal(row.length, 13, two.stdout);
    for (const cell of row.slice(5, 11)) assert.match(cell, /^\d[\d,]*$/, `a count: ${row.join(' | ')}`);
    const three = await replayCaptured(trace, '-r', 'pool', '--repeat', '3');
    assert.match(three.stdout, /the first, then passes 2-3 \(/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

/** A stack's outcome in `vram replay --json` (the fields these tests read). */
interface JsonOutcome {
  stack: string;
  ok: boolean;
  fits?: boolean;
  outOfMemory?: boolean;
  freeAtStartBytes?: number;
  error?: string;
  at?: { operation: number; line: number; pass: number; action: string; bytes: number; liveBytes: number; reservedBytes?: number };
  result?: { peakReservedBytes: number; passes: { growth?: unknown }[] };
}
interface JsonTrace {
  trace: { source: string; peakLiveBytes: number; operations: number };
  capacity?: {
    bytes: number;
    ballastBytes: number;
    freeBytes: number;
    totalBytes: number;
    cannotFit?: {
      operation: number;
      line: number;
      liveBytes: number;
      blocks: number;
      pageBytes: number;
      pages: number;
      pagesHeld: number;
      leastCapacityBytes: number;
      leastHeadroomPercent: number;
    };
  };
  results: JsonOutcome[];
}

describe('replay under a capacity (a ballast holds the rest of the device)', () => {
  const resnetPath = `${traces}resnet50_train.csv`;
  const resnet = readAllocationLog(resnetPath);
  const page = 2 << 20;
  // A device made first: replayCommand must not resize the emulated backend this file chose.
  Device.get(0);

  it('holdBallast leaves the capacity free, its whole pages, and gives it all back', () => {
    const device = Device.get(0);
    const before = deviceMemoryUsed(device);
    const capacity = 1024 ** 3 + 12345;
    const ballast = holdBallast(device, capacity);
    try {
      // Exactly so on the emulated backend; on a GPU the driver's own bookkeeping may move it a little.
      assert.ok(
        ballast.freeBytes > capacity - page - FREE_MEMORY_SLACK && ballast.freeBytes <= capacity + FREE_MEMORY_SLACK,
        `free ${ballast.freeBytes} for a capacity of ${capacity}`,
      );
      if (!onGpu) assert.equal(ballast.freeBytes, Math.floor(capacity / page) * page, "the capacity's whole pages");
      assert.equal(ballast.bytes % page, 0, 'whole pages');
      assert.equal(device.memInfo().free, ballast.freeBytes);
    } finally {
      ballast.release();
      ballast.release();
    }
    assertMemoryReturned(before, deviceMemoryUsed(device), 'the ballast given back');
    const { free } = device.memInfo();
    assert.throws(() => checkCapacity(device, free + page), /is more than device 0's free memory/);
    assert.throws(() => holdBallast(device, free + page), RangeError);
  });

  it('a capacity below peak live fails every stack, each cleaned up, with the failing operation reported', async () => {
    const before = deviceMemoryUsed(Device.get(0));
    const capacity = Math.floor(resnet.summary.peakLiveBytes * 0.7);
    const { code, stdout, stderr } = await replayCaptured(resnetPath, '-r', 'all', '--capacity', String(capacity), '--json');
    assert.equal(code, 1, stderr);
    const report = JSON.parse(stdout) as JsonTrace;
    assert.equal(report.capacity?.bytes, capacity);
    assert.ok(report.capacity!.freeBytes > capacity - page - FREE_MEMORY_SLACK && report.capacity!.freeBytes <= capacity + FREE_MEMORY_SLACK);
    assert.deepEqual(
      report.results.map((r) => r.stack),
      [...RESOURCE_STACK_NAMES],
    );
    for (const r of report.results) {
      assert.equal(r.fits, false, `${r.stack} does not fit`);
      assert.equal(r.ok, false);
      // The ballast stayed; every stack before this one gave back all it took.
      // (Exactly on the emulated backend; within the driver's own bookkeeping on a GPU.)
      assert.ok(
        Math.abs(r.freeAtStartBytes! - report.capacity!.freeBytes) <= FREE_MEMORY_SLACK,
        `${r.stack} saw ${r.freeAtStartBytes} free, not the capacity's ${report.capacity!.freeBytes}`,
      );
      if (r.stack === 'arena') {
        // Its fixed reservation is larger than the capacity: it fails when made.
        assert.ok(arenaSizeFor(resnet.summary.peakLiveBytes) > capacity);
        assert.match(r.error!, /could not create the stack/);
        continue;
      }
      assert.equal(r.outOfMemory, true, `${r.stack}: ${r.error}`);
      const at = r.at!;
      assert.ok(at.operation >= 1 && at.operation <= resnet.summary.operations);
      assert.equal(at.pass, 1);
      assert.equal(at.action, 'allocate');
      const event = resnet.events.find((e) => e.line === at.line)!;
      assert.equal(event.size, at.bytes, 'the request of the line named');
      // Out of memory for real: what the stack held (or, unmeasured, what was live) and the request
      // come near the capacity, before the trace's peak.
      const held = Math.max(at.reservedBytes ?? 0, at.liveBytes);
      assert.ok(
        held + at.bytes > capacity * 0.9 && at.liveBytes < resnet.summary.peakLiveBytes,
        `${r.stack}: failed with ${at.liveBytes} live, ${at.reservedBytes} held, asking ${at.bytes}; capacity ${capacity}`,
      );
      assert.match(stderr, new RegExp(`^vram replay: ${r.stack}: .*:${at.line}: allocate ${at.bytes} bytes failed`, 'm'));
    }
    assert.doesNotMatch(stderr, /too small for this trace/, 'no hint to enlarge the device: the capacity was asked for');
    assertMemoryReturned(before, deviceMemoryUsed(Device.get(0)), 'stacks and ballast given back');
  });

  it('a generous headroom fits every stack, and the table says so', async () => {
    const { code, stdout, stderr } = await replayCaptured(resnetPath, '-r', 'all', '--headroom', '50%');
    assert.equal(code, 0, stderr);
    assert.match(stdout, /^capacity [\d.]+ GiB \(peak live 5\.43 GiB \+ 50%, --headroom 50%\): a ballast of .* so each stack sees [\d.]+ GiB free/m);
    assert.match(stdout, /^resource +fits +ops /m);
    for (const stack of RESOURCE_STACK_NAMES) assert.match(stdout, new RegExp(`^${stack}(?: \\(model\\))? +yes +5081 `, 'm'));
  });

  it('--headroom 3 fits resnet50_train on the pool stack (within 1% of peak live), passes 2-4 too', async () => {
    const { code, stdout, stderr } = await replayCaptured(resnetPath, '-r', 'pool', '--headroom', '3', '--repeat', '4', '--json');
    assert.equal(code, 0, stderr);
    const report = JSON.parse(stdout) as JsonTrace;
    assert.equal(report.capacity!.bytes, Math.ceil(resnet.summary.peakLiveBytes * 1.03));
    const [pool] = report.results;
    assert.equal(pool!.fits, true);
    assert.equal(pool!.result!.passes.length, 4);
    assert.ok(pool!.result!.peakReservedBytes <= report.capacity!.freeBytes);
  });

  it('a capacity of fewer whole pages than the peak fills says it cannot fit, and the least whole-page headroom', async () => {
    // multi_stream peaks at 13.3 MiB in 5 blocks: 7 pages of 2 MiB at the least. 3% more is
    // 13.7 MiB, 6 whole pages: no allocator over pages can run it, and the replay says so.
    const path = `${traces}multi_stream.csv`;
    const multi = readAllocationLog(path);
    const peak = pagesAtPeak(multi);
    assert.deepEqual({ ...peak, liveBytes: undefined }, { operation: 5, line: 6, liveBytes: undefined, blocks: 5, pageBytes: page, pages: 7 });
    assert.equal(peak.liveBytes, multi.summary.peakLiveBytes);
    const tight = await replayCaptured(path, '-r', 'adaptive', '--headroom', '3', '--json');
    assert.equal(tight.code, 1);
    const report = JSON.parse(tight.stdout) as JsonTrace;
    assert.deepEqual(report.capacity!.cannotFit, {
      ...peak,
      pagesHeld: 6,
      leastCapacityBytes: 7 * page,
      leastHeadroomPercent: 6,
    });
    assert.equal(report.results[0]!.fits, false);
    const text = await replayCaptured(path, '-r', 'adaptive', '--headroom', '3');
    assert.match(
      text.stdout,
      /^fit +cannot fit: at operation 5 \(line 6\) the trace has 13\.3 MiB live in 5 blocks, which needs at least 7 pages of 2 MiB; the capacity, 13\.7 MiB, holds 6\. .* the least whole-page capacity is 14 MiB \(--headroom 6\)$/m,
    );
    // The headroom it names: 7 whole pages, no such line; on the emulated device the pool fits
    // (a GPU's driver keeps some of the free memory for itself, so there it may not).
    const enough = await replayCaptured(path, '-r', 'adaptive', '--headroom', '6', '--json');
    const fits = JSON.parse(enough.stdout) as JsonTrace;
    assert.equal(fits.capacity!.cannotFit, undefined);
    assert.ok(fits.capacity!.bytes >= 7 * page);
    if (!onGpu) assert.equal(fits.results[0]!.fits, true, enough.stderr);
  });

  it('--capacity and --headroom together, or a bad value, are usage errors; more than the device has is refused in one line', async () => {
    for (const args of [
      ['--capacity', '4G', '--headroom', '3'],
      ['--headroom', '-1'],
      ['--headroom', 'lots'],
      ['--headroom', '1001'],
      ['--capacity', '0'],
      ['--capacity', 'big'],
    ]) {
      const { code, stdout, stderr } = await replayCaptured(resnetPath, '-r', 'pool', ...args);
      assert.equal(code, 2, args.join(' '));
      assert.equal(stdout, '');
      assert.match(
        stderr.split('\n')[0]!,
        args[0] === '--capacity' && args.length > 2 ? /--capacity and --headroom .*give one/ : new RegExp(`^vram replay: ${args[0]}`),
      );
    }
    const { free } = Device.get(0).memInfo();
    const { code, stdout, stderr } = await replayCaptured(resnetPath, '-r', 'pool', '--capacity', String(free + page));
    assert.equal(code, 1);
    assert.equal(stdout, '', 'nothing replayed');
    assert.match(stderr, /^vram replay: --capacity \d+: a capacity of .* is more than device 0's free memory, .*\n$/);
    assert.equal(stderr.split('\n').length, 2, 'one line');
  });

  it('several logs: one table each, in order; --json an array of one object each', async () => {
    const multi = `${traces}multi_stream.csv`;
    const bert = `${traces}bert_dynamic_infer.csv`;
    const text = await replayCaptured(multi, bert, '-r', 'pool,async');
    assert.equal(text.code, 0, text.stderr);
    const headings = [...text.stdout.matchAll(/^trace +(\S+):/gm)].map((m) => m[1]);
    assert.deepEqual(headings, [multi, bert]);
    assert.equal([...text.stdout.matchAll(/^pool +\d+ /gm)].length, 2);
    const json = await replayCaptured(multi, bert, '-r', 'pool', '--json');
    assert.equal(json.code, 0, json.stderr);
    const reports = JSON.parse(json.stdout) as JsonTrace[];
    assert.ok(Array.isArray(reports));
    assert.deepEqual(
      reports.map((r) => r.trace.source),
      [multi, bert],
    );
    const one = JSON.parse((await replayCaptured(multi, '-r', 'pool', '--json')).stdout) as JsonTrace;
    assert.equal(one.trace.source, multi, 'one log: the object alone, as before');
    const html = await replayCaptured(multi, bert, '--html', join(tmpdir(), 'never-written.html'));
    assert.equal(html.code, 2);
    assert.match(html.stderr, /^vram replay: --html writes the report of one log; got 2 logs/);
  });

  it("--extent-size must be whole pages of the device's granularity: 1K and 3M refused naming the value, 4M taken", async () => {
    for (const size of ['1K', '3M']) {
      const { code, stdout, stderr } = await replayCaptured(`${traces}multi_stream.csv`, '-r', 'pool', '--extent-size', size);
      assert.equal(code, 2, size);
      assert.equal(stdout, '');
      assert.match(
        stderr.split('\n')[0]!,
        new RegExp(`^vram replay: --extent-size ${size}: sizes must be whole pages of the device's allocation granularity \\(2 MiB\\)`),
      );
    }
    assert.equal((await replayCaptured(`${traces}multi_stream.csv`, '-r', 'pool', '--extent-size', '4M')).code, 0);
  });

  it('every stack with a pool in it reports growth figures, whatever its name; the others none', () => {
    for (const name of RESOURCE_STACK_NAMES) {
      const built = createResourceStack(name, name === 'arena' ? { size: 64 << 20 } : {});
      const hasPool = built.pool !== undefined;
      built.destroy();
      const stack = createStack(name, readAllocationLog(`${traces}multi_stream.csv`));
      try {
        assert.equal(stack.growth !== undefined, hasPool, `${name}: growth figures ${hasPool ? 'from its pool' : 'none'}`);
        if (hasPool) assert.equal(typeof stack.growth!().driverCalls.create, 'number');
      } finally {
        stack.destroy();
      }
    }
  });
});
