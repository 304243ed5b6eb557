// The emulated kernels' typed-array paths (generated JavaScript over typed arrays) against their
// DataView paths, byte for byte: each kernel is run twice over the same bytes, once from memory
// aligned to its components (the typed path) and once shifted by one byte (where typed arrays
// cannot view it, so the DataView path runs). Then EmulatedMemory's access promises.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { dtypes, type ScalarName } from '../../src/array/dtype.js';
import type { EmulatedKernel, EmulatedMemory } from '../../src/backend/backend.js';
import { elementwiseProgram, type ProgramOperand } from '../../src/kernels/ops/elementwise-program.js';
import { parseStatements } from '../../src/kernels/ops/expression.js';
import { packLayout } from '../../src/kernels/ops/kernel-layout.js';
import { reductionEmulated, reduceKernelName, REDUCE_DTYPES, REDUCE_OPS } from '../../src/kernels/ops/reduction-kernels.js';
import { basicEmulated } from '../../src/kernels/ops/basic-kernels.js';
import { kernelScalar, kernelScalars } from '../../src/kernels/ops/scalar.js';
import { mulberry32 } from '../../src/util/random.js';
import { DeviceArray } from '../../src/array/device-array.js';
import { Module } from '../../src/kernels/module.js';
import { Device } from '../../src/device.js';
import { onGpu } from '../helpers.js';

const SIZE = 1 << 16;

/** Memory of SIZE bytes at addresses [0, SIZE), viewed `shift` bytes into a buffer. */
function memoryOf(bytes: Uint8Array, shift: number): { memory: EmulatedMemory; read: () => Uint8Array } {
  const backing = new Uint8Array(SIZE + 16);
  backing.set(bytes, shift);
  return {
    memory: { bytes: (ptr, length) => backing.subarray(shift + ptr, shift + ptr + length) },
    read: () => backing.slice(shift, shift + SIZE),
  };
}

/** Runs a kernel over `bytes` on both paths; asserts they wrote the same and returns what they wrote. */
function bothPaths(kernel: EmulatedKernel, bytes: Uint8Array, args: (number | number[])[], grid = 4, block = 256, what = ''): Uint8Array {
  const out = [0, 1].map((shift) => {
    const m = memoryOf(bytes, shift);
    kernel({ grid: [grid, 1, 1], block: [block, 1, 1], sharedBytes: 0, args, memory: m.memory });
    return m.read();
  });
  assert.deepEqual(out[0], out[1], `typed and DataView paths differ ${what}`);
  return out[0]!;
}

/** Random bytes with, for float dtypes, NaNs, infinities, signed zeros and large values mixed in. */
function randomBytes(seed: number): Uint8Array {
  const random = mulberry32(seed);
  const bytes = new Uint8Array(SIZE);
  for (let i = 0; i < SIZE; i++) bytes[i] = Math.floor(random() * 256);
  const f = new Float32Array(bytes.buffer, 0, SIZE / 8);
  for (let i = 0; i < f.length; i += 7) f[i] = [NaN, -0, 0, Infinity, -Infinity, 3e38, -1.5, 2 ** 31][i % 8]!;
  return bytes;
}

const SCALARS = kernelScalars as readonly ScalarName[];

test('elementwise: the generated typed-array loop writes what the DataView interpreter writes, for every dtype pair and layout', () => {
  let seed = 1;
  for (const xd of SCALARS) {
    for (const zd of SCALARS) {
      const operands: ProgramOperand[] = [
        { name: 'x', kind: 'array', dtype: dtypes[xd] },
        { name: 'y', kind: 'array', dtype: dtypes.float32 },
        { name: 'z', kind: 'array', dtype: dtypes[zd] },
        { name: 'a', kind: 'scalar' },
      ];
      const text = 'z = x * a + (y > 0 ? sqrt(abs(y)) : -y) - x % 3; z = z + min(x, y)';
      const p = elementwiseProgram(text, parseStatements(text), operands);
      const n = 200;
      // Arrays sorted by name: x, y, z; x contiguous, y reversed, z two-dimensional and transposed.
      const args = [n, 0, packLayout([n], [1]), 8192 + 4 * (n - 1), packLayout([n], [-1]), 16384, packLayout([20, 10], [1, 20]), 2.5];
      bothPaths(p.emulated, randomBytes(seed++), args, 1, 1, `for ${xd} -> ${zd}`);
    }
  }
});

test('elementwise: vector dtypes and a component written alone keep the others (typed and DataView paths alike)', () => {
  const operands: ProgramOperand[] = [
    { name: 'p', kind: 'array', dtype: dtypes.float3 },
    { name: 'q', kind: 'array', dtype: dtypes.float32 },
  ];
  const text = 'p.y = p.x + p.z * q';
  const p = elementwiseProgram(text, parseStatements(text), operands);
  const bytes = randomBytes(7);
  const written = bothPaths(p.emulated, bytes, [100, 0, packLayout([100], [1]), 4096, packLayout([100], [1])], 1, 1);
  const before = new Float32Array(bytes.buffer, 0, 300);
  const after = new Float32Array(written.buffer, 0, 300);
  for (let i = 0; i < 100; i++) {
    assert.ok(Object.is(after[3 * i], before[3 * i]) && Object.is(after[3 * i + 2], before[3 * i + 2]), `element ${i}: x and z kept`);
  }
});

test('reductions: the typed thread loops and tree give the partials and rows the DataView loops give', () => {
  let seed = 100;
  for (const op of REDUCE_OPS) {
    for (const dtype of REDUCE_DTYPES) {
      const kernels = reductionEmulated(op, dtype);
      const main = kernels[reduceKernelName(op, dtype)]!;
      const k = 3000;
      const flat = packLayout([k], [1]);
      // Split mode (flat and 16-byte aligned at 0, so the chunked loop runs), then rows mode over a strided matrix.
      bothPaths(main, randomBytes(seed++), [0, flat, packLayout([], []), 24576, flat, 1, k, 1, 0, 49152], 3, 64, `${op} ${dtype} split`);
      bothPaths(
        main,
        randomBytes(seed++),
        [0, packLayout([100], [3]), packLayout([10], [300]), 24576, packLayout([100], [2]), 10, 100, 0, 49152, 0],
        4,
        64,
        `${op} ${dtype} rows`,
      );
    }
  }
});

test('fill and copy: the typed paths write what the DataView paths write, for every unit and layout', () => {
  const { vram_fill: fill, vram_copy: copy } = basicEmulated();
  let seed = 500;
  for (const unit of [1, 2, 4, 8]) {
    for (const units of [1, 3]) {
      const n = 100;
      for (const layout of [packLayout([n], [1]), packLayout([n], [-2]), packLayout([10, 10], [1, 10])]) {
        const dst = 8 * 3 * 2 * n;
        bothPaths(fill!, randomBytes(seed++), [dst, layout, n, unit, units, 0x02030405060708, 255, 7] as number[], 1, 1, `fill ${unit}x${units}`);
        bothPaths(copy!, randomBytes(seed++), [dst, layout, 0, packLayout([n], [1]), n, unit, units], 1, 1, `copy ${unit}x${units}`);
        bothPaths(copy!, randomBytes(seed++), [0, packLayout([n], [1]), dst, layout, n, unit, units], 1, 1, `copy back ${unit}x${units}`);
      }
    }
  }
  // Overlapping ranges copy element by element in order on both paths (one merged view).
  bothPaths(copy!, randomBytes(seed++), [4, packLayout([100], [1]), 0, packLayout([100], [1]), 100, 4, 1], 1, 1, 'overlapping copy');
});

test('every scalar dtype has a typed path the first test reached', () => {
  assert.equal(SCALARS.length, Object.keys(kernelScalar).length);
});

const ACCESS_SOURCE = 'extern "C" __global__ void touch(float* p, int mode) {}';

test(
  'EmulatedMemory access: a read range is not written back, a write range is not copied in, a kernel that throws keeps a write range as it was',
  { skip: onGpu ? 'emulation only' : false },
  () => {
    const device = Device.get(0);
    let mode: 'read' | 'write' | 'throw-write' | 'throw-readwrite' | 'bad' = 'read';
    let seen: number[] = [];
    const kernel: EmulatedKernel = (launch) => {
      const [ptr] = launch.args as [number];
      const access = mode === 'read' ? 'read' : mode === 'bad' ? ('sideways' as 'read') : mode === 'throw-readwrite' ? 'readwrite' : 'write';
      const bytes = launch.memory.bytes(ptr, 16, access);
      const f = new Float32Array(bytes.buffer, bytes.byteOffset, 4);
      seen = [...f];
      f.fill(9);
      if (mode.startsWith('throw')) throw new Error('the kernel failed');
    };
    using module = Module.compile(ACCESS_SOURCE, { emulated: { touch: kernel } });
    const fn = module.kernel('touch', ['ptr', 'i32'] as const);
    using a = DeviceArray.from(new Float32Array([1, 2, 3, 4]));
    const launch = (): void => {
      fn.launch({ grid: 1, block: 1 }, a, 0);
      device.synchronize();
    };
    launch();
    assert.deepEqual(seen, [1, 2, 3, 4]);
    assert.deepEqual([...a.toHost()], [1, 2, 3, 4], "'read': the kernel's writes are not written back");
    mode = 'write';
    launch();
    assert.deepEqual([...a.toHost()], [9, 9, 9, 9], "'write': written back");
    a.copyFrom(new Float32Array([1, 2, 3, 4]));
    mode = 'throw-write';
    assert.throws(launch, /the kernel failed/);
    assert.deepEqual([...a.toHost()], [1, 2, 3, 4], "'write' after a throw: as it was");
    mode = 'throw-readwrite';
    assert.throws(launch, /the kernel failed/);
    assert.deepEqual([...a.toHost()], [9, 9, 9, 9], "'readwrite' after a throw: what was written stays written");
    mode = 'bad';
    assert.throws(launch, /access must be 'read', 'write' or 'readwrite'/);
  },
);
