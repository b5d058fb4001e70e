// A client for the funnelctl tests (tests/client/funnelctl_*.sh): it allocates 64 MiB,
// copies 1 MiB each way, launches a kernel, prints "ready", then keeps calling the runtime
// (a copy and a synchronize every 20 ms) for CTL_HOLD_MS milliseconds and prints "done".
// The first failed call prints "error <name>: <text>" and exits 3.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime.h>

static void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::printf("error %s: %s (%s)\n", cudaGetErrorName(e), cudaGetErrorString(e), what);
  std::fflush(stdout);
  std::exit(3);
}

__global__ void fill(unsigned* p, unsigned v) { p[blockIdx.x * blockDim.x + threadIdx.x] = v; }

int main() {
  constexpr size_t MiB = size_t{1} << 20;
  unsigned* d = nullptr;
  check(cudaMalloc(&d, 64 * MiB), "cudaMalloc");
  std::vector<unsigned> h(MiB / sizeof(unsigned), 7);
  check(cudaMemcpy(d, h.data(), MiB, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  check(cudaMemcpy(h.data(), d, MiB, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  fill<<<4, 64>>>(d, 1);
  check(cudaGetLastError(), "launch");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  std::printf("ready\n");
  std::fflush(stdout);
  const char* hold = std::getenv("CTL_HOLD_MS");
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(hold ? std::atoi(hold) : 0);
  while (std::chrono::steady_clock::now() < until) {
    check(cudaMemcpy(d, h.data(), 4096, cudaMemcpyHostToDevice), "cudaMemcpy in the loop");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize in the loop");
    usleep(20000);
  }
  check(cudaFree(d), "cudaFree");
  std::printf("done\n");
  return 0;
}
