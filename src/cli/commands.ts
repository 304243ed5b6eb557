/**
 * One description of each `vram` command: its usage line, what it does, its options and the
 * environment variables it reads. `vram help`, `vram help <command>`, `vram <command> --help` and
 * the usage part of every usage error are all printed from these, so they cannot disagree.
 */
import { RESOURCE_STACK_NAMES } from '../resource/stacks.js';

/** One option of a command, as its help lists it. */
export interface OptionHelp {
  /** The flag and its argument as typed: `--sizes 64K,1M,...`, `--resource, -r NAME`. */
  readonly flag: string;
  /** What it does, and its default. */
  readonly meaning: string;
}

/** A command as its help describes it. */
export interface CommandHelp {
  readonly name: string;
  /** The usage line after `vram `. */
  readonly usage: string;
  /** One line for the list of commands. */
  readonly summary: string;
  readonly options: readonly OptionHelp[];
  /** The `VRAM_*` variables it reads (names from src/cli/environment-table.ts). */
  readonly environment: readonly string[];
}

const HELP_OPTION: OptionHelp = { flag: '--help, -h', meaning: "this command's help" };
const VERBOSE_OPTION: OptionHelp = { flag: '--verbose', meaning: 'say more about the backend: the driver library and every path searched for it' };
const BACKEND_ENVIRONMENT = ['VRAM_BACKEND', 'VRAM_LIBCUDA', 'VRAM_EMULATED_BYTES'] as const;

/**
 * The commands, in the order `vram help` lists them.
 *
 * @example
 * ```ts
 * for (const c of COMMAND_HELP) console.log(`vram ${c.usage}`);
 * ```
 */
export const COMMAND_HELP: readonly CommandHelp[] = [
  {
    name: 'info',
    usage: 'info [--json] [--verbose]',
    summary: 'backend, driver, every device with its memory and attributes, and the VRAM_* settings',
    options: [{ flag: '--json', meaning: 'print the report as JSON' }, VERBOSE_OPTION, HELP_OPTION],
    environment: [...BACKEND_ENVIRONMENT],
  },
  {
    name: 'bench',
    usage: 'bench [--json] [--html FILE] [--quick] [--only GROUP,...] [--sizes SIZE,...] [--repeats N] [--verbose]',
    summary: 'transfer bandwidth and allocation latency on this machine',
    options: [
      { flag: '--json', meaning: 'print the rows as JSON' },
      { flag: '--html FILE', meaning: 'also write the rows as a report with plots to FILE (one self-contained HTML file)' },
      { flag: '--quick', meaning: 'fewer repeats and sizes up to 16 MiB (always on the emulated backend)' },
      { flag: '--only GROUP', meaning: 'transfers, alloc, allocators, objects or kernels; repeat it or separate with commas (default all)' },
      { flag: '--sizes SIZE,...', meaning: 'transfer sizes, e.g. 64K,1M,256M (binary units; default 64K,1M,16M,256M)' },
      { flag: '--repeats N', meaning: 'measurements per case, a whole number >= 1 (default per case)' },
      VERBOSE_OPTION,
      HELP_OPTION,
    ],
    environment: [...BACKEND_ENVIRONMENT, 'VRAM_COPY_THREADS'],
  },
  {
    name: 'replay',
    usage: `replay <trace.csv>... [--resource NAME]... [--capacity SIZE | --headroom PERCENT] [--repeat N] [--extent-size SIZE] [--per-op] [--device N] [--json] [--html FILE]`,
    summary: "replay RMM allocation logs through one or more resource stacks, with all the device's memory or only as much as asked",
    options: [
      { flag: '--resource, -r NAME', meaning: `${RESOURCE_STACK_NAMES.join(', ')} or all; repeat it or separate with commas (default all)` },
      {
        flag: '--capacity SIZE',
        meaning:
          "replay with only SIZE of device memory (16G, 24GiB): will the trace fit on a smaller card? A ballast (one cuMemAlloc, outside every stack) takes the rest of the free memory before the stacks are made, so each stack sees SIZE free when it is made, and what it takes (its own fixed costs, the arena's reservation) counts against it; each stack's row says whether the trace fit, and its notes where it failed (operation, line, request, live and held bytes). Refused when the device has less free",
      },
      { flag: '--headroom PERCENT', meaning: "as --capacity, of each trace's peak live plus PERCENT (3 or 3%: peak live x 1.03); not with --capacity" },
      { flag: '--repeat N', meaning: 'replay the trace N times back to back, 1 to 1000 (default 1), and report the first pass and the later ones apart' },
      {
        flag: '--extent-size SIZE',
        meaning:
          "the pool and binning stacks' PoolResource extentSize: most bytes one physical allocation may span, whole 2 MiB pages (the device's allocation granularity; default one page; larger grows faster at a higher peak)",
      },
      { flag: '--per-op', meaning: 'also time each operation alone (first pass) and report median allocate and free times' },
      { flag: '--device N', meaning: 'device ordinal (default 0)' },
      { flag: '--json', meaning: 'print the results as JSON: one object for one log, an array of them, in order, for several' },
      {
        flag: '--html FILE',
        meaning:
          "also write a report to FILE (one log only): each stack's live and reserved bytes over the trace's time (from one more replay per stack), the live blocks at the peak",
      },
      HELP_OPTION,
    ],
    environment: [...BACKEND_ENVIRONMENT],
  },
  {
    name: 'view',
    usage: 'view <snapshot.json> [-o FILE]',
    summary: 'turn a memory snapshot (memorySnapshot(), VRAM_OOM_SNAPSHOT) into an HTML report',
    options: [{ flag: '--output, -o FILE', meaning: "where to write the report (default: the snapshot's path, .json replaced by .html)" }, HELP_OPTION],
    environment: [],
  },
  {
    name: 'help',
    usage: 'help [command]',
    summary: "this list, or a command's help",
    options: [],
    environment: [],
  },
  {
    name: 'version',
    usage: 'version (or --version, -v)',
    summary: 'the package version',
    options: [],
    environment: [],
  },
];

/**
 * The description of one command.
 *
 * @param name The command's name.
 * @returns Its description, or undefined when there is no such command.
 * @example
 * ```ts
 * commandHelp('bench')?.usage; // 'bench [--json] [--quick] ...'
 * ```
 */
export function commandHelp(name: string): CommandHelp | undefined {
  return COMMAND_HELP.find((c) => c.name === name);
}
