/**
 * The README's API tour (examples/tour.ts) runs to completion on the selected backend, and the
 * README shows exactly that program (with the package's entry points in its imports).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const root = new URL('../../', import.meta.url);

test('examples/tour runs', () => {
  const tour = fileURLToPath(new URL('../examples/tour.js', import.meta.url));
  const output = execFileSync(process.execPath, [tour], { encoding: 'utf8', env: process.env });
  assert.match(output, /pool statistics:/);
  assert.match(output, /peak live 3001000 B/);
});

test('the README\'s tour is examples/tour.ts, word for word', () => {
  const readme = readFileSync(new URL('README.md', root), 'utf8');
  const source = readFileSync(new URL('examples/tour.ts', root), 'utf8');
  const section = readme.slice(readme.indexOf('## A tour of the API'));
  const shown = section.slice(section.indexOf('```ts\n') + 6, section.indexOf('```\n', section.indexOf('```ts\n') + 6));
  // The example imports the entry points' sources; the README imports the package: '../src/index.js' is
  // 'vram', '../src/public/kernels.js' is 'vram/kernels'.
  const program = source.slice(source.indexOf('import assert'))
    .replaceAll("from '../src/index.js';", "from 'vram';")
    .replace(/from '\.\.\/src\/public\/([\w-]+)\.js';/g, "from 'vram/$1';");
  assert.equal(shown, program, 'copy examples/tour.ts (from its first import, importing from \'vram\' and its subpaths) into the README');
});
