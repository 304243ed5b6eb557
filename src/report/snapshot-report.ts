/**
 * The report of `vram view snapshot.json`: live and reserved bytes over the history's time for
 * every resource stack the program called (one plot, out-of-memory errors marked), the memory map
 * when the snapshot was taken (segments or their mapped pages, live blocks coloured by allocation
 * site, free space), the allocation sites holding the most bytes, and the resources' figures.
 */
import { formatBytes } from '../util/size.js';
import { validateSnapshot, type HistoryEvent, type MemorySnapshot, type SnapshotResource, type SnapshotStack } from '../observe/snapshot-format.js';
import { driverLayoutNote, heldSegments, placeBlocks, showsLayout } from './memory-map.js';
import type { MapSegment, MapSite, MemoryMapSection, PlotSeries, PlotSection, Report, ReportSection, TableSection } from './report.js';

/** A site's stand-in where a block's call stack was not recorded. */
const NO_STACK = 'no call stack recorded (recordMemoryHistory({ stacks: true }) records them)';

/** How many allocation sites the table lists. */
const TOP_SITES = 20;

/**
 * A frame as a short label: `at load (file:///srv/app/dist/model.js:41:22)` becomes
 * `load (model.js:41:22)`; the table's stack column keeps the whole path.
 */
function shortFrame(frame: string): string {
  return frame.replace(/^at /, '').replace(/(?:file:\/\/)?\/(?:[^/():\s]+\/)*([^/():\s]+:\d+:\d+)/, '$1');
}

/** Sites by stack id, with labels and details, for one snapshot. */
class Sites {
  private readonly stacks: Map<number, SnapshotStack>;

  constructor(snapshot: MemorySnapshot) {
    this.stacks = new Map(snapshot.stacks.map((s) => [s.id, s]));
  }

  /** The site of a stack id (null: none recorded). */
  site(stack: number | null): MapSite {
    const frames = stack === null ? undefined : this.stacks.get(stack)?.frames;
    if (frames === undefined || frames.length === 0) return { label: NO_STACK, detail: '' };
    return { label: shortFrame(frames[0]!), detail: frames.join('\n') };
  }
}

/** Bytes and blocks per stack id, the most bytes first. */
function bytesByStack(
  blocks: readonly { readonly bytes: number; readonly stack: number | null }[],
): [number | null, { bytes: number; count: number; largest: number }][] {
  const by = new Map<number | null, { bytes: number; count: number; largest: number }>();
  for (const b of blocks) {
    const entry = by.get(b.stack) ?? { bytes: 0, count: 0, largest: 0 };
    entry.bytes += b.bytes;
    entry.count += 1;
    entry.largest = Math.max(entry.largest, b.bytes);
    by.set(b.stack, entry);
  }
  return [...by.entries()].sort((a, b) => b[1].bytes - a[1].bytes);
}

/** A resource's name in legends: its class and id (the resources table gives the whole label). */
function shortName(resource: SnapshotResource | undefined, id: number): string {
  return `${resource?.className ?? 'resource'} #${id}`;
}

/**
 * The history as series: for each resource the program called (a stack's top), live bytes
 * (alloc/free) and reserved bytes (reserve/release), plus a marker at each out-of-memory error.
 */
function timelineSection(snapshot: MemorySnapshot, resources: ReadonlyMap<number, SnapshotResource>): PlotSection | undefined {
  const history = snapshot.history;
  if (history === null || history.events.length === 0) return undefined;
  const events = history.events;
  const tops = [...new Set(events.map((e) => e.resource))];
  const notes: string[] = [];
  // Starting figures: the baseline when every event since it was kept; else back from the figures
  // now, through the kept events (the ring dropped the older ones).
  const start = new Map<number, { live: number; reserved: number }>();
  for (const id of tops) {
    const r = resources.get(id);
    const kept = (kinds: readonly HistoryEvent['kind'][], sign: (e: HistoryEvent) => number): number =>
      events.reduce((sum, e) => (e.resource === id && kinds.includes(e.kind) ? sum + sign(e) * e.bytes : sum), 0);
    if (history.dropped === 0 && r?.baseline) {
      start.set(id, { live: r.baseline.allocatedBytes ?? 0, reserved: r.baseline.reservedBytes ?? 0 });
    } else if (r?.figures) {
      start.set(id, {
        live: r.figures.allocatedBytes.value - kept(['alloc', 'free'], (e) => (e.kind === 'alloc' ? 1 : -1)),
        reserved: r.figures.reservedBytes - kept(['reserve', 'release'], (e) => (e.kind === 'reserve' ? 1 : -1)),
      });
    } else {
      start.set(id, { live: 0, reserved: 0 });
      notes.push(`${shortName(r, id)} starts from 0: its figures are unknown and the ring dropped older events.`);
    }
  }
  const n = events.length;
  const x = new Float64Array(n);
  const live = tops.map(() => new Float64Array(n));
  const reserved = tops.map(() => new Float64Array(n));
  const oom: (number | null)[] = new Array<number | null>(n).fill(null);
  // Bytes of spillable buffers on the host, from the spill and reload events (0 when recording began).
  const spilled = new Float64Array(n);
  let spilledNow = 0;
  let moves = 0;
  const index = new Map(tops.map((id, i) => [id, i]));
  const now = tops.map((id) => ({ ...start.get(id)! }));
  for (let k = 0; k < n; k++) {
    const e = events[k]!;
    const i = index.get(e.resource)!;
    const figures = now[i]!;
    if (e.kind === 'alloc') figures.live += e.bytes;
    else if (e.kind === 'free') figures.live -= e.bytes;
    else if (e.kind === 'reserve') figures.reserved += e.bytes;
    else if (e.kind === 'release') figures.reserved -= e.bytes;
    else if (e.kind === 'spill' || e.kind === 'reload') {
      spilledNow += e.kind === 'spill' ? e.bytes : -e.bytes;
      moves++;
    } else oom[k] = figures.live + e.bytes;
    spilled[k] = spilledNow;
    // Whole microseconds, so the page's delta encoding applies.
    x[k] = Math.round((e.time - history.startTime) * 1000) / 1e6;
    for (let j = 0; j < tops.length; j++) {
      live[j]![k] = now[j]!.live;
      reserved[j]![k] = now[j]!.reserved;
    }
  }
  const series: PlotSeries[] = [];
  tops.forEach((id, j) => {
    const name = shortName(resources.get(id), id);
    // Reserved first, so the dashed live line draws over it where the two are equal (a pool that maps what it hands out).
    series.push({ label: `${name} reserved`, values: reserved[j]! }, { label: `${name} live`, values: live[j]!, dashed: true });
  });
  const ooms = oom.filter((v) => v !== null).length;
  if (moves > 0) series.push({ label: 'spilled to host memory (since recording began)', values: spilled });
  if (ooms > 0) series.push({ label: 'out of memory (live + the request)', values: oom, markers: true });
  return {
    kind: 'plot',
    id: 'timeline',
    title: 'Live and reserved bytes over time',
    style: 'steps',
    description:
      `From the history's ${n.toLocaleString('en-US')} events` +
      `${history.dropped > 0 ? ` (the ring dropped ${history.dropped.toLocaleString('en-US')} older ones)` : ''}: ` +
      'for each resource the program called, live: the bytes its blocks asked for (dashed), and reserved: what the stack held from below it. ' +
      `${ooms > 0 ? `Each marker is an out-of-memory error: the live bytes plus the request that failed. ` : ''}` +
      `Drag across the plot to zoom; double-click to zoom out.${notes.length > 0 ? `\n${notes.join('\n')}` : ''}`,
    x: { label: 'time since recording began', unit: 'seconds' },
    y: { label: 'bytes', unit: 'bytes' },
    xValues: x,
    series,
  };
}

/**
 * Resources whose segments the map shows: each that lays out its memory, except those whose
 * memory another such resource (above it, through any adaptors) cuts up again.
 */
function mappedResources(snapshot: MemorySnapshot, resources: ReadonlyMap<number, SnapshotResource>): SnapshotResource[] {
  const layered = snapshot.resources.filter((r) => r.segments !== null);
  const below = new Set<number>();
  for (const r of layered) {
    for (let up = r.upstream; up !== null; up = resources.get(up)?.upstream ?? null) below.add(up);
  }
  return layered.filter((r) => !below.has(r.id));
}

/**
 * The memory map: mapped memory of the resources that lay it out, live blocks by site; those whose
 * every block is a driver allocation are left out (`showsLayout`) and named in `driverLaidOut`.
 */
function mapSection(
  snapshot: MemorySnapshot,
  resources: ReadonlyMap<number, SnapshotResource>,
  sites: Sites,
  driverLaidOut: string[],
): MemoryMapSection | undefined {
  const segments: MapSegment[] = [];
  const live: { address: number; bytes: number; stack: number | null }[] = [];
  const drawn: SnapshotResource[] = [];
  for (const r of mappedResources(snapshot, resources)) {
    const own = r.segments ?? [];
    if (own.length > 0 && !showsLayout(own)) {
      driverLaidOut.push(shortName(r, r.id));
      continue;
    }
    drawn.push(r);
    segments.push(...heldSegments(own, r.label));
    for (const s of own) for (const b of s.blocks) if (b.state === 'live') live.push(b);
  }
  if (segments.length === 0) return undefined;
  segments.sort((a, b) => a.address - b.address);
  live.sort((a, b) => a.address - b.address);
  const order = bytesByStack(live).map(([stack]) => stack);
  const siteIndex = new Map(order.map((stack, i) => [stack, i]));
  const { blocks, outside } = placeBlocks(
    segments,
    live.map((b) => ({ address: b.address, bytes: b.bytes, site: siteIndex.get(b.stack)! })),
  );
  const held = segments.reduce((sum, seg) => sum + seg.bytes, 0);
  const liveBytes = blocks.reduce((sum, b) => sum + b.bytes, 0);
  const names = drawn.map((r) => shortName(r, r.id)).join(', ');
  // The map's total is the resources' reserved figure where they agree (a pool's mapped pages, an
  // arena's region), so the page says one figure with one name; else it is named for what it is.
  const reserved = drawn.reduce((sum, r) => sum + (r.figures?.reservedBytes ?? NaN), 0);
  const total =
    held === reserved
      ? `The ${formatBytes(held)} reserved by ${names}`
      : `The ${formatBytes(held)} in the segments of ${names}${Number.isNaN(reserved) ? '' : ` (which report ${formatBytes(reserved)} reserved)`}`;
  return {
    kind: 'memory-map',
    id: 'memory-map',
    title: 'Memory map when the snapshot was taken',
    description:
      `${total} (segments; of a virtual range only its mapped pages), laid end to end, ` +
      `${formatBytes(liveBytes)} of it live, in blocks coloured by the call stack that allocated them; grey is free (reserved, not live). ` +
      'Hover a block for its size, address and stack.' +
      `${outside > 0 ? ` ${outside} live block(s) outside the mapped memory are not drawn.` : ''}` +
      `${driverLaidOut.length > 0 ? ` ${driverLayoutNote(driverLaidOut)}` : ''}`,
    segments,
    blocks,
    sites: order.map((stack) => sites.site(stack)),
  };
}

/** The sites holding the most live bytes. */
function sitesTable(snapshot: MemorySnapshot, sites: Sites): TableSection | undefined {
  if (snapshot.blocks.length === 0) return undefined;
  const total = snapshot.blocks.reduce((sum, b) => sum + b.bytes, 0);
  const rows = bytesByStack(snapshot.blocks)
    .slice(0, TOP_SITES)
    .map(([stack, e]) => {
      const site = sites.site(stack);
      return [site.label, formatBytes(e.bytes), `${((e.bytes / total) * 100).toFixed(1)}%`, String(e.count), formatBytes(e.largest), site.detail];
    });
  return {
    kind: 'table',
    id: 'top-sites',
    title: 'Allocation sites holding the most memory',
    description:
      `The live blocks (${snapshot.blocks.length}, ${formatBytes(total)} asked for) grouped by the call stack that allocated them, ` +
      `most bytes first${rows.length === TOP_SITES ? ` (the first ${TOP_SITES})` : ''}.`,
    columns: [
      { label: 'site' },
      { label: 'bytes', numeric: true },
      { label: 'share', numeric: true },
      { label: 'blocks', numeric: true },
      { label: 'largest', numeric: true },
      { label: 'stack' },
    ],
    rows,
  };
}

/** Every resource with its figures; `note` is said after the description (the maps left out where no map is drawn). */
function resourcesTable(snapshot: MemorySnapshot, note: string): TableSection {
  const both = (value: number | undefined, peak: number | undefined): string =>
    value === undefined ? '-' : `${formatBytes(value)} (peak ${formatBytes(peak ?? value)})`;
  return {
    kind: 'table',
    id: 'resources',
    title: 'Resources',
    description:
      "Every resource of the device's current stack and every other one the history recorded a call to, with its figures now: " +
      'live, the bytes of the blocks it has handed out; reserved, what it holds from below it (the driver or its upstream), live blocks and cache alike.' +
      `${note === '' ? '' : ` ${note}`}`,
    columns: [{ label: 'id', numeric: true }, { label: 'resource' }, { label: 'status' }, { label: 'live' }, { label: 'reserved' }],
    rows: snapshot.resources.map((r) => [
      String(r.id),
      `${r.label}${r.current ? ' (current stack)' : ''}${r.upstream !== null ? `\nupstream #${r.upstream}` : ''}`,
      r.status,
      both(r.figures?.allocatedBytes.value, r.figures?.allocatedBytes.peak),
      both(r.figures?.reservedBytes, r.figures?.peakReservedBytes),
    ]),
  };
}

/**
 * Builds the report of a memory snapshot.
 *
 * @param snapshot A snapshot (`memorySnapshot()`, or a `VRAM_OOM_SNAPSHOT` file parsed).
 * @returns The report: the timeline (with a history), the memory map, the top allocation sites,
 *   the resources.
 * @throws {SnapshotFormatError} When it is not a snapshot of the format this code reads (another
 *   version, a field of the wrong type): checked first, so a snapshot from a file is safe to pass.
 * @example
 * ```ts
 * const snapshot = JSON.parse(readFileSync('oom.json', 'utf8')) as MemorySnapshot;
 * writeFileSync('oom.html', renderReport(snapshotReport(snapshot)));
 * ```
 */
export function snapshotReport(snapshot: MemorySnapshot): Report {
  validateSnapshot(snapshot);
  const resources = new Map(snapshot.resources.map((r) => [r.id, r]));
  const sites = new Sites(snapshot);
  const history = snapshot.history;
  const error = snapshot.trigger.error;
  const facts: [string, string][] = [
    ['taken', `${snapshot.createdAt}${snapshot.trigger.kind === 'out-of-memory' ? ', at an out-of-memory error' : ', on request'}`],
    ['device', `${snapshot.device} (${snapshot.backend} backend)`],
  ];
  if (error !== null) facts.push(['error', error.message]);
  const current = snapshot.currentResource === null ? undefined : resources.get(snapshot.currentResource);
  if (current !== undefined) {
    facts.push(['current resource', current.label]);
    // The figures the page names everywhere: live (blocks handed out) and reserved (held from below).
    if (current.figures !== null) {
      facts.push([
        'memory',
        `${formatBytes(current.figures.allocatedBytes.value)} live, ${formatBytes(current.figures.reservedBytes)} reserved by the current stack`,
      ]);
    }
  }
  facts.push([
    'history',
    history === null
      ? 'none recorded (recordMemoryHistory() records one)'
      : `${history.events.length.toLocaleString('en-US')} events kept of ${history.recorded.toLocaleString('en-US')} recorded ` +
        `(ring of ${history.maxEntries.toLocaleString('en-US')}), call stacks ${history.stacks ? 'on' : 'off'}`,
  ]);
  const driverLaidOut: string[] = [];
  const map = mapSection(snapshot, resources, sites, driverLaidOut);
  // Where no map is drawn, the resources table says why.
  const note = map === undefined && driverLaidOut.length > 0 ? driverLayoutNote(driverLaidOut) : '';
  const sections = [timelineSection(snapshot, resources), map, sitesTable(snapshot, sites), resourcesTable(snapshot, note)].filter(
    (s): s is ReportSection => s !== undefined,
  );
  return { title: error !== null ? 'vram: out of memory' : 'vram: memory snapshot', facts, sections };
}
