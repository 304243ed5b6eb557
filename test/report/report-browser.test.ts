/**
 * The HTML reports in a real browser: Debian's `chromium`, driven by puppeteer-core, loads each
 * file the CLI writes (replay of the bert trace, bench, the out-of-memory example's snapshot)
 * from disk, and the test checks that it asked for nothing over the network, logged no error, and
 * drew every plot with its series, points and axis labels; then saves a screenshot: to
 * docs/images/ (the README shows them) under `npm run screenshots` (VRAM_UPDATE_SCREENSHOTS=1), else
 * to a temporary folder, so `npm test` leaves the working tree as it found it. A 150,000-event replay timeline is loaded too, and its
 * time to first render and to redraw a zoom are reported (as diagnostics, not asserted: speed
 * targets belong in benchmarks). Skipped, saying why, where no browser is installed.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it, type TestContext } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';
import puppeteer, { type Browser, type Page } from 'puppeteer-core';
import { ALLOCATION_LOG_HEADER } from '../../src/resource/adaptors/logging.js';
import { mulberry32 } from '../../src/util/random.js';

const root = fileURLToPath(new URL('../../../', import.meta.url));
const bin = join(root, 'bin/vram.js');
const images = process.env.VRAM_UPDATE_SCREENSHOTS === '1' ? join(root, 'docs/images') : mkdtempSync(join(tmpdir(), 'vram-screenshots-'));
after(() => {
  if (process.env.VRAM_UPDATE_SCREENSHOTS !== '1') rmSync(images, { recursive: true, force: true });
});

/** The browser: PUPPETEER_EXECUTABLE_PATH (puppeteer's own variable), else Debian's and others' usual paths. */
const chromium = [process.env.PUPPETEER_EXECUTABLE_PATH, '/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome'].find(
  (path): path is string => path !== undefined && path !== '' && existsSync(path),
);
const needsBrowser = {
  skip:
    chromium === undefined
      ? 'no chromium installed: `apt-get install -y chromium` (or set PUPPETEER_EXECUTABLE_PATH) to check the HTML reports in a browser'
      : false,
} as const;

/** Runs a script on the emulated backend with `env` added, without the developer's own VRAM_* settings. */
function run(script: string, args: readonly string[], extra: Readonly<Record<string, string>> = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  const env: Record<string, string> = { VRAM_BACKEND: 'emulated', ...extra };
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('VRAM_') && v !== undefined) env[k] = v;
  return new Promise((resolve) => {
    execFile(process.execPath, [script, ...args], { cwd: root, env, maxBuffer: 16 << 20, timeout: 240_000 }, (error, stdout, stderr) => {
      resolve({ code: error === null ? 0 : typeof error.code === 'number' ? error.code : 1, stdout, stderr });
    });
  });
}

/** Runs `vram ...args` on the emulated backend. */
function vram(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return run(bin, args);
}

/** What a loaded report drew, as `window.vramReport` and the DOM tell it. */
interface Drawn {
  readonly renderMs: number;
  readonly sections: readonly { readonly id: string; readonly kind: string; readonly series: number; readonly points: number }[];
  /** Per uPlot chart: its section, axis labels, series labels, and pixels drawn in each series' colour. */
  readonly charts: readonly {
    readonly id: string;
    readonly axisLabels: readonly string[];
    readonly seriesLabels: readonly string[];
    readonly finitePoints: readonly number[];
    readonly seriesPixels: readonly number[];
  }[];
}

/** A loaded report, with what went wrong while loading it. */
interface Loaded {
  readonly page: Page;
  readonly drawn: Drawn;
  /** Console errors and uncaught exceptions. */
  readonly errors: readonly string[];
  /** Every request other than the file itself (there must be none). */
  readonly requests: readonly string[];
  /** Navigation start to the load event, in milliseconds (the browser's own timing). */
  readonly loadMs: number;
}

/**
 * What the page's globals offer the code run in it (`page.evaluate`), declared here because this
 * project compiles without the DOM's types; only what the checks read.
 */
interface PageChart {
  readonly root: { closest(selector: string): { id: string } | null };
  /** uPlot draws axis labels on the canvas, from these. */
  readonly axes: readonly { readonly label?: string }[];
  readonly ctx: {
    readonly canvas: { readonly width: number; readonly height: number };
    getImageData(x: number, y: number, width: number, height: number): { readonly data: Uint8ClampedArray };
  };
  readonly data: readonly ArrayLike<number | null>[];
  readonly series: readonly { readonly label?: string; readonly stroke?: unknown }[];
  setScale(key: string, range: { min: number; max: number }): void;
}
interface PageGlobals {
  readonly vramReport?: {
    readonly ready: boolean;
    readonly renderMs: number;
    readonly sections: Drawn['sections'];
    readonly charts: readonly PageChart[];
  };
  readonly document: { createElement(tag: 'canvas'): { getContext(kind: '2d'): { fillStyle: string } | null } };
  readonly performance: { now(): number; getEntriesByType(type: 'navigation'): readonly { startTime: number; loadEventEnd: number }[] };
}

let browser: Browser | undefined;
let work: string;

/** Loads `file` in a new page and reads what it drew. */
async function load(file: string): Promise<Loaded> {
  assert.ok(browser, 'the browser started');
  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 900, deviceScaleFactor: 1 });
  const errors: string[] = [];
  const requests: string[] = [];
  const url = pathToFileURL(file).href;
  page.on('console', (message) => {
    if (message.type() === 'error') errors.push(message.text());
  });
  page.on('pageerror', (error) => errors.push(error instanceof Error ? error.message : String(error)));
  page.on('request', (request) => {
    if (request.url() !== url) requests.push(request.url());
  });
  await page.goto(url, { waitUntil: 'load' });
  await page.waitForFunction(() => (globalThis as unknown as PageGlobals).vramReport?.ready === true, { timeout: 20_000 });
  const loadMs = await page.evaluate(() => {
    const [navigation] = (globalThis as unknown as PageGlobals).performance.getEntriesByType('navigation');
    return navigation === undefined ? NaN : navigation.loadEventEnd - navigation.startTime;
  });
  const drawn = await page.evaluate((): Drawn => {
    const { vramReport: report, document } = globalThis as unknown as PageGlobals;
    if (report === undefined) throw new Error('the page set no window.vramReport');
    const charts = report.charts.map((chart) => {
      const canvas = chart.ctx.canvas;
      const pixels = chart.ctx.getImageData(0, 0, canvas.width, canvas.height).data;
      const rgb = (colour: string): [number, number, number] => {
        const probe = document.createElement('canvas').getContext('2d')!;
        probe.fillStyle = colour;
        const hex = probe.fillStyle;
        return [parseInt(hex.slice(1, 3), 16), parseInt(hex.slice(3, 5), 16), parseInt(hex.slice(5, 7), 16)];
      };
      const colours = chart.series.slice(1).map((s) => rgb(String(s.stroke)));
      const seriesPixels = colours.map(() => 0);
      for (let p = 0; p < pixels.length; p += 4) {
        colours.forEach(([r, g, b], i) => {
          if (Math.abs(pixels[p]! - r) + Math.abs(pixels[p + 1]! - g) + Math.abs(pixels[p + 2]! - b) < 24 && pixels[p + 3]! > 200) seriesPixels[i]! += 1;
        });
      }
      return {
        id: chart.root.closest('section')?.id ?? '',
        axisLabels: chart.axes.map((axis) => axis.label ?? ''),
        seriesLabels: chart.series.slice(1).map((s) => s.label ?? ''),
        finitePoints: chart.data.slice(1).map((values) => Array.from(values).filter((v) => v !== null && Number.isFinite(v)).length),
        seriesPixels,
      };
    });
    return { renderMs: report.renderMs, sections: report.sections, charts };
  });
  return { page, drawn, errors, requests, loadMs };
}

/**
 * The checks every report passes: offline, no errors, the sections expected drawn in that order
 * (others may come between them: a bench group added later), every series on its canvas.
 */
function assertDrawn(loaded: Loaded, sectionIds: readonly string[]): void {
  assert.deepEqual(loaded.errors, [], 'no console errors or exceptions');
  assert.deepEqual(loaded.requests, [], 'the file asks for nothing else: it opens offline');
  const drawn = loaded.drawn.sections.map((s) => s.id);
  assert.deepEqual(
    drawn.filter((id) => sectionIds.includes(id)),
    [...sectionIds],
    `sections drawn: ${drawn.join(', ')}`,
  );
  for (const chart of loaded.drawn.charts) {
    assert.equal(chart.axisLabels.length, 2, `${chart.id}: an x and a y axis label`);
    for (const label of chart.axisLabels) assert.notEqual(label.trim(), '', `${chart.id}: axis labels are set`);
    chart.finitePoints.forEach((n, i) => assert.ok(n > 0, `${chart.id}: series '${chart.seriesLabels[i]}' has data`));
    chart.seriesPixels.forEach((n, i) => assert.ok(n > 0, `${chart.id}: series '${chart.seriesLabels[i]}' was drawn`));
  }
}

/**
 * Saves a screenshot for the README: the page from its top to the end of the section `through`,
 * or the section `only` alone, or the whole page.
 */
async function screenshot(page: Page, name: `${string}.png`, part: { through?: string; only?: string } = {}): Promise<void> {
  mkdirSync(images, { recursive: true });
  const path = join(images, name) as `${string}.png`;
  const id = part.through ?? part.only;
  if (id === undefined) {
    await page.screenshot({ path, fullPage: true });
    return;
  }
  const box = await (await page.$(`section#${id}`))?.boundingBox();
  assert.ok(box, `section ${id} is on the page`);
  const clip =
    part.only !== undefined ? { x: 0, y: box.y - 8, width: 1280, height: box.height + 16 } : { x: 0, y: 0, width: 1280, height: box.y + box.height + 8 };
  await page.screenshot({ path, clip, captureBeyondViewport: true });
}

/**
 * An allocation log of `operations` events (half allocations, half frees; even), seeded: sizes
 * from 256 B to 16 MiB (log-uniform), a live set that wanders around 200 blocks, times a few
 * microseconds apart.
 */
function syntheticTrace(operations: number, seed: number): string {
  const random = mulberry32(seed);
  const lines = [ALLOCATION_LOG_HEADER];
  const live: { pointer: number; size: number }[] = [];
  let next = 0x7f0000000000;
  let time = 0;
  let allocations = 0;
  while (allocations < operations / 2 || live.length > 0) {
    time += 1 + Math.floor(random() * 20);
    const allocate = allocations < operations / 2 && (live.length === 0 || random() < (live.length < 200 ? 0.6 : 0.4));
    if (allocate) {
      const size = Math.round(2 ** (8 + random() * 16));
      lines.push(`0,${time},allocate,0x${next.toString(16)},${size},0`);
      live.push({ pointer: next, size });
      next += size + 256;
      allocations += 1;
    } else {
      const [block] = live.splice(Math.floor(random() * live.length), 1);
      lines.push(`0,${time},free,0x${block!.pointer.toString(16)},${block!.size},0`);
    }
  }
  return `${lines.join('\n')}\n`;
}

describe('HTML reports in a browser', needsBrowser, () => {
  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'vram-report-'));
    browser = await puppeteer.launch({
      executablePath: chromium!,
      // --no-sandbox: CI containers run as root, where Chromium's sandbox cannot start.
      args: ['--no-sandbox', '--disable-gpu', '--font-render-hinting=none'],
    });
  });
  after(async () => {
    await browser?.close();
    rmSync(work, { recursive: true, force: true });
  });

  it('vram replay --html: the bert trace through every stack', async () => {
    const file = join(work, 'bert.html');
    const run = await vram('replay', 'test/fixtures/traces/bert_dynamic_infer.csv', '-r', 'all', '--html', file);
    assert.equal(run.code, 0, run.stderr);
    const loaded = await load(file);
    // No map for cuda and async: each of their blocks is a driver allocation, laid out where vram cannot see.
    assertDrawn(loaded, ['results', 'timeline', ...['pool', 'adaptive', 'binning', 'arena'].map((s) => `memory-map-${s}`), 'peak-sizes']);
    const maps = loaded.drawn.sections.filter((s) => s.kind === 'memory-map');
    // The arena places every block it returns inside its own region.
    for (const map of maps.filter((m) => /arena/.test(m.id))) assert.equal(map.points, 207, `${map.id}: every block live at the peak drawn`);
    const [timeline] = loaded.drawn.charts;
    assert.deepEqual(timeline!.seriesLabels, [
      'live (the trace)',
      'cuda reserved',
      'async reserved',
      'pool reserved',
      'adaptive reserved',
      'binning reserved',
      'arena reserved',
    ]);
    assert.deepEqual(timeline!.axisLabels, ['time since the trace began', 'bytes']);
    assert.deepEqual(timeline!.finitePoints, Array<number>(7).fill(16_798));
    await screenshot(loaded.page, 'replay-report.png', { through: 'timeline' });
    await screenshot(loaded.page, 'replay-memory-map.png', { only: 'memory-map-pool' });
  });

  it('vram bench --html: bandwidth per direction and allocation latency', async () => {
    const file = join(work, 'bench.html');
    const run = await vram('bench', '--html', file);
    assert.equal(run.code, 0, run.stderr);
    const loaded = await load(file);
    assertDrawn(loaded, ['bandwidth-h2d', 'bandwidth-d2h', 'bandwidth-d2d', 'allocation-latency', 'other-rows']);
    const byId = new Map(loaded.drawn.charts.map((c) => [c.id, c]));
    assert.ok(byId.get('bandwidth-h2d')!.seriesLabels.includes('pinned H2D'));
    assert.ok(byId.get('bandwidth-d2h')!.seriesLabels.includes('pinned D2H'));
    // On the emulated backend the driver's allocators are its model of them, and the series say so.
    assert.deepEqual(byId.get('allocation-latency')!.seriesLabels, [
      'cuMemAlloc+cuMemFree (model)',
      'cuMemAllocAsync+cuMemFreeAsync (model)',
      'PoolResource',
      'AsyncResource (model)',
      'CudaResource (model)',
      'ArenaResource',
      'BinningResource',
    ]);
    assert.deepEqual(byId.get('allocation-latency')!.axisLabels, ['size', 'time per allocate+free pair']);
    await screenshot(loaded.page, 'bench-report.png');
  });

  it("vram view of the out-of-memory example's snapshot: the site that filled the 64 MiB", async () => {
    const snapshot = join(work, 'oom.json');
    const example = await run(join(root, 'dist/examples/oom-snapshot.js'), [], { VRAM_OOM_SNAPSHOT: snapshot });
    assert.equal(example.code, 0, example.stderr);
    const file = join(work, 'oom.html');
    const view = await vram('view', snapshot, '-o', file);
    assert.equal(view.code, 0, view.stderr);
    const loaded = await load(file);
    assertDrawn(loaded, ['timeline', 'memory-map', 'top-sites', 'resources']);
    const [timeline] = loaded.drawn.charts;
    assert.ok(timeline!.seriesLabels.includes('out of memory (live + the request)'), 'the error is marked');
    const topSite = await loaded.page.$eval('section#top-sites td', (cell) => cell.textContent);
    assert.match(topSite ?? '', /^cacheActivations \(oom-snapshot\.js:\d+:\d+\)$/);
    await screenshot(loaded.page, 'oom-report.png', { through: 'top-sites' });
  });

  it('a 150,000-event timeline: time to first render and to redraw a zoom (reported, not asserted)', async (t: TestContext) => {
    const trace = join(work, 'synthetic-150k.csv');
    writeFileSync(trace, syntheticTrace(150_000, 11));
    const file = join(work, 'synthetic-150k.html');
    const run = await vram('replay', trace, '-r', 'all', '--html', file);
    assert.equal(run.code, 0, run.stderr);
    const loaded = await load(file);
    assertDrawn(loaded, ['results', 'timeline', ...['pool', 'adaptive', 'binning', 'arena'].map((s) => `memory-map-${s}`), 'peak-sizes']);
    assert.deepEqual(loaded.drawn.charts[0]!.finitePoints, Array<number>(7).fill(150_000));
    // Zoom to a tenth of the time axis and back, five times each: the redraws a reader makes.
    // uPlot draws in a microtask after setScale: awaiting one after it has run times the draw.
    const redraw = await loaded.page.evaluate(async () => {
      const { vramReport, performance } = globalThis as unknown as PageGlobals;
      const [chart] = vramReport!.charts;
      const x = chart!.data[0]! as ArrayLike<number>;
      const first = x[0]!;
      const last = x[x.length - 1]!;
      const zoom: number[] = [];
      const full: number[] = [];
      for (let i = 0; i < 5; i++) {
        let start = performance.now();
        chart!.setScale('x', { min: first + (last - first) * 0.45, max: first + (last - first) * 0.55 });
        await Promise.resolve();
        zoom.push(performance.now() - start);
        start = performance.now();
        chart!.setScale('x', { min: first, max: last });
        await Promise.resolve();
        full.push(performance.now() - start);
      }
      const median = (v: number[]): number => v.sort((a, b) => a - b)[v.length >> 1]!;
      return { zoomMs: median(zoom), fullMs: median(full) };
    });
    t.diagnostic(
      `150,000 operations x 6 series: load event ${loaded.loadMs.toFixed(0)} ms after navigation, ` +
        `page script (parse the data, draw every section) ${loaded.drawn.renderMs.toFixed(0)} ms; ` +
        `redraw zoomed to a tenth ${redraw.zoomMs.toFixed(1)} ms, whole range ${redraw.fullMs.toFixed(1)} ms (medians of 5)`,
    );
    await loaded.page.close();
  });
});
