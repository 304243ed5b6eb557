/*
 * Whether the virtual memory calls that grow PoolResource run in parallel from several host
 * threads: 256 one-page allocations mapped (cuMemMap + cuMemSetAccess) and unmapped, and 256 created,
 * split evenly over 1, 2, 4, 8 and 16 threads; wall microseconds per page, median of 7 rounds.
 * A growth maps its pages in batches (bert_dynamic_infer's later passes: most of their maps come in
 * allocations that map 8 or more pages), so parallel calls would divide its time.
 *
 * usage: vmm_threads
 */
#include <pthread.h>
#include "common.h"

#define PAGES 256
#define ROUNDS 7

static CUmemAllocationProp prop;
static CUmemAccessDesc access_desc;
static size_t page;
static CUcontext ctx;
static CUdeviceptr base;
static CUmemGenericAllocationHandle handles[PAGES];

enum { CREATE, MAP, UNMAP, RELEASE };

struct job {
  int op, from, to;
};

static void *work(void *arg) {
  struct job *j = arg;
  CHECK(cuCtxSetCurrent(ctx));
  for (int i = j->from; i < j->to; i++) {
    CUdeviceptr at = base + (size_t)i * page;
    switch (j->op) {
      case CREATE: CHECK(cuMemCreate(&handles[i], page, &prop, 0)); break;
      case MAP:
        CHECK(cuMemMap(at, page, 0, handles[i], 0));
        CHECK(cuMemSetAccess(at, page, &access_desc, 1));
        break;
      case UNMAP: CHECK(cuMemUnmap(at, page)); break;
      case RELEASE: CHECK(cuMemRelease(handles[i])); break;
    }
  }
  return NULL;
}

/* Wall microseconds per page for `op` over all pages, split over `threads` threads. */
static double run(int op, int threads) {
  pthread_t t[16];
  struct job jobs[16];
  double t0 = now_ns();
  for (int k = 0; k < threads; k++) {
    jobs[k].op = op;
    jobs[k].from = PAGES * k / threads;
    jobs[k].to = PAGES * (k + 1) / threads;
    pthread_create(&t[k], NULL, work, &jobs[k]);
  }
  for (int k = 0; k < threads; k++) pthread_join(t[k], NULL);
  return (now_ns() - t0) / 1e3 / PAGES;
}

int main(void) {
  CUdevice dev = init_primary_context();
  CHECK(cuCtxGetCurrent(&ctx));
  page = vmm_setup(dev, &prop, &access_desc);
  CHECK(cuMemAddressReserve(&base, PAGES * page, page, 0, 0));
  const int counts[] = {1, 2, 4, 8, 16};
  for (int c = 0; c < 5; c++) {
    double create[ROUNDS], map[ROUNDS], unmap[ROUNDS], release[ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
      create[r] = run(CREATE, counts[c]);
      map[r] = run(MAP, counts[c]);
      CHECK(cuMemsetD8(base, 1, PAGES * page));
      CHECK(cuCtxSynchronize());
      unmap[r] = run(UNMAP, counts[c]);
      release[r] = run(RELEASE, counts[c]);
    }
    printf("{\"threads\": %d, \"create_us_per_page\": %.1f, \"map_and_set_access_us_per_page\": %.1f, "
           "\"unmap_us_per_page\": %.1f, \"release_us_per_page\": %.1f}\n", counts[c], median(create, ROUNDS),
           median(map, ROUNDS), median(unmap, ROUNDS), median(release, ROUNDS));
  }
  CHECK(cuMemAddressFree(base, PAGES * page));
  return 0;
}
