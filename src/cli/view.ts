/**
 * `vram view <snapshot.json> [-o report.html]`: turns a memory snapshot (what `memorySnapshot()`
 * returns, serialised, or the file `VRAM_OOM_SNAPSHOT` names) into one self-contained HTML report.
 * Exit status: 0 written, 1 the snapshot cannot be read, 2 usage error. Needs no device: it reads
 * a file, so a snapshot from the GPU machine can be viewed anywhere.
 *
 * The file is read only if it is a regular file (a FIFO or `/dev/zero` would hang the command), as
 * UTF-8 with or without a byte-order mark, and checked field by field against the snapshot format
 * before the report reads it, so a damaged or hand-edited snapshot is refused naming the field.
 */
import { existsSync } from 'node:fs';
import { SnapshotFormatError, validateSnapshot } from '../observe/snapshot-format.js';
import { renderReport } from '../report/html.js';
import { snapshotReport } from '../report/snapshot-report.js';
import { readTextFile } from '../util/input-file.js';
import { parseCommandArgs } from './args.js';
import { checkOutputPath, writeReportFile } from './output-path.js';
import { answerUsageError, UsageError } from './usage.js';

/** The report's default path: the snapshot's, with `.html` for a `.json` ending (or added). */
function defaultOutput(path: string): string {
  return path.endsWith('.json') ? `${path.slice(0, -'.json'.length)}.html` : `${path}.html`;
}

/** The report of the snapshot file at `input`, or why it cannot be made (one line). */
function reportOf(input: string): { html: string } | { error: string } {
  let text: string;
  try {
    text = readTextFile(input);
  } catch (error) {
    return { error: error instanceof Error ? error.message : String(error) };
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    return { error: `${input}: not JSON (${error instanceof Error ? error.message : String(error)})` };
  }
  try {
    return { html: renderReport(snapshotReport(validateSnapshot(parsed))) };
  } catch (error) {
    if (error instanceof SnapshotFormatError) return { error: `${input}: not a memory snapshot of this format: ${error.message}` };
    throw error;
  }
}

/**
 * Runs `vram view` with the arguments after `view`; resolves to the exit status.
 *
 * @param args The arguments after `view`.
 * @returns 0 when the report was written, 1 when the snapshot could not be read or the report not
 *   written, 2 for a usage error (the output path among them: a folder, a missing folder, the
 *   snapshot itself).
 * @throws {Error} Only what is neither a usage error nor a bad snapshot or output path.
 * @example
 * ```ts
 * process.exitCode = await viewCommand(['oom.json', '-o', 'oom.html']);
 * ```
 */
export async function viewCommand(args: string[]): Promise<number> {
  let input: string;
  let output: string;
  let flag: string;
  try {
    const { values, positionals } = parseCommandArgs('view', args, { output: { type: 'string', short: 'o' } }, true);
    if (positionals.length !== 1) {
      throw new UsageError(positionals.length === 0 ? 'missing the snapshot file' : `give one snapshot file, got ${positionals.length}`, 'view');
    }
    input = positionals[0]!;
    if (!existsSync(input)) throw new UsageError(`no such file: ${input}`, 'view');
    output = values.output ?? defaultOutput(input);
    flag = values.output === undefined ? 'the report (default of -o)' : '-o';
    checkOutputPath('view', flag, output, [input]);
  } catch (error) {
    if (error instanceof UsageError) return answerUsageError(error);
    throw error;
  }
  const report = reportOf(input);
  if ('error' in report) {
    process.stderr.write(`vram view: ${report.error}\n`);
    return 1;
  }
  return writeReportFile('view', flag, output, report.html) ? 0 : 1;
}
