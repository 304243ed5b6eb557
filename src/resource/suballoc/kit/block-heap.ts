/**
 * A stream-ordered, coalescing best-fit heap over address ranges ("regions"), shared by
 * PoolResource and ArenaResource. It only does arithmetic on addresses: where the memory behind
 * the addresses comes from (an upstream resource, virtual memory pages, a fixed arena) is the
 * caller's business. Each stream has its own free lists (a Lane of StreamOrder); a stream with no
 * fit takes another's blocks after a join, and a heap over a virtual-memory range (`gathering`)
 * gathers the other streams' blocks, one stream after another, before it cuts into the top block,
 * so that a multi-stream loop's layout repeats instead of drifting. A freed block may be parked for
 * its stream's next allocation of the same size (the hit path); `unparkAll` returns them.
 * (Note [Gathering at the top], docs/design/gathering-streams.md)
 */
import type { Counter } from '../../../counter.js';
import { watchStreamDestroy, type StreamWatcher } from '../../../stream.js';
import type { SnapshotBlock } from '../../figures.js';
import { StreamOrder, type OrderEvents } from '../../stream-order.js';
import { BlockStore, LIVE, NIL } from './block-store.js';
import { FreeLists, GRANULE } from './free-list.js';
import { LiveTable } from './live-table.js';

/** Slots of BlockHeap's `figures`. */
const LIVE_BYTES = 0;
const PEAK_LIVE_BYTES = 1;
const LIVE_BLOCK_BYTES = 2;
const TOTAL_BYTES = 3;
const PEAK_LIVE_COUNT = 4;
const TOTAL_COUNT = 5;
const LIVE_COUNT = 6;

/**
 * `requested` of a parked block: it keeps its entry in the live table (so parking and taking it
 * back cost no hash operation), and this marks it free there (a second free is a DoubleFreeError).
 */
export const PARKED = -1;

/** List id of memory no stream has used yet (fresh address space): reusable by any stream. */
export const NEUTRAL = 0;

/** The coalescing, stream-ordered best-fit heap. */
export class BlockHeap implements StreamWatcher {
  /** Block records. */
  readonly store = new BlockStore();
  /** Free lists by id: 0 is NEUTRAL, then one per stream seen. */
  readonly lists: FreeLists[];
  private readonly byStream = new Map<number, FreeLists>();
  private lastStream = Number.NaN;
  private lastLists: FreeLists;
  /** Live blocks by address. */
  readonly live = new LiveTable();
  /**
   * liveBytes, peakLiveBytes and liveBlockBytes. Byte counts pass 2^30 and arrive as doubles (read
   * from Float64Arrays); held in plain fields they would start as small integers and be widened
   * mid-run, which changes the heap's hidden class and throws away every optimized hit path that
   * touches it (seen as a slow first benchmark pass). A Float64Array never changes shape.
   */
  private readonly figures = new Float64Array(7);
  /** Cross-stream reuse, returns upstream and host waits, in stream order. */
  readonly order: StreamOrder;
  private readonly unwatch: () => void;
  /**
   * The list id `take` last took its block from, so the caller's slow path can put that block back
   * exactly where it was (`untake`) when it prefers another placement. Always a small integer.
   */
  private takenFrom = NEUTRAL;
  /** Blocks parked now, over all streams. */
  parkedCount = 0;
  /** Told about each block leaving the park for the lists (the pool uncounts its pages then). */
  onUnpark: ((i: number) => void) | undefined;
  /**
   * Cross-stream reuse gathers (`gather`) rather than steals, and before the top block is cut (see
   * the file's header): set for a virtual-memory pool's range, where cutting into the top is what
   * makes the pool's pages grow.
   */
  private readonly gathering: boolean;

  /** Bytes the callers asked for, summed over live blocks. */
  get liveBytes(): number {
    return this.figures[LIVE_BYTES]!;
  }

  /** High-water mark of liveBytes. */
  get peakLiveBytes(): number {
    return this.figures[PEAK_LIVE_BYTES]!;
  }

  /** Bytes ever handed out (as requested). */
  get totalBytes(): number {
    return this.figures[TOTAL_BYTES]!;
  }

  /** High-water mark of live blocks. */
  get peakLiveCount(): number {
    return this.figures[PEAK_LIVE_COUNT]!;
  }

  /** Blocks ever handed out. */
  get totalCount(): number {
    return this.figures[TOTAL_COUNT]!;
  }

  /** Live bytes (as requested) and live blocks, each as a Counter. */
  counters(): { bytes: Counter; allocations: Counter } {
    const f = this.figures;
    return {
      bytes: { value: f[LIVE_BYTES]!, peak: f[PEAK_LIVE_BYTES]!, total: f[TOTAL_BYTES]! },
      allocations: { value: f[LIVE_COUNT]!, peak: f[PEAK_LIVE_COUNT]!, total: f[TOTAL_COUNT]! },
    };
  }

  /** Starts new high-water marks (live bytes and count) from the current figures. */
  resetPeaks(): void {
    this.figures[PEAK_LIVE_BYTES] = this.figures[LIVE_BYTES]!;
    this.figures[PEAK_LIVE_COUNT] = this.figures[LIVE_COUNT]!;
  }

  /** Live blocks (parked ones are free, though they keep their entry in `live`). */
  get liveCount(): number {
    return this.figures[LIVE_COUNT]!;
  }

  /** Block bytes (rounded sizes) of live blocks. */
  get liveBlockBytes(): number {
    return this.figures[LIVE_BLOCK_BYTES]!;
  }

  /**
   * @param events The driver's event calls, for stream order.
   * @param gathering Gather other streams' free blocks before cutting into the top block, and
   *   instead of stealing one stream's (a virtual-memory pool; see the file's header).
   */
  constructor(events: OrderEvents, gathering = false) {
    this.gathering = gathering;
    const neutral = new FreeLists(NEUTRAL, -1, this.store);
    this.lists = [neutral];
    this.lastLists = neutral;
    this.order = new StreamOrder(events);
    this.unwatch = watchStreamDestroy(this);
  }

  /** How many times a stream took another stream's free blocks. */
  get steals(): number {
    return this.order.joins;
  }

  /**
   * A stream is being destroyed: its lists are retired (their last event recorded now) and a new
   * stream that gets the same handle starts with lists of its own.
   */
  streamDestroying(handle: number): void {
    const l = this.byStream.get(handle);
    if (l === undefined) return;
    if (l.parked !== NIL) this.unpark(l);
    this.order.retire(l);
    this.byStream.delete(handle);
    this.lastStream = Number.NaN;
  }

  /**
   * Makes `waiter` wait for every stream that freed blocks into this heap, so memory may be given
   * back upstream on `waiter` in order (destroy).
   */
  joinAll(waiter: number): void {
    for (let k = NEUTRAL + 1; k < this.lists.length; k++) this.order.join(this.lists[k]!, waiter);
  }

  /** The free lists of `stream`, created on first use. */
  listsFor(stream: number): FreeLists {
    if (stream === this.lastStream) return this.lastLists;
    let l = this.byStream.get(stream);
    if (l === undefined) {
      l = new FreeLists(this.lists.length, stream, this.store);
      this.lists.push(l);
      this.byStream.set(stream, l);
    }
    this.lastStream = stream;
    this.lastLists = l;
    return l;
  }

  /**
   * Adds a region of free address space [start, start + size) and returns its block. `stream` is
   * the stream it may be used on first (-1: any stream, no pending work).
   */
  addRegion(start: number, size: number, stream: number): number {
    const lists = stream < 0 ? this.lists[NEUTRAL]! : this.listsFor(stream);
    const s = this.store;
    const i = s.alloc();
    s.start[i] = start;
    s.size[i] = size;
    s.prev[i] = NIL;
    s.next[i] = NIL;
    s.owner[i] = lists.id;
    lists.insert(i);
    return i;
  }

  /** Removes a wholly free region (its one block `i`) from the heap. */
  removeRegion(i: number): void {
    const s = this.store;
    if (s.owner[i] === LIVE || s.prev[i] !== NIL || s.next[i] !== NIL) {
      throw new Error('internal: removeRegion of a region that is not wholly free');
    }
    this.lists[s.owner[i]!]!.remove(i);
    s.release(i);
  }

  /**
   * Finds and detaches a free block of at least `size` bytes (a multiple of GRANULE) usable on
   * `stream`, aligned to `alignment` (a power of two >= GRANULE), and splits off the rest.
   * Returns the block, not yet live (see `markLive`), or NIL when nothing fits.
   */
  take(size: number, stream: number, alignment = GRANULE): number {
    const need = alignment > GRANULE ? size + alignment - GRANULE : size;
    const own = this.listsFor(stream);
    let i = own.findFit(need);
    // The top block (next NIL) is tested only once a fit is found: a hit elsewhere pays one compare.
    if (i === NIL || (this.store.next[i] === NIL && this.gathering)) i = this.reuseOthers(need, own, i);
    if (i === NIL) i = this.lists[NEUTRAL]!.findFit(need);
    if (i === NIL) return NIL;
    const start = this.store.start[i]!;
    const pad = alignment > GRANULE ? Math.ceil(start / alignment) * alignment - start : 0;
    return this.takeAt(i, pad, size);
  }

  /**
   * Undoes the last `take` (whose block `i` is not yet live): the block goes back to the list it
   * came from and re-merges with the pieces split off it, so the heap is as it was before.
   */
  untake(i: number): void {
    const id = this.takenFrom;
    const lists = this.lists[id]!;
    const s = this.store;
    const n = s.next[i]!;
    if (n !== NIL && s.owner[n] === id) {
      lists.remove(n);
      this.absorbNext(i, n);
    }
    const p = s.prev[i]!;
    if (p !== NIL && s.owner[p] === id) {
      lists.remove(p);
      this.absorbNext(p, i);
      i = p;
    }
    s.owner[i] = id;
    lists.insert(i);
  }

  /**
   * Detaches `size` bytes at `offset` inside free block `i` (best fit's choice, or a placement chosen
   * by the caller); what lies before and after stays free in the same list. Returns the block, not
   * yet live.
   */
  takeAt(i: number, offset: number, size: number): number {
    const s = this.store;
    const owner = s.owner[i]!;
    this.takenFrom = owner;
    const lists = this.lists[owner]!;
    lists.remove(i);
    if (offset > 0) {
      const j = this.split(i, offset);
      s.owner[i] = owner;
      lists.insert(i);
      i = j;
    }
    if (s.size[i]! > size) {
      const j = this.split(i, size);
      s.owner[j] = owner;
      lists.insert(j);
    }
    s.owner[i] = LIVE;
    return i;
  }

  /** Records block `i` as handed out for a request of `bytes`. */
  markLive(i: number, bytes: number): void {
    this.live.set(this.store.start[i]!, i);
    this.count(i, bytes);
  }

  /** Counts block `i` live for a request of `bytes` (the mirror of `uncount`). */
  private count(i: number, bytes: number): void {
    this.store.requested[i] = bytes;
    const f = this.figures;
    f[LIVE_BLOCK_BYTES]! += this.store.size[i]!;
    const live = (f[LIVE_BYTES]! += bytes);
    if (live > f[PEAK_LIVE_BYTES]!) f[PEAK_LIVE_BYTES] = live;
    f[TOTAL_BYTES]! += bytes;
    f[TOTAL_COUNT]! += 1;
    const count = (f[LIVE_COUNT]! += 1);
    if (count > f[PEAK_LIVE_COUNT]!) f[PEAK_LIVE_COUNT] = count;
  }

  /** Forgets live block `i` (before `give`). */
  unmarkLive(i: number): void {
    const s = this.store;
    this.live.delete(s.start[i]!);
    this.uncount(i);
  }

  /** Takes live block `i` out of the live figures. */
  private uncount(i: number): void {
    const s = this.store;
    const f = this.figures;
    f[LIVE_BYTES]! -= s.requested[i]!;
    f[LIVE_BLOCK_BYTES]! -= s.size[i]!;
    f[LIVE_COUNT]! -= 1;
  }

  /**
   * Returns block `i` (detached or live, not in any list) to `stream`'s free lists, merging it
   * with free neighbours of the same stream (or untouched neutral space).
   */
  give(i: number, stream: number): void {
    const lists = this.listsFor(stream);
    const s = this.store;
    const id = lists.id;
    const n = s.next[i]!;
    if (n !== NIL) {
      const o = s.owner[n]!;
      if (o === id || o === NEUTRAL) {
        this.lists[o]!.remove(n);
        this.absorbNext(i, n);
      }
    }
    const p = s.prev[i]!;
    if (p !== NIL) {
      const o = s.owner[p]!;
      if (o === id || o === NEUTRAL) {
        this.lists[o]!.remove(p);
        this.absorbNext(p, i);
        i = p;
      }
    }
    s.owner[i] = id;
    lists.insert(i);
    lists.clock.freed = true;
  }

  /** The free blocks of every stream, parked ones included, for wholesale release and checks. */
  freeBlocks(): number[] {
    const out: number[] = [];
    const s = this.store;
    for (const l of this.lists) {
      for (let c = 0; c < l.heads.length; c++) {
        for (let i = l.heads[c]!; i !== NIL; i = s.fnext[i]!) out.push(i);
      }
      if (l.parked !== NIL) out.push(l.parked);
    }
    return out;
  }

  /**
   * Every block, region by region (each ascending by address, regions by their first address),
   * for `memorySnapshot()`: live, free (with the stream whose lists hold it; null for memory no
   * stream has used) or parked. Walks the live table and the free lists: not for the hot path.
   */
  layout(): SnapshotBlock[][] {
    const s = this.store;
    const parkedBy = new Map<number, number>();
    for (const l of this.lists) if (l.parked !== NIL) parkedBy.set(l.parked, l.stream);
    const regions: SnapshotBlock[][] = [];
    for (const head of new Set([...this.live.values(), ...this.freeBlocks()])) {
      if (s.prev[head] !== NIL) continue;
      const region: SnapshotBlock[] = [];
      for (let i = head; i !== NIL; i = s.next[i]!) {
        const parked = parkedBy.get(i);
        const live = s.owner[i] === LIVE && parked === undefined;
        const stream = live ? null : (parked ?? this.lists[s.owner[i]!]!.stream);
        region.push({
          address: s.start[i]!,
          bytes: s.size[i]!,
          requestedBytes: live ? s.requested[i]! : null,
          state: live ? 'live' : parked === undefined ? 'free' : 'parked',
          stream: stream !== null && stream < 0 ? null : stream,
          stack: null,
        });
      }
      regions.push(region);
    }
    return regions.sort((a, b) => a[0]!.address - b[0]!.address);
  }

  /** Total bytes free: in free lists, and parked. */
  get freeBytes(): number {
    let b = 0;
    for (const l of this.lists) {
      b += l.bytes;
      if (l.parked !== NIL) b += this.store.size[l.parked]!;
    }
    return b;
  }

  /**
   * Frees live block `i` by parking it as `stream`'s parked block: out of the live figures, its
   * `requested` set to PARKED, its entry in `live` kept.
   *
   * @returns False when `stream` has one parked already (then free `i` as usual, with `unmarkLive`).
   */
  park(i: number, stream: number): boolean {
    const l = this.listsFor(stream);
    if (l.parked !== NIL) return false;
    this.uncount(i);
    this.store.requested[i] = PARKED;
    l.parked = i;
    l.clock.freed = true;
    this.parkedCount++;
    return true;
  }

  /**
   * Hands `stream`'s parked block out again, live, for `bytes` when it is exactly `size` bytes
   * (a block of `size`, as `take` would give); else NIL, after giving a parked block of another
   * size back to the lists.
   */
  takeParked(size: number, bytes: number, stream: number): number {
    const l = this.listsFor(stream);
    const i = l.parked;
    if (i === NIL) return NIL;
    if (this.store.size[i] !== size) {
      this.unpark(l);
      return NIL;
    }
    l.parked = NIL;
    this.parkedCount--;
    this.count(i, bytes); // markLive without the live table's insert: the entry stayed
    return i;
  }

  /** Gives every parked block back to its stream's lists (merging it with its free neighbours). */
  unparkAll(): void {
    if (this.parkedCount === 0) return;
    for (const l of this.lists) if (l.parked !== NIL) this.unpark(l);
  }

  /** Gives `l`'s parked block back to `l`. */
  private unpark(l: FreeLists): void {
    const i = l.parked;
    l.parked = NIL;
    this.parkedCount--;
    this.live.delete(this.store.start[i]!);
    this.onUnpark?.(i);
    this.give(i, l.stream);
  }

  /** Destroys the per-stream events and stops watching streams. */
  destroy(): void {
    this.unwatch();
    for (const l of this.lists) this.order.release(l);
  }

  /**
   * Other streams' free blocks for `own`, whose own best fit `i` is NIL or the top block. Gathering
   * (see the file's header): stream after stream, each an event wait, their blocks coalescing with
   * `own`'s, until `own` has a fit below the top; every stream's when none gives one. Else stolen
   * from the first stream that has a fit (`steal`).
   */
  private reuseOthers(size: number, own: FreeLists, i: number): number {
    if (!this.gathering) return this.steal(size, own);
    // Nothing taken, nothing merged: `i` is still own's best fit.
    return this.absorbOthers(own, size) > 0 ? own.findFit(size) : i;
  }

  /**
   * Takes another stream's free blocks when one of them fits: event on that stream, `own` waits
   * on it, then all its free blocks move to `own` (coalescing). Returns a fitting block or NIL.
   */
  private steal(size: number, own: FreeLists): number {
    const lists = this.lists;
    for (let k = 1; k < lists.length; k++) {
      const other = lists[k]!;
      if (other === own) continue;
      // Another stream's parked block is free memory like its listed ones: a stealer sees it.
      if (other.parked !== NIL) this.unpark(other);
      if (other.count === 0 || other.findFit(size) === NIL) continue;
      this.absorb(other, own);
      return own.findFit(size);
    }
    return NIL;
  }

  /**
   * Moves every other stream's free blocks into `stream`'s lists, after `stream` waits on an event
   * of each (stream-ordered, no host wait), so that blocks freed on different streams coalesce.
   * The pool's growth path calls it before it moves pages: free space split between streams'
   * lists may hold a place on mapped pages that no one list holds (CUDA's pool reuses another
   * stream's free blocks the same way, by event dependency).
   *
   * @param stream The allocating stream's handle.
   * @returns The streams whose blocks moved (each an event wait).
   */
  gather(stream: number): number {
    return this.absorbOthers(this.listsFor(stream), 0);
  }

  /**
   * Moves the other streams' free blocks into `own`, stream after stream (`absorb`: an event wait
   * each); with `size` > 0, only until `own` has a fit of `size` below the top block.
   * @returns The streams whose blocks moved.
   */
  private absorbOthers(own: FreeLists, size: number): number {
    const s = this.store;
    let n = 0;
    for (let k = NEUTRAL + 1; k < this.lists.length; k++) {
      const other = this.lists[k]!;
      if (other === own) continue;
      if (other.parked !== NIL) this.unpark(other);
      if (other.count === 0) continue;
      this.absorb(other, own);
      n++;
      if (size === 0) continue;
      const j = own.findFit(size);
      if (j !== NIL && s.next[j] !== NIL) break;
    }
    return n;
  }

  /** `own`'s stream waits on `other`'s event, then takes all of `other`'s free blocks (coalescing). */
  private absorb(other: FreeLists, own: FreeLists): void {
    this.order.join(other, own.stream, own);
    const s = this.store;
    for (let i = other.any(); i !== NIL; i = other.any()) {
      other.remove(i);
      s.owner[i] = LIVE;
      this.give(i, own.stream);
    }
  }

  /** Splits block `i` at `offset`; returns the new block holding the tail (owner unset). */
  private split(i: number, offset: number): number {
    const j = this.store.alloc();
    const s = this.store;
    s.start[j] = s.start[i]! + offset;
    s.size[j] = s.size[i]! - offset;
    s.size[i] = offset;
    const n = s.next[i]!;
    s.next[j] = n;
    s.prev[j] = i;
    s.next[i] = j;
    if (n !== NIL) s.prev[n] = j;
    return j;
  }

  /** Merges block `n` (the next one in address order) into `i`. */
  private absorbNext(i: number, n: number): void {
    const s = this.store;
    s.size[i]! += s.size[n]!;
    const nn = s.next[n]!;
    s.next[i] = nn;
    if (nn !== NIL) s.prev[nn] = i;
    s.release(n);
  }
}
