/**
 * The lifetime and device vocabulary (docs/architecture.md, "Vocabulary"): memory is given back with
 * `free()` and says `freed`; everything else that ends (resources, streams, events, contexts, modules,
 * imported pools) ends with `destroy()` and says `destroyed`; `device` is a `Device` wherever a class
 * has one, and a resource's ordinal is `deviceOrdinal`. A table over the exported classes with a
 * lifetime (and the resource and replay stacks, which end with `destroy()` too), so a class added
 * later without the vocabulary, or an old name coming back, fails here.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Context, Device } from '../../src/device.js';
import { Event, Stream } from '../../src/stream.js';
import { Allocation } from '../../src/buffer/lifetime.js';
import { DeviceBuffer, PitchedDeviceBuffer } from '../../src/buffer/device-buffer.js';
import { ForeignDeviceBuffer } from '../../src/buffer/foreign-device-buffer.js';
import { HostBuffer } from '../../src/buffer/host-buffer.js';
import { ManagedBuffer } from '../../src/buffer/managed-buffer.js';
import { StridedArray } from '../../src/array/strided-array.js';
import { DeviceArray } from '../../src/array/device-array.js';
import { HostArray } from '../../src/array/host-array.js';
import { IpcBuffer } from '../../src/ipc/ipc-buffer.js';
import { ImportedPool } from '../../src/ipc/pool-ipc.js';
import { Module } from '../../src/kernels/module.js';
import { MemoryResource } from '../../src/resource/resource.js';
import { ResourceAdaptor } from '../../src/resource/adaptors/adaptor.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';
import { AsyncResource } from '../../src/resource/upstream/async-resource.js';
import { DriverResource } from '../../src/resource/upstream/driver-resource.js';
import { ManagedResource } from '../../src/resource/upstream/managed-resource.js';
import { PinnedHostResource } from '../../src/resource/upstream/pinned-host-resource.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import { ArenaResource } from '../../src/resource/suballoc/arena.js';
import { BinningResource } from '../../src/resource/suballoc/binning.js';
import { FixedSizeResource } from '../../src/resource/suballoc/fixed-size.js';
import { PinnedHostPool } from '../../src/resource/suballoc/pinned-host-pool.js';
import { StatisticsAdaptor } from '../../src/resource/adaptors/statistics.js';
import { LimitingAdaptor } from '../../src/resource/adaptors/limiting.js';
import { TrackingAdaptor } from '../../src/resource/adaptors/tracking.js';
import { LoggingAdaptor } from '../../src/resource/adaptors/logging.js';
import { RetryOnOutOfMemory } from '../../src/resource/adaptors/retry-on-oom.js';
import { Communicator, Registration } from '../../src/public/nccl.js';
import { createResourceStack, RESOURCE_STACK_NAMES } from '../../src/resource/stacks.js';
import { createStack } from '../../src/replay/stacks.js';
import { parseAllocationLog } from '../../src/replay/parse.js';
import { ALLOCATION_LOG_HEADER } from '../../src/resource/adaptors/logging.js';

/** A class as a value (constructors may be private: only the prototype is read). */
interface Class {
  readonly name: string;
  readonly prototype: object;
}

/** Names that ended lifetimes or said "gone" before the vocabulary; none may come back. */
const RETIRED = ['isFreed', 'isDestroyed', 'unregister', 'release', 'close', 'dispose', 'closed', 'isClosed'];

/** Whether `name` is a member anywhere on the class's prototype chain (methods and getters). */
function has(cls: Class, name: string | symbol): boolean {
  return name in cls.prototype;
}

const memory: readonly Class[] = [
  Allocation,
  DeviceBuffer,
  PitchedDeviceBuffer,
  ForeignDeviceBuffer,
  HostBuffer,
  ManagedBuffer,
  IpcBuffer,
  StridedArray,
  DeviceArray,
  HostArray,
];
const ended: readonly Class[] = [
  Stream,
  Event,
  Context,
  Module,
  ImportedPool,
  MemoryResource,
  ResourceAdaptor,
  CudaResource,
  AsyncResource,
  DriverResource,
  ManagedResource,
  PinnedHostResource,
  PoolResource,
  ArenaResource,
  BinningResource,
  FixedSizeResource,
  PinnedHostPool,
  StatisticsAdaptor,
  LimitingAdaptor,
  TrackingAdaptor,
  LoggingAdaptor,
  RetryOnOutOfMemory,
  Communicator,
  Registration,
];
/** The built objects that end without a class of their own: the resource and replay stacks. */
test('ResourceStack and ReplayStack end with destroy(), never a retired name', () => {
  const trace = parseAllocationLog(`${ALLOCATION_LOG_HEADER}\n`, 'empty.csv');
  for (const name of RESOURCE_STACK_NAMES) {
    const options = name === 'arena' ? { size: 4 << 20 } : {};
    for (const [what, stack] of [
      ['ResourceStack', createResourceStack(name, options as never)],
      ['ReplayStack', createStack(name, trace)],
    ] as const) {
      assert.equal(typeof stack.destroy, 'function', `${what} ${name}: destroy()`);
      for (const old of RETIRED) assert.ok(!(old in stack), `${what} ${name}: ${old} is retired`);
      stack.destroy();
    }
  }
});

const resources: readonly Class[] = ended.filter((c) => c === MemoryResource || c.prototype instanceof MemoryResource);

for (const cls of memory) {
  test(`${cls.name}: free() gives the memory back, freed says so, using frees`, () => {
    assert.equal(typeof (cls.prototype as Record<string, unknown>)['free'], 'function');
    assert.ok(has(cls, 'freed'), 'freed');
    assert.ok(has(cls, Symbol.dispose), 'Symbol.dispose');
    assert.ok(!has(cls, 'destroy') && !has(cls, 'destroyed'), 'memory is freed, not destroyed');
    for (const name of RETIRED) assert.ok(!has(cls, name), `${cls.name}.${name} is retired`);
  });
}

for (const cls of ended) {
  test(`${cls.name}: destroy() ends it, destroyed says so, using destroys`, () => {
    assert.equal(typeof (cls.prototype as Record<string, unknown>)['destroy'], 'function');
    assert.ok(has(cls, 'destroyed'), 'destroyed');
    assert.ok(has(cls, Symbol.dispose), 'Symbol.dispose');
    assert.ok(!has(cls, 'free') && !has(cls, 'freed'), 'it is destroyed, not freed');
    for (const name of RETIRED) assert.ok(!has(cls, name), `${cls.name}.${name} is retired`);
  });
}

test('resources name their ordinal deviceOrdinal; device is never a number on a class', () => {
  for (const cls of resources) assert.ok(!has(cls, 'device'), `${cls.name}.device`);
  using pool = new PoolResource();
  assert.equal(pool.deviceOrdinal, 0);
  using pinned = new PinnedHostResource();
  assert.equal(pinned.deviceOrdinal, -1);
  assert.equal(new StatisticsAdaptor(pool).deviceOrdinal, 0);
  const d = Device.get(0);
  using buf = DeviceBuffer.allocate(64, { resource: pool });
  using arr = DeviceArray.zeros([4], 'int32');
  using stream = Stream.create();
  using event = Event.create();
  for (const [what, device] of [
    ['buffer', buf.device],
    ['array', arr.device],
    ['stream', stream.device],
    ['event', event.device],
  ] as const) {
    assert.equal(device, d, what);
    assert.equal(device.ordinal, 0, what);
  }
});

test('the flags change when the lifetime ends, on every kind', () => {
  const buf = DeviceBuffer.allocate(64);
  assert.equal(buf.freed, false);
  buf.free();
  assert.equal(buf.freed, true);
  const host = HostBuffer.register(new Uint8Array(64));
  host.free();
  assert.equal(host.freed, true);
  const arr = HostArray.empty([4], 'float32');
  arr.free();
  assert.equal(arr.freed, true);
  const stream = Stream.create();
  stream.destroy();
  assert.equal(stream.destroyed, true);
  const event = Event.create();
  event.destroy();
  assert.equal(event.destroyed, true);
  const pool = new PoolResource();
  pool.destroy();
  assert.equal(pool.destroyed, true);
  const staging = new PinnedHostPool();
  const chunk = staging.acquire(16);
  chunk.free();
  staging.destroy();
  assert.equal(staging.destroyed, true);
});
