/**
 * The `VRAM_*` variables: every one read through its reader (src/util/environment.ts) at first
 * use, never at import, with one message style; the table `vram info` prints has a reader for each
 * row; and no module of src/ reads a variable around the parser.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import { ENVIRONMENT, ENVIRONMENT_READERS, environmentSettings } from '../../src/environment.js';
import { defaultCopyThreads } from '../../src/buffer/transfer/copy-threads.js';
import { wholeNumberFrom } from '../../src/util/environment.js';

const indexUrl = new URL('../../src/index.js', import.meta.url).href;
const buffersUrl = new URL('../../src/public/buffers.js', import.meta.url).href;

/** Runs `script` (an ES module) in a fresh node with `env` added, every other VRAM_* variable removed. */
function child(script: string, env: Readonly<Record<string, string>>): { status: number | null; stdout: string; stderr: string } {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('VRAM_')));
  const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
    encoding: 'utf8',
    timeout: 60_000,
    env: { ...base, VRAM_BACKEND: 'emulated', ...env },
  });
  return { status: run.status, stdout: run.stdout, stderr: run.stderr };
}

test("import 'vram' never throws for a bad variable; the first use that needs it does, naming it", () => {
  const script = `
    await import(${JSON.stringify(indexUrl)});
    const vram = await import(${JSON.stringify(buffersUrl)});
    try {
      vram.transferSettings().threads;
      console.log('accepted');
    } catch (error) {
      console.log(error.name + ': ' + error.message);
    }`;
  for (const bad of ['1000', 'abc', '-1', '0x4', '1e1', '4.0']) {
    const run = child(script, { VRAM_COPY_THREADS: bad });
    assert.equal(run.status, 0, `import with VRAM_COPY_THREADS=${bad}: ${run.stderr}`);
    assert.equal(run.stdout.trim(), `RangeError: VRAM_COPY_THREADS must be a whole number from 0 to 64, got '${bad}'`);
  }
  const good = child(script, { VRAM_COPY_THREADS: ' 3 ' });
  assert.equal(good.stdout.trim(), 'accepted', good.stderr);
});

test('whole numbers are decimal digits in range and nothing else (property)', () => {
  const parse = wholeNumberFrom(0, 64);
  fc.assert(
    fc.property(fc.string({ maxLength: 6 }), (text) => {
      const trimmed = text.trim();
      const decimal = /^\d+$/.test(trimmed) && Number(trimmed) <= 64;
      let value: number | undefined;
      try {
        value = defaultCopyThreads({ VRAM_COPY_THREADS: text });
      } catch (error) {
        assert.ok(error instanceof RangeError);
        assert.equal(error.message, `VRAM_COPY_THREADS must be a whole number from 0 to 64, got '${trimmed}'`);
      }
      if (trimmed === '') assert.ok(value !== undefined && value >= 1, 'blank is unset: the default');
      else if (decimal) assert.equal(value, Number(trimmed));
      else assert.equal(value, undefined, `'${text}' was accepted`);
    }),
  );
  assert.equal(parse('007', 'X'), 7);
  assert.throws(() => parse('65', 'X'), /^RangeError: X must be a whole number from 0 to 64, got '65'$/);
});

test('every variable in the table has its reader, and every reader is in the table', () => {
  assert.deepEqual([...ENVIRONMENT_READERS.keys()].sort(), ENVIRONMENT.map((v) => v.name).sort());
});

test('one message style: a refused value names the variable and quotes what it got; info reports it', () => {
  const bad: Readonly<Record<string, string>> = {
    VRAM_BACKEND: 'gpu',
    VRAM_CACHE_DIR: 'relative/cache',
    VRAM_EMULATED_BYTES: 'lots',
    VRAM_ALLOCATOR: 'turbo',
    VRAM_MEMORY_LIMIT: '-1',
    VRAM_MEMORY_FRACTION: '0x1',
    VRAM_COPY_THREADS: '0x4',
  };
  for (const [name, text] of Object.entries(bad)) {
    const reader = ENVIRONMENT_READERS.get(name);
    assert.ok(reader !== undefined, name);
    assert.throws(
      () => reader.read({ [name]: text }),
      (e: unknown) => e instanceof RangeError && e.message.startsWith(`${name} must `) && e.message.endsWith(`got '${text}'`),
      name,
    );
    const setting = environmentSettings({ [name]: text }).find((s) => s.name === name);
    assert.equal(setting?.value, text);
    assert.match(setting?.problem ?? '', new RegExp(`^${name} must `), name);
  }
  assert.ok(
    environmentSettings({}).every((s) => s.value === undefined && s.problem === undefined),
    'unset: no problem',
  );
});

test('no module of src/ reads a VRAM_* variable around its reader', () => {
  const root = fileURLToPath(new URL('../../../src/', import.meta.url));
  const offenders: string[] = [];
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (entry.name.endsWith('.ts') && path !== join(root, 'util', 'environment.ts')) {
        const text = readFileSync(path, 'utf8');
        // env.VRAM_X, env['VRAM_X'], env[SOME_NAME_CONSTANT]: the forms a direct read takes.
        for (const m of text.matchAll(/\benv(?:\.VRAM_\w+|\[\s*['"`]VRAM_|\[\s*[A-Z_]+\s*\])/g)) offenders.push(`${path}: ${m[0]}`);
      }
    }
  };
  walk(root);
  assert.deepEqual(offenders, []);
});
