/**
 * An out-of-memory error, and the file that says who filled the memory. A 64 MiB LimitingAdaptor
 * over a pool stands in for a small GPU; `loadWeights` takes 8 MiB, then `cacheActivations`
 * keeps 4 MiB blocks it never lets go until the limit refuses one. With `VRAM_OOM_SNAPSHOT` set,
 * vram writes a memory snapshot at the moment of the error, and `vram view` turns it into a report
 * whose memory map and top sites show `cacheActivations` holding most of the memory
 * (docs/debugging-out-of-memory.md walks through it; test/report/report.test.ts runs it):
 *
 *   npx tsc -p . && VRAM_OOM_SNAPSHOT=oom.json node dist/examples/oom-snapshot.js
 *   npx vram view oom.json -o oom.html
 */
import { existsSync } from 'node:fs';
import { DeviceBuffer, isOutOfMemory, setCurrentResource } from '../src/index.js';
import { recordMemoryHistory } from '../src/public/observe.js';
import { LimitingAdaptor, PoolResource } from '../src/public/resources.js';

const MiB = 1024 * 1024;

/** The model's weights: four 2 MiB tensors, kept for the whole run. */
function loadWeights(): DeviceBuffer[] {
  const weights: DeviceBuffer[] = [];
  for (let i = 0; i < 4; i++) weights.push(DeviceBuffer.allocate(2 * MiB));
  return weights;
}

/** A 4 MiB activation kept in a cache that is never trimmed: the bug this example is about. */
function cacheActivations(cache: DeviceBuffer[]): void {
  cache.push(DeviceBuffer.allocate(4 * MiB));
}

// Call stacks make the snapshot name the code that allocated each block.
const history = recordMemoryHistory({ stacks: true });
const pool = new PoolResource();
const limited = new LimitingAdaptor(pool, 64 * MiB);
const previous = setCurrentResource(0, limited);

const weights = loadWeights();
const cache: DeviceBuffer[] = [];
try {
  for (;;) cacheActivations(cache);
} catch (error) {
  if (!isOutOfMemory(error)) throw error;
  console.log(`out of memory after ${cache.length} cached activations:\n${error instanceof Error ? error.message : String(error)}`);
  const path = process.env.VRAM_OOM_SNAPSHOT;
  console.log(path === undefined || path === '' ? 'set VRAM_OOM_SNAPSHOT=oom.json to have a snapshot written'
    : existsSync(path) ? `snapshot written to ${path}: run 'vram view ${path}'` : `no snapshot at ${path}`);
} finally {
  for (const buffer of [...cache, ...weights]) buffer.free();
  history.stop();
  setCurrentResource(0, previous);
  limited.destroy();
  pool.destroy();
}
