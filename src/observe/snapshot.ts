/**
 * memorySnapshot: one device's memory at a moment, as data (PyTorch's `_snapshot()`): every
 * resource of its current stack and every resource the history recorded, with their figures,
 * segments and blocks; every live block with the call stack that allocated it (when the history
 * records stacks); and the history's events. The format is `snapshot-format.ts`
 * (`SNAPSHOT_VERSION`, docs/snapshot-schema.json); `JSON.stringify` writes it as it is.
 */
import { graphPoolsOf } from '../resource/suballoc/graph-pool.js';
import { Device } from '../device.js';
import { existingCurrentResource, getCurrentResource } from '../resource/current.js';
import { memoryHistory, resourceRecord, type ResourceRecord } from './history.js';
import { upstreamChain, type MemoryResource } from '../resource/resource.js';
import { SNAPSHOT_VERSION, type MemorySnapshot, type SnapshotLiveBlock, type SnapshotResource, type SnapshotTrigger } from './snapshot-format.js';
import { type SnapshotSegment } from '../resource/figures.js';
import { readOptions } from '../util/options.js';

/** Options of `memorySnapshot`. */
export interface SnapshotOptions {
  /** The device (device 0 by default). */
  readonly device?: Device | number;
}

/**
 * A snapshot of one device's memory, for a report (`vram view`) or a file.
 *
 * @param options `device` (device 0 by default).
 * @returns Plain data in the format of `SNAPSHOT_VERSION`; `JSON.stringify` writes it.
 * @throws {RangeError | TypeError} For a bad device, or a bad environment variable of the default resource.
 * @throws {CudaError} When a resource's figures need a driver call that fails (an AsyncResource's pool).
 * @example
 * ```ts
 * recordMemoryHistory({ stacks: true });
 * run();
 * writeFileSync('snapshot.json', JSON.stringify(memorySnapshot()));
 * ```
 */
export function memorySnapshot(options: SnapshotOptions = {}): MemorySnapshot {
  options = readOptions('memorySnapshot', options, { device: true });
  const device = Device.resolve(options.device);
  return takeSnapshot(device, getCurrentResource(device), { kind: 'request', error: null });
}

/**
 * The snapshot of `device`, with `top`'s stack as well as the current one and those the history
 * saw (the out-of-memory observer passes the failing stack, which need not be the current one).
 *
 * @param device The device.
 * @param top A resource whose stack is included; the device's current resource is included anyway when it has one.
 * @param trigger Why it is taken.
 * @returns The snapshot.
 * @internal
 */
export function takeSnapshot(device: Device, top: MemoryResource | undefined, trigger: SnapshotTrigger): MemorySnapshot {
  const time = performance.now();
  const history = memoryHistory(device);
  const current = existingCurrentResource(device);
  const onCurrentStack = new Set(current === undefined ? [] : upstreamChain(current));
  const byId = new Map<number, ResourceRecord>();
  for (const mr of [...onCurrentStack, ...(top === undefined ? [] : upstreamChain(top))]) {
    const record = resourceRecord(mr);
    byId.set(record.id, record);
  }
  for (const record of history?.seenResources() ?? []) byId.set(record.id, record);

  const resources: SnapshotResource[] = [...byId.values()]
    .sort((a, b) => a.id - b.id)
    .map((record) => {
      const mr = record.ref.deref();
      const active = mr !== undefined && !mr.destroyed;
      return {
        id: record.id,
        label: active ? mr.describe() : record.label,
        className: record.className,
        kind: record.kind,
        device: record.device,
        upstream: record.upstream,
        current: mr !== undefined && onCurrentStack.has(mr),
        status: mr === undefined ? 'collected' : mr.destroyed ? 'destroyed' : 'active',
        figures: active ? (mr.memoryFigures() ?? null) : null,
        segments: active ? (mr.memorySegments() ?? null) : null,
        baseline: history !== undefined && record.seenBy === history ? record.baseline : null,
      };
    });

  // Capture-private pools (GraphPool): memory CUDA graphs own, laid out as segments of kind 'graph-pool'.
  let nextId = resources.reduce((m, r) => Math.max(m, r.id), 0) + 1;
  for (const pool of graphPoolsOf(device.ordinal)) {
    resources.push({
      id: nextId++,
      label: String(pool),
      className: 'GraphPool',
      kind: 'device',
      device: device.ordinal,
      upstream: null,
      current: false,
      status: 'active',
      figures: null,
      segments: pool.segments(),
      baseline: null,
    });
  }

  // A block handed to a sub-allocator above (a pool's chunk, an arena's region, through any
  // adaptors between them) is its memory to cut, not a block of the program: only the blocks of
  // the highest resource that lays out memory count.
  const upstreamOf = new Map(resources.map((r) => [r.id, r.upstream]));
  const laidOutBelow = new Set<number>();
  for (const r of resources) {
    if (r.segments === null) continue;
    for (let up = r.upstream; up !== null && !laidOutBelow.has(up); up = upstreamOf.get(up) ?? null) laidOutBelow.add(up);
  }
  const seen = history?.liveBlocks() ?? new Map();
  const blocks: SnapshotLiveBlock[] = [];
  const withStacks = resources.map((resource): SnapshotResource => {
    if (resource.segments === null) return resource;
    const segments = resource.segments.map((segment): SnapshotSegment => ({
      ...segment,
      blocks: segment.blocks.map((block) => {
        if (block.state !== 'live' || laidOutBelow.has(resource.id)) return block;
        const recorded = seen.get(block.address);
        seen.delete(block.address);
        blocks.push({
          address: block.address,
          bytes: block.requestedBytes ?? block.bytes,
          stream: recorded?.stream ?? block.stream,
          time: recorded?.time ?? null,
          resource: resource.id,
          stack: recorded?.stack ?? null,
        });
        return recorded === undefined ? block : { ...block, stream: recorded.stream, stack: recorded.stack };
      }),
    }));
    return { ...resource, segments };
  });
  // Blocks the history saw that no resource lays out (a stack with no sub-allocator that reports);
  // those of a destroyed stack went with it.
  const active = new Set(resources.filter((r) => r.status === 'active').map((r) => r.id));
  for (const [address, recorded] of seen) {
    if (active.has(recorded.resource))
      blocks.push({ address, bytes: recorded.bytes, stream: recorded.stream, time: recorded.time, resource: recorded.resource, stack: recorded.stack });
  }
  blocks.sort((a, b) => a.address - b.address);

  return {
    version: SNAPSHOT_VERSION,
    createdAt: new Date(performance.timeOrigin + time).toISOString(),
    time,
    timeOrigin: performance.timeOrigin,
    backend: device.backend.name,
    device: device.ordinal,
    trigger,
    currentResource: current === undefined ? null : resourceRecord(current).id,
    resources: withStacks,
    blocks,
    stacks: history?.callStacks() ?? [],
    history:
      history === undefined
        ? null
        : {
            recording: history.recording,
            maxEntries: history.maxEntries,
            stacks: history.stacks,
            startTime: history.startTime,
            recorded: history.recorded,
            dropped: history.dropped,
            events: history.events(),
          },
  };
}
