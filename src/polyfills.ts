/**
 * The one place vram polyfills what Node.js 20 may lack. `using` declarations (TypeScript 5.2+)
 * need `Symbol.dispose` at run time; Node 20.x has it from 20.4 on, earlier releases do not.
 * Every module that defines a `[Symbol.dispose]` method imports this file first.
 */

const symbols = Symbol as unknown as { dispose?: symbol; asyncDispose?: symbol };

if (typeof symbols.dispose !== 'symbol') {
  // Node's own internal polyfill uses these registered symbols, so we agree with it.
  Object.defineProperty(Symbol, 'dispose', { value: Symbol.for('nodejs.dispose'), writable: false, configurable: false });
}
if (typeof symbols.asyncDispose !== 'symbol') {
  Object.defineProperty(Symbol, 'asyncDispose', { value: Symbol.for('nodejs.asyncDispose'), writable: false, configurable: false });
}

/** Marker export, so importing this module for its side effect is explicit. */
export const polyfillsInstalled = true;
