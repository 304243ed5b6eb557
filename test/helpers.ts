/** Shared helpers for the suite, which runs on whichever backend VRAM_BACKEND selects. */
import assert from 'node:assert/strict';
import { getBackend } from '../src/backend/select.js';
import { Device } from '../src/device.js';

/** True when the suite runs on a real GPU (`npm run test:gpu`). */
export const onGpu: boolean = getBackend().name === 'cuda';

/** Options for a test that needs a real GPU: skipped, with the reason, on the emulated backend. */
export const gpuOnly = { skip: onGpu ? false : 'needs a real GPU (npm run test:gpu)' } as const;

const MiB = 1024 * 1024;

/**
 * How far the device's used memory (total - free, as cuMemGetInfo reports it) may move across
 * code that returns everything it allocated. On the emulated backend the figure is vram's own
 * exact accounting: 0. On a GPU the driver keeps state of its own in device memory and moves it
 * in its 2 MiB pages on its own schedule (CUDA 13, H200: the first stream created takes a page
 * that its destroy does not give back; a failed cuMemAlloc larger than the device gives one
 * back), so a few pages of slack, on the cuda backend only. Tests that check memory went back
 * allocate several times this much, so memory not given back still fails them on a GPU.
 */
export const FREE_MEMORY_SLACK: number = onGpu ? 4 * 2 * MiB : 0;

/** Device memory in use on `device` (device 0 by default): total - free, as the backend reports it. */
export function deviceMemoryUsed(device: Device = Device.get(0)): number {
  const m = device.memInfo();
  return m.total - m.free;
}

/**
 * Asserts that the device's used memory is back where it was: exactly on the emulated backend,
 * within FREE_MEMORY_SLACK (the driver's own bookkeeping) on a GPU.
 */
export function assertMemoryReturned(before: number, after: number, message: string): void {
  const drift = after - before;
  if (onGpu && drift !== 0) console.log(`# ${message}: the driver's used memory moved by ${drift} bytes`);
  assert.ok(Math.abs(drift) <= FREE_MEMORY_SLACK,
    `${message}: used device memory moved by ${drift} bytes (from ${before} to ${after}; allowed ${FREE_MEMORY_SLACK})`);
}
