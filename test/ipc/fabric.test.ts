/**
 * Fabric handles (CU_MEM_HANDLE_TYPE_FABRIC): stream-ordered pools and a virtual-memory pool's
 * physical allocations made with them, exported in one process and imported in another, with the
 * data checked on both sides; and the IMEX check that runs before the driver is asked, each
 * missing piece its own error. On the emulated backend the host's part (proc/devices and the
 * channel file) is planted in a folder of the test's own (VRAM_IMEX_ROOT); on a GPU the
 * end-to-end cases run only where the machine really has fabric handles (an IMEX channel), and
 * are skipped with the check's own message elsewhere.
 */
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { MemHandleType } from '../../src/backend/backend.js';
import { DeviceBuffer } from '../../src/buffer/device-buffer.js';
import { Device } from '../../src/device.js';
import { FabricUnavailableError, NotSupportedError, type FabricRequirement } from '../../src/errors.js';
import { exportIpc, importIpc } from '../../src/ipc/ipc.js';
import { IpcHandle } from '../../src/ipc/ipc-handle.js';
import { exportPoolFabricHandle, exportPoolPointer } from '../../src/ipc/pool-ipc.js';
import { PoolResource } from '../../src/resource/suballoc/pool.js';
import { AsyncResource } from '../../src/resource/upstream/async-resource.js';
import { CudaResource } from '../../src/resource/upstream/cuda-resource.js';
import { fabricSkip, plantImex, withImexRoot, type PlantOptions } from '../imex.js';
import { onGpu } from '../helpers.js';
import { emulatedIpcResources, Peer } from '../ipc-peer.js';

const device = Device.get(0);
/** The host's part, planted for the emulated backend; on a GPU the real one is used (undefined). */
const planted = onGpu ? undefined : plantImex();
const root = planted?.root;
const peers: Peer[] = [];
after(async () => {
  for (const p of peers) await p.kill();
  planted?.remove();
});

/** A peer process whose fabric check reads the planted root (on a GPU, the host's). */
function peer(): Peer {
  const p = new Peer(root === undefined ? process.env : { ...process.env, VRAM_IMEX_ROOT: root });
  peers.push(p);
  return p;
}

/** Runs `body` with this process's check reading the planted root (on a GPU, the host's). */
function here<T>(body: () => T): T {
  return root === undefined ? body() : withImexRoot(root, body);
}

const hex = (bytes: Uint8Array): string => Buffer.from(bytes).toString('hex');

describe('fabric memory between processes', () => {
  for (const from of ['pool', 'physical'] as const) {
    const kind = from === 'pool' ? 'fabric-pool' : 'fabric-physical';
    const resource = (): AsyncResource | PoolResource =>
      from === 'pool' ? new AsyncResource({ pool: { handleTypes: 'fabric' } }) : new PoolResource({ handleTypes: 'fabric' });

    test(`${kind}: another process exports, this one imports, reads and writes; the exporter sees the write`, { skip: fabricSkip(from) }, async () => {
      const p = peer();
      const { handle } = await p.do({ op: 'export-fabric', from, bytes: 8192, fill: 0x5a });
      const parsed = IpcHandle.from(handle ?? '');
      assert.equal(parsed.kind, kind);
      assert.equal(parsed.descriptors, undefined, 'a fabric handle carries no descriptors');
      const before = emulatedIpcResources();
      const imported = here(() => importIpc(parsed));
      try {
        assert.equal(imported.byteLength, 8192);
        const seen = new Uint8Array(8192);
        imported.copyToHost(seen);
        assert.ok(
          seen.every((b) => b === 0x5a),
          'the importer reads what the exporter wrote',
        );
        imported.copyFromHost(new Uint8Array([1, 2, 3, 4]), { offset: 100 });
        device.synchronize();
        const { hex: back } = await p.do({ op: 'read', offset: 98, bytes: 8 });
        assert.equal(back, '5a5a010203045a5a', 'the exporter reads what the importer wrote');
      } finally {
        imported.free();
        device.synchronize();
      }
      assert.equal(emulatedIpcResources(), before, 'freeing the import leaves no mapping or descriptor');
      await p.do({ op: 'free' });
    });

    test(`${kind}: this process exports, another imports; the handle travels as text`, { skip: fabricSkip(from) }, async () => {
      using mr = here(resource);
      assert.equal(mr.handleTypes, 'fabric');
      const buf = DeviceBuffer.allocate(4096, { resource: mr });
      try {
        buf.memset(0x33);
        device.synchronize();
        const handle = exportIpc(buf);
        assert.equal(handle.kind, kind);
        assert.equal(IpcHandle.from(handle.toBytes()).toString(), handle.toString(), 'the binary form reads back');
        const p = peer();
        const { byteLength } = await p.do({ op: 'import', handle: handle.toString() });
        assert.equal(byteLength, 4096);
        const { hex: seen } = await p.do({ op: 'read', offset: 0, bytes: 4 });
        assert.equal(seen, '33333333');
        await p.do({ op: 'close' });
      } finally {
        buf.free();
      }
    });
  }

  test('exportPoolFabricHandle and importPool: the pool by its 64 bytes, then an allocation in it', { skip: fabricSkip('pool') }, async () => {
    using mr = here(() => new AsyncResource({ pool: { handleTypes: 'fabric' } }));
    assert.equal(mr.exportable, true);
    const buf = DeviceBuffer.allocate(1024, { resource: mr });
    try {
      buf.copyFromHost(new Uint8Array([9, 8, 7, 6]));
      device.synchronize();
      const poolHandle = exportPoolFabricHandle(mr);
      assert.equal(poolHandle.length, 64);
      const p = peer();
      const { byteLength } = await p.do({ op: 'import-pool-fabric', hex: hex(poolHandle), handle: exportPoolPointer(buf).toString() });
      assert.equal(byteLength, 1024);
      const { hex: seen } = await p.do({ op: 'read', offset: 0, bytes: 4 });
      assert.equal(seen, '09080706');
      // As CUDA requires: the importer frees its import before the exporter frees the allocation.
      await p.do({ op: 'close' });
      await p.do({ op: 'drop-pool' });
    } finally {
      buf.free();
    }
  });

  test('a pool made with POSIX descriptors has no fabric handle: the driver refuses', () => {
    using mr = new AsyncResource({ pool: { handleTypes: 'posix-fd' } });
    assert.throws(
      () => exportPoolFabricHandle(mr),
      (e: unknown) => e instanceof Error && e.name === 'CudaError',
    );
  });

  test(
    'the importer is checked too: without an IMEX channel here, importIpc says what is missing',
    { skip: onGpu ? 'needs a planted root' : false },
    async () => {
      const p = peer();
      const { handle } = await p.do({ op: 'export-fabric', from: 'pool', bytes: 4096, fill: 1 });
      const bare = plantImex({ channelDirectory: false });
      try {
        const before = emulatedIpcResources();
        assert.throws(
          () => withImexRoot(bare.root, () => importIpc(handle ?? '')),
          (e: unknown) => e instanceof FabricUnavailableError && e.missing === 'channel-directory' && /importPool/.test(e.message),
        );
        assert.equal(emulatedIpcResources(), before, 'nothing was imported');
      } finally {
        bare.remove();
        await p.do({ op: 'free' });
      }
    },
  );
});

describe('the IMEX check, before the driver is asked', () => {
  const attributeLacking = ((): string | false => {
    try {
      return device.attribute('handleTypeFabricSupported') === 0 ? 'this device lacks fabric handles (the attribute check comes first)' : false;
    } catch {
      return 'this driver does not know CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED';
    }
  })();

  /** The error `make` throws with the root planted as `options`. */
  function refusal(options: PlantOptions, make: () => unknown): FabricUnavailableError {
    const spoiled = plantImex(options);
    try {
      let caught: unknown;
      withImexRoot(spoiled.root, () => {
        try {
          make();
        } catch (error) {
          caught = error;
        }
      });
      assert.ok(caught instanceof FabricUnavailableError, `a FabricUnavailableError, got ${String(caught)}`);
      assert.ok(caught instanceof NotSupportedError, 'it is a NotSupportedError');
      return caught;
    } finally {
      spoiled.remove();
    }
  }

  const asyncPool = (): unknown => new AsyncResource({ pool: { handleTypes: 'fabric' } });
  const cases: [string, PlantOptions, FabricRequirement, RegExp][] = [
    [
      'no nvidia-caps-imex-channels in /proc/devices',
      { procDevices: false },
      'proc-devices',
      /proc\/devices lists no nvidia-caps-imex-channels .*nvidia-modprobe/,
    ],
    [
      'no /dev/nvidia-caps-imex-channels/',
      { channelDirectory: false },
      'channel-directory',
      /there is no .*dev\/nvidia-caps-imex-channels\/.*nvidia-modprobe -s -i 0:1.*mknod -m 666 .*channel0 c 234 0 \(234: the major number/,
    ],
    ['no channel in it', { channel: 'none' }, 'channel', /no IMEX channel in .* that this user can open \(the folder has none\).*mknod/],
    ['a channel that does not open', { channel: 'dangling' }, 'channel', /channel0: ENOENT.*or let this user read channel0/],
  ];
  for (const [what, options, missing, message] of cases) {
    test(`${what}: FabricUnavailableError (missing '${missing}') that says what to run`, { skip: attributeLacking }, () => {
      const e = refusal(options, asyncPool);
      assert.equal(e.missing, missing);
      assert.match(e.message, /^new AsyncResource: fabric handles \(CU_MEM_HANDLE_TYPE_FABRIC\) on device 0: /);
      assert.match(e.message, message);
    });
  }

  test(
    'a channel this user may not open: its error code is in the message',
    { skip: attributeLacking || (process.getuid?.() === 0 ? 'running as root, which opens any file' : false) },
    () => {
      const e = refusal({ channel: 'no-permission' }, asyncPool);
      assert.equal(e.missing, 'channel');
      assert.match(e.message, /channel0: EACCES/);
    },
  );

  test("PoolResource({ handleTypes: 'fabric' }) is checked the same way", { skip: attributeLacking }, () => {
    const e = refusal({ procDevices: false }, () => new PoolResource({ handleTypes: 'fabric' }));
    assert.equal(e.missing, 'proc-devices');
    assert.match(e.message, /^new PoolResource: /);
  });

  test('the check passes with every piece there (emulated: planted)', { skip: onGpu ? 'the host decides on a GPU (see the end-to-end cases)' : false }, () => {
    using mr = here(() => new AsyncResource({ pool: { handleTypes: 'fabric' } }));
    using pool = here(() => new PoolResource({ handleTypes: 'fabric' }));
    assert.match(pool.describe(), /fabric/);
    assert.equal(mr.capturePolicy, 'private', 'a shareable pool allocates from the private pool during a capture');
  });
});

test(
  'the emulated driver keeps the handle types apart: fabric-only memory has no descriptor, descriptor memory no fabric handle',
  { skip: onGpu ? 'emulation only: the driver answers these itself' : false },
  () => {
    const backend = device.backend;
    const page = backend.memGetAllocationGranularity(0);
    const invalid = (e: unknown): boolean => e instanceof Error && (e as { errorName?: string }).errorName === 'CUDA_ERROR_INVALID_VALUE';
    const fabricOnly = backend.memCreate(page, 0, MemHandleType.FABRIC);
    const posixOnly = backend.memCreate(page, 0);
    try {
      assert.throws(() => backend.memExportToShareableHandle(fabricOnly, MemHandleType.POSIX_FILE_DESCRIPTOR), invalid);
      assert.throws(() => backend.memExportFabricHandle(posixOnly), invalid);
      assert.equal(backend.memExportFabricHandle(fabricOnly).length, 64);
    } finally {
      backend.memRelease(fabricOnly);
      backend.memRelease(posixOnly);
    }
  },
);

describe('options', () => {
  test('handleTypes takes none, posix-fd and fabric; a bad value names them', () => {
    assert.throws(
      () => new AsyncResource({ pool: { handleTypes: 'nvlink' as 'fabric' } }),
      (e: unknown) => e instanceof RangeError && /'none', 'posix-fd' or 'fabric'/.test(e.message),
    );
    assert.throws(
      () => new PoolResource({ handleTypes: 'none' as 'fabric' }),
      (e: unknown) => e instanceof RangeError && /'posix-fd' or 'fabric'/.test(e.message),
    );
  });

  test('fabric is for device memory: refused for a host NUMA pool, before any driver call', () => {
    assert.throws(
      () => new AsyncResource({ pool: { handleTypes: 'fabric', location: { type: 'host-numa', id: 0 } } }),
      (e: unknown) => e instanceof RangeError && /device memory/.test(e.message),
    );
  });

  test('handleTypes is an option of virtual growth: refused for a pool over an upstream', () => {
    using upstream = new CudaResource(device);
    assert.throws(() => new PoolResource({ upstream, handleTypes: 'fabric' }), /handleTypes is an option of virtual growth/);
  });
});
