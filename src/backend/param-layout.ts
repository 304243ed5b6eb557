/**
 * Kernel parameter blocks as the launch primitive packs them: each scalar's size and alignment
 * (the C ABI of x86-64 and aarch64) and `paramLayout`, the slot of each parameter in one block.
 */
import type { ParamSlot, ParamType, ScalarParam } from './backend.js';

/** Bytes and alignment of each scalar parameter type (the C ABI of x86-64 and aarch64). */
export const SCALAR_PARAM_BYTES: Readonly<Record<ScalarParam, 1 | 2 | 4 | 8>> = {
  i8: 1,
  u8: 1,
  i16: 2,
  u16: 2,
  i32: 4,
  u32: 4,
  i64: 8,
  u64: 8,
  f32: 4,
  f64: 8,
};

/**
 * Lays out a kernel's parameters, each at its own aligned offset in one block (cuLaunchKernel
 * takes one pointer per parameter, so they need not be packed as the kernel sees them; only a
 * struct's members follow C's layout, as the kernel reads the struct's bytes).
 *
 * @param types The parameters, in order.
 * @returns Each parameter's slot, and the block's size (a multiple of 8, at least 8).
 * @throws {TypeError} For a type that is not a ParamType.
 * @example
 * ```ts
 * paramLayout(['ptr', 'i32', { struct: ['f32', 'f64'] }]).slots.map((s) => s.offset); // [0, 8, 16]
 * ```
 */
export function paramLayout(types: readonly ParamType[]): { readonly slots: readonly ParamSlot[]; readonly bytes: number } {
  const slots: ParamSlot[] = [];
  let end = 0;
  for (const type of types) {
    let bytes: number;
    let align: number;
    const memberOffsets: number[] = [];
    if (type === 'ptr' || type === 'cptr') {
      bytes = 8;
      align = 8;
    } else if (typeof type === 'string' && Object.hasOwn(SCALAR_PARAM_BYTES, type)) {
      bytes = SCALAR_PARAM_BYTES[type];
      align = bytes;
    } else if (typeof type === 'object' && type !== null && Array.isArray(type.struct) && type.struct.length > 0) {
      const members: readonly ScalarParam[] = type.struct;
      let at = 0;
      align = 1;
      for (const member of members) {
        if (!Object.hasOwn(SCALAR_PARAM_BYTES, member)) throw new TypeError(`paramLayout: struct member ${String(member)} is not a scalar type`);
        const size = SCALAR_PARAM_BYTES[member];
        at = Math.ceil(at / size) * size;
        memberOffsets.push(at);
        at += size;
        align = Math.max(align, size);
      }
      bytes = Math.ceil(at / align) * align;
    } else {
      throw new TypeError(`paramLayout: ${JSON.stringify(type)} is not a parameter type ('ptr', 'cptr', a scalar or { struct: [...] })`);
    }
    const offset = Math.ceil(end / align) * align;
    slots.push({ type, offset, bytes, align, memberOffsets });
    end = offset + bytes;
  }
  return { slots, bytes: Math.max(8, Math.ceil(end / 8) * 8) };
}
