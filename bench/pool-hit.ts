/**
 * Micro-benchmark: median nanoseconds per allocate+free pair on a pool hit, at 256 B, 1 MiB and
 * 64 MiB, for PoolResource (virtual memory growth), then the p50 and p99 of pairs timed one by one
 * (beside the clock's own cost). `node dist/bench/pool-hit.js [--passes N] [--history] [--adaptive]`
 * The pair is timed by `measureHits` (src/cli/bench/hits.ts), the code `vram bench` times its
 * pool-hit rows with, each resource in a process of its own as this one is.
 *
 * `--adaptive` measures a pool with `extentSize: 'adaptive'` (the `adaptive` stack): its hit path
 * is the same code, so its pairs should match the default pool's.
 *
 * `--history` measures instead what recording the memory history costs (issue 11: at most 2x the
 * pair with stacks off): rounds with and without a recording, alternated in one process so both
 * see the same machine state, and the ratio of their medians.
 *
 * It prints the backend and where the pool's addresses start, because both have mattered: real
 * driver reservations sit elsewhere than emulated ones and are far larger (twice the device's
 * memory). Later passes over the sizes show whether the first size measured paid for warm-up.
 */
import { parseArgs } from 'node:util';
import { Device } from '../src/device.js';
import { recordMemoryHistory } from '../src/observe/history.js';
import { hitPairs, measureHits } from '../src/cli/bench/hits.js';
import { createResourceStack } from '../src/resource/stacks.js';

const { values } = parseArgs({
  options: { passes: { type: 'string', default: '1' }, history: { type: 'boolean', default: false }, adaptive: { type: 'boolean', default: false } },
});
const passes = Number(values.passes);
if (!Number.isInteger(passes) || passes <= 0) throw new RangeError(`--passes must be a positive whole number, got ${values.passes}`);
const sizes: Array<[string, number]> = [
  ['256 B', 256],
  ['1 MiB', 1 << 20],
  ['64 MiB', 64 << 20],
];
const stack = createResourceStack(values.adaptive ? 'adaptive' : 'pool');
const pool = stack.resource;
const device = Device.get(0);
device.makeCurrent();
const probe = pool.allocate(256);
console.log(`backend ${device.backend.name}, ${pool.describe()}, pool addresses from 0x${probe.toString(16)}`);
pool.deallocate(probe, 256);
const stream = { handle: 0 };
const pairs = (bytes: number, iterations: number): number => hitPairs(pool, bytes, iterations, stream);

/**
 * What recording the memory history costs (issue 11: at most 2x the pair with stacks off): rounds
 * with and without a recording, alternated in one process so both see the same machine state, and
 * the ratio of their medians; then the pair with stacks captured.
 */
function measureHistory(): void {
  /** Nanoseconds per pair while a history (stacks off) records; its ring of 100,000 events wraps, as a long recording's does. */
  const recorded = (bytes: number, iterations: number): number => {
    const history = recordMemoryHistory({ maxEntries: 100_000 });
    try {
      return pairs(bytes, iterations);
    } finally {
      history.stop();
    }
  };
  // Warm both (maps the pages, gives the JIT feedback for every branch before anything is timed).
  for (let k = 0; k < 3; k++) {
    for (const [, bytes] of sizes) {
      pairs(bytes, 20_000);
      recorded(bytes, 20_000);
    }
  }
  for (const [label, bytes] of sizes) {
    const off: number[] = [];
    const on: number[] = [];
    for (let round = 0; round < 15; round++) {
      off.push(pairs(bytes, 200_000));
      on.push(recorded(bytes, 200_000));
    }
    off.sort((a, b) => a - b);
    on.sort((a, b) => a - b);
    console.log(
      `pool hit ${label.padStart(6)}: ${off[7]!.toFixed(1)} ns per pair, ${on[7]!.toFixed(1)} ns recording history ` +
        `(stacks off): ${(on[7]! / off[7]!).toFixed(2)}x (medians of 15 alternated rounds)`,
    );
  }
  // With stacks, each event captures the call stack: microseconds, so fewer pairs.
  const withStacks = recordMemoryHistory({ maxEntries: 100_000, stacks: true });
  const stacked: number[] = [];
  for (let round = 0; round < 7; round++) stacked.push(pairs(256, 5_000));
  withStacks.stop();
  stacked.sort((a, b) => a - b);
  console.log(`pool hit  256 B recording history with stacks: ${(stacked[3]! / 1000).toFixed(1)} us per pair (median of 7 rounds)`);
}

/** The pair at each size, `passes` times (`measureHits`: live blocks, warm-up, 15 rounds), then the tail of pairs timed one by one. */
function measurePairs(): void {
  for (let pass = 0; pass < passes; pass++) {
    for (const f of measureHits(
      pool,
      sizes.map(([, bytes]) => bytes),
    )) {
      const label = sizes.find(([, bytes]) => bytes === f.bytes)![0];
      console.log(
        `pool hit ${label.padStart(6)}: ${f.ns.toFixed(1)} ns per allocate+free pair (median of ${f.rounds} rounds of ${f.pairs.toLocaleString('en-US')})`,
      );
    }
  }
  // The tail: every pair timed on its own, 200,000 per size. Each sample includes one clock read
  // pair (hrtime.bigint), measured alone in the same run and printed, so read the p99 against it.
  function tail(bytes: number, count: number): Float64Array {
    const samples = new Float64Array(count);
    for (let i = 0; i < count; i++) {
      const t0 = process.hrtime.bigint();
      pool.deallocate(pool.allocate(bytes, stream), bytes, stream);
      samples[i] = Number(process.hrtime.bigint() - t0);
    }
    return samples.sort();
  }
  const clock = new Float64Array(200_000);
  for (let i = 0; i < clock.length; i++) {
    const t0 = process.hrtime.bigint();
    clock[i] = Number(process.hrtime.bigint() - t0);
  }
  clock.sort();
  console.log(`clock read pair alone: p50 ${clock[clock.length >> 1]} ns, p99 ${clock[Math.floor(clock.length * 0.99)]} ns`);
  for (const [label, bytes] of sizes) {
    const t = tail(bytes, 200_000);
    console.log(`pool hit ${label.padStart(6)}, each pair timed: p50 ${t[t.length >> 1]} ns, p99 ${t[Math.floor(t.length * 0.99)]} ns (clock included)`);
  }
}

if (values.history) measureHistory();
else measurePairs();
stack.destroy();
