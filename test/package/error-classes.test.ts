/**
 * src/errors.ts promises that every error vram raises itself is a `VramError`, so one
 * `instanceof VramError` catches them all. These tests hold every error class to it: the ones the
 * package exports (checked on the classes themselves, so a subclass of a subclass counts) and every
 * class in the sources that extends a built-in error directly.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as root from '../../src/index.js';
import * as arrays from '../../src/public/arrays.js';
import * as backend from '../../src/public/backend.js';
import * as buffers from '../../src/public/buffers.js';
import * as graphs from '../../src/public/graphs.js';
import * as interop from '../../src/public/interop.js';
import * as ipc from '../../src/public/ipc.js';
import * as kernels from '../../src/public/kernels.js';
import * as nccl from '../../src/public/nccl.js';
import * as observe from '../../src/public/observe.js';
import * as replay from '../../src/public/replay.js';
import * as resources from '../../src/public/resources.js';

/** Everything the package exports, from the root and every subpath. */
const vram = { ...arrays, ...backend, ...buffers, ...graphs, ...interop, ...ipc, ...kernels, ...nccl, ...observe, ...replay, ...resources, ...root };

/** True when `value` is a class whose instances are Errors. */
function isErrorClass(value: unknown): value is abstract new (...args: never[]) => Error {
  return typeof value === 'function' && value.prototype instanceof Error;
}

test('every error class the package exports (root and subpaths) extends VramError', () => {
  const errorClasses = Object.entries(vram).flatMap(([name, value]) => (isErrorClass(value) ? [[name, value] as const] : []));
  // The issue-19 and replay errors are among them; a rename that drops one from the export is caught here.
  for (const name of ['ReplayError', 'TraceParseError', 'InputFileError', 'SnapshotFormatError', 'CompileError', 'NcclError', 'NcclUnavailableError']) {
    assert.ok(
      errorClasses.some(([n]) => n === name),
      `${name} is exported`,
    );
  }
  const outside = errorClasses.filter(([name, value]) => name !== 'VramError' && !(value.prototype instanceof vram.VramError)).map(([name]) => name);
  assert.deepEqual(outside, [], `error classes that are not VramErrors: ${outside.join(', ')}`);
});

test('an error from the replay parser is a VramError named for its class', () => {
  assert.throws(
    () => vram.parseAllocationLog('not a log', 'bad.csv'),
    (e: unknown) => {
      assert.ok(e instanceof vram.VramError);
      assert.ok(e instanceof vram.TraceParseError);
      assert.equal(e.name, 'TraceParseError');
      assert.match(e.message, /^bad\.csv:1: /);
      return true;
    },
  );
});

test('no class in src/ extends a built-in error directly, except VramError', () => {
  const root = fileURLToPath(new URL('../../../src/', import.meta.url));
  const builtIn = /\bclass\s+(\w+)\s+extends\s+(Error|TypeError|RangeError|SyntaxError|ReferenceError)\b/g;
  const found: string[] = [];
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) walk(full);
      else if (entry.name.endsWith('.ts')) {
        for (const m of readFileSync(full, 'utf8').matchAll(builtIn)) {
          if (m[1] !== 'VramError') found.push(`${path.relative(root, full)}: ${m[1]} extends ${m[2]}`);
        }
      }
    }
  };
  walk(root);
  assert.deepEqual(found, []);
});

test('NotSupportedError stands directly under VramError: a missing capability is not a state misuse', () => {
  assert.equal(Object.getPrototypeOf(vram.NotSupportedError), vram.VramError);
  const e = new vram.NotSupportedError('no pool IPC here');
  assert.ok(e instanceof vram.VramError);
  assert.ok(!(e instanceof vram.VramStateError));
});
