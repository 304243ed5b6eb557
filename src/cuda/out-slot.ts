/**
 * A 64-bit out-parameter that lives in native memory, for the hot allocation calls
 * (cuMemAllocAsync, cuMemAllocFromPoolAsync, cuMemAlloc).
 *
 * Why not a BigUint64Array like every other out-parameter: koffi resolves a typed array passed for
 * a pointer parameter with several Node-API calls on every call, and `Number(u64[0])` goes through
 * a BigInt; together that was ~35 ns of a ~125 ns allocate+free pair on the stub driver of
 * bench/ffi-overhead/run.mjs. Here the slot's address is fixed once, so those entry points are
 * bound with the out-parameter declared as an integer (`uint64_t`) and handed that address as a
 * plain number (koffi's cheapest argument, and no pointer parameter left at all), and the value is
 * read through a Uint32Array alias as `lo + hi * 2^32`, exact below 2^53, with no BigInt.
 */
import koffi from 'koffi';

/** The largest high word of a value below 2^53: above it a number cannot hold the value exactly. */
export const HIGH_WORD_MAX = 0x1fffff;
/** 2^32, the weight of the high word. */
export const TWO_32 = 4294967296;

/** One native 64-bit slot. Allocated once per backend and never freed (it lives as long as the driver). */
export class OutSlot {
  /** The slot's address, passed as a number for the entry point's `uint64_t` out-parameter. */
  readonly address: number;
  /** The slot as two 32-bit words, low word first (little-endian host). */
  readonly words: Uint32Array;
  /** The slot as one double: storing 0 clears all 64 bits in one write. */
  readonly zero: Float64Array;

  constructor() {
    if (new Uint8Array(Uint16Array.of(1).buffer)[0] !== 1) {
      throw new Error('vram needs a little-endian host');
    }
    const pointer = koffi.alloc('uint64_t', 1) as bigint;
    const address = Number(pointer);
    if (BigInt(address) !== pointer) throw new Error(`native memory at 0x${pointer.toString(16)} is beyond 2^53`);
    const memory = koffi.view(pointer, 8);
    this.address = address;
    this.words = new Uint32Array(memory, 0, 2);
    this.zero = new Float64Array(memory, 0, 1);
    this.zero[0] = 0;
  }
}

/** The error for a slot value of 2^53 or more (high word above HIGH_WORD_MAX), with the exact value in hex. */
export function beyondExactError(call: string, low: number, high: number): RangeError {
  const hex = ((BigInt(high) << 32n) | BigInt(low)).toString(16);
  return new RangeError(`${call} returned 0x${hex}, beyond 2^53: not representable as a JavaScript number`);
}
