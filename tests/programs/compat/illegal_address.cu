// A kernel fault: a kernel writes through an invalid device pointer ((int*)0x10). The launch
// itself succeeds; the error arrives at the next synchronising call (cudaDeviceSynchronize ->
// cudaErrorIllegalAddress) and is sticky: later cudaMalloc and cudaMemcpy fail too. PASS here
// means "the fault was reported as CUDA reports it", exit 0. `illegal_address [delay_ms]`: sleep
// that long before the faulting launch (compat.sh's fault-isolation scenario uses it so that
// the fault happens while other clients of the same server are running).
#include <chrono>
#include <thread>

#include "compat.h"

__global__ void fill(int* p, int n, int v) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}

__global__ void poke(int* p, int v) { *reinterpret_cast<volatile int*>(p) = v; }

int main(int argc, char** argv) {
  const int delay_ms = int_arg(argc, argv, 1, 0);
  const int n = 1024;
  int* d;
  CHECK(cudaMalloc(&d, n * sizeof(int)));
  fill<<<(n + 255) / 256, 256>>>(d, n, 7);
  CHECK(cudaGetLastError());
  int first = 0;
  CHECK(cudaMemcpy(&first, d, sizeof first, cudaMemcpyDeviceToHost));
  std::printf("before the fault: d[0] = %d\n", first);
  EXPECT(first == 7, "fill");
  if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));

  poke<<<1, 1>>>(reinterpret_cast<int*>(0x10), 1);
  const cudaError_t launch = cudaGetLastError();
  std::printf("launch: %s\n", cudaGetErrorName(launch));
  const cudaError_t sync = cudaDeviceSynchronize();
  std::printf("cudaDeviceSynchronize: %s\n", cudaGetErrorName(sync));
  // Sticky: the context is unusable from here on.
  void* p = nullptr;
  const cudaError_t alloc = cudaMalloc(&p, 4096);
  std::printf("cudaMalloc after the fault: %s\n", cudaGetErrorName(alloc));
  int back = 0;
  const cudaError_t copy = cudaMemcpy(&back, d, sizeof back, cudaMemcpyDeviceToHost);
  std::printf("cudaMemcpy after the fault: %s\n", cudaGetErrorName(copy));
  const cudaError_t sync2 = cudaDeviceSynchronize();
  std::printf("cudaDeviceSynchronize again: %s\n", cudaGetErrorName(sync2));

  EXPECT(launch == cudaSuccess, "the launch itself");
  EXPECT(sync == cudaErrorIllegalAddress, "synchronize");
  EXPECT(alloc != cudaSuccess, "cudaMalloc after a sticky error");
  EXPECT(copy != cudaSuccess, "cudaMemcpy after a sticky error");
  EXPECT(sync2 == cudaErrorIllegalAddress, "synchronize again");
  // No finish(): its cudaDeviceSynchronize would fail, as it should.
  const bool ok = compat_failures() == 0;
  std::printf("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
