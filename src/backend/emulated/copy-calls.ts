/**
 * The emulated driver's copies and fills: checked when called, run at once (synchronous calls,
 * after all queued work) or in stream order (the Async calls). A synchronous call that the host
 * waits for fails while a wait value holds the work it waits for (see EmulatedState.settle); one
 * between device addresses is queued behind held work instead (EmulatedState.runOnDevice).
 */
import type { Handle, HostMemory, Memcpy2D, Ptr } from '../backend.js';
import { checkCount, hex, invalidValue } from './fail.js';
import { hostBytes } from './host-memory-calls.js';
import type { EmulatedState } from './state.js';
import { copySpans, EagerStore, fillPattern, type Span } from './store.js';

/** Copies and fills of one emulated driver. */
export class CopyCalls {
  constructor(private readonly s: EmulatedState) {}

  /** cuMemcpy: synchronous, after all queued work. */
  memcpy(dst: Ptr, src: Ptr, bytes: number): void {
    this.copyNow(dst, src, bytes, 'cuMemcpy');
  }

  /** cuMemcpyAsync: checked now, runs in stream order. */
  memcpyAsync(dst: Ptr, src: Ptr, bytes: number, stream: Handle): void {
    this.copyInOrder(dst, src, bytes, stream, 'cuMemcpyAsync');
  }

  /** cuMemcpy from JavaScript memory (the other side any memory unified addressing knows); synchronous. */
  memcpyFromHost(dst: Ptr, src: HostMemory, bytes: number): void {
    const call = 'cuMemcpy';
    checkCount(bytes, call, 'bytes');
    const { buffer, byteOffset, byteLength } = hostBytes(src);
    if (bytes > byteLength) invalidValue(call, `${bytes} bytes requested from host memory of ${byteLength}`);
    this.s.settle(call, 'legacy');
    if (bytes === 0) return;
    copySpans(this.s.spans(dst, bytes, true, call), [{ store: new EagerStore(buffer, byteOffset, bytes), offset: 0, length: bytes }]);
  }

  /** cuMemcpy to JavaScript memory (the other side any memory unified addressing knows); synchronous. */
  memcpyToHost(dst: HostMemory, src: Ptr, bytes: number): void {
    const call = 'cuMemcpy';
    checkCount(bytes, call, 'bytes');
    const { buffer, byteOffset, byteLength } = hostBytes(dst);
    if (bytes > byteLength) invalidValue(call, `${bytes} bytes requested into host memory of ${byteLength}`);
    this.s.settle(call, 'legacy');
    if (bytes === 0) return;
    copySpans([{ store: new EagerStore(buffer, byteOffset, bytes), offset: 0, length: bytes }], this.s.spans(src, bytes, false, call));
  }

  /** cuMemcpyPeer: a copy between contexts (no peer access needed). */
  memcpyPeer(dst: Ptr, dstCtx: Handle, src: Ptr, srcCtx: Handle, bytes: number): void {
    const call = 'cuMemcpyPeer';
    this.s.context(dstCtx, call);
    this.s.context(srcCtx, call);
    this.copyNow(dst, src, bytes, call);
  }

  /** cuMemcpyPeerAsync: checked now, runs in stream order. */
  memcpyPeerAsync(dst: Ptr, dstCtx: Handle, src: Ptr, srcCtx: Handle, bytes: number, stream: Handle): void {
    const call = 'cuMemcpyPeerAsync';
    this.s.context(dstCtx, call);
    this.s.context(srcCtx, call);
    this.copyInOrder(dst, src, bytes, stream, call);
  }

  /** cuMemcpy2D: synchronous. */
  memcpy2D(copy: Memcpy2D): void {
    const call = 'cuMemcpy2D';
    const rows = this.rows(copy, call);
    if (rows.length === 0) {
      this.s.settle(call, 'none');
      return;
    }
    this.synchronous(call, [copy.dst, copy.src], () => {
      for (const [d, s] of rows) copySpans(d, s);
    });
  }

  /** cuMemcpy2DAsync: checked now, runs in stream order. */
  memcpy2DAsync(copy: Memcpy2D, stream: Handle): void {
    const call = 'cuMemcpy2DAsync';
    const s = this.s.stream(stream, call);
    const rows = this.rows(copy, call);
    if (rows.length === 0) return;
    this.s.enqueue(
      s,
      () => {
        for (const [d, from] of rows) copySpans(d, from);
      },
      undefined,
      undefined,
      call,
    );
  }

  /** cuMemsetD8/D16/D32: synchronous; `ptr` must be aligned to the element size. */
  memset(ptr: Ptr, value: number, elementBytes: 1 | 2 | 4, count: number): void {
    const call = `cuMemsetD${elementBytes * 8}`;
    const fill = this.fill(ptr, value, elementBytes, count, call);
    if (fill === undefined) this.s.settle(call, 'none');
    else this.synchronous(call, [ptr], fill);
  }

  /** cuMemsetD8/D16/D32Async: checked now, runs in stream order. */
  memsetAsync(ptr: Ptr, value: number, elementBytes: 1 | 2 | 4, count: number, stream: Handle): void {
    const call = `cuMemsetD${elementBytes * 8}Async`;
    const s = this.s.stream(stream, call);
    const fill = this.fill(ptr, value, elementBytes, count, call);
    if (fill !== undefined) this.s.enqueue(s, fill, undefined, undefined, call);
  }

  /** A synchronous copy between addresses, after all queued work (cuMemcpy, cuMemcpyPeer). */
  private copyNow(dst: Ptr, src: Ptr, bytes: number, call: string): void {
    checkCount(bytes, call, 'bytes');
    if (bytes === 0) {
      this.s.settle(call, 'none');
      return;
    }
    const d = this.s.spans(dst, bytes, true, call);
    const from = this.s.spans(src, bytes, false, call);
    this.synchronous(call, [dst, src], () => copySpans(d, from));
  }

  /**
   * Runs a synchronous copy or fill after all queued work. Between device addresses the host
   * does not wait for it, so it is ordered on the legacy stream (and queued there while held
   * work is ahead of it); with host or managed memory involved the host waits, and held work it
   * would wait for fails the call.
   */
  private synchronous(call: string, addresses: readonly Ptr[], run: () => void): void {
    if (addresses.every((a) => this.s.isDeviceMemory(a))) {
      this.s.runOnDevice(run, call);
    } else {
      this.s.settle(call, 'legacy');
      run();
    }
  }

  /** A copy between addresses, checked now and run in stream order (cuMemcpyAsync, cuMemcpyPeerAsync). */
  private copyInOrder(dst: Ptr, src: Ptr, bytes: number, stream: Handle, call: string): void {
    checkCount(bytes, call, 'bytes');
    const s = this.s.stream(stream, call);
    if (bytes === 0) return;
    const d = this.s.spans(dst, bytes, true, call);
    const from = this.s.spans(src, bytes, false, call);
    this.s.enqueue(s, () => copySpans(d, from), undefined, undefined, call);
  }

  private rows(copy: Memcpy2D, call: string): [Span[], Span[]][] {
    const { dst, dstPitch, src, srcPitch, widthBytes, height } = copy;
    checkCount(widthBytes, call, 'widthBytes');
    checkCount(height, call, 'height');
    checkCount(dstPitch, call, 'dstPitch');
    checkCount(srcPitch, call, 'srcPitch');
    if (height > 1 && (dstPitch < widthBytes || srcPitch < widthBytes)) invalidValue(call, 'pitches must be at least the width');
    const rows: [Span[], Span[]][] = [];
    if (widthBytes === 0 || height === 0) return rows;
    for (let r = 0; r < height; r++) {
      rows.push([this.s.spans(dst + r * dstPitch, widthBytes, true, call), this.s.spans(src + r * srcPitch, widthBytes, false, call)]);
    }
    return rows;
  }

  private fill(ptr: Ptr, value: number, elementBytes: 1 | 2 | 4, count: number, call: string): (() => void) | undefined {
    if (elementBytes !== 1 && elementBytes !== 2 && elementBytes !== 4) invalidValue(call, `element size must be 1, 2 or 4, got ${String(elementBytes)}`);
    checkCount(count, call, 'count');
    if (!Number.isInteger(value)) invalidValue(call, `value must be a whole number, got ${value}`);
    if (ptr % elementBytes !== 0) invalidValue(call, `${hex(ptr)} is not aligned to ${elementBytes} bytes`);
    if (count === 0) return undefined;
    const spans = this.s.spans(ptr, count * elementBytes, true, call);
    const pattern = fillPattern(value, elementBytes);
    return () => {
      for (const s of spans) s.store.fill(s.offset, s.length, pattern);
    };
  }
}
