/**
 * Every code block of the README is run or checked by the suite, on the selected backend:
 * - a TypeScript block follows a mark `<!-- example: examples/NAME.ts -->` and is that file word for word (from
 *   its first import, with the package's entry points in its imports); the build compiles the file and this test
 *   runs it;
 * - a shell block's `vram` commands run (through bin/vram.js) and must succeed;
 * - a block of `vram` usage lines names only commands and flags that the command's own help names;
 * - a block of output follows a mark `<!-- output: examples/NAME.ts -->` and is what that file prints on the
 *   emulated backend;
 * - anything else carries a mark `<!-- not run: REASON -->` just above it, and there are few of those.
 * The first program is also compiled as a consumer compiles it, in test/package/consumer.test.ts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { onGpu } from '../helpers.js';
import { Device } from '../../src/device.js';

const root = new URL('../../../', import.meta.url);
const vramBin = fileURLToPath(new URL('bin/vram.js', root));
const readme = readFileSync(new URL('README.md', root), 'utf8');

/** One fenced block of a Markdown file. */
interface Block {
  /** The fence's language (`ts`, `sh`, ...), '' for none. */
  readonly lang: string;
  readonly body: string;
  /** The text of an HTML comment on the last non-blank line before the fence, if any. */
  readonly mark: string | undefined;
  /** 1-based line of the opening fence, for messages. */
  readonly line: number;
}

/**
 * The fenced blocks of a Markdown text, in order.
 * @param text Markdown.
 * @returns Each block with its language and the mark above it.
 */
function fencedBlocks(text: string): Block[] {
  const lines = text.split('\n');
  const blocks: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(\S*)\s*$/.exec(lines[i]!);
    if (!open) continue;
    const close = lines.findIndex((l, j) => j > i && l === '```');
    assert.ok(close > i, `README.md:${i + 1}: a fence that does not close`);
    let k = i - 1;
    while (k >= 0 && lines[k]!.trim() === '') k--;
    const mark = k >= 0 ? /^<!--\s*(.*?)\s*-->$/.exec(lines[k]!)?.[1] : undefined;
    blocks.push({ lang: open[1]!, body: lines.slice(i + 1, close).join('\n') + '\n', mark, line: i + 1 });
    i = close;
  }
  return blocks;
}

/**
 * An example file as the README shows it: from its first import, importing the package ('../src/index.js' is
 * 'vram', '../src/public/kernels.js' is 'vram/kernels').
 * @param file A path under the repository, `examples/NAME.ts`.
 * @returns The program text the README must show.
 */
function asShown(file: string): string {
  const source = readFileSync(new URL(file, root), 'utf8');
  return source
    .slice(source.search(/^import /m))
    .replaceAll("from '../src/index.js';", "from 'vram';")
    .replace(/from '\.\.\/src\/public\/([\w-]+)\.js';/g, "from 'vram/$1';");
}

/**
 * Runs a compiled example and returns its stdout.
 * @param file `examples/NAME.ts`.
 * @returns What it printed.
 */
function runExample(file: string): string {
  const compiled = fileURLToPath(new URL(`dist/${file.replace(/\.ts$/, '.js')}`, root));
  return execFileSync(process.execPath, [compiled], { encoding: 'utf8', env: process.env });
}

const blocks = fencedBlocks(readme);
const examples = blocks.flatMap((b) => /^example: (examples\/[\w-]+\.ts)$/.exec(b.mark ?? '')?.slice(1, 2) ?? []);

test('examples/tour runs', () => {
  const output = runExample('examples/tour.ts');
  assert.match(output, /pool statistics:/);
  assert.match(output, /peak live 3001000 B/);
});

test("the README's first program and kernels example run", () => {
  assert.deepEqual(
    examples,
    ['examples/first-program.ts', 'examples/tour.ts', 'examples/host-numa-pool.ts', 'examples/kernels.ts', 'examples/graphs.ts'],
    "the README's examples, in order",
  );
  const backend = process.env['VRAM_BACKEND'] === 'cuda' ? 'cuda' : process.env['VRAM_BACKEND'] === 'emulated' ? 'emulated' : '(cuda|emulated)';
  assert.match(runExample('examples/first-program.ts'), new RegExp(`^${backend}: sum 10\\n$`));
  assert.equal(runExample('examples/kernels.ts'), 'sum(x + y) = 1499500\n');
  assert.match(runExample('examples/graphs.ts'), /^\d+ nodes, one launch call each: y\[3\] = 12\n$/);
});

test(
  'examples/host-numa-pool.ts runs where the device has pools in host NUMA memory',
  {
    skip: ((): boolean => {
      try {
        return Device.get(0).attribute('hostNumaMemoryPoolsSupported') === 1;
      } catch {
        return false;
      }
    })()
      ? false
      : 'the device has no pools in host NUMA memory (CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED)',
  },
  () => {
    assert.match(
      runExample('examples/host-numa-pool.ts'),
      /^node \d+ of device 0: pinned-host memory, 1036800 summed on the device\nafter trim: 0 bytes reserved\n$/,
    );
  },
);

test('every TypeScript block of the README is an example file, word for word', () => {
  const ts = blocks.filter((b) => b.lang === 'ts' || b.lang === 'js');
  assert.equal(
    ts.length,
    examples.length,
    `README.md:${ts.find((b) => !b.mark?.startsWith('example:'))?.line ?? '?'}: a code block with no <!-- example: examples/NAME.ts --> mark`,
  );
  for (const block of ts) {
    const file = /^example: (\S+)$/.exec(block.mark ?? '')![1]!;
    assert.equal(block.body, asShown(file), `README.md:${block.line}: copy ${file} (from its first import, importing from 'vram' and its subpaths)`);
  }
});

test("the README's shell blocks: every vram command runs, and only a marked block is left out", () => {
  let ran = 0;
  const skipped: string[] = [];
  for (const block of blocks.filter((b) => b.lang === 'sh')) {
    if (block.mark?.startsWith('not run:')) {
      assert.match(block.mark, /^not run: \S.{10,}/, `README.md:${block.line}: say why the block is not run`);
      skipped.push(`README.md:${block.line}`);
      continue;
    }
    for (const line of block.body
      .split('\n')
      .map((l) => l.replace(/\s+#.*$/, '').trim())
      .filter(Boolean)) {
      const words = /^(?:npx )?vram((?: [\w=.,/-]+)*)$/.exec(line);
      assert.ok(words, `README.md:${block.line}: '${line}' is not a vram command the suite can run; mark the block <!-- not run: why -->`);
      execFileSync(process.execPath, [vramBin, ...words[1]!.trim().split(' ').filter(Boolean)], { encoding: 'utf8', env: process.env });
      ran++;
    }
  }
  assert.ok(ran >= 1, 'the README runs `npx vram info` in its first section');
  assert.ok(skipped.length <= 2, `keep the blocks the suite does not run rare: ${skipped.join(', ')}`);
});

test("the README's usage lines name only commands and flags the CLI has", () => {
  const usage = blocks.filter((b) => b.lang === '' && b.body.startsWith('vram '));
  assert.equal(usage.length, 1, "the CLI section's block of usage lines");
  for (const line of usage[0]!.body.trim().split('\n')) {
    const command = line.split(/\s+/)[1]!;
    const help = execFileSync(process.execPath, [vramBin, 'help', command], { encoding: 'utf8', env: process.env });
    for (const flag of line.match(/(?<=[\s[|])--?[a-z][\w-]*/g) ?? []) {
      assert.ok(help.includes(flag), `README.md: 'vram ${command} ${flag}' is not in 'vram help ${command}'`);
    }
  }
});

test("the README's output blocks are what their examples print", { skip: onGpu ? "the README shows the emulated backend's output" : false }, () => {
  const outputs = blocks.filter((b) => b.mark?.startsWith('output: '));
  assert.ok(outputs.length >= 1, 'the memorySummary() table is an output block');
  for (const block of outputs) {
    const file = /^output: (examples\/[\w-]+\.ts)$/.exec(block.mark!)?.[1];
    assert.ok(file, `README.md:${block.line}: the mark names no examples/NAME.ts`);
    assert.equal(runExample(file), block.body, `README.md:${block.line}: paste what node dist/${file.replace(/\.ts$/, '.js')} prints`);
  }
});

test('no README block is left unchecked', () => {
  const checked = (b: Block): boolean =>
    b.lang === 'ts' || b.lang === 'js' || b.lang === 'sh' || (b.lang === '' && b.body.startsWith('vram ')) || Boolean(b.mark?.startsWith('output: '));
  assert.deepEqual(
    blocks.filter((b) => !checked(b)).map((b) => `README.md:${b.line} (${b.lang || 'no language'})`),
    [],
    'a block of a kind the suite neither runs nor checks',
  );
});
