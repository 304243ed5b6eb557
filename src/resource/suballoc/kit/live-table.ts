/**
 * Live blocks by address: an open-addressing hash table over typed arrays (linear probing,
 * backward-shift deletion). A JavaScript Map keyed by addresses above 2^31 boxes every key as a
 * heap number, which makes garbage on every allocation; this table makes none.
 *
 * Slots come from the top bits of a multiplicative (Fibonacci) hash: the low bits of a product
 * depend only on the low bits of the key, so slot = low bits would put blocks whose addresses
 * differ only above bit 25 (64 MiB-aligned blocks, say) into one probe run.
 */
const EMPTY = -1;

/** Address -> block index. Addresses are multiples of 256 (the low 8 bits are not hashed). */
export class LiveTable {
  private keys: Float64Array;
  private vals: Int32Array;
  private mask: number;
  /** 32 - log2(capacity): the product's top bits index the slots. */
  private shift: number;
  /** Number of entries. */
  size = 0;

  constructor(capacity = 1024) {
    this.keys = new Float64Array(capacity);
    this.vals = new Int32Array(capacity).fill(EMPTY);
    this.mask = capacity - 1;
    this.shift = Math.clz32(capacity) + 1;
  }

  /** The block at `ptr`, or -1. */
  get(ptr: number): number {
    const keys = this.keys;
    const vals = this.vals;
    const mask = this.mask;
    for (let i = hash(ptr, this.shift); ; i = (i + 1) & mask) {
      const v = vals[i]!;
      if (v === EMPTY) return EMPTY;
      if (keys[i] === ptr) return v;
    }
  }

  /** Adds `ptr` -> `block` (ptr must not be present). */
  set(ptr: number, block: number): void {
    if ((this.size + 1) * 2 > this.keys.length) this.resize(this.keys.length * 2);
    const mask = this.mask;
    let i = hash(ptr, this.shift);
    while (this.vals[i] !== EMPTY) i = (i + 1) & mask;
    this.keys[i] = ptr;
    this.vals[i] = block;
    this.size++;
  }

  /** Removes `ptr`; returns its block or -1. */
  delete(ptr: number): number {
    const keys = this.keys;
    const vals = this.vals;
    const mask = this.mask;
    const shift = this.shift;
    let i = hash(ptr, shift);
    for (; ; i = (i + 1) & mask) {
      if (vals[i] === EMPTY) return EMPTY;
      if (keys[i] === ptr) break;
    }
    const found = vals[i]!;
    // Backward-shift: move later entries of the probe run into the hole.
    for (let j = (i + 1) & mask; vals[j] !== EMPTY; j = (j + 1) & mask) {
      const home = hash(keys[j]!, shift);
      if (((j - home) & mask) >= ((j - i) & mask)) {
        keys[i] = keys[j]!;
        vals[i] = vals[j]!;
        i = j;
      }
    }
    vals[i] = EMPTY;
    this.size--;
    return found;
  }

  /** Every live block index. */
  values(): number[] {
    const out: number[] = [];
    for (let i = 0; i < this.vals.length; i++) if (this.vals[i] !== EMPTY) out.push(this.vals[i]!);
    return out;
  }

  /** Every entry as [address, block], for error paths and teardown. */
  entries(): Array<[ptr: number, block: number]> {
    const out: Array<[number, number]> = [];
    for (let i = 0; i < this.vals.length; i++) if (this.vals[i] !== EMPTY) out.push([this.keys[i]!, this.vals[i]!]);
    return out;
  }

  private resize(capacity: number): void {
    const keys = this.keys;
    const vals = this.vals;
    this.keys = new Float64Array(capacity);
    this.vals = new Int32Array(capacity).fill(EMPTY);
    this.mask = capacity - 1;
    this.shift = Math.clz32(capacity) + 1;
    this.size = 0;
    for (let i = 0; i < vals.length; i++) if (vals[i] !== EMPTY) this.set(keys[i]!, vals[i]!);
  }
}

/** Slot of `ptr` in a table of 2^(32 - shift) slots. */
function hash(ptr: number, shift: number): number {
  const u = ptr / 256;
  // Fold the bits above the low 32 (addresses reach 2^49) into them, then take the product's top bits.
  return Math.imul((u | 0) ^ ((u / 4294967296) | 0), 0x9e3779b1) >>> shift;
}
