/**
 * The script a report page runs in the browser: reads the report's JSON from the page, draws each
 * plot with uPlot (inlined beside it), the memory map on a canvas and the tables, then records
 * what it drew in `window.vramReport` for tools and the browser test: `sections` ([{ id, kind,
 * series, points }]), `charts` (the uPlot instances), and, once every plot has drawn, `ready` and
 * `renderMs` (from the script's start: parsing the data, building and drawing every section). Plain ES2020 with no imports: it must run from a file with no network.
 *
 * It is text, not a module of this package, because it runs in a page rather than in Node; the
 * browser test (test/report/report-browser.test.ts) is what checks it. `formatBytes` is spliced in from
 * src/util/size.ts so the page writes sizes exactly as the library's messages do.
 */
import { formatBytes } from '../util/size.js';

/** Distinct colours for series and the largest sites (Tableau 10: tells ten lines apart in print too). */
const PALETTE = ['#4e79a7', '#f28e2b', '#e15759', '#76b7b2', '#59a14f', '#edc948', '#b07aa1', '#ff9da7', '#9c755f', '#bab0ac'] as const;

const SCRIPT = String.raw`
'use strict';
(function () {
  var started = performance.now();
  var formatBytes = FORMAT_BYTES;
  var PALETTE = PALETTE_JSON;
  var report = JSON.parse(document.getElementById('report-data').textContent);
  var drawn = [];
  // Plots not drawn yet, and whether every section has been built; renderMs is set when both are done.
  var pending = 0, built = false;
  function finish() {
    if (pending > 0 || !built) return;
    window.vramReport.renderMs = performance.now() - started;
    window.vramReport.ready = true;
  }

  // Arrays come delta-encoded where every value is a whole multiple of 1/k (see encodeValues).
  function decode(encoded) {
    if (Array.isArray(encoded)) return encoded;
    var deltas = encoded.d, k = encoded.k, hasNull = deltas.indexOf(null) >= 0;
    var out = hasNull ? new Array(deltas.length) : new Float64Array(deltas.length);
    var sum = 0;
    for (var i = 0; i < deltas.length; i++) {
      var d = deltas[i];
      if (d === null) { out[i] = null; continue; }
      sum += d;
      out[i] = sum / k;
    }
    return out;
  }

  function formatSeconds(s) {
    if (s === 0) return '0 s';
    var a = Math.abs(s);
    if (a >= 1) return +s.toPrecision(4) + ' s';
    if (a >= 1e-3) return +(s * 1e3).toPrecision(4) + ' ms';
    return +(s * 1e6).toPrecision(4) + ' us';
  }

  function formatNs(ns) {
    var a = Math.abs(ns);
    if (a >= 1e6) return +(ns / 1e6).toPrecision(4) + ' ms';
    if (a >= 1e3) return +(ns / 1e3).toPrecision(4) + ' us';
    return +ns.toPrecision(4) + ' ns';
  }

  function format(unit, v) {
    if (v === null || v === undefined || !isFinite(v)) return '-';
    switch (unit) {
      case 'bytes': return formatBytes(Math.round(v));
      case 'seconds': return formatSeconds(v);
      case 'GB/s': return +v.toPrecision(3) + ' GB/s';
      case 'ns': return formatNs(v);
      default: return String(+v.toPrecision(6));
    }
  }

  function el(tag, className, text) {
    var e = document.createElement(tag);
    if (className) e.className = className;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // Byte axes step in powers of two (256 MiB, 512 MiB), as sizes are chosen; others as uPlot picks.
  var POWERS_OF_TWO = [];
  for (var p = 0; p <= 52; p++) POWERS_OF_TWO.push(Math.pow(2, p));

  function axis(spec, size) {
    var a = {
      label: spec.label,
      // uPlot passes null for a log axis' unlabelled ticks.
      values: function (u, splits) { return splits.map(function (v) { return v === null ? '' : format(spec.unit, v); }); },
    };
    if (spec.unit === 'bytes' && !spec.log) a.incrs = POWERS_OF_TWO;
    if (size) a.size = size;
    return a;
  }

  function scaleOf(axis) {
    if (!axis.log) return { time: false };
    return { time: false, distr: 3, log: axis.unit === 'bytes' ? 2 : 10 };
  }

  // Step lines for memory over time. With more points than pixel columns, uPlot's linear path
  // (which keeps each column's min and max) draws the same envelope far faster than a step per
  // event: a 150,000-operation replay with six series redraws its whole range in 21 ms against
  // 260 ms with steps throughout (Chromium 150, median of 7). Zoomed in, where steps can be told
  // apart, the stepped path draws them.
  var stepped = uPlot.paths.stepped({ align: 1 });
  var linear = uPlot.paths.linear();
  function steps(u, seriesIdx, idx0, idx1) {
    return (idx1 - idx0 > u.bbox.width ? linear : stepped)(u, seriesIdx, idx0, idx1);
  }

  function chartWidth(container) {
    return Math.max(480, Math.min(container.clientWidth || 960, 1200));
  }

  function plot(section, container) {
    var x = decode(section.xValues);
    var ys = section.series.map(function (s) { return decode(s.values); });
    var xUnit = section.x.unit, yUnit = section.y.unit;
    var series = [{ label: section.x.label, value: function (u, v) { return format(xUnit, v); } }];
    section.series.forEach(function (s, i) {
      var colour = seriesColour(i);
      series.push({
        label: s.label,
        stroke: colour,
        width: 1.5,
        dash: s.dashed ? [6, 4] : undefined,
        paths: s.markers ? function () { return null; } : section.style === 'steps' ? steps : undefined,
        points: s.markers ? { show: true, size: 10, fill: colour } : { show: section.style === 'points', size: 6 },
        spanGaps: section.style === 'points',
        value: function (u, v) { return format(yUnit, v); },
      });
    });
    var opts = {
      width: chartWidth(container),
      height: 380,
      scales: { x: scaleOf(section.x), y: scaleOf(section.y) },
      cursor: { drag: { x: true, y: false } },
      axes: [axis(section.x), axis(section.y, 90)],
      series: series,
      // uPlot draws in a microtask after the constructor: the first draw is when the plot is done.
      hooks: { draw: [function () { if (!chartDrawn) { chartDrawn = true; pending -= 1; finish(); } }] },
    };
    var chartDrawn = false;
    pending += 1;
    var chart = new uPlot(opts, [x].concat(ys), container);
    window.addEventListener('resize', function () { chart.setSize({ width: chartWidth(container), height: 380 }); });
    drawn.push({ id: section.id, kind: 'plot', series: ys.length, points: x.length, chart: chart });
  }

  // Series and sites past the palette get hues spaced by the golden angle: neighbours stay distinguishable.
  function seriesColour(i) {
    if (i < PALETTE.length) return PALETTE[i];
    return 'hsl(' + Math.round((i * 137.508) % 360) + ', 55%, 55%)';
  }

  function hex(n) { return '0x' + n.toString(16); }

  function memoryMap(section, container) {
    var segments = section.segments, blocks = section.blocks, sites = section.sites;
    var total = 0;
    var starts = [];
    segments.forEach(function (s) { starts.push(total); total += s.bytes; });
    var width = chartWidth(container);
    var rowHeight = 10, gap = 2;
    // Rows of equal byte width, a power of two: a pixel holds at least 4 KiB (a small map stays on
    // a few rows), and there are at most 32 rows (a map stays shorter than a screen).
    var rowBytes = Math.pow(2, Math.ceil(Math.log2(Math.max(width * 4096, total / 32, 1))));
    var rows = Math.max(1, Math.ceil(total / rowBytes));
    var canvas = el('canvas', 'map');
    var ratio = window.devicePixelRatio || 1;
    var height = rows * (rowHeight + gap);
    canvas.width = width * ratio; canvas.height = height * ratio;
    canvas.style.width = width + 'px'; canvas.style.height = height + 'px';
    container.appendChild(canvas);
    var ctx = canvas.getContext('2d');
    ctx.scale(ratio, ratio);

    // Draws bytes [from, from + bytes) of the laid-out space, wrapping across rows.
    function span(from, bytes, colour) {
      var at = from, end = from + bytes;
      while (at < end) {
        var row = Math.floor(at / rowBytes);
        var rowEnd = Math.min(end, (row + 1) * rowBytes);
        var x0 = (at - row * rowBytes) / rowBytes * width;
        var x1 = (rowEnd - row * rowBytes) / rowBytes * width;
        ctx.fillStyle = colour;
        ctx.fillRect(x0, row * (rowHeight + gap), Math.max(1, x1 - x0), rowHeight);
        at = rowEnd;
      }
    }

    // Free space first (every segment), then live blocks over it, then segment starts.
    segments.forEach(function (s, i) { span(starts[i], s.bytes, '#e8e8e8'); });
    var seg = 0;
    var blockStarts = new Float64Array(blocks.length);
    blocks.forEach(function (b, i) {
      while (seg < segments.length - 1 && b.address >= segments[seg].address + segments[seg].bytes) seg++;
      blockStarts[i] = starts[seg] + (b.address - segments[seg].address);
      span(blockStarts[i], b.bytes, seriesColour(b.site));
    });
    // A pale line where each block starts, so neighbours from one site read as separate blocks.
    blocks.forEach(function (b, i) {
      if (b.bytes / rowBytes * width < 4) return;
      var row = Math.floor(blockStarts[i] / rowBytes);
      ctx.fillStyle = 'rgba(255, 255, 255, 0.8)';
      ctx.fillRect((blockStarts[i] - row * rowBytes) / rowBytes * width, row * (rowHeight + gap), 1, rowHeight);
    });
    ctx.fillStyle = '#333';
    starts.forEach(function (start) {
      var row = Math.floor(start / rowBytes);
      ctx.fillRect((start - row * rowBytes) / rowBytes * width, row * (rowHeight + gap), 1, rowHeight);
    });

    var tip = el('div', 'tip');
    tip.hidden = true;
    container.appendChild(tip);
    function lastAtOrBefore(list, value) {
      var lo = 0, hi = list.length - 1, found = -1;
      while (lo <= hi) {
        var mid = (lo + hi) >> 1;
        if (list[mid] <= value) { found = mid; lo = mid + 1; } else hi = mid - 1;
      }
      return found;
    }
    canvas.addEventListener('mousemove', function (event) {
      var r = canvas.getBoundingClientRect();
      var row = Math.floor((event.clientY - r.top) / (rowHeight + gap));
      var offset = row * rowBytes + (event.clientX - r.left) / width * rowBytes;
      var s = lastAtOrBefore(starts, offset);
      if (s < 0 || offset >= total) { tip.hidden = true; return; }
      var segment = segments[s];
      var address = segment.address + (offset - starts[s]);
      var b = lastAtOrBefore(blockStarts, offset);
      var text;
      if (b >= 0 && offset < blockStarts[b] + blocks[b].bytes) {
        var block = blocks[b], site = sites[block.site];
        text = formatBytes(block.bytes) + ' at ' + hex(block.address) + '\n' + site.label + (site.detail ? '\n' + site.detail : '');
      } else {
        text = 'free, in ' + segment.label + ' (' + formatBytes(segment.bytes) + ' at ' + hex(segment.address) + ')\naddress ' + hex(Math.floor(address));
      }
      tip.textContent = text;
      tip.hidden = false;
      tip.style.left = (event.clientX - r.left + 12) + 'px';
      tip.style.top = (event.clientY - r.top + 12) + 'px';
    });
    canvas.addEventListener('mouseleave', function () { tip.hidden = true; });

    var legend = el('ul', 'sites');
    sites.slice(0, 12).forEach(function (site, i) {
      var item = el('li');
      var swatch = el('span', 'swatch');
      swatch.style.background = seriesColour(i);
      item.appendChild(swatch);
      item.appendChild(document.createTextNode(site.label));
      legend.appendChild(item);
    });
    if (sites.length > 12) legend.appendChild(el('li', undefined, (sites.length - 12) + ' more sites (hover the map)'));
    var free = el('li');
    var freeSwatch = el('span', 'swatch');
    freeSwatch.style.background = '#e8e8e8';
    free.appendChild(freeSwatch);
    free.appendChild(document.createTextNode('free (held, not live)'));
    legend.appendChild(free);
    container.appendChild(legend);
    var summary = formatBytes(total) + ' in ' + segments.length + ' segment(s), ' +
      blocks.length + ' live block(s); one row is ' + formatBytes(rowBytes) + '; a dark tick starts a segment';
    canvas.setAttribute('role', 'img');
    canvas.setAttribute('aria-label', 'memory map: ' + summary);
    container.appendChild(el('p', 'scale', summary));
    drawn.push({ id: section.id, kind: 'memory-map', series: sites.length, points: blocks.length });
  }

  function table(section, container) {
    var t = el('table');
    var head = el('tr');
    section.columns.forEach(function (c) { head.appendChild(el('th', c.numeric ? 'num' : undefined, c.label)); });
    t.appendChild(head);
    section.rows.forEach(function (row) {
      var tr = el('tr');
      row.forEach(function (cell, i) { tr.appendChild(el('td', section.columns[i] && section.columns[i].numeric ? 'num' : undefined, cell)); });
      t.appendChild(tr);
    });
    container.appendChild(t);
    drawn.push({ id: section.id, kind: 'table', series: section.columns.length, points: section.rows.length });
  }

  var main = document.getElementById('report');
  report.sections.forEach(function (section) {
    var s = el('section');
    s.id = section.id;
    s.appendChild(el('h2', undefined, section.title));
    s.appendChild(el('p', 'description', section.description));
    var body = el('div', 'body');
    s.appendChild(body);
    main.appendChild(s);
    if (section.kind === 'plot') plot(section, body);
    else if (section.kind === 'memory-map') memoryMap(section, body);
    else table(section, body);
  });
  window.vramReport = {
    renderMs: null,
    ready: false,
    sections: drawn.map(function (d) { return { id: d.id, kind: d.kind, series: d.series, points: d.points }; }),
    charts: drawn.filter(function (d) { return d.chart; }).map(function (d) { return d.chart; }),
  };
  built = true;
  finish();
})();
`;

/**
 * The page's script, with `formatBytes` and the palette spliced in.
 *
 * @returns JavaScript source for a classic `<script>` element (after uPlot's).
 * @example
 * ```ts
 * const html = `<script>${uplot}</script><script>${clientScript()}</script>`;
 * ```
 */
export function clientScript(): string {
  // Replacer functions: a replacement string would read the '$' in formatBytes' template literals.
  return SCRIPT.replace('FORMAT_BYTES', () => formatBytes.toString()).replace('PALETTE_JSON', () => JSON.stringify(PALETTE));
}
