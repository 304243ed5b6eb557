/**
 * The columns of the composition table (test/composition/composition.test.ts): every part of vram that uses
 * memory, each as a short use of one subject (kinds.ts) that checks the data it sees or leaves.
 *
 * A consumer makes its subjects through the cell (`cell.make()`, after `cell.prepare()` where the
 * making must happen inside a scope), runs its use, and asserts the values; a refusal is whatever
 * it throws, which the table says it must (class and message). What a cell makes, the test frees
 * after it. To add a column: add a consumer here and a line for it in every row of table.ts.
 */
import assert from 'node:assert/strict';
import { DeviceArray } from '../../src/array/device-array.js';
import { HostArray } from '../../src/array/host-array.js';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { withMemoryBudget } from '../../src/buffer/budget.js';
import { spillManager } from '../../src/buffer/spill/spill-manager.js';
import { Communicator } from '../../src/nccl/communicator.js';
import { UniqueId } from '../../src/nccl/unique-id.js';
import { Device } from '../../src/device.js';
import { captureGraph } from '../../src/graphs/capture.js';
import { fromCudaArrayInterface, toCudaArrayInterface } from '../../src/interop/cuda-array-interface.js';
import { fromDLPack, toDLPack } from '../../src/interop/dlpack.js';
import { exportIpc } from '../../src/ipc/ipc.js';
import { threadCount } from '../../src/kernels/emulated-kernel.js';
import { type EmulatedKernel } from '../../src/backend/backend.js';
import { Module } from '../../src/kernels/module.js';
import { elementwise, map, sum } from '../../src/kernels/ops/index.js';
import { memoryStats } from '../../src/observe/memory-stats.js';
import { memorySnapshot } from '../../src/observe/snapshot.js';
import { validateSnapshot } from '../../src/observe/snapshot-format.js';
import { useResource } from '../../src/resource/current.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import type { Stream } from '../../src/stream.js';
import { forceGc } from '../helpers.js';
import { BYTES, N, ipcPeer, type Subject, type SubjectArray } from './kinds.js';

/** What a consumer gets from its cell. */
export interface Cell {
  readonly stream: Stream;
  /** Device 1's stream, where the backend has a second device. */
  readonly peerStream: Stream | undefined;
  /** The values subjects are made with (whole numbers, so every sum is exact). */
  readonly values: Float32Array;
  /** A subject of the row's kind, made now. */
  make(): Subject;
  /** The kind's preparation, for making a subject later inside a scope (the test frees what it made). */
  prepare(): Promise<() => Subject>;
  /** A user kernel: y[i] += 1 for i < n. */
  readonly addOne: (config: { stream: Stream }, y: DeviceArray<'float32'>) => void;
}

/** A column: a part of vram that uses memory. */
export interface Consumer {
  readonly about: string;
  run(cell: Cell): Promise<void>;
}

/** What the subject holds now, read the way its memory is read (host memory in place). */
function read(s: Subject, stream: Stream): Float32Array {
  stream.synchronize();
  return Float32Array.from(s.array instanceof HostArray ? s.array.data : s.array.toHost());
}

function assertHolds(s: Subject, stream: Stream, what: string): void {
  assert.deepEqual(Array.from(read(s, stream)), Array.from(s.expected), `${what}: the subject's values`);
}

/** The subject as a DeviceArray: host memory passed where a device array is expected is the consumer's refusal to make. */
function dev(a: SubjectArray): DeviceArray<'float32'> {
  return a as DeviceArray<'float32'>;
}

function sumOf(values: Float32Array): number {
  return values.reduce((a, b) => a + b, 0);
}

/** Every spillable buffer of device 0 that may go, spilled now: the memory pressure of a full device. */
export function pressure(): void {
  spillManager(Device.get(0)).evictAll();
}

export const ADD_ONE_SOURCE = `
extern "C" __global__ void add_one(float *y, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += 1.0f;
}
`;
export const addOneEmulated: EmulatedKernel = (launch) => {
  const [yPtr, n] = launch.args as [number, number];
  const bytes = launch.memory.bytes(yPtr, 4 * n);
  const y = new Float32Array(bytes.buffer, bytes.byteOffset, n);
  for (let i = 0; i < Math.min(n, threadCount(launch)); i++) y[i] = y[i]! + 1;
};
export function addOneKernel(module: Module): Cell['addOne'] {
  const k = module.kernel('add_one', ['ptr', 'u32'] as const);
  return ({ stream }, y) => k.launch({ grid: Math.ceil(N / 64), block: 64, stream }, y, N);
}
export function compileAddOne(): Module {
  return Module.compile(ADD_ONE_SOURCE, { emulated: { add_one: addOneEmulated } });
}

const plusOne = (v: Float32Array): Float32Array => v.map((x) => x + 1);

export const consumers = {
  'builtin-read': {
    about: 'a built-in operation that reads it (sum)',
    run: (c) => {
      const s = c.make();
      assert.equal(sum(dev(s.array), { stream: c.stream }), sumOf(s.expected));
      assertHolds(s, c.stream, 'after sum');
      return Promise.resolve();
    },
  },
  'builtin-write': {
    about: 'a built-in operation that writes it in place (elementwise x = 2x + 1)',
    run: (c) => {
      const s = c.make();
      elementwise('x = 2 * x + 1', { x: dev(s.array) }, { stream: c.stream });
      s.expected = s.expected.map((x) => 2 * x + 1);
      assertHolds(s, c.stream, 'after elementwise');
      return Promise.resolve();
    },
  },
  'user-kernel': {
    about: "a user kernel that writes it (a 'ptr' parameter)",
    run: (c) => {
      const s = c.make();
      c.addOne({ stream: c.stream }, dev(s.array));
      s.expected = plusOne(s.expected);
      assertHolds(s, c.stream, 'after the kernel');
      return Promise.resolve();
    },
  },
  'copy-js-sync': {
    about: 'synchronous copies from and to JavaScript memory',
    run: (c) => {
      const s = c.make();
      const next = plusOne(c.values);
      s.array.copyFrom(next);
      s.expected = next;
      assert.deepEqual(Array.from(s.array.toHost()), Array.from(next));
      return Promise.resolve();
    },
  },
  'copy-js-async': {
    about: 'asynchronous copies from and to JavaScript memory on a stream',
    run: async (c) => {
      const s = c.make();
      const next = plusOne(c.values);
      const a = dev(s.array);
      await a.copyFromAsync(next, { stream: c.stream });
      s.expected = next;
      assert.deepEqual(Array.from(await a.toHostAsync({ stream: c.stream })), Array.from(next));
    },
  },
  'copy-pinned': {
    about: 'asynchronous copies from and to pinned host memory on a stream',
    run: async (c) => {
      const s = c.make();
      using pinned = HostArray.from(plusOne(c.values));
      if (s.array instanceof HostArray) {
        // Pinned to pinned is a host copy; the stream-ordered path is through the device.
        using d = DeviceArray.zeros([N], 'float32', { stream: c.stream });
        await pinned.copyToAsync(d, { stream: c.stream });
        await s.array.copyFromAsync(d, { stream: c.stream });
      } else {
        await pinned.copyToAsync(s.array, { stream: c.stream });
        using back = HostArray.zeros([N], 'float32');
        await back.copyFromAsync(s.array, { stream: c.stream });
        assert.deepEqual(Array.from(back.data), Array.from(plusOne(c.values)));
      }
      s.expected = plusOne(c.values);
      assertHolds(s, c.stream, 'after the pinned copies');
    },
  },
  'copy-device': {
    about: 'device-to-device copies from and to another array',
    run: (c) => {
      const s = c.make();
      using other = DeviceArray.from(plusOne(c.values), { stream: c.stream });
      using out = DeviceArray.zeros([N], 'float32', { stream: c.stream });
      out.copyFrom(s.array);
      assert.deepEqual(Array.from(out.toHost()), Array.from(s.expected));
      s.array.copyFrom(other);
      s.expected = plusOne(c.values);
      assertHolds(s, c.stream, 'after the device copies');
      return Promise.resolve();
    },
  },
  'copy-peer': {
    about: 'copies to and from another device (array.to; pinned memory: copies on a stream of the other device)',
    run: async (c) => {
      const s = c.make();
      const peerStream = c.peerStream!;
      if (s.array instanceof HostArray) {
        // Pinned memory is every device's: copied to device 1 on its stream, and back.
        using there = DeviceArray.zeros([N], 'float32', { device: 1, stream: peerStream });
        await s.array.copyToAsync(there, { stream: peerStream });
        elementwise('x = x + 1', { x: there }, { stream: peerStream });
        await s.array.copyFromAsync(there, { stream: peerStream });
        s.expected = plusOne(s.expected);
        assertHolds(s, peerStream, 'after the peer copies');
        return;
      }
      using there = dev(s.array).to(Device.get(1), { stream: peerStream });
      assert.deepEqual(Array.from(there.toHost()), Array.from(s.expected));
      elementwise('x = x + 1', { x: there }, { stream: peerStream });
      peerStream.synchronize();
      s.array.copyFrom(there);
      s.expected = plusOne(s.expected);
      assertHolds(s, c.stream, 'after the peer copies');
    },
  },
  graph: {
    about: 'graph capture and launch (a user kernel and a built-in op captured over it, the device pressed between launches)',
    run: (c) => {
      const s = c.make();
      const a = dev(s.array);
      using graph = captureGraph(c.stream, () => {
        c.addOne({ stream: c.stream }, a);
        elementwise('x = 2 * x', { x: a }, { stream: c.stream });
      });
      using exec = graph.instantiate();
      for (let i = 0; i < 2; i++) {
        pressure();
        exec.launch(c.stream);
        s.expected = s.expected.map((x) => 2 * (x + 1));
      }
      assertHolds(s, c.stream, 'after two launches');
      return Promise.resolve();
    },
  },
  'dlpack-export': {
    about: 'DLPack export (toDLPack, the device pressed, then a consumer imports and reads it)',
    run: (c) => {
      const s = c.make();
      const tensor = toDLPack(s.array);
      pressure();
      using imported = fromDLPack(tensor);
      c.stream.synchronize();
      const got = imported instanceof DeviceArray ? imported.toHost() : (imported as HostArray).data;
      assert.deepEqual(Array.from(got as Float32Array), Array.from(s.expected));
      return Promise.resolve();
    },
  },
  'cai-export': {
    about: 'CUDA Array Interface export (the device pressed while the interface lives, then read through it)',
    run: (c) => {
      const s = c.make();
      const obj = toCudaArrayInterface(dev(s.array), { stream: c.stream });
      pressure();
      const view = fromCudaArrayInterface(obj);
      assert.deepEqual(Array.from(view.toHost() as Float32Array), Array.from(s.expected));
      return Promise.resolve();
    },
  },
  'ipc-export': {
    about: 'IPC export (exportIpc; another process imports and reads it)',
    run: async (c) => {
      const s = c.make();
      const handle = exportIpc(s.memory as DeviceBuffer);
      c.stream.synchronize();
      const p = ipcPeer();
      await p.do({ op: 'close' });
      await p.do({ op: 'free' });
      pressure();
      await p.do({ op: 'import', handle: handle.toString() });
      try {
        const { hex } = await p.do({ op: 'read', offset: 0, bytes: BYTES });
        const e = s.expected;
        assert.equal(hex, Buffer.from(e.buffer, e.byteOffset, e.byteLength).toString('hex'), 'what the importer reads');
      } finally {
        await p.do({ op: 'close' });
      }
    },
  },
  nccl: {
    about: 'NCCL collectives (a one-rank communicator: all-reduce in place, broadcast out of it)',
    run: (c) => {
      const s = c.make();
      using comm = Communicator.init({ id: UniqueId.create(), rank: 0, size: 1 });
      comm.allReduce(dev(s.array), dev(s.array), { stream: c.stream });
      using out = DeviceArray.zeros([N], 'float32', { stream: c.stream });
      comm.broadcast(dev(s.array), out, { root: 0, stream: c.stream });
      c.stream.synchronize();
      assert.deepEqual(Array.from(out.toHost()), Array.from(s.expected));
      assertHolds(s, c.stream, 'after the collectives');
      return Promise.resolve();
    },
  },
  budget: {
    about: 'withMemoryBudget: made inside a budget one byte short of it (refused where charged), then in one that fits',
    run: async (c) => {
      const short = await c.prepare();
      const fits = await c.prepare();
      withMemoryBudget(BYTES - 1, () => short());
      const s = withMemoryBudget(1 << 20, () => fits());
      assertHolds(s, c.stream, 'made in a budget');
    },
  },
  'scoped-resource': {
    about: 'useResource: made inside a scope, and an operation on it there allocates its output from the scoped resource',
    run: async (c) => {
      using scoped = new PoolResource({ device: Device.get(0) });
      const later = await c.prepare();
      await useResource(scoped, async () => {
        const s = later();
        await Promise.resolve();
        using out = map(dev(s.array), 'x + 1', { stream: c.stream });
        assert.equal((out.buffer as DeviceBuffer).resource, scoped, 'the output came from the scoped resource');
        assert.deepEqual(Array.from(out.toHost()), Array.from(plusOne(s.expected)));
      });
    },
  },
  spilling: {
    about: 'spilling: the device pressed, then the subject read, written by a copy, pressed and read again',
    run: (c) => {
      const s = c.make();
      pressure();
      if (s.memory instanceof DeviceBuffer && s.memory.spillable) assert.equal(s.memory.resident, false, 'spilled under pressure');
      assertHolds(s, c.stream, 'after pressure');
      s.array.copyFrom(plusOne(s.expected));
      s.expected = plusOne(s.expected);
      pressure();
      assertHolds(s, c.stream, 'written, pressed again');
      return Promise.resolve();
    },
  },
  'stats-snapshot': {
    about: 'memoryStats and memorySnapshot (valid) while it lives, the data unchanged',
    run: (c) => {
      const s = c.make();
      const stats = memoryStats(0);
      assert.ok(stats.allocatedBytes !== undefined && stats.allocatedBytes.value >= 0);
      validateSnapshot(JSON.parse(JSON.stringify(memorySnapshot())));
      assertHolds(s, c.stream, 'after the snapshot');
      return Promise.resolve();
    },
  },
  free: {
    about: 'free(): memory back; a use after is UseAfterFreeError, a second free DoubleFreeError',
    run: (c) => {
      const s = c.make();
      const before = s.held();
      s.free();
      assert.ok(s.held() < before, `held ${s.held()} after free, ${before} before`);
      assert.equal(s.array.freed, true);
      assert.throws(() => s.array.toHost(), { name: 'UseAfterFreeError' });
      assert.throws(() => s.free(), { name: 'DoubleFreeError' });
      return Promise.resolve();
    },
  },
  using: {
    about: '`using`: freed at the end of the scope',
    run: (c) => {
      let held: () => number;
      let before: number;
      let array: SubjectArray;
      {
        const s = c.make();
        held = s.held;
        before = held();
        array = s.array;
        using scoped = s.owner;
        assert.equal(scoped.freed, false);
        assertHolds(s, c.stream, 'in scope');
      }
      assert.equal(array.freed, true);
      assert.ok(held() < before, `held ${held()} after the scope, ${before} in it`);
      return Promise.resolve();
    },
  },
  backstop: {
    about: 'the backstop: a subject dropped without free() gives its memory back once collected',
    run: async (c) => {
      const later = await c.prepare();
      const { held, before } = ((): { held: () => number; before: number } => {
        const s = later();
        return { held: s.held, before: s.held() };
      })();
      // Collected only in a later job than the last deref of a WeakRef to it: wait, collect, then look.
      for (let i = 0; i < 10; i++) {
        await new Promise((resolve) => setTimeout(resolve, 5));
        forceGc!();
        if (held() < before) break;
      }
      assert.ok(held() < before, `held ${held()} after collection, ${before} before`);
    },
  },
} as const satisfies Record<string, Consumer>;

export type ConsumerName = keyof typeof consumers;
