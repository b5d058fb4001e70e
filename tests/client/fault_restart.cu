// The client of tests/client/fault_restart.sh: one process per role, on one device, for
// the sim backend and a GPU alike.
//   fault_restart fault DEVICE       launches fault_here (a store to an illegal address on
//                                    a GPU; FUNNEL_SIM_FAULT_KERNEL names it for the sim);
//                                    prints what synchronising says
//   fault_restart work DEVICE FILE   copies round trips (and launches work_here) until
//                                    FILE exists; prints "ready" after the first one
//   fault_restart once DEVICE        one round trip and a launch
// Every round trip is checked; a failure prints FAIL and exits 1.
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "check.h"

__global__ void fault_here() { *reinterpret_cast<volatile int*>(uintptr_t{8}) = 1; }
// Stores what it loads: the bytes stay as copied on a GPU and on the sim (which runs no code).
__global__ void work_here(unsigned char* p) {
  volatile unsigned char* q = p;
  q[threadIdx.x] = q[threadIdx.x];
}

namespace {

bool round_trip(void* d, size_t n, unsigned seed) {
  std::vector<unsigned char> in(n), out(n, 0);
  for (size_t i = 0; i < n; ++i) in[i] = static_cast<unsigned char>(i * 13 + seed);
  CHECK(cudaMemcpy(d, in.data(), n, cudaMemcpyHostToDevice));
  work_here<<<1, 32>>>(static_cast<unsigned char*>(d));
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(out.data(), d, n, cudaMemcpyDeviceToHost));
  return std::memcmp(in.data(), out.data(), n) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::printf("usage: fault_restart fault|work|once DEVICE [FILE]\n");
    return 2;
  }
  const std::string mode = argv[1];
  const int device = std::atoi(argv[2]);
  CHECK(cudaSetDevice(device));
  if (mode == "fault") {
    fault_here<<<1, 1>>>();
    std::printf("launch: %s\n", cudaGetErrorName(cudaGetLastError()));
    std::printf("synchronize: %s\n", cudaGetErrorName(cudaDeviceSynchronize()));
    void* p = nullptr;
    std::printf("next call: %s\n", cudaGetErrorName(cudaMalloc(&p, 256)));
    return 0;
  }
  const size_t n = 1u << 20;
  void* d = nullptr;
  CHECK(cudaMalloc(&d, n));
  unsigned rounds = 0;
  for (;;) {
    if (!round_trip(d, n, rounds)) {
      std::printf("FAIL: round trip %u on device %d returned other bytes\n", rounds, device);
      return 1;
    }
    if (++rounds == 1) {
      std::printf("ready\n");
      std::fflush(stdout);
    }
    if (mode == "once" || (mode == "work" && (argc < 4 || ::access(argv[3], F_OK) == 0))) break;
    ::usleep(2000);
  }
  // Pinned memory and a stream late in the run: calls for no particular device too.
  void* pinned = nullptr;
  CHECK(cudaMallocHost(&pinned, 4096));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  CHECK(cudaMemcpyAsync(pinned, d, 4096, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFreeHost(pinned));
  CHECK(cudaFree(d));
  std::printf("ok: device %d, %s\n", device, rounds > 1 ? "many round trips" : "one round trip");
  return 0;
}
