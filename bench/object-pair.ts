/**
 * The object layer against the resource pair it stands on (issue 35: within 5x): median nanoseconds
 * per allocate + free of 1 MiB, measured in one run, rounds of each kind alternated so all see the
 * same machine state: the current device resource's `allocate`/`deallocate`, `DeviceBuffer.allocate`
 * + `free`, and `DeviceArray.empty` (262,144 float32) + `free`. CPU time (`process.cpuUsage`).
 * `--pool` makes a `PoolResource` the device's current resource first (its hit path is the fastest
 * resource pair, so the object layer's own cost shows most there).
 * `node dist/bench/object-pair.js [--rounds N] [--pairs N] [--pool]`
 */
import { parseArgs } from 'node:util';
import { DeviceArray } from '../src/array/device-array.js';
import { DeviceBuffer } from '../src/buffer/device-buffer.js';
import { Device } from '../src/device.js';
import { getCurrentResource, setCurrentResource } from '../src/resource/current.js';
import { PoolResource } from '../src/resource/suballoc/pool.js';

const { values } = parseArgs({
  options: { rounds: { type: 'string', default: '15' }, pairs: { type: 'string', default: '20000' }, pool: { type: 'boolean', default: false } },
});
const rounds = Number(values.rounds);
const pairs = Number(values.pairs);
if (!Number.isInteger(rounds) || rounds <= 0) throw new RangeError(`--rounds must be a positive whole number, got ${values.rounds}`);
if (!Number.isInteger(pairs) || pairs <= 0) throw new RangeError(`--pairs must be a positive whole number, got ${values.pairs}`);

const MiB = 1 << 20;
const device = Device.get(0);
device.makeCurrent();
if (values.pool) setCurrentResource(device, new PoolResource());
const resource = getCurrentResource();
const stream = { handle: 0 };

const kinds: Record<string, () => void> = {
  'resource allocate + deallocate': () => { for (let i = 0; i < pairs; i++) resource.deallocate(resource.allocate(MiB, stream), MiB, stream); },
  'DeviceBuffer.allocate + free': () => { for (let i = 0; i < pairs; i++) DeviceBuffer.allocate(MiB).free(); },
  'DeviceArray.empty + free': () => { for (let i = 0; i < pairs; i++) DeviceArray.empty([MiB / 4], 'float32').free(); },
};

function nsPerPair(f: () => void): number {
  const t0 = process.cpuUsage();
  f();
  const t = process.cpuUsage(t0);
  return ((t.user + t.system) * 1e3) / pairs;
}

for (let w = 0; w < 3; w++) for (const f of Object.values(kinds)) f();
const times = new Map<string, number[]>(Object.keys(kinds).map((k) => [k, []]));
for (let r = 0; r < rounds; r++) for (const [name, f] of Object.entries(kinds)) times.get(name)!.push(nsPerPair(f));
const median = (xs: number[]): number => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const base = median(times.get('resource allocate + deallocate')!);
console.log(`backend ${device.backend.name}, ${resource.describe()}, 1 MiB, median CPU ns per pair of ${rounds} rounds of ${pairs}`);
for (const [name, xs] of times) {
  const m = median(xs);
  console.log(`${name.padEnd(34)} ${m.toFixed(0).padStart(7)} ns  ${(m / base).toFixed(1).padStart(5)}x the resource pair`);
}
