/**
 * The emulated backend's built-in operations against a plain JavaScript loop over the same
 * Float32Array (issue 35: within 10x). 1M float32 elements; median CPU milliseconds of `--runs` runs
 * (default 9) after a warm-up, the two alternated so both see the same machine load. Each operation is waited for (`synchronize`), and new arrays are
 * freed inside the timed region, so the row is what a user's line costs.
 * `VRAM_BACKEND=emulated node dist/bench/emulated-ops.js [--runs N] [--n N]`
 */
import { parseArgs } from 'node:util';
import { DeviceArray } from '../src/array/device-array.js';
import { Device } from '../src/device.js';
import { ascontiguous, dot, elementwise, fill, map, max, min, sum, zipWith } from '../src/kernels/ops/index.js';

const { values } = parseArgs({ options: { runs: { type: 'string', default: '9' }, n: { type: 'string', default: String(1 << 20) } } });
const runs = Number(values.runs);
const n = Number(values.n);
if (!Number.isInteger(runs) || runs <= 0) throw new RangeError(`--runs must be a positive whole number, got ${values.runs}`);
if (!Number.isInteger(n) || n <= 0) throw new RangeError(`--n must be a positive whole number, got ${values.n}`);

const device = Device.get(0);
const host = Float32Array.from({ length: n }, (_, i) => (i % 1000) / 7);
const hostY = Float32Array.from({ length: n }, (_, i) => (i % 333) / 3);
const hostStrided = Float32Array.from({ length: 2 * n }, (_, i) => (i % 1000) / 7);
const x = DeviceArray.from(host);
const y = DeviceArray.from(hostY);
const z = DeviceArray.empty([n], 'float32');
const strided = DeviceArray.from(hostStrided);
const everyOther = strided.slice([0, 2 * n, 2]);
const sink: number[] = [];

/**
 * Milliseconds of CPU time (user + system, the whole process) one call takes: on a machine shared
 * with other work the wall clock counts the time this process waited for a core.
 */
function time(f: () => void): number {
  const t0 = process.cpuUsage();
  f();
  const t = process.cpuUsage(t0);
  return (t.user + t.system) / 1e3;
}

function median(times: number[]): number {
  times.sort((a, b) => a - b);
  return times[Math.floor(times.length / 2)]!;
}

const out = new Float32Array(n);
const plain: Record<string, () => void> = {
  'map x + 1': () => {
    for (let i = 0; i < n; i++) out[i] = host[i]! + 1;
  },
  'zipWith x * y + 1': () => {
    for (let i = 0; i < n; i++) out[i] = host[i]! * hostY[i]! + 1;
  },
  'elementwise z = 2 * x + y': () => {
    for (let i = 0; i < n; i++) out[i] = 2 * host[i]! + hostY[i]!;
  },
  'map sqrt(abs(x))': () => {
    for (let i = 0; i < n; i++) out[i] = Math.sqrt(Math.abs(host[i]!));
  },
  sum: () => {
    let s = 0;
    for (let i = 0; i < n; i++) s += host[i]!;
    sink.push(s);
  },
  min: () => {
    let s = Infinity;
    for (let i = 0; i < n; i++) if (host[i]! < s) s = host[i]!;
    sink.push(s);
  },
  max: () => {
    let s = -Infinity;
    for (let i = 0; i < n; i++) if (host[i]! > s) s = host[i]!;
    sink.push(s);
  },
  dot: () => {
    let s = 0;
    for (let i = 0; i < n; i++) s += host[i]! * hostY[i]!;
    sink.push(s);
  },
  fill: () => {
    out.fill(3);
  },
  'copy (ascontiguous of a strided view)': () => {
    for (let i = 0; i < n; i++) out[i] = hostStrided[2 * i]!;
  },
  'map x + 1 over a strided view': () => {
    for (let i = 0; i < n; i++) out[i] = hostStrided[2 * i]! + 1;
  },
};
const vram: Record<string, () => void> = {
  'map x + 1': () => {
    map(x, 'x + 1').free();
  },
  'zipWith x * y + 1': () => {
    zipWith(x, y, 'x * y + 1').free();
  },
  'elementwise z = 2 * x + y': () => {
    elementwise('z = 2 * x + y', { x, y, z });
  },
  'map sqrt(abs(x))': () => {
    map(x, 'sqrt(abs(x))').free();
  },
  sum: () => {
    sink.push(sum(x));
  },
  min: () => {
    sink.push(min(x));
  },
  max: () => {
    sink.push(max(x));
  },
  dot: () => {
    sink.push(Number(dot(x, y)));
  },
  fill: () => {
    fill(z, 3);
  },
  'copy (ascontiguous of a strided view)': () => {
    ascontiguous(everyOther).free();
  },
  'map x + 1 over a strided view': () => {
    map(everyOther, 'x + 1').free();
  },
};

console.log(`backend ${device.backend.name}, ${n} float32 elements, median CPU milliseconds of ${runs} runs, vram and plain runs alternated`);
console.log(`${'operation'.padEnd(40)} ${'vram'.padStart(9)} ${'plain JS'.padStart(9)} ${'ratio'.padStart(7)}`);
for (const name of Object.keys(vram)) {
  const op = (): void => {
    vram[name]!();
    device.synchronize();
  };
  for (let w = 0; w < 2; w++) {
    op();
    plain[name]!();
  }
  const v: number[] = [];
  const p: number[] = [];
  for (let r = 0; r < runs; r++) {
    v.push(time(op));
    p.push(time(plain[name]!));
  }
  const mv = median(v);
  const mp = median(p);
  console.log(`${name.padEnd(40)} ${mv.toFixed(2).padStart(9)} ${mp.toFixed(2).padStart(9)} ${(mv / mp).toFixed(1).padStart(6)}x`);
}
if (sink.length === 0) console.log('');
