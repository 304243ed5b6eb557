/**
 * DLPack: tensors exchanged with native addons and other runtimes in the process as a pointer to
 * a C struct, `DLManagedTensorVersioned` (DLPack 1.x) or the older `DLManagedTensor`, with no copy.
 *
 * Export (`toDLPack`): vram writes the struct, its shape and its strides into native memory and
 * hands over the struct's address. Until the consumer calls the struct's deleter, vram holds the
 * array (so neither it nor its memory is collected under the consumer); the deleter frees the
 * native memory and drops that hold. An explicit `free()` of the array (or of the array it is a
 * view of) still frees the memory: that is the program's error, as freeing memory under a view is.
 *
 * Import (`fromDLPack`): vram reads the struct and wraps the tensor's memory as a DeviceArray, no
 * copy, and takes over the producer's deleter: it is called exactly once, when the array is freed
 * or collected. Device, managed and pinned (kDLCUDAHost) memory is wrapped with
 * `DeviceArray.fromPointer`, which checks the pointer with the driver and records its context. A
 * kDLCPU tensor's memory (malloc'd, say) is pinned in place and mapped for the device
 * (cuMemHostRegister with DEVICEMAP) and wrapped through that mapping: copies to and from it are
 * DMA, kernels read it in place, and the registration is undone before the deleter runs. (A
 * HostArray would be the natural type for host tensors, but HostArray has no way yet to own memory
 * it did not allocate and call a release when freed.) The two struct kinds are not
 * self-describing (neither starts with a tag that tells them apart), so the caller says which with
 * `{ versioned }` (DLPack 1.x's struct by default).
 *
 * Ownership of a refused import: the producer's struct changes hands only when `fromDLPack`
 * returns. When it throws (an unsupported dtype or device, a malformed shape, another major
 * version, a null deleter), vram has called nothing and kept nothing, and the caller still owns the
 * tensor: it calls the deleter itself (`deleteDLPack` does). That is Python's DLPack protocol, the
 * one the DLPack spec defines ownership through: a consumer renames the capsule (takes the tensor)
 * only once it has accepted it, and a refused capsule's own destructor calls the deleter. Calling
 * the deleter of a struct vram could not read would be worse than a leak: a legacy struct read as a
 * versioned one has something else where the deleter should be, and calling it crashes.
 */
import {
  addressNumber,
  allocateNative,
  callDeleter,
  deleterAddress,
  deviceTypeName,
  DLDataTypeCode,
  DLDeviceType,
  DLPACK_FLAG_IS_COPIED,
  DLPACK_FLAG_READ_ONLY,
  DLPACK_VERSION,
  freeNative,
  managedLayout,
  nativeBuffer,
  nativeView,
  TENSOR_LAYOUT,
  typeCodeName,
  type NativeBlock,
} from '../cuda/dlpack-abi.js';
import { Device } from '../device.js';
import { CudaError, CUresult, NotSupportedError, VramStateError } from '../errors.js';
import { DeviceBuffer } from '../buffer/device-buffer.js';
import type { SpillLease } from '../buffer/spill/lease.js';
import { ForeignDeviceBuffer } from '../buffer/foreign-device-buffer.js';
import { HostBuffer } from '../buffer/host-buffer.js';
import { keep } from '../buffer/tidy.js';
import { ManagedBuffer } from '../buffer/managed-buffer.js';
import { DeviceArray } from '../array/device-array.js';
import { dtypeOf, dtypes, type DType, type DTypeName } from '../array/dtype.js';
import { HostArray } from '../array/host-array.js';
import { byteSpan, contiguousLayout, type Layout } from '../array/layout.js';
import type { StridedArray } from '../array/strided-array.js';
import { readOptions } from '../util/options.js';

/** Options of `toDLPack`. */
export interface ToDLPackOptions {
  /** Write a `DLManagedTensorVersioned` (DLPack 1.x, the default) or, with false, the older `DLManagedTensor`. */
  readonly versioned?: boolean;
  /** Set DLPACK_FLAG_BITMASK_READ_ONLY: the consumer must not write the tensor (versioned only). */
  readonly readOnly?: boolean;
  /** Set DLPACK_FLAG_BITMASK_IS_COPIED: the tensor is the consumer's alone (versioned only). */
  readonly copied?: boolean;
}

/** Options of `fromDLPack` and `deleteDLPack`. */
export interface FromDLPackOptions {
  /** The struct is a `DLManagedTensorVersioned` (DLPack 1.x, the default) or, with false, a `DLManagedTensor`. */
  readonly versioned?: boolean;
  /**
   * For managed and pinned-host tensors (whose DLDevice says device 0 whatever device uses them):
   * the device whose context runs the array's copies (device 0 by default). A CUDA tensor's own
   * device id is used as it is.
   */
  readonly device?: Device | number;
}

/** What an imported tensor's struct said, beyond its layout. */
export interface DLPackImportInfo {
  /** True for a `DLManagedTensorVersioned`. */
  readonly versioned: boolean;
  /** The producer's DLPack version (`{ major: 0, minor: 0 }` for the legacy struct, which has none). */
  readonly version: { readonly major: number; readonly minor: number };
  /** DLPACK_FLAG_BITMASK_READ_ONLY: the producer forbids writes to the memory. */
  readonly readOnly: boolean;
  /** DLPACK_FLAG_BITMASK_IS_COPIED: the producer made a copy that this array owns alone. */
  readonly copied: boolean;
  /** The DLPack device type (`kDLCUDA` 2, `kDLCPU` 1, `kDLCUDAHost` 3, `kDLCUDAManaged` 13). */
  readonly deviceType: number;
}

/** The largest ndim vram reads (NumPy's limit): a larger one is a struct that is not what it claims. */
const MAX_NDIM = 64;

/** The device types vram imports and exports. */
const SUPPORTED_DEVICES: readonly number[] = [DLDeviceType.kDLCPU, DLDeviceType.kDLCUDA, DLDeviceType.kDLCUDAHost, DLDeviceType.kDLCUDAManaged];

/** An exported struct vram still holds: the array kept reachable, and the native memory to free. */
interface ExportRecord {
  readonly array: StridedArray<DTypeName>;
  readonly block: NativeBlock;
  /** Keeps spillable memory resident at its address until the deleter runs. */
  readonly lease: SpillLease | undefined;
}

/** Live exports by struct address: what each deleter call looks up (and forgets, so a repeat finds nothing). */
const exported = new Map<number, ExportRecord>();

/** Import info of the arrays `fromDLPack` returned. */
const imported = new WeakMap<object, DLPackImportInfo>();

/**
 * Addresses of the structs vram imported and whose deleter it has not called yet. A struct is
 * consumed once: a second import of it would call the producer's deleter a second time (a double
 * free in the producer). A raw address cannot be checked in general, but one whose earlier import
 * is still live can; after the deleter ran, the producer may hand out the same address again.
 */
const liveImports = new Set<number>();

/**
 * Refuses a struct vram holds from an earlier `fromDLPack` (before anything is read or called).
 *
 * @throws {VramStateError} When `address` is such a struct.
 */
function checkNotImported(address: number, what: string): void {
  if (!liveImports.has(address)) return;
  throw new VramStateError(
    `${what}: the DLPack tensor at 0x${address.toString(16)} is already imported, and the array ` +
      'from that fromDLPack calls its deleter when freed; a tensor is consumed once (import it once and share the array or its views)',
  );
}

/**
 * Runs when a consumer calls the deleter of a struct vram exported: frees the struct's native
 * memory and drops the hold on the array. A call for an address vram does not hold (a second call
 * for the same struct) does nothing: the record was forgotten on the first. As in C, a second call
 * made after the address was handed to a newer export cannot be told from that export's own call.
 */
function onDeleter(self: number): void {
  const record = exported.get(self);
  if (record === undefined) return;
  exported.delete(self);
  freeNative(record.block);
  record.lease?.release();
}

/** The DLPack type code of a scalar dtype. */
function typeCode(component: DType): number {
  if (component.kind === 'bool') return DLDataTypeCode.kDLBool;
  if (component.kind === 'int') return DLDataTypeCode.kDLInt;
  if (component.kind === 'uint') return DLDataTypeCode.kDLUInt;
  return component.name === 'bfloat16' ? DLDataTypeCode.kDLBfloat : DLDataTypeCode.kDLFloat;
}

/** code/bits of each scalar dtype -> the dtype, for imports. */
const scalarByCode = new Map<string, DTypeName>();
/** (component, lanes) -> vector dtype. */
const vectorByLanes = new Map<string, DTypeName>();
for (const dt of Object.values(dtypes) as DType[]) {
  if (dt.components === 1) scalarByCode.set(`${typeCode(dt)}:${dt.byteSize * 8}`, dt.name);
  else vectorByLanes.set(`${dt.component}:${dt.components}`, dt.name);
}

/**
 * The dtype a DLDataType names: a scalar for lanes 1, CUDA's vector type of that component for
 * lanes 2 to 4 (float32 x 3 is float3).
 */
function dtypeFromDLPack(code: number, bits: number, lanes: number): DType {
  const scalar = scalarByCode.get(`${code}:${bits}`);
  const shown = `${typeCodeName(code)} of ${bits} bits${lanes === 1 ? '' : ` x ${lanes} lanes`}`;
  if (scalar === undefined) {
    throw new NotSupportedError(
      `DLPack dtype ${shown} has no vram dtype: vram reads kDLInt/kDLUInt 8-64, ` +
        "kDLFloat 16/32/64, kDLBfloat 16 and kDLBool 8, with 1 lane or a CUDA vector type's 2 to 4",
    );
  }
  if (lanes === 1) return dtypeOf(scalar);
  const vector = vectorByLanes.get(`${scalar}:${lanes}`);
  if (vector === undefined) throw new NotSupportedError(`DLPack dtype ${shown}: CUDA has no vector type of ${lanes} ${scalar}`);
  return dtypeOf(vector);
}

/** A pointer argument as a number: a number or a bigint (koffi's pointers), non-zero. */
function checkStructPointer(ptr: unknown, what: string): number {
  let address: number;
  if (typeof ptr === 'bigint') {
    if (ptr < 0n) throw new RangeError(`${what}: the struct's address must not be negative, got ${ptr}`);
    address = addressNumber(ptr, `${what}: the struct's address`);
  } else if (typeof ptr === 'number') {
    if (!Number.isSafeInteger(ptr) || ptr < 0) throw new RangeError(`${what}: the struct's address must be a whole number >= 0, got ${ptr}`);
    address = ptr;
  } else {
    throw new TypeError(`${what} expects the struct's address (a number or bigint), got ${ptr === null ? 'null' : typeof ptr}`);
  }
  if (address === 0) throw new TypeError(`${what}: the struct pointer is NULL`);
  return address;
}

function checkVersioned(options: unknown, what: string): boolean {
  const versioned = (options as { versioned?: unknown }).versioned;
  if (versioned === undefined) return true;
  if (typeof versioned !== 'boolean') throw new TypeError(`${what}: versioned must be a boolean, got ${typeof versioned}`);
  return versioned;
}

function flag(value: unknown, name: string): boolean {
  if (value === undefined) return false;
  if (typeof value !== 'boolean') throw new TypeError(`toDLPack: ${name} must be a boolean, got ${typeof value}`);
  return value;
}

/** A u64 field as a number, checked exact. */
function u64(view: DataView, offset: number, what: string): number {
  return addressNumber(view.getBigUint64(offset, true), what);
}

/**
 * Exports an array as a DLPack tensor: a pointer to a `DLManagedTensorVersioned` (or, with
 * `{ versioned: false }`, a `DLManagedTensor`) in native memory, for a native addon or another
 * runtime in the process. Any layout goes as it is: strides in elements (negative for reversed
 * slices), `byte_offset` from the memory's start to element (0, ..., 0). The device is kDLCUDA with
 * the array's device ordinal for device memory, kDLCUDAManaged for a ManagedBuffer, kDLCUDAHost for
 * pinned memory (a HostArray, or a DeviceArray over a mapped HostBuffer); a vector dtype is its
 * component with lanes (float3: kDLFloat, 32 bits, 3 lanes).
 *
 * The consumer calls the struct's deleter once when done: that frees the struct and releases
 * vram's hold on the array. A second call is ignored while vram holds no struct at that address.
 * The deleter runs JavaScript: a consumer that calls it from another thread waits until the main
 * thread's event loop runs it (koffi queues it there), so it must not do so while the main thread
 * waits for that consumer.
 * Addresses are the backend's: on the emulated backend a device (or pinned) address means
 * something only to vram itself.
 *
 * @param array A live DeviceArray or HostArray.
 * @param options `versioned` (default true), and the `readOnly` and `copied` flags (versioned only:
 *   the legacy struct has no flags). An array whose memory was lent read-only is always exported
 *   with the READ_ONLY flag.
 * @returns The struct's address.
 * @throws {TypeError} When `array` is not a DeviceArray or HostArray, for bad options, or flags
 *   asked of the legacy struct (a read-only array asks for READ_ONLY).
 * @throws {VramStateError} For `readOnly: false` on an array whose memory was lent read-only.
 * @throws {UseAfterFreeError} When the array's memory was freed.
 * @example
 * ```ts
 * using a = DeviceArray.from(new Float32Array([1, 2, 3, 4, 5, 6]), { shape: [2, 3] });
 * const tensor = toDLPack(a.T);  // a (3, 2) view: strides (1, 3)
 * addon.consume(tensor);         // the addon calls tensor->deleter(tensor) when done
 * ```
 */
export function toDLPack(array: DeviceArray | HostArray, options: ToDLPackOptions = {}): number {
  if (!(array instanceof DeviceArray) && !(array instanceof HostArray)) {
    throw new TypeError('toDLPack expects a DeviceArray or HostArray');
  }
  options = readOptions('toDLPack', options, { versioned: true, readOnly: true, copied: true });
  const versioned = checkVersioned(options, 'toDLPack');
  const askedReadOnly: unknown = options.readOnly;
  const lentReadOnly = array instanceof DeviceArray && array.readOnly;
  // Memory lent read-only is exported read-only: the next consumer is told what vram was told.
  const readOnly = flag(askedReadOnly, 'readOnly') || lentReadOnly;
  if (lentReadOnly && askedReadOnly === false) {
    throw new VramStateError(
      'toDLPack: the array is read-only memory (lent with readOnly by its producer) and cannot be exported writable; export a copy (a.copy())',
    );
  }
  const copied = flag(options.copied, 'copied');
  if (!versioned && (readOnly || copied)) {
    throw new TypeError(
      `toDLPack: the legacy DLManagedTensor has no flags; ${
        lentReadOnly
          ? 'the array is read-only memory, which needs { versioned: true } to say so (or export a copy)'
          : 'readOnly and copied need { versioned: true }'
      }`,
    );
  }
  const buffer = array.buffer;
  // Spillable memory stays on the device at its address until the consumer's deleter runs.
  const lease = buffer instanceof DeviceBuffer ? buffer.lease({ readOnly }) : undefined;
  // The memory's first byte (`ptr` throws UseAfterFreeError once freed); the array's byte offset
  // goes apart, in byte_offset.
  const data = lease !== undefined ? lease.ptr : buffer.ptr;
  let deviceType: number = DLDeviceType.kDLCUDA;
  let deviceId = 0;
  if (buffer instanceof HostBuffer || (buffer instanceof ForeignDeviceBuffer && buffer.kind === 'mapped-host')) {
    // Pinned memory, viewed from the host or the device: consumers read kDLCUDAHost data as the
    // host address (which unified addressing makes the device's too; a foreign mapped buffer's
    // address is checked to be both).
    deviceType = DLDeviceType.kDLCUDAHost;
  } else if (buffer instanceof ManagedBuffer || (buffer instanceof ForeignDeviceBuffer && buffer.kind === 'managed')) {
    deviceType = DLDeviceType.kDLCUDAManaged;
  } else {
    deviceId = (array as DeviceArray).device.ordinal;
  }
  const layout = managedLayout(versioned);
  const ndim = array.ndim;
  const shapeAt = layout.size;
  const stridesAt = shapeAt + 8 * ndim;
  let block: NativeBlock;
  try {
    block = allocateNative(stridesAt + 8 * ndim);
  } catch (error) {
    lease?.release();
    throw error;
  }
  try {
    const view = nativeView(block.address, stridesAt + 8 * ndim);
    for (let i = 0; i < stridesAt + 8 * ndim; i += 8) view.setBigUint64(i, 0n, true);
    if (versioned) {
      view.setUint32(layout.version, DLPACK_VERSION.major, true);
      view.setUint32(layout.version + 4, DLPACK_VERSION.minor, true);
      view.setBigUint64(layout.flags, BigInt((readOnly ? DLPACK_FLAG_READ_ONLY : 0) | (copied ? DLPACK_FLAG_IS_COPIED : 0)), true);
    }
    const deleter = deleterAddress(versioned, onDeleter);
    view.setBigUint64(layout.deleter, BigInt(deleter), true);
    view.setBigUint64(layout.managerCtx, 0n, true);
    const t = layout.tensor;
    const T = TENSOR_LAYOUT;
    view.setBigUint64(t + T.data, BigInt(data), true);
    view.setInt32(t + T.deviceType, deviceType, true);
    view.setInt32(t + T.deviceId, deviceId, true);
    view.setInt32(t + T.ndim, ndim, true);
    const dt = array.dtype;
    view.setUint8(t + T.code, typeCode(dtypeOf(dt.component)));
    view.setUint8(t + T.bits, (dt.byteSize / dt.components) * 8);
    view.setUint16(t + T.lanes, dt.components, true);
    view.setBigUint64(t + T.shape, ndim === 0 ? 0n : BigInt(block.address + shapeAt), true);
    view.setBigUint64(t + T.strides, ndim === 0 ? 0n : BigInt(block.address + stridesAt), true);
    view.setBigUint64(t + T.byteOffset, BigInt(array.byteOffset), true);
    for (let i = 0; i < ndim; i++) {
      view.setBigInt64(shapeAt + 8 * i, BigInt(array.shape[i]!), true);
      view.setBigInt64(stridesAt + 8 * i, BigInt(array.strides[i]!), true);
    }
  } catch (error) {
    freeNative(block);
    lease?.release();
    throw error;
  }
  exported.set(block.address, { array, block, lease });
  return block.address;
}

/**
 * How many structs vram exported whose deleter has not been called yet (each holds its array).
 *
 * @returns The count.
 * @throws Never.
 * @example
 * ```ts
 * const before = dlpackExportsHeld();
 * consumer.take(toDLPack(a)); // calls the deleter when done
 * dlpackExportsHeld() === before;
 * ```
 */
export function dlpackExportsHeld(): number {
  return exported.size;
}

/** The fields of a struct, read and checked: everything an import needs before it wraps memory. */
interface TensorFields {
  readonly deleter: number;
  readonly info: DLPackImportInfo;
  readonly data: number;
  readonly deviceId: number;
  readonly dtype: DType;
  readonly shape: number[];
  readonly strides: number[] | undefined;
  readonly byteOffset: number;
}

/** Reads and checks the struct at `address`; throws (touching nothing) for anything vram cannot import. */
function readTensor(address: number, versioned: boolean): TensorFields {
  const what = 'fromDLPack';
  const layout = managedLayout(versioned);
  const view = nativeView(address, layout.size);
  let version = { major: 0, minor: 0 };
  let flags = 0;
  if (versioned) {
    version = { major: view.getUint32(layout.version, true), minor: view.getUint32(layout.version + 4, true) };
    if (version.major !== 1) {
      const legacy = version.major === 0 || version.major > 255;
      throw new NotSupportedError(
        legacy
          ? `${what}: the struct's version reads ${version.major}.${version.minor}, which no DLManagedTensorVersioned has: ` +
              'is it a legacy DLManagedTensor? pass { versioned: false }. The caller still owns the tensor'
          : `${what}: DLPack ${version.major}.${version.minor} tensors have another layout; vram reads 1.x. ` +
              'The caller still owns the tensor: call its deleter (deleteDLPack does)',
      );
    }
    flags = Number(view.getBigUint64(layout.flags, true) & 0xffffffffn);
  }
  const deleter = u64(view, layout.deleter, `${what}: the deleter`);
  if (deleter === 0) {
    throw new NotSupportedError(
      `${what}: the tensor has a NULL deleter, so nothing tells its producer when vram is done and ` +
        'nothing tells vram how long the memory lives; wrap memory whose lifetime you manage with DeviceArray.fromPointer',
    );
  }
  const t = layout.tensor;
  const T = TENSOR_LAYOUT;
  const deviceType = view.getInt32(t + T.deviceType, true);
  if (!SUPPORTED_DEVICES.includes(deviceType)) {
    throw new NotSupportedError(
      `${what}: the tensor is on ${deviceTypeName(deviceType)}; vram imports kDLCPU, kDLCUDA, ` +
        'kDLCUDAHost and kDLCUDAManaged memory. The caller still owns the tensor',
    );
  }
  const deviceId = view.getInt32(t + T.deviceId, true);
  if (deviceId < 0) throw new RangeError(`${what}: device_id ${deviceId} is negative`);
  const ndim = view.getInt32(t + T.ndim, true);
  if (ndim < 0 || ndim > MAX_NDIM) throw new RangeError(`${what}: ndim ${ndim} is outside 0..${MAX_NDIM}`);
  const lanes = view.getUint16(t + T.lanes, true);
  const dtype = dtypeFromDLPack(view.getUint8(t + T.code), view.getUint8(t + T.bits), lanes);
  const shapePtr = u64(view, t + T.shape, `${what}: shape`);
  const stridesPtr = u64(view, t + T.strides, `${what}: strides`);
  const byteOffset = u64(view, t + T.byteOffset, `${what}: byte_offset`);
  const data = u64(view, t + T.data, `${what}: data`);
  const shape: number[] = [];
  let strides: number[] | undefined;
  if (ndim > 0) {
    if (shapePtr === 0) throw new TypeError(`${what}: shape is NULL for a tensor of ${ndim} dimensions`);
    const s = nativeView(shapePtr, 8 * ndim);
    for (let i = 0; i < ndim; i++) {
      const n = s.getBigInt64(8 * i, true);
      if (n < 0n || n > BigInt(Number.MAX_SAFE_INTEGER)) throw new RangeError(`${what}: shape[${i}] is ${n}; extents are whole numbers >= 0`);
      shape.push(Number(n));
    }
    if (stridesPtr !== 0) {
      const st = nativeView(stridesPtr, 8 * ndim);
      strides = [];
      for (let i = 0; i < ndim; i++) {
        const n = st.getBigInt64(8 * i, true);
        if (n < BigInt(Number.MIN_SAFE_INTEGER) || n > BigInt(Number.MAX_SAFE_INTEGER)) {
          throw new RangeError(`${what}: strides[${i}] is ${n}, beyond 2^53`);
        }
        strides.push(Number(n));
      }
    }
  }
  const size = shape.reduce((a, b) => a * b, 1);
  if (data === 0 && size > 0) throw new TypeError(`${what}: data is NULL for a tensor of ${size} elements`);
  if (size > 0 && (data + byteOffset) % dtype.alignment !== 0) {
    // Checked here for every device: the address a kDLCPU tensor gets once pinned is the
    // backend's, which (emulated) need not keep the native address's alignment.
    throw new RangeError(
      `${what}: element (0, ..., 0) at 0x${(data + byteOffset).toString(16)} (data + byte_offset) ` +
        `is not aligned to ${dtype.name}'s ${dtype.alignment} bytes`,
    );
  }
  return {
    deleter,
    data,
    deviceId,
    dtype,
    shape,
    strides,
    byteOffset,
    info: Object.freeze({
      versioned,
      version: Object.freeze(version),
      deviceType,
      readOnly: (flags & DLPACK_FLAG_READ_ONLY) !== 0,
      copied: (flags & DLPACK_FLAG_IS_COPIED) !== 0,
    }),
  };
}

/**
 * Imports a DLPack tensor as a DeviceArray over its memory, no copy, taking over the producer's
 * deleter: vram calls it exactly once, when the array is freed (`free()`, `using`) or, if the
 * program drops it, collected. kDLCUDA, kDLCUDAManaged and kDLCUDAHost tensors are wrapped in the
 * memory's own context (`DeviceArray.fromPointer` checks the pointer with the driver); a kDLCPU
 * tensor's memory is pinned in place and mapped for the device first (memory CUDA already pins is
 * wrapped as it is). A tensor of no elements holds no memory: it becomes a new empty array and
 * its deleter is called at once.
 *
 * The struct's flags come back through `dlpackInfo(array)`. A READ_ONLY tensor is wrapped
 * read-only: a copy or fill into it (or into any view of it) is a VramStateError.
 *
 * @param ptr The struct's address (a number, or a bigint as koffi returns pointers).
 * @param options `versioned` (default true: a DLManagedTensorVersioned; false: a DLManagedTensor),
 *   and `device` for managed and pinned tensors.
 * @returns The array; it owns the import (free it, or let it be collected).
 * @throws {TypeError} For a NULL or non-number pointer, bad options, a NULL shape or data pointer where elements exist.
 * @throws {RangeError} For ndim < 0 (or above 64), a negative extent or device id, values beyond 2^53.
 * @throws {NotSupportedError} For another DLPack major version, a NULL deleter, a device type other than
 *   kDLCPU/kDLCUDA/kDLCUDAHost/kDLCUDAManaged, or a dtype vram has no dtype for (complex, fp8, opaque...).
 * @throws {InvalidPointerError} When the driver does not know the data pointer as the memory the
 *   struct says (DeviceArray.fromPointer's checks: unknown or freed memory, unmapped pinned memory,
 *   another device's memory without peer access, a layout past the allocation).
 * @throws {CudaError} When a kDLCPU tensor's memory cannot be pinned.
 *   On each of these throws the caller still owns the tensor.
 * @throws {VramStateError} When the struct is already imported and that array is not yet released
 *   (a second import would call the producer's deleter twice); the earlier array still owns it.
 * @example
 * ```ts
 * const tensor: number = addon.produce();          // a DLManagedTensorVersioned *
 * using a = fromDLPack(tensor);                    // no copy
 * console.log(a.toArray());
 * // end of scope: a is freed, and the producer's deleter runs once
 * ```
 */
export function fromDLPack(ptr: number | bigint, options: FromDLPackOptions = {}): DeviceArray {
  const address = checkStructPointer(ptr, 'fromDLPack');
  options = readOptions('fromDLPack', options, { versioned: true, device: true });
  const versioned = checkVersioned(options, 'fromDLPack');
  checkNotImported(address, 'fromDLPack');
  const device = options.device === undefined ? undefined : Device.resolve(options.device);
  const f = readTensor(address, versioned);
  let released = false;
  const release = (): void => {
    if (released) return;
    released = true;
    // Forgotten before the call: once the deleter runs the producer may reuse the address.
    liveImports.delete(address);
    callDeleter(f.deleter, address);
  };
  const size = f.shape.reduce((a, b) => a * b, 1);
  const deviceType = f.info.deviceType;
  let array: DeviceArray;
  if (size === 0) {
    // No elements, no memory to wrap (and data may be NULL, as dlpack.h asks of empty tensors).
    array = DeviceArray.empty(f.shape, f.dtype, { device: deviceType === DLDeviceType.kDLCUDA ? f.deviceId : device });
    release();
  } else {
    array = wrapTensor(f, release, device);
    liveImports.add(address);
  }
  imported.set(array, f.info);
  return array;
}

/**
 * Wraps a checked tensor of at least one element. DLPack's data + byte_offset is element
 * (0, ..., 0) and negative strides may reach below it, so the memory is wrapped from its lowest
 * byte, with element (0, ..., 0) that far in. Device-addressable memory goes to
 * DeviceArray.fromPointer as it is. kDLCPU memory is first pinned in place and mapped
 * (HostBuffer.register with DEVICEMAP) and wrapped through its device address; the registration is
 * undone before the producer's deleter runs, when the array is released. Memory the driver says is
 * already registered is wrapped as it is.
 */
function wrapTensor(f: TensorFields, release: () => void, device: Device | undefined): DeviceArray {
  const itemSize = f.dtype.byteSize;
  const layout: Layout = f.strides === undefined ? contiguousLayout(f.shape, itemSize) : { shape: f.shape, strides: f.strides, byteOffset: 0, itemSize };
  const { start, end } = byteSpan(layout);
  const lowest = f.data + f.byteOffset + start;
  // A read-only tensor's memory is wrapped read-only: writes into it are VramStateErrors.
  const placed = { strides: layout.strides, byteOffset: -start, readOnly: f.info.readOnly };
  if (f.info.deviceType !== DLDeviceType.kDLCPU) {
    return DeviceArray.fromPointer(lowest, f.shape, f.dtype, {
      ...placed,
      onRelease: release,
      device: f.info.deviceType === DLDeviceType.kDLCUDA ? f.deviceId : device,
    });
  }
  let pinned: HostBuffer;
  try {
    // Its lifetime is the array's (freed by its release), never a `tidy` scope's.
    pinned = keep(HostBuffer.register(new Uint8Array(nativeBuffer(lowest, end - start)), { mapped: true }));
  } catch (error) {
    // Host memory CUDA already pins (a framework's pinned tensor reported as kDLCPU, or memory
    // registered by someone else) is device-addressable under unified addressing as it is:
    // fromPointer checks that the driver maps it, and the range is inside its allocation.
    if (!(error instanceof CudaError && error.code === CUresult.HOST_MEMORY_ALREADY_REGISTERED)) throw error;
    return DeviceArray.fromPointer(lowest, f.shape, f.dtype, { ...placed, device, onRelease: release });
  }
  try {
    return DeviceArray.fromPointer(pinned.devicePtr, f.shape, f.dtype, {
      ...placed,
      device,
      owner: pinned,
      onRelease: () => {
        try {
          pinned.free();
        } finally {
          release();
        }
      },
    });
  } catch (error) {
    pinned.free();
    throw error;
  }
}

/**
 * What the struct of an array `fromDLPack` returned said: its version, device type, and the
 * read-only and copied flags (a read-only import refuses writes; copy it to get one you may write).
 *
 * @param array An array `fromDLPack` returned (not a view made from it).
 * @returns The info, or undefined for any other array.
 * @throws Never.
 * @example
 * ```ts
 * const a = fromDLPack(tensor);
 * const writable = dlpackInfo(a)?.readOnly ? a.copy() : a;
 * ```
 */
export function dlpackInfo(array: StridedArray<DTypeName>): DLPackImportInfo | undefined {
  return typeof array === 'object' && array !== null ? imported.get(array) : undefined;
}

/**
 * Calls the deleter of a DLPack tensor the caller owns and will not import (one `fromDLPack`
 * refused, for instance): once, as the producer asks. For a versioned struct the deleter is read
 * where every DLPack major version keeps it, so a tensor of another major version can be handed back.
 *
 * @param ptr The struct's address.
 * @param options `versioned` (default true).
 * @returns True when a deleter was called; false for a NULL deleter (nothing to call).
 * @throws {TypeError} For a NULL or non-number pointer, or bad options.
 * @throws {VramStateError} When an array from `fromDLPack` holds the tensor (it calls the deleter).
 * @example
 * ```ts
 * try {
 *   return fromDLPack(tensor);
 * } catch (error) {
 *   deleteDLPack(tensor); // refused: hand it back to its producer
 *   throw error;
 * }
 * ```
 */
export function deleteDLPack(ptr: number | bigint, options: FromDLPackOptions = {}): boolean {
  const address = checkStructPointer(ptr, 'deleteDLPack');
  options = readOptions('deleteDLPack', options, { versioned: true, device: true });
  const versioned = checkVersioned(options, 'deleteDLPack');
  checkNotImported(address, 'deleteDLPack');
  const layout = managedLayout(versioned);
  const deleter = u64(nativeView(address, layout.size), layout.deleter, 'deleteDLPack: the deleter');
  if (deleter === 0) return false;
  callDeleter(deleter, address);
  return true;
}
