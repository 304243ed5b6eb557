/**
 * The README's API tour (examples/tour.ts) runs to completion on the selected backend, and the
 * README shows exactly that program (with the package's name in its import).
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
  const program = source.slice(source.indexOf('import assert')).replace("from '../src/index.js';", "from 'vram';");
  assert.equal(shown, program, 'copy examples/tour.ts (from its first import, importing from \'vram\') into the README');
});
