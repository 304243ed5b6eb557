/**
 * Call stacks of allocations, as the program wrote them: the stack at a call into vram without
 * vram's own frames and Node's internal ones, for the TrackingAdaptor's leak report and the memory
 * history. Capture (`rawStack`) and cleaning (`callerFrames`) are apart because the history cleans
 * a stack once per distinct site, not once per allocation.
 */
import { fileURLToPath } from 'node:url';

/**
 * How many frames `rawStack` captures by default: a TrackingAdaptor may sit under several
 * adaptors, and the caller's frames must stay in reach.
 */
const CAPTURED_FRAMES = 40;

/** How many of the caller's frames are kept. */
const KEPT_FRAMES = 12;

// vram's own code, compiled (dist/src/) and, when source maps are on, as written (src/).
const ownRoots: readonly string[] = (() => {
  const compiled = new URL('../', import.meta.url);
  const written = new URL('../../../src/', import.meta.url);
  const roots = [compiled.href, written.href];
  if (compiled.protocol === 'file:') roots.push(fileURLToPath(compiled), fileURLToPath(written));
  return roots;
})();

/**
 * The current stack as V8 prints it. It costs in proportion to the frames (V8 formats each into
 * the string, about a microsecond a frame), so a caller that knows how deep it is asks for fewer.
 *
 * @param frames How many frames to capture (default 40).
 * @returns The `Error` line and up to `frames` frames, vram's own included.
 * @example
 * ```ts
 * const frames = callerFrames(rawStack());
 * ```
 */
export function rawStack(frames = CAPTURED_FRAMES): string {
  const previousLimit = Error.stackTraceLimit;
  Error.stackTraceLimit = frames;
  const raw = new Error().stack ?? '';
  Error.stackTraceLimit = previousLimit;
  return raw;
}

/**
 * The program's frames of a stack from `rawStack`: without the `Error` line, vram's frames and
 * Node's internal ones, innermost first, at most 12.
 *
 * @param raw What `rawStack()` returned.
 * @returns Frames such as `at main (file:///app/main.js:9:3)`.
 * @example
 * ```ts
 * callerFrames(rawStack())[0]; // 'at loadWeights (file:///app/model.js:41:22)'
 * ```
 */
export function callerFrames(raw: string): string[] {
  return raw
    .split('\n')
    .slice(1)
    .map((line) => line.trim())
    .filter((line) => line.startsWith('at ') && !line.includes('node:internal/') && !ownRoots.some((root) => line.includes(root)))
    .slice(0, KEPT_FRAMES);
}
