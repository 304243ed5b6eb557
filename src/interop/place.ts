/**
 * Placement: data goes to device memory when the device has room for it, and otherwise stays in
 * mapped pinned host memory that kernels read in place over the bus. This is the pattern Chroma's
 * PyCUDA code writes by hand (`mem_get_info()`, then `gpuarray.to_gpu` or a mapped
 * `pagelocked_empty`), as one call that returns a DeviceArray either way and says which it chose.
 *
 * The margin: `device.memInfo().free` must exceed the data by `minFree`, by default the local
 * memory the device reserves at a kernel launch plus slack for the driver's own pages. A launch
 * reserves local memory (the per-thread stack, 1 KiB by default, cuCtxGetLimit STACK_SIZE) for
 * every thread the device can keep resident: 2048 threads per SM on compute capability 8.0 and
 * 9.0, so 132 SMs x 2048 x 1 KiB = 264 MiB on an H100 SXM. A device filled to the brim by data
 * placed here would fail the program's first launch with CUDA_ERROR_OUT_OF_MEMORY. The driver also
 * takes 2 MiB pages for its own state (streams, events, modules) on its own schedule, and pools
 * round allocations up to their 2 MiB granularity: 64 MiB covers those.
 */
import { DeviceArray, resolveHostInput, type InferableTypedArray, type InferredDType, type NestedNumbers } from '../array/device-array.js';
import type { DefaultDType, DType, DTypeName } from '../array/dtype.js';
import { HostArray } from '../array/host-array.js';
import { keep } from '../buffer/tidy.js';
import type { HostInput, NestedArray } from '../array/host-data.js';
import type { ShapeInput } from '../array/shape.js';
import { Device } from '../device.js';
import { isOutOfMemory, NotSupportedError } from '../errors.js';
import { releaseCaches } from '../resource/cache-registry.js';
import type { StreamRef } from '../stream.js';
import { readBytes, type ByteSize } from '../validate.js';
import { readOptions } from '../util/options.js';

const MiB = 1024 * 1024;

/** Threads an SM keeps resident at most (compute capability 8.0 and 9.0; 1536 on 8.6 and 8.9). */
const MAX_THREADS_PER_SM = 2048;
/** The per-thread stack a launch reserves local memory for, by default (cuCtxGetLimit STACK_SIZE). */
const DEFAULT_STACK_BYTES = 1024;
/** Slack for the driver's own 2 MiB pages and pools' rounding to their granularity. */
const DRIVER_SLACK = 64 * MiB;

/** Options of `place`. */
export interface PlaceOptions<N extends DTypeName = DTypeName> {
  /** Where the data should go when it fits: 'device' (the only choice, and the default). */
  readonly prefer?: 'device';
  /** Where it goes when it does not: 'mapped' pinned host memory (the only choice, and the default). */
  readonly fallback?: 'mapped';
  /**
   * Bytes that must stay free on the device after the data is placed there. Default
   * `defaultPlacementMargin(device)`: the local memory a kernel launch reserves plus 64 MiB.
   * A number, or a size like `'256M'`.
   */
  readonly minFree?: ByteSize;
  /**
   * Allocate the mapped fallback write-combined (CU_MEMHOSTALLOC_WRITECOMBINED): faster for the
   * device to read over PCIe, very slow for the host to read (write it, never read it back on the host).
   */
  readonly writeCombined?: boolean;
  /** The device (device 0 by default). */
  readonly device?: Device | number;
  /** The stream the device memory is allocated on, and the array's default stream. */
  readonly stream?: StreamRef;
  /** The element type; inferred from a TypedArray's class when left out (float32 for plain numbers). */
  readonly dtype?: N | DType<N>;
  /** The array's shape (one number for one dimension); inferred from the data when left out. */
  readonly shape?: ShapeInput;
}

/** What `place` did. */
export interface Placement<N extends DTypeName = DTypeName> {
  /** The data as a DeviceArray: in device memory, or over mapped host memory. Free it when done. */
  readonly array: DeviceArray<N>;
  /** Where the data went. */
  readonly placement: 'device' | 'mapped';
  /**
   * For 'mapped': the pinned host array the device array reads (the host's side of the same
   * bytes). It is owned by `array`: freeing `array` frees it.
   */
  readonly host?: HostArray<N>;
}

/**
 * The margin `place` keeps free on a device by default: the local memory a kernel launch
 * reserves (SM count x 2048 resident threads x the default 1 KiB stack) plus 64 MiB for the
 * driver's own pages.
 *
 * @param device The device (device 0 by default).
 * @returns Bytes.
 * @throws {RangeError} For a device ordinal out of range.
 * @example
 * ```ts
 * defaultPlacementMargin(Device.get(0)); // 264 MiB + 64 MiB on an H100 SXM (132 SMs)
 * ```
 */
export function defaultPlacementMargin(device: Device | number = 0): number {
  const d = Device.resolve(device);
  return d.info.multiprocessorCount * MAX_THREADS_PER_SM * DEFAULT_STACK_BYTES + DRIVER_SLACK;
}

/**
 * Puts host data on the device when `device.memInfo()` shows room for it beyond `minFree`
 * (counting what vram's resources on the device cache: when the data would not fit otherwise,
 * their caches are given back first, `releaseCaches`), otherwise in mapped pinned host memory (optionally write-combined) that kernels read in place;
 * either way the result's `array` is a DeviceArray holding a copy of the data. An allocation that
 * fails although memInfo showed room (another process or library took the memory meanwhile, or
 * the current resource has a limit) also falls back. The mapped array owns its HostArray: freeing
 * it (or `using`, or the backstop) frees the pinned memory.
 *
 * @param data The data: the dtype's TypedArray, raw bytes or plain arrays, nested or not (as `DeviceArray.from` takes; float32 when no dtype is given).
 * @param options prefer, fallback, minFree, writeCombined, device, stream, dtype, shape.
 * @returns `{ array, placement, host? }`.
 * @throws {TypeError | RangeError} For bad data or options (before anything is allocated).
 * @throws {NotSupportedError} When the fallback is needed and the device cannot map host memory.
 * @throws {OutOfMemoryError} When neither device nor pinned host memory can hold the data.
 * @example
 * ```ts
 * const { array, placement } = place(meshVertices, { dtype: 'float3' });
 * console.log(`vertices in ${placement} memory`);
 * launch(kernel, { args: [array.ptr, array.size] });
 * array.free();
 * ```
 */
export function place<N extends DTypeName>(data: HostInput<N>, options: PlaceOptions<N> & { readonly dtype: N | DType<N> }): Placement<N>;
export function place<T extends InferableTypedArray>(data: T, options?: PlaceOptions<InferredDType<T>>): Placement<InferredDType<T>>;
export function place(data: NestedNumbers, options?: PlaceOptions<DefaultDType>): Placement<DefaultDType>;
export function place(data: NestedArray, options?: PlaceOptions): Placement;
export function place(data: unknown, options: PlaceOptions = {}): Placement {
  options = readOptions('place', options, {
    prefer: true,
    fallback: true,
    minFree: true,
    writeCombined: true,
    device: true,
    stream: true,
    dtype: true,
    shape: true,
  });
  if (options.prefer !== undefined && options.prefer !== 'device') {
    throw new RangeError(`place: prefer must be 'device', got ${String(options.prefer)}`);
  }
  if (options.fallback !== undefined && options.fallback !== 'mapped') {
    throw new RangeError(`place: fallback must be 'mapped', got ${String(options.fallback)}`);
  }
  if (options.writeCombined !== undefined && typeof options.writeCombined !== 'boolean') {
    throw new TypeError(`place: writeCombined must be a boolean, got ${typeof options.writeCombined}`);
  }
  const device = Device.resolve(options.device);
  const minFree = options.minFree === undefined ? defaultPlacementMargin(device) : readBytes(options.minFree, 'minFree', true);
  const resolved = resolveHostInput(data, options.dtype, options.shape);
  const dtype = resolved.dtype;
  const shape = resolved.shape;
  // The checked, row-major bytes as raw bytes: no second conversion of nested or float16 input.
  const raw = new DataView(resolved.bytes.buffer, resolved.bytes.byteOffset, resolved.bytes.byteLength);
  const bytes = Math.max(1, raw.byteLength);
  let { free } = device.memInfo();
  // Memory vram's own caches hold counts as free: given back to the driver rather than leaving
  // the data in host memory (only when it would not fit otherwise, so a cache that helps stays).
  if (free < bytes + minFree && releaseCaches(device.ordinal) > 0) free = device.memInfo().free;
  if (free >= bytes + minFree) {
    try {
      const array = DeviceArray.from(raw, { dtype, shape, device, stream: options.stream });
      return { array, placement: 'device' };
    } catch (error) {
      if (!isOutOfMemory(error)) throw error;
      // memInfo's figure was stale or the resource is limited: the mapped fallback below.
    }
  }
  if (!device.info.canMapHostMemory) {
    throw new NotSupportedError(
      `place: ${bytes} bytes do not fit on ${String(device)} (${free} bytes free, ${minFree} kept free) ` + 'and it cannot map host memory',
    );
  }
  // Its lifetime is the array's (freed by its release), never a `tidy` scope's.
  const host = keep(HostArray.empty(shape, dtype, { mapped: true, writeCombined: options.writeCombined === true }));
  const release = (): void => {
    if (!host.freed) host.free();
  };
  let array: DeviceArray | undefined;
  try {
    const view = host.deviceView({ device });
    // The array owns the HostArray: its release frees it, and holds it until then.
    array = DeviceArray.fromPointer(view.ptr, shape, dtype, { device, stream: options.stream, onRelease: release });
    // Filled through the device view, by the driver: a host view of write-combined memory is
    // for writing only, and would warn.
    array.copyFrom(raw);
    return { array, placement: 'mapped', host };
  } catch (error) {
    if (array !== undefined && !array.freed) array.free();
    release();
    throw error;
  }
}
