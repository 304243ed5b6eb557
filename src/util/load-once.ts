/**
 * A loader that does its work on the first call only: the driver and NVRTC are each found, opened
 * and bound once per process, and a failure to load is as permanent as a success.
 */

/**
 * Wraps `load` so that it runs on the first call only. Later calls return what it returned, or
 * throw again the error it threw (as `asError` made it), without running it again.
 *
 * @param load The work to do once.
 * @param asError Turns what `load` threw into the error kept and thrown (default: an Error as it is,
 *   anything else as an Error of its text).
 * @returns The loader.
 * @throws {Error} From the returned loader: the kept error, on the first call and every later one.
 * @example
 * ```ts
 * const openLibrary = loadOnce(() => koffi.load('libfoo.so'));
 * openLibrary() === openLibrary(); // true: loaded once
 * ```
 */
export function loadOnce<T>(load: () => T, asError: (thrown: unknown) => Error = toError): () => T {
  let state: { readonly value: T } | { readonly error: Error } | undefined;
  return () => {
    if (state === undefined) {
      try {
        state = { value: load() };
      } catch (thrown) {
        state = { error: asError(thrown) };
      }
    }
    if ('error' in state) throw state.error;
    return state.value;
  };
}

function toError(thrown: unknown): Error {
  return thrown instanceof Error ? thrown : new Error(String(thrown));
}
