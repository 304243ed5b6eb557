/**
 * Kernel rows: launch latency of an empty kernel from TypeScript (with no arguments, and with
 * four, so the cost of checking and packing them shows), and the zero-copy read bandwidth of
 * mapped pinned host memory (plain and write-combined) by a kernel. bench/c/launch_latency.c and
 * bench/c/mapped_read.c run the same loops, on the same kernels (their PTX, from the source
 * below), in C through the driver API, so the figures compare as ratios within one call.
 *
 * Launch latency is the host's time per cuLaunchKernel (through `Kernel.launch`, checks and
 * argument packing included): batches of 50 launches, each batch timed with the host clock from an
 * idle stream (synchronised before, outside the timed window, so the launch queue never fills and
 * blocks), median over batches. On an H100 that is the driver's own ~3 us per launch, which C
 * pays too. The read bandwidth is timed with a pair of events around each read of the whole
 * buffer (the device's clock).
 */
import { EventFlags } from '../../backend/backend.js';
import { Device } from '../../device.js';
import { HostBuffer } from '../../buffer/host-buffer.js';
import type { EmulatedKernels } from '../../backend/backend.js';
import { Module } from '../../kernels/module.js';
import { Stream } from '../../stream.js';
import { gbPerSecond, median, nowNs, repeatsFor, type BenchCase, type BenchRow, type BenchSettings } from './common.js';

/**
 * The kernels, also in bench/c/launch_kernels.h as PTX (nvcc -ptx -arch=compute_75 of this source).
 * read_mapped reads every 16-byte word with a grid-stride loop and stores only when the XOR of
 * what it read equals a value the buffer (all bytes 1: XOR 0) never gives, so no load is dropped.
 */
export const BENCH_KERNELS = `
extern "C" __global__ void empty() {}
extern "C" __global__ void empty_args(float *a, const float *b, float s, unsigned n) {}
extern "C" __global__ void read_mapped(const uint4 *src, unsigned long long n, unsigned *out) {
  unsigned acc = 0;
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x) {
    uint4 v = src[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) out[0] = acc;
}
`;

/** Launches per timed batch, and batches (full run); bench/c/launch_latency.c uses the same. */
const LAUNCHES_PER_BATCH = 50;
const BATCHES = 200;
/** Untimed batches first (JIT warm-up of the launch path, module loading, clocks). */
const WARMUP_BATCHES = 20;
/** Bytes read per mapped-read repeat, and the launch shape (bench/c/mapped_read.c uses the same). */
const MAPPED_BYTES = 256 << 20;
const READ_BLOCK = 256;
const READ_BLOCKS_PER_SM = 8;
const READ_REPEATS = 10;

/** Bytes read per repeat on a quick run (the emulated backend's is always quick). */
const QUICK_MAPPED_BYTES = 16 << 20;

/**
 * The kernels' JavaScript for the emulated backend (whose figures, like its other rows, measure
 * the emulation, not a GPU): the empty ones do nothing, read_mapped reads every word as the CUDA
 * code does.
 */
const EMULATED: EmulatedKernels = {
  empty: () => {},
  empty_args: () => {},
  read_mapped: (launch) => {
    const [src, words, out] = launch.args as [number, number, number];
    const bytes = launch.memory.bytes(src, 16 * words);
    const v = new Uint32Array(bytes.buffer, bytes.byteOffset, 4 * words);
    let acc = 0;
    for (let i = 0; i < v.length; i++) acc ^= v[i]!;
    if (acc >>> 0 === 0x9e3779b9) {
      const o = launch.memory.bytes(out, 4);
      new DataView(o.buffer, o.byteOffset, 4).setUint32(0, acc, true);
    }
  },
};

function compileBenchKernels(device: Device): Module {
  return Module.compile(BENCH_KERNELS, { device, cache: true, emulated: EMULATED });
}

/** The median host ns per `launch()` over batches started on an idle default stream. */
function timeLaunches(device: Device, batches: number, launch: () => void): number {
  const samples: number[] = [];
  for (let b = 0; b < WARMUP_BATCHES + batches; b++) {
    device.backend.streamSynchronize(0);
    const start = nowNs();
    for (let i = 0; i < LAUNCHES_PER_BATCH; i++) launch();
    const elapsed = nowNs() - start;
    if (b >= WARMUP_BATCHES) samples.push(elapsed / LAUNCHES_PER_BATCH);
  }
  device.backend.streamSynchronize(0);
  return median(samples);
}

/** A launch row's size: the bytes of its arguments (8 + 8 + 4 + 4), or 0 for none. */
const ARGUMENT_BYTES = 24;

function launchCase(settings: BenchSettings, withArgs: boolean): BenchCase {
  const name = withArgs ? 'kernel launch, 4 arguments' : 'kernel launch, empty kernel';
  const size = withArgs ? ARGUMENT_BYTES : 0;
  return {
    group: 'kernels',
    name,
    size,
    run: (): BenchRow => {
      const device = Device.get(0);
      const batches = repeatsFor(settings, BATCHES);
      using module = compileBenchKernels(device);
      let value: number;
      if (withArgs) {
        const kernel = module.kernel('empty_args', ['ptr', 'ptr', 'f32', 'u32'] as const);
        using buffer = HostBuffer.allocate(64, { mapped: true });
        const ptr = buffer.devicePtr;
        const config = { grid: 1, block: 32 } as const;
        value = timeLaunches(device, batches, () => kernel.launch(config, ptr, ptr, 1.5, 64));
      } else {
        const kernel = module.kernel('empty', [] as const);
        const config = { grid: 1, block: 32 } as const;
        value = timeLaunches(device, batches, () => kernel.launch(config));
      }
      return { group: 'kernels', name, size, value, unit: 'ns/op', repeats: batches };
    },
  };
}

function mappedReadCase(settings: BenchSettings, writeCombined: boolean): BenchCase {
  const name = writeCombined ? 'kernel read, mapped write-combined' : 'kernel read, mapped pinned';
  const size = settings.quick ? QUICK_MAPPED_BYTES : MAPPED_BYTES;
  return {
    group: 'kernels',
    name,
    size,
    run: (): BenchRow => {
      const device = Device.get(0);
      const backend = device.backend;
      const repeats = repeatsFor(settings, READ_REPEATS);
      using module = compileBenchKernels(device);
      const kernel = module.kernel('read_mapped', ['ptr', 'u64', 'ptr'] as const);
      using source = HostBuffer.allocate(size, { mapped: true, writeCombined });
      device.makeCurrent();
      // Written through the driver (a copy into the device view), not a CPU view: write-combined
      // memory is uncached for CPU reads, and every page is touched before the timed reads.
      backend.memsetAsync(source.devicePtr, 0x01010101, 4, size / 4, 0);
      using out = HostBuffer.allocate(64, { mapped: true });
      const words = size / 16;
      const config = { grid: device.info.multiprocessorCount * READ_BLOCKS_PER_SM, block: READ_BLOCK } as const;
      // A `Stream`, not a raw driver stream: the launches hand it to vram with the buffers, and
      // whatever vram keeps about a stream is told before a `Stream` is destroyed.
      using streamRef = Stream.create({ device, nonBlocking: true });
      const stream = streamRef.handle;
      const start = backend.eventCreate(EventFlags.DEFAULT);
      const end = backend.eventCreate(EventFlags.DEFAULT);
      try {
        backend.streamSynchronize(0);
        for (let i = 0; i < 2; i++) kernel.launch({ ...config, stream: streamRef }, source, words, out);
        backend.streamSynchronize(stream);
        const samples: number[] = [];
        for (let i = 0; i < repeats; i++) {
          backend.eventRecord(start, stream);
          kernel.launch({ ...config, stream: streamRef }, source, words, out);
          backend.eventRecord(end, stream);
          backend.eventSynchronize(end);
          samples.push(gbPerSecond(size, backend.eventElapsedTime(start, end) / 1e3));
        }
        return { group: 'kernels', name, size, value: median(samples), unit: 'GB/s', repeats };
      } finally {
        backend.eventDestroy(end);
        backend.eventDestroy(start);
      }
    },
  };
}

/**
 * The kernel rows.
 *
 * @param settings The run's settings (quick runs time fewer batches and repeats).
 * @returns Launch latency (no arguments, four arguments) and mapped read bandwidth (plain, write-combined).
 * @example
 * ```ts
 * const rows = await Promise.all(kernelCases(settings).map((c) => c.run()));
 * ```
 */
export function kernelCases(settings: BenchSettings): BenchCase[] {
  return [launchCase(settings, false), launchCase(settings, true), mappedReadCase(settings, false), mappedReadCase(settings, true)];
}
