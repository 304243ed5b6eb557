/*
 * Reference for vram bench's mapped-read rows: a kernel (read_mapped) reads 256 MiB of mapped
 * pinned host memory (cuMemHostAlloc DEVICEMAP, then also WRITECOMBINED) in place over the bus,
 * 16 bytes per load with a grid-stride loop, 8 blocks of 256 threads per SM; each read of the
 * whole buffer timed with a pair of events on a non-blocking stream, median of 10 after 2 warm-up
 * reads, GB/s = 1e9 bytes/s, as src/cli/bench/kernels.ts does. Prints one JSON line per kind.
 *
 * usage: mapped_read [size_bytes]    (default 256 MiB)
 */
#include "launch_kernels.h"

#define REPEATS 10
#define WARMUP 2
#define BLOCK 256
#define BLOCKS_PER_SM 8

static double measure(CUfunction fn, unsigned flags, size_t bytes, int sms, CUstream stream, CUevent start, CUevent end) {
  void *host = NULL;
  CUdeviceptr src, out;
  CHECK(cuMemHostAlloc(&host, bytes, CU_MEMHOSTALLOC_DEVICEMAP | flags));
  CHECK(cuMemHostGetDevicePointer(&src, host, 0));
  /* Written by the driver (as vram's row does): a CPU read of write-combined memory is uncached. */
  CHECK(cuMemsetD32(src, 0x01010101u, bytes / 4));
  CHECK(cuMemAlloc(&out, 64));
  unsigned long long words = bytes / 16;
  void *args[] = {&src, &words, &out};
  unsigned grid = (unsigned)sms * BLOCKS_PER_SM;
  double samples[REPEATS];
  for (int i = 0; i < WARMUP; i++) CHECK(cuLaunchKernel(fn, grid, 1, 1, BLOCK, 1, 1, 0, stream, args, NULL));
  CHECK(cuStreamSynchronize(stream));
  for (int i = 0; i < REPEATS; i++) {
    float ms = 0;
    CHECK(cuEventRecord(start, stream));
    CHECK(cuLaunchKernel(fn, grid, 1, 1, BLOCK, 1, 1, 0, stream, args, NULL));
    CHECK(cuEventRecord(end, stream));
    CHECK(cuEventSynchronize(end));
    CHECK(cuEventElapsedTime(&ms, start, end));
    samples[i] = (double)bytes / (ms / 1e3) / 1e9;
  }
  CHECK(cuMemFree(out));
  CHECK(cuMemFreeHost(host));
  return median(samples, REPEATS);
}

int main(int argc, char **argv) {
  size_t bytes = argc > 1 ? (size_t)strtoull(argv[1], NULL, 0) : (256u << 20);
  if (bytes == 0 || bytes % 16 != 0) { fprintf(stderr, "usage: mapped_read [size_bytes, a multiple of 16]\n"); return 2; }
  CUdevice dev = init_primary_context();
  int sms = 0;
  CHECK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  CUmodule module = load_bench_kernels();
  CUfunction fn;
  CHECK(cuModuleGetFunction(&fn, module, "read_mapped"));
  CUstream stream;
  CUevent start, end;
  CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CHECK(cuEventCreate(&start, CU_EVENT_DEFAULT));
  CHECK(cuEventCreate(&end, CU_EVENT_DEFAULT));

  double plain = measure(fn, 0, bytes, sms, stream, start, end);
  double wc = measure(fn, CU_MEMHOSTALLOC_WRITECOMBINED, bytes, sms, stream, start, end);
  printf("{\"program\":\"mapped_read\",\"size\":%zu,\"repeats\":%d,\"plain_gbps\":%.3f,\"wc_gbps\":%.3f}\n",
         bytes, REPEATS, plain, wc);

  CHECK(cuEventDestroy(end));
  CHECK(cuEventDestroy(start));
  CHECK(cuStreamDestroy(stream));
  CHECK(cuModuleUnload(module));
  return 0;
}
