/**
 * The data fuzz: checks that a memory resource never lets two streams' work touch the same bytes
 * out of order, by writing a known byte pattern into every block and reading it back.
 *
 * A run drives one resource (a stack from resources.ts) on several streams: the legacy default
 * stream, one blocking stream and two non-blocking streams. Each step, a seeded PRNG picks one of:
 * - allocate a block (sizes: tiny, multiples of 256, odd, around powers of two, now and then
 *   large) on a random stream and fill it at once with a fresh pattern (cuMemsetD8Async on that
 *   stream; pinned host memory is sometimes written by the host instead, as a staging buffer is);
 * - fill a live block again on its stream;
 * - hand a block to another stream correctly: record an event on its stream, make the other stream
 *   wait on it, fill it there; the other stream owns it from then on;
 * - free a block on its stream, or on another stream after such an event wait;
 * - releaseCached();
 * - now and then, free most live blocks at once and release the cache (so whole chunks fall idle
 *   with work still queued on them);
 * - rarely, destroy a stream (its blocks handed to others first) and create a new one in its place;
 * - rarely, free everything, destroy the stack and build a new one.
 * With `copies` (`runDataFuzzAsync` only), vram buffers take part too, through the copy layer:
 * - a staged asynchronous copy of JavaScript memory into a new buffer from the resource, or out of a
 *   live one, often freed at once while the copy is still in flight (its chunks are queued later,
 *   when the event loop runs, that is, after the next owners' fills: the copy must hold the memory);
 * - a copy from pinned memory into a new buffer on another stream, the buffer then freed on its own
 *   stream without a recordStream (the copy must record its stream);
 * - for a pinned-host resource, a buffer from it read or written by a copy on another stream and
 *   freed at once without naming that stream, the next owner writing it from the host.
 * A copy's stream counts as the stream its memory was freed on (the verification synchronises it
 * last), pending copies are awaited before each verification, and what they delivered is checked.
 * With `nested`, resources nested over the target take part (drawn only when on, like the next two):
 * - a PoolResource, BinningResource or FixedSizeResource made over the target or over another
 *   nested one, blocks allocated from it like the target's, and destroyed at random while blocks
 *   are live: they stay live, written and checked, and its memory may reach no one else before
 *   the last of them is freed. Every allocation, from any resource, is checked against every
 *   live block: two live blocks sharing a byte fail at once.
 * With `readOnly`, a live block is imported read-only (fromPointer's readOnly, DLPack's READ_ONLY,
 * the CUDA Array Interface's data[1], or a re-export of one) and written through one writing path
 * (fill, copies, elementwise, map, zipWith, a reduction's out), into it or a view of it: each must
 * be refused as read-only, and the block is checked unchanged in the next verification.
 * With `overlaps`, a live block is filled with known float32 values and a built-in operation
 * (elementwise, map, zipWith, a strided copy) runs on random views of it, the output usually
 * overlapping an input; after the next synchronisation the block must hold NumPy's result, every
 * input read as if copied first (views.ts), then the block gets a fresh pattern on its stream.
 * Every so often (a random interval) it verifies: every stream is synchronised, then the blocks
 * written since the last verification, a few random others and, every few verifications, every
 * live block are copied to pinned host memory on their stream (host memory is read in place) and
 * every byte must equal the block's last pattern.
 *
 * Why a wrong resource fails here, on the emulated backend too: the emulated device runs a stream's
 * queued work only when someone synchronises (or queries) it, so work queued on a stream that
 * freed a block, and never ordered before the block's next owner, runs whenever that stream is
 * next synchronised. The fuzz remembers which blocks were freed on which stream since the last
 * verification; when a new block overlaps one freed on another stream, the verification
 * synchronises the new owner's stream first and the freeing stream after it, so stale work lands
 * last and shows up as the freeing block's pattern in the new block. A correct resource made the
 * new owner wait for the free (an event), so synchronising the owner first runs the stale work
 * first and the data is right. Other streams are synchronised in random order.
 *
 * A mismatch throws DataFuzzFailure naming the resource, seed and step, the block, what its bytes
 * held instead and which write that pattern came from, and a replay command.
 */
import { Buffer } from 'node:buffer';
import type { Backend, Ptr } from '../../src/backend/backend.js';
import { getBackend } from '../../src/backend/select.js';
import { DeviceArray } from '../../src/array/device-array.js';
import type { SliceSpec } from '../../src/array/layout.js';
import { Device } from '../../src/device.js';
import { OutOfMemoryError, VramStateError } from '../../src/errors.js';
import { fromCudaArrayInterface, toCudaArrayInterface } from '../../src/interop/cuda-array-interface.js';
import { fromDLPack, toDLPack } from '../../src/interop/dlpack.js';
import { elementwise, fill, map, max, sum, zipWith } from '../../src/kernels/ops/index.js';
import { BinningResource } from '../../src/resource/suballoc/binning.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';
import { emptyCache } from '../../src/resource/current.js';
import { FixedSizeResource } from '../../src/resource/suballoc/fixed-size.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { HostBuffer } from '../../src/buffer/host-buffer.js';
import type { MemoryResource } from '../../src/resource/resource.js';
import type { StreamRef } from '../../src/stream.js';
import { configureTransfers, transferSettings } from '../../src/buffer/transfer/transfers.js';
import { Event, Stream } from '../../src/stream.js';
import { mulberry32 } from '../../src/util/random.js';
import { destroyResource, type FuzzTarget, type ResourceFactory, type SharedUpstream } from './resources.js';
import { applyAsIfCopied, drawShape, drawView, type View } from './views.js';

const KiB = 1024;
const MiB = 1024 * 1024;
/** Pinned host memory the verification copies device memory into. */
const STAGING_BYTES = 4 * MiB;

/** Options of one run. */
export interface DataFuzzOptions {
  readonly seed: number;
  /** Steps to run (each one operation). */
  readonly ops: number;
  /** Live blocks at most (default 96). */
  readonly maxLive?: number;
  /** Mean steps between verifications (default 48; each interval is random, 1 to twice this). */
  readonly verifyInterval?: number;
  /** Every this many verifications, read every live block, not only the recent ones (default 8). */
  readonly fullEvery?: number;
  /** Chance per step of destroying the stack and building a new one (default 1/1500). */
  readonly rebuildRate?: number;
  /** How failures say to replay (default: the fuzz runner with --data, --only, --seed, --ops). */
  readonly replay?: (name: string, seed: number, ops: number) => string;
  /** Also copy through vram buffers, freed while in use (see the header; `runDataFuzzAsync` only). */
  readonly copies?: boolean;
  /** Also allocate from resources nested over the target, destroyed at random with blocks live (see the header). */
  readonly nested?: boolean;
  /** Also import live blocks read-only and try every writing path on them (see the header). */
  readonly readOnly?: boolean;
  /** Also run built-in operations whose output overlaps their inputs on live blocks (see the header). */
  readonly overlaps?: boolean;
}

/** Every operation on: what `npm run fuzz -- --full` runs (with `runDataFuzzAsync`). */
export const ALL_OPERATIONS = Object.freeze({ copies: true, nested: true, readOnly: true, overlaps: true } as const);

/** What a run did. */
export interface DataFuzzStats {
  steps: number;
  allocations: number;
  outOfMemory: number;
  frees: number;
  fills: number;
  moves: number;
  releases: number;
  bursts: number;
  rebuilds: number;
  /** Streams destroyed (with blocks cached on them) and replaced by new ones. */
  streamsReplaced: number;
  verifications: number;
  blocksChecked: number;
  bytesChecked: number;
  /** Allocations that overlapped a block freed on another stream since the last verification. */
  crossStreamReuses: number;
  /** Copies through vram buffers (with `copies`), and how many of them had their buffer freed while in use. */
  copies: number;
  freedInUse: number;
  /** Resources nested over the target (with `nested`), how many were destroyed with blocks live, and their blocks. */
  nestedCreated: number;
  nestedDestroyedLive: number;
  nestedBlocks: number;
  /** Writes into read-only imports tried and refused (with `readOnly`). */
  readOnlyRefused: number;
  /** Built-in operations run on views of a block (with `overlaps`), and how many had an input overlapping the output. */
  viewOps: number;
  overlapping: number;
  milliseconds: number;
}

/** A run's failure: the first wrong data, or any error the resource threw. */
export class DataFuzzFailure extends Error {
  constructor(
    readonly resource: string,
    readonly seed: number,
    readonly step: number,
    readonly replay: string,
    /** True when data was wrong (a DataMismatch); false when something threw. */
    readonly mismatch: boolean,
    detail: string,
  ) {
    super(`${resource}: seed ${seed} failed at step ${step}: ${detail}\n  replay: ${replay}`);
    this.name = 'DataFuzzFailure';
  }
}

/** Wrong bytes in a block (the detail of a DataFuzzFailure). */
export class DataMismatch extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'DataMismatch';
  }
}

/** The default replay command: the fuzz runner, data mode, one resource, one seed. */
export function replayCommand(name: string, seed: number, ops: number): string {
  const backend = getBackend().name;
  return `VRAM_BACKEND=${backend} node dist/test/fuzz/run.js --data --only '${name}' --seed ${seed} --ops ${ops}`;
}

/** A request size: tiny, a multiple of 256, odd, around a power of two, medium or (1%) large; at most `max`. */
export function drawSize(random: () => number, max: number): number {
  const u = random();
  let n: number;
  if (u < 0.22) n = 1 + Math.floor(random() * 64);
  else if (u < 0.42) n = 256 * (1 + Math.floor(random() * 64));
  else if (u < 0.62) n = 2 * Math.floor(random() * 32 * KiB) + 1;
  else if (u < 0.84) n = 2 ** (8 + Math.floor(random() * 14)) + Math.floor(random() * 3) - 1;
  else if (u < 0.99) n = Math.floor(Math.exp(random() * Math.log(1 * MiB)));
  else n = MiB + Math.floor(random() * 3 * MiB);
  if (n > max) n = random() < 0.5 ? max : 1 + Math.floor(random() * max);
  return Math.max(1, n);
}

interface Block {
  readonly id: number;
  readonly ptr: Ptr;
  readonly bytes: number;
  /** Index of the stream that owns it now. */
  stream: number;
  /** The byte every one of its bytes must hold. */
  pattern: number;
  /** The verification epoch of its last write (written since the last verification: this epoch). */
  written: number;
  /** The epoch it was last checked in (so a block is checked once per verification). */
  checked: number;
  /** Its place in the live array (-1 once freed). */
  index: number;
  readonly allocatedAt: number;
  readonly allocatedOn: number;
  /** The vram buffer over the block, for blocks the copy operations made; freed through it. */
  readonly owner?: DeviceBuffer;
  /** The nested resource it came from (with `nested`); freed to it. */
  readonly from?: Inner;
}

/** A resource nested over the target (or over another nested one), perhaps destroyed already. */
interface Inner {
  readonly resource: MemoryResource;
  readonly upstream: Inner | undefined;
  readonly maxBytes: number;
  /** The largest request it can serve (what a resource nested over it may ask for). */
  readonly serves: number;
  destroyed: boolean;
  /** Its live blocks, and resources nested over it that are not yet gone. */
  live: number;
  dependents: number;
}

/** The latest write of each pattern value, to say where wrong bytes came from. */
interface Write {
  readonly step: number;
  readonly what: string;
  readonly block: Block;
  readonly stream: number;
  freedAt: number;
  freedOn: number;
}

/** Streams of a run: labels for messages. */
const STREAM_LABELS = ['default', 'blocking', 'nonblocking-1', 'nonblocking-2'];

/**
 * Runs `options.ops` steps on a fresh stack from `factory`; throws DataFuzzFailure on the first
 * wrong byte or error. Creates its own streams, event and staging memory and frees them after.
 */
export function runDataFuzz(factory: ResourceFactory, options: DataFuzzOptions): DataFuzzStats {
  if (options.copies === true) throw new TypeError('runDataFuzz: copies need runDataFuzzAsync (copies settle on the event loop)');
  const run = new DataRun(factory, options, false);
  try {
    run.run();
  } catch (error) {
    throw failure(factory, options, run, error, false);
  } finally {
    run.dispose();
  }
  return run.stats;
}

/**
 * `runDataFuzz` with the event loop running: with `options.copies`, staged asynchronous copies
 * progress while it awaits them before each verification. Prints nothing; the DataFuzzFailure it
 * rejects with names the seed and the replay command.
 *
 * @param factory The stack to fuzz.
 * @param options As `runDataFuzz`, plus `copies`.
 * @returns What the run did.
 * @throws {DataFuzzFailure} On the first wrong byte or error (rejects).
 * @example
 * ```ts
 * await runDataFuzzAsync(poolFactory, { seed: 7, ops: 2000, copies: true });
 * ```
 */
export async function runDataFuzzAsync(factory: ResourceFactory, options: DataFuzzOptions): Promise<DataFuzzStats> {
  const run = new DataRun(factory, options, true);
  const saved = transferSettings();
  // Small chunks, so a copy of a few hundred KiB is queued in several chunks after the call.
  configureTransfers({ chunkBytes: 32 * KiB, depth: 2, registration: { enabled: false } });
  try {
    await run.runAsync();
  } catch (error) {
    throw failure(factory, options, run, error, true);
  } finally {
    await run.settleQuietly();
    run.dispose();
    configureTransfers({ ...saved });
  }
  return run.stats;
}

/**
 * The replay command of a `runDataFuzzAsync` run with some of the operations on: the runner's
 * `--full` when they are all on, else a one-line script that calls `runDataFuzzAsync` with the
 * same target, seed, operations and options.
 *
 * @param name The target's name.
 * @param seed The seed.
 * @param ops The operations.
 * @param options Which operations were on.
 * @returns The shell command.
 */
export function replayAsyncCommand(
  name: string,
  seed: number,
  ops: number,
  options: Pick<DataFuzzOptions, 'copies' | 'nested' | 'readOnly' | 'overlaps'> = ALL_OPERATIONS,
): string {
  const on = { copies: options.copies === true, nested: options.nested === true, readOnly: options.readOnly === true, overlaps: options.overlaps === true };
  if (Object.values(on).every(Boolean)) {
    return `VRAM_BACKEND=${getBackend().name} node dist/test/fuzz/run.js --full --only '${name}' --seed ${seed} --ops ${ops}`;
  }
  const flags = Object.entries(on)
    .filter(([, v]) => v)
    .map(([k]) => `${k}: true`)
    .join(', ');
  const script =
    "const { runDataFuzzAsync } = await import('./dist/test/fuzz/data-fuzz.js'); " +
    "const { resourceFactories } = await import('./dist/test/fuzz/resources.js'); " +
    `await runDataFuzzAsync(resourceFactories.find((f) => f.name === ${JSON.stringify(name)}), { seed: ${seed}, ops: ${ops}${flags === '' ? '' : `, ${flags}`} });`;
  return `VRAM_BACKEND=${getBackend().name} node --input-type=module -e '${script.replaceAll("'", "'\\''")}'`;
}

function failure(factory: ResourceFactory, options: DataFuzzOptions, run: DataRun, error: unknown, async: boolean): DataFuzzFailure {
  const replay =
    options.replay?.(factory.name, options.seed, options.ops) ??
    (async ? replayAsyncCommand(factory.name, options.seed, options.ops, options) : replayCommand(factory.name, options.seed, options.ops));
  const mismatch = error instanceof DataMismatch;
  const detail = mismatch ? error.message : error instanceof Error ? (error.stack ?? error.message) : String(error);
  return new DataFuzzFailure(factory.name, options.seed, run.step, replay, mismatch, detail);
}

class DataRun {
  readonly stats: DataFuzzStats = {
    steps: 0,
    allocations: 0,
    outOfMemory: 0,
    frees: 0,
    fills: 0,
    moves: 0,
    releases: 0,
    bursts: 0,
    rebuilds: 0,
    streamsReplaced: 0,
    verifications: 0,
    blocksChecked: 0,
    bytesChecked: 0,
    crossStreamReuses: 0,
    copies: 0,
    freedInUse: 0,
    nestedCreated: 0,
    nestedDestroyedLive: 0,
    nestedBlocks: 0,
    readOnlyRefused: 0,
    viewOps: 0,
    overlapping: 0,
    milliseconds: 0,
  };
  step = 0;
  private readonly backend: Backend;
  private readonly random: () => number;
  private readonly streams: Stream[] = [];
  /** Stream handles, by index (hot path). */
  private readonly handles: number[] = [];
  private readonly refs: StreamRef[] = [];
  private event: Event | undefined;
  private staging: Ptr = 0;
  private stagingView: Uint8Array = new Uint8Array(0);
  private target: FuzzTarget | undefined;
  /** The factory's upstream shared by every stack of the run, if it has one. */
  private shared: SharedUpstream | undefined;
  /** True once the current target was closed. */
  private closed = true;
  private mr!: MemoryResource;
  private host = false;
  /** False once hostView failed for this target's memory (then it is copied like device memory). */
  private hostViewWorks = true;
  private readonly live: Block[] = [];
  private nextId = 0;
  private pattern: number;
  private epoch = 1;
  private readonly dirty: Block[] = [];
  private readonly writes: (Write | undefined)[] = new Array<Write | undefined>(256).fill(undefined);
  /** Blocks freed since the last verification: address, end, stream. */
  private freedStart: number[] = [];
  private freedEnd: number[] = [];
  private freedStream: number[] = [];
  /** drainAfter[a]: bit s set when stream s must be synchronised after stream a. */
  private readonly drainAfter: number[];
  private nextVerify = 0;
  private verifyCount = 0;
  private freeBefore = 0;
  private readonly maxLive: number;
  /**
   * Live blocks the current phase aims at (up to maxLive): redrawn now and then, so phases of few
   * live blocks leave whole chunks idle and growth, release and regrowth happen often.
   */
  private liveCap: number;
  private readonly interval: number;
  private readonly fullEvery: number;
  private readonly rebuildRate: number;
  /** Copy operations on (`options.copies`). */
  private readonly copying: boolean;
  /** Copies in flight, each checking what it delivered once settled. */
  private pending: Promise<void>[] = [];
  /** Checks to run after the next verification's synchronisation, and what to free after them. */
  private readonly afterDrain: (() => void)[] = [];
  /** Device memory the pinned-host copies use, straight from the driver (so the run's free-memory check stays exact). */
  private readonly scratch = new CudaResource(0);
  /** The operations of `nested`, `readOnly` and `overlaps`, by which are on. */
  private readonly extras: (() => void)[] = [];
  private readonly nested: boolean;
  /** Resources nested over the target, oldest first (with `nested`). */
  private inners: Inner[] = [];

  constructor(
    private readonly factory: ResourceFactory,
    private readonly options: DataFuzzOptions,
    private readonly async: boolean,
  ) {
    if (!Number.isInteger(options.seed) || options.seed < 0 || options.seed > 0xffffffff) {
      throw new RangeError(`seed must be a whole number from 0 to 2^32-1, got ${options.seed}`);
    }
    if (!Number.isInteger(options.ops) || options.ops < 0) throw new RangeError(`ops must be a whole number, got ${options.ops}`);
    this.backend = getBackend();
    this.random = mulberry32(options.seed);
    this.pattern = 1 + (options.seed % 255);
    this.maxLive = options.maxLive ?? 96;
    this.liveCap = this.maxLive;
    this.interval = options.verifyInterval ?? 48;
    this.fullEvery = options.fullEvery ?? 8;
    this.rebuildRate = options.rebuildRate ?? 1 / 1500;
    this.drainAfter = new Array<number>(STREAM_LABELS.length).fill(0);
    this.copying = options.copies === true;
    this.nested = options.nested === true;
    if (this.nested) this.extras.push(() => this.nestedStep());
    if (options.readOnly === true) this.extras.push(() => this.readOnlyWrite());
    if (options.overlaps === true) this.extras.push(() => this.overlapOp());
  }

  run(): void {
    const t0 = performance.now();
    this.begin();
    for (this.step = 0; this.step < this.options.ops; this.step++) {
      this.operate()?.();
      if (this.step >= this.nextVerify) this.verify(this.verifyCount % this.fullEvery === this.fullEvery - 1);
    }
    this.end();
    this.stats.milliseconds = performance.now() - t0;
  }

  /** `run` with pending copies awaited before each verification and each step that needs none in flight. */
  async runAsync(): Promise<void> {
    const t0 = performance.now();
    this.begin();
    for (this.step = 0; this.step < this.options.ops; this.step++) {
      const later = this.operate();
      if (later !== undefined) {
        await this.settle();
        later();
      }
      if (this.step >= this.nextVerify) {
        await this.settle();
        this.verify(this.verifyCount % this.fullEvery === this.fullEvery - 1);
      }
    }
    await this.settle();
    this.end();
    this.stats.milliseconds = performance.now() - t0;
  }

  /** Awaits the copies in flight (they check what they delivered). */
  private async settle(): Promise<void> {
    while (this.pending.length > 0) {
      const batch = this.pending;
      this.pending = [];
      await Promise.all(batch);
    }
  }

  /** After a failure: lets the copies in flight end, ignoring their errors, before `dispose`. */
  async settleQuietly(): Promise<void> {
    await Promise.allSettled(this.pending);
    this.pending = [];
  }

  private begin(): void {
    const b = this.backend;
    const device = Device.get(0);
    device.makeCurrent();
    if (this.options.overlaps === true) emptyCache(0);
    b.contextSynchronize();
    this.freeBefore = b.memGetInfo().free;
    this.streams.push(
      Stream.default(device),
      Stream.create({ device }),
      Stream.create({ device, nonBlocking: true }),
      Stream.create({ device, nonBlocking: true }),
    );
    for (const s of this.streams) {
      this.handles.push(s.handle);
      this.refs.push(s);
    }
    this.event = Event.create({ device, timing: false });
    this.staging = b.memHostAlloc(STAGING_BYTES, 0);
    this.stagingView = new Uint8Array(b.hostView(this.staging, STAGING_BYTES), 0, STAGING_BYTES);
    this.shared = this.factory.shared?.();
    this.build();
    this.scheduleVerify();
  }

  private end(): void {
    this.stats.steps = this.step;
    this.finish();
  }

  /**
   * One step. A step that must not run with copies in flight (destroying a stream or the stack)
   * is returned instead, for the caller to run once they have settled.
   */
  private operate(): (() => void) | undefined {
    const r = this.random;
    const live = this.live;
    const u = r();
    if (live.length === 0 || (u < 0.36 && live.length < this.liveCap)) this.allocate();
    else if (u < 0.36) this.free(live[Math.floor(r() * live.length)]!, false);
    else if (u < 0.52) this.refill(live[Math.floor(r() * live.length)]!);
    else if (u < 0.6) this.move(live[Math.floor(r() * live.length)]!);
    else if (u < 0.88) this.free(live[Math.floor(r() * live.length)]!, false);
    else if (u < 0.94) this.free(live[Math.floor(r() * live.length)]!, true);
    else if (u < 0.945) this.releaseCached();
    else if (u < 0.947) this.freeBurst();
    else if (u < 0.9475) return () => this.replaceStream();
    else if (u < 0.9475 + this.rebuildRate) return () => this.rebuild();
    else if (this.copying && u >= 0.97) this.copy();
    // Drawn only when one of them is on, so runs without them keep their seeds' meaning.
    else if (this.extras.length > 0 && u >= 0.95) this.extras[Math.floor(r() * this.extras.length)]!();
    else if (live.length < this.liveCap) this.allocate();
    else this.free(live[Math.floor(r() * live.length)]!, false);
    return undefined;
  }

  /**
   * Frees what the run created. After a failure, also tries to free the live blocks and close the
   * stack (errors there are ignored: the failure being reported matters more).
   */
  dispose(): void {
    const b = this.backend;
    if (this.target !== undefined && !this.closed) {
      try {
        for (const block of this.live) {
          if (block.owner !== undefined) {
            if (!block.owner.freed) block.owner.free({ stream: this.refs[block.stream]! });
          } else {
            (block.from?.resource ?? this.mr).deallocate(block.ptr, block.bytes, this.refs[block.stream]);
          }
        }
        this.live.length = 0;
        this.destroyInners();
        this.target.close();
      } catch {
        /* see above */
      }
      this.closed = true;
    }
    if (this.shared !== undefined) {
      try {
        this.shared.close();
      } catch {
        /* see above */
      }
      this.shared = undefined;
    }
    try {
      b.contextSynchronize();
    } catch {
      /* see above */
    }
    // After a failure, the checks still queued free what they hold (so the next run in this
    // process starts with the memory it measures; their own failures are ignored, as above).
    for (const check of this.afterDrain.splice(0)) {
      try {
        check();
      } catch {
        /* see above */
      }
    }
    for (const s of this.streams) if (!s.isDefault && !s.destroyed) s.destroy();
    if (this.event !== undefined && !this.event.destroyed) this.event.destroy();
    if (this.staging !== 0) {
      b.memFreeHost(this.staging);
      this.staging = 0;
    }
  }

  private build(): void {
    this.target = this.factory.create(this.shared?.resource);
    this.closed = false;
    this.mr = this.target.resource;
    this.host = this.mr.kind === 'pinned-host';
  }

  /**
   * The next verification: a random interval around `interval` steps, shorter in phases of few
   * live blocks (a stale write is seen only while the block it hits is still live).
   */
  private scheduleVerify(): void {
    const mean = Math.min(this.interval, 2 * this.liveCap);
    this.nextVerify = this.step + 1 + Math.floor(this.random() * 2 * mean);
  }

  private nextPattern(): number {
    this.pattern = this.pattern === 255 ? 1 : this.pattern + 1;
    return this.pattern;
  }

  private otherStream(s: number): number {
    const k = Math.floor(this.random() * (this.handles.length - 1));
    return k >= s ? k + 1 : k;
  }

  /** Writes a new pattern into `block`: on `stream` (memsetD8Async), or by the host when `byHost`. */
  private write(block: Block, stream: number, what: string, byHost: boolean): void {
    const pattern = this.nextPattern();
    if (byHost) {
      const view = this.hostBytes(block);
      if (view !== undefined) view.fill(pattern);
      else this.backend.memsetAsync(block.ptr, pattern, 1, block.bytes, this.handles[stream]!);
    } else {
      this.backend.memsetAsync(block.ptr, pattern, 1, block.bytes, this.handles[stream]!);
    }
    block.pattern = pattern;
    block.stream = stream;
    if (block.written !== this.epoch) {
      block.written = this.epoch;
      this.dirty.push(block);
    }
    this.writes[pattern] = { step: this.step, what, block, stream, freedAt: -1, freedOn: -1 };
    this.stats.fills++;
  }

  /** A zero-copy view of a host block, or undefined when the backend cannot view it in place. */
  private hostBytes(block: Block): Uint8Array | undefined {
    if (!this.hostViewWorks) return undefined;
    try {
      return new Uint8Array(this.backend.hostView(block.ptr, block.bytes), 0, block.bytes);
    } catch {
      this.hostViewWorks = false;
      return undefined;
    }
  }

  private allocate(): void {
    const r = this.random;
    const from = this.nested && this.inners.length > 0 && r() < 0.4 ? this.liveInner() : undefined;
    const bytes = drawSize(r, from?.maxBytes ?? this.target!.maxBytes);
    const s = Math.floor(r() * this.handles.length);
    const byHost = this.host && r() < 0.5;
    // A nested resource (over a block of this one) has its own alignment, which may be less.
    const mr = from?.resource ?? this.mr;
    let ptr: Ptr;
    try {
      ptr = mr.allocate(bytes, this.refs[s]);
    } catch (error) {
      if (!(error instanceof OutOfMemoryError)) throw error;
      this.stats.outOfMemory++;
      if (this.live.length > 0) this.free(this.live[Math.floor(r() * this.live.length)]!, false);
      return;
    }
    if (typeof ptr !== 'number' || ptr % mr.alignment !== 0) {
      throw new DataMismatch(`allocate(${bytes}) returned ${String(ptr)}, not aligned to ${mr.alignment}`);
    }
    this.stats.allocations++;
    this.checkDisjoint(ptr, bytes, from !== undefined ? `${from.resource.describe()} (nested)` : this.mr.describe());
    const block: Block = {
      id: this.nextId++,
      ptr,
      bytes,
      stream: s,
      pattern: 0,
      written: 0,
      checked: 0,
      index: this.live.length,
      allocatedAt: this.step,
      allocatedOn: s,
      from,
    };
    if (from !== undefined) {
      from.live++;
      this.stats.nestedBlocks++;
    }
    this.live.push(block);
    this.noteReuse(ptr, ptr + bytes, s);
    this.write(block, s, byHost ? 'host write after allocate' : 'fill after allocate', byHost);
  }

  /** Records that stream `s` must be drained before any stream that freed memory overlapping [start, end). */
  private noteReuse(start: number, end: number, s: number): void {
    const fs = this.freedStart;
    const fe = this.freedEnd;
    const fo = this.freedStream;
    let crossed = false;
    for (let k = 0; k < fs.length; k++) {
      if (fs[k]! < end && start < fe[k]! && fo[k] !== s) {
        this.drainAfter[s]! |= 1 << fo[k]!;
        crossed = true;
      }
    }
    if (crossed) this.stats.crossStreamReuses++;
  }

  private refill(block: Block): void {
    if (this.host && this.random() < 0.3) {
      // The host may write only after the block's stream finished its work on it.
      this.backend.streamSynchronize(this.handles[block.stream]!);
      this.write(block, block.stream, 'host write', true);
    } else {
      this.write(block, block.stream, 'refill', false);
    }
  }

  /** Orders `to` after everything queued so far on `from` (event record + stream wait). */
  private join(from: number, to: number): void {
    const e = this.event!.handle;
    this.backend.eventRecord(e, this.handles[from]!);
    this.backend.streamWaitEvent(this.handles[to]!, e);
  }

  private move(block: Block): void {
    const t = this.otherStream(block.stream);
    this.join(block.stream, t);
    this.write(block, t, `moved from ${STREAM_LABELS[block.stream]} and filled`, false);
    this.stats.moves++;
  }

  private free(block: Block, elsewhere: boolean): void {
    let s = block.stream;
    if (elsewhere) {
      const t = this.otherStream(s);
      this.join(s, t);
      s = t;
    }
    if (block.owner !== undefined) block.owner.free({ stream: this.refs[s]! });
    else if (block.from !== undefined) this.freeToInner(block.from, block, s);
    else this.mr.deallocate(block.ptr, block.bytes, this.refs[s]);
    const last = this.live.pop()!;
    if (last !== block) {
      this.live[block.index] = last;
      last.index = block.index;
    }
    block.index = -1;
    this.freedStart.push(block.ptr);
    this.freedEnd.push(block.ptr + block.bytes);
    this.freedStream.push(s);
    const w = this.writes[block.pattern];
    if (w !== undefined && w.block === block) {
      w.freedAt = this.step;
      w.freedOn = s;
    }
    this.stats.frees++;
  }

  /** One of the copy operations of the header, for the target's kind of memory. */
  private copy(): void {
    const r = this.random;
    const bytes = Math.min(this.target!.maxBytes, 1 + Math.floor(r() * 256 * KiB));
    const s = Math.floor(r() * this.handles.length);
    const t = this.otherStream(s);
    this.stats.copies++;
    if (this.mr.kind === 'pinned-host') this.copyPooledPinned(bytes, t, r() < 0.5);
    else if (this.mr.kind === 'device') {
      const u = r();
      if (u < 0.4) this.copyStagedIn(bytes, s, r() < 0.6);
      else if (u < 0.7) this.copyStagedOut(r() < 0.8);
      else this.copyPinnedIn(bytes, s, t);
    }
  }

  /** A new vram buffer of `bytes` from the resource on stream `s`, or undefined when it ran out. */
  private newBuffer(bytes: number, s: number): DeviceBuffer | undefined {
    try {
      const buffer = DeviceBuffer.allocate(bytes, { resource: this.mr, stream: this.refs[s]! });
      this.checkDisjoint(buffer.ptr, bytes, this.mr.describe());
      return buffer;
    } catch (error) {
      if (!(error instanceof OutOfMemoryError)) throw error;
      this.stats.outOfMemory++;
      return undefined;
    }
  }

  /** Notes memory freed on `s` while stream `copyStream` may still use it: the verification drains `copyStream` last. */
  private freedUnder(ptr: Ptr, bytes: number, copyStream: number): void {
    this.freedStart.push(ptr);
    this.freedEnd.push(ptr + bytes);
    this.freedStream.push(copyStream);
    this.stats.freedInUse++;
  }

  /**
   * A staged copy of JavaScript memory into a new buffer; freed at once (`freeNow`), its memory
   * must not reach a new owner before the copy's last chunk, else the buffer joins the live blocks
   * once the copy has settled.
   */
  private copyStagedIn(bytes: number, s: number, freeNow: boolean): void {
    const owner = this.newBuffer(bytes, s);
    if (owner === undefined) return;
    const pattern = this.nextPattern();
    const copy = owner.copyFromHostAsync(new Uint8Array(bytes).fill(pattern), { stream: this.refs[s]! });
    const block: Block = {
      id: this.nextId++,
      ptr: owner.ptr,
      bytes,
      stream: s,
      pattern,
      written: 0,
      checked: 0,
      index: -1,
      allocatedAt: this.step,
      allocatedOn: s,
      owner,
    };
    this.writes[pattern] = { step: this.step, what: 'staged copy in', block, stream: s, freedAt: -1, freedOn: -1 };
    if (freeNow) {
      owner.free();
      this.freedUnder(block.ptr, bytes, s);
      this.writes[pattern]!.freedAt = this.step;
      this.writes[pattern]!.freedOn = s;
      this.pending.push(copy);
      return;
    }
    this.pending.push(
      copy.then(() => {
        // Settled before a verification: a live block written in this epoch, checked by it.
        block.index = this.live.length;
        this.live.push(block);
        block.written = this.epoch;
        this.dirty.push(block);
      }),
    );
  }

  /** A staged copy out of a live buffer of the copy operations into JavaScript memory, usually freed at once. */
  private copyStagedOut(freeNow: boolean): void {
    const owned = this.live.filter((b) => b.owner !== undefined);
    if (owned.length === 0) return;
    const block = owned[Math.floor(this.random() * owned.length)]!;
    const out = new Uint8Array(block.bytes);
    const expected = block.pattern;
    const copy = block.owner!.copyToHostAsync(out, { stream: this.refs[block.stream]! });
    // The block must not be written again while the copy runs (its chunks are queued later): free
    // it now, or keep it out of the live blocks until the copy settles.
    const s = block.stream;
    if (freeNow) {
      this.free(block, false);
      this.stats.freedInUse++;
    } else {
      this.unlive(block);
    }
    this.pending.push(
      copy.then(() => {
        if (!allEqual(out, expected)) {
          throw new DataMismatch(
            `a staged copy out of block #${block.id} at 0x${block.ptr.toString(16)} (+${block.bytes}) on stream ` +
              `${STREAM_LABELS[s]}, ${freeNow ? 'freed while it ran' : 'kept'}: expected every byte 0x${expected.toString(16)}, ` +
              `got ${[...new Set(out)]
                .slice(0, 4)
                .map((v) => `0x${v.toString(16)}`)
                .join(', ')}`,
          );
        }
        if (!freeNow) {
          block.index = this.live.length;
          this.live.push(block);
        }
      }),
    );
  }

  /** Takes `block` out of the live blocks without freeing it. */
  private unlive(block: Block): void {
    const last = this.live.pop()!;
    if (last !== block) {
      this.live[block.index] = last;
      last.index = block.index;
    }
    block.index = -1;
  }

  /**
   * A copy from pinned memory into a new buffer on stream `t`, the buffer freed at once on its own
   * stream `s` with no recordStream: the copy must have recorded `t`, or its write lands in the
   * next owner.
   */
  private copyPinnedIn(bytes: number, s: number, t: number): void {
    const owner = this.newBuffer(bytes, s);
    if (owner === undefined) return;
    const source = HostBuffer.allocate(bytes);
    source.view().fill(this.nextPattern());
    // Memory allocated on `s` may still be in use by work queued on `s` before (its last owner's):
    // another stream uses it only after waiting for `s`, as with any stream-ordered allocation.
    this.join(s, t);
    owner.copyFromHost(source, { stream: this.refs[t]! });
    this.freedUnder(owner.ptr, bytes, t);
    owner.free();
    // The source goes once the copy has certainly run (after the next verification's synchronisation).
    this.afterDrain.push(() => source.free());
  }

  /**
   * A buffer from the pinned-host resource read (`read`) or written by a copy on stream `t`, freed
   * at once on no stream: the pool must not lend it to a new owner (whose host writes follow)
   * before the copy. What a read delivered is checked after the next synchronisation.
   */
  private copyPooledPinned(bytes: number, t: number, read: boolean): void {
    let host: HostBuffer;
    try {
      host = HostBuffer.allocate(bytes, { resource: this.mr });
    } catch (error) {
      if (!(error instanceof OutOfMemoryError)) throw error;
      this.stats.outOfMemory++;
      return;
    }
    const device = DeviceBuffer.allocate(bytes, { resource: this.scratch });
    const pattern = this.nextPattern();
    const stream = this.refs[t]!;
    if (read) {
      host.view().fill(pattern);
      device.copyFromHost(host, { stream });
    } else {
      device.memset(pattern, { stream });
      device.copyToHost(host, { stream });
    }
    this.freedUnder(host.ptr, bytes, t);
    host.free();
    const step = this.step;
    this.afterDrain.push(() => {
      try {
        const seen = read ? device.copyToHost(new Uint8Array(bytes)) : undefined;
        if (seen !== undefined && !allEqual(seen, pattern)) {
          throw new DataMismatch(
            `a copy on stream ${STREAM_LABELS[t]} at step ${step} read pooled pinned memory freed under it ` +
              `and read 0x${seen.find((v) => v !== pattern)!.toString(16)} where 0x${pattern.toString(16)} was written`,
          );
        }
      } finally {
        device.free();
      }
    });
  }

  /** Throws DataMismatch when [ptr, ptr + bytes) shares a byte with a live block: two live buffers over one memory. */
  private checkDisjoint(ptr: Ptr, bytes: number, from: string): void {
    for (const b of this.live) {
      if (b.ptr < ptr + bytes && ptr < b.ptr + b.bytes) {
        throw new DataMismatch(
          `${from} handed out 0x${ptr.toString(16)} (+${bytes}) at step ${this.step}, which overlaps live block ` +
            `#${b.id} at 0x${b.ptr.toString(16)} (+${b.bytes}), allocated at step ${b.allocatedAt}` +
            `${b.from !== undefined ? ` from ${b.from.resource.describe()}${b.from.destroyed ? ' (since destroyed)' : ''}` : ''}`,
        );
      }
    }
  }

  /** A nested resource that is not destroyed, at random, or undefined when there is none. */
  private liveInner(): Inner | undefined {
    const open = this.inners.filter((x) => !x.destroyed);
    return open.length === 0 ? undefined : open[Math.floor(this.random() * open.length)];
  }

  /**
   * One step of the nested resources: make one over the target (or over another nested one), or
   * destroy one at random, often with blocks live (they stay live, are written and checked, and
   * its memory must reach no one else before the last of them is freed), or release one's cache.
   */
  private nestedStep(): void {
    const r = this.random;
    const u = r();
    const open = this.inners.filter((x) => !x.destroyed);
    if (open.length === 0 || (u < 0.4 && open.length < 3)) {
      const over = open.length > 0 && r() < 0.3 ? open[Math.floor(r() * open.length)]! : undefined;
      const upstream = over?.resource ?? this.mr;
      // A FixedSizeResource serves its block size only: then only another one, of one block a
      // chunk, fits over it (a pool takes chunks of 2 MiB or more, a binning's bins 2 MiB).
      const limit = over?.serves ?? (this.mr instanceof FixedSizeResource ? this.mr.blockSize : Infinity);
      const kind = limit === Infinity ? Math.floor(r() * 3) : 2;
      let resource: MemoryResource;
      let maxBytes: number;
      let serves = limit;
      try {
        if (kind === 0) {
          resource = new PoolResource({ upstream, chunkSize: 2 * MiB });
          maxBytes = 1 * MiB;
        } else if (kind === 1) {
          resource = new BinningResource(upstream, { minSizeExponent: 8, maxSizeExponent: 14 });
          maxBytes = 256 * KiB;
        } else {
          resource = new FixedSizeResource(upstream, { blockSize: 16 * KiB, blocksToPreallocate: limit >= 32 * KiB ? 2 : 1 });
          maxBytes = 16 * KiB;
          serves = 16 * KiB;
        }
      } catch (error) {
        if (!(error instanceof OutOfMemoryError)) throw error;
        this.stats.outOfMemory++;
        return;
      }
      maxBytes = Math.min(maxBytes, serves, over?.maxBytes ?? this.target!.maxBytes);
      if (over !== undefined) over.dependents++;
      this.inners.push({ resource, upstream: over, maxBytes, serves, destroyed: false, live: 0, dependents: 0 });
      this.stats.nestedCreated++;
    } else if (u < 0.75) {
      // Not one that a resource still open is nested over: that one would still take chunks from it.
      const tops = open.filter((x) => !open.some((y) => y.upstream === x));
      this.destroyInner(tops[Math.floor(r() * tops.length)]!);
    } else {
      const released = open[Math.floor(r() * open.length)]!.resource.releaseCached();
      if (!Number.isInteger(released) || released < 0) throw new Error(`releaseCached() returned ${released}`);
    }
  }

  private destroyInner(inner: Inner): void {
    if (inner.live > 0 || inner.dependents > 0) this.stats.nestedDestroyedLive++;
    destroyResource(inner.resource);
    inner.destroyed = true;
    this.forgetIfGone(inner);
  }

  private freeToInner(inner: Inner, block: Block, s: number): void {
    inner.resource.deallocate(block.ptr, block.bytes, this.refs[s]);
    inner.live--;
    this.forgetIfGone(inner);
  }

  /** Drops a destroyed nested resource once nothing of it is live (and so on down its upstreams). */
  private forgetIfGone(inner: Inner): void {
    if (!inner.destroyed || inner.live > 0 || inner.dependents > 0) return;
    this.inners = this.inners.filter((x) => x !== inner);
    const up = inner.upstream;
    if (up !== undefined) {
      up.dependents--;
      this.forgetIfGone(up);
    }
  }

  /** Destroys every nested resource, newest (the ones over others) first; their blocks were freed. */
  private destroyInners(): void {
    for (const inner of this.inners.slice().reverse()) if (!inner.destroyed) this.destroyInner(inner);
    if (this.inners.length > 0) {
      throw new Error(
        `${this.inners.length} nested resource(s) destroyed with every block freed still hold memory: ` +
          this.inners.map((x) => `${x.resource.describe()} (${x.live} live)`).join(', '),
      );
    }
  }

  /** A live block an array can be made over (device or managed memory), at random, or undefined. */
  private arrayBlock(minBytes: number): Block | undefined {
    const kinds = ['device', 'managed'];
    const fits = this.live.filter((b) => b.bytes >= minBytes && kinds.includes((b.from?.resource ?? this.mr).kind));
    return fits.length === 0 ? undefined : fits[Math.floor(this.random() * fits.length)];
  }

  /**
   * A live block imported read-only (fromPointer's readOnly, DLPack's READ_ONLY, the CUDA Array
   * Interface's data[1], or a re-export of one of these), then a write through one writing path
   * into it or a view of it: each must be refused with a VramStateError, and the block, checked
   * in the next verification, still holds its pattern.
   */
  private readOnlyWrite(): void {
    const r = this.random;
    const block = this.arrayBlock(1);
    if (block === undefined) return;
    const s = block.stream;
    const stream = this.refs[s]!;
    const dtype = block.bytes >= 4 && r() < 0.7 ? 'float32' : 'uint8';
    const n = Math.min(1024, dtype === 'float32' ? block.bytes >> 2 : block.bytes);
    const owned: DeviceArray[] = [];
    const keep = <A extends DeviceArray>(a: A): A => {
      owned.unshift(a);
      return a;
    };
    const writable = keep(DeviceArray.fromPointer(block.ptr, [n], dtype, { stream }));
    const how = Math.floor(r() * 5);
    let ro: DeviceArray;
    if (how === 0) ro = keep(DeviceArray.fromPointer(block.ptr, [n], dtype, { readOnly: true, stream }));
    else if (how === 1) ro = keep(fromDLPack(toDLPack(writable, { readOnly: true })));
    else {
      const cai = toCudaArrayInterface(writable);
      ro = keep(fromCudaArrayInterface({ ...cai, data: [cai.data[0], true] }, { owner: writable, stream }));
      // A re-export must still say read-only.
      if (how === 3) ro = keep(fromDLPack(toDLPack(ro)));
      else if (how === 4) ro = keep(fromCudaArrayInterface(toCudaArrayInterface(ro), { owner: ro, stream }));
    }
    let into = ro;
    const v = r();
    if (n > 1 && v < 0.25) into = ro.slice([null, null, -1]);
    else if (n > 2 && v < 0.5) into = ro.slice([1, null, 2]);
    else if (n % 2 === 0 && v < 0.6) into = ro.reshape(2, n / 2).T;
    const value = 1 + Math.floor(r() * 200);
    const m = into.size;
    const hostData = (): Float32Array | Uint8Array => (dtype === 'float32' ? new Float32Array(m).fill(value) : new Uint8Array(m).fill(value));
    // A one-element view of `into`, for a reduction's output.
    const first = (): DeviceArray => (into.shape.length === 2 ? into.slice(0) : into).slice([0, 1]);
    const writes: ReadonlyArray<readonly [string, () => unknown]> = [
      ['fill()', () => fill(into, value)],
      ['.fill()', () => into.fill(value)],
      ['copyFrom(host)', () => into.copyFrom(hostData())],
      ['copyFrom(itself)', () => into.copyFrom(ro.slice([0, m]).reshape(into.shape))],
      ['elementwise', () => elementwise(`y = ${value}`, { y: into })],
      ['elementwise reading it', () => elementwise('y = x + 1', { x: ro.slice([0, m]).reshape(into.shape), y: into })],
      ['map', () => map(ro.slice([0, m]).reshape(into.shape), 'x + 1', { out: into })],
      ['zipWith', () => zipWith(ro.slice([0, m]).reshape(into.shape), ro.slice([0, m]).reshape(into.shape), 'x + y', { out: into })],
      ['sum', () => sum(ro, { out: first() })],
      ['max', () => max(ro, { out: first() })],
    ];
    const refused = (what: string, error: unknown): void => {
      if (!(error instanceof VramStateError) || !/read-only/.test(error.message)) {
        throw new DataMismatch(
          `a write into block #${block.id} imported read-only (${['fromPointer', 'DLPack', 'CUDA Array Interface', 'DLPack re-export', 'CUDA Array Interface re-export'][how]}) ` +
            `through ${what} at step ${this.step} was not refused as read-only: ${error instanceof Error ? `${error.name}: ${error.message}` : 'it was accepted'}`,
        );
      }
      this.stats.readOnlyRefused++;
    };
    if (this.async && r() < 0.15) {
      // The asynchronous copy must be refused too (its promise rejects).
      this.pending.push(
        into
          .copyFromAsync(hostData(), { stream })
          .then(
            () => refused('copyFromAsync', undefined),
            (error: unknown) => refused('copyFromAsync', error),
          )
          .finally(() => {
            for (const a of owned) a.free();
          }),
      );
    } else {
      const [what, write] = writes[Math.floor(r() * writes.length)]!;
      let outcome: unknown;
      try {
        write();
      } catch (error) {
        outcome = error;
      } finally {
        for (const a of owned) a.free();
      }
      refused(what, outcome);
    }
    // Its bytes must be as they were: check it in the next verification.
    if (block.written !== this.epoch) {
      block.written = this.epoch;
      this.dirty.push(block);
    }
  }

  /**
   * A built-in operation (elementwise, map, zipWith, a strided copy) on random views of a live
   * block filled with known float32 values, its output overlapping its inputs more often than not.
   * What the block holds after it is compared, after the next synchronisation, with NumPy's
   * as-if-copied result (views.ts); then the block gets a fresh pattern on its stream.
   */
  private overlapOp(): void {
    const r = this.random;
    const block = this.arrayBlock(16);
    if (block === undefined) return;
    const b = this.backend;
    const s = block.stream;
    const handle = this.handles[s]!;
    const stream = this.refs[s]!;
    const length = Math.min(1024, block.bytes >> 2);
    const shape = drawShape(r, Math.max(1, length >> 1));
    const op = Math.floor(r() * 4);
    const arity = op === 0 ? 2 : op === 2 ? 2 : 1;
    const output = drawView(r, length, shape);
    const inputs: View[] = [];
    for (let k = 0; k < arity; k++) {
      const v = drawView(r, length, shape);
      if (v !== undefined) inputs.push(v);
    }
    if (output === undefined || inputs.length < arity) return;
    const scalar = op === 0 && r() < 0.4 ? Math.floor(r() * 50) : undefined;
    // The block's bytes, staged in pinned memory: the values before, and after the operation.
    const bytes = length * 4;
    const host = b.memHostAlloc(2 * bytes, 0);
    const view = new Float32Array(b.hostView(host, 2 * bytes), 0, 2 * length);
    const before = view.subarray(0, length);
    for (let i = 0; i < length; i++) before[i] = Math.floor(r() * 1000);
    const expectedOf: Record<number, (x: readonly number[]) => number> = {
      0: (x) => 2 * x[0]! + x[1]!,
      1: (x) => x[0]! + 100,
      2: (x) => x[0]! - x[1]!,
      3: (x) => x[0]!,
    };
    const operands: Array<Int32Array | number> = inputs.map((v) => v.index);
    if (scalar !== undefined) operands[1] = scalar;
    const expected = applyAsIfCopied(before.slice(), operands, output.index, expectedOf[op]!);
    const overlapping = inputs.some((v) => {
      const out = new Set(output.index);
      return v.index.some((k) => out.has(k));
    });
    b.memcpyAsync(block.ptr, host, bytes, handle);
    const base = DeviceArray.fromPointer(block.ptr, [length], 'float32', { stream });
    try {
      const [y, x, w] = [output, ...inputs].map((v) => viewOf(base, v));
      if (op === 0) elementwise('y = x * 2 + w', { x: x!, w: scalar ?? w!, y: y! });
      else if (op === 1) map(x!, 'x + 100', { out: y! });
      else if (op === 2) zipWith(x!, w!, 'x - y', { out: y! });
      else {
        // A synchronous copy is ordered on the legacy default stream, not after the upload queued
        // on the block's stream (a non-blocking one, maybe): wait for that first, as a program must.
        b.streamSynchronize(handle);
        y!.copyFrom(x!);
      }
    } finally {
      base.free();
    }
    b.memcpyAsync(host + bytes, block.ptr, bytes, handle);
    this.stats.viewOps++;
    if (overlapping) this.stats.overlapping++;
    const step = this.step;
    const what =
      `${['elementwise', 'map', 'zipWith', 'copyFrom'][op]} of ${inputs.map(describeView).join(' and ')}${scalar !== undefined ? ` and ${scalar}` : ''} ` +
      `into ${describeView(output)} of block #${block.id} (${length} float32) on stream ${STREAM_LABELS[s]} at step ${step}`;
    this.afterDrain.push(() => {
      const after = view.subarray(length, 2 * length);
      try {
        for (let i = 0; i < length; i++) {
          if (after[i] !== expected[i]) {
            const got = new Uint8Array(after.buffer, after.byteOffset + 4 * i, 4);
            const wrong = after.reduce((n, v, k) => n + (v === expected[k] ? 0 : 1), 0);
            throw new DataMismatch(
              `${what}${overlapping ? ', the output overlapping an input,' : ''} gave element ${i} = ${after[i]}, ` +
                `NumPy's as-if-copied result is ${expected[i]} (it held ${before[i]} before; ${wrong} of ${length} elements wrong)` +
                (allEqual(got, got[0]!) ? `; its bytes are 0x${got[0]!.toString(16)}: ${this.describeWrite(got[0]!)}` : ''),
            );
          }
        }
      } finally {
        b.memFreeHost(host);
      }
    });
    this.write(block, s, `fill after ${what}`, false);
  }

  private releaseCached(): void {
    const released = this.mr.releaseCached();
    if (!Number.isInteger(released) || released < 0) throw new Error(`releaseCached() returned ${released}`);
    this.stats.releases++;
  }

  /**
   * Destroys one of the created streams and puts a new one in its place: its live blocks first go
   * to other streams (an event wait each), while blocks freed on it may still sit in the
   * resource's caches, which must then neither lose them nor use the dead handle.
   */
  private replaceStream(): void {
    const s = 1 + Math.floor(this.random() * (this.streams.length - 1));
    for (const block of this.live) {
      if (block.stream !== s) continue;
      const t = this.otherStream(s);
      this.join(s, t);
      block.stream = t;
    }
    const old = this.streams[s]!;
    old.destroy();
    const fresh = Stream.create({ device: old.device, nonBlocking: old.nonBlocking });
    this.streams[s] = fresh;
    this.handles[s] = fresh.handle;
    this.refs[s] = fresh;
    this.stats.streamsReplaced++;
  }

  /** Verifies every block, frees them all, destroys the stack and builds a new one. */
  private rebuild(): void {
    this.verify(true);
    this.freeAll();
    this.destroyInners();
    if (this.random() < 0.5) this.releaseCached();
    this.closed = true;
    this.target!.close();
    this.build();
    this.stats.rebuilds++;
  }

  /**
   * The boundary of an iteration: frees a random half or more of the live blocks at once, usually
   * releases the cache, and often allocates a burst of new blocks at once. Whole chunks fall idle
   * this way and go back upstream with work still queued on the blocks just freed, and the burst
   * takes memory again before any synchronisation, so memory given back on the wrong stream is
   * handed out while the stale work is still queued.
   */
  private freeBurst(): void {
    const r = this.random;
    const keep = r() * 0.5;
    let freed = 0;
    for (let k = this.live.length - 1; k >= 0; k--) {
      if (k < this.live.length && r() >= keep) {
        this.free(this.live[k]!, r() < 0.2);
        freed++;
      }
    }
    if (r() < 0.7) this.releaseCached();
    if (r() < 0.6) {
      const n = Math.min(1 + Math.floor(r() * (freed + 1)), this.maxLive - this.live.length);
      for (let k = 0; k < n; k++) this.allocate();
      // Look soon, while the new blocks are live.
      this.nextVerify = Math.min(this.nextVerify, this.step + 1 + Math.floor(r() * 8));
    }
    this.stats.bursts++;
  }

  private freeAll(): void {
    while (this.live.length > 0) this.free(this.live[this.live.length - 1]!, this.random() < 0.3);
  }

  private finish(): void {
    this.verify(true);
    this.freeAll();
    this.destroyInners();
    const b = this.backend;
    this.closed = true;
    this.target!.close();
    const shared = this.shared;
    this.shared = undefined;
    shared?.close();
    // The operations' temporary copies came from the device's default resource, which caches them.
    if (this.options.overlaps === true) emptyCache(0);
    b.contextSynchronize();
    // Exact on the emulated device; a real GPU's free figure moves with the driver's own use.
    const after = b.memGetInfo().free;
    if (b.name === 'emulated' && after !== this.freeBefore) {
      throw new Error(`memory not returned after close: free was ${this.freeBefore} bytes, now ${after}`);
    }
  }

  /** Synchronises every stream (adversarial order), then checks the chosen blocks. */
  private verify(full: boolean): void {
    this.drainAll();
    for (const check of this.afterDrain.splice(0)) check();
    const epoch = this.epoch;
    const live = this.live;
    const chosen: Block[] = [];
    if (full) {
      for (const b of live) chosen.push(b);
    } else {
      for (const b of this.dirty) {
        if (b.index >= 0 && b.written === epoch && b.checked !== epoch) {
          b.checked = epoch;
          chosen.push(b);
        }
      }
      for (let k = 0; k < 4 && live.length > 0; k++) {
        const b = live[Math.floor(this.random() * live.length)]!;
        if (b.checked !== epoch) {
          b.checked = epoch;
          chosen.push(b);
        }
      }
    }
    this.check(chosen);
    this.dirty.length = 0;
    this.freedStart.length = 0;
    this.freedEnd.length = 0;
    this.freedStream.length = 0;
    this.epoch++;
    this.verifyCount++;
    this.stats.verifications++;
    if (this.random() < 0.1) {
      const caps = [3, 8, 24, this.maxLive >> 1, this.maxLive, this.maxLive];
      this.liveCap = Math.max(1, Math.min(this.maxLive, caps[Math.floor(this.random() * caps.length)]!));
    }
    this.scheduleVerify();
  }

  /**
   * Synchronises every stream, one at a time: a stream that reused memory freed on another since
   * the last verification goes before that other stream (see the header); the rest in random order.
   */
  private drainAll(): void {
    const n = this.handles.length;
    const after = this.drainAfter;
    let remaining = (1 << n) - 1;
    while (remaining !== 0) {
      let candidates = 0;
      for (let s = 0; s < n; s++) {
        if ((remaining & (1 << s)) === 0) continue;
        let blocked = false;
        for (let a = 0; a < n; a++) {
          if (a !== s && (remaining & (1 << a)) !== 0 && (after[a]! & (1 << s)) !== 0) blocked = true;
        }
        if (!blocked) candidates |= 1 << s;
      }
      if (candidates === 0) candidates = remaining; // a cycle: any order
      let pick = Math.floor(this.random() * popcount(candidates));
      let s = 0;
      for (; s < n; s++) {
        if ((candidates & (1 << s)) !== 0 && pick-- === 0) break;
      }
      this.backend.streamSynchronize(this.handles[s]!);
      remaining &= ~(1 << s);
    }
    after.fill(0);
  }

  /** Reads `blocks` back (in place for host memory, else through the staging buffer) and compares. */
  private check(blocks: readonly Block[]): void {
    const b = this.backend;
    const batch: Array<{ block: Block; at: number; from: number; n: number }> = [];
    let used = 0;
    let streams = 0;
    const flush = (): void => {
      for (let s = 0; s < this.handles.length; s++) if ((streams & (1 << s)) !== 0) b.streamSynchronize(this.handles[s]!);
      for (const x of batch) this.compare(x.block, this.stagingView.subarray(x.at, x.at + x.n), x.from);
      batch.length = 0;
      used = 0;
      streams = 0;
    };
    for (const block of blocks) {
      this.stats.blocksChecked++;
      this.stats.bytesChecked += block.bytes;
      if (this.host) {
        const view = this.hostBytes(block);
        if (view !== undefined) {
          this.compare(block, view, 0);
          continue;
        }
      }
      for (let from = 0; from < block.bytes; from += STAGING_BYTES) {
        const n = Math.min(STAGING_BYTES, block.bytes - from);
        if (used + n > STAGING_BYTES) flush();
        b.memcpyAsync(this.staging + used, block.ptr + from, n, this.handles[block.stream]!);
        batch.push({ block, at: used, from, n });
        streams |= 1 << block.stream;
        used = Math.ceil((used + n) / 256) * 256;
      }
    }
    flush();
  }

  /** Throws DataMismatch unless every byte of `view` (the block's bytes from `from`) is its pattern. */
  private compare(block: Block, view: Uint8Array, from: number): void {
    if (allEqual(view, block.pattern)) return;
    throw new DataMismatch(this.describeMismatch(block, view, from));
  }

  private describeMismatch(block: Block, view: Uint8Array, from: number): string {
    const counts = new Map<number, number>();
    let first = -1;
    let wrong = 0;
    for (let i = 0; i < view.length; i++) {
      const v = view[i]!;
      if (v !== block.pattern) {
        if (first < 0) first = i;
        wrong++;
        counts.set(v, (counts.get(v) ?? 0) + 1);
      }
    }
    const hex = (v: number): string => `0x${v.toString(16).padStart(2, '0')}`;
    const lines = [
      `data mismatch in block #${block.id} at 0x${block.ptr.toString(16)} (+${block.bytes} bytes) ` + `from ${this.mr.describe()}`,
      `  allocated at step ${block.allocatedAt} on stream ${STREAM_LABELS[block.allocatedOn]}, now on ` +
        `${STREAM_LABELS[block.stream]}; expected every byte ${hex(block.pattern)} (${this.describeWrite(block.pattern)})`,
      `  ${wrong} of ${view.length} bytes read${from > 0 ? ` (from offset ${from})` : ''} are wrong, ` + `the first at offset ${from + first}`,
    ];
    const top = [...counts.entries()].sort((a, b) => b[1] - a[1]).slice(0, 3);
    for (const [value, n] of top) lines.push(`  ${n} byte(s) hold ${hex(value)}: ${this.describeWrite(value)}`);
    lines.push(`  verification #${this.stats.verifications + 1}; ${this.live.length} live blocks; ` + `${this.stats.rebuilds} rebuild(s) so far`);
    return lines.join('\n');
  }

  private describeWrite(value: number): string {
    if (value === 0) return 'zero: never written, or memory the resource or driver cleared';
    const w = this.writes[value];
    if (w === undefined) return 'a pattern this run never wrote';
    const blk = w.block;
    const freed =
      w.freedAt >= 0
        ? `freed at step ${w.freedAt} on stream ${STREAM_LABELS[w.freedOn]}`
        : blk.index < 0
          ? 'since freed'
          : blk.pattern === value
            ? 'still live'
            : 'still live, written again since';
    return (
      `last written at step ${w.step} (${w.what}) into block #${blk.id} at 0x${blk.ptr.toString(16)} ` +
      `(+${blk.bytes}) on stream ${STREAM_LABELS[w.stream]}, ${freed}`
    );
  }
}

/** `view` of `base` (a 1-D float32 array over a block), as DeviceArray calls. */
function viewOf(base: DeviceArray, view: View): DeviceArray {
  let a = view.reshape === undefined ? base : base.slice([0, view.reshape[0] * view.reshape[1]]).reshape(view.reshape[0], view.reshape[1]);
  a = a.slice(...view.slices);
  return view.transposed ? a.T : a;
}

function describeView(view: View): string {
  const spec = (x: SliceSpec): string => (Array.isArray(x) ? x.map((v: number | null | undefined) => v ?? '').join(':') : String(x));
  return `${view.reshape !== undefined ? `reshape(${view.reshape.join(', ')})` : ''}[${view.slices.map(spec).join(', ')}]${view.transposed ? '.T' : ''}`;
}

function popcount(x: number): number {
  let n = 0;
  for (; x !== 0; x &= x - 1) n++;
  return n;
}

/** True when every byte of `view` is `value`: one memcmp of the view against itself shifted by one. */
export function allEqual(view: Uint8Array, value: number): boolean {
  const n = view.length;
  if (n === 0) return true;
  if (view[0] !== value) return false;
  if (n === 1) return true;
  const b = Buffer.from(view.buffer, view.byteOffset, n);
  return b.compare(b, 0, n - 1, 1, n) === 0;
}
