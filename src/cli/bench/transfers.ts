/**
 * Transfer bandwidth rows: pageable (JavaScript ArrayBuffer <-> device, synchronous copies timed
 * with the host clock), pinned and write-combined pinned (async copies on a stream, timed with
 * events, as bench/c/pinned_copy.c does) and device-to-device. Each case allocates what it needs
 * and frees it, so one failing case cannot leak into the next.
 */
import { EventFlags, HostAllocFlags, StreamFlags, type Backend, type Ptr } from '../../backend/backend.js';
import { gbPerSecond, median, nowNs, repeatsFor, type BenchCase, type BenchRow, type BenchSettings } from './common.js';

/** Untimed copies before the timed ones (first-touch page faults, lazy driver set-up). */
const WARMUP = 3;

/** Full-run repeats by size: many for small copies (noisy), fewer for large (each is long). */
export function fullRepeats(bytes: number): number {
  if (bytes <= 1 << 20) return 100;
  if (bytes <= 16 << 20) return 30;
  return 10;
}

/** Times `copy` `repeats` times with the host clock, after a warm-up; returns the median GB/s. */
export function timeHostClock(bytes: number, repeats: number, copy: () => void): number {
  for (let i = 0; i < WARMUP; i++) copy();
  const samples: number[] = [];
  for (let i = 0; i < repeats; i++) {
    const start = nowNs();
    copy();
    samples.push(gbPerSecond(bytes, (nowNs() - start) / 1e9));
  }
  return median(samples);
}

/**
 * Times an async copy on a non-blocking stream with a pair of events around each copy (the
 * device's own clock, no host overhead), after a warm-up; returns the median GB/s.
 */
function timeEvents(backend: Backend, bytes: number, repeats: number, dst: Ptr, src: Ptr): number {
  const stream = backend.streamCreate(StreamFlags.NON_BLOCKING, 0);
  const start = backend.eventCreate(EventFlags.DEFAULT);
  const end = backend.eventCreate(EventFlags.DEFAULT);
  try {
    for (let i = 0; i < WARMUP; i++) backend.memcpyAsync(dst, src, bytes, stream);
    backend.streamSynchronize(stream);
    const samples: number[] = [];
    for (let i = 0; i < repeats; i++) {
      backend.eventRecord(start, stream);
      backend.memcpyAsync(dst, src, bytes, stream);
      backend.eventRecord(end, stream);
      backend.eventSynchronize(end);
      samples.push(gbPerSecond(bytes, backend.eventElapsedTime(start, end) / 1e3));
    }
    return median(samples);
  } finally {
    backend.eventDestroy(end);
    backend.eventDestroy(start);
    backend.streamDestroy(stream);
  }
}

/** Runs `body` with a device allocation of `bytes`, freed afterwards. */
function withDevice<T>(backend: Backend, bytes: number, body: (ptr: Ptr) => T): T {
  const ptr = backend.memAlloc(bytes);
  try {
    return body(ptr);
  } finally {
    backend.memFree(ptr);
  }
}

/** Runs `body` with pinned host memory of `bytes` (cuMemHostAlloc with `flags`), freed afterwards. */
function withPinned<T>(backend: Backend, bytes: number, flags: number, body: (ptr: Ptr) => T): T {
  const ptr = backend.memHostAlloc(bytes, flags);
  try {
    // Touch the pages through a view so the first timed copy measures the copy, not the mapping.
    new Uint8Array(backend.hostView(ptr, bytes)).fill(1);
    return body(ptr);
  } finally {
    backend.memFreeHost(ptr);
  }
}

type Measure = (backend: Backend, bytes: number, repeats: number) => number;

/**
 * The driver's own pageable copies (cuMemcpyHtoD/DtoH from JavaScript memory, what vram's transfer
 * layer replaces above 1 MiB; see pageable.ts) are timed to completion: the driver may return from a pageable H2D copy once the
 * data is staged, so the context is synchronized inside the timed region (a few microseconds,
 * which is the honest cost a caller pays before it may reuse or trust the data).
 */
const MEASURES: readonly (readonly [name: string, measure: Measure])[] = [
  [
    'driver pageable H2D',
    (backend, bytes, repeats) => {
      const host = new Uint8Array(bytes).fill(1);
      return withDevice(backend, bytes, (dev) =>
        timeHostClock(bytes, repeats, () => {
          backend.memcpyFromHost(dev, host, bytes);
          backend.contextSynchronize();
        }),
      );
    },
  ],
  [
    'driver pageable D2H',
    (backend, bytes, repeats) => {
      const host = new Uint8Array(bytes).fill(1);
      return withDevice(backend, bytes, (dev) =>
        timeHostClock(bytes, repeats, () => {
          backend.memcpyToHost(host, dev, bytes);
          backend.contextSynchronize();
        }),
      );
    },
  ],
  [
    'pinned H2D',
    (backend, bytes, repeats) => withPinned(backend, bytes, 0, (host) => withDevice(backend, bytes, (dev) => timeEvents(backend, bytes, repeats, dev, host))),
  ],
  [
    'pinned D2H',
    (backend, bytes, repeats) => withPinned(backend, bytes, 0, (host) => withDevice(backend, bytes, (dev) => timeEvents(backend, bytes, repeats, host, dev))),
  ],
  [
    'write-combined pinned H2D',
    (backend, bytes, repeats) =>
      withPinned(backend, bytes, HostAllocFlags.WRITECOMBINED, (host) => withDevice(backend, bytes, (dev) => timeEvents(backend, bytes, repeats, dev, host))),
  ],
  // D2D counts the bytes copied once (not read + written), like cudaMemcpy-based reports.
  ['D2D', (backend, bytes, repeats) => withDevice(backend, bytes, (src) => withDevice(backend, bytes, (dst) => timeEvents(backend, bytes, repeats, dst, src)))],
];

/** Every transfer case for the sizes asked for. */
export function transferCases(settings: BenchSettings): BenchCase[] {
  const cases: BenchCase[] = [];
  for (const [name, measure] of MEASURES) {
    for (const size of settings.transferSizes) {
      const repeats = repeatsFor(settings, fullRepeats(size));
      cases.push({
        group: 'transfers',
        name,
        size,
        run: (): BenchRow => ({
          group: 'transfers',
          name,
          size,
          unit: 'GB/s',
          repeats,
          value: measure(settings.backend, size, repeats),
        }),
      });
    }
  }
  return cases;
}
