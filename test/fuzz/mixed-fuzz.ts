/**
 * The mixed fuzz: where capabilities meet. One seeded run keeps a set of float32 arrays on the
 * current resource, some spillable, with known values, on four streams, and mixes:
 * - allocate (plain or spillable), inside a budget now and then: a budget one byte short of the
 *   array must refuse it (OutOfMemoryError), one that fits must not;
 * - write: a built-in op (elementwise) or a user kernel (add_c) on a stream, after an event wait
 *   when the array's last work was on another stream;
 * - graphs: capture add_c over one to three arrays on a stream, launch (each launch adds its
 *   constants), update the executable graph from a new capture of the same shape with new
 *   constants, destroy; the arrays a graph captured stay live until it is destroyed;
 * - DLPack round trips: export, press the device, import, read, free the import (its deleter);
 * - memory pressure (every spillable buffer that may go is spilled);
 * - frees on the array's stream or on another after an event wait.
 * Now and then it checks arrays: the stream they were last used on synchronised, every value
 * must be what the model says. A mismatch or unexpected error throws MixedFuzzFailure naming
 * the seed, the step and a replay command.
 *
 * `spillableInGraphs` lets graphs and DLPack exports take spillable arrays, and `spillableBudgets`
 * puts spillable arrays in budgets: the compositions issue 33 items 1-3 fix; off, those draws
 * take plain arrays only, so the rest runs clean while the fixes land.
 */
import { DeviceArray } from '../../src/array/device-array.js';
import { withMemoryBudget } from '../../src/buffer/budget.js';
import { spillManager } from '../../src/buffer/spill/spill-manager.js';
import { getBackend } from '../../src/backend/select.js';
import { Device } from '../../src/device.js';
import { OutOfMemoryError } from '../../src/errors.js';
import { captureGraph } from '../../src/graphs/capture.js';
import type { GraphExec } from '../../src/graphs/graph.js';
import { fromDLPack, toDLPack } from '../../src/interop/dlpack.js';
import { threadCount } from '../../src/kernels/emulated-kernel.js';
import { type EmulatedKernel } from '../../src/backend/backend.js';
import { Module } from '../../src/kernels/module.js';
import { elementwise } from '../../src/kernels/ops/index.js';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { Stream } from '../../src/stream.js';
import { mulberry32 } from '../../src/util/random.js';

/** Options of one mixed run. */
export interface MixedFuzzOptions {
  readonly seed: number;
  readonly ops: number;
  /** Let graphs and DLPack exports take spillable arrays (issue 33 items 1 and 2). */
  readonly spillableInGraphs?: boolean;
  /** Allocate spillable arrays inside budgets too (issue 33 item 3). */
  readonly spillableBudgets?: boolean;
  /** Live arrays at most (default 24). */
  readonly maxLive?: number;
}

/** What a run did. */
export interface MixedFuzzStats {
  steps: number;
  allocations: number;
  spillable: number;
  writes: number;
  graphs: number;
  launches: number;
  updates: number;
  dlpack: number;
  budgetsRefused: number;
  pressures: number;
  frees: number;
  checks: number;
}

/** A mixed run's first wrong value or unexpected error, with its seed and replay command. */
export class MixedFuzzFailure extends Error {
  constructor(
    readonly target: string,
    readonly seed: number,
    readonly step: number,
    readonly replay: string,
    detail: string,
  ) {
    super(`${target}: seed ${seed} failed at step ${step}: ${detail}\n  replay: ${replay}`);
    this.name = 'MixedFuzzFailure';
  }
}

/** The runner's targets: the compositions that work today, and all of them. */
export const MIXED_TARGETS = {
  mixed: {},
  'mixed (spillable in graphs, exports and budgets)': { spillableInGraphs: true, spillableBudgets: true },
} as const satisfies Record<string, Partial<MixedFuzzOptions>>;

export type MixedTarget = keyof typeof MIXED_TARGETS;

export function mixedReplayCommand(target: string, seed: number, ops: number): string {
  return `VRAM_BACKEND=${getBackend().name} node dist/test/fuzz/run.js --mixed --only '${target}' --seed ${seed} --ops ${ops}`;
}

const ADD_C_SOURCE = `
extern "C" __global__ void add_c(float *y, float c, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += c;
}
`;
const addCEmulated: EmulatedKernel = (launch) => {
  const [yPtr, c, n] = launch.args as [number, number, number];
  const bytes = launch.memory.bytes(yPtr, 4 * n);
  const y = new Float32Array(bytes.buffer, bytes.byteOffset, n);
  for (let i = 0; i < Math.min(n, threadCount(launch)); i++) y[i] = y[i]! + c;
};

/** The built-in writes and what each does to a value (whole numbers stay exact). */
const WRITES: ReadonlyArray<readonly [string, (x: number) => number]> = [
  ['x = x + 1', (x) => x + 1],
  ['x = x - 3', (x) => x - 3],
  ['x = -x', (x) => -x],
];

interface Live {
  readonly id: number;
  readonly array: DeviceArray<'float32'>;
  readonly expected: Float32Array;
  readonly spillable: boolean;
  /** The stream of its last work. */
  stream: number;
  /** Graphs that captured it and are not destroyed: it is not freed while any lives. */
  graphs: number;
}

interface LiveGraph {
  exec: GraphExec;
  readonly arrays: readonly Live[];
  constants: number[];
  readonly stream: number;
}

/**
 * Runs `options.ops` mixed steps on the current resource of device 0; throws MixedFuzzFailure on
 * the first wrong value or unexpected error. Frees everything it made.
 */
export function runMixedFuzz(target: string, options: MixedFuzzOptions): MixedFuzzStats {
  const run = new MixedRun(options);
  try {
    run.run();
  } catch (error) {
    const detail = error instanceof Error ? (error.stack ?? error.message) : String(error);
    throw new MixedFuzzFailure(target, options.seed, run.step, mixedReplayCommand(target, options.seed, options.ops), detail);
  } finally {
    run.dispose();
  }
  return run.stats;
}

class MixedRun {
  readonly stats: MixedFuzzStats = {
    steps: 0,
    allocations: 0,
    spillable: 0,
    writes: 0,
    graphs: 0,
    launches: 0,
    updates: 0,
    dlpack: 0,
    budgetsRefused: 0,
    pressures: 0,
    frees: 0,
    checks: 0,
  };
  step = 0;
  private readonly random: () => number;
  private readonly streams: Stream[];
  private readonly module: Module;
  private readonly addC: (stream: Stream, y: DeviceArray<'float32'>, c: number) => void;
  private readonly live: Live[] = [];
  private readonly graphs: LiveGraph[] = [];
  private nextId = 0;
  private readonly maxLive: number;

  constructor(private readonly options: MixedFuzzOptions) {
    if (!Number.isInteger(options.seed) || options.seed < 0 || options.seed > 0xffffffff) {
      throw new RangeError(`seed must be a whole number from 0 to 2^32-1, got ${options.seed}`);
    }
    this.random = mulberry32(options.seed);
    this.maxLive = options.maxLive ?? 24;
    const device = Device.get(0);
    this.streams = [
      Stream.create({ device }),
      Stream.create({ device }),
      Stream.create({ device, nonBlocking: true }),
      Stream.create({ device, nonBlocking: true }),
    ];
    this.module = Module.compile(ADD_C_SOURCE, { emulated: { add_c: addCEmulated } });
    const kernel = this.module.kernel('add_c', ['ptr', 'f32', 'u32'] as const);
    this.addC = (stream, y, c) => kernel.launch({ grid: Math.ceil(y.size / 128), block: 128, stream }, y, c, y.size);
  }

  run(): void {
    for (this.step = 0; this.step < this.options.ops; this.step++) {
      this.operate();
      this.stats.steps = this.step + 1;
    }
    for (const l of this.live) this.check(l);
  }

  private pick<T>(list: readonly T[]): T {
    return list[Math.floor(this.random() * list.length)]!;
  }

  private operate(): void {
    const u = this.random();
    if (this.live.length === 0 || (u < 0.2 && this.live.length < this.maxLive)) this.allocate();
    else if (u < 0.2) this.free(this.pick(this.live));
    else if (u < 0.42) this.write(this.pick(this.live));
    else if (u < 0.5) this.capture();
    else if (u < 0.62) this.launch();
    else if (u < 0.66) this.update();
    else if (u < 0.7) this.destroyGraph();
    else if (u < 0.76) this.dlpack(this.pick(this.live));
    else if (u < 0.8) this.budget();
    else if (u < 0.84) this.pressure();
    else if (u < 0.94) this.check(this.pick(this.live));
    else this.free(this.pick(this.live));
  }

  /** Orders `l`'s next work on stream `s` after its last (an event wait when they differ). */
  private moveTo(l: Live, s: number): Stream {
    const to = this.streams[s]!;
    if (l.stream !== s) {
      to.waitEvent(this.streams[l.stream]!.record());
      l.stream = s;
    }
    return to;
  }

  private drawValues(n: number): Float32Array {
    return Float32Array.from({ length: n }, () => Math.floor(this.random() * 200) - 100);
  }

  private make(spillable: boolean): Live {
    const n = 1 + Math.floor(this.random() * (this.random() < 0.1 ? 20000 : 600));
    const values = this.drawValues(n);
    const s = Math.floor(this.random() * this.streams.length);
    const array = DeviceArray.from(values, { stream: this.streams[s]!, spillable });
    this.stats.allocations++;
    if (spillable) this.stats.spillable++;
    const l: Live = { id: this.nextId++, array, expected: values, spillable, stream: s, graphs: 0 };
    this.live.push(l);
    return l;
  }

  private allocate(): void {
    this.make(this.random() < 0.4);
  }

  private write(l: Live): void {
    const s = Math.floor(this.random() * this.streams.length);
    const stream = this.moveTo(l, s);
    if (this.random() < 0.5) {
      const [expression, f] = this.pick(WRITES);
      elementwise(expression, { x: l.array }, { stream });
      for (let i = 0; i < l.expected.length; i++) l.expected[i] = f(l.expected[i]!);
    } else {
      const c = Math.floor(this.random() * 9) - 4;
      this.addC(stream, l.array, c);
      for (let i = 0; i < l.expected.length; i++) l.expected[i] = l.expected[i]! + c;
    }
    this.stats.writes++;
  }

  /** Arrays a graph or an export may take: spillable ones only with `spillableInGraphs`. */
  private graphable(): Live[] {
    return this.options.spillableInGraphs === true ? this.live : this.live.filter((l) => !l.spillable);
  }

  /**
   * Brings the spillable arrays a capture will use back on `stream` first: a capture refuses a use
   * of a spilled buffer (its reload would be recorded into the graph), and keeps what it captured
   * resident for the graph's life once it has it.
   */
  private residentFor(arrays: readonly Live[], stream: Stream): void {
    for (const l of arrays) {
      const buffer = l.array.buffer;
      if (l.spillable && buffer instanceof DeviceBuffer) buffer.lease({ stream }).release();
    }
  }

  private capture(): void {
    const candidates = this.graphable();
    if (candidates.length === 0 || this.graphs.length >= 4) return;
    const s = Math.floor(this.random() * this.streams.length);
    const stream = this.streams[s]!;
    const count = 1 + Math.floor(this.random() * Math.min(3, candidates.length));
    const arrays = [...new Set(Array.from({ length: count }, () => this.pick(candidates)))];
    for (const l of arrays) this.moveTo(l, s);
    const constants = arrays.map(() => Math.floor(this.random() * 9) - 4);
    this.residentFor(arrays, stream);
    using graph = captureGraph(stream, () => arrays.forEach((l, i) => this.addC(stream, l.array, constants[i]!)));
    const exec = graph.instantiate();
    for (const l of arrays) l.graphs++;
    this.graphs.push({ exec, arrays, constants, stream: s });
    this.stats.graphs++;
  }

  private launch(): void {
    if (this.graphs.length === 0) return;
    const g = this.pick(this.graphs);
    const stream = this.streams[g.stream]!;
    for (const l of g.arrays) this.moveTo(l, g.stream);
    if (this.random() < 0.3) this.pressure();
    g.exec.launch(stream);
    g.arrays.forEach((l, i) => {
      for (let k = 0; k < l.expected.length; k++) l.expected[k] = l.expected[k]! + g.constants[i]!;
    });
    this.stats.launches++;
  }

  private update(): void {
    if (this.graphs.length === 0) return;
    const g = this.pick(this.graphs);
    const stream = this.streams[g.stream]!;
    const constants = g.arrays.map(() => Math.floor(this.random() * 9) - 4);
    this.residentFor(g.arrays, stream);
    using next = captureGraph(stream, () => g.arrays.forEach((l, i) => this.addC(stream, l.array, constants[i]!)));
    g.exec.update(next);
    g.constants = constants;
    this.stats.updates++;
  }

  private destroyGraph(): void {
    if (this.graphs.length === 0) return;
    const i = Math.floor(this.random() * this.graphs.length);
    const [g] = this.graphs.splice(i, 1);
    g!.exec.destroy();
    for (const l of g!.arrays) l.graphs--;
  }

  private dlpack(l: Live): void {
    if (l.spillable && this.options.spillableInGraphs !== true) return;
    const stream = this.streams[l.stream]!;
    const tensor = toDLPack(l.array);
    if (this.random() < 0.5) this.pressure();
    const imported = fromDLPack(tensor) as DeviceArray<'float32'>;
    try {
      stream.synchronize();
      this.compare(l, Float32Array.from(imported.toHost()), 'read through its DLPack import');
    } finally {
      imported.free();
    }
    this.stats.dlpack++;
  }

  private budget(): void {
    const spillable = this.options.spillableBudgets === true && this.random() < 0.5;
    const n = 1 + Math.floor(this.random() * 600);
    const bytes = 4 * n;
    const values = this.drawValues(n);
    let refused = false;
    try {
      withMemoryBudget(bytes - 1, () => DeviceArray.from(values, { spillable })).free();
    } catch (error) {
      if (!(error instanceof OutOfMemoryError)) throw error;
      refused = true;
    }
    if (!refused) throw new Error(`a budget of ${bytes - 1} bytes let a ${spillable ? 'spillable ' : ''}array of ${bytes} bytes through`);
    this.stats.budgetsRefused++;
    // One that fits (a spillable buffer may be charged its whole 2 MiB granule).
    const l = withMemoryBudget(8 << 20, () => this.make(spillable));
    this.check(l);
  }

  private pressure(): void {
    spillManager(Device.get(0)).evictAll();
    this.stats.pressures++;
  }

  private free(l: Live): void {
    if (l.graphs > 0) return;
    this.check(l);
    const i = this.live.indexOf(l);
    this.live.splice(i, 1);
    // An array frees on its allocation stream; its buffer frees in stream order on any stream.
    const u = this.random();
    if (u < 0.4) {
      l.array.free();
    } else if (u < 0.7) {
      (l.array.buffer as DeviceBuffer).free({ stream: this.streams[l.stream]! });
    } else {
      const s = Math.floor(this.random() * this.streams.length);
      (l.array.buffer as DeviceBuffer).free({ stream: this.moveTo(l, s) });
    }
    this.stats.frees++;
  }

  private check(l: Live): void {
    this.streams[l.stream]!.synchronize();
    this.compare(l, Float32Array.from(l.array.toHost()), 'read back');
    this.stats.checks++;
  }

  private compare(l: Live, got: Float32Array, how: string): void {
    for (let i = 0; i < l.expected.length; i++) {
      if (got[i] !== l.expected[i]) {
        let wrong = 0;
        for (let k = 0; k < l.expected.length; k++) if (got[k] !== l.expected[k]) wrong++;
        throw new Error(
          `array #${l.id} (${l.expected.length} float32, ${l.spillable ? 'spillable' : 'plain'}, ` +
            `${l.graphs} graph(s), last on stream ${l.stream}) ${how}: element ${i} is ${got[i]}, expected ${l.expected[i]} ` +
            `(${wrong} of ${l.expected.length} wrong)`,
        );
      }
    }
  }

  dispose(): void {
    for (const s of this.streams) {
      try {
        s.synchronize();
      } catch {
        /* the failure being reported matters more */
      }
    }
    for (const g of this.graphs.splice(0)) {
      try {
        g.exec.destroy();
      } catch {
        /* as above */
      }
    }
    for (const l of this.live.splice(0)) {
      try {
        l.array.free();
      } catch {
        /* as above */
      }
    }
    this.module.destroy();
    for (const s of this.streams) s.destroy();
  }
}
