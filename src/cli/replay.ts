/**
 * `vram replay <log.csv> [--resource NAME]... [--json]`: replays an RMM allocation log through one
 * or more resource stacks and prints, side by side, time per operation and peak reserved over peak
 * live. Exit status: 0 ok, 1 a replay (or the log) failed, 2 usage error.
 */
import { existsSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { getBackend } from '../backend/select.js';
import { isOutOfMemory } from '../errors.js';
import { ReplayError, replay, type ReplayResult } from '../replay/engine.js';
import { readAllocationLog, type AllocationTrace } from '../replay/parse.js';
import { STACK_NAMES, createStack, isStackName, type StackName } from '../replay/stacks.js';
import { formatBytes, formatTable, formatValue } from './format.js';

const REPLAY_USAGE = `usage: vram replay <log.csv> [--resource ${STACK_NAMES.join('|')}|all]... [--json] [--per-op] [--device N]

  --resource, -r   the stack to replay through; repeat it, or say all, to compare (default all)
  --json           print the results as JSON
  --per-op         also time each operation alone and report median allocate/free times
  --device         device ordinal (default 0)`;

/** One stack's outcome: its figures, or why it failed. */
type Outcome =
  | { readonly stack: StackName; readonly ok: true; readonly notes: readonly string[]; readonly result: ReplayResult }
  | { readonly stack: StackName; readonly ok: false; readonly notes: readonly string[]; readonly error: string };

function usageError(message: string): number {
  process.stderr.write(`vram replay: ${message}\n\n${REPLAY_USAGE}\n`);
  return 2;
}

function runOne(name: StackName, trace: AllocationTrace, device: number, perOp: boolean): Outcome {
  let stack;
  try {
    stack = createStack(name, trace, { device });
  } catch (error) {
    return { stack: name, ok: false, notes: [], error: `could not create the stack: ${messageOf(error)}` };
  }
  try {
    const result = replay(trace, stack.resource, {
      perOperationTiming: perOp,
      ...(stack.peakReservedBytes ? { peakReservedBytes: stack.peakReservedBytes } : {}),
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
  out.push('', ...notes);
  process.stdout.write(`${out.join('\n')}\n`);
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
  const outcomes = stacks.map((name) => runOne(name, trace, device, values['per-op'] === true));

  if (values.json) {
    process.stdout.write(`${JSON.stringify({ trace: { source: trace.source, ...trace.summary }, backend, results: outcomes }, null, 2)}\n`);
  } else {
    printTable(trace, backend, outcomes);
  }
  for (const o of outcomes) if (!o.ok) process.stderr.write(`vram replay: ${o.stack}: ${o.error}\n`);
  return outcomes.every((o) => o.ok) ? 0 : 1;
}
