/**
 * Stream-ordered free stacks of equal-sized blocks (for FixedSizeResource): a block freed on a
 * stream is reusable at once on that stream; another stream takes a stream's whole stack after
 * `StreamOrder.join` (an event recorded there and a wait on it: no host synchronisation, no event
 * per free). A destroyed stream's stack is retired, its blocks still takeable after its last event.
 */
import { watchStreamDestroy, type StreamWatcher } from '../../../stream.js';
import { StreamOrder, type Lane, type OrderEvents } from '../../stream-order.js';

/** Free blocks of one stream: a Lane with its block addresses. */
export interface StreamStack extends Lane {
  readonly ptrs: number[];
}

/** Per-stream stacks of free block addresses. */
export class StreamStacks implements StreamWatcher {
  private readonly stacks: StreamStack[] = [];
  private last: StreamStack | undefined;
  /** Cross-stream reuse and returns upstream, in stream order. */
  readonly order: StreamOrder;
  private readonly unwatch: () => void;

  constructor(events: OrderEvents) {
    this.order = new StreamOrder(events);
    this.unwatch = watchStreamDestroy(this);
  }

  /** Times a stream took another's blocks. */
  get steals(): number {
    return this.order.joins;
  }

  /** Pushes a free block for `stream`. */
  push(ptr: number, stream: number): void {
    this.stackFor(stream).ptrs.push(ptr);
  }

  /** A free block usable on `stream`, taking another stream's blocks if needed; -1 when none. */
  pop(stream: number): number {
    const own = this.stackFor(stream);
    if (own.ptrs.length > 0) return own.ptrs.pop()!;
    for (const other of this.stacks) {
      if (other === own || other.ptrs.length === 0) continue;
      this.order.join(other, own.stream);
      for (const p of other.ptrs) own.ptrs.push(p);
      other.ptrs.length = 0;
      if (other.retired) this.drop(other);
      return own.ptrs.pop()!;
    }
    return -1;
  }

  /** Removes the blocks for which `drop` is true; returns them with the stacks they were in. */
  remove(drop: (ptr: number) => boolean): Array<{ ptr: number; stack: StreamStack }> {
    const out: Array<{ ptr: number; stack: StreamStack }> = [];
    for (const s of this.stacks) {
      const keep = s.ptrs.filter((p) => {
        if (!drop(p)) return true;
        out.push({ ptr: p, stack: s });
        return false;
      });
      s.ptrs.length = 0;
      s.ptrs.push(...keep);
    }
    return out;
  }

  /** Makes `waiter` wait for every stream that freed blocks here (before memory goes upstream). */
  joinAll(waiter: number): void {
    for (const s of this.stacks) this.order.join(s, waiter);
  }

  /** Number of free blocks. */
  get count(): number {
    let n = 0;
    for (const s of this.stacks) n += s.ptrs.length;
    return n;
  }

  /** True when `ptr` is in some stack (slow; error paths only). */
  has(ptr: number): boolean {
    return this.stacks.some((s) => s.ptrs.includes(ptr));
  }

  /** The stream's stack is retired: its last event recorded, a new stream with the handle gets a new one. */
  streamDestroying(handle: number): void {
    const s = this.stacks.find((x) => x.stream === handle && !x.retired);
    if (s === undefined) return;
    this.order.retire(s);
    if (this.last === s) this.last = undefined;
  }

  /** Destroys the events and stops watching streams. */
  destroy(): void {
    this.unwatch();
    for (const s of this.stacks) {
      this.order.release(s);
      s.ptrs.length = 0;
    }
  }

  /** Forgets an emptied retired stack (its stream is gone: nothing will be pushed to it again). */
  private drop(stack: StreamStack): void {
    this.order.release(stack);
    this.stacks.splice(this.stacks.indexOf(stack), 1);
  }

  private stackFor(stream: number): StreamStack {
    if (this.last !== undefined && this.last.stream === stream) return this.last;
    let s = this.stacks.find((x) => x.stream === stream && !x.retired);
    if (s === undefined) {
      s = { stream, ptrs: [], event: 0, retired: false };
      this.stacks.push(s);
    }
    this.last = s;
    return s;
  }
}
