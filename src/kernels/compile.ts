/**
 * CUDA C++ to a loadable image, for one device: NVRTC for the device's own architecture (CUBIN
 * when this NVRTC can emit it for that architecture, else PTX for the newest virtual architecture
 * it supports that the device can run, which the driver then compiles when loading), through the
 * disk cache. Counts compiles and cache hits, so a program (or a test in another process) can see
 * that a second run compiled nothing.
 */
import { loadNvrtc, NvrtcUnavailableError } from '../cuda/nvrtc.js';
import { CompileError } from './compile-error.js';
import { cacheKey, kernelCacheDirectory, readCachedImage, writeCachedImage, type CacheKeyParts } from './compile-cache.js';

/**
 * What to compile and for what: the cache key's parts that the caller knows (the driver's version
 * among them: a new driver may load images differently), the device's compute capability (from
 * which the architecture option is chosen), and whether to use the cache.
 */
export interface CompileRequest extends Pick<CacheKeyParts, 'source' | 'options' | 'headers' | 'nameExpressions' | 'driverVersion'> {
  /** Use the disk cache (read and write). */
  readonly cache: boolean;
  /** The device's compute capability. */
  readonly computeCapability: readonly [number, number];
}

/** A compiled (or cached) module image. */
export interface CompiledImage {
  readonly kind: 'ptx' | 'cubin';
  readonly image: Uint8Array;
  /** Name expression -> lowered name. */
  readonly loweredNames: Readonly<Record<string, string>>;
  /** NVRTC's log ('' when the image came from the cache). */
  readonly log: string;
  /** True when it came from the disk cache. */
  readonly cached: boolean;
}

/** How many modules this process compiled with NVRTC, and how many it found in the disk cache. */
export interface CompileStatistics {
  readonly compiled: number;
  readonly cacheHits: number;
}

let compiled = 0;
let cacheHits = 0;

/**
 * This process's compile counts since it started.
 *
 * @returns NVRTC compiles and disk-cache hits so far.
 * @example
 * ```ts
 * Module.compile(source);
 * compileStatistics(); // { compiled: 1, cacheHits: 0 } on a first run, { compiled: 0, cacheHits: 1 } on the next
 * ```
 * @throws Never.
 */
export function compileStatistics(): CompileStatistics {
  return { compiled, cacheHits };
}

/**
 * Whether NVRTC can be loaded here (loading it on the first call). False on a machine without the
 * CUDA toolkit's NVRTC; the emulated backend never needs it.
 *
 * @returns True when `Module.compile` can compile on a GPU.
 * @throws Nothing: a libnvrtc that loads but fails to answer its version counts as unavailable.
 * @example
 * ```ts
 * const module = nvrtcAvailable() ? Module.compile(source) : Module.fromPtx(shippedPtx);
 * ```
 */
export function nvrtcAvailable(): boolean {
  try {
    loadNvrtc();
    return true;
  } catch (error) {
    if (error instanceof NvrtcUnavailableError) return false;
    throw error;
  }
}

/** The architecture option and output kind for a device, given what NVRTC supports. */
function target(
  computeCapability: readonly [number, number],
  supported: readonly number[],
  options: readonly string[],
): { arch: string; output: 'cubin' | 'ptx'; add: boolean } {
  // An architecture the caller chose wins; it decides CUBIN (sm_) or PTX (compute_).
  for (const option of options) {
    const m = /^(?:--gpu-architecture|-arch)(?:=|\s+)(\S+)$/.exec(option);
    if (m !== null) return { arch: option, output: m[1]!.startsWith('sm_') ? 'cubin' : 'ptx', add: false };
  }
  const arch = computeCapability[0] * 10 + computeCapability[1];
  if (supported.includes(arch)) return { arch: `--gpu-architecture=sm_${arch}`, output: 'cubin', add: true };
  // A device newer than this NVRTC: PTX for the newest architecture it knows that the device can
  // run; the driver compiles it for the device at load time.
  const older = supported.filter((a) => a <= arch);
  const virtual = older.length > 0 ? Math.max(...older) : arch;
  return { arch: `--gpu-architecture=compute_${virtual}`, output: 'ptx', add: true };
}

/**
 * Compiles `request.source` for the device, or takes it from the disk cache.
 *
 * @param request The source, options and device.
 * @returns The image, its lowered names and NVRTC's log.
 * @throws {NvrtcUnavailableError} When NVRTC cannot be loaded (what to install is in the message).
 * @throws {CompileError} When NVRTC rejects the source, an option or a name expression (with the log).
 * @example
 * ```ts
 * const { kind, image } = compileSource({ source, options: [], nameExpressions: [], headers: {}, cache: true,
 *   computeCapability: [9, 0], driverVersion: 13000 });
 * ```
 */
export function compileSource(request: CompileRequest): CompiledImage {
  const nvrtc = loadNvrtc();
  const { arch, output, add } = target(request.computeCapability, nvrtc.supportedArchs, request.options);
  const options = add ? [arch, ...request.options] : [...request.options];
  const dir = kernelCacheDirectory();
  const key = request.cache
    ? cacheKey({
        source: request.source,
        options,
        headers: request.headers,
        nameExpressions: request.nameExpressions,
        arch,
        nvrtcVersion: nvrtc.version,
        driverVersion: request.driverVersion,
      })
    : '';
  if (request.cache) {
    const hit = readCachedImage(dir, key);
    if (hit !== undefined && hit.kind === output && request.nameExpressions.every((e) => Object.hasOwn(hit.loweredNames, e))) {
      cacheHits++;
      return { ...hit, log: '', cached: true };
    }
  }
  const result = nvrtc.compile({
    source: request.source,
    name: 'vram_kernel.cu',
    headers: request.headers,
    options,
    nameExpressions: request.nameExpressions,
    output,
  });
  compiled++;
  if (!('image' in result)) throw new CompileError(result.log, options, result.result);
  if (request.cache) writeCachedImage(dir, key, { kind: output, image: result.image, loweredNames: result.loweredNames });
  return { kind: output, image: result.image, loweredNames: result.loweredNames, log: result.log, cached: false };
}
