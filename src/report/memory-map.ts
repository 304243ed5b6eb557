/**
 * From a resource's segments (`memorySegments()`, a snapshot's `segments`) to what the memory map
 * draws: the memory held, laid out, and the live blocks placed in it. Shared by the snapshot and
 * replay reports, so both draw a virtual range the same way.
 */
import type { SnapshotSegment } from '../resource/figures.js';
import type { MapBlock, MapSegment } from './report.js';

/**
 * The memory a resource's segments hold, as map segments: a virtual range's runs of mapped pages
 * (its unmapped addresses hold nothing), any other segment whole.
 *
 * @param segments The resource's segments.
 * @param label Who holds them, for the map's hover text.
 * @returns Map segments in the order of `segments` (ascending when they are).
 * @example
 * ```ts
 * const held = heldSegments(pool.memorySegments() ?? [], pool.describe()).sort((a, b) => a.address - b.address);
 * ```
 */
export function heldSegments(segments: readonly SnapshotSegment[], label: string): MapSegment[] {
  const held: MapSegment[] = [];
  for (const s of segments) {
    if (s.pages === null) {
      held.push({ address: s.address, bytes: s.bytes, label });
      continue;
    }
    for (const [first, count] of s.pages.mapped) {
      held.push({ address: s.address + first * s.pages.pageBytes, bytes: count * s.pages.pageBytes, label: `${label}, mapped pages` });
    }
  }
  return held;
}

/**
 * Keeps the blocks that lie wholly inside one of `segments`, as the map needs them (a live block is
 * always in held memory; one that is not would be drawn over the wrong segment).
 *
 * @param segments Ascending by address, not overlapping.
 * @param blocks Ascending by address.
 * @returns The blocks kept, and how many were not.
 * @example
 * ```ts
 * const { blocks, outside } = placeBlocks(held, [{ address: ptr, bytes: 1 << 20, site: 0 }]);
 * ```
 */
export function placeBlocks(segments: readonly MapSegment[], blocks: readonly MapBlock[]): { blocks: MapBlock[]; outside: number } {
  const kept: MapBlock[] = [];
  let s = 0;
  let outside = 0;
  for (const b of blocks) {
    while (s < segments.length && b.address >= segments[s]!.address + segments[s]!.bytes) s++;
    const seg = segments[s];
    if (seg === undefined || b.address < seg.address || b.address + b.bytes > seg.address + seg.bytes) outside += 1;
    else kept.push(b);
  }
  return { blocks: kept, outside };
}

/**
 * True when `segments` lay memory out: some segment is not one driver allocation holding one block
 * (kind `allocation`). A resource whose every block is its own driver allocation (CudaResource,
 * AsyncResource over CUDA's pool) has segments that are its blocks, placed where the driver chose
 * and with whatever the driver keeps around them unseen; drawn, they would be a gap-free row of
 * blocks that says nothing of the layout, the same for every such stack.
 *
 * @param segments A resource's segments.
 * @returns Whether a memory map of them shows a layout.
 * @example
 * ```ts
 * showsLayout(new CudaResource().memorySegments() ?? []); // false: the driver places each block
 * ```
 */
export function showsLayout(segments: readonly SnapshotSegment[]): boolean {
  return segments.some((s) => s.kind !== 'allocation' || s.blocks.length !== 1 || s.blocks[0]!.bytes !== s.bytes);
}

/** The sentence a report says in place of the maps it leaves out, naming whose they are. */
export function driverLayoutNote(names: readonly string[]): string {
  return (
    `No memory map for ${names.join(', ')}: each block is one driver allocation, placed where the driver chooses ` +
    '(CUDA lays its pool out itself), which vram cannot see.'
  );
}
