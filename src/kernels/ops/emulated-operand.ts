/**
 * How the emulated kernels reach an operand: the bytes its layout spans, asked of emulated memory
 * once per launch (so a layout reaching outside its allocation faults there, as on a GPU), and a
 * DataView with the byte position of element (0, ..., 0) in it.
 */
import type { EmulatedAccess, EmulatedMemory } from '../../backend/backend.js';

/** An operand's bytes: element `e`, component `c` is at `base + e * elementBytes + c * componentBytes`. */
export interface EmulatedOperand {
  readonly view: DataView;
  readonly base: number;
}

/**
 * One operand of a launch: where element (0, ..., 0) is, the lowest and one-past-highest element
 * offsets it reaches (`layoutSpan`), and the element size.
 */
export interface OperandSpec {
  readonly ptr: number;
  readonly lo: number;
  readonly hi: number;
  readonly elementBytes: number;
  /** What the kernel does with the operand's bytes (default 'readwrite'; 'write' only where it writes every byte of [lo, hi)). */
  readonly access?: EmulatedAccess;
}

/**
 * The bytes each operand spans, from emulated memory.
 * Emulated memory hands out each range once per launch and refuses one that partly overlaps
 * another, so ranges that overlap (two views of one buffer, an output that is also an input) are
 * merged and asked for once: the union of overlapping ranges lies in the one allocation both do.
 *
 * @param memory Emulated memory (the launch's).
 * @param specs The operands.
 * @returns Per operand, a view and the position of its element (0, ..., 0) in it.
 * @throws Whatever `memory.bytes` throws for a range outside an allocation (the emulated fault).
 * @example
 * ```ts
 * const [x] = operands(launch.memory, [{ ptr, ...layoutSpan(layout, n), elementBytes: 4 }]);
 * x.view.getFloat32(x.base + layoutOffset(layout, i) * 4, true);
 * ```
 */
export function operands(memory: EmulatedMemory, specs: readonly OperandSpec[]): EmulatedOperand[] {
  const ranges = specs.map((s, index) => ({ index, start: s.ptr + s.lo * s.elementBytes, end: s.ptr + s.hi * s.elementBytes }));
  const out = new Array<EmulatedOperand>(specs.length);
  const sorted = ranges.filter((r) => r.end > r.start).sort((a, b) => a.start - b.start);
  for (let i = 0; i < sorted.length;) {
    let end = sorted[i]!.end;
    let j = i + 1;
    while (j < sorted.length && sorted[j]!.start < end) end = Math.max(end, sorted[j++]!.end);
    const start = sorted[i]!.start;
    // Ranges merged are asked for once: read-only only if every one is, write-only never (one alone is as asked).
    const group = sorted.slice(i, j).map((r) => specs[r.index]!.access ?? 'readwrite');
    const access = group.length === 1 ? group[0]! : group.every((a) => a === 'read') ? 'read' : 'readwrite';
    const bytes = memory.bytes(start, end - start, access);
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    for (let k = i; k < j; k++) {
      const r = sorted[k]!;
      out[r.index] = { view, base: specs[r.index]!.ptr - start };
    }
    i = j;
  }
  for (const r of ranges) if (r.end <= r.start) out[r.index] = { view: new DataView(new ArrayBuffer(0)), base: 0 };
  return out;
}
