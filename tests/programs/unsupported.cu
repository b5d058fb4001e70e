// funnel-only: what funnel does not support yet must fail loudly, never silently succeed.
// A runtime call without an implementation returns cudaErrorNotSupported (and names itself
// once on stderr); so does a kernel launch until kernels go through the server.
// Natively both succeed, so tests/gpu/run.sh does not compare this program with a native run.
#include "check.h"

__global__ void kernel(int* p) { p[0] = 1; }

int main() {
  int* d = nullptr;
  CHECK(cudaMalloc(&d, sizeof(int)));
  cudaGraph_t g;
  std::printf("unsupported: %s\n", cudaGetErrorName(cudaGraphCreate(&g, 0)));
  std::printf("unsupported again: %s\n", cudaGetErrorName(cudaGraphCreate(&g, 0)));
  kernel<<<1, 1>>>(d);
  std::printf("launch: %s\n", cudaGetErrorName(cudaGetLastError()));
  CHECK(cudaFree(d));
  CHECK(cudaDeviceSynchronize());
  std::printf("done\n");
  return 0;
}
