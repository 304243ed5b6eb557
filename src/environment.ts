/**
 * Every `VRAM_*` environment variable vram reads, with its values, default and meaning: the one
 * table that `vram help`, each command's help and `vram info` print from, so a variable cannot be
 * read somewhere and documented nowhere. Each module that reads a variable declares its reader
 * beside the code (`util/environment.ts`: one parser, one message style, read at first use); this
 * table describes them, and `environmentSettings` runs each reader so `vram info` shows a value
 * that would be refused, and why, before any call trips on it. The default resource's three
 * variables are described in `resource/default-resource.ts`, beside the code that reads them, and
 * taken from there, so the table cannot drift from what that code does.
 */
import { BACKEND_VARIABLE } from './backend/select.js';
import { EMULATED_BYTES_VARIABLE } from './backend/emulated/emulated-backend.js';
import { LIBCUDA_VARIABLE } from './cuda/library.js';
import { LIBNVRTC_VARIABLE } from './cuda/nvrtc-library.js';
import { LIBNCCL_VARIABLE } from './cuda/nccl-library.js';
import { CACHE_DIR_VARIABLE } from './kernels/compile-cache.js';
import { ALLOCATOR_VARIABLE, DEFAULT_RESOURCE_VARIABLES, MEMORY_FRACTION_VARIABLE, MEMORY_LIMIT_VARIABLE } from './resource/default-resource.js';
import { OOM_SNAPSHOT } from './observe/out-of-memory-observer.js';
import { IMEX_ROOT_VARIABLE } from './resource/fabric-support.js';
import { COPY_THREADS_VARIABLE } from './buffer/transfer/copy-threads.js';
import { SPILL_AHEAD_VARIABLE, SPILL_LIMIT_VARIABLE, SPILL_VARIABLE } from './buffer/spill/spill-manager.js';
import { anyText, variableReader, type EnvironmentValues, type VariableReader } from './util/environment.js';

/**
 * `VRAM_DEBUG`: any value makes the CLI print the stack of an unexpected error. Declared here, as
 * the CLI's entry module runs the command when imported and so cannot be imported for its reader.
 */
export const DEBUG_VARIABLE = variableReader('VRAM_DEBUG', anyText);

/** The reader of every variable in the table, by name (a test checks the two name the same variables). */
export const ENVIRONMENT_READERS: ReadonlyMap<string, VariableReader<unknown>> = new Map(
  [
    BACKEND_VARIABLE,
    LIBCUDA_VARIABLE,
    LIBNVRTC_VARIABLE,
    LIBNCCL_VARIABLE,
    CACHE_DIR_VARIABLE,
    EMULATED_BYTES_VARIABLE,
    ALLOCATOR_VARIABLE,
    MEMORY_LIMIT_VARIABLE,
    MEMORY_FRACTION_VARIABLE,
    OOM_SNAPSHOT,
    COPY_THREADS_VARIABLE,
    DEBUG_VARIABLE,
    SPILL_VARIABLE,
    SPILL_LIMIT_VARIABLE,
    SPILL_AHEAD_VARIABLE,
    IMEX_ROOT_VARIABLE,
  ].map((reader): [string, VariableReader<unknown>] => [reader.name, reader]),
);

/** One environment variable vram reads. */
export interface EnvironmentVariable {
  /** The variable's name, `VRAM_...`. */
  readonly name: string;
  /** What it takes, as a user would write it: `cuda|emulated|auto`, `size`, `path`. */
  readonly values: string;
  /** What applies when it is unset, in words. */
  readonly default: string;
  /** What it does, one line. */
  readonly meaning: string;
}

/**
 * The table, in the order people reach for them: backend first, then memory, then tuning.
 *
 * @example
 * ```ts
 * for (const v of ENVIRONMENT) console.log(`${v.name}=${v.values} (default ${v.default}): ${v.meaning}`);
 * ```
 */
export const ENVIRONMENT: readonly EnvironmentVariable[] = [
  {
    name: 'VRAM_BACKEND',
    values: 'cuda|emulated|auto',
    default: 'auto',
    meaning: 'which backend drives the devices; auto uses the CUDA driver when it loads and reports a device, else the emulated backend',
  },
  {
    name: 'VRAM_LIBCUDA',
    values: 'path',
    default: 'libcuda.so.1 on the loader path, then the usual driver folders',
    meaning: 'the CUDA driver library to load, when it is somewhere unusual',
  },
  {
    name: 'VRAM_LIBNVRTC',
    values: 'path',
    default: 'libnvrtc.so.13/.12 on the loader path, then $CUDA_HOME, /usr/local/cuda*, Python nvidia/ wheels',
    meaning: 'the NVRTC library Module.compile loads (only on a GPU, only when compiling CUDA source)',
  },
  {
    name: 'VRAM_LIBNCCL',
    values: 'path',
    default: 'libnccl.so.2 on the loader path, then $CUDA_HOME, /usr/local/cuda*, Python nvidia/nccl wheels',
    meaning: 'the NCCL library communicators load on a GPU (vram/nccl); when set, the only one tried',
  },
  {
    name: 'VRAM_CACHE_DIR',
    values: 'absolute path',
    default: '$XDG_CACHE_HOME/vram, else ~/.cache/vram',
    meaning:
      'where compiled kernels are cached (kernels/, one file per source, options, architecture, NVRTC and driver); ' +
      'a folder not owned by you, or writable by group or others, is not used (a warning, then compiling without the cache)',
  },
  {
    name: 'VRAM_EMULATED_BYTES',
    values: 'size (16G, 512M, bytes)',
    default: '4 GiB (vram replay sizes it for the trace)',
    meaning: 'capacity of each emulated device; backed lazily, so only what is written costs host memory',
  },
  // VRAM_ALLOCATOR, VRAM_MEMORY_LIMIT, VRAM_MEMORY_FRACTION: described beside the code that reads them.
  ...DEFAULT_RESOURCE_VARIABLES,
  {
    name: 'VRAM_SPILL',
    values: '0|1',
    default: '0',
    meaning:
      '1: buffers and arrays allocated without a resource are spillable (moved to pinned host memory when the device runs short, back on use, at the same address)',
  },
  {
    name: 'VRAM_SPILL_LIMIT',
    values: 'size (16G, 512M, bytes)',
    default: 'none (spill when the device is full)',
    meaning: 'spill before a spillable allocation or reload would take the device memory in use (cuMemGetInfo) past this',
  },
  {
    name: 'VRAM_SPILL_AHEAD',
    values: 'size (256M, bytes; 0 = off)',
    default: 'the largest spillable buffer, where 8 or more of its size are on the device',
    meaning:
      'once spilling has started, the room kept free ahead of need: copies out are queued early, beside the next copy in, and their memory goes when they have run',
  },
  {
    name: 'VRAM_OOM_SNAPSHOT',
    values: 'path',
    default: 'off',
    meaning: 'at an out-of-memory error, write a memory snapshot (JSON, docs/snapshot-schema.json) to this file; vram view turns it into a report',
  },
  {
    name: 'VRAM_COPY_THREADS',
    values: 'whole number (0 = copy on the calling thread)',
    default: 'half the cores, 1 to 8',
    meaning: 'threads that split large pageable host copies',
  },
  {
    name: 'VRAM_IMEX_ROOT',
    values: 'absolute path',
    default: '/',
    meaning:
      "where fabric handles' IMEX check reads proc/devices and dev/nvidia-caps-imex-channels/ (handleTypes: 'fabric'): for a container that mounts the host's elsewhere",
  },
  { name: 'VRAM_DEBUG', values: 'any non-empty value', default: 'off', meaning: 'the CLI prints the stack of an unexpected error, not only its message' },
];

/** One row of the table as it stands in a process: the variable and what it is set to. */
export interface EnvironmentSetting extends EnvironmentVariable {
  /** The value set in the environment; undefined when unset or blank (the default applies). */
  readonly value: string | undefined;
  /** Why vram refuses the value (its reader's message), when it does; absent for a good value. */
  readonly problem?: string;
}

/**
 * The table with each variable's current value, checked by the variable's own reader.
 *
 * @param env The environment to read (default `process.env`).
 * @returns One setting per variable of `ENVIRONMENT`, in its order.
 * @throws Never: a refused value is the setting's `problem`.
 * @example
 * ```ts
 * for (const s of environmentSettings()) console.log(s.name, s.value ?? `(default: ${s.default})`, s.problem ?? '');
 * ```
 */
export function environmentSettings(env: EnvironmentValues = process.env): EnvironmentSetting[] {
  return ENVIRONMENT.map((v) => {
    const text = env[v.name];
    const value = text === undefined || text.trim() === '' ? undefined : text;
    let problem: string | undefined;
    try {
      ENVIRONMENT_READERS.get(v.name)?.read(env);
    } catch (error) {
      problem = error instanceof Error ? error.message : String(error);
    }
    return problem === undefined ? { ...v, value } : { ...v, value, problem };
  });
}

/**
 * Looks a variable up by name.
 *
 * @param name The variable, `VRAM_...`.
 * @returns Its entry in `ENVIRONMENT`.
 * @throws {RangeError} When vram reads no variable of that name (a typo in the caller's table).
 * @example
 * ```ts
 * environmentVariable('VRAM_BACKEND').default; // 'auto'
 * ```
 */
export function environmentVariable(name: string): EnvironmentVariable {
  const found = ENVIRONMENT.find((v) => v.name === name);
  if (found === undefined) throw new RangeError(`vram reads no environment variable named '${name}'`);
  return found;
}
