/**
 * Where the built-in operations get their modules: compiled from the generated source through
 * `Module.compile` (so the disk cache serves later processes), once per device and source for the
 * life of the process; on a GPU without NVRTC, loaded from the PTX the package ships for the
 * fixed kernels (`shipped-ptx.ts`, written by scripts/generate-builtin-ptx.mjs from the same
 * sources and checked against them by test/kernels/ops-ptx.test.ts). Elementwise expressions are user
 * code with no shipped PTX: without NVRTC they fail with an error that says so.
 */
import { gunzipSync } from 'node:zlib';
import { createHash } from 'node:crypto';
import type { Device } from '../../device.js';
import { NotSupportedError } from '../../errors.js';
import type { EmulatedKernels } from '../../backend/backend.js';
import type { Kernel } from '../kernel.js';
import { Module } from '../module.js';
import { NvrtcUnavailableError } from '../../cuda/nvrtc.js';
import { LruMap } from '../../util/lru.js';
import type { Signature } from '../signature.js';
import { shippedPtx } from './shipped-ptx.js';

/**
 * The compiler options of every built-in kernel (NVRTC at run time, nvcc for the shipped PTX):
 * no contraction of a * b + c into fma, so the GPU rounds each step as the emulated backend's
 * JavaScript does.
 */
export const BUILTIN_COMPILE_OPTIONS: readonly string[] = Object.freeze(['--fmad=false']);

/** The first line of every shipped PTX: the SHA-256 of the CUDA source it was compiled from. */
export const PTX_HEADER_PREFIX = '// vram-source-sha256: ';

/** A loaded built-in module and the kernels taken from it so far. */
interface Loaded {
  readonly module: Module;
  readonly kernels: Map<string, Kernel<Signature>>;
  /** Its weight in the cache of user code (`BuiltinSource.weight`, else its source's length). */
  readonly bytes: number;
}

/**
 * Modules of user code (elementwise expressions) kept loaded per device: the most recently used
 * ones. An evicted module is unloaded (work already queued with it completes); used again, it is
 * compiled again, from the disk cache.
 */
export const USER_MODULE_CACHE_SIZE = 256;

/**
 * The most memory the loaded modules of user code on a device may hold together, as their sources
 * estimate it (`BuiltinSource.weight`): a module's image and kernels grow with its source, so the
 * count alone does not bound them (the programs' limit, PROGRAM_CACHE_BYTES in elementwise.ts).
 */
export const USER_MODULE_CACHE_BYTES = 8 * 1024 * 1024;

/** Per device: the fixed built-in modules (a few, kept), and the most recent modules of user code. */
interface DeviceModules {
  readonly fixed: Map<string, Loaded>;
  readonly user: LruMap<string, Loaded>;
}

const modules = new WeakMap<Device, DeviceModules>();

/**
 * How many modules of user code (elementwise expressions) are loaded on a device now (at most
 * USER_MODULE_CACHE_SIZE).
 *
 * @param device The device.
 * @returns The count.
 * @throws Never.
 * @example
 * ```ts
 * userModulesLoaded(Device.get(0)) <= USER_MODULE_CACHE_SIZE; // true
 * ```
 */
export function userModulesLoaded(device: Device): number {
  return modules.get(device)?.user.size ?? 0;
}

/**
 * The SHA-256 of a source, hex.
 *
 * @param source CUDA source text.
 * @returns 64 hex digits.
 * @throws Never.
 * @example
 * ```ts
 * sourceSha256(basicSource()).length; // 64
 * ```
 */
export function sourceSha256(source: string): string {
  return createHash('sha256').update(source, 'utf8').digest('hex');
}

/**
 * The shipped PTX of a built-in source, when the package has it for exactly this source.
 *
 * @param name The built-in source's name (`basic`, `sum-float32`, ...).
 * @param source Its CUDA source, as generated now.
 * @returns The PTX text (header line first), or undefined when none ships or it was made from another source.
 * @throws Never.
 * @example
 * ```ts
 * shippedPtxFor('basic', basicSource())?.startsWith(PTX_HEADER_PREFIX); // true
 * ```
 */
export function shippedPtxFor(name: string, source: string): string | undefined {
  const entry = Object.hasOwn(shippedPtx, name) ? shippedPtx[name] : undefined;
  if (entry === undefined || entry.sourceSha256 !== sourceSha256(source)) return undefined;
  return gunzipSync(Buffer.from(entry.gzipBase64, 'base64')).toString('utf8');
}

/** A built-in source: its name in the shipped set (none for user code), text and JavaScript twins. */
export interface BuiltinSource {
  /** `basic`, `sum-float32`, ...; undefined for generated user code (elementwise), which ships no PTX. */
  readonly name: string | undefined;
  readonly source: string;
  readonly emulated: EmulatedKernels;
  /** For user code: what a loaded module of it is estimated to hold, in bytes (its weight in the cache of user code). */
  readonly weight?: number;
}

/**
 * A kernel of a built-in source on a device. The module is compiled once per device and source
 * (NVRTC's disk cache spares later processes the compile), or, on a GPU without NVRTC, loaded
 * from shipped PTX; the kernel is looked up once.
 *
 * @param device The device.
 * @param built The source.
 * @param kernel The kernel's name.
 * @param signature Its parameters.
 * @param what Names the operation in errors (`elementwise`).
 * @returns The kernel (owned by this cache; a user-code kernel is good until other user sources
 *   push its module out (USER_MODULE_CACHE_SIZE, USER_MODULE_CACHE_BYTES), so launch it before asking for others).
 * @throws {NotSupportedError} On a GPU without NVRTC, for user code or a source with no matching shipped PTX.
 * @throws {CompileError | CudaError} When compiling or loading fails.
 * @example
 * ```ts
 * const fill = builtinKernel(a.device, basicBuiltin(), 'vram_fill', basicSignatures.vram_fill, 'fill');
 * ```
 */
export function builtinKernel<const S extends Signature>(device: Device, built: BuiltinSource, kernel: string, signature: S, what: string): Kernel<S> {
  let perDevice = modules.get(device);
  if (perDevice === undefined) {
    perDevice = {
      fixed: new Map(),
      user: new LruMap(USER_MODULE_CACHE_SIZE, (_, evicted) => evicted.module.destroy(), { weigh: (loaded) => loaded.bytes, limit: USER_MODULE_CACHE_BYTES }),
    };
    modules.set(device, perDevice);
  }
  const cache = built.name === undefined ? perDevice.user : perDevice.fixed;
  let loaded = cache.get(built.source);
  if (loaded === undefined) {
    loaded = { module: loadModule(device, built, what), kernels: new Map(), bytes: built.weight ?? built.source.length };
    cache.set(built.source, loaded);
  }
  let k = loaded.kernels.get(kernel);
  if (k === undefined) {
    k = loaded.module.kernel(kernel, signature) as Kernel<Signature>;
    loaded.kernels.set(kernel, k);
  }
  return k as unknown as Kernel<S>;
}

function loadModule(device: Device, built: BuiltinSource, what: string): Module {
  const { name, source, emulated } = built;
  try {
    return Module.compile(source, { device, options: BUILTIN_COMPILE_OPTIONS, emulated });
  } catch (error) {
    if (!(error instanceof NvrtcUnavailableError)) throw error;
    const ptx = name === undefined ? undefined : shippedPtxFor(name, source);
    if (ptx === undefined) {
      throw new NotSupportedError(
        name === undefined
          ? `${what}: an expression is compiled to CUDA at run time and needs NVRTC, which is missing; the fixed ` +
              `operations (fill, arange, ascontiguous, astype, sum, min, max, dot) run without it from shipped PTX. ${error.message}`
          : `${what}: NVRTC is missing and the package ships no PTX for this kernel source (${name}); ${error.message}`,
        { cause: error },
      );
    }
    return Module.fromPtx(ptx, { device, emulated });
  }
}
