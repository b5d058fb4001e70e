// Zero-copy kernels on mapped pinned memory (issue 30): cudaHostAlloc(cudaHostAllocMapped) and
// cuMemHostAlloc(DEVICEMAP) buffers read and written by kernels through the pointer
// cudaHostGetDevicePointer / cuMemHostGetDevicePointer gives and, as unified addressing allows,
// through the host pointer itself; a kernel's writes seen by the host after a synchronisation,
// the host's writes seen by the next kernel; results checked on the CPU.
// Build: nvcc -cudart shared zero_copy.cu -lcuda   (at build time: -L/usr/local/cuda/lib64/stubs)
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>

#include "libcheck.h"

__global__ void square_plus(const int* in, int* out, int n, int add) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * in[i] + add;
}

static void expect(bool ok, const char* what) { libcheck::expect("zero_copy", ok, what); }

static bool check(const int* in, const int* out, int n, int add) {
  for (int i = 0; i < n; ++i)
    if (out[i] != in[i] * in[i] + add) return false;
  return true;
}

int main() {
  const int n = 1 << 20;
  int *in = nullptr, *out = nullptr;
  CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&in), n * sizeof(int), cudaHostAllocMapped));
  CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&out), n * sizeof(int), cudaHostAllocMapped));
  for (int i = 0; i < n; ++i) in[i] = i % 1000 - 500;
  int *din = nullptr, *dout = nullptr;
  CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&din), in, 0));
  CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dout), out, 0));
  expect(din == in && dout == out, "cudaHostGetDevicePointer gives the host pointer (unified addressing)");
  square_plus<<<(n + 255) / 256, 256>>>(din, dout, n, 1);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
  expect(check(in, out, n, 1), "a kernel reads and writes mapped pinned memory (device pointers)");
  for (int i = 0; i < n; i += 7) in[i] = -in[i] + 3;  // the host changes the input in place
  square_plus<<<(n + 255) / 256, 256>>>(in, out, n, 2);  // the host pointers themselves
  CUDA_CHECK(cudaDeviceSynchronize());
  expect(check(in, out, n, 2), "the host's writes seen by the next kernel, launched on the host pointers");
  // On a stream, with an offset into the buffer.
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  square_plus<<<(n / 2 + 255) / 256, 256, 0, s>>>(din + n / 2, dout + n / 2, n / 2, 3);
  CUDA_CHECK(cudaStreamSynchronize(s));
  expect(check(in + n / 2, out + n / 2, n / 2, 3) && check(in, out, n / 2, 2),
         "a kernel on a stream over the second half (an offset device pointer)");
  CUDA_CHECK(cudaStreamDestroy(s));
  // The driver API: cuMemHostAlloc(DEVICEMAP) and cuMemHostGetDevicePointer.
  int* h = nullptr;
  CU_CHECK(cuMemHostAlloc(reinterpret_cast<void**>(&h), n * sizeof(int), CU_MEMHOSTALLOC_DEVICEMAP));
  CUdeviceptr dh = 0;
  CU_CHECK(cuMemHostGetDevicePointer(&dh, h + 10, 0));
  expect(dh == reinterpret_cast<CUdeviceptr>(h + 10), "cuMemHostGetDevicePointer of an offset (unified addressing)");
  square_plus<<<(n + 255) / 256, 256>>>(in, h, n, 4);
  CUDA_CHECK(cudaDeviceSynchronize());
  expect(check(in, h, n, 4), "a kernel writes cuMemHostAlloc memory");
  CU_CHECK(cuMemFreeHost(h));
  CUDA_CHECK(cudaFreeHost(in));
  CUDA_CHECK(cudaFreeHost(out));
  std::printf("zero_copy: all ok\n");
  return 0;
}
