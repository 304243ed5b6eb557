/**
 * The one parser for byte sizes that people type: every flag (`vram bench --sizes`) and every
 * environment variable (`VRAM_EMULATED_BYTES`, `VRAM_MEMORY_LIMIT`) that takes a size reads it
 * here, so `16G` means the same thing everywhere.
 *
 * The grammar: a number, then an optional binary unit. `4096` is bytes; `K`, `M`, `G`, `T` are
 * powers of 1024, and may be followed by `iB` (`64K` and `64KiB` are both 65,536: GPU memory is
 * counted in binary units). `KB`, `MB`, `GB` and `TB` are refused: they read as powers of 1000 as
 * often as of 1024, and a cap of `16GB` silently off by 7% either way would surprise; the message
 * gives both spellings. Case is ignored; spaces around the number and unit are allowed. A fraction is accepted with a unit
 * (`1.5G`) when it comes to whole bytes; bytes themselves must be whole (`1.5` is refused).
 */

const FACTORS: Readonly<Record<string, number>> = { '': 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3, t: 1024 ** 4 };

/** The units accepted, for messages. */
const EXAMPLES = 'a whole number of bytes or a size like 64K, 512M, 16G, 1.5GiB';

/**
 * Parses a byte size: `4096`, `64K`, `512MiB`, `16G`, `1.5GiB`, `2T` (binary units; `1GB` is refused as ambiguous).
 *
 * @param text What the user wrote.
 * @param what What the size is for, named in the error (`VRAM_EMULATED_BYTES`, `--sizes`).
 * @returns The size in bytes: a positive safe integer.
 * @throws {TypeError} When `text` is not a string.
 * @throws {RangeError} When `text` is not a size, uses a decimal-looking unit (`KB`, `MB`, `GB`, `TB`), is zero, is not a whole number of bytes, or is
 *   larger than 2^53 - 1 bytes; the message is one line naming `what` and what was given.
 * @example
 * ```ts
 * parseSize('16G', 'VRAM_EMULATED_BYTES'); // 17179869184
 * parseSize('64KiB', '--sizes');            // 65536
 * parseSize('1.5M', '--sizes');             // 1572864
 * ```
 */
export function parseSize(text: string, what: string): number {
  if (typeof text !== 'string') {
    throw new TypeError(`${what} must be a size given as text, got ${text === null ? 'null' : typeof text}`);
  }
  const ambiguous = /^\s*(\d+(?:\.\d+)?)\s*([kmgt])b\s*$/i.exec(text);
  if (ambiguous !== null) {
    const [, n, u] = ambiguous as unknown as [string, string, string];
    const unit = u.toUpperCase();
    const decimal = Number(n) * 1000 ** ' KMGT'.indexOf(unit);
    throw new RangeError(
      `${what}: '${text}' is ambiguous (powers of 1000 or of 1024?); write ${n}${unit} or ${n}${unit}iB for ` +
        `${n} x 1024^${' KMGT'.indexOf(unit)} bytes${Number.isSafeInteger(decimal) ? `, or ${decimal} for ${n} x 1000^${' KMGT'.indexOf(unit)}` : ''}`,
    );
  }
  const match = /^\s*(\d+(?:\.\d+)?)\s*(?:([kmgt])(?:ib)?|(b)?)\s*$/i.exec(text);
  if (match === null) throw new RangeError(`${what} must be ${EXAMPLES}; got '${text}'`);
  const factor = FACTORS[(match[2] ?? '').toLowerCase()]!;
  const bytes = Number(match[1]) * factor;
  if (!Number.isInteger(bytes)) throw new RangeError(`${what} must come to a whole number of bytes; got '${text}'`);
  if (bytes <= 0) throw new RangeError(`${what} must be positive; got '${text}'`);
  if (!Number.isSafeInteger(bytes)) throw new RangeError(`${what} is too large; got '${text}'`);
  return bytes;
}

/**
 * Bytes as a short human figure, in binary units: the one spelling of a size in vram's messages,
 * descriptions, CLI tables and reports (the HTML report's script carries this very function, so
 * the page agrees). Whole figures print bare (`64 MiB`), others with three significant digits at
 * most (`1.50 KiB`, `12.5 MiB`, `123 GiB`); a negative count (a difference) keeps its sign.
 *
 * @param bytes A byte count (a difference may be negative).
 * @returns The figure and its unit, e.g. `1.50 KiB`.
 * @throws Nothing.
 * @example
 * ```ts
 * formatBytes(256);      // '256 B'
 * formatBytes(1536);     // '1.50 KiB'
 * formatBytes(-2048);    // '-2 KiB'
 * ```
 */
export function formatBytes(bytes: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let unit = 0;
  while (Math.abs(value) >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  if (unit === 0) return `${bytes} B`;
  const text = value >= 100 || Number.isInteger(value) ? value.toFixed(0) : value.toFixed(value >= 10 ? 1 : 2);
  return `${text} ${units[unit]}`;
}

/**
 * Bytes as `formatBytes` spells them with the exact count after: `1.50 GiB (1610612736 bytes)`,
 * the form of every out-of-memory message (a reader sees the scale, a program or a search the
 * exact request). Under 1 KiB the figure is already exact: `512 B`. With `brief`, the count
 * follows only where the figure rounds (`1 GiB`, but `1.50 GiB (1610612737 bytes)`): the form of
 * `describe()`, which names a resource and should stay short.
 *
 * @param bytes A byte count.
 * @param brief Leave the count out where the figure is exact.
 * @returns The text.
 * @throws Nothing.
 * @example
 * ```ts
 * formatBytesExact(1610612736);          // '1.50 GiB (1610612736 bytes)'
 * formatBytesExact(1 << 30, true);       // '1 GiB'
 * formatBytesExact(1610612737, true);    // '1.50 GiB (1610612737 bytes)'
 * ```
 */
export function formatBytesExact(bytes: number, brief = false): string {
  const figure = formatBytes(bytes);
  if (figure === `${bytes} B`) return figure;
  const [number = '', unit = ''] = figure.split(' ');
  if (brief && Number(number) * FACTORS[unit.charAt(0).toLowerCase()]! === bytes) return figure;
  return `${figure} (${bytes} bytes)`;
}
