/**
 * The reductions of the emulated collectives, on the host: NCCL's ops (sum, prod, max, min, avg)
 * over one element type, every rank's contribution combined in rank order, so that every rank
 * computes the same bits. Integers wrap as they do on the GPU (stored into their TypedArray, a
 * 32-bit product through Math.imul); avg is the sum divided by the number of ranks, truncated
 * toward zero for integers (NCCL's sum-then-divide); half and bfloat16 are reduced in float32.
 */
import { decodeBfloat16, decodeFloat16, encodeBfloat16, encodeFloat16 } from '../array/half.js';
import type { CollectiveDataType, CollectiveReduceOp } from '../backend/collectives.js';

type Numeric = Float64Array | Float32Array | Int32Array | Uint32Array | Int8Array | Uint8Array;

/** A copy of `bytes` at an aligned offset, viewed as `make`'s type (a Buffer's own slice() would not copy). */
function view<T>(bytes: Uint8Array, make: (buffer: ArrayBuffer) => T): T {
  return make(new Uint8Array(bytes).buffer);
}

/** One element-wise step of `op` on numbers. */
function numberStep(op: CollectiveReduceOp, imul: boolean): (a: number, b: number) => number {
  switch (op) {
    case 'sum':
    case 'avg':
      return (a, b) => a + b;
    case 'prod':
      return imul ? Math.imul : (a, b) => a * b;
    case 'max':
      return (a, b) => (b > a || Number.isNaN(b) ? b : a);
    case 'min':
      return (a, b) => (b < a || Number.isNaN(b) ? b : a);
  }
}

/** One element-wise step of `op` on bigints. */
function bigintStep(op: CollectiveReduceOp): (a: bigint, b: bigint) => bigint {
  switch (op) {
    case 'sum':
    case 'avg':
      return (a, b) => a + b;
    case 'prod':
      return (a, b) => a * b;
    case 'max':
      return (a, b) => (b > a ? b : a);
    case 'min':
      return (a, b) => (b < a ? b : a);
  }
}

/**
 * Reduces every input's bytes [offset, offset + out.byteLength) element-wise into `out`.
 *
 * @param out Where the result goes (its length is the slice's).
 * @param inputs Each rank's payload, in rank order.
 * @param offset Byte offset of the slice within each input (reduceScatter's rank slice).
 * @param type The element type.
 * @param op The operator.
 */
export function reduceInto(out: Uint8Array, inputs: readonly Uint8Array[], offset: number, type: CollectiveDataType, op: CollectiveReduceOp): void {
  const slices = inputs.map((input) => input.subarray(offset, offset + out.byteLength));
  const ranks = inputs.length;
  if (type === 'int64' || type === 'uint64') {
    const make = (b: ArrayBuffer): BigInt64Array | BigUint64Array => (type === 'int64' ? new BigInt64Array(b) : new BigUint64Array(b));
    const acc = view(slices[0]!, make);
    const step = bigintStep(op);
    for (const slice of slices.slice(1)) {
      const v = view(slice, make);
      for (let i = 0; i < acc.length; i++) acc[i] = step(acc[i]!, v[i]!);
    }
    if (op === 'avg') for (let i = 0; i < acc.length; i++) acc[i] = acc[i]! / BigInt(ranks);
    out.set(new Uint8Array(acc.buffer));
    return;
  }
  if (type === 'float16' || type === 'bfloat16') {
    const decode = type === 'float16' ? decodeFloat16 : decodeBfloat16;
    const halves = slices.map((slice) => decode(view(slice, (b) => new Uint16Array(b))));
    const acc = halves[0]!;
    const step = numberStep(op, false);
    for (const v of halves.slice(1)) for (let i = 0; i < acc.length; i++) acc[i] = step(acc[i]!, v[i]!);
    if (op === 'avg') for (let i = 0; i < acc.length; i++) acc[i] = acc[i]! / ranks;
    const encoded = type === 'float16' ? encodeFloat16(acc) : encodeBfloat16(acc);
    out.set(new Uint8Array(encoded.buffer));
    return;
  }
  const make = (b: ArrayBuffer): Numeric => {
    switch (type) {
      case 'float64':
        return new Float64Array(b);
      case 'float32':
        return new Float32Array(b);
      case 'int32':
        return new Int32Array(b);
      case 'uint32':
        return new Uint32Array(b);
      case 'int8':
        return new Int8Array(b);
      default:
        return new Uint8Array(b); // uint8, bool
    }
  };
  const acc = view(slices[0]!, make);
  const step = numberStep(op, type === 'int32' || type === 'uint32');
  for (const slice of slices.slice(1)) {
    const v = view(slice, make);
    for (let i = 0; i < acc.length; i++) acc[i] = step(acc[i]!, v[i]!);
  }
  if (op === 'avg') {
    const float = type === 'float32' || type === 'float64';
    for (let i = 0; i < acc.length; i++) acc[i] = float ? acc[i]! / ranks : Math.trunc(acc[i]! / ranks);
  }
  out.set(new Uint8Array(acc.buffer));
}
