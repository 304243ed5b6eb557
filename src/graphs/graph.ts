/**
 * CUDA graphs at the stream layer: `Graph` (what a capture recorded) and `GraphExec` (a graph
 * ready to launch), and, re-exported from sessions.ts, the captures in progress.
 * `Stream.beginCapture`/`endCapture` (src/stream.ts) are written in these; the layers above ask
 * `captureSessionOf(handle)` whether a stream is capturing (resources route allocations, buffers
 * and ops refuse what cannot be captured), and `refuseDuringCapture` refuses a call before it
 * reaches the driver, so the capture is not invalidated. This file imports nothing from
 * stream.ts: a stream is `{ handle }`.
 */
import { guard, unguard, type Dropped } from '../backstop.js';
import { GraphUpdateResult, type Handle } from '../backend/backend.js';
import { recordNewEvent } from '../backend/record-event.js';
import type { Device } from '../device.js';
import { CudaError, CUresult, DoubleFreeError, GraphMemoryLiveError, GraphUpdateError, UseAfterFreeError } from '../errors.js';
import { CaptureHolds, type CapturePool, type LaunchStream } from './sessions.js';

import { inspectCustom } from '../util/inspect.js';
import { checkLiveStreamHandle } from '../validate.js';

/** The update results by number, as GraphUpdateError names them. */
const UPDATE_REASONS: Readonly<Record<number, readonly [string, string]>> = {
  [GraphUpdateResult.ERROR]: ['error', 'the graphs belong to different contexts, or the update failed otherwise'],
  [GraphUpdateResult.TOPOLOGY_CHANGED]: ['topology-changed', 'the graphs have different nodes or edges (capture the same sequence of calls)'],
  [GraphUpdateResult.NODE_TYPE_CHANGED]: ['node-type-changed', 'a node is of another kind (a copy where a kernel was, ...)'],
  [GraphUpdateResult.FUNCTION_CHANGED]: ['function-changed', 'a kernel node runs another function in a way the driver cannot change'],
  [GraphUpdateResult.PARAMETERS_CHANGED]: [
    'parameters-changed',
    "a node's parameters changed in a way the driver cannot update (such as a copy's memory type)",
  ],
  [GraphUpdateResult.NOT_SUPPORTED]: ['not-supported', 'the graph has nodes that cannot be updated (memory allocation and free nodes, child graphs)'],
  [GraphUpdateResult.UNSUPPORTED_FUNCTION_CHANGE]: ['unsupported-function-change', "a kernel node's new function is not supported for updates"],
  [GraphUpdateResult.ATTRIBUTES_CHANGED]: ['attributes-changed', "a node's attributes changed in a way the driver cannot update"],
};

/**
 * What a capture recorded: the nodes (kernels, copies, fills, host functions, memory nodes) and
 * their order. Instantiate it to launch it; the graph can be destroyed once instantiated (the
 * executable graph lives on). Memory the capture allocated from a private pool stays the
 * graph's while it or an executable graph made from it lives.
 * @example
 * ```ts
 * using graph = captureGraph(stream, () => { step(); });
 * using exec = graph.instantiate();
 * for (let i = 0; i < 100; i++) exec.launch(stream);
 * ```
 */
export class Graph {
  #destroyed = false;
  readonly #dropped: Dropped;

  /**
   * Made by `stream.endCapture()` and `captureGraph`, not directly.
   * @param raw The CUgraph.
   * @param device Its device.
   * @param pool The capture-private pool it holds (one hold), if its capture allocated from one.
   * @param holds What it keeps for its nodes (one hold): leases on the spillable memory its capture used.
   * @throws Never.
   * @example
   * ```ts
   * const graph = stream.endCapture(); // not new Graph(...)
   * ```
   */
  constructor(
    private readonly raw: Handle,
    /** The device the graph's work runs on. */
    readonly device: Device,
    /** The capture-private pool its allocations came from; undefined when it allocated none there. */
    readonly pool: CapturePool | undefined,
    private readonly holds: CapturePool = new CaptureHolds(),
  ) {
    this.#dropped = { kind: 'Graph', ptr: raw, release: () => endGraph(device, raw, pool, holds) };
    guard(this, this.#dropped);
  }

  /**
   * The CUgraph handle.
   * @returns The handle.
   * @throws {UseAfterFreeError} When the graph was destroyed.
   * @example
   * ```ts
   * graph.handle; // a number
   * ```
   */
  get handle(): Handle {
    if (this.#destroyed) throw new UseAfterFreeError('the graph was destroyed');
    return this.raw;
  }

  /**
   * How many nodes the graph has (cuGraphGetNodes): one per kernel launch, copy, fill, host
   * function, allocation and free captured.
   * @returns The count.
   * @throws {UseAfterFreeError} When the graph was destroyed.
   * @example
   * ```ts
   * console.log(graph.nodeCount);
   * ```
   */
  get nodeCount(): number {
    const h = this.handle;
    this.device.makeCurrent();
    return this.device.backend.graphNodeCount(h);
  }

  /**
   * True once `destroy()` has run.
   * @returns Whether it ended.
   * @example
   * ```ts
   * graph.destroy();
   * graph.destroyed; // true
   * ```
   */
  get destroyed(): boolean {
    return this.#destroyed;
  }

  /**
   * An executable graph, launched with `exec.launch(stream)`.
   * @returns The executable graph.
   * @throws {UseAfterFreeError} When the graph was destroyed.
   * @throws {CudaError} When the driver cannot instantiate it.
   * @example
   * ```ts
   * using exec = graph.instantiate();
   * exec.launch(stream);
   * ```
   */
  instantiate(): GraphExec {
    const h = this.handle;
    this.device.makeCurrent();
    const allocations = this.device.backend.graphMemAllocNodeCount(h);
    const exec = this.device.backend.graphInstantiate(h);
    this.pool?.retain();
    this.holds.retain();
    return new GraphExec(exec, this.device, this.pool, allocations, [this.holds]);
  }

  /**
   * Destroys the graph. Executable graphs made from it live on; the private pool is given back
   * when the last of them is destroyed too.
   * @throws {DoubleFreeError} When it was already destroyed.
   * @example
   * ```ts
   * graph.destroy();
   * ```
   */
  destroy(): void {
    if (this.#destroyed) throw new DoubleFreeError('the graph was already destroyed');
    this.#destroyed = true;
    unguard(this.#dropped);
    endGraph(this.device, this.raw, this.pool, this.holds);
  }

  /**
   * One more hold on what the graph keeps, for an executable graph updated with its parameters.
   * @internal
   * @returns The holds (released by that executable graph's end).
   */
  retainHolds(): CapturePool {
    this.holds.retain();
    return this.holds;
  }

  /** `using graph = stream.endCapture()` destroys it at the end of the scope. */
  [Symbol.dispose](): void {
    if (!this.#destroyed) this.destroy();
  }

  /**
   * One line for logs.
   * @returns E.g. `Graph(4097, device 0)`.
   * @throws Never.
   * @example
   * ```ts
   * String(graph); // 'Graph(4097, device 0)'
   * ```
   */
  toString(): string {
    return `Graph(${this.raw}, device ${this.device.ordinal}${this.#destroyed ? ', destroyed' : ''})`;
  }

  /**
   * How `console.log` shows the graph: `String(graph)`.
   * @returns The line.
   * @throws Never.
   * @example
   * ```ts
   * console.log(graph);
   * ```
   */
  [inspectCustom](): string {
    return this.toString();
  }
}

function endGraph(device: Device, raw: Handle, pool: CapturePool | undefined, holds: CapturePool): number {
  device.makeCurrent();
  device.backend.graphDestroy(raw);
  pool?.release();
  holds.release();
  return 0;
}

/**
 * A graph ready to launch: `launch(stream)` queues all its work for the cost of one call.
 * `update(graph)` gives it the parameters of another capture of the same sequence (new kernel
 * arguments, other addresses), cheaper than instantiating again. `destroy()` is safe while
 * launches are queued: the driver's executable graph and the private pool go once the last
 * launch has run, in stream order (an event per launch stream, polled; the host never waits).
 * @example
 * ```ts
 * using exec = graph.instantiate();
 * exec.launch(stream);
 * await stream.synchronized();
 * ```
 */
export class GraphExec {
  #destroyed = false;
  readonly #dropped: Dropped;
  /** The streams launched on since the last destroy check (handles). */
  readonly #launchedOn = new Set<Handle>();
  /** Launches queued so far. */
  #launches = 0;

  /**
   * Made by `graph.instantiate()`, not directly.
   * @param raw The CUgraphExec.
   * @param device Its device.
   * @param pool The private pool it holds (one hold), if any.
   * @param memoryNodes How many memory-allocation nodes the graph has.
   * @param holds What it keeps for its nodes, one hold each: its graph's, and those of graphs it was updated with.
   * @throws Never.
   * @example
   * ```ts
   * const exec = graph.instantiate(); // not new GraphExec(...)
   * ```
   */
  constructor(
    private readonly raw: Handle,
    /** The device the graph runs on. */
    readonly device: Device,
    private readonly pool: CapturePool | undefined,
    /** How many memory-allocation nodes the graph has (cuMemAllocAsync calls the capture recorded). */
    readonly memoryNodes = 0,
    private readonly holds: CapturePool[] = [],
  ) {
    this.#dropped = { kind: 'GraphExec', ptr: raw, release: () => endExec(device, raw, pool, holds, []) };
    guard(this, this.#dropped);
  }

  /**
   * The CUgraphExec handle.
   * @returns The handle.
   * @throws {UseAfterFreeError} When it was destroyed.
   * @example
   * ```ts
   * exec.handle; // a number
   * ```
   */
  get handle(): Handle {
    if (this.#destroyed) throw new UseAfterFreeError('the executable graph was destroyed');
    return this.raw;
  }

  /**
   * True once `destroy()` has run (the driver's object may still be finishing a launch).
   * @returns Whether it ended.
   * @example
   * ```ts
   * exec.destroy();
   * exec.destroyed; // true
   * ```
   */
  get destroyed(): boolean {
    return this.#destroyed;
  }

  /**
   * Queues the whole graph on `stream` (cuGraphLaunch): one call for every node.
   * @param stream Where it runs (a Stream, or anything with a live `handle`).
   * @returns This executable graph.
   * @throws {TypeError | RangeError} For a stream that is not one, or a raw handle no live stream
   *   has (the live-stream check every entry point that takes a stream makes), before the driver.
   * @throws {UseAfterFreeError} When it was destroyed, or the stream was.
   * @throws {GraphMemoryLiveError} When an allocation the graph's memory node made at the last
   *   launch, and that the graph does not free, is still live (free it first).
   * @throws {CudaError} When the driver refuses the launch otherwise (another context).
   * @example
   * ```ts
   * exec.launch(stream).launch(stream); // twice, in order
   * ```
   */
  launch(stream: LaunchStream): this {
    const h = this.handle;
    const s = checkLiveStreamHandle(stream, this.device.backend);
    this.device.makeCurrent();
    try {
      this.device.backend.graphLaunch(h, s);
    } catch (error) {
      if (error instanceof CudaError && error.code === CUresult.INVALID_VALUE && this.memoryNodes > 0 && this.#launches > 0) {
        throw new GraphMemoryLiveError(
          `${String(this)} cannot launch again: the graph still owns the memory its ${this.memoryNodes} allocation node(s) made at the last launch ` +
            'and that it does not free. Free that memory first (buffer.free({ stream }) or resource.deallocate for the block the capture allocated, ' +
            'cuMemFreeAsync in stream order after the launch), or free it inside the capture so the graph frees it itself',
          { cause: error },
        );
      }
      throw error;
    }
    this.#launches++;
    this.#launchedOn.add(s);
    return this;
  }

  /**
   * Gives this executable graph the node parameters of `graph` (cuGraphExecUpdate): a capture of
   * the same calls, with other kernel arguments, sizes of copies or addresses. When the driver
   * cannot (another topology, other kinds of nodes, memory nodes) nothing changes and a
   * GraphUpdateError says why: instantiate `graph` instead.
   * @param graph The graph whose parameters to take.
   * @returns This executable graph.
   * @throws {TypeError} When `graph` is not a Graph.
   * @throws {GraphUpdateError} When the driver cannot update (its `reason`).
   * @throws {UseAfterFreeError} When either was destroyed.
   * @example
   * ```ts
   * exec.update(captureGraph(stream, () => scale.launch(cfg, x, 3.0)));
   * ```
   */
  update(graph: Graph): this {
    if (!(graph instanceof Graph)) throw new TypeError('update expects a Graph');
    const h = this.handle;
    const g = graph.handle;
    this.device.makeCurrent();
    const result = this.device.backend.graphExecUpdate(h, g);
    if (result !== GraphUpdateResult.SUCCESS) {
      const [reason, why] = UPDATE_REASONS[result] ?? ['error', `the driver answered ${result}`];
      throw new GraphUpdateError(reason, `the executable graph cannot take ${String(graph)}'s parameters: ${why}`);
    }
    // Its nodes now name the other graph's memory: what that graph keeps stays while this lives.
    this.holds.push(graph.retainHolds());
    return this;
  }

  /**
   * Destroys the executable graph. Launches already queued still run: the driver's object and
   * the private pool's memory go once they have (an event recorded on each stream it was
   * launched on, polled off the event loop; no host wait).
   * @throws {DoubleFreeError} When it was already destroyed.
   * @example
   * ```ts
   * exec.launch(stream);
   * exec.destroy(); // the launch still runs
   * ```
   */
  destroy(): void {
    if (this.#destroyed) throw new DoubleFreeError('the executable graph was already destroyed');
    this.#destroyed = true;
    unguard(this.#dropped);
    const { backend } = this.device;
    this.device.makeCurrent();
    const events: Handle[] = [];
    for (const s of this.#launchedOn) {
      events.push(recordNewEvent(backend, s));
    }
    endExec(this.device, this.raw, this.pool, this.holds, events);
  }

  /** `using exec = graph.instantiate()` destroys it at the end of the scope. */
  [Symbol.dispose](): void {
    if (!this.#destroyed) this.destroy();
  }

  /**
   * One line for logs.
   * @returns E.g. `GraphExec(4098, device 0)`.
   * @throws Never.
   * @example
   * ```ts
   * String(exec); // 'GraphExec(4098, device 0)'
   * ```
   */
  toString(): string {
    return `GraphExec(${this.raw}, device ${this.device.ordinal}${this.#destroyed ? ', destroyed' : ''})`;
  }

  /**
   * How `console.log` shows it: `String(exec)`.
   * @returns The line.
   * @throws Never.
   * @example
   * ```ts
   * console.log(exec);
   * ```
   */
  [inspectCustom](): string {
    return this.toString();
  }
}

/** Executable graphs destroyed with launches not yet run: what to end once their events pass. */
const pendingEnds: { readonly device: Device; readonly events: Handle[]; readonly end: () => void }[] = [];
let polling = false;

/**
 * Ends an executable graph once `events` (recorded after its launches) have passed: now when
 * they have, else polled on the event loop (unref'd timers: a pending end never keeps the
 * process alive).
 */
function endExec(device: Device, raw: Handle, pool: CapturePool | undefined, holds: readonly CapturePool[], events: Handle[]): number {
  const end = (): void => {
    device.makeCurrent();
    device.backend.graphExecDestroy(raw);
    pool?.release();
    for (const h of holds) h.release();
  };
  pendingEnds.push({ device, events, end });
  settlePendingEnds();
  return 0;
}

/**
 * Ends every pending executable graph whose launches have run. Called at each destroy and by the poll.
 * @returns How many are still pending.
 */
export function settlePendingEnds(): number {
  for (let i = 0; i < pendingEnds.length;) {
    const p = pendingEnds[i]!;
    const { backend } = p.device;
    p.device.makeCurrent();
    while (p.events.length > 0 && backend.eventQuery(p.events[p.events.length - 1]!)) backend.eventDestroy(p.events.pop()!);
    if (p.events.length === 0) {
      pendingEnds.splice(i, 1);
      p.end();
    } else {
      i++;
    }
  }
  if (pendingEnds.length > 0 && !polling) {
    polling = true;
    const poll = (): void => {
      polling = false;
      settlePendingEnds();
    };
    setTimeout(poll, 1).unref();
  }
  return pendingEnds.length;
}
