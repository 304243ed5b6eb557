/**
 * CUDA graphs against eager launches, all in one run on one device:
 * (a) a captured graph of 100 empty kernels launched from TypeScript (`exec.launch(stream)`, the
 *     host's time per call) against 100 eager `kernel.launch()` calls from TypeScript (the host's
 *     time for the 100) and against the same graph launched from C (bench/c/graph_launch.c, run
 *     from bench/build/ when built: `make -C bench/c`); also the wall time of a launch and its
 *     completion, each way;
 * (b) an end-to-end step (built-in ops and a user kernel over arrays allocated during the
 *     capture, 50+ nodes) replayed from a graph against the same step run eagerly, wall time per
 *     step (launch and completion), the results checked equal.
 * (c) a host function between two kernels in a graph against the two kernels alone, launch and
 *     completion awaited: what JavaScript between kernels costs.
 * Ratios are printed (issue 23's targets: the graph launch 10x or more faster than 100 eager
 * launches, within 1.1x of C's; the step 3x or more faster from a graph). On the emulated backend
 * the figures measure the emulation, not a GPU.
 *
 * `node dist/bench/graph.js [--n 4096] [--rounds 13]` (13 rounds: a step of 54 nodes)
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { DeviceArray } from '../src/array/device-array.js';
import { Device } from '../src/device.js';
import { captureGraph } from '../src/graphs/capture.js';
import { Module } from '../src/kernels/module.js';
import { elementwise, map, zipWith } from '../src/kernels/ops/elementwise.js';
import { Stream } from '../src/stream.js';
import { AXPB, AXPB_SOURCE, axpb } from './axpb.js';

const device = Device.get(0);
const emulated = device.backend.name === 'emulated';
const { values } = parseArgs({ options: { n: { type: 'string', default: '4096' }, rounds: { type: 'string', default: '13' } } });
const n = Number(values.n);
const rounds = Number(values.rounds);
if (!Number.isInteger(n) || n < 1 || !Number.isInteger(rounds) || rounds < 1) throw new RangeError('--n and --rounds must be positive whole numbers');

const NODES = 100;
const BATCHES = emulated ? 20 : 200;
const WARMUP = emulated ? 3 : 20;
const GRAPH_LAUNCHES_PER_BATCH = 5;

const nowNs = (): number => Number(process.hrtime.bigint());

function median(samples: number[]): number {
  const s = [...samples].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

/** Median host ns per call of `launch`, `perBatch` calls per batch, each batch from an idle stream. */
function timeCalls(stream: Stream, perBatch: number, launch: () => void): number {
  const samples: number[] = [];
  for (let b = 0; b < WARMUP + BATCHES; b++) {
    stream.synchronize();
    const start = nowNs();
    for (let i = 0; i < perBatch; i++) launch();
    const elapsed = nowNs() - start;
    if (b >= WARMUP) samples.push(elapsed / perBatch);
  }
  stream.synchronize();
  return median(samples);
}

/** Median wall ns of `step` and its completion (stream.synchronize()). */
function timeSteps(stream: Stream, step: () => void): number {
  const samples: number[] = [];
  for (let b = 0; b < WARMUP + BATCHES; b++) {
    stream.synchronize();
    const start = nowNs();
    step();
    stream.synchronize();
    if (b >= WARMUP) samples.push(nowNs() - start);
  }
  return median(samples);
}

/** The C reference's JSON line, when bench/build/graph_launch exists. */
function cReference(): { graph_launch_ns: number; graph_step_ns: number } | undefined {
  const program = path.resolve(fileURLToPath(new URL('../../bench/build/graph_launch', import.meta.url)));
  if (emulated || !existsSync(program)) return undefined;
  const run = spawnSync(program, { encoding: 'utf8' });
  if (run.status !== 0) throw new Error(`${program} failed: ${run.stderr}`);
  return JSON.parse(run.stdout.trim().split('\n').pop()!) as { graph_launch_ns: number; graph_step_ns: number };
}

const us = (ns: number): string => `${(ns / 1000).toFixed(2)} us`;

using module = Module.compile(AXPB_SOURCE, { device, cache: true, emulated: { empty: () => {}, axpb } });
const empty = module.kernel('empty', []);
const kernel = module.kernel('axpb', AXPB);
using stream = Stream.create({ nonBlocking: true });
console.log(`device: ${device.info.name} (${device.backend.name} backend)`);

// (a) 100 empty kernels.
const eager100 = (): void => {
  for (let i = 0; i < NODES; i++) empty.launch({ grid: 1, block: 32, stream });
};
using emptyGraph = captureGraph(stream, eager100);
using emptyExec = emptyGraph.instantiate();
const eagerLaunchNs = timeCalls(stream, 1, eager100);
// TypeScript and C alternate three times and each side's median is kept: the host's speed drifts
// between runs by more than the gap being measured (one process after the other, seconds apart).
const tsLaunch: number[] = [];
const tsStep: number[] = [];
const cRuns: Array<{ graph_launch_ns: number; graph_step_ns: number }> = [];
const rawLaunch: number[] = [];
const { backend } = device;
const execHandle = emptyExec.handle;
const streamHandle = stream.handle;
for (let round = 0; round < 3; round++) {
  tsLaunch.push(timeCalls(stream, GRAPH_LAUNCHES_PER_BATCH, () => emptyExec.launch(stream)));
  // The driver call alone through koffi, without GraphExec's checks: where the time goes.
  rawLaunch.push(timeCalls(stream, GRAPH_LAUNCHES_PER_BATCH, () => backend.graphLaunch(execHandle, streamHandle)));
  tsStep.push(timeSteps(stream, () => emptyExec.launch(stream)));
  const one = cReference();
  if (one !== undefined) cRuns.push(one);
}
const graphLaunchNs = median(tsLaunch);
const graphStepNs = median(tsStep);
const eagerStepNs = timeSteps(stream, eager100);
const c =
  cRuns.length === 0 ? undefined : { graph_launch_ns: median(cRuns.map((r) => r.graph_launch_ns)), graph_step_ns: median(cRuns.map((r) => r.graph_step_ns)) };
console.log(`(a) ${NODES} empty kernels (${emptyGraph.nodeCount} nodes)`);
console.log(`  host time to launch: eager ${us(eagerLaunchNs)}, graph ${us(graphLaunchNs)}: ${(eagerLaunchNs / graphLaunchNs).toFixed(1)}x (target >= 10x)`);
console.log(`  launch and completion: eager ${us(eagerStepNs)}, graph ${us(graphStepNs)}: ${(eagerStepNs / graphStepNs).toFixed(2)}x`);
console.log(
  `  the driver call alone from TypeScript (backend.graphLaunch through koffi): ${us(median(rawLaunch))} (GraphExec.launch / it ${(graphLaunchNs / median(rawLaunch)).toFixed(3)}x)`,
);
if (c !== undefined) {
  console.log(
    `  the same graph from C (medians of 3 runs alternated with TypeScript's): launch ${us(c.graph_launch_ns)} (TypeScript/C ${(graphLaunchNs / c.graph_launch_ns).toFixed(3)}x, target <= 1.1x), ` +
      `launch and completion ${us(c.graph_step_ns)} (${(graphStepNs / c.graph_step_ns).toFixed(3)}x)`,
  );
} else {
  console.log('  the same graph from C: bench/build/graph_launch not built (make -C bench/c), or the emulated backend');
}

// (b) An end-to-end step over arrays allocated during the capture.
using x = DeviceArray.from(
  Float32Array.from({ length: n }, (_, i) => Math.sin(i)),
  { stream },
);
using out = DeviceArray.zeros([n], 'float32', { stream });
const step = (): void => {
  let h = map(x, 'x * 0.5 + 1', { stream });
  for (let r = 0; r < rounds; r++) {
    const t = zipWith(h, x, 'x * y + 0.25', { stream }); // allocates
    elementwise('t = t > 2 ? t - 1 : t', { t }, { stream });
    kernel.launch({ grid: Math.ceil(n / 256), block: 256, stream }, t, t, 0.9, 0.05, n);
    const u = map(t, 'x * x', { stream }); // allocates
    h.free();
    t.free();
    h = u;
  }
  zipWith(h, x, 'x - y', { out, stream });
  h.free();
};
using stepGraph = captureGraph(stream, step);
using stepExec = stepGraph.instantiate();
stepExec.launch(stream);
const fromGraph = await out.toHostAsync({ stream });
step();
const eagerResult = await out.toHostAsync({ stream });
for (let i = 0; i < n; i++) {
  if (!Object.is(fromGraph[i], eagerResult[i])) throw new Error(`(b) the graph's result differs at ${i}: ${fromGraph[i]} != ${eagerResult[i]}`);
}
const eagerStep = timeSteps(stream, step);
const graphStep = timeSteps(stream, () => stepExec.launch(stream));
console.log(
  `(b) a step of ${stepGraph.nodeCount} nodes over ${n} float32 (built-in ops and a user kernel, arrays allocated during the capture), results equal`,
);
console.log(`  launch and completion: eager ${us(eagerStep)}, graph ${us(graphStep)}: ${(eagerStep / graphStep).toFixed(2)}x (target >= 3x)`);

// (c) A host function between two empty kernels, against the same two kernels alone: what running
// JavaScript between kernels adds to a launch and its completion. The stream waits for the event
// loop to run the function, so both are awaited (`synchronized()`), never `synchronize()`.
const one = { grid: 1, block: 32, stream };
let hostCalls = 0;
using hostGraph = captureGraph(stream, () => {
  empty.launch(one);
  stream.launchHostFunc(() => {
    hostCalls += 1;
  });
  empty.launch(one);
});
using plainGraph = captureGraph(stream, () => {
  empty.launch(one);
  empty.launch(one);
});
using hostExec = hostGraph.instantiate();
using plainExec = plainGraph.instantiate();
/** Median wall ns of a launch and its completion, awaited. */
async function timeAwaited(exec: { launch(s: Stream): unknown }): Promise<number> {
  const samples: number[] = [];
  for (let b = 0; b < WARMUP + BATCHES; b++) {
    await stream.synchronized();
    const start = nowNs();
    exec.launch(stream);
    await stream.synchronized();
    if (b >= WARMUP) samples.push(nowNs() - start);
  }
  return median(samples);
}
const plainNs = await timeAwaited(plainExec);
const hostNs = await timeAwaited(hostExec);
if (hostCalls !== WARMUP + BATCHES) throw new Error(`(c) the host function ran ${hostCalls} times, not ${WARMUP + BATCHES}`);
console.log('(c) a host function (stream.launchHostFunc) between two empty kernels in a graph, launch and completion awaited');
console.log(`  with it ${us(hostNs)}, without it ${us(plainNs)}: the host function adds ${us(hostNs - plainNs)}`);
