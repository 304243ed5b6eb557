/**
 * The emulated backend's collectives: NCCL's calls between processes of one machine, over a
 * `CollectiveChannel` per rank (collective-channel.ts), with NCCL's semantics: the same layouts,
 * the same pairing of sends and receives inside a group, the same reductions (the host reduction
 * the layer above hands down, in rank order). A call reads its input once its stream's earlier
 * work is done and writes its output before it returns: complete when it returns, which stream
 * order allows. Inside a group the work runs at the outermost end, sends first, receives last.
 */
import { randomBytes } from 'node:crypto';
import { NCCL_UNIQUE_ID_BYTES } from '../../cuda/nccl.js';
import { NcclError } from '../../errors.js';
import type { Backend, Handle, Ptr } from '../backend.js';
import type { CollectiveDataType, CollectiveReduceOp, CollectiveTransport, TransportComm, TransportOptions } from '../collectives.js';
import { CollectiveChannel } from './collective-channel.js';

/** ncclResult_t ncclInvalidUsage. */
const INVALID_USAGE = 5;

/** The bytes of one element of each type. */
const ELEMENT_BYTES: Readonly<Record<CollectiveDataType, number>> = {
  bool: 1,
  int8: 1,
  uint8: 1,
  int32: 4,
  uint32: 4,
  int64: 8,
  uint64: 8,
  float16: 2,
  bfloat16: 2,
  float32: 4,
  float64: 8,
};

/** What the emulation needs from its backend: stream order and the device's bytes. */
type DeviceAccess = Pick<Backend, 'streamSynchronize' | 'memcpyToHost' | 'memcpyFromHost'>;

/** Work queued in a group, by when it runs at the group's end: sends, then collectives, then receives. */
interface Pending {
  readonly phase: 0 | 1 | 2;
  readonly run: () => void;
}

/** One rank's communicator: its channel, and the calls on device memory. */
class EmulatedComm implements TransportComm {
  constructor(
    private readonly calls: CollectiveCalls,
    private readonly device: DeviceAccess,
    private readonly channel: CollectiveChannel,
    private readonly options: TransportOptions,
  ) {}

  /** Runs `work` now, or at the group's end when a group is open. */
  #queue(phase: 0 | 1 | 2, work: () => void): void {
    this.calls.queue(phase, () => {
      this.options.enter();
      work();
    });
  }

  /** The bytes at `ptr` once `stream`'s earlier work is done (running a stream's queue is how it gets done). */
  #read(ptr: Ptr, bytes: number, stream: Handle): Uint8Array {
    this.device.streamSynchronize(stream);
    const out = new Uint8Array(bytes);
    this.device.memcpyToHost(out, ptr, bytes);
    return out;
  }

  #write(ptr: Ptr, bytes: number, data: Uint8Array): void {
    if (data.byteLength !== bytes) throw new NcclError('ncclRecv', INVALID_USAGE, 'invalid usage', `got ${data.byteLength} bytes for ${bytes}`);
    this.device.memcpyFromHost(ptr, data, bytes);
  }

  allReduce(send: Ptr, recv: Ptr, count: number, type: CollectiveDataType, op: CollectiveReduceOp, stream: Handle): void {
    const bytes = count * ELEMENT_BYTES[type];
    this.#queue(1, () => {
      const all = this.channel.exchange('ncclAllReduce', this.#read(send, bytes, stream), { count, dtype: type, op });
      const out = new Uint8Array(bytes);
      this.options.reduce(out, all, 0, type, op);
      this.#write(recv, bytes, out);
    });
  }

  allGather(send: Ptr, recv: Ptr, sendCount: number, type: CollectiveDataType, stream: Handle): void {
    const bytes = sendCount * ELEMENT_BYTES[type];
    this.#queue(1, () => {
      const all = this.channel.exchange('ncclAllGather', this.#read(send, bytes, stream), { count: sendCount, dtype: type });
      const out = new Uint8Array(bytes * this.channel.size);
      all.forEach((part, i) => out.set(part, i * bytes));
      this.#write(recv, out.byteLength, out);
    });
  }

  reduceScatter(send: Ptr, recv: Ptr, recvCount: number, type: CollectiveDataType, op: CollectiveReduceOp, stream: Handle): void {
    const bytes = recvCount * ELEMENT_BYTES[type];
    this.#queue(1, () => {
      const all = this.channel.exchange('ncclReduceScatter', this.#read(send, bytes * this.channel.size, stream), { count: recvCount, dtype: type, op });
      const out = new Uint8Array(bytes);
      this.options.reduce(out, all, this.channel.rank * bytes, type, op);
      this.#write(recv, bytes, out);
    });
  }

  broadcast(send: Ptr, recv: Ptr, count: number, type: CollectiveDataType, root: number, stream: Handle): void {
    const bytes = count * ELEMENT_BYTES[type];
    this.#queue(1, () => {
      const all = this.channel.exchange('ncclBroadcast', this.channel.rank === root ? this.#read(send, bytes, stream) : new Uint8Array(0), {
        count,
        dtype: type,
        root,
      });
      this.#write(recv, bytes, all[root]!);
    });
  }

  send(data: Ptr, count: number, type: CollectiveDataType, peer: number, stream: Handle): void {
    const bytes = count * ELEMENT_BYTES[type];
    this.#queue(0, () => this.channel.send(peer, this.#read(data, bytes, stream)));
  }

  recv(data: Ptr, count: number, type: CollectiveDataType, peer: number, stream: Handle): void {
    const bytes = count * ELEMENT_BYTES[type];
    this.#queue(2, () => {
      this.device.streamSynchronize(stream);
      this.#write(data, bytes, this.channel.recv(peer, bytes));
    });
  }

  /** There are no staging buffers: nothing to register. */
  register(): () => void {
    return () => {};
  }

  destroy(): void {
    this.channel.close();
  }

  abort(): void {
    this.channel.close();
  }
}

/** The emulated backend's collective transport; one per backend, holding its open groups. */
export class CollectiveCalls implements CollectiveTransport {
  /** Groups open now (groups nest, as NCCL's do), and their work. */
  #depth = 0;
  #work: Pending[] = [];

  constructor(private readonly device: DeviceAccess) {}

  /** 128 random bytes: they name the rendezvous folder. */
  uniqueId(): Uint8Array {
    return new Uint8Array(randomBytes(NCCL_UNIQUE_ID_BYTES));
  }

  init(id: Uint8Array, rank: number, size: number, options: TransportOptions): TransportComm {
    return new EmulatedComm(this, this.device, new CollectiveChannel(id, rank, size, options.timeout), options);
  }

  groupStart(): void {
    this.#depth++;
  }

  groupEnd(abandon: boolean): void {
    this.#depth--;
    if (this.#depth > 0) return;
    const work = this.#work;
    this.#work = [];
    if (abandon) return;
    // Sends never wait, so every rank's sends are out before anyone waits on a collective or a receive.
    for (const phase of [0, 1, 2]) for (const item of work) if (item.phase === phase) item.run();
  }

  /**
   * Runs `run` now, or at the outermost group's end when a group is open.
   *
   * @param phase When it runs at the group's end: 0 sends, 1 collectives, 2 receives.
   * @param run The work.
   */
  queue(phase: 0 | 1 | 2, run: () => void): void {
    if (this.#depth > 0) this.#work.push({ phase, run });
    else run();
  }
}
