/**
 * The emulated driver's capture and graph data: a capture sequence and the nodes it records, graphs,
 * executable graphs and the graph memory they share. The calls that make and run them are
 * graph-calls.ts (as streams.ts and stream-calls.ts, pools.ts and pool-calls.ts).
 */
import type { Block } from './pools.js';
import type { Hold } from './hold.js';

/** What a node does, by the call that made it: update compares these. */
export type NodeKind = 'memcpy' | 'memset' | 'kernel' | 'host' | 'alloc' | 'free' | 'mem-op' | 'empty' | 'graph';

/** One recorded node: its kind, the nodes it depends on, its effect and condition (a host function's). */
export interface GraphNode {
  readonly kind: NodeKind;
  readonly deps: readonly number[];
  readonly run: (() => void) | undefined;
  /** For host nodes: makes the condition a fresh launch waits for (the event loop's next turn). */
  readonly hold: (() => Hold) | undefined;
}

/** The node kind a call makes. */
export function nodeKind(call: string): NodeKind {
  if (call.startsWith('cuMemcpy')) return 'memcpy';
  if (call.startsWith('cuMemset')) return 'memset';
  if (call === 'cuLaunchKernel') return 'kernel';
  if (call === 'cuLaunchHostFunc') return 'host';
  if (call.startsWith('cuMemAlloc')) return 'alloc';
  if (call === 'cuMemFreeAsync') return 'free';
  if (call === 'cuStreamWaitValue32' || call === 'cuStreamWriteValue32') return 'mem-op';
  if (call === 'cuGraphLaunch') return 'graph';
  return 'empty';
}

/** An allocation made by a graph's alloc node: graph memory. */
export class GraphAllocation {
  /** True once a free node of the graph frees it (the graph gives it back itself). */
  freedInGraph = false;
  /** True once the program freed it outside the graph since the last launch. */
  freedOutside = false;
  constructor(
    readonly block: Block,
    readonly memory: GraphMemory,
  ) {}
}

/** A graph's memory, shared by the graph and the executable graphs made from it. */
export class GraphMemory {
  readonly allocations: GraphAllocation[] = [];
  /** The graph and its executable graphs that are not destroyed. */
  refs = 1;
}

/** What a capture needs of a stream: the nodes its next node depends on. */
export interface CaptureMember {
  frontier: readonly number[];
}

/** One capture sequence: the origin stream, the streams joined into it, its nodes. */
export class CaptureState<S extends CaptureMember> {
  readonly nodes: GraphNode[] = [];
  readonly streams = new Set<S>();
  invalidated = false;
  readonly memory = new GraphMemory();
  constructor(
    readonly origin: S,
    readonly mode: number,
    readonly id: number,
  ) {
    this.streams.add(origin);
  }

  /** Records a node on `stream`: it depends on the stream's frontier, and becomes it. */
  record(stream: S, kind: NodeKind, run: (() => void) | undefined, hold: (() => Hold) | undefined): number {
    const id = this.nodes.length;
    this.nodes.push({ kind, deps: stream.frontier, run, hold });
    stream.frontier = [id];
    return id;
  }
}

/** A graph: its nodes and memory. */
export class GraphState {
  destroyed = false;
  constructor(
    readonly handle: number,
    readonly nodes: readonly GraphNode[],
    readonly memory: GraphMemory,
    readonly context: number,
  ) {}
}

/** An executable graph. */
export class ExecState {
  /** True once launched: the next launch needs the graph's unfreed allocations freed. */
  launched = false;
  constructor(
    readonly handle: number,
    public nodes: readonly GraphNode[],
    readonly memory: GraphMemory,
    readonly context: number,
  ) {}
}
