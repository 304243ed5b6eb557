/**
 * The default resource of each device: VRAM_ALLOCATOR's three allocators, the fallback when a
 * device cannot run the unasked-for default, the cap (VRAM_MEMORY_LIMIT, VRAM_MEMORY_FRACTION),
 * bad values, emptyCache, and setCurrentResource replacing the default. Settings are read from a
 * given environment object here, and from a child process's real environment for the first use.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { Device } from '../../src/device.js';
import { ENVIRONMENT } from '../../src/environment.js';
import { NotSupportedError, OutOfMemoryError } from '../../src/errors.js';
import { AsyncResource } from '../../src/resource/upstream/async-resource.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';
import { emptyCache, getCurrentResource, setCurrentResource } from '../../src/resource/current.js';
import {
  ALLOCATOR_NAMES,
  chooseAllocator,
  createDefaultResource,
  DEFAULT_RESOURCE_VARIABLES,
  readDefaultResourceSettings,
  type DefaultResourceSettings,
} from '../../src/resource/default-resource.js';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { LimitingAdaptor } from '../../src/resource/adaptors/limiting.js';
import { assertMemoryReturned, FREE_MEMORY_SLACK } from '../helpers.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import type { MemoryResource } from '../../src/resource/resource.js';

const device = Device.get(0);
const MiB = 1024 * 1024;

/** Used device memory as the driver reports it, cache included (the helpers' figure empties the cache first). */
function driverUsed(): number {
  const m = device.memInfo();
  return m.total - m.free;
}

/** Destroys a resource and what it was built over (a LimitingAdaptor leaves its upstream alone). */
function destroyAll(mr: MemoryResource): void {
  for (let r: MemoryResource | undefined = mr; r !== undefined; r = r.upstream) r.destroy();
}

test('VRAM_ALLOCATOR: async by default, each value, blank as unset, anything else a RangeError naming the values', () => {
  assert.deepEqual(readDefaultResourceSettings({}), { allocator: 'async', explicit: false });
  assert.deepEqual(readDefaultResourceSettings({ VRAM_ALLOCATOR: '' }), { allocator: 'async', explicit: false });
  assert.deepEqual(readDefaultResourceSettings({ VRAM_ALLOCATOR: ' ' }), { allocator: 'async', explicit: false });
  for (const name of ALLOCATOR_NAMES) {
    assert.deepEqual(readDefaultResourceSettings({ VRAM_ALLOCATOR: name }), { allocator: name, explicit: true });
  }
  for (const bad of ['bogus', 'Pool', 'ASYNC', 'cudaMalloc', 'pool,cuda', 'backend:cudaMallocAsync']) {
    assert.throws(
      () => readDefaultResourceSettings({ VRAM_ALLOCATOR: bad }),
      (e: unknown) =>
        e instanceof RangeError && e.message.includes('VRAM_ALLOCATOR') && e.message.includes('async, pool, adaptive, cuda') && e.message.includes(`'${bad}'`),
      bad,
    );
  }
});

test('each allocator builds its resource; async is a new pool that keeps freed memory', () => {
  const async = createDefaultResource(device, { VRAM_ALLOCATOR: 'async' });
  assert.ok(async instanceof AsyncResource);
  assert.equal(async.ownsPool, true, 'a pool of its own, not the device default pool other libraries share');
  assert.equal(async.releaseThreshold, Number.MAX_SAFE_INTEGER);
  assert.equal(createDefaultResource(device, {}).describe(), async.describe());
  const p = async.allocate(4 * MiB);
  async.deallocate(p, 4 * MiB);
  device.synchronize();
  assert.ok(async.reservedBytes >= 4 * MiB, 'freed memory stays cached across a synchronisation');
  assert.ok(async.releaseCached() >= 4 * MiB);
  assert.equal(async.reservedBytes, 0);
  async.destroy();
  const pool = createDefaultResource(device, { VRAM_ALLOCATOR: 'pool' });
  assert.ok(pool instanceof PoolResource);
  assert.equal(pool.describe(), 'PoolResource(virtual, device=0)');
  pool.destroy();
  const adaptive = createDefaultResource(device, { VRAM_ALLOCATOR: 'adaptive' });
  assert.ok(adaptive instanceof PoolResource);
  assert.equal(adaptive.describe(), 'PoolResource(virtual, device=0, extents=adaptive)');
  adaptive.destroy();
  const cuda = createDefaultResource(device, { VRAM_ALLOCATOR: 'cuda' });
  assert.ok(cuda instanceof CudaResource);
  cuda.destroy();
});

test('the unasked-for default falls back on a device without pools; an explicit choice it cannot run is NotSupportedError', () => {
  const info = (pools: boolean, vmm: boolean) => ({ ordinal: 3, memoryPoolsSupported: pools, virtualMemoryManagementSupported: vmm });
  const implicit: DefaultResourceSettings = { allocator: 'async', explicit: false };
  assert.equal(chooseAllocator(implicit, info(true, true)), 'async');
  assert.equal(chooseAllocator(implicit, info(false, true)), 'pool');
  assert.equal(chooseAllocator(implicit, info(false, false)), 'cuda');
  assert.throws(
    () => chooseAllocator({ allocator: 'async', explicit: true }, info(false, true)),
    (e: unknown) => e instanceof NotSupportedError && /VRAM_ALLOCATOR=async: device 3 .*memory pools/.test(e.message),
  );
  for (const allocator of ['pool', 'adaptive'] as const) {
    assert.throws(
      () => chooseAllocator({ allocator, explicit: true }, info(true, false)),
      (e: unknown) => e instanceof NotSupportedError && /virtual memory management/.test(e.message),
      allocator,
    );
  }
  assert.equal(chooseAllocator({ allocator: 'cuda', explicit: true }, info(false, false)), 'cuda');
});

test('VRAM_MEMORY_LIMIT caps the default resource: past it is OutOfMemoryError with reason limit', () => {
  assert.deepEqual(readDefaultResourceSettings({ VRAM_MEMORY_LIMIT: '16G' }).cap, { kind: 'limit', bytes: 16 * 1024 ** 3 });
  assert.deepEqual(readDefaultResourceSettings({ VRAM_MEMORY_LIMIT: '4096' }).cap, { kind: 'limit', bytes: 4096 });
  assert.deepEqual(readDefaultResourceSettings({ VRAM_MEMORY_LIMIT: '1.5GiB' }).cap, { kind: 'limit', bytes: 1.5 * 1024 ** 3 });
  for (const allocator of ALLOCATOR_NAMES) {
    const mr = createDefaultResource(device, { VRAM_ALLOCATOR: allocator, VRAM_MEMORY_LIMIT: '3M' });
    assert.ok(mr instanceof LimitingAdaptor);
    assert.equal(mr.limitBytes, 3 * MiB);
    assert.match(mr.describe(), /^LimitingAdaptor\(limit=3 MiB, /);
    const a = mr.allocate(2 * MiB);
    assert.throws(
      () => mr.allocate(2 * MiB),
      (e: unknown) => e instanceof OutOfMemoryError && e.reason === 'limit' && e.requestedBytes === 2 * MiB,
      allocator,
    );
    mr.deallocate(a, 2 * MiB);
    mr.deallocate(mr.allocate(3 * MiB), 3 * MiB);
    destroyAll(mr);
  }
});

test("VRAM_MEMORY_FRACTION caps at that part of the device's total memory", () => {
  const total = device.info.totalMemory;
  for (const [text, f] of [
    ['0.5', 0.5],
    ['.25', 0.25],
    ['1', 1],
    ['1.0', 1],
    [' 0.125 ', 0.125],
  ] as const) {
    assert.deepEqual(readDefaultResourceSettings({ VRAM_MEMORY_FRACTION: text }).cap, { kind: 'fraction', fraction: f });
  }
  const mr = createDefaultResource(device, { VRAM_MEMORY_FRACTION: '0.25' });
  assert.ok(mr instanceof LimitingAdaptor);
  assert.equal(mr.limitBytes, Math.floor(total / 4));
  assert.throws(
    () => mr.allocate(Math.floor(total / 4) + 1),
    (e: unknown) => e instanceof OutOfMemoryError && e.reason === 'limit',
  );
  destroyAll(mr);
});

test('bad caps: both set, zero, out of range or unreadable, each an error naming the variable', () => {
  assert.throws(
    () => readDefaultResourceSettings({ VRAM_MEMORY_LIMIT: '1G', VRAM_MEMORY_FRACTION: '0.5' }),
    (e: unknown) => e instanceof RangeError && /VRAM_MEMORY_LIMIT .*VRAM_MEMORY_FRACTION .*both set/.test(e.message),
  );
  for (const bad of ['0', '-1', '1.5', '2', 'abc', '50%', 'NaN', 'Infinity', '1e-3', '0.5.5']) {
    assert.throws(
      () => readDefaultResourceSettings({ VRAM_MEMORY_FRACTION: bad }),
      (e: unknown) => e instanceof RangeError && e.message.includes('VRAM_MEMORY_FRACTION') && e.message.includes(`'${bad}'`),
      bad,
    );
  }
  for (const bad of ['0', '0G', 'lots', '-1G', '1.5.5M', '1.5', '16 GB of memory']) {
    assert.throws(
      () => readDefaultResourceSettings({ VRAM_MEMORY_LIMIT: bad }),
      (e: unknown) => e instanceof RangeError && e.message.includes('VRAM_MEMORY_LIMIT') && e.message.includes(`'${bad}'`),
      bad,
    );
  }
  // A bad setting makes no resource: nothing is reserved before the error.
  const before = driverUsed();
  assert.throws(() => createDefaultResource(device, { VRAM_ALLOCATOR: 'async', VRAM_MEMORY_FRACTION: '3' }), RangeError);
  assertMemoryReturned(before, driverUsed(), 'a bad setting reserved nothing');
});

test('every variable is described for the table of VRAM_* variables', () => {
  assert.deepEqual(
    DEFAULT_RESOURCE_VARIABLES.map((v) => v.name),
    ['VRAM_ALLOCATOR', 'VRAM_MEMORY_LIMIT', 'VRAM_MEMORY_FRACTION'],
  );
  for (const v of DEFAULT_RESOURCE_VARIABLES) {
    for (const field of [v.values, v.default, v.meaning]) assert.ok(typeof field === 'string' && field.length > 0, v.name);
  }
  assert.equal(DEFAULT_RESOURCE_VARIABLES[0]!.default, readDefaultResourceSettings({}).allocator);
  assert.equal(DEFAULT_RESOURCE_VARIABLES[0]!.values, ALLOCATOR_NAMES.join('|'));
  // The table vram help and vram info print holds these very entries.
  for (const v of DEFAULT_RESOURCE_VARIABLES) assert.ok(ENVIRONMENT.includes(v), v.name);
});

test('the current resource is the caching default; emptyCache gives its cache back; setCurrentResource replaces it', () => {
  const def = getCurrentResource(device);
  assert.equal(def.describe(), createDefaultResourceDescription());
  emptyCache(device);
  const before = driverUsed();
  const buf = DeviceBuffer.allocate(8 * MiB);
  assert.equal(buf.resource, def);
  buf.free();
  device.synchronize();
  if (readDefaultResourceSettings().allocator !== 'cuda') {
    assert.ok(driverUsed() - before >= 8 * MiB - FREE_MEMORY_SLACK, 'the freed memory stays cached, as in CuPy and PyTorch');
  }
  assert.ok(emptyCache() >= (readDefaultResourceSettings().allocator === 'cuda' ? 0 : 8 * MiB));
  assertMemoryReturned(before, driverUsed(), 'emptyCache gave the cache back');
  assert.equal(emptyCache(device), 0, 'nothing left to give back');
  const mine = new CudaResource(device);
  assert.equal(setCurrentResource(device, mine), def);
  using other = DeviceBuffer.allocate(1000);
  assert.equal(other.resource, mine);
  assert.equal(setCurrentResource(0, def), mine);
  assert.equal(getCurrentResource(), def);
});

function createDefaultResourceDescription(): string {
  const probe = createDefaultResource(device);
  const text = probe.describe();
  destroyAll(probe);
  return text;
}

/**
 * Runs a module in a child process with `env` added to this one's environment, and returns what it
 * printed; the child allocates through the default resource, as a program would on first use.
 */
function child(env: Record<string, string>, body: string): string {
  const current = new URL('../../src/resource/current.js', import.meta.url).href;
  const buffer = new URL('../../src/buffer/device-buffer.js', import.meta.url).href;
  const source =
    `import { getCurrentResource } from '${current}';\n` +
    `import { DeviceBuffer } from '${buffer}';\n` +
    'const out = (x) => console.log(JSON.stringify(x));\n' +
    `try { ${body} } catch (e) { out({ error: e.constructor.name, message: e.message, reason: e.reason }); }\n`;
  const childEnv: Record<string, string | undefined> = { ...process.env, ...env };
  for (const name of ['VRAM_ALLOCATOR', 'VRAM_MEMORY_LIMIT', 'VRAM_MEMORY_FRACTION']) {
    if (!(name in env)) delete childEnv[name];
  }
  return execFileSync(process.execPath, ['--input-type=module', '-e', source], { env: childEnv, encoding: 'utf8' }).trim();
}

test("a child process's environment chooses its default resource at first use", () => {
  const describe = 'out(getCurrentResource().describe());';
  assert.equal(JSON.parse(child({}, describe)), 'AsyncResource(device=0, pool=created)');
  assert.match(JSON.parse(child({ VRAM_ALLOCATOR: 'pool' }, describe)) as string, /^PoolResource\(/);
  assert.match(JSON.parse(child({ VRAM_ALLOCATOR: 'cuda' }, describe)) as string, /^CudaResource\(/);
  assert.match(JSON.parse(child({ VRAM_MEMORY_LIMIT: '1G' }, describe)) as string, /^LimitingAdaptor\(limit=1 GiB, AsyncResource\(device=0, pool=created\)\)$/);
  // A bad value is reported by the first allocation, with the valid values.
  const bad = JSON.parse(child({ VRAM_ALLOCATOR: 'turbo' }, 'DeviceBuffer.allocate(16); out("allocated");')) as Record<string, string>;
  assert.equal(bad.error, 'RangeError');
  assert.match(bad.message!, /VRAM_ALLOCATOR must be one of async, pool, adaptive, cuda, got 'turbo'/);
  const both = JSON.parse(child({ VRAM_MEMORY_LIMIT: '1G', VRAM_MEMORY_FRACTION: '0.5' }, 'DeviceBuffer.allocate(16);')) as Record<string, string>;
  assert.equal(both.error, 'RangeError');
  // The cap holds for buffers allocated through the default.
  const capped = JSON.parse(
    child({ VRAM_MEMORY_LIMIT: '1M' }, 'const a = DeviceBuffer.allocate(512 * 1024); DeviceBuffer.allocate(768 * 1024); out("allocated");'),
  ) as Record<string, string>;
  assert.equal(capped.error, 'OutOfMemoryError');
  assert.equal(capped.reason, 'limit');
});
