/**
 * Asks V8 for a full garbage collection, for memory the heap cannot see: a dropped array holds a
 * few hundred bytes of heap and megabytes of device memory, so the collector would otherwise not
 * run for it (docs/design/dropped-memory.md).
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

/** V8's `gc` function: `execution: 'async'` schedules the collection instead of running it now. */
type GcFunction = (options?: { readonly type?: 'major' | 'minor'; readonly execution?: 'sync' | 'async' }) => unknown;

/** The function, once looked for: null where none could be had. */
let gcFunction: GcFunction | null | undefined;

/**
 * The program's own `gc` (`node --expose-gc`), else one taken from a fresh context created while
 * `--expose-gc` is set for that moment only (the flag is turned off again at once, so no other
 * context gets a `gc` global).
 */
function obtain(): GcFunction | null {
  if (gcFunction !== undefined) return gcFunction;
  const own = (globalThis as { gc?: unknown }).gc;
  if (typeof own === 'function') return (gcFunction = own as GcFunction);
  try {
    setFlagsFromString('--expose-gc');
    const taken: unknown = runInNewContext('gc');
    gcFunction = typeof taken === 'function' ? (taken as GcFunction) : null;
  } catch {
    gcFunction = null;
  } finally {
    setFlagsFromString('--no-expose-gc');
  }
  return gcFunction;
}

/**
 * Runs (or schedules) a full collection, so that objects the program dropped are found dead and
 * their finalizers queued; the finalizers themselves run on a later turn of the event loop.
 *
 * @param now True: collect before returning (tens of milliseconds on a large heap); false:
 *   schedule an incremental collection that V8 finishes in the program's own time.
 * @returns False where no collection could be asked for.
 * @example
 * ```ts
 * collectGarbage(true);
 * await new Promise(setImmediate); // finalizers run
 * ```
 */
export function collectGarbage(now: boolean): boolean {
  const gc = obtain();
  if (gc === null) return false;
  gc(now ? { type: 'major' } : { type: 'major', execution: 'async' });
  return true;
}
