// Runtime API with the STATIC cudart (nvcc's default, no -cudart flag): a kernel, cudaMalloc,
// cudaMemcpy, cudaMallocHost + cudaMemcpyAsync on a stream, an event, cudaDeviceSynchronize,
// and a launch on the default stream; results checked on the CPU.
// Build: nvcc static_runtime.cu     (links libcudart_static.a; the point of this program)
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "libcheck.h"

__global__ void scale_add(const int* x, int* y, int k, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = k * x[i] + y[i];
}

static void expect(bool ok, const char* what) { libcheck::expect("static_runtime", ok, what); }

int main() {
  int count = 0;
  CUDA_CHECK(cudaGetDeviceCount(&count));
  expect(count >= 1, "cudaGetDeviceCount >= 1");
  CUDA_CHECK(cudaSetDevice(0));

  const int n = 100000;
  const size_t bytes = n * sizeof(int);
  std::vector<int> x(n), y(n), out(n);
  for (int i = 0; i < n; ++i) { x[i] = i % 1000; y[i] = 7 - i % 13; }

  // Pageable copies + a launch on the default stream.
  int *dx, *dy;
  CUDA_CHECK(cudaMalloc(&dx, bytes));
  CUDA_CHECK(cudaMalloc(&dy, bytes));
  CUDA_CHECK(cudaMemcpy(dx, x.data(), bytes, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dy, y.data(), bytes, cudaMemcpyHostToDevice));
  scale_add<<<(n + 255) / 256, 256>>>(dx, dy, 3, n);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemcpy(out.data(), dy, bytes, cudaMemcpyDeviceToHost));
  bool ok = true;
  for (int i = 0; i < n; ++i) ok = ok && out[i] == 3 * x[i] + y[i];
  expect(ok, "kernel on the default stream, pageable cudaMemcpy");

  // Pinned memory, async copies and an event on a stream.
  int* pinned = nullptr;
  CUDA_CHECK(cudaMallocHost(&pinned, bytes));
  for (int i = 0; i < n; ++i) pinned[i] = y[i];
  cudaStream_t stream;
  cudaEvent_t done;
  CUDA_CHECK(cudaStreamCreate(&stream));
  CUDA_CHECK(cudaEventCreate(&done));
  CUDA_CHECK(cudaMemcpyAsync(dy, pinned, bytes, cudaMemcpyHostToDevice, stream));
  scale_add<<<(n + 127) / 128, 128, 0, stream>>>(dx, dy, -2, n);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaMemcpyAsync(pinned, dy, bytes, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaEventRecord(done, stream));
  CUDA_CHECK(cudaEventSynchronize(done));
  expect(cudaEventQuery(done) == cudaSuccess, "event recorded after the async copies completes");
  ok = true;
  for (int i = 0; i < n; ++i) ok = ok && pinned[i] == -2 * x[i] + y[i];
  expect(ok, "kernel on a stream, pinned cudaMemcpyAsync both ways");

  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaEventDestroy(done));
  CUDA_CHECK(cudaStreamDestroy(stream));
  CUDA_CHECK(cudaFreeHost(pinned));
  CUDA_CHECK(cudaFree(dx));
  CUDA_CHECK(cudaFree(dy));
  std::printf("static_runtime: all ok\n");
  return 0;
}
