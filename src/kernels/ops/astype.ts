/**
 * `astype`: a new array of another dtype, converted element by element on the device (the
 * conversions are described in basic-kernels.ts: integers wrap among themselves as C casts do,
 * floats round to nearest, float to integer truncates and saturates with NaN to 0).
 */
import { DeviceArray } from '../../array/device-array.js';
import { dtypeOf, type DType, type DTypeName } from '../../array/dtype.js';
import { basicSignatures } from './basic-kernels.js';
import { builtinKernel } from './builtin-module.js';
import { basicBuiltin } from './builtin-sources.js';
import { mergeDimensions, packLayout } from './kernel-layout.js';
import { checkArray, gridFor, OP_BLOCK, streamFor, type OpOptions } from './op-support.js';
import { kernelScalar } from './scalar.js';
import { readOptions } from '../../util/options.js';

/**
 * A new contiguous array of `dtype` holding `a`'s elements converted. Scalar dtypes convert to
 * any scalar dtype; a vector dtype converts to a vector dtype of as many components (float3 to
 * int3 or double3), component by component.
 *
 * @param a The array (any layout).
 * @param dtype The new dtype.
 * @param options The stream (default `a.stream`); the result is allocated on it.
 * @returns The converted array; it owns its memory.
 * @throws {TypeError} For an unknown dtype, or vector dtypes of different component counts.
 * @throws {UseAfterFreeError} When the array's memory was freed.
 * @throws {OutOfMemoryError} When the device has no memory for the result.
 * @example
 * ```ts
 * using counts = astype(mask, 'int32');
 * using half = astype(weights, 'float16');
 * ```
 */
export function astype<M extends DTypeName>(a: DeviceArray, dtype: M | DType<M>, options?: OpOptions): DeviceArray<M> {
  checkArray(a, 'astype: a');
  const to = dtypeOf(dtype);
  const stream = streamFor(readOptions('astype', options, { stream: true }), a, 'astype');
  if (to.components !== a.dtype.components) {
    throw new TypeError(
      `astype: ${a.dtype.name} has ${a.dtype.components} component(s) and ${to.name} ${to.components}; convert between dtypes of as many components`,
    );
  }
  const out = DeviceArray.empty(a.shape, to, { device: a.device, stream });
  const n = a.size;
  if (n === 0) return out;
  try {
    const merged = mergeDimensions(a.shape, [out.strides, a.strides]);
    const kernel = builtinKernel(a.device, basicBuiltin(), 'vram_astype', basicSignatures.vram_astype, 'astype');
    kernel.launch(
      { grid: gridFor(a.device, n), block: OP_BLOCK, stream },
      out,
      packLayout(merged.shape, merged.strides[0]!),
      kernelScalar[to.component].code,
      a,
      packLayout(merged.shape, merged.strides[1]!),
      kernelScalar[a.dtype.component].code,
      to.components,
      n,
    );
  } catch (error) {
    out.free();
    throw error;
  }
  return out;
}
