/**
 * CUDA graphs on both backends: capture, instantiate, launch, update, destroy; captured work gives
 * what eager work gives; the capture-private pool keeps graph memory from eager work; what a
 * capture refuses, before the driver, leaving the stream usable.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DeviceArray } from '../../src/array/device-array.js';
import { HostAllocFlags, StreamWaitValueFlags } from '../../src/backend/backend.js';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { HostBuffer } from '../../src/buffer/host-buffer.js';
import { Device } from '../../src/device.js';
import {
  CudaError,
  DoubleFreeError,
  GraphMemoryLiveError,
  GraphUpdateError,
  InvalidPointerError,
  StreamCaptureError,
  UseAfterFreeError,
} from '../../src/errors.js';
import { captureGraph } from '../../src/graphs/capture.js';
import { Module } from '../../src/kernels/module.js';
import { elementwise, map, zipWith } from '../../src/kernels/ops/elementwise.js';
import { fill } from '../../src/kernels/ops/fill.js';
import { sum } from '../../src/kernels/ops/reduce.js';
import { AsyncResource } from '../../src/resource/upstream/async-resource.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';
import { GraphPool } from '../../src/resource/suballoc/graph-pool.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import { Event, Stream } from '../../src/stream.js';
import { randomBytes } from '../helpers.js';
import { memoryStats } from '../../src/observe/memory-stats.js';
import { memorySnapshot } from '../../src/observe/snapshot.js';
import { validateSnapshot } from '../../src/observe/snapshot-format.js';
import { AXPB, AXPB_SOURCE, axpb } from '../../bench/axpb.js';

function compile(): Module {
  return Module.compile(AXPB_SOURCE, { emulated: { empty: () => {}, axpb } });
}

/** An array's memory as the DeviceBuffer it is here. */
function dev(a: DeviceArray): DeviceBuffer {
  return a.buffer as DeviceBuffer;
}

/** Random float32 values in [-1, 1), from a seed. */
function randomFloats(n: number, seed: number): Float32Array {
  const bytes = randomBytes(4 * n, seed);
  return Float32Array.from(new Uint32Array(bytes.buffer, bytes.byteOffset, n), (u) => u / 2 ** 31 - 1);
}

test('a captured kernel runs only when the graph is launched, and at every launch', async () => {
  using m = compile();
  const kernel = m.kernel('axpb', AXPB);
  using stream = Stream.create();
  const n = 1000;
  using x = DeviceArray.from(
    Float32Array.from({ length: n }, (_, i) => i),
    { stream },
  );
  using y = DeviceArray.zeros([n], 'float32', { stream });
  await stream.synchronized();
  using graph = captureGraph(stream, () => {
    kernel.launch({ grid: Math.ceil(n / 256), block: 256, stream }, y, x, 2, 1, n);
    kernel.launch({ grid: Math.ceil(n / 256), block: 256, stream }, x, y, 1, 0, n);
  });
  assert.equal(graph.nodeCount, 2);
  assert.equal(stream.captureStatus, 'none');
  assert.deepEqual(Array.from((await x.toHostAsync({ stream })).slice(0, 3)), [0, 1, 2], 'nothing ran at capture');
  using exec = graph.instantiate();
  exec.launch(stream).launch(stream);
  const got = await x.toHostAsync({ stream });
  for (let i = 0; i < n; i++) assert.equal(got[i], (i * 2 + 1) * 2 + 1);
});

test('copies, fills, built-in ops and a user kernel replayed many times give what eager work gives (random data, odd sizes)', async () => {
  using m = compile();
  const kernel = m.kernel('axpb', AXPB);
  using stream = Stream.create();
  for (const n of [1, 257, 1237]) {
    using input = DeviceArray.zeros([n], 'float32', { stream });
    using staging = HostBuffer.allocate(4 * n);
    using a = DeviceArray.zeros([n], 'float32', { stream });
    using b = DeviceArray.zeros([n], 'float32', { stream });
    using out = DeviceArray.zeros([n], 'float32', { stream });
    using total = DeviceArray.zeros([1], 'float32', { stream });
    /** One step: every kind of node, from `input` to `out` and `total`. */
    const step = (): void => {
      dev(a).copyFrom(dev(input), { stream }); // a copy
      dev(b).memset(0, { stream }); // a fill
      fill(b, 0.5, { stream }); // a built-in fill
      elementwise('b = b * a + 1', { a, b }, { stream });
      kernel.launch({ grid: Math.ceil(n / 128), block: 128, stream }, out, b, 3, -2, n); // a user kernel
      zipWith(out, a, 'x - y', { out, stream });
      map(out, 'x * x', { out, stream });
      sum(out, { out: total, stream }); // a reduction kept on the device
    };
    step(); // compiles the ops' kernels before the capture (a capture may hold their first use too)
    using graph = captureGraph(stream, step);
    using exec = graph.instantiate();
    for (let round = 0; round < 5; round++) {
      const data = randomFloats(n, 100 * n + round);
      staging.view(Float32Array).set(data);
      dev(input).copyFromHost(staging, { stream });
      exec.launch(stream);
      const fromGraph = await out.toHostAsync({ stream });
      const graphTotal = (await total.toHostAsync({ stream }))[0];
      step();
      const eager = await out.toHostAsync({ stream });
      const eagerTotal = (await total.toHostAsync({ stream }))[0];
      assert.deepEqual(Array.from(fromGraph), Array.from(eager), `n=${n}, round ${round}`);
      assert.equal(graphTotal, eagerTotal);
    }
  }
});

test("an executable graph takes a new capture's kernel arguments with update(), and refuses another topology", async () => {
  using m = compile();
  const kernel = m.kernel('axpb', AXPB);
  using stream = Stream.create();
  const n = 77;
  using x = DeviceArray.from(
    Float32Array.from({ length: n }, (_, i) => i),
    { stream },
  );
  using y = DeviceArray.zeros([n], 'float32', { stream });
  using z = DeviceArray.zeros([n], 'float32', { stream });
  const launch = (out: DeviceArray<'float32'>, a: number): void => kernel.launch({ grid: 1, block: 128, stream }, out, x, a, 0, n);
  using first = captureGraph(stream, () => launch(y, 2));
  using exec = first.instantiate();
  using second = captureGraph(stream, () => launch(z, 5));
  exec.update(second);
  exec.launch(stream);
  const gotZ = await z.toHostAsync({ stream });
  const gotY = await y.toHostAsync({ stream });
  for (let i = 0; i < n; i++) {
    assert.equal(gotZ[i], 5 * i, 'the new arguments: output z, a = 5');
    assert.equal(gotY[i], 0, 'the old output is not written');
  }
  using twice = captureGraph(stream, () => {
    launch(y, 1);
    launch(y, 1);
  });
  assert.throws(
    () => exec.update(twice),
    (e: unknown) => e instanceof GraphUpdateError && e.reason === 'topology-changed',
  );
  using copy = captureGraph(stream, () => dev(y).copyFrom(dev(x), { stream }));
  assert.throws(
    () => exec.update(copy),
    (e: unknown) => e instanceof GraphUpdateError && e.reason === 'node-type-changed',
  );
  exec.launch(stream); // unchanged by the refusals: still the second capture
  assert.equal((await z.toHostAsync({ stream }))[3], 15);
});

test('memory a capture allocates from a pool is never handed to eager work while the graph lives', async () => {
  using pool = new PoolResource();
  using stream = Stream.create();
  const bytes = 64 * 1024;
  let during = 0;
  using graph = captureGraph(stream, () => {
    // A scratch block the graph writes at every launch, freed within the capture.
    const scratch = DeviceBuffer.allocate(bytes, { resource: pool, stream });
    during = scratch.ptr;
    scratch.memset(0xab, { stream });
    scratch.free({ stream });
  });
  using exec = graph.instantiate();
  // Eager work now takes blocks of the same size from the same pool: none may be the scratch block.
  const eager = Array.from({ length: 8 }, () => DeviceBuffer.allocate(bytes, { resource: pool, stream }));
  try {
    for (const buf of eager) {
      assert.notEqual(buf.ptr, during);
      buf.memset(0x11, { stream });
    }
    exec.launch(stream).launch(stream);
    for (const buf of eager) {
      const host = new Uint8Array(bytes);
      await buf.copyToHostAsync(host, { stream });
      assert.ok(
        host.every((v) => v === 0x11),
        'eager data intact after the graph ran',
      );
    }
  } finally {
    for (const buf of eager) buf.free({ stream });
  }
  assert.ok((graph.pool as GraphPool).reservedBytes >= bytes, "the graph's pool holds the scratch block");
  // Graph-owned memory in the statistics and in snapshots, as segments of its own kind.
  assert.ok(memoryStats().graphPools.reservedBytes >= bytes);
  const snapshot = memorySnapshot();
  validateSnapshot(snapshot);
  const owned = snapshot.resources.filter((r) => r.className === 'GraphPool').flatMap((r) => r.segments ?? []);
  assert.ok(owned.some((segment) => segment.kind === 'graph-pool' && segment.address === during));
});

test('GraphPool checks its arguments: a bad size before the driver, a foreign or second free typed', () => {
  const pool = new GraphPool();
  for (const bad of [-1, 0, 1.5, NaN]) assert.throws(() => pool.allocate(bad, 0), RangeError);
  assert.throws(() => pool.allocate('4K' as unknown as number, 0), TypeError);
  assert.throws(() => pool.allocate(4096, -1), RangeError);
  assert.equal(pool.reservedBytes, 0, 'nothing reached the driver');
  assert.throws(() => pool.deallocate(0x7e00_0000_0000, 0), InvalidPointerError);
  pool.retain(); // held, so a freed block stays cached in the pool
  const ptr = pool.allocate(4096, 0);
  pool.deallocate(ptr, 0);
  assert.throws(() => pool.deallocate(ptr, 0), DoubleFreeError);
  assert.throws(() => pool.deallocate(-5, 0), RangeError);
  pool.release();
  assert.equal(pool.reservedBytes, 0);
});

test('two graphs share one private pool; the last destroy gives it back', async () => {
  using stream = Stream.create();
  const pool = new GraphPool();
  const bytes = 4096;
  const pointers: number[] = [];
  using resource = new PoolResource();
  const capture = (): ReturnType<typeof captureGraph> =>
    captureGraph(
      stream,
      () => {
        const b = DeviceBuffer.allocate(bytes, { resource, stream });
        pointers.push(b.ptr);
        b.memset(1, { stream });
        b.free({ stream });
      },
      { pool },
    );
  const a = capture();
  const b = capture();
  assert.equal(pointers[0], pointers[1], 'the second capture reuses what the first freed in the shared pool');
  assert.equal(pool.holders, 2);
  assert.equal(pool.reservedBytes, bytes);
  const ea = a.instantiate();
  ea.launch(stream);
  a.destroy();
  b.destroy();
  assert.equal(pool.reservedBytes, bytes, 'an executable graph still holds the pool');
  ea.destroy();
  await stream.synchronized();
  for (let i = 0; i < 100 && pool.reservedBytes > 0; i++) await new Promise((r) => setTimeout(r, 2));
  assert.equal(pool.holders, 0);
  assert.equal(pool.reservedBytes, 0, 'the last holder gave the memory back');
});

test('each call a capture cannot hold throws StreamCaptureError before the driver, and the stream is usable after', async () => {
  using stream = Stream.create();
  using other = Stream.create();
  using buf = DeviceBuffer.allocate(1024, { stream });
  using arr = DeviceArray.zeros([16], 'float32', { stream });
  using done = Event.create();
  const forbidden: [string, () => unknown][] = [
    ['stream.synchronize()', () => stream.synchronize()],
    ['other.synchronize()', () => other.synchronize()],
    ['device.synchronize()', () => Device.get(0).synchronize()],
    ['stream.query()', () => stream.query()],
    ['event.synchronize()', () => done.record(stream).synchronize()],
    ['copyFromHost() of JavaScript memory', () => buf.copyFromHost(new Uint8Array(1024))],
    ['a synchronous device copy', () => buf.copyFrom(buf)],
    ['a synchronous memset', () => buf.memset(0)],
    ['toHost()', () => arr.toHost()],
    ['sum() read back to the host', () => sum(arr, { stream })],
    [
      'CudaResource.allocate',
      () => {
        using mr = new CudaResource();
        mr.allocate(256, stream);
      },
    ],
  ];
  for (const [what, call] of forbidden) {
    stream.beginCapture();
    assert.throws(call, StreamCaptureError, what);
    assert.equal(stream.captureStatus, 'active', `${what}: refused before the driver, the capture is still valid`);
    const graph = stream.endCapture();
    graph.destroy();
  }
  stream.beginCapture();
  await assert.rejects(buf.copyToHostAsync(new Uint8Array(1024), { stream }), StreamCaptureError);
  stream.endCapture().destroy();
  // The stream works again.
  buf.memset(7, { stream });
  const host = new Uint8Array(1024);
  await buf.copyToHostAsync(host, { stream });
  assert.ok(host.every((v) => v === 7));
});

test('captureGraph ends the capture when the work throws, and the stream runs work again', async () => {
  using stream = Stream.create();
  using buf = DeviceBuffer.allocate(64, { stream });
  assert.throws(
    () =>
      captureGraph(stream, () => {
        buf.memset(1, { stream });
        throw new Error('boom');
      }),
    /boom/,
  );
  assert.equal(stream.captureStatus, 'none');
  assert.throws(() => captureGraph(stream, (() => Promise.resolve()) as unknown as () => void), TypeError);
  assert.equal(stream.captureStatus, 'none');
  buf.memset(2, { stream });
  const host = new Uint8Array(64);
  await buf.copyToHostAsync(host, { stream });
  assert.equal(host[0], 2);
});

test('the default stream cannot be captured; endCapture without a capture says so', () => {
  assert.throws(() => Stream.default().beginCapture(), StreamCaptureError);
  using stream = Stream.create();
  assert.throws(() => stream.endCapture(), StreamCaptureError);
  assert.throws(() => stream.beginCapture({ mode: 'sloppy' as 'global' }), TypeError);
});

test('work forked onto another stream joins the capture through events and joins back', async () => {
  using stream = Stream.create();
  using side = Stream.create();
  using a = DeviceBuffer.allocate(256, { stream });
  using b = DeviceBuffer.allocate(256, { stream });
  using fork = Event.create({ timing: false });
  using join = Event.create({ timing: false });
  using graph = captureGraph(stream, () => {
    fork.record(stream);
    side.waitEvent(fork); // side joins the capture
    a.memset(3, { stream });
    b.memset(4, { stream: side });
    join.record(side);
    stream.waitEvent(join); // and joins back
  });
  assert.equal(graph.nodeCount, 2);
  using exec = graph.instantiate();
  exec.launch(stream);
  const ha = new Uint8Array(256);
  const hb = new Uint8Array(256);
  await a.copyToHostAsync(ha, { stream });
  await b.copyToHostAsync(hb, { stream });
  assert.equal(ha[255], 3);
  assert.equal(hb[255], 4);
});

test('a host function runs at every launch of the graph', async () => {
  using stream = Stream.create();
  let calls = 0;
  using graph = captureGraph(stream, () => {
    stream.launchHostFunc(() => {
      calls += 1;
    });
  });
  assert.equal(calls, 0);
  using exec = graph.instantiate();
  for (let i = 0; i < 3; i++) exec.launch(stream);
  await stream.synchronized();
  assert.equal(calls, 3);
});

test('AsyncResource allocations during capture become graph memory nodes', async () => {
  using stream = Stream.create();
  using mr = new AsyncResource();
  using graph = captureGraph(stream, () => {
    const b = DeviceBuffer.allocate(1 << 16, { resource: mr, stream });
    b.memset(9, { stream });
    b.free({ stream });
  });
  assert.equal(graph.nodeCount, 3, 'an alloc node, a memset node and a free node');
  using exec = graph.instantiate();
  exec.launch(stream).launch(stream);
  await stream.synchronized();
});

test("relaunching a graph whose memory node's allocation is still live is a GraphMemoryLiveError saying how to free it", async () => {
  using stream = Stream.create();
  using mr = new AsyncResource();
  let out: DeviceBuffer | undefined;
  using graph = captureGraph(stream, () => {
    out = DeviceBuffer.allocate(1 << 16, { resource: mr, stream });
    out.memset(7, { stream });
  });
  using exec = graph.instantiate();
  assert.equal(exec.memoryNodes, 1);
  exec.launch(stream);
  assert.throws(
    () => exec.launch(stream),
    (e: unknown) => {
      assert.ok(e instanceof GraphMemoryLiveError, String(e));
      assert.match(e.message, /still owns/);
      assert.match(e.message, /free\(/);
      assert.ok(e.cause instanceof CudaError && e.cause.errorName === 'CUDA_ERROR_INVALID_VALUE');
      return true;
    },
  );
  // Freed after the launch, in stream order: the next launch is accepted.
  const address = out!.ptr;
  out!.free({ stream });
  exec.launch(stream);
  // That launch's allocation is at the same address; cuMemFreeAsync frees it as the message says.
  stream.device.backend.memFreeAsync(address, stream.handle);
  await stream.synchronized();
});

test('an AsyncResource whose pool is made for sharing (the default async stack) allocates during capture from the capture-private pool', async () => {
  // The driver refuses graph memory nodes from a pool with shareable handles (graph-backend.test.ts).
  using stream = Stream.create();
  using mr = new AsyncResource({ pool: { handleTypes: 'posix-fd' } });
  assert.equal(mr.capturePolicy, 'private');
  const pool = new GraphPool();
  let inside = 0;
  {
    using graph = captureGraph(
      stream,
      () => {
        const b = DeviceBuffer.allocate(1 << 16, { resource: mr, stream });
        inside = b.ptr;
        b.memset(9, { stream });
        b.free({ stream });
      },
      { pool },
    );
    assert.equal(graph.nodeCount, 1, "only the memset: the memory is the private pool's");
    assert.ok(pool.reservedBytes >= 1 << 16, 'the block came from the private pool');
    using exec = graph.instantiate();
    exec.launch(stream).launch(stream);
    await stream.synchronized();
  }
  assert.ok(inside !== 0);
});

test('destroy() of an executable graph while a launch is queued waits for it in stream order', async () => {
  const device = Device.get(0);
  const { backend } = device;
  device.makeCurrent();
  const host = backend.memHostAlloc(4096, HostAllocFlags.DEVICEMAP | HostAllocFlags.PORTABLE);
  const flag = new Uint32Array(backend.hostView(host, 4096), 0, 1);
  flag[0] = 0;
  try {
    using stream = Stream.create({ nonBlocking: true });
    using target = DeviceBuffer.allocate(1 << 16, { stream });
    const pool = new GraphPool();
    using resource = new PoolResource();
    using graph = captureGraph(
      stream,
      () => {
        const scratch = DeviceBuffer.allocate(1 << 16, { resource, stream });
        scratch.memset(5, { stream });
        target.copyFrom(scratch, { stream });
        scratch.free({ stream });
      },
      { pool },
    );
    const exec = graph.instantiate();
    graph.destroy();
    backend.streamWaitValue32(stream.handle, backend.memHostGetDevicePointer(host), 1, StreamWaitValueFlags.GEQ); // holds the stream
    exec.launch(stream);
    exec.destroy();
    assert.equal(exec.destroyed, true);
    assert.throws(() => exec.launch(stream), UseAfterFreeError);
    assert.throws(() => exec.destroy(), DoubleFreeError);
    assert.ok(pool.reservedBytes > 0, 'the pool is not given back while the launch waits');
    flag[0] = 1; // releases the stream
    const out = new Uint8Array(1 << 16);
    await target.copyToHostAsync(out, { stream });
    assert.ok(
      out.every((v) => v === 5),
      'the queued launch ran after destroy()',
    );
    for (let i = 0; i < 200 && pool.reservedBytes > 0; i++) await new Promise((r) => setTimeout(r, 2));
    assert.equal(pool.reservedBytes, 0, 'given back once the launch ran');
  } finally {
    flag[0] = 1;
    backend.memFreeHost(host);
  }
});

test('work queued on a capture the driver invalidated is refused as a StreamCaptureError naming the call', () => {
  using m = compile();
  const kernel = m.kernel('axpb', AXPB);
  using stream = Stream.create();
  using buf = DeviceBuffer.allocate(1024, { stream });
  const { backend } = stream.device;
  stream.beginCapture();
  // A driver call vram does not check up front (here, straight to the backend) invalidates the capture.
  assert.throws(
    () => backend.memAlloc(256),
    (e: unknown) => e instanceof Error && /STREAM_CAPTURE_UNSUPPORTED/.test(e.message),
  );
  assert.equal(stream.captureStatus, 'invalidated');
  assert.throws(
    () => buf.memset(1, { stream }),
    (e: unknown) => e instanceof StreamCaptureError && e.call === 'memset()',
  );
  assert.throws(() => kernel.launch({ grid: 1, block: 32, stream }, buf, buf, 1, 0, 4), StreamCaptureError);
  assert.throws(
    () => stream.endCapture(),
    (e: unknown) => e instanceof StreamCaptureError && /INVALIDATED/.test(String((e as Error).cause)),
  );
  assert.equal(stream.captureStatus, 'none');
});
