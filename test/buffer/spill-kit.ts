/**
 * What the spill tests share: a kernel that adds 1 to every byte of a buffer (CUDA source and its
 * emulated twin), and a check that a buffer holds one byte value everywhere.
 */
import assert from 'node:assert/strict';
import type { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { threadCount } from '../../src/kernels/emulated-kernel.js';
import { type EmulatedKernel } from '../../src/backend/backend.js';
import type { Stream } from '../../src/stream.js';

/** Spillable buffers are whole granules: 2 MiB on the emulated backend and on current GPUs. */
export const CHUNK = 2 << 20;

/** `add_bytes(y, n)`: y[i] += 1 for i < n. */
export const ADD_BYTES_SOURCE = `
extern "C" __global__ void add_bytes(unsigned char *y, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += 1;
}
`;

/** The emulated twin of `add_bytes`. */
export const addBytes: EmulatedKernel = (launch) => {
  const [yPtr, n] = launch.args as [number, number];
  const y = launch.memory.bytes(yPtr, n);
  const threads = Math.min(n, threadCount(launch)); // once: per element it costs more than the add
  for (let i = 0; i < threads; i++) y[i] = (y[i]! + 1) & 0xff;
};

/** The byte a buffer of CHUNK bytes holds everywhere (buffers here are written whole), after `stream`'s work. */
export function byteOf(buffer: DeviceBuffer, stream: Stream): number {
  stream.synchronize();
  const bytes = Buffer.from(buffer.copyToHost(new Uint8Array(CHUNK)).buffer);
  const first = bytes[0]!;
  if (!bytes.equals(Buffer.alloc(CHUNK, first))) {
    const at = bytes.findIndex((b) => b !== first);
    assert.fail(`byte ${at} is ${bytes[at]}, byte 0 is ${first}`);
  }
  return first;
}
