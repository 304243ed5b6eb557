/**
 * Every function, class, method and constructor that an entry point of the package exports (the root
 * and every subpath, from their built declarations) has a doc comment with `@example`, and, the
 * functions, methods and constructors, `@throws` (what it throws and when, or `@throws Never.`): the
 * project's rule for every export, checked the way Deno std's `_tools/check_docs.ts` checks its
 * modules. Members count from the exported class and every class it extends (a member of an
 * unexported base class is public through the subclass). A method that overrides a base class's member
 * or implements a vram interface's shows that member's comment when it has none of its own (as an
 * editor does), and then is not checked; with a comment of its own, it may leave the tags to that member.
 * Public members only: private ones are no one's API, and protected ones are hooks a subclass
 * implements rather than calls.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { compileExamples, examplesOf, sourceFiles, stalePaths } from './doc-examples.js';
import { entryPoints, entryProgram, resolveAlias } from './entry-points.js';

const distSrc = path.resolve(fileURLToPath(new URL('../../src/', import.meta.url)));

/** One exported declaration whose doc comment lacks a tag, as `Class#method`, `Class.static`, `new Class` or `fn`. */
type Gap = `${string}: ${'@example' | '@throws'}`;

/**
 * The doc gaps of the declarations that `entryFiles` export.
 * @param entryFiles The entry declaration files.
 * @param ownDir The package's declaration folder; classes declared elsewhere (lib) are not walked.
 * @returns One `name: @tag` per missing tag, sorted.
 */
function docGaps(entryFiles: readonly string[], ownDir: string): Gap[] {
  const { checker, modules } = entryProgram(entryFiles);
  const gaps = new Set<Gap>();
  const isOwn = (node: ts.Node): boolean => path.resolve(node.getSourceFile().fileName).startsWith(ownDir + path.sep);
  const tagsOf = (decls: readonly ts.Node[]): Set<string> => new Set(decls.flatMap((d) => ts.getJSDocTags(d).map((t) => t.tagName.text)));
  const hasDoc = (node: ts.Node): boolean => ts.getJSDocCommentsAndTags(node).length > 0;
  const require = (name: string, decls: readonly ts.Node[], tags: readonly ('@example' | '@throws')[]): void => {
    const present = tagsOf(decls);
    for (const tag of tags) if (!present.has(tag.slice(1))) gaps.add(`${name}: ${tag}`);
  };
  const modifiers = (node: ts.Node): readonly ts.ModifierLike[] => (ts.canHaveModifiers(node) ? (ts.getModifiers(node) ?? []) : []);
  const isPublic = (member: ts.ClassElement): boolean =>
    !(member.name !== undefined && ts.isPrivateIdentifier(member.name)) &&
    !modifiers(member).some((m) => m.kind === ts.SyntaxKind.PrivateKeyword || m.kind === ts.SyntaxKind.ProtectedKeyword);

  // The class declarations of `decl` and of each class above it that vram declares, nearest first.
  const lineage = (decl: ts.ClassDeclaration): ts.ClassDeclaration[] => {
    const chain: ts.ClassDeclaration[] = [];
    let current: ts.ClassDeclaration | undefined = decl;
    while (current !== undefined && isOwn(current) && !chain.includes(current)) {
      chain.push(current);
      const base: ts.ExpressionWithTypeArguments | undefined = current.heritageClauses?.find((h) => h.token === ts.SyntaxKind.ExtendsKeyword)?.types[0];
      const symbol: ts.Symbol | undefined = base === undefined ? undefined : checker.getSymbolAtLocation(base.expression);
      current = symbol === undefined ? undefined : resolveAlias(checker, symbol).declarations?.find(ts.isClassDeclaration);
    }
    return chain;
  };

  const keyOf = (member: ts.ClassElement | ts.TypeElement): string | undefined =>
    member.name === undefined || ts.isComputedPropertyName(member.name)
      ? undefined
      : `${modifiers(member).some((m) => m.kind === ts.SyntaxKind.StaticKeyword) ? '.' : '#'}${member.name.getText()}`;
  // The members of the vram interfaces that these classes implement.
  const interfaceMembers = (classes: readonly ts.ClassDeclaration[]): ts.TypeElement[] =>
    classes
      .flatMap((cls) => cls.heritageClauses?.filter((h) => h.token === ts.SyntaxKind.ImplementsKeyword) ?? [])
      .flatMap((h) => h.types)
      .flatMap((t) => {
        const symbol = checker.getSymbolAtLocation(t.expression);
        return symbol === undefined ? [] : (resolveAlias(checker, symbol).declarations ?? []);
      })
      .filter((d): d is ts.InterfaceDeclaration => ts.isInterfaceDeclaration(d) && isOwn(d))
      .flatMap((d) => [...d.members]);

  const visitClass = (name: string, decl: ts.ClassDeclaration): void => {
    require(name, [decl], ['@example']);
    const chain = lineage(decl);
    const seen = new Set<string>();
    for (const [depth, cls] of chain.entries()) {
      const methods = new Map<string, ts.Node[]>();
      for (const member of cls.members) {
        if (!isPublic(member)) continue;
        if (ts.isConstructorDeclaration(member)) {
          if (depth === 0) require(`new ${name}`, [member], ['@example', '@throws']);
          continue;
        }
        const key = ts.isMethodDeclaration(member) ? keyOf(member) : undefined;
        if (key === undefined) continue;
        methods.set(key, [...(methods.get(key) ?? []), member]);
      }
      for (const [key, decls] of methods) {
        if (seen.has(key)) continue;
        seen.add(key);
        // The member it overrides (a class above) or implements (an interface of vram's).
        const inherited = [...chain.slice(depth + 1).flatMap((base) => base.members), ...interfaceMembers(chain.slice(depth))].filter((m) => keyOf(m) === key);
        // An undocumented override shows the base member's comment (as an editor does): that one is checked
        // where it is declared. A documented one may leave its tags to the base's.
        if (inherited.length > 0 && !decls.some(hasDoc)) continue;
        const owner = depth === 0 ? name : (cls.name?.text ?? name);
        require(`${owner}${key}`, [...decls, ...inherited], ['@example', '@throws']);
      }
    }
  };

  const visited = new Set<ts.Node>();
  for (const exported of modules.flatMap((m) => checker.getExportsOfModule(m))) {
    const decls = (resolveAlias(checker, exported).declarations ?? []).filter((d) => !visited.has(d));
    decls.forEach((d) => visited.add(d));
    const functions = decls.filter(ts.isFunctionDeclaration);
    if (functions.length > 0) require(exported.name, functions, ['@example', '@throws']);
    for (const decl of decls) if (ts.isClassDeclaration(decl)) visitClass(exported.name, decl);
  }
  return [...gaps].sort();
}

test('every exported function, class, method and constructor has @example, and @throws where it can throw', () => {
  const gaps = docGaps(
    entryPoints().map((e) => e.declarations),
    distSrc,
  );
  assert.deepEqual(
    gaps,
    [],
    `doc comments lacking a tag (add it: @example with a short use, @throws with what and when, or "@throws Never."):\n  ${gaps.join('\n  ')}`,
  );
});

test('the check finds a missing tag wherever the declaration is', () => {
  // Guards the check itself: a walk that found nothing would pass the test above vacuously.
  const dir = mkdtempSync(path.join(tmpdir(), 'vram-docs-'));
  try {
    writeFileSync(
      path.join(dir, 'a.d.ts'),
      [
        '/** Fine.\n * @example f()\n * @throws Never. */ export declare function fine(): void;',
        '/** No example.\n * @throws Never. */ export declare function noExample(): void;',
        '/** Overloads: the tags may be on any one. */ export declare function over(a: string): void;',
        '/** @example over(1)\n * @throws Never. */ export declare function over(a: number): void;',
        '/** Base.\n * @example new Base() */ declare class Base {',
        '  /** @example b.m()\n * @throws Never. */ m(): void;',
        '  /** No tags: reported as Base#o (public through Derived), and not for n, which Derived documents anew. */ n(): void; o(): void;',
        '  private p(): void; protected q(): void;',
        '}',
        'interface Shape { /** @example s.k()\n * @throws Never. */ k(): void; j(): void; }',
        '/** No example. */ export declare class Derived extends Base implements Shape {',
        '  k(): void;',
        '  /** Documents j anew, and Shape#j has no tags either. */ j(): void;',
        '  /** @example new Derived()\n */ constructor();',
        '  /** Own words, the tags of Base#m. */ m(): void;',
        '  /** Overrides and documents: its own tags count. */ n(): void;',
        '  /** @throws Never. */ static s(): void;',
        '}',
      ].join('\n'),
    );
    writeFileSync(path.join(dir, 'index.d.ts'), "export { fine, noExample, over, Derived } from './a.js';\n");
    writeFileSync(path.join(dir, 'package.json'), '{"type":"module"}');
    assert.deepEqual(docGaps([path.join(dir, 'index.d.ts')], dir), [
      'Base#o: @example',
      'Base#o: @throws',
      'Derived#j: @example',
      'Derived#j: @throws',
      'Derived#n: @example',
      'Derived#n: @throws',
      'Derived.s: @example',
      'Derived: @example',
      'new Derived: @throws',
      'noExample: @example',
    ]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

const repoRoot = path.resolve(fileURLToPath(new URL('../../../', import.meta.url)));

test('every @example block in src/ compiles against the package as a consumer imports it', () => {
  const examples = sourceFiles(repoRoot, 'src').flatMap((f) => examplesOf(f, readFileSync(path.join(repoRoot, f), 'utf8')));
  assert.ok(examples.length > 500, `only ${examples.length} examples found: the extraction broke`);
  assert.deepEqual(compileExamples(repoRoot, examples), []);
});

test('a broken @example is caught: a misspelt method, a wrong option type', () => {
  const errors = compileExamples(repoRoot, [
    { file: 'planted.ts', line: 1, code: "const a = DeviceArray.zeroz([4]);\nconst b = DeviceArray.zeros([4], 'float32', { strem: 1 });\nvoid a; void b;" },
  ]);
  assert.equal(errors.length, 2, errors.join('\n'));
  assert.match(errors[0]!, /^planted\.ts:1: TS2551 .*zeroz/);
  assert.match(errors[1]!, /^planted\.ts:2: TS(2353|2561) .*strem/);
});

test('every *.ts path a comment names exists', () => {
  const known = new Set(['src', 'test', 'bench', 'examples', 'scripts'].flatMap((d) => sourceFiles(repoRoot, d)));
  const stale = [...known].filter((f) => f.startsWith('src/')).flatMap((f) => stalePaths(f, readFileSync(path.join(repoRoot, f), 'utf8'), known));
  assert.deepEqual(stale, []);
});

test("the README's subpath table names every subpath package.json exports, and the install block @types/node", async () => {
  const { readFileSync } = await import('node:fs');
  const root = fileURLToPath(new URL('../../../', import.meta.url));
  const readme = readFileSync(path.join(root, 'README.md'), 'utf8');
  const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { exports: Record<string, unknown> };
  for (const subpath of Object.keys(pkg.exports).filter((k) => k !== '.')) {
    const name = `vram/${subpath.slice(2)}`;
    assert.match(readme, new RegExp(`^\\| \`${name}\` \\|`, 'm'), `${name} has a row in the subpath table`);
  }
  assert.match(readme, /npm install --save-dev typescript @types\/node/);
  assert.match(readme, /"types": \["node"\]/);
  assert.match(readme, /\(both from `vram\/resources`\): `withMemoryBudget/);
});

test("src/index.ts's header names every subpath package.json exports, and typedoc.json documents each entry point", () => {
  const root = fileURLToPath(new URL('../../../', import.meta.url));
  const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { exports: Record<string, { types: string }> };
  const subpaths = Object.keys(pkg.exports)
    .filter((k) => k !== '.')
    .map((k) => `vram/${k.slice(2)}`)
    .sort();
  const index = readFileSync(path.join(root, 'src/index.ts'), 'utf8');
  const header = index.slice(0, index.indexOf('@module vram'));
  const named = [...new Set([...header.matchAll(/`(vram\/[a-z-]+)`/g)].map((m) => m[1]!))].sort();
  assert.deepEqual(named, subpaths, "src/index.ts's header lists the subpaths of package.json exports, no more and no fewer");
  const typedoc = readFileSync(path.join(root, 'typedoc.json'), 'utf8');
  const documented = [...typedoc.matchAll(/"(src\/[^"]+\.ts)"/g)].map((m) => m[1]!).sort();
  const entries = Object.values(pkg.exports)
    .map((e) => e.types.replace(/^\.\/dist\//, '').replace(/\.d\.ts$/, '.ts'))
    .sort();
  assert.deepEqual(documented, entries, 'typedoc.json lists every entry point of package.json exports');
});
