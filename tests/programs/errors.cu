// Errors through funnel: bad pointers, error strings, per-thread last error.
// (What funnel does not support yet is in unsupported.cu.)
#include <thread>

#include "check.h"

int main() {
  std::printf("string: %s / %s\n", cudaGetErrorString(cudaErrorInvalidValue), cudaGetErrorName(cudaErrorInvalidValue));
  std::printf("string: %s / %s\n", cudaGetErrorString(cudaErrorMemoryAllocation),
              cudaGetErrorName(cudaErrorMemoryAllocation));
  std::printf("unknown code: %s\n", cudaGetErrorName(static_cast<cudaError_t>(12345)));

  int* d = nullptr;
  CHECK(cudaMalloc(&d, 64));
  int h[32] = {};
  int bogus = 0;
  std::printf("copy past end: %s\n", cudaGetErrorName(cudaMemcpy(d, h, 128, cudaMemcpyHostToDevice)));
  std::printf("last error: %s\n", cudaGetErrorName(cudaGetLastError()));
  std::printf("last error reset: %s\n", cudaGetErrorName(cudaGetLastError()));
  std::printf("copy to host ptr as device: %s\n",
              cudaGetErrorName(cudaMemcpy(&bogus, h, 4, cudaMemcpyHostToDevice)));
  std::printf("free bad pointer: %s\n", cudaGetErrorName(cudaFree(&bogus)));
  std::printf("memset bad pointer: %s\n", cudaGetErrorName(cudaMemset(&bogus, 0, 4)));
  std::printf("bad direction: %s\n",
              cudaGetErrorName(cudaMemcpy(d, h, 4, static_cast<cudaMemcpyKind>(9))));
  std::printf("bad device: %s\n", cudaGetErrorName(cudaSetDevice(99)));
  std::printf("peek: %s\n", cudaGetErrorName(cudaPeekAtLastError()));
  std::printf("peek again: %s\n", cudaGetErrorName(cudaPeekAtLastError()));
  (void)cudaGetLastError();

  // The last error is per host thread.
  cudaError_t other = cudaSuccess;
  std::thread t([&] {
    (void)cudaFree(&bogus);
    other = cudaGetLastError();
  });
  t.join();
  std::printf("other thread's error: %s, mine: %s\n", cudaGetErrorName(other), cudaGetErrorName(cudaGetLastError()));

  CHECK(cudaFree(d));
  CHECK(cudaDeviceSynchronize());
  std::printf("done\n");
  return 0;
}
