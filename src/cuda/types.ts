/**
 * The driver API's enum values and struct layouts that vram passes to libcuda, checked against
 * cuda.h (CUDA 12.x / 13.x). Struct types are registered with koffi under a `vram_` prefix so they
 * cannot clash with types other modules declare.
 */
import koffi from 'koffi';
import type { TypeObject } from 'koffi';

/** CUdevice_attribute values vram reads (cuda.h, CUdevice_attribute_enum). */
export const DeviceAttribute = {
  MAX_THREADS_PER_BLOCK: 1,
  MAX_BLOCK_DIM_X: 2,
  MAX_BLOCK_DIM_Y: 3,
  MAX_BLOCK_DIM_Z: 4,
  MAX_GRID_DIM_X: 5,
  MAX_GRID_DIM_Y: 6,
  MAX_GRID_DIM_Z: 7,
  MAX_SHARED_MEMORY_PER_BLOCK: 8,
  WARP_SIZE: 10,
  MULTIPROCESSOR_COUNT: 16,
  INTEGRATED: 18,
  CAN_MAP_HOST_MEMORY: 19,
  L2_CACHE_SIZE: 38,
  ASYNC_ENGINE_COUNT: 40,
  UNIFIED_ADDRESSING: 41,
  TEXTURE_PITCH_ALIGNMENT: 51,
  COMPUTE_CAPABILITY_MAJOR: 75,
  COMPUTE_CAPABILITY_MINOR: 76,
  MANAGED_MEMORY: 83,
  CONCURRENT_MANAGED_ACCESS: 89,
  VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: 102,
  MEMORY_POOLS_SUPPORTED: 115,
} as const;

/** CUfunction_attribute values (cuda.h, CUfunction_attribute_enum). */
export const FunctionAttribute = {
  MAX_THREADS_PER_BLOCK: 0,
  SHARED_SIZE_BYTES: 1,
  CONST_SIZE_BYTES: 2,
  LOCAL_SIZE_BYTES: 3,
  NUM_REGS: 4,
  PTX_VERSION: 5,
  BINARY_VERSION: 6,
  MAX_DYNAMIC_SHARED_SIZE_BYTES: 8,
} as const;

/** CUpointer_attribute values vram queries (cuda.h, CUpointer_attribute_enum). */
export const PointerAttribute = {
  CONTEXT: 1,
  MEMORY_TYPE: 2,
  IS_MANAGED: 8,
  DEVICE_ORDINAL: 9,
  RANGE_START_ADDR: 11,
  RANGE_SIZE: 12,
  MEMPOOL_HANDLE: 17,
} as const;

/** CUmemLocationType (cuda.h, CUmemLocationType_enum). */
export const MemLocationType = {
  INVALID: 0,
  DEVICE: 1,
  HOST: 2,
  HOST_NUMA: 3,
  HOST_NUMA_CURRENT: 4,
} as const;

/** CUmemAllocationType: PINNED is the only type pools and cuMemCreate take for device memory. */
export const MemAllocationType = {
  PINNED: 1,
} as const;

/** CUmemAllocationGranularity_flags. */
export const AllocationGranularity = {
  MINIMUM: 0,
  RECOMMENDED: 1,
} as const;

/** CUgraphNodeType values vram counts (cuda.h, CUgraphNodeType_enum). */
export const GraphNodeType = {
  MEM_ALLOC: 10,
  MEM_FREE: 11,
} as const;

/** CUmemorytype value that makes a 2D copy read both addresses as unified virtual addresses. */
export const MEMORYTYPE_UNIFIED = 4;

/** CU_DEVICE_CPU: the host, for the pre-12.2 cuMemPrefetchAsync/cuMemAdvise that take a CUdevice. */
export const DEVICE_CPU = -1;

/** CU_GET_PROC_ADDRESS_DEFAULT: legacy default-stream semantics for resolved entry points. */
export const GET_PROC_ADDRESS_DEFAULT = 0;

/** Returns the koffi type registered under `name`, creating it on first use (module reloads reuse it). */
function namedStruct(name: string, members: Record<string, string | TypeObject>): TypeObject {
  try {
    return koffi.type(name);
  } catch {
    return koffi.struct(name, members);
  }
}

/** CUmemLocation: `{ CUmemLocationType type; int id; }` (8 bytes). */
export const CUmemLocation: TypeObject = namedStruct('vram_CUmemLocation', {
  type: 'int',
  id: 'int',
});

/**
 * CUmemPoolProps (88 bytes): allocType, handleTypes, location, win32SecurityAttributes, maxSize,
 * usage, then 54 reserved bytes (13.x names the first of them gpuDirectRDMACapable); zero-filled.
 */
export const CUmemPoolProps: TypeObject = namedStruct('vram_CUmemPoolProps', {
  allocType: 'int',
  handleTypes: 'int',
  location: CUmemLocation,
  win32SecurityAttributes: 'uint64_t',
  maxSize: 'size_t',
  usage: 'uint16_t',
  reserved: koffi.array('uint8_t', 54),
});

/** CUmemAllocationProp (32 bytes): type, requestedHandleTypes, location, win32HandleMetaData, allocFlags. */
export const CUmemAllocationProp: TypeObject = namedStruct('vram_CUmemAllocationProp', {
  type: 'int',
  requestedHandleTypes: 'int',
  location: CUmemLocation,
  win32HandleMetaData: 'uint64_t',
  compressionType: 'uint8_t',
  gpuDirectRDMACapable: 'uint8_t',
  usage: 'uint16_t',
  reserved: koffi.array('uint8_t', 4),
});

/** CUmemAccessDesc (12 bytes): `{ CUmemLocation location; CUmemAccess_flags flags; }`. */
export const CUmemAccessDesc: TypeObject = namedStruct('vram_CUmemAccessDesc', {
  location: CUmemLocation,
  flags: 'int',
});

/**
 * CUDA_MEMCPY2D (128 bytes). Pointers and CUarray handles are declared as uint64_t: same layout on
 * 64-bit targets, and vram only ever passes unified addresses (srcDevice/dstDevice) and zeros.
 */
export const CUDA_MEMCPY2D: TypeObject = namedStruct('vram_CUDA_MEMCPY2D', {
  srcXInBytes: 'size_t',
  srcY: 'size_t',
  srcMemoryType: 'int',
  srcHost: 'uint64_t',
  srcDevice: 'uint64_t',
  srcArray: 'uint64_t',
  srcPitch: 'size_t',
  dstXInBytes: 'size_t',
  dstY: 'size_t',
  dstMemoryType: 'int',
  dstHost: 'uint64_t',
  dstDevice: 'uint64_t',
  dstArray: 'uint64_t',
  dstPitch: 'size_t',
  WidthInBytes: 'size_t',
  Height: 'size_t',
});

/**
 * CUipcMemHandle and CUipcEventHandle (64 bytes each: `char reserved[64]`). cuIpcOpenMemHandle and
 * cuIpcOpenEventHandle take them by value, so they are bound as structs rather than pointers.
 */
export const CUipcMemHandle: TypeObject = namedStruct('vram_CUipcMemHandle', {
  reserved: koffi.array('uint8_t', 64),
});
/** See CUipcMemHandle: the same 64-byte layout. */
export const CUipcEventHandle: TypeObject = namedStruct('vram_CUipcEventHandle', {
  reserved: koffi.array('uint8_t', 64),
});

/** JS shape of CUipcMemHandle / CUipcEventHandle passed by value. */
export interface IpcHandleValue {
  reserved: Uint8Array;
}

/** JS shape of CUmemLocation. */
export interface MemLocationValue {
  type: number;
  id: number;
}

/** JS shape of CUmemAccessDesc. */
export interface MemAccessDescValue {
  location: MemLocationValue;
  flags: number;
}

/** JS shape of CUmemPoolProps (reserved bytes are zero-filled by koffi). */
export interface MemPoolPropsValue {
  allocType: number;
  handleTypes: number;
  location: MemLocationValue;
  win32SecurityAttributes: number;
  maxSize: number;
  usage: number;
}

/** JS shape of CUmemAllocationProp (reserved bytes are zero-filled by koffi). */
export interface MemAllocationPropValue {
  type: number;
  requestedHandleTypes: number;
  location: MemLocationValue;
  win32HandleMetaData: number;
  compressionType: number;
  gpuDirectRDMACapable: number;
  usage: number;
}

/** JS shape of CUDA_MEMCPY2D. */
export interface Memcpy2DValue {
  srcXInBytes: number;
  srcY: number;
  srcMemoryType: number;
  srcHost: number;
  srcDevice: number;
  srcArray: number;
  srcPitch: number;
  dstXInBytes: number;
  dstY: number;
  dstMemoryType: number;
  dstHost: number;
  dstDevice: number;
  dstArray: number;
  dstPitch: number;
  WidthInBytes: number;
  Height: number;
}
