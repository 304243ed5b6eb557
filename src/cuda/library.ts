/**
 * Finding and opening the CUDA driver library (libcuda / nvcuda.dll). Kept apart from symbol
 * resolution so the search order, and the message that lists what was tried, live in one place.
 */
import koffi from 'koffi';
import type { LibraryHandle } from 'koffi';

/** An opened driver library and where it came from. */
export interface DriverLibrary {
  readonly lib: LibraryHandle;
  /** The path or name that loaded. */
  readonly path: string;
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
 * The candidates to try, in order: `VRAM_LIBCUDA` when set, then the loader path, then the usual
 * driver folders. Exported so tests and error messages can show the same list.
 */
export function driverCandidates(env: NodeJS.ProcessEnv = process.env, platform: NodeJS.Platform = process.platform): string[] {
  const candidates: string[] = [];
  const explicit = env.VRAM_LIBCUDA;
  if (explicit !== undefined && explicit !== '') candidates.push(explicit);
  if (platform === 'win32') {
    candidates.push('nvcuda.dll');
  } else if (platform === 'linux') {
    candidates.push('libcuda.so.1');
    for (const dir of LINUX_DRIVER_DIRS) candidates.push(`${dir}/libcuda.so.1`);
  }
  return candidates;
}

/** True for the toolkit's link-time stub, which loads but is no driver (cuInit fails with STUB_LIBRARY). */
function isStub(path: string): boolean {
  return /[\\/]stubs[\\/]/.test(path);
}

/**
 * Opens the first driver library that loads. Throws an Error listing every candidate and why it
 * failed, so "no GPU here" is easy to tell from "driver in an unusual place".
 */
export function openDriverLibrary(env: NodeJS.ProcessEnv = process.env): DriverLibrary {
  const candidates = driverCandidates(env);
  const failures: string[] = [];
  for (const path of candidates) {
    if (isStub(path)) {
      failures.push(`${path} (a CUDA toolkit stub, not a driver)`);
      continue;
    }
    try {
      return { lib: koffi.load(path), path };
    } catch (error) {
      const message = error instanceof Error ? error.message.split('\n')[0] ?? '' : String(error);
      failures.push(`${path} (${/no such file|cannot open shared object|not found/i.test(message) ? 'not found' : message})`);
    }
  }
  const tried = failures.length > 0 ? failures.join(', ') : `nothing (no known driver location on ${process.platform})`;
  throw new Error(`cannot load the CUDA driver library; tried ${tried}. Set VRAM_LIBCUDA to the driver's libcuda.so.1 if it is elsewhere.`);
}
