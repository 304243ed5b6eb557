/**
 * Stream memory operations (cuStreamWaitValue32 / cuStreamWriteValue32) and holding a stream back
 * with them. Written against the Backend interface only, so the same file runs on the emulated
 * backend (npm test) and on a GPU (npm run test:gpu).
 *
 * The rule that keeps these tests safe on a GPU: held work is never synchronised on. A test holds
 * a stream on a word of mapped pinned memory, checks what it can without waiting (queries, reads
 * through streams that do not depend on the held one, non-blocking streams only), then releases
 * the stream by writing the word from the host, and only then synchronises. Every test releases
 * in `finally`, so a failed assertion cannot leave a stream held. What a synchronisation does on
 * held work (a GPU never returns) is checked on the emulated backend alone, where it fails.
 */
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import {
  type Backend,
  type Handle,
  type Ptr,
  EventFlags,
  HostAllocFlags,
  MemAttach,
  StreamFlags,
  StreamWaitValueFlags,
  StreamWriteValueFlags,
} from '../../src/backend/backend.js';
import { getBackend } from '../../src/backend/select.js';
import { CudaError } from '../../src/errors.js';
import { onGpu } from '../helpers.js';

const backend: Backend = getBackend();
const emulatedOnly = { skip: onGpu ? 'a GPU would wait forever: checked on the emulation only' : false } as const;
const { GEQ, EQ, AND, NOR } = StreamWaitValueFlags;
const KiB = 1024;

/** A word of mapped pinned memory: the device address streams wait on, the host's view of it. */
interface Flag {
  readonly host: Ptr;
  readonly device: Ptr;
  readonly word: Uint32Array;
}

let flag: Flag;

before(() => {
  backend.contextSetCurrent(backend.primaryContextRetain(0));
  const host = backend.memHostAlloc(4 * KiB, HostAllocFlags.DEVICEMAP | HostAllocFlags.PORTABLE);
  flag = { host, device: backend.memHostGetDevicePointer(host), word: new Uint32Array(backend.hostView(host, 4 * KiB), 0, 4) };
});

after(() => {
  flag.word.fill(0xffffffff);
  backend.contextSynchronize();
  backend.memFreeHost(flag.host);
});

/** Asserts that `fn` throws the driver error `errorName` (and returns it). */
function throwsCuda(fn: () => unknown, errorName: string): CudaError {
  let caught: CudaError | undefined;
  assert.throws(fn, (error: unknown) => {
    assert.ok(error instanceof CudaError, `expected a CudaError, got ${String(error)}`);
    assert.equal(error.errorName, errorName);
    caught = error;
    return true;
  });
  return caught!;
}

function readBack(ptr: Ptr, bytes: number): Uint8Array {
  const out = new Uint8Array(bytes);
  backend.memcpyToHost(out, ptr, bytes);
  return out;
}

function filledWith(bytes: Uint8Array, value: number): boolean {
  return bytes.every((v) => v === value);
}

/**
 * Polls `query` until it is true or `ms` pass (a GPU sees a host write within microseconds; the
 * emulation answers at once): never blocks on held work, so a wrong expectation fails, not hangs.
 */
function settles(query: () => boolean, ms = 2000): boolean {
  const deadline = performance.now() + ms;
  const pause = new Int32Array(new SharedArrayBuffer(4));
  for (;;) {
    if (query()) return true;
    if (performance.now() > deadline) return false;
    Atomics.wait(pause, 0, 0, 1);
  }
}

/** Device memory of `bytes`, filled with `value` (a synchronous memset: call it before any hold). */
function deviceBytes(bytes: number, value: number): Ptr {
  const ptr = backend.memAlloc(bytes);
  backend.memset(ptr, value, 1, bytes);
  return ptr;
}

/**
 * Runs `body` with non-blocking streams and the flag's word at 0; afterwards (also when `body`
 * fails) releases every hold on the word (all ones satisfies GEQ 1, AND and EQ 0xffffffff), waits
 * for the context and destroys the streams, then frees `memory`.
 */
function withStreams(count: number, body: (streams: Handle[], memory: Ptr[]) => void): void {
  flag.word[0] = 0;
  const streams = Array.from({ length: count }, () => backend.streamCreate(StreamFlags.NON_BLOCKING, 0));
  const memory: Ptr[] = [];
  try {
    body(streams, memory);
  } finally {
    flag.word[0] = 0xffffffff;
    backend.contextSynchronize();
    for (const s of streams) backend.streamDestroy(s);
    for (const p of memory) backend.memFree(p);
  }
}

describe('streamWaitValue32 holds a stream back until the host writes the value', () => {
  test('work behind the wait stays pending; a host write releases it', () => {
    withStreams(1, ([s], memory) => {
      const bytes = 256 * KiB;
      const a = deviceBytes(bytes, 0);
      memory.push(a);
      const before = backend.eventCreate(EventFlags.DISABLE_TIMING);
      const behind = backend.eventCreate(EventFlags.DISABLE_TIMING);
      try {
        backend.eventRecord(before, s!);
        backend.streamWaitValue32(s!, flag.device, 1, GEQ);
        backend.memsetAsync(a, 0x5a, 1, bytes, s!);
        backend.eventRecord(behind, s!);

        assert.equal(backend.streamQuery(s!), false, 'the held stream is not done');
        assert.equal(backend.eventQuery(behind), false, 'an event recorded behind the wait is not reached');
        assert.ok(
          settles(() => backend.eventQuery(before)),
          'an event recorded before the wait completes',
        );
        // A synchronous copy to the host waits for the legacy stream and blocking streams only,
        // not for this non-blocking one: it reads the memory as it is while the stream is held.
        assert.ok(filledWith(readBack(a, bytes), 0), 'the memset has not run');
        assert.equal(backend.streamQuery(s!), false, 'still held');

        flag.word[0] = 1;
        backend.streamSynchronize(s!);
        assert.equal(backend.streamQuery(s!), true);
        assert.equal(backend.eventQuery(behind), true);
        assert.ok(filledWith(readBack(a, bytes), 0x5a), 'the memset ran once released');
      } finally {
        flag.word[0] = 0xffffffff;
        backend.streamSynchronize(s!);
        backend.eventDestroy(before);
        backend.eventDestroy(behind);
      }
    });
  });

  test('a stream waiting on an event recorded on the held stream is held too', () => {
    withStreams(3, ([held, waiting, free], memory) => {
      const bytes = 64 * KiB;
      const a = deviceBytes(bytes, 0);
      const b = deviceBytes(bytes, 0);
      memory.push(a, b);
      const e = backend.eventCreate(EventFlags.DISABLE_TIMING);
      const onWaiting = backend.eventCreate(EventFlags.DISABLE_TIMING);
      try {
        backend.streamWaitValue32(held!, flag.device, 1, GEQ);
        backend.memsetAsync(a, 1, 1, bytes, held!);
        backend.eventRecord(e, held!);
        backend.streamWaitEvent(waiting!, e);
        backend.memsetAsync(a, 2, 1, KiB, waiting!); // after the held memset: overwrites its first KiB
        backend.eventRecord(onWaiting, waiting!);
        backend.memsetAsync(b, 3, 1, bytes, free!); // a stream that depends on neither

        assert.ok(
          settles(() => backend.streamQuery(free!)),
          'an independent stream runs on',
        );
        assert.equal(backend.streamQuery(held!), false);
        assert.equal(backend.eventQuery(e), false);
        assert.equal(backend.streamQuery(waiting!), false, 'the waiting stream is held through the event');
        assert.equal(backend.eventQuery(onWaiting), false);
        assert.ok(filledWith(readBack(a, bytes), 0), 'neither memset on `a` has run');
        assert.ok(filledWith(readBack(b, bytes), 3));

        flag.word[0] = 1;
        backend.streamSynchronize(waiting!);
        assert.equal(backend.eventQuery(e), true);
        assert.equal(backend.streamQuery(held!), true);
        const data = readBack(a, bytes);
        assert.ok(filledWith(data.subarray(0, KiB), 2), 'the waiting stream ran after the held one');
        assert.ok(filledWith(data.subarray(KiB), 1));
      } finally {
        flag.word[0] = 0xffffffff;
        backend.streamSynchronize(waiting!);
        backend.eventDestroy(e);
        backend.eventDestroy(onWaiting);
      }
    });
  });

  test('conditions: GEQ is cyclic, EQ, AND and NOR', () => {
    withStreams(1, ([s]) => {
      const cases: [word: number, value: number, flags: number, passes: boolean][] = [
        [5, 3, GEQ, true],
        [3, 5, GEQ, false],
        [1, 0xffffffff, GEQ, true],
        [0x80000001, 1, GEQ, false],
        [4, 4, EQ, true],
        [4, 5, EQ, false],
        [6, 2, AND, true],
        [4, 2, AND, false],
        [0xfffffffe, 0, NOR, true],
        [0xffffffff, 1, NOR, false],
        [0xfffffffe, 1, NOR, false],
      ];
      for (const [word, value, flags, passes] of cases) {
        const label = `word ${word.toString(16)}, value ${value.toString(16)}, flags ${flags}`;
        flag.word[0] = word;
        backend.streamWaitValue32(s!, flag.device, value, flags);
        if (passes) {
          assert.ok(
            settles(() => backend.streamQuery(s!)),
            `${label}: the wait is satisfied`,
          );
        } else {
          assert.equal(
            settles(() => backend.streamQuery(s!), 20),
            false,
            `${label}: the wait holds`,
          );
          flag.word[0] = flags === AND ? 0xffffffff : flags === NOR ? 0 : value; // satisfies it
          assert.ok(
            settles(() => backend.streamQuery(s!)),
            `${label}: released`,
          );
        }
      }
    });
  });
});

describe('streamWriteValue32', () => {
  test('a write on one stream releases a wait on another, and orders the memory before it', () => {
    withStreams(2, ([writer, reader], memory) => {
      const bytes = 64 * KiB;
      const word = deviceBytes(4 * KiB, 0); // a word in device memory this time
      const src = deviceBytes(bytes, 0);
      const a = deviceBytes(bytes, 0);
      const copy = deviceBytes(bytes, 0);
      memory.push(word, src, a, copy);
      let released = false;
      try {
        backend.streamWaitValue32(reader!, word, 1, EQ);
        backend.memsetAsync(a, 7, 1, bytes, reader!);
        backend.memcpyAsync(copy, src, bytes, reader!);
        assert.equal(backend.streamQuery(reader!), false, 'held until the writer writes');
        assert.ok(filledWith(readBack(a, bytes), 0));

        backend.memsetAsync(src, 9, 1, bytes, writer!);
        backend.streamWriteValue32(writer!, word, 1, StreamWriteValueFlags.DEFAULT);
        released = true;
        backend.streamSynchronize(reader!);
        assert.ok(filledWith(readBack(a, bytes), 7), 'the reader ran once the word was written');
        assert.ok(filledWith(readBack(copy, bytes), 9), "the reader saw the writer's earlier memset (memory barrier)");
        assert.deepEqual([...new Uint32Array(readBack(word, 4).buffer)], [1]);
        assert.equal(backend.streamQuery(writer!), true);

        // A write to mapped pinned memory: the host sees it once the stream reaches it.
        backend.streamWriteValue32(writer!, flag.device, 0x1234abcd, StreamWriteValueFlags.DEFAULT);
        backend.streamSynchronize(writer!);
        assert.equal(flag.word[0], 0x1234abcd, 'the host sees the write to mapped pinned memory');
      } finally {
        if (!released) backend.memset(word, 1, 4, 1); // device memory: the host cannot write it directly
        backend.streamSynchronize(reader!);
      }
    });
  });
});

describe('synchronous calls and held streams', () => {
  // Checked on both backends: probed on an H100 (CUDA 13), a synchronous copy between device
  // addresses returns at once even behind held work; it is ordered on the legacy default stream,
  // so behind a held *blocking* stream it lands only once that stream is released.
  test('a device-to-device memcpy is ordered behind a held blocking stream, without blocking the host', () => {
    flag.word[0] = 0;
    const blocking = backend.streamCreate(StreamFlags.DEFAULT, 0);
    const bytes = 64 * KiB;
    const x = deviceBytes(bytes, 1);
    const y = deviceBytes(bytes, 2);
    try {
      backend.streamWaitValue32(blocking, flag.device, 1, GEQ);
      backend.memsetAsync(y, 3, 1, bytes, blocking);
      backend.memcpy(x, y, bytes);
      assert.equal(backend.streamQuery(0), false, 'the legacy stream waits for the held blocking stream');
      flag.word[0] = 1;
      backend.contextSynchronize();
      assert.ok(filledWith(readBack(x, bytes), 3), 'the copy ran after the held memset');
    } finally {
      flag.word[0] = 0xffffffff;
      backend.contextSynchronize();
      backend.streamDestroy(blocking);
      backend.memFree(x);
      backend.memFree(y);
    }
  });

  test('the emulation fails a synchronisation on held work instead of hanging', emulatedOnly, () => {
    withStreams(2, ([held, waiting], memory) => {
      const a = deviceBytes(4 * KiB, 0);
      memory.push(a);
      const e = backend.eventCreate(EventFlags.DISABLE_TIMING);
      try {
        backend.streamWaitValue32(held!, flag.device, 1, GEQ);
        backend.memsetAsync(a, 1, 1, 4 * KiB, held!);
        backend.eventRecord(e, held!);
        backend.streamWaitEvent(waiting!, e);
        const error = throwsCuda(() => backend.streamSynchronize(held!), 'CUDA_ERROR_NOT_READY');
        assert.equal(error.call, 'cuStreamSynchronize');
        assert.match(error.message, /cuStreamWaitValue32/);
        assert.match(error.message, /never released/);
        assert.match(error.message, new RegExp(`0x${flag.device.toString(16)}`));
        assert.match(
          throwsCuda(() => backend.streamSynchronize(waiting!), 'CUDA_ERROR_NOT_READY').message,
          new RegExp(`stream ${waiting!} is blocked.*cuStreamWaitValue32 on stream ${held!}`),
        );
        throwsCuda(() => backend.eventSynchronize(e), 'CUDA_ERROR_NOT_READY');
        throwsCuda(() => backend.contextSynchronize(), 'CUDA_ERROR_NOT_READY');
        // cuMemFree and cuMemFreeHost wait for every stream of the context (probed), non-blocking ones too.
        throwsCuda(() => backend.memFree(a), 'CUDA_ERROR_NOT_READY');
        const pinned = backend.memHostAlloc(4 * KiB, 0);
        throwsCuda(() => backend.memFreeHost(pinned), 'CUDA_ERROR_NOT_READY');
        // Nothing was lost: the queries still say held, and a host write releases everything.
        assert.equal(backend.streamQuery(held!), false);
        assert.equal(backend.eventQuery(e), false);
        flag.word[0] = 1;
        backend.streamSynchronize(waiting!);
        assert.ok(filledWith(readBack(a, 4 * KiB), 1));
        backend.memFreeHost(pinned);
      } finally {
        flag.word[0] = 0xffffffff;
        backend.eventDestroy(e);
      }
    });
  });

  test('the emulation: a held blocking stream fails copies the host waits for; destroying a held stream does not wait', emulatedOnly, () => {
    flag.word[0] = 0;
    const blocking = backend.streamCreate(StreamFlags.DEFAULT, 0);
    const a = deviceBytes(4 * KiB, 0);
    try {
      backend.streamWaitValue32(blocking, flag.device, 1, GEQ);
      backend.memsetAsync(a, 6, 1, 4 * KiB, blocking);
      throwsCuda(() => readBack(a, 4 * KiB), 'CUDA_ERROR_NOT_READY');
      throwsCuda(() => backend.memcpyFromHost(a, new Uint8Array(16), 16), 'CUDA_ERROR_NOT_READY');
      throwsCuda(() => backend.streamSynchronize(0), 'CUDA_ERROR_NOT_READY');
      // cuStreamDestroy returns at once; the held work still runs once released.
      backend.streamDestroy(blocking);
      flag.word[0] = 1;
      assert.ok(filledWith(readBack(a, 4 * KiB), 6));
    } finally {
      flag.word[0] = 0xffffffff;
      backend.contextSynchronize();
      backend.memFree(a);
    }
  });
});

describe('arguments', () => {
  test('bad arguments are TypeError or RangeError before any driver call', () => {
    withStreams(1, ([s]) => {
      const d = flag.device;
      for (const call of [backend.streamWaitValue32.bind(backend), backend.streamWriteValue32.bind(backend)]) {
        assert.throws(() => call(s!, d + 2, 0, 0), RangeError, 'misaligned');
        assert.throws(() => call(s!, 0, 0, 0), RangeError, 'null address');
        assert.throws(() => call(s!, d, -1, 0), RangeError, 'negative value');
        assert.throws(() => call(s!, d, 2 ** 32, 0), RangeError, 'value beyond 32 bits');
        assert.throws(() => call(s!, d, 0.5, 0), RangeError);
        assert.throws(() => call(s!, d, '1' as unknown as number, 0), TypeError);
        assert.throws(() => call(s!, String(d) as unknown as number, 0, 0), TypeError);
      }
      assert.throws(() => backend.streamWaitValue32(s!, d, 0, 4), RangeError, 'unknown condition');
      assert.throws(() => backend.streamWaitValue32(s!, d, 0, 1 << 30), RangeError, 'FLUSH is not supported');
      // NO_MEMORY_BARRIER (1) is not supported by the v2 entry point: the driver says INVALID_VALUE.
      assert.throws(() => backend.streamWriteValue32(s!, d, 0, 1), RangeError, 'NO_MEMORY_BARRIER');
      assert.throws(() => backend.streamWriteValue32(s!, d, 0, 2), RangeError, 'unknown write flags');
      assert.equal(backend.streamQuery(s!), true, 'nothing was enqueued');
    });
  });

  test('managed and pageable memory are CUDA_ERROR_INVALID_VALUE, as the driver answers', () => {
    withStreams(1, ([s]) => {
      const managed = backend.memAllocManaged(4 * KiB, MemAttach.GLOBAL);
      const pageable = backend.addressOf(new Uint8Array(4 * KiB));
      try {
        for (const addr of [managed, pageable]) {
          throwsCuda(() => backend.streamWaitValue32(s!, addr, 0, GEQ), 'CUDA_ERROR_INVALID_VALUE');
          throwsCuda(() => backend.streamWriteValue32(s!, addr, 0, StreamWriteValueFlags.DEFAULT), 'CUDA_ERROR_INVALID_VALUE');
        }
      } finally {
        backend.memFree(managed);
      }
    });
  });
});
