/**
 * The kernels that move and convert elements: `vram_fill`, `vram_copy` (strided to any layout),
 * `vram_astype` and `vram_arange`, in one CUDA source, with their JavaScript twins.
 *
 * One kernel per operation, not one per dtype: fill and copy move each element as 1 to 3 units
 * of 1, 2, 4 or 8 bytes (the largest that divides both the element's size and its alignment), and
 * astype and arange switch on runtime dtype codes (`kernelScalars`). The switch is the same for a
 * whole launch, so every warp takes the same branch; these operations are bound by memory, not by
 * the few instructions of the switch, and one kernel per operation keeps the shipped PTX small.
 *
 * astype converts integers to integers through 64 bits, wrapping as C's casts and NumPy's astype
 * do (int32 -1 becomes uint8 255), and everything else through float64 with the conversions of
 * `scalar.ts` (rounding to nearest for floats, saturating for integers, NaN to 0); vector dtypes
 * convert component by component between dtypes of as many components.
 */
import type { EmulatedKernels, EmulatedLaunch } from '../../backend/backend.js';
import { type EmulatedOperand, operands } from './emulated-operand.js';
import { layoutOffset, layoutSource, layoutSpan, layoutStruct, MAX_KERNEL_DIMS } from './kernel-layout.js';
import { kernelScalar, kernelScalars, scalarConversionsSource, type KernelScalar } from './scalar.js';
import type { ParamType } from '../../backend/backend.js';
import { type TypedOperand, typedOperand } from './typed-access.js';

/** The signatures of the kernels in `basicSource()` (`cptr`: an operand the kernel only reads). */
export const basicSignatures = Object.freeze({
  /** dst, layout, n, unit bytes, units per element, three units of pattern. */
  vram_fill: Object.freeze(['ptr', layoutStruct, 'i64', 'i32', 'i32', 'u64', 'u64', 'u64'] as const),
  /** dst, dst layout, src, src layout, n, unit bytes, units per element. */
  vram_copy: Object.freeze(['ptr', layoutStruct, 'cptr', layoutStruct, 'i64', 'i32', 'i32'] as const),
  /** dst, dst layout, dst code, src, src layout, src code, components, n. */
  vram_astype: Object.freeze(['ptr', layoutStruct, 'i32', 'cptr', layoutStruct, 'i32', 'i32', 'i64'] as const),
  /** dst (contiguous), dst code, n, start, step. */
  vram_arange: Object.freeze(['ptr', 'i32', 'i64', 'f64', 'f64'] as const),
}) satisfies Readonly<Record<string, readonly ParamType[]>>;

const UNIT_TYPES: Readonly<Record<number, string>> = { 1: 'unsigned char', 2: 'unsigned short', 4: 'unsigned int', 8: 'unsigned long long' };

function switchOver(body: (s: KernelScalar) => string): string {
  return kernelScalars.map((name) => `    case ${kernelScalar[name].code}: ${body(kernelScalar[name])}`).join('\n');
}

/**
 * The CUDA source of the four basic kernels.
 *
 * @returns C source text.
 * @throws Never.
 * @example
 * ```ts
 * basicSource().includes('vram_astype'); // true
 * ```
 */
export function basicSource(): string {
  const unitCase = (assign: (t: string) => string): string =>
    [1, 2, 4, 8].map((u) => `      ${u === 8 ? 'default' : `case ${u}`}: ${assign(UNIT_TYPES[u]!)} break;`).join('\n');
  const lastInt = kernelScalar.uint64.code;
  return [
    '// vram basic kernels: fill, copy, astype, arange (generated: src/kernels/ops/basic-kernels.ts)',
    layoutSource(),
    scalarConversionsSource(),
    'static __device__ double vram_load_double(const unsigned char* p, int code, long long i) {',
    '  switch (code) {',
    switchOver((s) => `return ${s.load}(((const ${s.storage}*)p)[i]);`),
    '    default: return 0.0;',
    '  }',
    '}',
    'static __device__ void vram_store_double(unsigned char* p, int code, long long i, double v) {',
    '  switch (code) {',
    switchOver((s) => `((${s.storage}*)p)[i] = ${s.store}(v); break;`),
    '    default: break;',
    '  }',
    '}',
    '// Integers among themselves: through 64 bits, cast (wrapping) on the way out; bool is != 0.',
    'static __device__ long long vram_load_int(const unsigned char* p, int code, long long i) {',
    '  switch (code) {',
    switchOver((s) => (s.family === 'int' ? `return (long long)((const ${s.storage}*)p)[i];` : 'return 0;')),
    '    default: return 0;',
    '  }',
    '}',
    'static __device__ void vram_store_int(unsigned char* p, int code, long long i, long long v) {',
    '  switch (code) {',
    switchOver((s) =>
      s.name === 'bool'
        ? '((unsigned char*)p)[i] = (unsigned char)(v != 0); break;'
        : s.family === 'int'
          ? `((${s.storage}*)p)[i] = (${s.storage})v; break;`
          : 'break;',
    ),
    '    default: break;',
    '  }',
    '}',
    'extern "C" __global__ void vram_fill(unsigned char* dst, VramLayout l, long long n, int unit, int units,',
    '    unsigned long long p0, unsigned long long p1, unsigned long long p2) {',
    '  const long long step = (long long)gridDim.x * blockDim.x;',
    '  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {',
    '    const long long e = vram_offset(l, i) * units;',
    '    for (int u = 0; u < units; ++u) {',
    '      const unsigned long long v = u == 0 ? p0 : u == 1 ? p1 : p2;',
    '      switch (unit) {',
    unitCase((t) => `((${t}*)dst)[e + u] = (${t})v;`),
    '      }',
    '    }',
    '  }',
    '}',
    'extern "C" __global__ void vram_copy(unsigned char* dst, VramLayout dl, const unsigned char* src, VramLayout sl,',
    '    long long n, int unit, int units) {',
    '  const long long step = (long long)gridDim.x * blockDim.x;',
    '  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {',
    '    const long long d = vram_offset(dl, i) * units, s = vram_offset(sl, i) * units;',
    '    for (int u = 0; u < units; ++u) {',
    '      switch (unit) {',
    unitCase((t) => `((${t}*)dst)[d + u] = ((const ${t}*)src)[s + u];`),
    '      }',
    '    }',
    '  }',
    '}',
    'extern "C" __global__ void vram_astype(unsigned char* dst, VramLayout dl, int dcode, const unsigned char* src, VramLayout sl,',
    '    int scode, int comps, long long n) {',
    `  const bool ints = dcode <= ${lastInt} && scode <= ${lastInt};`,
    '  const long long step = (long long)gridDim.x * blockDim.x;',
    '  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {',
    '    const long long d = vram_offset(dl, i) * comps, s = vram_offset(sl, i) * comps;',
    '    for (int c = 0; c < comps; ++c) {',
    '      if (ints) vram_store_int(dst, dcode, d + c, vram_load_int(src, scode, s + c));',
    '      else vram_store_double(dst, dcode, d + c, vram_load_double(src, scode, s + c));',
    '    }',
    '  }',
    '}',
    'extern "C" __global__ void vram_arange(unsigned char* dst, int dcode, long long n, double start, double delta) {',
    '  const long long step = (long long)gridDim.x * blockDim.x;',
    '  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {',
    '    vram_store_double(dst, dcode, i, start + (double)i * delta);',
    '  }',
    '}',
    '',
  ].join('\n');
}

// --- The JavaScript twins -------------------------------------------------------------------

function unitAccess(unit: number): { get: (v: DataView, o: number) => bigint; set: (v: DataView, o: number, x: bigint) => void } {
  switch (unit) {
    case 1:
      return { get: (v, o) => BigInt(v.getUint8(o)), set: (v, o, x) => v.setUint8(o, Number(BigInt.asUintN(8, x))) };
    case 2:
      return { get: (v, o) => BigInt(v.getUint16(o, true)), set: (v, o, x) => v.setUint16(o, Number(BigInt.asUintN(16, x)), true) };
    case 4:
      return { get: (v, o) => BigInt(v.getUint32(o, true)), set: (v, o, x) => v.setUint32(o, Number(BigInt.asUintN(32, x)), true) };
    default:
      return { get: (v, o) => v.getBigUint64(o, true), set: (v, o, x) => v.setBigUint64(o, BigInt.asUintN(64, x), true) };
  }
}

/** Reads an integer dtype's value exactly, as a bigint (bool as 0/1). */
function readInt(s: KernelScalar, view: DataView, o: number): bigint {
  if (s.name === 'int64') return view.getBigInt64(o, true);
  if (s.name === 'uint64') return view.getBigUint64(o, true);
  return BigInt(s.read(view, o));
}

/** Writes a 64-bit integer into an integer dtype, wrapping as a C cast does (bool: != 0). */
function writeInt(s: KernelScalar, view: DataView, o: number, v: bigint): void {
  if (s.name === 'bool') view.setUint8(o, v !== 0n ? 1 : 0);
  else if (s.name === 'int64') view.setBigInt64(o, BigInt.asIntN(64, v), true);
  else if (s.name === 'uint64') view.setBigUint64(o, BigInt.asUintN(64, v), true);
  else s.write(view, o, Number(s.signed ? BigInt.asIntN(s.bytes * 8, v) : BigInt.asUintN(s.bytes * 8, v)));
}

/** The typed array of an operand's units (1, 2, 4 or 8 bytes), or undefined where the DataView path runs. */
function unitArray(op: EmulatedOperand, unit: number): TypedOperand | undefined {
  return typedOperand(op, unit === 1 ? 'uint8' : unit === 2 ? 'uint16' : unit === 4 ? 'uint32' : 'uint64');
}

/** A layout of at most one dimension whose elements are adjacent (every byte of its span is an element's). */
function dense(l: readonly number[]): boolean {
  return l[0]! === 0 || (l[0]! === 1 && Math.abs(l[1 + MAX_KERNEL_DIMS]!) === 1);
}

const fill = (launch: EmulatedLaunch): void => {
  const [dst, l, nArg, unit, units, ...pattern] = launch.args as [number, number[], number, number, number, bigint | number, bigint | number, bigint | number];
  const n = Number(nArg);
  const [d] = operands(launch.memory, [{ ptr: dst, ...layoutSpan(l, n), elementBytes: unit * units, access: dense(l) ? 'write' : 'readwrite' }]);
  const t = unitArray(d!, unit);
  if (t !== undefined) {
    const values = pattern.slice(0, units).map((p) => (unit === 8 ? BigInt.asUintN(64, BigInt(p)) : Number(BigInt.asUintN(unit * 8, BigInt(p)))));
    const a = t.array as unknown as { [i: number]: number | bigint; fill(v: number | bigint, start: number, end: number): unknown };
    if (units === 1 && l[0]! === 1 && l[1 + MAX_KERNEL_DIMS]! === 1) {
      a.fill(values[0]!, t.index, t.index + n);
      return;
    }
    for (let i = 0; i < n; i++) {
      const e = t.index + layoutOffset(l, i) * units;
      for (let u = 0; u < units; u++) a[e + u] = values[u]!;
    }
    return;
  }
  const access = unitAccess(unit);
  for (let i = 0; i < n; i++) {
    const e = d!.base + layoutOffset(l, i) * unit * units;
    for (let u = 0; u < units; u++) access.set(d!.view, e + u * unit, BigInt(pattern[u]!));
  }
};

const copy = (launch: EmulatedLaunch): void => {
  const [dst, dl, src, sl, nArg, unit, units] = launch.args as [number, number[], number, number[], number, number, number];
  const n = Number(nArg);
  const bytes = unit * units;
  const [d, s] = operands(launch.memory, [
    { ptr: dst, ...layoutSpan(dl, n), elementBytes: bytes, access: dense(dl) ? 'write' : 'readwrite' },
    { ptr: src, ...layoutSpan(sl, n), elementBytes: bytes, access: 'read' },
  ]);
  // 8-byte units move as two 4-byte halves: element access stays on three typed-array kinds.
  const part = unit === 8 ? 4 : unit;
  const parts = unit === 8 ? 2 * units : units;
  const td = unitArray(d!, part);
  const ts = unitArray(s!, part);
  if (td !== undefined && ts !== undefined) {
    const D = td.array as Uint8Array | Uint16Array | Uint32Array;
    const S = ts.array as Uint8Array | Uint16Array | Uint32Array;
    const stride1 = (l: readonly number[]): boolean => l[0]! === 1 && l[1 + MAX_KERNEL_DIMS]! === 1;
    // One block move where both are contiguous and in separate ranges (overlapping ones copy element by element, in order).
    if (stride1(dl) && stride1(sl) && d!.view !== s!.view) {
      D.set(S.subarray(ts.index, ts.index + n * parts), td.index);
      return;
    }
    const di = td.index;
    const si = ts.index;
    if (dl[0]! <= 1 && sl[0]! <= 1) {
      const dS = dl[0]! === 1 ? dl[1 + MAX_KERNEL_DIMS]! * parts : 0;
      const sS = sl[0]! === 1 ? sl[1 + MAX_KERNEL_DIMS]! * parts : 0;
      for (let i = 0; i < n; i++) for (let u = 0; u < parts; u++) D[di + i * dS + u] = S[si + i * sS + u]!;
      return;
    }
    for (let i = 0; i < n; i++) {
      const to = di + layoutOffset(dl, i) * parts;
      const from = si + layoutOffset(sl, i) * parts;
      for (let u = 0; u < parts; u++) D[to + u] = S[from + u]!;
    }
    return;
  }
  for (let i = 0; i < n; i++) {
    const to = d!.base + layoutOffset(dl, i) * bytes;
    const from = s!.base + layoutOffset(sl, i) * bytes;
    for (let b = 0; b < bytes; b++) d!.view.setUint8(to + b, s!.view.getUint8(from + b));
  }
};

const astype = (launch: EmulatedLaunch): void => {
  const [dst, dl, dcode, src, sl, scode, comps, nArg] = launch.args as [number, number[], number, number, number[], number, number, number];
  const n = Number(nArg);
  const ds = kernelScalar[kernelScalars[dcode]!];
  const ss = kernelScalar[kernelScalars[scode]!];
  const [d, s] = operands(launch.memory, [
    { ptr: dst, ...layoutSpan(dl, n), elementBytes: ds.bytes * comps },
    { ptr: src, ...layoutSpan(sl, n), elementBytes: ss.bytes * comps },
  ]);
  const ints = ds.family === 'int' && ss.family === 'int';
  for (let i = 0; i < n; i++) {
    const to = d!.base + layoutOffset(dl, i) * ds.bytes * comps;
    const from = s!.base + layoutOffset(sl, i) * ss.bytes * comps;
    for (let c = 0; c < comps; c++) {
      if (ints) writeInt(ds, d!.view, to + c * ds.bytes, readInt(ss, s!.view, from + c * ss.bytes));
      else ds.write(d!.view, to + c * ds.bytes, ss.read(s!.view, from + c * ss.bytes));
    }
  }
};

const arange = (launch: EmulatedLaunch): void => {
  const [dst, dcode, nArg, start, delta] = launch.args as [number, number, number, number, number];
  const n = Number(nArg);
  const ds = kernelScalar[kernelScalars[dcode]!];
  const [d] = operands(launch.memory, [{ ptr: dst, lo: 0, hi: n, elementBytes: ds.bytes }]);
  for (let i = 0; i < n; i++) ds.write(d!.view, d!.base + i * ds.bytes, start + i * delta);
};

/**
 * The JavaScript twins of the kernels in `basicSource()`, by name.
 *
 * @returns The emulated kernels.
 * @throws Never.
 * @example
 * ```ts
 * Module.compile(basicSource(), { device, emulated: basicEmulated() });
 * ```
 */
export function basicEmulated(): EmulatedKernels {
  return { vram_fill: fill, vram_copy: copy, vram_astype: astype, vram_arange: arange };
}
