/**
 * User kernels on both backends: the same CUDA source and JavaScript implementations, launched
 * through one checked path; bad launches refused before the driver; occupancy; lifetimes.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DeviceArray } from '../../src/array/device-array.js';
import { HostArray } from '../../src/array/host-array.js';
import { paramLayout } from '../../src/backend/param-layout.js';
import { Device } from '../../src/device.js';
import { CudaError, CUresult, NotSupportedError, UseAfterFreeError } from '../../src/errors.js';
import { threadCount } from '../../src/kernels/emulated-kernel.js';
import { type EmulatedKernel } from '../../src/backend/backend.js';
import { Module } from '../../src/kernels/module.js';
import { Stream } from '../../src/stream.js';
import { forceGc, needsGc, onGpu } from '../helpers.js';

const SOURCE = `
struct Affine { float scale; double offset; int shift; };

extern "C" __global__ void saxpy(float *y, const float *x, float a, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

extern "C" __global__ void affine(double *out, Affine p, long long big, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = p.scale * i + p.offset + p.shift + (double)big;
}
`;

/** A typed view of emulated memory (byteOffset honoured). */
function floats<T extends Float32Array | Float64Array>(Type: new (b: ArrayBufferLike, o: number, n: number) => T, bytes: Uint8Array, n: number): T {
  return new Type(bytes.buffer, bytes.byteOffset, n);
}

const saxpy: EmulatedKernel = (launch) => {
  const [yPtr, xPtr, a, n] = launch.args as [number, number, number, number];
  const y = floats(Float32Array, launch.memory.bytes(yPtr, 4 * n), n);
  const x = floats(Float32Array, launch.memory.bytes(xPtr, 4 * n), n);
  const count = Math.min(n, threadCount(launch));
  for (let i = 0; i < count; i++) y[i] = Math.fround(Math.fround(a * x[i]!) + y[i]!);
};

const affine: EmulatedKernel = (launch) => {
  const [outPtr, p, big, n] = launch.args as [number, readonly number[], number, number];
  const out = floats(Float64Array, launch.memory.bytes(outPtr, 8 * n), n);
  const [scale, offset, shift] = p as [number, number, number];
  for (let i = 0; i < Math.min(n, threadCount(launch)); i++) out[i] = Math.fround(scale * i) + offset + shift + big;
};

function compile(): Module {
  return Module.compile(SOURCE, { emulated: { saxpy, affine } });
}

const SAXPY = ['ptr', 'ptr', 'f32', 'u32'] as const;

test('saxpy: a launch on the default stream, read back by a synchronous copy', () => {
  using m = compile();
  const kernel = m.kernel('saxpy', SAXPY);
  const n = 1025; // not a multiple of the block size
  const xs = Float32Array.from({ length: n }, (_, i) => i * 0.5 + 1);
  const ys = Float32Array.from({ length: n }, (_, i) => 3 - i);
  using x = DeviceArray.from(xs);
  using y = DeviceArray.from(ys);
  kernel.launch({ grid: Math.ceil(n / 256), block: 256 }, y, x, 2, n);
  const got = y.toHost();
  for (let i = 0; i < n; i++) assert.equal(got[i], Math.fround(Math.fround(2 * xs[i]!) + ys[i]!), `element ${i}`);
});

test("a launch on a stream runs in that stream's order: a later copy on it sees the result", async () => {
  using m = compile();
  const kernel = m.kernel('saxpy', SAXPY);
  using stream = Stream.create();
  using x = DeviceArray.from(new Float32Array([1, 2, 3, 4]), { stream });
  using y = DeviceArray.from(new Float32Array([10, 20, 30, 40]), { stream });
  kernel.launch({ grid: 1, block: 32, stream }, y, x, 10, 4);
  kernel.launch({ grid: 1, block: 32, stream }, y, x, -1, 4); // in order: (y + 10x) - x
  assert.deepEqual(Array.from(await y.toHostAsync({ stream })), [19, 38, 57, 76]);
});

test('a struct by value, a 64-bit integer (number and bigint) and a double result', () => {
  using m = compile();
  const kernel = m.kernel('affine', ['ptr', { struct: ['f32', 'f64', 'i32'] }, 'i64', 'u32'] as const);
  const n = 31;
  using out = DeviceArray.zeros([n], 'float64');
  kernel.launch({ grid: 1, block: 64 }, out, [0.5, 0.25, -3], 2 ** 40, n);
  let got = out.toHost();
  for (let i = 0; i < n; i++) assert.equal(got[i], 0.5 * i + 0.25 - 3 + 2 ** 40);
  kernel.launch({ grid: 1, block: 64 }, out, [1, 0, 0], -7n, n);
  got = out.toHost();
  for (let i = 0; i < n; i++) assert.equal(got[i], i - 7);
});

test('the parameter layout follows C: a struct of float, double, int is 24 bytes aligned to 8', () => {
  const { slots, bytes } = paramLayout(['ptr', { struct: ['f32', 'f64', 'i32'] }, 'i64', 'u32', 'u8']);
  assert.deepEqual(
    slots.map((s) => [s.offset, s.bytes, s.align]),
    [
      [0, 8, 8],
      [8, 24, 8],
      [32, 8, 8],
      [40, 4, 4],
      [44, 1, 1],
    ],
  );
  assert.deepEqual(slots[1]!.memberOffsets, [0, 8, 16]);
  assert.equal(bytes, 48);
});

test('a kernel reads and writes mapped host memory in place (HostArray argument)', () => {
  using m = compile();
  const kernel = m.kernel('saxpy', SAXPY);
  using x = HostArray.from(new Float32Array([1, 2, 3]), { mapped: true });
  using y = HostArray.from(new Float32Array([1, 1, 1]), { mapped: true });
  kernel.launch({ grid: 1, block: 32 }, y, x, 3, 3);
  Device.get(0).synchronize();
  assert.deepEqual(Array.from(y.data), [4, 7, 10]);
});

test('bad arguments are refused before the launch: count, kinds, ranges', () => {
  using m = compile();
  const kernel = m.kernel('saxpy', SAXPY);
  using x = DeviceArray.from(new Float32Array(4));
  const launch = kernel.launch.bind(kernel) as (config: unknown, ...args: unknown[]) => void;
  assert.throws(
    () => launch({ grid: 1, block: 32 }, x, x, 1),
    (e: unknown) => e instanceof TypeError && /takes 4 argument/.test(e.message),
  );
  assert.throws(() => launch({ grid: 1, block: 32 }, x, x, 1, 4, 5), TypeError);
  assert.throws(
    () => launch({ grid: 1, block: 32 }, 'x', x, 1, 4),
    (e: unknown) => e instanceof TypeError && /saxpy: argument 0/.test(e.message),
  );
  assert.throws(() => launch({ grid: 1, block: 32 }, x, x, '1', 4), TypeError);
  assert.throws(() => launch({ grid: 1, block: 32 }, x, x, 1, -1), RangeError);
  assert.throws(() => launch({ grid: 1, block: 32 }, x, x, 1, 2 ** 32), RangeError);
  assert.throws(() => launch({ grid: 1, block: 32 }, x, x, 1, 1.5), RangeError);
  using host = HostArray.from(new Float32Array(4));
  assert.throws(
    () => launch({ grid: 1, block: 32 }, host, x, 1, 4),
    (e: unknown) => e instanceof TypeError && /not mapped/.test(e.message),
  );
  const freed = DeviceArray.from(new Float32Array(4));
  freed.free();
  assert.throws(() => launch({ grid: 1, block: 32 }, freed, x, 1, 4), UseAfterFreeError);
});

test('bad grids and blocks are RangeErrors naming the kernel, before the driver', () => {
  using m = compile();
  const kernel = m.kernel('saxpy', SAXPY);
  using x = DeviceArray.from(new Float32Array(4));
  const limits = Device.get(0).backend.kernelLimits(0);
  const bad: unknown[] = [
    { grid: 0, block: 32 },
    { grid: [1, 0], block: 32 },
    { grid: limits.maxGridDim[0] + 1, block: 32 },
    { grid: [1, limits.maxGridDim[1] + 1], block: 32 },
    { grid: 1, block: 0 },
    { grid: 1, block: [32, 32, limits.maxBlockDim[2] + 1] },
    { grid: 1, block: [1024, 2] },
    { grid: 1.5, block: 32 },
    { grid: 1, block: 32, sharedBytes: -1 },
    { grid: 1, block: 32, sharedBytes: 1 << 30 },
  ];
  for (const config of bad) {
    assert.throws(
      () => kernel.launch(config as never, x, x, 1, 4),
      (e: unknown) => e instanceof RangeError && /kernel saxpy/.test(e.message),
      JSON.stringify(config),
    );
  }
  assert.throws(() => kernel.launch({ grid: '1', block: 32 } as never, x, x, 1, 4), TypeError);
  assert.throws(() => kernel.launch({ grid: [], block: 32 } as never, x, x, 1, 4), TypeError);
});

test('occupancy: a suggested block size the kernel can run, and blocks that fit per multiprocessor', () => {
  using m = compile();
  const kernel = m.kernel('saxpy', SAXPY);
  const { blockSize, minGridSize } = kernel.suggestedBlockSize();
  assert.ok(blockSize >= 32 && blockSize <= kernel.attributes.maxThreadsPerBlock && blockSize % 32 === 0, `blockSize ${blockSize}`);
  assert.ok(minGridSize >= Device.get(0).info.multiprocessorCount, `minGridSize ${minGridSize}`);
  const blocks = kernel.maxActiveBlocksPerMultiprocessor(blockSize);
  assert.ok(blocks >= 1, `blocks ${blocks}`);
  assert.ok(kernel.maxActiveBlocksPerMultiprocessor(32) >= blocks);
  assert.throws(() => kernel.maxActiveBlocksPerMultiprocessor(0), RangeError);
  assert.throws(() => kernel.maxActiveBlocksPerMultiprocessor(kernel.attributes.maxThreadsPerBlock + 1), RangeError);
  assert.throws(() => kernel.suggestedBlockSize(-1), RangeError);
  assert.ok(kernel.attributes.numRegs > 0);
});

test("a destroyed module's kernels cannot be launched or made", () => {
  const m = compile();
  const kernel = m.kernel('saxpy', SAXPY);
  m.destroy();
  assert.equal(m.destroyed, true);
  using x = DeviceArray.from(new Float32Array(4));
  assert.throws(() => kernel.launch({ grid: 1, block: 32 }, x, x, 1, 4), UseAfterFreeError);
  assert.throws(() => m.kernel('saxpy', SAXPY), UseAfterFreeError);
  assert.throws(() => m.destroy(), UseAfterFreeError);
});

test('bad signatures and options are TypeErrors', () => {
  using m = compile();
  assert.throws(() => m.kernel('saxpy', ['ptr', 'float'] as never), TypeError);
  assert.throws(() => m.kernel('saxpy', [{ struct: [] }] as never), TypeError);
  assert.throws(() => Module.compile(''), TypeError);
  assert.throws(() => Module.compile(SOURCE, { options: ['-DN', 3] as never }), TypeError);
  assert.throws(() => Module.compile(SOURCE, { headers: { 'a.h': 1 } as never }), TypeError);
  assert.throws(() => Module.compile(SOURCE, { emulated: { saxpy: 1 } as never }), TypeError);
});

test(
  'emulated: a kernel with no JavaScript implementation is NotSupportedError saying how to give one',
  { skip: onGpu ? 'emulation only: on a GPU the CUDA code runs' : false },
  () => {
    using m = Module.compile(SOURCE, { emulated: { saxpy } });
    assert.throws(
      () => m.kernel('affine', ['ptr', { struct: ['f32', 'f64', 'i32'] }, 'i64', 'u32']),
      (e: unknown) => e instanceof NotSupportedError && /runs JavaScript in place of CUDA code/.test(e.message) && /emulated: \{ 'affine'/.test(e.message),
    );
  },
);

test(
  'emulated: a kernel reading outside its memory faults with CUDA_ERROR_ILLEGAL_ADDRESS at the next synchronisation',
  { skip: onGpu ? 'emulation only: a real fault would end the context' : false },
  () => {
    using m = compile();
    const kernel = m.kernel('saxpy', SAXPY);
    using x = DeviceArray.from(new Float32Array(4));
    using y = DeviceArray.from(new Float32Array(4));
    kernel.launch({ grid: 1, block: 32 }, 64, x, 1, 4); // y: an address in no allocation
    assert.throws(
      () => Device.get(0).synchronize(),
      (e: unknown) => e instanceof CudaError && e.code === CUresult.ILLEGAL_ADDRESS && /saxpy/.test(e.message),
    );
    // The stream is usable afterwards.
    kernel.launch({ grid: 1, block: 32 }, y, x, 1, 4);
    Device.get(0).synchronize();
  },
);

test(
  'emulated: a kernel whose JavaScript throws is CUDA_ERROR_LAUNCH_FAILED naming it, with the error as cause',
  { skip: onGpu ? 'emulation only' : false },
  () => {
    const boom = new Error('boom');
    using m = Module.compile('extern "C" __global__ void k() {}', {
      emulated: {
        k: () => {
          throw boom;
        },
      },
    });
    m.kernel('k', []).launch({ grid: 1, block: 1 });
    assert.throws(
      () => Device.get(0).synchronize(),
      (e: unknown) => e instanceof CudaError && e.code === CUresult.LAUNCH_FAILED && /kernel k/.test(e.message) && e.cause === boom,
    );
  },
);

test('a module dropped without destroy() is unloaded by the backstop once no kernel of it is reachable', needsGc, async () => {
  const collect = forceGc!;
  const backend = Device.get(0).backend;
  const unloaded: number[] = [];
  const original = backend.moduleUnload;
  backend.moduleUnload = (module) => {
    unloaded.push(module);
    original.call(backend, module);
  };
  const settle = async (until: () => boolean): Promise<void> => {
    for (let i = 0; i < 50 && !until(); i++) {
      collect();
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  };
  try {
    let kernel: ReturnType<Module['kernel']> | undefined = (() => compile().kernel('saxpy', SAXPY))();
    await settle(() => false);
    assert.deepEqual(unloaded, [], 'a reachable kernel keeps its module loaded');
    using x = DeviceArray.from(new Float32Array([1]));
    (kernel.launch as (config: unknown, ...args: unknown[]) => void)({ grid: 1, block: 32 }, x, x, 1, 1);
    Device.get(0).synchronize();
    kernel = undefined;
    await settle(() => unloaded.length > 0);
    assert.equal(unloaded.length, 1, 'unloaded once the last kernel was dropped');
  } finally {
    backend.moduleUnload = original;
  }
});
