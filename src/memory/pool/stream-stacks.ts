/**
 * Stream-ordered free stacks of equal-sized blocks (for FixedSizeResource): a block freed on a
 * stream is reusable at once on that stream; another stream takes a stream's whole stack after an
 * event recorded there and a wait on it (no host synchronisation, no event per free).
 */
import { EventFlags } from '../../backend/backend.js';
import type { HeapEvents } from './block-heap.js';

/** Free blocks of one stream. */
interface StreamStack {
  readonly stream: number;
  readonly ptrs: number[];
  event: number;
}

/** Per-stream stacks of free block addresses. */
export class StreamStacks {
  private readonly stacks: StreamStack[] = [];
  private last: StreamStack | undefined;
  /** Times a stream took another's blocks. */
  steals = 0;

  constructor(private readonly events: HeapEvents) {}

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
      if (other.event === 0) other.event = this.events.eventCreate(EventFlags.DISABLE_TIMING);
      this.events.eventRecord(other.event, other.stream);
      this.events.streamWaitEvent(own.stream, other.event);
      this.steals++;
      for (const p of other.ptrs) own.ptrs.push(p);
      other.ptrs.length = 0;
      return own.ptrs.pop()!;
    }
    return -1;
  }

  /** Removes the blocks for which `drop` is true; returns them with their streams. */
  remove(drop: (ptr: number) => boolean): Array<{ ptr: number; stream: number }> {
    const out: Array<{ ptr: number; stream: number }> = [];
    for (const s of this.stacks) {
      const keep = s.ptrs.filter((p) => {
        if (!drop(p)) return true;
        out.push({ ptr: p, stream: s.stream });
        return false;
      });
      s.ptrs.length = 0;
      s.ptrs.push(...keep);
    }
    return out;
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

  /** Destroys the events. */
  destroy(): void {
    for (const s of this.stacks) {
      if (s.event !== 0) this.events.eventDestroy(s.event);
      s.event = 0;
      s.ptrs.length = 0;
    }
  }

  private stackFor(stream: number): StreamStack {
    if (this.last !== undefined && this.last.stream === stream) return this.last;
    let s = this.stacks.find((x) => x.stream === stream);
    if (s === undefined) {
      s = { stream, ptrs: [], event: 0 };
      this.stacks.push(s);
    }
    this.last = s;
    return s;
  }
}
