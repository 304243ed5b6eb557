/**
 * The document an HTML report renders: a title, a few facts, then sections (plots, a memory map,
 * tables) in order. Builders (replay, bench, snapshot) produce one; `renderReport` turns it into a
 * self-contained page. Values stay numbers here; the page formats them (bytes in binary units,
 * times, bandwidth) so its axes, legends and tooltips agree.
 */

/** How a plot's values are formatted on its axis and in its legend. */
export type ValueUnit = 'bytes' | 'seconds' | 'GB/s' | 'ns' | 'count';

/** One axis of a plot. */
export interface PlotAxis {
  /** The axis title, with its unit where the values do not carry one (`time since the trace began (s)`). */
  readonly label: string;
  readonly unit: ValueUnit;
  /** A logarithmic scale (base 2 for bytes, 10 otherwise): sizes and latencies span decades. */
  readonly log?: boolean;
}

/** One line of a plot. */
export interface PlotSeries {
  readonly label: string;
  /** One value per x value; null where this series has no measurement. */
  readonly values: ArrayLike<number | null>;
  /** Drawn dashed: a derived figure beside the measured ones (the trace's live bytes). */
  readonly dashed?: boolean;
  /** Drawn as markers only, no line: events at their values (out-of-memory errors), null elsewhere. */
  readonly markers?: boolean;
}

/** A uPlot chart: one x axis, one y axis, several series sharing the x values. */
export interface PlotSection {
  readonly kind: 'plot';
  /** The section's element id (an anchor, and how the browser test finds it). */
  readonly id: string;
  readonly title: string;
  /** What the plot shows and how the figures were obtained, one paragraph. */
  readonly description: string;
  readonly x: PlotAxis;
  readonly y: PlotAxis;
  /** Ascending. */
  readonly xValues: ArrayLike<number>;
  readonly series: readonly PlotSeries[];
  /**
   * `steps`: a value holds until the next x (bytes over time: memory does not ramp between
   * events); `points`: separate measurements joined by lines, each marked.
   */
  readonly style: 'steps' | 'points';
}

/** A contiguous range of memory a resource holds (a driver allocation, a mapped page run, an arena). */
export interface MapSegment {
  readonly address: number;
  readonly bytes: number;
  /** Who holds it, e.g. `PoolResource(virtual, device=0)`. */
  readonly label: string;
}

/** A live block inside a segment. */
export interface MapBlock {
  readonly address: number;
  readonly bytes: number;
  /** Index into the section's `sites` (which decides its colour). */
  readonly site: number;
}

/** What allocated blocks: a call stack, or a stand-in (a size class) where none was recorded. */
export interface MapSite {
  /** One line: the site's first frame, or the stand-in's name. */
  readonly label: string;
  /** More lines shown on hover: the whole stack. */
  readonly detail: string;
}

/**
 * The memory map: segments laid end to end in rows of equal byte width, live blocks coloured by
 * site over them, the rest of each segment left as free space.
 */
export interface MemoryMapSection {
  readonly kind: 'memory-map';
  readonly id: string;
  readonly title: string;
  readonly description: string;
  /** Ascending by address, not overlapping. */
  readonly segments: readonly MapSegment[];
  /** Ascending by address, each inside a segment. */
  readonly blocks: readonly MapBlock[];
  /** Sites, largest share first (the first few get the most distinct colours). */
  readonly sites: readonly MapSite[];
}

/** A table of text cells. */
export interface TableSection {
  readonly kind: 'table';
  readonly id: string;
  readonly title: string;
  readonly description: string;
  readonly columns: readonly { readonly label: string; readonly numeric?: boolean }[];
  readonly rows: readonly (readonly string[])[];
}

/** One section of a report. */
export type ReportSection = PlotSection | MemoryMapSection | TableSection;

/** A whole report. */
export interface Report {
  /** The page title and heading. */
  readonly title: string;
  /** Label and value lines under the heading (trace, backend, device, when). */
  readonly facts: readonly (readonly [string, string])[];
  readonly sections: readonly ReportSection[];
}
