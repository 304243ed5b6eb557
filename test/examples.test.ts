/** The README's API tour (examples/tour.ts) runs to completion on the selected backend. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

test('examples/tour runs', () => {
  const tour = fileURLToPath(new URL('../examples/tour.js', import.meta.url));
  const output = execFileSync(process.execPath, [tour], { encoding: 'utf8', env: process.env });
  assert.match(output, /pool statistics:/);
  assert.match(output, /peak live 3001000 B/);
});
