/**
 * Lifetimes of the memory vram hands out. Freeing is explicit (`free()`, or `using` through
 * `Symbol.dispose`); a FinalizationRegistry is the backstop that returns what a program dropped
 * without freeing it, and counts it as a leak so it shows up in statistics instead of in
 * `nvidia-smi`. The registry's held value is a closure over the pointer and its resource, never the
 * buffer itself, or the buffer could never be collected.
 */
import '../polyfills.js';
import type { Ptr } from '../backend/backend.js';
import { DoubleFreeError, UseAfterFreeError } from '../errors.js';

/** What the backstop knows about memory it freed on the program's behalf. */
export interface LeakRecord {
  /** What leaked: 'DeviceBuffer', 'HostBuffer', ... */
  readonly kind: string;
  readonly ptr: Ptr;
  readonly bytes: number;
  /** The stack of the allocation, when `captureAllocationStacks(true)` was on at the time. */
  readonly stack?: string;
  /** The error the release raised, if returning the memory failed. */
  readonly releaseError?: unknown;
}

/** Totals of everything the backstop has freed since start (or `resetLeakStatistics()`). */
export interface LeakStatistics {
  readonly count: number;
  readonly bytes: number;
}

/** A listener told about each leak as the backstop frees it (statistics, tracking, logging). */
export type LeakListener = (leak: LeakRecord) => void;

interface Held {
  readonly kind: string;
  readonly ptr: Ptr;
  readonly bytes: number;
  readonly stack: string | undefined;
  readonly release: () => void;
}

let leakCount = 0;
let leakBytes = 0;
let captureStacks = false;
const listeners = new Set<LeakListener>();

const registry = new FinalizationRegistry<Held>((held) => {
  let releaseError: unknown;
  try {
    held.release();
  } catch (error) {
    releaseError = error;
  }
  leakCount++;
  leakBytes += held.bytes;
  const record: LeakRecord = {
    kind: held.kind, ptr: held.ptr, bytes: held.bytes,
    ...(held.stack !== undefined ? { stack: held.stack } : {}),
    ...(releaseError !== undefined ? { releaseError } : {}),
  };
  for (const listener of listeners) {
    try {
      listener(record);
    } catch {
      // A listener's failure must not stop the others or escape into the GC callback.
    }
  }
});

/** How many allocations, and how many bytes, were freed by the garbage-collection backstop. */
export function leakStatistics(): LeakStatistics {
  return { count: leakCount, bytes: leakBytes };
}

/** Zeroes the leak totals (tests, or a program that reports leaks per phase). */
export function resetLeakStatistics(): void {
  leakCount = 0;
  leakBytes = 0;
}

/** Calls `listener` for every leak the backstop frees; returns a function that removes it. */
export function onLeak(listener: LeakListener): () => void {
  if (typeof listener !== 'function') throw new TypeError('onLeak expects a function');
  listeners.add(listener);
  return () => listeners.delete(listener);
}

/**
 * Records the JavaScript stack of every allocation made while on, so a leak report says where the
 * leaked memory came from. Off by default: capturing a stack costs microseconds.
 */
export function captureAllocationStacks(enabled: boolean): void {
  captureStacks = enabled;
}

/**
 * The base of every buffer: an address and a size that are valid until freed exactly once.
 * Subclasses pass a `release` closure that returns the memory where it came from; it must not
 * capture the buffer (build it in a static factory, not in the constructor).
 */
export abstract class Allocation {
  readonly #ptr: Ptr;
  readonly #bytes: number;
  readonly #release: () => void;
  #freed = false;
  readonly #token: object;

  protected constructor(ptr: Ptr, byteLength: number, release: () => void) {
    this.#ptr = ptr;
    this.#bytes = byteLength;
    this.#release = release;
    const held: Held = {
      kind: new.target.name, ptr, bytes: byteLength,
      stack: captureStacks ? new Error('allocated here').stack : undefined,
      release,
    };
    this.#token = held;
    registry.register(this, held, held);
  }

  /** The address of the first byte. Throws `UseAfterFreeError` once freed. */
  get ptr(): Ptr {
    if (this.#freed) this.throwFreed();
    return this.#ptr;
  }

  /** The size in bytes (still readable after free, for messages). */
  get byteLength(): number {
    return this.#bytes;
  }

  /** True once `free()` has run. */
  get isFreed(): boolean {
    return this.#freed;
  }

  /** Throws `UseAfterFreeError` when freed; every method that touches the memory calls it. */
  protected checkLive(): void {
    if (this.#freed) this.throwFreed();
  }

  /**
   * Returns the memory to where it came from. A second call throws `DoubleFreeError`; any other
   * use afterwards throws `UseAfterFreeError`.
   */
  free(): void {
    if (this.#freed) {
      throw new DoubleFreeError(`${this.constructor.name} of ${this.#bytes} bytes was already freed`);
    }
    this.#freed = true;
    registry.unregister(this.#token);
    this.#release();
  }

  /** `using buf = ...` frees at the end of the scope (a no-op when already freed). */
  [Symbol.dispose](): void {
    if (!this.#freed) this.free();
  }

  private throwFreed(): never {
    throw new UseAfterFreeError(`${this.constructor.name} of ${this.#bytes} bytes was used after free`);
  }
}
