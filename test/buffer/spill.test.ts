/**
 * Spillable memory on both backends: a small device made by a ballast allocation (the rest of the
 * device held by one cuMemAlloc block), a working set of twice what is left in spillable arrays
 * touched in random order by copies and kernels, every array's data checked; addresses that stay
 * put across spills; leases that keep a buffer; dirty tracking that skips copies out; the figures.
 */
import { spawnSync } from 'node:child_process';
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { DeviceArray } from '../../src/array/device-array.js';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { spillableResource, spillFigures } from '../../src/buffer/spill/spill-manager.js';
import { OutOfMemoryError } from '../../src/errors.js';
import { memoryStats } from '../../src/observe/memory-stats.js';
import { recordMemoryHistory } from '../../src/observe/history.js';
import { memorySnapshot } from '../../src/observe/snapshot.js';
import { validateSnapshot } from '../../src/observe/snapshot-format.js';
import { snapshotReport } from '../../src/report/snapshot-report.js';
import { sum } from '../../src/kernels/ops/index.js';
import { Device } from '../../src/device.js';
import { threadCount } from '../../src/kernels/emulated-kernel.js';
import { type EmulatedKernel } from '../../src/backend/backend.js';
import { Module } from '../../src/kernels/module.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';
import { PinnedHostResource } from '../../src/resource/upstream/pinned-host-resource.js';
import type { MemoryResource } from '../../src/resource/resource.js';
import { onGpu, withDeviceRoom } from '../helpers.js';
import { Stream } from '../../src/stream.js';
import { mulberry32 } from '../../src/util/random.js';

const MiB = 1 << 20;
const device = Device.get(0);
/** Spillable buffers are whole granules: 2 MiB on the emulated backend and on current GPUs. */
const CHUNK = 2 * MiB;

const SOURCE = `
extern "C" __global__ void add_one(float *y, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += 1.0f;
}
extern "C" __global__ void sum_into(float *out, const float *x, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] += x[i];
}
`;
const addOne: EmulatedKernel = (launch) => {
  const [yPtr, n] = launch.args as [number, number];
  const bytes = launch.memory.bytes(yPtr, 4 * n);
  const y = new Float32Array(bytes.buffer, bytes.byteOffset, n);
  for (let i = 0; i < Math.min(n, threadCount(launch)); i++) y[i] = y[i]! + 1;
};
const sumInto: EmulatedKernel = (launch) => {
  const [outPtr, xPtr, n] = launch.args as [number, number, number];
  const o = launch.memory.bytes(outPtr, 4 * n);
  const xb = launch.memory.bytes(xPtr, 4 * n);
  const out = new Float32Array(o.buffer, o.byteOffset, n);
  const x = new Float32Array(xb.buffer, xb.byteOffset, n);
  for (let i = 0; i < Math.min(n, threadCount(launch)); i++) out[i] = out[i]! + x[i]!;
};

describe('spillable memory', () => {
  it("a working set of twice the memory left, touched in random order by copies and kernels, keeps every array's data", () => {
    using module = Module.compile(SOURCE, { emulated: { add_one: addOne, sum_into: sumInto } });
    const kernel = module.kernel('add_one', ['ptr', 'u32'] as const);
    using stream = Stream.create();
    const n = CHUNK / 4;
    const room = 8 * CHUNK;
    const before = spillFigures(device);
    withDeviceRoom(room, () => {
      const count = 16; // 2x the room
      const arrays: DeviceArray<'float32'>[] = [];
      const expected: number[] = [];
      const addresses: number[] = [];
      try {
        for (let i = 0; i < count; i++) {
          const a = DeviceArray.from(new Float32Array(n).fill(i), { spillable: true, stream });
          arrays.push(a);
          expected.push(i);
          addresses.push(a.ptr);
        }
        const random = mulberry32(22);
        for (let step = 0; step < 64; step++) {
          const i = Math.floor(random() * count);
          const a = arrays[i]!;
          if (random() < 0.5) {
            kernel.launch({ grid: n / 256, block: 256, stream }, a, n);
            expected[i]! += 1;
          } else {
            a.copyFrom(new Float32Array(n).fill(step * 10));
            expected[i] = step * 10;
          }
        }
        for (let i = 0; i < count; i++) {
          const host = arrays[i]!.toHost();
          assert.equal(host[0], expected[i], `array ${i} first element`);
          assert.equal(host[n - 1], expected[i], `array ${i} last element`);
          assert.equal(arrays[i]!.buffer.ptr, addresses[i], `array ${i} kept its address`);
        }
      } finally {
        for (const a of arrays) a.free();
      }
    });
    const after = spillFigures(device);
    assert.ok(after.spilledBuffers.total > before.spilledBuffers.total, 'something was spilled');
    assert.ok(after.reloads > before.reloads, 'something came back');
  });

  it('keeps addresses across spills; a leased buffer is never evicted; a clean buffer is evicted without a copy', () => {
    using module = Module.compile(SOURCE, { emulated: { add_one: addOne, sum_into: sumInto } });
    const sum = module.kernel('sum_into', ['ptr', 'cptr', 'u32'] as const);
    const n = CHUNK / 4;
    withDeviceRoom(4 * CHUNK, () => {
      // Four granules of room: `out`, `x`, the leased `held` and one more.
      const held = DeviceBuffer.allocate(CHUNK, { spillable: true });
      const x = DeviceBuffer.allocate(CHUNK, { spillable: true });
      const out = DeviceBuffer.allocate(CHUNK, { spillable: true });
      const others: DeviceBuffer[] = [];
      try {
        held.copyFromHost(new Float32Array(n).fill(7));
        x.copyFromHost(new Float32Array(n).fill(2));
        out.copyFromHost(new Float32Array(n).fill(1));
        const lease = held.lease();
        const heldPtr = lease.ptr;
        const xPtr = x.ptr;
        for (let i = 0; i < 6; i++) {
          const b = DeviceBuffer.allocate(CHUNK, { spillable: true });
          others.push(b);
          b.memset(i);
          assert.ok(held.resident, 'the leased buffer stays on the device');
        }
        assert.equal(x.resident, false, 'x was spilled');
        // x came back for reading only ('cptr'): its host copy stays current.
        const copiesBefore = spillFigures(device).copiesOut;
        sum.launch({ grid: n / 256, block: 256 }, out, x, n);
        assert.equal(x.resident, true);
        {
          using look = x.lease({ readOnly: true }); // `x.ptr` would count as a write
          assert.equal(look.ptr, xPtr, 'x came back at its address');
        }
        for (const b of others) b.memset(9); // pushes x and out out again
        assert.equal(x.resident, false, 'x was spilled again');
        const figures = spillFigures(device);
        assert.ok(figures.copiesOut - copiesBefore >= 1, 'out, written by the kernel, was copied out');
        // x was clean: had it been copied, the copies would count one more than the dirty buffers spilled.
        const spilledSince = figures.spilledBuffers.total;
        assert.ok(figures.copiesOut < spilledSince, `copies out (${figures.copiesOut}) fewer than spills (${spilledSince})`);
        assert.deepEqual(Array.from(out.copyToHost(new Float32Array(n)).subarray(0, 4)), [3, 3, 3, 3]);
        assert.deepEqual(Array.from(x.copyToHost(new Float32Array(n)).subarray(0, 4)), [2, 2, 2, 2]);
        assert.equal(held.resident, true);
        assert.equal(lease.ptr, heldPtr);
        assert.ok(memoryStats().spill.leasedBytes >= CHUNK, 'the statistics count the leased bytes');
        lease.release();
        for (const b of others) b.memset(1);
        assert.equal(held.resident, false, 'released, it may go');
        assert.deepEqual(Array.from(held.copyToHost(new Float32Array(n)).subarray(0, 2)), [7, 7]);
      } finally {
        for (const b of [held, x, out, ...others]) b.free();
      }
    });
  });

  it('dirty tracking: a buffer read since it came back is spilled again without a copy out', () => {
    withDeviceRoom(2 * CHUNK, () => {
      const a = DeviceBuffer.allocate(CHUNK, { spillable: true });
      const b = DeviceBuffer.allocate(CHUNK, { spillable: true });
      /** A new spillable buffer, given back at once: it pushes out the least recently used. */
      const squeeze = (): void => DeviceBuffer.allocate(CHUNK, { spillable: true }).free();
      try {
        a.memset(5);
        b.memset(0); // least recently used first: a, b
        squeeze();
        assert.equal(a.resident, false, 'a went, copied out (written)');
        const start = spillFigures(device);
        a.copyToHost(new Uint8Array(16), { bytes: 16 }); // back, and only read
        assert.equal(a.resident, true);
        b.memset(1);
        squeeze();
        assert.equal(a.resident, false, 'a went again');
        assert.equal(b.resident, true);
        const end = spillFigures(device);
        assert.equal(end.spilledBuffers.total - start.spilledBuffers.total, 1);
        assert.equal(end.reloads - start.reloads, 1);
        assert.equal(end.copiesOut - start.copiesOut, 0, 'no copy out for a buffer whose host copy is current');
        a.memset(6, { count: 8 }); // back, and written: the next spill copies
        b.memset(2);
        squeeze();
        assert.equal(a.resident, false);
        assert.equal(spillFigures(device).copiesOut - end.copiesOut, 1, 'a written buffer is copied out');
        const bytes = a.copyToHost(new Uint8Array(16), { bytes: 16 });
        assert.deepEqual(Array.from(bytes), [6, 6, 6, 6, 6, 6, 6, 6, 5, 5, 5, 5, 5, 5, 5, 5]);
      } finally {
        a.free();
        b.free();
      }
    });
  });

  // The refusal must land exactly between "a's 2 MiB go back" and "nothing can go": on a GPU the driver
  // keeps free memory of its own beyond the room (withDeviceRoom leaves it slack), so that point
  // cannot be placed there; the emulated backend, which allocates in bytes, runs it.
  it(
    "another resource's refusal spills first; when nothing can go, the error says what was spillable",
    { skip: onGpu ? "needs a refusal placed to the byte, which a real driver's own free memory prevents" : false },
    () => {
      withDeviceRoom(4 * CHUNK, () => {
        const a = DeviceBuffer.allocate(CHUNK, { spillable: true });
        const b = DeviceBuffer.allocate(CHUNK, { spillable: true });
        const driver = new CudaResource(device);
        try {
          a.memset(3);
          b.memset(4);
          using lease = b.lease();
          // Three granules: only a's going makes room (b is leased).
          const p = driver.allocate(3 * CHUNK);
          assert.equal(a.resident, false, 'the refusal spilled a');
          assert.equal(b.resident, true);
          driver.deallocate(p, 3 * CHUNK);
          const big = driver.allocate(3 * CHUNK);
          try {
            assert.throws(
              () => a.memset(0),
              (error: unknown) => error instanceof OutOfMemoryError && /spilling could not help: .*held by leases/.test(error.message),
            );
            assert.equal(a.resident, false, 'a failed reload changes nothing');
          } finally {
            driver.deallocate(big, 3 * CHUNK);
          }
          assert.deepEqual(Array.from(a.copyToHost(new Uint8Array(2), { bytes: 2 })), [3, 3]);
          assert.equal(lease.ptr, b.ptr);
        } finally {
          a.free();
          b.free();
          driver.destroy();
        }
      });
    },
  );

  it('spillable memory needs device memory: a host resource is refused, with the reason', () => {
    using pinned = new PinnedHostResource();
    assert.throws(
      () => DeviceBuffer.allocate(64, { spillable: true, resource: pinned as unknown as MemoryResource }),
      /^TypeError: DeviceBuffer.allocate: spillable memory comes from device memory, which PinnedHostResource.* is not/,
    );
    using buf = DeviceBuffer.allocate(64, { spillable: true, resource: spillableResource() });
    assert.equal(buf.spillable, true);
    assert.equal(buf.ptr % spillableResource().alignment, 0, 'a granule of its own');
  });

  it("spills and reloads are events of the memory history, in snapshots and on the report's timeline", () => {
    withDeviceRoom(2 * CHUNK, () => {
      using history = recordMemoryHistory();
      const a = DeviceBuffer.allocate(CHUNK, { spillable: true });
      const b = DeviceBuffer.allocate(CHUNK, { spillable: true });
      try {
        a.memset(1);
        b.memset(2);
        DeviceBuffer.allocate(CHUNK, { spillable: true }).free(); // a goes
        a.memset(3); // a comes back
        const address = a.ptr;
        const events = history.events().filter((e) => e.kind === 'spill' || e.kind === 'reload');
        assert.deepEqual(
          events.filter((e) => e.address === address).map((e) => e.kind),
          ['spill', 'reload'],
        );
        assert.ok(events.every((e) => e.bytes === CHUNK));
        const snapshot = validateSnapshot(JSON.parse(JSON.stringify(memorySnapshot())));
        const report = snapshotReport(snapshot);
        assert.match(JSON.stringify(report), /spilled to host memory/);
      } finally {
        a.free();
        b.free();
      }
    });
  });

  it('a built-in operation brings its spilled operands back at their addresses', () => {
    withDeviceRoom(2 * CHUNK, () => {
      const a = DeviceArray.from(new Float32Array(CHUNK / 4).fill(0.5), { spillable: true });
      const b = DeviceArray.zeros([CHUNK / 4], 'float32', { spillable: true });
      const squeeze = (): void => DeviceBuffer.allocate(CHUNK, { spillable: true }).free();
      const resident = (x: DeviceArray<'float32'>): boolean => (x.buffer as DeviceBuffer).resident;
      try {
        b.fill(1);
        squeeze(); // a, the least recently used, goes
        assert.equal(resident(a), false);
        const start = spillFigures(device);
        assert.equal(sum(a), CHUNK / 8);
        assert.ok(spillFigures(device).reloads > start.reloads);
        assert.equal(resident(a), true);
        b.fill(2);
        squeeze();
        squeeze();
        assert.equal(resident(a), false);
        assert.equal(a.toHost()[7], 0.5);
        assert.equal(b.toHost()[7], 2);
      } finally {
        a.free();
        b.free();
      }
    });
  });

  it('VRAM_SPILL=1 makes allocations without a resource spillable; a named resource or spillable: false is not', () => {
    const script = `
      const { DeviceBuffer } = await import(${JSON.stringify(new URL('../../src/buffer/device-buffer.js', import.meta.url).href)});
      const { CudaResource } = await import(${JSON.stringify(new URL('../../src/resource/upstream/cuda-resource.js', import.meta.url).href)});
      const plain = DeviceBuffer.allocate(64);
      const named = DeviceBuffer.allocate(64, { resource: new CudaResource(0) });
      const no = DeviceBuffer.allocate(64, { spillable: false });
      console.log(JSON.stringify([plain.spillable, named.spillable, no.spillable]));
      for (const b of [plain, named, no]) b.free();`;
    const child = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
      env: { ...process.env, VRAM_SPILL: '1' },
      encoding: 'utf8',
    });
    assert.equal(child.status, 0, child.stderr);
    assert.deepEqual(JSON.parse(child.stdout.trim().split('\n').at(-1)!), [true, false, false]);
  });

  it('a buffer a staged copy is still filling is not spilled under it', async () => {
    const bytes = 32 * MiB; // staged through pinned chunks, queued as earlier ones complete
    const buf = DeviceBuffer.allocate(bytes, { spillable: true });
    try {
      const data = new Uint8Array(bytes).fill(9);
      const copy = buf.copyFromHostAsync(data);
      spillableResource().releaseCached(); // spills everything that may go
      assert.equal(buf.resident, true, 'held by the copy in flight');
      await copy;
      spillableResource().releaseCached();
      assert.equal(buf.resident, false, 'free to go once the copy settled');
      const back = buf.copyToHost(new Uint8Array(bytes));
      assert.equal(back[0], 9);
      assert.equal(back[bytes - 1], 9);
    } finally {
      buf.free();
    }
  });
});
