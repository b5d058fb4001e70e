// Event timing: cudaEventElapsedTime around kernels and copies is positive and ordered
// (only that is printed: the numbers themselves differ run to run); blocking-sync events;
// cudaEventQuery while a long kernel runs is not an error other than cudaErrorNotReady.
#include "compat.h"

__global__ void spin(long long cycles, int* out) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
  if (threadIdx.x == 0) atomicAdd(out, 1);
}

int main() {
  int* d;
  CHECK(cudaMalloc(&d, sizeof(int)));
  CHECK(cudaMemset(d, 0, sizeof(int)));
  cudaEvent_t e[4], blocking;
  for (auto& x : e) CHECK(cudaEventCreate(&x));
  CHECK(cudaEventCreateWithFlags(&blocking, cudaEventBlockingSync));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  CHECK(cudaEventRecord(e[0], s));
  spin<<<8, 64, 0, s>>>(2'000'000, d);  // ~1 ms
  CHECK(cudaEventRecord(e[1], s));
  spin<<<8, 64, 0, s>>>(20'000'000, d);  // ~10 ms
  CHECK(cudaEventRecord(e[2], s));
  const cudaError_t q = cudaEventQuery(e[2]);
  std::printf("query while running: %s\n",
              q == cudaSuccess || q == cudaErrorNotReady ? "success or not-ready" : cudaGetErrorName(q));
  EXPECT(q == cudaSuccess || q == cudaErrorNotReady, "query");
  CHECK(cudaEventRecord(blocking, s));
  CHECK(cudaEventSynchronize(blocking));
  float t01 = 0, t12 = 0, t02 = 0;
  CHECK(cudaEventElapsedTime(&t01, e[0], e[1]));
  CHECK(cudaEventElapsedTime(&t12, e[1], e[2]));
  CHECK(cudaEventElapsedTime(&t02, e[0], e[2]));
  std::printf("short kernel > 0: %s\n", t01 > 0 ? "yes" : "no");
  std::printf("long kernel > 0: %s\n", t12 > 0 ? "yes" : "no");
  std::printf("whole span >= parts: %s\n", t02 >= t01 && t02 >= t12 ? "yes" : "no");
  EXPECT(t01 > 0 && t12 > 0 && t02 >= t01 && t02 >= t12, "elapsed %f %f %f", t01, t12, t02);
  // Copy timing on the legacy stream.
  void* big;
  CHECK(cudaMalloc(&big, 64 << 20));
  CHECK(cudaEventRecord(e[3]));
  CHECK(cudaMemset(big, 1, 64 << 20));
  CHECK(cudaEventRecord(e[0]));
  CHECK(cudaEventSynchronize(e[0]));
  float tm = 0;
  CHECK(cudaEventElapsedTime(&tm, e[3], e[0]));
  std::printf("memset time > 0: %s\n", tm > 0 ? "yes" : "no");
  EXPECT(tm > 0, "memset time");
  // A timing-disabled event cannot be timed.
  cudaEvent_t nt;
  CHECK(cudaEventCreateWithFlags(&nt, cudaEventDisableTiming));
  CHECK(cudaEventRecord(nt, s));
  CHECK(cudaEventSynchronize(nt));
  std::printf("elapsed with a timing-disabled event: %s\n", cudaGetErrorName(cudaEventElapsedTime(&tm, e[0], nt)));
  // That error is also this thread's last error (not sticky): read and clear it.
  const cudaError_t last = cudaGetLastError();
  std::printf("last error after it: %s, then: %s\n", cudaGetErrorName(last), cudaGetErrorName(cudaGetLastError()));
  int runs = 0;
  CHECK(cudaMemcpy(&runs, d, sizeof runs, cudaMemcpyDeviceToHost));
  std::printf("blocks run: %d\n", runs);
  EXPECT(runs == 16, "blocks");
  for (auto& x : e) CHECK(cudaEventDestroy(x));
  CHECK(cudaEventDestroy(blocking));
  CHECK(cudaEventDestroy(nt));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(d));
  CHECK(cudaFree(big));
  return finish();
}
