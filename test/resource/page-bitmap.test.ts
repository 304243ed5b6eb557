/** PageBitmap: the mapped-page bitmap of a virtual-memory pool, pure arithmetic checked against a plain array. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { PageBitmap } from '../../src/resource/suballoc/kit/page-bitmap.js';

describe('PageBitmap', () => {
  it('agrees with an array of booleans on every query, across word boundaries', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 200 }),
        fc.array(fc.tuple(fc.boolean(), fc.nat()), { maxLength: 120 }),
        fc.array(fc.tuple(fc.nat(), fc.nat()), { minLength: 1, maxLength: 20 }),
        (pages, edits, queries) => {
          const b = new PageBitmap(pages);
          const a = new Array<boolean>(pages).fill(false);
          for (const [on, x] of edits) {
            const p = x % pages;
            if (on) b.set(p);
            else b.clear(p);
            a[p] = on;
          }
          for (let p = 0; p < pages; p++) {
            assert.equal(b.has(p), a[p]);
            assert.equal(
              b.wordEmpty(p),
              a.slice(p & ~31, (p & ~31) + 32).every((v) => !v),
            );
          }
          for (const [x, y] of queries) {
            const p0 = Math.min(x % pages, y % pages);
            const p1 = Math.max(x % pages, y % pages);
            const range = a.slice(p0, p1 + 1);
            assert.equal(
              b.all(p0, p1),
              range.every((v) => v),
              `all(${p0}, ${p1})`,
            );
            assert.equal(b.missing(p0, p1), range.filter((v) => !v).length, `missing(${p0}, ${p1})`);
            const mapped = range.indexOf(true);
            const unmapped = range.indexOf(false);
            assert.equal(b.next(p0, p1, 0), mapped < 0 ? p1 + 1 : p0 + mapped, `next mapped from ${p0}`);
            assert.equal(b.next(p0, p1, -1), unmapped < 0 ? p1 + 1 : p0 + unmapped, `next unmapped from ${p0}`);
          }
        },
      ),
      { numRuns: 300 },
    );
  });

  it('sees a whole word of mapped pages as mapped (the -1 word)', () => {
    const b = new PageBitmap(96);
    for (let p = 0; p < 96; p++) b.set(p);
    assert.ok(b.all(0, 95));
    assert.equal(b.next(0, 95, -1), 96);
    b.clear(64);
    assert.ok(!b.all(0, 95));
    assert.ok(b.all(0, 63));
    assert.equal(b.next(3, 95, -1), 64);
    assert.equal(b.missing(0, 95), 1);
  });
});
