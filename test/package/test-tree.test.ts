/**
 * The test tree (docs/architecture.md, "The test tree"): every test file sits one folder below test/, where the
 * scripts' globs (`dist/test/*\/*.test.js`: Node 20's `--test` takes no `**`) find it, and every file the
 * allocator-sensitive list (test/allocator-sensitive.json, run by `npm run test:allocators`) names exists, and
 * every layer's folder is named after the src/ folder or file it tests.
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const root = path.resolve(fileURLToPath(new URL('../../../', import.meta.url)));

/** Every `*.test.ts` under test/, as a path from the repository's root. */
function testFiles(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(path.join(root, dir), { withFileTypes: true })) {
    const rel = `${dir}/${entry.name}`;
    if (entry.isDirectory()) out.push(...testFiles(rel));
    else if (entry.name.endsWith('.test.ts')) out.push(rel);
  }
  return out;
}

test('every test file is one folder below test/, where `npm test` finds it', () => {
  const files = testFiles('test');
  assert.ok(files.length > 50, `only ${files.length} test files found: is the tree read from the right place?`);
  assert.deepEqual(
    files.filter((f) => f.split('/').length !== 3),
    [],
    "test files the scripts' globs (dist/test/*/*.test.js) would not run",
  );
});

test('every file of the allocator-sensitive list exists', () => {
  const list = JSON.parse(readFileSync(path.join(root, 'test', 'allocator-sensitive.json'), 'utf8')) as { files: string[] };
  assert.ok(list.files.length > 0, 'the allocator-sensitive list is empty');
  assert.deepEqual(
    list.files.filter((f) => !f.endsWith('.test.ts') || !existsSync(path.join(root, f))),
    [],
    'test/allocator-sensitive.json names files that are not test files here',
  );
  const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
  assert.match(pkg.scripts['test:allocators'] ?? '', /scripts\/test-allocators\.mjs/, '`npm run test:allocators` runs the list');
});

test("every layer's test folder is named after its src/ folder or file", () => {
  const own = new Set(['package', 'composition', 'fixtures', 'fuzz']);
  const folders = readdirSync(path.join(root, 'test'), { withFileTypes: true })
    .filter((e) => e.isDirectory() && !own.has(e.name))
    .map((e) => e.name);
  assert.deepEqual(
    folders.filter((name) => !existsSync(path.join(root, 'src', name)) && !existsSync(path.join(root, 'src', `${name}.ts`))),
    [],
    'test folders that name no src/ folder or file (rename them with the layer they test)',
  );
});
