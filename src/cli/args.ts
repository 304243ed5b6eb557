/**
 * Argument parsing shared by the commands: node's `parseArgs`, plus what it does not do for a CLI.
 * `--help`/`-h` on every command; a parse error becomes a one-line UsageError naming the command,
 * in vram's words (so `main.ts` prints it and where the help is, not node's "Unknown option" and a
 * stack); and an
 * option's value may start with `-` when it is a number (`--repeats -1` reaches the command's own
 * check, which says what it wants, instead of parseArgs' "argument is ambiguous").
 */
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { nearestName } from '../util/nearest-name.js';
import { UsageError } from './usage.js';

type Options = NonNullable<ParseArgsConfig['options']>;

/** Options every command takes. */
const COMMON = { help: { type: 'boolean', short: 'h', default: false } } as const;

/** What `parseCommandArgs` returns: `parseArgs`' result for the command's options plus `help`. */
export type ParsedCommandArgs<T extends Options> = ReturnType<
  typeof parseArgs<{ args: string[]; options: T & typeof COMMON; strict: true; allowPositionals: boolean }>
>;

/**
 * Joins `--name -1` (and `-n -1`) into `--name=-1` for options that take a value, so a negative
 * number is read as the value it is meant to be and the command's check can refuse it by name.
 */
function joinNegativeValues(args: readonly string[], options: Options): string[] {
  const takesValue = new Map<string, string>();
  for (const [name, option] of Object.entries(options)) {
    if (option.type !== 'string') continue;
    takesValue.set(`--${name}`, name);
    if (option.short !== undefined) takesValue.set(`-${option.short}`, name);
  }
  const out: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    const name = takesValue.get(arg);
    const next = args[i + 1];
    if (arg === '--') {
      out.push(...args.slice(i));
      break;
    }
    if (name !== undefined && next !== undefined && /^-[\d.]/.test(next)) {
      out.push(`--${name}=${next}`);
      i += 1;
    } else {
      out.push(arg);
    }
  }
  return out;
}

/**
 * A parse error of node's (`ERR_PARSE_ARGS_*`, its own words and capitals: "Unknown option
 * '--foo'. To specify a positional argument ...") in vram's: what is wrong, in one clause naming
 * the option as the user wrote it, with the nearest option where one was misspelt.
 */
function usageMessage(code: string, message: string, options: Options): string {
  const quoted = /'([^']*)'/.exec(message)?.[1] ?? '';
  // The option's long form: node quotes `--name`, `-n`, `--name <value>` or `-n, --name <value>`.
  const long = /--([\w-]+)/.exec(quoted)?.[1];
  const short = /^-(\w)\b/.exec(quoted)?.[1];
  const name = long ?? Object.entries(options).find(([, o]) => o.short === short)?.[0];
  const flag = name === undefined ? quoted : `--${name}`;
  switch (code) {
    case 'ERR_PARSE_ARGS_UNKNOWN_OPTION': {
      const names = Object.keys(options);
      const guess = quoted.startsWith('--') ? nearestName(quoted.slice(2).split('=')[0]!, names) : undefined;
      return `unknown option ${quoted}${guess === undefined ? '' : ` (did you mean --${guess}?)`}`;
    }
    case 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL':
      return `takes no arguments besides its options, got '${quoted}'`;
    case 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE':
      if (/does not take an argument/.test(message)) return `${flag} takes no value`;
      // "argument is ambiguous": the next word starts with '-', so it may be an option left without its value.
      if (/ambiguous/.test(message)) return `${flag} needs a value; for one that starts with '-', write ${flag}=<value>`;
      return `${flag} needs a value`;
    default: {
      // A code node may add later: its first sentence.
      const line = message.split('\n')[0] ?? message;
      const cut = line.search(/\. (?=[A-Z])/);
      return cut > 0 ? line.slice(0, cut) : line.replace(/\.$/, '');
    }
  }
}

/**
 * Parses a command's arguments strictly.
 *
 * @param command The command's name, for the usage error.
 * @param args The arguments after the command's name.
 * @param options The command's options (`--help`/`-h` is added).
 * @param positionals Whether the command takes positional arguments.
 * @returns The values and positionals, as `parseArgs` returns them; `values.help` is true when help
 *   was asked for (the command prints it and returns 0).
 * @throws {UsageError} For an unknown option, a missing value, or a positional where none is taken.
 * @example
 * ```ts
 * const { values } = parseCommandArgs('info', args, { json: { type: 'boolean', default: false } });
 * ```
 */
export function parseCommandArgs<const T extends Options>(command: string, args: readonly string[], options: T, positionals = false): ParsedCommandArgs<T> {
  const all = { ...options, ...COMMON };
  try {
    return parseArgs({ args: joinNegativeValues(args, all), options: all, strict: true, allowPositionals: positionals });
  } catch (error) {
    const code = (error as { code?: unknown } | null)?.code;
    if (typeof code === 'string' && code.startsWith('ERR_PARSE_ARGS')) {
      throw new UsageError(usageMessage(code, (error as Error).message, all), command);
    }
    throw error;
  }
}
