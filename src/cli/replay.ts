/**
 * `vram replay <log.csv> [--resource NAME]... [--json] [--html FILE]`: replays an RMM allocation log
 * through one or more resource stacks and prints, side by side, time per operation and peak
 * reserved over peak live; `--html` also writes a report with each stack's bytes over time. Exit
 * status: 0 ok, 1 a replay (or the log) failed, 2 usage error.
 *
 * On the emulated backend with VRAM_EMULATED_BYTES unset, the emulated device is sized for the
 * trace before any device exists (its memory is backed lazily, so a large capacity costs nothing
 * until written): a trace that peaks above the 4 GiB default then replays with no settings.
 */
import { existsSync } from 'node:fs';
import type { Backend } from '../backend/backend.js';
import { DEFAULT_EMULATED_CAPACITY, EMULATED_BYTES_VARIABLE, EmulatedBackend } from '../backend/emulated.js';
import { getBackend, setBackend } from '../backend/select.js';
import { isOutOfMemory, VramStateError } from '../errors.js';
import { ReplayError, replay, type ReplayPass, type ReplayResult } from '../replay/engine.js';
import { readAllocationLog, type AllocationTrace } from '../replay/parse.js';
import { createStack, type StackOptions } from '../replay/stacks.js';
import { RESOURCE_STACK_NAMES, isResourceStackName, type ResourceStackName } from '../resource/stacks.js';
import { formatBytes, parseSize } from '../util/size.js';
import { renderReport } from '../report/html.js';
import type { TableSection } from '../report/report.js';
import { replayReport } from '../report/replay-report.js';
import { parseCommandArgs } from './args.js';
import { checkOutputPath, writeReportFile } from './output-path.js';
import { formatTable, formatValue } from './format.js';
import { answerUsageError, UsageError } from './usage.js';

/** One stack's outcome: its figures, or why it failed (and whether it ran out of memory). */
type Outcome =
  | { readonly stack: ResourceStackName; readonly ok: true; readonly notes: readonly string[]; readonly result: ReplayResult }
  | { readonly stack: ResourceStackName; readonly ok: false; readonly notes: readonly string[]; readonly error: string; readonly outOfMemory: boolean };

/** How the emulated device's capacity was chosen, for the output. */
interface EmulatedCapacity {
  readonly bytes: number;
  readonly source: 'trace' | 'VRAM_EMULATED_BYTES' | 'default' | 'in use';
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
 * On the emulated backend, sizes the device for the trace unless VRAM_EMULATED_BYTES says
 * otherwise. Runs before any Device exists (setBackend refuses a change afterwards). Throws when
 * the size would pass 2^53 bytes.
 */
function sizeEmulatedDevice(backend: Backend, trace: AllocationTrace): { backend: Backend; capacity?: EmulatedCapacity } {
  if (backend.name !== 'emulated') return { backend };
  if (EMULATED_BYTES_VARIABLE.read() !== undefined) return { backend, capacity: { bytes: backend.deviceInfo(0).totalMemory, source: 'VRAM_EMULATED_BYTES' } };
  const bytes = emulatedCapacityFor(trace.summary.peakLiveBytes);
  if (!Number.isSafeInteger(bytes)) {
    // Said here in the trace's terms: the backend's own refusal names its constructor option.
    throw new Error(`${trace.source}: peak live ${formatBytes(trace.summary.peakLiveBytes)} needs an emulated device of ` +
      `2 x peak live + 1 GiB, more than the 2^53 - 1 bytes one can have; set VRAM_EMULATED_BYTES to size the device yourself`);
  }
  if (bytes === DEFAULT_EMULATED_CAPACITY) return { backend, capacity: { bytes, source: 'default' } };
  const sized = new EmulatedBackend({ capacityBytes: bytes, deviceCount: backend.deviceCount() });
  try {
    setBackend(sized);
  } catch (error) {
    // replayCommand called in a process that already made a device: its backend stays.
    if (!(error instanceof VramStateError)) throw error;
    return { backend, capacity: { bytes: backend.deviceInfo(0).totalMemory, source: 'in use' } };
  }
  return { backend: sized, capacity: { bytes, source: 'trace' } };
}

/** The line that says how large the emulated device is and why. */
function capacityLine(capacity: EmulatedCapacity): string {
  const size = formatBytes(capacity.bytes);
  switch (capacity.source) {
    case 'trace':
      return `emulated device sized for this trace: ${size} (2 x peak live + 1 GiB; VRAM_EMULATED_BYTES is unset; backed lazily)`;
    case 'VRAM_EMULATED_BYTES':
      return `emulated device of ${size} (VRAM_EMULATED_BYTES)`;
    case 'default':
      return `emulated device of ${size} (the default; the trace fits)`;
    case 'in use':
      return `emulated device of ${size} (devices already exist in this process, so it was not sized for the trace)`;
  }
}

function runOne(name: ResourceStackName, trace: AllocationTrace, stackOptions: StackOptions, perOp: boolean, repeat: number): Outcome {
  let stack;
  try {
    stack = createStack(name, trace, stackOptions);
  } catch (error) {
    return { stack: name, ok: false, notes: [], error: `could not create the stack: ${messageOf(error)}`, outOfMemory: isOutOfMemory(error) };
  }
  try {
    const result = replay(trace, stack.resource, {
      perOperationTiming: perOp,
      repeat,
      ...(stack.growth ? { growth: stack.growth } : {}),
    });
    return { stack: name, ok: true, notes: stack.notes, result };
  } catch (error) {
    const outOfMemory = isOutOfMemory(error instanceof ReplayError ? error.cause : error);
    // The arena's own figure ran out, not the device: say that instead of a hint about the device.
    const message = messageOf(error);
    const arena = outOfMemory && name === 'arena'
      ? (/arena exhausted/i.test(message) ? 'the arena cannot grow (a fixed reservation): ' : 'the arena was exhausted (a fixed reservation: it cannot grow): ')
      : '';
    return { stack: name, ok: false, notes: stack.notes, error: `${arena}${message}`, outOfMemory: outOfMemory && name !== 'arena' };
  } finally {
    stack.close();
  }
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** The heading lines of the output (and the report's facts): the trace, the backend, the device. */
function headingLines(trace: AllocationTrace, backend: string, capacity: EmulatedCapacity | undefined): [string, string][] {
  const s = trace.summary;
  const lines: [string, string][] = [
    ['trace', `${trace.source}: ${s.operations} operations (${s.allocations} allocate, ${s.frees} free` +
      `${s.failures > 0 ? `, ${s.failures} failed allocations skipped` : ''}), peak live ${formatBytes(s.peakLiveBytes)}` +
      ` in ${s.peakLiveCount} blocks, ${s.streams.length} stream(s)`],
    ['backend', `${backend}${backend === 'emulated' ? ' (host memory standing in for a GPU: times are not GPU times)' : ''}`],
  ];
  if (capacity !== undefined) lines.push(['device', capacityLine(capacity)]);
  return lines;
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
  return ["(model): the emulated backend's model of the CUDA driver (cuMemAlloc, CUDA's pool), not the driver: " +
      'its peak reserved and overhead are the model\'s',
  `on a GPU: ${own.length > 0 ? `the peak reserved and overhead of vram's own stacks (${own.join(', ')}) carry over` : 'no figure here carries over'}; ` +
      'times and the (model) rows do not'];
}

/** The results table, one row per stack (the text output's and the report's). */
function resultsTable(outcomes: readonly Outcome[], backend: string): { header: string[]; rows: string[][] } {
  const perOp = outcomes.some((o) => o.ok && o.result.medianAllocateNs !== undefined);
  const header = ['resource', 'ops', 'total ms', 'us/op', ...(perOp ? ['p50 alloc us', 'p50 free us'] : []),
    'peak live', 'peak reserved', 'overhead'];
  const rows = outcomes.map((o): string[] => {
    const name = isModel(o.stack, backend) ? `${o.stack} (model)` : o.stack;
    if (!o.ok) return [name, 'failed', ...Array<string>(header.length - 2).fill('')];
    const r = o.result;
    return [name, String(r.operations), formatValue(r.totalNs / 1e6), formatValue(r.nsPerOperation / 1e3),
      ...(perOp ? [formatValue((r.medianAllocateNs ?? NaN) / 1e3), formatValue((r.medianFreeNs ?? NaN) / 1e3)] : []),
      formatBytes(r.peakLiveBytes), formatBytes(r.peakReservedBytes) + (r.reservedSource === 'estimate' ? '*' : ''),
      `${r.overheadPercent >= 0 ? '+' : ''}${r.overheadPercent.toFixed(1)}%`];
  });
  return { header, rows };
}

function printTable(trace: AllocationTrace, backend: string, capacity: EmulatedCapacity | undefined, outcomes: readonly Outcome[]): void {
  const out = headingLines(trace, backend, capacity).map(([label, value]) => `${label.padEnd(8)} ${value}`);
  out.push('');
  const { header, rows } = resultsTable(outcomes, backend);
  out.push(formatTable(header, rows, ['left', ...Array<'right'>(header.length - 1).fill('right')]));
  const repeated = outcomes.filter((o): o is Extract<Outcome, { ok: true }> => o.ok && o.result.passes.length > 1);
  if (repeated.length > 0) out.push('', ...passTable(repeated.map((o) => [o.stack, o.result.passes])));
  out.push('', ...outcomeNotes(outcomes, backend));
  process.stdout.write(`${out.join('\n')}\n`);
}

/** What the reader should know under the table: each stack's set-up and resource, or why it failed. */
function outcomeNotes(outcomes: readonly Outcome[], backend: string): string[] {
  const notes: string[] = [];
  for (const o of outcomes) {
    for (const note of o.notes) notes.push(`${o.stack}: ${note}`);
    if (o.ok) notes.push(`${o.stack}: ${o.result.resource}`);
    else notes.push(`${o.stack}: FAILED: ${o.error}`);
  }
  if (outcomes.some((o) => o.ok && o.result.reservedSource === 'estimate')) {
    notes.push('* estimated from the live blocks: the driver does not report what cuMemAlloc reserves');
  }
  notes.push(...modelNotes(outcomes, backend));
  return notes;
}

/**
 * Replays the trace once more through a fresh copy of each stack that replayed, recording its
 * timeline, and writes the HTML report. A replay of its own, so the timed figures never include
 * the timeline's readings.
 */
function writeHtmlReport(path: string, trace: AllocationTrace, backend: string, capacity: EmulatedCapacity | undefined,
  outcomes: readonly Outcome[], stackOptions: StackOptions): boolean {
  const stacks = outcomes.filter((o) => o.ok).map((o) => {
    const stack = createStack(o.stack, trace, stackOptions);
    try {
      const result = replay(trace, stack.resource, {
        timeline: true,
      });
      return { name: o.stack, ...(result.timeline ? { timeline: result.timeline } : {}) };
    } finally {
      stack.close();
    }
  });
  const { header, rows } = resultsTable(outcomes, backend);
  const table: TableSection = {
    kind: 'table', id: 'results', title: 'Time and memory per resource stack',
    description: outcomeNotes(outcomes, backend).join('\n'),
    columns: header.map((label, i) => ({ label, numeric: i > 0 })),
    rows,
  };
  return writeReportFile('replay', '--html', path, renderReport(replayReport({ trace, facts: headingLines(trace, backend, capacity), stacks, leading: [table] })));
}

/**
 * The repeated replay's table: the first pass beside the later ones (their mean time per operation,
 * their growth summed), for each stack.
 */
function passTable(stacks: readonly (readonly [string, readonly ReplayPass[]])[]): string[] {
  const count = stacks[0]![1].length;
  const header = ['resource', 'us/op first', `us/op 2-${count}`, 'growth ms first', `growth ms 2-${count}`,
    'page moves first', `page moves 2-${count}`, 'driver calls first', `driver calls 2-${count}`, 'peak reserved first', `peak reserved 2-${count}`];
  const calls = (p: ReplayPass): number => {
    const c = p.growth?.driverCalls;
    return c === undefined ? NaN : c.create + c.map + c.unmap + c.setAccess + c.release;
  };
  const rows = stacks.map(([name, passes]): string[] => {
    const first = passes[0]!;
    const later = passes.slice(1);
    const sum = (f: (p: ReplayPass) => number): number => later.reduce((t, p) => t + f(p), 0);
    const growth = (v: number): string => (first.growth === undefined ? '-' : formatValue(v));
    return [name, formatValue(first.nsPerOperation / 1e3), formatValue(sum((p) => p.nsPerOperation) / later.length / 1e3),
      growth((first.growth?.growthNs ?? NaN) / 1e6), growth(sum((p) => p.growth?.growthNs ?? NaN) / 1e6),
      growth(first.growth?.pageMoves ?? NaN), growth(sum((p) => p.growth?.pageMoves ?? NaN)),
      growth(calls(first)), growth(sum(calls)),
      formatBytes(first.peakReservedBytes), formatBytes(Math.max(...later.map((p) => p.peakReservedBytes)))];
  });
  return [`passes (--repeat ${count}): the first, then passes 2-${count} (time per operation: their mean; growth: their sum)`,
    formatTable(header, rows, ['left', ...Array<'right'>(header.length - 1).fill('right')])];
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
  const { values, positionals } = parseCommandArgs('replay', args, {
    resource: { type: 'string', short: 'r', multiple: true },
    json: { type: 'boolean', default: false },
    'per-op': { type: 'boolean', default: false },
    device: { type: 'string' },
    repeat: { type: 'string' },
    'extent-size': { type: 'string' },
    html: { type: 'string' },
  }, true);
  if (positionals.length !== 1) {
    throw new UsageError(positionals.length === 0 ? 'missing the log file' : `give one log file, got ${positionals.length}`, 'replay');
  }
  const path = positionals[0]!;
  if (!existsSync(path)) throw new UsageError(`no such file: ${path}`, 'replay');
  if (values.html !== undefined) checkOutputPath('replay', '--html', values.html, [path]);
  const device = values.device === undefined ? 0 : /^\d+$/.test(values.device) ? Number(values.device) : NaN;
  if (!Number.isSafeInteger(device)) throw new UsageError(`--device must be a device ordinal (0, 1, ...), got '${values.device}'`, 'replay');
  const repeat = values.repeat === undefined ? 1 : /^\d+$/.test(values.repeat) ? Number(values.repeat) : NaN;
  if (!Number.isInteger(repeat) || repeat < 1 || repeat > 1000) {
    throw new UsageError(`--repeat must be a whole number from 1 to 1000, got '${values.repeat}'`, 'replay');
  }

  let extentSize: number | undefined;
  if (values['extent-size'] !== undefined) {
    try {
      extentSize = parseSize(values['extent-size'], '--extent-size');
    } catch (error) {
      throw new UsageError(messageOf(error), 'replay');
    }
    if (extentSize === 0) throw new UsageError('--extent-size must be at least one page (2M), got 0', 'replay');
  }
  const stackOptions: StackOptions = { device, ...(extentSize === undefined ? {} : { extentSize }) };

  const requested = (values.resource ?? ['all']).flatMap((r) => r.split(',')).map((r) => r.trim()).filter((r) => r !== '');
  const names: ResourceStackName[] = [];
  for (const name of requested) {
    if (name === 'all') names.push(...RESOURCE_STACK_NAMES);
    else if (isResourceStackName(name)) names.push(name);
    else throw new UsageError(`unknown resource '${name}': choose from ${RESOURCE_STACK_NAMES.join(', ')}, all`, 'replay');
  }
  if (names.length === 0) throw new UsageError(`--resource needs a name: ${RESOURCE_STACK_NAMES.join(', ')}, all`, 'replay');
  const stacks = [...new Set(names)];

  const count = getBackend().deviceCount();
  if (device >= count) {
    throw new UsageError(`--device ${device}: this machine has ${count} device${count === 1 ? '' : 's'} (${getBackend().name} backend), ordinals 0 to ${count - 1}`, 'replay');
  }

  let trace: AllocationTrace;
  try {
    trace = readAllocationLog(path);
  } catch (error) {
    process.stderr.write(`vram replay: ${messageOf(error)}\n`);
    return 1;
  }
  let sized: ReturnType<typeof sizeEmulatedDevice>;
  try {
    sized = sizeEmulatedDevice(getBackend(), trace);
  } catch (error) {
    process.stderr.write(`vram replay: ${messageOf(error)}\n`);
    return 1;
  }
  const { backend, capacity } = sized;
  const outcomes = stacks.map((name) => runOne(name, trace, stackOptions, values['per-op'], repeat));

  if (values.json) {
    process.stdout.write(`${JSON.stringify({
      trace: { source: trace.source, ...trace.summary },
      backend: backend.name,
      ...(capacity === undefined ? {} : { emulatedCapacity: capacity }),
      results: outcomes.map((o) => (isModel(o.stack, backend.name) ? { ...o, model: true } : o)),
    }, null, 2)}\n`);
  } else {
    printTable(trace, backend.name, capacity, outcomes);
  }
  for (const o of outcomes) if (!o.ok) process.stderr.write(`vram replay: ${o.stack}: ${o.error}\n`);
  let written = true;
  if (values.html !== undefined) {
    if (outcomes.some((o) => o.ok)) {
      written = writeHtmlReport(values.html, trace, backend.name, capacity, outcomes, stackOptions);
    } else {
      process.stderr.write(`vram replay: no report written to ${values.html}: no stack replayed the trace\n`);
    }
  }
  // One hint for the whole run, however many stacks the device was too small for.
  if (backend.name === 'emulated' && outcomes.some((o) => !o.ok && o.outOfMemory)) {
    process.stderr.write(`vram replay: the emulated device (${formatBytes(backend.deviceInfo(0).totalMemory)}) is too small for this trace: ` +
      'set VRAM_EMULATED_BYTES larger (e.g. 16G), or unset it to size the device for the trace\n');
  }
  return written && outcomes.every((o) => o.ok) ? 0 : 1;
}
