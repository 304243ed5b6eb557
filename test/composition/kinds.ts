/**
 * The rows of the composition table (test/composition/composition.test.ts): every kind of memory vram hands
 * out or adopts, each as a way to make a small float32 array of it holding known values.
 *
 * A kind's `make` returns a Subject: the array consumers use, the values its memory holds now
 * (`expected`; a consumer that writes updates it), and what it takes to end it. Anything a kind
 * needs besides the subject itself (a resource, a source array, a peer process's buffer) is made
 * by `prepare`, outside whatever scope the consumer makes the subject in (a budget, a scoped
 * resource), and ended by its `teardown`, so the column measures the kind and not its
 * scaffolding. To add a row: add a kind here and a line for it in every column of table.ts.
 */
import assert from 'node:assert/strict';
import { DeviceArray } from '../../src/array/device-array.js';
import { HostArray } from '../../src/array/host-array.js';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { captureGraph } from '../../src/graphs/capture.js';
import { fromCudaArrayInterface, toCudaArrayInterface } from '../../src/interop/cuda-array-interface.js';
import { dlpackExportsHeld, fromDLPack, toDLPack } from '../../src/interop/dlpack.js';
import { importIpc } from '../../src/ipc/ipc.js';
import { DeviceMemory } from '../../src/buffer/device-memory.js';
import { ForeignMirror, foreignFigures } from '../../src/buffer/foreign-mirror.js';
import { fill } from '../../src/kernels/ops/index.js';
import { GraphPool } from '../../src/resource/suballoc/graph-pool.js';
import type { MemoryResource } from '../../src/resource/resource.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import { AsyncResource } from '../../src/resource/upstream/async-resource.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';
import { ManagedResource } from '../../src/resource/upstream/managed-resource.js';
import { Device } from '../../src/device.js';
import { spillableResource } from '../../src/buffer/spill/spill-manager.js';
import type { Stream } from '../../src/stream.js';
import { Peer, emulatedIpcResources } from '../ipc-peer.js';
import { plantImex, withImexRoot } from '../imex.js';
import { onGpu } from '../helpers.js';
import type { IpcBuffer } from '../../src/ipc/ipc-buffer.js';

/** Elements of every subject (float32): small, so each cell is quick on the emulated backend. */
export const N = 96;
export const BYTES = 4 * N;

/** A subject's array: device memory, or pinned host memory that the device cannot address. */
export type SubjectArray = DeviceArray<'float32'> | HostArray<'float32'>;

/** One made instance of a kind. */
export interface Subject {
  readonly array: SubjectArray;
  /** The values its memory holds now; a consumer that writes it sets this. */
  expected: Float32Array;
  /** The device memory under it, for the consumers that take a buffer (IPC export, leases); undefined for host memory. */
  readonly memory: DeviceMemory | undefined;
  /** What owns the memory (the array, or for a view the buffer or import under it): what `using` and `free()` end. */
  readonly owner: { free(): void; readonly freed: boolean; [Symbol.dispose](): void };
  /** Frees the subject: its owner. */
  free(): void;
  /**
   * Reads what it holds, for a kind whose memory has another side to check besides the array (a
   * ForeignMirror's host array); undefined: the array read the way its memory is read.
   */
  readonly read?: () => Float32Array;
  /**
   * What is still held of the memory this subject came from (bytes a resource has handed out,
   * deleters not yet called, imports still open): back to where it was before `make` once the
   * subject is freed or collected. Holds no reference to the subject.
   */
  held(): number;
}

/** What a kind makes its subjects with. */
export interface MakeContext {
  readonly stream: Stream;
  /** The values the subject must hold. */
  readonly values: Float32Array;
}

/** A row: a kind of memory. */
export interface Kind {
  readonly about: string;
  /** Makes what a subject needs besides itself, outside the consumer's scopes. */
  prepare(ctx: MakeContext): Promise<Prepared>;
}

/** A kind's preparation: its maker, and the end of what it set up (after the subjects are gone). */
export interface Prepared {
  make(ctx: MakeContext): Subject;
  teardown(): void;
}

const device0 = (): Device => Device.get(0);

/** A subject whose array came from `resource` (which `teardown` destroys). */
function fromResource(resource: MemoryResource, options: { spillable?: boolean } = {}): Promise<Prepared> {
  return Promise.resolve({
    make: ({ stream, values }) => {
      const array = DeviceArray.from(values, { resource, stream, ...options });
      return deviceSubject(array, values, () => resource.memoryFigures()?.allocatedBytes.value ?? 0);
    },
    teardown: () => resource.destroy(),
  });
}

function deviceSubject(array: DeviceArray<'float32'>, values: Float32Array, held: () => number, owner: Subject['owner'] = array): Subject {
  return {
    array,
    expected: values.slice(),
    memory: array.buffer instanceof DeviceMemory ? array.buffer : undefined,
    owner,
    free: () => owner.free(),
    held,
  };
}

/** 1 while `memory` is neither freed nor collected, else 0 (memory with no figure of its own to read); holds it weakly. */
function weakHeld(memory: { readonly freed: boolean }): () => number {
  const ref = new WeakRef(memory);
  return () => {
    const m = ref.deref();
    return m === undefined || m.freed ? 0 : 1;
  };
}

/** The memory a raw block of a CudaResource holds, for foreign pointers and read-only views. */
function rawBlock(stream: Stream, values: Float32Array): { ptr: number; resource: CudaResource; end: () => void } {
  const resource = new CudaResource(device0());
  const ptr = resource.allocate(BYTES);
  // Written through a vram view of the block (a view that never frees it).
  const writer = DeviceBuffer.fromPointer(ptr, BYTES);
  writer.copyFromHost(values);
  writer.free();
  stream.synchronize();
  return {
    ptr,
    resource,
    end: () => {
      resource.deallocate(ptr, BYTES);
      resource.destroy();
    },
  };
}

function foreign(readOnly: boolean): Kind['prepare'] {
  return ({ stream, values }) => {
    const block = rawBlock(stream, values);
    let released = 0;
    let made = 0;
    return Promise.resolve({
      make: () => {
        made++;
        const array = DeviceArray.fromPointer(block.ptr, [N], 'float32', {
          readOnly,
          onRelease: () => {
            released++;
          },
        });
        return deviceSubject(array, values, () => made - released);
      },
      teardown: block.end,
    });
  };
}

/** Bytes the device's spillable resource has handed out (every fixed-address spillable buffer's). */
const spillableHeld = (): number => spillableResource(device0()).memoryFigures()?.allocatedBytes.value ?? 0;

/** Nothing to end. */
const nothing = (): void => {};

/** The IPC peer: one Node process for the file, exporting on request. */
let peer: Peer | undefined;
export function ipcPeer(): Peer {
  peer ??= new Peer();
  return peer;
}
export async function endIpcPeer(): Promise<void> {
  const p = peer;
  peer = undefined;
  if (p !== undefined) await p.exit();
}

export const kinds = {
  'pool-block': {
    about: 'a block of PoolResource (virtual memory growth)',
    prepare: () => fromResource(new PoolResource({ device: device0() })),
  },
  'adaptive-block': {
    about: "a block of PoolResource({ extentSize: 'adaptive' })",
    prepare: () => fromResource(new PoolResource({ device: device0(), extentSize: 'adaptive' })),
  },
  'async-resource': {
    about: "AsyncResource memory (a CUDA stream-ordered pool made for sharing, as the default allocator's)",
    prepare: () => fromResource(new AsyncResource({ device: device0(), pool: { handleTypes: 'posix-fd' } })),
  },
  'cuda-resource': {
    about: 'CudaResource memory (cuMemAlloc per block)',
    prepare: () => fromResource(new CudaResource(device0())),
  },
  managed: {
    about: 'managed memory (ManagedResource)',
    prepare: () => fromResource(new ManagedResource({ device: device0() })),
  },
  pinned: {
    about: 'pinned host memory (HostArray), not mapped',
    prepare: () =>
      Promise.resolve({
        make: ({ values }) => {
          const array = HostArray.from(values);
          return { array, expected: values.slice(), memory: undefined, owner: array, free: () => array.free(), held: weakHeld(array) };
        },
        teardown: nothing,
      }),
  },
  'host-numa-pool': {
    about: "pinned host memory from a stream-ordered pool on the device's host NUMA node (AsyncResource { location: host-numa })",
    prepare: () => {
      const resource = new AsyncResource({ device: device0(), pool: { location: { type: 'host-numa' } } });
      return Promise.resolve({
        make: ({ values }) => {
          const array = HostArray.from(values, { resource });
          return { array, expected: values.slice(), memory: undefined, owner: array, free: () => array.free(), held: weakHeld(array) };
        },
        teardown: () => resource.destroy(),
      });
    },
  },
  mapped: {
    about: 'mapped pinned host memory seen by the device (HostArray { mapped: true }.deviceView())',
    prepare: () =>
      Promise.resolve({
        make: ({ values }) => {
          const host = HostArray.from(values, { mapped: true });
          return deviceSubject(host.deviceView(), values, weakHeld(host), host);
        },
        teardown: nothing,
      }),
  },
  'spillable-fixed': {
    about: 'spillable memory at a fixed address ({ spillable: true })',
    prepare: () =>
      Promise.resolve({
        make: ({ stream, values }) => {
          const array = DeviceArray.from(values, { stream, spillable: true });
          return deviceSubject(array, values, spillableHeld);
        },
        teardown: nothing,
      }),
  },
  'spillable-moving': {
    about: 'spillable memory that moves ({ spillable: true, resource: CudaResource })',
    prepare: () => fromResource(new CudaResource(device0()), { spillable: true }),
  },
  foreign: {
    about: 'a foreign pointer (DeviceArray.fromPointer over memory vram did not hand out as a buffer)',
    prepare: foreign(false),
  },
  'read-only-view': {
    about: 'a read-only view (fromPointer { readOnly: true })',
    prepare: foreign(true),
  },
  'foreign-mirror': {
    about: 'a ForeignMirror: a foreign device pointer tied to a host array, the host side current when made',
    prepare: ({ stream }) => {
      // The foreign library's block holds stale data: the values are on the host side, which every use must copy first.
      const block = rawBlock(stream, new Float32Array(N).fill(-1));
      const before = foreignFigures(0).mirrors;
      let released = 0;
      let made = 0;
      // Made here, not in `make`: a closure made there would share its scope with the subject and keep it.
      const onRelease = (): void => {
        released++;
      };
      const held = (): number => made - released + foreignFigures(0).mirrors - before;
      return Promise.resolve({
        make: ({ stream: s, values }) => {
          made++;
          const buffer = DeviceBuffer.fromPointer(block.ptr, BYTES, { onRelease });
          const mirror = ForeignMirror.tie(buffer, values.slice(), 'host');
          const array = DeviceArray.fromBuffer<'float32'>(buffer, { dtype: 'float32', shape: [N], stream: s });
          return {
            ...deviceSubject(array, values, held, buffer),
            // Both sides: the host array through the mirror (a copy back when the device side was written), then the
            // device's, which must agree; the host side is then made current, so the next use must copy it over first.
            read: () => {
              const host = Float32Array.from(mirror.host());
              s.synchronize();
              assert.deepEqual(Array.from(array.toHost()), Array.from(host), "the device side agrees with the mirror's host array");
              mirror.host({ write: true });
              return host;
            },
          };
        },
        teardown: block.end,
      });
    },
  },
  'ipc-import': {
    about: "an IPC import (importIpc of another process's CudaResource buffer)",
    prepare: async ({ values }) => {
      const bytes = Buffer.from(values.buffer, values.byteOffset, values.byteLength);
      const p = ipcPeer();
      const { handle } = await p.do({ op: 'export', bytes: BYTES, fill: 0 });
      await p.do({ op: 'write', offset: 0, hex: bytes.toString('hex') });
      const before = emulatedIpcResources();
      return {
        make: ({ stream }) => {
          const imported = importIpc(handle ?? '');
          const array = DeviceArray.fromBuffer<'float32'>(imported, { dtype: 'float32', shape: [N], stream });
          // What the emulated driver still holds for the import, and (on a GPU, where the importer's
          // figures do not move) the import itself until freed or collected.
          const importHeld = weakHeld(imported);
          return deviceSubject(array, values, () => emulatedIpcResources() - before + importHeld(), imported);
        },
        teardown: nothing,
      };
    },
  },
  'fabric-import': {
    about: "fabric-imported pool memory (importIpc of another process's buffer from an AsyncResource with handleTypes 'fabric')",
    prepare: async ({ values }) => {
      const bytes = Buffer.from(values.buffer, values.byteOffset, values.byteLength);
      // The emulated backend models the driver; the host's IMEX channel is planted (a GPU uses its own).
      const planted = onGpu ? undefined : plantImex();
      const p = ipcPeer();
      const { handle } = await p.do({ op: 'export-fabric', from: 'pool', bytes: BYTES, fill: 0, ...(planted ? { root: planted.root } : {}) });
      await p.do({ op: 'write', offset: 0, hex: bytes.toString('hex') });
      return {
        make: ({ stream }) => {
          const open = (): IpcBuffer => importIpc(handle ?? '');
          const imported = planted === undefined ? open() : withImexRoot(planted.root, open);
          const array = DeviceArray.fromBuffer<'float32'>(imported, { dtype: 'float32', shape: [N], stream });
          // Its free is stream-ordered (cuMemFreeAsync of the import): what is held is the import
          // until freed or collected, as an AsyncResource's allocations count until deallocated.
          return deviceSubject(array, values, weakHeld(imported), imported);
        },
        teardown: () => {
          // Queued behind every command sent so far: the importer's frees came first, as CUDA requires.
          p.do({ op: 'free' }).catch(() => undefined);
          planted?.remove();
        },
      };
    },
  },
  'dlpack-import': {
    about: 'a DLPack import (fromDLPack of a tensor another producer exported)',
    prepare: ({ stream, values }) => {
      const resource = new CudaResource(device0());
      const source = DeviceArray.from(values, { stream, resource });
      const before = dlpackExportsHeld();
      return Promise.resolve({
        make: () => {
          const array = fromDLPack(toDLPack(source)) as DeviceArray<'float32'>;
          return deviceSubject(array, values, () => dlpackExportsHeld() - before);
        },
        teardown: () => {
          source.free();
          resource.destroy();
        },
      });
    },
  },
  'cai-import': {
    about: 'a CUDA Array Interface import (fromCudaArrayInterface of another array)',
    prepare: ({ stream, values }) => {
      const resource = new CudaResource(device0());
      const source = DeviceArray.from(values, { stream, resource });
      return Promise.resolve({
        make: ({ stream: s }) => {
          // An import of the interface owns nothing: freeing or collecting it ends only the view.
          const array = fromCudaArrayInterface(toCudaArrayInterface(source, { stream: s })) as DeviceArray<'float32'>;
          return deviceSubject(array, values, weakHeld(array));
        },
        teardown: () => {
          source.free();
          resource.destroy();
        },
      });
    },
  },
  'graph-private': {
    about: 'graph-private memory (an array allocated while capturing, written by the graph, kept after it)',
    prepare: ({ stream, values }) => {
      const pool = new GraphPool({ device: device0() });
      const host = HostArray.from(values);
      // Made here, not in `make`: a closure made there would share its scope with `array` and keep it.
      const held = (): number => pool.allocatedBytes;
      return Promise.resolve({
        make: () => {
          let array: DeviceArray<'float32'> | undefined;
          using graph = captureGraph(
            stream,
            () => {
              array = DeviceArray.empty([N], 'float32', { stream });
              fill(array, 0, { stream });
            },
            { pool },
          );
          {
            using exec = graph.instantiate();
            exec.launch(stream);
            stream.synchronize();
          }
          // The graph is gone; its output is the program's, from the private pool until freed.
          const made = array!;
          made.copyFrom(host);
          return deviceSubject(made, values, held);
        },
        teardown: () => host.free(),
      });
    },
  },
} as const satisfies Record<string, Kind>;

export type KindName = keyof typeof kinds;
