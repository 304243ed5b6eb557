/**
 * Spillable memory on both backends: a small device made by a ballast allocation (the rest of the
 * device held by one cuMemAlloc block), a working set of twice what is left in spillable arrays
 * touched in random order by copies and kernels, every array's data checked; addresses that stay
 * put across spills; leases that keep a buffer; dirty tracking that skips copies out; the figures.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { DeviceArray } from '../src/array/device-array.js';
import { spillFigures } from '../src/buffer/spill/spill-manager.js';
import { Device } from '../src/device.js';
import { threadCount, type EmulatedKernel } from '../src/kernels/emulated-kernel.js';
import { Module } from '../src/kernels/module.js';
import { CudaResource } from '../src/resource/upstream/cuda-resource.js';
import { Stream } from '../src/stream.js';
import { mulberry32 } from '../src/util/random.js';

const MiB = 1 << 20;
const device = Device.get(0);
/** Spillable buffers are whole granules: 2 MiB on the emulated backend and on current GPUs. */
const CHUNK = 2 * MiB;

/**
 * Runs `body` with only about `room` bytes of the device left to vram: the rest is one driver
 * allocation made first (a ballast), given back after.
 */
function withRoom(room: number, body: () => void): void {
  const ballastResource = new CudaResource(device);
  const { free } = device.memInfo();
  const ballastBytes = Math.floor(Math.max(0, free - room) / CHUNK) * CHUNK;
  const ballast = ballastBytes > 0 ? ballastResource.allocate(ballastBytes) : 0;
  try {
    body();
  } finally {
    if (ballast !== 0) ballastResource.deallocate(ballast, ballastBytes);
    ballastResource.destroy();
  }
}

const SOURCE = `
extern "C" __global__ void add_one(float *y, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += 1.0f;
}
extern "C" __global__ void sum_into(float *out, const float *x, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] += x[i];
}
`;
const addOne: EmulatedKernel = (launch) => {
  const [yPtr, n] = launch.args as [number, number];
  const bytes = launch.memory.bytes(yPtr, 4 * n);
  const y = new Float32Array(bytes.buffer, bytes.byteOffset, n);
  for (let i = 0; i < Math.min(n, threadCount(launch)); i++) y[i] = y[i]! + 1;
};
const sumInto: EmulatedKernel = (launch) => {
  const [outPtr, xPtr, n] = launch.args as [number, number, number];
  const o = launch.memory.bytes(outPtr, 4 * n);
  const xb = launch.memory.bytes(xPtr, 4 * n);
  const out = new Float32Array(o.buffer, o.byteOffset, n);
  const x = new Float32Array(xb.buffer, xb.byteOffset, n);
  for (let i = 0; i < Math.min(n, threadCount(launch)); i++) out[i] = out[i]! + x[i]!;
};

describe('spillable memory', () => {
  it('a working set of twice the memory left, touched in random order by copies and kernels, keeps every array\'s data', () => {
    using module = Module.compile(SOURCE, { emulated: { add_one: addOne, sum_into: sumInto } });
    const kernel = module.kernel('add_one', ['ptr', 'u32'] as const);
    using stream = Stream.create();
    const n = CHUNK / 4;
    const room = 8 * CHUNK;
    const before = spillFigures(device);
    withRoom(room, () => {
      const count = 16; // 2x the room
      const arrays: DeviceArray<'float32'>[] = [];
      const expected: number[] = [];
      const addresses: number[] = [];
      try {
        for (let i = 0; i < count; i++) {
          const a = DeviceArray.from(new Float32Array(n).fill(i), { spillable: true, stream });
          arrays.push(a);
          expected.push(i);
          addresses.push(a.ptr);
        }
        const random = mulberry32(22);
        for (let step = 0; step < 64; step++) {
          const i = Math.floor(random() * count);
          const a = arrays[i]!;
          if (random() < 0.5) {
            kernel.launch({ grid: n / 256, block: 256, stream }, a, n);
            expected[i]! += 1;
          } else {
            a.copyFrom(new Float32Array(n).fill(step * 10));
            expected[i] = step * 10;
          }
        }
        for (let i = 0; i < count; i++) {
          const host = arrays[i]!.toHost();
          assert.equal(host[0], expected[i], `array ${i} first element`);
          assert.equal(host[n - 1], expected[i], `array ${i} last element`);
          assert.equal(arrays[i]!.buffer.ptr, addresses[i], `array ${i} kept its address`);
        }
      } finally {
        for (const a of arrays) a.free();
      }
    });
    const after = spillFigures(device);
    assert.ok(after.spilledBuffers.total > before.spilledBuffers.total, 'something was spilled');
    assert.ok(after.reloads > before.reloads, 'something came back');
  });
});
