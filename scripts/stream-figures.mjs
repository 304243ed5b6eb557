#!/usr/bin/env node
// The figures issue 34 targets, from `vram replay --repeat N --json` (read on stdin) and the traces
// themselves: per trace and stack, stream joins (event waits) per operation in passes 2-N beside the
// trace's cross-stream frees per operation (frees on another stream than their allocation's),
// driver calls in passes 2-N, and peak reserved over peak live (all passes).
//
//   node bin/vram.js replay test/fixtures/traces/*.csv -r adaptive --repeat 4 --json | node scripts/stream-figures.mjs
import { readFileSync } from 'node:fs';

function crossFrees(path) {
  const lines = readFileSync(path, 'utf8').split('\n').slice(1);
  const streamOf = new Map();
  let cross = 0;
  for (const line of lines) {
    const f = line.trim().split(',');
    if (f.length < 6) continue;
    if (f[2] === 'allocate') streamOf.set(f[3], f[5]);
    else if (f[2] === 'free') {
      if (streamOf.has(f[3]) && streamOf.get(f[3]) !== f[5]) cross++;
      streamOf.delete(f[3]);
    }
  }
  return cross;
}

const input = JSON.parse(readFileSync(0, 'utf8'));
const runs = Array.isArray(input) ? input : [input];
const rows = [['trace', 'stack', 'cross frees/op', 'joins/op 2-N', 'records/op 2-N', 'driver calls 2-N', 'reserved/live', 'us/op 2-N']];
for (const run of runs) {
  const ops = run.trace.operations;
  const cross = crossFrees(run.trace.source) / ops;
  for (const r of run.results) {
    const name = run.trace.source.replace(/^.*\//, '');
    if (!r.ok) {
      rows.push([name, r.stack, cross.toFixed(3), 'failed', '', '', '', r.error.slice(0, 60)]);
      continue;
    }
    const later = r.result.passes.slice(1);
    const sum = (f) => later.reduce((t, p) => t + f(p), 0);
    const g = (p) => p.growth;
    const waits = sum((p) => g(p)?.streamJoins?.waits ?? NaN) / later.length / ops;
    const records = sum((p) => g(p)?.streamJoins?.records ?? NaN) / later.length / ops;
    const calls = sum((p) => {
      const c = g(p)?.driverCalls;
      return c ? c.create + c.map + c.unmap + c.setAccess + c.release : NaN;
    });
    const us = sum((p) => p.nsPerOperation) / later.length / 1e3;
    rows.push([
      name,
      r.stack,
      cross.toFixed(3),
      waits.toFixed(3),
      records.toFixed(3),
      String(calls),
      `${r.result.overheadPercent >= 0 ? '+' : ''}${r.result.overheadPercent.toFixed(1)}%`,
      us.toFixed(2),
    ]);
  }
}
const width = rows[0].map((_, c) => Math.max(...rows.map((r) => String(r[c]).length)));
for (const r of rows)
  process.stdout.write(
    r
      .map((v, c) => String(v).padEnd(width[c]))
      .join('  ')
      .trimEnd() + '\n',
  );
