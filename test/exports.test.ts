/**
 * Every type a consumer meets in vram's public signatures can be imported from 'vram'. A consumer who
 * writes `const o: TrackingOptions = {...}` or a function taking a `CopyEndpoint` needs the name; a type
 * reachable only as `Parameters<typeof f>[1]` is a gap in the API. This test finds them mechanically:
 * it walks the declarations that dist/src/index.d.ts exports (the built output, after `stripInternal`,
 * so `@internal` members are not public), collects every type reference in their public and protected
 * members (protected: the API of a subclass, e.g. a custom `MemoryResource`), follows each reference
 * that resolves to a declaration in vram's own sources (transitively, through the unexported ones too),
 * and fails naming every one that index.ts does not export.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const distSrc = path.resolve(fileURLToPath(new URL('../src/', import.meta.url)));
const entry = path.join(distSrc, 'index.d.ts');

/** One type that a public signature uses and index.ts does not export, with where it was met. */
interface Missing {
  readonly name: string;
  readonly file: string;
  readonly usedBy: string;
}

/**
 * The unexported vram types that the declarations exported from `entryFile` use.
 * @param entryFile The entry declaration file (dist/src/index.d.ts).
 * @param ownDir The folder of the package's own declarations; types declared elsewhere (lib, node) are not checked.
 * @returns One record per missing type, in the order found.
 */
function unexportedTypes(entryFile: string, ownDir: string): Missing[] {
  const program = ts.createProgram([entryFile], {
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    strict: true,
    noEmit: true,
    types: [],
  });
  const checker = program.getTypeChecker();
  const source = program.getSourceFile(entryFile);
  assert.ok(source, `${entryFile} is not in the program`);
  const moduleSymbol = checker.getSymbolAtLocation(source);
  assert.ok(moduleSymbol, `${entryFile} is not a module`);

  const resolve = (symbol: ts.Symbol): ts.Symbol =>
    (symbol.flags & ts.SymbolFlags.Alias) !== 0 ? checker.getAliasedSymbol(symbol) : symbol;
  const isOwn = (symbol: ts.Symbol): boolean =>
    (symbol.declarations ?? []).some((d) => path.resolve(d.getSourceFile().fileName).startsWith(ownDir + path.sep));

  const exportsList = checker.getExportsOfModule(moduleSymbol).map((s) => ({ name: s.name, symbol: resolve(s) }));
  const exported = new Set(exportsList.map((e) => e.symbol));
  const visited = new Set<ts.Symbol>();
  const missing: Missing[] = [];

  // A private member (or an ECMAScript #private one) is no part of anyone's API; protected is (subclasses).
  const isPrivate = (member: ts.ClassElement | ts.TypeElement): boolean =>
    (ts.canHaveModifiers(member) && (ts.getModifiers(member) ?? []).some((m) => m.kind === ts.SyntaxKind.PrivateKeyword)) ||
    (member.name !== undefined && ts.isPrivateIdentifier(member.name));

  // The symbol an entity name stands for, taken at its root: `CUresult.SUCCESS` needs `CUresult`.
  const rootSymbol = (name: ts.EntityName | ts.Expression): ts.Symbol | undefined => {
    let node: ts.Node = name;
    while (ts.isQualifiedName(node) || ts.isPropertyAccessExpression(node)) {
      node = ts.isQualifiedName(node) ? node.left : node.expression;
    }
    return checker.getSymbolAtLocation(node);
  };

  const reference = (symbol: ts.Symbol | undefined, usedBy: string): void => {
    if (symbol === undefined) return;
    const target = resolve(symbol);
    if ((target.flags & ts.SymbolFlags.TypeParameter) !== 0 || !isOwn(target)) return;
    if (!exported.has(target) && !visited.has(target)) {
      const file = path.relative(ownDir, target.declarations?.[0]?.getSourceFile().fileName ?? '');
      missing.push({ name: target.name, file, usedBy });
    }
    visitSymbol(target, target.name);
  };

  // Every type reference in a subtree of type syntax.
  const walkTypes = (node: ts.Node, usedBy: string): void => {
    if (ts.isTypeReferenceNode(node)) reference(rootSymbol(node.typeName), usedBy);
    else if (ts.isExpressionWithTypeArguments(node)) reference(rootSymbol(node.expression), usedBy);
    else if (ts.isTypeQueryNode(node)) reference(rootSymbol(node.exprName), usedBy);
    else if (ts.isImportTypeNode(node) && node.qualifier !== undefined) reference(rootSymbol(node.qualifier), usedBy);
    // A computed member name (`[Symbol.dispose]`) is a value, not a type of the signature.
    if (ts.isComputedPropertyName(node)) return;
    ts.forEachChild(node, (child) => walkTypes(child, usedBy));
  };

  const visitDeclaration = (decl: ts.Declaration, owner: string): void => {
    if (ts.isClassDeclaration(decl) || ts.isInterfaceDeclaration(decl) || ts.isClassExpression(decl)) {
      decl.typeParameters?.forEach((p) => walkTypes(p, owner));
      decl.heritageClauses?.forEach((h) => walkTypes(h, owner));
      for (const member of decl.members) {
        if (isPrivate(member)) continue;
        const name = member.name !== undefined && !ts.isComputedPropertyName(member.name) ? member.name.getText() : '';
        walkTypes(member, name ? `${owner}.${name}` : owner);
      }
    } else if (ts.isModuleDeclaration(decl)) {
      // A namespace merged with a class or function: its exported members are public too.
      if (decl.body !== undefined && ts.isModuleBlock(decl.body)) decl.body.statements.forEach((s) => walkTypes(s, owner));
    } else {
      // Functions, type aliases, variables, enums: everything in them is signature.
      walkTypes(decl, owner);
    }
  };

  function visitSymbol(symbol: ts.Symbol, owner: string): void {
    if (visited.has(symbol)) return;
    visited.add(symbol);
    for (const decl of symbol.declarations ?? []) visitDeclaration(decl, owner);
  }

  for (const { name, symbol } of exportsList) visitSymbol(symbol, name);
  return missing;
}

/**
 * Helper types that are local to their module (no `export` there, so index.ts cannot re-export them)
 * and that consumers meet only inside a named, exported type's computation (`ComponentsOf<N>`,
 * `ScalarValue<N>`). Each is a known gap until its module exports it; an entry that no longer
 * applies fails the test below, so the list only shrinks.
 */
const moduleLocal = new Map<string, string>([]);

test("every vram type in a public signature is exported from 'vram'", () => {
  const found = unexportedTypes(entry, distSrc);
  const missing = found.filter((m) => moduleLocal.get(m.name) !== m.file);
  const stale = [...moduleLocal].filter(([name, file]) => !found.some((m) => m.name === name && m.file === file));
  assert.deepEqual(stale, [], 'entries of moduleLocal that no public signature uses unexported any more: remove them');
  const report = missing.map((m) => `${m.name} (${m.file}), used by ${m.usedBy}`).join('\n  ');
  assert.equal(missing.length, 0, `types used in public signatures but not exported from src/index.ts:\n  ${report}`);
});

test('the walk reports an unexported type however it is reached', () => {
  // Guards the test itself: a walk that resolved nothing would pass the test above vacuously. A small
  // package whose exports use unexported types through each kind of reference the walk follows.
  const dir = mkdtempSync(path.join(tmpdir(), 'vram-exports-'));
  try {
    writeFileSync(path.join(dir, 'a.d.ts'), [
      'export interface Opt { sink: Sink; }',
      'export interface Sink { write(line: Line): void; }',
      'export type Line = string;',
      'export declare class Base { protected hook(x: Hooked): void; private secret(x: Secret): void; }',
      'export interface Hooked { n: number; } export interface Secret { n: number; }',
      'export declare class Derived extends Base { configure(o: Opt): Generic<Param>; }',
      'export interface Generic<T> { value: T; } export interface Param { p: 1; }',
      'export declare const table: { readonly [k: string]: Entry }; export interface Entry { e: 1; }',
      'export declare function f<T extends Constraint>(t: T): typeof hidden; export interface Constraint { c: 1; }',
      'export declare const hidden: number;',
      'export interface Fine { x: Date; }',
    ].join('\n'));
    writeFileSync(path.join(dir, 'index.d.ts'), "export { Derived, table, f, Generic } from './a.js';\nexport type { Fine } from './a.js';\n");
    writeFileSync(path.join(dir, 'package.json'), '{"type":"module"}');
    const names = unexportedTypes(path.join(dir, 'index.d.ts'), dir).map((m) => m.name).sort();
    assert.deepEqual(names, ['Base', 'Constraint', 'Entry', 'Hooked', 'Line', 'Opt', 'Param', 'Sink', 'hidden']);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('no @internal declaration ships in dist/src', () => {
  // stripInternal drops a declaration marked `@internal` together with its comment; one still present
  // (a marker the compiler did not see, e.g. after the declaration's name) would ship as public API.
  const shipped = readdirSync(distSrc, { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.d.ts') && readFileSync(path.join(distSrc, f), 'utf8').includes('@internal'));
  assert.deepEqual(shipped, []);
});
