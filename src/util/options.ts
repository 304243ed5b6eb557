/**
 * The one check of an options argument, used by every public entry point that takes one. An options
 * object is where a misspelt key (`{ shap: [3, 3] }`) or an array (`DeviceArray.from(data, [3, 3])`)
 * would otherwise be ignored without a word and the defaults used instead; so anything other than
 * a plain object, and any key the entry point does not know, is a TypeError that names the entry
 * point, the bad key, the nearest valid key and all of them.
 *
 * The check returns a snapshot: each valid key is read exactly once, so a getter cannot hand the
 * check one value and the code after it another.
 */
import { nearestName } from './nearest-name.js';

/**
 * The option names of an entry point, one entry per key of its options type: the compiler refuses
 * a key the type lacks and a key left out, so the list cannot drift from the type.
 */
export type OptionNames<T> = { readonly [K in keyof Required<T>]: true };

/** How an options value reads in a message: `an array`, `null`, `a number`. */
function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  const type = typeof value;
  return /^[aeiou]/.test(type) ? `an ${type}` : `a ${type}`;
}

/** The snapshot of options not given, or given as a plain `{}`: one frozen object. */
const NOTHING: Readonly<Record<string, unknown>> = Object.freeze({});

/**
 * Checks an options argument and returns a snapshot of it.
 *
 * @param what The entry point, as the message names it (`DeviceArray.from`, `new PoolResource`).
 * @param options The argument as the caller passed it: undefined means no options.
 * @param names The valid keys (see {@link OptionNames}).
 * @param argument The argument's name in messages (`options`, or a nested field such as `registration`).
 * @returns An object holding each valid key's value, read once; keys whose value is undefined are left out
 *   (frozen, and shared, when there are none).
 * @throws {TypeError} When `options` is not undefined or a non-array object, or has a key not in `names`.
 * @example
 * ```ts
 * options = readOptions('DeviceArray.empty', options, { resource: true, stream: true, device: true, spillable: true });
 * ```
 */
export function readOptions<T extends object>(what: string, options: T | undefined, names: NoInfer<OptionNames<T>>, argument = 'options'): T {
  // Nothing given: the one frozen empty snapshot (the allocation paths take this most; nothing writes a snapshot).
  if (options === undefined) return NOTHING as T;
  const snapshot: Record<string, unknown> = {};
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    throw new TypeError(`${what}: ${argument} must be an object with any of ${Object.keys(names).join(', ')}, got ${describe(options)}`);
  }
  const own = Object.keys(options);
  // A plain `{}` (every default parameter) has nothing to check or read: the allocation paths take this often.
  if (own.length === 0 && Object.getPrototypeOf(options) === Object.prototype) return NOTHING as T;
  const valid = Object.keys(names);
  // Every own enumerable key is checked before any value is read, so a refused call runs no getter.
  for (const key of own) {
    if (Object.hasOwn(names, key)) continue;
    const guess = nearestName(key, valid);
    throw new TypeError(
      `${what}: unknown ${argument === 'options' ? 'option' : `${argument} option`} '${key}'` +
        `${guess === undefined ? '' : ` (did you mean '${guess}'?)`}; valid: ${valid.join(', ')}`,
    );
  }
  for (const key of valid) {
    const value: unknown = (options as Record<string, unknown>)[key];
    if (value !== undefined) snapshot[key] = value;
  }
  return snapshot as T;
}
