/**
 * The Backend's capture and graph primitives, as the driver answers them (the emulated backend
 * gives the same codes): capture modes and the calls a global capture forbids, invalidation,
 * joins, graph memory's relaunch rule, updates.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { CaptureMode, CaptureStatus, GraphUpdateResult, MemHandleType, type Backend } from '../../src/backend/backend.js';
import { Device } from '../../src/device.js';
import { CudaError, CUresult } from '../../src/errors.js';
import { onGpu } from '../helpers.js';

const device = Device.get(0);

/** The backend, with the device's context current, and a fresh non-blocking stream destroyed after `body`. */
function withStream(body: (b: Backend, stream: number) => void): void {
  device.makeCurrent();
  const b = device.backend;
  const stream = b.streamCreate(1, 0);
  try {
    body(b, stream);
  } finally {
    if (b.streamCaptureStatus(stream) !== CaptureStatus.NONE) {
      try {
        b.graphDestroy(b.streamEndCapture(stream));
      } catch {
        /* an invalidated capture ends all the same */
      }
    }
    b.streamDestroy(stream);
  }
}

/** Launches `exec` on `stream`, waits for it, and reads `bytes` at `p` back. */
function launchAndRead(b: Backend, exec: number, stream: number, p: number, bytes: number): Uint8Array {
  b.graphLaunch(exec, stream);
  b.streamSynchronize(stream);
  const host = new Uint8Array(bytes);
  b.memcpyToHost(host, p, bytes);
  return host;
}

function code(expected: number): (e: unknown) => boolean {
  return (e) => e instanceof CudaError && e.code === expected;
}

test('the legacy stream cannot be captured; a stream already capturing cannot begin again', () => {
  withStream((b, stream) => {
    assert.throws(() => b.streamBeginCapture(0, CaptureMode.GLOBAL), code(CUresult.STREAM_CAPTURE_UNSUPPORTED));
    b.streamBeginCapture(stream, CaptureMode.GLOBAL);
    assert.equal(b.streamCaptureStatus(stream), CaptureStatus.ACTIVE);
    assert.throws(() => b.streamBeginCapture(stream, CaptureMode.GLOBAL), code(CUresult.ILLEGAL_STATE));
    b.graphDestroy(b.streamEndCapture(stream));
    assert.equal(b.streamCaptureStatus(stream), CaptureStatus.NONE);
    assert.throws(() => b.streamEndCapture(stream), code(CUresult.ILLEGAL_STATE));
  });
});

test('cuMemAlloc during a global capture is refused and invalidates it; the stream captures again afterwards', () => {
  withStream((b, stream) => {
    b.streamBeginCapture(stream, CaptureMode.GLOBAL);
    assert.throws(() => b.memAlloc(4096), code(CUresult.STREAM_CAPTURE_UNSUPPORTED));
    assert.equal(b.streamCaptureStatus(stream), CaptureStatus.INVALIDATED);
    assert.throws(() => b.streamEndCapture(stream), code(CUresult.STREAM_CAPTURE_INVALIDATED));
    assert.equal(b.streamCaptureStatus(stream), CaptureStatus.NONE);
    b.streamBeginCapture(stream, CaptureMode.GLOBAL);
    const graph = b.streamEndCapture(stream);
    assert.equal(b.graphNodeCount(graph), 0);
    b.graphDestroy(graph);
  });
});

test('a relaxed capture, or the relaxed thread mode, lets cuMemAlloc through', () => {
  withStream((b, stream) => {
    b.streamBeginCapture(stream, CaptureMode.RELAXED);
    const p = b.memAlloc(4096);
    b.graphDestroy(b.streamEndCapture(stream));
    b.memFree(p);
    b.streamBeginCapture(stream, CaptureMode.GLOBAL);
    const previous = b.threadExchangeCaptureMode(CaptureMode.RELAXED);
    let q: number;
    try {
      q = b.memAlloc(4096);
    } finally {
      b.threadExchangeCaptureMode(previous);
    }
    assert.equal(previous, CaptureMode.GLOBAL);
    assert.equal(b.streamCaptureStatus(stream), CaptureStatus.ACTIVE);
    b.graphDestroy(b.streamEndCapture(stream));
    b.memFree(q);
  });
});

test('synchronising the capturing stream is refused in any mode', () => {
  withStream((b, stream) => {
    b.streamBeginCapture(stream, CaptureMode.RELAXED);
    assert.throws(() => b.streamSynchronize(stream), code(CUresult.STREAM_CAPTURE_UNSUPPORTED));
    assert.throws(() => b.streamEndCapture(stream), code(CUresult.STREAM_CAPTURE_INVALIDATED));
  });
});

test('a stream forked into a capture and not joined back fails the end (unjoined); joined, it ends', () => {
  withStream((b, stream) => {
    const side = b.streamCreate(1, 0);
    const fork = b.eventCreate(2);
    const join = b.eventCreate(2);
    const p = b.memAlloc(1024);
    try {
      b.streamBeginCapture(stream, CaptureMode.GLOBAL);
      b.eventRecord(fork, stream);
      b.streamWaitEvent(side, fork);
      assert.equal(b.streamCaptureStatus(side), CaptureStatus.ACTIVE, 'the side stream joined the capture');
      b.memsetAsync(p, 1, 1, 1024, side);
      assert.throws(() => b.streamEndCapture(stream), code(CUresult.STREAM_CAPTURE_UNJOINED));
      if (!onGpu) assert.equal(b.streamCaptureStatus(side), CaptureStatus.NONE);

      b.streamBeginCapture(stream, CaptureMode.GLOBAL);
      b.eventRecord(fork, stream);
      b.streamWaitEvent(side, fork);
      b.memsetAsync(p, 2, 1, 1024, side);
      b.eventRecord(join, side);
      b.streamWaitEvent(stream, join);
      const graph = b.streamEndCapture(stream);
      assert.equal(b.graphNodeCount(graph), 1);
      const exec = b.graphInstantiate(graph);
      assert.ok(launchAndRead(b, exec, stream, p, 1024).every((v) => v === 2));
      b.graphExecDestroy(exec);
      b.graphDestroy(graph);
    } finally {
      b.memFree(p);
      b.eventDestroy(fork);
      b.eventDestroy(join);
      b.streamDestroy(side);
    }
  });
});

test('an allocation a graph makes and does not free must be freed before the next launch', () => {
  withStream((b, stream) => {
    b.streamBeginCapture(stream, CaptureMode.GLOBAL);
    const p = b.memAllocAsync(4096, stream);
    b.memsetAsync(p, 7, 1, 4096, stream);
    const graph = b.streamEndCapture(stream);
    assert.equal(b.graphNodeCount(graph), 2);
    const exec = b.graphInstantiate(graph);
    assert.equal(launchAndRead(b, exec, stream, p, 4096)[4095], 7, 'the graph memory is at the address the capture gave');
    assert.throws(() => b.graphLaunch(exec, stream), code(CUresult.INVALID_VALUE));
    b.memFreeAsync(p, stream);
    b.graphLaunch(exec, stream);
    b.memFreeAsync(p, stream);
    b.streamSynchronize(stream);
    b.graphExecDestroy(exec);
    b.graphDestroy(graph);
  });
});

test('an update to a graph of another topology is refused with the reason, leaving the executable graph as it was', () => {
  withStream((b, stream) => {
    const p = b.memAlloc(256);
    try {
      b.streamBeginCapture(stream, CaptureMode.GLOBAL);
      b.memsetAsync(p, 1, 1, 256, stream);
      const one = b.streamEndCapture(stream);
      b.streamBeginCapture(stream, CaptureMode.GLOBAL);
      b.memsetAsync(p, 2, 1, 256, stream);
      b.memsetAsync(p, 3, 1, 128, stream);
      const two = b.streamEndCapture(stream);
      b.streamBeginCapture(stream, CaptureMode.GLOBAL);
      b.memsetAsync(p, 4, 1, 256, stream);
      const same = b.streamEndCapture(stream);
      const exec = b.graphInstantiate(one);
      assert.equal(b.graphExecUpdate(exec, two), GraphUpdateResult.TOPOLOGY_CHANGED);
      assert.equal(b.graphExecUpdate(exec, same), GraphUpdateResult.SUCCESS);
      assert.equal(launchAndRead(b, exec, stream, p, 256)[0], 4);
      b.graphExecDestroy(exec);
      for (const g of [one, two, same]) b.graphDestroy(g);
    } finally {
      b.memFree(p);
    }
  });
});

test(
  'a host function waits for the event loop; a synchronous wait before it would never return on a GPU',
  { skip: onGpu ? 'emulation only: on a GPU the wait would hang' : false },
  async () => {
    device.makeCurrent();
    const b = device.backend;
    const stream = b.streamCreate(1, 0);
    let ran = 0;
    b.launchHostFunc(stream, () => {
      ran++;
    });
    assert.throws(() => b.streamSynchronize(stream), code(CUresult.NOT_READY));
    await new Promise((r) => setImmediate(r));
    b.streamSynchronize(stream);
    assert.equal(ran, 1);
    b.streamDestroy(stream);
  },
);

test('a pool made for sharing cannot allocate on a capturing stream (NOT_SUPPORTED); a plain pool makes a graph memory node', () => {
  withStream((b, stream) => {
    const shared = b.memPoolCreate({ device: device.ordinal, handleTypes: MemHandleType.POSIX_FILE_DESCRIPTOR, maxSize: 0 });
    const plain = b.memPoolCreate({ device: device.ordinal, handleTypes: MemHandleType.NONE, maxSize: 0 });
    try {
      b.streamBeginCapture(stream, CaptureMode.GLOBAL);
      assert.throws(() => b.memAllocFromPoolAsync(1 << 20, shared, stream), code(CUresult.NOT_SUPPORTED));
      if (b.streamCaptureStatus(stream) === CaptureStatus.ACTIVE) {
        const p = b.memAllocFromPoolAsync(1 << 20, plain, stream);
        b.memFreeAsync(p, stream);
      }
      try {
        b.graphDestroy(b.streamEndCapture(stream));
      } catch {
        /* ended all the same */
      }
    } finally {
      b.memPoolDestroy(shared);
      b.memPoolDestroy(plain);
    }
  });
});
