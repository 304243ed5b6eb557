/* Shared by the reference programs: checked driver calls, the host clock, and the median. */
#ifndef VRAM_BENCH_COMMON_H
#define VRAM_BENCH_COMMON_H

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Every CUresult is checked: a failing call prints its name and the driver's error name, and exits. */
#define CHECK(call)                                                                   \
  do {                                                                                \
    CUresult check_result_ = (call);                                                  \
    if (check_result_ != CUDA_SUCCESS) {                                              \
      const char *check_name_ = "unknown";                                            \
      cuGetErrorName(check_result_, &check_name_);                                    \
      fprintf(stderr, "%s:%d: %s failed: %s (%d)\n", __FILE__, __LINE__, #call,       \
              check_name_, (int)check_result_);                                       \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)

static inline double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Median of n samples (sorts them in place). */
static inline double median(double *samples, int n) {
  qsort(samples, (size_t)n, sizeof(double), compare_doubles);
  return n % 2 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2.0;
}

/* Initialises the driver and makes device 0's primary context current (as vram does). */
static inline CUdevice init_primary_context(void) {
  CUdevice dev;
  CUcontext ctx;
  CHECK(cuInit(0));
  CHECK(cuDeviceGet(&dev, 0));
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  return dev;
}

/*
 * Device memory as PoolResource makes it (pinned, on `dev`), read-write access for `dev`, and the
 * allocation granularity (one page): what the virtual memory programs (vmm_*.c) map.
 */
static inline size_t vmm_setup(CUdevice dev, CUmemAllocationProp *prop, CUmemAccessDesc *access) {
  size_t page;
  memset(prop, 0, sizeof *prop);
  prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop->location.id = dev;
  CHECK(cuMemGetAllocationGranularity(&page, prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  memset(access, 0, sizeof *access);
  access->location = prop->location;
  access->flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return page;
}

#endif
