/**
 * How an array prints (`console.log`, `util.inspect`): its `String()` header, then its values as
 * NumPy prints them, nested brackets row by row. An array of more than `SUMMARY_THRESHOLD`
 * elements is summarised as NumPy summarises it: the first and last `EDGE_ITEMS` of each
 * dimension around `...`, and only those are read, through views (a 10-million-element device
 * array copies the 6 values it prints, never the whole array). Written against the few members it
 * needs (`ArrayLike`), so it depends on no array class.
 */
import type { DTypeName } from './dtype.js';
import { bfloat16Bits, float16Bits, fromBfloat16Bits, fromFloat16Bits } from './half.js';
import type { NestedArray } from './host-data.js';

/** Above this many elements an array is summarised (NumPy's `threshold`). */
export const SUMMARY_THRESHOLD = 1000;

/** Values printed at each end of a summarised dimension (NumPy's `edgeitems`). */
export const EDGE_ITEMS = 3;

/** What formatting reads of an array: its header, dtype, shape, views and values. */
export interface PrintableArray {
  readonly dtype: { readonly name: DTypeName; readonly components: number };
  readonly shape: readonly number[];
  readonly size: number;
  readonly freed: boolean;
  slice(...specs: (number | readonly [number, number])[]): PrintableArray;
  toArray(): NestedArray;
  toString(): string;
}

/** The gap a summarised dimension shows. */
const GAP: unique symbol = Symbol('...');

/** Values gathered for printing: elements (a vector dtype's as component arrays), rows, and gaps. */
type Gathered = unknown;

/**
 * Reads what will be printed: everything for a small array (one copy), the edges of each
 * dimension for a large one (two small copies per printed row).
 */
function gather(a: PrintableArray, summarise: boolean): Gathered[] {
  const n = a.shape[0]!;
  const cut = summarise && n > 2 * EDGE_ITEMS;
  if (a.shape.length === 1) {
    if (!cut) return a.toArray() as Gathered[];
    return [...(a.slice([0, EDGE_ITEMS]).toArray() as Gathered[]), GAP, ...(a.slice([n - EDGE_ITEMS, n]).toArray() as Gathered[])];
  }
  const rows: Gathered[] = [];
  for (let i = 0; i < n; i++) {
    if (cut && i === EDGE_ITEMS) {
      rows.push(GAP);
      i = n - EDGE_ITEMS - 1;
      continue;
    }
    rows.push(gather(a.slice(i), summarise));
  }
  return rows;
}

/** How a float dtype rounds a double: the shortest digits that round back to the value are printed. */
const ROUNDING: Partial<Record<DTypeName, (x: number) => number>> = {
  float32: Math.fround,
  float2: Math.fround,
  float3: Math.fround,
  float4: Math.fround,
  float16: (x) => fromFloat16Bits(float16Bits(x)),
  half2: (x) => fromFloat16Bits(float16Bits(x)),
  bfloat16: (x) => fromBfloat16Bits(bfloat16Bits(x)),
  bfloat162: (x) => fromBfloat16Bits(bfloat16Bits(x)),
};

/**
 * One element as text: a float as the fewest digits that read back as the same value of its dtype
 * (float32's 3.1 is `3.1`, not 3.0999999: what NumPy prints), integers and bigints as digits.
 */
function formatElement(value: unknown, dtype: DTypeName): string {
  if (Array.isArray(value)) return `(${value.map((v) => formatElement(v, dtype)).join(', ')})`;
  const round = ROUNDING[dtype];
  if (typeof value === 'number' && round !== undefined && !Number.isInteger(value) && Number.isFinite(value)) {
    for (let digits = 1; digits < 17; digits++) {
      const text = value.toPrecision(digits);
      if (round(Number(text)) === value) return String(Number(text));
    }
  }
  return String(value);
}

/** Rows as NumPy prints them: `[1, 2, 3]`, or rows under one another, indented by depth. */
function render(values: Gathered[], depth: number, ndim: number, dtype: DTypeName): string {
  if (depth === ndim - 1) return `[${values.map((v) => (v === GAP ? '...' : formatElement(v, dtype))).join(', ')}]`;
  const indent = ' '.repeat(depth + 1);
  return `[${values.map((v, i) => `${i === 0 ? '' : indent}${v === GAP ? '...' : render(v as Gathered[], depth + 1, ndim, dtype)}`).join(',\n')}]`;
}

/**
 * An array as `console.log` shows it: the header (`String(array)`), then its values; a freed
 * array, or one whose values cannot be read, shows the header and says so.
 *
 * @param array The array.
 * @returns One line for a 0-d or 1-D array, a short block for more dimensions.
 * @throws Never: a failed read is printed, not thrown.
 * @example
 * ```ts
 * formatArray(DeviceArray.from([1, 2, 3])); // 'DeviceArray<float32>(3,) on device 0 [1, 2, 3]'
 * ```
 */
export function formatArray(array: PrintableArray): string {
  const header = String(array);
  if (array.freed) return header;
  let body: string;
  try {
    const ndim = array.shape.length;
    if (ndim === 0) {
      body = formatElement(array.toArray()[0], array.dtype.name);
    } else if (array.size === 0) {
      body = '[]';
    } else {
      body = render(gather(array, array.size > SUMMARY_THRESHOLD), 0, ndim, array.dtype.name);
    }
  } catch (error) {
    return `${header} <values not readable: ${error instanceof Error ? error.message : String(error)}>`;
  }
  return body.includes('\n') ? `${header}\n${body}` : `${header} ${body}`;
}
