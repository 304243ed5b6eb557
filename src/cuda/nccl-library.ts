/**
 * Finding and opening NCCL (libnccl.so.2), the collective communication library every multi-GPU
 * framework runs on, the way nvrtc-library.ts finds NVRTC: `VRAM_LIBNCCL`, else the loader path,
 * the CUDA toolkit's folders, the distribution's package, and the `nvidia/nccl/lib` folder that
 * the nvidia-nccl-cu12/cu13 wheels (and so every PyTorch install) put it in. Only a communicator on
 * a GPU, and `ncclVersion()`, ever load it.
 */
import { existsSync, readdirSync } from 'node:fs';
import { homedir } from 'node:os';
import path from 'node:path';
import { NotSupportedError } from '../errors.js';
import { anyText, variableReader, type EnvironmentValues } from '../util/environment.js';
import { loadFirstLibrary, type LoadedLibrary } from './library.js';

/**
 * `VRAM_LIBNCCL`: the NCCL library to load, a path or a name the loader searches for. When set it is
 * the only one tried: every rank must run the same NCCL, so one that is not there is an error
 * rather than a quiet fall back to another version.
 */
export const LIBNCCL_VARIABLE = variableReader('VRAM_LIBNCCL', anyText);

/** An opened NCCL library and where it came from. */
export type NcclLibrary = LoadedLibrary;

/** The folders searched, as the error names them. */
const SEARCHED =
  '$CUDA_HOME, /usr/local/cuda*/{lib64,targets/*/lib}, /opt/cuda*, the nvidia/nccl/lib folders of Python ' +
  'site-packages (system, ~/.local, /opt/conda, and every python3 on PATH)';

/**
 * NCCL cannot be loaded: not installed, or not where vram looks. The message lists every place
 * tried and what to install.
 *
 * @example
 * ```ts
 * try { ncclVersion(); } catch (e) { if (e instanceof NcclUnavailableError) console.warn('no NCCL here'); }
 * ```
 */
export class NcclUnavailableError extends NotSupportedError {
  /**
   * @param tried Each candidate and why it did not load.
   * @param explicit True when `VRAM_LIBNCCL` named the one library to try.
   * @throws Never.
   * @example
   * ```ts
   * throw new NcclUnavailableError(['libnccl.so.2 (not found)'], false);
   * ```
   */
  constructor(
    /** Each candidate tried, with why it failed. */
    readonly tried: readonly string[],
    explicit: boolean,
  ) {
    super(
      `cannot load NCCL (libnccl.so.2), which communicators on a GPU need; tried ${tried.join(', ') || 'nothing'}` +
        (explicit ? ' (VRAM_LIBNCCL names the only library tried)' : ` (and found no libnccl.so.2 in ${SEARCHED})`) +
        '. ' +
        "Install it with pip install nvidia-nccl-cu12 (nvidia-nccl-cu13 for CUDA 13; PyTorch installs it too) or the distribution's " +
        'package (libnccl2 on Debian and Ubuntu, libnccl on RHEL), or set VRAM_LIBNCCL to its libnccl.so.2.',
    );
  }
}

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
 * The `lib` folders whose `python3*` subfolders may hold site-packages: the system's, the user's,
 * conda's, and the `../lib` of each folder on PATH (a virtual environment's or conda's bin), so
 * every python3 a user runs is covered without running one.
 */
function pythonLibDirs(env: EnvironmentValues): string[] {
  const dirs = ['/usr/local/lib', '/usr/lib', '/usr/lib64', '/opt/conda/lib'];
  const home = env.HOME ?? homedir();
  if (home !== '') dirs.push(path.join(home, '.local/lib'));
  for (const bin of (env.PATH ?? '').split(path.delimiter)) {
    if (bin !== '' && path.isAbsolute(bin)) dirs.push(path.join(bin, '../lib'));
  }
  return [...new Set(dirs.map((d) => path.normalize(d)))];
}

/**
 * The candidates to try, in order: `VRAM_LIBNCCL` alone when set; else `libnccl.so.2` on the loader
 * path (LD_LIBRARY_PATH, the distribution's package); `$CUDA_HOME`/`$CUDA_PATH`, `/usr/local/cuda*`
 * and `/opt/cuda*` toolkits; the `nvidia/nccl/lib` folders of Python wheels (the folders listed
 * only where the file is there).
 *
 * @param env The environment to read (default `process.env`).
 * @returns Paths or names for koffi.load, without duplicates.
 * @throws Never.
 * @example
 * ```ts
 * ncclCandidates({ VRAM_LIBNCCL: '/opt/nccl/lib/libnccl.so.2' }); // ['/opt/nccl/lib/libnccl.so.2']
 * ```
 */
export function ncclCandidates(env: EnvironmentValues = process.env): string[] {
  const explicit = LIBNCCL_VARIABLE.read(env);
  if (explicit !== undefined) return [explicit];
  if (process.platform !== 'linux') return [];
  const candidates: string[] = ['libnccl.so.2'];
  const found = (file: string): void => {
    if (existsSync(file)) candidates.push(file);
  };
  const toolkits: string[] = [];
  for (const home of [env.CUDA_HOME, env.CUDA_PATH]) if (home !== undefined && home !== '') toolkits.push(home);
  for (const root of ['/usr/local', '/opt']) for (const name of entries(root, /^cuda(-\d+(\.\d+)*)?$/)) toolkits.push(`${root}/${name}`);
  const arch = process.arch === 'arm64' ? 'sbsa-linux' : 'x86_64-linux';
  for (const toolkit of toolkits) {
    found(`${toolkit}/lib64/libnccl.so.2`);
    found(`${toolkit}/targets/${arch}/lib/libnccl.so.2`);
  }
  for (const lib of pythonLibDirs(env)) {
    for (const python of entries(lib, /^python3(\.\d+)?$/)) {
      for (const site of ['site-packages', 'dist-packages']) found(`${lib}/${python}/${site}/nvidia/nccl/lib/libnccl.so.2`);
    }
  }
  return [...new Set(candidates)];
}

/**
 * Opens the first NCCL that loads.
 *
 * @param env The environment to read (default `process.env`).
 * @returns The library and its path.
 * @throws {NcclUnavailableError} When none loads, listing every candidate and why.
 * @example
 * ```ts
 * const { path } = openNcclLibrary();
 * ```
 */
export function openNcclLibrary(env: EnvironmentValues = process.env): NcclLibrary {
  const { library, failures } = loadFirstLibrary(ncclCandidates(env));
  if (library !== undefined) return library;
  throw new NcclUnavailableError(failures, LIBNCCL_VARIABLE.read(env) !== undefined);
}
