/**
 * The `vram` command as a user runs it: spawned as a child process on the emulated backend, with
 * its JSON output checked for shape, and usage errors checked to exit 2 with the usage text.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { median } from '../src/cli/bench/common.js';
import { mulberry32 } from '../src/util/random.js';
import { formatBytes, formatTable, parseBytes } from '../src/cli/format.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
const bin = fileURLToPath(new URL('../../bin/vram.js', import.meta.url));

interface Result {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs `vram ...args` on the emulated backend and resolves with its exit status and output. */
function vram(...args: string[]): Promise<Result> {
  return new Promise((resolve) => {
    execFile(process.execPath, [bin, ...args], {
      cwd: root,
      env: { ...process.env, VRAM_BACKEND: 'emulated' },
      maxBuffer: 16 << 20,
      timeout: 60_000,
    }, (error, stdout, stderr) => {
      const code = error === null ? 0 : typeof error.code === 'number' ? error.code : 1;
      resolve({ code, stdout, stderr });
    });
  });
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
      assert.ok(Number.isInteger(row.size) && (row.size as number) > 0);
      assert.ok(typeof row.value === 'number' && Number.isFinite(row.value) && row.value > 0, JSON.stringify(row));
      assert.ok(['GB/s', 'ns/pair', 'ns/op', 'ms'].includes(String(row.unit)));
      assert.ok(Number.isInteger(row.repeats) && (row.repeats as number) >= 1);
      if (row.group === 'transfers') assert.ok((row.size as number) < 256 << 20);
    }
    assert.deepEqual([...groups].sort(), ['alloc', 'allocators', 'transfers']);
    const names = new Set((report.rows as Record<string, unknown>[]).map((r) => r.name));
    for (const name of ['driver pageable H2D', 'staged pageable H2D', 'registered pageable D2H', 'async staged pageable D2H', 'pinned D2H', 'write-combined pinned H2D', 'D2D',
      'cuMemAllocAsync+cuMemFreeAsync', 'PoolResource', 'PoolResource random']) {
      assert.ok(names.has(name), name);
    }
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

  it('prints tables headed by the backend in text mode', async () => {
    const { code, stdout } = await vram('bench', '--only', 'alloc');
    assert.equal(code, 0);
    assert.match(stdout, /^backend:\s+emulated \(/m);
    assert.match(stdout, /cuMemAlloc\+cuMemFree/);
  });
});

describe('vram usage', () => {
  for (const args of [[], ['frobnicate'], ['info', '--bogus'], ['info', 'extra'], ['bench', '--only', 'nope'],
    ['bench', '--sizes', '12Q'], ['bench', '--repeats', '0']]) {
    it(`'vram ${args.join(' ')}' is a usage error: exit 2 and the usage text`, async () => {
      const { code, stdout, stderr } = await vram(...args);
      assert.equal(code, 2, stderr);
      assert.equal(stdout, '');
      assert.match(stderr, /^vram: /);
      assert.match(stderr, /usage: vram <command>/);
    });
  }

  it('help and --version exit 0', async () => {
    const help = await vram('help');
    assert.equal(help.code, 0);
    assert.match(help.stdout, /usage: vram <command>/);
    const version = await vram('--version');
    assert.equal(version.code, 0);
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
    assert.equal(version.stdout.trim(), pkg.version);
  });
});

describe('cli helpers', () => {
  it('parses and prints byte sizes in binary units', () => {
    assert.equal(parseBytes('64K'), 65536);
    assert.equal(parseBytes('256MiB'), 256 << 20);
    assert.equal(parseBytes('4096'), 4096);
    assert.throws(() => parseBytes('12Q'), RangeError);
    assert.throws(() => parseBytes('0'), RangeError);
    assert.equal(formatBytes(256), '256 B');
    assert.equal(formatBytes(64 << 20), '64 MiB');
    assert.equal(formatBytes(1536), '1.50 KiB');
  });

  it('aligns tables and takes medians', () => {
    assert.equal(formatTable(['a', 'n'], [['xy', '1'], ['z', '10']], ['left', 'right']), 'a    n\n--  --\nxy   1\nz   10');
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
