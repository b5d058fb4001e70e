// Declarations shared by rdc_main.cu and rdc_lib.cu (separate compilation).
#pragma once
#include <cuda_runtime.h>

extern __device__ float lib_factor;
extern __device__ int lib_calls;
__device__ float lib_transform(float x);
__global__ void lib_kernel(float* x, int n);
