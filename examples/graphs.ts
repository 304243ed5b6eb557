/**
 * The README's "CUDA graphs" example, word for word below the header: a step captured once and
 * launched again for the cost of one call. test/package/examples.test.ts checks the README shows this file
 * and runs it on the selected backend.
 */
import assert from 'node:assert/strict';
import { DeviceArray, Stream } from '../src/index.js';
import { captureGraph } from '../src/public/graphs.js';
import { map, zipWith } from '../src/public/kernels.js';

const n = 1 << 16;
using stream = Stream.create();
using x = DeviceArray.from(Float32Array.from({ length: n }, (_, i) => i % 7), { stream });
using y = DeviceArray.zeros([n], 'float32', { stream });

// Recorded, not run: every kernel, copy and fill queued on `stream`, and the arrays allocated meanwhile
// (from a pool private to the graph, so eager work never gets memory the graph writes).
using graph = captureGraph(stream, () => {
  using t = map(x, 'x * x', { stream });     // a temporary, freed inside the step
  zipWith(t, x, 'x + y', { out: y, stream }); // y = x² + x
});
using step = graph.instantiate();
for (let i = 0; i < 10; i++) step.launch(stream); // the whole step, one call each
const got = await y.toHostAsync({ stream });
assert.equal(got[3], 3 * 3 + 3);
console.log(`${graph.nodeCount} nodes, one launch call each: y[3] = ${got[3]}`);
