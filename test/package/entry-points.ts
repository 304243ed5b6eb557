/**
 * The package's entry points as package.json "exports" lists them (the root and every subpath), with
 * the built declarations and module of each, and the names each exports as the TypeScript compiler
 * reads them. exports.test.ts, options.test.ts and docs.test.ts walk these, so a new subpath is walked
 * the day it is added to package.json.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const root = path.resolve(fileURLToPath(new URL('../../../', import.meta.url)));

/** One entry point of the package. */
export interface EntryPoint {
  /** What a consumer imports: `vram`, `vram/resources`. */
  readonly specifier: string;
  /** The built declaration file (absolute). */
  readonly declarations: string;
  /** The built JavaScript module (absolute). */
  readonly module: string;
}

/**
 * Every entry point of package.json "exports", the root first.
 * @returns One record per entry point.
 */
export function entryPoints(): EntryPoint[] {
  const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as {
    name: string;
    exports: Record<string, { types: string; default: string }>;
  };
  return Object.entries(pkg.exports).map(([key, target]) => ({
    specifier: key === '.' ? pkg.name : `${pkg.name}/${key.slice(2)}`,
    declarations: path.join(root, target.types),
    module: path.join(root, target.default),
  }));
}

/** A program over some declaration files, and the module symbol of each. */
export interface EntryProgram {
  readonly program: ts.Program;
  readonly checker: ts.TypeChecker;
  /** The module symbol of each file, in the order given. */
  readonly modules: readonly ts.Symbol[];
}

/**
 * Compiles declaration files as a consumer's strict NodeNext project would (no @types).
 * @param files The entry declaration files.
 * @returns The program, its checker and each file's module symbol.
 */
export function entryProgram(files: readonly string[]): EntryProgram {
  const program = ts.createProgram([...files], {
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    strict: true,
    noEmit: true,
    types: [],
  });
  const checker = program.getTypeChecker();
  const modules = files.map((file) => {
    const source = program.getSourceFile(file);
    assert.ok(source, `${file} is not in the program`);
    const symbol = checker.getSymbolAtLocation(source);
    assert.ok(symbol, `${file} is not a module`);
    return symbol;
  });
  return { program, checker, modules };
}

/**
 * The symbol an export stands for (through `export { x } from`).
 * @param checker The program's checker.
 * @param symbol An exported symbol.
 * @returns The declaration's own symbol.
 */
export function resolveAlias(checker: ts.TypeChecker, symbol: ts.Symbol): ts.Symbol {
  return (symbol.flags & ts.SymbolFlags.Alias) !== 0 ? checker.getAliasedSymbol(symbol) : symbol;
}
