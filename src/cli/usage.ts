/**
 * Usage text and the usage error every subcommand throws for bad arguments, so `main.ts` can answer
 * all of them the same way: a short message, the usage, exit status 2.
 */

/** A command line the CLI cannot run: wrong command, unknown option, bad option value. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

/** The short help printed by `vram help` and after a usage error. */
export const USAGE = `usage: vram <command> [options]

commands:
  info [--json]                      backend, driver and every device with its memory and attributes
  bench [--json] [--quick] [--only transfers|alloc|allocators] [--sizes 64K,1M,...] [--repeats N]
                                     transfer bandwidth and allocation latency on this machine
  replay <trace.csv> [options]       replay an RMM allocation log through a resource stack
  help                               this text
  --version                          the package version

environment:
  VRAM_BACKEND=cuda|emulated|auto    which backend to use (default auto)`;
