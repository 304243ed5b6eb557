/**
 * What `npm pack` would publish (`npm pack --dry-run --json`), checked file by file: no JavaScript names a source
 * map the tarball lacks (bundlers warn once per such file), no install-time script (npm 11 lists a package with a
 * `prepare` among every consumer's unapproved install scripts: vram builds in `prepack`), and the files the
 * package's own text names (the snapshot schema, which `vram help` cites) are in it.
 *
 * Needs the build (`npm test` builds first) and npm; skips if npm is absent.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const root = path.resolve(fileURLToPath(new URL('../../../', import.meta.url)));
const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';

/** What `npm pack --dry-run --json` says of the tarball it would write. */
interface DryRun {
  readonly files: readonly { readonly path: string }[];
}

/** The packed paths, or the reason npm cannot list them here. */
function packedFiles(): Set<string> | string {
  try {
    // --ignore-scripts: `prepack` would rebuild dist/ under the other test files running from it.
    const out = execFileSync(npm, ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: root, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
    const [pack] = JSON.parse(out) as DryRun[];
    return new Set((pack?.files ?? []).map((f) => f.path));
  } catch (error) {
    return `npm pack --dry-run failed: ${(error as Error).message.split('\n')[0] ?? ''}`;
  }
}

const packed = packedFiles();
const skip = typeof packed === 'string' ? packed : undefined;
const files = typeof packed === 'string' ? new Set<string>() : packed;

test('no shipped file names a source map the tarball lacks', { skip }, () => {
  const scripts = [...files].filter((f) => /\.(c|m)?js$/.test(f) || f.endsWith('.d.ts'));
  assert.ok(scripts.length > 100, `only ${scripts.length} JavaScript and declaration files packed: is dist/ built?`);
  const dangling: string[] = [];
  for (const file of scripts) {
    const text = readFileSync(path.join(root, file), 'utf8');
    for (const match of text.matchAll(/^\/\/# sourceMappingURL=(\S+)\s*$/gm)) {
      const map = path.posix.join(path.posix.dirname(file), match[1]!);
      if (!files.has(map)) dangling.push(`${file} -> ${map}`);
    }
  }
  assert.deepEqual(dangling, [], 'map comments whose map is not in the tarball');
});

test('the package runs no script when a consumer installs it', { skip }, () => {
  const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { scripts?: Record<string, string> };
  const scripts = pkg.scripts ?? {};
  for (const hook of ['preinstall', 'install', 'postinstall', 'prepare']) {
    assert.equal(scripts[hook], undefined, `package.json has a "${hook}" script, which runs in every consumer's install`);
  }
  // The build moved to prepack, so `npm pack` and `npm publish` still build what they pack.
  assert.match(scripts['prepack'] ?? '', /\btsc\b/, 'package.json "prepack" builds the package');
  assert.match(scripts['test'] ?? '', /^npm run build && /, '`npm test` builds first (npm ci no longer does)');
});

test("the tarball holds every file the package's help and README name", { skip }, () => {
  for (const required of ['docs/snapshot-schema.json', 'README.md', 'CHANGELOG.md', 'LICENSE', 'bin/vram.js', 'dist/src/cli/main.js']) {
    assert.ok(files.has(required), `the tarball lacks ${required}`);
  }
  const help = readFileSync(path.join(root, 'dist', 'src', 'environment.js'), 'utf8');
  assert.match(help, /docs\/snapshot-schema\.json/, 'the help still names the schema (else this check is moot)');
  assert.deepEqual(
    [...files].filter((f) => f.endsWith('.map')),
    [],
    'maps shipped without their sources',
  );
});

test('every README link works from node_modules/vram/README.md', { skip }, () => {
  // Relative links must name a shipped file; links into the repository are absolute (package.json
  // "repository") and must name a file that exists here.
  const readme = readFileSync(path.join(root, 'README.md'), 'utf8');
  const links = [...readme.matchAll(/!?\[[^\]]*\]\(([^)\s]+)\)/g)].map((m) => m[1]!);
  assert.ok(links.length >= 10, `only ${links.length} links found: has the README's link syntax changed?`);
  const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { repository: { url: string } };
  const slug = /github\.com\/([\w.-]+\/[\w.-]+?)(?:\.git)?$/.exec(pkg.repository.url)?.[1];
  assert.ok(slug, `package.json "repository" is not a GitHub URL: ${pkg.repository.url}`);
  const escaped = slug.replace(/[.]/g, '\\.');
  const repository = new RegExp(`^https://(?:github\\.com/${escaped}/blob/main|raw\\.githubusercontent\\.com/${escaped}/main)/([^#?]+)`);
  const broken: string[] = [];
  for (const link of links) {
    if (link.startsWith('#')) continue;
    const inRepository = repository.exec(link);
    if (inRepository) {
      if (!existsSync(path.join(root, inRepository[1]!))) broken.push(`${link} (no ${inRepository[1]} in the repository)`);
    } else if (!/^https?:\/\//.test(link) && !files.has(link.replace(/[#?].*$/, ''))) {
      broken.push(`${link} (relative, and not in the tarball)`);
    }
  }
  assert.deepEqual(broken, [], 'README links that break in node_modules/vram');
});
