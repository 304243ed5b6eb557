/**
 * vram/nccl: communicators across processes. Each case spawns one Node process per rank
 * (test/fixtures/nccl/rank.ts), which runs every collective, the group send/recv ring and a
 * registration with rank-dependent data and checks each result against NCCL's semantics. On the
 * emulated backend the ranks meet through the emulated channel; on a GPU (one device per rank,
 * `npm run test:gpu` on a machine of 2 to 4 GPUs) through NCCL. Argument checks run in this
 * process, on a communicator of one rank.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import path from 'node:path';
import { tmpdir } from 'node:os';
import { fileURLToPath } from 'node:url';
import { DeviceArray } from '../../src/array/device-array.js';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { Device } from '../../src/device.js';
import { NotSupportedError, VramStateError } from '../../src/errors.js';
import { Communicator, NcclError, UniqueId, group, ncclVersion } from '../../src/public/nccl.js';
import { ncclCandidates } from '../../src/cuda/nccl-library.js';
import { onGpu } from '../helpers.js';

const rankScript = fileURLToPath(new URL('../fixtures/nccl/rank.js', import.meta.url));

/** What one rank printed and how it ended. */
interface RankResult {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs the rank script in a child process with `env` added. */
function runRank(args: readonly string[], env: Record<string, string>): Promise<RankResult> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [rankScript, ...args], { env: { ...process.env, ...env } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => {
      stdout += d.toString();
    });
    child.stderr.on('data', (d: Buffer) => {
      stderr += d.toString();
    });
    child.on('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

const CHECKS = [
  'allReduce sum float32 in place',
  'allReduce int32 sum prod max min avg',
  'allReduce float64 avg, int64 max, float16 sum',
  'allGather layout',
  'reduceScatter layout',
  'broadcast in place on a stream',
  'allReduce of a DeviceBuffer',
  'group send/recv ring',
  'registered memory',
  'destroy',
];

/** The emulated rendezvous folder of a unique id (base64), as src/backend/emulated/collective-channel.ts names it. */
function rendezvousFolder(id: string): string {
  return path.join(tmpdir(), `vram-nccl-${createHash('sha256').update(UniqueId.fromBase64(id).bytes).digest('hex').slice(0, 32)}`);
}

/** Spawns `size` ranks on one unique id and checks every rank passed every check; returns the id. */
async function collectives(size: number): Promise<string> {
  const id = UniqueId.create().toBase64();
  const results = await Promise.all(Array.from({ length: size }, (_, rank) => runRank([], { NCCL_ID: id, RANK: String(rank), SIZE: String(size) })));
  results.forEach((r, rank) => {
    assert.equal(r.code, 0, `rank ${rank} of ${size} failed:\n${r.stderr}\n${r.stdout}`);
    assert.deepEqual(
      r.stdout.trim().split('\n'),
      CHECKS.map((c) => `ok ${c}`),
      `rank ${rank}`,
    );
  });
  return id;
}

/** Why NCCL cases cannot run here: a GPU without NCCL (the emulated backend needs none). */
const noNccl: string | false = ((): string | false => {
  if (!onGpu) return false;
  try {
    ncclVersion();
    return false;
  } catch (e) {
    return `NCCL is not installed here: ${(e as Error).message.slice(0, 80)}...`;
  }
})();

/** GPU runs need NCCL and one device per rank; the emulated backend runs any number of ranks on its device. */
const ranksFit = (size: number): { skip: string | false } => ({
  skip: noNccl !== false ? noNccl : onGpu && Device.count() < size ? `needs ${size} GPUs (this machine has ${Device.count()})` : false,
});

test('every collective across 2 processes', ranksFit(2), async () => {
  await collectives(2);
});
test('every collective across 4 processes', ranksFit(4), async () => {
  await collectives(4);
});

test('the emulated rendezvous folder is gone once every rank destroyed its communicator', { skip: onGpu ? 'emulated backend only' : false }, async () => {
  // Its own id's folder, not the temporary directory's listing: other suites' ranks may meet there.
  const id = await collectives(2);
  assert.equal(existsSync(rendezvousFolder(id)), false);
});

test('a missing NCCL is a NcclUnavailableError naming the library and what to install', async () => {
  const r = await runRank(['missing'], { VRAM_LIBNCCL: '/nonexistent/libnccl.so.2' });
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /ok ncclVersion names the library and what to install/);
  assert.deepEqual(ncclCandidates({ VRAM_LIBNCCL: '/x/libnccl.so.2', PATH: '/usr/bin' }), ['/x/libnccl.so.2'], 'VRAM_LIBNCCL is the only one tried');
  assert.equal(ncclCandidates({ PATH: '' })[0], 'libnccl.so.2');
});

test("NCCL is found in the nvidia/nccl/lib folder of a python3 on PATH (a virtual environment's, PyTorch's)", () => {
  const venv = mkdtempSync(path.join(tmpdir(), 'vram-venv-'));
  try {
    const lib = path.join(venv, 'lib/python3.12/site-packages/nvidia/nccl/lib');
    mkdirSync(lib, { recursive: true });
    mkdirSync(path.join(venv, 'bin'));
    writeFileSync(path.join(lib, 'libnccl.so.2'), '');
    const found = ncclCandidates({ PATH: `/usr/bin:${path.join(venv, 'bin')}`, HOME: '' });
    assert.ok(found.includes(path.join(lib, 'libnccl.so.2')), found.join(', '));
  } finally {
    rmSync(venv, { recursive: true, force: true });
  }
});

test('examples/data-parallel averages gradients across 2 processes', ranksFit(2), () => {
  const example = fileURLToPath(new URL('../../examples/data-parallel.js', import.meta.url));
  const output = execFileSync(process.execPath, [example, '2'], { encoding: 'utf8', env: process.env });
  assert.equal(output, 'data-parallel: 2 ranks, 3 steps of 65536 float32 gradients averaged and checked\n');
});

test('unique ids round-trip through base64, bytes and JSON, and bad ones are refused', { skip: noNccl }, () => {
  const id = UniqueId.create();
  assert.equal(id.bytes.byteLength, 128);
  assert.deepEqual(UniqueId.fromBase64(id.toBase64()).bytes, id.bytes);
  assert.deepEqual(UniqueId.fromBytes(id.bytes).bytes, id.bytes);
  assert.equal(JSON.parse(JSON.stringify({ id })).id, id.toBase64());
  assert.match(String(id), /^UniqueId\([0-9a-f]{16}\.\.\.\)$/);
  assert.throws(() => UniqueId.fromBytes(new Uint8Array(64)), /must be 128 long/);
  assert.throws(() => UniqueId.fromBase64('!!'), /must be base64/);
  assert.throws(() => UniqueId.fromBase64('AAAA'), /must hold 128 bytes/);
});

test('arguments are checked before anything is queued', { skip: noNccl }, () => {
  assert.throws(() => Communicator.init({ id: UniqueId.create(), rank: 1, size: 1 }), /rank must be a whole number from 0 to 0, got 1/);
  assert.throws(() => Communicator.init({ id: UniqueId.create(), rank: 0, size: 1, rnak: 0 } as never), TypeError);
  using comm = Communicator.init({ id: UniqueId.create(), rank: 0, size: 1 });
  using a = DeviceArray.from(new Float32Array([1, 2, 3, 4]));
  using b = DeviceArray.zeros([3], 'float32');
  using shorts = DeviceArray.zeros([4], 'int16');
  assert.throws(() => comm.allReduce(a, b), /recv must hold the same number of elements/);
  assert.throws(() => comm.allReduce(a, a, { op: 'mean' as never }), /options.op must be one of sum, prod, max, min, avg, got mean/);
  assert.throws(() => comm.allReduce(shorts), NotSupportedError);
  assert.throws(() => comm.allReduce(a, a, { dtype: 'int32' }), /options.dtype \(int32\) is for buffers only/);
  assert.throws(() => comm.allReduce(a.slice([0, null, 2])), /strided view/);
  assert.throws(() => comm.broadcast(a, a, {} as never), /options.root is required/);
  assert.throws(() => comm.send(a, 1), /peer must be a rank from 0 to 0, got 1/);
  using odd = DeviceBuffer.allocate(6);
  assert.throws(() => comm.allReduce(odd), /6 bytes, not a whole number of float32 elements/);
  assert.throws(() => comm.allReduce({} as never), /must be a DeviceArray or a DeviceBuffer/);
  assert.throws(() => group(() => Promise.resolve()), /must be synchronous/);
  assert.deepEqual([...a.toHost()], [1, 2, 3, 4], 'nothing ran');
  // One rank: each collective is a copy, sends and receives to oneself pair up in a group.
  comm.allReduce(a, a, { op: 'max' });
  using c = DeviceArray.zeros([4], 'float32');
  group(() => {
    comm.send(a, 0);
    comm.recv(c, 0);
  });
  assert.deepEqual([...c.toHost()], [1, 2, 3, 4]);
  const registration = comm.register(c);
  comm.destroy();
  assert.equal(registration.destroyed, true, 'a communicator ends its registrations');
  assert.throws(() => comm.allReduce(a), VramStateError);
  assert.match(String(comm), /destroyed/);
});

test(
  'a group whose function throws drops what it queued at the outermost end, and keeps it when an inner group throws',
  { skip: onGpu ? 'emulated backend only (NCCL launches what a failed group queued)' : false },
  () => {
    using comm = Communicator.init({ id: UniqueId.create(), rank: 0, size: 1 });
    using first = DeviceArray.from(new Float32Array([1, 2]));
    using second = DeviceArray.from(new Float32Array([3, 4]));
    using out = DeviceArray.zeros([2], 'float32');
    assert.throws(
      () =>
        group(() => {
          comm.send(first, 0);
          throw new Error('stop');
        }),
      /stop/,
    );
    group(() => {
      comm.send(second, 0);
      comm.recv(out, 0);
    });
    assert.deepEqual([...out.toHost()], [3, 4], "the failed group's send was dropped: the receive got the next one");
    group(() => {
      comm.send(first, 0);
      assert.throws(
        () =>
          group(() => {
            throw new Error('inner');
          }),
        /inner/,
      );
      comm.recv(out, 0);
    });
    assert.deepEqual([...out.toHost()], [1, 2], "an inner group's failure leaves the outer group's work queued");
    comm.destroy();
  },
);

test(
  'a rank that waits for a peer that never comes is an NcclError after the timeout, and leaves nothing',
  { skip: onGpu ? 'emulated backend only (NCCL waits as NCCL does)' : false },
  () => {
    const id = UniqueId.create();
    assert.throws(
      () => Communicator.init({ id, rank: 0, size: 2, timeout: 200 }),
      (e: unknown) => e instanceof NcclError && e.resultName === 'ncclRemoteError' && /waited 200 ms for rank 1/.test(e.message),
    );
    assert.equal(existsSync(rendezvousFolder(id.toBase64())), false);
  },
);

test('ranks that disagree on the size are an NcclError on both', { skip: onGpu ? 'emulated backend only (NCCL checks it its own way)' : false }, async () => {
  const id = UniqueId.create().toBase64();
  const results = await Promise.all([runRank([], { NCCL_ID: id, RANK: '0', SIZE: '2' }), runRank([], { NCCL_ID: id, RANK: '1', SIZE: '3' })]);
  for (const r of results) {
    assert.notEqual(r.code, 0);
    assert.match(
      r.stderr,
      /NcclError: ncclCommInitRank failed: ncclInvalidUsage \(5\): invalid usage: rank \d joined this unique id with size \d, rank \d with size \d/,
    );
  }
  // Ranks that disagree stay joined (so each sees the other): their folder is left to remove here.
  rmSync(rendezvousFolder(id), { recursive: true, force: true });
});

test(
  'ranks whose collectives differ in count, dtype, op, kind or root get an NcclError naming it on every rank, and stay in step',
  { skip: onGpu ? 'emulated backend only (NCCL leaves a mismatch undefined)' : false },
  async () => {
    const id = UniqueId.create().toBase64();
    const results = await Promise.all([0, 1].map((rank) => runRank(['mismatch'], { NCCL_ID: id, RANK: String(rank), SIZE: '2' })));
    results.forEach((r, rank) => {
      assert.equal(r.code, 0, `rank ${rank} failed:\n${r.stderr}\n${r.stdout}`);
      assert.deepEqual(
        r.stdout.trim().split('\n'),
        ['count', 'dtype', 'op', 'collective', 'root'].map((f) => `ok mismatched ${f}`).concat('ok in step after the mismatches'),
      );
    });
    assert.equal(existsSync(rendezvousFolder(id)), false);
  },
);
