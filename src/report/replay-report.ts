/**
 * The report of `vram replay --html`: live and reserved bytes over the trace's time for every
 * stack replayed (one plot, the stacks overlaid), each stack's memory map at the trace's peak (but
 * for stacks whose every block is a driver allocation, whose layout vram cannot see), and
 * the live blocks then by size (an RMM log records no call stacks, so sizes stand in for
 * allocation sites).
 */
import { formatBytes } from '../util/size.js';
import type { ReplayTimeline } from '../replay/engine.js';
import type { AllocationTrace } from '../replay/parse.js';
import { driverLayoutNote, heldSegments, placeBlocks, showsLayout } from './memory-map.js';
import type { MemoryMapSection, PlotSeries, Report, ReportSection, TableSection } from './report.js';

/** One stack's part in the report. */
export interface ReplayReportStack {
  /** The stack's name (`pool`, `async`, ...). */
  readonly name: string;
  /** Its replay's timeline (a replay with `timeline: true`); absent when it failed. */
  readonly timeline?: ReplayTimeline;
}

/** What `replayReport` draws from. */
export interface ReplayReportInput {
  readonly trace: AllocationTrace;
  /** Label and value lines for the heading (trace, backend, device). */
  readonly facts: readonly (readonly [string, string])[];
  readonly stacks: readonly ReplayReportStack[];
  /** Sections to show first (the command's results table). */
  readonly leading?: readonly ReportSection[];
  /** The device capacity the replay was asked to fit in (`--capacity`): drawn as a line on the timeline. */
  readonly capacityBytes?: number;
}

/** How each stack's reserved figures were found, for the plot's description. */
const SOURCE_WORDS = {
  resource: "the resource's figures (for binning, the pool under the bins)",
  estimate: 'estimated from the live blocks (cuMemAlloc reports nothing per block)',
} as const;

/** True when the trace's times never go back (one thread's log); a multi-threaded log may interleave. */
function ascending(values: Float64Array): boolean {
  for (let i = 1; i < values.length; i++) if (values[i]! < values[i - 1]!) return false;
  return true;
}

/** The power-of-two class a size falls in: `(512 KiB, 1 MiB]` is class 20. */
function sizeClass(bytes: number): number {
  return Math.max(0, Math.ceil(Math.log2(bytes)));
}

/** A size class's figures at the peak. */
interface ClassFigures {
  bytes: number;
  count: number;
  largest: number;
}

/** The live blocks at the peak grouped by power-of-two size class, the most bytes first. */
function sizeClasses(timeline: ReplayTimeline): [number, ClassFigures][] {
  const classes = new Map<number, ClassFigures>();
  for (const block of timeline.peakBlocks) {
    const c = sizeClass(block.bytes);
    const entry = classes.get(c) ?? { bytes: 0, count: 0, largest: 0 };
    entry.bytes += block.bytes;
    entry.count += 1;
    entry.largest = Math.max(entry.largest, block.bytes);
    classes.set(c, entry);
  }
  return [...classes.entries()].sort((a, b) => b[1].bytes - a[1].bytes);
}

/** A size class for people: `128 MiB .. 256 MiB`. */
function classLabel(c: number): string {
  return c === 0 ? '1 B' : `${formatBytes(2 ** (c - 1) + 1)} .. ${formatBytes(2 ** c)}`;
}

/** The table of the peak's size classes; `note` is said after its description (maps left out). */
function peakSizesTable(timeline: ReplayTimeline, peakLiveBytes: number, note: string): TableSection {
  const rows = sizeClasses(timeline).map(([c, e]) => [
    classLabel(c),
    formatBytes(e.bytes),
    `${((e.bytes / peakLiveBytes) * 100).toFixed(1)}%`,
    String(e.count),
    formatBytes(e.largest),
  ]);
  return {
    kind: 'table',
    id: 'peak-sizes',
    title: 'Live blocks at the peak, by size',
    description:
      `The ${timeline.peakBlocks.length} blocks live when the trace first reached its peak of ` +
      `${formatBytes(peakLiveBytes)} (after operation ${timeline.peakOperation + 1}), grouped by size class, most bytes first. ` +
      `An RMM log records no call stacks, so the sizes stand in for allocation sites.${note === '' ? '' : ` ${note}`}`,
    columns: [
      { label: 'size class' },
      { label: 'bytes', numeric: true },
      { label: 'share of peak', numeric: true },
      { label: 'blocks', numeric: true },
      { label: 'largest', numeric: true },
    ],
    rows,
  };
}

/**
 * One stack's memory map at the trace's peak: what it held then, the live blocks by size class;
 * `undefined` where it held nothing it lays out, `'driver'` where the driver lays its memory out.
 */
function peakMap(name: string, timeline: ReplayTimeline): MemoryMapSection | 'driver' | undefined {
  const held = timeline.peakSegments;
  if (held === null) return undefined;
  if (held.segments.length > 0 && !showsLayout(held.segments)) return 'driver';
  const segments = heldSegments(held.segments, held.resource).sort((a, b) => a.address - b.address);
  if (segments.length === 0) return undefined;
  const classes = sizeClasses(timeline);
  const site = new Map(classes.map(([c], i) => [c, i]));
  const { blocks, outside } = placeBlocks(
    segments,
    timeline.peakBlocks.map((b) => ({ address: b.address, bytes: b.bytes, site: site.get(sizeClass(b.bytes))! })),
  );
  const heldBytes = segments.reduce((sum, seg) => sum + seg.bytes, 0);
  return {
    kind: 'memory-map',
    id: `memory-map-${name}`,
    title: `Memory map at the peak: ${name}`,
    description:
      `What ${held.resource} held when the trace first reached its peak (${formatBytes(heldBytes)}; of a virtual range only ` +
      'its mapped pages), laid end to end, the live blocks coloured by size class; grey is held but not live in the trace ' +
      "(free, cached, or the unused part of a bin). Hover for a block's size and address." +
      `${outside > 0 ? ` ${outside} block(s) lie outside ${held.resource}'s segments (another layer holds them) and are not drawn.` : ''}`,
    segments,
    blocks,
    sites: classes.map(([c, e]) => ({ label: `blocks of ${classLabel(c)}`, detail: `${e.count} block(s), ${formatBytes(e.bytes)} at the peak` })),
  };
}

/**
 * Builds the replay report.
 *
 * @param input The trace, the heading's facts, and each stack with its timeline.
 * @returns The report: the leading sections, the timeline plot, the peak's sizes.
 * @throws {RangeError} When no stack has a timeline (nothing replayed to plot).
 * @example
 * ```ts
 * const result = replay(trace, stack.resource, { timeline: true });
 * writeFileSync('replay.html', renderReport(replayReport({ trace, facts: [], stacks: [{ name: 'pool', timeline: result.timeline }] })));
 * ```
 */
export function replayReport(input: ReplayReportInput): Report {
  const withTimeline = input.stacks.filter((s): s is ReplayReportStack & { timeline: ReplayTimeline } => s.timeline !== undefined);
  const first = withTimeline[0];
  if (first === undefined) throw new RangeError('replayReport needs at least one stack with a timeline');
  const timeUs = first.timeline.timeUs;
  const byTime = ascending(timeUs);
  // Every stack replays the same trace, so they share the x values (and the trace's live bytes).
  const xValues = byTime ? Array.from(timeUs, (t) => t / 1e6) : Array.from(timeUs, (_, i) => i + 1);
  const series: PlotSeries[] = [{ label: 'live (the trace)', values: first.timeline.liveBytes, dashed: true }];
  for (const s of withTimeline) series.push({ label: `${s.name} reserved`, values: s.timeline.reservedBytes });
  const capacity = input.capacityBytes;
  // Will it fit: the capacity as a line, so a stack's reserved bytes read against it.
  if (capacity !== undefined) series.push({ label: `capacity (${formatBytes(capacity)})`, values: xValues.map(() => capacity) });
  const sources = withTimeline.map((s) => `${s.name}: ${SOURCE_WORDS[s.timeline.reservedSource]}`).join('; ');
  const sections: ReportSection[] = [
    ...(input.leading ?? []),
    {
      kind: 'plot',
      id: 'timeline',
      title: 'Live and reserved bytes over time',
      style: 'steps',
      description:
        `What the traced program had live (dashed) and what each resource stack held from the driver ` +
        `after each of the ${timeUs.length.toLocaleString('en-US')} operations, from a replay of its own on a fresh stack ` +
        `(so the timed figures above are unaffected). ` +
        `${capacity === undefined ? '' : `The flat line is the capacity asked for (${formatBytes(capacity)}): a stack fits while its reserved bytes stay under it. `}` +
        `Drag across the plot to zoom; double-click to zoom out. ` +
        `Reserved: ${sources}.${byTime ? '' : " The log's times are not in order (several threads), so the x axis counts operations."}`,
      x: byTime ? { label: 'time since the trace began', unit: 'seconds' } : { label: 'operation', unit: 'count' },
      y: { label: 'bytes', unit: 'bytes' },
      xValues,
      series,
    },
  ];
  if (first.timeline.peakOperation >= 0) {
    const driverLaidOut: string[] = [];
    for (const s of withTimeline) {
      const map = peakMap(s.name, s.timeline);
      if (map === 'driver') driverLaidOut.push(s.name);
      else if (map !== undefined) sections.push(map);
    }
    sections.push(peakSizesTable(first.timeline, input.trace.summary.peakLiveBytes, driverLaidOut.length > 0 ? driverLayoutNote(driverLaidOut) : ''));
  }
  return { title: `vram replay: ${input.trace.source}`, facts: input.facts, sections };
}
