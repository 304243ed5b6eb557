/**
 * `tidy(fn)`: a scope that frees what it made. Every buffer and array allocated inside `fn`
 * (across its awaits: AsyncLocalStorage, as `withMemoryBudget`), on any device and from any
 * resource, is freed when `fn` ends, but for what `fn` returns and what it `keep()`s
 * (Note [Dropped memory], docs/design/dropped-memory.md). Outside every scope allocation pays one
 * check (`setAllocationHook` is unset).
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { Allocation, setAllocationHook } from './lifetime.js';

/**
 * The symbol by which an object that lives in vram memory without being an Allocation (an array)
 * names that memory, so that returning or keeping the object keeps the memory.
 *
 * @internal
 */
export const heldMemory: unique symbol = Symbol('vram.heldMemory');

/** An object that names the memory it lives in (`heldMemory`). */
interface MemoryHolder {
  readonly [heldMemory]: Allocation;
}

/** One `tidy` scope. */
class Scope {
  /** What was allocated inside it (freed ones are skipped at the end, and dropped now and then). */
  made: Allocation[] = [];
  /** `made.length` at which freed entries are dropped from it. */
  compactAt = 64;
  open = true;
  constructor(readonly outer: Scope | undefined) {}

  add(allocation: Allocation): void {
    if (this.made.push(allocation) < this.compactAt) return;
    this.made = this.made.filter((a) => !a.freed);
    this.compactAt = Math.max(64, 2 * this.made.length);
  }
}

const scopes = new AsyncLocalStorage<Scope>();
/** Scopes whose `fn` has not ended, process-wide. */
let openScopes = 0;
/** Memory `keep()` exempted from every scope. */
const kept = new WeakSet<Allocation>();

/** The innermost open scope of the current async context. */
function innermost(): Scope | undefined {
  let scope = scopes.getStore();
  while (scope !== undefined && !scope.open) scope = scope.outer;
  return scope;
}

function track(allocation: Allocation): void {
  innermost()?.add(allocation);
}

function opened(): void {
  if (openScopes++ === 0) setAllocationHook(track);
}

function closed(scope: Scope): void {
  scope.open = false;
  if (--openScopes === 0) setAllocationHook(undefined);
}

/**
 * Every Allocation reachable from `value` through arrays, plain objects, Maps and Sets (the
 * containers a function returns results in), a vram array standing for its memory. Other objects
 * are not looked into.
 */
function collect(value: unknown, into: Set<Allocation>, seen: Set<object>): void {
  if (value === null || typeof value !== 'object' || seen.has(value)) return;
  seen.add(value);
  if (value instanceof Allocation) {
    into.add(value);
    return;
  }
  const memory = (value as Partial<MemoryHolder>)[heldMemory];
  if (memory instanceof Allocation) {
    into.add(memory);
    return;
  }
  if (Array.isArray(value)) {
    for (const item of value) collect(item, into, seen);
  } else if (value instanceof Map) {
    for (const [k, v] of value) {
      collect(k, into, seen);
      collect(v, into, seen);
    }
  } else if (value instanceof Set) {
    for (const item of value) collect(item, into, seen);
  } else {
    const proto: unknown = Object.getPrototypeOf(value);
    if (proto !== Object.prototype && proto !== null) return;
    for (const key of Object.keys(value)) {
      const descriptor = Object.getOwnPropertyDescriptor(value, key);
      if (descriptor !== undefined && 'value' in descriptor) collect(descriptor.value, into, seen);
    }
  }
}

/**
 * Ends `scope`: frees what it made (the most recent first), but for what `keep()` exempted and,
 * when `fn` returned, what the result holds, which passes to the enclosing scope. Every free is
 * tried; the first that fails is thrown after the others ran.
 */
function finish(scope: Scope, result: unknown, returned: boolean): void {
  closed(scope);
  const keepers = new Set<Allocation>();
  if (returned) collect(result, keepers, new Set());
  const outer = innermostOpen(scope.outer);
  let failure: { error: unknown } | undefined;
  const made = scope.made;
  scope.made = [];
  for (let i = made.length - 1; i >= 0; i--) {
    const allocation = made[i]!;
    if (allocation.freed || kept.has(allocation)) continue;
    if (keepers.has(allocation)) {
      outer?.add(allocation);
      continue;
    }
    try {
      allocation.free();
    } catch (error) {
      failure ??= { error };
    }
  }
  if (failure !== undefined) throw failure.error;
}

function innermostOpen(scope: Scope | undefined): Scope | undefined {
  while (scope !== undefined && !scope.open) scope = scope.outer;
  return scope;
}

/**
 * Runs `fn` and then frees every buffer and array allocated while it ran (on any device, from any
 * resource, following `fn`'s asynchronous work across `await`s) that it did not return or
 * `keep()`. What it returns is found in arrays, plain objects, Maps and Sets, at any depth; a
 * returned view keeps the memory it views. Scopes nest: what an inner scope returns belongs to the
 * enclosing one. When `fn` throws (or its promise rejects), everything it made is freed and the
 * error passes on. Memory allocated by work `fn` left running after it ended is no longer the
 * scope's. Rebinding a variable frees nothing in JavaScript: wrap a loop's step in `tidy` (or free
 * what it drops) and memory stays bounded. Cheap enough for one step of a loop: outside every
 * scope, allocation pays one check.
 *
 * @param fn The code to run: synchronous, or async (then `tidy` returns its promise).
 * @returns What `fn` returned (a promise settling after the frees, for an async function).
 * @throws {TypeError} When `fn` is not a function.
 * @throws What `fn` threw, after the frees; else the first error a free raised.
 * @example
 * ```ts
 * let x = DeviceArray.zeros(1 << 20);
 * for (let i = 0; i < 1000; i++) {
 *   x = tidy(() => map(x, 'x + 1')); // the old x and every temporary are freed; the result is kept
 * }
 * ```
 */
export function tidy<T>(fn: () => T): T {
  if (typeof fn !== 'function') throw new TypeError(`tidy: fn must be a function, got ${fn === null ? 'null' : typeof fn}`);
  const scope = new Scope(innermost());
  opened();
  let result: T;
  try {
    result = scopes.run(scope, fn);
  } catch (error) {
    try {
      finish(scope, undefined, false);
    } catch {
      // fn's error is the one the program needs.
    }
    throw error;
  }
  if (result !== null && typeof result === 'object' && typeof (result as { then?: unknown }).then === 'function') {
    return (async (): Promise<unknown> => {
      let value: unknown;
      try {
        value = await (result as unknown as PromiseLike<unknown>);
      } catch (error) {
        try {
          finish(scope, undefined, false);
        } catch {
          // As above.
        }
        throw error;
      }
      finish(scope, value, true);
      return value;
    })() as T;
  }
  finish(scope, result, true);
  return result;
}

/**
 * Exempts the buffers and arrays in `value` (found as `tidy` finds what a function returns) from
 * every `tidy` scope: they live until freed, `using` ends them, or the garbage-collection backstop
 * reclaims them once dropped.
 *
 * @param value A buffer, an array, or arrays, plain objects, Maps and Sets holding them.
 * @returns `value`.
 * @throws Never.
 * @example
 * ```ts
 * const weights = tidy(() => {
 *   const w = keep(DeviceArray.zeros([1024, 1024])); // outlives the scope
 *   const tmp = DeviceArray.zeros([1024]);           // freed at its end
 *   return w;
 * });
 * ```
 */
export function keep<T>(value: T): T {
  const found = new Set<Allocation>();
  collect(value, found, new Set());
  for (const allocation of found) kept.add(allocation);
  return value;
}
