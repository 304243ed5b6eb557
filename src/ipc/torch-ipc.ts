/**
 * PyTorch's own CUDA IPC handles, both ways. `storage._share_cuda_()` returns an 8-tuple:
 * (device, handle, storage size in bytes, storage offset in bytes, ref-counter name, ref-counter
 * offset, event handle, event sync required). Its handle is versioned: a version byte (2), a type
 * byte ('c' for memory from cudaMalloc, 'e' for an expandable segment), then for 'c' the driver's
 * 64-byte cudaIpcMemHandle of the whole cudaMalloc block the storage is part of (hence the
 * offset). `torch.multiprocessing.reductions.rebuild_cuda_tensor` takes the same fields, with the
 * tensor's shape, strides, offset and dtype around them.
 *
 * Across a process boundary the tuple travels as JSON: the same eight fields in the same order,
 * the byte strings as hex (`scripts/torch_ipc.py` converts both ways). `importIpc` reads that
 * form (and the tuple with Uint8Arrays); `torchShareTuple` makes it for vram memory, so PyTorch
 * rebuilds a tensor over it with its own code.
 *
 * The ref counter: PyTorch's producer keeps a shared block alive while consumers hold it, counting
 * them in a shared-memory file (`/dev/shm/<name>`, one int64 at the offset); a consumer decrements
 * it when done, best effort (the producer may be gone). vram does the same when the imported
 * buffer is freed. The event: when the producer says its writes may still be in flight, the
 * legacy default stream of the importing context waits for its event (on the device, not the host).
 */
import { closeSync, fstatSync, openSync } from 'node:fs';
import koffi from 'koffi';
import { DEFAULT_STREAM, IPC_HANDLE_BYTES } from '../backend/backend.js';
import { mapShared, unmap } from '../cuda/libc.js';
import { Device } from '../device.js';
import { NotSupportedError } from '../errors.js';
import { checkNonNegativeInteger } from '../validate.js';
import { IpcHandle } from './ipc-handle.js';

/** PyTorch's shareable handle version (c10/cuda/CUDACachingAllocator.cpp, SHAREABLE_HANDLE_VERSION). */
const TORCH_HANDLE_VERSION = 2;
/** Its type byte for cudaMalloc memory ('c') and for an expandable segment ('e'). */
const TYPE_CUDA_MALLOC = 0x63;
const TYPE_EXPANDABLE_SEGMENT = 0x65;
/** Bytes of a versioned 'c' handle: version, type, the driver's 64. */
export const TORCH_HANDLE_BYTES = 2 + IPC_HANDLE_BYTES;

/** Bytes as PyTorch gives them (`bytes`), in JavaScript: a Uint8Array or its hex. */
export type TorchBytes = Uint8Array | string;

/**
 * The tuple `storage._share_cuda_()` returns, in JavaScript: (device, handle, storageSizeBytes,
 * storageOffsetBytes, refCounterHandle, refCounterOffset, eventHandle, eventSyncRequired), byte
 * strings as Uint8Arrays or hex. `null` where PyTorch gives None (a storage with no memory).
 */
export type TorchShareTuple = readonly [
  device: number,
  handle: TorchBytes | null,
  storageSizeBytes: number,
  storageOffsetBytes: number,
  refCounterHandle: TorchBytes | null,
  refCounterOffset: number,
  eventHandle: TorchBytes | null,
  eventSyncRequired: boolean | null,
];

/** What `parseTorchShare` reads from a tuple. */
export interface TorchShare {
  /** The CUDA device the storage is on (the exporter's ordinal). */
  readonly device: number;
  /** The legacy handle of the whole cudaMalloc block, with the storage's size and offset in it. */
  readonly handle: IpcHandle;
  /** The ref-counter file's name (as shm_open takes it) and the counter's index in it; undefined when none. */
  readonly refCounter: { readonly name: string; readonly offset: number } | undefined;
  /** The producer's interprocess event, when its writes may still be in flight (event sync required). */
  readonly event: Uint8Array | undefined;
}

/**
 * True when `value` looks like a `_share_cuda_()` tuple (an array of 8 whose first is a number):
 * how `importIpc` tells it from the other handle forms.
 *
 * @param value Anything.
 * @returns Whether to read it with `parseTorchShare`.
 * @throws Never.
 * @example
 * ```ts
 * if (isTorchShareTuple(JSON.parse(line))) importIpc(JSON.parse(line));
 * ```
 */
export function isTorchShareTuple(value: unknown): value is TorchShareTuple {
  return Array.isArray(value) && value.length === 8 && typeof value[0] === 'number';
}

/**
 * Reads a `storage._share_cuda_()` tuple: its versioned 'c' handle (or a bare 64-byte one, as
 * PyTorch before version 2 of the handle gave), size, offset, ref counter and event.
 *
 * @param tuple The tuple (byte strings as Uint8Arrays or hex; see `TorchShareTuple`).
 * @returns The parts.
 * @throws {TypeError} When it is not such a tuple, or the handle has an unknown version or type.
 * @throws {RangeError} For a negative size or offset, or a storage of 0 bytes (nothing to share).
 * @throws {NotSupportedError} For an 'e' handle (memory of PyTorch's expandable segments), saying how to share it.
 * @example
 * ```ts
 * const { handle } = parseTorchShare([0, '0263…', 4096, 512, '2f746f7263685f…', 0, '00…', false]);
 * ```
 */
export function parseTorchShare(tuple: TorchShareTuple): TorchShare {
  if (!isTorchShareTuple(tuple)) {
    throw new TypeError(
      'a PyTorch share tuple is the 8 values storage._share_cuda_() returns: ' +
        '[device, handle, storageSizeBytes, storageOffsetBytes, refCounterHandle, refCounterOffset, eventHandle, eventSyncRequired]',
    );
  }
  const [device, rawHandle, size, offset, refName, refOffset, rawEvent, sync] = tuple;
  checkNonNegativeInteger(device, 'PyTorch share tuple: device');
  checkNonNegativeInteger(size, 'PyTorch share tuple: storageSizeBytes');
  checkNonNegativeInteger(offset, 'PyTorch share tuple: storageOffsetBytes');
  if (rawHandle === null || size === 0) throw new RangeError('PyTorch share tuple: the storage has no memory (handle None or 0 bytes): nothing to import');
  const bytes = torchBytes(rawHandle, 'handle');
  let driver: Uint8Array;
  if (bytes.length === IPC_HANDLE_BYTES) {
    driver = bytes; // PyTorch before versioned handles: the driver's 64 bytes alone
  } else {
    if (bytes.length < 2 || bytes[0] !== TORCH_HANDLE_VERSION) {
      throw new TypeError(
        `PyTorch share tuple: a handle of ${bytes.length} bytes with version byte ${String(bytes[0])}; ` +
          `vram reads version ${TORCH_HANDLE_VERSION} ('c' handles of ${TORCH_HANDLE_BYTES} bytes) and bare 64-byte handles`,
      );
    }
    if (bytes[1] === TYPE_EXPANDABLE_SEGMENT) {
      throw new NotSupportedError(
        "PyTorch share tuple: an 'e' handle, memory of PyTorch's expandable segments " +
          '(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True), which PyTorch shares as its own per-segment file descriptors. ' +
          "Allocate the tensor to share with expandable segments off (torch.cuda.memory._set_allocator_settings('expandable_segments:False') " +
          "before allocating it, or clone it after setting that), and share that tensor: its handle is a 'c' handle vram imports.",
      );
    }
    if (bytes[1] !== TYPE_CUDA_MALLOC || bytes.length !== TORCH_HANDLE_BYTES) {
      throw new TypeError(
        `PyTorch share tuple: a version-${TORCH_HANDLE_VERSION} handle is ${TORCH_HANDLE_BYTES} bytes of type 'c' (or 'e'), ` +
          `got ${bytes.length} bytes of type ${JSON.stringify(String.fromCharCode(bytes[1]!))}`,
      );
    }
    driver = bytes.subarray(2);
  }
  const name = refName === null ? '' : new TextDecoder().decode(torchBytes(refName, 'refCounterHandle'));
  checkNonNegativeInteger(refOffset, 'PyTorch share tuple: refCounterOffset');
  const event = sync === true && rawEvent !== null ? torchBytes(rawEvent, 'eventHandle') : undefined;
  if (event !== undefined && event.length !== IPC_HANDLE_BYTES) {
    throw new TypeError(`PyTorch share tuple: an event handle is ${IPC_HANDLE_BYTES} bytes, got ${event.length}`);
  }
  return {
    device,
    handle: new IpcHandle(driver, size, offset),
    refCounter: name === '' ? undefined : { name, offset: refOffset },
    event,
  };
}

/**
 * What `rebuild_cuda_tensor` needs, in the JSON form of a `_share_cuda_()` tuple, for memory vram
 * shares with legacy IPC (`exportIpc` of a `CudaResource` buffer gives such a handle): the
 * versioned 'c' handle, the size and offset, no ref counter (an empty name: PyTorch's consumer
 * skips it) and no event (synchronise before sending: PyTorch then need not wait).
 *
 * @param handle A legacy handle (`exportIpc(buffer)` of whole cuMemAlloc memory).
 * @param device The exporter's device ordinal.
 * @returns The 8 fields, byte strings as hex; `scripts/torch_ipc.py` turns them into the tuple.
 * @throws {NotSupportedError} For a pool or physical handle: PyTorch opens only its own 'c' (cudaIpcMemHandle) and 'e' handles.
 * @throws {RangeError} When the handle does not say how many bytes it grants.
 * @example
 * ```ts
 * const tuple = torchShareTuple(exportIpc(buf), buf.device.ordinal);
 * python.stdin.write(JSON.stringify(tuple) + '\n');
 * ```
 */
export function torchShareTuple(handle: IpcHandle, device: number): [number, string, number, number, string, number, string, boolean] {
  if (handle.kind !== 'legacy') {
    throw new NotSupportedError(
      `torchShareTuple: a ${handle.kind} handle; PyTorch opens cudaIpcMemHandle ('c') handles: ` +
        'share memory from a CudaResource (DeviceBuffer.allocate(n, { resource: new CudaResource(device) })) with PyTorch',
    );
  }
  checkNonNegativeInteger(device, 'torchShareTuple: device');
  if (handle.byteLength === undefined) throw new RangeError('torchShareTuple: the handle does not say how many bytes it grants');
  const versioned = new Uint8Array(TORCH_HANDLE_BYTES);
  versioned[0] = TORCH_HANDLE_VERSION;
  versioned[1] = TYPE_CUDA_MALLOC;
  versioned.set(handle.driverHandle, 2);
  return [device, hex(versioned), handle.byteLength, handle.offset, '', 0, hex(new Uint8Array(IPC_HANDLE_BYTES)), false];
}

/**
 * Gives one reference back to PyTorch's producer (its counter in `/dev/shm/<name>` less one), as
 * PyTorch's own consumer does when it drops the storage. Best effort: a producer that exited took
 * the file with it, and then there is nothing to give back.
 *
 * @param refCounter The name and index from `parseTorchShare`.
 * @example
 * ```ts
 * releaseTorchReference({ name: '/torch_1234_5678_0', offset: 3 });
 * ```
 */
export function releaseTorchReference(refCounter: { readonly name: string; readonly offset: number }): void {
  let fd: number;
  try {
    fd = openSync(`/dev/shm/${refCounter.name.replace(/^\/+/, '')}`, 'r+');
  } catch {
    return; // the producer is gone, and its counter with it
  }
  try {
    const bytes = fstatSync(fd).size;
    const at = refCounter.offset * 8;
    if (at + 8 > bytes) return;
    const mapped = Math.ceil(bytes / 4096) * 4096;
    const address = mapShared(fd, mapped);
    try {
      const counter = new BigInt64Array(koffi.view(address, mapped), at, 1);
      counter[0] = counter[0]! - 1n;
    } finally {
      unmap(address, mapped);
    }
  } finally {
    closeSync(fd);
  }
}

/**
 * Makes the legacy default stream of `device`'s context wait, on the device, for PyTorch's
 * interprocess event (the producer's writes): what PyTorch's own consumer does before using the
 * storage.
 *
 * @param event The 64-byte event handle from the tuple.
 * @param device The importing device.
 * @throws {CudaError} When the driver refuses the handle.
 * @example
 * ```ts
 * if (share.event !== undefined) waitForTorchEvent(share.event, Device.get(0));
 * ```
 */
export function waitForTorchEvent(event: Uint8Array, device: Device): void {
  const backend = device.backend;
  device.makeCurrent();
  const opened = backend.ipcOpenEventHandle(event);
  try {
    backend.streamWaitEvent(DEFAULT_STREAM, opened);
  } finally {
    backend.eventDestroy(opened);
  }
}

function torchBytes(value: TorchBytes, what: string): Uint8Array {
  if (value instanceof Uint8Array) return value;
  if (typeof value === 'string' && /^(?:[0-9a-fA-F]{2})*$/.test(value)) return new Uint8Array(Buffer.from(value, 'hex'));
  throw new TypeError(`PyTorch share tuple: ${what} must be bytes (a Uint8Array) or their hex, got ${typeof value}`);
}

function hex(bytes: Uint8Array): string {
  return Buffer.from(bytes).toString('hex');
}
