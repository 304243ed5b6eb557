/**
 * Finding and opening the CUDA driver library (libcuda / nvcuda.dll). Kept apart from symbol
 * resolution so the search order, and the message that lists what was tried, live in one place.
 */
import koffi from 'koffi';
import type { LibraryHandle } from 'koffi';
import { anyText, variableReader, type EnvironmentValues } from '../util/environment.js';

/**
 * `VRAM_LIBCUDA`: the driver library to load, a path or a name the loader searches for. When set it
 * is the only one tried, and one that does not load is an error rather than a fall back to the
 * emulated backend: the user named a driver, so a typo in the path must not run on host memory.
 */
export const LIBCUDA_VARIABLE = variableReader('VRAM_LIBCUDA', anyText);

/** An opened shared library (the driver, NVRTC) and where it came from. */
export interface LoadedLibrary {
  readonly lib: LibraryHandle;
  /** The path or name that loaded. */
  readonly path: string;
}

/** An opened driver library and where it came from. */
export type DriverLibrary = LoadedLibrary;

/**
 * Loads the first of `candidates` that opens, or says why each did not ("not found" for a missing
 * file, the loader's first line otherwise), for the error that lists them. Shared by the driver
 * and NVRTC so both report a failed search the same way.
 *
 * @param candidates Paths or sonames, in the order to try them.
 * @param refuse Says why a candidate must not be loaded at all (undefined to try it).
 * @returns The library that loaded, or undefined, and the reason for each candidate that did not.
 * @throws Never: load failures are collected.
 * @example
 * ```ts
 * const { library, failures } = loadFirstLibrary(['libnvrtc.so.13', 'libnvrtc.so.12']);
 * ```
 */
export function loadFirstLibrary(
  candidates: readonly string[],
  refuse: (path: string) => string | undefined = () => undefined,
): { readonly library: LoadedLibrary | undefined; readonly failures: string[] } {
  const failures: string[] = [];
  for (const path of candidates) {
    const refused = refuse(path);
    if (refused !== undefined) {
      failures.push(`${path} (${refused})`);
      continue;
    }
    try {
      return { library: { lib: koffi.load(path), path }, failures };
    } catch (error) {
      const message = error instanceof Error ? (error.message.split('\n')[0] ?? '') : String(error);
      failures.push(`${path} (${/no such file|cannot open shared object|not found/i.test(message) ? 'not found' : message})`);
    }
  }
  return { library: undefined, failures };
}

/** Driver folders searched after the loader path, in order (Linux). Stub folders are never searched. */
const LINUX_DRIVER_DIRS: readonly string[] = [
  '/usr/local/nvidia/lib64',
  '/usr/lib/x86_64-linux-gnu',
  '/usr/lib/aarch64-linux-gnu',
  '/usr/lib64',
  '/usr/lib/wsl/lib',
];

/**
 * The candidates to try, in order: `VRAM_LIBCUDA` alone when set, else the loader path, then the
 * usual driver folders. Exported so tests and error messages can show the same list.
 */
export function driverCandidates(env: EnvironmentValues = process.env, platform: string = process.platform): string[] {
  const explicit = LIBCUDA_VARIABLE.read(env);
  if (explicit !== undefined) return [explicit];
  const candidates: string[] = [];
  if (platform === 'win32') {
    candidates.push('nvcuda.dll');
  } else if (platform === 'linux') {
    candidates.push('libcuda.so.1');
    for (const dir of LINUX_DRIVER_DIRS) candidates.push(`${dir}/libcuda.so.1`);
  }
  return candidates;
}

/** Opens the driver `VRAM_LIBCUDA` names, or throws with the loader's own words for why not. */
function openNamedDriver(path: string): DriverLibrary {
  let reason = isStub(path) ? 'a CUDA toolkit stub, not a driver' : undefined;
  if (reason === undefined) {
    try {
      return { lib: koffi.load(path), path };
    } catch (error) {
      reason = error instanceof Error ? (error.message.split('\n')[0] ?? '') : String(error);
    }
  }
  throw new Error(
    `VRAM_LIBCUDA names ${path}, which does not load: ${reason.replace(/[.\s]+$/, '')}. ` +
      'Unset VRAM_LIBCUDA to search the usual driver folders, or set VRAM_BACKEND=emulated to run without a GPU.',
  );
}

/** True for the toolkit's link-time stub, which loads but is no driver (cuInit fails with STUB_LIBRARY). */
function isStub(path: string): boolean {
  return /[\\/]stubs[\\/]/.test(path);
}

/**
 * Opens the first driver library that loads. Throws an Error listing every candidate and why it
 * failed, so "no GPU here" is easy to tell from "driver in an unusual place"; for `VRAM_LIBCUDA`,
 * an Error naming that path and the loader's reason.
 */
export function openDriverLibrary(env: EnvironmentValues = process.env): DriverLibrary {
  const explicit = LIBCUDA_VARIABLE.read(env);
  if (explicit !== undefined) return openNamedDriver(explicit);
  const { library, failures } = loadFirstLibrary(driverCandidates(env), (path) => (isStub(path) ? 'a CUDA toolkit stub, not a driver' : undefined));
  if (library !== undefined) return library;
  const tried = failures.length > 0 ? failures.join(', ') : `nothing (no known driver location on ${process.platform})`;
  throw new Error(`cannot load the CUDA driver library; tried ${tried}. Set VRAM_LIBCUDA to the driver's libcuda.so.1 if it is elsewhere.`);
}
