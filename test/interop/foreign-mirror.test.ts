/**
 * Foreign memory in the memory table (issue 37, row 11; Accelerate's `LRU.insertUnmanaged` and its
 * dirty-host-data note): a foreign device pointer tied to a host array. vram's writes mark the
 * device side, host writes through `host({ write: true })` the host side; a copy happens only when
 * the side read is stale; nothing is freed or spilled; memoryStats counts it.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DeviceArray } from '../../src/array/device-array.js';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { ForeignMirror } from '../../src/buffer/foreign-mirror.js';
import { ForeignDeviceBuffer } from '../../src/buffer/foreign-device-buffer.js';
import { Device } from '../../src/device.js';
import { StreamCaptureError, UseAfterFreeError, VramStateError } from '../../src/errors.js';
import type { Graph } from '../../src/graphs/graph.js';
import { fromCudaArrayInterface, toCudaArrayInterface } from '../../src/interop/cuda-array-interface.js';
import { fromDLPack, toDLPack } from '../../src/interop/dlpack.js';
import { elementwise, sum } from '../../src/kernels/ops/index.js';
import { Communicator } from '../../src/nccl/communicator.js';
import { UniqueId } from '../../src/nccl/unique-id.js';
import { memoryStats } from '../../src/observe/memory-stats.js';
import { Stream } from '../../src/stream.js';
import { forceGc } from '../helpers.js';

const device = Device.get(0);
const backend = device.backend;

/** Device memory a foreign library allocated (and frees itself). */
function foreign(n: number): { ptr: number; buffer: ForeignDeviceBuffer; released: () => boolean } {
  device.makeCurrent();
  const ptr = backend.memAlloc(n * 4);
  let released = false;
  const buffer = DeviceBuffer.fromPointer(ptr, n * 4, {
    onRelease: () => {
      released = true;
    },
  });
  return { ptr, buffer, released: () => released };
}

test('host writes are copied to the device only before vram reads it; vram writes come back only when the host reads', () => {
  const { ptr, buffer } = foreign(256);
  const host = new Float32Array(256);
  const before = memoryStats(device).foreign;
  using mirror = ForeignMirror.tie(buffer, host, 'host');
  assert.equal(memoryStats(device).foreign.mirrors, before.mirrors + 1);
  assert.equal(memoryStats(device).foreign.bytes, before.bytes + 1024);
  (mirror.host({ write: true }) as Float32Array).fill(2); // the host side is current
  assert.equal(mirror.current, 'host');
  const x = DeviceArray.fromBuffer(mirror.buffer, { dtype: 'float32' });
  assert.equal(sum(x), 512, 'the device side was brought up to date before the reduction read it');
  assert.equal(mirror.current, 'both');
  const copied = memoryStats(device).foreign.copiesToDevice;
  assert.equal(copied, before.copiesToDevice + 1);
  assert.equal(sum(x), 512);
  assert.equal(memoryStats(device).foreign.copiesToDevice, copied, 'nothing stale: no second copy');
  elementwise('x = x * 3', { x }); // a vram kernel writes it: the device side is current
  assert.equal(mirror.current, 'device');
  assert.equal(host[0], 2, 'the host array is stale until read through the mirror');
  assert.equal((mirror.host() as Float32Array)[0], 6);
  assert.equal(memoryStats(device).foreign.copiesToHost, before.copiesToHost + 1);
  assert.equal((mirror.host() as Float32Array)[255], 6);
  assert.equal(memoryStats(device).foreign.copiesToHost, before.copiesToHost + 1, 'in step: no second copy');
  mirror.destroy();
  assert.equal(memoryStats(device).foreign.mirrors, before.mirrors);
  buffer.free();
  backend.memFree(ptr);
});

test('vram never frees what it does not own: destroying the mirror frees neither side', () => {
  const { ptr, buffer, released } = foreign(16);
  const host = new Uint8Array(64);
  const mirror = ForeignMirror.tie(buffer, host);
  mirror.destroy();
  assert.equal(released(), false);
  assert.equal(buffer.freed, false);
  assert.throws(() => mirror.host(), VramStateError);
  buffer.free(); // the owner's onRelease, called by the owner's free
  assert.equal(released(), true);
  backend.memFree(ptr);
});

test('refusals: sizes, kinds, a buffer tied twice', () => {
  const { ptr, buffer } = foreign(16);
  assert.throws(() => ForeignMirror.tie(buffer, new Uint8Array(63)), RangeError);
  assert.throws(() => ForeignMirror.tie(buffer, [1, 2] as never), TypeError);
  using own = DeviceBuffer.allocate(64);
  assert.throws(() => ForeignMirror.tie(own as never, new Uint8Array(64)), TypeError);
  using mirror = ForeignMirror.tie(buffer, new Uint8Array(64));
  assert.throws(() => ForeignMirror.tie(buffer, new Uint8Array(64)), VramStateError);
  assert.throws(() => mirror.host({ write: 1 } as never), TypeError);
  mirror.destroy();
  buffer.free();
  backend.memFree(ptr);
});

test('reading the host side of a host-current mirror leaves it host-current: the next device use still copies it over', () => {
  const { ptr, buffer } = foreign(64);
  using mirror = ForeignMirror.tie(buffer, new Float32Array(64).fill(5), 'host');
  assert.equal((mirror.host() as Float32Array)[0], 5);
  assert.equal(mirror.current, 'host', 'a read changes nothing: the device copy is still stale');
  assert.equal(sum(DeviceArray.fromBuffer(mirror.buffer, { dtype: 'float32' })), 320);
  mirror.destroy();
  buffer.free();
  backend.memFree(ptr);
});

test('NCCL, DLPack and the CUDA Array Interface see the host side too: each copies it over first', () => {
  const { ptr, buffer } = foreign(64);
  const host = new Float32Array(64);
  using mirror = ForeignMirror.tie(buffer, host, 'host');
  const x = DeviceArray.fromBuffer(mirror.buffer, { dtype: 'float32' });
  const reads: Array<[string, () => Float32Array]> = [
    [
      'NCCL',
      () => {
        using comm = Communicator.init({ id: UniqueId.create(), rank: 0, size: 1 });
        using out = DeviceArray.zeros([64], 'float32');
        comm.broadcast(x, out, { root: 0 });
        return out.toHost();
      },
    ],
    [
      'DLPack',
      () => {
        using imported = fromDLPack(toDLPack(x)) as DeviceArray<'float32'>;
        return imported.toHost();
      },
    ],
    ['the CUDA Array Interface', () => (fromCudaArrayInterface(toCudaArrayInterface(x)) as DeviceArray<'float32'>).toHost()],
  ];
  for (const [i, [what, read]] of reads.entries()) {
    (mirror.host({ write: true }) as Float32Array).fill(i + 1);
    assert.deepEqual(Array.from(read()), Array.from(new Float32Array(64).fill(i + 1)), `${what} reads the host side's values`);
    assert.equal(mirror.current, what === 'NCCL' ? 'both' : 'device', `${what}: an export may be written by its consumer`);
  }
  mirror.destroy();
  buffer.free();
  backend.memFree(ptr);
});

test("a capture refuses a mirror's buffer before the driver (a graph's launches bypass the mirror), and the capture stays valid", () => {
  const { ptr, buffer } = foreign(64);
  // In step, so nothing would need copying: still refused (a launch after host({ write: true }) would be missed).
  using mirror = ForeignMirror.tie(buffer, new Float32Array(64), 'both');
  const x = DeviceArray.fromBuffer(mirror.buffer, { dtype: 'float32' });
  using stream = Stream.create();
  using other = DeviceArray.zeros([64], 'float32', { stream });
  stream.beginCapture();
  let graph: Graph | undefined;
  try {
    assert.throws(() => elementwise('x = x + 1', { x }, { stream }), StreamCaptureError);
    elementwise('x = x + 2', { x: other }, { stream });
  } finally {
    graph = stream.endCapture();
  }
  {
    using g = graph!;
    using exec = g.instantiate();
    exec.launch(stream);
    stream.synchronize();
  }
  assert.deepEqual(Array.from(other.toHost()), Array.from(new Float32Array(64).fill(2)), 'the capture stayed valid');
  assert.equal(mirror.current, 'both');
  mirror.destroy();
  assert.equal(sum(x), 0, 'untied, the buffer is plain foreign memory, its data as it was');
  buffer.free();
  backend.memFree(ptr);
});

test('memoryStats().foreign stops counting a mirror once its buffer is freed or it is collected without destroy()', async () => {
  const before = memoryStats(device).foreign;
  const { ptr, buffer } = foreign(16);
  const mirror = ForeignMirror.tie(buffer, new Float32Array(16));
  assert.equal(memoryStats(device).foreign.mirrors, before.mirrors + 1);
  buffer.free();
  assert.equal(memoryStats(device).foreign.mirrors, before.mirrors, 'the buffer freed: the mirror is over');
  assert.equal(memoryStats(device).foreign.bytes, before.bytes);
  assert.throws(() => mirror.host(), UseAfterFreeError);
  backend.memFree(ptr);
  if (forceGc === undefined) return;
  // Dropped with its buffer (a mirror whose buffer lives is still tied: the buffer's uses reach it).
  const other = ((): { ptr: number; released: () => boolean } => {
    const { ptr: p, buffer: b, released } = foreign(16);
    ForeignMirror.tie(b, new Float32Array(16));
    return { ptr: p, released };
  })();
  assert.equal(memoryStats(device).foreign.mirrors, before.mirrors + 1);
  for (let i = 0; i < 10 && memoryStats(device).foreign.mirrors > before.mirrors; i++) {
    await new Promise((resolve) => setTimeout(resolve, 5));
    forceGc();
  }
  assert.equal(memoryStats(device).foreign.mirrors, before.mirrors, 'a mirror dropped without destroy() is collected and no longer counted');
  backend.memFree(other.ptr);
});
