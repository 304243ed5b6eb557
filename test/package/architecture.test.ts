/**
 * The architecture, checked: every relative import in `src/` against the layer table
 * (docs/layers.json, the machine-readable copy of docs/architecture.md's), import cycles against a
 * short allow-list, re-exports that would pass a name through a layer, and branches on the
 * backend's name outside the backend (a capability belongs behind the Backend seam).
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { basename, dirname, join, normalize, relative } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

interface LayerTable {
  readonly floors: readonly { readonly floor: number; readonly name: string; readonly paths: readonly string[] }[];
  readonly cycles: readonly { readonly files: readonly string[]; readonly reason: string }[];
  readonly backendNameAllowed: { readonly paths: readonly string[] };
  readonly reexportAllowed: { readonly paths: readonly string[] };
}

/** One relative import or re-export of a source file. */
export interface ImportEdge {
  readonly from: string;
  readonly to: string;
  readonly reexport: boolean;
  readonly line: number;
}

const table = JSON.parse(readFileSync(join(root, 'docs', 'layers.json'), 'utf8')) as LayerTable;

/** The floor of a repository path (longest matching entry), or undefined when the table lacks it. */
export function floorOf(path: string, layers: LayerTable = table): number | undefined {
  let best: { floor: number; length: number } | undefined;
  for (const { floor, paths } of layers.floors) {
    for (const p of paths) {
      const hit = p.endsWith('/') ? path.startsWith(p) : path === p;
      if (hit && (best === undefined || p.length > best.length)) best = { floor, length: p.length };
    }
  }
  return best?.floor;
}

function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(join(root, dir), { withFileTypes: true })) {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory()) out.push(...sourceFiles(path));
    else if (entry.name.endsWith('.ts')) out.push(path);
  }
  return out.sort();
}

/** The relative imports of one file's text (static, re-exports and dynamic `import()`). */
export function importsOf(file: string, text: string): ImportEdge[] {
  const edges: ImportEdge[] = [];
  const pattern = /^\s*(import|export)\b[^;'"]*?\bfrom\s+'(\.[^']+)'|\bimport\(\s*'(\.[^']+)'\s*\)/gm;
  for (let m = pattern.exec(text); m !== null; m = pattern.exec(text)) {
    const spec = m[2] ?? m[3]!;
    const to = normalize(join(dirname(file), spec)).replace(/\.js$/, '.ts');
    const line = text.slice(0, m.index).split('\n').length + (m[0].startsWith('\n') ? 1 : 0);
    edges.push({ from: file, to, reexport: m[1] === 'export', line });
  }
  return edges;
}

/** Strongly connected components of more than one file (Tarjan). */
export function cyclesOf(edges: readonly ImportEdge[]): string[][] {
  const next = new Map<string, string[]>();
  for (const e of edges) next.set(e.from, [...(next.get(e.from) ?? []), e.to]);
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const out: string[][] = [];
  let counter = 0;
  const visit = (v: string): void => {
    index.set(v, counter);
    low.set(v, counter);
    counter++;
    stack.push(v);
    onStack.add(v);
    for (const w of next.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) === index.get(v)) {
      const component: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        component.push(w);
      } while (w !== v);
      if (component.length > 1) out.push(component.sort());
    }
  };
  for (const v of [...next.keys()].sort()) if (!index.has(v)) visit(v);
  return out;
}

const allowedBy = (paths: readonly string[], file: string): boolean => paths.some((p) => (p.endsWith('/') ? file.startsWith(p) : file === p));

/**
 * Every way the source tree breaks the layer table, as one line each.
 *
 * @param files Repository paths with their text.
 * @param layers The table.
 * @returns The breaks (empty when the house holds).
 */
export function architectureBreaks(files: ReadonlyMap<string, string>, layers: LayerTable = table): string[] {
  const breaks: string[] = [];
  const edges = [...files].flatMap(([file, text]) => importsOf(file, text));
  for (const file of files.keys()) if (floorOf(file, layers) === undefined) breaks.push(`${file}: not in docs/layers.json`);
  for (const e of edges) {
    const a = floorOf(e.from, layers);
    const b = floorOf(e.to, layers);
    if (a === undefined || b === undefined) continue;
    if (b > a) breaks.push(`${e.from}:${e.line}: imports ${e.to} (floor ${b}) from floor ${a}: an upward edge`);
    if (e.reexport && b !== a && !allowedBy(layers.reexportAllowed.paths, e.from)) {
      breaks.push(`${e.from}:${e.line}: re-exports ${e.to} (floor ${b}) from floor ${a}: import it from where it is declared`);
    }
  }
  const allowed = new Set(layers.cycles.map((c) => [...c.files].sort().join(' ')));
  for (const cycle of cyclesOf(edges)) {
    if (!allowed.has(cycle.join(' '))) breaks.push(`import cycle: ${cycle.join(' -> ')}`);
  }
  const nameBranch = /\.name\s*[!=]==?\s*'(?:emulated|cuda)'|'(?:emulated|cuda)'\s*[!=]==?\s*[\w.()]*\.name\b/;
  for (const [file, text] of files) {
    if (allowedBy(layers.backendNameAllowed.paths, file)) continue;
    text.split('\n').forEach((lineText, i) => {
      if (nameBranch.test(lineText)) breaks.push(`${file}:${i + 1}: branches on the backend's name: ask the Backend for a capability instead`);
    });
  }
  return breaks;
}

/**
 * Where `src/backend/emulated/` breaks its naming scheme: a module of Backend calls (one that declares a
 * `...Calls` class or implements a group of driver calls) is named `<group>-calls.ts`, and a data module
 * (every other one but `emulated-backend.ts`, the class that composes them) imports no module of calls.
 *
 * @param files Repository paths with their text.
 * @returns One line per break.
 */
export function emulatedNamingBreaks(files: ReadonlyMap<string, string>): string[] {
  const dir = 'src/backend/emulated/';
  const out: string[] = [];
  const isCalls = (f: string): boolean => f.endsWith('-calls.ts');
  for (const [file, text] of files) {
    if (!file.startsWith(dir) || file.slice(dir.length).includes('/')) continue;
    const calls = /^export class (\w+Calls)\b/m.exec(text);
    if (calls !== null && !isCalls(file)) out.push(`${file}: declares ${calls[1]}, a module of Backend calls: name it <group>-calls.ts`);
    if (isCalls(file) || file === `${dir}emulated-backend.ts`) continue;
    for (const e of importsOf(file, text)) {
      if (e.to.startsWith(dir) && isCalls(e.to)) out.push(`${file}:${e.line}: a data module imports ${e.to}, a module of calls`);
    }
  }
  return out;
}

/**
 * The files that mix the two privacy styles: a `#name` member and a member marked `private`
 * (a `private constructor` and a constructor's parameter properties are exempt: they have no `#` form).
 *
 * @param files Repository paths with their text.
 * @returns One line per mixing file, with a count of each style.
 */
export function privacyMixes(files: ReadonlyMap<string, string>): string[] {
  const out: string[] = [];
  for (const [file, text] of files) {
    const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, false, ts.ScriptKind.TS);
    let hash = 0;
    let keyword = 0;
    const visit = (node: ts.Node): void => {
      if (ts.isClassElement(node) && !ts.isConstructorDeclaration(node) && node.name !== undefined) {
        if (ts.isPrivateIdentifier(node.name)) hash++;
        else if (ts.canHaveModifiers(node) && ts.getModifiers(node)?.some((m) => m.kind === ts.SyntaxKind.PrivateKeyword)) keyword++;
      }
      ts.forEachChild(node, visit);
    };
    visit(source);
    if (hash > 0 && keyword > 0) out.push(`${file}: mixes ${hash} #private and ${keyword} 'private' members: use one style per file`);
  }
  return out;
}

describe('architecture', () => {
  const files = new Map(sourceFiles('src').map((f) => [f, readFileSync(join(root, f), 'utf8')]));

  it('holds: no upward import, no cycle off the allow-list, no re-export through a layer, no backend-name branch', () => {
    assert.deepEqual(architectureBreaks(files), []);
  });

  it('holds: one privacy style per file (#name or private, not both)', () => {
    assert.deepEqual(privacyMixes(files), []);
  });

  it('holds: the emulated backend names its modules of calls <group>-calls.ts, and its data modules import none', () => {
    assert.deepEqual(emulatedNamingBreaks(files), []);
    const planted = new Map([
      ['src/backend/emulated/copies.ts', 'export class CopyCalls {}\n'],
      ['src/backend/emulated/streams.ts', "import { StreamCalls } from './stream-calls.js';\n"],
      ['src/backend/emulated/stream-calls.ts', 'export class StreamCalls {}\n'],
    ]);
    assert.deepEqual(emulatedNamingBreaks(planted), [
      'src/backend/emulated/copies.ts: declares CopyCalls, a module of Backend calls: name it <group>-calls.ts',
      'src/backend/emulated/streams.ts:1: a data module imports src/backend/emulated/stream-calls.ts, a module of calls',
    ]);
  });

  it('every floor of docs/layers.json names paths that exist', () => {
    const all = [...files.keys()];
    for (const { paths } of table.floors) {
      for (const p of paths)
        assert.ok(
          all.some((f) => (p.endsWith('/') ? f.startsWith(p) : f === p)),
          `${p} matches no file in src/`,
        );
    }
  });

  it('catches what it is for: a planted upward import, a planted cycle, a re-export, a name branch and mixed privacy', () => {
    const planted = new Map([
      ['src/util/a.ts', "import { Device } from '../device.js';\n"],
      ['src/device.ts', "import { x } from './util/a.js';\n"],
      ['src/resource/r.ts', "export { Stream } from '../stream.js';\n"],
      ['src/buffer/b.ts', "if (device.backend.name === 'emulated') run();\n"],
    ]);
    const breaks = architectureBreaks(planted);
    assert.ok(
      breaks.some((b) => b.startsWith('src/util/a.ts:1: imports src/device.ts')),
      breaks.join('\n'),
    );
    assert.ok(
      breaks.some((b) => b === 'import cycle: src/device.ts -> src/util/a.ts'),
      breaks.join('\n'),
    );
    assert.ok(
      breaks.some((b) => b.startsWith('src/resource/r.ts:1: re-exports src/stream.ts')),
      breaks.join('\n'),
    );
    assert.ok(
      breaks.some((b) => b.startsWith("src/buffer/b.ts:1: branches on the backend's name")),
      breaks.join('\n'),
    );
    const privacy = privacyMixes(
      new Map([
        ['src/mixed.ts', 'class A { #a = 1; private b = 2; }\n'],
        ['src/exempt.ts', 'class B { #a = 1; private constructor(private readonly c: number) {} }\n'],
      ]),
    );
    assert.deepEqual(privacy, ["src/mixed.ts: mixes 1 #private and 1 'private' members: use one style per file"]);
  });

  it('the architecture document names every floor of the table', () => {
    const doc = readFileSync(join(root, 'docs', 'architecture.md'), 'utf8');
    // A folder by its path under src/ (`resource/`), a file by its path or, in its folder's row, its name.
    const named = (p: string): boolean => doc.includes(relative('src', p).replace(/\/$/, '')) || (!p.endsWith('/') && doc.includes(`\`${basename(p)}\``));
    for (const { paths } of table.floors) for (const p of paths) assert.ok(named(p), `docs/architecture.md does not mention ${p}`);
  });
});
