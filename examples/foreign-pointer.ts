/**
 * A `CUdeviceptr` from C code, used as a DeviceArray without copying it and without freeing what
 * vram does not own (the question Accelerate's users ask). Runs on either backend:
 * `node dist/examples/foreign-pointer.js` (test/buffer/foreign-pointer-example.test.ts runs it in `npm test`).
 *
 * The "C library" below is what a native addon would do, written with the backend's own
 * primitives: on the cuda backend `memAlloc`, `memcpyFromHost`, `memFree`, `contextCreate` are
 * exactly cuMemAlloc, cuMemcpyHtoD, cuMemFree and cuCtxCreate; on the emulated backend they are
 * the emulated driver's own allocation and copy. Like many C libraries it works in a context of
 * its own, not the primary context vram uses, so vram has to run its copies in that context.
 */
import assert from 'node:assert/strict';
import { Device, DeviceArray, getBackend } from '../src/index.js';
import { ForeignDeviceBuffer } from '../src/public/interop.js';

const device = Device.get(0);
const backend = getBackend();

/** The C side: a context of its own, and a matrix it allocates, fills and frees itself. */
const cLibrary = {
  context: 0,
  init(): void {
    // cuCtxCreate(&ctx, 0, dev): the library's own context (it also becomes current).
    this.context = backend.contextCreate(device.ordinal, 0);
  },
  /** cuMemAlloc + cuMemcpyHtoD: returns the CUdeviceptr of a rows x cols float matrix, row-major. */
  makeMatrix(rows: number, cols: number): number {
    backend.contextSetCurrent(this.context);
    const ptr = backend.memAlloc(rows * cols * 4);
    const values = Float32Array.from({ length: rows * cols }, (_, i) => 10 * Math.floor(i / cols) + (i % cols));
    backend.memcpyFromHost(ptr, values, values.byteLength);
    return ptr;
  },
  /** cuMemFree, in the library's context. */
  freeMatrix(ptr: number): void {
    backend.contextSetCurrent(this.context);
    backend.memFree(ptr);
  },
  shutdown(): void {
    backend.contextDestroy(this.context);
  },
};

cLibrary.init();
const ptr = cLibrary.makeMatrix(3, 4);
device.makeCurrent(); // vram's own context (the primary) is current again, as in any vram program
console.log(`C handed over CUdeviceptr 0x${ptr.toString(16)}`);

// Wrap it: no copy. The driver is asked what the pointer is (cuPointerGetAttributes): device
// memory, in the C library's context, with [ptr, ptr + 48) inside its allocation.
let handedBack = false;
{
  using m = DeviceArray.fromPointer(ptr, [3, 4], 'float32', {
    // vram never frees it: this runs once, when the array is freed (here, at the end of the block).
    onRelease: () => {
      handedBack = true;
      console.log('vram is done with the matrix: handed back to C');
    },
  });
  const buffer = m.buffer as ForeignDeviceBuffer;
  assert.equal(m.ptr, ptr, 'the same memory, not a copy');
  assert.equal(buffer.context, cLibrary.context, 'the C library\'s context was recorded');
  assert.notEqual(buffer.context, device.context);

  // Reads (and writes) run in the memory's own context.
  const rows = m.toHost();
  console.log(`matrix: ${Array.from(rows).join(' ')}`);
  assert.deepEqual(Array.from(rows), [0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23]);
  const column = m.T.slice(1).toHost();
  console.log(`column 1: ${Array.from(column).join(' ')}`);
  assert.deepEqual(Array.from(column), [1, 11, 21]);
  m.slice(0).fill(-1); // vram writes the first row in place; C will see it
  assert.equal(handedBack, false);
}
assert.equal(handedBack, true);

// The C side still owns the memory and sees vram's write; it frees it itself, then its context.
const check = new Float32Array(4);
backend.contextSetCurrent(cLibrary.context);
backend.memcpyToHost(check, ptr, check.byteLength);
assert.deepEqual(Array.from(check), [-1, -1, -1, -1]);
cLibrary.freeMatrix(ptr);
cLibrary.shutdown();
device.makeCurrent();
console.log('C freed the matrix (cuMemFree) after vram released it');
