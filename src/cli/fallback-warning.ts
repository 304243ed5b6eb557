/**
 * The CLI's one line for `auto` falling back to the emulated backend. Every command that touches a
 * device takes the backend from `commandBackend`, which prints the library's fallback warning once,
 * on stderr, as the command's own line (`vram bench: warning: ...`) in place of Node's process
 * warning; `info` and `bench` also say it in the backend line that heads their output.
 */
import type { Backend } from '../backend/backend.js';
import { backendFallbackReason, fallbackWarning, getBackend, showsFallbackItself } from '../backend/select.js';

let warned = false;

/**
 * The process-wide backend, with the fallback warning printed the first time a command asks.
 *
 * @param command The subcommand, for the line's prefix (`replay`).
 * @returns The backend (`getBackend()`).
 * @throws {RangeError} When `VRAM_BACKEND` names no backend; whatever loading a named driver throws.
 * @example
 * ```ts
 * const backend = commandBackend('bench'); // stderr: vram bench: warning: vram runs on the emulated backend ...
 * ```
 */
export function commandBackend(command: string): Backend {
  showsFallbackItself();
  const backend = getBackend();
  const reason = backendFallbackReason();
  if (reason !== undefined && !warned) {
    warned = true;
    process.stderr.write(`vram ${command}: warning: ${fallbackWarning(reason)}\n`);
  }
  return backend;
}
