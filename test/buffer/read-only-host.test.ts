/**
 * JavaScript memory registered read-only (`HostBuffer.register(data, { readOnly: true })`,
 * CU_MEMHOSTREGISTER_READ_ONLY) is lent to vram for reading: every path that would write into it
 * (copies from the device, 2D copies, copies into a HostArray over it, built-in operations on a
 * DeviceArray over its mapped address) is refused before anything is written, as for device
 * memory lent read-only, and the memory is unchanged.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { HostBuffer } from '../../src/buffer/host-buffer.js';
import { DeviceBuffer, PitchedDeviceBuffer } from '../../src/buffer/device-buffer.js';
import { HostArray } from '../../src/array/host-array.js';
import { DeviceArray } from '../../src/array/device-array.js';
import { Stream } from '../../src/stream.js';
import { VramStateError } from '../../src/errors.js';

const n = 64;
const refused = (e: unknown): boolean => e instanceof VramStateError && /read-only/.test(e.message);

/** 64 bytes 0..63 registered read-only (mapped, so the device can address them), and the JavaScript memory. */
function lent(): { js: Uint8Array; host: HostBuffer } {
  const js = Uint8Array.from({ length: n }, (_, i) => i);
  return { js, host: HostBuffer.register(js, { readOnly: true, mapped: true }) };
}

const unchanged = (js: Uint8Array): void =>
  assert.deepEqual(
    js,
    Uint8Array.from({ length: n }, (_, i) => i),
    'nothing was written',
  );

test('a HostBuffer registered read-only says so; one registered without it does not', () => {
  const { host } = lent();
  using plain = HostBuffer.register(new Uint8Array(n));
  try {
    assert.equal(host.readOnly, true);
    assert.equal(plain.readOnly, false);
    assert.match(String(host), /read-only/);
    using pinned = HostBuffer.allocate(n);
    assert.equal(pinned.readOnly, false);
  } finally {
    host.free();
  }
});

test('copies from the device into read-only host memory are refused, synchronous, on a stream, async and 2D', async () => {
  const { js, host } = lent();
  using dev = DeviceBuffer.allocate(n);
  using s = Stream.create({ nonBlocking: true });
  using pitched = PitchedDeviceBuffer.allocate2D(16, 4);
  try {
    dev.memset(0xee);
    assert.throws(() => dev.copyToHost(host), refused);
    assert.throws(() => dev.copyToHost(host, { stream: s }), refused);
    await assert.rejects(dev.copyToHostAsync(host, { stream: s }), refused);
    assert.throws(() => pitched.copy2DToHost(host), refused);
    dev.copyFromHost(host); // reading it is what it was lent for
    assert.deepEqual(dev.copyToHost(new Uint8Array(n)), js);
    await s.synchronized();
    unchanged(js);
  } finally {
    host.free();
  }
});

test('a HostArray over read-only host memory refuses to be written: from the device (contiguous or strided) and from the host', () => {
  const { js, host } = lent();
  try {
    using source = DeviceArray.from(new Float32Array(16).fill(7));
    const whole = HostArray.fromBuffer(host, { dtype: 'float32', shape: [16] });
    const every2nd = HostArray.fromBuffer(host, { dtype: 'float32', shape: [8], strides: [2] });
    assert.throws(() => whole.copyFrom(source), refused);
    assert.throws(() => source.copyTo(whole), refused);
    using half = DeviceArray.from(new Float32Array(8).fill(7));
    assert.throws(() => every2nd.copyFrom(half), refused);
    assert.throws(() => whole.copyFrom(new Float32Array(16)), refused);
    unchanged(js);
  } finally {
    host.free();
  }
});

test('a DeviceArray over the mapped address of read-only host memory is read-only: fills and copies into it are refused', () => {
  const { js, host } = lent();
  try {
    const a = DeviceArray.fromBuffer(host, { dtype: 'uint8', shape: [n] });
    assert.equal(a.readOnly, true);
    assert.throws(() => a.fill(1), refused);
    using src = DeviceArray.from(new Uint8Array(n));
    assert.throws(() => a.copyFrom(src), refused);
    unchanged(js);
  } finally {
    host.free();
  }
});
