/**
 * The object layer against the resource pair it stands on (issue 35: within 5x): median nanoseconds
 * per allocate + free of 1 MiB, measured in one run, rounds of each kind alternated so all see the
 * same machine state: the current device resource's `allocate`/`deallocate`, `DeviceBuffer.allocate`
 * + `free`, and `DeviceArray.empty` (262,144 float32) + `free`. CPU time (`process.cpuUsage`).
 * `--pool` makes a `PoolResource` the device's current resource first (its hit path is the fastest
 * resource pair, so the object layer's own cost shows most there). `--sizes 256,1M,64M` measures
 * each size in turn; `--clock wall` times each batch on the host clock, ending with a device
 * synchronize inside it, as bench/peers/object_empty.py times the Python frameworks (for a GPU run).
 * `node dist/bench/object-pair.js [--rounds N] [--pairs N] [--pool] [--sizes LIST] [--clock cpu|wall]`
 */
import { parseArgs } from 'node:util';
import { objectPairKinds } from '../src/cli/bench/object-pairs.js';
import { Device } from '../src/device.js';
import { getCurrentResource, setCurrentResource } from '../src/resource/current.js';
import { PoolResource } from '../src/resource/suballoc/pool.js';
import { parseSize } from '../src/util/size.js';

const { values } = parseArgs({
  options: {
    rounds: { type: 'string', default: '15' },
    pairs: { type: 'string', default: '20000' },
    pool: { type: 'boolean', default: false },
    sizes: { type: 'string', default: '1M' },
    clock: { type: 'string', default: 'cpu' },
  },
});
if (values.clock !== 'cpu' && values.clock !== 'wall') throw new RangeError(`--clock must be cpu or wall, got ${values.clock}`);
const sizes = values.sizes.split(',').map((s) => parseSize(s.trim(), '--sizes'));
const rounds = Number(values.rounds);
const pairs = Number(values.pairs);
if (!Number.isInteger(rounds) || rounds <= 0) throw new RangeError(`--rounds must be a positive whole number, got ${values.rounds}`);
if (!Number.isInteger(pairs) || pairs <= 0) throw new RangeError(`--pairs must be a positive whole number, got ${values.pairs}`);

const device = Device.get(0);
device.makeCurrent();
if (values.pool) setCurrentResource(device, new PoolResource());
const resource = getCurrentResource();

function kindsOf(bytes: number): Record<string, () => void> {
  const [resourcePairs, bufferPairs, arrayPairs] = objectPairKinds(resource, bytes, pairs);
  return {
    'resource allocate + deallocate': resourcePairs,
    'DeviceBuffer.allocate + free': bufferPairs,
    'DeviceArray.empty + free': arrayPairs,
  };
}

function nsPerPair(f: () => void): number {
  if (values.clock === 'wall') {
    const t0 = process.hrtime.bigint();
    f();
    device.synchronize();
    return Number(process.hrtime.bigint() - t0) / pairs;
  }
  const t0 = process.cpuUsage();
  f();
  const t = process.cpuUsage(t0);
  return ((t.user + t.system) * 1e3) / pairs;
}

const median = (xs: number[]): number => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
for (const bytes of sizes) {
  const kinds = kindsOf(bytes);
  for (let w = 0; w < 3; w++) for (const f of Object.values(kinds)) f();
  const times = new Map<string, number[]>(Object.keys(kinds).map((k) => [k, []]));
  for (let r = 0; r < rounds; r++) for (const [name, f] of Object.entries(kinds)) times.get(name)!.push(nsPerPair(f));
  const base = median(times.get('resource allocate + deallocate')!);
  console.log(
    `backend ${device.backend.name}, ${resource.describe()}, ${bytes} B, median ${values.clock === 'wall' ? 'wall' : 'CPU'} ns per pair of ${rounds} rounds of ${pairs}`,
  );
  for (const [name, xs] of times) {
    const m = median(xs);
    console.log(`${name.padEnd(34)} ${m.toFixed(0).padStart(7)} ns  ${(m / base).toFixed(1).padStart(5)}x the resource pair`);
  }
}
