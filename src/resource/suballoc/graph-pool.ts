/**
 * The capture-private pool: where a resource other than AsyncResource allocates while its stream
 * is being captured (the contract routes it here: resource.ts). Memory a graph will write at each
 * launch must never be handed to eager work while the graph lives, so it does not come from the
 * resource's own cache: it comes from this pool, which only captures allocate from, and goes back
 * to it when freed (during the capture, or by the program afterwards). A block freed on a stream
 * is reused only by a later allocation on that stream (in a capture, that order is the graph's
 * order). Several graphs share one pool when the program passes it to each capture
 * (`beginCapture({ pool })`, `captureGraph(stream, fn, { pool })`), PyTorch's
 * `torch.cuda.graph(pool=...)`: they must then never run at the same time. The pool's memory goes
 * back to the driver, in stream order, when the last graph or executable graph holding it is
 * destroyed (blocks the program still holds, when it frees them).
 *
 * Its memory comes from cuMemAlloc in the relaxed capture mode (what PyTorch's allocator does),
 * since the global mode forbids cuMemAlloc while a capture lasts; it is freed with cuMemFreeAsync.
 */
import type { Ptr } from '../../backend/backend.js';
import { Device } from '../../device.js';
import { DoubleFreeError, InvalidPointerError } from '../../errors.js';
import { relaxedDuringCapture, type CapturePool } from '../../graphs/sessions.js';
import { inspectCustom } from '../../util/inspect.js';
import { formatBytes } from '../../util/size.js';
import { readOptions } from '../../util/options.js';
import { checkBytes, checkNonNegativeInteger, checkPointer } from '../../validate.js';
import type { SnapshotSegment } from '../figures.js';

/** Blocks are rounded to this, as cuMemAlloc aligns them. */
const GRAPH_POOL_ALIGNMENT = 512;

/** Pools with blocks, by block address: where the contract sends a block's deallocate. */
const owners = new Map<Ptr, GraphPool>();
/** Every pool that holds memory, weakly: what statistics and snapshots list. */
const pools = new Set<WeakRef<GraphPool>>();

/**
 * The private pool a block came from, if it came from one: none while no pool holds memory.
 * @param ptr A block's address.
 * @returns Its pool, or undefined.
 */
export function graphPoolOf(ptr: Ptr): GraphPool | undefined {
  return owners.size === 0 ? undefined : owners.get(ptr);
}

/** Options of `new GraphPool()`. */
export interface GraphPoolOptions {
  /** The device (device 0 by default). */
  readonly device?: Device | number;
}

/**
 * A capture-private pool: the memory captures allocate from (every resource but an AsyncResource
 * over a plain pool, whose allocations become the driver's graph memory nodes). Made by each capture that needs one,
 * or made here and passed to several captures to share (graphs that never run at the same time).
 * @example
 * ```ts
 * const pool = new GraphPool();
 * using a = captureGraph(stream, () => stepA(), { pool });
 * using b = captureGraph(stream, () => stepB(), { pool }); // reuses what stepA freed
 * ```
 */
export class GraphPool implements CapturePool {
  /** The device ordinal. */
  readonly deviceOrdinal: number;
  readonly #device: Device;
  #holders = 0;
  /** Free blocks by the stream that freed them, then by size. */
  readonly #free = new Map<number, Map<number, Ptr[]>>();
  /** Live blocks: size and the stream last used. */
  readonly #live = new Map<Ptr, number>();
  /** Every block the pool holds from the driver, with its size. */
  readonly #blocks = new Map<Ptr, number>();
  readonly #self = new WeakRef(this);

  /**
   * @param options `device` (device 0 by default).
   * @throws {TypeError} For an unknown option.
   * @example
   * ```ts
   * const pool = new GraphPool({ device: 0 });
   * ```
   */
  constructor(options: GraphPoolOptions = {}) {
    options = readOptions('new GraphPool', options, { device: true });
    this.#device = Device.resolve(options.device);
    this.deviceOrdinal = this.#device.ordinal;
  }

  /**
   * Bytes the pool holds from the driver (live and cached blocks).
   * @returns The bytes.
   * @example
   * ```ts
   * pool.reservedBytes; // 0 until a capture allocates
   * ```
   */
  get reservedBytes(): number {
    let n = 0;
    for (const size of this.#blocks.values()) n += size;
    return n;
  }

  /**
   * Bytes in blocks handed out and not freed (as rounded).
   * @returns The bytes.
   * @example
   * ```ts
   * pool.allocatedBytes;
   * ```
   */
  get allocatedBytes(): number {
    let n = 0;
    for (const size of this.#live.values()) n += size;
    return n;
  }

  /**
   * How many graphs, executable graphs and captures in progress hold the pool.
   * @returns The count.
   * @example
   * ```ts
   * pool.holders; // 0: its memory went back
   * ```
   */
  get holders(): number {
    return this.#holders;
  }

  /**
   * A block for a capture on stream `handle` (the contract calls it; not for direct use).
   * @param bytes The size asked for: a positive whole number.
   * @param handle The capturing stream's handle.
   * @returns The address.
   * @throws {TypeError | RangeError} For a bad size or handle, before any driver call.
   * @throws {OutOfMemoryError} When the driver has no memory left.
   * @example
   * ```ts
   * const ptr = pool.allocate(4096, stream.handle); // what resource.allocate does during a capture
   * ```
   */
  allocate(bytes: number, handle: number): Ptr {
    checkBytes(bytes);
    checkNonNegativeInteger(handle, 'handle');
    const size = Math.ceil(bytes / GRAPH_POOL_ALIGNMENT) * GRAPH_POOL_ALIGNMENT;
    const cached = this.#free.get(handle)?.get(size);
    let ptr = cached?.pop();
    if (ptr === undefined) {
      const { backend } = this.#device;
      this.#device.makeCurrent();
      ptr = relaxedDuringCapture(backend, () => backend.memAlloc(size));
      this.#blocks.set(ptr, size);
      if (this.#blocks.size === 1) pools.add(this.#self);
    }
    this.#live.set(ptr, size);
    owners.set(ptr, this);
    return ptr;
  }

  /**
   * Takes a block back (the contract calls it): cached for later captures on `handle` while a
   * graph holds the pool, else given back to the driver in stream order.
   * @param ptr The block.
   * @param handle The stream that used it last.
   * @throws {TypeError | RangeError} For a bad pointer or handle.
   * @throws {DoubleFreeError} For a block of this pool already freed.
   * @throws {InvalidPointerError} For a pointer that is no block of this pool.
   * @example
   * ```ts
   * pool.deallocate(ptr, stream.handle);
   * ```
   */
  deallocate(ptr: Ptr, handle: number): void {
    checkPointer(ptr);
    checkNonNegativeInteger(handle, 'handle');
    const size = this.#live.get(ptr);
    if (size === undefined) {
      const hex = `0x${ptr.toString(16)}`;
      if (this.#blocks.has(ptr)) throw new DoubleFreeError(`GraphPool.deallocate(${hex}): the block is already free`);
      throw new InvalidPointerError(`GraphPool.deallocate(${hex}): not a block of ${String(this)}`);
    }
    this.#live.delete(ptr);
    if (this.#holders === 0) {
      this.#giveBack(ptr, handle);
      return;
    }
    let bySize = this.#free.get(handle);
    if (bySize === undefined) this.#free.set(handle, (bySize = new Map()));
    const list = bySize.get(size);
    if (list === undefined) bySize.set(size, [ptr]);
    else list.push(ptr);
  }

  /**
   * One more holder (a capture, a graph, an executable graph).
   * @throws Never.
   * @example
   * ```ts
   * pool.retain();
   * ```
   */
  retain(): void {
    this.#holders += 1;
  }

  /**
   * One holder fewer; with the last, the cached blocks go back to the driver (in stream order,
   * on the stream that freed each), and live ones when the program frees them.
   * @throws {CudaError} When the driver refuses a free.
   * @example
   * ```ts
   * pool.release();
   * ```
   */
  release(): void {
    if (this.#holders === 0) return;
    this.#holders -= 1;
    if (this.#holders > 0) return;
    for (const [handle, bySize] of this.#free) {
      for (const list of bySize.values()) for (const ptr of list) this.#giveBack(ptr, handle);
    }
    this.#free.clear();
  }

  /**
   * The pool's memory as snapshot segments of kind `graph-pool`, one per block.
   * @returns The segments, ascending by address.
   * @throws Never.
   * @example
   * ```ts
   * pool.segments().length;
   * ```
   */
  segments(): SnapshotSegment[] {
    return [...this.#blocks]
      .sort((a, b) => a[0] - b[0])
      .map(([address, bytes]) => ({
        address,
        bytes,
        kind: 'graph-pool' as const,
        pages: null,
        blocks: [
          this.#live.has(address)
            ? { address, bytes, requestedBytes: bytes, state: 'live' as const, stream: null, stack: null }
            : { address, bytes, requestedBytes: 0, state: 'free' as const, stream: null, stack: null },
        ],
      }));
  }

  /**
   * One line for logs.
   * @returns E.g. `GraphPool(device=0, reserved 1 MiB, allocated 512 KiB, held by 2)`.
   * @throws Never.
   * @example
   * ```ts
   * String(pool);
   * ```
   */
  toString(): string {
    return `GraphPool(device=${this.deviceOrdinal}, reserved ${formatBytes(this.reservedBytes)}, allocated ${formatBytes(this.allocatedBytes)}, held by ${this.#holders})`;
  }

  /**
   * How `console.log` shows it: `String(pool)`.
   * @returns The line.
   * @throws Never.
   * @example
   * ```ts
   * console.log(pool);
   * ```
   */
  [inspectCustom](): string {
    return this.toString();
  }

  #giveBack(ptr: Ptr, handle: number): void {
    owners.delete(ptr);
    this.#blocks.delete(ptr);
    if (this.#blocks.size === 0) pools.delete(this.#self);
    this.#device.makeCurrent();
    this.#device.backend.memFreeAsync(ptr, handle);
  }
}

/**
 * The private pools that hold memory on device `ordinal` now.
 * @param ordinal The device.
 * @returns The pools.
 */
export function graphPoolsOf(ordinal: number): GraphPool[] {
  const out: GraphPool[] = [];
  for (const ref of pools) {
    const pool = ref.deref();
    if (pool === undefined) pools.delete(ref);
    else if (pool.deviceOrdinal === ordinal) out.push(pool);
  }
  return out;
}
