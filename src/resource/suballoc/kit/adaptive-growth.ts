/**
 * The adaptive growth policy of a virtual-memory pool (`PoolOptions.extentSize: 'adaptive'`): how
 * many pages one growth maps, and whether they may form one physical allocation, from what the
 * pool holds and what the device (or the pool's maximum) has left. Why: a growth costs about the
 * same whatever its size, so chunks are mapped ahead while memory is plentiful; the driver frees an
 * allocation only whole, so growth reverts to one-page extents when memory is short. The chunk
 * depends only on the pages held, so plentiful memory gives the same growths on both backends.
 * (Note [Extent size], docs/design/extent-size.md)
 */

/**
 * A chunk is this fraction of the pages the pool holds: geometric growth, so a first pass makes
 * O(log peak) growths. Measured with `vram replay --repeat 4` on the emulated backend over the
 * traces in test/fixtures (driver calls and peak reserved carry over to a GPU), with
 * `LARGE_BLOCK_SHARE`, 16 MiB to 256 MiB: 1/32 holds resnet50_train at +2.0% over peak live and
 * bert_dynamic_infer at +15.8% with 177 and 244 driver calls in the first pass and none in passes
 * 2-4; 1/8 held +3.5% and +21.6% with 126 and 63, 1/16 +5.5% and +21.4%, 1/48 +1.3% and +15.8%
 * (201 and 244 calls). A 512 MiB or 1 GiB cap took resnet to +9%. What bert keeps over +3% is not
 * the chunk (1/64 holds it at +15.8% too) but the address footprint of its large blocks: see
 * docs/design/virtual-growth.md, "Why bert stays at +15.8%".
 */
export const CHUNK_FRACTION = 1 / 32;
/** The smallest chunk mapped ahead, in bytes (8 pages of 2 MiB). */
export const MIN_CHUNK_BYTES = 16 * 1024 * 1024;
/** The largest chunk, and so the largest extent mapped ahead, in bytes. */
export const MAX_CHUNK_BYTES = 256 * 1024 * 1024;
/**
 * A growth maps ahead only when the block's missing pages are less than this share of the chunk;
 * a larger block gets an extent of its own pages alone. Why: small blocks placed on the pages
 * mapped ahead beside a large block keep its extent from being released or moved once the large
 * block is freed (the driver frees an allocation only whole). Without this rule, bert_dynamic_infer
 * (blocks up to 180 MB) held +15.5% to +32.4% over peak live as the smallest chunk went from 4 to
 * 24 MiB; with it, +19.4% to +21.6% over the same range, so the figure no longer hangs on where
 * the last chunk happens to end.
 */
export const LARGE_BLOCK_SHARE = 1 / 2;
/** Map ahead only while this fraction of the device's memory (or the maximum) stays free after it. */
export const LOW_WATER_FRACTION = 1 / 4;
/**
 * And only while the free memory left after the growth is at least this fraction of what the pool
 * then holds: on a device that is already full of other memory (another process, a ballast), the
 * pool stops forming large extents before it is half way to the end of the free memory.
 */
export const HELD_FRACTION = 1 / 2;

/** What the policy reads: the pool's pages and the device's room, in pages and bytes. */
export interface GrowthState {
  /** Pages the pool holds now. */
  readonly heldPages: number;
  /** Pages the block being committed spans. */
  readonly blockPages: number;
  /** The page size in bytes. */
  readonly pageBytes: number;
  /** The device's free memory in bytes (cuMemGetInfo), read on the growth path only. */
  readonly freeBytes: number;
  /** The device's total memory in bytes. */
  readonly totalBytes: number;
  /** The pool's cap on physical bytes (Infinity for none). */
  readonly maximumBytes: number;
}

/**
 * Pages one growth should map in all (the block's missing pages included), as runs of one extent
 * each; or -1 when memory is short: then only the block's missing pages, one page per extent.
 *
 * @param s The pool and device now.
 * @returns The chunk in pages (at least the block's pages), or -1 for page granularity.
 */
export function adaptiveChunkPages(s: GrowthState): number {
  const P = s.pageBytes;
  if (isShort(s)) return -1;
  const room = roomBytes(s);
  const floor = lowWaterBytes(s);
  // Until the pool holds a smallest chunk, as the default pool: nothing mapped ahead, one page per
  // extent (pages that can move), unless the block alone is a chunk or more (one extent of its own).
  // A pool that stays small (a few MiB, multi_stream's 13 MiB over three streams) makes a handful
  // of growths anyway, and 16 MiB chunks or multi-page extents it cannot move would double or
  // triple what it holds.
  if (s.heldPages * P < MIN_CHUNK_BYTES) return s.blockPages * P >= MIN_CHUNK_BYTES ? s.blockPages : -1;
  const chunk = Math.min(Math.floor(MAX_CHUNK_BYTES / P), Math.max(Math.ceil(MIN_CHUNK_BYTES / P), Math.ceil(s.heldPages * CHUNK_FRACTION)));
  // Near either threshold the chunk shrinks to what keeps both, down to the block itself.
  const fits = Math.min(Math.floor((room - floor) / P), Math.floor((room - HELD_FRACTION * s.heldPages * P) / ((1 + HELD_FRACTION) * P)));
  return Math.max(s.blockPages, Math.min(chunk, fits));
}

/**
 * Pages a growth may create past the pool's high-water mark instead of moving cached pages there:
 * under pressure (where `adaptiveChunkPages` gives -1 for the device's or the maximum's sake), all
 * the room left; with plenty of memory, none.
 *
 * Why: at one page an extent, a cached page moved to where a block needs it costs a cuMemUnmap
 * where its place holds another page's old mapping, a cuMemMap and a cuMemSetAccess (about 58 us
 * on an H100), every time a loop needs it there; a page created costs about as much once, then
 * stays. So while the device still has free memory, the pool creates, as every caching allocator
 * does (CUDA's pool and PyTorch's grow until the driver refuses), and it moves pages only once
 * the memory a ballast, another process or the maximum leaves is all held: a move is what lets a
 * workload fit, not what saves memory. With plenty of memory, growth maps chunks ahead, and a small
 * pool moves pages to keep its peak near its live bytes (multi_stream's 13 MiB over three streams).
 * Measured with `vram replay --repeat 4 --headroom H` (H100, one call, 2026-11-26):
 * resnet50_train at 3% went from 359 driver calls in passes 2-4 to none and its first pass from
 * 61.1 to 46.0 us/op; bert_dynamic_infer's first pass from 20.0 to 9.9 us/op at 3% and 16.1 to 4.8
 * at 10%. The page budget of the pool is unchanged: it reads the same free memory.
 *
 * @param s The pool and device now.
 * @returns Pages (>= 0).
 */
export function pressurePages(s: GrowthState): number {
  if (!isShort(s)) return 0;
  return Math.max(0, Math.floor(roomBytes(s) / s.pageBytes));
}

/** Bytes the pool may still create: the device's free memory, within the maximum. */
function roomBytes(s: GrowthState): number {
  return Math.min(s.freeBytes, s.maximumBytes - s.heldPages * s.pageBytes);
}

/**
 * True when the growth would leave less than a quarter of the device (or the maximum) free, or
 * less than half of what the pool would then hold: memory is short, growth goes one page an extent.
 */
function isShort(s: GrowthState): boolean {
  const P = s.pageBytes;
  const after = roomBytes(s) - s.blockPages * P;
  return after < lowWaterBytes(s) || after < HELD_FRACTION * (s.heldPages + s.blockPages) * P;
}

/** The free memory growth keeps with room: a quarter of the device, or of the maximum. */
function lowWaterBytes(s: GrowthState): number {
  return Math.min(s.totalBytes, s.maximumBytes) * LOW_WATER_FRACTION;
}
