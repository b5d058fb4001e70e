// Kernels with assorted parameter lists for funnel_fatbin_tests.  Compiled with nvcc
// to an object file; the test reads its .nv_fatbin section and checks the parameter
// layouts recorded in every cubin.  The bodies only keep the parameters alive.
#include "kernel_types.h"

using fatbin_test::Aligned16;
using fatbin_test::Aligned8;
using fatbin_test::Big;
using fatbin_test::Huge;
using fatbin_test::Padded;

extern "C" __global__ void no_params() {}

extern "C" __global__ void scalars(char c, short s, int i, long long ll, float f, double d, int* out) {
  *out = c + s + i + static_cast<int>(ll) + static_cast<int>(f) + static_cast<int>(d);
}

extern "C" __global__ void mixed_structs(char c, Padded p, short s, Aligned8 a8, char c2, Aligned16 a16,
                                         double2 d2, float4 f4, float* out) {
  *out = static_cast<float>(c + p.c + p.d + p.i + s + a8.a + a8.b + c2 + a16.x + d2.y + f4.w);
}

extern "C" __global__ void big_struct(int n, Big big, char tail, unsigned char* out) {
  out[0] = static_cast<unsigned char>(big.bytes[n] + tail);
}

// The buffer ends with the char: 5 bytes, not rounded up to the int's alignment.
extern "C" __global__ void tail_char(int i, char c) { (void)i; (void)c; }

extern "C" __global__ void huge_struct(char c, Huge huge, int* out) { *out = huge.bytes[c]; }

extern "C" __global__ void many_scalars(int a0, char a1, double a2, short a3, int a4, float a5, long long a6,
                                        char a7, int a8, double a9, char a10, short a11, int a12, float a13,
                                        double a14, char a15, int a16, long long a17, short a18, int a19,
                                        char a20, int a21, float a22, double a23, int* a24) {
  *a24 = a0 + a1 + static_cast<int>(a2) + a3 + a4 + static_cast<int>(a5) + static_cast<int>(a6) + a7 + a8 +
         static_cast<int>(a9) + a10 + a11 + a12 + static_cast<int>(a13) + static_cast<int>(a14) + a15 + a16 +
         static_cast<int>(a17) + a18 + a19 + a20 + a21 + static_cast<int>(a22) + static_cast<int>(a23);
}

template <typename T>
__global__ void templated(T value, char c, T* out) {
  *out = value + static_cast<T>(c);
}
template __global__ void templated<double>(double, char, double*);
template __global__ void templated<short>(short, char, short*);

namespace fatbin_test {
__global__ void in_namespace(Padded p, int* out) { *out = p.c + p.i; }
}  // namespace fatbin_test

// Not extern "C": a mangled name without a namespace.
__global__ void unused_param(int, const void* p) { (void)p; }

// Variables (funnel::fatbin::globals_of_cubin) and resources (registers, static shared memory).
__device__ int fatbin_counter[16];
__constant__ float fatbin_table[8] = {1, 2, 3, 4, 5, 6, 7, 8};
namespace fatbin_test {
__device__ double ns_value = 2.5;
}  // namespace fatbin_test

extern "C" __global__ void uses_globals(int i, int* out) {
  __shared__ int staged[64];
  staged[threadIdx.x] = fatbin_counter[i] + static_cast<int>(fatbin_table[i]) + static_cast<int>(fatbin_test::ns_value);
  __syncthreads();
  *out = staged[63 - threadIdx.x];
}
