/**
 * Stream handles given to resources: a raw handle (`{ handle }`) that no live stream has is
 * refused before anything changes (a pool would keep it and pass it to the driver later, where it
 * failed from then on, or crashed); and a buffer whose free throws because its stream was
 * destroyed stays as it was (not marked freed while its pool still counts it live), so it can be
 * freed on a live stream afterwards. Runs on both backends: nothing bad reaches the driver.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { getBackend } from '../../src/backend/select.js';
import { Device } from '../../src/device.js';
import { UseAfterFreeError } from '../../src/errors.js';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import { defaultStream } from '../../src/stream.js';
import { Stream } from '../../src/stream.js';

const device = Device.get(0);

describe('stream handles given to resources', () => {
  it('a raw handle that no live stream has is refused before anything changes', () => {
    using pool = new PoolResource({ device });
    assert.throws(() => pool.allocate(4096, { handle: 424242 }), /stream.handle 424242 is not a live stream/);
    const ptr = pool.allocate(4096);
    assert.throws(() => pool.deallocate(ptr, 4096, { handle: 424242 }), RangeError);
    assert.equal(pool.memoryFigures()!.allocations.value, 1, 'the refused free changed nothing');
    pool.deallocate(ptr, 4096);
    assert.equal(pool.releaseCached() >= 0, true);
  });

  it('a raw handle of a live stream is accepted, and refused once the stream is destroyed', () => {
    const backend = getBackend();
    device.makeCurrent();
    const raw = backend.streamCreate(0, 0);
    using pool = new PoolResource({ device });
    try {
      pool.deallocate(pool.allocate(4096, { handle: raw }), 4096, { handle: raw });
      pool.releaseCached();
    } finally {
      backend.streamDestroy(raw);
    }
    assert.throws(() => pool.allocate(4096, { handle: raw }), RangeError);
    pool.releaseCached(); // no destroyed handle kept that the driver would be given
  });

  it('a pool buffer freed after its stream was destroyed: the free throws and changes nothing, a free on a live stream works', () => {
    using pool = new PoolResource({ device });
    const stream = Stream.create({ device });
    const buffer = DeviceBuffer.allocate(4096, { resource: pool, stream });
    stream.destroy();
    assert.throws(() => buffer.free(), UseAfterFreeError);
    assert.equal(buffer.freed, false);
    assert.equal(pool.memoryFigures()!.allocations.value, 1);
    buffer.free({ stream: defaultStream });
    assert.equal(buffer.freed, true);
    assert.equal(pool.memoryFigures()!.allocations.value, 0, 'not leaked');
  });
});

describe('the live-stream check of every entry point that takes a stream', () => {
  const dead = { handle: 424242 };
  const refused = (e: unknown): boolean => e instanceof RangeError && /stream.handle 424242 is not a live stream/.test(e.message);

  it('copies, fills, recordStream and lease refuse a raw handle no stream has, and the buffer still frees', () => {
    const buffer = DeviceBuffer.allocate(4096);
    const host = new Uint8Array(4096);
    using other = DeviceBuffer.allocate(4096);
    assert.throws(() => buffer.copyFromHost(host, { stream: dead }), refused);
    assert.throws(() => buffer.copyToHost(host, { stream: dead }), refused);
    assert.throws(() => buffer.copyFrom(other, { stream: dead }), refused);
    assert.throws(() => buffer.memset(0, { stream: dead }), refused);
    assert.throws(() => buffer.recordStream(dead), refused);
    assert.throws(() => buffer.lease({ stream: dead }), refused);
    buffer.free(); // nothing recorded the dead handle: the free goes through
    assert.equal(buffer.freed, true);
  });

  it('GraphExec.launch refuses it before the driver', () => {
    using stream = Stream.create({ device });
    using buffer = DeviceBuffer.allocate(4096, { stream });
    stream.beginCapture();
    buffer.memset(1, { stream });
    using graph = stream.endCapture();
    using exec = graph.instantiate();
    assert.throws(() => exec.launch(dead), refused);
    assert.throws(() => exec.launch({ handle: -1 }), RangeError);
    exec.launch(stream);
    stream.synchronize();
  });

  it('a raw handle of a live stream is accepted by each, and refused once destroyed', () => {
    const backend = getBackend();
    device.makeCurrent();
    const raw = backend.streamCreate(0, 0);
    using buffer = DeviceBuffer.allocate(4096);
    try {
      buffer.memset(0, { stream: { handle: raw } });
      buffer.recordStream({ handle: raw });
      backend.streamSynchronize(raw);
    } finally {
      backend.streamDestroy(raw);
    }
    assert.throws(() => buffer.memset(0, { stream: { handle: raw } }), RangeError);
  });
});
