/*
 * Reference for vram bench's kernel launch rows: the host's time per cuLaunchKernel of an empty
 * kernel on the legacy default stream, in batches of 50 launches each timed with the host clock
 * from an idle stream (cuStreamSynchronize before, outside the timed window); ns per launch is the
 * median over 200 batches after 20 warm-up batches. Once with no arguments (empty), once with four
 * (empty_args: two pointers, a float, an unsigned), as src/cli/bench/kernels.ts does. Prints one
 * JSON line.
 *
 * usage: launch_latency
 */
#include "launch_kernels.h"

#define LAUNCHES_PER_BATCH 50
#define BATCHES 200
#define WARMUP_BATCHES 20

static double time_launches(CUfunction fn, void **params) {
  double samples[BATCHES];
  for (int b = 0; b < WARMUP_BATCHES + BATCHES; b++) {
    CHECK(cuStreamSynchronize(0));
    double start = now_ns();
    for (int i = 0; i < LAUNCHES_PER_BATCH; i++) CHECK(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, 0, params, NULL));
    double elapsed = now_ns() - start;
    if (b >= WARMUP_BATCHES) samples[b - WARMUP_BATCHES] = elapsed / LAUNCHES_PER_BATCH;
  }
  CHECK(cuStreamSynchronize(0));
  return median(samples, BATCHES);
}

int main(void) {
  init_primary_context();
  CUmodule module = load_bench_kernels();
  CUfunction empty, empty_args;
  CHECK(cuModuleGetFunction(&empty, module, "empty"));
  CHECK(cuModuleGetFunction(&empty_args, module, "empty_args"));

  CUdeviceptr buffer;
  CHECK(cuMemAlloc(&buffer, 64));
  float scale = 1.5f;
  unsigned n = 64;
  void *args[] = {&buffer, &buffer, &scale, &n};

  double none = time_launches(empty, NULL);
  double four = time_launches(empty_args, args);
  printf("{\"program\":\"launch_latency\",\"batches\":%d,\"launches_per_batch\":%d,\"empty_ns\":%.1f,\"args4_ns\":%.1f}\n",
         BATCHES, LAUNCHES_PER_BATCH, none, four);

  CHECK(cuMemFree(buffer));
  CHECK(cuModuleUnload(module));
  return 0;
}
