/**
 * AsyncResource: stream-ordered allocation from a CUDA memory pool (cuMemAllocFromPoolAsync /
 * cuMemFreeAsync), RMM's cuda_async_memory_resource. The driver keeps freed memory in the pool and
 * hands it out again in stream order, so an allocate/free pair costs well under a microsecond of
 * driver time once the pool is warm; the pool's release threshold decides how much it keeps.
 */
import { MemAccess, MemHandleType, MemPoolAttribute, type Handle, type Ptr } from '../../backend/backend.js';
import { Device } from '../../device.js';
import { CudaError, NotSupportedError, UseAfterFreeError, type OutOfMemoryError, type OutOfMemoryReason } from '../../errors.js';
import { checkNonNegativeInteger, readBytes, type ByteSize } from '../../validate.js';
import { DEVICE_ALIGNMENT } from './cuda-resource.js';
import { DriverResource } from './driver-resource.js';
import { accessFlags, poolAccess, type PoolAccess } from '../pool-access.js';
import type { MemoryFigures, MemoryKind } from '../figures.js';
import { readOptions } from '../../util/options.js';
import { checkFabricSupport } from '../fabric-support.js';

/** Properties of a pool this resource creates (instead of using the device's default pool). */
export interface AsyncPoolOptions {
  /** Upper bound on the pool's reserved bytes; 0 or omitted for none. Device pools only (the driver ignores it for host NUMA pools). */
  readonly maxSize?: ByteSize;
  /**
   * 'posix-fd' to make the pool's memory shareable with other processes of this host (IPC);
   * 'fabric' to share it over NVLink with processes of other hosts of the domain too
   * (CU_MEM_HANDLE_TYPE_FABRIC: needs an IMEX channel, checked first, see `FabricUnavailableError`);
   * default 'none'.
   */
  readonly handleTypes?: AsyncHandleTypes;
  /**
   * Where the pool's memory lives: the device (`{ type: 'device' }`, the default), or pinned host
   * memory on a host NUMA node (`{ type: 'host-numa', id }`, CU_MEM_LOCATION_TYPE_HOST_NUMA; `id`
   * defaults to the device's nearest node, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID). The driver refuses
   * plain host and the calling thread's node (HOST_NUMA_CURRENT) for pools, and so does vram.
   */
  readonly location?: AsyncPoolLocation;
}

/** How a created pool's memory can be shared (`AsyncPoolOptions.handleTypes`). */
export type AsyncHandleTypes = 'none' | 'posix-fd' | 'fabric';

/** Where a created pool's memory lives (`AsyncPoolOptions.location`). */
export type AsyncPoolLocation = { readonly type: 'device' } | { readonly type: 'host-numa'; readonly id?: number };

/** Options for `new AsyncResource`. */
export interface AsyncResourceOptions {
  /** The device whose memory the pool holds (device 0 by default). */
  readonly device?: Device | number;
  /**
   * 'default' (the device's default pool, shared with cudaMallocAsync users), 'current' (the
   * device's current pool, `device.memPool`: the one cudaMallocAsync uses now) or a new pool.
   */
  readonly pool?: 'default' | 'current' | AsyncPoolOptions;
}

/**
 * Stream-ordered device memory from a CUDA memory pool (cuMemAllocFromPoolAsync/cuMemFreeAsync),
 * RMM's cuda_async_memory_resource. The driver orders reuse across streams; frees are checked
 * against the live table first, because the driver reuses a freed address at once and a wrong
 * pointer would free someone else's memory.
 *
 * @example
 * ```ts
 * using mr = new AsyncResource({ pool: { maxSize: 1 << 30 } });
 * const p = mr.allocate(1 << 20, stream);
 * mr.deallocate(p, 1 << 20, stream);
 * ```
 */
export class AsyncResource extends DriverResource {
  /**
   * On a capturing stream the allocation is cuMemAllocAsync as usual, and the driver makes it a
   * graph memory node: memory the graph owns, at the same address at every launch. A block freed
   * during the capture is a free node; one the graph does not free must be freed by the program
   * before the graph is launched again (the driver's rule: the launch fails otherwise). A pool
   * made for sharing (`exportable`) allocates during a capture from the capture-private pool
   * instead: the driver refuses cuMemAllocFromPoolAsync from such a pool on a capturing stream
   * (CUDA_ERROR_NOT_SUPPORTED on a CUDA 13 driver), and the default `async` stack's pool is one.
   * @returns `'driver'`, or `'private'` for an exportable pool.
   * @example
   * ```ts
   * new AsyncResource().capturePolicy; // 'driver'
   * ```
   */
  override get capturePolicy(): 'private' | 'driver' | 'upstream' | 'refuse' {
    return this.exportable ? 'private' : 'driver';
  }

  /** Plain device memory; `'pinned-host'` for a pool on a host NUMA node. */
  readonly kind: MemoryKind;
  /**
   * The host NUMA node whose pinned memory the pool holds (`location: { type: 'host-numa' }`);
   * undefined for a pool of device memory.
   */
  readonly hostNumaId: number | undefined;
  /** 256 bytes, as cuMemAlloc. */
  readonly alignment = DEVICE_ALIGNMENT;
  /** True when this resource created its pool (and so destroys it with itself). */
  readonly ownsPool: boolean;
  /**
   * True when the pool was created with shareable handles (POSIX file descriptors or fabric): its
   * allocations can be shared with other processes (`exportIpc`).
   */
  readonly exportable: boolean;
  /** The handles the pool was created with: 'none' for the default and current pools. */
  readonly handleTypes: AsyncHandleTypes;
  /** How `describe()` names a pool it did not create. */
  private readonly describedPool: 'default' | 'current';
  /** The pool's maximum size in bytes, as created; 0 for none (the default pool has none). */
  readonly maxSize: number;
  private readonly rawPool: Handle;

  /**
   * A resource over the device's default pool, or over a new pool with the given properties.
   * @param options The device and the pool.
   * @throws {NotSupportedError} When the device has no stream-ordered pools.
   * @throws {TypeError | RangeError} For bad pool properties.
   * @example
   * ```ts
   * using shared = new AsyncResource({ device: 0, pool: { maxSize: 1 << 30, handleTypes: 'posix-fd' } });
   * ```
   */
  constructor(options: AsyncResourceOptions = {}) {
    options = readOptions('new AsyncResource', options, { device: true, pool: true });
    const device = Device.resolve(options.device);
    // Every argument is read before super(): the registry of caches holds a resource from its
    // constructor on, and a half-made one (no pool) would break the next cache release.
    const pool = readPoolOptions(options.pool);
    if (!device.info.memoryPoolsSupported) {
      throw new NotSupportedError(`device ${device.ordinal} does not support stream-ordered memory pools`);
    }
    const hostNumaId = typeof pool === 'object' && pool.location.type === 'host-numa' ? hostNumaNode(device, pool.location.id) : undefined;
    if (typeof pool === 'object' && pool.handleTypes === 'fabric') checkFabricSupport(device, 'pool', 'new AsyncResource');
    super(device);
    this.hostNumaId = hostNumaId;
    this.kind = hostNumaId === undefined ? 'device' : 'pinned-host';
    device.makeCurrent();
    if (pool === 'default' || pool === 'current') {
      this.rawPool = pool === 'default' ? device.backend.deviceGetDefaultMemPool(device.ordinal) : device.backend.deviceGetMemPool(device.ordinal);
      this.ownsPool = false;
      this.exportable = false;
      this.handleTypes = 'none';
      this.maxSize = 0;
      this.describedPool = pool;
    } else {
      this.rawPool = device.backend.memPoolCreate({
        device: device.ordinal,
        handleTypes: HANDLE_TYPES[pool.handleTypes],
        maxSize: pool.maxSize,
        ...(hostNumaId === undefined ? {} : { hostNumaId }),
      });
      if (hostNumaId !== undefined) {
        // Host NUMA memory is reachable from the host alone until access is granted (the driver's
        // rule for such pools): the device's copies and kernels need it.
        try {
          device.backend.memPoolSetAccess(this.rawPool, device.ordinal, MemAccess.READWRITE);
        } catch (error) {
          device.backend.memPoolDestroy(this.rawPool);
          throw error;
        }
      }
      this.ownsPool = true;
      this.exportable = pool.handleTypes !== 'none';
      this.handleTypes = pool.handleTypes;
      this.maxSize = pool.maxSize;
      this.describedPool = 'default';
    }
    const { rawPool, ownsPool } = this;
    const free = (ptr: Ptr, handle: number): void => memFreeAsync(device, ptr, handle);
    if (ownsPool) this.guardLive(free, () => destroyPool(device, rawPool));
    else this.guardLive(free);
  }

  /** The driver's pool handle (CUmemoryPool). */
  get pool(): Handle {
    if (this.destroyed) throw new UseAfterFreeError("the AsyncResource's pool was destroyed");
    return this.rawPool;
  }

  protected driverAllocate(bytes: number, handle: number): Ptr {
    const pool = this.rawPool;
    this.owner.makeCurrent();
    return this.backend.memAllocFromPoolAsync(bytes, pool, handle);
  }

  protected driverFree(ptr: Ptr, _bytes: number, handle: number): void {
    memFreeAsync(this.owner, ptr, handle);
  }

  /**
   * `maximum` when the pool could not grow by `bytes` without passing its maximum size (the driver
   * answers CUDA_ERROR_OUT_OF_MEMORY either way); the driver's reason otherwise.
   */
  protected override outOfMemoryReason(error: OutOfMemoryError, bytes: number): OutOfMemoryReason {
    return this.maxSize > 0 && this.reservedBytes + bytes > this.maxSize ? 'maximum' : error.reason;
  }

  /** Trims the pool to nothing kept and returns how many reserved bytes that released. */
  protected override doReleaseCached(): number {
    const before = this.reservedBytes;
    this.trimTo(0);
    return Math.max(0, before - this.reservedBytes);
  }

  /** Bytes the pool keeps when idle instead of returning them to the driver (0 by default). */
  get releaseThreshold(): number {
    return this.get(MemPoolAttribute.RELEASE_THRESHOLD);
  }

  set releaseThreshold(bytes: number) {
    this.set(MemPoolAttribute.RELEASE_THRESHOLD, checkNonNegativeInteger(bytes, 'releaseThreshold'));
  }

  /** Reuse memory freed on another stream once an event dependency shows it is safe (default on). */
  get reuseFollowEventDependencies(): boolean {
    return this.get(MemPoolAttribute.REUSE_FOLLOW_EVENT_DEPENDENCIES) !== 0;
  }

  set reuseFollowEventDependencies(on: boolean) {
    this.set(MemPoolAttribute.REUSE_FOLLOW_EVENT_DEPENDENCIES, checkBoolean(on, 'reuseFollowEventDependencies'));
  }

  /** Reuse memory whose free has already completed, from any stream (default on). */
  get reuseAllowOpportunistic(): boolean {
    return this.get(MemPoolAttribute.REUSE_ALLOW_OPPORTUNISTIC) !== 0;
  }

  set reuseAllowOpportunistic(on: boolean) {
    this.set(MemPoolAttribute.REUSE_ALLOW_OPPORTUNISTIC, checkBoolean(on, 'reuseAllowOpportunistic'));
  }

  /** Let the driver insert dependencies to reuse memory freed on another stream (default on). */
  get reuseAllowInternalDependencies(): boolean {
    return this.get(MemPoolAttribute.REUSE_ALLOW_INTERNAL_DEPENDENCIES) !== 0;
  }

  set reuseAllowInternalDependencies(on: boolean) {
    this.set(MemPoolAttribute.REUSE_ALLOW_INTERNAL_DEPENDENCIES, checkBoolean(on, 'reuseAllowInternalDependencies'));
  }

  /** Bytes the pool holds from the driver now (RESERVED_MEM_CURRENT). */
  override get reservedBytes(): number {
    return this.get(MemPoolAttribute.RESERVED_MEM_CURRENT);
  }

  /** High-water mark of `reservedBytes` since creation or the last `resetPeakFigures()` (RESERVED_MEM_HIGH). */
  override get peakReservedBytes(): number {
    return this.get(MemPoolAttribute.RESERVED_MEM_HIGH);
  }

  /** Bytes allocated from the pool and not yet freed. */
  get usedBytes(): number {
    return this.get(MemPoolAttribute.USED_MEM_CURRENT);
  }

  /** High-water mark of `usedBytes` since creation or the last reset. */
  get peakUsedBytes(): number {
    return this.get(MemPoolAttribute.USED_MEM_HIGH);
  }

  /** The live table's allocated figures with the pool's reserved bytes and their high-water mark. */
  override memoryFigures(): MemoryFigures {
    const { allocatedBytes, allocations } = super.memoryFigures()!;
    return { allocatedBytes, allocations, reservedBytes: this.reservedBytes, peakReservedBytes: this.peakReservedBytes };
  }

  /**
   * Restarts the live table's peaks and both of the pool's high-water marks (reserved and used).
   *
   * @throws {UseAfterFreeError} When the resource was destroyed.
   * @throws {CudaError} When the driver refuses.
   * @example
   * ```ts
   * mr.resetPeakFigures(); // mr.peakUsedBytes === mr.usedBytes
   * ```
   */
  override resetPeakFigures(): void {
    super.resetPeakFigures();
    this.set(MemPoolAttribute.RESERVED_MEM_HIGH, 0);
    this.set(MemPoolAttribute.USED_MEM_HIGH, 0);
  }

  /**
   * Returns unused memory to the driver until at most `bytes` stay reserved beyond what is in use.
   *
   * @param bytes The most unused bytes to keep reserved; 0 returns all it can.
   * @throws {TypeError | RangeError} When `bytes` is not a whole number >= 0.
   * @throws {UseAfterFreeError} When the resource was destroyed.
   * @throws {CudaError} When the driver refuses.
   * @example
   * ```ts
   * mr.trimTo(0); // after a peak: give the pool's idle memory back to the driver
   * ```
   */
  trimTo(bytes: number): void {
    checkNonNegativeInteger(bytes, 'bytes');
    const pool = this.pool;
    this.deviceObject.makeCurrent();
    this.deviceObject.backend.memPoolTrimTo(pool, bytes);
  }

  /**
   * Lets `peer` access (or stops it accessing) this pool's memory.
   *
   * @param peer Another device.
   * @param access `'none'`, `'read'` or `'readwrite'`.
   * @throws {TypeError} When `peer` is not a Device.
   * @throws {RangeError} For another `access`, or when `peer` is the pool's own device (it always has read-write access).
   * @throws {UseAfterFreeError} When the resource was destroyed.
   * @throws {CudaError} When the driver refuses (the devices cannot access each other's memory).
   * @example
   * ```ts
   * mr.setAccess(Device.get(1), 'readwrite'); // device 1's kernels may use this pool's blocks
   * ```
   */
  setAccess(peer: Device, access: PoolAccess): void {
    if (!(peer instanceof Device)) throw new TypeError('peer must be a Device');
    const flags = accessFlags(access);
    if (peer === this.deviceObject) {
      throw new RangeError("a pool's own device always has read-write access");
    }
    const pool = this.pool;
    this.deviceObject.makeCurrent();
    this.deviceObject.backend.memPoolSetAccess(pool, peer.ordinal, flags);
  }

  /**
   * How `device` may access this pool's memory.
   *
   * @param device Any device, the pool's own included.
   * @returns `'none'`, `'read'` or `'readwrite'`.
   * @throws {TypeError} When `device` is not a Device.
   * @throws {UseAfterFreeError} When the resource was destroyed.
   * @throws {CudaError} When the driver refuses.
   * @example
   * ```ts
   * mr.getAccess(Device.get(1)); // 'none' until setAccess
   * ```
   */
  getAccess(device: Device): PoolAccess {
    if (!(device instanceof Device)) throw new TypeError('device must be a Device');
    const pool = this.pool;
    this.deviceObject.makeCurrent();
    return poolAccess(this.deviceObject.backend.memPoolGetAccess(pool, device.ordinal));
  }

  /**
   * Frees what is still live (stream-ordered, on the default stream) and destroys the pool if this
   * resource created it; the device's default pool is left to the driver.
   */
  protected override doDestroy(): void {
    super.doDestroy();
    if (this.ownsPool) destroyPool(this.owner, this.rawPool);
  }

  /**
   * The device ordinal; -1 for a pool in host NUMA memory (host memory belongs to no device, as
   * PinnedHostResource's; `deviceObject` is still the device whose context makes the calls).
   */
  override get deviceOrdinal(): number {
    return this.hostNumaId === undefined ? super.deviceOrdinal : -1;
  }

  /** `AsyncResource(device=0, pool=default)`; `AsyncResource(device=0, host-numa=0, pool=created)` for host memory. */
  describe(): string {
    const numa = this.hostNumaId === undefined ? '' : `, host-numa=${this.hostNumaId}`;
    return `AsyncResource(device=${this.deviceObject.ordinal}${numa}, pool=${this.ownsPool ? 'created' : this.describedPool})`;
  }

  private get(attribute: MemPoolAttribute): number {
    const pool = this.pool;
    this.deviceObject.makeCurrent();
    return this.deviceObject.backend.memPoolGetAttribute(pool, attribute);
  }

  private set(attribute: MemPoolAttribute, value: number): void {
    const pool = this.pool;
    this.deviceObject.makeCurrent();
    this.deviceObject.backend.memPoolSetAttribute(pool, attribute, value);
  }
}

/** The properties of a new pool, checked. */
interface PoolProperties {
  readonly maxSize: number;
  readonly handleTypes: AsyncHandleTypes;
  readonly location: AsyncPoolLocation;
}

/** The driver's CUmemAllocationHandleType of each `handleTypes`. */
const HANDLE_TYPES: Readonly<Record<AsyncHandleTypes, number>> = {
  none: MemHandleType.NONE,
  'posix-fd': MemHandleType.POSIX_FILE_DESCRIPTOR,
  fabric: MemHandleType.FABRIC,
};

/** The pool options, checked: 'default', or the properties of a new pool. */
function readPoolOptions(options: AsyncResourceOptions['pool']): 'default' | 'current' | PoolProperties {
  if (options === undefined || options === 'default') return 'default';
  if (options === 'current') return 'current';
  if (options === null || typeof options !== 'object') throw new TypeError(`pool must be 'default', 'current' or an object of pool properties`);
  const pool = readOptions('new AsyncResource', options, { maxSize: true, handleTypes: true, location: true }, 'pool');
  const maxSize = pool.maxSize === undefined ? 0 : readBytes(pool.maxSize, 'pool.maxSize', true);
  const handleTypes = pool.handleTypes ?? 'none';
  if (handleTypes !== 'none' && handleTypes !== 'posix-fd' && handleTypes !== 'fabric') {
    throw new RangeError(`pool.handleTypes must be 'none', 'posix-fd' or 'fabric', got '${String(handleTypes)}'`);
  }
  const location = readLocation(pool.location);
  if (handleTypes === 'fabric' && location.type !== 'device') {
    throw new RangeError("pool.handleTypes 'fabric' is for device memory, not a pool on a host NUMA node");
  }
  if (maxSize > 0 && location.type !== 'device') {
    // Measured (CUDA 13, H200): a host NUMA pool of maxSize 4 MiB reserved 32 MiB and handed out 10 MiB.
    throw new RangeError(
      'pool.maxSize does not bound a pool on a host NUMA node: the driver ignores it there; ' +
        'bound what is allocated with a memory budget (withMemoryBudget) or a LimitingAdaptor instead',
    );
  }
  return { maxSize, handleTypes, location };
}

/** `pool.location`, checked: 'device' or 'host-numa' with an optional node id. */
function readLocation(location: AsyncPoolLocation | undefined): AsyncPoolLocation {
  if (location === undefined) return { type: 'device' };
  if (location === null || typeof location !== 'object') throw new TypeError(`pool.location must be an object like { type: 'host-numa', id: 0 }`);
  const read = readOptions('new AsyncResource', location as { type: string; id?: number }, { type: true, id: true }, 'pool.location');
  const type: unknown = read.type;
  if (type === 'device') {
    if (read.id !== undefined) throw new TypeError(`pool.location.id is for 'host-numa' locations (a device pool's device is options.device)`);
    return { type };
  }
  if (type === 'host' || type === 'host-numa-current') {
    throw new RangeError(
      `pool.location.type '${type}' is refused for pools (the driver takes a NUMA node: CU_MEM_LOCATION_TYPE_HOST_NUMA); use { type: 'host-numa', id }`,
    );
  }
  if (type !== 'host-numa') throw new RangeError(`pool.location.type must be 'device' or 'host-numa', got ${JSON.stringify(type)}`);
  if (read.id === undefined) return { type };
  return { type, id: checkNonNegativeInteger(read.id, 'pool.location.id') };
}

/**
 * The host NUMA node of a pool on `device`: `id`, or the device's nearest node
 * (CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID); a NotSupportedError naming the attribute when the device or
 * driver has no such pools (CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED, CUDA 12.2 and
 * later) or no host NUMA node.
 */
function hostNumaNode(device: Device, id: number | undefined): number {
  const attribute = (name: 'hostNumaMemoryPoolsSupported' | 'hostNumaId'): number => {
    try {
      return device.attribute(name);
    } catch (error) {
      // A driver older than the attribute refuses it: it has no host NUMA pools either.
      if (error instanceof CudaError) {
        throw new NotSupportedError(
          `device ${device.ordinal}: the driver does not know CU_DEVICE_ATTRIBUTE_${snake(name)} (${error.errorName}): pools in host NUMA memory need CUDA 12.2 or later`,
        );
      }
      throw error;
    }
  };
  if (attribute('hostNumaMemoryPoolsSupported') === 0) {
    throw new NotSupportedError(
      `device ${device.ordinal} does not support pools in host NUMA memory (CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED is 0)`,
    );
  }
  if (id !== undefined) return id;
  const nearest = attribute('hostNumaId');
  if (nearest < 0) {
    throw new NotSupportedError(`device ${device.ordinal} has no host NUMA node (CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID is ${nearest}): give pool.location.id`);
  }
  return nearest;
}

/** `hostNumaId` as `HOST_NUMA_ID`. */
function snake(name: string): string {
  return name.replace(/[A-Z]/g, (c) => `_${c}`).toUpperCase();
}

/** cuMemFreeAsync on stream `handle`, in `owner`'s context. */
function memFreeAsync(owner: Device, ptr: Ptr, handle: number): void {
  owner.makeCurrent();
  owner.backend.memFreeAsync(ptr, handle);
}

/** cuMemPoolDestroy, in `owner`'s context. */
function destroyPool(owner: Device, pool: Handle): void {
  owner.makeCurrent();
  owner.backend.memPoolDestroy(pool);
}

function checkBoolean(value: unknown, name: string): number {
  if (typeof value !== 'boolean') throw new TypeError(`${name} must be a boolean, got ${typeof value}`);
  return value ? 1 : 0;
}
