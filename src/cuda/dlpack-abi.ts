/**
 * DLPack's C ABI (dlpack.h 1.1, dmlc/dlpack): the structs a DLPack tensor is made of, the enum
 * values vram reads and writes, and the native memory and function pointers an exchange needs.
 * The layouts are declared as koffi structs (under a `vram_` prefix) and every offset vram reads
 * or writes is taken from koffi's layout of them, so the C layout rules decide, not a table typed
 * by hand; test/interop/dlpack.test.ts checks them against the sizes dlpack.h gives on 64-bit targets
 * (DLTensor 48 bytes, DLManagedTensor 64, DLManagedTensorVersioned 80).
 *
 * Everything here works on addresses as JavaScript numbers (exact below 2^53, as every address vram
 * handles). Reading a struct at an address the caller made up is what C does too: a wild address
 * crashes the process; vram cannot tell a struct from any other mapped memory.
 *
 * Deleters: a DLPack struct carries a C function pointer that frees it. vram's own structs point at
 * one koffi-registered callback per struct kind, registered on first export and never unregistered
 * (koffi has 8192 registered-callback slots; two are used, however many tensors are exported). A
 * registered callback runs JavaScript on the main thread: a consumer that calls it from another
 * thread is queued until the event loop runs (koffi's rule), so such a consumer must not block the
 * main thread waiting for the deleter to return.
 */
import koffi from 'koffi';
import type { TypeObject } from 'koffi';

/** DLDeviceType (dlpack.h 1.1): every device type, so a refused one can be named. */
export const DLDeviceType = {
  kDLCPU: 1,
  kDLCUDA: 2,
  kDLCUDAHost: 3,
  kDLOpenCL: 4,
  kDLVulkan: 7,
  kDLMetal: 8,
  kDLVPI: 9,
  kDLROCM: 10,
  kDLROCMHost: 11,
  kDLExtDev: 12,
  kDLCUDAManaged: 13,
  kDLOneAPI: 14,
  kDLWebGPU: 15,
  kDLHexagon: 16,
  kDLMAIA: 17,
  kDLTrn: 18,
} as const;

/** DLDataTypeCode (dlpack.h 1.1): every type code, so a refused one can be named. */
export const DLDataTypeCode = {
  kDLInt: 0,
  kDLUInt: 1,
  kDLFloat: 2,
  kDLOpaqueHandle: 3,
  kDLBfloat: 4,
  kDLComplex: 5,
  kDLBool: 6,
  kDLFloat8_e3m4: 7,
  kDLFloat8_e4m3: 8,
  kDLFloat8_e4m3b11fnuz: 9,
  kDLFloat8_e4m3fn: 10,
  kDLFloat8_e4m3fnuz: 11,
  kDLFloat8_e5m2: 12,
  kDLFloat8_e5m2fnuz: 13,
  kDLFloat8_e8m0fnu: 14,
  kDLFloat6_e2m3fn: 15,
  kDLFloat6_e3m2fn: 16,
  kDLFloat4_e2m1fn: 17,
} as const;

/** DLPACK_FLAG_BITMASK_READ_ONLY: the consumer must not write the tensor. */
export const DLPACK_FLAG_READ_ONLY = 1;
/** DLPACK_FLAG_BITMASK_IS_COPIED: the producer made a copy; the consumer owns it alone until the deleter runs. */
export const DLPACK_FLAG_IS_COPIED = 2;
/** DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED (1.1): sub-byte types are padded, not packed. */
export const DLPACK_FLAG_SUBBYTE_PADDED = 4;

/** The DLPack version vram writes into the structs it exports (the header it was written against). */
export const DLPACK_VERSION: { readonly major: number; readonly minor: number } = Object.freeze({ major: 1, minor: 1 });

/**
 * The name of a device type, for messages.
 *
 * @param code A DLDeviceType value.
 * @returns Its name in dlpack.h (`kDLROCM`), or `device type N` for one dlpack.h does not define.
 * @throws Never.
 * @example
 * ```ts
 * deviceTypeName(10); // 'kDLROCM'
 * ```
 */
export function deviceTypeName(code: number): string {
  for (const [name, value] of Object.entries(DLDeviceType)) if (value === code) return name;
  return `device type ${code}`;
}

/**
 * The name of a type code, for messages.
 *
 * @param code A DLDataTypeCode value.
 * @returns Its name in dlpack.h (`kDLComplex`), or `type code N` for one dlpack.h does not define.
 * @throws Never.
 * @example
 * ```ts
 * typeCodeName(5); // 'kDLComplex'
 * ```
 */
export function typeCodeName(code: number): string {
  for (const [name, value] of Object.entries(DLDataTypeCode)) if (value === code) return name;
  return `type code ${code}`;
}

/** Returns the koffi type registered under `name`, creating it on first use (module reloads reuse it). */
function namedType(name: string, make: () => TypeObject): TypeObject {
  try {
    return koffi.type(name);
  } catch {
    return make();
  }
}

/** DLPackVersion: `{ uint32_t major; uint32_t minor; }` (8 bytes). */
export const DLPackVersionType: TypeObject = namedType('vram_DLPackVersion', () =>
  koffi.struct('vram_DLPackVersion', {
    major: 'uint32_t',
    minor: 'uint32_t',
  }),
);

/** DLDevice: `{ DLDeviceType device_type (int32); int32_t device_id; }` (8 bytes). */
export const DLDeviceStruct: TypeObject = namedType('vram_DLDevice', () =>
  koffi.struct('vram_DLDevice', {
    device_type: 'int32_t',
    device_id: 'int32_t',
  }),
);

/** DLDataType: `{ uint8_t code; uint8_t bits; uint16_t lanes; }` (4 bytes). */
export const DLDataTypeStruct: TypeObject = namedType('vram_DLDataType', () =>
  koffi.struct('vram_DLDataType', {
    code: 'uint8_t',
    bits: 'uint8_t',
    lanes: 'uint16_t',
  }),
);

/**
 * DLTensor (48 bytes): data, device, ndim, dtype, shape (int64_t *), strides (int64_t *, in
 * elements; NULL means compact row-major), byte_offset. Pointers are declared as uint64_t: the same
 * layout on 64-bit targets, and vram only reads and writes them as addresses.
 */
export const DLTensorStruct: TypeObject = namedType('vram_DLTensor', () =>
  koffi.struct('vram_DLTensor', {
    data: 'uint64_t',
    device: DLDeviceStruct,
    ndim: 'int32_t',
    dtype: DLDataTypeStruct,
    shape: 'uint64_t',
    strides: 'uint64_t',
    byte_offset: 'uint64_t',
  }),
);

/** DLManagedTensor, the pre-1.0 struct (64 bytes): `{ DLTensor dl_tensor; void *manager_ctx; void (*deleter)(DLManagedTensor *); }`. */
export const DLManagedTensorStruct: TypeObject = namedType('vram_DLManagedTensor', () =>
  koffi.struct('vram_DLManagedTensor', {
    dl_tensor: DLTensorStruct,
    manager_ctx: 'uint64_t',
    deleter: 'uint64_t',
  }),
);

/**
 * DLManagedTensorVersioned (80 bytes): `{ DLPackVersion version; void *manager_ctx;
 * void (*deleter)(DLManagedTensorVersioned *); uint64_t flags; DLTensor dl_tensor; }`. dlpack.h
 * keeps everything up to `flags` stable across major versions, so the deleter of a tensor of
 * another major version can still be found and called.
 */
export const DLManagedTensorVersionedStruct: TypeObject = namedType('vram_DLManagedTensorVersioned', () =>
  koffi.struct('vram_DLManagedTensorVersioned', {
    version: DLPackVersionType,
    manager_ctx: 'uint64_t',
    deleter: 'uint64_t',
    flags: 'uint64_t',
    dl_tensor: DLTensorStruct,
  }),
);

/** Both structs' deleters: `void deleter(void *self)` (self is the struct; C's type differs only in the pointee). */
export const DLPackDeleter: TypeObject = namedType('vram_DLPackDeleter', () => koffi.proto('void vram_DLPackDeleter(void *self)'));

/** Where each field of a managed tensor lies, for one of the two struct kinds. */
export interface ManagedTensorLayout {
  /** sizeof the struct. */
  readonly size: number;
  /** offsetof(version): -1 for the legacy struct, which has none. */
  readonly version: number;
  /** offsetof(manager_ctx). */
  readonly managerCtx: number;
  /** offsetof(deleter). */
  readonly deleter: number;
  /** offsetof(flags): -1 for the legacy struct. */
  readonly flags: number;
  /** offsetof(dl_tensor). */
  readonly tensor: number;
}

/** Where each field of a DLTensor lies, relative to the DLTensor. */
export interface TensorLayout {
  readonly size: number;
  readonly data: number;
  readonly deviceType: number;
  readonly deviceId: number;
  readonly ndim: number;
  readonly code: number;
  readonly bits: number;
  readonly lanes: number;
  readonly shape: number;
  readonly strides: number;
  readonly byteOffset: number;
}

const device = koffi.offsetof(DLTensorStruct, 'device');
const dtype = koffi.offsetof(DLTensorStruct, 'dtype');

/** DLTensor's layout, from koffi's. */
export const TENSOR_LAYOUT: TensorLayout = Object.freeze({
  size: koffi.sizeof(DLTensorStruct),
  data: koffi.offsetof(DLTensorStruct, 'data'),
  deviceType: device + koffi.offsetof(DLDeviceStruct, 'device_type'),
  deviceId: device + koffi.offsetof(DLDeviceStruct, 'device_id'),
  ndim: koffi.offsetof(DLTensorStruct, 'ndim'),
  code: dtype + koffi.offsetof(DLDataTypeStruct, 'code'),
  bits: dtype + koffi.offsetof(DLDataTypeStruct, 'bits'),
  lanes: dtype + koffi.offsetof(DLDataTypeStruct, 'lanes'),
  shape: koffi.offsetof(DLTensorStruct, 'shape'),
  strides: koffi.offsetof(DLTensorStruct, 'strides'),
  byteOffset: koffi.offsetof(DLTensorStruct, 'byte_offset'),
});

/**
 * Where the fields of a managed tensor struct lie, from koffi's layout of it.
 *
 * @param versioned True for DLManagedTensorVersioned, false for DLManagedTensor.
 * @returns The offsets (frozen).
 * @throws Never.
 * @example
 * ```ts
 * managedLayout(true).deleter; // 16
 * ```
 */
export function managedLayout(versioned: boolean): ManagedTensorLayout {
  return versioned ? VERSIONED_LAYOUT : LEGACY_LAYOUT;
}

const VERSIONED_LAYOUT: ManagedTensorLayout = Object.freeze({
  size: koffi.sizeof(DLManagedTensorVersionedStruct),
  version: koffi.offsetof(DLManagedTensorVersionedStruct, 'version'),
  managerCtx: koffi.offsetof(DLManagedTensorVersionedStruct, 'manager_ctx'),
  deleter: koffi.offsetof(DLManagedTensorVersionedStruct, 'deleter'),
  flags: koffi.offsetof(DLManagedTensorVersionedStruct, 'flags'),
  tensor: koffi.offsetof(DLManagedTensorVersionedStruct, 'dl_tensor'),
});

const LEGACY_LAYOUT: ManagedTensorLayout = Object.freeze({
  size: koffi.sizeof(DLManagedTensorStruct),
  version: -1,
  managerCtx: koffi.offsetof(DLManagedTensorStruct, 'manager_ctx'),
  deleter: koffi.offsetof(DLManagedTensorStruct, 'deleter'),
  flags: -1,
  tensor: koffi.offsetof(DLManagedTensorStruct, 'dl_tensor'),
});

/**
 * An address as a number, checked exact (koffi hands pointers over as bigints).
 *
 * @param value The address.
 * @param what Names it in the error.
 * @returns The same address as a number.
 * @throws {RangeError} For an address at or beyond 2^53 (never seen on x86-64 or aarch64).
 * @example
 * ```ts
 * addressNumber(koffi.address(p), 'p');
 * ```
 */
export function addressNumber(value: bigint, what: string): number {
  const n = Number(value);
  if (BigInt(n) !== value || !Number.isSafeInteger(n)) {
    throw new RangeError(`${what} 0x${value.toString(16)} is beyond 2^53: not representable as a JavaScript number`);
  }
  return n;
}

/**
 * A DataView over `bytes` of native memory at `address` (zero-copy, koffi's external buffer).
 *
 * @param address A native address (> 0).
 * @param bytes How many bytes (> 0).
 * @returns The view; valid while the memory is.
 * @throws {Error} From koffi, for a NULL address; a wild address crashes when read, as in C.
 * @example
 * ```ts
 * nativeView(tensor, 80).getUint32(0, true); // a DLManagedTensorVersioned's major version
 * ```
 */
export function nativeView(address: number, bytes: number): DataView {
  return new DataView(nativeBuffer(address, bytes));
}

/** Native memory from the C allocator (koffi.alloc: malloc, 16-byte aligned on 64-bit glibc). */
export interface NativeBlock {
  /** The first byte's address. */
  readonly address: number;
  /** The value koffi.free takes back. */
  readonly handle: bigint;
}

/**
 * Allocates `bytes` of native memory (rounded up to whole 8-byte words, so int64 arrays in it are
 * aligned): what vram's exported structs, shapes and strides live in, so C can read them after
 * the call that made them has returned.
 *
 * @param bytes How many bytes (> 0).
 * @returns The block; give it back with `freeNative`.
 * @throws {Error} When the C allocator has no memory (koffi's error).
 * @example
 * ```ts
 * const block = allocateNative(80 + 16 * ndim);
 * ```
 */
export function allocateNative(bytes: number): NativeBlock {
  const handle = koffi.alloc('uint64_t', Math.ceil(bytes / 8)) as bigint;
  return { address: addressNumber(handle, 'koffi.alloc'), handle };
}

/**
 * Gives back a block from `allocateNative` (C's free), once.
 *
 * @param block The block.
 * @throws Never (a second free of a block is the caller's error, as in C).
 * @example
 * ```ts
 * freeNative(block);
 * ```
 */
export function freeNative(block: NativeBlock): void {
  koffi.free(block.handle);
}

/**
 * Calls a DLPack deleter: the C function at `deleter` with `self` (the struct) as its argument.
 *
 * @param deleter The function's address (non-zero).
 * @param self The struct's address.
 * @throws Never from vram; whatever the deleter does (a wild pointer crashes, as in C).
 * @example
 * ```ts
 * callDeleter(deleter, tensor); // the producer frees the tensor
 * ```
 */
export function callDeleter(deleter: number, self: number): void {
  koffi.call(deleter, DLPackDeleter, self);
}

const registered = new Map<boolean, number>();

/**
 * The C function pointer of vram's deleter for one struct kind: a koffi-registered callback that
 * hands the struct's address to `handler`. Registered on the first call for the kind and kept for
 * the life of the process (the structs that point at it may be called at any time); later calls
 * return the same address and ignore `handler`.
 *
 * @param versioned Which struct kind the deleter is for.
 * @param handler Called with the struct's address; what it throws is caught here (an exception cannot cross C).
 * @returns The function's address.
 * @throws {Error} From koffi, when no registered-callback slot is left (8192 in use).
 * @example
 * ```ts
 * struct.setBigUint64(16, BigInt(deleterAddress(true, onDelete)), true);
 * ```
 */
export function deleterAddress(versioned: boolean, handler: (self: number) => void): number {
  const known = registered.get(versioned);
  if (known !== undefined) return known;
  const callback = koffi.register((self: bigint | null) => {
    if (self === null) return;
    try {
      handler(Number(self));
    } catch (error) {
      // Nothing in C can receive it; say so instead of losing it.
      process.emitWarning(`a DLPack deleter failed: ${error instanceof Error ? error.message : String(error)}`, { code: 'VRAM_DLPACK_DELETER' });
    }
  }, koffi.pointer(DLPackDeleter));
  const address = addressNumber(callback, 'koffi.register');
  registered.set(versioned, address);
  return address;
}

/**
 * An ArrayBuffer over `bytes` of native memory at `address` (zero-copy, koffi's external buffer):
 * host memory C handed over (a kDLCPU tensor's data) as JavaScript memory.
 *
 * @param address A native address (> 0).
 * @param bytes How many bytes (> 0).
 * @returns The ArrayBuffer; valid while the memory is.
 * @throws {Error} From koffi, for a NULL address.
 * @example
 * ```ts
 * const floats = new Float32Array(nativeBuffer(data, 4 * n));
 * ```
 */
export function nativeBuffer(address: number, bytes: number): ArrayBuffer {
  return koffi.view(address, bytes);
}
