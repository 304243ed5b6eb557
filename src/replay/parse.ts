/**
 * Parser for RMM allocation logs (`Thread,Time,Action,Pointer,Size,Stream`), the format of
 * rmm::mr::logging_resource_adaptor, of vram's LoggingAdaptor and of the shared replay traces.
 * It checks the log as it reads it (every free matches a live allocation of the same size), so the
 * replay engine can trust it, and a bad log fails with the line that is wrong.
 */
import { VramError } from '../errors.js';
import { readTextFile } from '../util/input-file.js';
import { ALLOCATION_LOG_HEADER } from '../resource/adaptors/logging.js';

/** What a log line records. `allocate failure` lines are kept but not replayed. */
export type TraceAction = 'allocate' | 'free' | 'allocate failure';

/** One line of an allocation log. */
export interface TraceEvent {
  /** 1-based line number in the log. */
  readonly line: number;
  readonly thread: number;
  /** Microseconds (since the log began, or since midnight for RMM's wall-clock form). */
  readonly timeUs: number;
  readonly action: TraceAction;
  /** The address the traced program saw (0 for a failure). */
  readonly pointer: number;
  readonly size: number;
  /** The traced program's stream id (0: the default stream). */
  readonly stream: number;
  /**
   * Index of the allocation this event makes or frees, in allocation order (dense from 0), so
   * a replay maps trace pointers to its own through an array; -1 for failures.
   */
  readonly slot: number;
}

/** Figures of a trace that need no replay: what the traced program itself had live. */
export interface TraceSummary {
  /** Events that are replayed: allocations plus frees. */
  readonly operations: number;
  readonly allocations: number;
  readonly frees: number;
  /** `allocate failure` lines (not replayed). */
  readonly failures: number;
  /** The most bytes live at once. */
  readonly peakLiveBytes: number;
  /** The most allocations live at once. */
  readonly peakLiveCount: number;
  /** Allocations never freed by the end of the log. */
  readonly leftoverCount: number;
  readonly leftoverBytes: number;
  readonly largestAllocation: number;
  /** Distinct stream ids, ascending. */
  readonly streams: readonly number[];
  /** Distinct thread ids, ascending. */
  readonly threads: readonly number[];
  /** Time between the first and last event, in microseconds. */
  readonly durationUs: number;
}

/** A parsed, checked allocation log. */
export interface AllocationTrace {
  /** Where it came from (a path, or a name given by the caller). */
  readonly source: string;
  readonly events: readonly TraceEvent[];
  readonly summary: TraceSummary;
}

/**
 * A log line that is malformed or inconsistent with the lines before it.
 *
 * @example
 * ```ts
 * try { parseAllocationLog(text, 'rmm_log.csv'); }
 * catch (e) { if (e instanceof TraceParseError) console.error(`${e.source}:${e.line}`, e.message); else throw e; }
 * ```
 */
export class TraceParseError extends VramError {
  /**
   * @param source The log's path or name.
   * @param line 1-based line number of the offending line.
   * @param reason What is wrong with it; the message is `source:line: reason`.
   * @throws Never.
   * @example
   * ```ts
   * throw new TraceParseError('rmm_log.csv', 7, 'free of an address that is not live');
   * ```
   */
  constructor(
    /** The log's path or name. */
    readonly source: string,
    /** 1-based line number of the offending line. */
    readonly line: number,
    reason: string,
  ) {
    super(`${source}:${line}: ${reason}`);
  }
}

const columns = ALLOCATION_LOG_HEADER.split(',');

function parseUnsigned(text: string): number | undefined {
  if (/^\d+$/.test(text)) return Number(text);
  if (/^0[xX][0-9a-fA-F]+$/.test(text)) return Number.parseInt(text.slice(2), 16);
  return undefined;
}

function parseTime(text: string): number | undefined {
  if (/^\d+(\.\d+)?$/.test(text)) return Number(text);
  // RMM's own adaptor writes wall-clock time, HH:MM:SS.ffffff.
  const clock = /^(\d{1,2}):(\d{2}):(\d{2})[.:](\d{1,9})$/.exec(text);
  if (clock === null) return undefined;
  const [, h, m, s, fraction] = clock as unknown as [string, string, string, string, string];
  return ((Number(h) * 60 + Number(m)) * 60 + Number(s)) * 1e6 + Number(`0.${fraction}`) * 1e6;
}

function parsePointer(text: string): number | undefined {
  if (text === '(nil)' || text === 'nil' || text === '0') return 0;
  const hex = text.startsWith('0x') || text.startsWith('0X') ? text.slice(2) : text;
  if (!/^[0-9a-fA-F]+$/.test(hex)) return undefined;
  return Number.parseInt(hex, 16);
}

/**
 * Parses the text of an allocation log. Throws `TraceParseError` naming the line for: a missing
 * or wrong header, a line with too few fields, a field that does not parse, an allocation of a
 * pointer that is still live, a free of a pointer that is not live, and a free whose size differs
 * from the allocation's.
 * @param text The log: RMM's CSV header, then one line per allocate and free.
 * @param source A name for the log in error messages (a path, say).
 * @returns The checked trace: its events in log order and a summary.
 * @throws {TraceParseError} For a line that is malformed or inconsistent, naming it.
 * @example
 * ```ts
 * const trace = parseAllocationLog(readFileSync('rmm_log.csv', 'utf8'), 'rmm_log.csv');
 * console.log(trace.summary.peakLiveBytes);
 * ```
 */
export function parseAllocationLog(text: string, source = '<log>'): AllocationTrace {
  // A byte-order mark (editors on Windows write one) is not part of the header's first name.
  const lines = (text.charCodeAt(0) === 0xfeff ? text.slice(1) : text).split('\n');
  let headerIndex = 0;
  while (headerIndex < lines.length && (lines[headerIndex] ?? '').trim() === '') headerIndex += 1;
  if (headerIndex === lines.length) throw new TraceParseError(source, 1, 'the log is empty');
  const header = (lines[headerIndex] ?? '')
    .trim()
    .split(',')
    .map((name) => name.trim());
  const index = columns.map((name) => header.findIndex((h) => h.toLowerCase() === name.toLowerCase()));
  const missing = columns.filter((_, i) => index[i] === -1);
  if (missing.length > 0) {
    throw new TraceParseError(source, headerIndex + 1, `expected the header '${ALLOCATION_LOG_HEADER}', missing column(s) ${missing.join(', ')}`);
  }
  const [threadAt, timeAt, actionAt, pointerAt, sizeAt, streamAt] = index as [number, number, number, number, number, number];

  const events: TraceEvent[] = [];
  const live = new Map<number, { slot: number; size: number; line: number }>();
  const streams = new Set<number>();
  const threads = new Set<number>();
  let allocations = 0,
    frees = 0,
    failures = 0;
  let liveBytes = 0,
    peakLiveBytes = 0,
    peakLiveCount = 0,
    largest = 0;
  let firstTime: number | undefined,
    lastTime = 0;

  for (let i = headerIndex + 1; i < lines.length; i++) {
    const raw = (lines[i] ?? '').trim();
    if (raw === '') continue;
    const lineNo = i + 1;
    const fail = (reason: string): never => {
      throw new TraceParseError(source, lineNo, reason);
    };
    const fields = raw.split(',');
    if (fields.length < header.length) fail(`expected ${header.length} fields, got ${fields.length}: '${raw}'`);
    const field = (at: number): string => (fields[at] ?? '').trim();

    const thread = parseUnsigned(field(threadAt)) ?? fail(`Thread '${field(threadAt)}' is not a whole number`);
    const timeUs = parseTime(field(timeAt)) ?? fail(`Time '${field(timeAt)}' is neither microseconds nor HH:MM:SS.ffffff`);
    const actionText = field(actionAt);
    if (actionText !== 'allocate' && actionText !== 'free' && actionText !== 'allocate failure') {
      fail(`Action '${actionText}' is not allocate, free or allocate failure`);
    }
    const action = actionText as TraceAction;
    const pointer = parsePointer(field(pointerAt)) ?? fail(`Pointer '${field(pointerAt)}' is not a hexadecimal address`);
    if (!Number.isSafeInteger(pointer)) fail(`Pointer '${field(pointerAt)}' is above 2^53`);
    const size = parseUnsigned(field(sizeAt)) ?? fail(`Size '${field(sizeAt)}' is not a whole number of bytes`);
    if (!Number.isSafeInteger(size)) fail(`Size '${field(sizeAt)}' is above 2^53`);
    const stream = parseUnsigned(field(streamAt)) ?? fail(`Stream '${field(streamAt)}' is not a stream id`);

    let slot = -1;
    if (action === 'allocate') {
      if (size === 0) fail('allocation of 0 bytes');
      if (pointer === 0) fail('allocation returned a null pointer');
      const previous = live.get(pointer);
      if (previous !== undefined) {
        fail(`0x${pointer.toString(16)} allocated again while still live (allocated at line ${previous.line})`);
      }
      slot = allocations++;
      live.set(pointer, { slot, size, line: lineNo });
      liveBytes += size;
      // Past 2^53 the sums stop being exact, and no device holds that much.
      if (!Number.isSafeInteger(liveBytes)) fail('the live bytes pass 2^53 with this allocation');
      if (liveBytes > peakLiveBytes) peakLiveBytes = liveBytes;
      if (live.size > peakLiveCount) peakLiveCount = live.size;
      if (size > largest) largest = size;
    } else if (action === 'free') {
      const block = live.get(pointer);
      if (block === undefined) {
        fail(`free of 0x${pointer.toString(16)}, which is not allocated (never allocated, or already freed)`);
      } else {
        if (block.size !== size) {
          fail(`free of 0x${pointer.toString(16)} with ${size} bytes, allocated with ${block.size} at line ${block.line}`);
        }
        slot = block.slot;
        live.delete(pointer);
        liveBytes -= size;
        frees += 1;
      }
    } else {
      failures += 1;
    }
    streams.add(stream);
    threads.add(thread);
    firstTime ??= timeUs;
    lastTime = timeUs;
    events.push({ line: lineNo, thread, timeUs, action, pointer, size, stream, slot });
  }

  const summary: TraceSummary = {
    operations: allocations + frees,
    allocations,
    frees,
    failures,
    peakLiveBytes,
    peakLiveCount,
    leftoverCount: live.size,
    leftoverBytes: liveBytes,
    largestAllocation: largest,
    streams: [...streams].sort((a, b) => a - b),
    threads: [...threads].sort((a, b) => a - b),
    durationUs: firstTime === undefined ? 0 : lastTime - firstTime,
  };
  return { source, events, summary };
}

/**
 * Reads and parses an allocation log file.
 *
 * @param path The log's path.
 * @returns The checked trace.
 * @throws {InputFileError} When the path is not a regular file (a FIFO, a device), is too large
 *   to read, or is not UTF-8.
 * @throws {TraceParseError} For a line that is malformed or inconsistent, naming it.
 * @example
 * ```ts
 * const trace = readAllocationLog('rmm_log.csv');
 * ```
 */
export function readAllocationLog(path: string): AllocationTrace {
  return parseAllocationLog(readTextFile(path), path);
}
