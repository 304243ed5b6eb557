/**
 * Operands that share memory with an output. A kernel that writes element i of one view while
 * another thread still reads a byte of it through another view (a reversed or shifted view of the
 * same array) gives a result that depends on thread order. Built-in operations compute as NumPy
 * does, as if every input had been copied before the first write: the inputs that may share a
 * byte with an output are copied (one kernel on the operation's stream) and the copy is read
 * instead. An operand naming exactly the output's elements in the same order (`map(a, 'x * 2',
 * { out: a })`) is read and written by one thread per element, which is safe and needs no copy.
 * Two outputs sharing bytes in different orders have no such meaning and are refused.
 */
import { addressOfArray, type DeviceArray } from '../../array/device-array.js';
import { mayShareBytes, sameElements } from '../../array/layout.js';
import { VramStateError } from '../../errors.js';
import type { StreamRef } from '../../stream.js';
import { ascontiguous } from './ascontiguous.js';

/** An array an operation reads or writes, with the name its messages use. */
export interface Operand {
  /** How messages name it (`x`, `out`). */
  readonly name: string;
  /** The checked, live array. */
  readonly array: DeviceArray;
  /** True when the operation writes it. */
  readonly written: boolean;
}

/** The arrays to launch with, and what to do once the launch is queued. */
export interface Separated {
  /** The operands' arrays in order, with copies in place of inputs that share bytes with an output. */
  readonly arrays: readonly DeviceArray[];
  /** Frees the copies, in the operation's stream order (after the launch that reads them). */
  release(): void;
}

/**
 * Replaces every input that may share a byte with an output by a contiguous copy of it.
 *
 * @param what The operation, for messages.
 * @param operands Every array the launch reads or writes.
 * @param stream The operation's stream: the copies are made and freed on it.
 * @returns The arrays to launch with and the release of the copies.
 * @throws {VramStateError} When two outputs share bytes without naming the same elements in one order.
 * @throws {OutOfMemoryError} When there is no memory for a copy.
 * @example
 * ```ts
 * const { arrays, release } = separateOperands('map', [{ name: 'x', array: a, written: false }, { name: 'out', array: out, written: true }], stream);
 * try { launch(arrays); } finally { release(); }
 * ```
 */
export function separateOperands(what: string, operands: readonly Operand[], stream: StreamRef): Separated {
  // Compared by address, not by buffer: two wrappers of one memory (a fromPointer or fromBuffer
  // view, a re-imported export) share bytes as surely as two views of one array.
  // Not `array.ptr`: on spillable memory that getter reloads it and counts a write (operands are prepared by the launch).
  const base = operands.map((o) => addressOfArray(o.array) - o.array.byteOffset);
  const copy = operands.map(() => false);
  operands.forEach((w, i) => {
    if (!w.written) return;
    operands.forEach((o, j) => {
      if (i === j || copy[j]) return;
      const a = w.array.layout;
      const b = o.array.layout;
      if (sameElements(a, base[i]!, b, base[j]!) || !mayShareBytes(a, base[i]!, b, base[j]!)) return;
      if (o.written) {
        throw new VramStateError(`${what}: ${w.name} and ${o.name} are both written and share memory in different element orders; write one into a new array`);
      }
      copy[j] = true;
    });
  });
  const copies: DeviceArray[] = [];
  const release = (): void => {
    for (const c of copies) c.free();
  };
  try {
    const arrays = operands.map((o, j) => {
      if (!copy[j]) return o.array;
      const c = ascontiguous(o.array, { stream });
      copies.push(c);
      return c;
    });
    return { arrays, release };
  } catch (error) {
    release();
    throw error;
  }
}
