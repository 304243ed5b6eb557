/**
 * Shared fuzz logic for the sub-allocators: a seeded random sequence of allocate / deallocate /
 * bad-input / releaseCached operations on several streams, checked after every step against a
 * simple model (no two live blocks overlap, alignment holds, the allocator's statistics equal what
 * the model counts, reserved >= live) and, at the end, that everything went back upstream. Used by
 * the fast property tests (thousands of operations) and by `npm run fuzz` (millions).
 */
import type { Backend } from '../../src/backend/backend.js';
import { getBackend } from '../../src/backend/select.js';
import { Device } from '../../src/device.js';
import { DoubleFreeError, InvalidPointerError, OutOfMemoryError } from '../../src/errors.js';
import { ArenaResource } from '../../src/resource/suballoc/arena.js';
import { BinningResource } from '../../src/resource/suballoc/binning.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';
import { FixedSizeResource } from '../../src/resource/suballoc/fixed-size.js';
import { PinnedHostPool } from '../../src/resource/suballoc/pinned-host-pool.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import type { MemoryResource } from '../../src/resource/resource.js';
import type { StreamRef } from '../../src/stream.js';
import { mulberry32 } from '../../src/util/random.js';

/** One allocator under test, with what the model needs to check it. */
export interface Subject {
  readonly resource: MemoryResource;
  /** A request size drawn from this allocator's useful range. */
  size(random: () => number): number;
  /** Live bytes and count as the allocator counts them, when it keeps them. */
  live?(): { bytes: number; count: number };
  /** Bytes held from upstream / driver. */
  reserved?(): number;
  /** Largest request (wrong-size probes stay below it, so they reach the same allocator). */
  readonly maxRequest?: number;
  /** The allocator may run out (a fixed arena): OutOfMemoryError on allocate is then no failure. */
  readonly bounded?: boolean;
  /** Frees what the allocator holds (after all blocks were freed). */
  close(): void;
}

/** How to create each allocator under test. */
export interface SubjectFactory {
  readonly name: string;
  create(backend: Backend): Subject;
}

/** A size drawn log-uniformly from [1, max], sometimes a round number. */
export function logUniform(random: () => number, max: number): number {
  const n = Math.max(1, Math.floor(Math.exp(random() * Math.log(max))));
  return random() < 0.2 ? Math.max(256, Math.ceil(n / 256) * 256) : n;
}

/** The allocators the suite fuzzes. */
export const factories: readonly SubjectFactory[] = [
  {
    name: 'PoolResource (virtual memory)',
    create: () => {
      const pool = new PoolResource({ maximumSize: 512 * 1024 * 1024 });
      return poolSubject(pool, 8 * 1024 * 1024);
    },
  },
  {
    // Adaptive growth: chunks mapped ahead, then one-page extents near the maximum; it may run out.
    name: 'PoolResource (adaptive extents)',
    create: () => {
      const pool = new PoolResource({ maximumSize: 96 * 1024 * 1024, extentSize: 'adaptive' });
      return { ...poolSubject(pool, 8 * 1024 * 1024), bounded: true };
    },
  },
  {
    name: 'PoolResource (upstream chunks)',
    create: () => {
      const pool = new PoolResource({ upstream: new CudaResource(), chunkSize: 4 * 1024 * 1024 });
      return poolSubject(pool, 6 * 1024 * 1024);
    },
  },
  {
    name: 'ArenaResource',
    create: () => {
      const arena = new ArenaResource({ size: 64 * 1024 * 1024 });
      return {
        resource: arena,
        size: (r) => logUniform(r, 2 * 1024 * 1024),
        live: () => ({ bytes: arena.memoryFigures().allocatedBytes.value, count: -1 }),
        bounded: true,
        reserved: () => arena.reservedBytes,
        close: () => arena.destroy(),
      };
    },
  },
  {
    name: 'FixedSizeResource',
    create: () => {
      const fixed = new FixedSizeResource(new CudaResource(), { blockSize: 64 * 1024, blocksToPreallocate: 16 });
      return {
        resource: fixed,
        size: (r) => 1 + Math.floor(r() * 64 * 1024),
        live: () => ({ bytes: -1, count: fixed.liveCount }),
        reserved: () => fixed.reservedBytes,
        close: () => {
          fixed.releaseCached();
          fixed.destroy();
        },
      };
    },
  },
  {
    name: 'BinningResource',
    create: () => {
      const bin = new BinningResource(new CudaResource(), { minSizeExponent: 8, maxSizeExponent: 16 });
      return {
        resource: bin,
        maxRequest: 64 * 1024,
        size: (r) => logUniform(r, 64 * 1024), // within the bins: the upstream (cuMemFree) does not detect double frees
        close: () => {
          bin.releaseCached();
          bin.destroy();
        },
      };
    },
  },
  {
    name: 'PinnedHostPool',
    create: () => {
      const pinned = new PinnedHostPool({ maximumCachedBytes: 8 * 1024 * 1024 });
      return {
        resource: pinned,
        size: (r) => logUniform(r, 1024 * 1024),
        close: () => {
          pinned.releaseCached();
          pinned.destroy();
        },
      };
    },
  },
];

function poolSubject(pool: PoolResource, maxSize: number): Subject {
  return {
    resource: pool,
    size: (r) => logUniform(r, maxSize),
    live: () => {
      const f = pool.memoryFigures();
      return { bytes: f.allocatedBytes.value, count: f.allocations.value };
    },
    reserved: () => pool.reservedBytes,
    close: () => {
      pool.releaseCached();
      pool.destroy();
    },
  };
}

/** A failure, with the seed and step that reproduce it. */
export class FuzzFailure extends Error {
  constructor(
    readonly subject: string,
    readonly seed: number,
    readonly step: number,
    cause: unknown,
  ) {
    super(`${subject}: seed ${seed} failed at step ${step}: ${cause instanceof Error ? (cause.stack ?? cause.message) : String(cause)}`);
    this.name = 'FuzzFailure';
  }
}

interface LiveBlock {
  ptr: number;
  bytes: number;
  stream: StreamRef;
}

/** Options of one run. */
export interface RunOptions {
  readonly seed: number;
  readonly ops: number;
  /** Live blocks at most (frees are forced beyond it). */
  readonly maxLive?: number;
  /** Check every invariant after every step (default true); else every 64 steps. */
  readonly checkEveryStep?: boolean;
}

/**
 * Runs `ops` random operations on a fresh subject and checks the invariants; throws FuzzFailure.
 * Creates its own streams and destroys them after.
 */
export function runModel(factory: SubjectFactory, options: RunOptions): void {
  const backend = getBackend();
  Device.get(0).makeCurrent();
  const before = backend.memGetInfo().free;
  const streams: StreamRef[] = [{ handle: 0 }];
  for (let k = 0; k < 2; k++) streams.push({ handle: backend.streamCreate(0, 0) });
  const random = mulberry32(options.seed);
  const subject = factory.create(backend);
  const mr = subject.resource;
  const maxLive = options.maxLive ?? 64;
  const live: LiveBlock[] = [];
  let liveBytes = 0;
  let step = 0;
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)]!;
  const expectThrow = (what: string, fn: () => void, kinds: Array<new (...a: never[]) => Error>): void => {
    try {
      fn();
    } catch (error) {
      if (kinds.some((k) => error instanceof k)) return;
      throw error;
    }
    throw new Error(`${what} did not throw`);
  };
  try {
    for (step = 0; step < options.ops; step++) {
      const r = random();
      if (live.length < maxLive && (r < 0.52 || live.length === 0)) {
        const bytes = subject.size(random);
        const stream = pick(streams);
        let ptr: number;
        try {
          ptr = mr.allocate(bytes, stream);
        } catch (error) {
          if (subject.bounded === true && error instanceof OutOfMemoryError) {
            check(subject, live, liveBytes);
            continue;
          }
          throw error;
        }
        if (ptr % mr.alignment !== 0) throw new Error(`block 0x${ptr.toString(16)} is not aligned to ${mr.alignment}`);
        insertChecked(live, { ptr, bytes, stream });
        liveBytes += bytes;
      } else if (r < 0.97 || live.length === 0) {
        const k = Math.floor(random() * live.length);
        const b = live[k]!;
        const stream = random() < 0.7 ? b.stream : pick(streams);
        mr.deallocate(b.ptr, b.bytes, stream);
        live.splice(k, 1);
        liveBytes -= b.bytes;
        if (random() < 0.05) {
          expectThrow('double free', () => mr.deallocate(b.ptr, b.bytes, stream), [DoubleFreeError, InvalidPointerError]);
        }
      } else if (r < 0.985) {
        const b = live[Math.floor(random() * live.length)]!;
        const wrong = Math.min(b.bytes + 1 + Math.floor(random() * 4096), subject.maxRequest ?? Infinity);
        if (wrong !== b.bytes) expectThrow('wrong size', () => mr.deallocate(b.ptr, wrong), [InvalidPointerError, RangeError]);
        expectThrow('foreign pointer', () => mr.deallocate(12345 * 4096 + 17, 256), [InvalidPointerError]);
        expectThrow('zero size', () => mr.allocate(0), [RangeError]);
        expectThrow('fractional size', () => mr.allocate(1.5), [RangeError]);
        expectThrow('huge size', () => mr.allocate(2 ** 60), [RangeError]);
      } else {
        mr.releaseCached();
      }
      if (options.checkEveryStep !== false || (step & 63) === 0) check(subject, live, liveBytes);
    }
    for (const b of live.splice(0)) mr.deallocate(b.ptr, b.bytes, b.stream);
    check(subject, live, 0);
    subject.close();
    if (subject.reserved !== undefined && subject.reserved() !== 0) throw new Error(`reserved ${subject.reserved()} bytes after close`);
    for (const s of streams) if (s.handle !== 0) backend.streamDestroy(s.handle);
    backend.contextSynchronize();
    const after = backend.memGetInfo().free;
    // Exact on the emulated device; a real GPU's free figure moves with the driver's own use.
    if (backend.name === 'emulated' && after !== before) throw new Error(`memory not returned: free was ${before} bytes, now ${after}`);
  } catch (error) {
    throw new FuzzFailure(factory.name, options.seed, step, error);
  }
}

/** Inserts a block into the address-sorted live list, checking it overlaps neither neighbour. */
function insertChecked(live: LiveBlock[], b: LiveBlock): void {
  let lo = 0;
  let hi = live.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (live[mid]!.ptr < b.ptr) lo = mid + 1;
    else hi = mid;
  }
  const prev = live[lo - 1];
  const next = live[lo];
  if (prev !== undefined && prev.ptr + prev.bytes > b.ptr)
    throw new Error(`block 0x${b.ptr.toString(16)}+${b.bytes} overlaps 0x${prev.ptr.toString(16)}+${prev.bytes}`);
  if (next !== undefined && b.ptr + b.bytes > next.ptr)
    throw new Error(`block 0x${b.ptr.toString(16)}+${b.bytes} overlaps 0x${next.ptr.toString(16)}+${next.bytes}`);
  live.splice(lo, 0, b);
}

function check(subject: Subject, live: readonly LiveBlock[], liveBytes: number): void {
  if (subject.live !== undefined) {
    const s = subject.live();
    if (s.bytes >= 0 && s.bytes !== liveBytes) throw new Error(`live bytes ${s.bytes}, model counts ${liveBytes}`);
    if (s.count >= 0 && s.count !== live.length) throw new Error(`live count ${s.count}, model counts ${live.length}`);
  }
  if (subject.reserved !== undefined && subject.reserved() < liveBytes) {
    throw new Error(`reserved ${subject.reserved()} < live ${liveBytes}`);
  }
}
