/**
 * `axpb` (y = a * x + b over float32), in CUDA C with its JavaScript twin for the emulated
 * backend: the user kernel of bench/graph.ts and test/graphs/graph.test.ts.
 */
import { threadCount } from '../src/kernels/emulated-kernel.js';
import { type EmulatedKernel } from '../src/backend/backend.js';

/** The CUDA C of `axpb` (and `empty`, the launch benchmark's kernel). */
export const AXPB_SOURCE = `
extern "C" __global__ void empty() {}
extern "C" __global__ void axpb(float *y, const float *x, float a, float b, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + b;
}
`;

/** Its signature. */
export const AXPB = ['ptr', 'cptr', 'f32', 'f32', 'u32'] as const;

/** What the emulated backend runs for `axpb`. */
export const axpb: EmulatedKernel = (launch) => {
  const [yPtr, xPtr, a, b, n] = launch.args as [number, number, number, number, number];
  const yb = launch.memory.bytes(yPtr, 4 * n);
  const xb = launch.memory.bytes(xPtr, 4 * n);
  const y = new Float32Array(yb.buffer, yb.byteOffset, n);
  const x = new Float32Array(xb.buffer, xb.byteOffset, n);
  for (let i = 0; i < Math.min(n, threadCount(launch)); i++) y[i] = Math.fround(Math.fround(a * x[i]!) + b);
};
