/**
 * Model: how many page moves a trace needs under a capacity, whatever the allocator's donor rule,
 * for a given placement. It asks whether a pool over virtual memory (`PoolResource`, `adaptive`)
 * could run a trace within a few times its speed with room when the device holds only peak live
 * plus a few percent: each page that a live block needs while its memory serves another live block
 * costs an unmap, a map and an access grant on the driver (about 58 us a page measured on an H100:
 * bench/results/h100-2026-11-26-adaptive-limits.md), so the number of such moves bounds the time.
 *
 * `node dist/bench/pressure-bound.js TRACE [--headroom 3] [--passes 4] [--placement best|first|slots]
 * [--slot-pages 8] [--donor future|lru] [--page 2M]`
 *
 * The model separates the two choices a pool makes:
 * - Placement (addresses): `best` is best fit in one range (lowest address among equals, free
 *   blocks merged), `first` lowest-address first fit, `slots` gives each block of `--slot-pages`
 *   pages or more pages of its own in a range per page count (a freed slot is the next one taken
 *   for that count) and best-fits the others elsewhere. Blocks are rounded to 256 bytes, as the
 *   pool rounds them. Placement does not depend on physical memory here, so it is computed first
 *   and the same for every donor rule.
 * - Physical pages: a page's memory stays mapped where it was when that page goes idle (as the
 *   pool keeps old mappings), so a page needed again finds it there unless a live block now uses
 *   it elsewhere. Memory is created while fewer than the capacity's pages exist; past that, a page
 *   that needs memory takes an idle page's: a move. `--donor future` takes the idle memory whose
 *   next use (at any address it is mapped at) lies farthest ahead, reading the rest of the trace.
 *   No allocator can know that: its count is a reference for what donor choice could save with a
 *   placement (farthest next use is the optimal rule when memory is mapped at one address; with
 *   old mappings at several it is a good rule, not a proven floor). `lru` takes the memory idle
 *   longest.
 *
 * It prints, per pass, the moves and creations, and for the placement the pages touched at once at
 * most and the address pages ever touched (the pages the placement would need with no moves).
 */
import { parseArgs } from 'node:util';
import { readAllocationLog } from '../src/replay/parse.js';
import { parseSize } from '../src/util/size.js';

const { values, positionals } = parseArgs({
  options: {
    headroom: { type: 'string', default: '3' },
    passes: { type: 'string', default: '4' },
    placement: { type: 'string', default: 'best' },
    'slot-pages': { type: 'string', default: '8' },
    donor: { type: 'string', default: 'future' },
    page: { type: 'string', default: '2M' },
  },
  allowPositionals: true,
});
if (positionals.length !== 1)
  throw new RangeError(
    'usage: pressure-bound TRACE [--headroom 3] [--passes 4] [--placement best|first|slots] [--slot-pages 8] [--donor future|lru] [--page 2M]',
  );
const headroom = Number(values.headroom);
const passes = Number(values.passes);
const slotPages = Number(values['slot-pages']);
const placement = values.placement;
const donor = values.donor;
const P = parseSize(values.page, '--page');
if (!(headroom >= 0)) throw new RangeError(`--headroom must be a percentage >= 0, got ${values.headroom}`);
if (!Number.isInteger(passes) || passes < 1) throw new RangeError(`--passes must be a whole number >= 1, got ${values.passes}`);
if (!Number.isInteger(slotPages) || slotPages < 1) throw new RangeError(`--slot-pages must be a whole number >= 1, got ${values['slot-pages']}`);
if (placement !== 'best' && placement !== 'first' && placement !== 'slots') throw new RangeError(`--placement must be best, first or slots, got ${placement}`);
if (donor !== 'future' && donor !== 'lru') throw new RangeError(`--donor must be future or lru, got ${donor}`);

const trace = readAllocationLog(positionals[0]!);
const GRANULE = 256;
const capacityPages = Math.floor((trace.summary.peakLiveBytes * (1 + headroom / 100)) / P);

/** Free address ranges, sorted by start, merged: best or first fit. */
class Range {
  private starts: number[] = [];
  private lengths: number[] = [];
  constructor(
    base: number,
    bytes: number,
    private readonly first: boolean,
  ) {
    this.starts.push(base);
    this.lengths.push(bytes);
  }

  take(n: number): number {
    let k = -1;
    for (let j = 0; j < this.starts.length; j++) {
      const len = this.lengths[j]!;
      if (len < n) continue;
      if (this.first) {
        k = j;
        break;
      }
      if (k < 0 || len < this.lengths[k]!) k = j;
    }
    const start = this.starts[k]!;
    if (this.lengths[k] === n) {
      this.starts.splice(k, 1);
      this.lengths.splice(k, 1);
    } else {
      this.starts[k] = start + n;
      this.lengths[k]! -= n;
    }
    return start;
  }

  give(start: number, n: number): void {
    let k = 0;
    while (k < this.starts.length && this.starts[k]! < start) k++;
    this.starts.splice(k, 0, start);
    this.lengths.splice(k, 0, n);
    if (k + 1 < this.starts.length && start + n === this.starts[k + 1]) {
      this.lengths[k]! += this.lengths[k + 1]!;
      this.starts.splice(k + 1, 1);
      this.lengths.splice(k + 1, 1);
    }
    if (k > 0 && this.starts[k - 1]! + this.lengths[k - 1]! === start) {
      this.lengths[k - 1]! += this.lengths[k]!;
      this.starts.splice(k, 1);
      this.lengths.splice(k, 1);
    }
  }
}

// 1. Placement: the page events (+page when a page gets its first live block, -page when it loses its last).
const ENTER = 1;
const pageEvents: number[] = []; // [time, +1/-1, page] triples
const passStart: number[] = [];
const main = new Range(0, 2 ** 46, placement === 'first');
const slotBase = 2 ** 47;
const freeSlots = new Map<number, number[]>();
let nextSlot = slotBase;
const liveCount = new Map<number, number>();
let touchedNow = 0;
let mostTouched = 0;
const everTouched = new Set<number>();
let time = 0;
const place = (bytes: number): [number, number] => {
  const pages = Math.ceil(bytes / P);
  if (placement === 'slots' && bytes >= slotPages * P) {
    const list = freeSlots.get(pages);
    if (list !== undefined && list.length > 0) return [list.pop()!, pages * P];
    const start = nextSlot;
    nextSlot += (pages + 1) * P; // a page apart: slots share no page
    return [start, pages * P];
  }
  const n = Math.ceil(bytes / GRANULE) * GRANULE;
  return [main.take(n), n];
};
const unplace = (start: number, n: number): void => {
  if (start >= slotBase) {
    const pages = n / P;
    let list = freeSlots.get(pages);
    if (list === undefined) freeSlots.set(pages, (list = []));
    list.push(start);
  } else {
    main.give(start, n);
  }
};
const touch = (start: number, n: number, d: number): void => {
  for (let v = Math.floor(start / P); v <= Math.floor((start + n - 1) / P); v++) {
    const c = (liveCount.get(v) ?? 0) + d;
    liveCount.set(v, c);
    if (d > 0 && c === 1) {
      pageEvents.push(time, ENTER, v);
      everTouched.add(v);
      if (++touchedNow > mostTouched) mostTouched = touchedNow;
    } else if (d < 0 && c === 0) {
      pageEvents.push(time, -ENTER, v);
      touchedNow--;
    }
  }
};
for (let pass = 0; pass < passes; pass++) {
  passStart.push(pageEvents.length);
  const where = new Map<number, [number, number]>();
  for (const e of trace.events) {
    time++;
    if (e.action === 'allocate') {
      const at = place(e.size);
      where.set(e.slot, at);
      touch(at[0], at[1], 1);
    } else if (e.action === 'free') {
      const at = where.get(e.slot)!;
      where.delete(e.slot);
      touch(at[0], at[1], -1);
      unplace(at[0], at[1]);
    }
  }
  time++;
  for (const [start, n] of where.values()) {
    touch(start, n, -1);
    unplace(start, n);
  }
}
passStart.push(pageEvents.length);

// 2. Physical pages: where each address page's memory is, and which memory is busy or idle.
const enters = new Map<number, number[]>(); // page -> its enter times, ascending
for (let k = 0; k < pageEvents.length; k += 3) {
  if (pageEvents[k + 1] !== ENTER) continue;
  const v = pageEvents[k + 2]!;
  let list = enters.get(v);
  if (list === undefined) enters.set(v, (list = []));
  list.push(pageEvents[k]!);
}
const nextEnter = (v: number, now: number): number => {
  const list = enters.get(v)!;
  let lo = 0,
    hi = list.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (list[mid]! <= now) lo = mid + 1;
    else hi = mid;
  }
  return lo < list.length ? list[lo]! : Infinity;
};
const memoryAt = new Map<number, number>(); // address page -> memory mapped there (old mappings stay)
const homes: Set<number>[] = []; // memory -> address pages it is mapped at
const busyAt = new Map<number, number>(); // memory -> address page where a live block uses it
const idleSince = new Map<number, number>(); // idle memory -> when (insertion order: oldest first)
let created = 0;
let failed: string | null = null;
const rows: { pass: number; moves: number; created: number }[] = [];
for (let pass = 0; pass < passes && failed === null; pass++) {
  let moves = 0;
  let made = 0;
  for (let k = passStart[pass]!; k < passStart[pass + 1]!; k += 3) {
    const now = pageEvents[k]!;
    const v = pageEvents[k + 2]!;
    if (pageEvents[k + 1] !== ENTER) {
      const m = memoryAt.get(v)!;
      busyAt.delete(m);
      idleSince.set(m, now);
      continue;
    }
    let m = memoryAt.get(v);
    if (m !== undefined && !busyAt.has(m)) {
      idleSince.delete(m);
      busyAt.set(m, v);
      continue;
    }
    if (created < capacityPages) {
      m = created++;
      homes.push(new Set());
      made++;
    } else if (idleSince.size === 0) {
      failed = `pass ${pass + 1}, operation ${now - pass * (trace.events.length + 1)}: every page of the capacity is under a live block`;
      break;
    } else {
      m = donor === 'lru' ? idleSince.keys().next().value! : farthest(now);
      idleSince.delete(m);
      moves++;
    }
    const old = memoryAt.get(v);
    if (old !== undefined) homes[old]!.delete(v);
    memoryAt.set(v, m);
    homes[m]!.add(v);
    busyAt.set(m, v);
  }
  rows.push({ pass: pass + 1, moves, created: made });
}

/** The idle memory whose next use, at any address it is mapped at, lies farthest ahead. */
function farthest(now: number): number {
  let best = -1;
  let bestAt = -1;
  for (const m of idleSince.keys()) {
    let at = Infinity;
    for (const h of homes[m]!) at = Math.min(at, nextEnter(h, now));
    if (at > bestAt) {
      best = m;
      bestAt = at;
    }
    if (at === Infinity) break;
  }
  return best;
}

console.log(
  `${positionals[0]}: peak live ${(trace.summary.peakLiveBytes / P).toFixed(1)} pages of ${P} bytes; ` +
    `capacity ${capacityPages} pages (${headroom}% headroom)`,
);
console.log(
  `placement ${placement}${placement === 'slots' ? ` (blocks of ${slotPages} pages or more)` : ''}: ` +
    `at most ${mostTouched} pages touched at once, ${everTouched.size} address pages touched in all; donor ${donor}`,
);
console.table(rows);
if (failed !== null) console.log(`does not fit: ${failed}`);
