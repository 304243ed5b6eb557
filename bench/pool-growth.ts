/**
 * Benchmark: what growth costs PoolResource on the shared traces, for several extent sizes
 * (`PoolOptions.extentSize`), beside CUDA's own pool (AsyncResource over a new pool, release
 * threshold at maximum) replaying the same trace in the same process: time per operation of the
 * first pass and of the later ones (a training loop's steady state), the pool's driver calls and
 * page moves, and peak reserved over peak live (the worst pass).
 *
 * `node dist/bench/pool-growth.js [--repeat N] [--extent 2M,8M,inf,adaptive] [trace.csv ...]`
 * (default: both shared traces, 4 passes, extents of one page, 8 MiB, 64 MiB and unbounded;
 * `adaptive` is `extentSize: 'adaptive'`, the `adaptive` stack).
 *
 * On the emulated backend the device is made 16 GiB (lazily backed) unless VRAM_EMULATED_BYTES
 * says otherwise; its times are host times, its call counts are the driver's.
 */
import { basename } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { EmulatedBackend } from '../src/backend/emulated/emulated-backend.js';
import { getBackend, setBackend } from '../src/backend/select.js';
import { parseSize } from '../src/util/size.js';
import { PoolResource } from '../src/resource/suballoc/pool.js';
import { replay, type ReplayOptions, type ReplayPass } from '../src/replay/engine.js';
import { totalDriverCalls, type GrowthFigures } from '../src/resource/figures.js';
import { readAllocationLog, type AllocationTrace } from '../src/replay/parse.js';
import { createStack } from '../src/replay/stacks.js';

const { values, positionals } = parseArgs({
  options: { repeat: { type: 'string', default: '4' }, extent: { type: 'string', default: '2M,8M,64M,inf' } },
  allowPositionals: true,
});
const repeat = Number(values.repeat);
if (!Number.isInteger(repeat) || repeat < 2) throw new RangeError(`--repeat must be a whole number >= 2, got ${values.repeat}`);
const extents = values.extent.split(',').map((e): number | 'adaptive' => {
  const text = e.trim();
  return text === 'inf' ? Infinity : text === 'adaptive' ? text : parseSize(text, '--extent');
});
const shared = fileURLToPath(new URL('../../test/fixtures/traces/', import.meta.url));
const paths = positionals.length > 0 ? positionals : [`${shared}resnet50_train.csv`, `${shared}bert_dynamic_infer.csv`];

if (getBackend().name === 'emulated' && (process.env.VRAM_EMULATED_BYTES ?? '') === '') {
  setBackend(new EmulatedBackend({ capacityBytes: 16 * 2 ** 30 }));
}
console.log(`backend ${getBackend().name}, ${repeat} passes per replay`);

/** One row: time per operation (first pass, mean of the others), growth figures, worst overhead. */
function row(name: string, trace: AllocationTrace, passes: readonly ReplayPass[]): string {
  const [first, ...later] = passes as [ReplayPass, ...ReplayPass[]];
  const mean = later.reduce((t, p) => t + p.nsPerOperation, 0) / later.length;
  const calls = (p: ReplayPass): number => (p.growth === undefined ? NaN : totalDriverCalls(p.growth.driverCalls));
  const sum = (f: (p: ReplayPass) => number): number => later.reduce((t, p) => t + f(p), 0);
  const peak = Math.max(...passes.map((p) => p.peakReservedBytes));
  const overhead = (peak / trace.summary.peakLiveBytes - 1) * 100;
  const growth =
    first.growth === undefined
      ? '-'.padStart(9) + '-'.padStart(12) + '-'.padStart(9) + '-'.padStart(12)
      : `${String(calls(first)).padStart(9)}${String(sum(calls)).padStart(12)}` +
        `${String(first.growth.pageMoves).padStart(9)}${String(sum((p) => p.growth!.pageMoves)).padStart(12)}`;
  return (
    `${name.padEnd(16)}${(first.nsPerOperation / 1e3).toFixed(2).padStart(9)}${(mean / 1e3).toFixed(2).padStart(10)}` +
    `${growth}${`${overhead >= 0 ? '+' : ''}${overhead.toFixed(2)}%`.padStart(11)}`
  );
}

for (const path of paths) {
  const trace = readAllocationLog(path);
  console.log(`\n${basename(path)} (${trace.summary.operations} operations, peak live ${trace.summary.peakLiveBytes} bytes)`);
  console.log(
    `${'resource'.padEnd(16)}${'us/op 1'.padStart(9)}${`us/op 2-${repeat}`.padStart(10)}${'calls 1'.padStart(9)}` +
      `${`calls 2-${repeat}`.padStart(12)}${'moves 1'.padStart(9)}${`moves 2-${repeat}`.padStart(12)}${'overhead'.padStart(11)}`,
  );
  // CUDA's pool first and last, so a drift of the machine over the run shows in its two rows.
  for (const k of [-1, ...extents.keys(), -1]) {
    if (k === -1) {
      const stack = createStack('async', trace);
      try {
        const options: ReplayOptions = { repeat };
        console.log(row('async', trace, replay(trace, stack.resource, options).passes));
      } finally {
        stack.destroy();
      }
      continue;
    }
    const extentSize = extents[k]!;
    const pool = new PoolResource({ extentSize });
    const growth = (): GrowthFigures => pool.growthFigures();
    try {
      const name = extentSize === 'adaptive' ? 'pool adaptive' : `pool ${extentSize === Infinity ? 'inf' : `${extentSize / 2 ** 20}M`}`;
      console.log(row(name, trace, replay(trace, pool, { repeat, growth }).passes));
    } finally {
      pool.destroy();
    }
  }
}
