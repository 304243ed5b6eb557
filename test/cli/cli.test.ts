/**
 * The `vram` command as a user runs it: spawned as a child process on the emulated backend, with
 * its JSON output checked for shape, and usage errors checked to exit 2 with the usage text.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { median } from '../../src/cli/bench/common.js';
import { mulberry32 } from '../../src/util/random.js';
import { formatTable, Progress } from '../../src/cli/format.js';
import { formatRows } from '../../src/cli/bench.js';
import { ENVIRONMENT } from '../../src/cli/environment-table.js';
import { formatBytes, parseSize } from '../../src/util/size.js';
import { InputFileError, readTextFile } from '../../src/util/input-file.js';

const root = fileURLToPath(new URL('../../../', import.meta.url));
const bin = fileURLToPath(new URL('../../../bin/vram.js', import.meta.url));

interface Result {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs `vram ...args` on the emulated backend and resolves with its exit status and output. */
function vram(...args: string[]): Promise<Result> {
  return vramWith({ VRAM_BACKEND: 'emulated' }, ...args);
}

/**
 * Runs `vram ...args` with `env` over this process's environment, less every VRAM_* variable (a
 * developer's own settings must not change what the tests see); `undefined` leaves one unset.
 */
function vramWith(env: Readonly<Record<string, string | undefined>>, ...args: string[]): Promise<Result> {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('VRAM_')));
  const merged: Record<string, string> = {};
  for (const [k, v] of Object.entries({ ...base, ...env })) if (v !== undefined) merged[k] = v;
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [bin, ...args],
      {
        cwd: root,
        env: merged,
        maxBuffer: 16 << 20,
        timeout: 60_000,
      },
      (error, stdout, stderr) => {
        const code = error === null ? 0 : typeof error.code === 'number' ? error.code : 1;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

/** Runs `body` in a new temporary folder, removed afterwards. */
async function inTempDir(body: (dir: string) => Promise<void>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'vram-cli-'));
  try {
    await body(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

describe('vram info', () => {
  it('--json reports the emulated backend, the reason, and every device with its attributes', async () => {
    const { code, stdout, stderr } = await vram('info', '--json');
    assert.equal(code, 0, stderr);
    const report: unknown = JSON.parse(stdout);
    assert.ok(isRecord(report));
    assert.equal(report.backend, 'emulated');
    assert.equal(typeof report.emulatedReason, 'string');
    assert.equal(report.driverVersion, null);
    assert.match(String(report.cudaVersion), /^\d+\.\d+$/);
    assert.ok(Array.isArray(report.devices) && report.devices.length >= 1);
    for (const device of report.devices as unknown[]) {
      assert.ok(isRecord(device));
      assert.equal(typeof device.name, 'string');
      assert.match(String(device.uuid), /^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
      assert.ok(Array.isArray(device.computeCapability) && device.computeCapability.length === 2);
      assert.ok(typeof device.totalMemory === 'number' && device.totalMemory > 0);
      assert.ok(typeof device.freeMemory === 'number' && device.freeMemory <= device.totalMemory);
      assert.match(String(device.pciBusId), /^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]$/i);
      for (const flag of ['unifiedAddressing', 'canMapHostMemory', 'memoryPoolsSupported', 'managedMemory']) {
        assert.equal(typeof device[flag], 'boolean', flag);
      }
    }
  });

  it('says plainly in text that the backend is emulated', async () => {
    const { code, stdout } = await vram('info');
    assert.equal(code, 0);
    assert.match(stdout, /^backend:\s+emulated \(/m);
    assert.match(stdout, /^device 0: /m);
  });

  it('shows every VRAM_* variable: its value when set, else its default, and what it does', async () => {
    const { code, stdout, stderr } = await vramWith({ VRAM_BACKEND: 'emulated', VRAM_EMULATED_BYTES: '8G' }, 'info');
    assert.equal(code, 0, stderr);
    assert.match(stdout, /^environment:$/m);
    assert.match(stdout, /^  VRAM_BACKEND +emulated$/m);
    assert.match(stdout, /^  VRAM_EMULATED_BYTES +8G$/m);
    assert.match(stdout, /^  VRAM_COPY_THREADS +unset; default /m);
    assert.match(stdout, /memory: +8 GiB total/);
    for (const v of ENVIRONMENT) {
      assert.match(stdout, new RegExp(`^  ${v.name} `, 'm'), v.name);
      assert.ok(stdout.includes(v.meaning), v.name);
    }
    const json = JSON.parse((await vram('info', '--json')).stdout) as { environment: { name: string; value?: string }[] };
    assert.deepEqual(
      json.environment.map((e) => e.name),
      ENVIRONMENT.map((v) => v.name),
    );
  });

  it('reports a variable vram would refuse, with the reason, and exits 1', async () => {
    const env = { VRAM_BACKEND: 'emulated', VRAM_COPY_THREADS: '0x4', VRAM_ALLOCATOR: 'turbo' };
    const { code, stdout, stderr } = await vramWith(env, 'info');
    assert.equal(code, 1, stderr);
    assert.equal(
      stderr,
      "vram info: VRAM_ALLOCATOR must be one of async, pool, adaptive, cuda, got 'turbo'\n" +
        "vram info: VRAM_COPY_THREADS must be a whole number from 0 to 64, got '0x4'\n",
    );
    assert.match(stdout, /^  VRAM_COPY_THREADS +0x4 +REFUSED: VRAM_COPY_THREADS must be a whole number from 0 to 64, got '0x4'$/m);
    assert.match(stdout, /^  VRAM_ALLOCATOR +turbo +REFUSED: VRAM_ALLOCATOR must be one of async, pool, adaptive, cuda, got 'turbo'$/m);
    assert.match(stdout, /^  VRAM_BACKEND +emulated$/m, 'a good value shows no problem');
    const json = JSON.parse((await vramWith(env, 'info', '--json')).stdout) as { environment: { name: string; problem?: string }[] };
    const problems = Object.fromEntries(json.environment.filter((e) => e.problem !== undefined).map((e) => [e.name, e.problem]));
    assert.deepEqual(Object.keys(problems).sort(), ['VRAM_ALLOCATOR', 'VRAM_COPY_THREADS']);
  });

  // Each as the library's own reader refuses it: the first allocation would have thrown.
  for (const [name, value] of [
    ['VRAM_ALLOCATOR', 'bogus'],
    ['VRAM_MEMORY_FRACTION', '2'],
    ['VRAM_COPY_THREADS', '-3'],
    ['VRAM_MEMORY_LIMIT', '-1G'],
    ['VRAM_BACKEND', 'gpu'],
    ['VRAM_EMULATED_BYTES', 'lots'],
    ['VRAM_CACHE_DIR', 'relative/cache'],
  ] as const) {
    it(`${name}=${value}: exit 1, naming the variable on stderr`, async () => {
      const { code, stderr } = await vramWith({ VRAM_BACKEND: 'emulated', [name]: value }, 'info');
      assert.equal(code, 1, stderr);
      assert.match(stderr, new RegExp(`^vram info: ${name}\\b.*'${value}'`, 'm'));
    });
  }

  it('VRAM_MEMORY_LIMIT with VRAM_MEMORY_FRACTION is refused, as the default resource refuses it', async () => {
    const { code, stderr } = await vramWith({ VRAM_BACKEND: 'emulated', VRAM_MEMORY_LIMIT: '1G', VRAM_MEMORY_FRACTION: '0.5' }, 'info');
    assert.equal(code, 1, stderr);
    assert.match(stderr, /^vram info: VRAM_MEMORY_LIMIT \('1G'\) and VRAM_MEMORY_FRACTION \('0.5'\) are both set/m);
  });

  it('VRAM_MEMORY_LIMIT above the device memory is a warning, exit 0; --json lists it', async () => {
    const env = { VRAM_BACKEND: 'emulated', VRAM_EMULATED_BYTES: '4G', VRAM_MEMORY_LIMIT: '100G' };
    const { code, stderr } = await vramWith(env, 'info');
    assert.equal(code, 0, stderr);
    assert.match(stderr, /^vram info: warning: VRAM_MEMORY_LIMIT=100 GiB is above device 0's 4 GiB/m);
    const json = JSON.parse((await vramWith(env, 'info', '--json')).stdout) as { problems: string[]; warnings: string[] };
    assert.deepEqual(json.problems, []);
    assert.equal(json.warnings.length, 1);
    const under = await vramWith({ ...env, VRAM_MEMORY_LIMIT: '1G' }, 'info');
    assert.equal(under.code, 0, under.stderr);
    assert.equal(under.stderr, '');
  });

  it('names a VRAM_* variable it reads nowhere, with a did-you-mean, and exits 0', async () => {
    const text = await vramWith({ VRAM_BACKEND: 'emulated', VRAM_ALOCATOR: 'pool' }, 'info');
    assert.equal(text.code, 0, text.stderr);
    assert.match(text.stderr, /^vram info: warning: VRAM_ALOCATOR is set, but vram reads no such variable \(did you mean VRAM_ALLOCATOR\?\)$/m);
    const json = JSON.parse((await vramWith({ VRAM_BACKEND: 'emulated', VRAM_ALOCATOR: 'pool' }, 'info', '--json')).stdout) as { warnings: string[] };
    assert.deepEqual(json.warnings, ['VRAM_ALOCATOR is set, but vram reads no such variable (did you mean VRAM_ALLOCATOR?)']);
    // Beside a refused value, which stops the backend, it is still named.
    const refused = await vramWith({ VRAM_BACKEND: 'gpu', VRAM_SPIL: '1' }, 'info');
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /^vram info: warning: VRAM_SPIL is set, but vram reads no such variable \(did you mean VRAM_SPILL\?\)$/m);
  });

  it('keeps the backend line short; --verbose lists every driver path searched', async () => {
    const short = await vramWith({}, 'info');
    const verbose = await vramWith({}, 'info', '--verbose');
    assert.equal(short.code, 0);
    assert.equal(verbose.code, 0);
    const line = (text: string): string => /^backend:.*$/m.exec(text)?.[0] ?? '';
    assert.ok(line(short.stdout).length <= 120, line(short.stdout));
    if (/no GPU/.test(line(short.stdout))) {
      assert.match(line(short.stdout), /--verbose lists the \d+ paths searched/);
      assert.match(line(verbose.stdout), /tried .*libcuda\.so\.1/);
    } else {
      assert.match(verbose.stdout, /^driver search: +.*libcuda\.so\.1/m);
    }
    // Chosen by VRAM_BACKEND rather than a fallback: the search path is the verbose detail.
    const chosen = await vram('info', '--verbose');
    assert.match(chosen.stdout, /^backend: +emulated \(selected by VRAM_BACKEND=emulated\)$/m);
    assert.match(chosen.stdout, /^driver search: +.*libcuda\.so\.1/m);
  });
});

describe('the fallback warning', () => {
  const multiStream = join(root, 'test', 'fixtures', 'traces', 'multi_stream.csv');
  const commands: readonly (readonly string[])[] = [
    ['info'],
    ['bench', '--json', '--only', 'transfers', '--sizes', '64K', '--repeats', '2'],
    ['replay', multiStream, '-r', 'pool'],
  ];

  it('every command that touches a device prints it once, as its own line with one full stop', async (t) => {
    // No device visible: a machine with a driver falls back as one without does.
    const hidden = { CUDA_VISIBLE_DEVICES: '-1' };
    for (const args of commands) {
      const { code, stdout, stderr } = await vramWith(hidden, ...args);
      assert.equal(code, 0, stderr);
      if (args[0] === 'info' && !/^backend: +emulated \(no GPU/m.test(stdout)) return t.skip('a device is visible all the same');
      const lines = stderr.split('\n').filter((l) => /runs on the emulated backend/.test(l));
      assert.equal(lines.length, 1, `vram ${args[0]!}: ${stderr}`);
      assert.match(
        lines[0]!,
        new RegExp(`^vram ${args[0]!}: warning: vram runs on the emulated backend \\(host memory, no GPU\\): .*[^.]\\. Set VRAM_BACKEND=emulated`),
      );
      assert.doesNotMatch(stderr, /VRAM_EMULATED_FALLBACK|\.\. /, 'no second warning from node, and no double period');
    }
  });

  it('is not printed when VRAM_BACKEND=emulated chose the emulation', async () => {
    for (const args of commands) {
      const { stderr } = await vram(...args);
      assert.doesNotMatch(stderr, /warning: vram runs on the emulated backend/, `vram ${args[0]!}`);
    }
  });
});

describe('vram bench', () => {
  it('--quick --json gives rows for every group, with the emulated header data and no 256 MiB copies', async () => {
    const { code, stdout, stderr } = await vram('bench', '--quick', '--json');
    assert.equal(code, 0, stderr);
    const report: unknown = JSON.parse(stdout);
    assert.ok(isRecord(report));
    assert.equal(report.backend, 'emulated');
    assert.equal(report.quick, true);
    assert.ok(Array.isArray(report.rows) && Array.isArray(report.skipped));
    assert.deepEqual(report.skipped, [], `skipped rows: ${JSON.stringify(report.skipped)}`);
    const groups = new Set<unknown>();
    for (const row of report.rows as unknown[]) {
      assert.ok(isRecord(row));
      groups.add(row.group);
      assert.equal(typeof row.name, 'string');
      // Sizes are bytes moved or allocated; a launch row's is its argument bytes (0 for an empty kernel).
      assert.ok(Number.isInteger(row.size) && ((row.size as number) > 0 || row.name === 'kernel launch, empty kernel'));
      assert.ok(typeof row.value === 'number' && Number.isFinite(row.value) && row.value > 0, JSON.stringify(row));
      assert.ok(['GB/s', 'ns/pair', 'ns/op', 'ms'].includes(String(row.unit)));
      assert.ok(Number.isInteger(row.repeats) && (row.repeats as number) >= 1);
      if (row.group === 'transfers') assert.ok((row.size as number) < 256 << 20);
    }
    assert.deepEqual([...groups].sort(), ['alloc', 'allocators', 'kernels', 'objects', 'transfers']);
    const names = new Set((report.rows as Record<string, unknown>[]).map((r) => r.name));
    for (const name of [
      'driver pageable H2D',
      'staged pageable H2D',
      'registered pageable D2H',
      'async staged pageable D2H',
      'pinned D2H',
      'write-combined pinned H2D',
      'D2D',
      'cuMemAllocAsync+cuMemFreeAsync',
      'PoolResource',
      'PoolResource random',
      'PoolResource allocate+deallocate',
      'DeviceBuffer.allocate+free',
      'DeviceArray.empty+free (float32)',
    ]) {
      assert.ok(names.has(name), name);
    }
    // The driver's allocators are the emulation's model of them; vram's own stacks are not.
    const rows = report.rows as Record<string, unknown>[];
    const models = new Set(rows.filter((r) => r.model === true).map((r) => r.name));
    assert.deepEqual([...models].sort(), [
      'AsyncResource',
      'AsyncResource random',
      'CudaResource',
      'CudaResource random',
      'cuMemAlloc+cuMemFree',
      'cuMemAllocAsync+cuMemFreeAsync',
    ]);
    // Pool hits timed as bench/pool-hit times them (15 long rounds), not as quick mode's 11 short batches.
    for (const row of rows.filter((r) => r.name === 'PoolResource')) assert.equal(row.repeats, 15);
    // Enough sizes per series to read a curve in the report: allocations 256 B to 64 MiB, copies 64 KiB to 16 MiB, by 4x.
    const sizesOf = (name: string): number[] => rows.filter((r) => r.name === name).map((r) => r.size as number);
    for (const name of ['PoolResource', 'AsyncResource', 'CudaResource', 'ArenaResource', 'BinningResource', 'cuMemAlloc+cuMemFree']) {
      assert.deepEqual(
        sizesOf(name),
        Array.from({ length: 10 }, (_, i) => 256 * 4 ** i),
        name,
      );
    }
    assert.deepEqual(sizesOf('pinned H2D'), [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20]);
    // Progress on stderr without a terminal: one line a case, none in stdout.
    const lines = stderr.trimEnd().split('\n');
    assert.match(lines[0]!, /^\[1\/(\d+)\] transfers: /);
    const total = Number(/^\[1\/(\d+)\]/.exec(lines[0]!)![1]);
    assert.equal(lines.length, total, stderr);
    lines.forEach((line, i) => assert.ok(line.startsWith(`[${i + 1}/${total}] `), line));
  });

  it('--only and --sizes select rows', async () => {
    const { code, stdout, stderr } = await vram('bench', '--json', '--only', 'transfers', '--sizes', '64K', '--repeats', '2');
    assert.equal(code, 0, stderr);
    const report = JSON.parse(stdout) as { rows: { group: string; size: number; repeats: number }[] };
    assert.ok(report.rows.length > 0);
    for (const row of report.rows) {
      assert.equal(row.group, 'transfers');
      assert.equal(row.size, 65536);
      assert.equal(row.repeats, 2);
    }
  });

  it('prints tables headed by the backend in text mode, saying what emulated figures are', async () => {
    const { code, stdout } = await vram('bench', '--only', 'alloc');
    assert.equal(code, 0);
    assert.match(stdout, /^backend:\s+emulated \(/m);
    assert.match(stdout, /^measures:\s+host memory standing in for a GPU/m);
    assert.match(stdout, /^mode:\s+quick, because the backend is emulated; transfer sizes 64 KiB, 256 KiB, 1 MiB, 4 MiB, 16 MiB$/m);
    assert.match(
      stdout,
      /^pool hits:\s+timed as bench\/pool-hit times them, with its code \(src\/cli\/bench\/hits\.ts\): each resource in a process of its own/m,
    );
    assert.match(stdout, /^D2D:\s+a host-memory copy/m);
    assert.match(stdout, /^on a GPU:\s+no figure here carries over/m);
    assert.match(stdout, /^cuMemAlloc\+cuMemFree \(model\) /m);
    assert.match(stdout, /^\(model\): the emulated backend's model of the CUDA driver/m);
    assert.match(stdout, /^bytes per allocation  /m, 'the size columns say what they count');
    const json = JSON.parse((await vram('bench', '--only', 'alloc', '--json')).stdout) as Record<string, unknown>;
    assert.equal(json.quick, true);
    assert.equal(json.quickReason, 'emulated backend');
    assert.deepEqual(json.transferSizes, [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20]);
  });
});

describe('vram replay', () => {
  const trace = 'test/fixtures/traces/resnet50_train.csv';

  it('replays a trace that peaks above the default emulated capacity on every stack with no size set, and says how it sized the device', async () => {
    // The emulated backend by name: on the GPU machine `auto` would pick the driver. Nothing else is set.
    const { code, stdout, stderr } = await vramWith({ VRAM_BACKEND: 'emulated' }, 'replay', trace, '-r', 'all');
    assert.equal(code, 0, stderr);
    assert.equal(stderr, '');
    assert.match(stdout, /^device   emulated device sized for this trace: 12 GiB \(2 x peak live \+ 1 GiB; VRAM_EMULATED_BYTES is unset/m);
    // The driver's allocators replay through the emulation's model of them: marked, and said what carries over.
    for (const stack of ['cuda', 'async']) assert.match(stdout, new RegExp(`^${stack} \\(model\\) +5081 `, 'm'));
    for (const stack of ['pool', 'adaptive', 'binning', 'arena']) assert.match(stdout, new RegExp(`^${stack} +5081 `, 'm'));
    assert.match(stdout, /^\(model\): the emulated backend's model of the CUDA driver/m);
    assert.match(
      stdout,
      /^on a GPU: the peak reserved and overhead of vram's own stacks \(pool, adaptive, binning, arena\) carry over; times and the \(model\) rows do not$/m,
    );
    assert.doesNotMatch(stdout, /FAILED/);
  });

  it('--json reports the emulated capacity and its source; VRAM_EMULATED_BYTES=16G is honoured', async () => {
    const { code, stdout, stderr } = await vramWith({ VRAM_BACKEND: 'emulated', VRAM_EMULATED_BYTES: '16G' }, 'replay', trace, '-r', 'pool', '--json');
    assert.equal(code, 0, stderr);
    const report = JSON.parse(stdout) as { emulatedCapacity: { bytes: number; source: string }; results: { ok: boolean }[] };
    assert.deepEqual(report.emulatedCapacity, { bytes: 16 * 1024 ** 3, source: 'VRAM_EMULATED_BYTES' });
    assert.ok(report.results.every((r) => r.ok));
    assert.ok(
      report.results.every((r) => !('model' in r)),
      "vram's own pool is no model",
    );
    const models = JSON.parse((await vram('replay', trace, '-r', 'cuda,async,pool', '--json')).stdout) as { results: { stack: string; model?: boolean }[] };
    assert.deepEqual(
      models.results.map((r) => [r.stack, r.model ?? false]),
      [
        ['cuda', true],
        ['async', true],
        ['pool', false],
      ],
    );
  });

  it('a device too small for the trace fails each stack and prints the hint once', async () => {
    const { code, stdout, stderr } = await vramWith({ VRAM_BACKEND: 'emulated', VRAM_EMULATED_BYTES: '4G' }, 'replay', trace, '-r', 'cuda,pool,arena');
    assert.equal(code, 1);
    assert.match(stdout, /^device   emulated device of 4 GiB \(VRAM_EMULATED_BYTES\)/m);
    assert.equal(stderr.match(/VRAM_EMULATED_BYTES/g)?.length, 1, stderr);
    assert.match(stderr, /^vram replay: the emulated device \(4 GiB\) is too small for this trace/m);
    assert.match(stderr, /^vram replay: cuda: /m);
    assert.match(stderr, /^vram replay: arena: /m);
  });

  it('--capacity above what an emulated device can have is refused in one line, before any stack runs', async () => {
    const trace = join(root, 'test', 'fixtures', 'traces', 'multi_stream.csv');
    const { code, stdout, stderr } = await vram('replay', trace, '-r', 'pool,async', '--capacity', '100T');
    assert.equal(code, 1, stderr);
    assert.equal(stdout, '', 'nothing replayed');
    assert.match(
      stderr,
      /^vram replay: --capacity 100T: a capacity of 100 TiB for .*multi_stream\.csv needs an emulated device of .*, more than the 16 TiB one can have\n$/,
    );
    // And the variable that sizes the device by hand, by its reader.
    const info = await vramWith({ VRAM_BACKEND: 'emulated', VRAM_EMULATED_BYTES: '100T' }, 'info');
    assert.equal(info.code, 1);
    assert.match(info.stderr, /^vram info: VRAM_EMULATED_BYTES must be at most 16 TiB, an emulated device's most, got '100T'$/m);
  });

  it('--capacity 24G: the emulated device is sized for the capacity and a ballast, and each stack says it fit', async () => {
    // "Will it fit on a 24 GiB card?" without a GPU: an 80 GiB device, as an H100, and a ballast of 56 GiB.
    const { code, stdout, stderr } = await vramWith({ VRAM_BACKEND: 'emulated' }, 'replay', trace, '-r', 'pool,async', '--capacity', '24G');
    assert.equal(code, 0, stderr);
    assert.match(
      stdout,
      /^device   emulated device sized for the capacity: 80 GiB \(at least 80 GiB, as an H100, and 1 GiB more than the capacity, so a ballast holds the rest as on a GPU/m,
    );
    assert.match(
      stdout,
      /^capacity 24 GiB \(--capacity 24G\): a ballast of 56 GiB takes the rest of the device's free memory \(80 GiB in all\), so each stack sees 24 GiB free/m,
    );
    assert.match(stdout, /^pool +yes +5081 /m);
    assert.match(stdout, /^async(?: \(model\))? +yes +5081 /m);
  });

  it("--capacity below the trace's peak on the emulated backend: no stack fits, the table says where, no hint to enlarge the device", async () => {
    const { code, stdout, stderr } = await vramWith({ VRAM_BACKEND: 'emulated' }, 'replay', trace, '-r', 'pool,arena', '--capacity', '4G');
    assert.equal(code, 1);
    assert.match(stdout, /^pool +no: op \d+ +failed/m);
    assert.match(stdout, /^arena +no: at creation +failed/m);
    assert.match(
      stdout,
      /^pool: FAILED at operation \d+ of 5081 \(line \d+\): allocate [\d.]+ MiB with [\d.]+ GiB live and [\d.]+ GiB held by the stack: .*CUDA_ERROR_OUT_OF_MEMORY/m,
    );
    assert.doesNotMatch(stderr, /too small|VRAM_EMULATED_BYTES/);
  });

  it('an arena exhausted by fragmentation says so, with no hint about the device', async () => {
    // 1 GiB of 1 MiB blocks, every other one freed, then 512 MiB of 2 MiB blocks that fit no hole:
    // peak live stays 1 GiB, but the arena (1.25 x peak + 64 MiB) has only 320 MiB past the holes.
    const mib = 1 << 20;
    const lines = ['Thread,Time,Action,Pointer,Size,Stream'];
    let time = 0;
    const at = (i: number): string => `0x${(0x10000000 + i * mib).toString(16)}`;
    for (let i = 0; i < 1024; i++) lines.push(`0,${time++},allocate,${at(i)},${mib},0`);
    for (let i = 0; i < 1024; i += 2) lines.push(`0,${time++},free,${at(i)},${mib},0`);
    for (let i = 0; i < 256; i++) lines.push(`0,${time++},allocate,${at(2048 + 2 * i)},${2 * mib},0`);
    const dir = mkdtempSync(join(tmpdir(), 'vram-cli-'));
    try {
      const path = join(dir, 'fragmenting.csv');
      writeFileSync(path, `${lines.join('\n')}\n`);
      const { code, stdout, stderr } = await vramWith({}, 'replay', path, '-r', 'arena,pool');
      assert.equal(code, 1);
      assert.match(
        stdout,
        /^arena: FAILED at operation \d+ of 1792 \(line \d+\): allocate 2 MiB with .* live and .* held by the stack: the arena cannot grow .*arena exhausted/m,
      );
      assert.match(stdout, /^pool +1792 /m);
      assert.match(stderr, /^vram replay: arena: the arena cannot grow/m);
      assert.doesNotMatch(stderr, /VRAM_EMULATED_BYTES|too small/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('replays a multi-stream trace on every stack, with the HTML report too', async () => {
    // Frees on another stream than the allocation's: the binning and arena stacks used to record
    // events on the replay's destroyed streams when they were closed (a crash on a GPU).
    await inTempDir(async (dir) => {
      const html = join(dir, 'report.html');
      const { code, stdout, stderr } = await vram('replay', 'test/fixtures/traces/multi_stream.csv', '-r', 'all', '--html', html);
      assert.equal(code, 0, stderr);
      assert.match(stdout, /3 stream\(s\)/);
      for (const stack of ['cuda', 'async', 'pool', 'binning', 'arena']) assert.match(stdout, new RegExp(`^${stack}( \\(model\\))? +19 `, 'm'));
      assert.match(readFileSync(html, 'utf8'), /window\.vramReport/);
    });
  });

  it('--html naming a folder, a missing folder or the trace itself is a one-line usage error naming the flag, before any replay', async () => {
    await inTempDir(async (dir) => {
      const input = join(dir, 'trace.csv');
      copyFileSync('test/fixtures/traces/multi_stream.csv', input);
      const before = readFileSync(input, 'utf8');
      const cases: [string, RegExp][] = [
        [dir, /^vram replay: --html .*: a folder, not a file/],
        [join(dir, 'missing', 'r.html'), /^vram replay: --html .*: the folder .*missing does not exist/],
        [join(input, 'r.html'), /^vram replay: --html .*: .*trace\.csv is not a folder/],
        [input, /^vram replay: --html .*: the input file .*; the report would replace it/],
        // The same file by another name: compared as files, not as strings.
        [join(dir, '.', 'trace.csv'), /the input file/],
        [join(dir, 'missing', '..', 'trace.csv'), /the input file|does not exist/],
      ];
      for (const [html, message] of cases) {
        const { code, stdout, stderr } = await vram('replay', input, '-r', 'pool', '--html', html);
        assert.equal(code, 2, `--html ${html}: ${stderr}`);
        assert.match(stderr, message);
        assert.match(stderr, /; see 'vram replay --help'\n$/);
        assert.equal(stderr.split('\n').length, 2, 'one line');
        assert.equal(stdout, '', 'nothing replayed');
      }
      assert.equal(readFileSync(input, 'utf8'), before, 'the trace is untouched');
      const { code, stderr } = await vram('bench', '--only', 'alloc', '--html', dir);
      assert.equal(code, 2);
      assert.match(stderr, /^vram bench: --html .*: a folder, not a file/);
    });
  });

  it("a trace too large for any emulated device is refused in the trace's terms, not an internal option name", async () => {
    await inTempDir(async (dir) => {
      const path = join(dir, 'huge.csv');
      writeFileSync(path, `Thread,Time,Action,Pointer,Size,Stream\n0,0,allocate,0x1000,${2 ** 52},0\n`);
      const { code, stderr } = await vram('replay', path);
      assert.equal(code, 1);
      assert.match(
        stderr,
        /^vram replay: .*huge\.csv: peak live 4096 TiB needs an emulated device of 2 x peak live \+ 1 GiB, more than the 16 TiB one can have; /,
      );
      assert.doesNotMatch(stderr, /capacityBytes/);
      // Live bytes that no longer add up exactly are refused by the parser, naming the line.
      writeFileSync(path, `Thread,Time,Action,Pointer,Size,Stream\n0,0,allocate,0x1000,${2 ** 52},0\n0,1,allocate,0x${(2 ** 52).toString(16)},${2 ** 52},0\n`);
      const sum = await vram('replay', path);
      assert.equal(sum.code, 1);
      assert.match(sum.stderr, /huge\.csv:3: the live bytes pass 2\^53/);
    });
  });

  it('a trace that is a FIFO, a device or a folder is refused, and one with a byte-order mark is read', async () => {
    await inTempDir(async (dir) => {
      const bom = join(dir, 'bom.csv');
      writeFileSync(bom, `\ufeff${readFileSync('test/fixtures/traces/multi_stream.csv', 'utf8')}`);
      const read = await vram('replay', bom, '-r', 'pool');
      assert.equal(read.code, 0, read.stderr);
      for (const [path, kind] of [
        ['/dev/zero', 'a character device'],
        [dir, 'a directory'],
      ] as const) {
        const { code, stderr } = await vram('replay', path, '-r', 'pool');
        assert.equal(code, 1);
        assert.equal(stderr, `vram replay: ${path}: ${kind}, not a regular file\n`);
      }
    });
  });

  it('VRAM_EMULATED_BYTES that is not a size is refused in one line naming the variable', async () => {
    const { code, stderr } = await vramWith({ VRAM_BACKEND: 'emulated', VRAM_EMULATED_BYTES: 'lots' }, 'info');
    assert.equal(code, 1);
    assert.match(stderr, /^vram info: VRAM_EMULATED_BYTES must be .*got 'lots'\n$/);
  });
});

describe('vram usage', () => {
  for (const args of [[], ['frobnicate'], ['help', 'frobnicate']]) {
    it(`'vram ${args.join(' ')}' is a usage error: exit 2 and the list of commands`, async () => {
      const { code, stdout, stderr } = await vram(...args);
      assert.equal(code, 2, stderr);
      assert.equal(stdout, '');
      assert.match(stderr, /^vram: /);
      assert.match(stderr, /usage: vram <command>/);
    });
  }

  const commandErrors: [string[], RegExp][] = [
    [['info', '--bogus'], /^vram info: unknown option --bogus; /],
    [['info', '--jsno'], /^vram info: unknown option --jsno \(did you mean --json\?\); /],
    [['info', '--json=3'], /^vram info: --json takes no value; /],
    [['info', 'extra'], /^vram info: takes no arguments besides its options, got 'extra'; /],
    [['bench', '--only', 'nope'], /--only takes transfers, alloc, allocators, objects, kernels; got 'nope'/],
    [['bench', '--sizes', '12Q'], /--sizes must be .*got '12Q'/],
    [['bench', '--sizes'], /--sizes/],
    [['bench', '--only', ''], /--only takes .*got nothing/],
    [['bench', '--sizes', '1.5'], /--sizes must come to a whole number of bytes; got '1.5'/],
    [['bench', '--json', 'extra'], /^vram bench: takes no arguments besides its options, got 'extra'; /],
    [['replay', 'test/fixtures/traces/resnet50_train.csv', '-r', ''], /--resource needs a name/],
    [['replay', 'test/fixtures/traces/resnet50_train.csv', '-r'], /^vram replay: --resource needs a value; /],
    [['replay', 'test/fixtures/traces/resnet50_train.csv', '--repeat'], /^vram replay: --repeat needs a value; /],
    [
      ['replay', 'test/fixtures/traces/resnet50_train.csv', '-r', '--json'],
      /^vram replay: --resource needs a value; for one that starts with '-', write --resource=<value>; /,
    ],
    [['bench', '--repeats', '0'], /--repeats must be a whole number >= 1, got '0'/],
    [['bench', '--repeats', '-1'], /--repeats must be a whole number >= 1, got '-1'/],
    [['bench', '--repeats', '2.5'], /--repeats must be a whole number >= 1, got '2.5'/],
    [['replay'], /missing the log file/],
    [['replay', 'test/fixtures/traces/nope.csv'], /no such file/],
    [['replay', 'test/fixtures/traces/resnet50_train.csv', '--device', '3'], /--device 3: this machine has 1 device/],
    [['replay', 'test/fixtures/traces/resnet50_train.csv', '--device', '-1'], /--device must be a device ordinal.*'-1'/],
    [['replay', 'test/fixtures/traces/resnet50_train.csv', '--repeat', '-1'], /--repeat must be a whole number from 1 to 1000, got '-1'/],
    [['replay', 'test/fixtures/traces/resnet50_train.csv', '-r', 'nope'], /unknown resource 'nope'/],
    [['replay', 'test/fixtures/traces/resnet50_train.csv', '--frob'], /^vram replay: unknown option --frob; see 'vram replay --help'$/],
  ];
  for (const [args, message] of commandErrors) {
    it(`'vram ${args.join(' ')}' is a one-line usage error naming the command's help, exit 2`, async () => {
      const { code, stdout, stderr } = await vram(...args);
      assert.equal(code, 2, stderr);
      assert.equal(stdout, '');
      const [first, ...rest] = stderr.trimEnd().split('\n');
      assert.match(first!, new RegExp(`^vram ${args[0]}: `));
      assert.match(first!, message);
      // Not node's words: 'Unknown option', 'argument missing', 'is ambiguous', 'Unexpected argument'.
      assert.doesNotMatch(stderr, /ambiguous|Unknown|Unexpected|argument missing|does not take an argument|\n\s+at /);
      assert.ok(first!.endsWith(`; see 'vram ${args[0]} --help'`), first);
      assert.deepEqual(rest, [], 'one line');
    });
  }

  for (const command of ['info', 'bench', 'replay']) {
    it(`'vram ${command} --help', '-h' and 'vram help ${command}' print the same help and exit 0`, async () => {
      const outputs = await Promise.all([vram(command, '--help'), vram(command, '-h'), vram('help', command)]);
      for (const { code, stdout, stderr } of outputs) {
        assert.equal(code, 0, stderr);
        assert.equal(stderr, '');
        assert.equal(stdout, outputs[0]!.stdout);
      }
      const text = outputs[0]!.stdout;
      assert.match(text, new RegExp(`^usage: vram ${command} `));
      assert.match(text, /^options:$/m);
      assert.match(text, /--help, -h/);
      assert.match(text, /^environment:$/m);
      assert.match(text, /VRAM_BACKEND/);
    });
  }

  it('help lists every command and every VRAM_* variable from the environment table', async () => {
    for (const args of [['help'], ['--help'], ['-h']]) {
      const { code, stdout } = await vram(...args);
      assert.equal(code, 0);
      for (const command of ['info', 'bench', 'replay']) assert.match(stdout, new RegExp(`^  ${command} `, 'm'));
      for (const v of ENVIRONMENT) assert.match(stdout, new RegExp(`^  ${v.name} `, 'm'), v.name);
    }
  });

  it('help --help prints the main help, version --help says what version does (exit 0); version refuses arguments', async () => {
    for (const args of [
      ['help', '--help'],
      ['help', '-h'],
      ['--help', '--help'],
    ]) {
      const { code, stdout } = await vram(...args);
      assert.equal(code, 0, args.join(' '));
      assert.match(stdout, /usage: vram <command>/);
    }
    const pkg = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string };
    for (const args of [
      ['version', '--help'],
      ['--version', '-h'],
    ]) {
      const { code, stdout } = await vram(...args);
      assert.equal(code, 0, args.join(' '));
      assert.match(stdout, /^usage: vram version/);
      assert.ok(!stdout.includes(pkg.version), 'help, not the version');
    }
    const extra = await vram('version', 'now');
    assert.equal(extra.code, 2);
    assert.match(extra.stderr, /takes no arguments, got 'now'/);
  });

  it('help and --version exit 0', async () => {
    const help = await vram('help');
    assert.equal(help.code, 0);
    assert.match(help.stdout, /usage: vram <command>/);
    const version = await vram('--version');
    assert.equal(version.code, 0);
    const pkg = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string };
    assert.equal(version.stdout.trim(), pkg.version);
  });
});

describe('cli helpers', () => {
  it('reads an input file up to its cap, counting what it read (a /proc file says it holds 0 bytes)', async () => {
    await inTempDir(async (dir) => {
      const path = join(dir, 'log.csv');
      writeFileSync(path, 'x'.repeat(100));
      assert.equal(readTextFile(path, 100).length, 100);
      assert.throws(
        () => readTextFile(path, 99),
        (error: unknown) => error instanceof InputFileError && /100 bytes, more than the 99/.test(error.message),
      );
      if (existsSync('/proc/self/status')) assert.throws(() => readTextFile('/proc/self/status', 10), /more than the 10 bytes this reads/);
      writeFileSync(path, Buffer.from([0x54, 0xff, 0x0a]));
      assert.throws(() => readTextFile(path), /not UTF-8 text/);
    });
  });

  it('parses byte sizes in binary units, one way for every flag and variable', () => {
    assert.equal(parseSize('64K', 'x'), 65536);
    assert.equal(parseSize('256MiB', 'x'), 256 << 20);
    assert.equal(parseSize('512M', 'x'), 512 << 20);
    assert.equal(parseSize('16G', 'x'), 16 * 1024 ** 3);
    assert.throws(() => parseSize('16gb', 'x'), /'16gb' is ambiguous/);
    assert.equal(parseSize('2T', 'x'), 2 * 1024 ** 4);
    assert.equal(parseSize('1.5G', 'x'), 1.5 * 1024 ** 3);
    assert.equal(parseSize(' 4096 ', 'x'), 4096);
    assert.equal(parseSize('4096B', 'x'), 4096);
    for (const bad of ['12Q', '0', '0K', '', 'G', '-1', '1e3', '1.5', '0x10', '1 G B', '1P']) {
      assert.throws(
        () => parseSize(bad, 'VRAM_X'),
        (e: unknown) => e instanceof RangeError && /^VRAM_X .*'/.test(e.message) && !e.message.includes('\n'),
        bad,
      );
    }
    assert.throws(() => parseSize('99999999T', 'x'), RangeError);
    assert.throws(() => parseSize(16 as unknown as string, 'x'), TypeError);
    assert.equal(formatBytes(256), '256 B');
    assert.equal(formatBytes(64 << 20), '64 MiB');
    assert.equal(formatBytes(1536), '1.50 KiB');
    // One formatBytes for the CLI, messages and reports: a difference keeps its sign, a fraction of a byte is not padded.
    assert.equal(formatBytes(-2048), '-2 KiB');
    assert.equal(formatBytes(100.5 * 1024), '101 KiB');
    assert.equal(formatBytes(12.25 * 1024 ** 2), '12.3 MiB');
  });

  it("the kernels tables say what their columns count (a launch row's size is its argument bytes)", () => {
    const launch = { group: 'kernels', unit: 'ns/op', repeats: 1 } as const;
    const text = formatRows([
      { ...launch, name: 'kernel launch, empty kernel', size: 0, value: 1500 },
      { ...launch, name: 'kernel launch, 4 arguments', size: 24, value: 3000 },
      { group: 'kernels', unit: 'GB/s', repeats: 1, name: 'kernel read, mapped pinned', size: 16 << 20, value: 0.5 },
    ]);
    assert.match(text, /^kernel launch from TypeScript, ns per launch, median over batches\nargument bytes +0 B +24 B$/m);
    assert.match(text, /^kernel reads, GB\/s .*\nbytes read +16 MiB$/m);
    assert.doesNotMatch(text, /model/, 'no footnote without a model row');
  });

  it('progress without a terminal is one line a step', () => {
    let written = '';
    const stream = {
      isTTY: false,
      write: (text: string): boolean => {
        written += text;
        return true;
      },
    };
    const progress = new Progress(2, stream as unknown as NodeJS.WriteStream);
    progress.step('alloc: PoolResource 256 B');
    progress.step('alloc: PoolResource 1 MiB');
    progress.finish();
    assert.equal(written, '[1/2] alloc: PoolResource 256 B\n[2/2] alloc: PoolResource 1 MiB\n');
  });

  it('a progress label is not cut to nothing on a terminal that reports 0 columns', () => {
    let written = '';
    const stream = {
      isTTY: true,
      columns: 0,
      write: (text: string): boolean => {
        written += text;
        return true;
      },
    };
    const progress = new Progress(18, stream as unknown as NodeJS.WriteStream);
    progress.step('transfers: driver pageable H2D 64 KiB');
    assert.match(written, /\[1\/18\] transfers: driver pageable H2D 64 KiB/);
  });

  it('aligns tables and takes medians', () => {
    assert.equal(
      formatTable(
        ['a', 'n'],
        [
          ['xy', '1'],
          ['z', '10'],
        ],
        ['left', 'right'],
      ),
      'a    n\n--  --\nxy   1\nz   10',
    );
    assert.equal(median([3, 1, 2]), 2);
    assert.equal(median([4, 1, 2, 3]), 2.5);
  });

  it('the random-allocations PRNG is seeded and reproducible', () => {
    const a = mulberry32(42);
    const b = mulberry32(42);
    for (let i = 0; i < 100; i++) {
      const x = a();
      assert.equal(x, b());
      assert.ok(x >= 0 && x < 1);
    }
  });
});
