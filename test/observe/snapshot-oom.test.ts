/**
 * The out-of-memory observer: a small program filling a LimitingAdaptor of 64 MiB from one site
 * writes a snapshot to VRAM_OOM_SNAPSHOT that names the site and validates against the schema;
 * the error's message names the largest live sites (from the history's stacks, or a
 * TrackingAdaptor's) and the fragmentation; listeners are told once per error reaching the
 * program, not for a failure a retry recovered from; a failing listener or snapshot does not
 * replace the error.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { Ajv2020 } from 'ajv/dist/2020.js';
import type { Ptr } from '../../src/backend/backend.js';
import { OutOfMemoryError } from '../../src/errors.js';
import { ArenaResource } from '../../src/resource/suballoc/arena.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';
import { recordMemoryHistory } from '../../src/observe/history.js';
import { LimitingAdaptor } from '../../src/resource/adaptors/limiting.js';
import { onOutOfMemory, type OutOfMemoryEvent } from '../../src/observe/out-of-memory-observer.js';
import { RetryOnOutOfMemory } from '../../src/resource/adaptors/retry-on-oom.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import type { MemorySnapshot } from '../../src/observe/snapshot-format.js';
import { TrackingAdaptor } from '../../src/resource/adaptors/tracking.js';
import { captureWarnings } from '../helpers.js';

const MiB = 1024 * 1024;
const schema = JSON.parse(readFileSync(new URL('../../../docs/snapshot-schema.json', import.meta.url), 'utf8')) as object;
const validate = new Ajv2020({ strict: true, allErrors: true }).compile(schema);

/**
 * The small program: device 0's current resource is a pool under a 64 MiB limit, filled 1 MiB at
 * a time by `fillActivations` (recording the history with stacks when RECORD is set) until it
 * runs out; prints the error's message.
 */
const program = (src: string): string => `
import { DeviceBuffer } from '${src}/buffer/device-buffer.js';
import { setCurrentResource } from '${src}/resource/current.js';
import { recordMemoryHistory } from '${src}/observe/history.js';
import { LimitingAdaptor } from '${src}/resource/adaptors/limiting.js';
import '${src}/observe/out-of-memory-observer.js';
import { PoolResource } from '${src}/resource/suballoc/pool.js';
if (process.env.RECORD) recordMemoryHistory({ stacks: true });
setCurrentResource(0, new LimitingAdaptor(new PoolResource(), 64 * 1024 * 1024));
const held = [];
function fillActivations() { return DeviceBuffer.allocate(1024 * 1024); }
try {
  for (;;) held.push(fillActivations());
} catch (error) {
  console.log(JSON.stringify({ name: error.name, message: error.message, held: held.length }));
}
`;

function runProgram(record: boolean): { output: { name: string; message: string; held: number }; snapshot: MemorySnapshot } {
  const dir = mkdtempSync(join(tmpdir(), 'vram-oom-'));
  try {
    const path = join(dir, 'snapshot.json');
    const src = new URL('../../src', import.meta.url).href;
    const stdout = execFileSync(process.execPath, ['--input-type=module', '-e', program(src)], {
      env: { ...process.env, VRAM_OOM_SNAPSHOT: path, RECORD: record ? '1' : '' },
      encoding: 'utf8',
    });
    return {
      output: JSON.parse(stdout) as { name: string; message: string; held: number },
      snapshot: JSON.parse(readFileSync(path, 'utf8')) as MemorySnapshot,
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test('a program filling a 64 MiB LimitingAdaptor from one site writes a snapshot naming that site', () => {
  const { output, snapshot } = runProgram(true);
  assert.equal(output.name, 'OutOfMemoryError');
  assert.equal(output.held, 64);
  assert.ok(validate(snapshot), JSON.stringify(validate.errors));
  assert.equal(snapshot.trigger.kind, 'out-of-memory');
  const error = snapshot.trigger.error!;
  assert.deepEqual([error.requestedBytes, error.reason, error.call], [MiB, 'limit', 'LimitingAdaptor.allocate']);
  assert.equal(error.message, output.message, 'the snapshot has the message the program saw');
  const top = snapshot.resources.find((r) => r.id === error.resource)!;
  assert.equal(top.className, 'LimitingAdaptor');
  assert.equal(snapshot.currentResource, top.id);
  // 64 live blocks of 1 MiB, all from fillActivations.
  assert.equal(snapshot.blocks.length, 64);
  assert.equal(
    snapshot.blocks.reduce((sum, b) => sum + b.bytes, 0),
    64 * MiB,
  );
  const sites = new Set(snapshot.blocks.map((b) => b.stack));
  assert.equal(sites.size, 1);
  const frames = snapshot.stacks.find((s) => s.id === [...sites][0])!.frames;
  assert.match(frames[0]!, /fillActivations/);
  // The history ends with the failed request.
  const last = snapshot.history!.events.at(-1)!;
  assert.deepEqual([last.kind, last.bytes, last.resource], ['oom', MiB, top.id]);
  // The message names the site and the pool's free memory.
  assert.match(output.message, /64 MiB in 64 blocks at fillActivations \(/);
  assert.match(output.message, /fragmentation: (no free memory cached|largest free block .* free) in PoolResource/);
});

test('without a recording the snapshot has no history and no sites, and still validates', () => {
  const { output, snapshot } = runProgram(false);
  assert.ok(validate(snapshot), JSON.stringify(validate.errors));
  assert.equal(snapshot.history, null);
  assert.deepEqual(snapshot.stacks, []);
  assert.equal(snapshot.blocks.length, 64);
  assert.ok(snapshot.blocks.every((b) => b.stack === null));
  assert.doesNotMatch(output.message, /largest live allocation sites/);
  assert.match(output.message, /fragmentation: /);
});

function holdScratch(mr: TrackingAdaptor): Ptr {
  return mr.allocate(3 * MiB);
}

test("the message: sites from a TrackingAdaptor's stacks, the fragmentation of an arena (largest free block against free bytes), the stack's first line too", () => {
  using arena = new ArenaResource({ size: 8 * MiB });
  using tracked = new TrackingAdaptor(arena, { captureStacks: true });
  const held = [holdScratch(tracked), holdScratch(tracked)];
  tracked.deallocate(held[0]!, 3 * MiB); // 3 MiB free at the start, 2 MiB at the end: 5 MiB free, 3 MiB the largest
  let caught: OutOfMemoryError | undefined;
  try {
    tracked.allocate(4 * MiB);
  } catch (e) {
    caught = e as OutOfMemoryError;
  }
  assert.ok(caught instanceof OutOfMemoryError);
  assert.match(caught.message, /largest live allocation sites: 3 MiB in 1 block at holdScratch \(/);
  assert.match(caught.message, /fragmentation: largest free block 3 MiB of 5 MiB free in ArenaResource\(/);
  assert.ok(caught.stack!.startsWith(`OutOfMemoryError: ${caught.message}\n`), 'the stack says the same');
  tracked.deallocate(held[1]!, 3 * MiB);

  // A driver resource lays out no free blocks: no fragmentation to report, the message as the resource made it.
  using cuda = new CudaResource();
  using capped = new LimitingAdaptor(cuda, MiB);
  let plain: OutOfMemoryError | undefined;
  try {
    capped.allocate(2 * MiB);
  } catch (e) {
    plain = e as OutOfMemoryError;
  }
  assert.equal(
    plain?.message,
    'cannot allocate 2 MiB (2097152 bytes) from LimitingAdaptor(limit=1 MiB, CudaResource(device=0)): ' + '0 B of the 1 MiB (1048576 bytes) limit in use',
  );
});

test('listeners: told once per error reaching the program, not for a recovered retry; a failing one is a warning, not a new error', async () => {
  const told: OutOfMemoryEvent[] = [];
  const remove = onOutOfMemory((event) => told.push(event));
  try {
    using pool = new PoolResource();
    using limited = new LimitingAdaptor(pool, MiB);
    using retry = new RetryOnOutOfMemory(limited);
    assert.throws(() => retry.allocate(2 * MiB), OutOfMemoryError);
    assert.equal(told.length, 1);
    assert.deepEqual([told[0]!.resource, told[0]!.requestedBytes, told[0]!.stream], [retry, 2 * MiB, 0]);
    assert.ok(told[0]!.error instanceof OutOfMemoryError);

    using cuda = new CudaResource();
    using cap = new LimitingAdaptor(cuda, 4 * MiB);
    using chunked = new PoolResource({ upstream: cap, chunkSize: 2 * MiB });
    using recovering = new RetryOnOutOfMemory(chunked);
    recovering.deallocate(recovering.allocate(2 * MiB), 2 * MiB);
    recovering.deallocate(recovering.allocate(3 * MiB), 3 * MiB);
    assert.equal(recovering.recovered, 1);
    assert.equal(told.length, 1, "a recovered failure is not the program's");

    const removeFailing = onOutOfMemory(() => {
      throw new Error('listener bug');
    });
    const codes = await captureWarnings(() => {
      assert.throws(() => limited.allocate(2 * MiB), OutOfMemoryError);
    });
    removeFailing();
    assert.deepEqual(codes, ['VRAM_OOM_OBSERVER']);
    assert.equal(told.length, 2);
  } finally {
    remove();
  }
  assert.throws(() => onOutOfMemory('no' as unknown as () => void), TypeError);
});

test('a snapshot that cannot be written is a warning; the program still gets its out-of-memory error', async () => {
  using pool = new PoolResource();
  using limited = new LimitingAdaptor(pool, MiB);
  using _history = recordMemoryHistory();
  const previous = process.env.VRAM_OOM_SNAPSHOT;
  process.env.VRAM_OOM_SNAPSHOT = join(tmpdir(), 'no-such-folder-for-vram', 'snapshot.json');
  try {
    const codes = await captureWarnings(() => {
      assert.throws(() => limited.allocate(2 * MiB), OutOfMemoryError);
    });
    assert.deepEqual(codes, ['VRAM_OOM_OBSERVER']);
  } finally {
    if (previous === undefined) delete process.env.VRAM_OOM_SNAPSHOT;
    else process.env.VRAM_OOM_SNAPSHOT = previous;
  }
});

test('a listener that runs out of memory itself is not called again for its own error (no re-entry)', () => {
  using pool = new PoolResource();
  using limited = new LimitingAdaptor(pool, MiB);
  let calls = 0;
  let inner: unknown;
  const remove = onOutOfMemory(() => {
    calls += 1;
    try {
      limited.allocate(4 * MiB);
    } catch (error) {
      inner = error;
    }
  });
  try {
    assert.throws(() => limited.allocate(2 * MiB), OutOfMemoryError);
  } finally {
    remove();
  }
  assert.equal(calls, 1);
  assert.ok(inner instanceof OutOfMemoryError, 'the listener still gets its error');
});
