/**
 * Where emulated memory keeps its bytes. Device memory is a `LazyStore`: 64 KiB pages allocated on
 * first write, untouched pages read as zeros, so a large allocation that is never written costs
 * nothing. Host-accessible memory (pinned, managed, registered JavaScript memory) is an
 * `EagerStore` over a real ArrayBuffer, so views of it are zero-copy.
 */

/** Size of one lazily allocated page of device memory. */
export const PAGE_SIZE = 64 * 1024;

/** Bytes behind an allocation, addressed by offset. */
export type Store = LazyStore | EagerStore;

/** A fill pattern: one element of 1, 2 or 4 bytes, little-endian. */
export function fillPattern(value: number, elementBytes: 1 | 2 | 4): Uint8Array {
  const pattern = new Uint8Array(elementBytes);
  for (let i = 0; i < elementBytes; i++) pattern[i] = (value >>> (8 * i)) & 0xff;
  return pattern;
}

/** Fills `target` with repeats of `pattern` (starting at the pattern's first byte). */
function fillWith(target: Uint8Array, pattern: Uint8Array): void {
  if (pattern.length === 1 || pattern.every((b) => b === pattern[0])) {
    target.fill(pattern[0] ?? 0);
    return;
  }
  const n = target.length;
  let filled = Math.min(pattern.length, n);
  target.set(pattern.subarray(0, filled));
  while (filled < n) {
    const chunk = Math.min(filled, n - filled);
    target.copyWithin(filled, 0, chunk);
    filled += chunk;
  }
}

/**
 * Walks [offset, offset + length) page by page: `visit` gets the page index, the offset in that
 * page, the bytes already walked and the chunk's length. Every LazyStore operation is this walk.
 */
function forEachPage(offset: number, length: number, visit: (index: number, inPage: number, done: number, chunk: number) => void): void {
  let done = 0;
  while (done < length) {
    const at = offset + done;
    const index = Math.floor(at / PAGE_SIZE);
    const inPage = at - index * PAGE_SIZE;
    const chunk = Math.min(PAGE_SIZE - inPage, length - done);
    visit(index, inPage, done, chunk);
    done += chunk;
  }
}

/** Memory backed page by page on first write; reads of untouched pages are zeros. */
export class LazyStore {
  /** Discriminates the two store kinds. */
  readonly kind = 'lazy' as const;
  private readonly pages = new Map<number, Uint8Array>();
  /**
   * Set once the memory is exported to other processes (emulated cuIpcGetMemHandle): from then on
   * every operation acts on this shared mapping instead of the pages, so work already queued on a
   * stream (which holds this store) lands where the importers see it.
   */
  private shared: Uint8Array | undefined;
  /** Pages served from another process's view (`sharePages`): zero fills keep them. */
  private readonly sharedPages = new Set<number>();

  constructor(
    /** Addressable size in bytes. */
    readonly size: number,
  ) {}

  /** How many pages have been backed (written); for tests of lazy backing. */
  get backedPages(): number {
    return this.pages.size;
  }

  /**
   * Moves the contents into `memory` (zero-filled, at least `size` bytes) and serves every later
   * operation from it; `undefined` detaches it again (after the mapping is gone: reads are zeros).
   */
  shareInto(memory: Uint8Array | undefined): void {
    if (memory !== undefined) {
      for (const [index, page] of this.pages) memory.set(page.subarray(0, Math.min(PAGE_SIZE, this.size - index * PAGE_SIZE)), index * PAGE_SIZE);
    }
    this.pages.clear();
    this.shared = memory;
  }

  /** Copies [offset, offset + dst.length) into `dst`. */
  read(offset: number, dst: Uint8Array): void {
    const shared = this.shared;
    if (shared !== undefined) {
      dst.set(shared.subarray(offset, offset + dst.length));
      return;
    }
    forEachPage(offset, dst.length, (index, inPage, done, chunk) => {
      const page = this.pages.get(index);
      if (page === undefined) dst.fill(0, done, done + chunk);
      else dst.set(page.subarray(inPage, inPage + chunk), done);
    });
  }

  /** Copies `src` to [offset, offset + src.length), backing the pages it touches. */
  write(offset: number, src: Uint8Array): void {
    if (this.shared !== undefined) {
      this.shared.set(src, offset);
      return;
    }
    forEachPage(offset, src.length, (index, inPage, done, chunk) => {
      this.page(index).set(src.subarray(done, done + chunk), inPage);
    });
  }

  /** Fills [offset, offset + length) with `pattern`; zero fills never back a page. */
  fill(offset: number, length: number, pattern: Uint8Array): void {
    if (this.shared !== undefined) {
      fillWith(this.shared.subarray(offset, offset + length), pattern);
      return;
    }
    const zero = pattern.every((b) => b === 0);
    forEachPage(offset, length, (index, inPage, _done, chunk) => {
      if (zero) {
        const page = this.pages.get(index);
        if (page !== undefined) {
          if (chunk === PAGE_SIZE && !this.sharedPages.has(index)) this.pages.delete(index);
          else page.fill(0, inPage, inPage + chunk);
        }
      } else {
        // Chunks start at element boundaries: fills are element-aligned and pages are 4-aligned.
        fillWith(this.page(index).subarray(inPage, inPage + chunk), pattern);
      }
    });
  }

  /** Copies [srcOffset, +length) of this store to `dst` at `dstOffset`, page by page. */
  copyTo(srcOffset: number, dst: LazyStore, dstOffset: number, length: number): void {
    if (this.shared !== undefined) {
      dst.write(dstOffset, this.shared.subarray(srcOffset, srcOffset + length));
      return;
    }
    const zero = new Uint8Array(1);
    forEachPage(srcOffset, length, (index, inPage, done, chunk) => {
      const page = this.pages.get(index);
      if (page === undefined) dst.fill(dstOffset + done, chunk, zero);
      else dst.write(dstOffset + done, page.subarray(inPage, inPage + chunk));
    });
  }

  /**
   * Moves the pages under [offset, offset + length) into `memory` (zero-filled, the whole pages
   * from the first one's start) and serves them from it from now on, the rest of the store staying
   * in its own pages: how one block of an emulated pool is shared with other processes (its
   * neighbours on the boundary pages are shared too, as the driver shares whole pool pages).
   * Returns where `offset` lies in `memory`.
   */
  sharePages(offset: number, length: number, memory: Uint8Array): number {
    const first = Math.floor(offset / PAGE_SIZE);
    const end = Math.ceil((offset + length) / PAGE_SIZE);
    for (let index = first; index < end; index++) {
      const view = memory.subarray((index - first) * PAGE_SIZE, (index - first + 1) * PAGE_SIZE);
      const page = this.pages.get(index);
      if (page !== undefined) view.set(page);
      this.pages.set(index, view);
      this.sharedPages.add(index);
    }
    return offset - first * PAGE_SIZE;
  }

  /**
   * The ArrayBuffer whose first byte is the shared page at `offset` (a page start) and which holds
   * at least `bytes`: the memory `sharePages` serves that range from. Undefined otherwise.
   */
  hostBuffer(offset: number, bytes: number): ArrayBuffer | undefined {
    if (offset % PAGE_SIZE !== 0 || !this.sharedPages.has(offset / PAGE_SIZE)) return undefined;
    const page = this.pages.get(offset / PAGE_SIZE);
    if (page === undefined || page.byteOffset !== 0 || !(page.buffer instanceof ArrayBuffer) || page.buffer.byteLength < bytes) return undefined;
    return page.buffer;
  }

  /** Undoes `sharePages` (before the memory is unmapped): the pages get private copies again. */
  unsharePages(offset: number, length: number): void {
    const first = Math.floor(offset / PAGE_SIZE);
    const end = Math.ceil((offset + length) / PAGE_SIZE);
    for (let index = first; index < end; index++) {
      const page = this.pages.get(index);
      if (page !== undefined && this.sharedPages.delete(index)) this.pages.set(index, page.slice());
    }
  }

  private page(index: number): Uint8Array {
    let page = this.pages.get(index);
    if (page === undefined) {
      page = new Uint8Array(PAGE_SIZE);
      this.pages.set(index, page);
    }
    return page;
  }
}

/** Memory backed at once by (a range of) a real ArrayBuffer. */
export class EagerStore {
  /** Discriminates the two store kinds. */
  readonly kind = 'eager' as const;
  private readonly bytes: Uint8Array;

  constructor(
    /** The buffer holding the bytes (owned, or the caller's for registered memory). */
    readonly buffer: ArrayBufferLike,
    /** Where this store's first byte lies in `buffer`. */
    readonly byteOffset: number,
    /** Addressable size in bytes. */
    readonly size: number,
  ) {
    this.bytes = new Uint8Array(buffer, byteOffset, size);
  }

  /** A zero-copy view of [offset, offset + length). */
  view(offset: number, length: number): Uint8Array {
    return this.bytes.subarray(offset, offset + length);
  }

  /** Copies [offset, offset + dst.length) into `dst`. */
  read(offset: number, dst: Uint8Array): void {
    dst.set(this.bytes.subarray(offset, offset + dst.length));
  }

  /** Copies `src` to [offset, offset + src.length). */
  write(offset: number, src: Uint8Array): void {
    this.bytes.set(src, offset);
  }

  /** Fills [offset, offset + length) with `pattern`. */
  fill(offset: number, length: number, pattern: Uint8Array): void {
    fillWith(this.bytes.subarray(offset, offset + length), pattern);
  }
}

/** Copies `length` bytes between two stores (possibly the same one, possibly overlapping). */
export function copyStore(dst: Store, dstOffset: number, src: Store, srcOffset: number, length: number): void {
  if (length === 0) return;
  if (src.kind === 'eager') {
    // TypedArray#set copies correctly when source and target share a buffer.
    dst.write(dstOffset, src.view(srcOffset, length));
  } else if (dst.kind === 'eager') {
    src.read(srcOffset, dst.view(dstOffset, length));
  } else if (src === dst && srcOffset < dstOffset + length && dstOffset < srcOffset + length) {
    const tmp = new Uint8Array(length);
    src.read(srcOffset, tmp);
    dst.write(dstOffset, tmp);
  } else {
    src.copyTo(srcOffset, dst, dstOffset, length);
  }
}

/** A contiguous piece of an address range: `length` bytes of `store` from `offset`. */
export interface Span {
  readonly store: Store;
  readonly offset: number;
  readonly length: number;
}

/** Copies between two address ranges given as span lists of equal total length. */
export function copySpans(dst: readonly Span[], src: readonly Span[]): void {
  if (dst.length === 1 && src.length === 1) {
    const d = dst[0]!;
    const s = src[0]!;
    copyStore(d.store, d.offset, s.store, s.offset, Math.min(d.length, s.length));
    return;
  }
  let di = 0;
  let si = 0;
  let dDone = 0;
  let sDone = 0;
  while (di < dst.length && si < src.length) {
    const d = dst[di]!;
    const s = src[si]!;
    const chunk = Math.min(d.length - dDone, s.length - sDone);
    copyStore(d.store, d.offset + dDone, s.store, s.offset + sDone, chunk);
    dDone += chunk;
    sDone += chunk;
    if (dDone === d.length) {
      di++;
      dDone = 0;
    }
    if (sDone === s.length) {
      si++;
      sDone = 0;
    }
  }
}
