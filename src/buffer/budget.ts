/**
 * Memory budgets per async context: `withMemoryBudget(bytes, fn)` counts every buffer and array
 * allocated inside `fn` (across its awaits: AsyncLocalStorage) against `bytes`, whatever resource
 * or device the memory comes from. Nested scopes each count: an allocation inside two scopes counts
 * against both. Over a budget an allocation fails with OutOfMemoryError (reason `budget`), or, when
 * it asked to wait, waits until memory counted by that budget is freed (`resource/waiting.ts`).
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { OutOfMemoryError } from '../errors.js';
import { runScope } from '../resource/current.js';
import { memoryFreed } from '../resource/waiting.js';
import { formatBytes, parseSize } from '../util/size.js';
import { checkBytes } from '../validate.js';

/** One `withMemoryBudget` scope. */
class Budget {
  /** Bytes counted now: allocated inside the scope and not yet freed. */
  used = 0;
  open = true;
  constructor(
    readonly limit: number,
    readonly outer: Budget | undefined,
  ) {}
}

const budgets = new AsyncLocalStorage<Budget>();
/** Scopes whose `fn` has not ended, process-wide: 0 keeps the allocation path off the AsyncLocalStorage. */
let openBudgets = 0;

/**
 * Runs `fn` with a memory budget: every buffer and array allocated inside it (following its
 * asynchronous work across `await`s, timers and callbacks it starts) counts its bytes against
 * `bytes` until it is freed, on any device and from any resource. An allocation that would take
 * the bytes counted past the budget fails with `OutOfMemoryError` (reason `budget`), or, where it
 * asked to wait (`DeviceBuffer.allocateAsync(n, { wait: true })`, `DeviceArray.emptyAsync`), waits
 * until memory counted by the budget is freed; one larger than the budget itself fails at once.
 * Scopes nest: an allocation counts against every enclosing budget. The scope ends when `fn`
 * returns or the promise it returned settles; memory allocated inside it still counts against it
 * until freed, and work left running after the end allocates outside it.
 *
 * @param bytes The budget: a positive whole number of bytes, or a size such as `'256M'`.
 * @param fn The code to run.
 * @returns What `fn` returned (a promise for an async function).
 * @throws {TypeError | RangeError} When `bytes` is not a size or `fn` not a function.
 * @example
 * ```ts
 * await withMemoryBudget('1G', async () => {
 *   const batch = await DeviceArray.emptyAsync([1 << 20], 'float32', { wait: true }); // waits while over 1 GiB
 *   await run(batch);
 *   batch.free(); // wakes this budget's waiters
 * });
 * ```
 */
export function withMemoryBudget<T>(bytes: number | string, fn: () => T): T {
  const limit = typeof bytes === 'string' ? parseSize(bytes, 'withMemoryBudget: bytes') : checkBytes(bytes, 'withMemoryBudget: bytes');
  if (typeof fn !== 'function') throw new TypeError('withMemoryBudget: fn must be a function');
  const budget = new Budget(limit, budgets.getStore());
  return runScope(
    budgets,
    budget,
    fn,
    () => {
      budget.open = false;
      openBudgets -= 1;
    },
    () => {
      openBudgets += 1;
    },
  );
}

/**
 * The budgets an allocation made now counts against (innermost first); empty outside every scope.
 *
 * @returns The open budgets of the current async context.
 * @internal
 */
export function activeBudgets(): readonly Budget[] {
  if (openBudgets === 0) return NONE;
  const list: Budget[] = [];
  for (let b = budgets.getStore(); b !== undefined; b = b.outer) if (b.open) list.push(b);
  return list;
}

const NONE: readonly Budget[] = Object.freeze([]);

/**
 * The first of `list` that `bytes` more would take past its limit, with its error; undefined when
 * all have room.
 *
 * @param list What `activeBudgets()` returned.
 * @param bytes The size asked for.
 * @param call The call, for the message.
 * @returns The budget and the error, or undefined.
 * @internal
 */
export function overBudget(list: readonly Budget[], bytes: number, call: string): { budget: Budget; error: OutOfMemoryError } | undefined {
  for (const budget of list) {
    if (budget.used + bytes > budget.limit) {
      return {
        budget,
        error: new OutOfMemoryError({
          requestedBytes: bytes,
          call,
          reason: 'budget',
          message:
            `${call}: cannot allocate ${formatBytes(bytes)}: the memory budget of this scope (withMemoryBudget) is ` +
            `${formatBytes(budget.limit)}, of which ${formatBytes(budget.used)} is in use` +
            (bytes > budget.limit ? '; the request is larger than the whole budget' : ''),
        }),
      };
    }
  }
  return undefined;
}

/**
 * The smallest limit among `list`, or Infinity: a request above it can never be met.
 *
 * @param list What `activeBudgets()` returned.
 * @returns The bytes.
 * @internal
 */
export function smallestBudget(list: readonly Budget[]): number {
  let least = Infinity;
  for (const b of list) if (b.limit < least) least = b.limit;
  return least;
}

/**
 * Counts `bytes` against every budget of `list` and returns what gives them back (once, when the
 * memory is freed; it wakes allocations waiting on a budget).
 *
 * @param list What `activeBudgets()` returned (checked with `overBudget` first).
 * @param bytes The bytes allocated.
 * @returns The refund, or undefined when `list` is empty.
 * @internal
 */
export function chargeBudgets(list: readonly Budget[], bytes: number): (() => void) | undefined {
  if (list.length === 0) return undefined;
  for (const b of list) b.used += bytes;
  return () => {
    for (const b of list) b.used -= bytes;
    memoryFreed(-1);
  };
}

/**
 * For memory whose size is known only once allocated (pitched rows: the driver or arena picks the
 * pitch): counts `bytes` against the budgets of the current async context, or, when that would take
 * one past its limit, gives the memory back with `undo` and throws the budget's error.
 *
 * @param bytes The bytes allocated.
 * @param call The call, for the message.
 * @param undo Gives the memory back.
 * @returns The refund for the memory's release, or undefined outside every budget.
 * @throws {OutOfMemoryError} Over a budget (reason `budget`), after `undo`.
 * @internal
 */
export function chargeAllocated(bytes: number, call: string, undo: () => void): (() => void) | undefined {
  const list = activeBudgets();
  if (list.length === 0) return undefined;
  const over = overBudget(list, bytes, call);
  if (over !== undefined) {
    undo();
    throw over.error;
  }
  return chargeBudgets(list, bytes);
}
