/**
 * Issue 33, item 11: every call a capture cannot hold is refused with StreamCaptureError before
 * the driver, wherever in vram it is made (a resource's own driver call, a factory that fills or
 * copies synchronously), the capture stays valid, nothing is leaked, and no capture outlives its
 * stream. The rule is Note [What a capture refuses] (docs/design/stream-capture.md).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DeviceArray } from '../../src/array/device-array.js';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { HostBuffer } from '../../src/buffer/host-buffer.js';
import { map } from '../../src/kernels/ops/elementwise.js';
import { Device } from '../../src/device.js';
import { StreamCaptureError } from '../../src/errors.js';
import { captureGraph } from '../../src/graphs/capture.js';
import { AsyncResource } from '../../src/resource/upstream/async-resource.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import { Stream } from '../../src/stream.js';

test('calls that reach the driver from inside vram during a capture are refused before it, and the capture stays valid', async () => {
  using stream = Stream.create();
  using cuda = new CudaResource();
  using async = new AsyncResource();
  using growing = new PoolResource({ upstream: new CudaResource() });
  // A pool with a cached block: an allocation from it reaches no driver call, so a leak would show.
  using warm = new PoolResource();
  warm.deallocate(warm.allocate(4096), 4096);
  const eager = cuda.allocate(256);
  using onLegacy = DeviceArray.zeros([4], 'float32');
  map(onLegacy, 'x + 1', { out: onLegacy }); // its module loaded before the capture
  const forbidden: [string, () => unknown][] = [
    ['CudaResource.allocate on the legacy stream', () => cuda.allocate(256)],
    ['CudaResource.deallocate of an eager block', () => cuda.deallocate(eager, 256)],
    ['AsyncResource.allocate on the legacy stream (it would wait for the capturing stream)', () => async.allocate(256)],
    ['a pool growing from a CudaResource on the legacy stream', () => growing.allocate(1 << 20)],
    ['HostBuffer.allocate', () => HostBuffer.allocate(4096)],
    ['DeviceArray.from of JavaScript data with no stream', () => DeviceArray.from([1, 2, 3])],
    ['DeviceArray.from of JavaScript data on the capturing stream', () => DeviceArray.from([1, 2, 3], { stream })],
    ['DeviceArray.zeros with no stream', () => DeviceArray.zeros([4], 'float32', { resource: warm })],
    ['DeviceArray.full with no stream', () => DeviceArray.full([4], 2, 'float32', { resource: warm })],
    ['a kernel launch on the legacy stream (it would wait for the capturing stream)', () => map(onLegacy, 'x + 1', { out: onLegacy })],
  ];
  for (const [what, call] of forbidden) {
    stream.beginCapture();
    assert.throws(call, StreamCaptureError, what);
    assert.equal(stream.captureStatus, 'active', `${what}: refused before the driver, the capture is still valid`);
    stream.endCapture().destroy();
    assert.equal(warm.memoryFigures().allocatedBytes.value, 0, `${what}: nothing left allocated`);
  }
  // Outside the capture every one of them works again.
  cuda.deallocate(eager, 256);
  growing.deallocate(growing.allocate(1 << 20), 1 << 20);
  HostBuffer.allocate(4096).free();
  DeviceArray.zeros([4], 'float32', { resource: warm }).free();
});

test('a capture in relaxed mode, or of a non-blocking stream, refuses only what conflicts with it', () => {
  using cuda = new CudaResource();
  using async = new AsyncResource();
  using relaxed = Stream.create();
  relaxed.beginCapture({ mode: 'relaxed' });
  const ptr = cuda.allocate(256); // the synchronous allocator is allowed in relaxed mode
  cuda.deallocate(ptr, 256);
  assert.throws(() => async.allocate(256), StreamCaptureError, 'the legacy stream still may not wait for a blocking capturing stream');
  assert.equal(relaxed.captureStatus, 'active');
  relaxed.endCapture().destroy();
  using free = Stream.create({ nonBlocking: true });
  free.beginCapture({ mode: 'relaxed' });
  async.deallocate(async.allocate(256), 256); // the legacy stream does not wait for a non-blocking stream
  assert.equal(free.captureStatus, 'active');
  free.endCapture().destroy();
});

test('DeviceArray.zeros and full on the capturing stream are captured, from the capture-private pool', async () => {
  using stream = Stream.create();
  const n = 1000;
  using y = DeviceArray.full([n], 7, 'float32', { stream });
  using z = DeviceArray.full([n], 7, 'float32', { stream });
  using graph = captureGraph(stream, () => {
    using zeros = DeviceArray.zeros([n], 'float32', { stream });
    using twos = DeviceArray.full([n], 2, 'float32', { stream });
    (y.buffer as DeviceBuffer).copyFrom(zeros.buffer as DeviceBuffer, { stream, bytes: 4 * n });
    (z.buffer as DeviceBuffer).copyFrom(twos.buffer as DeviceBuffer, { stream, bytes: 4 * n });
  });
  assert.equal(graph.nodeCount >= 4, true, 'two fills and two copies recorded');
  assert.deepEqual(Array.from(await y.toHostAsync({ stream })).slice(0, 2), [7, 7], 'recorded, not run');
  using exec = graph.instantiate();
  exec.launch(stream);
  assert.ok((await y.toHostAsync({ stream })).every((v) => v === 0));
  assert.ok((await z.toHostAsync({ stream })).every((v) => v === 2));
});

test('a stream destroyed while capturing ends its capture: later synchronous calls work', async () => {
  const device = Device.get(0);
  const plain = Stream.create();
  plain.beginCapture();
  plain.destroy();
  device.synchronize();
  // `using` over a capture whose work threw, without captureGraph.
  assert.throws(() => {
    using s = Stream.create();
    s.beginCapture();
    throw new Error('work failed');
  }, /work failed/);
  device.synchronize();
  // captureGraph whose work destroyed the stream it captures.
  const doomed = Stream.create();
  assert.throws(
    () =>
      captureGraph(doomed, () => {
        doomed.destroy();
        throw new Error('boom');
      }),
    /boom/,
  );
  device.synchronize();
  // A joined stream destroyed mid-capture leaves it; the capture still ends at its origin, and nothing lingers.
  using origin = Stream.create();
  const side = Stream.create();
  origin.beginCapture();
  side.waitEvent(origin.record());
  side.destroy();
  assert.equal(origin.captureStatus, 'active');
  origin.endCapture().destroy();
  device.synchronize();
  using buf = DeviceBuffer.allocate(64);
  buf.memset(3);
  const host = new Uint8Array(64);
  buf.copyToHost(host);
  assert.equal(host[0], 3);
});
