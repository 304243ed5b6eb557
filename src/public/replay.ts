/// <reference lib="esnext.disposable" preserve="true" />
// Kept in the .d.ts (preserve), as in index.ts: a consumer that imports only this subpath needs `Disposable` too.
/**
 * `vram/replay`: allocation logs (RMM's CSV) parsed and replayed against resource stacks, and the
 * self-contained HTML reports (uPlot inlined) of a replay, a bench run or a memory snapshot: what
 * `vram replay`, `vram bench` and `vram view` are built on.
 *
 * @module vram/replay
 */
export { parseAllocationLog, readAllocationLog, TraceParseError } from '../replay/parse.js';
export { InputFileError } from '../util/input-file.js';
export type { AllocationTrace, TraceEvent, TraceAction, TraceSummary } from '../replay/parse.js';
export { replay, ReplayError } from '../replay/engine.js';
export type { GrowthFigures, DriverCalls } from '../resource/figures.js';
export type { ReplayResult, ReplayOptions, ReplayPass, ReplayFailurePoint, ReservedSource, ReplayTimeline, PeakBlock } from '../replay/engine.js';
export { renderReport } from '../report/html.js';
export { replayReport } from '../report/replay-report.js';
export type { ReplayReportInput, ReplayReportStack } from '../report/replay-report.js';
export { benchReport } from '../report/bench-report.js';
export type { BenchReportInput, BenchFigure, BenchSkipped } from '../report/bench-report.js';
export { snapshotReport } from '../report/snapshot-report.js';
export type {
  Report,
  ReportSection,
  PlotSection,
  PlotSeries,
  PlotAxis,
  ValueUnit,
  MemoryMapSection,
  MapSegment,
  MapBlock,
  MapSite,
  TableSection,
} from '../report/report.js';
