/*
 * Reference for vram bench's allocation rows, with the same batch scheme as
 * src/cli/bench/pairs.ts: three untimed warm-up batches, then 51 timed batches of N pairs on the host
 * clock, each ending with cuStreamSynchronize inside the timing; median ns per pair.
 *  - cuMemAllocAsync + cuMemFreeAsync on a non-blocking stream, from the device's default pool
 *    with its release threshold at UINT64_MAX (a pool hit), N = 1000.
 *  - cuMemAlloc + cuMemFree, N = 100 (20 at >= 16 MiB).
 * Sizes 256 B, 1 MiB, 64 MiB. Prints one JSON line per row.
 *
 * usage: alloc_async [batches]
 */
#include <stdint.h>
#include "common.h"

typedef struct {
  const char *name;
  int async;
} pair_kind;

static int pairs_per_batch(size_t bytes, int async) {
  if (async) return 1000;
  return bytes >= (16u << 20) ? 20 : 100;
}

static void run_batch(const pair_kind *kind, size_t bytes, int pairs, CUstream stream) {
  CUdeviceptr ptr;
  for (int i = 0; i < pairs; i++) {
    if (kind->async) {
      CHECK(cuMemAllocAsync(&ptr, bytes, stream));
      CHECK(cuMemFreeAsync(ptr, stream));
    } else {
      CHECK(cuMemAlloc(&ptr, bytes));
      CHECK(cuMemFree(ptr));
    }
  }
  CHECK(cuStreamSynchronize(stream));
}

int main(int argc, char **argv) {
  int batches = argc > 1 ? atoi(argv[1]) : 51;
  if (batches < 1) { fprintf(stderr, "usage: alloc_async [batches]\n"); return 2; }
  CUdevice dev = init_primary_context();

  CUmemoryPool pool;
  cuuint64_t keep_everything = UINT64_MAX;
  CHECK(cuDeviceGetDefaultMemPool(&pool, dev));
  CHECK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep_everything));

  CUstream stream;
  CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

  const pair_kind kinds[] = {
    {"cuMemAlloc+cuMemFree", 0},
    {"cuMemAllocAsync+cuMemFreeAsync", 1},
  };
  const size_t sizes[] = {256, 1u << 20, 64u << 20};
  double *samples = malloc(sizeof(double) * (size_t)batches);
  if (!samples) { fprintf(stderr, "out of host memory\n"); return 1; }

  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
      size_t bytes = sizes[s];
      int pairs = pairs_per_batch(bytes, kinds[k].async);
      for (int w = 0; w < 3; w++) run_batch(&kinds[k], bytes, pairs, stream); /* warm-up: fills the pool */
      for (int b = 0; b < batches; b++) {
        double start = now_ns();
        run_batch(&kinds[k], bytes, pairs, stream);
        samples[b] = (now_ns() - start) / pairs;
      }
      printf("{\"program\":\"alloc_async\",\"name\":\"%s\",\"size\":%zu,\"batches\":%d,\"pairs\":%d,\"ns_per_pair\":%.1f}\n",
             kinds[k].name, bytes, batches, pairs, median(samples, batches));
      fflush(stdout);
    }
  }

  free(samples);
  CHECK(cuStreamDestroy(stream));
  CHECK(cuMemPoolTrimTo(pool, 0));
  return 0;
}
