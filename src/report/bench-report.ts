/**
 * The report of `vram bench --html`: transfer bandwidth against transfer size for each kind of
 * memory (one plot per direction, and one for bandwidth rows of no direction), allocation latency
 * against size for each resource and driver call, and the rows that are one figure each (the
 * random-allocations pattern, the event loop's delay, kernel launches) as a table.
 */
import { formatBytes } from '../util/size.js';
import type { PlotSection, Report, ReportSection } from './report.js';

/** The row the object layer's pairs are divided by, as `vram bench`'s objects group names it. */
export const OBJECT_PAIR_BASE = 'PoolResource allocate+deallocate';

/** One measured figure, as `vram bench` rows are (its `BenchRow` has this shape). */
export interface BenchFigure {
  /** `transfers`, `alloc`, `allocators`, `objects` or `kernels`. */
  readonly group: string;
  /** What was measured, e.g. `pinned H2D`, `PoolResource`. */
  readonly name: string;
  /** Bytes per copy or allocation. */
  readonly size: number;
  readonly value: number;
  /** `GB/s`, `ns/pair`, `ns/op` or `ms`. */
  readonly unit: string;
  /** How many repeats the median is over. */
  readonly repeats: number;
}

/** A measurement that could not run, with why. */
export interface BenchSkipped {
  readonly group: string;
  readonly name: string;
  readonly size: number;
  readonly reason: string;
}

/** What `benchReport` draws from. */
export interface BenchReportInput {
  /** Label and value lines for the heading (backend, device, mode). */
  readonly facts: readonly (readonly [string, string])[];
  readonly rows: readonly BenchFigure[];
  readonly skipped: readonly BenchSkipped[];
}

/** The directions a transfer row belongs to, by its name; the host-side ceilings go with the way they copy. */
const DIRECTIONS = [
  { id: 'bandwidth-h2d', title: 'host to device', test: /H2D|into pinned/ },
  { id: 'bandwidth-d2h', title: 'device to host', test: /D2H|out of pinned/ },
  { id: 'bandwidth-d2d', title: 'device to device', test: /D2D/ },
] as const;

/**
 * A plot of `rows` against size, one series per name (in the order first measured), null where a
 * name was not measured at a size.
 */
function sizePlot(rows: readonly BenchFigure[], section: Omit<PlotSection, 'kind' | 'xValues' | 'series' | 'style' | 'x'>): PlotSection {
  const sizes = [...new Set(rows.map((r) => r.size))].sort((a, b) => a - b);
  const names = [...new Set(rows.map((r) => r.name))];
  const series = names.map((name) => ({
    label: name,
    values: sizes.map((size) => rows.find((r) => r.name === name && r.size === size)?.value ?? null),
  }));
  return { kind: 'plot', style: 'points', x: { label: 'size', unit: 'bytes', log: true }, xValues: sizes, series, ...section };
}

/**
 * Builds the bench report.
 *
 * @param input The heading's facts, the rows and the skipped rows of one `vram bench` run.
 * @returns The report: a bandwidth plot per direction measured, the latency plot, a table of the
 *   other rows, and the skipped ones.
 * @example
 * ```ts
 * writeFileSync('bench.html', renderReport(benchReport({ facts: [['backend', 'cuda']], rows, skipped: [] })));
 * ```
 * @throws Never.
 */
export function benchReport(input: BenchReportInput): Report {
  const sections: ReportSection[] = [];
  // Rows at one size only (the async copies beside the event loop's delay) read better in the table.
  const sizesOf = (name: string): number => new Set(input.rows.filter((r) => r.name === name).map((r) => r.size)).size;
  const bandwidth = input.rows.filter((r) => r.unit === 'GB/s' && sizesOf(r.name) > 1);
  const plotted = new Set<BenchFigure>();
  for (const direction of DIRECTIONS) {
    const rows = bandwidth.filter((r) => direction.test.test(r.name));
    if (rows.length === 0) continue;
    for (const r of rows) plotted.add(r);
    sections.push(
      sizePlot(rows, {
        id: direction.id,
        title: `Transfer bandwidth, ${direction.title}`,
        description:
          'Median bandwidth over the repeats, in GB/s (1e9 bytes per second), for each kind of memory and copy path, ' +
          'against the bytes per copy. Pinned and device copies are timed with events on a stream, pageable ones with the host clock to completion.',
        y: { label: 'bandwidth', unit: 'GB/s' },
      }),
    );
  }
  // Bandwidth rows of no direction (a kernel reading host memory) still get their plot.
  const otherBandwidth = bandwidth.filter((r) => !plotted.has(r));
  if (otherBandwidth.length > 0) {
    for (const r of otherBandwidth) plotted.add(r);
    sections.push(
      sizePlot(otherBandwidth, {
        id: 'bandwidth-other',
        title: 'Bandwidth, other measurements',
        description:
          'Median bandwidth over the repeats, in GB/s (1e9 bytes per second), of the rows that are not a copy one way (a kernel reading memory, a reduction), against the bytes read.',
        y: { label: 'bandwidth', unit: 'GB/s' },
      }),
    );
  }
  // The object layer's pairs are a table beside their resource pair (a ratio per size), not more latency curves.
  const objects = input.rows.filter((r) => r.group === 'objects');
  const latency = input.rows.filter((r) => r.unit === 'ns/pair' && r.group !== 'objects');
  if (latency.length > 0) {
    sections.push(
      sizePlot(latency, {
        id: 'allocation-latency',
        title: 'Allocation latency',
        description:
          'Median time of one allocate+free pair, per resource (a pool hit: each resource is warmed first) and per driver call, ' +
          'against the allocation size, over batches of pairs (on the emulated backend, pool hits over rounds timed as bench/pool-hit times them).',
        y: { label: 'time per allocate+free pair', unit: 'ns', log: true },
      }),
    );
  }
  for (const r of latency) plotted.add(r);
  if (objects.length > 0) {
    const base = (size: number): number | undefined => objects.find((r) => r.size === size && r.name === OBJECT_PAIR_BASE)?.value;
    sections.push({
      kind: 'table',
      id: 'object-layer',
      title: 'The object layer beside its resource pair',
      description:
        "Median time of DeviceBuffer.allocate+free and DeviceArray.empty+free over a PoolResource, and of that resource's own " +
        'allocate+deallocate, in rounds alternated in one process of their own; the last column is each pair over the resource pair at its size.',
      columns: [
        { label: 'measurement' },
        { label: 'size', numeric: true },
        { label: 'ns per pair', numeric: true },
        { label: 'x the resource pair', numeric: true },
      ],
      rows: objects.map((r) => {
        const b = base(r.size);
        return [r.name, formatBytes(r.size), `${+r.value.toPrecision(4)}`, b === undefined ? '' : `${(r.value / b).toFixed(1)}x`];
      }),
    });
    for (const r of objects) plotted.add(r);
  }
  const others = input.rows.filter((r) => !plotted.has(r));
  if (others.length > 0) {
    sections.push({
      kind: 'table',
      id: 'other-rows',
      title: 'Other measurements',
      description:
        'Figures measured at one size each: the random-allocations pattern (time per operation, sizes up to the one given), ' +
        "the async pageable copies and the event loop's p99 delay while they ran, and whatever else the run measured once.",
      columns: [{ label: 'measurement' }, { label: 'size', numeric: true }, { label: 'value', numeric: true }, { label: 'repeats', numeric: true }],
      rows: others.map((r) => [r.name, formatBytes(r.size), `${+r.value.toPrecision(4)} ${r.unit}`, String(r.repeats)]),
    });
  }
  if (input.skipped.length > 0) {
    sections.push({
      kind: 'table',
      id: 'skipped',
      title: 'Skipped',
      description: 'Measurements that could not run here, and why.',
      columns: [{ label: 'measurement' }, { label: 'size', numeric: true }, { label: 'reason' }],
      rows: input.skipped.map((s) => [`${s.group}: ${s.name}`, formatBytes(s.size), s.reason]),
    });
  }
  return { title: 'vram bench', facts: input.facts, sections };
}
