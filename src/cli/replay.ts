/**
 * `vram replay <log.csv> [--resource NAME]... [--json]`: replays an RMM allocation log through one
 * or more resource stacks and prints, side by side, time per operation and peak reserved over peak
 * live. Exit status: 0 ok, 1 a replay (or the log) failed, 2 usage error.
 */
import { existsSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { getBackend } from '../backend/select.js';
import { isOutOfMemory } from '../errors.js';
import { ReplayError, replay, type ReplayPass, type ReplayResult } from '../replay/engine.js';
import { readAllocationLog, type AllocationTrace } from '../replay/parse.js';
import { STACK_NAMES, createStack, isStackName, type StackName } from '../replay/stacks.js';
import { formatBytes, formatTable, formatValue } from './format.js';

const REPLAY_USAGE = `usage: vram replay <log.csv> [--resource ${STACK_NAMES.join('|')}|all]... [--repeat N] [--json] [--per-op] [--device N]

  --resource, -r   the stack to replay through; repeat it, or say all, to compare (default all)
  --repeat         replay the trace N times back to back (default 1) and report the first pass and
                   the later ones (a training loop's steady state) apart
  --json           print the results as JSON
  --per-op         also time each operation alone (first pass) and report median allocate/free times
  --device         device ordinal (default 0)`;

/** One stack's outcome: its figures, or why it failed. */
type Outcome =
  | { readonly stack: StackName; readonly ok: true; readonly notes: readonly string[]; readonly result: ReplayResult }
  | { readonly stack: StackName; readonly ok: false; readonly notes: readonly string[]; readonly error: string };

function usageError(message: string): number {
  process.stderr.write(`vram replay: ${message}\n\n${REPLAY_USAGE}\n`);
  return 2;
}

function runOne(name: StackName, trace: AllocationTrace, device: number, perOp: boolean, repeat: number): Outcome {
  let stack;
  try {
    stack = createStack(name, trace, { device });
  } catch (error) {
    return { stack: name, ok: false, notes: [], error: `could not create the stack: ${messageOf(error)}` };
  }
  try {
    const result = replay(trace, stack.resource, {
      perOperationTiming: perOp,
      repeat,
      ...(stack.peakReservedBytes ? { peakReservedBytes: stack.peakReservedBytes } : {}),
      ...(stack.resetPeakReserved ? { resetPeakReserved: stack.resetPeakReserved } : {}),
      ...(stack.growth ? { growth: stack.growth } : {}),
    });
    return { stack: name, ok: true, notes: stack.notes, result };
  } catch (error) {
    const outOfMemory = isOutOfMemory(error instanceof ReplayError ? error.cause : error);
    const hint = !outOfMemory ? ''
      : name === 'arena' ? ' (the arena was exhausted: it cannot grow)'
        : getBackend().name === 'emulated' ? ' (the emulated device is too small for this trace: raise VRAM_EMULATED_BYTES)' : '';
    return { stack: name, ok: false, notes: stack.notes, error: `${messageOf(error)}${hint}` };
  } finally {
    stack.close();
  }
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function printTable(trace: AllocationTrace, backend: string, outcomes: readonly Outcome[]): void {
  const s = trace.summary;
  const out: string[] = [];
  out.push(`trace    ${trace.source}: ${s.operations} operations (${s.allocations} allocate, ${s.frees} free` +
    `${s.failures > 0 ? `, ${s.failures} failed allocations skipped` : ''}), peak live ${formatBytes(s.peakLiveBytes)}` +
    ` in ${s.peakLiveCount} blocks, ${s.streams.length} stream(s)`);
  out.push(`backend  ${backend}${backend === 'emulated' ? ' (host memory standing in for a GPU: times are not GPU times)' : ''}`);
  out.push('');
  const perOp = outcomes.some((o) => o.ok && o.result.medianAllocateNs !== undefined);
  const header = ['resource', 'ops', 'total ms', 'us/op', ...(perOp ? ['p50 alloc us', 'p50 free us'] : []),
    'peak live', 'peak reserved', 'overhead'];
  const rows = outcomes.map((o): string[] => {
    if (!o.ok) return [o.stack, 'failed', ...Array<string>(header.length - 2).fill('')];
    const r = o.result;
    return [o.stack, String(r.operations), formatValue(r.totalNs / 1e6), formatValue(r.nsPerOperation / 1e3),
      ...(perOp ? [formatValue((r.medianAllocateNs ?? NaN) / 1e3), formatValue((r.medianFreeNs ?? NaN) / 1e3)] : []),
      formatBytes(r.peakLiveBytes), formatBytes(r.peakReservedBytes) + (r.reservedSource === 'estimate' ? '*' : ''),
      `${r.overheadPercent >= 0 ? '+' : ''}${r.overheadPercent.toFixed(1)}%`];
  });
  out.push(formatTable(header, rows, ['left', ...Array<'right'>(header.length - 1).fill('right')]));
  const notes: string[] = [];
  for (const o of outcomes) {
    for (const note of o.notes) notes.push(`${o.stack}: ${note}`);
    if (o.ok) notes.push(`${o.stack}: ${o.result.resource}`);
    else notes.push(`${o.stack}: FAILED: ${o.error}`);
  }
  if (outcomes.some((o) => o.ok && o.result.reservedSource === 'estimate')) {
    notes.push('* estimated from the live blocks: the driver does not report what cuMemAlloc reserves');
  }
  const repeated = outcomes.filter((o): o is Extract<Outcome, { ok: true }> => o.ok && o.result.passes.length > 1);
  if (repeated.length > 0) out.push('', ...passTable(repeated.map((o) => [o.stack, o.result.passes])));
  out.push('', ...notes);
  process.stdout.write(`${out.join('\n')}\n`);
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

/** Runs `vram replay` with the arguments after `replay`; resolves to the exit status. */
export async function replayCommand(args: string[]): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({
      args,
      allowPositionals: true,
      options: {
        resource: { type: 'string', short: 'r', multiple: true },
        json: { type: 'boolean', default: false },
        'per-op': { type: 'boolean', default: false },
        device: { type: 'string' },
        repeat: { type: 'string' },
        help: { type: 'boolean', short: 'h', default: false },
      },
    });
  } catch (error) {
    return usageError(messageOf(error));
  }
  const { values, positionals } = parsed;
  if (values.help) {
    process.stdout.write(`${REPLAY_USAGE}\n`);
    return 0;
  }
  if (positionals.length !== 1) return usageError(positionals.length === 0 ? 'missing the log file' : 'give one log file');
  const path = positionals[0]!;
  if (!existsSync(path)) return usageError(`no such file: ${path}`);
  const device = values.device === undefined ? 0 : Number(values.device);
  if (!Number.isInteger(device) || device < 0) return usageError(`--device must be a device ordinal, got '${values.device}'`);
  const repeat = values.repeat === undefined ? 1 : Number(values.repeat);
  if (!Number.isInteger(repeat) || repeat < 1 || repeat > 1000) return usageError(`--repeat must be a whole number from 1 to 1000, got '${values.repeat}'`);

  const requested = (values.resource ?? ['all']).flatMap((r) => r.split(',')).map((r) => r.trim()).filter((r) => r !== '');
  const names: StackName[] = [];
  for (const name of requested) {
    if (name === 'all') names.push(...STACK_NAMES);
    else if (isStackName(name)) names.push(name);
    else return usageError(`unknown resource '${name}': choose from ${STACK_NAMES.join(', ')}, all`);
  }
  const stacks = [...new Set(names)];

  let trace: AllocationTrace;
  try {
    trace = readAllocationLog(path);
  } catch (error) {
    process.stderr.write(`vram replay: ${messageOf(error)}\n`);
    return 1;
  }
  const backend = getBackend().name;
  const outcomes = stacks.map((name) => runOne(name, trace, device, values['per-op'] === true, repeat));

  if (values.json) {
    process.stdout.write(`${JSON.stringify({ trace: { source: trace.source, ...trace.summary }, backend, results: outcomes }, null, 2)}\n`);
  } else {
    printTable(trace, backend, outcomes);
  }
  for (const o of outcomes) if (!o.ok) process.stderr.write(`vram replay: ${o.stack}: ${o.error}\n`);
  return outcomes.every((o) => o.ok) ? 0 : 1;
}
