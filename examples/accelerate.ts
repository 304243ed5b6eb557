/**
 * Accelerate's question, end to end: C code allocates 32 floats with cuMemAlloc in the primary
 * context, fills them 0..31 with cuMemcpyHtoD and hands over the CUdeviceptr; vram wraps it as a
 * DeviceArray without copying, computes `sum` (496) and `zipWith(+)` with [0, 2, .., 62]
 * (0, 3, 6, ..), hands it back, and the C side frees it.
 *
 *   node dist/examples/accelerate.js [path/to/libaccelerate.so]
 *
 * With the library's path (examples/native/accelerate.c built with nvcc, as
 * test/kernels/kernels-examples.test.ts does on a GPU machine), the C side is that compiled C, called
 * through koffi. Without it (the emulated backend, where there is no libcuda for C to call) the
 * same role is played by memory allocated through the backend directly: cuMemAlloc and
 * cuMemcpyHtoD in the primary context, as the C does.
 */
import assert from 'node:assert/strict';
import koffi from 'koffi';
import { Device, DeviceArray, sum } from '../src/index.js';
import { zipWith } from '../src/public/kernels.js';

/** What the C library offers: a CUdeviceptr of `count` floats 0..count-1, and freeing it. */
interface ForeignLibrary {
  readonly name: string;
  alloc(count: number): number;
  free(ptr: number): void;
}

/** The compiled C (examples/native/accelerate.c), through koffi. */
function nativeLibrary(path: string): ForeignLibrary {
  const lib = koffi.load(path);
  const alloc = lib.func('uint64_t accelerate_alloc(int count, _Out_ int *status)') as (count: number, status: number[]) => bigint;
  const release = lib.func('int accelerate_free(uint64_t ptr)') as (ptr: number) => number;
  return {
    name: `C (${path})`,
    alloc(count) {
      const status = [0];
      const ptr = alloc(count, status);
      if (status[0] !== 0) throw new Error(`accelerate_alloc failed: CUresult ${status[0]}`);
      return Number(ptr);
    },
    free(ptr) {
      const r = release(ptr);
      if (r !== 0) throw new Error(`accelerate_free failed: CUresult ${r}`);
    },
  };
}

/** The same calls made through the backend: cuMemAlloc and cuMemcpyHtoD in the primary context. */
function backendLibrary(device: Device): ForeignLibrary {
  const backend = device.backend;
  return {
    name: `${backend.name} backend, primary context`,
    alloc(count) {
      backend.contextSetCurrent(device.context);
      const ptr = backend.memAlloc(4 * count);
      const values = Float32Array.from({ length: count }, (_, i) => i);
      backend.memcpyFromHost(ptr, values, values.byteLength);
      return ptr;
    },
    free(ptr) {
      backend.contextSetCurrent(device.context);
      backend.memFree(ptr);
    },
  };
}

const device = Device.get(0);
const libraryPath = process.argv[2];
const c = libraryPath !== undefined ? nativeLibrary(libraryPath) : backendLibrary(device);
const ptr = c.alloc(32);
console.log(`${c.name} handed over CUdeviceptr 0x${ptr.toString(16)}`);

let handedBack = false;
{
  // No copy: the driver is asked what the pointer is; vram never frees it.
  using xs = DeviceArray.fromPointer(ptr, [32], 'float32', { onRelease: () => { handedBack = true; } });
  assert.equal(xs.ptr, ptr);

  const total = sum(xs);
  console.log(`sum: ${total}`);
  assert.equal(total, 496);

  using evens = DeviceArray.from(Float32Array.from({ length: 32 }, (_, i) => 2 * i));
  using zipped = zipWith(xs, evens, 'x + y');
  const values = Array.from(zipped.toHost() as Float32Array); // zipWith's result has a's dtype, float32
  console.log(`zipWith(+): ${values.slice(0, 6).join(' ')} .. ${values[31]}`);
  assert.deepEqual(values, Array.from({ length: 32 }, (_, i) => 3 * i));
}
assert.equal(handedBack, true);
c.free(ptr);
console.log('handed back; the C side freed it');
