/*
 * Reference for bench/graph.ts: the host's time per cuGraphLaunch of a graph of 100 launches of
 * the empty kernel (captured on a non-blocking stream), each call timed with the host clock from
 * an idle stream (cuStreamSynchronize before, outside the timed window), in batches of 5 launches;
 * ns per graph launch is the median over 200 batches after 20 warm-up batches. Also the wall time
 * of one graph launch and its completion (launch + cuStreamSynchronize), median over 200. Prints
 * one JSON line.
 *
 * usage: graph_launch
 */
#include "launch_kernels.h"

#define NODES 100
#define LAUNCHES_PER_BATCH 5
#define BATCHES 200
#define WARMUP_BATCHES 20

int main(void) {
  init_primary_context();
  CUmodule module = load_bench_kernels();
  CUfunction empty;
  CHECK(cuModuleGetFunction(&empty, module, "empty"));
  CUstream stream;
  CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

  CUgraph graph;
  CHECK(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  for (int i = 0; i < NODES; i++) CHECK(cuLaunchKernel(empty, 1, 1, 1, 32, 1, 1, 0, stream, NULL, NULL));
  CHECK(cuStreamEndCapture(stream, &graph));
  CUgraphExec exec;
  CHECK(cuGraphInstantiateWithFlags(&exec, graph, 0));

  double samples[BATCHES];
  for (int b = 0; b < WARMUP_BATCHES + BATCHES; b++) {
    CHECK(cuStreamSynchronize(stream));
    double start = now_ns();
    for (int i = 0; i < LAUNCHES_PER_BATCH; i++) CHECK(cuGraphLaunch(exec, stream));
    double elapsed = now_ns() - start;
    if (b >= WARMUP_BATCHES) samples[b - WARMUP_BATCHES] = elapsed / LAUNCHES_PER_BATCH;
  }
  CHECK(cuStreamSynchronize(stream));
  double launch_ns = median(samples, BATCHES);

  for (int b = 0; b < WARMUP_BATCHES + BATCHES; b++) {
    CHECK(cuStreamSynchronize(stream));
    double start = now_ns();
    CHECK(cuGraphLaunch(exec, stream));
    CHECK(cuStreamSynchronize(stream));
    if (b >= WARMUP_BATCHES) samples[b - WARMUP_BATCHES] = now_ns() - start;
  }
  double step_ns = median(samples, BATCHES);
  printf("{\"program\":\"graph_launch\",\"nodes\":%d,\"batches\":%d,\"launches_per_batch\":%d,\"graph_launch_ns\":%.1f,\"graph_step_ns\":%.1f}\n",
         NODES, BATCHES, LAUNCHES_PER_BATCH, launch_ns, step_ns);

  CHECK(cuGraphExecDestroy(exec));
  CHECK(cuGraphDestroy(graph));
  CHECK(cuStreamDestroy(stream));
  CHECK(cuModuleUnload(module));
  return 0;
}
