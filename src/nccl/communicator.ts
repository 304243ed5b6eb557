/**
 * `Communicator`: one rank of an NCCL communicator, with its collectives on `DeviceArray`s and
 * device buffers, queued on vram streams. It checks every argument and keeps stream order; the
 * device's backend moves the data (`Backend.collectives()`, src/backend/collectives.ts): NCCL on
 * the cuda backend, processes of one machine on the emulated one, reducing with host-reduce.ts.
 *
 * Every argument is checked before any NCCL call, so a refused call queues nothing.
 */
import { DeviceArray } from '../array/device-array.js';
import { defaultDType, dtypeOf, type DType, type DTypeName, type ScalarName } from '../array/dtype.js';
import type { Handle } from '../backend/backend.js';
import { COLLECTIVE_DATA_TYPES, COLLECTIVE_REDUCE_OPS, type CollectiveDataType, type CollectiveReduceOp, type TransportComm } from '../backend/collectives.js';
import { getBackend } from '../backend/select.js';
import { DeviceMemory } from '../buffer/device-memory.js';
import { prepareUse } from '../buffer/spill/residency.js';
import { loadNccl, ncclVersionText } from '../cuda/nccl.js';
import { Device } from '../device.js';
import { NotSupportedError, VramStateError } from '../errors.js';
import { streamHandleOf, type StreamRef } from '../stream.js';
import { inspectCustom } from '../util/inspect.js';
import { readOptions } from '../util/options.js';
import { reduceInto } from './host-reduce.js';
import { UniqueId } from './unique-id.js';

/** What a collective reads or writes: a contiguous `DeviceArray`, or device memory (a `DeviceBuffer`). */
export type CollectiveMemory = DeviceArray | DeviceMemory;

/** `Communicator.init`'s options. */
export interface CommunicatorOptions {
  /** The communicator's unique id (`UniqueId.create()` on one rank), or its base64 text or bytes. */
  readonly id: UniqueId | string | Uint8Array;
  /** This process's rank, 0 to size - 1. */
  readonly rank: number;
  /** The number of ranks. */
  readonly size: number;
  /** The device this rank uses (default device 0); one rank per device. */
  readonly device?: Device | number;
  /**
   * Emulated backend only: milliseconds a rank waits for the others at init and in each call
   * before an NcclError (default 60000). NCCL on a GPU waits as NCCL does.
   */
  readonly timeout?: number;
}

/** Options of every collective. */
export interface CollectiveOptions {
  /** The stream to queue on (default: the output's stream, the legacy default stream when it has none). */
  readonly stream?: StreamRef;
  /** The element type of a buffer (default float32); an array's is its own, and another is refused. */
  readonly dtype?: DTypeName | DType;
}

/** Options of the reductions (allReduce, reduceScatter). */
export interface CollectiveReduceOptions extends CollectiveOptions {
  /** The operator (default 'sum'); 'avg' divides the sum by the number of ranks (integers truncate). */
  readonly op?: CollectiveReduceOp;
}

/** Options of broadcast. */
export interface BroadcastOptions extends CollectiveOptions {
  /** The rank whose data every rank receives. */
  readonly root: number;
}

const COLLECTIVE_OPTIONS = { stream: true, dtype: true } as const;
const REDUCE_OPTIONS = { stream: true, dtype: true, op: true } as const;
const BROADCAST_OPTIONS = { stream: true, dtype: true, root: true } as const;
const DEFAULT_TIMEOUT = 60_000;

/** One side of a call, checked: its address, size, element type, and how NCCL counts it. */
interface Operand {
  readonly memory: CollectiveMemory;
  readonly ptr: number;
  readonly bytes: number;
  /** The element type NCCL sees (a vector's component; bytes as uint8 for a type NCCL lacks). */
  readonly component: CollectiveDataType;
  readonly count: number;
  readonly dtype: DType;
}

/**
 * Runs `fn` as one NCCL group (ncclGroupStart/ncclGroupEnd): the collectives and sends and receives
 * it queues, on any communicators, are launched together at its end. Needed for sends and receives
 * that pair up across ranks (a ring: every rank sends to the next and receives from the previous),
 * which outside a group would wait on each other, and to fuse many small collectives into one launch.
 *
 * `fn` must be synchronous. An argument refused inside it throws before anything is queued for that
 * call; what earlier calls of `fn` queued is still launched at the group's end on a GPU (NCCL has no
 * way to take it back), and dropped on the emulated backend.
 *
 * @param fn Queues the calls.
 * @returns What `fn` returns.
 * @throws {TypeError} When `fn` is not a function, or returns a promise.
 * @throws {NcclError} When NCCL refuses the group (ncclGroupEnd reports the first failure).
 * @example
 * ```ts
 * group(() => {
 *   comm.send(out, (comm.rank + 1) % comm.size);
 *   comm.recv(inp, (comm.rank + comm.size - 1) % comm.size);
 * });
 * ```
 */
export function group<T>(fn: () => T): T {
  if (typeof fn !== 'function') throw new TypeError('group: fn must be a function');
  const transport = getBackend().collectives();
  transport.groupStart();
  let result: T;
  try {
    result = fn();
    refusePromise(result);
  } catch (error) {
    transport.groupEnd(true);
    throw error;
  }
  transport.groupEnd(false);
  return result;
}

function refusePromise(result: unknown): void {
  if (result !== null && typeof result === 'object' && typeof (result as { then?: unknown }).then === 'function') {
    throw new TypeError('group: fn must be synchronous (a group cannot span an await); it returned a promise');
  }
}

/**
 * An NCCL user-buffer registration (`Communicator.register`): NCCL may then run collectives on the
 * memory in place, without copying it through its own buffers. `destroy()` deregisters it
 * (ncclCommDeregister); destroying the communicator destroys its registrations. Destroy it before
 * freeing the memory.
 *
 * @example
 * ```ts
 * using reg = comm.register(grads);
 * for (let step = 0; step < steps; step++) comm.allReduce(grads, grads, { op: 'avg' });
 * ```
 */
export class Registration {
  #destroyed = false;

  /** @internal */
  constructor(
    /** The communicator it belongs to. */
    readonly communicator: Communicator,
    /** The memory registered. */
    readonly memory: CollectiveMemory,
    private readonly end: () => void,
  ) {}

  /** True once destroyed, or once its communicator was destroyed or aborted. */
  get destroyed(): boolean {
    return this.#destroyed || this.communicator.destroyed;
  }

  /**
   * Deregisters the memory (ncclCommDeregister); a second call does nothing.
   *
   * @returns Nothing.
   * @throws {NcclError} When NCCL refuses.
   * @example
   * ```ts
   * reg.destroy();
   * ```
   */
  destroy(): void {
    if (this.#destroyed) return;
    this.end();
    this.#destroyed = true;
  }

  /** `using reg = comm.register(x)` deregisters at the end of the scope. */
  [Symbol.dispose](): void {
    this.destroy();
  }
}

/**
 * One rank of a communicator. Every rank calls `Communicator.init` with the same id and size and
 * its own rank (init returns once all have joined), then the same collectives in the same order.
 *
 * @example
 * ```ts
 * const comm = Communicator.init({ id: UniqueId.fromBase64(process.env.NCCL_ID!), rank, size, device: rank });
 * using grads = DeviceArray.zeros(1024);
 * comm.allReduce(grads, grads, { op: 'avg' });
 * comm.destroy();
 * ```
 */
export class Communicator {
  readonly #comm: TransportComm;
  readonly #registrations = new Set<Registration>();
  #destroyed = false;

  private constructor(
    /** This process's rank. */
    readonly rank: number,
    /** The number of ranks. */
    readonly size: number,
    /** The device this rank's collectives run on. */
    readonly device: Device,
    comm: TransportComm,
  ) {
    this.#comm = comm;
  }

  /**
   * Joins the communicator `id` names as `rank` of `size` (ncclCommInitRank on the device's
   * context), waiting until every rank has joined.
   *
   * @param options The id, rank, size and device.
   * @returns This rank's communicator.
   * @throws {TypeError} When an option is missing, of the wrong type, or unknown.
   * @throws {RangeError} When `size` is not a whole number from 1, `rank` not from 0 to size - 1, or the id not 128 bytes.
   * @throws {NcclUnavailableError} On the cuda backend, when NCCL cannot be loaded.
   * @throws {NcclError} When NCCL refuses (a rank joined with another size, no network, peers gone).
   * @example
   * ```ts
   * const comm = Communicator.init({ id, rank: 1, size: 2, device: 1 });
   * ```
   */
  static init(options: CommunicatorOptions): Communicator {
    const o = readOptions('Communicator.init', options, { id: true, rank: true, size: true, device: true, timeout: true });
    if (o.id === undefined || o.rank === undefined || o.size === undefined) {
      throw new TypeError('Communicator.init: options.id, options.rank and options.size are required');
    }
    const id =
      o.id instanceof UniqueId
        ? o.id
        : typeof o.id === 'string'
          ? UniqueId.fromBase64(o.id)
          : o.id instanceof Uint8Array
            ? UniqueId.fromBytes(o.id)
            : undefined;
    if (id === undefined) throw new TypeError('Communicator.init: options.id must be a UniqueId, its base64 text or its 128 bytes');
    const size = o.size;
    if (typeof size !== 'number' || !Number.isInteger(size) || size < 1) {
      throw new RangeError(`Communicator.init: options.size must be a whole number from 1, got ${String(size)}`);
    }
    const rank = o.rank;
    if (typeof rank !== 'number' || !Number.isInteger(rank) || rank < 0 || rank >= size) {
      throw new RangeError(`Communicator.init: options.rank must be a whole number from 0 to ${size - 1}, got ${String(rank)}`);
    }
    const timeout = o.timeout ?? DEFAULT_TIMEOUT;
    if (typeof timeout !== 'number' || !(timeout > 0) || !Number.isFinite(timeout)) {
      throw new RangeError(`Communicator.init: options.timeout must be a positive number of milliseconds, got ${String(timeout)}`);
    }
    const device = Device.resolve(o.device);
    // NCCL uses the CUDA runtime, which takes the context current on the thread: the device's.
    const comm = device.backend.collectives().init(id.bytes, rank, size, { timeout, enter: () => device.makeCurrent(), reduce: reduceInto });
    return new Communicator(rank, size, device, comm);
  }

  /** True once destroyed or aborted. */
  get destroyed(): boolean {
    return this.#destroyed;
  }

  /**
   * Sums (or another `op`) `send` across every rank into every rank's `recv`; `recv` may be `send`
   * (in place, the default). Both have the same element count and type.
   *
   * @param send This rank's contribution.
   * @param recv Where the result goes (default `send`).
   * @param options The operator, stream and (for buffers) element type.
   * @returns Nothing; the result is ready in stream order.
   * @throws {TypeError} For memory that is not a DeviceArray or device buffer, or an unknown option.
   * @throws {RangeError} When the counts differ, or a buffer is not a whole number of elements.
   * @throws {NotSupportedError} For a strided array, an element type NCCL cannot reduce, or another device's memory.
   * @throws {NcclError} When NCCL refuses.
   * @example
   * ```ts
   * comm.allReduce(grads, grads, { op: 'avg' });
   * ```
   */
  allReduce(send: CollectiveMemory, recv: CollectiveMemory = send, options?: CollectiveReduceOptions): void {
    const o = readOptions('Communicator.allReduce', options, REDUCE_OPTIONS);
    const op = this.#checkOp('allReduce', o.op);
    const s = this.#operand('allReduce', 'send', send, o.dtype, false, op);
    const r = this.#operand('allReduce', 'recv', recv, o.dtype, true, op);
    this.#sameCount('allReduce', s, r, 1, 1);
    const stream = this.#streamOf(o.stream, r);
    this.#recordStreams([s, r], stream, o.stream);
    this.#comm.allReduce(s.ptr, r.ptr, r.count, r.component, op, stream);
  }

  /**
   * Gathers every rank's `send` into every rank's `recv`, rank after rank: `recv` holds `size`
   * times `send`'s elements, rank i's at `i * send.count`.
   *
   * @param send This rank's part.
   * @param recv Where every part goes.
   * @param options The stream and (for buffers) element type.
   * @returns Nothing; the result is ready in stream order.
   * @throws {TypeError} For memory that is not a DeviceArray or device buffer, or an unknown option.
   * @throws {RangeError} When `recv` does not hold `size` times `send`'s elements.
   * @throws {NotSupportedError} For a strided array or another device's memory.
   * @throws {NcclError} When NCCL refuses.
   * @example
   * ```ts
   * comm.allGather(shard, full);
   * ```
   */
  allGather(send: CollectiveMemory, recv: CollectiveMemory, options?: CollectiveOptions): void {
    const o = readOptions('Communicator.allGather', options, COLLECTIVE_OPTIONS);
    const s = this.#operand('allGather', 'send', send, o.dtype, false);
    const r = this.#operand('allGather', 'recv', recv, o.dtype, true);
    this.#sameCount('allGather', s, r, this.size, 1);
    const stream = this.#streamOf(o.stream, r);
    this.#recordStreams([s, r], stream, o.stream);
    this.#comm.allGather(s.ptr, r.ptr, s.count, s.component, stream);
  }

  /**
   * Reduces `send` across every rank and scatters the result: rank i receives elements
   * [i * recv.count, (i + 1) * recv.count) of the reduction; `send` holds `size` times `recv`'s elements.
   *
   * @param send This rank's contribution, `size` parts.
   * @param recv This rank's part of the result.
   * @param options The operator, stream and (for buffers) element type.
   * @returns Nothing; the result is ready in stream order.
   * @throws {TypeError} For memory that is not a DeviceArray or device buffer, or an unknown option.
   * @throws {RangeError} When `send` does not hold `size` times `recv`'s elements.
   * @throws {NotSupportedError} For a strided array, an element type NCCL cannot reduce, or another device's memory.
   * @throws {NcclError} When NCCL refuses.
   * @example
   * ```ts
   * comm.reduceScatter(grads, shard, { op: 'sum' });
   * ```
   */
  reduceScatter(send: CollectiveMemory, recv: CollectiveMemory, options?: CollectiveReduceOptions): void {
    const o = readOptions('Communicator.reduceScatter', options, REDUCE_OPTIONS);
    const op = this.#checkOp('reduceScatter', o.op);
    const s = this.#operand('reduceScatter', 'send', send, o.dtype, false, op);
    const r = this.#operand('reduceScatter', 'recv', recv, o.dtype, true, op);
    this.#sameCount('reduceScatter', s, r, 1, this.size);
    const stream = this.#streamOf(o.stream, r);
    this.#recordStreams([s, r], stream, o.stream);
    this.#comm.reduceScatter(s.ptr, r.ptr, r.count, r.component, op, stream);
  }

  /**
   * Copies the root's `send` into every rank's `recv` (`send` is read only on the root; pass the
   * same memory twice to broadcast in place).
   *
   * @param send The data, on the root.
   * @param recv Where it goes, on every rank (the root's too).
   * @param options The root, stream and (for buffers) element type.
   * @returns Nothing; the result is ready in stream order.
   * @throws {TypeError} For memory that is not a DeviceArray or device buffer, or a missing or unknown option.
   * @throws {RangeError} When `root` is not a rank, or the counts differ.
   * @throws {NotSupportedError} For a strided array or another device's memory.
   * @throws {NcclError} When NCCL refuses.
   * @example
   * ```ts
   * comm.broadcast(weights, weights, { root: 0 });
   * ```
   */
  broadcast(send: CollectiveMemory, recv: CollectiveMemory, options: BroadcastOptions): void {
    const o = readOptions('Communicator.broadcast', options, BROADCAST_OPTIONS);
    const root = this.#checkRank('broadcast', 'options.root', o.root);
    const s = this.#operand('broadcast', 'send', send, o.dtype, false);
    const r = this.#operand('broadcast', 'recv', recv, o.dtype, true);
    this.#sameCount('broadcast', s, r, 1, 1);
    const stream = this.#streamOf(o.stream, r);
    this.#recordStreams([s, r], stream, o.stream);
    this.#comm.broadcast(s.ptr, r.ptr, r.count, r.component, root, stream);
  }

  /**
   * Sends `data` to rank `peer`, which receives it with `recv` of the same count and type. A send
   * and its receive wait for each other: pair them inside `group` when ranks both send and receive.
   *
   * @param data What to send.
   * @param peer The receiving rank.
   * @param options The stream and (for buffers) element type.
   * @returns Nothing.
   * @throws {TypeError} For memory that is not a DeviceArray or device buffer, or an unknown option.
   * @throws {RangeError} When `peer` is not a rank.
   * @throws {NotSupportedError} For a strided array or another device's memory.
   * @throws {NcclError} When NCCL refuses.
   * @example
   * ```ts
   * comm.send(activations, comm.rank + 1);
   * ```
   */
  send(data: CollectiveMemory, peer: number, options?: CollectiveOptions): void {
    const o = readOptions('Communicator.send', options, COLLECTIVE_OPTIONS);
    const to = this.#checkRank('send', 'peer', peer);
    const s = this.#operand('send', 'data', data, o.dtype, false);
    const stream = this.#streamOf(o.stream, s);
    this.#recordStreams([s], stream, o.stream);
    this.#comm.send(s.ptr, s.count, s.component, to, stream);
  }

  /**
   * Receives into `data` what rank `peer` sends with `send` (the same count and type).
   *
   * @param data Where it goes.
   * @param peer The sending rank.
   * @param options The stream and (for buffers) element type.
   * @returns Nothing; the data is there in stream order.
   * @throws {TypeError} For memory that is not a DeviceArray or device buffer, or an unknown option.
   * @throws {RangeError} When `peer` is not a rank.
   * @throws {NotSupportedError} For a strided array or another device's memory.
   * @throws {NcclError} When NCCL refuses (on the emulated backend also when the sizes differ).
   * @example
   * ```ts
   * comm.recv(activations, comm.rank - 1);
   * ```
   */
  recv(data: CollectiveMemory, peer: number, options?: CollectiveOptions): void {
    const o = readOptions('Communicator.recv', options, COLLECTIVE_OPTIONS);
    const from = this.#checkRank('recv', 'peer', peer);
    const r = this.#operand('recv', 'data', data, o.dtype, true);
    const stream = this.#streamOf(o.stream, r);
    this.#recordStreams([r], stream, o.stream);
    this.#comm.recv(r.ptr, r.count, r.component, from, stream);
  }

  /**
   * Registers memory with NCCL (ncclCommRegister, NCCL 2.19 and later) so collectives on it run in
   * place instead of being staged through NCCL's own buffers. It helps where NCCL has a zero-copy
   * path for user buffers: NVLink SHARP (NVLS) on NVSwitch systems, CollNet/SHARP over InfiniBand,
   * and peer-to-peer and network transfers of large messages; elsewhere it changes nothing. NVLS
   * needs memory from the CUDA virtual memory API, which is what vram's default pools map. On the
   * emulated backend it registers nothing (there are no staging buffers).
   *
   * @param memory Device memory of this communicator's device.
   * @returns The registration; destroy it before freeing the memory.
   * @throws {TypeError} For memory that is not a DeviceArray or device buffer.
   * @throws {NotSupportedError} When the NCCL loaded is older than 2.19, or for another device's memory.
   * @throws {NcclError} When NCCL refuses.
   * @example
   * ```ts
   * using reg = comm.register(grads);
   * ```
   */
  register(memory: CollectiveMemory): Registration {
    this.#checkAlive('register');
    const m = this.#operand('register', 'memory', memory, undefined, false);
    const end = this.#comm.register(m.ptr, m.bytes);
    const registration: Registration = new Registration(this, memory, () => {
      end();
      this.#registrations.delete(registration);
    });
    this.#registrations.add(registration);
    return registration;
  }

  /**
   * Ends this rank's communicator once its queued work is done (ncclCommFinalize, then
   * ncclCommDestroy), destroying its registrations first. A second call does nothing.
   *
   * @returns Nothing.
   * @throws {NcclError} When NCCL reports an error of the communicator.
   * @example
   * ```ts
   * comm.destroy();
   * ```
   */
  destroy(): void {
    if (this.#destroyed) return;
    this.#destroyed = true;
    // Every step runs even when one fails (nothing is leaked); the first failure is reported after.
    let failure: unknown;
    const step = (run: () => void): void => {
      try {
        run();
      } catch (error) {
        failure ??= error;
      }
    };
    for (const registration of [...this.#registrations]) step(() => registration.destroy());
    this.#registrations.clear();
    step(() => this.#comm.destroy());
    if (failure !== undefined) throw failure;
  }

  /**
   * Ends this rank's communicator now, abandoning queued work (ncclCommAbort): after an error, or
   * when a peer is gone and a collective would wait forever. A second call does nothing.
   *
   * @returns Nothing.
   * @throws {NcclError} When NCCL refuses.
   * @example
   * ```ts
   * try { comm.allReduce(x); } catch (e) { comm.abort(); throw e; }
   * ```
   */
  abort(): void {
    if (this.#destroyed) return;
    this.#destroyed = true;
    this.#registrations.clear();
    this.#comm.abort();
  }

  /** `using comm = Communicator.init(...)` destroys it at the end of the scope. */
  [Symbol.dispose](): void {
    this.destroy();
  }

  /**
   * One line: `Communicator(rank 1 of 4, device 1)`.
   *
   * @returns The line.
   * @throws Never.
   * @example
   * ```ts
   * String(comm); // 'Communicator(rank 0 of 2, device 0)'
   * ```
   */
  toString(): string {
    return `Communicator(rank ${this.rank} of ${this.size}, device ${this.device.ordinal}${this.#destroyed ? ', destroyed' : ''})`;
  }

  /** How `console.log` shows it: the same line as `String(comm)`. */
  [inspectCustom](): string {
    return this.toString();
  }

  #checkAlive(call: string): void {
    if (this.#destroyed) throw new VramStateError(`Communicator.${call}: the communicator was destroyed`);
  }

  #checkOp(call: string, op: unknown): CollectiveReduceOp {
    if (op === undefined) return 'sum';
    if (typeof op !== 'string' || !(COLLECTIVE_REDUCE_OPS as readonly string[]).includes(op)) {
      throw new RangeError(`Communicator.${call}: options.op must be one of ${COLLECTIVE_REDUCE_OPS.join(', ')}, got ${String(op)}`);
    }
    return op as CollectiveReduceOp;
  }

  #checkRank(call: string, name: string, rank: unknown): number {
    if (rank === undefined && name === 'options.root') throw new TypeError(`Communicator.${call}: options.root is required`);
    if (typeof rank !== 'number' || !Number.isInteger(rank) || rank < 0 || rank >= this.size) {
      throw new RangeError(`Communicator.${call}: ${name} must be a rank from 0 to ${this.size - 1}, got ${String(rank)}`);
    }
    return rank;
  }

  /** Checks one side of a call: its kind, liveness, layout, device and element type. */
  #operand(call: string, name: string, memory: unknown, dtypeOption: DTypeName | DType | undefined, writes: boolean, op?: CollectiveReduceOp): Operand {
    this.#checkAlive(call);
    const what = `Communicator.${call}: ${name}`;
    let dtype: DType;
    let ptr: number;
    let bytes: number;
    let device: Device;
    let readOnly: boolean;
    if (memory instanceof DeviceArray) {
      if (!(memory.buffer instanceof DeviceMemory)) throw new NotSupportedError(`${what} is an array over host memory; NCCL takes device memory`);
      if (!memory.isContiguous) throw new NotSupportedError(`${what} is a strided view; NCCL takes contiguous memory (ascontiguous(x) copies it)`);
      dtype = memory.dtype;
      if (dtypeOption !== undefined && dtypeOf(dtypeOption) !== dtype) {
        throw new TypeError(`${what} is a ${dtype.name} array; options.dtype (${dtypeOf(dtypeOption).name}) is for buffers only`);
      }
      // The residency hook first, as every copy and launch calls it (a ForeignMirror's host side copied over).
      prepareUse(memory.buffer, undefined, writes);
      ptr = memory.ptr;
      bytes = memory.nbytes;
      device = memory.device;
      readOnly = memory.readOnly;
    } else if (memory instanceof DeviceMemory) {
      dtype = dtypeOf(dtypeOption ?? defaultDType);
      prepareUse(memory, undefined, writes);
      ptr = memory.ptr;
      bytes = memory.byteLength;
      device = memory.device;
      readOnly = memory.readOnly;
      if (bytes % dtype.byteSize !== 0 && call !== 'register') {
        throw new RangeError(`${what} is ${bytes} bytes, not a whole number of ${dtype.name} elements (${dtype.byteSize} bytes)`);
      }
    } else {
      throw new TypeError(`${what} must be a DeviceArray or a DeviceBuffer`);
    }
    if (device !== this.device) {
      throw new NotSupportedError(`${what} is on device ${device.ordinal}; this communicator's rank runs on device ${this.device.ordinal}`);
    }
    if (writes && readOnly) throw new VramStateError(`${what} is read-only memory (lent or registered with readOnly)`);
    const component = dtype.component as ScalarName;
    const reducible = component !== 'int16' && component !== 'uint16' && (component !== 'bool' || op === 'max' || op === 'min');
    if (op !== undefined && !reducible) {
      throw new NotSupportedError(
        `${what}: NCCL cannot reduce ${dtype.name} with ${op} (it reduces int8, uint8, int32, uint32, ` +
          'int64, uint64, float16, bfloat16, float32 and float64; bool with max and min)',
      );
    }
    // Moving data needs no type: a type NCCL lacks (int16) moves as its bytes.
    return (COLLECTIVE_DATA_TYPES as readonly string[]).includes(component)
      ? { memory: memory as CollectiveMemory, ptr, bytes, component: component as CollectiveDataType, count: bytes / dtypeOf(component).byteSize, dtype }
      : { memory: memory as CollectiveMemory, ptr, bytes, component: 'uint8', count: bytes, dtype };
  }

  /** Checks that `send` and `recv` agree: same type, and send.bytes * sendTimes === recv.bytes * recvTimes. */
  #sameCount(call: string, s: Operand, r: Operand, sendTimes: number, recvTimes: number): void {
    if (s.dtype !== r.dtype) throw new TypeError(`Communicator.${call}: send is ${s.dtype.name} and recv ${r.dtype.name}; they must be the same type`);
    if (s.bytes * sendTimes !== r.bytes * recvTimes) {
      const need =
        sendTimes === recvTimes
          ? 'the same number of elements'
          : sendTimes > recvTimes
            ? `${sendTimes} times send's elements`
            : `${recvTimes} times fewer elements than send`;
      throw new RangeError(
        `Communicator.${call}: recv must hold ${need} (${this.size} ranks); send holds ${s.count} and recv ${r.count} ${s.component} elements`,
      );
    }
  }

  #streamOf(stream: StreamRef | undefined, output: Operand): Handle {
    return streamHandleOf(stream ?? ownStream(output.memory));
  }

  /** On a stream of the caller's, the memory's own frees wait for this work (no host wait). */
  #recordStreams(operands: readonly Operand[], stream: Handle, given: StreamRef | undefined): void {
    if (given !== undefined) for (const o of operands) if (stream !== streamHandleOf(ownStream(o.memory))) o.memory.recordStream(given);
  }
}

/** The stream memory belongs to: an array's, a buffer's allocation stream; none for foreign memory. */
function ownStream(memory: CollectiveMemory): StreamRef | undefined {
  return (memory as { readonly stream?: StreamRef }).stream;
}

/**
 * The version of the NCCL library vram loads (`VRAM_LIBNCCL`, else the usual places), and where
 * it is. It loads NCCL on any backend; communicators on the emulated
 * backend do not need it.
 *
 * @returns `{ version: '2.21.5', path }`.
 * @throws {NcclUnavailableError} When NCCL cannot be loaded (the message says what to install).
 * @example
 * ```ts
 * console.log(ncclVersion().version);
 * ```
 */
export function ncclVersion(): { readonly version: string; readonly path: string } {
  const nccl = loadNccl();
  return { version: ncclVersionText(nccl.version), path: nccl.path };
}
