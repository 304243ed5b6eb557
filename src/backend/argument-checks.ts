/**
 * The argument checks both backends make before the driver, for the calls whose arguments koffi
 * would otherwise pass on unchecked: stream memory operations and legacy IPC handles.
 */
import { IPC_HANDLE_BYTES, StreamWaitValueFlags, StreamWriteValueFlags } from './backend.js';

/**
 * The argument checks both backends make for `streamWaitValue32` / `streamWriteValue32` before
 * any driver call: `addr` a whole number > 0 aligned to 4 bytes, `value` a 32-bit unsigned whole
 * number, `flags` one the call supports. A non-number is a TypeError, the rest RangeErrors.
 */
export function checkStreamValue32(call: 'streamWaitValue32' | 'streamWriteValue32', addr: unknown, value: unknown, flags: unknown): void {
  for (const [name, v] of [
    ['addr', addr],
    ['value', value],
    ['flags', flags],
  ] as const) {
    if (typeof v !== 'number') throw new TypeError(`${call}: ${name} must be a number, got ${typeof v}`);
  }
  const a = addr as number;
  const v = value as number;
  const f = flags as number;
  if (!Number.isSafeInteger(a) || a <= 0) throw new RangeError(`${call}: addr must be a device address (a whole number > 0), got ${a}`);
  if (a % 4 !== 0) throw new RangeError(`${call}: addr 0x${a.toString(16)} is not aligned to 4 bytes`);
  if (!Number.isInteger(v) || v < 0 || v > 0xffffffff) throw new RangeError(`${call}: value must be a 32-bit unsigned whole number, got ${v}`);
  const maxFlag = call === 'streamWaitValue32' ? StreamWaitValueFlags.NOR : StreamWriteValueFlags.DEFAULT;
  if (!Number.isInteger(f) || f < 0 || f > maxFlag) {
    const known = call === 'streamWaitValue32' ? 'a StreamWaitValueFlags value (GEQ, EQ, AND or NOR)' : 'StreamWriteValueFlags.DEFAULT (0)';
    throw new RangeError(`${call}: flags must be ${known}, got ${f}`);
  }
}

/**
 * The argument check both backends make on a handle given to `ipcOpenMemHandle` /
 * `ipcOpenEventHandle`, before any driver call: a Uint8Array of exactly 64 bytes (koffi would
 * zero-fill or cut anything else into the by-value struct), else a TypeError.
 */
export function checkIpcHandle(handle: unknown, call: string): Uint8Array {
  if (!(handle instanceof Uint8Array) || handle.length !== IPC_HANDLE_BYTES) {
    throw new TypeError(`${call}: the handle must be a Uint8Array of ${IPC_HANDLE_BYTES} bytes`);
  }
  return handle;
}
