/**
 * Data-parallel training's gradient step with one Node process per GPU: the parent makes the
 * communicator's unique id, starts one worker per rank with the id in its environment (any channel
 * would do: argv, a file, a socket, a key-value store), and each worker averages its gradients with
 * the others' by an all-reduce on its own device, then checks the average against what every rank
 * contributed. Every rank ends with the same parameters, as after one synchronous SGD step.
 *
 * `node dist/examples/data-parallel.js [ranks]` (default: one per GPU, at least 2; on the emulated
 * backend the ranks share its one device). Across hosts the same code runs unchanged: start the
 * workers with `RANK` and `SIZE` on every host and hand them the id rank 0 made; NCCL finds its own
 * network transport (InfiniBand, RoCE or TCP sockets).
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Device, DeviceArray } from '../src/index.js';
import { Communicator, UniqueId } from '../src/public/nccl.js';

const PARAMETERS = 1 << 16;
const STEPS = 3;
const LEARNING_RATE = 0.5;

/** Rank `rank`'s gradient at `step`: its own shard of the data gives its own numbers. */
function localGradient(rank: number, step: number): Float32Array {
  return Float32Array.from({ length: PARAMETERS }, (_, i) => (rank + 1) * ((i + step) % 8));
}

async function parent(): Promise<void> {
  const size = Number(process.argv[2] ?? Math.max(2, Device.count()));
  const id = UniqueId.create();
  const codes = await Promise.all(Array.from({ length: size }, (_, rank) => new Promise<number | null>((resolve) => {
    const child = spawn(process.execPath, [fileURLToPath(import.meta.url)], {
      env: { ...process.env, NCCL_ID: id.toBase64(), RANK: String(rank), SIZE: String(size) }, stdio: 'inherit',
    });
    child.on('exit', resolve);
  })));
  assert.deepEqual(codes, codes.map(() => 0), 'every worker succeeded');
  console.log(`data-parallel: ${size} ranks, ${STEPS} steps of ${PARAMETERS} float32 gradients averaged and checked`);
}

function worker(rank: number, size: number): void {
  const device = Device.get(rank % Device.count());
  using comm = Communicator.init({ id: process.env.NCCL_ID!, rank, size, device });
  using params = DeviceArray.zeros(PARAMETERS, 'float32', { device });
  using grads = DeviceArray.zeros(PARAMETERS, 'float32', { device });
  // Registered once, the gradients are reduced in place on fabrics where NCCL can (NVLS, CollNet).
  const registration = comm.register(grads);
  const expected = new Float32Array(PARAMETERS);
  for (let step = 0; step < STEPS; step++) {
    grads.copyFrom(localGradient(rank, step));
    comm.allReduce(grads, grads, { op: 'avg' });
    const averaged = grads.toHost();
    // What every rank contributed, averaged: the same on every rank.
    const mean = (size + 1) / 2;
    for (let i = 0; i < PARAMETERS; i++) expected[i] = mean * ((i + step) % 8);
    assert.deepEqual(averaged, expected, `rank ${rank}, step ${step}`);
    const p = params.toHost();
    for (let i = 0; i < PARAMETERS; i++) p[i]! -= LEARNING_RATE * averaged[i]!;
    params.copyFrom(p);
  }
  registration.destroy(); // before the gradients are freed
}

if (process.env.RANK === undefined) await parent();
else worker(Number(process.env.RANK), Number(process.env.SIZE));
