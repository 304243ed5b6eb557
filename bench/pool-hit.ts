/**
 * Micro-benchmark: median nanoseconds per allocate+free pair on a pool hit, at 256 B, 1 MiB and
 * 64 MiB, for PoolResource (virtual memory growth). `node dist/bench/pool-hit.js`
 */
import { Device } from '../src/device.js';
import { PoolResource } from '../src/memory/pool.js';

const sizes: Array<[string, number]> = [['256 B', 256], ['1 MiB', 1 << 20], ['64 MiB', 64 << 20]];
const pool = new PoolResource();
Device.get(0).makeCurrent();
// A few live blocks around, so the heap is not trivially empty.
const keep = [1000, 5000, 300_000, 3 << 20].map((n) => [pool.allocate(n), n] as const);
const stream = { handle: 0 };
for (const [label, bytes] of sizes) {
  pool.deallocate(pool.allocate(bytes, stream), bytes, stream); // warm: maps the pages
  const iterations = 200_000;
  const samples: number[] = [];
  for (let round = 0; round < 15; round++) {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < iterations; i++) pool.deallocate(pool.allocate(bytes, stream), bytes, stream);
    samples.push(Number(process.hrtime.bigint() - t0) / iterations);
  }
  samples.sort((a, b) => a - b);
  console.log(`pool hit ${label.padStart(6)}: ${samples[7]!.toFixed(1)} ns per allocate+free pair (median of 15 rounds)`);
}
for (const [p, n] of keep) pool.deallocate(p, n);
pool.destroy();
