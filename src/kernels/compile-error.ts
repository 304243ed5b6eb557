/**
 * CUDA source that NVRTC refused to compile. Its own class (not a CudaError: no driver call
 * failed) so a program can tell "my kernel has a bug" from "the GPU failed", and carrying NVRTC's
 * log, which is what says where the bug is.
 */
import { VramError } from '../errors.js';

/**
 * NVRTC could not compile the source: `log` is the compiler's output (errors and warnings with
 * line numbers), also at the end of the message.
 *
 * @example
 * ```ts
 * try { Module.compile(source); }
 * catch (e) { if (e instanceof CompileError) console.error(e.log); else throw e; }
 * ```
 */
export class CompileError extends VramError {
  /**
   * @param log NVRTC's program log.
   * @param options The options the source was compiled with.
   * @param result NVRTC's result name (NVRTC_ERROR_COMPILATION, ...).
   * @throws Never.
   * @example
   * ```ts
   * throw new CompileError(log, ['--gpu-architecture=sm_90'], 'NVRTC_ERROR_COMPILATION');
   * ```
   */
  constructor(
    /** NVRTC's program log: the compiler's errors and warnings. */
    readonly log: string,
    /** The options the source was compiled with (the architecture included). */
    readonly options: readonly string[],
    /** NVRTC's result name, e.g. `NVRTC_ERROR_COMPILATION`. */
    readonly result: string,
  ) {
    super(`NVRTC could not compile the source (${result}, options ${options.join(' ') || 'none'}):\n${log.trimEnd()}`);
  }
}
