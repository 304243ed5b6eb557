/**
 * Turns a Report into one self-contained HTML file: the data as JSON, uPlot's minified build and
 * stylesheet read from node_modules at generation time, and the page's own script, all inline, so
 * the file opens from disk with no network and can be mailed or attached to an issue.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { clientScript } from './client.js';
import type { PlotSection, Report, ReportSection } from './report.js';

/** The divisors tried for delta encoding: whole numbers, then thousandths, then millionths (times in s from us). */
const DIVISORS = [1, 1e3, 1e6] as const;

/** An array as the page reads it: plain, or whole-number deltas of `value * k`. */
export type EncodedValues = readonly (number | null)[] | { readonly d: readonly (number | null)[]; readonly k: number };

/**
 * Encodes a series for the page. Memory figures over time are whole numbers that change by a block
 * at a time, and times step by microseconds, so their deltas are short: the bert trace's pool
 * timeline (time, live, reserved; 16,798 operations) takes 214 KB as deltas against 495 KB as
 * plain JSON numbers. Values that are not whole multiples of 1/1e6 stay plain (and a -0 reads as 0).
 *
 * @param values The values, null where there is none.
 * @returns The encoding the page's `decode` reverses exactly.
 * @example
 * ```ts
 * encodeValues([1024, 3072, 2048]); // { d: [1024, 2048, -1024], k: 1 }
 * ```
 */
export function encodeValues(values: ArrayLike<number | null>): EncodedValues {
  const plain = Array.from(values);
  for (const k of DIVISORS) {
    const deltas: (number | null)[] = new Array<number | null>(plain.length);
    let previous = 0;
    let exact = true;
    for (let i = 0; i < plain.length && exact; i++) {
      const v = plain[i];
      if (v === null || v === undefined) {
        deltas[i] = null;
        continue;
      }
      const scaled = Math.round(v * k);
      // The page computes sum / k: accept k only where that gives back the very same number, and
      // where every delta (and so every running sum) is a whole number doubles hold exactly.
      deltas[i] = scaled - previous;
      exact = Number.isSafeInteger(scaled) && Number.isSafeInteger(deltas[i]) && scaled / k === v;
      previous = scaled;
    }
    if (exact) return { d: deltas, k };
  }
  return plain.map((v) => (v === undefined ? null : v));
}

/** A section as embedded in the page: plot arrays encoded, the rest as it is. */
function embedSection(section: ReportSection): unknown {
  if (section.kind !== 'plot') return section;
  const plot: PlotSection = section;
  return {
    ...plot,
    xValues: encodeValues(plot.xValues),
    series: plot.series.map((s) => ({ ...s, values: encodeValues(s.values) })),
  };
}

/** Escapes text for HTML element content and attribute values. */
function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** uPlot's build and stylesheet, read once per process. */
let uplot: { script: string; style: string } | undefined;

function uplotSources(): { script: string; style: string } {
  if (uplot === undefined) {
    // The package has no "exports" map, so its dist files resolve by path (a dependency of vram).
    const require = createRequire(import.meta.url);
    uplot = {
      script: readFileSync(require.resolve('uplot/dist/uPlot.iife.min.js'), 'utf8'),
      style: readFileSync(require.resolve('uplot/dist/uPlot.min.css'), 'utf8'),
    };
  }
  return uplot;
}

const STYLE = `
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #222; margin: 24px auto; max-width: 1240px; padding: 0 16px; }
h1 { font-size: 22px; margin: 0 0 8px; }
h2 { font-size: 17px; margin: 28px 0 4px; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 2px 12px; margin: 0; color: #444; }
dl.facts dt { font-weight: 600; }
dl.facts dd { margin: 0; }
p.description { color: #555; margin: 0 0 8px; max-width: 960px; white-space: pre-line; }
section .body { position: relative; }
table { border-collapse: collapse; }
th, td { padding: 3px 10px; border-bottom: 1px solid #ddd; text-align: left; vertical-align: top; }
td { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12.5px; white-space: pre-wrap; }
.num { text-align: right; }
canvas.map { display: block; cursor: crosshair; }
ul.sites { list-style: none; padding: 0; margin: 8px 0; columns: 2; font-size: 12.5px; }
ul.sites li { break-inside: avoid; margin: 2px 0; }
.swatch { display: inline-block; width: 12px; height: 12px; margin-right: 6px; vertical-align: -1px; }
p.scale { color: #666; font-size: 12.5px; margin: 0; }
.tip { position: absolute; background: #fff; border: 1px solid #999; padding: 4px 8px; font: 12px ui-monospace, monospace; white-space: pre; pointer-events: none; box-shadow: 0 2px 6px rgba(0,0,0,.15); z-index: 2; }
`;

/**
 * Renders a report as one HTML document that needs nothing else: open it from disk, offline.
 *
 * @param report What to show.
 * @returns The whole HTML text.
 * @throws {Error} When uPlot's files cannot be read (the `uplot` package is not installed).
 * @example
 * ```ts
 * writeFileSync('report.html', renderReport({ title: 'memory', facts: [], sections: [] }));
 * ```
 */
export function renderReport(report: Report): string {
  const { script, style } = uplotSources();
  // '<' escaped in the JSON so no string in it can close the script element.
  const data = JSON.stringify({ ...report, sections: report.sections.map(embedSection) }).replace(/</g, '\\u003c');
  const facts = report.facts.map(([label, value]) => `<dt>${escapeHtml(label)}</dt><dd>${escapeHtml(value)}</dd>`).join('');
  return [
    '<!doctype html>',
    '<html lang="en"><head><meta charset="utf-8">',
    '<meta name="viewport" content="width=device-width, initial-scale=1">',
    `<title>${escapeHtml(report.title)}</title>`,
    `<style>${style}${STYLE}</style>`,
    '</head><body>',
    `<header><h1>${escapeHtml(report.title)}</h1><dl class="facts">${facts}</dl></header>`,
    '<main id="report"></main>',
    `<script type="application/json" id="report-data">${data}</script>`,
    `<script>${script}</script>`,
    `<script>${clientScript()}</script>`,
    '</body></html>',
    '',
  ].join('\n');
}
