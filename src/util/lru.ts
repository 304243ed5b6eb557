/**
 * A map that keeps at most `capacity` entries, dropping the least recently used: for caches keyed
 * by what callers choose (every distinct elementwise expression), which would otherwise grow for
 * the life of the process. Given a weight per entry, it also keeps their sum under a limit: a
 * count alone does not bound memory when one entry can be any size.
 */

/** A bound on the sum of the entries' weights (bytes they hold, as the cache estimates them). */
export interface LruWeight<V> {
  /** The weight of a value (a whole number >= 0). */
  readonly weigh: (value: V) => number;
  /** The most the entries may weigh together; the most recent entry is kept even when it alone weighs more. */
  readonly limit: number;
}

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
  readonly #bound: LruWeight<V> | undefined;
  /** The weights of the entries, by key (with a bound), and their sum. */
  readonly #weights = new Map<K, number>();
  #weight = 0;

  /**
   * @param capacity The most entries kept (a whole number >= 1).
   * @param evicted Called with each entry dropped to make room (to release what it holds).
   * @param bound The most the entries may weigh together, and how to weigh one.
   * @throws {RangeError} For a capacity that is not a whole number >= 1, or a limit that is not a number >= 0.
   */
  constructor(capacity: number, evicted?: (key: K, value: V) => void, bound?: LruWeight<V>) {
    if (!Number.isSafeInteger(capacity) || capacity < 1) throw new RangeError(`LruMap: capacity must be a whole number >= 1, got ${capacity}`);
    if (bound !== undefined && !(bound.limit >= 0)) throw new RangeError(`LruMap: the weight limit must be a number >= 0, got ${bound.limit}`);
    this.#capacity = capacity;
    this.#evicted = evicted;
    this.#bound = bound;
  }

  /** What the entries weigh together (0 without a bound). */
  get weight(): number {
    return this.#weight;
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
    const bound = this.#bound;
    if (bound !== undefined) {
      const w = bound.weigh(value);
      this.#weight += w - (this.#weights.get(key) ?? 0);
      this.#weights.set(key, w);
    }
    while (this.#entries.size > this.#capacity || (bound !== undefined && this.#weight > bound.limit && this.#entries.size > 1)) {
      const [oldKey, oldValue] = this.#entries.entries().next().value as [K, V];
      this.#entries.delete(oldKey);
      if (bound !== undefined) {
        this.#weight -= this.#weights.get(oldKey)!;
        this.#weights.delete(oldKey);
      }
      this.#evicted?.(oldKey, oldValue);
    }
    return value;
  }
}
