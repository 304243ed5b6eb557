/**
 * NCCL through koffi: the calls a communicator needs, bound by name once per process on first use
 * (`loadNccl`). Handles (ncclComm_t, registration handles) and device addresses are opaque
 * pointers, bound as uint64_t; ncclUniqueId is a 128-byte struct passed by value. Every failed
 * call becomes an `NcclError` with NCCL's own text and the communicator's last error.
 */
import koffi from 'koffi';
import type { TypeObject } from 'koffi';
import { NcclError } from '../errors.js';
import { loadOnce } from '../util/load-once.js';
import { openNcclLibrary } from './nccl-library.js';

/** The bytes of an ncclUniqueId (NCCL_UNIQUE_ID_BYTES). */
export const NCCL_UNIQUE_ID_BYTES = 128;

/** ncclRedOp_t values (nccl.h). */
export const NcclRedOp = { sum: 0, prod: 1, max: 2, min: 3, avg: 4 } as const;

/** ncclDataType_t values (nccl.h, 2.10 and later for bfloat16). */
export const NcclDataType = {
  int8: 0,
  uint8: 1,
  int32: 2,
  uint32: 3,
  int64: 4,
  uint64: 5,
  float16: 6,
  float32: 7,
  float64: 8,
  bfloat16: 9,
} as const;

type R = number;
/** The functions bound; the optional ones are absent from older NCCLs. */
interface NcclFunctions {
  ncclGetVersion(version: Int32Array): R;
  ncclGetUniqueId(id: Uint8Array): R;
  ncclCommInitRank(comm: BigUint64Array, nranks: number, id: { internal: Uint8Array }, rank: number): R;
  ncclCommDestroy(comm: bigint): R;
  ncclCommAbort(comm: bigint): R;
  ncclCommCount(comm: bigint, count: Int32Array): R;
  ncclCommUserRank(comm: bigint, rank: Int32Array): R;
  ncclCommCuDevice(comm: bigint, device: Int32Array): R;
  ncclAllReduce(send: number, recv: number, count: number, type: number, op: number, comm: bigint, stream: number): R;
  ncclAllGather(send: number, recv: number, sendCount: number, type: number, comm: bigint, stream: number): R;
  ncclReduceScatter(send: number, recv: number, recvCount: number, type: number, op: number, comm: bigint, stream: number): R;
  ncclBroadcast(send: number, recv: number, count: number, type: number, root: number, comm: bigint, stream: number): R;
  ncclSend(send: number, count: number, type: number, peer: number, comm: bigint, stream: number): R;
  ncclRecv(recv: number, count: number, type: number, peer: number, comm: bigint, stream: number): R;
  ncclGroupStart(): R;
  ncclGroupEnd(): R;
  ncclGetErrorString(result: number): string;
}

/** Present from NCCL 2.13 (last error), 2.14 (finalize) and 2.19 (user buffer registration). */
interface NcclOptionalFunctions {
  ncclGetLastError?: (comm: bigint) => string | null;
  ncclCommFinalize?: (comm: bigint) => R;
  ncclCommRegister?: (comm: bigint, buffer: number, size: number, handle: BigUint64Array) => R;
  ncclCommDeregister?: (comm: bigint, handle: bigint) => R;
}

/** The ncclUniqueId struct, registered once per process (module reloads reuse it). */
function uniqueIdType(): TypeObject {
  try {
    return koffi.type('vram_ncclUniqueId');
  } catch {
    return koffi.struct('vram_ncclUniqueId', { internal: koffi.array('uint8_t', NCCL_UNIQUE_ID_BYTES, 'Typed') });
  }
}

/** The prototypes bound (nccl.h, 2.x); ncclComm_t and cudaStream_t are opaque pointers, bound as uint64_t. */
const PROTOTYPES: Readonly<Record<keyof NcclFunctions, string>> = {
  ncclGetVersion: 'int ncclGetVersion(int *version)',
  ncclGetUniqueId: 'int ncclGetUniqueId(uint8_t *id)',
  ncclCommInitRank: 'int ncclCommInitRank(uint64_t *comm, int nranks, vram_ncclUniqueId id, int rank)',
  ncclCommDestroy: 'int ncclCommDestroy(uint64_t comm)',
  ncclCommAbort: 'int ncclCommAbort(uint64_t comm)',
  ncclCommCount: 'int ncclCommCount(uint64_t comm, int *count)',
  ncclCommUserRank: 'int ncclCommUserRank(uint64_t comm, int *rank)',
  ncclCommCuDevice: 'int ncclCommCuDevice(uint64_t comm, int *device)',
  ncclAllReduce: 'int ncclAllReduce(uint64_t send, uint64_t recv, size_t count, int type, int op, uint64_t comm, uint64_t stream)',
  ncclAllGather: 'int ncclAllGather(uint64_t send, uint64_t recv, size_t sendcount, int type, uint64_t comm, uint64_t stream)',
  ncclReduceScatter: 'int ncclReduceScatter(uint64_t send, uint64_t recv, size_t recvcount, int type, int op, uint64_t comm, uint64_t stream)',
  ncclBroadcast: 'int ncclBroadcast(uint64_t send, uint64_t recv, size_t count, int type, int root, uint64_t comm, uint64_t stream)',
  ncclSend: 'int ncclSend(uint64_t send, size_t count, int type, int peer, uint64_t comm, uint64_t stream)',
  ncclRecv: 'int ncclRecv(uint64_t recv, size_t count, int type, int peer, uint64_t comm, uint64_t stream)',
  ncclGroupStart: 'int ncclGroupStart()',
  ncclGroupEnd: 'int ncclGroupEnd()',
  ncclGetErrorString: 'const char *ncclGetErrorString(int result)',
};

const OPTIONAL_PROTOTYPES: Readonly<Record<keyof NcclOptionalFunctions, string>> = {
  ncclGetLastError: 'const char *ncclGetLastError(uint64_t comm)',
  ncclCommFinalize: 'int ncclCommFinalize(uint64_t comm)',
  ncclCommRegister: 'int ncclCommRegister(uint64_t comm, uint64_t buffer, size_t size, uint64_t *handle)',
  ncclCommDeregister: 'int ncclCommDeregister(uint64_t comm, uint64_t handle)',
};

/** A loaded NCCL. */
export interface Nccl {
  /** Where it was loaded from. */
  readonly path: string;
  /** ncclGetVersion: major * 10000 + minor * 100 + patch (2.21.5 is 22105). */
  readonly version: number;
  /** The bound functions. */
  readonly fn: NcclFunctions & NcclOptionalFunctions;
  /**
   * Throws an NcclError for a result other than ncclSuccess, with NCCL's text and the last error.
   *
   * @param call The function, for the message.
   * @param result What it returned.
   * @param comm The communicator, when the call had one (0n for none).
   * @throws {NcclError} When `result` is not 0.
   */
  check(call: string, result: number, comm?: bigint): void;
}

/**
 * Loads NCCL and binds its functions, once per process (a failure is remembered too).
 *
 * @returns The library.
 * @throws {NcclUnavailableError} When no NCCL loads.
 * @example
 * ```ts
 * const { version, path } = loadNccl();
 * ```
 */
export const loadNccl: () => Nccl = loadOnce(() => {
  const library = openNcclLibrary();
  uniqueIdType();
  const fn = {} as Record<string, unknown>;
  for (const [name, prototype] of Object.entries(PROTOTYPES)) fn[name] = library.lib.func(prototype);
  for (const [name, prototype] of Object.entries(OPTIONAL_PROTOTYPES)) {
    try {
      fn[name] = library.lib.func(prototype);
    } catch {
      // Older NCCL: the feature is missing, and the caller says so when it is asked for.
    }
  }
  const bound = fn as unknown as NcclFunctions & NcclOptionalFunctions;
  const check = (call: string, result: number, comm = 0n): void => {
    if (result === 0) return;
    const text = bound.ncclGetErrorString(result);
    const detail = bound.ncclGetLastError?.(comm) ?? '';
    throw new NcclError(call, result, text, detail);
  };
  const version = new Int32Array(1);
  check('ncclGetVersion', bound.ncclGetVersion(version));
  return { path: library.path, version: version[0]!, fn: bound, check };
});

/**
 * NCCL's version as text, from ncclGetVersion's number (2.21.5 from 22105; 2.8 and earlier used
 * major * 1000 + minor * 100 + patch).
 *
 * @param code What ncclGetVersion gave.
 * @returns `major.minor.patch`.
 * @throws Never.
 * @example
 * ```ts
 * ncclVersionText(22105); // '2.21.5'
 * ```
 */
export function ncclVersionText(code: number): string {
  if (code < 10000) return `${Math.floor(code / 1000)}.${Math.floor((code % 1000) / 100)}.${code % 100}`;
  return `${Math.floor(code / 10000)}.${Math.floor((code % 10000) / 100)}.${code % 100}`;
}
