/**
 * The `@example` blocks of the doc comments in `src/`, compiled as a consumer would write them: each
 * block is the body of an async function in a module of its own that imports every public name of
 * the package (the root first, then each subpath, from the built declarations), so an example that
 * misspells an API, passes an option that does not exist or calls with the wrong types fails to
 * compile. Names an example uses without declaring them (`device`, `stream`, the array it is about)
 * are the only errors allowed: a fragment stands in a context the comment describes.
 */
import { readdirSync } from 'node:fs';
import path from 'node:path';
import ts from 'typescript';
import { entryPoints, entryProgram } from './entry-points.js';

/** One `@example` block: where it is and its code. */
export interface DocExample {
  readonly file: string;
  readonly line: number;
  readonly code: string;
}

/** Every `.ts` file under `dir` (repository-relative paths), sorted. */
export function sourceFiles(root: string, dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(path.join(root, dir), { withFileTypes: true })) {
    const rel = `${dir}/${entry.name}`;
    if (entry.isDirectory()) out.push(...sourceFiles(root, rel));
    else if (entry.name.endsWith('.ts')) out.push(rel);
  }
  return out.sort();
}

/**
 * The fenced blocks after `@example` tags in one file's doc comments.
 *
 * @param file The file's repository path (for messages).
 * @param text Its text.
 * @returns Each block with its first line.
 */
export function examplesOf(file: string, text: string): DocExample[] {
  const examples: DocExample[] = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    if (!/^\s*\*\s*@example\b/.test(lines[i]!)) continue;
    // An example of an @internal declaration documents what the package's declarations strip.
    let start = i;
    while (start > 0 && !/\/\*\*/.test(lines[start]!)) start--;
    let end = i;
    while (end < lines.length - 1 && !/\*\//.test(lines[end]!)) end++;
    if (lines.slice(start, end + 1).some((l) => /@internal\b/.test(l))) continue;
    let open = i + 1;
    while (open < lines.length && !/^\s*\*\s*```/.test(lines[open]!) && !/^\s*\*\s*@\w/.test(lines[open]!) && !/\*\//.test(lines[open]!)) open++;
    if (open >= lines.length || !/^\s*\*\s*```(ts|typescript)?\s*$/.test(lines[open]!)) continue;
    const body: string[] = [];
    let close = open + 1;
    for (; close < lines.length && !/^\s*\*\s*```\s*$/.test(lines[close]!); close++) body.push(lines[close]!.replace(/^\s*\* ?/, ''));
    examples.push({ file, line: open + 2, code: body.join('\n') });
    i = close;
  }
  return examples;
}

/** A diagnostic of one example, as `file:line: message`. */
export type ExampleError = string;

/**
 * TypeScript's "cannot find name" codes (a fragment's free names), and what follows from a free name:
 * a callback's parameters and `this` with no contextual type.
 */
const FREE_NAME = new Set([2304, 2552, 2662, 18004, 7006, 7031, 2683]);

/**
 * Compiles the examples in one program against the package's built declarations.
 *
 * @param root The repository root (package.json with "exports", dist/ built).
 * @param examples The blocks.
 * @returns The errors other than free names.
 */
export function compileExamples(root: string, examples: readonly DocExample[]): ExampleError[] {
  const entries = entryPoints();
  const { checker, modules } = entryProgram(entries.map((e) => e.declarations));
  // Every public value and type name, from the first entry point that exports it (the root first).
  const owner = new Map<string, string>();
  modules.forEach((module, i) => {
    for (const symbol of checker.getExportsOfModule(module)) if (!owner.has(symbol.name)) owner.set(symbol.name, entries[i]!.specifier);
  });
  const virtualDir = path.join(root, 'dist', 'doc-examples');
  const files = new Map<string, { readonly example: DocExample; readonly text: string; readonly bodyLine: number }>();
  examples.forEach((example, n) => {
    const own = example.code.split('\n').filter((l) => /^import\b/.test(l));
    const body = example.code.split('\n').filter((l) => !/^import\b/.test(l));
    const declared = new Set(
      own.flatMap((l) => [...(/\{([^}]*)\}/.exec(l)?.[1] ?? '').matchAll(/(?:type\s+)?(\w+)(?:\s+as\s+(\w+))?/g)].map((m) => m[2] ?? m[1]!)),
    );
    const bySpecifier = new Map<string, string[]>();
    for (const [name, specifier] of owner) {
      if (declared.has(name) || !new RegExp(`\\b${name}\\b`).test(body.join('\n'))) continue;
      bySpecifier.set(specifier, [...(bySpecifier.get(specifier) ?? []), name]);
    }
    const head = [...own, ...[...bySpecifier].map(([specifier, names]) => `import { ${names.join(', ')} } from '${specifier}';`)];
    const text = [...head, 'export {};', 'async function example() {', ...body, '}', 'void example;', ''].join('\n');
    files.set(path.join(virtualDir, `example-${n}.ts`), { example, text, bodyLine: head.length + 2 });
  });
  const options: ts.CompilerOptions = {
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    lib: ['lib.es2022.d.ts', 'lib.es2024.sharedmemory.d.ts', 'lib.esnext.disposable.d.ts'],
    strict: true,
    noEmit: true,
    types: ['node'],
    typeRoots: [path.join(root, 'node_modules', '@types')],
    skipLibCheck: true,
  };
  const host = ts.createCompilerHost(options);
  const getSourceFile = host.getSourceFile.bind(host);
  host.getSourceFile = (name, language) => {
    const v = files.get(path.resolve(name));
    return v !== undefined ? ts.createSourceFile(name, v.text, language) : getSourceFile(name, language);
  };
  const fileExists = host.fileExists.bind(host);
  host.fileExists = (name) => files.has(path.resolve(name)) || fileExists(name);
  const program = ts.createProgram([...files.keys()], options, host);
  const errors: ExampleError[] = [];
  for (const [name, { example, bodyLine }] of files) {
    for (const d of ts.getPreEmitDiagnostics(program, program.getSourceFile(name))) {
      if (FREE_NAME.has(d.code) || d.file === undefined || path.resolve(d.file.fileName) !== name) continue;
      const { line } = d.file.getLineAndCharacterOfPosition(d.start ?? 0);
      const at = example.line + Math.max(0, line - bodyLine);
      errors.push(`${example.file}:${at}: TS${d.code} ${ts.flattenDiagnosticMessageText(d.messageText, ' ')}`);
    }
  }
  return errors;
}

/**
 * The `*.ts` paths that comments in a file name, which must exist: as written from the repository
 * root, from `src/`, from the file's folder, or (a bare file name) as some file's name.
 *
 * @param file The file's repository path.
 * @param text Its text.
 * @param known Every file of the repository.
 * @returns `file:line: names path.ts, which does not exist` for each stale one.
 */
export function stalePaths(file: string, text: string, known: ReadonlySet<string>): string[] {
  const names = new Set([...known].map((f) => path.basename(f)));
  const stale: string[] = [];
  text.split('\n').forEach((line, i) => {
    const comment = /\/\/(.*)$|^\s*\*(.*)$|\/\*\*?(.*)$/.exec(line);
    if (comment === null) return;
    const body = comment[1] ?? comment[2] ?? comment[3] ?? '';
    for (const m of body.matchAll(/(?<![\w./-])((?:\.{1,2}\/)?[\w-]+(?:\/[\w.-]+)*\.ts)\b/g)) {
      const p = m[1]!;
      if (p.endsWith('.d.ts')) continue;
      const candidates = [p, `src/${p}`, path.normalize(path.join(path.dirname(file), p)), `test/${p}`];
      if (candidates.some((c) => known.has(c))) continue;
      if (!p.includes('/') && names.has(p)) continue;
      if (p.includes('/') && [...known].some((k) => k.endsWith(`/${p}`))) continue;
      stale.push(`${file}:${i + 1}: names ${p}, which does not exist`);
    }
  });
  return stale;
}
