/*
 * What each virtual memory management call costs, which decides how PoolResource grows
 * (src/memory/pool/virtual-growth.ts): median microseconds of 25 rounds on the host clock.
 *  - One physical allocation of 1, 4, 16, 64 and 256 pages: cuMemCreate, cuMemMap,
 *    cuMemSetAccess, cuMemUnmap (after a memset touched it), cuMemRelease.
 *  - 4, 16 and 64 one-page allocations mapped side by side: one cuMemSetAccess over all of them,
 *    one cuMemUnmap over all of them (whether the driver accepts a range spanning mappings), and
 *    per page: cuMemUnmap, then cuMemMap of the same handle elsewhere (a page move).
 *
 * usage: vmm_calls
 */
#include "common.h"

#define ROUNDS 25

static CUmemAllocationProp prop;
static CUmemAccessDesc access_desc;
static size_t page;

/* Microseconds `call` took (a failing call exits, naming it). */
#define TIMED(call) (timed_start = now_ns(), timed_end((call), #call))
static double timed_start;

static double timed_end(CUresult result, const char *what) {
  double us = (now_ns() - timed_start) / 1e3;
  if (result != CUDA_SUCCESS) {
    const char *name = "unknown";
    cuGetErrorName(result, &name);
    fprintf(stderr, "%s failed: %s (%d)\n", what, name, (int)result);
    exit(1);
  }
  return us;
}

static void one_allocation(CUdeviceptr base, size_t pages) {
  size_t bytes = pages * page;
  double create[ROUNDS], map[ROUNDS], set_access[ROUNDS], unmap[ROUNDS], release[ROUNDS];
  for (int i = 0; i < ROUNDS; i++) {
    CUmemGenericAllocationHandle h;
    create[i] = TIMED(cuMemCreate(&h, bytes, &prop, 0));
    map[i] = TIMED(cuMemMap(base, bytes, 0, h, 0));
    set_access[i] = TIMED(cuMemSetAccess(base, bytes, &access_desc, 1));
    CHECK(cuMemsetD8(base, 1, bytes));
    CHECK(cuCtxSynchronize());
    unmap[i] = TIMED(cuMemUnmap(base, bytes));
    release[i] = TIMED(cuMemRelease(h));
  }
  printf("{\"allocation_pages\": %zu, \"create_us\": %.1f, \"map_us\": %.1f, \"set_access_us\": %.1f, "
         "\"unmap_us\": %.1f, \"release_us\": %.1f}\n", pages, median(create, ROUNDS), median(map, ROUNDS),
         median(set_access, ROUNDS), median(unmap, ROUNDS), median(release, ROUNDS));
}

static void side_by_side(CUdeviceptr base, size_t n) {
  CUmemGenericAllocationHandle h[64];
  double set_access[ROUNDS], unmap_all[ROUNDS], unmap_each[ROUNDS], map_each[ROUNDS];
  int spanning_ok = 1;
  for (int i = 0; i < ROUNDS; i++) {
    for (size_t j = 0; j < n; j++) {
      CHECK(cuMemCreate(&h[j], page, &prop, 0));
      CHECK(cuMemMap(base + j * page, page, 0, h[j], 0));
    }
    set_access[i] = TIMED(cuMemSetAccess(base, n * page, &access_desc, 1));
    CHECK(cuMemsetD8(base, 1, n * page));
    CHECK(cuCtxSynchronize());
    double t = now_ns();
    CUresult r = cuMemUnmap(base, n * page);
    unmap_all[i] = (now_ns() - t) / 1e3;
    if (r != CUDA_SUCCESS) {
      spanning_ok = 0;
      for (size_t j = 0; j < n; j++) CHECK(cuMemUnmap(base + j * page, page));
    }
    for (size_t j = 0; j < n; j++) CHECK(cuMemMap(base + j * page, page, 0, h[j], 0));
    CHECK(cuMemSetAccess(base, n * page, &access_desc, 1));
    t = now_ns();
    for (size_t j = 0; j < n; j++) CHECK(cuMemUnmap(base + j * page, page));
    unmap_each[i] = (now_ns() - t) / 1e3 / (double)n;
    t = now_ns();
    for (size_t j = 0; j < n; j++) CHECK(cuMemMap(base + (n + j) * page, page, 0, h[j], 0));
    map_each[i] = (now_ns() - t) / 1e3 / (double)n;
    CHECK(cuMemSetAccess(base + n * page, n * page, &access_desc, 1));
    for (size_t j = 0; j < n; j++) {
      CHECK(cuMemUnmap(base + (n + j) * page, page));
      CHECK(cuMemRelease(h[j]));
    }
  }
  printf("{\"one_page_mappings\": %zu, \"set_access_all_us\": %.1f, \"unmap_all_accepted\": %s, \"unmap_all_us\": %.1f, "
         "\"unmap_each_us\": %.1f, \"map_each_us\": %.1f}\n", n, median(set_access, ROUNDS), spanning_ok ? "true" : "false",
         median(unmap_all, ROUNDS), median(unmap_each, ROUNDS), median(map_each, ROUNDS));
}

int main(void) {
  CUdevice dev = init_primary_context();
  page = vmm_setup(dev, &prop, &access_desc);
  size_t range = 512 * page;
  CUdeviceptr base;
  CHECK(cuMemAddressReserve(&base, range, page, 0, 0));
  printf("{\"page_bytes\": %zu}\n", page);
  const size_t sizes[] = {1, 4, 16, 64, 256};
  for (int k = 0; k < 5; k++) one_allocation(base, sizes[k]);
  for (int k = 1; k < 4; k++) side_by_side(base, sizes[k]);
  CHECK(cuMemAddressFree(base, range));
  return 0;
}
