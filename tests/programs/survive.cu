// Keeps copying until a call fails (the server was killed), then prints the error.
// The test measures how long after the kill the error came.
#include <vector>

#include "check.h"

int main() {
  const size_t n = 4u << 20;
  std::vector<unsigned char> h(n, 1);
  void* d = nullptr;
  CHECK(cudaMalloc(&d, n));
  std::printf("ready\n");
  std::fflush(stdout);
  for (;;) {
    cudaError_t e = cudaMemcpy(d, h.data(), n, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaMemcpy(h.data(), d, n, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
      std::printf("error: %s\n", cudaGetErrorName(e));
      std::printf("next call: %s\n", cudaGetErrorName(cudaDeviceSynchronize()));
      return 0;
    }
  }
}
