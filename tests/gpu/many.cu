// One of many clients (tests/gpu/many.sh): attaches, runs a kernel that writes a value
// derived from this process's pid, checks it, then stays attached until MANY_GO (a file)
// exists, so that every client is attached at once; prints "ok <pid>" or the error.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

__global__ void stamp(int* out, int v) { out[threadIdx.x] = v + static_cast<int>(threadIdx.x); }

int main() {
  const int v = static_cast<int>(getpid());
  int* d = nullptr;
  cudaError_t e = cudaMalloc(&d, 32 * sizeof(int));
  if (e != cudaSuccess) {
    std::printf("error %s\n", cudaGetErrorName(e));
    return 1;
  }
  stamp<<<1, 32>>>(d, v);
  int h[32] = {};
  e = cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  for (int i = 0; e == cudaSuccess && i < 32; ++i)
    if (h[i] != v + i) {
      std::printf("wrong value at %d\n", i);
      return 1;
    }
  if (e != cudaSuccess) {
    std::printf("error %s\n", cudaGetErrorName(e));
    return 1;
  }
  std::printf("ready %d\n", v);
  std::fflush(stdout);
  const char* go = std::getenv("MANY_GO");
  for (int i = 0; go != nullptr && i < 1200 && access(go, F_OK) != 0; ++i) usleep(100000);
  std::printf("ok %d\n", v);
  return cudaFree(d) == cudaSuccess ? 0 : 1;
}
