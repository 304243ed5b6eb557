/**
 * All-reduce bus bandwidth from Node processes, one per GPU, against PyTorch's
 * `torch.distributed.all_reduce` (NCCL backend) on the same GPUs in the same run (issue 24's target:
 * 0.95x or more). Each rank sums `--size` bytes of float32 out of place, `--iters` times after
 * `--warmup`, timed with events on one stream; the time of a rank is the slowest rank's. Bus
 * bandwidth is NCCL's own figure (nccl-tests): size / time * 2 (n - 1) / n. The sums are checked
 * (the first and last 4096 elements of every rank's result).
 *
 * `node dist/bench/nccl-allreduce.js [--size 1G] [--ranks N] [--iters 20] [--warmup 5] [--no-torch]`
 * (default ranks: every GPU; on the emulated backend 2 ranks of 16M, no PyTorch). Set
 * NCCL_NVLS_ENABLE=0 for both sides alike where NVLink SHARP is not wanted.
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { DeviceArray } from '../src/array/device-array.js';
import { Device } from '../src/device.js';
import { Event, Stream } from '../src/stream.js';
import { Communicator, UniqueId, ncclVersion } from '../src/public/nccl.js';
import { formatBytes, parseSize } from '../src/util/size.js';

const emulated = Device.get(0).backend.name === 'emulated';
const { values } = parseArgs({
  options: {
    size: { type: 'string', default: emulated ? '16M' : '1G' },
    ranks: { type: 'string' },
    iters: { type: 'string', default: emulated ? '3' : '20' },
    warmup: { type: 'string', default: emulated ? '1' : '5' },
    'no-torch': { type: 'boolean', default: emulated },
  },
});
const bytes = parseSize(values.size, '--size');
const iters = Number(values.iters);
const warmup = Number(values.warmup);

/** One rank: returns milliseconds per all-reduce. */
function worker(rank: number, size: number): void {
  const device = Device.get(rank % Device.count());
  using comm = Communicator.init({ id: process.env.NCCL_ID!, rank, size, device });
  const n = bytes / 4;
  using send = DeviceArray.full(n, rank + 1, 'float32', { device });
  using recv = DeviceArray.zeros(n, 'float32', { device });
  using stream = Stream.create({ device });
  for (let i = 0; i < warmup; i++) comm.allReduce(send, recv, { stream });
  using start = Event.create({ device, timing: true });
  using end = Event.create({ device, timing: true });
  start.record(stream);
  for (let i = 0; i < iters; i++) comm.allReduce(send, recv, { stream });
  end.record(stream);
  end.synchronize();
  const ms = end.elapsedSince(start) / iters;
  const expected = (size * (size + 1)) / 2;
  for (const part of [recv.slice([0, 4096]), recv.slice([n - 4096, n])]) {
    assert.ok(
      part.toHost().every((v) => v === expected),
      `rank ${rank}: the sums are wrong`,
    );
  }
  process.stdout.write(`${JSON.stringify({ rank, ms })}\n`);
}

/** Bus bandwidth in GB/s (10^9 bytes) from the slowest rank's milliseconds. */
const busBandwidth = (ms: number, ranks: number): number => ((bytes / (ms / 1000)) * ((2 * (ranks - 1)) / ranks)) / 1e9;

async function parent(): Promise<void> {
  const ranks = Number(values.ranks ?? (emulated ? 2 : Device.count()));
  const id = UniqueId.create().toBase64();
  const script = fileURLToPath(import.meta.url);
  const outputs = await Promise.all(
    Array.from(
      { length: ranks },
      (_, rank) =>
        new Promise<string>((resolve, reject) => {
          const child = spawn(process.execPath, [script, ...process.argv.slice(2)], {
            env: { ...process.env, NCCL_ID: id, RANK: String(rank), SIZE: String(ranks) },
            stdio: ['ignore', 'pipe', 'inherit'],
          });
          let out = '';
          child.stdout.on('data', (d: Buffer) => {
            out += d.toString();
          });
          child.on('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(`rank ${rank} exited with ${code}`))));
        }),
    ),
  );
  const ms = Math.max(...outputs.map((o) => (JSON.parse(o.trim().split('\n').pop()!) as { ms: number }).ms));
  const vram = busBandwidth(ms, ranks);
  const where = emulated ? 'emulated backend' : `NCCL ${ncclVersion().version}`;
  console.log(`all-reduce of ${formatBytes(bytes)} float32 across ${ranks} ranks (${where}), sums checked`);
  console.log(`vram (Node)     ${ms.toFixed(3)} ms  bus bandwidth ${vram.toFixed(1)} GB/s`);
  if (values['no-torch']) return;
  const torch = spawnSync(
    'python3',
    [fileURLToPath(new URL('../../bench/nccl-allreduce.py', import.meta.url)), String(ranks), String(bytes), String(iters), String(warmup)],
    { encoding: 'utf8', env: process.env },
  );
  if (torch.status !== 0) {
    console.log(`PyTorch         not run: ${(torch.stderr || torch.stdout).trim().split('\n').pop() ?? 'python3 failed'}`);
    return;
  }
  const torchMs = Number(torch.stdout.trim().split('\n').pop());
  const reference = busBandwidth(torchMs, ranks);
  console.log(`PyTorch (NCCL)  ${torchMs.toFixed(3)} ms  bus bandwidth ${reference.toFixed(1)} GB/s`);
  console.log(`vram / PyTorch  ${(vram / reference).toFixed(3)}x (target 0.95x or more)`);
}

if (process.env.RANK === undefined) await parent();
else worker(Number(process.env.RANK), Number(process.env.SIZE));
