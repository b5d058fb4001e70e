// The "library" half of the separate-compilation program (see rdc_main.cu).
#include "rdc_lib.h"

__device__ float lib_factor = 1.0f;
__device__ int lib_calls = 0;

__device__ float lib_transform(float x) { return x * lib_factor + 1.0f; }

__global__ void lib_kernel(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    x[i] = lib_transform(x[i]);
    atomicAdd(&lib_calls, 1);
  }
}
