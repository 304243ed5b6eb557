/**
 * The README's "Kernels" example, word for word below the header: CUDA C of your own (with the JavaScript the
 * emulated backend runs in its place), then the built-in operations. test/package/examples.test.ts checks the README
 * shows this file and runs it on the selected backend.
 */
import assert from 'node:assert/strict';
import { DeviceArray, sum } from '../src/index.js';
import { Module, elementwise, threadCount, zipWith } from '../src/public/kernels.js';

const n = 1000;
using x = DeviceArray.from(Float32Array.from({ length: n }, (_, i) => i));
using y = DeviceArray.full([n], 1, 'float32');
using z = DeviceArray.emptyLike(y);

// CUDA C, compiled by NVRTC for this GPU. The emulated backend cannot run CUDA C: it runs the JavaScript
// given for each kernel instead, in stream order (optional on a GPU, where it is never called).
using module = Module.compile(`
  extern "C" __global__ void saxpy(float a, const float *x, float *y, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
  }`, {
  emulated: {
    saxpy: (launch) => {
      const [a, xs, ys, count] = launch.args as [number, number, number, number];
      const floats = (ptr: number) => {
        const bytes = launch.memory.bytes(ptr, 4 * count);
        return new Float32Array(bytes.buffer, bytes.byteOffset, count);
      };
      const [xv, yv] = [floats(xs), floats(ys)];
      for (let i = 0; i < Math.min(count, threadCount(launch)); i++) yv[i] = Math.fround(a * xv[i]! + yv[i]!);
    },
  },
});
const saxpy = module.kernel('saxpy', ['f32', 'ptr', 'ptr', 'u32']);
saxpy.launch({ grid: Math.ceil(n / 256), block: 256 }, 2.0, x, y, n);   // y = 2x + 1

elementwise('z = a * x + y', { x, y, z, a: 2.0 });     // PyCUDA's ElementwiseKernel, parsed by vram: z = 4x + 1
using pairs = zipWith(x, y, 'x + y');                   // a new DeviceArray: 3x + 1
assert.equal(sum(y), n * (n - 1) + n);                  // a number; waits for that stream only
assert.equal(sum(z), 2 * n * (n - 1) + n);
console.log(`sum(x + y) = ${sum(pairs)}`);              // 1499500
