/**
 * Sharing what the default allocator gives (issue 24): a buffer of the `async` stack exports as a
 * pool handle (its pool made with POSIX descriptors; cuMemPoolExportPointer), a block of the
 * `pool` and `adaptive` stacks as a physical handle (the physical allocations under it, mapped back to back by
 * the importer), both opened by `importIpc`, between this process and a Node peer
 * (test/fixtures/ipc/node-peer.ts) whose default resource `VRAM_ALLOCATOR` picks, both ways,
 * surviving the other's death, with nothing left open. Then PyTorch's share tuples, read and
 * made, with fixed bytes on both backends, and round trips with PyTorch itself where python3 has
 * torch (GPU only).
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { after, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import { Device } from '../../src/device.js';
import { NotSupportedError } from '../../src/errors.js';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { SystemCallError } from '../../src/cuda/libc.js';
import { exportIpc, importIpc } from '../../src/ipc/ipc.js';
import { IpcHandle } from '../../src/ipc/ipc-handle.js';
import { parseTorchShare, releaseTorchReference, torchShareTuple, type TorchShareTuple } from '../../src/ipc/torch-ipc.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';
import { AsyncResource } from '../../src/resource/upstream/async-resource.js';
import { createResourceStack } from '../../src/resource/stacks.js';
import { gpuOnly, onGpu } from '../helpers.js';
import { emulatedIpcResources, Peer } from '../ipc-peer.js';

const device = Device.get(0);
const MiB = 1024 * 1024;
const torchScript = fileURLToPath(new URL('../../../scripts/torch_ipc.py', import.meta.url));
const pythonScript = fileURLToPath(new URL('../../../scripts/vram_ipc.py', import.meta.url));

/** False when python3 with PyTorch or CuPy runs CUDA here (GPU only); else why not. */
const pythonCudaSkip = ((): string | false => {
  if (!onGpu) return gpuOnly.skip;
  const r = spawnSync('python3', ['-c', 'import importlib.util as u, sys; sys.exit(0 if u.find_spec("torch") or u.find_spec("cupy") else 1)'], {
    encoding: 'utf8',
  });
  return r.status === 0 ? false : 'needs python3 with PyTorch or CuPy';
})();

const peers: Peer[] = [];
function peer(allocator?: string): Peer {
  const p = new Peer(allocator === undefined ? process.env : { ...process.env, VRAM_ALLOCATOR: allocator });
  peers.push(p);
  return p;
}
after(async () => {
  for (const p of peers) await p.kill();
});

/** Bytes i % 251 from `start`: a pattern no two nearby offsets share. */
function pattern(bytes: number, start = 0): Uint8Array {
  return Uint8Array.from({ length: bytes }, (_, i) => (start + i) % 251);
}

function hex(bytes: Uint8Array): string {
  return Buffer.from(bytes).toString('hex');
}

function read(buf: { copyToHost(dst: Uint8Array, options: { offset: number; bytes: number }): Uint8Array }, bytes: number, offset = 0): Uint8Array {
  return buf.copyToHost(new Uint8Array(bytes), { offset, bytes });
}

/** What each default allocator's memory exports as. */
const KINDS = { async: 'pool', pool: 'physical', adaptive: 'physical' } as const;

for (const [allocator, kind] of Object.entries(KINDS) as [keyof typeof KINDS, 'pool' | 'physical'][]) {
  describe(`VRAM_ALLOCATOR=${allocator}: ${kind} handles`, () => {
    test('this process exports a block; the peer reads and writes it; the write is seen here', async () => {
      const stack = createResourceStack(allocator, { device });
      try {
        // A first block, so the shared one starts at an offset in the pool's memory; 5 MiB so that
        // under `pool` it spans three physical allocations (one 2 MiB page each by default).
        using first = DeviceBuffer.allocate(3000, { resource: stack.resource });
        using buf = DeviceBuffer.allocate(5 * MiB, { resource: stack.resource });
        buf.copyFromHost(pattern(5 * MiB));
        const handle = exportIpc(buf);
        assert.equal(handle.kind, kind);
        assert.equal(handle.byteLength, 5 * MiB);
        // `pool` maps one page per physical allocation; `adaptive` may map a whole chunk as one.
        if (allocator === 'pool') assert.ok(handle.descriptors!.fds.length >= 3, `${handle.descriptors!.fds.length} physical allocations under 5 MiB`);
        const p = peer();
        assert.equal((await p.do({ op: 'import', handle: handle.toString() })).byteLength, 5 * MiB);
        assert.equal((await p.do({ op: 'read', offset: 4 * MiB + 7, bytes: 6 })).hex, hex(pattern(6, 4 * MiB + 7)));
        await p.do({ op: 'write', offset: 5 * MiB - 3, hex: 'c0ffee' });
        assert.deepEqual(read(buf, 3, 5 * MiB - 3), Uint8Array.of(0xc0, 0xff, 0xee));
        assert.deepEqual(read(first, 4), new Uint8Array(4).fill(read(first, 1)[0]!), 'the neighbour is untouched');
        await p.do({ op: 'close' });
        await p.exit();
      } finally {
        stack.destroy();
      }
    });

    test(`the peer exports from its default resource; this process imports, reads and writes; the peer sees it`, async () => {
      const p = peer(allocator);
      const { handle } = await p.do({ op: 'export-default', bytes: 3 * MiB + 100, fill: 0x5a });
      assert.equal(IpcHandle.from(handle ?? '').kind, kind, "the peer's default resource is the allocator asked for");
      const before = emulatedIpcResources();
      {
        using shared = importIpc(handle ?? '');
        assert.equal(shared.byteLength, 3 * MiB + 100);
        assert.deepEqual(read(shared, 8, 3 * MiB + 92), new Uint8Array(8).fill(0x5a));
        shared.copyFromHost(Uint8Array.of(1, 2, 3), { offset: 3 * MiB + 97 });
        assert.equal((await p.do({ op: 'read', offset: 3 * MiB + 96, bytes: 4 })).hex, '5a010203');
      }
      device.synchronize(); // a pool import is freed in stream order
      assert.equal(emulatedIpcResources(), before, 'freeing the import leaves nothing mapped or open');
      await p.do({ op: 'free' });
      await p.exit();
    });

    test('an exporter killed after the import: the import stays valid until freed, then nothing is left', async () => {
      const p = peer(allocator);
      const { handle } = await p.do({ op: 'export-default', bytes: 2 * MiB, fill: 0x42 });
      const before = emulatedIpcResources();
      const shared = importIpc(handle ?? '');
      await p.kill();
      assert.deepEqual(read(shared, 8, 2 * MiB - 8), new Uint8Array(8).fill(0x42));
      shared.copyFromHost(Uint8Array.of(9), { offset: 0 });
      assert.equal(read(shared, 1)[0], 9);
      shared.free();
      device.synchronize();
      assert.equal(emulatedIpcResources(), before);
      // A handle whose exporter is gone cannot be opened again: its descriptors went with it.
      assert.throws(
        () => importIpc(handle ?? ''),
        (e: unknown) => e instanceof SystemCallError && e.call === 'pidfd_open',
      );
    });

    test('an importer killed: the exporter still uses and frees its memory, and the descriptors it kept are closed', async () => {
      const stack = createResourceStack(allocator, { device });
      try {
        const buf = DeviceBuffer.allocate(MiB, { resource: stack.resource });
        buf.memset(0);
        const handle = exportIpc(buf);
        const kept = handle.descriptors!.fds.map((fd) => ({ fd, target: readlinkSync(`/proc/self/fd/${fd}`) }));
        const p = peer();
        await p.do({ op: 'import', handle: handle.toString() });
        await p.do({ op: 'write', offset: 0, hex: 'ff' });
        await p.kill();
        assert.equal(read(buf, 1)[0], 0xff);
        buf.free();
        for (const { fd, target } of kept) {
          let now: string | undefined;
          try {
            now = readlinkSync(`/proc/self/fd/${fd}`);
          } catch {
            now = undefined;
          }
          assert.notEqual(now, target, `descriptor ${fd} (${target}) is closed once the buffer is freed`);
        }
        // The handle is stale now: its descriptors are gone (EBADF), or their numbers were reused
        // for other files, which the inodes the handle carries tell apart.
        const q = peer();
        const answer = await q.ask({ op: 'import', handle: handle.toString() });
        assert.equal(answer.ok, false);
        assert.ok(answer.name === 'SystemCallError' || answer.name === 'VramStateError', `${answer.name}: ${answer.message}`);
        await q.exit();
      } finally {
        stack.destroy();
      }
      assert.equal(emulatedIpcResources(), 0, 'nothing shared is left once the memory is gone');
    });

    test('a Python process (ctypes over libcuda) opens the handle, reads and writes; the write is seen here', { skip: pythonCudaSkip }, () => {
      const stack = createResourceStack(allocator, { device });
      try {
        using pad = DeviceBuffer.allocate(1000, { resource: stack.resource });
        using buf = DeviceBuffer.allocate(3 * MiB, { resource: stack.resource });
        buf.copyFromHost(pattern(3 * MiB));
        void pad;
        const r = spawnSync('python3', [pythonScript, exportIpc(buf).toString()], { encoding: 'utf8', timeout: 120_000 });
        assert.equal(r.status, 0, r.stderr);
        assert.deepEqual(r.stdout.trim().split('\n'), [hex(pattern(8)), 'done']);
        assert.deepEqual(read(buf, 4, 3 * MiB - 4), new Uint8Array(4).fill(0xab));
      } finally {
        stack.destroy();
      }
    });

    test(
      'the exporter frees its block (and destroys its pool): the import stays valid',
      { skip: kind === 'pool' ? "CUDA requires a pool allocation's imports freed before the exporter frees it" : false },
      async () => {
        const stack = createResourceStack(allocator, { device });
        const buf = DeviceBuffer.allocate(3 * MiB, { resource: stack.resource });
        buf.copyFromHost(pattern(3 * MiB));
        const p = peer();
        await p.do({ op: 'import', handle: exportIpc(buf).toString() });
        buf.free();
        stack.destroy();
        assert.equal((await p.do({ op: 'read', offset: 3 * MiB - 5, bytes: 5 })).hex, hex(pattern(5, 3 * MiB - 5)));
        await p.do({ op: 'close' });
        await p.exit();
      },
    );
  });
}

describe('pool and physical handles', () => {
  test('survive their string, binary and JSON forms (property)', () => {
    fc.assert(
      fc.property(
        fc.constantFrom<'pool' | 'physical'>('pool', 'physical'),
        fc.integer({ min: 1, max: 2 ** 31 }),
        fc.array(fc.tuple(fc.integer({ min: 0, max: 2 ** 31 }), fc.integer({ min: 1, max: 2 ** 40 }), fc.integer({ min: 0, max: 2 ** 32 - 1 })), {
          minLength: 1,
          maxLength: 9,
        }),
        fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER }),
        fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }),
        fc.uint8Array({ minLength: 64, maxLength: 64 }),
        (kind, pid, extents, byteLength, offset, data) => {
          const list = kind === 'pool' ? extents.slice(0, 1) : extents;
          const h = new IpcHandle(kind === 'pool' ? data : new Uint8Array(64), byteLength, offset, {
            kind,
            pid,
            fds: list.map(([fd]) => fd),
            extentBytes: kind === 'pool' ? [] : list.map(([, bytes]) => bytes),
            inodes: list.map(([, , inode]) => inode),
          });
          for (const again of [IpcHandle.from(h.toString()), IpcHandle.from(h.toBytes()), IpcHandle.from(JSON.parse(JSON.stringify(h)) as string)]) {
            assert.equal(again.kind, kind);
            assert.deepEqual(again.descriptors, h.descriptors);
            assert.equal(again.byteLength, byteLength);
            assert.equal(again.offset, offset);
            if (kind === 'pool') assert.deepEqual(again.driverHandle, data);
          }
          assert.notEqual(h.toBytes().length, 64);
          assert.notEqual(h.toBytes().length, 80);
        },
      ),
    );
  });

  test('refuses malformed forms before any system call', () => {
    const good = new IpcHandle(new Uint8Array(64), 10, 0, { kind: 'physical', pid: 1, fds: [3, 4], extentBytes: [2 * MiB, 2 * MiB] }).toBytes();
    assert.throws(() => IpcHandle.from(good.subarray(0, good.length - 1)), TypeError);
    const badKind = good.slice();
    badKind[3] = 9;
    assert.throws(() => IpcHandle.from(badKind), TypeError);
    assert.throws(() => new IpcHandle(new Uint8Array(64), 10, 0, { kind: 'pool', pid: 1, fds: [3, 4], extentBytes: [] }), TypeError);
    assert.throws(() => new IpcHandle(new Uint8Array(64), 10, 0, { kind: 'physical', pid: 1, fds: [3], extentBytes: [] }), TypeError);
    assert.throws(
      () => IpcHandle.from(new Uint8Array(66)),
      (e: unknown) => e instanceof TypeError && /PyTorch/.test(e.message),
    );
  });

  test('an AsyncResource over a pool made without POSIX descriptors is refused, saying how to make one', () => {
    using plain = new AsyncResource({ pool: {} });
    using buf = DeviceBuffer.allocate(256, { resource: plain });
    assert.throws(
      () => exportIpc(buf),
      (e: unknown) => e instanceof NotSupportedError && /posix-fd/.test(e.message),
    );
  });
});

/** A PyTorch-style versioned handle: version 2, type byte, then `driver`. */
function torchHandle(driver: Uint8Array, type = 'c'): Uint8Array {
  return Uint8Array.from([2, type.charCodeAt(0), ...driver]);
}

const DRIVER = Uint8Array.from({ length: 64 }, (_, i) => (i * 13 + 1) & 0xff);

describe('a handle whose offset or size was forged', () => {
  const exportedKinds = { cuda: 'legacy', async: 'pool', pool: 'physical', adaptive: 'physical' } as const;
  for (const [allocator, kind] of Object.entries(exportedKinds)) {
    test(`${kind} (VRAM_ALLOCATOR=${allocator}): is refused against what was exported, and nothing stays open`, async () => {
      const p = peer(allocator);
      const bytes = 64 * 1024;
      const text = (await p.do({ op: 'export-default', bytes, fill: 0x33 })).handle ?? '';
      const exported = IpcHandle.from(text);
      assert.equal(exported.kind, kind);
      const before = emulatedIpcResources();
      const forged = [
        new IpcHandle(exported.driverHandle, bytes, 1 << 30, exported.descriptors), // far past the export
        new IpcHandle(exported.driverHandle, 1 << 30, 0, exported.descriptors), // a size raised past it
      ];
      // The pool kind's export is the allocation alone: just past the buffer is another allocation's memory.
      if (kind === 'pool') forged.push(new IpcHandle(exported.driverHandle, bytes, bytes, exported.descriptors));
      for (const handle of forged) {
        assert.throws(
          () => importIpc(handle),
          (e: unknown) => e instanceof RangeError && /the IPC handle grants/.test(e.message),
          `offset ${handle.offset}, ${String(handle.byteLength)} bytes`,
        );
      }
      device.synchronize(); // a refused pool import is freed in stream order
      assert.equal(emulatedIpcResources(), before, 'a refused import leaves nothing mapped or open');
      {
        using shared = importIpc(text);
        assert.equal(shared.byteLength, bytes);
        assert.deepEqual(read(shared, 4, bytes - 4), new Uint8Array(4).fill(0x33), 'the handle as exported still opens');
      }
      device.synchronize();
      await p.do({ op: 'free' });
      await p.exit();
    });
  }
});

describe('PyTorch share tuples', () => {
  test("a 'c' tuple reads as the legacy handle at its offset and size, from bytes or hex", () => {
    for (const form of [(b: Uint8Array): Uint8Array | string => b, (b: Uint8Array): Uint8Array | string => hex(b)]) {
      const tuple: TorchShareTuple = [
        0,
        form(torchHandle(DRIVER)),
        4096,
        1536,
        form(new TextEncoder().encode('/torch_77_1_0')),
        3,
        form(new Uint8Array(64)),
        false,
      ];
      const share = parseTorchShare(tuple);
      assert.equal(share.device, 0);
      assert.deepEqual(share.handle.driverHandle, DRIVER);
      assert.equal(share.handle.byteLength, 4096);
      assert.equal(share.handle.offset, 1536);
      assert.deepEqual(share.refCounter, { name: '/torch_77_1_0', offset: 3 });
      assert.equal(share.event, undefined, 'no event to wait for when none is required');
    }
    const evented = parseTorchShare([1, torchHandle(DRIVER), 8, 0, null, 0, new Uint8Array(64).fill(5), true]);
    assert.deepEqual(evented.event, new Uint8Array(64).fill(5));
    assert.equal(evented.refCounter, undefined);
    assert.deepEqual(
      parseTorchShare([0, DRIVER, 8, 0, null, 0, null, null]).handle.driverHandle,
      DRIVER,
      'a bare 64-byte handle (PyTorch before versioned handles)',
    );
  });

  test("an 'e' handle is a NotSupportedError saying how to share it; other forms are TypeErrors", () => {
    assert.throws(
      () => parseTorchShare([0, torchHandle(new Uint8Array(40), 'e'), 8, 0, null, 0, null, false]),
      (e: unknown) => e instanceof NotSupportedError && /expandable_segments:False/.test(e.message),
    );
    assert.throws(() => importIpc([0, torchHandle(new Uint8Array(40), 'e'), 8, 0, null, 0, null, false]), NotSupportedError);
    assert.throws(() => parseTorchShare([0, Uint8Array.from([3, 0x63, ...DRIVER]), 8, 0, null, 0, null, false]), TypeError);
    assert.throws(() => parseTorchShare([0, torchHandle(DRIVER, 'x'), 8, 0, null, 0, null, false]), TypeError);
    assert.throws(() => parseTorchShare([0, 'zz', 8, 0, null, 0, null, false]), TypeError);
    assert.throws(() => parseTorchShare([0, torchHandle(DRIVER), 0, 0, null, 0, null, false]), RangeError);
    assert.throws(() => parseTorchShare([0, torchHandle(DRIVER), 8, -1, null, 0, null, false]), RangeError);
    assert.throws(() => importIpc([0, torchHandle(DRIVER), 8, 0, null, 0, null, false], { offset: 4 }), TypeError);
  });

  test("torchShareTuple writes the versioned 'c' handle that parseTorchShare reads back", () => {
    const tuple = torchShareTuple(new IpcHandle(DRIVER, 4096, 0), 1);
    assert.equal(tuple[0], 1);
    assert.equal(tuple[1], hex(torchHandle(DRIVER)));
    assert.deepEqual(tuple.slice(2), [4096, 0, '', 0, '00'.repeat(64), false]);
    const back = parseTorchShare(JSON.parse(JSON.stringify(tuple)) as TorchShareTuple);
    assert.deepEqual(back.handle.driverHandle, DRIVER);
    assert.equal(back.handle.byteLength, 4096);
    assert.throws(() => torchShareTuple(new IpcHandle(DRIVER, 8, 0, { kind: 'pool', pid: 1, fds: [3], extentBytes: [] }), 0), NotSupportedError);
  });

  test("a tuple made from a peer's handle opens at its offset; freeing gives the reference back to the producer's counter", async () => {
    const p = peer();
    const exported = IpcHandle.from((await p.do({ op: 'export', bytes: 8192, fill: 0 })).handle ?? '');
    await p.do({ op: 'write', offset: 4096, hex: '0102030405' });
    // The counter file of a PyTorch producer: int64s in /dev/shm, ours at index 2, holding 1 reference.
    const name = `/vram-test-torch-${process.pid}`;
    writeFileSync(`/dev/shm${name}`, Buffer.from(new BigInt64Array([7n, 7n, 1n, 7n]).buffer));
    try {
      const tuple: TorchShareTuple = [0, hex(torchHandle(exported.driverHandle)), 4000, 4096, hex(new TextEncoder().encode(name)), 2, null, false];
      const shared = importIpc(tuple);
      assert.equal(shared.byteLength, 4000);
      assert.deepEqual(read(shared, 5), Uint8Array.of(1, 2, 3, 4, 5));
      shared.free();
      const counters = new BigInt64Array(new Uint8Array(readFileSync(`/dev/shm${name}`)).buffer);
      assert.deepEqual([...counters], [7n, 7n, 0n, 7n]);
      releaseTorchReference({ name: '/vram-test-no-such-counter', offset: 0 }); // a producer gone: nothing to do, no error
    } finally {
      rmSync(`/dev/shm${name}`, { force: true });
    }
    await p.exit();
  });
});

/** True when python3 has torch with CUDA (the GPU machine); the reason to skip otherwise. */
const torchSkip = ((): string | false => {
  if (!onGpu) return gpuOnly.skip;
  const r = spawnSync('python3', ['-c', 'import torch; assert torch.cuda.is_available()'], { encoding: 'utf8' });
  return r.status === 0 ? false : 'needs python3 with PyTorch and CUDA (pip install torch)';
})();

describe('PyTorch round trips (its own rebuild_cuda_tensor and _share_cuda_)', () => {
  test('PyTorch shares a tensor; vram imports the tuple, reads and writes it; PyTorch sees the write', { skip: torchSkip }, async () => {
    const child = spawn('python3', [torchScript, 'share', '4096']);
    child.stderr.on('data', (d: Buffer) => process.stderr.write(`# python: ${d.toString()}`));
    const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
    const tuple = JSON.parse((await lines.next()).value as string) as TorchShareTuple;
    {
      using shared = importIpc(tuple);
      assert.equal(shared.byteLength, 4096);
      assert.deepEqual(read(shared, 4096), pattern(4096));
      shared.copyFromHost(new Uint8Array(16).fill(0xee), { offset: 0 });
    }
    child.stdin.write('modified\n');
    assert.equal((await lines.next()).value, 'ee'.repeat(16));
    child.stdin.end();
    await new Promise((resolve) => child.on('exit', resolve));
  });

  test('vram shares a buffer as a tuple; PyTorch rebuilds a tensor over it, reads and writes it; vram sees the write', { skip: torchSkip }, async () => {
    using buf = DeviceBuffer.allocate(4096, { resource: new CudaResource(device) });
    buf.copyFromHost(pattern(4096));
    const child = spawn('python3', [torchScript, 'rebuild']);
    child.stderr.on('data', (d: Buffer) => process.stderr.write(`# python: ${d.toString()}`));
    const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
    child.stdin.write(`${JSON.stringify(torchShareTuple(exportIpc(buf), device.ordinal))}\n`);
    assert.equal((await lines.next()).value, hex(pattern(8)));
    assert.equal((await lines.next()).value, 'done');
    assert.deepEqual(read(buf, 4, 4092), new Uint8Array(4).fill(0xab));
    child.stdin.end();
    await new Promise((resolve) => child.on('exit', resolve));
  });
});
