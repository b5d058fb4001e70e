// Which GPU a rank uses (FUNNEL_RANKS_PER_GPU, FUNNEL_GPU_MAP): prints one line with the
// node-local rank, the devices it sees and device 0's PCI bus id (the sim backend's
// device N is 0000:0N:00.0), after a round trip of data through device 0.
#include <cstdlib>
#include <cstring>

#include "check.h"

int main() {
  const char* l = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  const int local = l ? std::atoi(l) : -1;
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    std::printf("local %d: %s\n", local, cudaGetErrorName(e));
    return 0;
  }
  char bus[32] = {};
  CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, 0));
  int v = 42, back = 0;
  void* d = nullptr;
  CHECK(cudaMalloc(&d, sizeof v));
  CHECK(cudaMemcpy(d, &v, sizeof v, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(&back, d, sizeof v, cudaMemcpyDeviceToHost));
  CHECK(cudaFree(d));
  const cudaError_t past = cudaSetDevice(n);
  std::printf("local %d: %d device(s), device 0 at %s, data %s, device %d: %s\n", local, n, bus,
              back == 42 ? "ok" : "wrong", n, cudaGetErrorName(past));
  return 0;
}
