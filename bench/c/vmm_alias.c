/*
 * Whether, and at what cost, one physical allocation can be mapped in pieces and at several
 * addresses at once, which decides how PoolResource moves pages (src/memory/pool/virtual-growth.ts):
 *  - a page of a many-page allocation mapped on its own (cuMemMap with a non-zero offset), and the
 *    data written through it read back through a mapping of the whole allocation elsewhere;
 *  - median microseconds of 25 rounds on the host clock:
 *      one page of a 32-page allocation: cuMemMap at an offset, cuMemSetAccess, cuMemUnmap;
 *      a second mapping of a one-page allocation still mapped elsewhere: cuMemMap, cuMemSetAccess,
 *      cuMemUnmap (the first mapping stays);
 *      cuMemSetAccess over one page while 1024 other mappings of the same page exist.
 * Prints one JSON line per finding; a refused call prints its error instead of exiting.
 *
 * usage: vmm_alias
 */
#include "common.h"

#define ROUNDS 25
#define EXTENT_PAGES 32
#define ALIASES 1024

static CUmemAllocationProp prop;
static CUmemAccessDesc access_desc;
static size_t page;

static const char *error_name(CUresult r) {
  const char *name = "unknown";
  cuGetErrorName(r, &name);
  return name;
}

/* Microseconds since `t0`. */
static double since(double t0) { return (now_ns() - t0) / 1e3; }

/* Page 5 of a 32-page allocation mapped alone, written, and read back through the whole mapping. */
static int partial_mapping(CUdeviceptr one, CUdeviceptr whole) {
  CUmemGenericAllocationHandle h;
  CHECK(cuMemCreate(&h, EXTENT_PAGES * page, &prop, 0));
  CUresult r = cuMemMap(one, page, 5 * page, h, 0);
  if (r != CUDA_SUCCESS) {
    printf("{\"partial_map\": false, \"error\": \"%s\"}\n", error_name(r));
    CHECK(cuMemRelease(h));
    return 0;
  }
  CHECK(cuMemSetAccess(one, page, &access_desc, 1));
  CHECK(cuMemMap(whole, EXTENT_PAGES * page, 0, h, 0));
  CHECK(cuMemSetAccess(whole, EXTENT_PAGES * page, &access_desc, 1));
  CHECK(cuMemsetD8(whole, 0, EXTENT_PAGES * page));
  CHECK(cuMemsetD8(one, 7, page));
  CHECK(cuCtxSynchronize());
  unsigned char *host = malloc(EXTENT_PAGES * page);
  CHECK(cuMemcpyDtoH(host, whole, EXTENT_PAGES * page));
  size_t wrong = 0;
  for (size_t i = 0; i < EXTENT_PAGES * page; i++) {
    unsigned char want = (i >= 5 * page && i < 6 * page) ? 7 : 0;
    if (host[i] != want) wrong++;
  }
  free(host);
  CHECK(cuMemUnmap(one, page));
  CHECK(cuMemUnmap(whole, EXTENT_PAGES * page));
  CHECK(cuMemRelease(h));
  printf("{\"partial_map\": true, \"alias_data_ok\": %s, \"wrong_bytes\": %zu}\n", wrong == 0 ? "true" : "false", wrong);
  return 1;
}

static void partial_costs(CUdeviceptr at) {
  CUmemGenericAllocationHandle h;
  CHECK(cuMemCreate(&h, EXTENT_PAGES * page, &prop, 0));
  double map[ROUNDS], set_access[ROUNDS], unmap[ROUNDS];
  for (int i = 0; i < ROUNDS; i++) {
    size_t offset = (size_t)(i % EXTENT_PAGES) * page;
    double t = now_ns();
    CHECK(cuMemMap(at, page, offset, h, 0));
    map[i] = since(t);
    t = now_ns();
    CHECK(cuMemSetAccess(at, page, &access_desc, 1));
    set_access[i] = since(t);
    CHECK(cuMemsetD8(at, 1, page));
    CHECK(cuCtxSynchronize());
    t = now_ns();
    CHECK(cuMemUnmap(at, page));
    unmap[i] = since(t);
  }
  CHECK(cuMemRelease(h));
  printf("{\"page_of_32_page_allocation\": true, \"map_us\": %.1f, \"set_access_us\": %.1f, \"unmap_us\": %.1f}\n",
         median(map, ROUNDS), median(set_access, ROUNDS), median(unmap, ROUNDS));
}

static void alias_costs(CUdeviceptr first, CUdeviceptr second) {
  CUmemGenericAllocationHandle h;
  CHECK(cuMemCreate(&h, page, &prop, 0));
  CHECK(cuMemMap(first, page, 0, h, 0));
  CHECK(cuMemSetAccess(first, page, &access_desc, 1));
  double map[ROUNDS], set_access[ROUNDS], unmap[ROUNDS];
  for (int i = 0; i < ROUNDS; i++) {
    double t = now_ns();
    CHECK(cuMemMap(second, page, 0, h, 0));
    map[i] = since(t);
    t = now_ns();
    CHECK(cuMemSetAccess(second, page, &access_desc, 1));
    set_access[i] = since(t);
    CHECK(cuMemsetD8(second, 1, page));
    CHECK(cuCtxSynchronize());
    t = now_ns();
    CHECK(cuMemUnmap(second, page));
    unmap[i] = since(t);
  }
  CHECK(cuMemUnmap(first, page));
  CHECK(cuMemRelease(h));
  printf("{\"second_mapping_of_one_page\": true, \"map_us\": %.1f, \"set_access_us\": %.1f, \"unmap_us\": %.1f}\n",
         median(map, ROUNDS), median(set_access, ROUNDS), median(unmap, ROUNDS));
}

/* cuMemSetAccess over one page while ALIASES other mappings of it exist: does its cost grow with them? */
static void many_aliases(CUdeviceptr base) {
  CUmemGenericAllocationHandle h;
  CHECK(cuMemCreate(&h, page, &prop, 0));
  double t = now_ns();
  int made = 0;
  for (; made < ALIASES; made++) {
    CUresult r = cuMemMap(base + (size_t)(made + 1) * page, page, 0, h, 0);
    if (r != CUDA_SUCCESS) {
      printf("{\"aliases_refused_at\": %d, \"error\": \"%s\"}\n", made, error_name(r));
      break;
    }
  }
  double map_all = since(t);
  CHECK(cuMemSetAccess(base + page, (size_t)made * page, &access_desc, 1));
  double set_access[ROUNDS];
  for (int i = 0; i < ROUNDS; i++) {
    CHECK(cuMemMap(base, page, 0, h, 0));
    t = now_ns();
    CHECK(cuMemSetAccess(base, page, &access_desc, 1));
    set_access[i] = since(t);
    CHECK(cuMemUnmap(base, page));
  }
  t = now_ns();
  CHECK(cuMemUnmap(base + page, (size_t)made * page));
  double unmap_all = since(t);
  CHECK(cuMemRelease(h));
  printf("{\"aliases\": %d, \"map_each_us\": %.2f, \"set_access_one_us\": %.1f, \"unmap_all_us_per_mapping\": %.1f}\n",
         made, map_all / made, median(set_access, ROUNDS), unmap_all / made);
}

int main(void) {
  CUdevice dev = init_primary_context();
  page = vmm_setup(dev, &prop, &access_desc);
  size_t range = (ALIASES + 2 * EXTENT_PAGES + 8) * page;
  CUdeviceptr base;
  CHECK(cuMemAddressReserve(&base, range, page, 0, 0));
  printf("{\"page_bytes\": %zu}\n", page);
  CUdeviceptr whole = base + (ALIASES + 4) * page;
  if (partial_mapping(base, whole)) partial_costs(base);
  alias_costs(base, whole);
  many_aliases(base);
  CHECK(cuMemAddressFree(base, range));
  return 0;
}
