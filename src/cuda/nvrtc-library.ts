/**
 * Finding and opening NVRTC (libnvrtc), the CUDA toolkit's run-time compiler, the way library.ts
 * finds the driver: an explicit path first, then the loader path, then the toolkit's and the
 * Python wheels' folders. Only `Module.compile` on a GPU ever loads it, so a program that never
 * compiles CUDA source does not need the toolkit at all.
 */
import { existsSync, readdirSync } from 'node:fs';
import { NotSupportedError } from '../errors.js';
import { anyText, variableReader, type EnvironmentValues } from '../util/environment.js';
import { loadFirstLibrary, type LoadedLibrary } from './library.js';

/** `VRAM_LIBNVRTC`: the NVRTC library to load first, a path or a name the loader searches for. */
export const LIBNVRTC_VARIABLE = variableReader('VRAM_LIBNVRTC', anyText);

/** An opened NVRTC library and where it came from. */
export type NvrtcLibrary = LoadedLibrary;

/**
 * NVRTC cannot be loaded: not installed, or not where vram looks. Built-in operations catch it to
 * fall back to the PTX the project ships; the message lists every place tried and what to install.
 *
 * @example
 * ```ts
 * try { Module.compile(source); } catch (e) { if (e instanceof NvrtcUnavailableError) usePrecompiled(); else throw e; }
 * ```
 */
export class NvrtcUnavailableError extends NotSupportedError {
  /**
   * @param tried Each candidate and why it did not load.
   * @throws Never.
   * @example
   * ```ts
   * throw new NvrtcUnavailableError(['libnvrtc.so.13: not found']);
   * ```
   */
  constructor(
    /** Each candidate tried, with why it failed. */
    readonly tried: readonly string[],
  ) {
    super(
      `cannot load NVRTC (libnvrtc), which Module.compile needs to compile CUDA source; tried ${tried.join(', ') || 'nothing'} ` +
        `(and found no libnvrtc in ${SEARCHED}). ` +
        "Install the CUDA toolkit's NVRTC (e.g. the cuda-nvrtc-13-0 package, or pip install nvidia-cuda-nvrtc), or set VRAM_LIBNVRTC to its libnvrtc.so; " +
        'Module.fromPtx and Module.fromCubin load precompiled code without it.',
    );
  }
}

/** Sonames, newest first: NVRTC 13 and 12 (the versions the driver vram supports can run). */
const SONAMES = ['libnvrtc.so.13', 'libnvrtc.so.12'] as const;

/** Folders under which `cuda*` toolkits are installed. */
const TOOLKIT_ROOTS = ['/usr/local', '/opt'] as const;

/** Folders of Python installations whose `nvidia/` wheels may hold NVRTC (pip install nvidia-cuda-nvrtc). */
const PYTHON_ROOTS = ['/usr/local/lib', '/usr/lib', '/opt/conda/lib'] as const;

/** The folders searched, as the error names them. */
const SEARCHED = '$CUDA_HOME, $CUDA_PATH, /usr/local/cuda*/{lib64,targets/*/lib}, /opt/cuda*, the nvidia/ folders of Python site-packages';

/** The names in `dir` that match `pattern`, sorted newest-looking first; none when it cannot be read. */
function entries(dir: string, pattern: RegExp): string[] {
  try {
    return readdirSync(dir)
      .filter((name) => pattern.test(name))
      .sort()
      .reverse();
  } catch {
    return [];
  }
}

/**
 * The candidates to try, in order: `VRAM_LIBNVRTC` when set; the sonames on the loader path;
 * `$CUDA_HOME`/`$CUDA_PATH`; `/usr/local/cuda*` and `/opt/cuda*` toolkits (lib64 and
 * targets/<arch>/lib); the `nvidia/cu13/lib` and `nvidia/cuda_nvrtc/lib` folders of Python wheels.
 *
 * @param env The environment to read (default `process.env`).
 * @returns Paths or names for koffi.load, without duplicates.
 * @example
 * ```ts
 * nvrtcCandidates({ VRAM_LIBNVRTC: '/opt/nvrtc/libnvrtc.so.13' })[0]; // '/opt/nvrtc/libnvrtc.so.13'
 * ```
 */
export function nvrtcCandidates(env: EnvironmentValues = process.env): string[] {
  const candidates: string[] = [];
  const explicit = LIBNVRTC_VARIABLE.read(env);
  if (explicit !== undefined) candidates.push(explicit);
  if (process.platform !== 'linux') return candidates;
  candidates.push(...SONAMES);
  const toolkits: string[] = [];
  for (const home of [env.CUDA_HOME, env.CUDA_PATH]) if (home !== undefined && home !== '') toolkits.push(home);
  for (const root of TOOLKIT_ROOTS) for (const name of entries(root, /^cuda(-\d+(\.\d+)*)?$/)) toolkits.push(`${root}/${name}`);
  const arch = process.arch === 'arm64' ? 'sbsa-linux' : 'x86_64-linux';
  // Folders are listed only where the file exists, so the error names what was really there.
  const found = (path: string): void => {
    if (existsSync(path)) candidates.push(path);
  };
  for (const toolkit of toolkits) {
    for (const soname of SONAMES) {
      found(`${toolkit}/lib64/${soname}`);
      found(`${toolkit}/targets/${arch}/lib/${soname}`);
    }
  }
  for (const root of PYTHON_ROOTS) {
    for (const python of entries(root, /^python3(\.\d+)?$/)) {
      for (const site of ['dist-packages', 'site-packages']) {
        const nvidia = `${root}/${python}/${site}/nvidia`;
        found(`${nvidia}/cu13/lib/libnvrtc.so.13`);
        found(`${nvidia}/cuda_nvrtc/lib/libnvrtc.so.12`);
      }
    }
  }
  return [...new Set(candidates)];
}

/**
 * Opens the first NVRTC that loads.
 *
 * @param env The environment to read (default `process.env`).
 * @returns The library and its path.
 * @throws {NvrtcUnavailableError} When none loads, listing every candidate and why.
 * @example
 * ```ts
 * const { path } = openNvrtcLibrary();
 * ```
 */
export function openNvrtcLibrary(env: EnvironmentValues = process.env): NvrtcLibrary {
  const { library, failures } = loadFirstLibrary(nvrtcCandidates(env));
  if (library !== undefined) return library;
  throw new NvrtcUnavailableError(failures);
}
