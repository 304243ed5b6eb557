/**
 * The CUDA backend's loader and FFI layer. Without a driver: loading fails with an Error that says
 * what was tried. With VRAM_BACKEND=cuda (the GPU machine): each group of driver calls round-trips.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { loadCudaBackend } from '../../src/backend/cuda.js';
import { driverCandidates } from '../../src/cuda/library.js';
import { EventFlags, MemAccess, MemoryType, MemPoolAttribute, type Backend, type Handle } from '../../src/backend/backend.js';
import { CudaError } from '../../src/errors.js';

const wantCuda = process.env.VRAM_BACKEND === 'cuda';

describe('cuda loader without a driver', { skip: wantCuda ? 'VRAM_BACKEND=cuda' : false }, () => {
  test('loadCudaBackend throws an Error that names what it tried', (t) => {
    let backend: Backend | undefined;
    try {
      backend = loadCudaBackend();
    } catch (error) {
      assert.ok(error instanceof Error);
      if (error instanceof CudaError) {
        // A driver loaded but cuInit failed (no device): the error names the call.
        assert.equal(error.call, 'cuInit');
        return;
      }
      for (const candidate of driverCandidates()) assert.ok(error.message.includes(candidate), `message names ${candidate}`);
      assert.match(error.message, /VRAM_LIBCUDA/);
      // The failure is cached and rethrown as is.
      assert.throws(
        () => loadCudaBackend(),
        (again) => again === error,
      );
      return;
    }
    t.skip(`a CUDA driver is present (${backend.name})`);
  });

  test('candidates: VRAM_LIBCUDA first, then the loader path, never a stub folder', () => {
    const list = driverCandidates({ VRAM_LIBCUDA: '/opt/driver/libcuda.so.1' }, 'linux');
    assert.equal(list[0], '/opt/driver/libcuda.so.1');
    assert.equal(list[1], 'libcuda.so.1');
    assert.ok(list.every((path) => !path.includes('/stubs/')));
    assert.deepEqual(driverCandidates({}, 'win32'), ['nvcuda.dll']);
  });
});

describe('auto falling back to the emulated backend', () => {
  /** Runs a program that uses vram twice over in a child with `env` (no other VRAM_* variable). */
  function child(env: Record<string, string>): { backend: string; reason: string | null; warnings: number; stderr: string } {
    const select = new URL('../../src/backend/select.js', import.meta.url).href;
    const device = new URL('../../src/device.js', import.meta.url).href;
    const program = `import { getBackend, backendFallbackReason } from '${select}';
      import { Device } from '${device}';
      getBackend(); getBackend();
      const d = Device.get(0); d.makeCurrent();
      console.log(JSON.stringify({ backend: getBackend().name, reason: backendFallbackReason() ?? null }));`;
    const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('VRAM_')));
    const run = spawnSync(process.execPath, ['--input-type=module', '-e', program], {
      encoding: 'utf8',
      timeout: 60_000,
      env: { ...base, ...env },
    });
    assert.equal(run.status, 0, run.stderr);
    const out = JSON.parse(run.stdout) as { backend: string; reason: string | null };
    return { ...out, warnings: run.stderr.split('[VRAM_EMULATED_FALLBACK]').length - 1, stderr: run.stderr };
  }

  test('warns once per process, naming the reason; a machine with a driver finds it and stays quiet', () => {
    const missing = '/nonexistent/vram-test/libcuda.so.1';
    const auto = child({ VRAM_BACKEND: 'auto', VRAM_LIBCUDA: missing });
    if (auto.backend === 'cuda') {
      // The loader found the driver after the missing VRAM_LIBCUDA: nothing fell back.
      assert.equal(auto.reason, null);
      assert.equal(auto.warnings, 0, auto.stderr);
      return;
    }
    assert.ok(auto.reason !== null);
    assert.equal(auto.warnings, 1, auto.stderr);
    assert.ok(auto.stderr.includes(auto.reason), 'the warning names the reason');
    assert.match(auto.stderr, /VRAM_BACKEND=emulated/, 'and says how to choose the emulation without it');
    assert.doesNotMatch(auto.stderr, /\.\. Set VRAM_BACKEND/, 'one full stop after the reason, not two');
    // The default is auto: the same without VRAM_BACKEND.
    assert.equal(child({ VRAM_LIBCUDA: missing }).warnings, 1);
  });

  test('VRAM_BACKEND=emulated, chosen on purpose, gives no warning', () => {
    const chosen = child({ VRAM_BACKEND: 'emulated', VRAM_LIBCUDA: '/nonexistent/vram-test/libcuda.so.1' });
    assert.equal(chosen.backend, 'emulated');
    assert.equal(chosen.reason, null);
    assert.equal(chosen.warnings, 0, chosen.stderr);
  });
});

describe('cuda backend on a GPU', { skip: wantCuda ? false : 'needs VRAM_BACKEND=cuda and a GPU' }, () => {
  let cuda: Backend;
  let ctx: Handle;

  before(() => {
    cuda = loadCudaBackend();
    ctx = cuda.primaryContextRetain(0);
    cuda.contextSetCurrent(ctx);
  });

  after(() => {
    cuda.contextSynchronize();
  });

  test('one instance per process', () => {
    assert.equal(loadCudaBackend(), cuda);
    assert.equal(cuda.name, 'cuda');
  });

  test('driver version and devices', () => {
    assert.ok(cuda.driverVersion() >= 12000, `driver ${cuda.driverVersion()}`);
    assert.ok(cuda.deviceCount() >= 1);
  });

  test('deviceInfo(0) looks like a GPU', () => {
    const info = cuda.deviceInfo(0);
    assert.equal(info.ordinal, 0);
    assert.ok(info.name.length > 0);
    assert.match(info.uuid, /^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
    assert.ok(info.computeCapability[0] >= 5 && info.computeCapability[0] < 20, `cc ${info.computeCapability.join('.')}`);
    assert.ok(info.computeCapability[1] >= 0 && info.computeCapability[1] < 10);
    assert.ok(info.totalMemory >= 2 ** 30);
    assert.match(info.pciBusId, /^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$/);
    assert.ok(info.multiprocessorCount >= 1 && info.multiprocessorCount < 10_000);
    assert.equal(info.unifiedAddressing, true);
    assert.equal(info.canMapHostMemory, true);
    assert.ok(info.asyncEngineCount >= 1);
    assert.ok(info.l2CacheSize >= 2 ** 20);
    assert.ok(info.texturePitchAlignment >= 32 && (info.texturePitchAlignment & (info.texturePitchAlignment - 1)) === 0);
    assert.equal(typeof info.memoryPoolsSupported, 'boolean');
    assert.equal(typeof info.integrated, 'boolean');
  });

  test('contexts: set current is idempotent, get current agrees', () => {
    cuda.contextSetCurrent(ctx);
    cuda.contextSetCurrent(ctx);
    assert.equal(cuda.contextGetCurrent(), ctx);
    const [least, greatest] = cuda.streamPriorityRange();
    assert.ok(greatest <= least);
    const info = cuda.memGetInfo();
    assert.ok(info.free > 0 && info.free <= info.total);
  });

  test('memAlloc / memFree round trip, with pointer attributes', () => {
    const bytes = 1 << 20;
    const ptr = cuda.memAlloc(bytes);
    try {
      assert.ok(ptr > 0 && ptr % 256 === 0);
      const attrs = cuda.pointerGetAttributes(ptr + 100);
      assert.equal(attrs.memoryType, MemoryType.DEVICE);
      assert.equal(attrs.device, 0);
      assert.equal(attrs.isManaged, false);
      assert.equal(attrs.rangeStart, ptr);
      assert.ok(attrs.rangeSize >= bytes);
      assert.equal(attrs.context, ctx);
    } finally {
      cuda.memFree(ptr);
    }
  });

  test('pointer attributes of memory the driver does not know', () => {
    const attrs = cuda.pointerGetAttributes(cuda.addressOf(new ArrayBuffer(4096)));
    assert.equal(attrs.memoryType, 0);
    assert.equal(attrs.device, -1);
  });

  test('memAlloc(0) is CUDA_ERROR_INVALID_VALUE', () => {
    assert.throws(
      () => cuda.memAlloc(0),
      (error) => error instanceof CudaError && error.errorName === 'CUDA_ERROR_INVALID_VALUE' && error.code === 1 && error.call === 'cuMemAlloc',
    );
  });

  test('memcpyFromHost / memcpyToHost round trip random bytes, byteOffset honoured', () => {
    const bytes = 3 * 4096 + 17;
    const ptr = cuda.memAlloc(bytes);
    try {
      const data = new Uint8Array(randomBytes(bytes + 64));
      const src = data.subarray(32, 32 + bytes);
      cuda.memcpyFromHost(ptr, src, bytes);
      const back = new Uint8Array(bytes + 8);
      cuda.memcpyToHost(back.subarray(8), ptr, bytes);
      assert.deepEqual(back.subarray(8), src);
      assert.deepEqual(back.subarray(0, 8), new Uint8Array(8));
      // An ArrayBuffer works too.
      const whole = new ArrayBuffer(bytes);
      cuda.memcpyToHost(whole, ptr, bytes);
      assert.deepEqual(new Uint8Array(whole), src);
      assert.throws(() => cuda.memcpyToHost(new Uint8Array(4), ptr, 8), RangeError);
    } finally {
      cuda.memFree(ptr);
    }
  });

  test('memset, memcpy, memcpy2D', () => {
    const width = 100;
    const height = 7;
    const a = cuda.memAllocPitch(width, height, 4);
    const b = cuda.memAlloc(width * height);
    try {
      assert.ok(a.pitch >= width);
      cuda.memset(a.ptr, 0x5a, 1, a.pitch * height);
      cuda.memcpy2D({ dst: b, dstPitch: width, src: a.ptr, srcPitch: a.pitch, widthBytes: width, height });
      const out = new Uint8Array(width * height);
      cuda.memcpyToHost(out, b, out.length);
      assert.ok(out.every((v) => v === 0x5a));
      cuda.memset(b, 0x01020304, 4, (width * height) / 4);
      cuda.memcpy(a.ptr, b, 8);
      const word = new Uint32Array(2);
      cuda.memcpyToHost(word, a.ptr, 8);
      assert.deepEqual([...word], [0x01020304, 0x01020304]);
    } finally {
      cuda.memFree(a.ptr);
      cuda.memFree(b);
    }
  });

  test('stream and events: record, query, elapsed time >= 0', () => {
    const stream = cuda.streamCreate(0, 0);
    const start = cuda.eventCreate(EventFlags.DEFAULT);
    const end = cuda.eventCreate(EventFlags.DEFAULT);
    const ptr = cuda.memAlloc(1 << 24);
    try {
      cuda.eventRecord(start, stream);
      cuda.memsetAsync(ptr, 7, 4, (1 << 24) / 4, stream);
      cuda.eventRecord(end, stream);
      cuda.streamWaitEvent(0, end);
      cuda.eventSynchronize(end);
      assert.equal(cuda.eventQuery(end), true);
      assert.equal(cuda.streamQuery(stream), true);
      const ms = cuda.eventElapsedTime(start, end);
      assert.ok(ms >= 0, `elapsed ${ms}`);
    } finally {
      cuda.memFree(ptr);
      cuda.eventDestroy(start);
      cuda.eventDestroy(end);
      cuda.streamDestroy(stream);
    }
  });

  test('cuMemAllocAsync round trip, and pools', () => {
    const stream = cuda.streamCreate(1, 0);
    try {
      const ptr = cuda.memAllocAsync(4096, stream);
      cuda.memsetAsync(ptr, 0xab, 1, 4096, stream);
      cuda.streamSynchronize(stream);
      const out = new Uint8Array(4096);
      cuda.memcpyToHost(out, ptr, 4096);
      assert.ok(out.every((v) => v === 0xab));
      cuda.memFreeAsync(ptr, stream);

      const defaultPool = cuda.deviceGetDefaultMemPool(0);
      assert.ok(defaultPool !== 0);
      assert.ok(cuda.memPoolGetAttribute(defaultPool, MemPoolAttribute.RELEASE_THRESHOLD) >= 0);

      const pool = cuda.memPoolCreate({ device: 0 });
      try {
        cuda.memPoolSetAttribute(pool, MemPoolAttribute.RELEASE_THRESHOLD, 1 << 26);
        assert.equal(cuda.memPoolGetAttribute(pool, MemPoolAttribute.RELEASE_THRESHOLD), 1 << 26);
        cuda.memPoolSetAttribute(pool, MemPoolAttribute.REUSE_ALLOW_OPPORTUNISTIC, 0);
        assert.equal(cuda.memPoolGetAttribute(pool, MemPoolAttribute.REUSE_ALLOW_OPPORTUNISTIC), 0);
        const p = cuda.memAllocFromPoolAsync(1 << 20, pool, stream);
        cuda.streamSynchronize(stream);
        assert.ok(cuda.memPoolGetAttribute(pool, MemPoolAttribute.USED_MEM_CURRENT) >= 1 << 20);
        cuda.memFreeAsync(p, stream);
        cuda.streamSynchronize(stream);
        cuda.memPoolTrimTo(pool, 0);
        assert.equal(cuda.memPoolGetAccess(pool, 0), MemAccess.READWRITE);
      } finally {
        cuda.memPoolDestroy(pool);
      }
    } finally {
      cuda.streamDestroy(stream);
    }
  });

  test('virtual memory: reserve, create, map, set access, copy, unmap, release', () => {
    const granularity = cuda.memGetAllocationGranularity(0);
    assert.ok(granularity >= 4096 && (granularity & (granularity - 1)) === 0);
    const va = cuda.memAddressReserve(2 * granularity, 0);
    const handle = cuda.memCreate(granularity, 0);
    try {
      cuda.memMap(va + granularity, granularity, handle);
      cuda.memSetAccess(va + granularity, granularity, 0, MemAccess.READWRITE);
      const data = new Uint8Array(randomBytes(8192));
      cuda.memcpyFromHost(va + granularity, data, data.length);
      const back = new Uint8Array(data.length);
      cuda.memcpyToHost(back, va + granularity, back.length);
      assert.deepEqual(back, data);
      cuda.memUnmap(va + granularity, granularity);
    } finally {
      cuda.memRelease(handle);
      cuda.memAddressFree(va, 2 * granularity);
    }
  });

  test('pinned host memory: alloc, view, device pointer, register', () => {
    const bytes = 1 << 16;
    const host = cuda.memHostAlloc(bytes, 0x2);
    try {
      const view = new Uint8Array(cuda.hostView(host, bytes));
      view.fill(0x33);
      assert.equal(cuda.pointerGetAttributes(host).memoryType, MemoryType.HOST);
      const dptr = cuda.memHostGetDevicePointer(host);
      const out = new Uint8Array(16);
      cuda.memcpyToHost(out, dptr, 16);
      assert.ok(out.every((v) => v === 0x33));
    } finally {
      cuda.memFreeHost(host);
    }
    const buffer = new ArrayBuffer(1 << 20);
    const address = cuda.memHostRegister(buffer, 0);
    try {
      assert.equal(address, cuda.addressOf(buffer));
      assert.equal(cuda.pointerGetAttributes(address).memoryType, MemoryType.HOST);
    } finally {
      cuda.memHostUnregister(address);
    }
  });

  test('managed memory: prefetch and advise', (t) => {
    if (!cuda.deviceInfo(0).managedMemory) return t.skip('no managed memory');
    const bytes = 1 << 21;
    const ptr = cuda.memAllocManaged(bytes, 0x1);
    try {
      const attrs = cuda.pointerGetAttributes(ptr);
      assert.equal(attrs.isManaged, true);
      new Uint8Array(cuda.hostView(ptr, bytes)).fill(9);
      if (cuda.deviceInfo(0).concurrentManagedAccess) {
        cuda.memAdvise(ptr, bytes, 3, 0);
        cuda.memPrefetchAsync(ptr, bytes, 0, 0);
        cuda.memPrefetchAsync(ptr, bytes, 'host', 0);
        cuda.streamSynchronize(0);
      }
      const out = new Uint8Array(8);
      cuda.memcpyToHost(out, ptr, 8);
      assert.ok(out.every((v) => v === 9));
    } finally {
      cuda.memFree(ptr);
    }
  });

  test('a created context becomes current and can be destroyed', () => {
    const created = cuda.contextCreate(0, 0);
    try {
      assert.equal(cuda.contextGetCurrent(), created);
    } finally {
      cuda.contextDestroy(created);
      cuda.contextSetCurrent(ctx);
    }
    assert.equal(cuda.contextGetCurrent(), ctx);
  });
});
