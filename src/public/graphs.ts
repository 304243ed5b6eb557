/// <reference lib="esnext.disposable" preserve="true" />
// Kept in the .d.ts (preserve), as in index.ts: a consumer that imports only this subpath needs `Disposable` too.
/**
 * `vram/graphs`: CUDA graphs. Record a stream's work once (`stream.beginCapture()` /
 * `endCapture()`, or `captureGraph`) and launch it again for the cost of one call; the
 * capture-private pool (`GraphPool`) that captures allocate from; the errors of what cannot be
 * captured and of updates.
 *
 * @module vram/graphs
 */
export { Graph, GraphExec } from '../graphs/graph.js';
export type { CaptureModeName, CaptureStatusName, CapturePool, LaunchStream } from '../graphs/sessions.js';
export { captureGraph } from '../graphs/capture.js';
export { GraphPool } from '../resource/suballoc/graph-pool.js';
export type { GraphPoolOptions } from '../resource/suballoc/graph-pool.js';
export type { CaptureOptions } from '../stream.js';
export { StreamCaptureError, GraphUpdateError, GraphMemoryLiveError } from '../errors.js';
