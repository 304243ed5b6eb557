/**
 * Opening the CUDA driver: load libcuda, bind the few bootstrap symbols by name (cuInit,
 * cuDriverGetVersion, cuGetProcAddress_v2, the error-string functions), initialise it, and resolve
 * every other entry point through cuGetProcAddress. The result is one process-wide `CudaDriver`.
 */
import koffi from 'koffi';
import { CudaError } from '../errors.js';
import { resolveEntryPoints, type DriverFunctions, type GetProcAddress } from './entry-points.js';
import { CudaErrorFactory, type ErrorStringFn } from './errors.js';
import { openDriverLibrary } from './library.js';
import { GET_PROC_ADDRESS_DEFAULT } from './types.js';

/** A loaded, initialised driver: its entry points, its version, and an error builder. */
export interface CudaDriver {
  /** Where the driver library was loaded from. */
  readonly path: string;
  /** cuDriverGetVersion, e.g. 13000. */
  readonly version: number;
  readonly fn: DriverFunctions;
  readonly errors: CudaErrorFactory;
}

/** The lowest driver vram supports: cuGetProcAddress_v2 and the 12.x entry points. */
export const MIN_DRIVER_VERSION = 12000;

/** Binds a bootstrap symbol by name, with a message that says which one is missing. */
function bindByName<T>(lib: ReturnType<typeof openDriverLibrary>, prototype: string, symbol: string): T {
  try {
    return lib.lib.func(prototype) as unknown as T;
  } catch (error) {
    const why = error instanceof Error ? error.message : String(error);
    throw new Error(`${lib.path} has no ${symbol} (a CUDA ${MIN_DRIVER_VERSION / 1000}+ driver is needed): ${why}`);
  }
}

/**
 * Loads and initialises the driver. Throws an Error when no driver library loads or it lacks
 * what vram needs, and a CudaError when cuInit fails (no device, stub library, ...).
 */
export function openDriver(): CudaDriver {
  if (koffi.sizeof('void *') !== 8) {
    throw new Error('vram needs a 64-bit process: device addresses are 64-bit');
  }
  const lib = openDriverLibrary();
  const cuInit = bindByName<(flags: number) => number>(lib, 'int cuInit(uint32_t flags)', 'cuInit');
  const cuDriverGetVersion = bindByName<(version: Int32Array) => number>(lib, 'int cuDriverGetVersion(int *version)', 'cuDriverGetVersion');
  const cuGetErrorName = bindByName<ErrorStringFn>(lib, 'int cuGetErrorName(int error, uint64_t *str)', 'cuGetErrorName');
  const cuGetErrorString = bindByName<ErrorStringFn>(lib, 'int cuGetErrorString(int error, uint64_t *str)', 'cuGetErrorString');
  const errors = new CudaErrorFactory(cuGetErrorName, cuGetErrorString);

  const versionOut = new Int32Array(1);
  let r = cuDriverGetVersion(versionOut);
  if (r !== 0) throw errors.error(r, 'cuDriverGetVersion');
  const version = versionOut[0] ?? 0;
  if (version < MIN_DRIVER_VERSION) {
    throw new Error(`the CUDA driver at ${lib.path} supports CUDA ${formatVersion(version)}; vram needs ${formatVersion(MIN_DRIVER_VERSION)} or newer`);
  }
  const getProc = bindByName<GetProcAddress>(
    lib,
    'int cuGetProcAddress_v2(const char *symbol, uint64_t *pfn, int cudaVersion, uint64_t flags, int *symbolStatus)',
    'cuGetProcAddress_v2',
  );

  r = cuInit(0);
  if (r !== 0) {
    // No device, a stub library, a driver/kernel-module mismatch: name the library that said so.
    throw new CudaError(r, errors.name(r), 'cuInit', `${errors.description(r) ?? 'initialisation failed'} (driver loaded from ${lib.path})`);
  }

  const fn = resolveEntryPoints(getProc, version, GET_PROC_ADDRESS_DEFAULT);
  return { path: lib.path, version, fn, errors };
}

/** 13000 -> "13.0". */
function formatVersion(version: number): string {
  return `${Math.floor(version / 1000)}.${Math.floor((version % 1000) / 10)}`;
}
