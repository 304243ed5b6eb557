/**
 * Copies between ordinary JavaScript memory (pageable) and the device, at the host's own limit.
 * One entry point per form, used by every buffer and array: `copyPageable` (blocking) and
 * `copyPageableAsync` (never blocks the event loop). Each picks the path:
 * 1. registered: the buffer is in the registration cache (or gets there now: the second copy of a
 *    buffer of at least 8 MiB), so the driver copies it at pinned speed, no staging;
 * 2. direct: a synchronous copy smaller than `stagingThreshold` (default 16 MiB) goes to the
 *    driver's own pageable copy: below that the pipeline has too few chunks to fill, and the
 *    driver's copy was faster; above it staging wins, by more the larger the copy (figures:
 *    bench/results/h100-2026-11-22-pageable-sweep.md, README "Figures");
 * 3. staged: everything else goes through pinned chunks, the host side copied by the copy threads
 *    while the copy engine moves the previous chunk (staged-copy.ts).
 * The settings are process-wide (`configureTransfers`); the caches belong to each backend.
 */
import type { Backend, Ptr } from '../../backend/backend.js';
import { Device } from '../../device.js';
import { Event, type StreamRef } from '../../stream.js';
import { checkBytes, checkNonNegativeInteger, readBytes, type ByteSize } from '../../validate.js';
import { PinnedHostPool } from '../../resource/suballoc/pinned-host-pool.js';
import { defaultStream } from '../../stream.js';
import { checkThreadCount, CopyThreads, defaultCopyThreads } from './copy-threads.js';
import { RegistrationCache, type RegistrationPolicy, type RegistrationStatistics } from './registration-cache.js';
import { runStaged, runStagedAsync, type StagedCopy } from './staged-copy.js';
import { readOptions } from '../../util/options.js';

/** Process-wide transfer settings (see `configureTransfers`). */
export interface TransferSettings {
  /** Copy threads for staged copies (0: copy on the calling thread). Default `VRAM_COPY_THREADS`, else half the cores, at most 8. */
  readonly threads: number;
  /** Bytes per staging chunk (default 8 MiB). */
  readonly chunkBytes: number;
  /** Staging chunks in flight per copy (default 4; at least 2, so a chunk's host copy overlaps another's DMA). */
  readonly depth: number;
  /** Synchronous pageable copies below this many bytes go straight to the driver (default 16 MiB). */
  readonly stagingThreshold: number;
  /** The registration cache's policy. */
  readonly registration: RegistrationPolicy;
}

/**
 * A change to the settings: any subset, `registration` merged field by field. Byte counts may be
 * size strings (`chunkBytes: '8M'`), as the CLI and VRAM_* variables write them.
 */
export type TransferOptions = Partial<Omit<TransferSettings, 'registration' | 'chunkBytes' | 'stagingThreshold'>> & {
  readonly chunkBytes?: ByteSize;
  readonly stagingThreshold?: ByteSize;
  readonly registration?: Partial<Omit<RegistrationPolicy, 'minimumBytes' | 'maximumBytes'>> & {
    readonly minimumBytes?: ByteSize;
    readonly maximumBytes?: ByteSize;
  };
};

/** Copies and bytes moved one way. */
export interface TransferCount {
  readonly copies: number;
  readonly bytes: number;
}

/** Which path pageable copies took, and what the registration cache did. */
export interface TransferStatistics {
  /** Straight to the driver's pageable copy (small synchronous copies). */
  readonly direct: TransferCount;
  /** Through pinned staging chunks. */
  readonly staged: TransferCount;
  /** From or to memory the registration cache had pinned in place. */
  readonly registered: TransferCount;
  readonly registration: RegistrationStatistics;
}

/** Per-call options of a pageable copy. */
export interface PageableOptions {
  /**
   * true: pin this buffer in place now (registration cache) and copy at pinned speed; false: never
   * use the cache for this copy; undefined: the cache's policy decides.
   */
  readonly register?: boolean;
}

const MiB = 1024 * 1024;

/**
 * The defaults, chosen by bench/pageable-sweep.ts: 8 threads, 8 MiB chunks, depth 4 came closest
 * to the pinned copy's speed. Fewer chunks in flight leave the copy engine waiting, smaller chunks
 * spend the time on per-chunk hand-offs, and more threads gain nothing once host memory bandwidth
 * is the limit. The figures: bench/results/h100-2026-11-22-pageable-sweep.md.
 */
let threadsFromEnvironment: number | undefined;
let settings: TransferSettings = {
  // VRAM_COPY_THREADS is read when the count is first needed, not when vram is imported: a bad
  // value is then the RangeError of the copy (or configureTransfers) that needs it.
  get threads(): number {
    return (threadsFromEnvironment ??= defaultCopyThreads());
  },
  chunkBytes: 8 * MiB,
  depth: 4,
  stagingThreshold: 16 * MiB,
  registration: { enabled: true, minimumBytes: 8 * MiB, maximumBytes: 2048 * MiB, afterUses: 2 },
};
let threads: CopyThreads | undefined;

/** One backend's caches and counts. */
interface BackendTransfers {
  readonly registrations: RegistrationCache;
  readonly staging: Map<Device, PinnedHostPool>;
  readonly counts: Record<'direct' | 'staged' | 'registered', { copies: number; bytes: number }>;
}
const perBackend = new WeakMap<Backend, BackendTransfers>();

function transfersOf(backend: Backend): BackendTransfers {
  let state = perBackend.get(backend);
  if (state === undefined) {
    state = {
      registrations: new RegistrationCache(backend, () => settings.registration),
      staging: new Map(),
      counts: { direct: { copies: 0, bytes: 0 }, staged: { copies: 0, bytes: 0 }, registered: { copies: 0, bytes: 0 } },
    };
    perBackend.set(backend, state);
  }
  return state;
}

function count(state: BackendTransfers, path: 'direct' | 'staged' | 'registered', bytes: number): void {
  state.counts[path].copies++;
  state.counts[path].bytes += bytes;
}

/**
 * Changes the process-wide transfer settings; returns the settings now in force. A new thread
 * count takes effect at the next staged copy (the old threads finish what they have).
 *
 * @param options The settings to change.
 * @returns The complete settings after the change.
 * @throws {TypeError | RangeError} For a bad value (nothing changes then).
 * @example
 * ```ts
 * configureTransfers({ threads: 4, registration: { enabled: false } });
 * ```
 */
export function configureTransfers(options: TransferOptions): TransferSettings {
  options = readOptions('configureTransfers', options, { threads: true, chunkBytes: true, depth: true, stagingThreshold: true, registration: true });
  const r = readOptions('configureTransfers', options.registration, { enabled: true, minimumBytes: true, maximumBytes: true, afterUses: true }, 'registration');
  if (r.enabled !== undefined && typeof r.enabled !== 'boolean') throw new TypeError('registration.enabled must be a boolean');
  const next: TransferSettings = {
    threads: options.threads === undefined ? settings.threads : checkThreadCount(checkNonNegativeInteger(options.threads, 'threads'), 'threads'),
    chunkBytes: options.chunkBytes === undefined ? settings.chunkBytes : readBytes(options.chunkBytes, 'chunkBytes'),
    depth: options.depth === undefined ? settings.depth : checkDepth(options.depth),
    stagingThreshold: options.stagingThreshold === undefined ? settings.stagingThreshold : readBytes(options.stagingThreshold, 'stagingThreshold', true),
    registration: {
      enabled: r.enabled ?? settings.registration.enabled,
      minimumBytes: r.minimumBytes === undefined ? settings.registration.minimumBytes : readBytes(r.minimumBytes, 'registration.minimumBytes', true),
      maximumBytes: r.maximumBytes === undefined ? settings.registration.maximumBytes : readBytes(r.maximumBytes, 'registration.maximumBytes', true),
      afterUses: r.afterUses === undefined ? settings.registration.afterUses : checkBytes(r.afterUses, 'registration.afterUses'),
    },
  };
  if (next.registration.minimumBytes > next.registration.maximumBytes) {
    throw new RangeError(
      `configureTransfers: registration.minimumBytes (${next.registration.minimumBytes}) exceeds registration.maximumBytes (${next.registration.maximumBytes})`,
    );
  }
  if (next.threads !== settings.threads) {
    threads?.destroy();
    threads = undefined;
  }
  settings = next;
  return settings;
}

function checkDepth(depth: number): number {
  checkNonNegativeInteger(depth, 'depth');
  if (depth < 2 || depth > 16) throw new RangeError(`depth must be from 2 to 16 (two chunks overlap at least), got ${depth}`);
  return depth;
}

/**
 * The transfer settings in force.
 *
 * @returns The settings.
 * @example
 * ```ts
 * console.log(transferSettings().threads);
 * ```
 * @throws Never.
 */
export function transferSettings(): TransferSettings {
  return settings;
}

/**
 * Which path pageable copies of `device`'s backend took so far, and what its registration cache did.
 *
 * @param device The device whose backend to report (device 0 by default).
 * @returns The counts.
 * @example
 * ```ts
 * const { staged, registered } = transferStatistics();
 * ```
 * @throws {TypeError} When `device` is neither a Device nor an ordinal.
 * @throws {RangeError} When the ordinal is out of range.
 */
export function transferStatistics(device?: Device | number): TransferStatistics {
  const state = transfersOf(Device.resolve(device).backend);
  const { direct, staged, registered } = state.counts;
  return {
    direct: { ...direct },
    staged: { ...staged },
    registered: { ...registered },
    registration: state.registrations.statistics(),
  };
}

/**
 * Gives back what transfers cache for `device`'s backend: idle staging chunks, and every
 * registration no copy is using.
 *
 * @param device The device (device 0 by default).
 * @returns The bytes released (pinned staging plus unregistered).
 * @example
 * ```ts
 * releaseTransferCaches(); // before measuring pinned host memory, say
 * ```
 * @throws {TypeError} When `device` is neither a Device nor an ordinal.
 * @throws {RangeError} When the ordinal is out of range.
 * @throws {CudaError} When the driver fails to free a chunk or unregister memory.
 */
export function releaseTransferCaches(device?: Device | number): number {
  const state = transfersOf(Device.resolve(device).backend);
  let released = state.registrations.clear();
  for (const pool of state.staging.values()) released += pool.releaseCached();
  return released;
}

/**
 * Unregisters `memory`'s buffer if the registration cache pinned it (HostBuffer.register calls
 * this first, as the driver refuses to register memory twice).
 *
 * @param backend The backend the program registers with.
 * @param memory The memory about to be registered.
 */
export function forgetRegistration(backend: Backend, memory: Uint8Array): void {
  perBackend.get(backend)?.registrations.forget(memory.buffer);
}

/** A copy between JavaScript memory and device memory, as the buffer resolved it. */
export interface PageableCopy {
  readonly direction: 'to-device' | 'from-device';
  /** The device whose context the copy runs in. */
  readonly device: Device;
  /** The device address of the first byte. */
  readonly devicePtr: Ptr;
  /** Exactly the JavaScript bytes copied (a view of the caller's memory, never a copy of it). */
  readonly host: Uint8Array;
  readonly options: PageableOptions;
}

/**
 * Runs a pageable copy to completion, blocking (registered, direct or staged on the legacy
 * default stream, so it is ordered as the driver's own synchronous copy would be).
 *
 * @param copy What to copy.
 * @throws {DetachedBufferError} When the JavaScript memory is detached meanwhile.
 * @throws {CudaError | OutOfMemoryError} From the driver.
 */
export function copyPageable(copy: PageableCopy): void {
  const { device, devicePtr, host } = copy;
  const backend = device.backend;
  const state = transfersOf(backend);
  const bytes = host.byteLength;
  const registration = state.registrations.acquire(host, copy.options.register);
  if (registration !== undefined) {
    try {
      device.makeCurrent();
      if (copy.direction === 'to-device') backend.memcpy(devicePtr, registration.ptr, bytes);
      else backend.memcpy(registration.ptr, devicePtr, bytes);
    } finally {
      state.registrations.release(registration);
    }
    count(state, 'registered', bytes);
  } else if (bytes < settings.stagingThreshold) {
    device.makeCurrent();
    if (copy.direction === 'to-device') backend.memcpyFromHost(devicePtr, host, bytes);
    else backend.memcpyToHost(host, devicePtr, bytes);
    count(state, 'direct', bytes);
  } else {
    runStaged(staged(copy, state, defaultStream));
    count(state, 'staged', bytes);
  }
}

/**
 * Runs a pageable copy on `stream` (after the work queued there) and resolves once every byte
 * has arrived; the event loop is never blocked. Registered memory is copied by one DMA; anything
 * else, small copies included, is staged (a direct pageable copy would block).
 *
 * @param copy What to copy.
 * @param stream The stream (default: the legacy default stream).
 * @returns A promise that resolves when the copy is complete.
 * @throws {DetachedBufferError} When the JavaScript memory is detached meanwhile (rejects).
 * @throws {CudaError | OutOfMemoryError} From the driver (rejects).
 */
export async function copyPageableAsync(copy: PageableCopy, stream: StreamRef = defaultStream): Promise<void> {
  const { device, devicePtr, host } = copy;
  const backend = device.backend;
  const state = transfersOf(backend);
  const bytes = host.byteLength;
  const registration = state.registrations.acquire(host, copy.options.register);
  if (registration === undefined) {
    await runStagedAsync(staged(copy, state, stream));
    count(state, 'staged', bytes);
    return;
  }
  const done = Event.create({ device, timing: false });
  try {
    device.makeCurrent();
    if (copy.direction === 'to-device') backend.memcpyAsync(devicePtr, registration.ptr, bytes, stream.handle);
    else backend.memcpyAsync(registration.ptr, devicePtr, bytes, stream.handle);
    done.record(stream);
    // The registration stays busy (not evicted) until the DMA is complete.
    await done.synchronized();
  } finally {
    done.destroy();
    state.registrations.release(registration);
  }
  count(state, 'registered', bytes);
}

/** The staged form of `copy` on `stream`, with the current settings. */
function staged(copy: PageableCopy, state: BackendTransfers, stream: StreamRef): StagedCopy {
  // The staging pool keeps enough for two copies in flight with the settings in force (freeing
  // and allocating pinned chunks each copy would cost milliseconds); more is freed as it goes idle.
  const keep = 2 * settings.depth * settings.chunkBytes;
  let pool = state.staging.get(copy.device);
  if (pool === undefined) {
    pool = new PinnedHostPool({ device: copy.device, maximumCachedBytes: keep });
    state.staging.set(copy.device, pool);
  } else if (pool.maximumCachedBytes !== keep) {
    pool.maximumCachedBytes = keep;
  }
  threads ??= new CopyThreads(settings.threads);
  return {
    direction: copy.direction,
    device: copy.device,
    stream,
    devicePtr: copy.devicePtr,
    host: copy.host,
    chunkBytes: settings.chunkBytes,
    depth: settings.depth,
    pool,
    threads,
  };
}
