/**
 * Help text and the usage error every subcommand throws for bad arguments, so `main.ts` can answer
 * all of them the same way: one line saying what is wrong and where the command's help is, exit
 * status 2. The text is built from the command descriptions (`commands.ts`) and the
 * environment table (`environment-table.ts`).
 */
import { VramError } from '../errors.js';
import { ENVIRONMENT, environmentVariable, type EnvironmentSetting, type EnvironmentVariable } from './environment-table.js';
import { COMMAND_HELP, commandHelp, type CommandHelp } from './commands.js';

/**
 * A command line the CLI cannot run: wrong command, unknown option, bad option value.
 *
 * @example
 * ```ts
 * throw new UsageError('--repeats must be a whole number >= 1, got \'-1\'', 'bench');
 * ```
 */
export class UsageError extends VramError {
  /**
   * @param message What is wrong, one line.
   * @param command The command whose usage to show (none for a wrong or missing command).
   */
  constructor(
    message: string,
    readonly command?: string,
  ) {
    super(message);
  }
}

function indentLines(text: string, indent: string): string {
  return text
    .split('\n')
    .map((line) => (line === '' ? line : indent + line))
    .join('\n');
}

/**
 * The environment table as text, two lines per variable: what it takes and its default (or, with
 * `settings`, what it is set to now), then what it does.
 *
 * @param variables The variables to list (default: all of them).
 * @param settings The same table with current values (from `environmentSettings()`); when given,
 *   each variable shows its value (and why it is refused, if it is) or `unset (default ...)`
 *   instead of what it takes.
 * @returns The lines, without a trailing newline.
 * @example
 * ```ts
 * console.log(formatEnvironment(ENVIRONMENT, environmentSettings()));
 * ```
 */
export function formatEnvironment(variables: readonly EnvironmentVariable[] = ENVIRONMENT, settings?: readonly EnvironmentSetting[]): string {
  const width = Math.max(...variables.map((v) => v.name.length));
  return variables
    .map((v) => {
      const setting = settings?.find((s) => s.name === v.name);
      const state =
        settings === undefined
          ? `${v.values}; default ${v.default}`
          : setting?.value === undefined
            ? `unset; default ${v.default}`
            : setting.problem === undefined
              ? setting.value
              : `${setting.value}  REFUSED: ${setting.problem}`;
      return `${v.name.padEnd(width)}  ${state}\n${' '.repeat(width + 2)}${v.meaning}`;
    })
    .join('\n');
}

/**
 * The usage line of a command, as `usage: vram ...`.
 *
 * @param command The command's description.
 * @returns One line.
 * @example
 * ```ts
 * usageLine(commandHelp('info')!); // 'usage: vram info [--json] [--verbose]'
 * ```
 */
export function usageLine(command: CommandHelp): string {
  return `usage: vram ${command.usage}`;
}

/**
 * The help of one command: usage, what it does, options, the environment variables it reads.
 *
 * @param name The command.
 * @returns The text, without a trailing newline.
 * @throws {UsageError} When there is no such command.
 * @example
 * ```ts
 * process.stdout.write(`${formatCommandHelp('replay')}\n`);
 * ```
 */
export function formatCommandHelp(name: string): string {
  const command = commandHelp(name);
  if (command === undefined) throw new UsageError(`no command '${name}': ${COMMAND_HELP.map((c) => c.name).join(', ')}`);
  const out = [usageLine(command), '', `${command.summary}.`];
  if (command.options.length > 0) {
    const width = Math.max(...command.options.map((o) => o.flag.length));
    out.push('', 'options:', ...command.options.map((o) => `  ${o.flag.padEnd(width)}  ${o.meaning}`));
  }
  if (command.environment.length > 0) {
    out.push('', 'environment:', indentLines(formatEnvironment(command.environment.map(environmentVariable)), '  '));
  }
  return out.join('\n');
}

/**
 * The help of the whole CLI: the commands and every `VRAM_*` variable.
 *
 * @returns The text, without a trailing newline.
 * @example
 * ```ts
 * process.stdout.write(`${formatMainHelp()}\n`);
 * ```
 */
export function formatMainHelp(): string {
  const width = Math.max(...COMMAND_HELP.map((c) => c.name.length));
  const commands = COMMAND_HELP.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`).join('\n');
  return [
    'usage: vram <command> [options]',
    '',
    'commands:',
    commands,
    '',
    "run 'vram help <command>' or 'vram <command> --help' for a command's options",
    '',
    'environment:',
    indentLines(formatEnvironment(), '  '),
  ].join('\n');
}

/**
 * What a usage error prints: for a command, one line, the message and where the command's help is
 * (a script's log or a terminal shows the mistake, not a usage block to read past); for a wrong or
 * missing command, the message and the list of commands.
 *
 * @param error The usage error.
 * @returns The text for stderr, without a trailing newline.
 * @example
 * ```ts
 * process.stderr.write(`${formatUsageError(error)}\n`);
 * // vram info: Unknown option '--bogus'; see 'vram info --help'
 * ```
 */
export function formatUsageError(error: UsageError): string {
  const command = error.command === undefined ? undefined : commandHelp(error.command);
  if (command === undefined) return `vram: ${error.message}\n\n${formatMainHelp()}`;
  return `vram ${command.name}: ${error.message}; see 'vram ${command.name} --help'`;
}

/**
 * Answers a usage error the one way: its text on stderr, exit status 2.
 *
 * @param error The usage error.
 * @returns 2, the exit status of a usage error.
 * @example
 * ```ts
 * if (error instanceof UsageError) return answerUsageError(error);
 * ```
 */
export function answerUsageError(error: UsageError): number {
  process.stderr.write(`${formatUsageError(error)}\n`);
  return 2;
}
