/**
 * The one way vram reads a `VRAM_*` environment variable: each module that reads one declares a
 * `VariableReader` beside the code that uses the value (`variableReader(name, parse)`), and reads
 * it through that at first use, never when vram is imported, so a bad value is the error of the
 * call that needs it (and `vram info` can show it) rather than a failed `import 'vram'`.
 *
 * Every variable follows the same rules: unset, empty or blank is unset (as a shell's `VAR=`
 * means), the text is trimmed, and text that is refused is a RangeError of one line that names the
 * variable, says what it takes and quotes what it got: `VRAM_COPY_THREADS must be a whole number
 * from 0 to 64, got '0x4'`. Numbers are decimal digits only: `Number()` would take `0x4`, `1e1`
 * and `  ` for numbers, which nobody means in an environment variable.
 *
 * This module sits below every layer (it imports nothing of vram's), so the driver loader and the
 * backend choice can use it as well as the CLI. The table that describes the variables for people
 * is `src/cli/environment-table.ts`.
 */
import { parseSize } from './size.js';

/** The environment as vram reads it: `process.env`, or a given object in tests. */
export type EnvironmentValues = Readonly<Record<string, string | undefined>>;

/** Checks and converts a variable's (trimmed, non-empty) text; throws a RangeError naming `name`. */
export type VariableParser<T> = (text: string, name: string) => T;

/** One `VRAM_*` variable and how its text is read. */
export interface VariableReader<T> {
  /** The variable, `VRAM_...`. */
  readonly name: string;
  /**
   * Reads the variable now.
   *
   * @param env The environment (default `process.env`).
   * @returns Its value, or undefined when it is unset or blank (the caller's default applies).
   * @throws {RangeError} When its text is not a value it takes (one line naming it).
   */
  read(env?: EnvironmentValues): T | undefined;
}

/**
 * The text of a variable as every reader sees it: trimmed, undefined when unset or blank.
 *
 * @param name The variable.
 * @param env The environment (default `process.env`).
 * @returns The trimmed text, or undefined.
 * @example
 * ```ts
 * variableText('VRAM_DEBUG'); // undefined unless set to something
 * ```
 */
export function variableText(name: string, env: EnvironmentValues = process.env): string | undefined {
  const value = env[name];
  if (value === undefined) return undefined;
  const trimmed = value.trim();
  return trimmed === '' ? undefined : trimmed;
}

/**
 * Declares a variable vram reads.
 *
 * @param name The variable, `VRAM_...`.
 * @param parse Checks and converts its text (`choiceOf`, `wholeNumberFrom`, `sizeInBytes`, ...).
 * @returns The reader; its `read()` is the only place the variable's text is looked at.
 * @throws {RangeError} When `name` does not start with `VRAM_` (a typo in the declaring module).
 * @example
 * ```ts
 * const COPY_THREADS = variableReader('VRAM_COPY_THREADS', wholeNumberFrom(0, 64));
 * const threads = COPY_THREADS.read() ?? 4;
 * ```
 */
export function variableReader<T>(name: string, parse: VariableParser<T>): VariableReader<T> {
  if (!/^VRAM_[A-Z0-9_]+$/.test(name)) throw new RangeError(`variableReader: '${name}' is not a VRAM_* variable name`);
  return Object.freeze({
    name,
    read(env: EnvironmentValues = process.env): T | undefined {
      const text = variableText(name, env);
      return text === undefined ? undefined : parse(text, name);
    },
  });
}

/**
 * A parser for one of a few words, case as given.
 *
 * @param choices The words it takes.
 * @returns The parser.
 * @example
 * ```ts
 * variableReader('VRAM_BACKEND', choiceOf(['cuda', 'emulated', 'auto'] as const));
 * ```
 */
export function choiceOf<C extends string>(choices: readonly C[]): VariableParser<C> {
  return (text, name) => {
    if (!(choices as readonly string[]).includes(text)) throw new RangeError(`${name} must be one of ${choices.join(', ')}, got '${text}'`);
    return text as C;
  };
}

/**
 * A parser for a whole number in decimal digits, from `min` to `max`.
 *
 * @param min The least it takes.
 * @param max The most it takes.
 * @returns The parser.
 * @example
 * ```ts
 * wholeNumberFrom(0, 64)('8', 'VRAM_COPY_THREADS'); // 8; '0x4', '1e1', '-1' and '65' are RangeErrors
 * ```
 */
export function wholeNumberFrom(min: number, max: number): VariableParser<number> {
  return (text, name) => {
    const n = /^\d{1,15}$/.test(text) ? Number(text) : Number.NaN;
    if (!(n >= min && n <= max)) throw new RangeError(`${name} must be a whole number from ${min} to ${max}, got '${text}'`);
    return n;
  };
}

/**
 * Parses a byte size (`16G`, `512M`, bytes) as every size flag and variable does (`parseSize`).
 *
 * @param text The variable's text.
 * @param name The variable.
 * @returns The size in bytes.
 * @throws {RangeError} When the text is not a positive size.
 * @example
 * ```ts
 * variableReader('VRAM_EMULATED_BYTES', sizeInBytes);
 * ```
 */
export function sizeInBytes(text: string, name: string): number {
  return parseSize(text, name);
}

/**
 * Parses a byte size as `sizeInBytes` does, or `0` (in any unit: `0`, `0M`): a variable where 0
 * means off.
 *
 * @param text The variable's text.
 * @param name The variable.
 * @returns The size in bytes, 0 for off.
 * @throws {RangeError} When the text is neither 0 nor a positive size.
 * @example
 * ```ts
 * variableReader('VRAM_SPILL_AHEAD', sizeOrOff); // '0' reads 0
 * ```
 */
export function sizeOrOff(text: string, name: string): number {
  return /^\s*0+(?:\.0*)?\s*(?:[kmgt](?:i?b)?|b)?\s*$/i.test(text) ? 0 : parseSize(text, name);
}

/** A decimal fraction: `0.5`, `.25`, `1`, `1.0`. */
const FRACTION = /^(?:\d+(?:\.\d*)?|\.\d+)$/;

/**
 * Parses a fraction greater than 0 and at most 1, in decimal (`0.5`, `.25`, `1`).
 *
 * @param text The variable's text.
 * @param name The variable.
 * @returns The fraction.
 * @throws {RangeError} For anything else (`1/2`, `0`, `50%`, `0x1`).
 * @example
 * ```ts
 * variableReader('VRAM_MEMORY_FRACTION', fractionOfOne);
 * ```
 */
export function fractionOfOne(text: string, name: string): number {
  const f = Number(text);
  if (!FRACTION.test(text) || !(f > 0 && f <= 1)) throw new RangeError(`${name} must be a number greater than 0 and at most 1, got '${text}'`);
  return f;
}

/**
 * Parses an absolute path (a relative one would depend on the folder each process starts in).
 *
 * @param text The variable's text.
 * @param name The variable.
 * @returns The path.
 * @throws {RangeError} For a relative path.
 * @example
 * ```ts
 * variableReader('VRAM_CACHE_DIR', absolutePath);
 * ```
 */
export function absolutePath(text: string, name: string): string {
  // Both forms of absolute, so the check does not depend on the platform it runs on.
  if (!text.startsWith('/') && !/^[A-Za-z]:[\\/]/.test(text) && !text.startsWith('\\\\')) {
    throw new RangeError(`${name} must be an absolute path, got '${text}'`);
  }
  return text;
}

/**
 * Takes any text: a file name, a library name the loader searches for, or a switch that is on
 * when set.
 *
 * @param text The variable's text.
 * @returns The text.
 * @example
 * ```ts
 * variableReader('VRAM_LIBCUDA', anyText); // a path, or a name such as libcuda.so.1
 * ```
 */
export function anyText(text: string): string {
  return text;
}
