/**
 * Spillable memory where it meets the rest of vram (issue 33), on both backends with a small
 * device: a graph captured over a spillable buffer keeps it on the device while the graph lives
 * (or refuses a spilled one), DLPack and CUDA Array Interface exports and foreign views lease it,
 * budgets count it, built-in operations' inputs stay clean, a reload spills about what it needs,
 * `VRAM_SPILL_AHEAD=0` turns spilling ahead off, the device's spillable resource cannot be
 * destroyed, and `emptyCache()` leaves no event, virtual range or spare memory of spilling behind.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { DeviceArray } from '../../src/array/device-array.js';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { withMemoryBudget } from '../../src/buffer/budget.js';
import { SPILL_AHEAD_VARIABLE, spillableResource, spillFigures } from '../../src/buffer/spill/spill-manager.js';
import { Device } from '../../src/device.js';
import { OutOfMemoryError, StreamCaptureError, VramStateError } from '../../src/errors.js';
import { captureGraph } from '../../src/graphs/capture.js';
import { toCudaArrayInterface } from '../../src/interop/cuda-array-interface.js';
import { deleteDLPack, toDLPack } from '../../src/interop/dlpack.js';
import { dot, elementwise, map, max, min, sum, zipWith } from '../../src/kernels/ops/index.js';
import { Module } from '../../src/kernels/module.js';
import { emptyCache } from '../../src/resource/current.js';
import type { MemoryResource } from '../../src/resource/resource.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';
import { Stream } from '../../src/stream.js';
import { forceGc, needsGc, patchBackend, withDeviceRoom } from '../helpers.js';
import { ADD_BYTES_SOURCE, addBytes, byteOf, CHUNK } from './spill-kit.js';

const MiB = 1 << 20;
const device = Device.get(0);

/** A new spillable buffer, given back at once: it pushes out the least recently used one. */
const squeeze = (): void => DeviceBuffer.allocate(CHUNK, { spillable: true }).free();

/** Where spillable memory comes from: the device's SpillableResource (fixed address), or a resource whose memory moves. */
const kinds: Array<[string, () => MemoryResource | undefined]> = [
  ['fixed address', () => undefined],
  ['moving (CudaResource)', () => new CudaResource(device)],
];

describe('spillable memory under other consumers', () => {
  for (const [kind, make] of kinds) {
    it(`${kind}: a graph captured over a spillable buffer keeps it resident while the graph lives; a spilled one is refused`, () => {
      using module = Module.compile(ADD_BYTES_SOURCE, { emulated: { add_bytes: addBytes } });
      const kernel = module.kernel('add_bytes', ['ptr', 'u32'] as const);
      using stream = Stream.create();
      const resource = make();
      try {
        withDeviceRoom(2 * CHUNK, () => {
          const a = DeviceBuffer.allocate(CHUNK, { spillable: true, stream, ...(resource === undefined ? {} : { resource }) });
          const b = DeviceBuffer.allocate(CHUNK, { spillable: true, stream });
          try {
            a.memset(1, { stream });
            b.memset(9, { stream });
            const graph = captureGraph(stream, () => kernel.launch({ grid: CHUNK / 256, block: 256, stream }, a, CHUNK));
            const exec = graph.instantiate();
            graph.destroy();
            const address = a.ptr;
            b.memset(9, { stream }); // a is now the least recently used
            squeeze();
            assert.equal(a.resident, true, 'the executable graph keeps a on the device');
            assert.equal(b.resident, false, 'b went instead');
            exec.launch(stream);
            exec.launch(stream);
            stream.synchronize();
            assert.equal(a.ptr, address, 'at the address the graph holds');
            assert.equal(byteOf(a, stream), 3, 'both launches wrote a');
            exec.destroy();
            stream.synchronize();
            b.memset(9, { stream });
            squeeze();
            assert.equal(a.resident, false, 'once the graph is gone, a may be spilled again');
            // Spilled: its reload cannot be recorded into a graph.
            stream.beginCapture();
            assert.throws(() => kernel.launch({ grid: CHUNK / 256, block: 256, stream }, a, CHUNK), StreamCaptureError);
            stream.endCapture().destroy(); // the capture stayed valid
            assert.equal(byteOf(a, stream), 3, 'a kept its data');
          } finally {
            a.free();
            b.free();
          }
        });
      } finally {
        resource?.destroy();
      }
    });
  }

  it("toDLPack holds a lease until the consumer's deleter runs; DeviceBuffer.fromPointer until the view is freed", () => {
    withDeviceRoom(2 * CHUNK, () => {
      const a = DeviceArray.from(new Uint8Array(CHUNK).fill(4), { spillable: true });
      const b = DeviceBuffer.allocate(CHUNK, { spillable: true });
      const resident = (): boolean => (a.buffer as DeviceBuffer).resident;
      try {
        const tensor = toDLPack(a);
        b.memset(1);
        squeeze();
        assert.equal(resident(), true, 'exported: a stays on the device');
        deleteDLPack(tensor);
        b.memset(1);
        squeeze();
        assert.equal(resident(), false, 'the deleter ran: a may go');
        const view = DeviceBuffer.fromPointer((a.buffer as DeviceBuffer).ptr, CHUNK);
        b.memset(1);
        squeeze();
        assert.equal(resident(), true, 'a foreign view keeps a on the device');
        view.free();
        b.memset(1);
        squeeze();
        assert.equal(resident(), false, 'the view was freed: a may go');
        assert.equal(a.toHost()[CHUNK - 1], 4);
      } finally {
        a.free();
        b.free();
      }
    });
  });

  it('a CUDA Array Interface export holds a lease while the exported object lives', needsGc, async () => {
    const a = DeviceArray.from(new Uint8Array(CHUNK).fill(5), { spillable: true });
    const b = DeviceBuffer.allocate(CHUNK, { spillable: true });
    const resident = (): boolean => (a.buffer as DeviceBuffer).resident;
    try {
      ((): void => {
        const cai = toCudaArrayInterface(a);
        withDeviceRoom(0, () => {
          // a and b are allocated: no room for one more
          b.memset(1);
          squeeze();
        });
        assert.equal(resident(), true, 'the exported object lives: a stays');
        assert.equal(typeof cai.data[0], 'number');
      })();
      for (let i = 0; i < 5; i++) {
        forceGc!();
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      withDeviceRoom(0, () => {
        b.memset(1);
        squeeze();
      });
      assert.equal(resident(), false, 'the object was collected: a may go');
    } finally {
      a.free();
      b.free();
    }
  });

  it('spillable allocations are charged to withMemoryBudget', () => {
    assert.throws(
      () => withMemoryBudget(4 * MiB, () => DeviceBuffer.allocate(8 * MiB, { spillable: true })),
      (error: unknown) => error instanceof OutOfMemoryError && error.reason === 'budget',
    );
    withMemoryBudget(4 * MiB, () => {
      const a = DeviceBuffer.allocate(3 * MiB, { spillable: true });
      try {
        assert.throws(
          () => DeviceBuffer.allocate(2 * MiB),
          (error: unknown) => error instanceof OutOfMemoryError && error.reason === 'budget',
        );
      } finally {
        a.free();
      }
      DeviceBuffer.allocate(2 * MiB).free(); // given back to the budget
    });
  });

  it('the inputs of built-in operations are reads: a clean spilled input is spilled again without a copy out', () => {
    const n = CHUNK / 4;
    const ops: Array<[string, (a: DeviceArray<'float32'>) => void]> = [
      ['sum', (a) => assert.equal(sum(a), n * 0.5)],
      ['min', (a) => assert.equal(min(a), 0.5)],
      ['max', (a) => assert.equal(max(a), 0.5)],
      ['dot', (a) => assert.equal(dot(a, a), n * 0.25)],
      [
        'map',
        (a) => {
          using out = map(a, 'x * 2');
          assert.equal(out.toHost()[3], 1);
        },
      ],
      [
        'zipWith',
        (a) => {
          using out = zipWith(a, a, 'x + y');
          assert.equal(out.toHost()[3], 1);
        },
      ],
      [
        'elementwise',
        (a) => {
          using out = DeviceArray.zeros([n], 'float32');
          elementwise('out = x + 1', { x: a, out });
          assert.equal(out.toHost()[3], 1.5);
        },
      ],
      [
        'copy source',
        (a) => {
          using c = a.copy();
          assert.equal(c.toHost()[3], 0.5);
        },
      ],
    ];
    for (const [name, op] of ops) {
      const a = DeviceArray.from(new Float32Array(n).fill(0.5), { spillable: true });
      const buffer = a.buffer as DeviceBuffer;
      try {
        spillableResource().releaseCached(); // spills a, copied out (written)
        assert.equal(buffer.resident, false);
        op(a);
        assert.equal(buffer.resident, true, `${name} brought a back`);
        const before = spillFigures(device);
        spillableResource().releaseCached();
        assert.equal(buffer.resident, false);
        assert.equal(spillFigures(device).copiesOut - before.copiesOut, 0, `${name} only read a: its host copy is current`);
        assert.equal(a.toHost()[n - 1], 0.5);
      } finally {
        a.free();
      }
    }
  });

  it('reading one spilled array on a full device spills about one, least recently used first', () => {
    const bytes = 32 * MiB;
    const n = bytes / 4;
    emptyCache(); // no memory cached by earlier tests: the operation's own small allocations need the driver
    withDeviceRoom(8 * bytes, () => {
      const arrays: DeviceArray<'float32'>[] = [];
      try {
        for (let i = 0; i < 8; i++) arrays.push(DeviceArray.from(new Float32Array(n).fill(i), { spillable: true }));
        DeviceBuffer.allocate(bytes, { spillable: true }).free(); // the device is full: the first array goes
        const spilled = arrays.filter((a) => !(a.buffer as DeviceBuffer).resident);
        assert.equal(spilled.length, 1, 'one array spilled, seven resident');
        const before = spillFigures(device);
        assert.equal(sum(spilled[0]!), n * arrays.indexOf(spilled[0]!));
        const after = spillFigures(device);
        assert.equal(after.reloads - before.reloads, 1, 'one reload');
        assert.ok(
          after.spilledBuffers.total - before.spilledBuffers.total <= 2,
          `about one spilled, not all: ${after.spilledBuffers.total - before.spilledBuffers.total}`,
        );
      } finally {
        for (const a of arrays) a.free();
      }
    });
  });

  it('VRAM_SPILL_AHEAD=0 turns spilling ahead off', () => {
    const ahead = process.env.VRAM_SPILL_AHEAD;
    process.env.VRAM_SPILL_AHEAD = '0';
    try {
      assert.equal(SPILL_AHEAD_VARIABLE.read(), 0);
      withDeviceRoom(2 * CHUNK, () => {
        const a = DeviceBuffer.allocate(CHUNK, { spillable: true });
        const b = DeviceBuffer.allocate(CHUNK, { spillable: true });
        try {
          a.memset(1);
          b.memset(2);
          const before = spillFigures(device);
          squeeze();
          a.memset(3);
          b.memset(4);
          const after = spillFigures(device);
          assert.ok(after.spilledBuffers.total > before.spilledBuffers.total, 'it spilled');
          assert.equal(after.spilledAhead - before.spilledAhead, 0, 'nothing ahead of need');
        } finally {
          a.free();
          b.free();
        }
      });
    } finally {
      if (ahead === undefined) delete process.env.VRAM_SPILL_AHEAD;
      else process.env.VRAM_SPILL_AHEAD = ahead;
    }
    process.env.VRAM_SPILL_AHEAD = 'none';
    try {
      assert.throws(() => SPILL_AHEAD_VARIABLE.read(), RangeError);
    } finally {
      if (ahead === undefined) delete process.env.VRAM_SPILL_AHEAD;
      else process.env.VRAM_SPILL_AHEAD = ahead;
    }
  });

  it("the device's spillable resource cannot be destroyed; one of the program's own can", () => {
    using live = DeviceBuffer.allocate(CHUNK, { spillable: true });
    assert.throws(() => spillableResource().destroy(), VramStateError);
    assert.throws(() => spillableResource(0)[Symbol.dispose](), VramStateError);
    assert.equal(spillableResource().destroyed, false);
    DeviceBuffer.allocate(CHUNK, { spillable: true }).free();
    live.memset(1);
    const own = new (spillableResource().constructor as new (d: number) => MemoryResource)(0);
    own.destroy();
    assert.equal(own.destroyed, true);
  });

  it('spillFigures takes a Device, an ordinal or nothing; lease refuses a readOnly that is not a boolean', () => {
    withDeviceRoom(2 * CHUNK, () => {
      const a = DeviceBuffer.allocate(CHUNK, { spillable: true });
      const b = DeviceBuffer.allocate(CHUNK, { spillable: true });
      try {
        a.memset(1);
        b.memset(2);
        squeeze();
        const figures = spillFigures(device);
        assert.ok(figures.spilledBuffers.total > 0);
        assert.deepEqual(spillFigures(0), figures);
        assert.deepEqual(spillFigures(), figures);
        assert.throws(() => spillFigures(-1), RangeError);
        assert.throws(() => a.lease({ readOnly: 1 as unknown as boolean }), TypeError);
      } finally {
        a.free();
        b.free();
      }
    });
  });

  it('after emptyCache() spilling holds no event, virtual range or physical memory of a freed buffer', () => {
    const backend = device.backend;
    let events = 0;
    let ranges = 0;
    using _c = patchBackend(backend, 'eventCreate', (original) => (flags) => {
      events++;
      return original(flags);
    });
    using _d = patchBackend(backend, 'eventDestroy', (original) => (event) => {
      events--;
      original(event);
    });
    using _r = patchBackend(backend, 'memAddressReserve', (original) => (size, alignment) => {
      ranges++;
      return original(size, alignment);
    });
    using _f = patchBackend(backend, 'memAddressFree', (original) => (ptr, size) => {
      ranges--;
      original(ptr, size);
    });
    using stream = Stream.create();
    withDeviceRoom(2 * CHUNK, () => {
      const a = DeviceBuffer.allocate(CHUNK, { spillable: true, stream });
      const b = DeviceBuffer.allocate(CHUNK, { spillable: true, stream });
      a.memset(1, { stream });
      b.memset(2, { stream });
      squeeze();
      a.memset(3, { stream }); // back
      a.free({ stream });
      b.free({ stream });
    });
    emptyCache();
    assert.equal(events, 0, 'every event spilling made is destroyed');
    assert.equal(ranges, 0, 'every virtual range spilling reserved is freed');
    assert.equal(spillableResource().memoryFigures().reservedBytes, 0, 'no physical memory kept for buffers that are gone');
  });
});
