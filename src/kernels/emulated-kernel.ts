/**
 * What the emulated backend runs in place of device code: a JavaScript function per kernel, given
 * the whole launch at once (grid, block, decoded arguments, and emulated memory to read and
 * write). The types live with the Backend (src/backend/backend.ts), whose launch primitive calls
 * them; they are re-exported here, where kernel authors look for them, with a helper for the
 * common one-dimensional loop.
 */
import type { EmulatedLaunch } from '../backend/backend.js';

/**
 * The number of threads a launch runs: grid size times block size over all three dimensions.
 * A JavaScript kernel that maps one element per thread (`i = blockIdx.x * blockDim.x +
 * threadIdx.x`, guarded by `i < n`) loops over `Math.min(n, threadCount(launch))` elements, so it
 * does what the CUDA kernel does when the grid is too small, too.
 *
 * @param launch The launch the kernel was given.
 * @returns gridX * gridY * gridZ * blockX * blockY * blockZ.
 * @example
 * ```ts
 * const scale: EmulatedKernel = (launch) => {
 *   const [ptr, factor, n] = launch.args as [number, number, number];
 *   const bytes = launch.memory.bytes(ptr, 4 * n);
 *   const v = new Float32Array(bytes.buffer, bytes.byteOffset, n);
 *   for (let i = 0; i < Math.min(n, threadCount(launch)); i++) v[i] *= factor;
 * };
 * ```
 * @throws Never.
 */
export function threadCount(launch: EmulatedLaunch): number {
  const [gx, gy, gz] = launch.grid;
  const [bx, by, bz] = launch.block;
  return gx * gy * gz * bx * by * bz;
}
