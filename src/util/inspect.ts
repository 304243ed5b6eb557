/**
 * The key Node.js's `util.inspect` (and so `console.log`) looks up on an object for its own text:
 * `util.inspect.custom`, which is `Symbol.for('nodejs.util.inspect.custom')` by Node's own
 * definition. Declared here rather than imported from node:util, so that vram's published
 * declarations name no Node module (a consumer without @types/node still compiles).
 */

/**
 * `util.inspect.custom`: a method under this key gives what `console.log` prints for the object.
 *
 * @example
 * ```ts
 * inspectCustom === Symbol.for('nodejs.util.inspect.custom'); // true (and === util.inspect.custom)
 * ```
 */
export const inspectCustom: unique symbol = Symbol.for('nodejs.util.inspect.custom');
