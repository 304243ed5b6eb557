/**
 * The registration cache: JavaScript memory that is copied again and again is pinned in place
 * once (cuMemHostRegister, portable) and copied at pinned speed from then on, PyTorch's and
 * MPI libraries' answer to "the same host buffer, every step". Registering 256 MiB cost about 15 ms
 * and unregistering 5 ms on our H100 machine, against about 5 ms for a pinned copy of it, so it
 * pays from the second copy of a large buffer: a buffer is registered on its `afterUses`-th copy
 * (default 2) when it holds at least `minimumBytes`, or at once when a copy asks for it.
 *
 * Whole ArrayBuffers are registered, so every view of one hits. At most `maximumBytes` stay
 * registered: the least recently copied buffer is unregistered first (never one an asynchronous
 * copy is using). The cache holds buffers weakly; a FinalizationRegistry unregisters a buffer that
 * was collected. (The driver keeps the pages pinned until then; an address freed and reused by a
 * new buffer before that callback runs cannot be registered again meanwhile, and is staged.)
 */
import { HostRegisterFlags, type Backend, type Ptr } from '../../backend/backend.js';
import { CounterCell, type Counter } from '../../counter.js';
import { ensureAnyContext } from '../../device.js';
import { CudaError, OutOfMemoryError } from '../../errors.js';

/** When buffers are registered. */
export interface RegistrationPolicy {
  /** Register at all (default true). */
  readonly enabled: boolean;
  /** Buffers smaller than this are never registered by the policy (default 8 MiB). */
  readonly minimumBytes: number;
  /** Registered bytes kept at most; beyond, least recently used buffers are unregistered (default 2 GiB). */
  readonly maximumBytes: number;
  /** Register on this copy of the same buffer (default 2: the first repeat). */
  readonly afterUses: number;
}

/** What the registration cache did. */
export interface RegistrationStatistics {
  /** Copies that found their buffer registered. */
  readonly hits: number;
  /** Buffers registered. */
  readonly registrations: number;
  /** Buffers unregistered to stay within maximumBytes (or by `clear`). */
  readonly evictions: number;
  /** Buffers unregistered because they were garbage-collected. */
  readonly collected: number;
  /** Registrations the driver refused (memory already registered, say); such buffers are staged. */
  readonly refused: number;
  /** Registered bytes: now, at most, and in total. */
  readonly bytes: Counter;
}

/** A buffer the cache knows: registered, or counted towards registration. */
interface Entry {
  readonly buffer: WeakRef<ArrayBufferLike>;
  readonly bytes: number;
  uses: number;
  /** The registered address of the buffer's first byte; undefined when not registered. */
  ptr: Ptr | undefined;
  /** Asynchronous copies using the registration now (it is not evicted meanwhile). */
  busy: number;
  /** The driver refused it once: never tried again. */
  refused: boolean;
}

/** A registration lent to one copy; give it back with `RegistrationCache.release`. */
export interface Registration {
  /** The registered address of the copy's first byte. */
  readonly ptr: Ptr;
  readonly entry: object;
}

/**
 * The registrations of one backend.
 *
 * @example
 * ```ts
 * const reg = cache.acquire(bytes, undefined);   // undefined: stage this copy
 * if (reg !== undefined) try { backend.memcpy(dst, reg.ptr, bytes.byteLength); } finally { cache.release(reg); }
 * ```
 */
export class RegistrationCache {
  private readonly entries = new WeakMap<ArrayBufferLike, Entry>();
  /** Registered entries, least recently used first. */
  private readonly lru = new Set<Entry>();
  private readonly registry: FinalizationRegistry<Entry>;
  private hits = 0;
  private registrations = 0;
  private evictions = 0;
  private collected = 0;
  private refused = 0;
  private readonly registered = new CounterCell();

  /**
   * @param backend The backend registrations are made with.
   * @param policy Read at every copy, so a change applies at once.
   */
  constructor(
    private readonly backend: Backend,
    private readonly policy: () => RegistrationPolicy,
  ) {
    this.registry = new FinalizationRegistry((entry) => {
      if (entry.ptr === undefined) return;
      this.collected++;
      this.unregister(entry);
    });
  }

  /**
   * The registration to copy `host` through: its buffer's, registering it now when the policy (or
   * `register: true`) says so; undefined when the copy should be staged instead.
   *
   * @param host The JavaScript memory of one copy.
   * @param register true: register now; false: do not use the cache; undefined: the policy decides.
   * @returns The registration, to `release` when the copy is done (or queued, for a synchronous one).
   */
  acquire(host: Uint8Array, register: boolean | undefined): Registration | undefined {
    const policy = this.policy();
    if (register === false || (register === undefined && !policy.enabled)) return undefined;
    const buffer = host.buffer;
    let entry = this.entries.get(buffer);
    if (entry === undefined) {
      entry = { buffer: new WeakRef(buffer), bytes: buffer.byteLength, uses: 0, ptr: undefined, busy: 0, refused: false };
      this.entries.set(buffer, entry);
    }
    entry.uses++;
    if (entry.ptr !== undefined) {
      this.hits++;
      this.lru.delete(entry);
      this.lru.add(entry);
    } else {
      const wanted = register === true || (entry.uses >= policy.afterUses && entry.bytes >= policy.minimumBytes);
      if (!wanted || entry.refused || entry.bytes > policy.maximumBytes) return undefined;
      this.evict(policy.maximumBytes - entry.bytes);
      if (this.registered.value + entry.bytes > policy.maximumBytes || !this.register(entry, buffer)) return undefined;
    }
    entry.busy++;
    return { ptr: entry.ptr! + host.byteOffset, entry };
  }

  /** Ends one copy's use of a registration. */
  release(registration: Registration): void {
    (registration.entry as Entry).busy--;
  }

  /**
   * Unregisters `buffer` if the cache registered it (HostBuffer.register calls this first: the
   * driver refuses to register memory twice).
   *
   * @param buffer An ArrayBuffer the program is about to register itself.
   * @returns True when a registration was undone.
   */
  forget(buffer: ArrayBufferLike): boolean {
    const entry = this.entries.get(buffer);
    if (entry === undefined || entry.ptr === undefined || entry.busy > 0) return false;
    this.evictions++;
    this.unregister(entry);
    this.entries.delete(buffer);
    return true;
  }

  /** Unregisters every buffer no copy is using; returns the bytes unregistered. */
  clear(): number {
    return this.evict(0);
  }

  /** What the cache did so far. */
  statistics(): RegistrationStatistics {
    return {
      hits: this.hits,
      registrations: this.registrations,
      evictions: this.evictions,
      collected: this.collected,
      refused: this.refused,
      bytes: this.registered.snapshot(),
    };
  }

  /** Unregisters least recently used buffers until at most `keep` bytes stay registered. */
  private evict(keep: number): number {
    let freed = 0;
    for (const entry of this.lru) {
      if (this.registered.value <= keep) break;
      if (entry.busy > 0) continue;
      freed += entry.bytes;
      this.evictions++;
      this.unregister(entry);
    }
    return freed;
  }

  /** Registers the whole buffer; false when the driver refuses (the entry is then never retried). */
  private register(entry: Entry, buffer: ArrayBufferLike): boolean {
    const backend = this.backend;
    ensureAnyContext(backend);
    try {
      entry.ptr = backend.memHostRegister(new Uint8Array(buffer), HostRegisterFlags.PORTABLE);
    } catch (error) {
      if (!(error instanceof CudaError || error instanceof OutOfMemoryError)) throw error;
      entry.refused = true;
      this.refused++;
      return false;
    }
    this.registrations++;
    this.registered.add(entry.bytes);
    this.lru.add(entry);
    // Keyed by the entry, so an eviction can take it out again; the buffer is the target.
    this.registry.register(buffer, entry, entry);
    return true;
  }

  private unregister(entry: Entry): void {
    const ptr = entry.ptr;
    if (ptr === undefined) return;
    entry.ptr = undefined;
    entry.uses = 0;
    this.lru.delete(entry);
    this.registry.unregister(entry);
    this.registered.sub(entry.bytes);
    ensureAnyContext(this.backend);
    this.backend.memHostUnregister(ptr);
  }
}
