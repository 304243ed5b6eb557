/**
 * Every public entry point that takes an options object checks it the one way (src/util/options.ts):
 * an array, null or a primitive where options go, or a key the entry point does not know, is a
 * TypeError naming the entry point and the key (with the nearest valid key for a typo), raised
 * before any getter of the object runs; and each valid key is read exactly once, so a getter
 * cannot show the check one value and the work another.
 *
 * The TABLE below lists each entry point with a call that runs it on this backend. The last test
 * derives the entry points from the built declarations of the root and every subpath (as
 * exports.test.ts does) and fails for one with an options parameter that is in neither the TABLE nor NO_OPTIONS,
 * so a new entry point cannot skip the check.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import fc from 'fast-check';
import ts from 'typescript';
import {
  arange,
  astype,
  Context,
  DeviceArray,
  DeviceBuffer,
  Device,
  Event,
  fill,
  HostArray,
  HostBuffer,
  ManagedBuffer,
  PitchedDeviceBuffer,
  Stream,
  sum,
} from '../../src/index.js';
import {
  ArenaResource,
  AsyncResource,
  BinningResource,
  CudaResource,
  FixedSizeResource,
  LoggingAdaptor,
  ManagedResource,
  PinnedHostPool,
  PinnedHostResource,
  PoolResource,
  RetryOnOutOfMemory,
  TrackingAdaptor,
} from '../../src/public/resources.js';
import { configureTransfers, reserveSpillHost, transferSettings } from '../../src/public/buffers.js';
import {
  deleteDLPack,
  ForeignDeviceBuffer,
  ForeignMirror,
  fromCudaArrayInterface,
  fromDLPack,
  place,
  toCudaArrayInterface,
  toDLPack,
} from '../../src/public/interop.js';
import { importIpc, ImportedPool, importPool, IpcHandle, receiveFd } from '../../src/public/ipc.js';
import { EmulatedBackend } from '../../src/public/backend.js';
import { captureGraph, GraphPool } from '../../src/public/graphs.js';
import { memorySnapshot, recordMemoryHistory } from '../../src/public/observe.js';
import { parseAllocationLog, replay } from '../../src/public/replay.js';
import { ascontiguous, dot, elementwise, map, max, min, Module, threadCount, zipWith, type EmulatedKernel, type Kernel } from '../../src/public/kernels.js';
import { Communicator, group, ncclVersion, UniqueId } from '../../src/public/nccl.js';
import { readOptions } from '../../src/util/options.js';
import { entryPoints, entryProgram, resolveAlias } from './entry-points.js';

type Options = Record<string, unknown>;

/** One entry point: its option names, the options it needs to run, and a call that runs it. */
interface Entry {
  /** As the entry point's messages name it: `fn`, `new Class`, `Class.static`, `Class#method`. */
  readonly name: string;
  /** The name its messages use, where it differs (a method reached through a subclass). */
  readonly says?: string;
  readonly keys: readonly string[];
  /** Options it cannot run without (`{ size }` of an arena). */
  readonly base?: Options;
  readonly call: (options: unknown) => unknown;
  /**
   * Why the call cannot complete in this process (another process's handle, a socket): it must
   * still refuse bad options, and valid ones must pass the check (what fails afterwards is not it).
   */
  readonly partial?: string;
}

const device = Device.get(0);
const SOURCE = 'extern "C" __global__ void touch(unsigned char *p) { p[threadIdx.x] = 1; }';
const touch: EmulatedKernel = (launch) => {
  const [ptr] = launch.args as [number];
  launch.memory.bytes(ptr, threadCount(launch)).fill(1);
};
const LOG = 'Thread,Time,Action,Pointer,Size,Stream\n0,0,allocate,0x1000,256,0\n0,1,free,0x1000,256,0\n';

let a: DeviceArray<'float32'>;
let b: DeviceArray<'float32'>;
let h: HostArray<'float32'>;
let mappedHost: HostArray<'float32'>;
let buf: DeviceBuffer;
let pitched: PitchedDeviceBuffer;
let managed: ManagedBuffer;
let pinned: HostBuffer;
let module: Module;
let kernel: Kernel<readonly ['ptr']>;

before(() => {
  a = DeviceArray.zeros([4], 'float32');
  b = DeviceArray.zeros([4], 'float32');
  h = HostArray.zeros([4], 'float32');
  mappedHost = HostArray.zeros([4], 'float32', { mapped: true });
  buf = DeviceBuffer.allocate(64);
  pitched = PitchedDeviceBuffer.allocate2D(16, 4);
  managed = ManagedBuffer.allocate(64);
  pinned = HostBuffer.allocate(64);
  module = Module.compile(SOURCE, { emulated: { touch } });
  kernel = module.kernel('touch', ['ptr'] as const);
});

after(() => {
  for (const r of [a, b, h, mappedHost, buf, pitched, managed, pinned]) r.free();
  module.destroy();
  ncclData.free();
  if (!ncclMissing) comm.destroy();
});

/** A buffer to free, so each run of an entry point that frees something has its own. */
function fresh(): DeviceBuffer {
  return DeviceBuffer.allocate(64);
}

/** An ImportedPool with no pool behind it: enough for importPointer to reach its options. */
function importedPoolStandIn(): ImportedPool {
  return Object.create(ImportedPool.prototype, { handle: { value: 0 } }) as ImportedPool;
}

/** Runs `use` on a new DLPack export of `a`, deleting the export when `use` throws (it is never consumed then). */
function withTensor<T>(use: (tensor: number) => T): T {
  const tensor = toDLPack(a);
  try {
    return use(tensor);
  } catch (error) {
    deleteDLPack(tensor);
    throw error;
  }
}

const HOST_BUFFER = ['device', 'portable', 'mapped', 'writeCombined', 'resource', 'stream'];
const ARRAY = ['resource', 'stream', 'device', 'spillable'];
const WAITING = [...ARRAY, 'wait', 'signal', 'timeout'];
const COPY_IN = ['offset', 'bytes', 'stream', 'register', 'srcOffset'];
const COPY_OUT = ['offset', 'bytes', 'stream', 'register', 'dstOffset'];
const COPY_2D = ['widthBytes', 'height', 'hostPitch', 'hostOffset', 'stream'];
const FOREIGN = ['owner', 'onRelease', 'device', 'readOnly'];
const REPLAY = ['perOperationTiming', 'repeat', 'growth', 'timeline'];

/** True on a GPU without NCCL: the NCCL rows then check only the options (what follows fails). */
const ncclMissing = ((): boolean => {
  if (device.backend.name === 'emulated') return false;
  try {
    ncclVersion();
    return false;
  } catch {
    return true;
  }
})();
/** A communicator of one rank: its collectives are copies, and a send pairs with a receive in a group. */
const comm: Communicator = ncclMissing
  ? (Object.create(Communicator.prototype) as Communicator)
  : Communicator.init({ id: UniqueId.create(), rank: 0, size: 1 });
const ncclPartial = ncclMissing ? 'NCCL is not installed here' : undefined;
const ncclData = DeviceArray.zeros([4], 'float32');
const REDUCE = ['stream', 'dtype', 'op'];
const mirror = ForeignMirror.tie(DeviceBuffer.fromPointer(ncclData.buffer.ptr, 16), new Uint8Array(16));

const TABLE: readonly Entry[] = [
  // Devices, streams, events
  { name: 'Context.create', keys: ['schedule', 'mapHost', 'lmemResizeToMax'], call: (o) => Context.create(device, o as never) },
  { name: 'Context.makeDefault', keys: ['schedule', 'mapHost', 'lmemResizeToMax'], call: (o) => Context.makeDefault(o as never) },
  { name: 'Stream.create', keys: ['device', 'nonBlocking', 'priority'], call: (o) => Stream.create(o as never) },
  { name: 'Stream.fromHandle', keys: ['device'], call: (o) => Stream.fromHandle(0, o as never) },
  { name: 'Event.create', keys: ['device', 'timing', 'blockingSync', 'interprocess'], call: (o) => Event.create(o as never) },
  {
    name: 'Stream#beginCapture',
    keys: ['mode', 'pool'],
    call: (o) => {
      using s = Stream.create();
      s.beginCapture(o as never);
      return s.endCapture();
    },
  },
  {
    name: 'captureGraph',
    keys: ['mode', 'pool'],
    call: (o) => {
      using s = Stream.create();
      return captureGraph(s, () => undefined, o as never);
    },
  },
  { name: 'new GraphPool', keys: ['device'], call: (o) => new GraphPool(o as never) },
  { name: 'new EmulatedBackend', keys: ['capacityBytes', 'deviceCount', 'hostNumaPools'], call: (o) => new EmulatedBackend(o as never) },
  // Buffers
  { name: 'DeviceBuffer.allocate', keys: ARRAY, call: (o) => DeviceBuffer.allocate(64, o as never) },
  { name: 'DeviceBuffer.allocateAsync', keys: WAITING, call: (o) => DeviceBuffer.allocateAsync(64, o as never) },
  { name: 'DeviceBuffer.allocatePitched', keys: ['elementBytes', 'device'], call: (o) => DeviceBuffer.allocatePitched(16, 4, o as never) },
  { name: 'DeviceBuffer#lease', keys: ['stream', 'readOnly'], call: (o) => buf.lease(o as never).release() },
  { name: 'reserveSpillHost', keys: ['device'], call: (o) => reserveSpillHost(0, o as never) },
  { name: 'DeviceBuffer.fromPointer', keys: FOREIGN, call: (o) => DeviceBuffer.fromPointer(buf.ptr, 64, o as never) },
  { name: 'ForeignMirror#host', keys: ['write'], call: (o) => mirror.host(o as never) },
  { name: 'PitchedDeviceBuffer.allocate2D', keys: ['elementBytes', 'device'], call: (o) => PitchedDeviceBuffer.allocate2D(16, 4, o as never) },
  { name: 'ForeignDeviceBuffer.wrap', keys: FOREIGN, call: (o) => ForeignDeviceBuffer.wrap(buf.ptr, 64, o as never) },
  { name: 'HostBuffer.allocate', keys: HOST_BUFFER, call: (o) => HostBuffer.allocate(64, o as never) },
  { name: 'HostBuffer.register', keys: ['portable', 'mapped', 'readOnly'], call: (o) => HostBuffer.register(new Uint8Array(4096), o as never) },
  { name: 'ManagedBuffer.allocate', keys: ['attach', 'device', 'resource', 'stream'], call: (o) => ManagedBuffer.allocate(64, o as never) },
  { name: 'Allocation#free', says: 'DeviceBuffer.free', keys: ['stream'], call: (o) => fresh().free(o as never) },
  { name: 'ForeignDeviceBuffer#free', keys: ['stream'], call: (o) => ForeignDeviceBuffer.wrap(buf.ptr, 64).free(o as never) },
  { name: 'DeviceMemory#memset', says: 'DeviceBuffer.memset', keys: ['elementBytes', 'offset', 'count', 'stream'], call: (o) => buf.memset(0, o as never) },
  { name: 'DeviceMemory#copyFromHost', says: 'DeviceBuffer.copyFromHost', keys: COPY_IN, call: (o) => buf.copyFromHost(new Uint8Array(64), o as never) },
  { name: 'DeviceMemory#copyToHost', says: 'DeviceBuffer.copyToHost', keys: COPY_OUT, call: (o) => buf.copyToHost(new Uint8Array(64), o as never) },
  {
    name: 'DeviceMemory#copyFromHostAsync',
    says: 'DeviceBuffer.copyFromHostAsync',
    keys: COPY_IN,
    call: (o) => buf.copyFromHostAsync(new Uint8Array(64), o as never),
  },
  {
    name: 'DeviceMemory#copyToHostAsync',
    says: 'DeviceBuffer.copyToHostAsync',
    keys: COPY_OUT,
    call: (o) => buf.copyToHostAsync(new Uint8Array(64), o as never),
  },
  { name: 'DeviceMemory#copyFrom', says: 'DeviceBuffer.copyFrom', keys: COPY_IN, call: (o) => buf.copyFrom(managed, o as never) },
  { name: 'PitchedDeviceBuffer#copy2DFromHost', keys: COPY_2D, call: (o) => pitched.copy2DFromHost(new Uint8Array(64), o as never) },
  { name: 'PitchedDeviceBuffer#copy2DToHost', keys: COPY_2D, call: (o) => pitched.copy2DToHost(new Uint8Array(64), o as never) },
  { name: 'PitchedDeviceBuffer#copy2DFrom', keys: ['widthBytes', 'height', 'stream'], call: (o) => pitched.copy2DFrom(pitched, o as never) },
  { name: 'HostBuffer#view', keys: ['byteOffset', 'length'], call: (o) => pinned.view(Uint8Array, o as never) },
  { name: 'ManagedBuffer#view', keys: ['byteOffset', 'length'], call: (o) => managed.view(Uint8Array, o as never) },
  { name: 'ManagedBuffer#prefetch', keys: ['offset', 'bytes'], call: (o) => managed.prefetch(device, undefined, o as never) },
  // Transfers
  {
    name: 'configureTransfers',
    keys: ['threads', 'chunkBytes', 'depth', 'stagingThreshold', 'registration'],
    call: (o) => configureTransfers(o as never),
  },
  // Arrays
  { name: 'DeviceArray.empty', keys: ARRAY, call: (o) => DeviceArray.empty([4], 'float32', o as never) },
  { name: 'DeviceArray.emptyAsync', keys: WAITING, call: (o) => DeviceArray.emptyAsync([4], 'float32', o as never) },
  { name: 'DeviceArray.zerosAsync', keys: WAITING, call: (o) => DeviceArray.zerosAsync([4], 'float32', o as never) },
  { name: 'DeviceArray.zeros', keys: ARRAY, call: (o) => DeviceArray.zeros([4], 'float32', o as never) },
  { name: 'DeviceArray.full', keys: ARRAY, call: (o) => DeviceArray.full([4], 1, 'float32', o as never) },
  { name: 'DeviceArray.ones', keys: ARRAY, call: (o) => DeviceArray.ones([4], 'float32', o as never) },
  { name: 'DeviceArray.emptyLike', keys: ARRAY, call: (o) => DeviceArray.emptyLike(a, o as never) },
  { name: 'DeviceArray.zerosLike', keys: ARRAY, call: (o) => DeviceArray.zerosLike(a, o as never) },
  { name: 'DeviceArray.from', keys: ['dtype', 'shape', ...ARRAY], call: (o) => DeviceArray.from(new Float32Array(9), o as never) },
  { name: 'DeviceArray.fromAsync', keys: ['dtype', 'shape', ...ARRAY], call: (o) => DeviceArray.fromAsync(new Float32Array(9), o as never) },
  {
    name: 'DeviceArray.fromBuffer',
    keys: ['dtype', 'shape', 'strides', 'byteOffset', 'device', 'stream'],
    base: { dtype: 'float32' },
    call: (o) => DeviceArray.fromBuffer(buf, o as never),
  },
  {
    name: 'DeviceArray.fromPointer',
    keys: [...FOREIGN, 'strides', 'byteOffset', 'stream'],
    call: (o) => DeviceArray.fromPointer(buf.ptr, [4], 'float32', o as never),
  },
  { name: 'DeviceArray.pitched', keys: ['resource', 'device', 'stream'], call: (o) => DeviceArray.pitched([4, 4], 'float32', o as never) },
  { name: 'DeviceArray#copy', keys: ARRAY, call: (o) => a.copy(o as never) },
  { name: 'DeviceArray#to', keys: ['stream', 'resource'], call: (o) => a.to(0, o as never) },
  { name: 'DeviceArray#toHostAsync', keys: ['stream'], call: (o) => a.toHostAsync(o as never) },
  { name: 'DeviceArray#copyFromAsync', keys: ['stream'], call: (o) => a.copyFromAsync(new Float32Array(4), o as never) },
  { name: 'DeviceArray#copyToAsync', keys: ['stream'], call: (o) => a.copyToAsync(new Float32Array(4), o as never) },
  { name: 'HostArray.empty', keys: [...HOST_BUFFER, 'order'], call: (o) => HostArray.empty([4], 'float32', o as never) },
  { name: 'HostArray.zeros', keys: [...HOST_BUFFER, 'order'], call: (o) => HostArray.zeros([4], 'float32', o as never) },
  { name: 'HostArray.emptyLike', keys: [...HOST_BUFFER, 'order'], call: (o) => HostArray.emptyLike(a, o as never) },
  { name: 'HostArray.zerosLike', keys: [...HOST_BUFFER, 'order'], call: (o) => HostArray.zerosLike(a, o as never) },
  { name: 'HostArray.from', keys: ['dtype', 'shape', ...HOST_BUFFER], call: (o) => HostArray.from(new Float32Array(9), o as never) },
  {
    name: 'HostArray.fromBuffer',
    keys: ['dtype', 'shape', 'strides', 'byteOffset'],
    base: { dtype: 'float32' },
    call: (o) => HostArray.fromBuffer(pinned, o as never),
  },
  { name: 'HostArray#copyFromAsync', keys: ['stream'], call: (o) => h.copyFromAsync(a, o as never) },
  { name: 'HostArray#copyToAsync', keys: ['stream'], call: (o) => h.copyToAsync(a, o as never) },
  { name: 'HostArray#deviceView', keys: ['device'], call: (o) => mappedHost.deviceView(o as never) },
  // Interop
  { name: 'toCudaArrayInterface', keys: ['stream'], call: (o) => toCudaArrayInterface(a, o as never) },
  {
    name: 'fromCudaArrayInterface',
    keys: ['owner', 'device', 'stream', 'dtype'],
    call: (o) => fromCudaArrayInterface(toCudaArrayInterface(a), o as never),
  },
  { name: 'toDLPack', keys: ['versioned', 'readOnly', 'copied'], call: (o) => deleteDLPack(toDLPack(a, o as never)) },
  { name: 'fromDLPack', keys: ['versioned', 'device'], call: (o) => withTensor((p) => fromDLPack(p, o as never)) },
  { name: 'deleteDLPack', keys: ['versioned', 'device'], call: (o) => withTensor((p) => deleteDLPack(p, o as never)) },
  {
    name: 'place',
    keys: ['prefer', 'fallback', 'minFree', 'writeCombined', 'device', 'stream', 'dtype', 'shape'],
    call: (o) => place(new Float32Array(4), o as never).array,
  },
  {
    name: 'importIpc',
    keys: ['device', 'byteLength', 'offset'],
    call: (o) => importIpc('00'.repeat(64), o as never),
    partial: "needs another process's handle",
  },
  { name: 'IpcHandle.from', keys: ['byteLength', 'offset'], call: (o) => IpcHandle.from('00'.repeat(64), o as never) },
  { name: 'importPool', keys: ['device'], call: (o) => importPool(1_000_000, o as never), partial: "needs a pool's descriptor from another process" },
  {
    name: 'ImportedPool.fromFd',
    says: 'importPool',
    keys: ['device'],
    call: (o) => ImportedPool.fromFd(1_000_000, o as never),
    partial: "needs a pool's descriptor from another process",
  },
  {
    name: 'ImportedPool.fromFabricHandle',
    says: 'importPool',
    keys: ['device'],
    call: (o) => ImportedPool.fromFabricHandle(new Uint8Array(64), o as never),
    partial: "needs a pool's fabric handle from another process",
  },
  {
    name: 'ImportedPool#importPointer',
    keys: ['stream'],
    call: (o) => importedPoolStandIn().importPointer('00', o as never),
    partial: 'needs an imported pool',
  },
  {
    name: 'receiveFd',
    keys: ['timeoutMs'],
    base: { timeoutMs: 0 },
    call: (o) => receiveFd('/nonexistent/vram-options.sock', o as never),
    partial: 'needs a sender',
  },
  // Resources and adaptors
  { name: 'new ArenaResource', keys: ['size', 'upstream', 'device'], base: { size: 1 << 20 }, call: (o) => new ArenaResource(o as never) },
  { name: 'new AsyncResource', keys: ['device', 'pool'], call: (o) => new AsyncResource(o as never) },
  { name: 'new BinningResource', keys: ['minSizeExponent', 'maxSizeExponent'], call: (o) => new BinningResource(new CudaResource(), o as never) },
  { name: 'new FixedSizeResource', keys: ['blockSize', 'blocksToPreallocate'], call: (o) => new FixedSizeResource(new CudaResource(), o as never) },
  { name: 'new LoggingAdaptor', keys: ['bufferLines'], call: (o) => new LoggingAdaptor(new CudaResource(), () => undefined, o as never) },
  { name: 'new ManagedResource', keys: ['device', 'attach'], call: (o) => new ManagedResource(o as never) },
  { name: 'new PinnedHostPool', keys: ['upstream', 'device', 'maximumCachedBytes'], call: (o) => new PinnedHostPool(o as never) },
  { name: 'new PinnedHostResource', keys: ['device', 'portable', 'mapped', 'writeCombined'], call: (o) => new PinnedHostResource(o as never) },
  {
    name: 'new PoolResource',
    keys: ['device', 'upstream', 'initialSize', 'maximumSize', 'chunkSize', 'addressSpaceSize', 'extentSize'],
    call: (o) => new PoolResource(o as never),
  },
  { name: 'new RetryOnOutOfMemory', keys: ['roots'], call: (o) => new RetryOnOutOfMemory(new CudaResource(), o as never) },
  { name: 'new TrackingAdaptor', keys: ['captureStacks'], call: (o) => new TrackingAdaptor(new CudaResource(), o as never) },
  // Observability and replay
  { name: 'recordMemoryHistory', keys: ['maxEntries', 'stacks', 'device'], call: (o) => recordMemoryHistory(o as never) },
  { name: 'memorySnapshot', keys: ['device'], call: (o) => memorySnapshot(o as never) },
  { name: 'replay', keys: REPLAY, call: (o) => replay(parseAllocationLog(LOG), new CudaResource(), o as never) },
  // Kernels and built-in operations
  {
    name: 'Module.compile',
    keys: ['device', 'emulated', 'options', 'nameExpressions', 'headers', 'cache'],
    base: { emulated: { touch } },
    call: (o) => Module.compile(SOURCE, o as never),
  },
  { name: 'Module.fromPtx', keys: ['device', 'emulated'], call: (o) => Module.fromPtx('x', o as never), partial: 'needs PTX for this device' },
  {
    name: 'Module.fromCubin',
    keys: ['device', 'emulated'],
    call: (o) => Module.fromCubin(Uint8Array.of(1), o as never),
    partial: 'needs a CUBIN for this device',
  },
  { name: 'Kernel#launch', keys: ['grid', 'block', 'sharedBytes', 'stream'], base: { grid: 1, block: 4 }, call: (o) => kernel.launch(o as never, buf.ptr) },
  { name: 'arange', keys: ARRAY, call: (o) => arange(4, 'float32', o as never) },
  { name: 'ascontiguous', keys: ['stream'], call: (o) => ascontiguous(a, o as never) },
  { name: 'astype', keys: ['stream'], call: (o) => astype(a, 'float64', o as never) },
  { name: 'fill', keys: ['stream'], call: (o) => fill(a, 0, o as never) },
  { name: 'elementwise', keys: ['stream'], call: (o) => elementwise('y = x', { x: a, y: b }, o as never) },
  { name: 'map', keys: ['out', 'stream'], call: (o) => map(a, 'x', o as never) },
  { name: 'zipWith', keys: ['out', 'stream'], call: (o) => zipWith(a, a, 'x + y', o as never) },
  { name: 'sum', keys: ['axis', 'out', 'stream'], call: (o) => sum(a, o as never) },
  { name: 'min', keys: ['axis', 'out', 'stream'], call: (o) => min(a, o as never) },
  { name: 'max', keys: ['axis', 'out', 'stream'], call: (o) => max(a, o as never) },
  { name: 'dot', keys: ['out', 'stream'], call: (o) => dot(a, a, o as never) },
  // NCCL
  {
    name: 'Communicator.init',
    keys: ['id', 'rank', 'size', 'device', 'timeout'],
    base: {
      get id() {
        return UniqueId.create();
      },
      rank: 0,
      size: 1,
    },
    // A fresh id each time: NCCL's bootstrap root serves one communicator per id, and a second init
    // with it waits for peers that never come.
    call: (o) => Communicator.init(o as never),
    partial: ncclPartial,
  },
  { name: 'Communicator#allReduce', keys: REDUCE, call: (o) => comm.allReduce(ncclData, ncclData, o as never), partial: ncclPartial },
  { name: 'Communicator#reduceScatter', keys: REDUCE, call: (o) => comm.reduceScatter(ncclData, ncclData, o as never), partial: ncclPartial },
  { name: 'Communicator#allGather', keys: ['stream', 'dtype'], call: (o) => comm.allGather(ncclData, ncclData, o as never), partial: ncclPartial },
  {
    name: 'Communicator#broadcast',
    keys: ['stream', 'dtype', 'root'],
    base: { root: 0 },
    call: (o) => comm.broadcast(ncclData, ncclData, o as never),
    partial: ncclPartial,
  },
  // Checked first in the group, so a refusal queues nothing: no send is left without its receive.
  {
    name: 'Communicator#send',
    keys: ['stream', 'dtype'],
    call: (o) =>
      ncclMissing
        ? comm.send(ncclData, 0, o as never)
        : group(() => {
            comm.send(ncclData, 0, o as never);
            comm.recv(ncclData, 0);
          }),
    partial: ncclPartial,
  },
  {
    name: 'Communicator#recv',
    keys: ['stream', 'dtype'],
    call: (o) =>
      ncclMissing
        ? comm.recv(ncclData, 0, o as never)
        : group(() => {
            comm.recv(ncclData, 0, o as never);
            comm.send(ncclData, 0);
          }),
    partial: ncclPartial,
  },
];

/**
 * Entry points whose options-like parameter is not an options object of vram's: each with why.
 * Everything else with one must be in the TABLE.
 */
const NO_OPTIONS: Readonly<Record<string, string>> = {
  'new CompileError': 'its `options` are the NVRTC option strings it was compiled with, an array',
  'new VramError': 'ECMAScript Error options ({ cause }), as every Error takes them (its subclasses inherit this constructor)',
  'new StreamCaptureError': "ECMAScript Error options ({ cause }), passed on to VramError's constructor",
};

/** What an entry point's messages call it. */
const says = (e: Entry): string => e.says ?? e.name.replace('#', '.');

/** Disposes of what an entry point handed back (`using` would), unless it is one of the shared fixtures. */
function release(result: unknown): void {
  if (result === null || typeof result !== 'object' || [a, b, h, buf].includes(result as never)) return;
  const dispose = (result as { [Symbol.dispose]?: () => void })[Symbol.dispose];
  if (typeof dispose === 'function') dispose.call(result);
}

/** Runs the call; a synchronous throw and a rejection both come back as the error. */
async function outcome(e: Entry, options: unknown): Promise<{ error?: unknown }> {
  try {
    release(await e.call(options));
    return {};
  } catch (error) {
    return { error };
  }
}

/** True for the options check's own refusals. */
function isOptionsError(error: unknown): boolean {
  return error instanceof TypeError && /: (unknown (\w+ )?option '|\w+ must be an object with any of )/.test(error.message);
}

const entries = fc.constantFrom(...TABLE);
const notObjects = fc.oneof(
  fc.constant(null),
  fc.integer(),
  fc.string(),
  fc.boolean(),
  fc.bigInt(),
  fc.constant(Symbol('options')),
  fc.array(fc.anything(), { maxLength: 3 }),
);

describe('one options check at every entry point', () => {
  test('arrays, null and primitives where options go are refused, naming the entry point', async () => {
    await fc.assert(
      fc.asyncProperty(entries, notObjects, async (e, value) => {
        const { error } = await outcome(e, value);
        assert.ok(error instanceof TypeError, `${e.name}(${String(typeof value)}): expected a TypeError, got ${String(error)}`);
        assert.ok(error.message.startsWith(`${says(e)}: `), `${e.name}: the message should name it: ${error.message}`);
        assert.match(error.message, Array.isArray(value) ? /got an array/ : value === null ? /got null/ : /got an? \w+/);
        for (const key of e.keys) assert.ok(error.message.includes(key), `${e.name}: the message should list '${key}': ${error.message}`);
      }),
      { numRuns: 150 },
    );
  });

  test('an unknown key is refused before any getter runs, naming the key and the valid ones', async () => {
    const unknownKey = fc.string({ minLength: 1, maxLength: 12 }).filter((k) => k !== '__proto__');
    await fc.assert(
      fc.asyncProperty(entries, unknownKey, async (e, key) => {
        fc.pre(!e.keys.includes(key));
        let reads = 0;
        const options: Options = {};
        for (const k of e.keys)
          Object.defineProperty(options, k, {
            enumerable: true,
            get: () => {
              reads++;
              return e.base?.[k];
            },
          });
        options[key] = 1;
        const { error } = await outcome(e, options);
        assert.ok(error instanceof TypeError, `${e.name} with '${key}': expected a TypeError, got ${String(error)}`);
        assert.ok(error.message.startsWith(`${says(e)}: unknown `) && error.message.includes(`option '${key}'`), error.message);
        for (const k of e.keys) assert.ok(error.message.includes(k), `${e.name}: the message should list '${k}': ${error.message}`);
        assert.equal(reads, 0, `${e.name}: a getter ran before the refusal`);
      }),
      { numRuns: 300 },
    );
  });

  test('a misspelt key is refused with the nearest valid key', async () => {
    for (const e of TABLE) {
      const key = e.keys.reduce((l, k) => (k.length > l.length ? k : l));
      const typo = key.length > 3 ? key.slice(0, -1) : `${key}s`;
      if (e.keys.includes(typo)) continue;
      const { error } = await outcome(e, { ...e.base, [typo]: 1 });
      assert.ok(error instanceof TypeError, `${e.name}: expected a TypeError for '${typo}', got ${String(error)}`);
      assert.ok(error.message.includes(`did you mean '${key}'?`), `${e.name}: ${error.message}`);
    }
  });

  test('valid keys are accepted, and each is read exactly once', async () => {
    await fc.assert(
      fc.asyncProperty(entries, fc.infiniteStream(fc.boolean()), async (e, pick) => {
        const reads = new Map<string, number>();
        const options: Options = {};
        for (const k of e.keys) {
          if (!pick.next().value && !(e.base !== undefined && k in e.base)) continue;
          reads.set(k, 0);
          Object.defineProperty(options, k, {
            enumerable: true,
            get: () => {
              reads.set(k, reads.get(k)! + 1);
              return e.base?.[k];
            },
          });
        }
        const { error } = await outcome(e, options);
        if (e.partial === undefined) assert.equal(error, undefined, `${e.name}(${[...reads.keys()].join(', ')}): ${String(error)}`);
        else assert.ok(!isOptionsError(error), `${e.name}: valid options refused: ${String(error)}`);
        for (const [k, n] of reads) assert.equal(n, 1, `${e.name}: option '${k}' was read ${n} times`);
      }),
      { numRuns: 200 },
    );
  });

  test('omitted options (undefined) are the defaults', async () => {
    for (const e of TABLE) {
      if (e.base !== undefined) continue;
      const { error } = await outcome(e, undefined);
      if (e.partial === undefined) assert.equal(error, undefined, `${e.name}(): ${String(error)}`);
      else assert.ok(!isOptionsError(error), `${e.name}(): ${String(error)}`);
    }
  });
});

describe('the cases of the issue', () => {
  test('DeviceArray.from(data, [3, 3]) and { shap } are refused, not a 1-D array', () => {
    assert.throws(
      () => DeviceArray.from(new Float32Array(9), [3, 3] as never),
      /^TypeError: DeviceArray\.from: options must be an object with any of dtype, shape, resource, stream, device, spillable, got an array$/,
    );
    assert.throws(
      () => DeviceArray.from(new Float32Array(9), { shap: [3, 3] } as never),
      /^TypeError: DeviceArray\.from: unknown option 'shap' \(did you mean 'shape'\?\); valid: dtype, shape, resource, stream, device, spillable$/,
    );
  });

  test('HostArray.empty with { mapd: true } is refused, not unmapped memory', () => {
    assert.throws(() => HostArray.empty([2], 'float32', { mapd: true } as never), /HostArray\.empty: unknown option 'mapd' \(did you mean 'mapped'\?\)/);
  });

  test('configureTransfers: { thread: 2 }, { registration: null } and minimumBytes > maximumBytes are refused, changing nothing', () => {
    const before = transferSettings();
    assert.throws(() => configureTransfers({ thread: 2 } as never), /configureTransfers: unknown option 'thread' \(did you mean 'threads'\?\)/);
    assert.throws(
      () => configureTransfers({ registration: null } as never),
      /configureTransfers: registration must be an object with any of enabled, minimumBytes, maximumBytes, afterUses, got null/,
    );
    assert.throws(
      () => configureTransfers({ registration: { enable: false } } as never),
      /configureTransfers: unknown registration option 'enable' \(did you mean 'enabled'\?\)/,
    );
    assert.throws(
      () => configureTransfers({ registration: { minimumBytes: 2048, maximumBytes: 1024 } }),
      /^RangeError: configureTransfers: registration\.minimumBytes \(2048\) exceeds registration\.maximumBytes \(1024\)$/,
    );
    assert.throws(() => configureTransfers({ registration: { minimumBytes: before.registration.maximumBytes + 1 } }), RangeError);
    assert.deepEqual(transferSettings(), before);
  });

  test('a getter cannot change an option between its check and its use', () => {
    // DeviceArray.fromPointer checked options.stream and then read it again to keep: a getter
    // that answers a live stream to the check could hand over a raw handle no stream has.
    using stream = Stream.create();
    const bogus = { handle: 424242 };
    let reads = 0;
    const options = {
      get stream(): unknown {
        reads++;
        return reads <= 2 ? stream : bogus;
      },
    };
    using x = DeviceArray.fromPointer(buf.ptr, [4], 'float32', options as never);
    assert.equal(x.stream, stream);
    assert.equal(reads, 1);
  });
});

describe('readOptions', () => {
  test('copies the valid keys read once into a new object, leaving undefined ones out', () => {
    const given = { a: 1, b: undefined };
    const o = readOptions<{ a?: number; b?: number; c?: number }>('f', given, { a: true, b: true, c: true });
    assert.deepEqual(o, { a: 1 });
    assert.notEqual(o, given);
    assert.deepEqual(readOptions<{ a?: number }>('f', undefined, { a: true }), {});
  });

  test('names a nested argument, and suggests a key in another case', () => {
    assert.throws(
      () => readOptions<{ maxSize?: number }>('new AsyncResource', { maxsize: 1 } as never, { maxSize: true }, 'pool'),
      /^TypeError: new AsyncResource: unknown pool option 'maxsize' \(did you mean 'maxSize'\?\); valid: maxSize$/,
    );
    assert.throws(
      () => readOptions<{ device?: number }>('f', { zzzzzz: 1 } as never, { device: true }),
      /^TypeError: f: unknown option 'zzzzzz'; valid: device$/,
    );
  });
});

/** Entry points of the built declarations (the root and every subpath) with an options parameter (by name or by type), as TABLE names them. */
function entryPointsWithOptions(): Set<string> {
  const { checker, modules } = entryProgram(entryPoints().map((e) => e.declarations));
  const found = new Set<string>();
  // A parameter named options, or typed as an options or launch-configuration type, or as an object literal type.
  const takesOptions = (p: ts.ParameterDeclaration): boolean => {
    const type = p.type;
    if (ts.isIdentifier(p.name) && p.name.text === 'options') return true;
    if (type === undefined) return false;
    if (ts.isTypeLiteralNode(type)) return true;
    return /\b\w*(Options|LaunchConfig)\b/.test(type.getText());
  };
  const visit = (decl: ts.Declaration | undefined, name: string): void => {
    if (decl === undefined) return;
    const params = ts.isFunctionLike(decl) ? decl.parameters : [];
    if (params.some(takesOptions)) found.add(name);
  };
  for (const exported of modules.flatMap((m) => checker.getExportsOfModule(m))) {
    const symbol = resolveAlias(checker, exported);
    for (const decl of symbol.declarations ?? []) {
      if (ts.isFunctionDeclaration(decl)) visit(decl, exported.name);
      if (!ts.isClassDeclaration(decl)) continue;
      for (const member of decl.members) {
        const modifiers = ts.canHaveModifiers(member) ? (ts.getModifiers(member) ?? []) : [];
        if (modifiers.some((m) => m.kind === ts.SyntaxKind.PrivateKeyword || m.kind === ts.SyntaxKind.ProtectedKeyword)) continue;
        if (ts.isConstructorDeclaration(member)) visit(member, `new ${exported.name}`);
        else if (member.name !== undefined && (ts.isMethodDeclaration(member) || ts.isPropertyDeclaration(member))) {
          const isStatic = modifiers.some((m) => m.kind === ts.SyntaxKind.StaticKeyword);
          visit(member as ts.Declaration, `${exported.name}${isStatic ? '.' : '#'}${member.name.getText()}`);
        }
      }
    }
  }
  return found;
}

test('the TABLE covers every exported function, constructor and method with an options parameter', () => {
  const found = entryPointsWithOptions();
  const listed = new Set([...TABLE.map((e) => e.name), ...Object.keys(NO_OPTIONS)]);
  const missing = [...found].filter((n) => !listed.has(n));
  assert.deepEqual(missing, [], `entry points with options that the TABLE does not check (add them, and call readOptions in them): ${missing.join(', ')}`);
  const stale = [...listed].filter((n) => !found.has(n));
  assert.deepEqual(stale, [], `TABLE or NO_OPTIONS entries that no export has: ${stale.join(', ')}`);
  assert.equal(new Set(TABLE.map((e) => e.name)).size, TABLE.length, 'an entry point is listed twice');
});
