/**
 * The language of `elementwise`, `map` and `zipWith`: a small C-like subset parsed by our own
 * parser, so that only what both backends evaluate alike gets through (a user string is never
 * pasted into CUDA source or JavaScript unparsed). Statements separated by ';', each
 * `name = expression` or `name.x = expression`; expressions of numbers, names, components
 * (`p.x`, `.y`, `.z`, `.w`), unary `- + !`, binary `* / % + - < <= > >= == != && ||`, `c ? a : b`,
 * parentheses and calls of the functions in `expressionFunctions`, with C's precedence.
 * Every error is a SyntaxError naming the 1-based column and pointing at it.
 */

/** A component of a vector dtype. */
export type Component = 'x' | 'y' | 'z' | 'w';

/** The functions expressions may call, with their argument counts. */
export const expressionFunctions: Readonly<Record<string, number>> = Object.freeze({
  sqrt: 1,
  exp: 1,
  log: 1,
  sin: 1,
  cos: 1,
  tan: 1,
  tanh: 1,
  abs: 1,
  floor: 1,
  ceil: 1,
  min: 2,
  max: 2,
  pow: 2,
  fma: 3,
});

/** A binary operator. */
export type BinaryOperator = '*' | '/' | '%' | '+' | '-' | '<' | '<=' | '>' | '>=' | '==' | '!=' | '&&' | '||';

/** An expression node; `pos` is the 0-based index of its first character in the source. */
export type Expression =
  | { readonly kind: 'number'; readonly value: number; readonly pos: number }
  | { readonly kind: 'name'; readonly name: string; readonly component?: Component; readonly pos: number }
  | { readonly kind: 'unary'; readonly op: '-' | '+' | '!'; readonly arg: Expression; readonly pos: number }
  | { readonly kind: 'binary'; readonly op: BinaryOperator; readonly left: Expression; readonly right: Expression; readonly pos: number }
  | { readonly kind: 'conditional'; readonly test: Expression; readonly then: Expression; readonly otherwise: Expression; readonly pos: number }
  | { readonly kind: 'call'; readonly fn: string; readonly args: readonly Expression[]; readonly pos: number };

/** `target = value` or `target.component = value`. */
export interface Statement {
  readonly target: string;
  readonly component?: Component;
  readonly value: Expression;
  readonly pos: number;
}

interface Token {
  readonly kind: 'number' | 'name' | 'punct' | 'end';
  readonly text: string;
  readonly pos: number;
}

const PUNCTUATION = ['&&', '||', '==', '!=', '<=', '>=', '+', '-', '*', '/', '%', '(', ')', ',', '.', '?', ':', ';', '=', '<', '>', '!'];

/** Levels of binary precedence, loosest first (C's, from || up to the multiplicative operators). */
const BINARY_LEVELS: readonly (readonly BinaryOperator[])[] = [['||'], ['&&'], ['==', '!='], ['<', '<=', '>', '>='], ['+', '-'], ['*', '/', '%']];

/**
 * An error naming the 1-based column of `pos`, with the source and a caret under it: a
 * SyntaxError for the grammar, a TypeError (`kind`) for names and dtypes that do not fit.
 *
 * @param source The whole expression.
 * @param pos 0-based position.
 * @param message What is wrong.
 * @param kind SyntaxError (default) or TypeError.
 * @returns The error (to throw).
 * @throws Never.
 * @example
 * ```ts
 * throw expressionError('z = (a', 6, "expected ')'");
 * ```
 */
export function expressionError(source: string, pos: number, message: string, kind: typeof SyntaxError | typeof TypeError = SyntaxError): Error {
  return new kind(`${message} at column ${pos + 1} of the expression\n  ${source}\n  ${' '.repeat(pos)}^`);
}

function tokenize(source: string): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  while (i < source.length) {
    const ch = source[i]!;
    if (/\s/.test(ch)) {
      i++;
      continue;
    }
    const number = /^(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?/.exec(source.slice(i));
    if (number !== null && (/\d/.test(ch) || (ch === '.' && /\d/.test(source[i + 1] ?? '')))) {
      const text = number[0];
      const after = source[i + text.length];
      if (after !== undefined && /[A-Za-z_]/.test(after)) {
        throw expressionError(source, i + text.length, `unexpected '${after}' after the number ${text} (no suffixes: numbers are doubles)`);
      }
      tokens.push({ kind: 'number', text, pos: i });
      i += text.length;
      continue;
    }
    const name = /^[A-Za-z_][A-Za-z0-9_]*/.exec(source.slice(i));
    if (name !== null) {
      tokens.push({ kind: 'name', text: name[0], pos: i });
      i += name[0].length;
      continue;
    }
    const punct = PUNCTUATION.find((p) => source.startsWith(p, i));
    if (punct === undefined) throw expressionError(source, i, `unexpected character '${ch}'`);
    tokens.push({ kind: 'punct', text: punct, pos: i });
    i += punct.length;
  }
  tokens.push({ kind: 'end', text: 'the end', pos: source.length });
  return tokens;
}

/**
 * How deep parentheses, calls, unary operators and conditionals may nest: the parser descends
 * about a dozen frames a level, so this bound keeps it far from the JavaScript stack's end.
 */
export const MAX_EXPRESSION_NESTING = 256;

/**
 * How deep an expression's tree may be (a sum of n terms is n - 1 deep): the code generators and
 * the compilers that read their output walk it recursively.
 */
export const MAX_EXPRESSION_DEPTH = 1024;

/** The longest expression text taken, in characters. */
export const MAX_EXPRESSION_LENGTH = 65536;

/** Recursive descent over the tokens, one method per precedence level. */
class Parser {
  private index = 0;
  /** Nested expression, unary and call levels being parsed: bounded by MAX_EXPRESSION_NESTING. */
  private nesting = 0;

  constructor(
    private readonly source: string,
    private readonly tokens: readonly Token[],
  ) {}

  private get next(): Token {
    return this.tokens[this.index]!;
  }

  private fail(token: Token, message: string): never {
    throw expressionError(this.source, token.pos, message);
  }

  private describe(token: Token): string {
    return token.kind === 'end' ? 'the end' : `'${token.text}'`;
  }

  private accept(text: string): boolean {
    if (this.next.kind === 'punct' && this.next.text === text) {
      this.index++;
      return true;
    }
    return false;
  }

  private expect(text: string, context: string): void {
    if (!this.accept(text)) this.fail(this.next, `expected '${text}' ${context}, found ${this.describe(this.next)}`);
  }

  private component(): Component {
    const t = this.next;
    if (t.kind !== 'name' || !/^[xyzw]$/.test(t.text)) this.fail(t, `expected a component x, y, z or w after '.', found ${this.describe(t)}`);
    this.index++;
    return t.text as Component;
  }

  private atEnd(): boolean {
    return this.next.kind === 'end';
  }

  /** Fails unless every token was taken. */
  finish(context: string): void {
    if (this.next.kind !== 'end') this.fail(this.next, `unexpected ${this.describe(this.next)} ${context}`);
  }

  statements(): Statement[] {
    const out: Statement[] = [];
    for (;;) {
      while (this.accept(';'));
      if (this.atEnd()) break;
      out.push(this.statement());
      if (this.next.kind !== 'end') this.expect(';', 'between statements');
    }
    if (out.length === 0) this.fail(this.next, "expected a statement such as 'z = x + y'");
    return out;
  }

  private statement(): Statement {
    const t = this.next;
    if (t.kind !== 'name') this.fail(t, `expected the name of an output array, found ${this.describe(t)}`);
    this.index++;
    const component = this.accept('.') ? this.component() : undefined;
    if (!this.accept('=')) {
      this.fail(this.next, `expected '=' after the output ${t.text}${component === undefined ? '' : `.${component}`}, found ${this.describe(this.next)}`);
    }
    const value = this.expression();
    return component === undefined ? { target: t.text, value, pos: t.pos } : { target: t.text, component, value, pos: t.pos };
  }

  expression(): Expression {
    this.enter();
    try {
      const test = this.binary(0);
      if (!this.accept('?')) return test;
      const then = this.expression();
      this.expect(':', "in 'condition ? a : b'");
      const otherwise = this.expression();
      return { kind: 'conditional', test, then, otherwise, pos: test.pos };
    } finally {
      this.nesting--;
    }
  }

  /** One level deeper, refused past MAX_EXPRESSION_NESTING at the token that would go there. */
  private enter(): void {
    if (++this.nesting > MAX_EXPRESSION_NESTING) {
      this.nesting--;
      this.fail(this.next, `the expression nests more than ${MAX_EXPRESSION_NESTING} levels deep (parentheses, calls, unary operators)`);
    }
  }

  private binary(level: number): Expression {
    if (level === BINARY_LEVELS.length) return this.unary();
    let left = this.binary(level + 1);
    for (;;) {
      const t = this.next;
      const op = BINARY_LEVELS[level]!.find((o) => t.kind === 'punct' && t.text === o);
      if (op === undefined) return left;
      this.index++;
      const right = this.binary(level + 1);
      left = { kind: 'binary', op, left, right, pos: left.pos };
    }
  }

  private unary(): Expression {
    const t = this.next;
    if (t.kind === 'punct' && (t.text === '-' || t.text === '+' || t.text === '!')) {
      this.index++;
      this.enter();
      try {
        return { kind: 'unary', op: t.text, arg: this.unary(), pos: t.pos };
      } finally {
        this.nesting--;
      }
    }
    return this.primary();
  }

  private primary(): Expression {
    const t = this.next;
    if (t.kind === 'number') {
      this.index++;
      const value = Number(t.text);
      if (!Number.isFinite(value)) this.fail(t, `the number ${t.text} is beyond the range of a double`);
      return { kind: 'number', value, pos: t.pos };
    }
    if (t.kind === 'name') {
      this.index++;
      if (this.accept('(')) return this.call(t);
      if (Object.hasOwn(expressionFunctions, t.text)) this.fail(t, `${t.text} is a function: call it as ${t.text}(...)`);
      return this.accept('.') ? { kind: 'name', name: t.text, component: this.component(), pos: t.pos } : { kind: 'name', name: t.text, pos: t.pos };
    }
    if (this.accept('(')) {
      const inner = this.expression();
      this.expect(')', 'to close the parenthesis');
      return inner;
    }
    return this.fail(t, `expected a number, a name or '(', found ${this.describe(t)}`);
  }

  private call(name: Token): Expression {
    const arity = Object.hasOwn(expressionFunctions, name.text) ? expressionFunctions[name.text] : undefined;
    if (arity === undefined) {
      this.fail(name, `unknown function ${name.text}; the functions are ${Object.keys(expressionFunctions).join(', ')}`);
    }
    const args: Expression[] = [];
    if (!this.accept(')')) {
      do args.push(this.expression());
      while (this.accept(','));
      this.expect(')', `to close the call of ${name.text}`);
    }
    if (args.length !== arity) {
      this.fail(name, `${name.text} takes ${arity} argument${arity === 1 ? '' : 's'}, got ${args.length}`);
    }
    return { kind: 'call', fn: name.text, args, pos: name.pos };
  }
}

/**
 * Parses an elementwise program: statements separated by ';'.
 *
 * @param source The program, e.g. `'z = a * x + y'` or `'p.x = q.x * s; p.y = q.y * s'`.
 * @returns The statements, in order.
 * @throws {SyntaxError} For anything outside the language, naming the column; for nesting past
 *   MAX_EXPRESSION_NESTING, a tree deeper than MAX_EXPRESSION_DEPTH or text longer than MAX_EXPRESSION_LENGTH.
 * @throws {TypeError} When `source` is not a string.
 * @example
 * ```ts
 * parseStatements('z = a * x + y')[0].target; // 'z'
 * parseStatements('z = (x + ');                // SyntaxError: expected a number, a name or '(' ... at column 11
 * ```
 */
export function parseStatements(source: string): Statement[] {
  const statements = new Parser(source, tokens(source)).statements();
  for (const s of statements) checkDepth(source, s.value);
  return statements;
}

/** The tokens of a string no longer than MAX_EXPRESSION_LENGTH. */
function tokens(source: string): Token[] {
  if (typeof source !== 'string') throw new TypeError(`the expression must be a string, got ${typeof source}`);
  if (source.length > MAX_EXPRESSION_LENGTH) {
    throw new SyntaxError(
      `the expression is ${source.length} characters long; at most ${MAX_EXPRESSION_LENGTH} are taken (column ${MAX_EXPRESSION_LENGTH + 1} is past the limit)`,
    );
  }
  return tokenize(source);
}

/** SyntaxError at the first node deeper than MAX_EXPRESSION_DEPTH (walked without recursion). */
function checkDepth(source: string, root: Expression): void {
  const stack: [Expression, number][] = [[root, 1]];
  for (let top = stack.pop(); top !== undefined; top = stack.pop()) {
    const [e, depth] = top;
    if (depth > MAX_EXPRESSION_DEPTH) {
      // A long chain of one operator is deep from its end: name the operand where it got too deep.
      throw expressionError(
        source,
        e.kind === 'binary' ? e.right.pos : e.pos,
        `the expression is more than ${MAX_EXPRESSION_DEPTH} operations deep; split it into statements (t = ...; z = t + ...)`,
      );
    }
    if (e.kind === 'unary') stack.push([e.arg, depth + 1]);
    else if (e.kind === 'binary') stack.push([e.right, depth + 1], [e.left, depth + 1]);
    else if (e.kind === 'conditional') stack.push([e.otherwise, depth + 1], [e.then, depth + 1], [e.test, depth + 1]);
    else if (e.kind === 'call') for (const a of e.args) stack.push([a, depth + 1]);
  }
}

/**
 * Parses one expression (the body of `map` and `zipWith`).
 *
 * @param source The expression, e.g. `'x * 2'`.
 * @returns Its tree.
 * @throws {SyntaxError} For anything outside the language, text after the expression, or the
 *   limits `parseStatements` has.
 * @throws {TypeError} When `source` is not a string.
 * @example
 * ```ts
 * parseExpression('x + y').kind; // 'binary'
 * ```
 */
export function parseExpression(source: string): Expression {
  const parser = new Parser(source, tokens(source));
  const e = parser.expression();
  parser.finish('after the expression');
  checkDepth(source, e);
  return e;
}
