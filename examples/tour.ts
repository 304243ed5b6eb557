/**
 * The README's tour of the API, as one program that runs on either backend:
 * `node dist/examples/tour.js` (test/package/examples.test.ts runs it in `npm test`).
 */
import assert from 'node:assert/strict';
import { Device, DeviceArray, DeviceBuffer, HostArray, HostBuffer, Stream, getBackend, setCurrentResource, sum, tidy } from '../src/index.js';
import { ArenaResource, PoolResource, StatisticsAdaptor, TrackingAdaptor } from '../src/public/resources.js';
import { transferStatistics } from '../src/public/buffers.js';
import { Module, elementwise, map, threadCount } from '../src/public/kernels.js';
import { parseAllocationLog, replay } from '../src/public/replay.js';

// 1. Devices: name, memory and the attributes a memory library needs.
const device = Device.get(0);
console.log(`${getBackend().name}: ${device.info.name}, ${device.memInfo().free} bytes free`);

// 2. Rebinding a variable frees nothing (JavaScript counts no references, and its collector sees a few bytes
//    of heap per array, not the device memory): a loop's step frees what it made with `tidy`, which frees
//    every buffer and array its function allocated and did not return (async functions too). Or `free()`.
{
  let x = DeviceArray.zeros(1024);
  for (let i = 0; i < 10; i++) {
    const next = tidy(() => map(map(x, 'x * 2'), 'x + 1')); // the array between the two maps is freed here
    x.free();                                                // the old x was made outside this step
    x = next;
  }
  assert.equal(sum(x), 1023 * 1024);
  x.free();
}

// 3. Device memory: allocate, copy in and out, free (or `using`, which frees at scope end).
{
  using buf = DeviceBuffer.allocate(1024);
  buf.copyFromHost(new Float32Array(256).fill(1.5));
  const back = buf.copyToHost(new Float32Array(256));
  assert.equal(back[255], 1.5);
}

// 4. Pinned host memory and stream-ordered async copies; await without blocking the event loop.
{
  using stream = Stream.create({ nonBlocking: true });
  using pinned = HostBuffer.allocate(1 << 20);
  using dev = DeviceBuffer.allocate(1 << 20, { stream });
  pinned.view(Uint32Array).fill(7);
  dev.copyFromHost(pinned, { stream });
  dev.copyToHost(pinned, { stream, offset: 0, bytes: 4 });
  await stream.synchronized();
  assert.equal(pinned.view(Uint32Array)[0], 7);
}

// 3b. Typed arrays: dtypes with CUDA's sizes (float3 is 12 bytes), views without copies, and
// ordinary JavaScript memory moved through pinned staging by the copy threads.
{
  const vertices = new Float32Array(3 * 1000).map((_, i) => i);   // 1000 float3, PyCUDA's to_float3
  using mesh = DeviceArray.from(vertices, { dtype: 'float3' });   // DeviceArray<'float3'>, shape (1000)
  const everyOther = mesh.slice([0, null, 2]);                    // a view: strides change, no copy
  assert.deepEqual(everyOther.toHost().subarray(0, 6), new Float32Array([0, 1, 2, 6, 7, 8]));
  using image = DeviceArray.zeros([480, 640], 'uint8');           // row-major; image.T is a transpose
  using pinned = HostArray.empty([480, 640], 'uint8', { mapped: true });
  pinned.data.fill(9);
  image.copyFrom(pinned);                                         // pinned: DMA speed
  const big = new Float32Array(4 << 20);                          // 16 MiB of ordinary JavaScript memory
  using dev = DeviceArray.from(big);                              // staged, at the host's memory bandwidth
  await dev.copyFromAsync(big);                                   // async; pinned in place on this second copy
  const { staged, registered } = transferStatistics();
  console.log(`transfers: ${staged.copies} staged, ${registered.copies} from registered memory`);
}

// 5. A pool as the current resource: allocation on a hit costs no driver call.
{
  const pool = new StatisticsAdaptor(new PoolResource());
  const previous = setCurrentResource(device, pool);
  for (let i = 0; i < 100; i++) DeviceBuffer.allocate(4096).free();
  console.log('pool statistics:', pool.memoryFigures());
  setCurrentResource(device, previous);
  pool.releaseCached();
}

// 6. An arena with 2D pitched blocks, sized with its helper.
{
  const arena = new ArenaResource({ size: ArenaResource.ceil2DVolume(1000, 100) });
  const { ptr, pitch } = arena.allocatePitched(1000, 100);
  console.log(`pitched block at 0x${ptr.toString(16)}, pitch ${pitch}`);
  arena.deallocatePitched(ptr);
  arena.destroy();
}

// 7. Where did my memory go? Outstanding allocations with their stacks.
{
  const tracker = new TrackingAdaptor(new PoolResource(), { captureStacks: true });
  const leaked = tracker.allocate(1 << 16);
  console.log(tracker.leakReport().split('\n')[0]);
  tracker.deallocate(leaked, 1 << 16);
}

// 8. Replay an RMM allocation log through a resource and read its fragmentation overhead.
{
  const log = parseAllocationLog([
    'Thread,Time,Action,Pointer,Size,Stream',
    '0,0,allocate,0x1000,3000000,0',
    '0,1,allocate,0x2000,1000,0',
    '0,2,free,0x1000,3000000,0',
    '0,3,free,0x2000,1000,0',
  ].join('\n'));
  const pool = new PoolResource();
  const result = replay(log, pool);
  console.log(`peak live ${result.peakLiveBytes} B, peak reserved ${result.peakReservedBytes} B`);
  pool.releaseCached();
}

// 9. Compute: built-in operations, and CUDA C of your own (the emulated backend runs the JavaScript beside it).
{
  using x = DeviceArray.from(new Float32Array([1, 2, 3, 4]));
  using y = DeviceArray.from(new Float32Array([10, 20, 30, 40]));
  elementwise('y = a * x + y', { x, y, a: 2 });
  assert.equal(sum(y), 120);

  using module = Module.compile(`
    extern "C" __global__ void scale(float *v, float s, unsigned n) {
      unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
      if (i < n) v[i] *= s;
    }`, {
    emulated: {
      scale: (launch) => {
        const [ptr, s, n] = launch.args as [number, number, number];
        const bytes = launch.memory.bytes(ptr, 4 * n);
        const v = new Float32Array(bytes.buffer, bytes.byteOffset, n);
        for (let i = 0; i < Math.min(n, threadCount(launch)); i++) v[i] = Math.fround(v[i]! * s);
      },
    },
  });
  module.kernel('scale', ['ptr', 'f32', 'u32']).launch({ grid: 1, block: 32 }, y, 0.5, 4);
  console.log(`scaled: ${Array.from(y.toHost()).join(', ')}`);
}
