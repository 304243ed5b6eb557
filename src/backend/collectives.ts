/**
 * The collective transport a backend offers (`Backend.collectives()`): NCCL's calls on device
 * addresses, queued on a stream, with the element types and operators by name. The cuda backend's
 * is NCCL (`nccl-collectives.ts`), the emulated backend's runs between processes of one machine
 * (`emulated/collective-calls.ts`). Arguments come checked: `Communicator` (src/nccl/) checks them
 * and keeps stream order; a transport only moves and reduces. Addresses and stream handles are
 * numbers (backend.ts's `Ptr` and `Handle`; backend.ts imports this file, so nothing is imported back).
 */

/** A collective's reduction operator (NCCL's ncclRedOp_t): 'avg' is the sum divided by the number of ranks. */
export type CollectiveReduceOp = 'sum' | 'prod' | 'max' | 'min' | 'avg';

/** Every reduction operator, in ncclRedOp_t's order. */
export const COLLECTIVE_REDUCE_OPS: readonly CollectiveReduceOp[] = Object.freeze(['sum', 'prod', 'max', 'min', 'avg']);

/**
 * The element types a transport carries: NCCL's ncclDataType_t by dtype name, and bool (carried
 * as uint8, reduced only with max and min). Other data moves as its bytes (uint8).
 */
export type CollectiveDataType = 'int8' | 'uint8' | 'int32' | 'uint32' | 'int64' | 'uint64' | 'float16' | 'float32' | 'float64' | 'bfloat16' | 'bool';

/** Every element type a transport carries. */
export const COLLECTIVE_DATA_TYPES: readonly CollectiveDataType[] = Object.freeze([
  'int8',
  'uint8',
  'int32',
  'uint32',
  'int64',
  'uint64',
  'float16',
  'float32',
  'float64',
  'bfloat16',
  'bool',
]);

/**
 * A reduction on the host, for a transport that has no device to reduce on (the emulated one):
 * every input's bytes [offset, offset + out.byteLength) combined element-wise into `out`, in rank
 * order. The layer above hands it down, as `ModuleImage.emulated` hands down a kernel's JavaScript.
 */
export type HostReduce = (out: Uint8Array, inputs: readonly Uint8Array[], offset: number, type: CollectiveDataType, op: CollectiveReduceOp) => void;

/** What `CollectiveTransport.init` needs besides the id, rank and size. */
export interface TransportOptions {
  /** Milliseconds a rank waits for the others (the emulated transport; NCCL waits as NCCL does). */
  readonly timeout: number;
  /** Makes the rank's device context current: called before every call that touches its memory. */
  readonly enter: () => void;
  /** The host reduction, for a transport without a device. */
  readonly reduce: HostReduce;
}

/**
 * One rank's communicator as its transport holds it (an ncclComm_t, or the emulation's channel).
 * Counts are elements of `type`; every call is queued on `stream` (inside a group, at its end).
 */
export interface TransportComm {
  allReduce(send: number, recv: number, count: number, type: CollectiveDataType, op: CollectiveReduceOp, stream: number): void;
  allGather(send: number, recv: number, sendCount: number, type: CollectiveDataType, stream: number): void;
  reduceScatter(send: number, recv: number, recvCount: number, type: CollectiveDataType, op: CollectiveReduceOp, stream: number): void;
  broadcast(send: number, recv: number, count: number, type: CollectiveDataType, root: number, stream: number): void;
  send(data: number, count: number, type: CollectiveDataType, peer: number, stream: number): void;
  recv(data: number, count: number, type: CollectiveDataType, peer: number, stream: number): void;
  /** ncclCommRegister: returns the deregistration (the emulated transport registers nothing). */
  register(ptr: number, bytes: number): () => void;
  /** ncclCommFinalize then ncclCommDestroy, each run even when the other fails (the first failure is thrown). */
  destroy(): void;
  /** ncclCommAbort: ends it now, abandoning queued work. */
  abort(): void;
}

/** A backend's collectives: unique ids, communicators, and groups. */
export interface CollectiveTransport {
  /** ncclGetUniqueId: the 128 bytes that name a new communicator. */
  uniqueId(): Uint8Array;
  /** ncclCommInitRank: joins the communicator `id` names as `rank` of `size`, once every rank has joined. */
  init(id: Uint8Array, rank: number, size: number, options: TransportOptions): TransportComm;
  /** ncclGroupStart: calls until the matching groupEnd are launched together (groups nest). */
  groupStart(): void;
  /**
   * ncclGroupEnd. With `abandon` (the group's function threw), the outermost end launches what was
   * queued on a GPU (NCCL cannot take it back) and drops it on the emulated backend.
   */
  groupEnd(abandon: boolean): void;
}
