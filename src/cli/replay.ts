/**
 * `vram replay <log.csv>... [--resource NAME]... [--capacity SIZE | --headroom PERCENT] [--json]
 * [--html FILE]`: replays RMM allocation logs, one after another, through one or more resource
 * stacks and prints, for each log, time per operation and peak reserved over peak live side by
 * side; `--html` also writes a report with each stack's bytes over time. Exit status: 0 ok, 1 a
 * replay (or a log) failed or did not fit, 2 usage error.
 *
 * `--capacity`/`--headroom` replay with only that much device memory: a ballast (one cuMemAlloc,
 * outside every stack) takes the rest of the device's free memory before the log's stacks are
 * made, and goes back after the last, so each stack sees the capacity free when its replay starts,
 * and whatever it takes (its fixed costs, the arena's reservation) comes out of it.
 *
 * On the emulated backend with VRAM_EMULATED_BYTES unset, the emulated device is sized for the
 * traces (and the capacity) before any device exists (its memory is backed lazily, so a large
 * capacity, or a ballast, costs nothing until written): a trace that peaks above the 4 GiB
 * default then replays with no settings.
 */
import { existsSync } from 'node:fs';
import type { Backend } from '../backend/backend.js';
import { DEFAULT_EMULATED_CAPACITY, EMULATED_BYTES_VARIABLE, EmulatedBackend, MAX_EMULATED_CAPACITY } from '../backend/emulated/emulated-backend.js';
import { setBackend } from '../backend/select.js';
import { isOutOfMemory, VramStateError } from '../errors.js';
import { Device } from '../device.js';
import { ReplayError, replay, type ReplayFailurePoint, type ReplayPass, type ReplayResult } from '../replay/engine.js';
import { checkCapacity, holdBallast, pagesAtPeak, type Ballast, type PeakPages } from '../replay/ballast.js';
import { readAllocationLog, type AllocationTrace } from '../replay/parse.js';
import { createStack, type StackOptions } from '../replay/stacks.js';
import { RESOURCE_STACK_NAMES, isResourceStackName, type ResourceStackName } from '../resource/stacks.js';
import { formatBytes, formatBytesExact, parseSize } from '../util/size.js';
import { renderReport } from '../report/html.js';
import type { TableSection } from '../report/report.js';
import { totalDriverCalls } from '../resource/figures.js';
import { replayReport } from '../report/replay-report.js';
import { parseCommandArgs } from './args.js';
import { commandBackend } from './fallback-warning.js';
import { checkOutputPath, writeReportFile } from './output-path.js';
import { formatTable, formatValue } from './format.js';
import { answerUsageError, UsageError } from './usage.js';

/** Where a failed replay stopped: the engine's point and the log's line. */
type FailedAt = ReplayFailurePoint & { readonly line: number };

/**
 * One stack's outcome: its figures, or why it failed (whether it ran out of memory, and where it
 * stopped when it got as far as the trace). `freeAtStartBytes`: with a capacity, the device's
 * free memory when the stack was made.
 */
type Outcome = { readonly stack: ResourceStackName; readonly notes: readonly string[]; readonly freeAtStartBytes?: number } & (
  | { readonly ok: true; readonly result: ReplayResult }
  | { readonly ok: false; readonly error: string; readonly outOfMemory: boolean; readonly at?: FailedAt }
);

/** How the emulated device's capacity was chosen, for the output. */
interface EmulatedCapacity {
  readonly bytes: number;
  readonly source: 'trace' | 'capacity' | 'VRAM_EMULATED_BYTES' | 'default' | 'in use';
  /** When sized for several traces: how many. */
  readonly largestOf?: number;
}

/** The device memory a replay may have, as asked: `--capacity SIZE` or `--headroom PERCENT`. */
type CapacityRequest =
  | { readonly flag: '--capacity'; readonly text: string; readonly bytes: number }
  | { readonly flag: '--headroom'; readonly text: string; readonly percent: number };

/** The capacity a trace replays with: the size given, or its peak live plus the headroom. */
function capacityFor(request: CapacityRequest, trace: AllocationTrace): number {
  return request.flag === '--capacity' ? request.bytes : Math.ceil(trace.summary.peakLiveBytes * (1 + request.percent / 100));
}

/** How the capacity was found, for the heading and the refusal. */
function capacityWords(request: CapacityRequest, trace: AllocationTrace): string {
  const bytes = capacityFor(request, trace);
  return request.flag === '--capacity'
    ? `${formatBytes(bytes)} (--capacity ${request.text})`
    : `${formatBytes(bytes)} (peak live ${formatBytes(trace.summary.peakLiveBytes)} + ${request.percent}%, --headroom ${request.text})`;
}

/** Emulated capacity granularity: the sizes read as whole GiB. */
const GIB = 1024 ** 3;

/**
 * The capacity an emulated device needs for a trace: twice its peak live (room for a caching
 * stack's fragmentation and the arena's headroom) plus 1 GiB, in whole GiB, never below the default.
 */
function emulatedCapacityFor(peakLiveBytes: number): number {
  return Math.max(DEFAULT_EMULATED_CAPACITY, Math.ceil((2 * peakLiveBytes + GIB) / GIB) * GIB);
}

/**
 * The emulated device for a replay with a capacity: at least as large as an 80 GiB GPU (and 1 GiB
 * more than the capacity, in whole GiB), the rest held by the ballast, as on a GPU. Not a device of
 * just the capacity: the adaptive pool's thresholds are fractions of the device's memory, so on a
 * device barely larger than the capacity it would map ahead where a GPU whose memory a ballast
 * holds does not, and the two would differ. The emulated store is lazily backed, so the ballast
 * costs no host memory.
 */
function emulatedCapacityWithBallast(capacityBytes: number): number {
  return Math.max(PRESSURE_DEVICE_BYTES, Math.ceil((capacityBytes + GIB) / GIB) * GIB);
}

/** An H100's memory, in whole GiB: the smallest emulated device a replay with a capacity runs on. */
const PRESSURE_DEVICE_BYTES = 80 * GIB;

/**
 * On the emulated backend, sizes the device for the traces (the largest of them, and with a
 * capacity, room for a ballast too) unless VRAM_EMULATED_BYTES says otherwise. Runs before any
 * Device exists (setBackend refuses a change afterwards). Throws when the size would pass
 * `MAX_EMULATED_CAPACITY`.
 */
function sizeEmulatedDevice(
  backend: Backend,
  traces: readonly AllocationTrace[],
  request: CapacityRequest | undefined,
): { backend: Backend; capacity?: EmulatedCapacity } {
  if (backend.name !== 'emulated') return { backend };
  if (EMULATED_BYTES_VARIABLE.read() !== undefined) return { backend, capacity: { bytes: backend.deviceInfo(0).totalMemory, source: 'VRAM_EMULATED_BYTES' } };
  let forTraces = 0;
  let forCapacity = 0;
  for (const trace of traces) {
    const forTrace = emulatedCapacityFor(trace.summary.peakLiveBytes);
    // Said here in the trace's terms, before any stack runs: the backend's own refusal names its
    // constructor option, and a device past its address ranges fails as the emulator's limit.
    if (!(forTrace <= MAX_EMULATED_CAPACITY)) {
      throw new Error(
        `${trace.source}: peak live ${formatBytes(trace.summary.peakLiveBytes)} needs an emulated device of ` +
          `2 x peak live + 1 GiB, more than the ${formatBytes(MAX_EMULATED_CAPACITY)} one can have; set VRAM_EMULATED_BYTES to size the device yourself`,
      );
    }
    const withBallast = request === undefined ? 0 : emulatedCapacityWithBallast(capacityFor(request, trace));
    if (!(withBallast <= MAX_EMULATED_CAPACITY)) {
      throw new Error(
        `${request!.flag} ${request!.text}: a capacity of ${formatBytes(capacityFor(request!, trace))} for ${trace.source} ` +
          `needs an emulated device of ${formatBytesExact(withBallast, true)}, more than the ${formatBytesExact(MAX_EMULATED_CAPACITY, true)} one can have`,
      );
    }
    forTraces = Math.max(forTraces, forTrace);
    forCapacity = Math.max(forCapacity, withBallast);
  }
  const bytes = Math.max(forTraces, forCapacity);
  const source: EmulatedCapacity['source'] = forCapacity > forTraces ? 'capacity' : 'trace';
  if (bytes === DEFAULT_EMULATED_CAPACITY) return { backend, capacity: { bytes, source: 'default' } };
  const sized = new EmulatedBackend({ capacityBytes: bytes, deviceCount: backend.deviceCount() });
  try {
    setBackend(sized);
  } catch (error) {
    // replayCommand called in a process that already made a device: its backend stays.
    if (!(error instanceof VramStateError)) throw error;
    return { backend, capacity: { bytes: backend.deviceInfo(0).totalMemory, source: 'in use' } };
  }
  return { backend: sized, capacity: { bytes, source, ...(traces.length > 1 ? { largestOf: traces.length } : {}) } };
}

/** The line that says how large the emulated device is and why. */
function capacityLine(capacity: EmulatedCapacity): string {
  const size = formatBytes(capacity.bytes);
  switch (capacity.source) {
    case 'trace':
      return `emulated device sized for ${capacity.largestOf === undefined ? 'this trace' : `the largest of ${capacity.largestOf} traces`}: ${size} (2 x peak live + 1 GiB; VRAM_EMULATED_BYTES is unset; backed lazily)`;
    case 'capacity':
      return (
        `emulated device sized for the capacity: ${size} (at least 80 GiB, as an H100, and 1 GiB more than the capacity, so a ballast holds the rest as on a GPU; ` +
        'VRAM_EMULATED_BYTES is unset; backed lazily)'
      );
    case 'VRAM_EMULATED_BYTES':
      return `emulated device of ${size} (VRAM_EMULATED_BYTES)`;
    case 'default':
      return `emulated device of ${size} (the default; the trace fits)`;
    case 'in use':
      return `emulated device of ${size} (devices already exist in this process, so it was not sized for the trace)`;
  }
}

/**
 * Replays `trace` through a fresh `name` stack. A failure of any kind (out of memory mid-trace
 * above all, under a capacity) is this stack's outcome, not the command's: the engine has given
 * back what the pass held and the stack is closed here, so the next stack starts as this one did.
 */
function runOne(
  name: ResourceStackName,
  trace: AllocationTrace,
  stackOptions: StackOptions,
  perOp: boolean,
  repeat: number,
  device: Device | undefined,
): Outcome {
  const freeAtStart = device === undefined ? {} : { freeAtStartBytes: device.memInfo().free };
  let stack;
  try {
    stack = createStack(name, trace, stackOptions);
  } catch (error) {
    return { stack: name, ok: false, notes: [], ...freeAtStart, error: `could not create the stack: ${messageOf(error)}`, outOfMemory: isOutOfMemory(error) };
  }
  try {
    const result = replay(trace, stack.resource, {
      perOperationTiming: perOp,
      repeat,
      ...(stack.growth ? { growth: stack.growth } : {}),
    });
    return { stack: name, ok: true, notes: stack.notes, ...freeAtStart, result };
  } catch (error) {
    const outOfMemory = isOutOfMemory(error instanceof ReplayError ? error.cause : error);
    // The arena's own figure ran out, not the device: say that instead of a hint about the device.
    const message = messageOf(error);
    const arena =
      outOfMemory && name === 'arena'
        ? /arena exhausted/i.test(message)
          ? 'the arena cannot grow (a fixed reservation): '
          : 'the arena was exhausted (a fixed reservation: it cannot grow): '
        : '';
    const at = error instanceof ReplayError && error.point !== undefined ? { at: { line: error.line, ...error.point } } : {};
    return { stack: name, ok: false, notes: stack.notes, ...freeAtStart, error: `${arena}${message}`, outOfMemory: outOfMemory && name !== 'arena', ...at };
  } finally {
    stack.destroy();
  }
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** One trace's replay: the trace, the device memory it had, and each stack's outcome. */
interface TraceRun {
  readonly trace: AllocationTrace;
  /** With `--capacity`/`--headroom`: the capacity, how it was found, and the ballast that held the rest. */
  readonly limit?: { readonly words: string; readonly ballast: Ballast; readonly cannotFit?: CannotFit };
  readonly outcomes: readonly Outcome[];
}

/** The heading lines of the output (and the report's facts): the trace, the backend, the device, the capacity. */
function headingLines(run: Omit<TraceRun, 'outcomes'>, backend: string, capacity: EmulatedCapacity | undefined): [string, string][] {
  const s = run.trace.summary;
  const lines: [string, string][] = [
    [
      'trace',
      `${run.trace.source}: ${s.operations} operations (${s.allocations} allocate, ${s.frees} free` +
        `${s.failures > 0 ? `, ${s.failures} failed allocations skipped` : ''}), peak live ${formatBytes(s.peakLiveBytes)}` +
        ` in ${s.peakLiveCount} blocks, ${s.streams.length} stream(s)`,
    ],
    ['backend', `${backend}${backend === 'emulated' ? ' (host memory standing in for a GPU: times are not GPU times)' : ''}`],
  ];
  if (capacity !== undefined) lines.push(['device', capacityLine(capacity)]);
  if (run.limit !== undefined) {
    const b = run.limit.ballast;
    lines.push([
      'capacity',
      `${run.limit.words}: a ballast of ${formatBytes(b.bytes)} takes the rest of the device's free memory ` +
        `(${formatBytes(b.totalBytes)} in all), so each stack sees ${formatBytes(b.freeBytes)} free (cuMemGetInfo) when it is made`,
    ]);
    if (run.limit.cannotFit !== undefined) lines.push(['fit', cannotFitWords(run.limit.cannotFit, b.capacityBytes)]);
  }
  return lines;
}

/** A capacity too small for the trace on any allocator over whole pages, with the least that is not. */
interface CannotFit extends PeakPages {
  /** Whole pages the capacity holds (fewer than `pages`). */
  readonly pagesHeld: number;
  /** The least capacity of whole pages that holds the peak (`pages` pages). */
  readonly leastCapacityBytes: number;
  /** The least whole `--headroom` percent that gives it. */
  readonly leastHeadroomPercent: number;
}

/**
 * Whether `capacityBytes` holds fewer whole pages than the trace's peak live fills (then no
 * allocator can run it: `pagesAtPeak`), and if so, the least capacity and headroom that can.
 */
function cannotFit(trace: AllocationTrace, capacityBytes: number, pageBytes: number): CannotFit | undefined {
  const peak = pagesAtPeak(trace, pageBytes);
  const pagesHeld = Math.floor(capacityBytes / pageBytes);
  if (pagesHeld >= peak.pages) return undefined;
  const least = peak.pages * pageBytes;
  const live = trace.summary.peakLiveBytes;
  // The headroom that `capacityFor` turns into at least `least` bytes, as a whole percent.
  let percent = Math.max(0, Math.ceil((least / live - 1) * 100));
  while (Math.ceil(live * (1 + percent / 100)) < least) percent++;
  return { ...peak, pagesHeld, leastCapacityBytes: least, leastHeadroomPercent: percent };
}

/** The `cannot fit` line: where the peak is, the pages it needs, the pages the capacity holds, the least that fits. */
function cannotFitWords(c: CannotFit, capacityBytes: number): string {
  const page = formatBytes(c.pageBytes);
  return (
    `cannot fit: at operation ${c.operation} (line ${c.line}) the trace has ${formatBytes(c.liveBytes)} live in ${c.blocks} ` +
    `blocks, which needs at least ${c.pages} pages of ${page}; the capacity, ${formatBytes(capacityBytes)}, holds ${c.pagesHeld}. ` +
    `No allocator over ${page} pages (cuMemAlloc and CUDA's pool included) can run it; the least whole-page capacity is ` +
    `${formatBytes(c.leastCapacityBytes)} (--headroom ${c.leastHeadroomPercent})`
  );
}

/** A failed stack's place in the fit column: the operation it stopped at, or why it never started. */
function fitCell(o: Outcome): string {
  if (o.ok) return 'yes';
  if (o.at !== undefined) return `no: op ${o.at.operation}${o.at.pass > 1 ? ` (pass ${o.at.pass})` : ''}`;
  return o.outOfMemory ? 'no: at creation' : 'failed';
}

/**
 * The stacks that are the driver's own allocators (`cuMemAlloc`, CUDA's pool): on the emulated
 * backend they replay through its model of the driver, whose rounding and caching are a guess at
 * the driver's, so their figures are the model's (the GPU measured `async` well above it).
 */
const DRIVER_STACKS: ReadonlySet<string> = new Set(['cuda', 'async']);

/** True when `stack`'s row is the emulation's model of the driver rather than the driver. */
function isModel(stack: string, backend: string): boolean {
  return backend === 'emulated' && DRIVER_STACKS.has(stack);
}

/** The notes under an emulated replay's table: which rows are models, and what carries over to a GPU. */
function modelNotes(outcomes: readonly Outcome[], backend: string): string[] {
  if (!outcomes.some((o) => isModel(o.stack, backend))) return [];
  const own = outcomes.filter((o) => !isModel(o.stack, backend)).map((o) => o.stack);
  return [
    "(model): the emulated backend's model of the CUDA driver (cuMemAlloc, CUDA's pool), not the driver: " + "its peak reserved and overhead are the model's",
    `on a GPU: ${own.length > 0 ? `the peak reserved and overhead of vram's own stacks (${own.join(', ')}) carry over` : 'no figure here carries over'}; ` +
      'times and the (model) rows do not',
  ];
}

/** The results table, one row per stack (the text output's and the report's); `fit` with a capacity. */
function resultsTable(outcomes: readonly Outcome[], fit: boolean, backend: string): { header: string[]; rows: string[][] } {
  const perOp = outcomes.some((o) => o.ok && o.result.medianAllocateNs !== undefined);
  const header = [
    'resource',
    ...(fit ? ['fits'] : []),
    'ops',
    'total ms',
    'us/op',
    ...(perOp ? ['p50 alloc us', 'p50 free us'] : []),
    'peak live',
    'peak reserved',
    'overhead',
  ];
  const rows = outcomes.map((o): string[] => {
    const first = [isModel(o.stack, backend) ? `${o.stack} (model)` : o.stack, ...(fit ? [fitCell(o)] : [])];
    if (!o.ok) return [...first, 'failed', ...Array<string>(header.length - first.length - 1).fill('')];
    const r = o.result;
    return [
      ...first,
      String(r.operations),
      formatValue(r.totalNs / 1e6),
      formatValue(r.nsPerOperation / 1e3),
      ...(perOp ? [formatValue((r.medianAllocateNs ?? NaN) / 1e3), formatValue((r.medianFreeNs ?? NaN) / 1e3)] : []),
      formatBytes(r.peakLiveBytes),
      formatBytes(r.peakReservedBytes) + (r.reservedSource === 'estimate' ? '*' : ''),
      `${r.overheadPercent >= 0 ? '+' : ''}${r.overheadPercent.toFixed(1)}%`,
    ];
  });
  return { header, rows };
}

/** One trace's text: heading, results, the pass table with --repeat, the notes. */
function traceText(run: TraceRun, backend: string, capacity: EmulatedCapacity | undefined): string {
  const out = headingLines(run, backend, capacity).map(([label, value]) => `${label.padEnd(8)} ${value}`);
  out.push('');
  const { header, rows } = resultsTable(run.outcomes, run.limit !== undefined, backend);
  out.push(formatTable(header, rows, ['left', ...Array<'right'>(header.length - 1).fill('right')]));
  const repeated = run.outcomes.filter((o): o is Extract<Outcome, { ok: true }> => o.ok && o.result.passes.length > 1);
  if (repeated.length > 0) out.push('', ...passTable(repeated.map((o) => [o.stack, o.result.passes])));
  out.push('', ...outcomeNotes(run, backend));
  return out.join('\n');
}

/** Where a stack stopped, in words: the operation, the request, what was live and held then. */
function failedAtWords(at: FailedAt, operations: number, repeat: boolean): string {
  return (
    `operation ${at.operation} of ${operations} (line ${at.line}${repeat ? `, pass ${at.pass}` : ''}): ` +
    `${at.action === 'allocate' ? 'allocate' : 'free'} ${formatBytes(at.bytes)} with ${formatBytes(at.liveBytes)} live` +
    `${at.reservedBytes === undefined ? '' : ` and ${formatBytes(at.reservedBytes)} held by the stack`}`
  );
}

/** What the reader should know under the table: each stack's set-up and resource, or why and where it failed. */
function outcomeNotes(run: TraceRun, backend: string): string[] {
  const notes: string[] = [];
  const repeat = run.outcomes.some((o) => (o.ok ? o.result.passes.length > 1 : (o.at?.pass ?? 1) > 1));
  for (const o of run.outcomes) {
    for (const note of o.notes) notes.push(`${o.stack}: ${note}`);
    if (run.limit !== undefined && o.freeAtStartBytes !== undefined && o.freeAtStartBytes !== run.limit.ballast.freeBytes) {
      // A stack before it kept device memory after it was closed: said, since this one had less.
      notes.push(`${o.stack}: saw ${formatBytes(o.freeAtStartBytes)} free when it was made, not ${formatBytes(run.limit.ballast.freeBytes)}`);
    }
    if (o.ok) notes.push(`${o.stack}: ${o.result.resource}`);
    else if (o.at !== undefined) notes.push(`${o.stack}: FAILED at ${failedAtWords(o.at, run.trace.summary.operations, repeat)}: ${o.error}`);
    else notes.push(`${o.stack}: FAILED: ${o.error}`);
  }
  if (run.outcomes.some((o) => o.ok && o.result.reservedSource === 'estimate')) {
    notes.push('* estimated from the live blocks: the driver does not report what cuMemAlloc reserves');
  }
  notes.push(...modelNotes(run.outcomes, backend));
  return notes;
}

/** One trace's JSON document (the whole output for one trace; an element of the array for several). */
function traceJson(run: TraceRun, backend: string, capacity: EmulatedCapacity | undefined): object {
  const b = run.limit?.ballast;
  return {
    trace: { source: run.trace.source, ...run.trace.summary },
    backend,
    ...(capacity === undefined ? {} : { emulatedCapacity: capacity }),
    ...(b === undefined
      ? {}
      : {
          capacity: {
            bytes: b.capacityBytes,
            ballastBytes: b.bytes,
            freeBytes: b.freeBytes,
            totalBytes: b.totalBytes,
            ...(run.limit?.cannotFit === undefined ? {} : { cannotFit: run.limit.cannotFit }),
          },
        }),
    results: run.outcomes.map((o) => ({ ...o, ...(b === undefined ? {} : { fits: o.ok }), ...(isModel(o.stack, backend) ? { model: true } : {}) })),
  };
}

/**
 * Replays the trace once more through a fresh copy of each stack that replayed, recording its
 * timeline, and writes the HTML report. A replay of its own, so the timed figures never include
 * the timeline's readings.
 */
function writeHtmlReport(path: string, run: TraceRun, backend: string, capacity: EmulatedCapacity | undefined, stackOptions: StackOptions): boolean {
  const { trace, outcomes } = run;
  const stacks = outcomes
    .filter((o) => o.ok)
    .map((o) => {
      const stack = createStack(o.stack, trace, stackOptions);
      try {
        const result = replay(trace, stack.resource, {
          timeline: true,
        });
        return { name: o.stack, ...(result.timeline ? { timeline: result.timeline } : {}) };
      } finally {
        stack.destroy();
      }
    });
  const { header, rows } = resultsTable(outcomes, run.limit !== undefined, backend);
  const table: TableSection = {
    kind: 'table',
    id: 'results',
    title: 'Time and memory per resource stack',
    description: outcomeNotes(run, backend).join('\n'),
    columns: header.map((label, i) => ({ label, numeric: i > 0 && label !== 'fits' })),
    rows,
  };
  return writeReportFile(
    'replay',
    '--html',
    path,
    renderReport(
      replayReport({
        trace,
        facts: headingLines(run, backend, capacity),
        stacks,
        leading: [table],
        ...(run.limit === undefined ? {} : { capacityBytes: run.limit.ballast.capacityBytes }),
      }),
    ),
  );
}

/**
 * The repeated replay's table: the first pass beside the later ones (their mean time per operation,
 * their growth summed), for each stack.
 */
function passTable(stacks: readonly (readonly [string, readonly ReplayPass[]])[]): string[] {
  const count = stacks[0]![1].length;
  // The later passes: 'pass 2' after one, 'passes 2-4' after three (never 'passes 2-2').
  const span = count === 2 ? 'pass 2' : `passes 2-${count}`;
  const header = [
    'resource',
    'us/op first',
    `us/op ${span}`,
    'growth ms first',
    `growth ms ${span}`,
    'page moves first',
    `page moves ${span}`,
    'driver calls first',
    `driver calls ${span}`,
    'joins first',
    `joins ${span}`,
    'peak reserved first',
    `peak reserved ${span}`,
  ];
  const calls = (p: ReplayPass): number => (p.growth === undefined ? NaN : totalDriverCalls(p.growth.driverCalls));
  const rows = stacks.map(([name, passes]): string[] => {
    const first = passes[0]!;
    const later = passes.slice(1);
    const sum = (f: (p: ReplayPass) => number): number => later.reduce((t, p) => t + f(p), 0);
    const growth = (v: number): string => (first.growth === undefined ? '-' : formatValue(v));
    // Page moves, driver calls and joins are counts: whole numbers, never 17.0.
    const counted = (v: number): string => (first.growth === undefined ? '-' : Number.isFinite(v) ? v.toLocaleString('en-US') : String(v));
    return [
      name,
      formatValue(first.nsPerOperation / 1e3),
      formatValue(sum((p) => p.nsPerOperation) / later.length / 1e3),
      growth((first.growth?.growthNs ?? NaN) / 1e6),
      growth(sum((p) => p.growth?.growthNs ?? NaN) / 1e6),
      counted(first.growth?.pageMoves ?? NaN),
      counted(sum((p) => p.growth?.pageMoves ?? NaN)),
      counted(calls(first)),
      counted(sum(calls)),
      counted(first.growth?.streamJoins?.waits ?? NaN),
      counted(sum((p) => p.growth?.streamJoins?.waits ?? NaN)),
      formatBytes(first.peakReservedBytes),
      formatBytes(Math.max(...later.map((p) => p.peakReservedBytes))),
    ];
  });
  return [
    `passes (--repeat ${count}): the first, then ${span} (time per operation: their mean; growth: their sum)`,
    formatTable(header, rows, ['left', ...Array<'right'>(header.length - 1).fill('right')]),
  ];
}

/**
 * Runs `vram replay` with the arguments after `replay`; resolves to the exit status. A usage error
 * is answered here (message, usage line, exit 2) so callers in-process get a status, as from main.
 *
 * @param args The arguments after `replay`.
 * @returns 0 when every stack replayed, 1 when one failed or the log is bad, 2 for a usage error.
 * @throws {Error} Only what is neither a usage error nor a replay's failure (a broken backend).
 * @example
 * ```ts
 * process.exitCode = await replayCommand(['trace.csv', '-r', 'pool']);
 * ```
 */
export async function replayCommand(args: string[]): Promise<number> {
  try {
    return await replayWith(args);
  } catch (error) {
    if (error instanceof UsageError) return answerUsageError(error);
    throw error;
  }
}

async function replayWith(args: string[]): Promise<number> {
  const { values, positionals } = parseCommandArgs(
    'replay',
    args,
    {
      resource: { type: 'string', short: 'r', multiple: true },
      json: { type: 'boolean', default: false },
      'per-op': { type: 'boolean', default: false },
      device: { type: 'string' },
      repeat: { type: 'string' },
      'extent-size': { type: 'string' },
      capacity: { type: 'string' },
      headroom: { type: 'string' },
      html: { type: 'string' },
    },
    true,
  );
  if (positionals.length === 0) throw new UsageError('missing the log file', 'replay');
  for (const path of positionals) if (!existsSync(path)) throw new UsageError(`no such file: ${path}`, 'replay');
  if (values.html !== undefined) {
    // The report draws one trace: several would need one file each, and a name for each.
    if (positionals.length > 1) throw new UsageError(`--html writes the report of one log; got ${positionals.length} logs`, 'replay');
    checkOutputPath('replay', '--html', values.html, positionals);
  }
  const device = values.device === undefined ? 0 : /^\d+$/.test(values.device) ? Number(values.device) : NaN;
  if (!Number.isSafeInteger(device)) throw new UsageError(`--device must be a device ordinal (0, 1, ...), got '${values.device}'`, 'replay');
  const repeat = values.repeat === undefined ? 1 : /^\d+$/.test(values.repeat) ? Number(values.repeat) : NaN;
  if (!Number.isInteger(repeat) || repeat < 1 || repeat > 1000) {
    throw new UsageError(`--repeat must be a whole number from 1 to 1000, got '${values.repeat}'`, 'replay');
  }
  const request = capacityRequest(values.capacity, values.headroom);

  const requested = (values.resource ?? ['all'])
    .flatMap((r) => r.split(','))
    .map((r) => r.trim())
    .filter((r) => r !== '');
  const names: ResourceStackName[] = [];
  for (const name of requested) {
    if (name === 'all') names.push(...RESOURCE_STACK_NAMES);
    else if (isResourceStackName(name)) names.push(name);
    else throw new UsageError(`unknown resource '${name}': choose from ${RESOURCE_STACK_NAMES.join(', ')}, all`, 'replay');
  }
  if (names.length === 0) throw new UsageError(`--resource needs a name: ${RESOURCE_STACK_NAMES.join(', ')}, all`, 'replay');
  const stacks = [...new Set(names)];

  const chosen = commandBackend('replay');
  const count = chosen.deviceCount();
  if (device >= count) {
    throw new UsageError(
      `--device ${device}: this machine has ${count} device${count === 1 ? '' : 's'} (${chosen.name} backend), ordinals 0 to ${count - 1}`,
      'replay',
    );
  }
  const extentSize = values['extent-size'] === undefined ? undefined : extentSizeOf(values['extent-size'], chosen, device);
  const stackOptions: StackOptions = { device, ...(extentSize === undefined ? {} : { extentSize }) };

  const traces: AllocationTrace[] = [];
  for (const path of positionals) {
    try {
      traces.push(readAllocationLog(path));
    } catch (error) {
      process.stderr.write(`vram replay: ${messageOf(error)}\n`);
      return 1;
    }
  }
  let sized: ReturnType<typeof sizeEmulatedDevice>;
  try {
    sized = sizeEmulatedDevice(chosen, traces, request);
  } catch (error) {
    process.stderr.write(`vram replay: ${messageOf(error)}\n`);
    return 1;
  }
  const { backend, capacity } = sized;
  const gpu = request === undefined ? undefined : Device.get(device);
  if (request !== undefined) {
    // Every trace's capacity checked before any is replayed: a refusal is the whole answer.
    for (const trace of traces) {
      try {
        checkCapacity(gpu!, capacityFor(request, trace));
      } catch (error) {
        if (!(error instanceof RangeError)) throw error;
        process.stderr.write(
          `vram replay: ${request.flag} ${request.text}${request.flag === '--headroom' ? ` for ${trace.source}` : ''}: ${messageOf(error)}\n`,
        );
        return 1;
      }
    }
  }

  const runs: TraceRun[] = [];
  let written = true;
  for (const trace of traces) {
    let limit: TraceRun['limit'];
    if (request !== undefined) {
      try {
        const bytes = capacityFor(request, trace);
        const tooSmall = cannotFit(trace, bytes, gpu!.backend.memGetAllocationGranularity(gpu!.ordinal));
        limit = { words: capacityWords(request, trace), ballast: holdBallast(gpu!, bytes), ...(tooSmall === undefined ? {} : { cannotFit: tooSmall }) };
      } catch (error) {
        process.stderr.write(`vram replay: ${request.flag} ${request.text}: could not hold the rest of the device: ${messageOf(error)}\n`);
        return 1;
      }
    }
    try {
      const run: TraceRun = {
        trace,
        ...(limit === undefined ? {} : { limit }),
        outcomes: stacks.map((name) => runOne(name, trace, stackOptions, values['per-op'], repeat, gpu)),
      };
      runs.push(run);
      if (!values.json) process.stdout.write(`${runs.length > 1 ? '\n' : ''}${traceText(run, backend.name, capacity)}\n`);
      for (const o of run.outcomes) if (!o.ok) process.stderr.write(`vram replay: ${o.stack}: ${o.error}\n`);
      if (values.html !== undefined) {
        // Under the same ballast: the report's replays see the memory the table's did.
        if (run.outcomes.some((o) => o.ok)) {
          written = writeHtmlReport(values.html, run, backend.name, capacity, stackOptions) && written;
        } else {
          process.stderr.write(`vram replay: no report written to ${values.html}: no stack replayed the trace\n`);
        }
      }
    } finally {
      limit?.ballast.release();
    }
  }
  if (values.json) {
    const documents = runs.map((run) => traceJson(run, backend.name, capacity));
    process.stdout.write(`${JSON.stringify(documents.length === 1 ? documents[0] : documents, null, 2)}\n`);
  }
  const outcomes = runs.flatMap((run) => run.outcomes);
  // One hint for the whole run, however many stacks the device was too small for; none under a
  // capacity, where running out is the question asked.
  if (request === undefined && backend.name === 'emulated' && outcomes.some((o) => !o.ok && o.outOfMemory)) {
    process.stderr.write(
      `vram replay: the emulated device (${formatBytes(backend.deviceInfo(0).totalMemory)}) is too small for this trace: ` +
        'set VRAM_EMULATED_BYTES larger (e.g. 16G), or unset it to size the device for the trace\n',
    );
  }
  return written && outcomes.every((o) => o.ok) ? 0 : 1;
}

/**
 * `--capacity SIZE` or `--headroom PERCENT` (a number, `%` optional, 0 to 1000), or neither;
 * both is a usage error, as is a value that is not one.
 */
function capacityRequest(capacity: string | undefined, headroom: string | undefined): CapacityRequest | undefined {
  if (capacity !== undefined && headroom !== undefined) {
    throw new UsageError('--capacity and --headroom both set the device memory a replay has: give one', 'replay');
  }
  if (capacity !== undefined) {
    try {
      return { flag: '--capacity', text: capacity, bytes: parseSize(capacity, '--capacity') };
    } catch (error) {
      throw new UsageError(messageOf(error), 'replay');
    }
  }
  if (headroom === undefined) return undefined;
  const match = /^\s*(\d+(?:\.\d+)?)\s*%?\s*$/.exec(headroom);
  const percent = match === null ? NaN : Number(match[1]);
  if (!(percent >= 0 && percent <= 1000)) {
    throw new UsageError(`--headroom must be a percentage of the trace's peak live from 0 to 1000 (3 or 3%), got '${headroom}'`, 'replay');
  }
  return { flag: '--headroom', text: headroom, percent };
}

/**
 * `--extent-size`: a size in whole pages of the device's allocation granularity (a PoolResource
 * maps whole pages, so any other size would be rounded, silently, to one it did not ask for).
 */
function extentSizeOf(text: string, backend: Backend, device: number): number {
  let bytes: number;
  try {
    bytes = parseSize(text, '--extent-size');
  } catch (error) {
    throw new UsageError(messageOf(error), 'replay');
  }
  const page = backend.memGetAllocationGranularity(device);
  if (bytes % page !== 0) {
    throw new UsageError(
      `--extent-size ${text}: sizes must be whole pages of the device's allocation granularity ` + `(${formatBytes(page)}): ${bytes} bytes is not`,
      'replay',
    );
  }
  return bytes;
}
