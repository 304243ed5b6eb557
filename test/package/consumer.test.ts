/**
 * vram as a consumer gets it: `npm pack` of this repository, the tarball unpacked into a temporary
 * project's node_modules/vram (its contents exactly, nothing from the working tree) beside a link to the
 * koffi this repository installed (no network), then test/fixtures/consumer compiled and run there:
 * a strict TypeScript file using the public API with `using`, compiled with tsc for Node 20 (target
 * ES2022, which lowers `using`), with lib ES2022 alone (vram's declarations bring `Disposable`) and with
 * `tsc --init`'s defaults, run on the emulated backend; and a CommonJS file that `require()`s the package.
 * Both import the root and every subpath of package.json "exports", each checked by a value it gives.
 * Then the README's first program, copied from README.md, in a project made as the README says: `npm init -y`,
 * `tsc --init`, the two settings the README names and no other edit; once with the pinned TypeScript over the
 * unpacked tarball, once with the newest TypeScript and the tarball installed by `npm install` from the registry
 * (skipped, saying so, where `npm view` cannot reach it).
 *
 * Needs the build (`npm test` builds first: the tarball packs dist/src) and npm; skips if npm is absent.
 */
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const run = promisify(execFile);
const root = path.resolve(fileURLToPath(new URL('../../../', import.meta.url)));
const fixture = path.join(root, 'test', 'fixtures', 'consumer');
const tsc = path.join(root, 'node_modules', 'typescript', 'bin', 'tsc');
const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';

/** Why the test cannot run here, or undefined when it can. */
function skipReason(): string | undefined {
  try {
    execFileSync(npm, ['--version'], { stdio: 'ignore' });
  } catch {
    return 'npm is not available on PATH';
  }
  return undefined;
}

/** One file of `npm pack --json`'s listing. */
interface PackedFile {
  readonly path: string;
}

/** What `npm pack --json` says of one tarball. */
interface PackResult {
  readonly filename: string;
  readonly files: readonly PackedFile[];
}

/**
 * Runs a command and returns its stdout; a failure carries the command's output in the message.
 * @param command The executable.
 * @param args Its arguments.
 * @param cwd Where it runs.
 * @param env Variables added to this process's environment.
 * @returns Stdout and stderr.
 */
async function exec(command: string, args: readonly string[], cwd: string, env: Record<string, string> = {}): Promise<{ stdout: string; stderr: string }> {
  try {
    return await run(command, args, { cwd, env: { ...process.env, ...env }, maxBuffer: 16 << 20 });
  } catch (error) {
    const e = error as { stdout?: string; stderr?: string; message: string };
    throw new Error(`${path.basename(command)} ${args.join(' ')} failed in ${cwd}: ${e.message}\n${e.stdout ?? ''}\n${e.stderr ?? ''}`);
  }
}

/**
 * What the README's "Install and first program" tells a user to write: the program (its first TypeScript block,
 * word for word) and the two settings it names, `"type": "..."` (package.json) and `"target": "..."` (tsconfig.json).
 */
function readmeFirstProgram(): { program: string; type: string; target: string } {
  const readme = readFileSync(path.join(root, 'README.md'), 'utf8');
  const from = readme.indexOf('## Install and first program');
  const section = readme.slice(from, readme.indexOf('\n## ', from + 1));
  const start = section.indexOf('```ts\n');
  assert.ok(start >= 0, 'README.md: no ```ts block in "Install and first program"');
  const type = /`"type": "(\w+)"`/.exec(section)?.[1];
  const target = /`"target": "(\w+)"`/.exec(section)?.[1];
  assert.ok(type && target, 'README.md: "Install and first program" names no `"type": ...` or `"target": ...` setting');
  return { program: section.slice(start + 6, section.indexOf('```\n', start + 6)), type, target };
}

/**
 * A user's project as the README's "Install and first program" makes it: `npm init -y` and `tsc --init`
 * (both as they come), the two settings the README names (`"type": "module"`, `"target": "es2022"`) and nothing else,
 * the first program as index.ts; then `tsc`, and the program run. Checks that the fresh defaults are what the
 * README says they are (so the two settings are still the ones needed).
 * @param dir The project folder, with vram in node_modules (or `install` to put it there).
 * @param tsc The TypeScript compiler's bin/tsc.
 * @param install Runs after `npm init -y`: installs vram (and TypeScript) into the project.
 * @returns What the program printed.
 */
async function readmeProject(dir: string, tsc: () => string, install: () => Promise<unknown>): Promise<{ stdout: string; stderr: string }> {
  const readme = readmeFirstProgram();
  await exec(npm, ['init', '-y'], dir);
  const fresh = JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8')) as { type?: string };
  assert.notEqual(fresh.type, readme.type, `\`npm init -y\` now writes "type": "${readme.type}": the README need not ask for it`);
  await install();
  await exec(npm, ['pkg', 'set', `type=${readme.type}`], dir);
  await exec(process.execPath, [tsc(), '--init'], dir);
  const config = path.join(dir, 'tsconfig.json');
  const text = readFileSync(config, 'utf8');
  const targets = [...text.matchAll(/^\s*"target":\s*"([^"]*)"/gm)].map((m) => m[1]!.toLowerCase());
  assert.equal(targets.length, 1, `tsc --init wrote ${targets.length} "target" settings`);
  assert.notEqual(targets[0], readme.target.toLowerCase(), `tsc --init now writes "target": "${targets[0]}": the README need not ask for it`);
  writeFileSync(config, text.replace(/^(\s*"target":\s*)"[^"]*"/m, `$1"${readme.target}"`));
  writeFileSync(path.join(dir, 'index.ts'), readme.program);
  await exec(process.execPath, [tsc(), '-p', '.'], dir);
  return exec(process.execPath, ['index.js'], dir, { VRAM_BACKEND: 'emulated' });
}

test('the packed tarball installs, type-checks and runs in a consumer project', { skip: skipReason(), timeout: 120_000 }, async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'vram-consumer-'));
  try {
    // --ignore-scripts: `prepack` would rebuild; the suite runs on the build it just made.
    const packed = await exec(npm, ['pack', '--json', '--ignore-scripts', '--pack-destination', dir], root);
    const [pack] = JSON.parse(packed.stdout) as PackResult[];
    assert.ok(pack, 'npm pack reported no tarball');
    const files = new Set(pack.files.map((f) => f.path));
    const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { exports: Record<string, { types: string; default: string }> };
    const entries = Object.values(pkg.exports).flatMap((e) => [e.types, e.default].map((f) => f.replace(/^\.\//, '')));
    for (const required of ['LICENSE', 'CHANGELOG.md', 'README.md', 'package.json', 'bin/vram.js', 'dist/src/cli/main.js', ...entries]) {
      assert.ok(files.has(required), `the tarball lacks ${required}`);
    }
    // A source map is only useful with the source it names; vram ships neither (tsconfig.json "sourceMap").
    const maps = [...files].filter((f) => f.endsWith('.map'));
    assert.deepEqual(maps, [], 'source maps in the tarball, whose src/ is not shipped');
    assert.deepEqual(
      [...files].filter((f) => f.startsWith('dist/test/') || f.startsWith('src/')),
      [],
      'tests or sources in the tarball',
    );

    // The project: the fixture, the tarball's contents as node_modules/vram, koffi linked from here.
    const project = path.join(dir, 'project');
    cpSync(fixture, project, { recursive: true });
    const vram = path.join(project, 'node_modules', 'vram');
    mkdirSync(vram, { recursive: true });
    await exec('tar', ['-xzf', path.join(dir, pack.filename), '-C', vram, '--strip-components=1'], dir);
    assert.ok(existsSync(path.join(vram, 'dist', 'src', 'index.js')), 'the tarball did not unpack');
    for (const dependency of ['koffi', 'uplot']) {
      symlinkSync(path.join(root, 'node_modules', dependency), path.join(project, 'node_modules', dependency), 'junction');
    }

    // The three compilations are independent: run them together (each is a few seconds of tsc).
    const init = path.join(dir, 'init');
    mkdirSync(init);
    for (const file of ['package.json', 'consumer.ts']) cpSync(path.join(fixture, file), path.join(init, file));
    symlinkSync(path.join(project, 'node_modules'), path.join(init, 'node_modules'), 'junction');
    // The README's first program in a fresh project, with the pinned TypeScript (the test below: the newest).
    const first = path.join(dir, 'first');
    mkdirSync(first);
    const [firstRun] = await Promise.all([
      readmeProject(
        first,
        () => tsc,
        async () => symlinkSync(path.join(project, 'node_modules'), path.join(first, 'node_modules'), 'junction'),
      ),
      exec(process.execPath, [tsc, '-p', 'tsconfig.build.json'], project),
      exec(process.execPath, [tsc, '-p', 'tsconfig.bare.json'], project),
      // `tsc --init` writes today's defaults (target esnext, types [], strict, ...); the declarations
      // must type-check there too. Not run: esnext keeps `using`, which Node 20 and 22 cannot parse.
      exec(process.execPath, [tsc, '--init'], init).then(() => exec(process.execPath, [tsc, '-p', 'tsconfig.json', '--noEmit'], init)),
    ]);

    assert.equal(firstRun.stdout, 'emulated: sum 10\n', "the README's first program, with the pinned TypeScript");
    assert.equal(firstRun.stderr, '', "the README's first program printed warnings");

    const env = { VRAM_BACKEND: 'emulated' };
    const [esm, cjs] = await Promise.all([
      exec(process.execPath, [path.join('out', 'consumer.js')], project, env),
      exec(process.execPath, ['require.cjs'], project, env),
    ]);
    const result = JSON.parse(esm.stdout) as Record<string, unknown>;
    assert.equal(result['backend'], 'emulated');
    assert.equal(result['roundTrip'], 1.5);
    assert.equal(result['async'], 7);
    assert.deepEqual(result['shape'], [2]);
    assert.equal(result['allocations'], 10);
    assert.equal(result['logLines'], 21, "RMM's header, then one line per allocation and per free");
    assert.equal(result['outOfMemory'], true);
    assert.equal(esm.stderr, '', 'the consumer printed warnings');
    // Each of package.json's subpaths, from ESM (compiled TypeScript) and from require().
    assert.deepEqual(result['subpaths'], {
      resources: 'function',
      buffers: true,
      arrays: true,
      kernels: 5,
      interop: [3],
      ipc: 'legacy',
      observe: 'number',
      replay: 2,
      backend: true,
    });
    assert.deepEqual(JSON.parse(cjs.stdout), {
      backend: 'emulated',
      value: 3,
      subpaths: {
        resources: 'function',
        buffers: 'function',
        arrays: 0x3c00,
        kernels: 'function',
        interop: 'function',
        ipc: 'function',
        observe: 'function',
        replay: 0,
        backend: 'function',
      },
    });
    assert.equal(cjs.stderr, '', 'require(esm) printed warnings');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

/** The newest TypeScript's version on the registry, or why it cannot be had (CI and the GPU machine may be offline). */
function newestTypeScript(): { version: string } | { skip: string } {
  const reason = skipReason();
  if (reason) return { skip: reason };
  try {
    const version = execFileSync(npm, ['view', 'typescript', 'version', '--fetch-retries=0'], {
      encoding: 'utf8',
      timeout: 20_000,
      stdio: ['ignore', 'pipe', 'ignore'],
    }).trim();
    return /^\d+\.\d+\.\d+$/.test(version) ? { version } : { skip: `npm view typescript version gave '${version}'` };
  } catch {
    return { skip: 'the npm registry is not reachable (npm view typescript version failed): the newest TypeScript cannot be installed' };
  }
}

const newest = newestTypeScript();

test(
  "the README's first program in a fresh project with the newest TypeScript, installed as a user does",
  { skip: 'skip' in newest ? newest.skip : undefined, timeout: 180_000 },
  async () => {
    const version = 'version' in newest ? newest.version : '';
    const dir = mkdtempSync(path.join(tmpdir(), 'vram-newest-'));
    try {
      const packed = await exec(npm, ['pack', '--json', '--ignore-scripts', '--pack-destination', dir], root);
      const [pack] = JSON.parse(packed.stdout) as PackResult[];
      assert.ok(pack, 'npm pack reported no tarball');
      const project = path.join(dir, 'project');
      mkdirSync(project);
      let installed = { stdout: '', stderr: '' };
      const run = await readmeProject(
        project,
        () => path.join(project, 'node_modules', 'typescript', 'bin', 'tsc'),
        async () => {
          // The tarball and its dependencies from the registry (or npm's cache), as `npm install vram` would.
          installed = await exec(
            npm,
            ['install', '--no-audit', '--no-fund', '--prefer-offline', path.join(dir, pack.filename), `typescript@${version}`],
            project,
          );
        },
      );
      assert.doesNotMatch(installed.stdout + installed.stderr, /\bvram@/, 'npm lists vram among install scripts to approve');
      const typescript = JSON.parse(readFileSync(path.join(project, 'node_modules', 'typescript', 'package.json'), 'utf8')) as { version: string };
      assert.equal(typescript.version, version);
      assert.equal(run.stdout, 'emulated: sum 10\n', `the README's first program, with TypeScript ${version}`);
      assert.equal(run.stderr, '', "the README's first program printed warnings");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
);
