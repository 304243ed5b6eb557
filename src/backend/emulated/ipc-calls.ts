/**
 * The emulated driver's interprocess calls between processes of one Linux machine: legacy IPC
 * (cuIpcGetMemHandle, cuIpcOpenMemHandle, cuIpcCloseMemHandle), stream-ordered pools
 * (cuMemPool*ShareableHandle, cuMemPool*Pointer), physical allocations
 * (cuMemExportToShareableHandle, cuMemImportFromShareableHandle), fabric handles of both (the
 * 64 bytes name the exporter's file by process and descriptor) and interprocess events, all on
 * one mechanism: at export the memory moves into an anonymous shared-memory file that the
 * importer maps through `/proc/<pid>/fd/<n>`, so both processes see the same bytes. Errors follow
 * what the driver answers. (Note [Emulated IPC], docs/design/emulated-ipc.md)
 */
import { randomBytes } from 'node:crypto';
import { existsSync, fstatSync } from 'node:fs';
import koffi from 'koffi';
import { EventFlags, IPC_HANDLE_BYTES, IpcMemFlags, MemHandleType, type Handle, type Ptr } from '../backend.js';
import { checkIpcHandle } from '../argument-checks.js';
import { CUresult } from '../../errors.js';
import { closeFd, mapShared, memfdCreate, openReadWrite, readLink, unmap } from '../../cuda/libc.js';
import { PlainAllocation, type Allocation } from './allocation.js';
import { DEVICE_ALIGNMENT } from './device-memory-calls.js';
import { fail, hex, invalidValue } from './fail.js';
import type { EmulatedState } from './state.js';
import { EagerStore, LazyStore, PAGE_SIZE } from './store.js';
import { PhysicalMemory, VMM_GRANULARITY } from './vmm.js';
import { EventState } from './streams.js';

/** The first 8 bytes of an emulated memory handle: 'VRAMIPC' then 1 (memory, layout 1). */
const MEMORY_MAGIC = [0x56, 0x52, 0x41, 0x4d, 0x49, 0x50, 0x43, 0x01] as const;
/** The first 8 bytes of an emulated pool allocation's export data: 'VRAMIPC' then 2 (pool pointer, layout 1; bytes 28-31 its offset in the shared file). */
const POOL_POINTER_MAGIC = [0x56, 0x52, 0x41, 0x4d, 0x49, 0x50, 0x43, 0x02] as const;
/** The first 8 bytes of an emulated pool's fabric handle: 'VRAMIPC' then 3 (fabric pool, layout 1). */
const FABRIC_POOL_MAGIC = [0x56, 0x52, 0x41, 0x4d, 0x49, 0x50, 0x43, 0x03] as const;
/** The first 8 bytes of an emulated physical allocation's fabric handle: 'VRAMIPC' then 4 (fabric memory, layout 1). */
const FABRIC_MEMORY_MAGIC = [0x56, 0x52, 0x41, 0x4d, 0x49, 0x50, 0x43, 0x04] as const;
/** The first 8 bytes of an emulated event handle: 'VRAMIPC' then 0x81 (event, layout 1). */
const EVENT_MAGIC = [0x56, 0x52, 0x41, 0x4d, 0x49, 0x50, 0x43, 0x81] as const;
/** Bytes of random token that name the shared file. */
const TOKEN_BYTES = 16;
/** Mappings are whole pages. */
const PAGE = 4096;

/** What the handle carries. Layout (little-endian): magic[8], pid u32, fd u32, bytes u64, device u32, pad u32, token[16], zeros. */
interface HandleFields {
  readonly pid: number;
  readonly fd: number;
  readonly bytes: number;
  readonly device: number;
  readonly token: string;
}

/** An allocation this process exported: its shared file and this process's mapping of it. */
interface Exported {
  readonly fd: number;
  readonly address: number;
  readonly mapped: number;
  readonly store: LazyStore;
  readonly handle: Uint8Array;
}

/** A handle this process opened: its address, mapping and open count. */
interface Imported {
  readonly allocation: PlainAllocation;
  readonly context: number;
  readonly address: number;
  readonly mapped: number;
  readonly token: string;
  opens: number;
}

function roundToPage(bytes: number): number {
  return Math.ceil(bytes / PAGE) * PAGE;
}

function encode(magic: readonly number[], fields: HandleFields): Uint8Array {
  const handle = new Uint8Array(IPC_HANDLE_BYTES);
  const view = new DataView(handle.buffer);
  handle.set(magic, 0);
  view.setUint32(8, fields.pid, true);
  view.setUint32(12, fields.fd, true);
  view.setBigUint64(16, BigInt(fields.bytes), true);
  view.setUint32(24, fields.device, true);
  handle.set(Buffer.from(fields.token, 'hex'), 32);
  return handle;
}

function decode(handle: Uint8Array, magic: readonly number[], call: string): HandleFields {
  const view = new DataView(handle.buffer, handle.byteOffset, handle.byteLength);
  const magicOk = magic.every((b, i) => handle[i] === b);
  const bytes = view.getBigUint64(16, true);
  // A pool allocation's handle carries the allocation's size after the token (as the driver's own
  // export data says which allocation it is: the importer's pointer attributes give its range).
  const tail = handle.subarray(32 + TOKEN_BYTES + (magic === POOL_POINTER_MAGIC ? 8 : 0));
  if (!magicOk || bytes === 0n || bytes > BigInt(Number.MAX_SAFE_INTEGER) || tail.some((b) => b !== 0)) {
    const what = magic === EVENT_MAGIC ? 'an IPC event' : magic === FABRIC_POOL_MAGIC || magic === FABRIC_MEMORY_MAGIC ? 'a fabric' : 'an IPC memory';
    malformed(magic, call, `the bytes are not ${what} handle`);
  }
  return {
    pid: view.getUint32(8, true),
    fd: view.getUint32(12, true),
    bytes: Number(bytes),
    device: view.getUint32(24, true),
    token: Buffer.from(handle.subarray(32, 32 + TOKEN_BYTES)).toString('hex'),
  };
}

/** A handle that is not one: as an H100 answered (CUDA 13), a malformed event handle fails to map, a memory handle is invalid. */
function malformed(magic: readonly number[], call: string, what: string): never {
  if (magic === EVENT_MAGIC) fail(CUresult.MAP_FAILED, call, what);
  return invalidValue(call, what);
}

/** The name of the file that names an exported pool. */
function poolFileName(token: string): string {
  return `vram-pool-${token}`;
}

/** The name of the shared file of `token`, and what /proc shows for it. */
function fileName(token: string): string {
  return `vram-ipc-${token}`;
}

/**
 * A new shared file of exactly `bytes` named after a fresh token, and this process's mapping of it
 * (whole pages). The file's size is what was shared: an importer checks the handle against it.
 */
function createShared(bytes: number): { token: string; fd: number; address: number } {
  const token = randomBytes(TOKEN_BYTES).toString('hex');
  const fd = memfdCreate(fileName(token), bytes);
  try {
    return { token, fd, address: mapShared(fd, roundToPage(bytes)) };
  } catch (error) {
    closeFd(fd);
    throw error;
  }
}

/** Legacy IPC of one emulated driver. */
export class IpcCalls {
  /** Exported allocations by base address. */
  private readonly exported = new Map<number, Exported>();
  /** Opened handles by token (the context that opened them is checked on reopen). */
  private readonly imported = new Map<string, Imported>();
  /** Opened handles by address, for cuIpcCloseMemHandle. */
  private readonly importedAt = new Map<number, Imported>();
  /** Handles of the events this process shared, by event. */
  private readonly eventHandles = new Map<Handle, Uint8Array>();
  /** The name file of each exported pool. */
  private readonly poolFiles = new Map<Handle, { readonly token: string; readonly fd: number }>();
  /** Pools imported from other processes. */
  private readonly importedPools = new Map<Handle, { readonly token: string; readonly context: Handle }>();
  /** Exported pool allocations, by address. */
  private readonly exportedPointers = new Map<number, { readonly handle: Uint8Array; readonly release: () => void }>();
  /** Imported pool allocations, by the address handed out. */
  private readonly importedPointers = new Map<number, Imported>();

  constructor(private readonly s: EmulatedState) {
    s.onDrop = (a) => this.dropped(a);
  }

  /** cuIpcGetMemHandle: the same handle every time for one allocation (interior pointers name it too). */
  ipcGetMemHandle(ptr: Ptr): Uint8Array {
    const call = 'cuIpcGetMemHandle';
    this.s.ctx(call);
    const a = typeof ptr === 'number' && this.s.deviceRange.contains(ptr) ? this.s.deviceIndex.find(ptr) : undefined;
    if (a === undefined || a.kind !== 'device' || !(a.store instanceof LazyStore)) {
      invalidValue(call, `${hex(ptr)} is not memory from cuMemAlloc (pool, virtual, managed, host and imported memory cannot be exported this way)`);
    }
    const known = this.exported.get(a.base);
    if (known !== undefined) return known.handle.slice();
    const mapped = roundToPage(a.size);
    const { token, fd, address } = createShared(a.size);
    let view: Uint8Array;
    try {
      view = new Uint8Array(koffi.view(address, mapped));
    } catch (error) {
      unmap(address, mapped);
      closeFd(fd);
      throw error;
    }
    // Queued work that writes the allocation holds its store, so the store itself moves its bytes.
    a.store.shareInto(view);
    const handle = encode(MEMORY_MAGIC, { pid: process.pid, fd, bytes: a.size, device: a.device, token });
    this.exported.set(a.base, { fd, address, mapped, store: a.store, handle });
    return handle.slice();
  }

  /** cuIpcOpenMemHandle: maps another process's exported memory into the current context. */
  ipcOpenMemHandle(handle: Uint8Array, flags: number): Ptr {
    const call = 'cuIpcOpenMemHandle';
    checkIpcHandle(handle, call);
    const ctx = this.s.ctx(call);
    if (flags !== IpcMemFlags.LAZY_ENABLE_PEER_ACCESS) invalidValue(call, `flags must be CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS (1), got ${flags}`);
    const fields = decode(handle, MEMORY_MAGIC, call);
    if (fields.pid === process.pid) {
      fail(CUresult.INVALID_CONTEXT, call, 'the handle was exported by this process: use the memory directly');
    }
    const known = this.imported.get(fields.token);
    if (known !== undefined) {
      if (known.context !== ctx.handle) fail(CUresult.INVALID_CONTEXT, call, 'the handle is already open in another context of this process');
      known.opens++;
      return known.allocation.base;
    }
    const device = this.s.devices[fields.device] !== undefined ? fields.device : ctx.device.ordinal;
    const mapped = roundToPage(fields.bytes);
    const address = this.mapOther(fields, MEMORY_MAGIC, call);
    let base: number;
    let store: EagerStore;
    try {
      base = this.s.deviceRange.take(mapped, DEVICE_ALIGNMENT, call);
      store = new EagerStore(koffi.view(address, mapped), 0, fields.bytes);
    } catch (error) {
      unmap(address, mapped);
      throw error;
    }
    const allocation = new PlainAllocation('ipc', base, fields.bytes, device, ctx.handle, store, 0, 0);
    this.s.deviceIndex.insert(allocation);
    const entry: Imported = { allocation, context: ctx.handle, address, mapped, token: fields.token, opens: 1 };
    this.imported.set(fields.token, entry);
    this.importedAt.set(base, entry);
    return base;
  }

  /** cuIpcCloseMemHandle: one open less; the last unmaps (after the work queued on it has run). */
  ipcCloseMemHandle(ptr: Ptr): void {
    const call = 'cuIpcCloseMemHandle';
    this.s.ctx(call);
    const entry = typeof ptr === 'number' ? this.importedAt.get(ptr) : undefined;
    if (entry === undefined) invalidValue(call, `${hex(ptr)} is not memory opened with cuIpcOpenMemHandle`);
    entry.opens--;
    if (entry.opens > 0) return;
    // Work still queued against the mapping must run before it goes, or it would touch unmapped memory.
    for (const context of this.s.contexts.keys()) this.s.checkContextNotHeld(call, context);
    this.s.dropAllocation(this.s.deviceIndex, entry.allocation);
  }

  /**
   * cuIpcGetEventHandle: the event's two words (latest record, latest completed record) move to a
   * page of shared memory that the importers map; records, queries and waits on either side go by
   * them (stream-calls.ts). The same handle every time for one event.
   */
  ipcGetEventHandle(event: Handle): Uint8Array {
    const call = 'cuIpcGetEventHandle';
    this.s.ctx(call);
    const e = this.s.event(event, call);
    if ((e.flags & EventFlags.INTERPROCESS) === 0) invalidValue(call, `event ${event} was not created with CU_EVENT_INTERPROCESS`);
    const known = this.eventHandles.get(event);
    if (known !== undefined) return known.slice();
    // A record made before the export is not in the shared words: let it run first.
    this.s.scheduler.drainAll();
    if (e.recordedAt !== undefined && !e.completed) {
      fail(
        CUresult.NOT_READY,
        call,
        `event ${event} was recorded behind held work before it was shared: the emulation shares events before their first record or once it ran`,
      );
    }
    const { token, fd, address } = createShared(PAGE);
    e.shared = {
      words: new Int32Array(koffi.view(address, 8)),
      release: () => {
        this.eventHandles.delete(event);
        unmap(address, PAGE);
        closeFd(fd);
      },
    };
    const handle = encode(EVENT_MAGIC, { pid: process.pid, fd, bytes: PAGE, device: 0, token });
    this.eventHandles.set(event, handle);
    return handle.slice();
  }

  /** cuIpcOpenEventHandle: another process's interprocess event, as an event of the current context. */
  ipcOpenEventHandle(handle: Uint8Array): Handle {
    const call = 'cuIpcOpenEventHandle';
    checkIpcHandle(handle, call);
    this.s.ctx(call);
    const fields = decode(handle, EVENT_MAGIC, call);
    if (fields.pid === process.pid) fail(CUresult.INVALID_CONTEXT, call, 'the handle was exported by this process: use the event directly');
    const address = this.mapOther(fields, EVENT_MAGIC, call);
    const e = new EventState(this.s.handle(), EventFlags.INTERPROCESS | EventFlags.DISABLE_TIMING);
    e.shared = { words: new Int32Array(koffi.view(address, 8)), release: () => unmap(address, PAGE) };
    this.s.events.set(e.handle, e);
    return e.handle;
  }

  /**
   * cuMemPoolExportToShareableHandle: a new descriptor naming the pool (a one-page shared file
   * named after the pool's token, made at the first export and closed with the pool). Only pools
   * created with POSIX descriptor handles export, as on the driver.
   */
  memPoolExportToShareableHandle(pool: Handle, handleType: number): number {
    const call = 'cuMemPoolExportToShareableHandle';
    this.s.ctx(call);
    const p = this.s.pools.get(pool);
    if (p === undefined) invalidValue(call, `${pool} is not a pool`);
    if (handleType !== MemHandleType.POSIX_FILE_DESCRIPTOR || (p.handleTypes & MemHandleType.POSIX_FILE_DESCRIPTOR) === 0) {
      invalidValue(call, `pool ${pool} was not created with POSIX file-descriptor handles`);
    }
    return openReadWrite(`/proc/self/fd/${this.poolFile(pool).fd}`);
  }

  /** The name file of an exported pool, made at its first export (by descriptor or fabric handle). */
  private poolFile(pool: Handle): { readonly token: string; readonly fd: number } {
    let named = this.poolFiles.get(pool);
    if (named === undefined) {
      const token = randomBytes(TOKEN_BYTES).toString('hex');
      named = { token, fd: memfdCreate(poolFileName(token), PAGE) };
      this.poolFiles.set(pool, named);
    }
    return named;
  }

  /**
   * cuMemPoolExportToShareableHandle with CU_MEM_HANDLE_TYPE_FABRIC: 64 bytes naming the pool's
   * name file by the exporting process and descriptor (an importer of this machine opens it
   * through /proc, as the driver's IMEX daemon would reach the exporter). Only pools created with
   * fabric handles export so, as on the driver.
   */
  memPoolExportFabricHandle(pool: Handle): Uint8Array {
    const call = 'cuMemPoolExportToShareableHandle';
    const ctx = this.s.ctx(call);
    const p = this.s.pools.get(pool);
    if (p === undefined) invalidValue(call, `${pool} is not a pool`);
    if ((p.handleTypes & MemHandleType.FABRIC) === 0) invalidValue(call, `pool ${pool} was not created with fabric handles`);
    const named = this.poolFile(pool);
    return encode(FABRIC_POOL_MAGIC, { pid: process.pid, fd: named.fd, bytes: PAGE, device: ctx.device.ordinal, token: named.token });
  }

  /** cuMemPoolImportFromShareableHandle with CU_MEM_HANDLE_TYPE_FABRIC: the pool the handle names, as an imported pool of the current context. */
  memPoolImportFabricHandle(data: Uint8Array): Handle {
    const call = 'cuMemPoolImportFromShareableHandle';
    checkIpcHandle(data, call);
    const ctx = this.s.ctx(call);
    const fields = decode(data, FABRIC_POOL_MAGIC, call);
    this.checkLink(fields, `/memfd:${poolFileName(fields.token)} (deleted)`, call);
    const handle = this.s.handle();
    this.importedPools.set(handle, { token: fields.token, context: ctx.handle });
    return handle;
  }

  /** cuMemPoolImportFromShareableHandle: the pool the descriptor names, as an imported pool of the current context. */
  memPoolImportFromShareableHandle(fd: number): Handle {
    const call = 'cuMemPoolImportFromShareableHandle';
    const ctx = this.s.ctx(call);
    const link = readLink(`/proc/self/fd/${fd}`) ?? '';
    const match = /^\/memfd:vram-pool-([0-9a-f]{32}) \(deleted\)$/.exec(link);
    if (match === null) invalidValue(call, `descriptor ${fd} is not an exported pool`);
    const handle = this.s.handle();
    this.importedPools.set(handle, { token: match[1]!, context: ctx.handle });
    return handle;
  }

  /** True when `pool` is a pool imported from another process (its calls are answered here). */
  isImportedPool(pool: Handle): boolean {
    return this.importedPools.has(pool);
  }

  /** cuMemPoolDestroy of an imported pool: its imports stay valid until freed, as on the driver. */
  destroyImportedPool(pool: Handle): void {
    this.importedPools.delete(pool);
  }

  /**
   * cuMemPoolExportPointer: the pages under the allocation move into a shared file (the rest of
   * the pool stays private), named by the 64 bytes with the allocation's place in it. The same
   * data every time for one allocation; the file goes when the allocation is freed or its pool
   * destroyed.
   */
  memPoolExportPointer(ptr: Ptr): Uint8Array {
    const call = 'cuMemPoolExportPointer';
    this.s.ctx(call);
    const block = typeof ptr === 'number' ? this.s.poolBlocks.get(ptr) : undefined;
    if (block === undefined) invalidValue(call, `${hex(ptr)} is not an allocation of a stream-ordered pool`);
    if ((block.pool.handleTypes & (MemHandleType.POSIX_FILE_DESCRIPTOR | MemHandleType.FABRIC)) === 0) {
      invalidValue(call, `${hex(ptr)} is in a pool created without shareable (POSIX file-descriptor or fabric) handles`);
    }
    const known = this.exportedPointers.get(ptr);
    if (known !== undefined) return known.handle.slice();
    const offset = block.address - block.pool.base;
    const first = Math.floor(offset / PAGE_SIZE) * PAGE_SIZE;
    const mapped = Math.ceil((offset + block.size) / PAGE_SIZE) * PAGE_SIZE - first;
    const { token, fd, address } = createShared(mapped);
    const at = block.pool.store.sharePages(offset, block.size, new Uint8Array(koffi.view(address, mapped)));
    const handle = encode(POOL_POINTER_MAGIC, { pid: process.pid, fd, bytes: mapped, device: block.pool.device, token });
    new DataView(handle.buffer).setUint32(28, at, true);
    new DataView(handle.buffer).setBigUint64(32 + TOKEN_BYTES, BigInt(block.size), true);
    this.exportedPointers.set(ptr, {
      handle,
      release: () => {
        block.pool.store.unsharePages(offset, block.size);
        unmap(address, mapped);
        closeFd(fd);
      },
    });
    return handle.slice();
  }

  /** cuMemPoolImportPointer: maps the allocation's shared pages; free it with cuMemFreeAsync. */
  memPoolImportPointer(pool: Handle, data: Uint8Array): Ptr {
    const call = 'cuMemPoolImportPointer';
    checkIpcHandle(data, call);
    const ctx = this.s.ctx(call);
    if (!this.importedPools.has(pool)) invalidValue(call, `${pool} is not a pool imported from another process`);
    const fields = decode(data, POOL_POINTER_MAGIC, call);
    const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
    const at = view.getUint32(28, true);
    const size = Number(view.getBigUint64(32 + TOKEN_BYTES, true));
    if (size === 0 || at + size > fields.bytes) invalidValue(call, "the bytes are not a pool allocation's export data");
    const address = this.mapOther(fields, POOL_POINTER_MAGIC, call);
    let base: number;
    try {
      base = this.s.deviceRange.take(fields.bytes, DEVICE_ALIGNMENT, call);
    } catch (error) {
      unmap(address, fields.bytes);
      throw error;
    }
    // The allocation alone, as the driver maps it: its pointer attributes give its own range, and
    // an access past it is refused (the rest of its pages is other allocations' memory).
    const store = new EagerStore(koffi.view(address, fields.bytes), at, size);
    const allocation = new PlainAllocation('ipc', base + at, size, ctx.device.ordinal, ctx.handle, store, 0, 0);
    this.s.deviceIndex.insert(allocation);
    const entry: Imported = { allocation, context: ctx.handle, address, mapped: fields.bytes, token: fields.token, opens: 1 };
    this.importedAt.set(base + at, entry);
    this.importedPointers.set(base + at, entry);
    return base + at;
  }

  /**
   * cuMemFreeAsync of an imported pool allocation: unmapped when the stream reaches the free.
   * Returns false for any other pointer (the pools' own free answers it).
   */
  freeImportedPointer(ptr: Ptr, stream: Handle): boolean {
    const entry = this.importedPointers.get(ptr);
    if (entry === undefined) return false;
    const s = this.s.stream(stream, 'cuMemFreeAsync');
    this.importedPointers.delete(ptr);
    this.s.enqueue(s, () => {
      if (entry.allocation.live) this.s.dropAllocation(this.s.deviceIndex, entry.allocation);
    });
    return true;
  }

  /** An exported allocation was freed (or its pool destroyed): its pages are private again and its file goes. */
  poolPointerFreed(ptr: Ptr): void {
    const entry = this.exportedPointers.get(ptr);
    if (entry === undefined) return;
    this.exportedPointers.delete(ptr);
    entry.release();
  }

  /** A pool is destroyed: the exports of its allocations and its name file go. */
  poolDestroyed(pool: Handle, allocations: readonly Ptr[]): void {
    for (const ptr of allocations) this.poolPointerFreed(ptr);
    const named = this.poolFiles.get(pool);
    if (named !== undefined) {
      this.poolFiles.delete(pool);
      closeFd(named.fd);
    }
  }

  /**
   * cuMemExportToShareableHandle: the physical allocation's bytes move into a shared file (once;
   * its store serves every later operation from the mapping) and a new descriptor of that file is
   * returned, which the caller closes. The file goes when the memory does.
   */
  memExportToShareableHandle(handle: Handle, handleType: number): number {
    const call = 'cuMemExportToShareableHandle';
    this.s.ctx(call);
    if (handleType !== MemHandleType.POSIX_FILE_DESCRIPTOR) invalidValue(call, `handle type ${handleType} is not CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`);
    const memory = this.s.physical.get(handle, call);
    if ((memory.handleTypes & MemHandleType.POSIX_FILE_DESCRIPTOR) === 0)
      invalidValue(call, `allocation ${handle} was not created with POSIX file-descriptor handles`);
    return openReadWrite(`/proc/self/fd/${this.shareMemory(memory).fd}`);
  }

  /**
   * cuMemExportToShareableHandle with CU_MEM_HANDLE_TYPE_FABRIC: the allocation's bytes move into
   * a shared file (as for a descriptor) and 64 bytes name it by the exporting process, descriptor,
   * size and token. Only memory created with fabric handles exports so, as on the driver.
   */
  memExportFabricHandle(handle: Handle): Uint8Array {
    const call = 'cuMemExportToShareableHandle';
    this.s.ctx(call);
    const memory = this.s.physical.get(handle, call);
    if ((memory.handleTypes & MemHandleType.FABRIC) === 0) invalidValue(call, `allocation ${handle} was not created with fabric handles`);
    const shared = this.shareMemory(memory);
    return encode(FABRIC_MEMORY_MAGIC, { pid: process.pid, fd: shared.fd, bytes: memory.size, device: memory.device, token: shared.token ?? '' });
  }

  /** cuMemImportFromShareableHandle with CU_MEM_HANDLE_TYPE_FABRIC: another process's physical allocation, mapped from its shared file. */
  memImportFabricHandle(data: Uint8Array): Handle {
    const call = 'cuMemImportFromShareableHandle';
    checkIpcHandle(data, call);
    const ctx = this.s.ctx(call);
    const fields = decode(data, FABRIC_MEMORY_MAGIC, call);
    if (fields.bytes % VMM_GRANULARITY !== 0) invalidValue(call, `the handle names ${fields.bytes} bytes, not whole pages of ${VMM_GRANULARITY}`);
    const address = this.mapOther(fields, FABRIC_MEMORY_MAGIC, call);
    return this.importedPhysical(address, fields.bytes, ctx.device.ordinal, MemHandleType.FABRIC);
  }

  /** The shared file of a physical allocation, made at its first export: its bytes move there once. */
  private shareMemory(memory: PhysicalMemory): { readonly fd: number; readonly token?: string } {
    if (memory.shared === undefined) {
      const { token, fd, address } = createShared(memory.size);
      memory.store.shareInto(new Uint8Array(koffi.view(address, memory.size)));
      memory.shared = {
        fd,
        token,
        release: () => {
          memory.store.shareInto(undefined);
          unmap(address, memory.size);
          closeFd(fd);
        },
      };
    }
    return memory.shared;
  }

  /** Another process's physical allocation, mapped at `address` here: a handle of this process that charges no capacity. */
  private importedPhysical(address: number, size: number, ordinal: number, handleTypes: number): Handle {
    const memory = new PhysicalMemory(this.s.handle(), size, ordinal, handleTypes);
    memory.store.shareInto(new Uint8Array(koffi.view(address, size)));
    memory.imported = true;
    memory.shared = {
      fd: -1,
      release: () => {
        memory.store.shareInto(undefined);
        unmap(address, size);
      },
    };
    this.s.physical.add(memory);
    return memory.handle;
  }

  /** cuMemImportFromShareableHandle: another process's physical allocation, mapped from its shared file. */
  memImportFromShareableHandle(fd: number, handleType: number): Handle {
    const call = 'cuMemImportFromShareableHandle';
    const ctx = this.s.ctx(call);
    if (handleType !== MemHandleType.POSIX_FILE_DESCRIPTOR) invalidValue(call, `handle type ${handleType} is not CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`);
    if (!/^\/memfd:vram-ipc-[0-9a-f]{32} \(deleted\)$/.test(readLink(`/proc/self/fd/${fd}`) ?? '')) {
      invalidValue(call, `descriptor ${fd} is not an exported allocation`);
    }
    const size = fstatSync(fd).size;
    if (size === 0 || size % VMM_GRANULARITY !== 0) invalidValue(call, `descriptor ${fd} is not an exported allocation (${size} bytes)`);
    return this.importedPhysical(mapShared(fd, size), size, ctx.device.ordinal, MemHandleType.POSIX_FILE_DESCRIPTOR);
  }

  /**
   * Maps the exporter's shared file (whole pages of `fields.bytes`); the mapping keeps the file
   * alive, so its descriptor is closed at once. The handle's size must be the file's: the driver
   * maps the allocation it knows, whatever a handle's bytes say, and a mapping past the file's end
   * would kill the process with SIGBUS at the first touch.
   */
  private mapOther(fields: HandleFields, magic: readonly number[], call: string): number {
    const fd = this.openShared(fields, call);
    try {
      const shared = fstatSync(fd).size;
      if (shared !== fields.bytes) {
        malformed(magic, call, `the handle says ${fields.bytes} bytes, but the exporter shared ${shared} (a handle altered after export)`);
      }
      return mapShared(fd, roundToPage(fields.bytes));
    } finally {
      closeFd(fd);
    }
  }

  /**
   * Checks that the exporter's descriptor the handle names is still the file `expected`: as an
   * H100 answered legacy handles (CUDA 13), CUDA_ERROR_INVALID_HANDLE once the exporting process
   * is gone, CUDA_ERROR_INVALID_VALUE while it lives but has freed the memory.
   */
  private checkLink(fields: HandleFields, expected: string, call: string): void {
    if (readLink(`/proc/${fields.pid}/fd/${fields.fd}`) !== expected) {
      if (!existsSync(`/proc/${fields.pid}`)) fail(CUresult.INVALID_HANDLE, call, 'the handle is stale: its exporting process has exited');
      invalidValue(call, 'the handle is stale: its exporting process freed the memory');
    }
  }

  /** Opens the exporter's shared file, checking it is the one the handle names. */
  private openShared(fields: HandleFields, call: string): number {
    const path = `/proc/${fields.pid}/fd/${fields.fd}`;
    const expected = `/memfd:${fileName(fields.token)} (deleted)`;
    this.checkLink(fields, expected, call);
    try {
      const fd = openReadWrite(path);
      // The descriptor number could have been reused between the check and the open: check again.
      if (readLink(`/proc/self/fd/${fd}`) !== expected) {
        closeFd(fd);
        invalidValue(call, 'the handle is stale: its exporting process freed the memory');
      }
      return fd;
    } catch (error) {
      if (error instanceof Error && error.name === 'CudaError') throw error;
      return invalidValue(call, `the handle is stale: ${(error as Error).message}`);
    }
  }

  /** A dropped allocation: an exported one closes its file and mapping, an imported one its mapping. */
  private dropped(a: Allocation): void {
    if (a.kind === 'device') {
      const entry = this.exported.get(a.base);
      if (entry === undefined) return;
      this.exported.delete(a.base);
      entry.store.shareInto(undefined);
      unmap(entry.address, entry.mapped);
      closeFd(entry.fd);
    } else if (a.kind === 'ipc') {
      const entry = this.importedAt.get(a.base);
      if (entry === undefined) return;
      this.importedAt.delete(a.base);
      this.imported.delete(entry.token);
      unmap(entry.address, entry.mapped);
    }
  }
}
