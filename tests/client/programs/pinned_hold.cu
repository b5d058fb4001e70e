// pinned_hold COUNT BYTES: allocates COUNT pinned buffers of BYTES each with cudaMallocHost,
// writes each and copies the first to the device and back, prints "held COUNT", then holds
// them until its standard input closes, frees them and prints "freed" (tests/client/hardening.sh).
// The first failed call prints "error <name>: <text>" and exits 3.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cuda_runtime.h>

static void check(cudaError_t e, const char* what, long i) {
  if (e == cudaSuccess) return;
  std::printf("error %s: %s (%s %ld)\n", cudaGetErrorName(e), cudaGetErrorString(e), what, i);
  std::fflush(stdout);
  std::exit(3);
}

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  const long count = std::atol(argv[1]);
  const size_t bytes = std::strtoull(argv[2], nullptr, 10);
  std::vector<unsigned char*> held;
  for (long i = 0; i < count; ++i) {
    void* p = nullptr;
    check(cudaMallocHost(&p, bytes), "cudaMallocHost", i);
    std::memset(p, static_cast<int>(i & 0xff), bytes);
    held.push_back(static_cast<unsigned char*>(p));
  }
  void* d = nullptr;
  check(cudaMalloc(&d, bytes), "cudaMalloc", 0);
  check(cudaMemcpy(d, held[0], bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D", 0);
  std::memset(held[0], 0xab, bytes);
  check(cudaMemcpy(held[0], d, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H", 0);
  if (held[0][bytes - 1] != 0) {
    std::printf("error: the copy came back wrong\n");
    return 4;
  }
  std::printf("held %ld\n", count);
  std::fflush(stdout);
  while (std::getchar() != EOF) {
  }
  for (auto* p : held) check(cudaFreeHost(p), "cudaFreeHost", 0);
  check(cudaFree(d), "cudaFree", 0);
  std::printf("freed\n");
  return 0;
}
