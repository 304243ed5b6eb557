/// <reference lib="esnext.disposable" preserve="true" />
// Kept in the .d.ts (preserve), as in index.ts: a consumer that imports only this subpath needs `Disposable` too.
/**
 * `vram/observe`: watching memory over time. The memory history, snapshots and their format, the
 * out-of-memory observer, and leak statistics (`memoryStats`, the figures of now, is in the root).
 *
 * @module vram/observe
 */
export { recordMemoryHistory, memoryHistory, MemoryHistory } from '../observe/history.js';
export type { HistoryOptions, HistoryLiveBlock, LiveSite, ResourceRecord } from '../observe/history.js';
export { memorySnapshot } from '../observe/snapshot.js';
export type { AllocationWaits } from '../resource/waiting.js';
export type { MemoryStatsBase, ResourceFigureStats, NoResourceFigures } from '../observe/memory-stats.js';
export type { SnapshotOptions } from '../observe/snapshot.js';
export { SNAPSHOT_VERSION, validateSnapshot, SnapshotFormatError } from '../observe/snapshot-format.js';
export type {
  MemorySnapshot,
  HistoryEventKind,
  HistoryEvent,
  SnapshotStack,
  SnapshotFigures,
  ResourceStatus,
  SnapshotBaseline,
  SnapshotResource,
  SnapshotLiveBlock,
  SnapshotHistory,
  SnapshotTriggerKind,
  SnapshotError,
  SnapshotTrigger,
} from '../observe/snapshot-format.js';
export type { BlockState, SnapshotBlock, SegmentKind, SnapshotPages, SnapshotSegment } from '../resource/figures.js';
export { onOutOfMemory, OOM_SNAPSHOT_VARIABLE } from '../observe/out-of-memory-observer.js';
export type { OutOfMemoryEvent } from '../observe/out-of-memory-observer.js';
export { captureAllocationStacks } from '../buffer/lifetime.js';
export { leakStatistics, resetLeakStatistics, onLeak } from '../backstop.js';
export type { LeakRecord, LeakStatistics, LeakListener } from '../backstop.js';
