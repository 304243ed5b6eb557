/*
 * Reference for vram bench's pinned rows: cuMemHostAlloc'd memory, cuMemcpyHtoDAsync /
 * cuMemcpyDtoHAsync on a non-blocking stream, each copy timed with a pair of events, median of
 * repeats after 3 warm-up copies, GB/s = 1e9 bytes/s. Same sizes and repeats as
 * src/cli/bench/transfers.ts. Prints one JSON line per size.
 *
 * usage: pinned_copy [size_bytes ...]    (default 64 KiB, 1 MiB, 16 MiB, 256 MiB)
 */
#include "common.h"

#define WARMUP 3

static int repeats_for(size_t bytes) {
  if (bytes <= (1u << 20)) return 100;
  if (bytes <= (16u << 20)) return 30;
  return 10;
}

typedef enum { H2D, D2H } direction;

static double measure(direction dir, CUdeviceptr dev, void *host, size_t bytes, int repeats,
                      CUstream stream, CUevent start, CUevent end) {
  double *samples = malloc(sizeof(double) * (size_t)repeats);
  if (!samples) { fprintf(stderr, "out of host memory\n"); exit(1); }
  for (int i = 0; i < WARMUP; i++) {
    if (dir == H2D) CHECK(cuMemcpyHtoDAsync(dev, host, bytes, stream));
    else CHECK(cuMemcpyDtoHAsync(host, dev, bytes, stream));
  }
  CHECK(cuStreamSynchronize(stream));
  for (int i = 0; i < repeats; i++) {
    float ms = 0;
    CHECK(cuEventRecord(start, stream));
    if (dir == H2D) CHECK(cuMemcpyHtoDAsync(dev, host, bytes, stream));
    else CHECK(cuMemcpyDtoHAsync(host, dev, bytes, stream));
    CHECK(cuEventRecord(end, stream));
    CHECK(cuEventSynchronize(end));
    CHECK(cuEventElapsedTime(&ms, start, end));
    samples[i] = (double)bytes / (ms / 1e3) / 1e9;
  }
  double result = median(samples, repeats);
  free(samples);
  return result;
}

int main(int argc, char **argv) {
  size_t defaults[] = {64u << 10, 1u << 20, 16u << 20, 256u << 20};
  int count = argc > 1 ? argc - 1 : 4;
  init_primary_context();

  CUstream stream;
  CUevent start, end;
  CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CHECK(cuEventCreate(&start, CU_EVENT_DEFAULT));
  CHECK(cuEventCreate(&end, CU_EVENT_DEFAULT));

  for (int s = 0; s < count; s++) {
    size_t bytes = argc > 1 ? (size_t)strtoull(argv[s + 1], NULL, 0) : defaults[s];
    if (bytes == 0) { fprintf(stderr, "usage: pinned_copy [size_bytes ...]\n"); return 2; }
    int repeats = repeats_for(bytes);
    void *host = NULL;
    CUdeviceptr dev = 0;
    CHECK(cuMemHostAlloc(&host, bytes, 0));
    for (size_t i = 0; i < bytes; i++) ((unsigned char *)host)[i] = 1; /* touch every page */
    CHECK(cuMemAlloc(&dev, bytes));
    double h2d = measure(H2D, dev, host, bytes, repeats, stream, start, end);
    double d2h = measure(D2H, dev, host, bytes, repeats, stream, start, end);
    printf("{\"program\":\"pinned_copy\",\"size\":%zu,\"repeats\":%d,\"h2d_gbps\":%.3f,\"d2h_gbps\":%.3f}\n",
           bytes, repeats, h2d, d2h);
    fflush(stdout);
    CHECK(cuMemFree(dev));
    CHECK(cuMemFreeHost(host));
  }

  CHECK(cuEventDestroy(end));
  CHECK(cuEventDestroy(start));
  CHECK(cuStreamDestroy(stream));
  return 0;
}
