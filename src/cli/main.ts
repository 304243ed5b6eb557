/**
 * The `vram` command: picks the subcommand, hands it the rest of the arguments and turns what it
 * returns or throws into an exit status (0 ok, 1 failure, 2 usage error). `vram help [command]`,
 * `vram --help` and `vram <command> --help` print help from the command descriptions and exit 0.
 * Subcommands are loaded lazily so `vram info` never loads the benchmark or replay code.
 */
import { readFileSync } from 'node:fs';
import { DEBUG_VARIABLE } from './environment-table.js';
import { answerUsageError, formatCommandHelp, formatMainHelp, UsageError } from './usage.js';

/** A subcommand: takes its own arguments, prints, and returns the exit status. */
type Command = (args: string[]) => Promise<number>;

const COMMANDS: Readonly<Record<string, () => Promise<Command>>> = {
  info: async () => (await import('./info.js')).infoCommand,
  bench: async () => (await import('./bench.js')).benchCommand,
  replay: async () => (await import('./replay.js')).replayCommand,
  view: async () => (await import('./view.js')).viewCommand,
};

function packageVersion(): string {
  const url = new URL('../../../package.json', import.meta.url);
  const pkg = JSON.parse(readFileSync(url, 'utf8')) as { version?: unknown };
  return typeof pkg.version === 'string' ? pkg.version : 'unknown';
}

/** What `vram version --help` prints. */
const VERSION_HELP = 'usage: vram version (or vram --version, vram -v)\n\nPrints the version of the vram package this command belongs to.';

/** True when the arguments ask for help: `--help` or `-h` before any `--`. */
function asksForHelp(args: readonly string[]): boolean {
  const end = args.indexOf('--');
  return (end < 0 ? args : args.slice(0, end)).some((a) => a === '--help' || a === '-h');
}

/** Runs the CLI on `argv` (without `node` and the script) and returns the exit status. */
export async function main(argv: readonly string[]): Promise<number> {
  const [name, ...rest] = argv;
  try {
    if (name === undefined) throw new UsageError('missing command');
    if (name === 'help' || name === '--help' || name === '-h') {
      // `vram help --help` asks for help's own help: the whole CLI's, which says how help is used.
      const topic = rest.filter((a) => a !== '--help' && a !== '-h');
      if (topic.length > 1) throw new UsageError(`help takes at most one command, got ${topic.length}`, 'help');
      process.stdout.write(`${topic[0] === undefined ? formatMainHelp() : formatCommandHelp(topic[0])}\n`);
      return 0;
    }
    if (name === '--version' || name === '-v' || name === 'version') {
      if (asksForHelp(rest)) {
        process.stdout.write(`${VERSION_HELP}\n`);
        return 0;
      }
      if (rest.length > 0) throw new UsageError(`${name} takes no arguments, got '${rest[0]!}'`);
      process.stdout.write(`${packageVersion()}\n`);
      return 0;
    }
    const load = Object.hasOwn(COMMANDS, name) ? COMMANDS[name] : undefined;
    if (load === undefined) throw new UsageError(`unknown command '${name}'`);
    if (asksForHelp(rest)) {
      process.stdout.write(`${formatCommandHelp(name)}\n`);
      return 0;
    }
    const command = await load();
    return await command(rest);
  } catch (error) {
    if (error instanceof UsageError) return answerUsageError(error);
    // The stack is for developers (VRAM_DEBUG=1); users get the one-line message.
    const message = error instanceof Error ? (DEBUG_VARIABLE.read() !== undefined ? (error.stack ?? error.message) : error.message) : String(error);
    process.stderr.write(`vram: ${message}\n`);
    return 1;
  }
}

process.exitCode = await main(process.argv.slice(2));
