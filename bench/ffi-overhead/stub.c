/*
 * A stand-in for libcuda with the exact signatures of the entry points vram's hot paths call, so
 * the FFI cost of a cuMemAllocAsync+cuMemFreeAsync pair can be timed without a GPU (run.mjs).
 * cuGetProcAddress_v2 hands out these functions, and a do-nothing success for every other symbol,
 * so the real CudaBackend (dist/src/backend/cuda.js) also loads on it through VRAM_LIBCUDA.
 *
 * Allocation writes a fake device address above 2^32 (set it with stub_set_next to test
 * round-trips); the frees fail with CUDA_ERROR_INVALID_VALUE (1) unless handed back exactly the
 * last address allocated, so every timed pair also checks the value read back.
 *
 * build: gcc -O2 -shared -fPIC -o libstub.so stub.c
 */
#include <stddef.h>
#include <string.h>

typedef unsigned long long u64;

static u64 next_address = 0x7f0012345600ULL;
static u64 live = 0;
static u64 pairs = 0;

void stub_set_next(u64 address) { next_address = address; }
u64 stub_pairs(void) { return pairs; }
u64 stub_live(void) { return live; }

int cuInit(unsigned int flags) { (void)flags; return 0; }
int cuDriverGetVersion(int *version) { *version = 13000; return 0; }
int cuGetErrorName(int error, const char **str) { (void)error; *str = "CUDA_ERROR_STUB"; return 0; }
int cuGetErrorString(int error, const char **str) { (void)error; *str = "stub error"; return 0; }

int cuMemAllocAsync(u64 *dptr, size_t bytes, void *stream) {
  (void)stream;
  if (bytes == 0) return 0; /* as the driver: success, out-parameter untouched */
  *dptr = live = next_address;
  return 0;
}

int cuMemAllocFromPoolAsync(u64 *dptr, size_t bytes, void *pool, void *stream) {
  (void)pool;
  return cuMemAllocAsync(dptr, bytes, stream);
}

int cuMemFreeAsync(u64 dptr, void *stream) {
  (void)stream;
  if (dptr != live) return 1;
  live = 0;
  pairs++;
  return 0;
}

int cuMemAlloc(u64 *dptr, size_t bytes) { return cuMemAllocAsync(dptr, bytes, NULL); }
int cuMemFree(u64 dptr) { return cuMemFreeAsync(dptr, NULL); }

/* Any other entry point: succeed and write nothing. */
static int ok(void) { return 0; }

int cuGetProcAddress_v2(const char *symbol, void **pfn, int version, u64 flags, int *status) {
  (void)version; (void)flags;
  if (!strcmp(symbol, "cuMemAllocAsync")) *pfn = (void *)cuMemAllocAsync;
  else if (!strcmp(symbol, "cuMemFreeAsync")) *pfn = (void *)cuMemFreeAsync;
  else if (!strcmp(symbol, "cuMemAllocFromPoolAsync")) *pfn = (void *)cuMemAllocFromPoolAsync;
  else if (!strcmp(symbol, "cuMemAlloc")) *pfn = (void *)cuMemAlloc;
  else if (!strcmp(symbol, "cuMemFree")) *pfn = (void *)cuMemFree;
  else *pfn = (void *)ok;
  if (status) *status = 0;
  return 0;
}

/* The same pair loop in C, through the exported symbols (run.mjs's "c-loop" row). Returns the
 * number of pairs that succeeded. noinline + volatile pointers keep the calls real. */
u64 stub_c_loop(u64 n, u64 bytes) {
  int (*volatile alloc)(u64 *, size_t, void *) = cuMemAllocAsync;
  int (*volatile release)(u64, void *) = cuMemFreeAsync;
  void *stream = (void *)0x55d0c0a0b0c0ULL;
  u64 ok = 0;
  for (u64 i = 0; i < n; i++) {
    u64 ptr;
    if (alloc(&ptr, bytes, stream) != 0) break;
    if (release(ptr, stream) != 0) break;
    ok++;
  }
  return ok;
}
