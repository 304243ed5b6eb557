/**
 * Interprocess memory (legacy CUDA IPC): this process and a second Node process (the peer,
 * test/fixtures/ipc/node-peer.ts, on the same backend) share device memory through handles sent
 * over the peer's stdio, in both directions, and survive the other's death; an interprocess
 * event orders the two processes' work; file descriptors travel over Unix sockets (to and from
 * Python too). On the emulated backend the shared bytes and event words live in shared memory
 * both processes map (src/backend/emulated/ipc-calls.ts), so all of that runs there too, stream-ordered
 * pools shared between processes included. GPU-only: CuPy peers in both directions. Memory of
 * the default allocators (pool and physical handles) is test/ipc/ipc-default.test.ts.
 */
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { spawn, spawnSync } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readdirSync, readlinkSync, readSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { after, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Device } from '../../src/device.js';
import { CudaError, NotSupportedError, UseAfterFreeError, VramError } from '../../src/errors.js';
import { receiveFd, sendFd } from '../../src/ipc/fd-passing.js';
import { closeFd, SystemCallError } from '../../src/cuda/libc.js';
import { exportPool, exportPoolPointer, importPool } from '../../src/ipc/pool-ipc.js';
import { AsyncResource } from '../../src/resource/upstream/async-resource.js';
import { exportIpc, importIpc } from '../../src/ipc/ipc.js';
import { IpcBuffer } from '../../src/ipc/ipc-buffer.js';
import { IpcHandle } from '../../src/ipc/ipc-handle.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { HostBuffer } from '../../src/buffer/host-buffer.js';
import { LimitingAdaptor } from '../../src/resource/adaptors/limiting.js';
import { ArenaResource } from '../../src/resource/suballoc/arena.js';
import { Event, Stream } from '../../src/stream.js';
import { forceGc, gpuOnly, needsGc, onGpu } from '../helpers.js';
import { emulatedIpcResources, Peer } from '../ipc-peer.js';

const pythonDir = fileURLToPath(new URL('../../../test/fixtures/ipc/', import.meta.url));
const device = Device.get(0);
const numaPools = {
  skip: ((): boolean => {
    try {
      return device.attribute('hostNumaMemoryPoolsSupported') === 1;
    } catch {
      return false;
    }
  })()
    ? false
    : 'the device has no pools in host NUMA memory (CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED)',
} as const;

/** A DeviceBuffer of plain cuMemAlloc memory holding bytes 0, 1, 2, ... */
function sharedBuffer(bytes = 4096): DeviceBuffer {
  const buf = DeviceBuffer.allocate(bytes, { resource: new CudaResource(device) });
  buf.copyFromHost(Uint8Array.from({ length: bytes }, (_, i) => i & 0xff));
  return buf;
}

function read(buf: DeviceBuffer | IpcBuffer, bytes: number, offset = 0): Uint8Array {
  return buf.copyToHost(new Uint8Array(bytes), { offset, bytes });
}

function hex(bytes: Uint8Array): string {
  return Buffer.from(bytes).toString('hex');
}

/** A fresh directory for socket paths and files, removed at the end. */
const scratch = mkdtempSync(join(tmpdir(), 'vram-ipc-'));
let sockets = 0;
function socketPath(): string {
  return join(scratch, `s${sockets++}.sock`);
}

/** Sockets open in this process (/proc/self/fd): what a leaked connection would leave behind. */
function openSockets(): number {
  let n = 0;
  for (const fd of readdirSync('/proc/self/fd')) {
    try {
      if (readlinkSync(`/proc/self/fd/${fd}`).startsWith('socket:')) n++;
    } catch {
      // gone since readdir
    }
  }
  return n;
}

/** True when python3 runs here (the fd-passing cases talk to Python's socket.send_fds/recv_fds). */
const hasPython = spawnSync('python3', ['-c', 'import socket; socket.send_fds'], { encoding: 'utf8' }).status === 0;
const needsPython = { skip: hasPython ? false : 'needs python3 (3.9 or later, for socket.send_fds)' } as const;

const peers: Peer[] = [];
function peer(): Peer {
  const p = new Peer();
  peers.push(p);
  return p;
}
after(async () => {
  for (const p of peers) await p.kill();
  rmSync(scratch, { recursive: true, force: true });
});

describe('IpcHandle', () => {
  test('round-trips through its string, bytes and JSON forms, and reads a bare driver handle', () => {
    const driver = Uint8Array.from({ length: 64 }, (_, i) => (i * 7) & 0xff);
    const h = new IpcHandle(driver, 4096, 128);
    for (const again of [IpcHandle.from(h.toString()), IpcHandle.from(h.toBytes()), IpcHandle.from(JSON.parse(JSON.stringify(h)) as string)]) {
      assert.deepEqual(again.driverHandle, driver);
      assert.equal(again.byteLength, 4096);
      assert.equal(again.offset, 128);
    }
    const bare = IpcHandle.from(hex(driver), { byteLength: 100, offset: 8 });
    assert.deepEqual(bare.driverHandle, driver);
    assert.equal(bare.byteLength, 100);
    assert.equal(bare.offset, 8);
    assert.equal(IpcHandle.from(driver).byteLength, undefined);
  });

  test('every handle survives each of its forms (property)', () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ minLength: 64, maxLength: 64 }),
        fc.option(fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER }), { nil: undefined }),
        fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }),
        (driver, byteLength, offset) => {
          const h = new IpcHandle(driver, byteLength, offset);
          for (const again of [IpcHandle.from(h.toString()), IpcHandle.from(h.toBytes())]) {
            assert.deepEqual(again.driverHandle, driver);
            assert.equal(again.byteLength, byteLength);
            assert.equal(again.offset, offset);
          }
        },
      ),
    );
  });

  test('refuses what is not a handle, before any driver call', () => {
    assert.throws(() => IpcHandle.from('vram-ipc:zz'), TypeError);
    assert.throws(() => IpcHandle.from('abcd'), TypeError);
    assert.throws(() => IpcHandle.from(new Uint8Array(63)), TypeError);
    assert.throws(() => IpcHandle.from(42 as unknown as string), TypeError);
    assert.throws(() => new IpcHandle(new Uint8Array(64), 0), RangeError);
    assert.throws(() => new IpcHandle(new Uint8Array(64), 16, -1), RangeError);
    assert.throws(() => importIpc(new Uint8Array(10)), TypeError);
    assert.throws(() => importIpc(new Uint8Array(64), null as unknown as object), TypeError);
  });
});

describe('exportIpc', () => {
  test('exports cuMemAlloc memory, also through adaptors, the same handle each time', () => {
    using buf = sharedBuffer();
    const a = exportIpc(buf);
    assert.equal(a.byteLength, buf.byteLength);
    assert.equal(a.offset, 0);
    assert.deepEqual(exportIpc(buf).driverHandle, a.driverHandle);
    using limited = DeviceBuffer.allocate(512, { resource: new LimitingAdaptor(new CudaResource(device), 1 << 20) });
    assert.equal(exportIpc(limited).byteLength, 512);
  });

  test('refuses blocks of a resource it cannot export with a NotSupportedError that says why, and freed or foreign objects', () => {
    using arena = new ArenaResource({ device, size: 4 << 20 });
    using block = DeviceBuffer.allocate(256, { resource: arena });
    assert.throws(
      () => exportIpc(block),
      (e: unknown) => e instanceof NotSupportedError && /not memory vram can export/.test(e.message),
    );
    const freed = sharedBuffer();
    freed.free();
    assert.throws(() => exportIpc(freed), UseAfterFreeError);
    assert.throws(() => exportIpc({} as DeviceBuffer), TypeError);
  });

  test("a handle opened in the process that exported it is the driver's error", () => {
    using buf = sharedBuffer();
    const handle = exportIpc(buf);
    const before = emulatedIpcResources();
    let opened: IpcBuffer | undefined;
    try {
      opened = importIpc(handle);
    } catch (e) {
      assert.ok(e instanceof CudaError, String(e));
      console.log(`# importing its own handle: ${e.errorName}`);
      assert.equal(e.errorName, 'CUDA_ERROR_INVALID_CONTEXT', 'as an H100 answered (CUDA 13)');
    }
    if (opened !== undefined) {
      // Only a driver can get here (the emulation answers CUDA_ERROR_INVALID_CONTEXT): report what it did.
      console.log('# importing its own handle: the driver opened it');
      assert.ok(onGpu);
      opened.free();
    }
    assert.equal(emulatedIpcResources(), before);
  });
});

describe('two Node processes', () => {
  test('this process exports; the peer reads, writes and closes; the change is seen here', async () => {
    const p = peer();
    using buf = sharedBuffer(8192);
    const handle = exportIpc(buf);
    assert.equal((await p.do({ op: 'import', handle: handle.toString() })).byteLength, 8192);
    assert.equal((await p.do({ op: 'read', offset: 4000, bytes: 4 })).hex, hex(Uint8Array.of(4000 & 0xff, 4001 & 0xff, 4002 & 0xff, 4003 & 0xff)));
    await p.do({ op: 'write', offset: 8190, hex: 'cafe' });
    assert.deepEqual(read(buf, 2, 8190), Uint8Array.of(0xca, 0xfe));
    await p.do({ op: 'close' });
    await p.exit();
    assert.deepEqual(read(buf, 2, 8190), Uint8Array.of(0xca, 0xfe));
  });

  test('the peer exports; this process imports, reads, writes; the peer sees it', async () => {
    const p = peer();
    const { handle } = await p.do({ op: 'export', bytes: 3000, fill: 0x5a });
    const before = emulatedIpcResources();
    {
      using shared = importIpc(handle ?? '');
      assert.ok(shared instanceof IpcBuffer);
      assert.equal(shared.byteLength, 3000);
      assert.deepEqual(read(shared, 3000), new Uint8Array(3000).fill(0x5a));
      shared.copyFromHost(Uint8Array.of(1, 2, 3), { offset: 2997 });
      shared.memset(7, { offset: 0, count: 4 });
      assert.equal((await p.do({ op: 'read', offset: 2996, bytes: 4 })).hex, '5a010203');
      assert.equal((await p.do({ op: 'read', offset: 0, bytes: 5 })).hex, '070707075a');
    }
    assert.equal(emulatedIpcResources(), before, 'the mapping is closed at the end of the using scope');
    await p.do({ op: 'free' });
    await p.exit();
  });

  test('a handle opened twice in one process: the driver counts the opens, each buffer closes once', async () => {
    const p = peer();
    const { handle } = await p.do({ op: 'export', bytes: 1024, fill: 1 });
    let first: IpcBuffer | undefined;
    let second: IpcBuffer | undefined;
    try {
      first = importIpc(handle ?? '');
      try {
        second = importIpc(handle ?? '');
        console.log(`# a second open of one handle: ${second.mappedBase === first.mappedBase ? 'the same address' : 'another address'}`);
        assert.equal(second.mappedBase, first.mappedBase);
      } catch (error) {
        // A driver that refuses the second open says so with a CudaError; nothing was opened.
        assert.ok(error instanceof CudaError, String(error));
        console.log(`# a second open of one handle: ${error.errorName}`);
      }
      if (second !== undefined) {
        second.free();
        assert.deepEqual(read(first, 4), Uint8Array.of(1, 1, 1, 1), 'the first buffer still maps the memory');
      }
    } finally {
      first?.free();
    }
    assert.equal(emulatedIpcResources(), 0);
    await p.exit();
  });

  test("stale and malformed handles are the driver's errors, and nothing stays open", async () => {
    const before = emulatedIpcResources();
    const malformed = Uint8Array.from({ length: 64 }, (_, i) => (i * 31 + 5) & 0xff);
    assert.throws(
      () => importIpc(malformed),
      (e: unknown) => {
        assert.ok(e instanceof CudaError, String(e));
        console.log(`# a malformed handle: ${e.errorName}`);
        assert.equal(e.errorName, 'CUDA_ERROR_INVALID_VALUE', 'as an H100 answered (CUDA 13)');
        return true;
      },
    );
    // Freed by its exporter.
    const p = peer();
    const freed = (await p.do({ op: 'export', bytes: 2048, fill: 3 })).handle ?? '';
    await p.do({ op: 'free' });
    assert.throws(
      () => importIpc(freed),
      (e: unknown) => {
        assert.ok(e instanceof CudaError, String(e));
        console.log(`# a handle whose memory was freed: ${e.errorName}`);
        assert.equal(e.errorName, 'CUDA_ERROR_INVALID_VALUE', 'as an H100 answered (CUDA 13)');
        return true;
      },
    );
    // Its exporter exited.
    const gone = (await p.do({ op: 'export', bytes: 2048, fill: 3 })).handle ?? '';
    await p.exit();
    assert.throws(
      () => importIpc(gone),
      (e: unknown) => {
        assert.ok(e instanceof CudaError, String(e));
        console.log(`# a handle whose exporter exited: ${e.errorName}`);
        assert.equal(e.errorName, 'CUDA_ERROR_INVALID_HANDLE', 'as an H100 answered (CUDA 13)');
        return true;
      },
    );
    // An extent past the allocation: opened, found too large, closed again.
    const q = peer();
    const small = IpcHandle.from((await q.do({ op: 'export', bytes: 1024, fill: 0 })).handle ?? '');
    assert.throws(() => importIpc(new IpcHandle(small.driverHandle, 1 << 30)), RangeError);
    assert.equal(emulatedIpcResources(), before);
    await q.exit();
  });

  test(
    'a handle whose size field was raised is refused, as the driver maps only what was exported',
    { skip: onGpu ? "the emulated handle's layout" : false },
    async () => {
      const p = peer();
      const exported = IpcHandle.from((await p.do({ op: 'export', bytes: 1024, fill: 7 })).handle ?? '');
      const before = emulatedIpcResources();
      // Bytes 16-23 of an emulated memory handle are its size (little-endian): within its page, and far past it.
      for (const raised of [2048, 1 << 20]) {
        const bytes = exported.driverHandle;
        new DataView(bytes.buffer, bytes.byteOffset).setBigUint64(16, BigInt(raised), true);
        assert.throws(
          () => {
            // Without the check, reading the far end of the mapping is a SIGBUS that kills this process.
            using shared = importIpc(new IpcHandle(bytes, raised));
            read(shared, 1, raised - 1);
          },
          (e: unknown) => e instanceof CudaError && e.errorName === 'CUDA_ERROR_INVALID_VALUE' && /exporter shared 1024/.test(e.message),
          String(raised),
        );
      }
      assert.equal(emulatedIpcResources(), before, 'nothing stays mapped or open');
      using shared = importIpc(exported);
      assert.deepEqual(read(shared, 4, 1020), new Uint8Array(4).fill(7), 'the handle as exported still opens');
      await p.exit();
    },
  );

  test('an exporter killed mid-way: the mapping stays valid until closed', async () => {
    const p = peer();
    const { handle } = await p.do({ op: 'export', bytes: 4096, fill: 0x42 });
    const shared = importIpc(handle ?? '');
    await p.kill();
    assert.deepEqual(read(shared, 8, 4088), new Uint8Array(8).fill(0x42));
    shared.copyFromHost(Uint8Array.of(9), { offset: 0 });
    assert.equal(read(shared, 1)[0], 9);
    shared.free();
    assert.equal(emulatedIpcResources(), 0);
  });

  test('an importer killed mid-way: the exporter still uses and frees its memory', async () => {
    const p = peer();
    const buf = sharedBuffer();
    await p.do({ op: 'import', handle: exportIpc(buf).toString() });
    await p.do({ op: 'write', offset: 0, hex: 'ff' });
    await p.kill();
    assert.equal(read(buf, 1)[0], 0xff);
    buf.copyFromHost(Uint8Array.of(1), { offset: 1 });
    assert.equal(read(buf, 2)[1], 1);
    buf.free();
    assert.equal(emulatedIpcResources(), 0, 'the shared file and mapping are gone with the buffer');
  });

  test('an IpcBuffer dropped without free is closed by the backstop', needsGc, async () => {
    const p = peer();
    const { handle } = await p.do({ op: 'export', bytes: 1024, fill: 0 });
    const before = emulatedIpcResources();
    ((): void => {
      importIpc(handle ?? '');
    })();
    for (let i = 0; i < 10 && emulatedIpcResources() !== before; i++) {
      forceGc?.();
      await new Promise((resolve) => setImmediate(resolve));
    }
    assert.equal(emulatedIpcResources(), before);
    await p.exit();
  });
});

describe('interprocess events', () => {
  test('are created without timing; timing is refused; only they give handles', () => {
    using ev = Event.create({ interprocess: true });
    assert.equal(ev.interprocess, true);
    assert.equal(ev.timing, false);
    assert.throws(() => Event.create({ interprocess: true, timing: true }), RangeError);
    assert.throws(() => Event.create({ interprocess: 'yes' as unknown as boolean }), TypeError);
    using plain = Event.create({ timing: false });
    assert.throws(() => plain.ipcHandle(), NotSupportedError);
    assert.throws(() => Event.openIpc(new Uint8Array(3)), TypeError);
    assert.equal(ev.ipcHandle().length, 64);
  });

  test("the importer waits for the exporter's work through an event the exporter shared", async () => {
    const p = peer();
    const { handle } = await p.do({ op: 'export', bytes: 1 << 20, fill: 0 });
    using shared = importIpc(handle ?? '');
    const { event } = await p.do({ op: 'record', fill: 0x77 });
    using done = Event.openIpc(new Uint8Array(Buffer.from(event ?? '', 'hex')));
    assert.equal(done.interprocess, true);
    if (!onGpu) {
      // The peer has not synchronised: its emulated work has not run, and the event says so.
      assert.equal(done.query(), false);
    }
    using stream = Stream.create();
    stream.waitEvent(done);
    const out = new Uint8Array(4);
    await p.do({ op: 'sync' });
    done.synchronize();
    assert.equal(done.query(), true);
    stream.synchronize();
    shared.copyToHost(out, { offset: (1 << 20) - 4, bytes: 4 });
    assert.deepEqual(out, new Uint8Array(4).fill(0x77));
    await p.exit();
  });

  test("malformed event handles are the driver's errors", () => {
    assert.throws(
      () => Event.openIpc(new Uint8Array(64).fill(3)),
      (e: unknown) => {
        assert.ok(e instanceof CudaError, String(e));
        console.log(`# a malformed event handle: ${e.errorName}`);
        assert.equal(e.errorName, 'CUDA_ERROR_MAP_FAILED', 'as an H100 answered (CUDA 13)');
        return true;
      },
    );
  });

  test("an event opened from its handle waits for the exporting stream's work", gpuOnly, () => {
    // Within one process the driver opens its own event handles too (unlike memory handles): enough
    // to check the binding; the cross-process order is the Python case below.
    using ev = Event.create({ interprocess: true });
    using stream = Stream.create();
    using buf = sharedBuffer(64 << 20);
    buf.memset(0x11, { stream });
    ev.record(stream);
    let opened: Event | undefined;
    try {
      opened = Event.openIpc(ev.ipcHandle());
      opened.synchronize();
      assert.equal(read(buf, 1, (64 << 20) - 1)[0], 0x11);
    } catch (error) {
      assert.ok(error instanceof CudaError, String(error));
      console.log(`# opening an event handle in its own process: ${error.errorName}`);
    } finally {
      opened?.destroy();
    }
  });
});

/** Runs a Python helper of test/fixtures/ipc; its stdout lines. */
function python(args: readonly string[], input?: string): string[] {
  const r = spawnSync('python3', [`${pythonDir}cupy_peer.py`, ...args], { encoding: 'utf8', input, timeout: 120_000 });
  assert.equal(r.status, 0, `python3 cupy_peer.py ${args.join(' ')} failed:\n${r.stderr}`);
  return r.stdout.trim().split('\n');
}

describe('Python (CuPy) peers', () => {
  test('CuPy exports an array; vram imports, reads and modifies it; CuPy sees the change', gpuOnly, async () => {
    const child = spawn('python3', [`${pythonDir}cupy_peer.py`, 'export', '4096']);
    child.stderr.on('data', (d: Buffer) => process.stderr.write(`# python: ${d.toString()}`));
    const lines = createInterface({ input: child.stdout });
    const it = lines[Symbol.asyncIterator]();
    const first = (await it.next()).value as string; // "<handle hex> <bytes> <offset>"
    const [handleHex, bytes, offset] = first.split(' ');
    {
      using shared = importIpc(handleHex ?? '', { byteLength: Number(bytes), offset: Number(offset) });
      assert.deepEqual(
        read(shared, 4096),
        Uint8Array.from({ length: 4096 }, (_, i) => i % 251),
      );
      shared.copyFromHost(new Uint8Array(16).fill(0xee), { offset: 100 });
    }
    child.stdin.write('modified\n');
    const seen = (await it.next()).value as string; // bytes 100..115 as CuPy reads them
    assert.equal(seen, 'ee'.repeat(16));
    child.stdin.end();
    await new Promise((resolve) => child.on('exit', resolve));
  });

  test('vram exports; CuPy opens the handle, reads and writes it; vram sees the change', gpuOnly, () => {
    using buf = sharedBuffer(4096);
    const h = exportIpc(buf);
    const [seen] = python(['import', hex(h.driverHandle), '4096']);
    assert.equal(seen, '0001020304050607');
    assert.deepEqual(read(buf, 4, 4092), Uint8Array.of(0xab, 0xab, 0xab, 0xab));
  });
});

describe('file descriptors over a Unix socket (SCM_RIGHTS)', () => {
  test('a Node peer sends a descriptor of a file; this process reads the file through its own copy', async () => {
    const file = join(scratch, 'payload.txt');
    writeFileSync(file, 'shared through SCM_RIGHTS');
    const p = peer();
    const path = socketPath();
    const sockets0 = openSockets();
    const received = receiveFd(path, { timeoutMs: 20_000 });
    await p.do({ op: 'send-fd', path, file, hex: 'cafe' });
    const { fd, message } = await received;
    try {
      assert.deepEqual(message, Uint8Array.of(0xca, 0xfe));
      const text = Buffer.alloc(64);
      const n = readSync(fd, text, 0, 64, 0);
      assert.equal(text.subarray(0, n).toString(), 'shared through SCM_RIGHTS');
    } finally {
      closeFd(fd);
    }
    assert.equal(openSockets(), sockets0, 'the listener and the connection are closed');
    await p.exit();
  });

  test('Python sends with socket.send_fds; Python receives with socket.recv_fds', needsPython, async () => {
    const file = join(scratch, 'from-python.txt');
    writeFileSync(file, 'python');
    const path = socketPath();
    const received = receiveFd(path, { timeoutMs: 20_000 });
    const sender = spawn('python3', [
      '-c',
      [
        'import os, socket, sys',
        's = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.connect(sys.argv[1])',
        'fd = os.open(sys.argv[2], os.O_RDONLY)',
        'socket.send_fds(s, [b"py"], [fd]); s.close()',
      ].join('\n'),
      path,
      file,
    ]);
    const { fd, message } = await received;
    await new Promise((resolve) => sender.on('exit', resolve));
    assert.equal(Buffer.from(message).toString(), 'py');
    const text = Buffer.alloc(16);
    assert.equal(text.subarray(0, readSync(fd, text, 0, 16, 0)).toString(), 'python');
    closeFd(fd);

    // The other way: Python listens and reads the file through the descriptor it received.
    const back = socketPath();
    const receiver = spawn('python3', [
      '-c',
      [
        'import os, socket, sys',
        'l = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); l.bind(sys.argv[1]); l.listen(1)',
        'print("ready", flush=True)',
        'c, _ = l.accept(); msg, fds, _, _ = socket.recv_fds(c, 4096, 1)',
        'print(msg.decode(), os.pread(fds[0], 64, 0).decode(), flush=True)',
      ].join('\n'),
      back,
    ]);
    const out = createInterface({ input: receiver.stdout })[Symbol.asyncIterator]();
    assert.equal((await out.next()).value, 'ready');
    const mine = openSync(file, 'r');
    try {
      sendFd(back, mine, 'node');
    } finally {
      closeSync(mine);
    }
    assert.equal((await out.next()).value, 'node python');
    await new Promise((resolve) => receiver.on('exit', resolve));
  });

  test('a closed descriptor, nobody listening, a path in use, a timeout: typed errors, nothing left open', async () => {
    const sockets0 = openSockets();
    const path = socketPath();
    const received = receiveFd(path, { timeoutMs: 20_000 });
    // A descriptor number that is not open (a just-closed one would be reused by sendFd's own socket).
    const closed = 999_999;
    assert.throws(
      () => sendFd(path, closed, 'x'),
      (e: unknown) => e instanceof SystemCallError && e.errno === 9,
    ); // EBADF
    // The failed send closed its connection; the receiver got a connection with nothing on it.
    await assert.rejects(received, SystemCallError);
    assert.throws(() => sendFd(join(scratch, 'nobody.sock'), 0, 'x'), SystemCallError);
    assert.throws(() => sendFd(path, -1, 'x'), RangeError);
    assert.throws(() => sendFd(path, 0, new Uint8Array(0)), RangeError);
    const busy = join(scratch, 'busy.sock');
    writeFileSync(busy, '');
    await assert.rejects(receiveFd(busy), SystemCallError);
    await assert.rejects(receiveFd(socketPath(), { timeoutMs: 20 }), (e: unknown) => e instanceof VramError && /in time/.test((e as Error).message));
    assert.equal(openSockets(), sockets0);
  });
});

/** A new peer that has received `mr`'s pool descriptor over a socket. */
async function sendPool(mr: AsyncResource): Promise<Peer> {
  const p = peer();
  const path = socketPath();
  await p.do({ op: 'listen', path });
  const fd = exportPool(mr);
  try {
    sendFd(path, fd, 'pool');
  } finally {
    closeFd(fd);
  }
  return p;
}

describe('stream-ordered pools shared between processes', () => {
  test('a pool exported with its descriptor over a socket; an allocation from it imported by a Node peer', async () => {
    using mr = new AsyncResource({ pool: { handleTypes: 'posix-fd' } });
    using stream = Stream.create();
    using buf = DeviceBuffer.allocate(1 << 20, { resource: mr, stream });
    buf.memset(0x3c, { stream });
    stream.synchronize();
    const p = await sendPool(mr);
    assert.equal((await p.do({ op: 'import-pool', handle: exportPoolPointer(buf).toString() })).byteLength, 1 << 20);
    assert.equal((await p.do({ op: 'read', offset: (1 << 20) - 4, bytes: 4 })).hex, '3c3c3c3c');
    await p.do({ op: 'write', offset: 0, hex: '0102' });
    assert.deepEqual(read(buf, 2), Uint8Array.of(1, 2));
    // The importer frees its import and the pool before the exporter frees the allocation.
    await p.do({ op: 'close' });
    await p.do({ op: 'drop-pool' });
    await p.exit();
  });

  test("a pool in host NUMA memory is shared the same way; the importer's writes are seen through the host view", numaPools, async () => {
    using mr = new AsyncResource({ pool: { handleTypes: 'posix-fd', location: { type: 'host-numa' } } });
    using stream = Stream.create();
    using h = HostBuffer.allocate(1 << 20, { resource: mr, stream });
    stream.synchronize();
    const p = await sendPool(mr);
    const handle = exportPoolPointer(h).toString();
    h.view().fill(0x5a);
    assert.equal((await p.do({ op: 'import-pool', handle })).byteLength, 1 << 20);
    assert.equal((await p.do({ op: 'read', offset: (1 << 20) - 4, bytes: 4 })).hex, '5a5a5a5a');
    await p.do({ op: 'write', offset: 0, hex: '0102' });
    assert.deepEqual(h.view().subarray(0, 3), Uint8Array.of(1, 2, 0x5a));
    await p.do({ op: 'close' });
    await p.do({ op: 'drop-pool' });
    await p.exit();
  });

  test("a pool without POSIX descriptor handles, and a bad descriptor, are the driver's errors", () => {
    using plain = new AsyncResource({ pool: {} });
    assert.throws(() => exportPool(plain), CudaError);
    const file = openSync(join(scratch, 'not-a-pool'), 'w');
    try {
      assert.throws(() => importPool(file), CudaError);
    } finally {
      closeSync(file);
    }
  });
});
