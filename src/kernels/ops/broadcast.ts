/**
 * Broadcasting, NumPy's rules: shapes are aligned at their last dimension; each dimension of the
 * result is the largest of the operands' (missing dimensions count as 1), and every operand's
 * extent there is either that or 1. An operand is read along a broadcast dimension with stride 0,
 * so no data is copied: the kernels index every operand with its own layout of the result's shape
 * (kernel-layout.ts), and a stride of 0 reads the same element again.
 */
import { formatShape, type Shape } from '../../array/shape.js';

/** An operand's name (as messages say it) and shape. */
export interface NamedShape {
  readonly name: string;
  readonly shape: Shape;
}

/**
 * The shape operands broadcast to.
 *
 * @param operands The operands' names and shapes.
 * @param what The operation, for messages.
 * @returns The result's shape.
 * @throws {RangeError} When two operands do not broadcast, naming both and their shapes.
 * @example
 * ```ts
 * broadcastShape([{ name: 'x', shape: [3, 1] }, { name: 'y', shape: [4] }], 'zipWith'); // [3, 4]
 * ```
 */
export function broadcastShape(operands: readonly NamedShape[], what: string): number[] {
  const ndim = Math.max(0, ...operands.map((o) => o.shape.length));
  const out = new Array<number>(ndim).fill(1);
  // Which operand set each dimension, for the message when another one disagrees.
  const from = new Array<NamedShape | undefined>(ndim).fill(undefined);
  for (const o of operands) {
    const lead = ndim - o.shape.length;
    for (let d = 0; d < o.shape.length; d++) {
      const n = o.shape[d]!;
      const current = out[lead + d]!;
      if (n === current || n === 1) continue;
      if (current !== 1) {
        const other = from[lead + d]!;
        throw new RangeError(
          `${what}: ${other.name} has shape ${formatShape(other.shape)} and ${o.name} ${formatShape(o.shape)}, ` +
            'which do not broadcast (aligned from the last dimension, each pair of extents must be equal or one of them 1)',
        );
      }
      out[lead + d] = n;
      from[lead + d] = o;
    }
  }
  return out;
}

/**
 * An operand's strides in the broadcast shape: 0 along the dimensions it lacks or has as 1 where
 * the result is larger, its own stride elsewhere.
 *
 * @param shape The operand's shape (broadcastable to `target`).
 * @param strides The operand's strides, in elements.
 * @param target The broadcast shape.
 * @returns One stride per dimension of `target`.
 * @throws Never (the shapes were checked by `broadcastShape`).
 * @example
 * ```ts
 * broadcastStrides([4], [1], [3, 4]); // [0, 1]
 * ```
 */
export function broadcastStrides(shape: Shape, strides: readonly number[], target: Shape): number[] {
  const lead = target.length - shape.length;
  return target.map((n, d) => (d < lead || (shape[d - lead] === 1 && n !== 1) ? 0 : strides[d - lead]!));
}
