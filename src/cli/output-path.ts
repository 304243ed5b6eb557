/**
 * Where a command writes a report (`vram replay --html`, `vram view -o`, `vram bench --html`):
 * checked before the command does any work, so a path that cannot be written is a one-line usage
 * error naming the flag, not the system's EISDIR or ENOENT after a long replay; and never the
 * command's own input, which the report would replace.
 */
import { realpathSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { UsageError } from './usage.js';

/** True when `a` and `b` name the same existing file (`./a` and `a`, a link and its target). */
function sameFile(a: string, b: string): boolean {
  const sa = statSync(a, { throwIfNoEntry: false });
  const sb = statSync(b, { throwIfNoEntry: false });
  if (sa === undefined || sb === undefined) return false;
  if (sa.dev === sb.dev && sa.ino === sb.ino && sa.ino !== 0) return true;
  return realpathSync(a) === realpathSync(b);
}

/**
 * Checks that a report can be written to `output`: not a directory, in a folder that exists, and
 * not one of the command's inputs.
 *
 * @param command The command, for the usage line.
 * @param flag How the path was given (`--html`, `-o`), for the message.
 * @param output The path.
 * @param inputs The files the command reads.
 * @throws {UsageError} Naming the flag and what is wrong with the path.
 * @example
 * ```ts
 * checkOutputPath('view', '-o', 'oom.html', ['oom.json']);
 * ```
 */
export function checkOutputPath(command: string, flag: string, output: string, inputs: readonly string[] = []): void {
  if (output === '') throw new UsageError(`${flag} needs a file name`, command);
  let stats;
  try {
    stats = statSync(output, { throwIfNoEntry: false });
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOTDIR') throw new UsageError(`${flag} ${output}: ${dirname(output)} is not a folder`, command);
    // ELOOP, EACCES, ENAMETOOLONG: in one line.
    throw new UsageError(`${flag} ${output}: cannot be written (${code ?? String(error)})`, command);
  }
  if (stats === undefined) {
    const folder = dirname(output);
    const parent = statSync(folder, { throwIfNoEntry: false });
    if (parent === undefined) throw new UsageError(`${flag} ${output}: the folder ${folder} does not exist`, command);
    if (!parent.isDirectory()) throw new UsageError(`${flag} ${output}: ${folder} is not a folder`, command);
    return;
  }
  if (stats.isDirectory()) {
    throw new UsageError(`${flag} ${output}: a folder, not a file (name the report, e.g. ${join(output, 'report.html')})`, command);
  }
  for (const input of inputs) {
    if (sameFile(output, input)) {
      throw new UsageError(`${flag} ${output}: the input file ${input}; the report would replace it (name another file)`, command);
    }
  }
}

/**
 * Writes a report to a path `checkOutputPath` accepted; a failure (the disk full, the folder
 * removed since) is one line on stderr naming the flag.
 *
 * @param command The command, for the message.
 * @param flag How the path was given, for the message.
 * @param output The path.
 * @param text The report.
 * @returns True when written.
 * @example
 * ```ts
 * if (!writeReportFile('view', '-o', 'oom.html', html)) return 1;
 * ```
 */
export function writeReportFile(command: string, flag: string, output: string, text: string): boolean {
  try {
    writeFileSync(output, text);
  } catch (error) {
    process.stderr.write(`vram ${command}: cannot write ${flag} ${output}: ${error instanceof Error ? error.message : String(error)}\n`);
    return false;
  }
  process.stderr.write(`vram ${command}: report written to ${output}\n`);
  return true;
}
