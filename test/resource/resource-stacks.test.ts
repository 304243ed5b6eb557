/**
 * The catalogue of named resource stacks (src/resource/stacks.ts): each name builds the stack the
 * default resource, `vram replay` and `vram bench` all mean by it, its options are checked before
 * anything is allocated, and `close()` gives back everything the stack made.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Device } from '../../src/device.js';
import { ArenaResource } from '../../src/resource/suballoc/arena.js';
import { AsyncResource } from '../../src/resource/upstream/async-resource.js';
import { BinningResource } from '../../src/resource/suballoc/binning.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import { createDefaultResource } from '../../src/resource/default-resource.js';
import { createResourceStack, isResourceStackName, RESOURCE_STACK_NAMES, type ResourceStackName } from '../../src/resource/stacks.js';
import { createStack } from '../../src/replay/stacks.js';
import { parseAllocationLog } from '../../src/replay/parse.js';
import { ALLOCATION_LOG_HEADER } from '../../src/resource/adaptors/logging.js';

const MiB = 1024 * 1024;
const device = Device.get(0);

/** Builds `name` with the options every stack accepts (an arena needs its size). */
function build(name: ResourceStackName): ReturnType<typeof createResourceStack> {
  return name === 'arena' ? createResourceStack('arena', { device: 0, size: 64 * MiB }) : createResourceStack(name, { device: 0 });
}

test('every named stack builds its resource, hands out memory, and closes to nothing', () => {
  const tops: Record<ResourceStackName, new (...args: never[]) => object> = {
    cuda: CudaResource,
    async: AsyncResource,
    pool: PoolResource,
    adaptive: PoolResource,
    binning: BinningResource,
    arena: ArenaResource,
  };
  assert.deepEqual([...RESOURCE_STACK_NAMES], ['cuda', 'async', 'pool', 'adaptive', 'binning', 'arena']);
  for (const name of RESOURCE_STACK_NAMES) {
    const stack = build(name);
    assert.equal(stack.name, name);
    assert.ok(stack.resource instanceof tops[name], name);
    assert.equal(stack.resource.deviceOrdinal, 0, name);
    assert.equal(stack.pool instanceof PoolResource, name === 'pool' || name === 'adaptive' || name === 'binning', name);
    const ptr = stack.resource.allocate(MiB);
    stack.resource.deallocate(ptr, MiB);
    device.synchronize();
    stack.destroy();
    assert.ok(stack.resource.destroyed, `${name}: top destroyed`);
    if (stack.pool !== undefined) assert.ok(stack.pool.destroyed, `${name}: the pool it made is destroyed too`);
  }
});

test('the stacks are what their names promise: async keeps freed memory, binning bins 256 KiB .. 4 MiB over a pool', () => {
  const async = createResourceStack('async');
  assert.equal(async.resource.ownsPool, true);
  assert.equal(async.resource.releaseThreshold, Number.MAX_SAFE_INTEGER);
  async.destroy();
  const binning = createResourceStack('binning');
  assert.deepEqual(binning.resource.binSizes, [256 * 1024, 512 * 1024, MiB, 2 * MiB, 4 * MiB]);
  assert.equal(binning.resource.upstream, binning.pool);
  binning.destroy();
});

test('the default resource, replay and the catalogue build the same stack for a name', () => {
  const fromDefault = createDefaultResource(device, { VRAM_ALLOCATOR: 'async' });
  const fromCatalogue = createResourceStack('async');
  assert.equal(fromDefault.describe(), fromCatalogue.resource.describe());
  fromDefault.destroy();
  fromCatalogue.destroy();

  const trace = parseAllocationLog(`${ALLOCATION_LOG_HEADER}\n`, 'empty.csv');
  for (const name of RESOURCE_STACK_NAMES) {
    const replayed = createStack(name, trace);
    const built = build(name);
    assert.equal(replayed.resource.constructor, built.resource.constructor, name);
    if (name === 'binning') assert.equal(replayed.resource.describe().split(', upstream=')[0], built.resource.describe().split(', upstream=')[0]);
    replayed.destroy();
    built.destroy();
  }
});

test("a stack's options are checked before anything is built: unknown keys, arrays, a missing arena size", () => {
  const refused = (f: () => unknown, pattern: RegExp): void => {
    assert.throws(f, (e: unknown) => e instanceof TypeError && pattern.test(e.message), String(pattern));
  };
  refused(() => createResourceStack('cuda', { extentSize: 64 * MiB } as never), /resource stack 'cuda': unknown option 'extentSize'; valid: device$/);
  refused(() => createResourceStack('pool', { extentsize: 64 * MiB } as never), /did you mean 'extentSize'\?\); valid: device, extentSize$/);
  refused(() => createResourceStack('binning', [] as never), /resource stack 'binning': options must be an object .* got an array/);
  refused(() => createResourceStack('arena'), /resource stack 'arena': options\.size .* is required/);
  refused(() => createResourceStack('slab' as ResourceStackName), /unknown resource stack 'slab'; valid: cuda, async, pool, adaptive, binning, arena/);
  assert.ok(isResourceStackName('arena'));
  assert.ok(!isResourceStackName('all'));
});
