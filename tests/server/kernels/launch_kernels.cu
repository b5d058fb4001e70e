// Kernels for the server's kernel tests (tests/server/kernels_test.cpp): built with nvcc
// into a fat binary (nvcc -fatbin) that the test uploads as a client would.  The sim
// backend never runs them; the bodies only keep parameters and variables alive.
#include "launch_types.h"

using server_test::Aligned8;
using server_test::Block4k;
using server_test::Padded;

__device__ int server_counter[16];
__constant__ float server_table[32] = {0.5f, 1.5f, 2.5f, 3.5f};

extern "C" __global__ void mixed(char c, short s, int i, double d, int* p, Padded pad, Aligned8 a8, char tail) {
  __shared__ int staged[256];
  staged[threadIdx.x] = c + s + i + static_cast<int>(d) + pad.c + pad.i + a8.a + a8.b + tail +
                        static_cast<int>(server_table[i & 31]);
  __syncthreads();
  p[threadIdx.x] = staged[255 - threadIdx.x] + server_counter[i & 15];
}

extern "C" __global__ void big_param(char c, Block4k block, int n, unsigned char* out) { out[n] = block.bytes[n] + c; }

extern "C" __global__ void no_params() {}
