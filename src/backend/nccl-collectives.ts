/**
 * The cuda backend's collectives: NCCL (src/cuda/nccl.ts), loaded on the first call that needs it.
 * Every call makes the rank's device current first (NCCL uses the CUDA runtime, which takes the
 * context current on the thread) and turns a failed result into an `NcclError`.
 */
import { loadNccl, NcclDataType, NcclRedOp, ncclVersionText, NCCL_UNIQUE_ID_BYTES, type Nccl } from '../cuda/nccl.js';
import { NotSupportedError } from '../errors.js';
import type { Handle, Ptr } from './backend.js';
import type { CollectiveDataType, CollectiveReduceOp, CollectiveTransport, TransportComm, TransportOptions } from './collectives.js';

/** ncclDataType_t of an element type (bool as uint8). */
function ncclType(type: CollectiveDataType): number {
  return NcclDataType[type === 'bool' ? 'uint8' : type];
}

/** One rank's ncclComm_t. */
class NcclComm implements TransportComm {
  constructor(
    private readonly nccl: Nccl,
    private readonly comm: bigint,
    private readonly enter: () => void,
  ) {}

  private call(name: string, result: () => number): void {
    this.enter();
    this.nccl.check(name, result(), this.comm);
  }

  allReduce(send: Ptr, recv: Ptr, count: number, type: CollectiveDataType, op: CollectiveReduceOp, stream: Handle): void {
    this.call('ncclAllReduce', () => this.nccl.fn.ncclAllReduce(send, recv, count, ncclType(type), NcclRedOp[op], this.comm, stream));
  }

  allGather(send: Ptr, recv: Ptr, sendCount: number, type: CollectiveDataType, stream: Handle): void {
    this.call('ncclAllGather', () => this.nccl.fn.ncclAllGather(send, recv, sendCount, ncclType(type), this.comm, stream));
  }

  reduceScatter(send: Ptr, recv: Ptr, recvCount: number, type: CollectiveDataType, op: CollectiveReduceOp, stream: Handle): void {
    this.call('ncclReduceScatter', () => this.nccl.fn.ncclReduceScatter(send, recv, recvCount, ncclType(type), NcclRedOp[op], this.comm, stream));
  }

  broadcast(send: Ptr, recv: Ptr, count: number, type: CollectiveDataType, root: number, stream: Handle): void {
    this.call('ncclBroadcast', () => this.nccl.fn.ncclBroadcast(send, recv, count, ncclType(type), root, this.comm, stream));
  }

  send(data: Ptr, count: number, type: CollectiveDataType, peer: number, stream: Handle): void {
    this.call('ncclSend', () => this.nccl.fn.ncclSend(data, count, ncclType(type), peer, this.comm, stream));
  }

  recv(data: Ptr, count: number, type: CollectiveDataType, peer: number, stream: Handle): void {
    this.call('ncclRecv', () => this.nccl.fn.ncclRecv(data, count, ncclType(type), peer, this.comm, stream));
  }

  register(ptr: Ptr, bytes: number): () => void {
    const { nccl, comm } = this;
    const { ncclCommRegister, ncclCommDeregister } = nccl.fn;
    if (ncclCommRegister === undefined || ncclCommDeregister === undefined) {
      throw new NotSupportedError(
        `Communicator.register: NCCL ${ncclVersionText(nccl.version)} (${nccl.path}) has no ` +
          'ncclCommRegister; user buffer registration needs NCCL 2.19 or later (pip install -U nvidia-nccl-cu12)',
      );
    }
    const out = new BigUint64Array(1);
    this.call('ncclCommRegister', () => ncclCommRegister(comm, ptr, bytes, out));
    const handle = out[0]!;
    return () => nccl.check('ncclCommDeregister', ncclCommDeregister(comm, handle), comm);
  }

  destroy(): void {
    const { nccl, comm } = this;
    this.enter();
    let failure: unknown;
    const finalize = nccl.fn.ncclCommFinalize;
    if (finalize !== undefined) {
      try {
        nccl.check('ncclCommFinalize', finalize(comm), comm);
      } catch (error) {
        failure = error;
      }
    }
    try {
      nccl.check('ncclCommDestroy', nccl.fn.ncclCommDestroy(comm));
    } catch (error) {
      failure ??= error;
    }
    if (failure !== undefined) throw failure;
  }

  abort(): void {
    this.nccl.check('ncclCommAbort', this.nccl.fn.ncclCommAbort(this.comm));
  }
}

/** NCCL as a backend's collective transport. */
export const ncclCollectives: CollectiveTransport = {
  uniqueId(): Uint8Array {
    const nccl = loadNccl();
    const bytes = new Uint8Array(NCCL_UNIQUE_ID_BYTES);
    nccl.check('ncclGetUniqueId', nccl.fn.ncclGetUniqueId(bytes));
    return bytes;
  },

  init(id: Uint8Array, rank: number, size: number, options: TransportOptions): TransportComm {
    const nccl = loadNccl();
    options.enter();
    const out = new BigUint64Array(1);
    nccl.check('ncclCommInitRank', nccl.fn.ncclCommInitRank(out, size, { internal: id }, rank));
    return new NcclComm(nccl, out[0]!, options.enter);
  },

  groupStart(): void {
    const nccl = loadNccl();
    nccl.check('ncclGroupStart', nccl.fn.ncclGroupStart());
  },

  groupEnd(): void {
    const nccl = loadNccl();
    nccl.check('ncclGroupEnd', nccl.fn.ncclGroupEnd());
  },
};
