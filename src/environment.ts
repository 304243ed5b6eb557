/**
 * Every `VRAM_*` environment variable vram reads, with its values, default and meaning: the one
 * table that `vram help`, each command's help and `vram info` print from, so a variable cannot be
 * read somewhere and documented nowhere. The modules that read a variable keep their own parsing
 * (and errors); this is the description. The default resource's three variables are described in
 * `memory/default-resource.ts`, beside the code that reads them, and taken from there, so the
 * table cannot drift from what that code does.
 */
import { DEFAULT_RESOURCE_VARIABLES } from './memory/default-resource.js';

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
  { name: 'VRAM_BACKEND', values: 'cuda|emulated|auto', default: 'auto',
    meaning: 'which backend drives the devices; auto uses the CUDA driver when it loads and reports a device, else the emulated backend' },
  { name: 'VRAM_LIBCUDA', values: 'path', default: 'libcuda.so.1 on the loader path, then the usual driver folders',
    meaning: "the CUDA driver library to load, when it is somewhere unusual" },
  { name: 'VRAM_LIBNVRTC', values: 'path', default: 'libnvrtc.so.13/.12 on the loader path, then $CUDA_HOME, /usr/local/cuda*, Python nvidia/ wheels',
    meaning: 'the NVRTC library Module.compile loads (only on a GPU, only when compiling CUDA source)' },
  { name: 'VRAM_CACHE_DIR', values: 'path', default: '$XDG_CACHE_HOME/vram, else ~/.cache/vram',
    meaning: 'where compiled kernels are cached (kernels/, one file per source, options, architecture, NVRTC and driver)' },
  { name: 'VRAM_EMULATED_BYTES', values: 'size (16G, 512M, bytes)', default: '4 GiB (vram replay sizes it for the trace)',
    meaning: 'capacity of each emulated device; backed lazily, so only what is written costs host memory' },
  // VRAM_ALLOCATOR, VRAM_MEMORY_LIMIT, VRAM_MEMORY_FRACTION: described beside the code that reads them.
  ...DEFAULT_RESOURCE_VARIABLES,
  { name: 'VRAM_OOM_SNAPSHOT', values: 'path', default: 'off',
    meaning: 'at an out-of-memory error, write a memory snapshot (JSON, docs/snapshot-schema.json) to this file; vram view turns it into a report' },
  { name: 'VRAM_COPY_THREADS', values: 'whole number (0 = copy on the calling thread)', default: 'half the cores, 1 to 8',
    meaning: 'threads that split large pageable host copies' },
  { name: 'VRAM_DEBUG', values: 'any non-empty value', default: 'off',
    meaning: 'the CLI prints the stack of an unexpected error, not only its message' },
];

/** One row of the table as it stands in a process: the variable and what it is set to. */
export interface EnvironmentSetting extends EnvironmentVariable {
  /** The value set in the environment; undefined when unset or empty (the default applies). */
  readonly value: string | undefined;
}

/**
 * The table with each variable's current value.
 *
 * @param env The environment to read (default `process.env`).
 * @returns One setting per variable of `ENVIRONMENT`, in its order.
 * @example
 * ```ts
 * for (const s of environmentSettings()) console.log(s.name, s.value ?? `(default: ${s.default})`);
 * ```
 */
export function environmentSettings(env: NodeJS.ProcessEnv = process.env): EnvironmentSetting[] {
  return ENVIRONMENT.map((v) => {
    const value = env[v.name];
    return { ...v, value: value === undefined || value === '' ? undefined : value };
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
