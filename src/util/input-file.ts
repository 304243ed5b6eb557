/**
 * Reading a text file a user named (an allocation log, a memory snapshot) without trusting the
 * name: only a regular file is read (a FIFO would block the process forever, `/dev/zero` would
 * never end), at most `maxBytes` of it (a file that keeps growing, or one whose size the system
 * does not report, as in `/proc`, is cut off by the count read, not by its stated size), as UTF-8
 * with a leading byte-order mark accepted and dropped, as editors on Windows write it.
 */
import { closeSync, constants, fstatSync, openSync, readSync } from 'node:fs';
import { constants as bufferConstants } from 'node:buffer';
import { VramError } from '../errors.js';

/**
 * The most bytes `readTextFile` reads by default: the longest string V8 can make (a UTF-8 file of
 * more bytes could not be held as one string anyway).
 */
export const MAX_TEXT_FILE_BYTES: number = bufferConstants.MAX_STRING_LENGTH;

/**
 * A named file that cannot be read as text: not a regular file, too large, or not UTF-8.
 *
 * @example
 * ```ts
 * try { readAllocationLog('/dev/zero'); } catch (e) { if (e instanceof InputFileError) console.error(e.path, e.message); }
 * ```
 */
export class InputFileError extends VramError {
  /**
   * @param path The path as given.
   * @param reason Why it cannot be read; the message is `path: reason`.
   * @throws Never.
   * @example
   * ```ts
   * throw new InputFileError('trace.csv', 'not UTF-8');
   * ```
   */
  constructor(
    /** The path as given. */
    readonly path: string,
    reason: string,
  ) {
    super(`${path}: ${reason}`);
  }
}

/** What kind of thing a stat result is, for the message. */
function kindOf(stats: ReturnType<typeof fstatSync>): string {
  if (stats.isDirectory()) return 'a directory';
  if (stats.isFIFO()) return 'a FIFO (named pipe)';
  if (stats.isCharacterDevice()) return 'a character device';
  if (stats.isBlockDevice()) return 'a block device';
  if (stats.isSocket()) return 'a socket';
  return 'not a regular file';
}

/**
 * Reads a regular file as UTF-8 text.
 *
 * @param path The file's path.
 * @param maxBytes The most bytes read (MAX_TEXT_FILE_BYTES by default).
 * @returns Its text, without a leading byte-order mark.
 * @throws {InputFileError} When the path is not a regular file, holds more than `maxBytes`, or is
 *   not valid UTF-8.
 * @throws {Error} The system's error when the file cannot be opened (e.g. ENOENT, EACCES).
 * @example
 * ```ts
 * const snapshot = JSON.parse(readTextFile('oom.json')) as unknown;
 * ```
 */
export function readTextFile(path: string, maxBytes: number = MAX_TEXT_FILE_BYTES): string {
  // Non-blocking open: opening a FIFO with no writer would otherwise wait for one before fstat.
  const fd = openSync(path, constants.O_RDONLY | (constants.O_NONBLOCK ?? 0));
  try {
    const stats = fstatSync(fd);
    if (!stats.isFile()) throw new InputFileError(path, `${kindOf(stats)}, not a regular file`);
    if (stats.size > maxBytes) throw new InputFileError(path, `${stats.size} bytes, more than the ${maxBytes} this reads`);
    const chunks: Buffer[] = [];
    let total = 0;
    for (;;) {
      const chunk = Buffer.allocUnsafe(Math.min(Math.max(stats.size - total + 1, 1 << 16), 1 << 24, maxBytes - total + 1));
      const n = readSync(fd, chunk, 0, chunk.length, null);
      if (n === 0) break;
      total += n;
      if (total > maxBytes) throw new InputFileError(path, `more than the ${maxBytes} bytes this reads`);
      chunks.push(chunk.subarray(0, n));
    }
    try {
      // fatal: a file that is not UTF-8 is refused rather than read with replacement characters;
      // the decoder drops a leading byte-order mark (ignoreBOM false).
      return new TextDecoder('utf-8', { fatal: true }).decode(Buffer.concat(chunks, total));
    } catch {
      throw new InputFileError(path, 'not UTF-8 text');
    }
  } finally {
    closeSync(fd);
  }
}
