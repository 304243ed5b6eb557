/**
 * A kernel's declared signature, and the one place launch arguments are checked against it and
 * written into the kernel's parameter block. Every check runs before the launch and throws a
 * TypeError or RangeError naming the kernel and the argument; nothing here allocates on the
 * success path (64-bit integers given as numbers are written as two 32-bit halves, not through
 * a BigInt), so a launch costs no garbage.
 */
import type { KernelParams, ParamType, ScalarParam } from '../backend/backend.js';
import { paramLayout, SCALAR_PARAM_BYTES } from '../backend/param-layout.js';
import { DeviceArray } from '../array/device-array.js';
import { VramStateError } from '../errors.js';
import { HostArray } from '../array/host-array.js';
import type { Device } from '../device.js';
import { DeviceMemory } from '../buffer/device-memory.js';
import { HostBuffer } from '../buffer/host-buffer.js';
import { addressOf } from '../buffer/lifetime.js';
import { beginOperation, movesOnReload, prepareUse } from '../buffer/spill/residency.js';
import type { StreamRef } from '../stream.js';

/**
 * A kernel's parameters, in order. Declare it `as const` (or inline) so launches are type-checked.
 * `'cptr'` marks a pointer the kernel only reads (C's `const T*`): spillable memory passed there
 * keeps its host copy current, so spilling it again copies nothing; `'ptr'` counts as written.
 */
export type Signature = readonly ParamType[];

/**
 * What a `ptr` parameter takes: device memory (a buffer or an array: its device address), mapped
 * host memory (a HostBuffer or HostArray allocated or registered with `mapped: true`: its device
 * view), or a raw address as a number (0 for NULL).
 */
export type PointerArg = DeviceMemory | DeviceArray | HostBuffer | HostArray | number;

/** The JavaScript value a parameter of type P takes. */
export type ArgOf<P extends ParamType> = P extends 'ptr' | 'cptr'
  ? PointerArg
  : P extends 'i64' | 'u64'
    ? number | bigint
    : P extends ScalarParam
      ? number
      : P extends { readonly struct: infer M extends readonly ScalarParam[] }
        ? { readonly [K in keyof M]: number | bigint }
        : never;

/** The arguments of a launch of a kernel with signature S, as a tuple. */
export type ArgsOf<S extends Signature> = { -readonly [K in keyof S]: S[K] extends ParamType ? ArgOf<S[K]> : never };

/** Integer ranges of the scalar types that take whole numbers. */
const INTEGER_RANGE: Readonly<Partial<Record<ScalarParam, readonly [number, number]>>> = {
  i8: [-128, 127],
  u8: [0, 255],
  i16: [-32768, 32767],
  u16: [0, 65535],
  i32: [-2147483648, 2147483647],
  u32: [0, 4294967295],
};

const TWO_32 = 4294967296;

/**
 * Checks a signature and returns a frozen copy (so a caller mutating its array later cannot make
 * it disagree with the parameter block laid out from it).
 *
 * @param signature The declared parameter types.
 * @param kernel The kernel's name, for messages.
 * @returns The same types, frozen.
 * @throws {TypeError} When it is not an array of parameter types.
 * @example
 * ```ts
 * checkSignature(['ptr', 'ptr', 'f32', 'u32'], 'saxpy');
 * ```
 */
export function checkSignature<S extends Signature>(signature: S, kernel: string): S {
  if (!Array.isArray(signature)) throw new TypeError(`kernel ${kernel}: the signature must be an array of parameter types`);
  const copy = signature.map((type: ParamType) =>
    typeof type === 'object' && type !== null ? Object.freeze({ struct: Object.freeze([...(Array.isArray(type.struct) ? type.struct : [])]) }) : type,
  );
  try {
    paramLayout(copy);
  } catch (error) {
    throw new TypeError(`kernel ${kernel}: ${error instanceof Error ? error.message : String(error)}`);
  }
  return Object.freeze(copy) as unknown as S;
}

/**
 * Checks `args` against the signature the block was laid out from and writes them into it.
 *
 * @param kernel The kernel's name, for messages.
 * @param device The device the kernel runs on: memory arguments must be addressable from it.
 * @param params The kernel's parameter block.
 * @param args The launch's arguments.
 * @param stream The launch's stream: spilled memory among the arguments is brought back on it,
 *   after every argument was checked (undefined: the legacy default stream).
 * @throws {TypeError} For a wrong argument count or an argument of the wrong kind.
 * @throws {RangeError} For an integer out of its type's range, or memory on a device the kernel's cannot address.
 * @throws {UseAfterFreeError} For memory that was freed.
 * @example
 * ```ts
 * writeArgs('saxpy', device, params, [y, x, 2, n]);
 * ```
 */
export function writeArgs(kernel: string, device: Device, params: KernelParams, args: readonly unknown[], stream?: StreamRef): void {
  const slots = params.slots;
  if (args.length !== slots.length) {
    throw new TypeError(`kernel ${kernel} takes ${slots.length} argument(s), got ${args.length}`);
  }
  const view = params.data;
  let memoryArgs = false;
  for (let i = 0; i < slots.length; i++) {
    const slot = slots[i]!;
    const type = slot.type;
    const value = args[i];
    if (type === 'ptr' || type === 'cptr') {
      if (type === 'ptr') refuseReadOnly(kernel, i, value);
      writeU64(view, slot.offset, pointerOf(kernel, i, device, value));
      if (typeof value === 'object') memoryArgs = true;
    } else if (typeof type === 'string') {
      writeScalar(kernel, i, view, slot.offset, type, value);
    } else {
      const members = type.struct;
      if (!Array.isArray(value) || value.length !== members.length) {
        throw new TypeError(`kernel ${kernel}: argument ${i} must be an array of ${members.length} numbers (a struct of ${members.join(', ')})`);
      }
      for (let m = 0; m < members.length; m++) {
        writeScalar(kernel, i, view, slot.offset + slot.memberOffsets[m]!, members[m]!, value[m]);
      }
    }
  }
  if (memoryArgs) prepareArgs(kernel, device, params, args, stream);
}

/**
 * After every argument was checked: spilled memory among them comes back, ordered on the launch's
 * stream, and the stream is recorded on it (so a later spill's copy out or a free waits for the
 * kernel); a `ptr` argument counts as written, a `cptr` as read.
 */
function prepareArgs(kernel: string, device: Device, params: KernelParams, args: readonly unknown[], stream: StreamRef | undefined): void {
  beginOperation();
  const slots = params.slots;
  for (let i = 0; i < slots.length; i++) {
    const slot = slots[i]!;
    const type = slot.type;
    if (type !== 'ptr' && type !== 'cptr') continue;
    const value = args[i];
    const memory = value instanceof DeviceArray ? value.buffer : value;
    if (memory instanceof DeviceMemory && prepareUse(memory, stream, type === 'ptr')) {
      memory.recordStream(stream ?? defaultStreamRef);
      // Spillable memory of a resource without virtual memory came back at a new address.
      if (movesOnReload(memory)) writeU64(params.data, slot.offset, pointerOf(kernel, i, device, value));
    }
  }
}

const defaultStreamRef: StreamRef = { handle: 0 };

/**
 * A `ptr` parameter may be written by the kernel, so read-only memory (a READ_ONLY DLPack tensor,
 * a `readOnly` import or foreign pointer) is refused there, as every other writing path refuses it.
 */
function refuseReadOnly(kernel: string, index: number, value: unknown): void {
  if ((value instanceof DeviceArray || value instanceof DeviceMemory) && value.readOnly) {
    throw new VramStateError(
      `kernel ${kernel}: argument ${index} is read-only memory (lent with readOnly by its producer), ` +
        "and a 'ptr' parameter may be written: declare it 'cptr' if the kernel only reads it, or pass a copy",
    );
  }
}

/** The device address a `ptr` argument stands for, checked. */
function pointerOf(kernel: string, index: number, device: Device, value: unknown): number {
  if (typeof value === 'number') {
    if (!Number.isSafeInteger(value) || value < 0) throw new RangeError(`kernel ${kernel}: argument ${index} is not an address: ${value}`);
    return value;
  }
  if (value instanceof DeviceArray) {
    const memory = value.buffer;
    if (memory instanceof DeviceMemory) {
      checkResident(kernel, index, device, memory);
      // The address without a spillable buffer's getter: prepareArgs brings it back on the stream.
      if (memory.freed) return value.ptr; // UseAfterFreeError, worded by the array
      return addressOf(memory) + value.byteOffset;
    }
    return value.ptr;
  }
  if (value instanceof DeviceMemory) {
    checkResident(kernel, index, device, value);
    return addressOf(value);
  }
  if (value instanceof HostArray) {
    if (!value.mapped) throw new TypeError(`kernel ${kernel}: argument ${index} is a HostArray that is not mapped (allocate it with { mapped: true })`);
    return value.buffer.devicePtr + value.byteOffset;
  }
  if (value instanceof HostBuffer) {
    if (!value.mapped) throw new TypeError(`kernel ${kernel}: argument ${index} is a HostBuffer that is not mapped (allocate it with { mapped: true })`);
    return value.devicePtr;
  }
  throw new TypeError(`kernel ${kernel}: argument ${index} must be device memory, an array, mapped host memory or an address, got ${describe(value)}`);
}

/** Device memory on another device is refused unless the kernel's device can address it as a peer. */
function checkResident(kernel: string, index: number, device: Device, memory: DeviceMemory): void {
  const resident = memory.residentDevice;
  if (resident === undefined || resident === device) return;
  if (resident.backend !== device.backend || !device.canAccessPeer(resident)) {
    throw new RangeError(`kernel ${kernel}: argument ${index} lives on device ${resident.ordinal}, which device ${device.ordinal} cannot address`);
  }
}

function writeScalar(kernel: string, index: number, view: DataView, offset: number, type: ScalarParam, value: unknown): void {
  if (type === 'f32' || type === 'f64') {
    if (typeof value !== 'number') throw new TypeError(`kernel ${kernel}: argument ${index} (${type}) must be a number, got ${describe(value)}`);
    if (type === 'f32') view.setFloat32(offset, value, true);
    else view.setFloat64(offset, value, true);
    return;
  }
  if (type === 'i64' || type === 'u64') {
    writeInt64(kernel, index, view, offset, type, value);
    return;
  }
  if (typeof value !== 'number') throw new TypeError(`kernel ${kernel}: argument ${index} (${type}) must be a number, got ${describe(value)}`);
  const [low, high] = INTEGER_RANGE[type]!;
  if (!Number.isInteger(value) || value < low || value > high) {
    throw new RangeError(`kernel ${kernel}: argument ${index} (${type}) must be a whole number from ${low} to ${high}, got ${value}`);
  }
  switch (SCALAR_PARAM_BYTES[type]) {
    case 1:
      view.setUint8(offset, value & 0xff);
      break;
    case 2:
      view.setUint16(offset, value & 0xffff, true);
      break;
    default:
      view.setUint32(offset, value >>> 0, true);
      break;
  }
}

function writeInt64(kernel: string, index: number, view: DataView, offset: number, type: 'i64' | 'u64', value: unknown): void {
  if (typeof value === 'bigint') {
    const ok = type === 'u64' ? value >= 0n && value < 1n << 64n : value >= -(1n << 63n) && value < 1n << 63n;
    if (!ok) throw new RangeError(`kernel ${kernel}: argument ${index} (${type}) is out of range: ${value}`);
    if (type === 'u64') view.setBigUint64(offset, value, true);
    else view.setBigInt64(offset, value, true);
    return;
  }
  if (typeof value !== 'number') throw new TypeError(`kernel ${kernel}: argument ${index} (${type}) must be a number or a bigint, got ${describe(value)}`);
  if (!Number.isSafeInteger(value) || (type === 'u64' && value < 0)) {
    throw new RangeError(
      `kernel ${kernel}: argument ${index} (${type}) must be a whole number${type === 'u64' ? ' >= 0' : ''} exact in a number (pass a bigint beyond 2^53), got ${value}`,
    );
  }
  writeU64(view, offset, value);
}

/** Writes a safe integer (negative ones as two's complement) as 64 bits, without a BigInt. */
function writeU64(view: DataView, offset: number, value: number): void {
  const high = Math.floor(value / TWO_32);
  view.setUint32(offset, value - high * TWO_32, true);
  view.setInt32(offset + 4, high, true);
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (typeof value === 'object') return value.constructor?.name ?? 'an object';
  return typeof value;
}
