/**
 * The emulated driver's stream capture and graph calls (their data: graphs.ts). A capturing stream records what would be
 * queued on it (copies, fills, kernel launches, host functions, stream memory operations,
 * stream-ordered allocations and frees) as graph nodes instead of running it; an event recorded
 * on it and waited for by another stream joins that stream into the capture (and joins it back).
 * Capture order is a topological order of the nodes, so a launch of the executable graph queues
 * the nodes' effects in that order on the launch stream, where they run with the same checks as
 * eager work. The rules follow the driver's, with its error codes:
 * - begin on the legacy stream: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; on a stream already
 *   capturing: CUDA_ERROR_ILLEGAL_STATE;
 * - a "potentially unsafe" call (cuMemAlloc, cuMemFree, synchronous copies and fills,
 *   synchronisations) while a GLOBAL or THREAD_LOCAL capture lasts, unless the thread's mode is
 *   RELAXED (cuThreadExchangeStreamCaptureMode): CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, and the
 *   capture is invalidated; synchronising or querying a capturing stream, in any mode, the same;
 * - the legacy stream used while a blocking stream of its context captures:
 *   CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, the capture invalidated;
 * - querying or synchronising an event recorded in a capture: CUDA_ERROR_CAPTURED_EVENT; a
 *   capturing stream waiting for an event recorded outside it: CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
 * - work queued on an invalidated capture: CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, and so is its end;
 * - ending on a joined stream: CUDA_ERROR_STREAM_CAPTURE_UNMATCHED; with a joined stream's work
 *   not joined back into the origin: CUDA_ERROR_STREAM_CAPTURE_UNJOINED.
 * Graph memory (cuMemAllocAsync during capture) is taken from the pool when captured and stays
 * the graph's while the graph or an executable graph made from it lives, as the driver keeps a
 * graph's memory at fixed addresses; an allocation the graph does not free must be freed (outside
 * it) before the next launch, else that launch fails with CUDA_ERROR_INVALID_VALUE, as on the driver.
 */
import { CaptureMode, CaptureStatus, GraphUpdateResult, type Handle } from '../backend.js';
import { CUresult } from '../../errors.js';
import { fail, invalidValue } from './fail.js';
import { GraphMemory, CaptureState, GraphState, ExecState } from './graphs.js';
import type { EmulatedState } from './state.js';
import type { StreamCapture } from './streams.js';

/** The capture and graph calls of one emulated driver. */
export class GraphCalls {
  constructor(private readonly s: EmulatedState) {}

  /** cuStreamBeginCapture. */
  streamBeginCapture(stream: Handle, mode: number): void {
    const call = 'cuStreamBeginCapture';
    if (mode !== CaptureMode.GLOBAL && mode !== CaptureMode.THREAD_LOCAL && mode !== CaptureMode.RELAXED) {
      invalidValue(call, `unknown capture mode ${String(mode)}`);
    }
    const s = this.s.stream(stream, call);
    if (s.legacy) fail(CUresult.STREAM_CAPTURE_UNSUPPORTED, call, 'the legacy default stream cannot be captured');
    if (s.capture !== undefined) fail(CUresult.ILLEGAL_STATE, call, `stream ${stream} is already capturing`);
    const capture = new CaptureState(s, mode, this.s.handle());
    s.capture = capture;
    s.frontier = [];
    this.s.captures.add(capture);
  }

  /** cuStreamEndCapture. */
  streamEndCapture(stream: Handle): Handle {
    const call = 'cuStreamEndCapture';
    const s = this.s.stream(stream, call);
    const capture = s.capture;
    if (capture === undefined) fail(CUresult.ILLEGAL_STATE, call, `stream ${stream} is not capturing`);
    if (capture.origin !== s) fail(CUresult.STREAM_CAPTURE_UNMATCHED, call, `stream ${stream} was joined into a capture begun on another stream`);
    const end = (): void => {
      for (const joined of capture.streams) {
        joined.capture = undefined;
        joined.frontier = [];
      }
      this.s.captures.delete(capture);
    };
    if (capture.invalidated) {
      end();
      this.releaseMemory(capture.memory);
      fail(CUresult.STREAM_CAPTURE_INVALIDATED, call, 'a call the capture forbids invalidated it');
    }
    if (!this.joined(capture)) {
      end();
      this.releaseMemory(capture.memory);
      fail(CUresult.STREAM_CAPTURE_UNJOINED, call, 'a stream joined into the capture has work the origin stream never waited for');
    }
    end();
    const graph = new GraphState(this.s.handle(), capture.nodes, capture.memory, s.context);
    this.s.graphs.set(graph.handle, graph);
    return graph.handle;
  }

  /** cuStreamIsCapturing. */
  streamCaptureStatus(stream: Handle): number {
    const capture = this.s.stream(stream, 'cuStreamIsCapturing').capture;
    if (capture === undefined) return CaptureStatus.NONE;
    return capture.invalidated ? CaptureStatus.INVALIDATED : CaptureStatus.ACTIVE;
  }

  /** cuThreadExchangeStreamCaptureMode. */
  threadExchangeCaptureMode(mode: number): number {
    if (mode !== CaptureMode.GLOBAL && mode !== CaptureMode.THREAD_LOCAL && mode !== CaptureMode.RELAXED) {
      invalidValue('cuThreadExchangeStreamCaptureMode', `unknown capture mode ${String(mode)}`);
    }
    const previous = this.s.threadCaptureMode;
    this.s.threadCaptureMode = mode;
    return previous;
  }

  /** cuGraphGetNodes (count). */
  graphNodeCount(graph: Handle): number {
    return this.graph(graph, 'cuGraphGetNodes').nodes.length;
  }

  /** cuGraphGetNodes and cuGraphNodeGetType: the graph's memory-allocation nodes. */
  graphMemAllocNodeCount(graph: Handle): number {
    return this.graph(graph, 'cuGraphGetNodes').nodes.filter((n) => n.kind === 'alloc').length;
  }

  /** cuGraphDestroy: its memory stays while an executable graph made from it lives. */
  graphDestroy(graph: Handle): void {
    const g = this.graph(graph, 'cuGraphDestroy');
    g.destroyed = true;
    this.s.graphs.delete(graph);
    this.unref(g.memory);
  }

  /** cuGraphInstantiateWithFlags (no flags). */
  graphInstantiate(graph: Handle): Handle {
    const call = 'cuGraphInstantiate';
    const g = this.graph(graph, call);
    this.s.ctx(call);
    const exec = new ExecState(this.s.handle(), g.nodes, g.memory, g.context);
    g.memory.refs++;
    this.s.execs.set(exec.handle, exec);
    return exec.handle;
  }

  /**
   * cuGraphLaunch: queues each node's effect on `stream` in capture order (a host node after the
   * event loop's next turn, as on a GPU). Captured itself, the launch is one node.
   */
  graphLaunch(exec: Handle, stream: Handle): void {
    const call = 'cuGraphLaunch';
    const e = this.exec(exec, call);
    const s = this.s.stream(stream, call);
    if (s.context !== e.context) fail(CUresult.INVALID_CONTEXT, call, 'the stream belongs to another context than the graph');
    if (e.launched) {
      for (const a of e.memory.allocations) {
        if (!a.freedInGraph && !a.freedOutside) {
          invalidValue(call, 'an allocation of the graph that the graph does not free is still live: free it before launching again');
        }
      }
    }
    const nodes = e.nodes;
    if (s.capture !== undefined) {
      this.s.enqueue(
        s,
        () => {
          for (const n of nodes) n.run?.();
        },
        undefined,
        undefined,
        call,
      );
    } else {
      for (const n of nodes) this.s.enqueue(s, n.run, undefined, n.hold?.(), call);
    }
    e.launched = true;
    for (const a of e.memory.allocations) a.freedOutside = false;
  }

  /** cuGraphExecUpdate: the same nodes and edges; memory nodes cannot be updated. */
  graphExecUpdate(exec: Handle, graph: Handle): number {
    const call = 'cuGraphExecUpdate';
    const e = this.exec(exec, call);
    const g = this.graph(graph, call);
    if (g.context !== e.context) return GraphUpdateResult.ERROR;
    if (g.nodes.length !== e.nodes.length) return GraphUpdateResult.TOPOLOGY_CHANGED;
    for (let i = 0; i < g.nodes.length; i++) {
      const a = e.nodes[i]!;
      const b = g.nodes[i]!;
      if (a.deps.length !== b.deps.length || a.deps.some((d, k) => b.deps[k] !== d)) return GraphUpdateResult.TOPOLOGY_CHANGED;
      if (a.kind !== b.kind) return GraphUpdateResult.NODE_TYPE_CHANGED;
      if (a.kind === 'alloc' || a.kind === 'free' || a.kind === 'graph') return GraphUpdateResult.NOT_SUPPORTED;
    }
    e.nodes = g.nodes;
    return GraphUpdateResult.SUCCESS;
  }

  /** cuGraphExecDestroy: launches already queued keep what they run. */
  graphExecDestroy(exec: Handle): void {
    const e = this.exec(exec, 'cuGraphExecDestroy');
    this.s.execs.delete(exec);
    this.unref(e.memory);
  }

  /** True when every node is an ancestor of (or in) the origin's frontier. */
  private joined(capture: StreamCapture): boolean {
    const reached = new Uint8Array(capture.nodes.length);
    const stack = [...capture.origin.frontier];
    while (stack.length > 0) {
      const id = stack.pop()!;
      if (reached[id] === 1) continue;
      reached[id] = 1;
      for (const d of capture.nodes[id]!.deps) stack.push(d);
    }
    return reached.every((r) => r === 1);
  }

  private unref(memory: GraphMemory): void {
    memory.refs--;
    if (memory.refs === 0) this.releaseMemory(memory);
  }

  /**
   * The graph's memory goes: what the graph freed goes back to its pool; what it left for the
   * program (not freed in the graph) becomes an ordinary allocation, as on the driver, where it
   * outlives the graph until freed (and when the program already freed it, it goes back too).
   */
  private releaseMemory(memory: GraphMemory): void {
    // Launches already queued run first (the driver frees a graph's memory once they are done).
    if (memory.allocations.length > 0) this.s.scheduler.drainAll();
    for (const a of memory.allocations) {
      this.s.graphAllocations.delete(a.block.address);
      if (a.freedInGraph || a.freedOutside) {
        this.s.poolBlocks.delete(a.block.address);
        a.block.pool.free(a.block, undefined);
      }
    }
    memory.allocations.length = 0;
  }

  private graph(handle: Handle, call: string): GraphState {
    const g = this.s.graphs.get(handle);
    if (g === undefined) fail(CUresult.INVALID_VALUE, call, `unknown graph ${handle}`);
    return g;
  }

  private exec(handle: Handle, call: string): ExecState {
    const e = this.s.execs.get(handle);
    if (e === undefined) fail(CUresult.INVALID_VALUE, call, `unknown executable graph ${handle}`);
    return e;
  }
}
