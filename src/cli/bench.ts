/**
 * `vram bench`: measures transfer bandwidth and allocation latency on this machine. The groups
 * in `./bench/` turn settings into cases; this module parses options, runs the cases with a
 * progress line, and prints the rows as tables or as JSON. On the emulated backend it says so in
 * the header and runs a quick pass without the largest sizes (host memory says nothing about a GPU).
 * `--html FILE` also writes the rows as a report with plots (src/report/bench-report.ts).
 */
import { Device } from '../device.js';
import { allocCases } from './bench/alloc.js';
import { allocatorCases } from './bench/allocators.js';
import { objectCases } from './bench/object-pairs.js';
import { kernelCases } from './bench/kernels.js';
import { GROUPS, type BenchCase, type BenchRow, type BenchSettings, type Group, type SkippedRow } from './bench/common.js';
import { pageableCases } from './bench/pageable.js';
import { reductionCases } from './bench/reductions.js';
import { transferCases } from './bench/transfers.js';
import { benchReport } from '../report/bench-report.js';
import { renderReport } from '../report/html.js';
import { formatBytes, parseSize } from '../util/size.js';
import { parseCommandArgs } from './args.js';
import { formatPairs, formatTable, formatValue, Progress } from './format.js';
import { commandBackend } from './fallback-warning.js';
import { checkOutputPath, writeReportFile } from './output-path.js';
import { describeBackend, emulatedReason, verboseDriverSearch } from './info.js';
import { UsageError } from './usage.js';

/** Transfer sizes: 64 KiB to 256 MiB in steps of 4x, enough points for the report's curves. */
const TRANSFER_SIZES = [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20] as const;
/** The largest transfer the emulated backend's quick run copies: host memory says nothing about a GPU's large copies. */
const EMULATED_TRANSFER_MAX = 16 << 20;
/** Allocation sizes for pair latency: 256 B to 64 MiB in steps of 4x. */
const ALLOC_SIZES = [256, 1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20] as const;

const CASES: Readonly<Record<Group, (settings: BenchSettings) => BenchCase[]>> = {
  transfers: (settings) => [...transferCases(settings), ...pageableCases(settings)],
  alloc: allocCases,
  allocators: allocatorCases,
  objects: objectCases,
  kernels: (settings) => [...kernelCases(settings), ...reductionCases(settings)],
};

/** What `vram bench --json` prints. */
export interface BenchReport {
  readonly backend: 'cuda' | 'emulated';
  readonly emulatedReason?: string;
  readonly device: string;
  readonly quick: boolean;
  /** Why quick mode is on without `--quick`: the backend is emulated. */
  readonly quickReason?: string;
  /** The transfer sizes measured, in bytes. */
  readonly transferSizes: readonly number[];
  readonly rows: readonly BenchRow[];
  readonly skipped: readonly SkippedRow[];
}

function parseGroups(values: readonly string[] | undefined): readonly Group[] {
  if (values === undefined || values.length === 0) return GROUPS;
  const groups = values
    .flatMap((v) => v.split(','))
    .map((v) => v.trim())
    .filter((v) => v !== '');
  if (groups.length === 0) throw new UsageError(`--only takes ${GROUPS.join(', ')}; got nothing`, 'bench');
  for (const g of groups) {
    if (!(GROUPS as readonly string[]).includes(g)) {
      throw new UsageError(`--only takes ${GROUPS.join(', ')}; got '${g}'`, 'bench');
    }
  }
  return groups as Group[];
}

function parseSizes(text: string | undefined): readonly number[] | undefined {
  if (text === undefined) return undefined;
  try {
    return text.split(',').map((size) => parseSize(size, '--sizes'));
  } catch (error) {
    throw new UsageError((error as Error).message, 'bench');
  }
}

function parseRepeats(text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  const n = /^\d+$/.test(text) ? Number(text) : NaN;
  if (!Number.isSafeInteger(n) || n < 1) throw new UsageError(`--repeats must be a whole number >= 1, got '${text}'`, 'bench');
  return n;
}

/** Runs the cases in order; a case that throws becomes a skipped row, and the rest still run. */
async function runCases(cases: readonly BenchCase[]): Promise<{ rows: BenchRow[]; skipped: SkippedRow[] }> {
  const progress = new Progress(cases.length);
  const rows: BenchRow[] = [];
  const skipped: SkippedRow[] = [];
  try {
    for (const c of cases) {
      progress.step(`${c.group}: ${c.name} ${formatBytes(c.size)}`);
      try {
        const result = await c.run();
        if (Array.isArray(result)) rows.push(...(result as readonly BenchRow[]));
        else rows.push(result as BenchRow);
      } catch (error) {
        const reason = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
        skipped.push({ group: c.group, name: c.name, size: c.size, reason });
      }
    }
  } finally {
    progress.finish();
  }
  return { rows, skipped };
}

const TITLES: Readonly<Record<string, string>> = {
  'transfers GB/s': 'transfer bandwidth, GB/s (1e9 bytes/s), median',
  'transfers ms': 'event-loop delay during the async copy, ms (p99, monitorEventLoopDelay)',
  'alloc ns/pair': 'driver allocate+free pair, ns per pair, median over batches',
  'allocators ns/pair': 'resource allocate+free pair (pool hit), ns per pair, median over batches',
  'allocators ns/op': 'RMM random-allocations pattern, ns per operation (sizes up to the column)',
  'objects ns/pair': 'the object layer beside its resource pair (a PoolResource), ns per pair, median of rounds alternated in one process',
  'kernels ns/op': 'kernel launch from TypeScript, ns per launch, median over batches',
  'kernels GB/s': 'kernel reads, GB/s (1e9 bytes/s), median',
};

/** What a table's size columns count, named in its header's first cell. */
const COLUMNS: Readonly<Record<string, string>> = {
  'transfers GB/s': 'bytes per copy',
  'transfers ms': 'bytes copied',
  'alloc ns/pair': 'bytes per allocation',
  'allocators ns/pair': 'bytes per allocation',
  'allocators ns/op': 'largest allocation',
  'objects ns/pair': 'bytes per allocation',
  'kernels ns/op': 'argument bytes',
  'kernels GB/s': 'bytes read',
};

/** The mark after a row that is a model of the driver, and the footnote that says so. */
const MODEL_MARK = ' (model)';
const MODEL_NOTE = "the emulated backend's model of the CUDA driver (its allocation calls, CUDA's pool); " + "its cost is the model's, not the driver's";

/** The row with its name marked when it is a model of the driver (the table's and the report's). */
function markModel(row: BenchRow): BenchRow {
  return row.model === true ? { ...row, name: `${row.name}${MODEL_MARK}` } : row;
}

/** The table view: one table per group and unit, names down, sizes across. */
export function formatRows(rows: readonly BenchRow[]): string {
  const tables = new Map<string, BenchRow[]>();
  for (const row of rows) {
    const key = `${row.group} ${row.unit}`;
    const list = tables.get(key) ?? [];
    list.push(row);
    tables.set(key, list);
  }
  const out: string[] = [];
  for (const [key, list] of tables) {
    const sizes = [...new Set(list.map((r) => r.size))].sort((a, b) => a - b);
    const names = [...new Set(list.map((r) => r.name))];
    const body = names.map((name) => [
      markModel(list.find((r) => r.name === name)!).name,
      ...sizes.map((size) => {
        const row = list.find((r) => r.name === name && r.size === size);
        return row === undefined ? '' : formatValue(row.value);
      }),
    ]);
    const header = [COLUMNS[key] ?? '', ...sizes.map(formatBytes)];
    out.push(`${TITLES[key] ?? key}\n${formatTable(header, body, ['left', ...sizes.map(() => 'right' as const)])}`);
  }
  if (rows.some((r) => r.model === true)) out.push(`(model): ${MODEL_NOTE}`);
  return out.join('\n\n');
}

/**
 * The header lines that keep emulated figures from passing for a GPU's: what the numbers are,
 * why quick mode and these sizes were chosen, and what D2D measures there.
 */
function emulatedNotes(quickAsked: boolean, settings: BenchSettings): (readonly [string, string])[] {
  const sizes = settings.transferSizes.map(formatBytes).join(', ');
  return [
    ['measures', 'host memory standing in for a GPU: these figures say nothing about a GPU'],
    ['mode', quickAsked ? `quick (--quick); transfer sizes ${sizes}` : `quick, because the backend is emulated; transfer sizes ${sizes}`],
    ['D2D', 'a host-memory copy (memcpy within this process), not a copy between GPU memory'],
    [
      'pool hits',
      'timed as bench/pool-hit times them, with its code (src/cli/bench/hits.ts): each resource in a process of its own, ' +
        'every size warmed, then the median of 15 rounds of about 2 ms (1,000 to 200,000 pairs)',
    ],
    [
      'on a GPU',
      "no figure here carries over: every one is a time on this host; rows marked (model) time the emulation's " +
        'model of the driver. Run vram bench on the GPU machine',
    ],
  ];
}

/** Entry point of `vram bench`. */
export async function benchCommand(args: string[]): Promise<number> {
  const { values } = parseCommandArgs('bench', args, {
    json: { type: 'boolean', default: false },
    quick: { type: 'boolean', default: false },
    only: { type: 'string', multiple: true },
    sizes: { type: 'string' },
    repeats: { type: 'string' },
    verbose: { type: 'boolean', default: false },
    html: { type: 'string' },
  });
  const groups = parseGroups(values.only);
  const sizes = parseSizes(values.sizes);
  const repeats = parseRepeats(values.repeats);
  if (values.html !== undefined) checkOutputPath('bench', '--html', values.html);

  const backend = commandBackend('bench');
  const device = Device.get(0).makeCurrent();
  const emulated = backend.name === 'emulated';
  const settings: BenchSettings = {
    backend,
    quick: values.quick || emulated,
    // The large rows say nothing about host memory standing in for a GPU: skip unless asked.
    transferSizes: sizes ?? (emulated ? TRANSFER_SIZES.filter((s) => s <= EMULATED_TRANSFER_MAX) : TRANSFER_SIZES),
    // 1 GiB on a GPU (the copy must leave the event loop free for its whole length); 64 MiB emulated.
    asyncTransferSize: sizes === undefined ? (emulated ? 64 << 20 : 1 << 30) : Math.max(...sizes),
    allocSizes: ALLOC_SIZES,
    ...(repeats === undefined ? {} : { repeats }),
    // Quick batches of pool hits time a cold JIT; the emulated run times them as bench/pool-hit does (bench/hits.ts).
    warmHits: emulated,
  };

  const header: (readonly [string, string])[] = [['backend', describeBackend(backend, values.verbose)]];
  const search = values.verbose ? verboseDriverSearch(backend) : undefined;
  if (search !== undefined) header.push(['driver search', search]);
  header.push(['device', device.info.name]);
  if (emulated) header.push(...emulatedNotes(values.quick, settings));
  if (!values.json) process.stdout.write(`${formatPairs(header)}\n\n`);
  const { rows, skipped } = await runCases(groups.flatMap((g) => CASES[g](settings)));

  if (values.json) {
    const reason = emulatedReason(backend);
    const report: BenchReport = {
      backend: backend.name,
      ...(reason === undefined ? {} : { emulatedReason: reason }),
      device: device.info.name,
      quick: settings.quick,
      ...(emulated && !values.quick ? { quickReason: 'emulated backend' } : {}),
      transferSizes: settings.transferSizes,
      rows,
      skipped,
    };
    process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
  } else {
    process.stdout.write(`${formatRows(rows)}\n`);
    if (skipped.length > 0) {
      process.stdout.write(`\nskipped:\n${skipped.map((s) => `  ${s.group}: ${s.name} ${formatBytes(s.size)}: ${s.reason}`).join('\n')}\n`);
    }
  }
  if (
    values.html !== undefined &&
    !writeReportFile(
      'bench',
      '--html',
      values.html,
      renderReport(
        benchReport({
          facts: rows.some((r) => r.model === true) ? [...header, ['(model)', MODEL_NOTE]] : header,
          rows: rows.map(markModel),
          skipped,
        }),
      ),
    )
  ) {
    return 1;
  }
  return 0;
}
