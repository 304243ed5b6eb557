/**
 * NVRTC through koffi: the few calls a compile needs (create a program with its headers, add name
 * expressions, compile, read the log, the PTX or CUBIN and the lowered names, destroy), bound by
 * name once per process on first use. Every program is destroyed on every path, so a failed
 * compile leaks nothing.
 */
import koffi from 'koffi';
import { VramError } from '../errors.js';
import { NvrtcUnavailableError, openNvrtcLibrary } from './nvrtc-library.js';
import { loadOnce } from '../util/load-once.js';

export { NvrtcUnavailableError } from './nvrtc-library.js';

/** What to compile. */
export interface NvrtcProgram {
  readonly source: string;
  /** The program's name in the log (`kernel.cu`). */
  readonly name: string;
  /** Headers the source may `#include`, by include name. */
  readonly headers: Readonly<Record<string, string>>;
  /** NVRTC options, the architecture included (`--gpu-architecture=sm_90`). */
  readonly options: readonly string[];
  /** Name expressions (`sum<float>`) whose lowered (mangled) names are wanted. */
  readonly nameExpressions: readonly string[];
  /** CUBIN (for a real architecture, `sm_XY`) or PTX (for a virtual one, `compute_XY`). */
  readonly output: 'cubin' | 'ptx';
}

/** A successful compile. */
export interface NvrtcOutput {
  readonly image: Uint8Array;
  readonly log: string;
  /** Name expression -> lowered name. */
  readonly loweredNames: Readonly<Record<string, string>>;
}

/** A failed compile: NVRTC's result name and the program log. */
export interface NvrtcFailure {
  readonly result: string;
  readonly log: string;
}

/** A loaded NVRTC. */
export interface Nvrtc {
  /** Where it was loaded from. */
  readonly path: string;
  /** nvrtcVersion as [major, minor]. */
  readonly version: readonly [number, number];
  /** The real architectures it can emit CUBIN for (nvrtcGetSupportedArchs), e.g. [75, 80, ..., 120]. */
  readonly supportedArchs: readonly number[];
  /** Compiles; a failure of the source is returned (with its log), a failure of NVRTC itself thrown. */
  compile(program: NvrtcProgram): NvrtcOutput | NvrtcFailure;
}

/** nvrtcResult names (nvrtc.h), for messages. */
const RESULT_NAMES: readonly string[] = [
  'NVRTC_SUCCESS',
  'NVRTC_ERROR_OUT_OF_MEMORY',
  'NVRTC_ERROR_PROGRAM_CREATION_FAILURE',
  'NVRTC_ERROR_INVALID_INPUT',
  'NVRTC_ERROR_INVALID_PROGRAM',
  'NVRTC_ERROR_INVALID_OPTION',
  'NVRTC_ERROR_COMPILATION',
  'NVRTC_ERROR_BUILTIN_OPERATION_FAILURE',
  'NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION',
  'NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION',
  'NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID',
  'NVRTC_ERROR_INTERNAL_ERROR',
];

/** Results that mean the source (or its options or name expressions) is at fault: a CompileError, not a crash. */
const SOURCE_FAULTS = new Set([5, 6, 10]);

type R = number;
interface NvrtcFunctions {
  nvrtcVersion(major: Int32Array, minor: Int32Array): R;
  nvrtcGetNumSupportedArchs(count: Int32Array): R;
  nvrtcGetSupportedArchs(archs: Int32Array): R;
  nvrtcCreateProgram(prog: BigUint64Array, src: string, name: string, numHeaders: number, headers: string[] | null, includeNames: string[] | null): R;
  nvrtcDestroyProgram(prog: BigUint64Array): R;
  nvrtcAddNameExpression(prog: bigint, expression: string): R;
  nvrtcCompileProgram(prog: bigint, numOptions: number, options: string[] | null): R;
  nvrtcGetProgramLogSize(prog: bigint, size: BigUint64Array): R;
  nvrtcGetProgramLog(prog: bigint, log: Uint8Array): R;
  nvrtcGetPTXSize(prog: bigint, size: BigUint64Array): R;
  nvrtcGetPTX(prog: bigint, ptx: Uint8Array): R;
  nvrtcGetCUBINSize(prog: bigint, size: BigUint64Array): R;
  nvrtcGetCUBIN(prog: bigint, cubin: Uint8Array): R;
  nvrtcGetLoweredName(prog: bigint, expression: string, lowered: BigUint64Array): R;
}

/** The prototypes bound (nvrtc.h, CUDA 12-13); nvrtcProgram is an opaque pointer, bound as uint64_t. */
const PROTOTYPES: Readonly<Record<keyof NvrtcFunctions, string>> = {
  nvrtcVersion: 'int nvrtcVersion(int *major, int *minor)',
  nvrtcGetNumSupportedArchs: 'int nvrtcGetNumSupportedArchs(int *count)',
  nvrtcGetSupportedArchs: 'int nvrtcGetSupportedArchs(int *archs)',
  nvrtcCreateProgram:
    'int nvrtcCreateProgram(uint64_t *prog, const char *src, const char *name, int numHeaders, const char **headers, const char **includeNames)',
  nvrtcDestroyProgram: 'int nvrtcDestroyProgram(uint64_t *prog)',
  nvrtcAddNameExpression: 'int nvrtcAddNameExpression(uint64_t prog, const char *expression)',
  nvrtcCompileProgram: 'int nvrtcCompileProgram(uint64_t prog, int numOptions, const char **options)',
  nvrtcGetProgramLogSize: 'int nvrtcGetProgramLogSize(uint64_t prog, uint64_t *size)',
  nvrtcGetProgramLog: 'int nvrtcGetProgramLog(uint64_t prog, uint8_t *log)',
  nvrtcGetPTXSize: 'int nvrtcGetPTXSize(uint64_t prog, uint64_t *size)',
  nvrtcGetPTX: 'int nvrtcGetPTX(uint64_t prog, uint8_t *ptx)',
  nvrtcGetCUBINSize: 'int nvrtcGetCUBINSize(uint64_t prog, uint64_t *size)',
  nvrtcGetCUBIN: 'int nvrtcGetCUBIN(uint64_t prog, uint8_t *cubin)',
  nvrtcGetLoweredName: 'int nvrtcGetLoweredName(uint64_t prog, const char *expression, uint64_t *lowered)',
};

/**
 * An NVRTC call that failed for a reason other than the source (out of memory, an internal
 * error): NVRTC itself, or vram's use of it.
 *
 * @example
 * ```ts
 * try { Module.compile(source); } catch (e) { if (e instanceof NvrtcError) console.error(e.call, e.result); }
 * ```
 */
export class NvrtcError extends VramError {
  /**
   * @param call The NVRTC function.
   * @param result Its nvrtcResult.
   * @throws Never.
   * @example
   * ```ts
   * throw new NvrtcError('nvrtcCreateProgram', 3);
   * ```
   */
  constructor(
    readonly call: string,
    readonly result: number,
  ) {
    super(`${call} failed: ${RESULT_NAMES[result] ?? `nvrtcResult ${result}`}`);
  }
}

const loadNvrtcOnce = loadOnce(bind, (error) =>
  error instanceof NvrtcUnavailableError ? error : new NvrtcUnavailableError([String(error instanceof Error ? error.message : error)]),
);

/**
 * NVRTC, loaded and bound on the first call (later calls return the same object, or rethrow the
 * same failure).
 *
 * @returns The loaded NVRTC.
 * @throws {NvrtcUnavailableError} When no libnvrtc loads, or the one found lacks a function vram binds.
 * @example
 * ```ts
 * const { version } = loadNvrtc(); // [13, 0]
 * ```
 */
export function loadNvrtc(): Nvrtc {
  return loadNvrtcOnce();
}

function bind(): Nvrtc {
  const library = openNvrtcLibrary();
  const fn: Partial<Record<keyof NvrtcFunctions, unknown>> = {};
  for (const key of Object.keys(PROTOTYPES) as (keyof NvrtcFunctions)[]) {
    try {
      fn[key] = library.lib.func(PROTOTYPES[key]);
    } catch (error) {
      throw new NvrtcUnavailableError([`${library.path} (loaded, but it has no ${key}: ${error instanceof Error ? error.message : String(error)})`]);
    }
  }
  const f = fn as NvrtcFunctions;
  const major = new Int32Array(1);
  const minor = new Int32Array(1);
  check(f.nvrtcVersion(major, minor), 'nvrtcVersion');
  const count = new Int32Array(1);
  check(f.nvrtcGetNumSupportedArchs(count), 'nvrtcGetNumSupportedArchs');
  const archs = new Int32Array(count[0] ?? 0);
  if (archs.length > 0) check(f.nvrtcGetSupportedArchs(archs), 'nvrtcGetSupportedArchs');
  return {
    path: library.path,
    version: [major[0] ?? 0, minor[0] ?? 0],
    supportedArchs: Array.from(archs),
    compile: (program) => compile(f, program),
  };
}

function check(r: number, call: string): void {
  if (r !== 0) throw new NvrtcError(call, r);
}

function compile(f: NvrtcFunctions, program: NvrtcProgram): NvrtcOutput | NvrtcFailure {
  const out = new BigUint64Array(1);
  const includeNames = Object.keys(program.headers);
  const headers = includeNames.map((name) => program.headers[name]!);
  check(
    f.nvrtcCreateProgram(
      out,
      program.source,
      program.name,
      includeNames.length,
      includeNames.length > 0 ? headers : null,
      includeNames.length > 0 ? includeNames : null,
    ),
    'nvrtcCreateProgram',
  );
  const prog = out[0] ?? 0n;
  try {
    for (const expression of program.nameExpressions) {
      const r = f.nvrtcAddNameExpression(prog, expression);
      if (r !== 0) return { result: RESULT_NAMES[r] ?? `nvrtcResult ${r}`, log: `invalid name expression ${expression}` };
    }
    const options = [...program.options];
    const r = f.nvrtcCompileProgram(prog, options.length, options.length > 0 ? options : null);
    const log = programLog(f, prog);
    if (r !== 0) {
      if (SOURCE_FAULTS.has(r)) return { result: RESULT_NAMES[r] ?? `nvrtcResult ${r}`, log };
      throw new NvrtcError('nvrtcCompileProgram', r);
    }
    const size = new BigUint64Array(1);
    let image: Uint8Array;
    if (program.output === 'cubin') {
      check(f.nvrtcGetCUBINSize(prog, size), 'nvrtcGetCUBINSize');
      image = new Uint8Array(Number(size[0] ?? 0n));
      check(f.nvrtcGetCUBIN(prog, image), 'nvrtcGetCUBIN');
    } else {
      check(f.nvrtcGetPTXSize(prog, size), 'nvrtcGetPTXSize');
      image = new Uint8Array(Number(size[0] ?? 0n));
      check(f.nvrtcGetPTX(prog, image), 'nvrtcGetPTX');
    }
    const loweredNames: Record<string, string> = {};
    const lowered = new BigUint64Array(1);
    for (const expression of program.nameExpressions) {
      const lr = f.nvrtcGetLoweredName(prog, expression, lowered);
      if (lr !== 0) return { result: RESULT_NAMES[lr] ?? `nvrtcResult ${lr}`, log: `${log}\nno lowered name for ${expression}` };
      // The string belongs to the program: decode it before the program is destroyed.
      loweredNames[expression] = koffi.decode(lowered[0] ?? 0n, 'char', -1) as string;
    }
    return { image, log, loweredNames };
  } finally {
    out[0] = prog;
    f.nvrtcDestroyProgram(out);
  }
}

function programLog(f: NvrtcFunctions, prog: bigint): string {
  const size = new BigUint64Array(1);
  if (f.nvrtcGetProgramLogSize(prog, size) !== 0) return '';
  const bytes = new Uint8Array(Number(size[0] ?? 0n));
  if (bytes.length === 0 || f.nvrtcGetProgramLog(prog, bytes) !== 0) return '';
  const end = bytes.indexOf(0);
  return Buffer.from(bytes.buffer, 0, end < 0 ? bytes.length : end).toString('utf8');
}
