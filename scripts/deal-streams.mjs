#!/usr/bin/env node
// Deals a single-stream allocation trace (RMM's log format) round-robin over several streams:
// the k-th allocation goes to stream 1 + (k mod N); its free goes to the same stream ("same") or to
// the next one ("cross"). Every other field is kept as it is. Regenerates the 4-stream fixtures:
//
//   node scripts/deal-streams.mjs test/fixtures/traces/resnet50_train.csv 4 same  > test/fixtures/traces/resnet50_train_4s_same.csv
//   node scripts/deal-streams.mjs test/fixtures/traces/resnet50_train.csv 4 cross > test/fixtures/traces/resnet50_train_4s_cross.csv
//   (and the same for bert_dynamic_infer.csv)
import { readFileSync } from 'node:fs';

const [path, count, mode] = process.argv.slice(2);
const streams = Number(count);
if (path === undefined || !Number.isInteger(streams) || streams < 2 || (mode !== 'same' && mode !== 'cross')) {
  process.stderr.write('usage: deal-streams.mjs <trace.csv> <streams >= 2> same|cross\n');
  process.exit(2);
}
const lines = readFileSync(path, 'utf8').split('\n');
const header = lines[0].replace(/^\ufeff/, '').trim();
const columns = header.split(',');
const action = columns.indexOf('Action');
const pointer = columns.indexOf('Pointer');
const stream = columns.indexOf('Stream');
if (action < 0 || pointer < 0 || stream < 0) throw new Error(`${path}: expected RMM's header, got '${header}'`);
const out = [header];
const streamOf = new Map(); // live pointer -> the stream it was dealt to
let dealt = 0;
for (const line of lines.slice(1)) {
  if (line.trim() === '') continue;
  const f = line.split(',');
  const kind = f[action];
  if (kind === 'allocate') {
    const s = 1 + (dealt++ % streams);
    streamOf.set(f[pointer], s);
    f[stream] = String(s);
  } else if (kind === 'free') {
    const s = streamOf.get(f[pointer]);
    if (s !== undefined) {
      streamOf.delete(f[pointer]);
      f[stream] = String(mode === 'same' ? s : 1 + (s % streams));
    }
  }
  out.push(f.join(','));
}
process.stdout.write(out.join('\n') + '\n');
