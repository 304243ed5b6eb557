/**
 * `npm run fuzz`: a million or more seeded random operations per allocator, checked against the
 * model in allocator-model.ts. Prints the seed of any failure so it can be replayed:
 *   node dist/test/fuzz/run.js --seed 1234 --ops 1000000 [--only Pool]
 */
import { parseArgs } from 'node:util';
import { FuzzFailure, factories, runModel } from './allocator-model.js';

const { values } = parseArgs({
  options: {
    seed: { type: 'string' },
    ops: { type: 'string', default: '1000000' },
    only: { type: 'string' },
    runs: { type: 'string', default: '4' },
  },
});
const ops = Number(values.ops);
const runs = values.seed !== undefined ? 1 : Number(values.runs);
if (!Number.isInteger(ops) || ops <= 0) throw new RangeError(`--ops must be a positive whole number, got ${values.ops}`);
let failures = 0;
for (const f of factories.filter((x) => values.only === undefined || x.name.includes(values.only))) {
  const t0 = performance.now();
  for (let r = 0; r < runs; r++) {
    const seed = values.seed !== undefined ? Number(values.seed) : (Math.random() * 2 ** 31) >>> 0;
    try {
      // Every invariant is checked after every step; a run of ops/runs operations per seed.
      runModel(f, { seed, ops: Math.ceil(ops / runs), maxLive: 256 });
    } catch (error) {
      failures++;
      if (error instanceof FuzzFailure) {
        console.error(`FAIL ${error.message}\n  replay: node dist/test/fuzz/run.js --only '${f.name}' --seed ${seed} --ops ${Math.ceil(ops / runs)}`);
      } else throw error;
    }
  }
  console.log(`${f.name}: ${ops} operations in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
}
if (failures > 0) {
  console.error(`${failures} failing run(s)`);
  process.exitCode = 1;
}
