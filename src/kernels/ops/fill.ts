/**
 * `fill`: every element of an array (any dtype, any layout) set to one value, by a kernel queued
 * on a stream. `DeviceArray.fill` does the same with memsets and copies on the legacy default
 * stream; this one runs in stream order beside other kernels and takes a strided view in one launch.
 */
import { checkWritable, type DeviceArray } from '../../array/device-array.js';
import type { DType, DTypeName } from '../../array/dtype.js';
import { encodeScalar, type ScalarValue } from '../../array/host-data.js';
import { basicSignatures } from './basic-kernels.js';
import { builtinKernel } from './builtin-module.js';
import { basicBuiltin } from './builtin-sources.js';
import { mergeDimensions, packLayout } from './kernel-layout.js';
import { checkArray, gridFor, OP_BLOCK, streamFor, type OpOptions } from './op-support.js';
import { readOptions } from '../../util/options.js';

/**
 * How fill and copy move an element: units of the largest of 8, 4, 2, 1 bytes dividing both its
 * size and its alignment (so every unit access is aligned), 1 to 3 of them.
 *
 * @param dtype The dtype.
 * @returns The unit's bytes and the units per element.
 * @throws Never.
 * @example
 * ```ts
 * elementUnits(dtypes.float3); // { unit: 4, units: 3 }
 * elementUnits(dtypes.float4); // { unit: 8, units: 2 }
 * ```
 */
export function elementUnits(dtype: DType): { unit: 1 | 2 | 4 | 8; units: number } {
  const unit = ([8, 4, 2, 1] as const).find((u) => dtype.byteSize % u === 0 && dtype.alignment % u === 0)!;
  return { unit, units: dtype.byteSize / unit };
}

/**
 * Sets every element of `a` to `value` (strides honoured), queued on the stream.
 *
 * @param a The array (any dtype, any layout).
 * @param value One element of its dtype: a number, a bigint (64-bit), a boolean (bool), or an
 *   array of components for a vector dtype.
 * @param options The stream (default `a.stream`).
 * @returns `a`.
 * @throws {TypeError | RangeError} For a value the dtype cannot hold, or a bad array or options.
 * @throws {VramStateError} When the array's memory was lent read-only.
 * @throws {UseAfterFreeError} When the array's memory was freed.
 * @example
 * ```ts
 * fill(points, [0, 0, 1], { stream });
 * fill(m.slice(null, 0), 7); // the first column
 * ```
 */
export function fill<N extends DTypeName>(a: DeviceArray<N>, value: ScalarValue<N>, options?: OpOptions): DeviceArray<N> {
  checkWritable(checkArray(a, 'fill: a'), 'fill: a');
  const stream = streamFor(readOptions('fill', options, { stream: true }), a, 'fill');
  const pattern = encodeScalar(a.dtype, value);
  const n = a.size;
  if (n === 0) return a;
  const { unit, units } = elementUnits(a.dtype);
  const view = new DataView(pattern.buffer, pattern.byteOffset, pattern.byteLength);
  const parts = [0n, 0n, 0n];
  for (let u = 0; u < units; u++) {
    const o = u * unit;
    parts[u] = unit === 8 ? view.getBigUint64(o, true) : BigInt(unit === 4 ? view.getUint32(o, true) : unit === 2 ? view.getUint16(o, true) : view.getUint8(o));
  }
  const merged = mergeDimensions(a.shape, [a.strides]);
  const kernel = builtinKernel(a.device, basicBuiltin(), 'vram_fill', basicSignatures.vram_fill, 'fill');
  kernel.launch(
    { grid: gridFor(a.device, n), block: OP_BLOCK, stream },
    a,
    packLayout(merged.shape, merged.strides[0]!),
    n,
    unit,
    units,
    parts[0]!,
    parts[1]!,
    parts[2]!,
  );
  return a;
}
