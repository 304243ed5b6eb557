/**
 * An elementwise program, compiled twice from one checked tree: to CUDA C (one kernel,
 * `vram_elementwise`, a grid-stride loop over the elements) and to a JavaScript function of the
 * same arguments for the emulated backend. Both evaluate every expression in float64 (each array
 * element is converted to a double as it is loaded, each result converted to its array's dtype
 * as it is stored: floats rounded to nearest, integers truncated and saturated, bool as `!= 0`),
 * so the two backends differ at most where the math library does (sin, exp, pow: a unit in the
 * last place of a double, before the final rounding) and in `fma`, which JavaScript rounds twice.
 * `/` is true division (`7 / 2` is 3.5, stored into an int32 as 3); comparisons and logic give
 * 1 or 0; `min`/`max` are `b < a ? b : a` and `b > a ? b : a` on both sides (C's fmin would
 * drop a NaN that JavaScript's Math.min keeps).
 *
 * Each array name stands for a local double (per component for vector dtypes), loaded before the
 * first statement and stored after the last: later statements see earlier assignments.
 */
import type { DType } from '../../array/dtype.js';
import type { EmulatedAccess, EmulatedLaunch } from '../../backend/backend.js';
import type { ParamType } from '../../backend/backend.js';
import { type EmulatedOperand, operands } from './emulated-operand.js';
import { expressionError, type Component, type Expression, type Statement } from './expression.js';
import { layoutOffset, layoutSource, layoutSpan, layoutStruct, MAX_KERNEL_DIMS } from './kernel-layout.js';
import { kernelScalar, type KernelScalar, scalarConversionsSource } from './scalar.js';
import { loadSource, storeSource, typedHelpers, typedOperand } from './typed-access.js';

/** The kernel's name in every elementwise source. */
export const ELEMENTWISE_KERNEL = 'vram_elementwise';

/** One operand the program names: an array (its dtype) or a scalar (a double argument). */
export type ProgramOperand = { readonly name: string; readonly kind: 'array'; readonly dtype: DType } | { readonly name: string; readonly kind: 'scalar' };

/** An array the program uses, in parameter order. */
export interface ProgramArray {
  readonly name: string;
  readonly dtype: DType;
  /** Components read (loaded before the first statement). */
  readonly reads: readonly number[];
  /** Components written (stored after the last statement). */
  readonly writes: readonly number[];
}

/** A checked program: its CUDA source, its launch signature, and the JavaScript kernel. */
export interface ElementwiseProgram {
  /** The CUDA C source (deterministic for a program and dtypes: the cache key). */
  readonly source: string;
  /** `n`, then per array a pointer and a layout, then per scalar a double. */
  readonly signature: readonly ParamType[];
  /** The arrays used, in parameter order (sorted by name). */
  readonly arrays: readonly ProgramArray[];
  /** The scalars used, in parameter order (sorted by name). */
  readonly scalars: readonly string[];
  /** The emulated backend's implementation of `vram_elementwise`. */
  readonly emulated: (launch: EmulatedLaunch) => void;
}

const COMPONENTS: readonly Component[] = ['x', 'y', 'z', 'w'];

const C_FUNCTIONS: Readonly<Record<string, string>> = {
  sqrt: 'sqrt',
  exp: 'exp',
  log: 'log',
  sin: 'sin',
  cos: 'cos',
  tan: 'tan',
  tanh: 'tanh',
  abs: 'fabs',
  floor: 'floor',
  ceil: 'ceil',
  min: 'vram_min',
  max: 'vram_max',
  pow: 'pow',
  fma: 'fma',
};

type Fn = (...args: number[]) => number;
const JS_FUNCTIONS: Readonly<Record<string, Fn>> = {
  sqrt: Math.sqrt,
  exp: Math.exp,
  log: Math.log,
  sin: Math.sin,
  cos: Math.cos,
  tan: Math.tan,
  tanh: Math.tanh,
  abs: Math.abs,
  floor: Math.floor,
  ceil: Math.ceil,
  pow: Math.pow,
  min: (a, b) => (b! < a! ? b! : a!),
  max: (a, b) => (b! > a! ? b! : a!),
  fma: (a, b, c) => a! * b! + c!,
};

/** The JavaScript of each operator (`==` compares doubles: `===`). */
const JS_OPERATORS: Readonly<Record<string, string>> = {
  '*': '*',
  '/': '/',
  '%': '%',
  '+': '+',
  '-': '-',
  '<': '<',
  '<=': '<=',
  '>': '>',
  '>=': '>=',
  '==': '===',
  '!=': '!==',
  '&&': '&&',
  '||': '||',
};

/** The JavaScript each function is called as in generated code (`F` is JS_FUNCTIONS). */
const JS_FUNCTION_SOURCE: Readonly<Record<string, string>> = {
  sqrt: 'Math.sqrt',
  exp: 'Math.exp',
  log: 'Math.log',
  sin: 'Math.sin',
  cos: 'Math.cos',
  tan: 'Math.tan',
  tanh: 'Math.tanh',
  abs: 'Math.abs',
  floor: 'Math.floor',
  ceil: 'Math.ceil',
  pow: 'Math.pow',
  min: 'F.min',
  max: 'F.max',
  fma: 'F.fma',
};

/** A double as a C literal that stays a double (`2` would be an int: `1 / 2` would be 0). */
function cDouble(value: number): string {
  const text = String(value);
  return /[.eE]/.test(text) ? text : `${text}.0`;
}

type Evaluate = (env: Float64Array) => number;

/** Checks names and components against the operands and builds both outputs of each expression. */
class Binder {
  readonly arrays = new Map<string, { index: number; dtype: DType; reads: Set<number>; writes: Set<number> }>();
  readonly scalars = new Map<string, number>();
  private readonly operands: ReadonlyMap<string, ProgramOperand>;

  constructor(
    private readonly source: string,
    operands: readonly ProgramOperand[],
  ) {
    this.operands = new Map(operands.map((o) => [o.name, o]));
  }

  private typeError(pos: number, message: string): never {
    throw expressionError(this.source, pos, message, TypeError);
  }

  /** The component index a name with (or without) `.c` denotes, checked against its array's dtype. */
  private componentOf(name: string, dtype: DType, component: Component | undefined, pos: number): number {
    const list = COMPONENTS.slice(0, dtype.components)
      .map((c) => `${name}.${c}`)
      .join(', ');
    if (component === undefined) {
      if (dtype.components > 1) this.typeError(pos, `${name} is a ${dtype.name} array: use its components ${list}`);
      return 0;
    }
    const c = COMPONENTS.indexOf(component);
    if (dtype.components === 1) this.typeError(pos, `${name} is a ${dtype.name} array: it has no component .${component}`);
    if (c >= dtype.components) this.typeError(pos, `${name} is a ${dtype.name} array: its components are ${list}`);
    return c;
  }

  private array(name: string, pos: number): { index: number; dtype: DType; reads: Set<number>; writes: Set<number> } {
    const known = this.arrays.get(name);
    if (known !== undefined) return known;
    const o = this.operands.get(name);
    if (o === undefined) {
      // Names that are not identifiers (map's result) cannot be written in an expression: not listed.
      const given = [...this.operands.keys()].filter((g) => /^[A-Za-z_][A-Za-z0-9_]*$/.test(g));
      this.typeError(pos, `unknown name ${name}; the arrays and scalars given are ${given.length === 0 ? 'none' : given.join(', ')}`);
    }
    if (o.kind !== 'array') this.typeError(pos, `${name} is a scalar, not an array`);
    const entry = { index: -1, dtype: o.dtype, reads: new Set<number>(), writes: new Set<number>() };
    this.arrays.set(name, entry);
    return entry;
  }

  /** Marks what the statements use (so parameters and slots can be numbered before code is built). */
  collect(statements: readonly Statement[]): void {
    const visit = (e: Expression): void => {
      switch (e.kind) {
        case 'number':
          return;
        case 'name': {
          const o = this.operands.get(e.name);
          if (o?.kind === 'scalar') {
            if (e.component !== undefined) this.typeError(e.pos, `${e.name} is a scalar: it has no component .${e.component}`);
            if (!this.scalars.has(e.name)) this.scalars.set(e.name, -1);
            return;
          }
          const a = this.array(e.name, e.pos);
          a.reads.add(this.componentOf(e.name, a.dtype, e.component, e.pos));
          return;
        }
        case 'unary':
          return visit(e.arg);
        case 'binary':
          visit(e.left);
          return visit(e.right);
        case 'conditional':
          visit(e.test);
          visit(e.then);
          return visit(e.otherwise);
        case 'call':
          return e.args.forEach(visit);
      }
    };
    for (const s of statements) {
      visit(s.value);
      const o = this.operands.get(s.target);
      if (o?.kind === 'scalar') this.typeError(s.pos, `${s.target} is a scalar: only arrays can be assigned`);
      const a = this.array(s.target, s.pos);
      a.writes.add(this.componentOf(s.target, a.dtype, s.component, s.pos));
    }
    // Parameter order by name, so the source (the cache key) does not depend on property order.
    [...this.arrays.keys()].sort().forEach((name, i) => {
      this.arrays.get(name)!.index = i;
    });
    [...this.scalars.keys()].sort().forEach((name, i) => {
      this.scalars.set(name, i);
    });
  }

  /** The env slot of an array component: arrays first, 4 slots each; then the scalars. */
  slot(name: string, component: number): number {
    return this.arrays.get(name)!.index * 4 + component;
  }

  scalarSlot(name: string): number {
    return this.arrays.size * 4 + this.scalars.get(name)!;
  }

  c(e: Expression): string {
    switch (e.kind) {
      case 'number':
        return cDouble(e.value);
      case 'name': {
        if (this.scalars.has(e.name)) return `s${this.scalars.get(e.name)!}`;
        const a = this.arrays.get(e.name)!;
        return `v${a.index}_${this.componentOf(e.name, a.dtype, e.component, e.pos)}`;
      }
      case 'unary':
        return e.op === '!' ? `((${this.c(e.arg)}) == 0.0 ? 1.0 : 0.0)` : `(${e.op}${this.c(e.arg)})`;
      case 'binary': {
        const l = this.c(e.left);
        const r = this.c(e.right);
        switch (e.op) {
          case '%':
            return `fmod(${l}, ${r})`;
          case '&&':
            return `((${l}) != 0.0 && (${r}) != 0.0 ? 1.0 : 0.0)`;
          case '||':
            return `((${l}) != 0.0 || (${r}) != 0.0 ? 1.0 : 0.0)`;
          case '<':
          case '<=':
          case '>':
          case '>=':
          case '==':
          case '!=':
            return `((${l}) ${e.op} (${r}) ? 1.0 : 0.0)`;
          default:
            return `(${l} ${e.op} ${r})`;
        }
      }
      case 'conditional':
        return `((${this.c(e.test)}) != 0.0 ? (${this.c(e.then)}) : (${this.c(e.otherwise)}))`;
      case 'call':
        return `${C_FUNCTIONS[e.fn]!}(${e.args.map((a) => this.c(a)).join(', ')})`;
    }
  }

  js(e: Expression): Evaluate {
    switch (e.kind) {
      case 'number': {
        const v = e.value;
        return () => v;
      }
      case 'name': {
        const k = this.scalars.has(e.name)
          ? this.scalarSlot(e.name)
          : this.slot(e.name, this.componentOf(e.name, this.arrays.get(e.name)!.dtype, e.component, e.pos));
        return (env) => env[k]!;
      }
      case 'unary': {
        const a = this.js(e.arg);
        if (e.op === '-') return (env) => -a(env);
        if (e.op === '+') return a;
        return (env) => (a(env) === 0 ? 1 : 0);
      }
      case 'binary': {
        const l = this.js(e.left);
        const r = this.js(e.right);
        switch (e.op) {
          case '*':
            return (env) => l(env) * r(env);
          case '/':
            return (env) => l(env) / r(env);
          case '%':
            return (env) => l(env) % r(env);
          case '+':
            return (env) => l(env) + r(env);
          case '-':
            return (env) => l(env) - r(env);
          case '<':
            return (env) => (l(env) < r(env) ? 1 : 0);
          case '<=':
            return (env) => (l(env) <= r(env) ? 1 : 0);
          case '>':
            return (env) => (l(env) > r(env) ? 1 : 0);
          case '>=':
            return (env) => (l(env) >= r(env) ? 1 : 0);
          case '==':
            return (env) => (l(env) === r(env) ? 1 : 0);
          case '!=':
            return (env) => (l(env) !== r(env) ? 1 : 0);
          case '&&':
            return (env) => (l(env) !== 0 && r(env) !== 0 ? 1 : 0);
          case '||':
            return (env) => (l(env) !== 0 || r(env) !== 0 ? 1 : 0);
        }
        break;
      }
      case 'conditional': {
        const t = this.js(e.test);
        const a = this.js(e.then);
        const b = this.js(e.otherwise);
        return (env) => (t(env) !== 0 ? a(env) : b(env));
      }
      case 'call': {
        const f = JS_FUNCTIONS[e.fn]!;
        const args = e.args.map((a) => this.js(a));
        if (args.length === 1) {
          const [a] = args as [Evaluate];
          return (env) => f(a(env));
        }
        return (env) => f(...args.map((a) => a(env)));
      }
    }
    throw new Error('unreachable');
  }

  /**
   * The expression as JavaScript text, built from the checked tree only: names become the
   * generated locals `v<array>_<component>` and `s<scalar>`, numbers finite literals, operators
   * and functions come from fixed tables (Note [Emulated kernels at JavaScript speed]).
   */
  jsSource(e: Expression): string {
    switch (e.kind) {
      case 'number': {
        if (typeof e.value !== 'number' || !Number.isFinite(e.value)) throw new TypeError('an expression number must be finite');
        return `(${String(e.value)})`;
      }
      case 'name': {
        if (this.scalars.has(e.name)) return `s${this.scalars.get(e.name)!}`;
        const a = this.arrays.get(e.name)!;
        return `v${a.index}_${this.componentOf(e.name, a.dtype, e.component, e.pos)}`;
      }
      case 'unary': {
        const a = this.jsSource(e.arg);
        if (e.op === '-') return `(-${a})`;
        if (e.op === '+') return a;
        return `(${a} === 0 ? 1 : 0)`;
      }
      case 'binary': {
        const l = this.jsSource(e.left);
        const r = this.jsSource(e.right);
        const op = JS_OPERATORS[e.op];
        if (op === undefined) throw new TypeError('unknown operator');
        switch (e.op) {
          case '*':
          case '/':
          case '%':
          case '+':
          case '-':
            return `(${l} ${op} ${r})`;
          case '&&':
            return `(${l} !== 0 && ${r} !== 0 ? 1 : 0)`;
          case '||':
            return `(${l} !== 0 || ${r} !== 0 ? 1 : 0)`;
          default:
            return `(${l} ${op} ${r} ? 1 : 0)`;
        }
      }
      case 'conditional':
        return `(${this.jsSource(e.test)} !== 0 ? ${this.jsSource(e.then)} : ${this.jsSource(e.otherwise)})`;
      case 'call': {
        const f = Object.hasOwn(JS_FUNCTION_SOURCE, e.fn) ? JS_FUNCTION_SOURCE[e.fn] : undefined;
        if (f === undefined) throw new TypeError('unknown function');
        return `${f}(${e.args.map((a) => this.jsSource(a)).join(', ')})`;
      }
    }
  }
}

/**
 * Checks a parsed program against its operands and builds its CUDA source and JavaScript kernel.
 *
 * @param text The program's text (for error positions).
 * @param statements The parsed statements.
 * @param given Every name the caller gave: arrays with their dtypes, scalars.
 * @returns The program.
 * @throws {TypeError} For an unknown name, a scalar assigned or given a component, a vector array
 *   used without a component, a component the dtype lacks, or a component of a scalar dtype.
 * @example
 * ```ts
 * const p = elementwiseProgram(text, parseStatements(text), [
 *   { name: 'x', kind: 'array', dtype: dtypes.float32 }, { name: 'a', kind: 'scalar' }]);
 * p.source; // CUDA C with one kernel, vram_elementwise
 * ```
 */
export function elementwiseProgram(text: string, statements: readonly Statement[], given: readonly ProgramOperand[]): ElementwiseProgram {
  const b = new Binder(text, given);
  b.collect(statements);
  const arrays = [...b.arrays.entries()].sort((x, y) => x[1].index - y[1].index);
  const scalars = [...b.scalars.entries()].sort((x, y) => x[1] - y[1]).map(([name]) => name);

  const params: string[] = ['long long n'];
  const signature: ParamType[] = ['i64'];
  const prologue: string[] = [];
  const epilogue: string[] = [];
  for (const [, a] of arrays) {
    const s = kernelScalar[a.dtype.component];
    const k = a.index;
    params.push(`${s.storage}* p${k}`, `VramLayout l${k}`);
    // An array the program only reads is a `cptr`: spillable memory keeps its host copy current.
    signature.push(a.writes.size > 0 ? 'ptr' : 'cptr', layoutStruct);
    prologue.push(`    ${s.storage}* e${k} = p${k} + vram_offset(l${k}, i) * ${a.dtype.components};`);
    for (let c = 0; c < a.dtype.components; c++) {
      if (a.reads.has(c)) prologue.push(`    double v${k}_${c} = ${s.load}(e${k}[${c}]);`);
      else if (a.writes.has(c)) prologue.push(`    double v${k}_${c} = 0.0;`);
      if (a.writes.has(c)) epilogue.push(`    e${k}[${c}] = ${s.store}(v${k}_${c});`);
    }
  }
  scalars.forEach((_, k) => {
    params.push(`double s${k}`);
    signature.push('f64');
  });
  const body = statements.map((s) => {
    const a = b.arrays.get(s.target)!;
    const c = s.component === undefined ? 0 : COMPONENTS.indexOf(s.component);
    return `    v${a.index}_${c} = ${b.c(s.value)};`;
  });
  const source = [
    '// vram elementwise kernel (generated: src/kernels/ops/elementwise-program.ts)',
    layoutSource(),
    scalarConversionsSource(),
    'static __device__ __forceinline__ double vram_min(double a, double b) { return b < a ? b : a; }',
    'static __device__ __forceinline__ double vram_max(double a, double b) { return b > a ? b : a; }',
    `extern "C" __global__ void ${ELEMENTWISE_KERNEL}(${params.join(', ')}) {`,
    '  const long long step = (long long)gridDim.x * blockDim.x;',
    '  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {',
    ...prologue,
    ...body,
    ...epilogue,
    '  }',
    '}',
    '',
  ].join('\n');

  const run = statements.map((s) => {
    const slot = b.slot(s.target, s.component === undefined ? 0 : COMPONENTS.indexOf(s.component));
    const f = b.js(s.value);
    return (env: Float64Array): void => {
      env[slot] = f(env);
    };
  });
  const programArrays: ProgramArray[] = arrays.map(([name, a]) => ({
    name,
    dtype: a.dtype,
    reads: [...a.reads].sort(),
    writes: [...a.writes].sort(),
  }));
  const slots = arrays.length * 4 + scalars.length;
  /** The DataView interpreter: operands not aligned to a component, a big-endian host, or code that did not generate. */
  const interpreted = (n: number, env: Float64Array, ops: readonly EmulatedOperand[], layouts: readonly (readonly number[])[]): void => {
    const views = programArrays.map((a, k): { op: EmulatedOperand; layout: readonly number[]; s: KernelScalar; a: ProgramArray } => ({
      op: ops[k]!,
      layout: layouts[k]!,
      s: kernelScalar[a.dtype.component],
      a,
    }));
    for (let i = 0; i < n; i++) {
      const at = views.map((v) => v.op.base + layoutOffset(v.layout, i) * v.a.dtype.byteSize);
      views.forEach((v, k) => {
        for (const c of v.a.reads) env[k * 4 + c] = v.s.read(v.op.view, at[k]! + c * v.s.bytes);
      });
      for (const r of run) r(env);
      views.forEach((v, k) => {
        for (const c of v.a.writes) v.s.write(v.op.view, at[k]! + c * v.s.bytes, env[k * 4 + c]!);
      });
    }
  };
  // Generated kernels by operand pattern ('1': at most one dimension, 'g': more), made on first use.
  const generated = new Map<string, GeneratedLoop | null>();
  const jsBody = statements.map((st) => {
    const a = b.arrays.get(st.target)!;
    return { index: a.index, component: st.component === undefined ? 0 : COMPONENTS.indexOf(st.component), value: b.jsSource(st.value) };
  });
  const emulated = (launch: EmulatedLaunch): void => {
    const n = Number(launch.args[0]);
    const env = new Float64Array(slots);
    scalars.forEach((_, k) => {
      env[arrays.length * 4 + k] = Number(launch.args[1 + 2 * arrays.length + k]);
    });
    const layouts = programArrays.map((_, k) => launch.args[2 + 2 * k] as readonly number[]);
    const ops = operands(
      launch.memory,
      programArrays.map((a, k) => ({
        ptr: Number(launch.args[1 + 2 * k]),
        ...layoutSpan(layouts[k]!, n),
        elementBytes: a.dtype.byteSize,
        access: accessOf(a, layouts[k]!),
      })),
    );
    const typed = programArrays.map((a, k) => typedOperand(ops[k]!, a.dtype.component));
    const pattern = layouts.map((l) => (l[0]! <= 1 ? '1' : 'g')).join('');
    let loop = generated.get(pattern);
    if (loop === undefined) {
      loop = generateLoop(programArrays, scalars.length, jsBody, pattern);
      generated.set(pattern, loop);
    }
    if (loop === null || typed.some((t) => t === undefined)) {
      interpreted(n, env, ops, layouts);
      return;
    }
    const args: unknown[] = [n];
    programArrays.forEach((a, k) => {
      const l = layouts[k]!;
      args.push(typed[k]!.array, typed[k]!.index, l[0] === 1 ? l[1 + MAX_KERNEL_DIMS]! * a.dtype.components : 0, l);
    });
    scalars.forEach((_, k) => args.push(env[arrays.length * 4 + k]));
    loop(...args);
  };
  return { source, signature, arrays: programArrays, scalars, emulated };
}

type GeneratedLoop = (...args: unknown[]) => void;

/**
 * The JavaScript loop of a program for one pattern of operand layouts, from the checked tree (the
 * statements' `value` texts come from `Binder.jsSource`; every other token is generated here).
 * Per element: each array's components read are loaded into doubles, the statements run in order,
 * the components written are stored (so an output read by a later element is read as written, and
 * an element's inputs are all loaded before its outputs are stored, as in the CUDA kernel).
 *
 * @returns The loop, taking `n`, then per array its typed array, element (0, ..., 0)'s index, the
 *   component stride of a one-dimensional layout and the packed layout, then the scalars; or null
 *   when the engine refuses the generated text (a tree too deep for its parser).
 */
function generateLoop(
  arrays: readonly ProgramArray[],
  scalarCount: number,
  body: readonly { readonly index: number; readonly component: number; readonly value: string }[],
  pattern: string,
): GeneratedLoop | null {
  const params = ['n'];
  const perElement: string[] = [];
  const stores: string[] = [];
  arrays.forEach((a, k) => {
    params.push(`t${k}`, `b${k}`, `S${k}`, `L${k}`);
    const m = a.dtype.components;
    perElement.push(pattern[k] === '1' ? `const e${k} = b${k} + i * S${k};` : `const e${k} = b${k} + H.offset(L${k}, i) * ${m};`);
    for (let c = 0; c < m; c++) {
      const at = `t${k}[e${k} + ${c}]`;
      if (a.reads.includes(c)) perElement.push(`let v${k}_${c} = ${loadSource(a.dtype.component, at)};`);
      else if (a.writes.includes(c)) perElement.push(`let v${k}_${c} = 0;`);
      if (a.writes.includes(c)) stores.push(`${at} = ${storeSource(a.dtype.component, `v${k}_${c}`)};`);
    }
  });
  for (let k = 0; k < scalarCount; k++) params.push(`s${k}`);
  const text = [
    `return function vram_elementwise(${params.join(', ')}) {`,
    '  for (let i = 0; i < n; i++) {',
    ...perElement.map((l) => `    ${l}`),
    ...body.map((st) => `    v${st.index}_${st.component} = ${st.value};`),
    ...stores.map((l) => `    ${l}`),
    '  }',
    '};',
  ].join('\n');
  try {
    // The text is built from the checked tree, never from the user's string.
    return (new Function('H', 'F', text) as (h: typeof typedHelpers, f: typeof JS_FUNCTIONS) => GeneratedLoop)(typedHelpers, JS_FUNCTIONS);
  } catch (error) {
    if (error instanceof RangeError) return null;
    throw error;
  }
}

/** How a launch uses an array's bytes: read only, or written whole (every component of a dense layout, none read). */
function accessOf(a: ProgramArray, layout: readonly number[]): EmulatedAccess {
  if (a.writes.length === 0) return 'read';
  const dense = layout[0]! === 0 || (layout[0]! === 1 && Math.abs(layout[1 + MAX_KERNEL_DIMS]!) === 1);
  return dense && a.reads.length === 0 && a.writes.length === a.dtype.components ? 'write' : 'readwrite';
}
