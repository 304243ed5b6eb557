/**
 * `captureGraph`: a capture as one call, which always ends the capture, even when the work
 * throws, so the stream is usable afterwards.
 */
import type { Graph } from './graph.js';
import type { CaptureOptions, Stream } from '../stream.js';
import { Stream as StreamClass } from '../stream.js';
import { readOptions } from '../util/options.js';

/**
 * Records what `fn` queues on `stream` (and on streams it joins into the capture) into a graph:
 * `stream.beginCapture(options)`, `fn()`, `stream.endCapture()`. When `fn` throws, the capture
 * still ends (the partial graph is destroyed) and the error is rethrown: the stream runs work
 * again. `fn` must queue its work synchronously (an async function's later work would miss the
 * capture: a returned promise is refused).
 *
 * @param stream The stream to capture (not the default stream).
 * @param fn The work, queued on `stream`.
 * @param options `mode` (`'global'` by default) and `pool` (a GraphPool to share), as for beginCapture.
 * @returns The graph.
 * @throws {TypeError} When `stream` is not a Stream, `fn` not a function, or `fn` returns a promise.
 * @throws {StreamCaptureError} When `fn` (or vram on its behalf) made a call a capture cannot hold, or the capture failed to end.
 * @throws What `fn` throws (after ending the capture).
 * @example
 * ```ts
 * using graph = captureGraph(stream, () => {
 *   x.copyFrom(y, { stream });
 *   kernel.launch({ grid: 64, block: 256, stream }, x.buffer, n);
 * });
 * using exec = graph.instantiate();
 * exec.launch(stream);
 * ```
 */
export function captureGraph(stream: Stream, fn: () => void, options: CaptureOptions = {}): Graph {
  if (!(stream instanceof StreamClass)) throw new TypeError('captureGraph: stream must be a Stream');
  if (typeof fn !== 'function') throw new TypeError('captureGraph: fn must be a function');
  options = readOptions('captureGraph', options, { mode: true, pool: true });
  stream.beginCapture(options);
  let result: unknown;
  try {
    result = fn();
  } catch (error) {
    abandon(stream);
    throw error;
  }
  if (result !== undefined && typeof (result as { then?: unknown }).then === 'function') {
    abandon(stream);
    throw new TypeError('captureGraph: fn returned a promise: queue the work synchronously (work queued after an await is not captured)');
  }
  return stream.endCapture();
}

/** Ends a capture whose work failed: the graph, if the capture could still end, is destroyed. */
function abandon(stream: Stream): void {
  try {
    stream.endCapture().destroy();
  } catch {
    // The capture was invalidated or left a stream unjoined: it ended all the same.
  }
}
