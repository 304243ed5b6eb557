/**
 * `vram view <snapshot.json> [-o report.html]`: turns a memory snapshot (what `memorySnapshot()`
 * returns, serialised, or the file `VRAM_OOM_SNAPSHOT` names) into one self-contained HTML report.
 * Exit status: 0 written, 1 the snapshot cannot be read, 2 usage error. Needs no device: it reads
 * a file, so a snapshot from the GPU machine can be viewed anywhere.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import type { MemorySnapshot } from '../memory/snapshot-format.js';
import { renderReport } from '../report/html.js';
import { snapshotReport } from '../report/snapshot-report.js';
import { parseCommandArgs } from './args.js';
import { answerUsageError, UsageError } from './usage.js';

/** The report's default path: the snapshot's, with `.html` for a `.json` ending (or added). */
function defaultOutput(path: string): string {
  return path.endsWith('.json') ? `${path.slice(0, -'.json'.length)}.html` : `${path}.html`;
}

/** True when `value` has the fields every snapshot has (the version is checked by the report). */
function looksLikeSnapshot(value: unknown): value is MemorySnapshot {
  if (typeof value !== 'object' || value === null) return false;
  const v = value as Partial<Record<keyof MemorySnapshot, unknown>>;
  return typeof v.version === 'number' && Array.isArray(v.resources) && Array.isArray(v.blocks) && Array.isArray(v.stacks) &&
    typeof v.trigger === 'object' && v.trigger !== null;
}

/**
 * Runs `vram view` with the arguments after `view`; resolves to the exit status.
 *
 * @param args The arguments after `view`.
 * @returns 0 when the report was written, 1 when the snapshot could not be read or the report not
 *   written, 2 for a usage error.
 * @throws {Error} Only what is neither a usage error nor a bad snapshot or output path.
 * @example
 * ```ts
 * process.exitCode = await viewCommand(['oom.json', '-o', 'oom.html']);
 * ```
 */
export async function viewCommand(args: string[]): Promise<number> {
  let input: string;
  let output: string;
  try {
    const { values, positionals } = parseCommandArgs('view', args, { output: { type: 'string', short: 'o' } }, true);
    if (positionals.length !== 1) {
      throw new UsageError(positionals.length === 0 ? 'missing the snapshot file' : `give one snapshot file, got ${positionals.length}`, 'view');
    }
    input = positionals[0]!;
    if (!existsSync(input)) throw new UsageError(`no such file: ${input}`, 'view');
    output = values.output ?? defaultOutput(input);
  } catch (error) {
    if (error instanceof UsageError) return answerUsageError(error);
    throw error;
  }
  let html: string;
  try {
    const parsed: unknown = JSON.parse(readFileSync(input, 'utf8'));
    if (!looksLikeSnapshot(parsed)) throw new Error('not a memory snapshot (no version, resources, blocks, stacks and trigger)');
    html = renderReport(snapshotReport(parsed));
  } catch (error) {
    process.stderr.write(`vram view: ${input}: ${error instanceof Error ? error.message : String(error)}\n`);
    return 1;
  }
  try {
    writeFileSync(output, html);
  } catch (error) {
    process.stderr.write(`vram view: cannot write ${output}: ${error instanceof Error ? error.message : String(error)}\n`);
    return 1;
  }
  process.stderr.write(`vram view: report written to ${output}\n`);
  return 0;
}
