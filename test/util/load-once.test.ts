/** loadOnce: one load per process, success or failure kept. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { loadOnce } from '../../src/util/load-once.js';

test('loadOnce runs the load once and returns the same value after', () => {
  let runs = 0;
  const load = loadOnce(() => ({ run: ++runs }));
  const first = load();
  assert.equal(load(), first);
  assert.equal(runs, 1);
});

test('loadOnce keeps a failure: the same error again, the load not run again', () => {
  let runs = 0;
  const load = loadOnce(() => {
    runs++;
    throw new Error('no library');
  });
  let kept: unknown;
  assert.throws(
    () => load(),
    (e) => {
      kept = e;
      return e instanceof Error && e.message === 'no library';
    },
  );
  assert.throws(
    () => load(),
    (e) => e === kept,
  );
  assert.equal(runs, 1);
});

test('loadOnce makes what was thrown an Error: by default from its text, or as asError says', () => {
  const plain = loadOnce(() => {
    throw 'gone';
  });
  assert.throws(
    () => plain(),
    (e) => e instanceof Error && e.message === 'gone',
  );
  class Wrapped extends Error {}
  const wrapped = loadOnce(
    () => {
      throw new RangeError('inner');
    },
    (thrown) => new Wrapped(`wrapped: ${(thrown as Error).message}`),
  );
  assert.throws(
    () => wrapped(),
    (e) => e instanceof Wrapped && e.message === 'wrapped: inner',
  );
});
