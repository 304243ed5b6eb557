/**
 * `ascontiguous`: a new row-major copy of any view, by one kernel (a transpose, a slice with
 * steps, a pitched array). `DeviceArray.copy` does it with copies the copy engines can express
 * and goes through the host otherwise; this is one launch on a stream whatever the layout.
 */
import { DeviceArray } from '../../array/device-array.js';
import type { DTypeName } from '../../array/dtype.js';
import { basicSignatures } from './basic-kernels.js';
import { builtinKernel } from './builtin-module.js';
import { basicBuiltin } from './builtin-sources.js';
import { elementUnits } from './fill.js';
import { mergeDimensions, packLayout } from './kernel-layout.js';
import { checkArray, gridFor, OP_BLOCK, streamFor, type OpOptions } from './op-support.js';
import { readOptions } from '../../util/options.js';

/**
 * A new contiguous array holding `a`'s elements in row-major order. Always a new array (also for
 * an `a` already contiguous), so the result can be freed independently.
 *
 * @param a The array (any dtype, any layout).
 * @param options The stream (default `a.stream`); the result is allocated on it, on `a`'s device.
 * @returns The copy; it owns its memory.
 * @throws {TypeError} For a bad array or options.
 * @throws {UseAfterFreeError} When the array's memory was freed.
 * @throws {OutOfMemoryError} When the device has no memory for the copy.
 * @example
 * ```ts
 * using rows = ascontiguous(m.T); // the transpose, materialised
 * ```
 */
export function ascontiguous<N extends DTypeName>(a: DeviceArray<N>, options?: OpOptions): DeviceArray<N> {
  checkArray(a, 'ascontiguous: a');
  const stream = streamFor(readOptions('ascontiguous', options, { stream: true }), a, 'ascontiguous');
  const out = DeviceArray.empty(a.shape, a.dtype, { device: a.device, stream });
  try {
    copyElementsOnDevice(out, a, stream);
  } catch (error) {
    out.free();
    throw error;
  }
  return out;
}

/**
 * Copies `src`'s elements into `dst` (same dtype and shape, any layouts) with one launch.
 *
 * @param dst The destination.
 * @param src The source.
 * @param stream The stream.
 * @throws {CudaError} When the launch fails.
 * @example
 * ```ts
 * copyElementsOnDevice(out, a.T, stream);
 * ```
 */
function copyElementsOnDevice(dst: DeviceArray, src: DeviceArray, stream: OpOptions['stream']): void {
  const n = src.size;
  if (n === 0) return;
  const { unit, units } = elementUnits(src.dtype);
  const merged = mergeDimensions(src.shape, [dst.strides, src.strides]);
  const kernel = builtinKernel(src.device, basicBuiltin(), 'vram_copy', basicSignatures.vram_copy, 'ascontiguous');
  kernel.launch(
    { grid: gridFor(src.device, n), block: OP_BLOCK, stream },
    dst,
    packLayout(merged.shape, merged.strides[0]!),
    src,
    packLayout(merged.shape, merged.strides[1]!),
    n,
    unit,
    units,
  );
}
