/**
 * Text output for the CLI: measured values, aligned tables and a one-line progress counter. Kept
 * apart from the commands so each command only decides *what* to print. Byte sizes are
 * `formatBytes` of src/util/size.ts, the same spelling as the library's messages.
 */

/** A measured value with a sensible number of significant digits for a table cell. */
export function formatValue(value: number): string {
  if (!Number.isFinite(value)) return String(value);
  const magnitude = Math.abs(value);
  if (magnitude >= 1000) return Math.round(value).toLocaleString('en-US');
  if (magnitude >= 100) return value.toFixed(0);
  if (magnitude >= 10) return value.toFixed(1);
  return value.toFixed(2);
}

/** How a column is aligned: numbers read best right-aligned. */
export type Align = 'left' | 'right';

/** Renders rows as an aligned plain-text table with a header and a rule, for terminals and logs. */
export function formatTable(header: readonly string[], rows: readonly (readonly string[])[], align: readonly Align[] = []): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[]): string =>
    cells
      .map((cell, i) => (align[i] === 'right' ? cell.padStart(widths[i]!) : cell.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}

/**
 * A counter on stderr, so a long benchmark shows it is alive: on a terminal one line rewritten in
 * place with `\r`; otherwise (a CI log, a pipe) one line per step, which a log keeps readable where
 * carriage returns would pile up. stdout (tables, `--json`) never carries it.
 */
export class Progress {
  private done = 0;
  private readonly terminal: boolean;
  private lastLength = 0;

  constructor(
    /** How many steps there will be (0 when unknown). */
    private total: number,
    private readonly stream: NodeJS.WriteStream = process.stderr,
  ) {
    this.terminal = stream.isTTY === true;
  }

  /** Adds steps discovered after construction. */
  grow(steps: number): void {
    this.total += steps;
  }

  /** Announces the step that starts now. */
  step(label: string): void {
    this.done += 1;
    const count = this.total > 0 ? `[${Math.min(this.done, this.total)}/${this.total}]` : `[${this.done}]`;
    if (!this.terminal) {
      this.stream.write(`${count} ${label}\n`);
      return;
    }
    // A terminal that reports 0 columns (some CI ptys, a detached tmux) has not said its width.
    const reported = this.stream.columns;
    const columns = reported !== undefined && reported > 0 ? reported : 80;
    const text = `${count} ${label}`.slice(0, Math.max(10, columns - 1));
    this.stream.write(`\r${text.padEnd(this.lastLength)}`);
    this.lastLength = text.length;
  }

  /** Erases the counter line. */
  finish(): void {
    if (this.terminal && this.lastLength > 0) this.stream.write(`\r${' '.repeat(this.lastLength)}\r`);
    this.lastLength = 0;
  }
}

/** Key-value lines with the values aligned, for reports that are one thing rather than a table. */
export function formatPairs(pairs: readonly (readonly [string, string])[], indent = ''): string {
  const width = Math.max(0, ...pairs.map(([key]) => key.length + 1));
  return pairs.map(([key, value]) => `${indent}${`${key}:`.padEnd(width)}  ${value}`).join('\n');
}
