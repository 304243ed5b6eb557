/**
 * A map that keeps at most `capacity` entries, dropping the least recently used: for caches keyed
 * by what callers choose (every distinct elementwise expression), which would otherwise grow for
 * the life of the process.
 */

/**
 * A bounded map in least-recently-used order (a Map's insertion order, an entry moved to the end
 * on every hit).
 *
 * @example
 * ```ts
 * const cache = new LruMap<string, Program>(256, (key, program) => program.dispose());
 * cache.get(key) ?? cache.set(key, build(key));
 * ```
 */
export class LruMap<K, V> {
  readonly #entries = new Map<K, V>();
  readonly #capacity: number;
  readonly #evicted: ((key: K, value: V) => void) | undefined;

  /**
   * @param capacity The most entries kept (a whole number >= 1).
   * @param evicted Called with each entry dropped to make room (to release what it holds).
   * @throws {RangeError} For a capacity that is not a whole number >= 1.
   */
  constructor(capacity: number, evicted?: (key: K, value: V) => void) {
    if (!Number.isSafeInteger(capacity) || capacity < 1) throw new RangeError(`LruMap: capacity must be a whole number >= 1, got ${capacity}`);
    this.#capacity = capacity;
    this.#evicted = evicted;
  }

  /** Entries held now. */
  get size(): number {
    return this.#entries.size;
  }

  /**
   * The value of `key`, which becomes the most recently used.
   *
   * @param key The key.
   * @returns Its value, or undefined.
   * @throws Never.
   */
  get(key: K): V | undefined {
    const value = this.#entries.get(key);
    if (value === undefined) return undefined;
    this.#entries.delete(key);
    this.#entries.set(key, value);
    return value;
  }

  /**
   * Stores `value` as the most recently used, dropping the least recently used past capacity.
   *
   * @param key The key.
   * @param value The value.
   * @returns The value.
   * @throws Whatever `evicted` throws (the entry is dropped first).
   */
  set(key: K, value: V): V {
    this.#entries.delete(key);
    this.#entries.set(key, value);
    while (this.#entries.size > this.#capacity) {
      const [oldKey, oldValue] = this.#entries.entries().next().value as [K, V];
      this.#entries.delete(oldKey);
      this.#evicted?.(oldKey, oldValue);
    }
    return value;
  }
}
