/*
 * The C side of examples/accelerate.ts: a library that owns device memory and hands its
 * CUdeviceptr to JavaScript, as a Haskell (Accelerate) or C program would through an FFI.
 * It allocates `count` floats with cuMemAlloc in device 0's primary context (the context vram
 * and the CUDA runtime use), fills them 0, 1, 2, ... with cuMemcpyHtoD, and frees them itself.
 *
 * Built by test/kernels/kernels-examples.test.ts on a GPU machine:
 *   nvcc -shared -Xcompiler -fPIC -o libaccelerate.so examples/native/accelerate.c -lcuda
 */
#include <cuda.h>
#include <stdlib.h>

static CUdevice device;
static CUcontext context;

/* Returns the CUdeviceptr of `count` floats 0..count-1, or 0 (with *status set) on failure. */
unsigned long long accelerate_alloc(int count, int *status) {
  CUdeviceptr ptr = 0;
  float *host = NULL;
  CUresult r = cuInit(0);
  if (r == CUDA_SUCCESS) r = cuDeviceGet(&device, 0);
  if (r == CUDA_SUCCESS) r = cuDevicePrimaryCtxRetain(&context, device);
  if (r == CUDA_SUCCESS) r = cuCtxSetCurrent(context);
  if (r == CUDA_SUCCESS) r = cuMemAlloc(&ptr, (size_t)count * sizeof(float));
  if (r == CUDA_SUCCESS) {
    host = (float *)malloc((size_t)count * sizeof(float));
    if (host == NULL) r = CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (r == CUDA_SUCCESS) {
    for (int i = 0; i < count; i++) host[i] = (float)i;
    r = cuMemcpyHtoD(ptr, host, (size_t)count * sizeof(float));
  }
  free(host);
  if (r != CUDA_SUCCESS && ptr != 0) {
    cuMemFree(ptr);
    ptr = 0;
  }
  *status = (int)r;
  return (unsigned long long)ptr;
}

/* Frees what accelerate_alloc returned and releases the primary context it retained. */
int accelerate_free(unsigned long long ptr) {
  CUresult r = cuCtxSetCurrent(context);
  if (r == CUDA_SUCCESS) r = cuMemFree((CUdeviceptr)ptr);
  CUresult released = cuDevicePrimaryCtxRelease(device);
  return (int)(r != CUDA_SUCCESS ? r : released);
}
