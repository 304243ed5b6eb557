/**
 * Modules and kernel launches, emulated. A module is the set of JavaScript functions its image
 * came with (`ModuleImage.emulated`); the image's PTX or CUBIN is never run. A launch is checked
 * as the driver checks it (function, stream, grid and block against the device's limits, shared
 * memory), its arguments are decoded from the parameter block at launch time (the block may be
 * rewritten as soon as the call returns, as with cuLaunchKernel), and the function runs in stream
 * order, like a copy: when the stream is synchronised, or before a synchronous call that touches
 * memory. The limits, attributes and occupancy are those of a compute capability 9.0 device with
 * a kernel of 32 registers per thread and no static shared memory: a model, not a measurement.
 */
import { checkCacheConfig } from './context-calls.js';
import type {
  EmulatedAccess,
  EmulatedKernel,
  EmulatedKernels,
  EmulatedMemory,
  FunctionAttributes,
  Handle,
  KernelLimits,
  KernelParams,
  ModuleImage,
  ParamType,
  Ptr,
} from '../backend.js';
import { paramLayout } from '../param-layout.js';
import { CudaError, CUresult } from '../../errors.js';
import { fail, hex, invalidValue } from './fail.js';
import type { EmulatedState } from './state.js';
import { copySpans, EagerStore, type Span } from './store.js';

/** The emulated device's launch limits: those of compute capability 9.0 (CUDA C Programming Guide, table 21). */
export const EMULATED_KERNEL_LIMITS: KernelLimits = Object.freeze({
  maxThreadsPerBlock: 1024,
  maxBlockDim: Object.freeze([1024, 1024, 64] as const),
  maxGridDim: Object.freeze([2 ** 31 - 1, 65535, 65535] as const),
  maxSharedBytesPerBlock: 48 * 1024,
  warpSize: 32,
});

/** What every emulated kernel reports (there is no device code to measure). */
const EMULATED_ATTRIBUTES: FunctionAttributes = Object.freeze({
  maxThreadsPerBlock: 1024,
  sharedSizeBytes: 0,
  constSizeBytes: 0,
  localSizeBytes: 0,
  numRegs: 32,
  ptxVersion: 90,
  binaryVersion: 90,
  maxDynamicSharedSizeBytes: 48 * 1024,
});

/** The multiprocessor resources of compute capability 9.0 that occupancy is computed from. */
const SM = {
  maxThreads: 2048,
  maxBlocks: 32,
  registers: 65536,
  sharedBytes: 228 * 1024,
  /** Shared memory the system reserves per block on 9.0. */
  reservedSharedPerBlock: 1024,
} as const;

interface ModuleState {
  readonly handle: Handle;
  readonly context: Handle;
  readonly kernels: EmulatedKernels;
  unloaded: boolean;
}

interface FunctionState {
  readonly handle: Handle;
  readonly module: ModuleState;
  readonly name: string;
  readonly run: EmulatedKernel;
  /** cuFuncSetCacheConfig's preference (CUfunc_cache). */
  cacheConfig: number;
}

/** Modules, functions and launches of one emulated driver. */
export class KernelCalls {
  private readonly modules = new Map<Handle, ModuleState>();
  private readonly functions = new Map<Handle, FunctionState>();

  constructor(private readonly s: EmulatedState) {}

  /** cuModuleLoadData: the image's JavaScript kernels, in the current context. */
  moduleLoad(image: ModuleImage): Handle {
    const call = 'cuModuleLoadData';
    const ctx = this.s.ctx(call);
    if (image === null || typeof image !== 'object' || !(image.data instanceof Uint8Array)) invalidValue(call, 'the image must be { kind, data: Uint8Array }');
    if (image.kind !== 'ptx' && image.kind !== 'cubin') invalidValue(call, `unknown image kind ${String(image.kind)}`);
    const kernels = image.emulated ?? {};
    for (const [name, run] of Object.entries(kernels)) {
      if (typeof run !== 'function') invalidValue(call, `the emulated implementation of ${name} is not a function`);
    }
    const handle = this.s.handle();
    this.modules.set(handle, { handle, context: ctx.handle, kernels, unloaded: false });
    return handle;
  }

  /** cuModuleUnload: its functions can no longer be launched (work already queued still runs). */
  moduleUnload(module: Handle): void {
    const m = this.module(module, 'cuModuleUnload');
    m.unloaded = true;
    this.modules.delete(module);
    for (const [handle, f] of this.functions) if (f.module === m) this.functions.delete(handle);
  }

  /** cuModuleGetFunction: CUDA_ERROR_NOT_FOUND for a name the module has no JavaScript for. */
  moduleGetFunction(module: Handle, name: string): Handle {
    const call = 'cuModuleGetFunction';
    const m = this.module(module, call);
    if (typeof name !== 'string') invalidValue(call, 'the name must be a string');
    const run = Object.hasOwn(m.kernels, name) ? m.kernels[name] : undefined;
    if (run === undefined) fail(CUresult.NOT_FOUND, call, `the module has no kernel named ${name}`);
    for (const f of this.functions.values()) if (f.module === m && f.name === name) return f.handle;
    const handle = this.s.handle();
    this.functions.set(handle, { handle, module: m, name, run, cacheConfig: 0 });
    return handle;
  }

  /** cuFuncGetAttribute: the model's fixed figures. */
  functionAttributes(fn: Handle): FunctionAttributes {
    this.fn(fn, 'cuFuncGetAttribute');
    return EMULATED_ATTRIBUTES;
  }

  /** The launch limits of every emulated device. */
  /** cuFuncSetCacheConfig. */
  functionSetCacheConfig(fn: Handle, config: number): void {
    const call = 'cuFuncSetCacheConfig';
    this.fn(fn, call).cacheConfig = checkCacheConfig(config, call);
  }

  /** The preference cuFuncSetCacheConfig set (for tests). */
  functionCacheConfig(fn: Handle): number {
    return this.fn(fn, 'cuFuncGetCacheConfig').cacheConfig;
  }

  kernelLimits(ordinal: number): KernelLimits {
    this.s.device(ordinal, 'cuDeviceGetAttribute');
    return EMULATED_KERNEL_LIMITS;
  }

  /** A parameter block in JavaScript memory (no native pointer array: `address` is 0). */
  kernelParams(types: readonly ParamType[]): KernelParams {
    const { slots, bytes } = paramLayout(types);
    return { slots, data: new DataView(new ArrayBuffer(bytes)), address: 0 };
  }

  /** cuLaunchKernel: checked now, arguments decoded now, the JavaScript run in stream order. */
  launchKernel(
    fn: Handle,
    gridX: number,
    gridY: number,
    gridZ: number,
    blockX: number,
    blockY: number,
    blockZ: number,
    sharedBytes: number,
    stream: Handle,
    params: KernelParams,
  ): void {
    const call = 'cuLaunchKernel';
    const f = this.fn(fn, call);
    const s = this.s.stream(stream, call);
    if (s.context !== f.module.context) fail(CUresult.INVALID_HANDLE, call, `${f.name} belongs to another context than the stream's`);
    const limits = EMULATED_KERNEL_LIMITS;
    const grid = [gridX, gridY, gridZ] as const;
    const block = [blockX, blockY, blockZ] as const;
    for (let i = 0; i < 3; i++) {
      const g = grid[i]!;
      const b = block[i]!;
      if (!Number.isInteger(g) || g < 1 || g > limits.maxGridDim[i]!) invalidValue(call, `grid dimension ${i} is ${g}`);
      if (!Number.isInteger(b) || b < 1 || b > limits.maxBlockDim[i]!) invalidValue(call, `block dimension ${i} is ${b}`);
    }
    if (blockX * blockY * blockZ > limits.maxThreadsPerBlock) invalidValue(call, `${blockX * blockY * blockZ} threads per block`);
    if (!Number.isInteger(sharedBytes) || sharedBytes < 0 || sharedBytes > EMULATED_ATTRIBUTES.maxDynamicSharedSizeBytes) {
      invalidValue(call, `${sharedBytes} bytes of dynamic shared memory`);
    }
    const args = decodeArgs(params);
    const launch = { grid, block, sharedBytes, args };
    const run = f.run;
    const name = f.name;
    this.s.enqueue(
      s,
      () => {
        const memory = new LaunchMemory(this.s, name);
        try {
          run({ ...launch, memory });
        } catch (error) {
          // What the kernel wrote before a fault stays written, as on a GPU (not 'write' ranges: see EmulatedMemory).
          memory.writeBack(false);
          throw launchFailure(name, error);
        }
        memory.writeBack(true);
      },
      undefined,
      undefined,
      call,
    );
  }

  /** cuOccupancyMaxActiveBlocksPerMultiprocessor, from the model's multiprocessor. */
  occupancyMaxActiveBlocksPerMultiprocessor(fn: Handle, blockSize: number, sharedBytes: number): number {
    this.fn(fn, 'cuOccupancyMaxActiveBlocksPerMultiprocessor');
    return activeBlocks(blockSize, sharedBytes);
  }

  /**
   * cuOccupancyMaxPotentialBlockSize: the block size (a multiple of the warp size up to the limit)
   * with the most resident threads per multiprocessor, the largest such on a tie, as
   * cuda_occupancy.h computes it; minGridSize fills every multiprocessor at that occupancy.
   */
  occupancyMaxPotentialBlockSize(fn: Handle, sharedBytes: number, blockSizeLimit: number): { minGridSize: number; blockSize: number } {
    const f = this.fn(fn, 'cuOccupancyMaxPotentialBlockSize');
    const warp = EMULATED_KERNEL_LIMITS.warpSize;
    const ceiling = blockSizeLimit > 0 ? Math.min(blockSizeLimit, EMULATED_ATTRIBUTES.maxThreadsPerBlock) : EMULATED_ATTRIBUTES.maxThreadsPerBlock;
    let best = 0;
    let bestBlocks = 0;
    let bestSize = 0;
    const start = ceiling % warp === 0 ? ceiling : ceiling - (ceiling % warp) + warp;
    for (let size = start; size > 0; size -= warp) {
      const clamped = Math.min(size, ceiling);
      const blocks = activeBlocks(clamped, sharedBytes);
      if (blocks * clamped > best) {
        best = blocks * clamped;
        bestBlocks = blocks;
        bestSize = clamped;
      }
      if (best === SM.maxThreads) break;
    }
    const sms = this.s.contexts.get(f.module.context)?.device.info().multiprocessorCount ?? 1;
    return { minGridSize: bestBlocks * sms, blockSize: bestSize };
  }

  private module(handle: Handle, call: string): ModuleState {
    const m = this.modules.get(handle);
    if (m === undefined) fail(CUresult.INVALID_HANDLE, call, `unknown module ${handle}`);
    return m;
  }

  private fn(handle: Handle, call: string): FunctionState {
    const f = this.functions.get(handle);
    if (f === undefined) fail(CUresult.INVALID_HANDLE, call, `unknown function ${handle}`);
    return f;
  }
}

/** Resident blocks of `blockSize` threads per multiprocessor of the model (0 for an impossible block). */
function activeBlocks(blockSize: number, sharedBytes: number): number {
  if (!Number.isInteger(blockSize) || blockSize < 1 || blockSize > EMULATED_ATTRIBUTES.maxThreadsPerBlock) return 0;
  if (sharedBytes > EMULATED_ATTRIBUTES.maxDynamicSharedSizeBytes) return 0;
  const warps = Math.ceil(blockSize / EMULATED_KERNEL_LIMITS.warpSize);
  const byThreads = Math.floor(SM.maxThreads / (warps * EMULATED_KERNEL_LIMITS.warpSize));
  const byRegisters = Math.floor(SM.registers / (warps * EMULATED_KERNEL_LIMITS.warpSize * EMULATED_ATTRIBUTES.numRegs));
  const byShared = Math.floor(SM.sharedBytes / (sharedBytes + EMULATED_ATTRIBUTES.sharedSizeBytes + SM.reservedSharedPerBlock));
  return Math.max(0, Math.min(SM.maxBlocks, byThreads, byRegisters, byShared));
}

/** The parameter block's values as the kernel's JavaScript receives them. */
function decodeArgs(params: KernelParams): (number | bigint | number[])[] {
  const view = params.data;
  const args: (number | bigint | number[])[] = [];
  for (const slot of params.slots) {
    const type = slot.type;
    if (typeof type === 'object') {
      args.push(
        type.struct.map((member, i) => {
          const value = readScalar(view, slot.offset + slot.memberOffsets[i]!, member);
          return typeof value === 'bigint' ? Number(value) : value;
        }),
      );
    } else {
      args.push(readScalar(view, slot.offset, type === 'ptr' || type === 'cptr' ? 'u64' : type));
    }
  }
  return args;
}

/** One scalar from the block; 64-bit integers as numbers when exact, else bigints. */
function readScalar(
  view: DataView,
  offset: number,
  type: Exclude<ParamType, 'ptr' | 'cptr' | { readonly struct: readonly unknown[] }> | 'u64',
): number | bigint {
  switch (type) {
    case 'i8':
      return view.getInt8(offset);
    case 'u8':
      return view.getUint8(offset);
    case 'i16':
      return view.getInt16(offset, true);
    case 'u16':
      return view.getUint16(offset, true);
    case 'i32':
      return view.getInt32(offset, true);
    case 'u32':
      return view.getUint32(offset, true);
    case 'f32':
      return view.getFloat32(offset, true);
    case 'f64':
      return view.getFloat64(offset, true);
    case 'i64': {
      const v = view.getBigInt64(offset, true);
      return v >= -9007199254740991n && v <= 9007199254740991n ? Number(v) : v;
    }
    case 'u64': {
      const v = view.getBigUint64(offset, true);
      return v <= 9007199254740991n ? Number(v) : v;
    }
  }
}

/**
 * The error a kernel's JavaScript raised, as the driver reports a failed kernel: an access
 * outside memory is CUDA_ERROR_ILLEGAL_ADDRESS, anything else CUDA_ERROR_LAUNCH_FAILED; both name
 * the kernel and keep the JavaScript error as `cause`.
 */
function launchFailure(name: string, error: unknown): CudaError {
  if (error instanceof CudaError && error.code === CUresult.ILLEGAL_ADDRESS) return error;
  const message = error instanceof Error ? error.message : String(error);
  const failure = new CudaError(
    CUresult.LAUNCH_FAILED,
    'CUDA_ERROR_LAUNCH_FAILED',
    'cuLaunchKernel',
    `kernel ${name} (emulated: its JavaScript implementation threw: ${message})`,
  );
  Object.defineProperty(failure, 'cause', { value: error, enumerable: false, writable: true, configurable: true });
  return failure;
}

/** A range of device memory copied in for one launch, written back when it ends. */
interface CopiedRange {
  readonly ptr: Ptr;
  readonly bytes: Uint8Array;
  readonly spans: readonly Span[];
  /** False while every ask for it promised not to write ('read'): then it is not written back. */
  writeBack: boolean;
  /** How it was first asked for: a 'write' range is not written back after a kernel that threw. */
  readonly access: EmulatedAccess;
}

/**
 * The most bytes of copies kept between launches: a fresh buffer for every launch's copies costs
 * the host's page faults on first touch (about as much as the kernel itself for a loop over
 * typed arrays), so launches carve their copies from one buffer, kept while it is no larger.
 */
const SCRATCH_LIMIT = 64 << 20;
let scratch: ArrayBuffer | undefined;
let scratchBusy = false;

/** EmulatedMemory for one launch: host memory in place, device memory copied in and back. */
class LaunchMemory implements EmulatedMemory {
  private readonly copies: CopiedRange[] = [];
  /** The buffer this launch carves its copies from (undefined while another launch holds it: one nested in a kernel). */
  private readonly scratch: ArrayBuffer | undefined;
  private used = 0;
  /** Bytes of copies asked for in all: the size of the next launch's buffer (up to SCRATCH_LIMIT). */
  private wanted = 0;

  constructor(
    private readonly s: EmulatedState,
    private readonly kernel: string,
  ) {
    this.owner = !scratchBusy;
    this.scratch = this.owner ? scratch : undefined;
    scratchBusy = true;
  }

  /** True when this launch holds the shared buffer (and sizes the next one); false for a launch nested in a kernel. */
  private readonly owner: boolean;

  /** Bytes for a copy (their contents unspecified: copied over unless 'write'): the shared buffer while it has room, else a new one. */
  private carve(byteLength: number): Uint8Array {
    const at = this.used;
    this.wanted += (byteLength + 15) & ~15;
    if (this.scratch !== undefined && at + byteLength <= this.scratch.byteLength) {
      this.used = (at + byteLength + 15) & ~15;
      return new Uint8Array(this.scratch, at, byteLength);
    }
    return new Uint8Array(byteLength);
  }

  bytes(ptr: Ptr, byteLength: number, access: EmulatedAccess = 'readwrite'): Uint8Array {
    if (access !== 'read' && access !== 'write' && access !== 'readwrite')
      throw new TypeError(`memory.bytes: access must be 'read', 'write' or 'readwrite', got ${String(access)}`);
    if (typeof ptr !== 'number' || !Number.isSafeInteger(ptr) || ptr < 0) throw new TypeError(`memory.bytes: ptr must be an address, got ${String(ptr)}`);
    if (!Number.isSafeInteger(byteLength) || byteLength < 0) throw new RangeError(`memory.bytes: byteLength must be a whole number >= 0, got ${byteLength}`);
    const a = this.s.lookup(ptr);
    if (a === undefined || ptr - a.base + byteLength > a.size) {
      fail(
        CUresult.ILLEGAL_ADDRESS,
        'cuLaunchKernel',
        `kernel ${this.kernel} (emulated) accessed [${hex(ptr)}, +${byteLength}), which is not inside one allocation the device can address`,
      );
    }
    if (byteLength === 0) return new Uint8Array(0);
    let spans: Span[];
    try {
      spans = this.s.spans(ptr, byteLength, true, 'cuLaunchKernel');
    } catch (error) {
      const why = error instanceof Error ? error.message : String(error);
      fail(CUresult.ILLEGAL_ADDRESS, 'cuLaunchKernel', `kernel ${this.kernel} (emulated) accessed [${hex(ptr)}, +${byteLength}): ${why}`);
    }
    const first = spans[0]!;
    if (spans.length === 1 && first.store.kind === 'eager') return first.store.view(first.offset, byteLength);
    const end = ptr + byteLength;
    for (const c of this.copies) {
      if (c.ptr <= ptr && end <= c.ptr + c.bytes.length) {
        if (access !== 'read') c.writeBack = true;
        return c.bytes.subarray(ptr - c.ptr, end - c.ptr);
      }
    }
    const bytes = this.carve(byteLength);
    if (access !== 'write') copySpans([{ store: new EagerStore(bytes.buffer, bytes.byteOffset, byteLength), offset: 0, length: byteLength }], spans);
    this.copies.push({ ptr, bytes, spans, writeBack: access !== 'read', access });
    return bytes;
  }

  /** Writes every copied range back to its memory, in the order they were asked for (later ones win where they overlap). */
  writeBack(completed: boolean): void {
    try {
      for (const c of this.copies) {
        if (c.writeBack && (completed || c.access !== 'write')) {
          copySpans(c.spans, [{ store: new EagerStore(c.bytes.buffer, c.bytes.byteOffset, c.bytes.length), offset: 0, length: c.bytes.length }]);
        }
      }
    } finally {
      this.copies.length = 0;
      if (this.owner) {
        if (this.wanted <= SCRATCH_LIMIT && (scratch === undefined || this.wanted > scratch.byteLength)) scratch = new ArrayBuffer(this.wanted);
        scratchBusy = false;
      }
    }
  }
}
