/**
 * The HTML reports without a browser (test/report/report-browser.test.ts draws them): the replay engine's
 * timeline, the report builders (replay, bench, snapshot), the page's encoding and self-containment,
 * `vram view`, the out-of-memory example end to end, and the debugging guide's links.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import { execFileSync } from 'node:child_process';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { recordMemoryHistory } from '../../src/observe/history.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import { AsyncResource } from '../../src/resource/upstream/async-resource.js';
import { setCurrentResource } from '../../src/resource/current.js';
import type { MemoryResource } from '../../src/resource/resource.js';
import { formatBytes } from '../../src/util/size.js';
import { memorySnapshot } from '../../src/observe/snapshot.js';
import { SNAPSHOT_VERSION, SnapshotFormatError, validateSnapshot, type MemorySnapshot, type SnapshotResource } from '../../src/observe/snapshot-format.js';
import { type SnapshotBlock } from '../../src/resource/figures.js';
import { estimateDriverReservation, peakOccupied, replay } from '../../src/replay/engine.js';
import { parseAllocationLog, readAllocationLog } from '../../src/replay/parse.js';
import { arenaSizeFor, createStack } from '../../src/replay/stacks.js';
import { benchReport, type BenchFigure } from '../../src/report/bench-report.js';
import { encodeValues, renderReport } from '../../src/report/html.js';
import type { MemoryMapSection, PlotSection, Report, TableSection } from '../../src/report/report.js';
import { replayReport } from '../../src/report/replay-report.js';
import { snapshotReport } from '../../src/report/snapshot-report.js';

const root = fileURLToPath(new URL('../../../', import.meta.url));
const bin = join(root, 'bin/vram.js');
const MiB = 1024 * 1024;

/** Runs `vram ...args` (or another script) on the emulated backend with `env` added, without the developer's VRAM_* settings. */
function run(script: string, args: readonly string[], env: Readonly<Record<string, string>> = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  const merged: Record<string, string> = { VRAM_BACKEND: 'emulated', ...env };
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('VRAM_') && v !== undefined) merged[k] ??= v;
  return new Promise((done) => {
    execFile(process.execPath, [script, ...args], { cwd: root, env: merged, maxBuffer: 16 << 20, timeout: 120_000 }, (error, stdout, stderr) => {
      done({ code: error === null ? 0 : typeof error.code === 'number' ? error.code : 1, stdout, stderr });
    });
  });
}

/** The page's decoding of `encodeValues` (client.ts `decode`), as the spec the encoding must meet. */
function decodeAsThePage(encoded: ReturnType<typeof encodeValues>): (number | null)[] {
  if (Array.isArray(encoded)) return [...encoded];
  const { d, k } = encoded as { d: (number | null)[]; k: number };
  let sum = 0;
  return d.map((delta) => (delta === null ? null : (sum += delta) / k));
}

function section<K extends Report['sections'][number]['kind']>(report: Report, id: string, kind: K): Extract<Report['sections'][number], { kind: K }> {
  const found = report.sections.find((s) => s.id === id);
  assert.ok(found, `section ${id}`);
  assert.equal(found.kind, kind);
  return found as Extract<Report['sections'][number], { kind: K }>;
}

describe('encodeValues', () => {
  it("round-trips exactly through the page's decoding: whole numbers, microsecond times in seconds, any double, nulls", () => {
    const value = fc.oneof(
      fc.integer({ min: -(2 ** 40), max: 2 ** 40 }),
      fc.integer({ min: 0, max: 2 ** 40 }).map((us) => us / 1e6),
      fc.double({ noNaN: true, noDefaultInfinity: true }),
      fc.constant(null),
    );
    // -0 may come back as 0 (a delta of 0): the same number on any axis.
    const positiveZero = (v: number | null): number | null => (Object.is(v, -0) ? 0 : v);
    fc.assert(
      fc.property(fc.array(value, { maxLength: 200 }), (values) => {
        assert.deepEqual(decodeAsThePage(encodeValues(values)).map(positiveZero), values.map(positiveZero));
      }),
      { numRuns: 500 },
    );
  });

  it('uses deltas for bytes and microsecond times, and plain numbers for the rest', () => {
    assert.deepEqual(encodeValues([1024, 3072, 2048]), { d: [1024, 2048, -1024], k: 1 });
    assert.deepEqual(encodeValues([0.000001, 0.5]), { d: [1, 499_999], k: 1e6 });
    assert.deepEqual(encodeValues([Math.PI]), [Math.PI]);
  });
});

describe('replay timeline', () => {
  const trace = readAllocationLog(join(root, 'test/fixtures/traces/bert_dynamic_infer.csv'));

  it("records live bytes after every operation, the peak's blocks, and the pool's reserved bytes above the live ones", () => {
    const stack = createStack('pool', trace);
    try {
      const { timeline } = replay(trace, stack.resource, { timeline: true });
      assert.ok(timeline);
      assert.equal(timeline.liveBytes.length, trace.summary.operations);
      let live = 0;
      let k = 0;
      for (const event of trace.events) {
        if (event.action === 'allocate failure') continue;
        live += event.action === 'allocate' ? event.size : -event.size;
        assert.equal(timeline.liveBytes[k], live, `live bytes after operation ${k}`);
        assert.ok(timeline.reservedBytes[k]! >= live, `pool reserved >= live after operation ${k}`);
        assert.equal(timeline.timeUs[k], event.timeUs - trace.events[0]!.timeUs);
        k += 1;
      }
      assert.equal(Math.max(...timeline.liveBytes), trace.summary.peakLiveBytes);
      assert.equal(timeline.liveBytes[timeline.peakOperation], trace.summary.peakLiveBytes);
      assert.equal(
        timeline.peakBlocks.reduce((sum, b) => sum + b.bytes, 0),
        trace.summary.peakLiveBytes,
      );
      assert.equal(timeline.reservedSource, 'resource');
      assert.ok(timeline.peakSegments, 'the pool lays out its memory');
      assert.match(timeline.peakSegments.resource, /^PoolResource/);
      const liveInSegments = timeline.peakSegments.segments.flatMap((s) => s.blocks).filter((b) => b.state === 'live');
      assert.deepEqual(
        liveInSegments.map((b) => b.address).sort((a, b) => a - b),
        timeline.peakBlocks.map((b) => b.address),
      );
    } finally {
      stack.destroy();
    }
  });

  it("estimates cuMemAlloc's reservation per block, as the peak figure does", () => {
    const stack = createStack('cuda', trace);
    try {
      const result = replay(trace, stack.resource, { timeline: true });
      assert.equal(result.timeline?.reservedSource, 'estimate');
      assert.equal(Math.max(...result.timeline!.reservedBytes), peakOccupied(trace, estimateDriverReservation));
    } finally {
      stack.destroy();
    }
  });

  it('is absent unless asked for, and not combined with per-operation timing', () => {
    const stack = createStack('pool', trace);
    try {
      assert.equal('timeline' in replay(trace, stack.resource), false);
      assert.throws(() => replay(trace, stack.resource, { timeline: true, perOperationTiming: true }), RangeError);
    } finally {
      stack.destroy();
    }
  });
});

describe('replayReport', () => {
  const log = (times: readonly number[]): string =>
    `Thread,Time,Action,Pointer,Size,Stream\n${times.map((t, i) => `0,${t},${i % 2 === 0 ? 'allocate' : 'free'},0x${(0x1000 + (i >> 1) * 0x1000).toString(16)},${1024 * ((i >> 1) + 1)},0`).join('\n')}\n`;

  it("one plot: the trace's live bytes and each stack's reserved bytes against time in seconds; maps and the peak's sizes", () => {
    const trace = parseAllocationLog(log([0, 10, 20, 30]), 'tiny');
    const stacks = (['pool', 'arena'] as const).map((name) => {
      const stack = createStack(name, trace);
      try {
        return { name, timeline: replay(trace, stack.resource, { timeline: true }).timeline! };
      } finally {
        stack.destroy();
      }
    });
    const report = replayReport({ trace, facts: [['trace', 'tiny']], stacks: [...stacks, { name: 'cuda' }] });
    const plot = section(report, 'timeline', 'plot');
    assert.deepEqual(
      plot.series.map((s) => s.label),
      ['live (the trace)', 'pool reserved', 'arena reserved'],
    );
    assert.deepEqual(Array.from(plot.xValues), [0, 0.00001, 0.00002, 0.00003]);
    assert.deepEqual(Array.from(plot.series[0]!.values), [1024, 0, 2048, 0]);
    assert.equal(plot.x.unit, 'seconds');
    assert.deepEqual(
      report.sections.map((s) => s.id),
      ['timeline', 'memory-map-pool', 'memory-map-arena', 'peak-sizes'],
    );
    const map = section(report, 'memory-map-arena', 'memory-map');
    assert.deepEqual(
      map.blocks.map((b) => b.bytes),
      [2048],
    );
    // The arena's one region: at least the size asked for (it rounds up to its own granule).
    assert.equal(map.segments.length, 1);
    assert.ok(map.segments[0]!.bytes >= arenaSizeFor(trace.summary.peakLiveBytes));
  });

  it("counts operations on the x axis when the log's times go back (several threads)", () => {
    const trace = parseAllocationLog(log([0, 30, 20, 40]), 'threads');
    const stack = createStack('pool', trace);
    try {
      const report = replayReport({ trace, facts: [], stacks: [{ name: 'pool', timeline: replay(trace, stack.resource, { timeline: true }).timeline! }] });
      const plot = section(report, 'timeline', 'plot');
      assert.deepEqual(Array.from(plot.xValues), [1, 2, 3, 4]);
      assert.equal(plot.x.unit, 'count');
    } finally {
      stack.destroy();
    }
  });

  it('draws no map for the stacks whose every block is a driver allocation (cuda, async), and says so', () => {
    const trace = parseAllocationLog(log([0, 10, 20, 30]), 'tiny');
    const stacks = (['cuda', 'async', 'pool'] as const).map((name) => {
      const stack = createStack(name, trace);
      try {
        return { name, timeline: replay(trace, stack.resource, { timeline: true }).timeline! };
      } finally {
        stack.destroy();
      }
    });
    // Their segments are their blocks, laid end to end: nothing of where the driver put them.
    for (const s of stacks.slice(0, 2)) assert.ok(s.timeline.peakSegments!.segments.every((seg) => seg.kind === 'allocation' && seg.blocks.length === 1));
    const report = replayReport({ trace, facts: [], stacks });
    assert.deepEqual(
      report.sections.map((s) => s.id),
      ['timeline', 'memory-map-pool', 'peak-sizes'],
    );
    assert.match(
      section(report, 'peak-sizes', 'table').description,
      /No memory map for cuda, async: each block is one driver allocation, placed where the driver chooses/,
    );
    // Without such stacks, no such sentence.
    assert.doesNotMatch(section(replayReport({ trace, facts: [], stacks: stacks.slice(2) }), 'peak-sizes', 'table').description, /No memory map/);
  });

  it('draws the capacity as a line on the timeline when the replay was asked to fit in one', () => {
    const trace = parseAllocationLog(log([0, 10, 20, 30]), 'tiny');
    const stack = createStack('pool', trace);
    try {
      const stacks = [{ name: 'pool', timeline: replay(trace, stack.resource, { timeline: true }).timeline! }];
      const plot = section(replayReport({ trace, facts: [], stacks, capacityBytes: 64 * MiB }), 'timeline', 'plot');
      const line = plot.series.find((s) => s.label === 'capacity (64 MiB)');
      assert.ok(line, plot.series.map((s) => s.label).join(', '));
      assert.deepEqual(Array.from(line.values), [64 * MiB, 64 * MiB, 64 * MiB, 64 * MiB]);
      assert.match(plot.description, /The flat line is the capacity asked for \(64 MiB\)/);
      assert.ok(!section(replayReport({ trace, facts: [], stacks }), 'timeline', 'plot').series.some((s) => s.label.startsWith('capacity')));
    } finally {
      stack.destroy();
    }
  });

  it('refuses stacks with no timeline', () => {
    const trace = parseAllocationLog(log([0, 1]), 'tiny');
    assert.throws(() => replayReport({ trace, facts: [], stacks: [{ name: 'pool' }] }), RangeError);
  });
});

describe('benchReport', () => {
  const row = (group: string, name: string, size: number, value: number, unit: string): BenchFigure => ({ group, name, size, value, unit, repeats: 3 });
  const rows = [
    row('transfers', 'pinned H2D', 65536, 10, 'GB/s'),
    row('transfers', 'pinned H2D', MiB, 20, 'GB/s'),
    row('transfers', 'pinned D2H', 65536, 11, 'GB/s'),
    row('transfers', 'pinned D2H', MiB, 21, 'GB/s'),
    row('transfers', 'async staged pageable H2D', 64 * MiB, 3, 'GB/s'),
    row('alloc', 'cuMemAlloc+cuMemFree', 256, 3000, 'ns/pair'),
    row('allocators', 'PoolResource', 256, 90, 'ns/pair'),
    row('allocators', 'PoolResource', MiB, 95, 'ns/pair'),
    row('allocators', 'PoolResource random', MiB, 300, 'ns/op'),
    row('kernels', 'kernel read, mapped pinned', 65536, 5, 'GB/s'),
    row('kernels', 'kernel read, mapped pinned', MiB, 9, 'GB/s'),
  ];

  it('bandwidth per direction against size, latency per resource, the one-size rows and the skipped ones as tables', () => {
    const report = benchReport({ facts: [], rows, skipped: [{ group: 'transfers', name: 'D2D', size: MiB, reason: 'no' }] });
    assert.deepEqual(
      report.sections.map((s) => s.id),
      ['bandwidth-h2d', 'bandwidth-d2h', 'bandwidth-other', 'allocation-latency', 'other-rows', 'skipped'],
    );
    assert.deepEqual(
      section(report, 'bandwidth-other', 'plot').series.map((s) => s.label),
      ['kernel read, mapped pinned'],
    );
    const h2d = section(report, 'bandwidth-h2d', 'plot');
    assert.deepEqual(Array.from(h2d.xValues), [65536, MiB]);
    assert.deepEqual(
      h2d.series.map((s) => [s.label, Array.from(s.values)]),
      [['pinned H2D', [10, 20]]],
    );
    const latency = section(report, 'allocation-latency', 'plot');
    assert.deepEqual(
      latency.series.map((s) => [s.label, Array.from(s.values)]),
      [
        ['cuMemAlloc+cuMemFree', [3000, null]],
        ['PoolResource', [90, 95]],
      ],
    );
    assert.equal(latency.y.log, true);
    const others: TableSection = section(report, 'other-rows', 'table');
    assert.deepEqual(
      others.rows.map((r) => r[0]),
      ['async staged pageable H2D', 'PoolResource random'],
    );
  });

  it("puts the object layer's pairs in a table beside their resource pair, with the ratio per size, not in the latency plot", () => {
    const objects = [
      row('objects', 'PoolResource allocate+deallocate', MiB, 100, 'ns/pair'),
      row('objects', 'DeviceBuffer.allocate+free', MiB, 350, 'ns/pair'),
      row('objects', 'DeviceArray.empty+free (float32)', MiB, 520, 'ns/pair'),
    ];
    const report = benchReport({ facts: [], rows: [...rows, ...objects], skipped: [] });
    assert.deepEqual(
      section(report, 'allocation-latency', 'plot').series.map((s) => s.label),
      ['cuMemAlloc+cuMemFree', 'PoolResource'],
    );
    assert.deepEqual(section(report, 'object-layer', 'table').rows, [
      ['PoolResource allocate+deallocate', '1 MiB', '100', '1.0x'],
      ['DeviceBuffer.allocate+free', '1 MiB', '350', '3.5x'],
      ['DeviceArray.empty+free (float32)', '1 MiB', '520', '5.2x'],
    ]);
    assert.ok(!section(report, 'other-rows', 'table').rows.some((r) => String(r[0]).includes('Device')));
  });
});

/** A snapshot as an out-of-memory error would leave it: a limit over a pool, two sites, a history. */
function oomSnapshot(options: { dropped?: number } = {}): MemorySnapshot {
  const base = 2 ** 44;
  const live = (address: number, bytes: number, stack: number): SnapshotBlock => ({ address, bytes, requestedBytes: bytes, state: 'live', stream: 0, stack });
  const blocks = [
    live(base, 2 * MiB, 2),
    live(base + 2 * MiB, 4 * MiB, 1),
    live(base + 6 * MiB, 4 * MiB, 1),
    { address: base + 10 * MiB, bytes: 2 * MiB, requestedBytes: null, state: 'free', stream: 0, stack: null } as const,
  ];
  const figures = (allocated: number, reserved: number): SnapshotResource['figures'] => ({
    allocatedBytes: { value: allocated, peak: allocated, total: allocated },
    allocations: { value: 3, peak: 3, total: 3 },
    reservedBytes: reserved,
    peakReservedBytes: reserved,
  });
  const resource = (id: number, className: string, upstream: number | null, extra: Partial<SnapshotResource>): SnapshotResource => ({
    id,
    label: `${className}(...)`,
    className,
    kind: 'device',
    device: 0,
    upstream,
    current: true,
    status: 'active',
    figures: figures(10 * MiB, 12 * MiB),
    segments: null,
    baseline: null,
    ...extra,
  });
  const event = (kind: 'alloc' | 'reserve' | 'oom', bytes: number, time: number, stack: number | null) => ({
    kind,
    address: kind === 'alloc' ? base : null,
    bytes,
    stream: 0,
    time,
    resource: 3,
    stack,
  });
  const events = [
    event('reserve', 12 * MiB, 1, null),
    event('alloc', 2 * MiB, 2, 2),
    event('alloc', 4 * MiB, 3, 1),
    event('alloc', 4 * MiB, 4, 1),
    event('oom', 4 * MiB, 5, 1),
  ];
  const dropped = options.dropped ?? 0;
  return {
    version: SNAPSHOT_VERSION,
    createdAt: '2026-11-22T23:00:00.000Z',
    time: 6,
    timeOrigin: 0,
    backend: 'emulated',
    device: 0,
    trigger: {
      kind: 'out-of-memory',
      error: { message: 'cannot allocate 4194304 bytes', requestedBytes: 4 * MiB, reason: 'limit', call: 'LimitingAdaptor.allocate', resource: 3 },
    },
    currentResource: 3,
    resources: [
      // A pool over a driver resource: the map shows the pool's blocks, not the driver's one allocation under them.
      resource(1, 'CudaResource', null, { segments: [{ address: base, bytes: 12 * MiB, kind: 'allocation', pages: null, blocks: [live(base, 12 * MiB, 9)] }] }),
      resource(2, 'PoolResource', 1, { segments: [{ address: base, bytes: 12 * MiB, kind: 'chunk', pages: null, blocks }] }),
      resource(3, 'LimitingAdaptor', 2, { baseline: { time: 0.5, allocatedBytes: 0, reservedBytes: 0 } }),
    ],
    blocks: blocks.filter((b) => b.state === 'live').map((b) => ({ address: b.address, bytes: b.bytes, stream: 0, time: 2, resource: 2, stack: b.stack })),
    stacks: [
      { id: 1, frames: ['at cacheActivations (file:///srv/app/dist/train.js:20:5)', 'at main (file:///srv/app/dist/train.js:40:3)'] },
      { id: 2, frames: ['at loadWeights (file:///srv/app/dist/model.js:8:10)'] },
    ],
    history: { recording: true, maxEntries: 100, stacks: true, startTime: 0.5, recorded: events.length + dropped, dropped, events: events.slice(dropped) },
  };
}

describe('snapshotReport', () => {
  it('the timeline from the history, out-of-memory markers, the map of the top layer, the sites by bytes', () => {
    const report = snapshotReport(oomSnapshot());
    assert.equal(report.title, 'vram: out of memory');
    assert.deepEqual(
      report.sections.map((s) => s.id),
      ['timeline', 'memory-map', 'top-sites', 'resources'],
    );
    const plot: PlotSection = section(report, 'timeline', 'plot');
    assert.deepEqual(
      plot.series.map((s) => s.label),
      ['LimitingAdaptor #3 reserved', 'LimitingAdaptor #3 live', 'out of memory (live + the request)'],
    );
    assert.deepEqual(Array.from(plot.series[0]!.values), Array<number>(5).fill(12 * MiB));
    assert.deepEqual(Array.from(plot.series[1]!.values), [0, 2 * MiB, 6 * MiB, 10 * MiB, 10 * MiB]);
    assert.deepEqual(Array.from(plot.series[2]!.values), [null, null, null, null, 14 * MiB]);
    assert.deepEqual(Array.from(plot.xValues), [0.0005, 0.0015, 0.0025, 0.0035, 0.0045]);
    const map: MemoryMapSection = section(report, 'memory-map', 'memory-map');
    assert.deepEqual(
      map.segments.map((s) => s.label),
      ['PoolResource(...)'],
    );
    assert.deepEqual(
      map.blocks.map((b) => [b.bytes, map.sites[b.site]!.label]),
      [
        [2 * MiB, 'loadWeights (model.js:8:10)'],
        [4 * MiB, 'cacheActivations (train.js:20:5)'],
        [4 * MiB, 'cacheActivations (train.js:20:5)'],
      ],
    );
    const sites = section(report, 'top-sites', 'table');
    assert.deepEqual(
      sites.rows.map((r) => r.slice(0, 4)),
      [
        ['cacheActivations (train.js:20:5)', '8 MiB', '80.0%', '2'],
        ['loadWeights (model.js:8:10)', '2 MiB', '20.0%', '1'],
      ],
    );
  });

  it('works back from the figures now when the ring dropped older events', () => {
    const plot = section(snapshotReport(oomSnapshot({ dropped: 2 })), 'timeline', 'plot');
    // Kept: two 4 MiB allocations and the error; the figures now say 10 MiB live, 12 MiB reserved.
    assert.deepEqual(Array.from(plot.series[0]!.values), [12 * MiB, 12 * MiB, 12 * MiB]);
    assert.deepEqual(Array.from(plot.series[1]!.values), [6 * MiB, 10 * MiB, 10 * MiB]);
    assert.match(plot.description, /the ring dropped 2 older ones/);
  });

  /** A snapshot with `mr` as the current resource: 8 blocks of 4 MiB and one of 1.5 MiB live, recorded. */
  function snapshotOver(mr: MemoryResource): MemorySnapshot {
    const previous = setCurrentResource(0, mr);
    const history = recordMemoryHistory();
    const sizes = [...Array<number>(8).fill(4 * MiB), 1.5 * MiB];
    const ptrs = sizes.map((bytes) => mr.allocate(bytes));
    try {
      return memorySnapshot();
    } finally {
      ptrs.forEach((ptr, i) => mr.deallocate(ptr, sizes[i]!));
      history.stop();
      setCurrentResource(0, previous);
    }
  }

  it("names each figure one way over the default resource (CUDA pool): live, reserved; and draws no map of the driver's layout", () => {
    const mr = new AsyncResource();
    try {
      const snapshot = snapshotOver(mr);
      const report = snapshotReport(snapshot);
      const figures = snapshot.resources.find((r) => r.current)!.figures!;
      const live = formatBytes(figures.allocatedBytes.value);
      const reserved = formatBytes(figures.reservedBytes);
      assert.equal(live, '33.5 MiB');
      // One fact with both, the table's columns by the same names, the timeline's series too.
      assert.deepEqual(
        report.facts.find(([key]) => key === 'memory'),
        ['memory', `${live} live, ${reserved} reserved by the current stack`],
      );
      const table = section(report, 'resources', 'table');
      assert.deepEqual(table.columns.map((c) => c.label).slice(3), ['live', 'reserved']);
      assert.match(table.rows[0]![3]!, new RegExp(`^${live} `));
      assert.match(table.rows[0]![4]!, new RegExp(`^${reserved} `));
      assert.deepEqual(
        section(report, 'timeline', 'plot').series.map((s) => s.label.replace(/^AsyncResource #\d+ /, '')),
        ['reserved', 'live'],
      );
      // The map would be the 9 blocks end to end, calling 33.5 MiB what the resource holds: left out, and said why.
      assert.ok(!report.sections.some((s) => s.kind === 'memory-map'));
      assert.match(table.description, /No memory map for AsyncResource #\d+: each block is one driver allocation/);
    } finally {
      mr.destroy();
    }
  });

  it("calls the map's total reserved where it is the resources' reserved figure (a pool's mapped pages)", () => {
    const pool = new PoolResource();
    try {
      const snapshot = snapshotOver(pool);
      const report = snapshotReport(snapshot);
      const map = section(report, 'memory-map', 'memory-map');
      const reserved = formatBytes(snapshot.resources.find((r) => r.current)!.figures!.reservedBytes);
      assert.equal(formatBytes(map.segments.reduce((sum, seg) => sum + seg.bytes, 0)), reserved);
      assert.match(map.description, new RegExp(`^The ${reserved} reserved by PoolResource #\\d+ `));
      assert.doesNotMatch(map.description, /hold|No memory map/);
    } finally {
      pool.destroy();
    }
  });

  it('refuses a version it does not read', () => {
    assert.throws(() => snapshotReport({ ...oomSnapshot(), version: SNAPSHOT_VERSION + 1 }), /snapshot version/);
  });
});

describe('validateSnapshot', () => {
  const schema = JSON.parse(readFileSync(join(root, 'docs/snapshot-schema.json'), 'utf8')) as object;
  const schemaAccepts = new Ajv2020({ strict: true, allErrors: true }).compile(schema);

  /** A snapshot of a real pool (a virtual range with mapped pages, optional figures, stacks), as JSON has it. */
  function poolSnapshot(): MemorySnapshot {
    const history = recordMemoryHistory({ stacks: true });
    const pool = new PoolResource();
    try {
      const ptr = pool.allocate(3 << 20);
      pool.deallocate(pool.allocate(1 << 20), 1 << 20);
      const snapshot = JSON.parse(JSON.stringify(memorySnapshot())) as MemorySnapshot;
      pool.deallocate(ptr, 3 << 20);
      return snapshot;
    } finally {
      pool.destroy();
      history.stop();
    }
  }

  /** Every place in a JSON value: its path (keys) and its field name as the validator writes it. */
  function places(value: unknown, path: (string | number)[] = [], out: (string | number)[][] = []): (string | number)[][] {
    out.push(path);
    if (Array.isArray(value)) value.forEach((v, i) => places(v, [...path, i], out));
    else if (typeof value === 'object' && value !== null) for (const [k, v] of Object.entries(value)) places(v, [...path, k], out);
    return out;
  }
  const fieldOf = (path: readonly (string | number)[]): string =>
    path.reduce<string>((f, k) => (typeof k === 'number' ? `${f}[${k}]` : f === '' ? k : `${f}.${k}`), '') || 'snapshot';

  it('accepts the snapshots the schema accepts', () => {
    for (const snapshot of [oomSnapshot(), oomSnapshot({ dropped: 2 }), poolSnapshot()]) {
      assert.ok(schemaAccepts(snapshot), JSON.stringify(schemaAccepts.errors));
      assert.equal(validateSnapshot(snapshot), snapshot);
    }
  });

  it('agrees with the published schema on any one field changed or added, and names the field', () => {
    const samples = [oomSnapshot(), poolSnapshot()];
    fc.assert(
      fc.property(fc.nat(), fc.nat(), fc.jsonValue({ maxDepth: 2 }), fc.boolean(), (which, at, replacement, add) => {
        const snapshot = structuredClone(samples[which % samples.length]!) as unknown;
        const all = places(snapshot);
        const path = all[at % all.length]!;
        let changed: (string | number)[] = path;
        if (path.length === 0) {
          if (!add) return;
          (snapshot as Record<string, unknown>).extra = replacement;
          changed = ['extra'];
        } else {
          const parent = path.slice(0, -1).reduce<unknown>((v, k) => (v as Record<string | number, unknown>)[k], snapshot) as Record<string | number, unknown>;
          if (add && !Array.isArray(parent)) {
            parent.extra = replacement;
            changed = [...path.slice(0, -1), 'extra'];
          } else {
            parent[path.at(-1)!] = replacement;
          }
        }
        let error: unknown;
        try {
          validateSnapshot(snapshot);
        } catch (e) {
          error = e;
        }
        // The one rule beyond the schema: an upstream chain that loops (a reader following it would never stop).
        if (error instanceof SnapshotFormatError && /upstream chain/.test(error.message)) return;
        assert.equal(
          error === undefined,
          schemaAccepts(snapshot),
          `${fieldOf(changed)} = ${JSON.stringify(replacement)}: validateSnapshot ${error === undefined ? 'accepted' : `refused (${String(error)})`}`,
        );
        if (error === undefined) return;
        assert.ok(error instanceof SnapshotFormatError, String(error));
        // At the changed field or inside it, or a sibling a rule ties to it (an event's kind and address).
        const within = changed.length <= 1 ? '' : fieldOf(changed.slice(0, -1));
        assert.ok(error.field.startsWith(within), `${error.field} for a change at ${fieldOf(changed)}`);
      }),
      { numRuns: 2000 },
    );
  });

  it('refuses an upstream chain that loops, naming the resource', () => {
    const snapshot = oomSnapshot();
    (snapshot.resources[0] as { upstream: number | null }).upstream = 3;
    assert.throws(
      () => validateSnapshot(snapshot),
      /^SnapshotFormatError: resources\[0\]\.upstream: the upstream chain of resource 1 comes back to resource 1/,
    );
  });
});

describe('renderReport', () => {
  it('one file: uPlot and the page script inline, nothing fetched, the data unable to close its script element', () => {
    const html = renderReport({
      title: 'a <b> & "c"',
      facts: [['x', '</script><script>alert(1)</script>']],
      sections: [
        {
          kind: 'table',
          id: 't',
          title: 'T',
          description: '</script>',
          columns: [{ label: 'a' }],
          rows: [['</script>']],
        },
      ],
    });
    assert.doesNotMatch(html, /\b(src|href)=/i, 'no external scripts, styles or links');
    assert.equal(html.match(/<\/script>/g)?.length, 3, 'the data, uPlot and the page script, each closed once');
    assert.match(html, /<title>a &#60;b&#62; &#38; &#34;c&#34;<\/title>/);
    assert.match(html, /var uPlot=function/);
    assert.match(html, /window\.vramReport/);
  });
});

describe('vram view', () => {
  let work: string;
  before(() => {
    work = mkdtempSync(join(tmpdir(), 'vram-view-'));
  });
  after(() => rmSync(work, { recursive: true, force: true }));

  it('writes the report beside the snapshot, or where -o says', async () => {
    const snapshot = join(work, 'oom.json');
    writeFileSync(snapshot, JSON.stringify(oomSnapshot()));
    const plain = await run(bin, ['view', snapshot]);
    assert.equal(plain.code, 0, plain.stderr);
    assert.match(readFileSync(join(work, 'oom.html'), 'utf8'), /cacheActivations \(train\.js:20:5\)/);
    const named = await run(bin, ['view', snapshot, '-o', join(work, 'named.html')]);
    assert.equal(named.code, 0, named.stderr);
    assert.ok(existsSync(join(work, 'named.html')));
  });

  it('exit 2 for a usage error, 1 for a file that is not a snapshot', async () => {
    const missing = await run(bin, ['view']);
    assert.equal(missing.code, 2);
    assert.equal(missing.stderr, "vram view: missing the snapshot file; see 'vram view --help'\n");
    assert.equal((await run(bin, ['view', join(work, 'none.json')])).code, 2);
    const bad = join(work, 'bad.json');
    writeFileSync(bad, '{"rows": []}');
    const notSnapshot = await run(bin, ['view', bad]);
    assert.equal(notSnapshot.code, 1);
    assert.match(notSnapshot.stderr, /not a memory snapshot/);
  });

  it('a field of the wrong type is refused naming the field (it was a TypeError from inside the report)', async () => {
    const wrongType = structuredClone(oomSnapshot()) as unknown as { resources: { segments: unknown }[]; history: { events: { bytes: unknown }[] } };
    wrongType.resources[1]!.segments = 'none';
    const path = join(work, 'wrong.json');
    writeFileSync(path, JSON.stringify(wrongType));
    const result = await run(bin, ['view', path, '-o', join(work, 'wrong.html')]);
    assert.equal(result.code, 1);
    assert.equal(
      result.stderr,
      `vram view: ${path}: not a memory snapshot of this format: resources[1].segments: expected an array or null, got the string "none"\n`,
    );
    wrongType.resources[1]!.segments = null;
    wrongType.history.events[2]!.bytes = '4194304';
    writeFileSync(path, JSON.stringify(wrongType));
    assert.match(
      (await run(bin, ['view', path, '-o', join(work, 'wrong.html')])).stderr,
      /history\.events\[2\]\.bytes: expected a number >= 0, got the string "4194304"/,
    );
    assert.ok(!existsSync(join(work, 'wrong.html')), 'no report written');
  });

  it('a UTF-8 byte-order mark is read', async () => {
    const path = join(work, 'bom.json');
    writeFileSync(path, `\ufeff${JSON.stringify(oomSnapshot())}`);
    const result = await run(bin, ['view', path]);
    assert.equal(result.code, 0, result.stderr);
    assert.ok(existsSync(join(work, 'bom.html')));
  });

  it('what is not a regular file is refused at once (/dev/zero and a FIFO hung)', async () => {
    const targets: [string, string][] = [
      ['/dev/zero', 'a character device'],
      [work, 'a directory'],
    ];
    try {
      execFileSync('mkfifo', [join(work, 'fifo')]);
      targets.push([join(work, 'fifo'), 'a FIFO (named pipe)']);
    } catch {
      // No mkfifo here: the device and the folder still show the rule.
    }
    for (const [path, kind] of targets) {
      const result = await run(bin, ['view', path, '-o', join(work, 'out.html')]);
      assert.equal(result.code, 1, path);
      assert.equal(result.stderr, `vram view: ${path}: ${kind}, not a regular file\n`);
    }
  });

  it('-o naming the snapshot (by any name), a folder or a missing folder is a usage error, and the snapshot is kept', async () => {
    const path = join(work, 'keep.json');
    const text = JSON.stringify(oomSnapshot());
    writeFileSync(path, text);
    for (const [output, message] of [
      [path, /the input file/],
      [join(work, '.', 'keep.json'), /the input file/],
      [work, /a folder, not a file/],
      [join(work, 'none', 'r.html'), /the folder .*none does not exist/],
    ] as const) {
      const result = await run(bin, ['view', path, '-o', output]);
      assert.equal(result.code, 2, output);
      assert.match(result.stderr.split('\n')[0]!, new RegExp(`^vram view: -o ${output.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: ${message.source}`));
    }
    assert.equal(readFileSync(path, 'utf8'), text);
  });
});

describe('examples/oom-snapshot and the debugging guide', () => {
  let work: string;
  before(() => {
    work = mkdtempSync(join(tmpdir(), 'vram-oom-'));
  });
  after(() => rmSync(work, { recursive: true, force: true }));

  it('an out-of-memory error under a 64 MiB limit writes a snapshot whose report names the site that filled it', async () => {
    const snapshot = join(work, 'oom.json');
    const example = await run(join(root, 'dist/examples/oom-snapshot.js'), [], { VRAM_OOM_SNAPSHOT: snapshot });
    assert.equal(example.code, 0, example.stderr);
    assert.match(example.stdout, /out of memory after 14 cached activations/);
    assert.ok(existsSync(snapshot), `the snapshot was written (${example.stdout})`);
    const parsed = JSON.parse(readFileSync(snapshot, 'utf8')) as MemorySnapshot;
    assert.equal(parsed.trigger.kind, 'out-of-memory');
    const report = snapshotReport(parsed);
    const top = section(report, 'top-sites', 'table').rows[0]!;
    assert.match(top[0]!, /^cacheActivations \(oom-snapshot\.js:\d+:\d+\)$/);
    assert.equal(top[1], '56 MiB');
    const map = section(report, 'memory-map', 'memory-map');
    assert.match(map.sites[0]!.label, /^cacheActivations/);
    const view = await run(bin, ['view', snapshot, '-o', join(work, 'oom.html')]);
    assert.equal(view.code, 0, view.stderr);
  });

  it('the guide names the example and the commands it runs, and its relative links resolve', () => {
    const guide = join(root, 'docs/debugging-out-of-memory.md');
    const text = readFileSync(guide, 'utf8');
    assert.match(text, /examples\/oom-snapshot\.ts/);
    assert.match(text, /VRAM_OOM_SNAPSHOT=oom\.json node dist\/examples\/oom-snapshot\.js/);
    assert.match(text, /vram view oom\.json -o oom\.html/);
    for (const [, target] of text.matchAll(/\]\(([^)#\s]+)(?:#[^)]*)?\)/g)) {
      if (/^[a-z]+:/.test(target!)) continue;
      assert.ok(existsSync(resolve(dirname(guide), target!)), `the guide's link ${target} resolves`);
    }
  });
});
