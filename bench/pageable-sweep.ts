/**
 * The sweep that chose the transfer layer's defaults (copy threads, chunk size, depth): staged
 * pageable copies of one size both ways for each setting, beside the ceilings measured in the
 * same run (the copy threads alone between JavaScript and pinned memory; pinned DMA timed with
 * events). Prints one JSON line per setting and a summary of the best.
 *
 * usage: node dist/bench/pageable-sweep.js [MiB=256] [threads=2,4,8] [chunkMiB=4,8,16] [depth=2,3,4]
 */
import { EventFlags, StreamFlags } from '../src/backend/backend.js';
import { nativeAddress } from '../src/cuda/host-memcpy.js';
import { Device } from '../src/device.js';
import { DeviceBuffer } from '../src/buffer/device-buffer.js';
import { CopyThreads } from '../src/buffer/transfer/copy-threads.js';
import { configureTransfers, releaseTransferCaches } from '../src/buffer/transfer/transfers.js';

const MiB = 1 << 20;
const list = (arg: string | undefined, fallback: number[]): number[] => (arg === undefined ? fallback : arg.split(',').map(Number));
const bytes = Number(process.argv[2] ?? 256) * MiB;
const threadCounts = list(process.argv[3], [2, 4, 8]);
const chunks = list(process.argv[4], [4, 8, 16]).map((m) => m * MiB);
const depths = list(process.argv[5], [2, 3, 4]);
const REPEATS = 5;

const device = Device.get(0).makeCurrent();
const backend = device.backend;

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[s.length >> 1]!;
}

function gbps(copy: () => void): number {
  copy();
  const samples: number[] = [];
  for (let i = 0; i < REPEATS; i++) {
    const t = process.hrtime.bigint();
    copy();
    samples.push(bytes / (Number(process.hrtime.bigint() - t) / 1e9) / 1e9);
  }
  return median(samples);
}

async function gbpsAsync(copy: () => Promise<unknown>): Promise<number> {
  await copy();
  const samples: number[] = [];
  for (let i = 0; i < REPEATS; i++) {
    const t = process.hrtime.bigint();
    await copy();
    samples.push(bytes / (Number(process.hrtime.bigint() - t) / 1e9) / 1e9);
  }
  return median(samples);
}

const host = new Uint8Array(bytes).fill(3);
const pinned = backend.memHostAlloc(bytes, 0);
const pinnedView = new Uint8Array(backend.hostView(pinned, bytes)).fill(1);
const buf = DeviceBuffer.allocate(bytes);

/** Pinned DMA one way, timed with events on a non-blocking stream. */
function dma(toDevice: boolean): number {
  const stream = backend.streamCreate(StreamFlags.NON_BLOCKING, 0);
  const start = backend.eventCreate(EventFlags.DEFAULT);
  const end = backend.eventCreate(EventFlags.DEFAULT);
  const samples: number[] = [];
  for (let i = 0; i <= REPEATS; i++) {
    backend.eventRecord(start, stream);
    if (toDevice) backend.memcpyAsync(buf.ptr, pinned, bytes, stream);
    else backend.memcpyAsync(pinned, buf.ptr, bytes, stream);
    backend.eventRecord(end, stream);
    backend.eventSynchronize(end);
    if (i > 0) samples.push(bytes / (backend.eventElapsedTime(start, end) / 1e3) / 1e9);
  }
  backend.eventDestroy(start);
  backend.eventDestroy(end);
  backend.streamDestroy(stream);
  return median(samples);
}

const dmaH2D = dma(true);
const dmaD2H = dma(false);
console.log(JSON.stringify({ what: 'pinned DMA', bytes, h2d: dmaH2D, d2h: dmaD2H }));
let best = { h2d: 0, d2h: 0, h2dAt: '', d2hAt: '' };
for (const threads of threadCounts) {
  const copier = new CopyThreads(threads);
  const intoPinned = gbps(() => copier.copy([{ dst: nativeAddress(pinnedView), src: nativeAddress(host), bytes }]));
  const outOfPinned = gbps(() => copier.copy([{ dst: nativeAddress(host), src: nativeAddress(pinnedView), bytes }]));
  copier.destroy();
  console.log(JSON.stringify({ what: 'copy threads', threads, intoPinned, outOfPinned }));
  for (const chunkBytes of chunks) {
    for (const depth of depths) {
      configureTransfers({ threads, chunkBytes, depth, registration: { enabled: false } });
      const h2d = gbps(() => buf.copyFromHost(host));
      const d2h = gbps(() => buf.copyToHost(host));
      const asyncH2d = await gbpsAsync(() => buf.copyFromHostAsync(host));
      const asyncD2h = await gbpsAsync(() => buf.copyToHostAsync(host));
      const at = `threads ${threads}, chunk ${chunkBytes / MiB} MiB, depth ${depth}`;
      console.log(
        JSON.stringify({
          what: 'staged',
          threads,
          chunkMiB: chunkBytes / MiB,
          depth,
          h2d,
          d2h,
          asyncH2d,
          asyncD2h,
          h2dOfCeiling: h2d / Math.min(intoPinned, dmaH2D),
          d2hOfCeiling: d2h / Math.min(outOfPinned, dmaD2H),
        }),
      );
      if (h2d > best.h2d) best = { ...best, h2d, h2dAt: at };
      if (d2h > best.d2h) best = { ...best, d2h, d2hAt: at };
      releaseTransferCaches();
    }
  }
}
console.log(JSON.stringify({ what: 'best', ...best }));
buf.free();
backend.memFreeHost(pinned);
