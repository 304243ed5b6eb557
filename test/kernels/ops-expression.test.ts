/**
 * The pure pieces of the built-in operations, without a device: the expression parser (C's
 * precedence, errors naming the column), the elementwise code generator (deterministic source,
 * the checks on names and components), the strided-index scheme (merging, offsets, spans), and
 * the float64-to-dtype conversions both backends share.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { dtypes } from '../../src/array/dtype.js';
import { elementwiseProgram, type ProgramOperand } from '../../src/kernels/ops/elementwise-program.js';
import {
  MAX_EXPRESSION_DEPTH,
  MAX_EXPRESSION_LENGTH,
  MAX_EXPRESSION_NESTING,
  parseExpression,
  parseStatements,
  type Expression,
} from '../../src/kernels/ops/expression.js';
import { layoutOffset, layoutSpan, mergeDimensions, packLayout } from '../../src/kernels/ops/kernel-layout.js';
import { kernelScalar } from '../../src/kernels/ops/scalar.js';

/** The tree as a fully parenthesised string, to check precedence and associativity. */
function show(e: Expression): string {
  switch (e.kind) {
    case 'number':
      return String(e.value);
    case 'name':
      return e.component === undefined ? e.name : `${e.name}.${e.component}`;
    case 'unary':
      return `(${e.op}${show(e.arg)})`;
    case 'binary':
      return `(${show(e.left)} ${e.op} ${show(e.right)})`;
    case 'conditional':
      return `(${show(e.test)} ? ${show(e.then)} : ${show(e.otherwise)})`;
    case 'call':
      return `${e.fn}(${e.args.map(show).join(', ')})`;
  }
}

test("the parser follows C's precedence and associativity", () => {
  const cases: [string, string][] = [
    ['a + b * c', '(a + (b * c))'],
    ['a - b - c', '((a - b) - c)'],
    ['a / b % c * d', '(((a / b) % c) * d)'],
    ['-a * b', '((-a) * b)'],
    ['!a && b || c', '(((!a) && b) || c)'],
    ['a < b == c > d', '((a < b) == (c > d))'],
    ['a ? b : c ? d : e', '(a ? b : (c ? d : e))'],
    ['a || b ? c + 1 : d', '((a || b) ? (c + 1) : d)'],
    ['fma(p.x, -q.y, 2.5e-3)', 'fma(p.x, (-q.y), 0.0025)'],
    ['(a + b) * .5', '((a + b) * 0.5)'],
    ['--a', '(-(-a))'],
  ];
  for (const [text, tree] of cases) assert.equal(show(parseExpression(text)), tree, text);
  const statements = parseStatements(' ; z = x ; ; q.w = 1;');
  assert.deepEqual(
    statements.map((s) => [s.target, s.component]),
    [
      ['z', undefined],
      ['q', 'w'],
    ],
  );
});

test('syntax errors name the column and point at it', () => {
  const column = (text: string, parse: (t: string) => unknown = parseStatements): number => {
    try {
      parse(text);
    } catch (error) {
      assert.ok(error instanceof SyntaxError, `${text}: ${String(error)}`);
      const m = /at column (\d+) of the expression\n {2}(.*)\n {2}( *)\^$/.exec(error.message);
      assert.ok(m !== null, error.message);
      assert.equal(m[2], text);
      assert.equal(m[3]!.length + 1, Number(m[1]));
      return Number(m[1]);
    }
    assert.fail(`${text} parsed`);
  };
  assert.equal(column('z = (x + y'), 11);
  assert.equal(column('z = x y'), 7);
  assert.equal(column('z x'), 3);
  assert.equal(column('= x'), 1);
  assert.equal(column('z = x.q'), 7);
  assert.equal(column('z = 2x'), 6);
  assert.equal(column('z = x @ y'), 7);
  assert.equal(column('z = 1e999'), 5);
  assert.equal(column('z = sqrt'), 5);
  assert.equal(column('z = nope(1)'), 5);
  assert.equal(column('z = max(1)'), 5);
  assert.equal(column('x + y )', parseExpression), 7);
  assert.equal(column('', parseExpression), 1);
  assert.throws(() => parseStatements(3 as never), TypeError);
});

test('nesting, depth and length are bounded: a SyntaxError naming the column instead of a stack overflow', () => {
  const refused =
    (column: number) =>
    (e: Error): boolean =>
      e instanceof SyntaxError && e.message.includes(`at column ${column} `);
  assert.throws(() => parseExpression('('.repeat(1000) + 'x' + ')'.repeat(1000)), refused(MAX_EXPRESSION_NESTING + 1));
  assert.throws(() => parseExpression('abs('.repeat(3000) + 'x' + ')'.repeat(3000)), refused(4 * MAX_EXPRESSION_NESTING + 1));
  assert.throws(() => parseExpression('-'.repeat(5000) + 'x'), refused(MAX_EXPRESSION_NESTING + 1));
  assert.throws(() => parseStatements(`z = ${Array(20000).fill('x').join('+')}`), /more than 1024 operations deep/);
  assert.throws(
    () => parseExpression('x' + '+1'.repeat(MAX_EXPRESSION_LENGTH)),
    (e: Error) => e instanceof SyntaxError && /column 65537/.test(e.message),
  );
  // Just inside the limits parses.
  parseExpression('('.repeat(MAX_EXPRESSION_NESTING - 1) + 'x' + ')'.repeat(MAX_EXPRESSION_NESTING - 1));
  parseExpression(Array(MAX_EXPRESSION_DEPTH).fill('x').join('+'));
});

test('the generated source does not depend on the order the names were given in, and names its parameters by position', () => {
  const f32 = (name: string): ProgramOperand => ({ name, kind: 'array', dtype: dtypes.float32 });
  const text = 'z = a * x + y';
  const one = elementwiseProgram(text, parseStatements(text), [f32('x'), f32('y'), f32('z'), { name: 'a', kind: 'scalar' }]);
  const two = elementwiseProgram(text, parseStatements(text), [{ name: 'a', kind: 'scalar' }, f32('z'), f32('y'), f32('x'), f32('unused')]);
  assert.equal(one.source, two.source);
  assert.deepEqual(
    one.arrays.map((a) => a.name),
    ['x', 'y', 'z'],
  );
  assert.deepEqual(one.scalars, ['a']);
  assert.equal(one.signature.length, 1 + 3 * 2 + 1);
  assert.match(one.source, /v2_0 = \(\(s0 \* v0_0\) \+ v1_0\);/);
  // Integer literals become doubles: 1 / 2 is 0.5, not C's 0.
  const half = elementwiseProgram('z = 1 / 2', parseStatements('z = 1 / 2'), [f32('z')]);
  assert.match(half.source, /\(1\.0 \/ 2\.0\)/);
});

test('names and components are checked against the dtypes, with the column', () => {
  const ops: ProgramOperand[] = [
    { name: 'x', kind: 'array', dtype: dtypes.float32 },
    { name: 'p', kind: 'array', dtype: dtypes.float3 },
    { name: 'h', kind: 'array', dtype: dtypes.half2 },
    { name: 's', kind: 'scalar' },
  ];
  const build = (text: string): unknown => elementwiseProgram(text, parseStatements(text), ops);
  assert.throws(() => build('x = p'), /p is a float3 array: use its components p.x, p.y, p.z at column 5/);
  assert.throws(() => build('x = h.z'), /h is a half2 array: its components are h.x, h.y/);
  assert.throws(() => build('x.x = 1'), /x is a float32 array: it has no component .x at column 1/);
  assert.throws(() => build('p = 1'), /use its components/);
  assert.throws(() => build('s = x'), /s is a scalar: only arrays can be assigned/);
  assert.throws(() => build('x = s.y'), /s is a scalar: it has no component/);
  assert.throws(
    () => build('x = k'),
    (e: Error) => e instanceof TypeError && /unknown name k; the arrays and scalars given are x, p, h, s at column 5/.test(e.message),
  );
  const ok = elementwiseProgram('p.z = h.x * s + x', parseStatements('p.z = h.x * s + x'), ops) as unknown as {
    arrays: { name: string; reads: readonly number[]; writes: readonly number[] }[];
  };
  assert.deepEqual(
    ok.arrays.map((a) => [a.name, a.reads, a.writes]),
    [
      ['h', [0], []],
      ['p', [], [2]],
      ['x', [0], []],
    ],
  );
});

test('merging dimensions: contiguous operands become one dimension, transposes do not merge, extent-1 dimensions go', () => {
  assert.deepEqual(
    mergeDimensions(
      [2, 3, 4],
      [
        [12, 4, 1],
        [12, 4, 1],
      ],
    ),
    { shape: [24], strides: [[1], [1]] },
  );
  assert.deepEqual(
    mergeDimensions(
      [2, 3],
      [
        [3, 1],
        [1, 2],
      ],
    ),
    {
      shape: [2, 3],
      strides: [
        [3, 1],
        [1, 2],
      ],
    },
  );
  assert.deepEqual(mergeDimensions([1, 5, 1], [[99, 2, 7]]), { shape: [5], strides: [[2]] });
  assert.deepEqual(mergeDimensions([4, 1, 6], [[12, 5, 2]]), { shape: [24], strides: [[2]] });
  assert.deepEqual(mergeDimensions([], [[]]), { shape: [], strides: [[]] });
  assert.throws(() => mergeDimensions([2, 2, 2, 2, 2, 2, 2, 2, 2], [[1, 2, 4, 8, 16, 32, 64, 128, 256]]), RangeError);
});

test('layoutOffset and layoutSpan agree with a row-major walk of any layout (property)', () => {
  fc.assert(
    fc.property(fc.array(fc.tuple(fc.integer({ min: 1, max: 4 }), fc.integer({ min: -6, max: 6 })), { minLength: 0, maxLength: 4 }), (dims) => {
      const shape = dims.map((d) => d[0]);
      const strides = dims.map((d) => d[1]);
      const packed = packLayout(shape, strides);
      const count = shape.reduce((p, n) => p * n, 1);
      let lo = 0;
      let hi = 0;
      for (let i = 0; i < count; i++) {
        let rest = i;
        let want = 0;
        for (let d = shape.length - 1; d >= 0; d--) {
          want += (rest % shape[d]!) * strides[d]!;
          rest = Math.floor(rest / shape[d]!);
        }
        assert.equal(layoutOffset(packed, i) + 0, want + 0);
        lo = Math.min(lo, want);
        hi = Math.max(hi, want + 1);
      }
      const span = layoutSpan(packed, count);
      assert.deepEqual({ lo: span.lo + 0, hi: span.hi + 0 }, { lo: lo + 0, hi });
    }),
  );
});

test('stores from float64: floats round to nearest, integers truncate and saturate, NaN gives 0, bool is != 0', () => {
  const stored = (name: keyof typeof kernelScalar, v: number): number => {
    const view = new DataView(new ArrayBuffer(8));
    kernelScalar[name].write(view, 0, v);
    return kernelScalar[name].read(view, 0);
  };
  assert.equal(stored('int8', 127.9), 127);
  assert.equal(stored('int8', -200), -128);
  assert.equal(stored('int8', -1.9), -1);
  assert.equal(stored('uint8', -5), 0);
  assert.equal(stored('uint16', 1e9), 65535);
  assert.equal(stored('int32', NaN), 0);
  assert.equal(stored('uint32', 2 ** 40), 4294967295);
  assert.equal(stored('int64', 2 ** 70), 2 ** 63);
  assert.equal(stored('uint64', -1), 0);
  assert.equal(stored('bool', NaN), 1);
  assert.equal(stored('bool', 0), 0);
  assert.equal(stored('float32', 0.1), Math.fround(0.1));
  assert.equal(stored('float16', 65520), Infinity);
  assert.equal(stored('float16', 1 + 2 ** -11), 1);
  assert.equal(stored('float16', 1 + 2 ** -11 + 2 ** -30), 1 + 2 ** -10);
  assert.equal(stored('bfloat16', 1 + 2 ** -8), 1);
  assert.ok(Number.isNaN(stored('bfloat16', NaN)));
});
