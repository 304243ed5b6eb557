/**
 * CUDA graphs on both backends: capture, instantiate, launch, update, destroy; what a capture
 * refuses (before the driver, so the capture stays valid) and that the stream is usable after.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DeviceArray } from '../src/array/device-array.js';
import { captureGraph } from '../src/graph/capture.js';
import { threadCount, type EmulatedKernel } from '../src/kernels/emulated-kernel.js';
import { Module } from '../src/kernels/module.js';
import { Stream } from '../src/stream.js';

const SOURCE = `
extern "C" __global__ void axpb(float *y, const float *x, float a, float b, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + b;
}
`;

const axpb: EmulatedKernel = (launch) => {
  const [yPtr, xPtr, a, b, n] = launch.args as [number, number, number, number, number];
  const yb = launch.memory.bytes(yPtr, 4 * n);
  const xb = launch.memory.bytes(xPtr, 4 * n);
  const y = new Float32Array(yb.buffer, yb.byteOffset, n);
  const x = new Float32Array(xb.buffer, xb.byteOffset, n);
  for (let i = 0; i < Math.min(n, threadCount(launch)); i++) y[i] = Math.fround(Math.fround(a * x[i]!) + b);
};

const AXPB = ['ptr', 'cptr', 'f32', 'f32', 'u32'] as const;

test('a captured kernel runs only when the graph is launched, and at every launch', async () => {
  using m = Module.compile(SOURCE, { emulated: { axpb } });
  const kernel = m.kernel('axpb', AXPB);
  using stream = Stream.create();
  const n = 1000;
  using x = DeviceArray.from(Float32Array.from({ length: n }, (_, i) => i), { stream });
  using y = DeviceArray.zeros([n], 'float32', { stream });
  await stream.synchronized();
  using graph = captureGraph(stream, () => {
    kernel.launch({ grid: Math.ceil(n / 256), block: 256, stream }, y, x, 2, 1, n);
    kernel.launch({ grid: Math.ceil(n / 256), block: 256, stream }, x, y, 1, 0, n);
  });
  assert.equal(graph.nodeCount, 2);
  assert.equal(stream.captureStatus, 'none');
  assert.deepEqual(Array.from((await x.toHostAsync({ stream })).slice(0, 3)), [0, 1, 2], 'nothing ran at capture');
  using exec = graph.instantiate();
  exec.launch(stream).launch(stream);
  const got = await x.toHostAsync({ stream });
  for (let i = 0; i < n; i++) assert.equal(got[i], (i * 2 + 1) * 2 + 1);
});
