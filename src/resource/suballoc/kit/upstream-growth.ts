/**
 * Growth from an upstream MemoryResource, RMM style: the pool takes chunks (initialSize first,
 * then max(request, chunkSize) rounded up), its heap splits and merges blocks within a chunk, and
 * chunks that are wholly free again go back upstream on `releaseCached()`.
 */
import { isOutOfMemory } from '../../../errors.js';
import type { MemoryResource } from '../../resource.js';
import type { BlockHeap } from './block-heap.js';
import { LIVE, NIL } from './block-store.js';
import { GRANULE } from './free-list.js';

/** One chunk taken from upstream. */
interface Chunk {
  /** What upstream returned, and its size (given back as is). */
  readonly ptr: number;
  readonly bytes: number;
  /** The heap block at the chunk's first usable address (stable: merges keep the lower block). */
  readonly head: number;
  readonly start: number;
  readonly end: number;
}

/** The chunks a pool holds from its upstream. */
export class UpstreamChunks {
  private readonly chunks: Chunk[] = [];
  /** Bytes held from upstream. */
  reservedBytes = 0;
  /** High-water mark of reservedBytes. */
  peakReservedBytes = 0;

  constructor(
    private readonly upstream: MemoryResource,
    private readonly heap: BlockHeap,
    /** Smallest chunk taken after the first. */
    private readonly chunkSize: number,
    /** Cap on bytes held (Infinity for none). */
    private readonly maximumBytes: number,
  ) {}

  /** The upstream's out-of-memory error behind the last refusal, if it was the upstream's. */
  lastRefusal: unknown = undefined;

  /**
   * Takes a chunk big enough for a block of `size` bytes, usable first on `stream` (-1: taken at
   * creation on the default stream, before any work, so usable on every stream), and adds it to
   * the heap. Returns null when it did, else who refused: `maximum` (the pool's cap) or
   * `upstream` (its out-of-memory error kept in `lastRefusal`); other upstream errors are rethrown.
   */
  grow(size: number, stream: number, preferred = Math.max(size, this.chunkSize)): 'maximum' | 'upstream' | null {
    const slack = this.upstream.alignment >= GRANULE ? 0 : GRANULE;
    const want = Math.ceil((preferred + slack) / (2 * 1024 * 1024)) * 2 * 1024 * 1024;
    const minimum = size + slack;
    let refusal: 'maximum' | 'upstream' = 'maximum';
    for (const bytes of want > minimum ? [want, minimum] : [minimum]) {
      if (this.reservedBytes + bytes > this.maximumBytes) continue;
      let ptr: number;
      try {
        ptr = this.upstream.allocate(bytes, { handle: Math.max(0, stream) });
      } catch (error) {
        if (!isOutOfMemory(error)) throw error;
        refusal = 'upstream';
        this.lastRefusal = error;
        continue;
      }
      // Upstream alignment may be below the pool's granule (host memory); align inside the chunk.
      const start = Math.ceil(ptr / GRANULE) * GRANULE;
      const usable = Math.floor((ptr + bytes - start) / GRANULE) * GRANULE;
      const head = this.heap.addRegion(start, usable, stream);
      this.chunks.push({ ptr, bytes, head, start, end: start + usable });
      this.reservedBytes += bytes;
      if (this.reservedBytes > this.peakReservedBytes) this.peakReservedBytes = this.reservedBytes;
      return null;
    }
    return refusal;
  }

  /** True when `ptr` lies in one of the chunks. */
  contains(ptr: number): boolean {
    return this.chunks.some((c) => ptr >= c.start && ptr < c.end);
  }

  /**
   * Gives every wholly free chunk back to upstream, in stream order: a wholly free chunk is one
   * free block in one stream's lists (blocks merge only within a stream's lists), so it goes back
   * on that stream (StreamOrder.settle: the default stream after a wait, if that stream is gone).
   */
  releaseCached(): number {
    let released = 0;
    const s = this.heap.store;
    for (let k = this.chunks.length - 1; k >= 0; k--) {
      const c = this.chunks[k]!;
      const owner = s.owner[c.head]!;
      if (owner === LIVE || s.next[c.head] !== NIL) continue;
      const stream = this.heap.order.settle(this.heap.lists[owner]!);
      this.heap.removeRegion(c.head);
      this.chunks.splice(k, 1);
      this.upstream.deallocate(c.ptr, c.bytes, { handle: stream });
      this.reservedBytes -= c.bytes;
      released += c.bytes;
    }
    return released;
  }

  /**
   * Gives every chunk back (live blocks included: the pool is being destroyed), on the default
   * stream after it waited for every stream that freed blocks in them.
   */
  destroy(): void {
    this.heap.joinAll(0);
    for (const c of this.chunks.splice(0)) this.upstream.deallocate(c.ptr, c.bytes);
    this.reservedBytes = 0;
  }
}
