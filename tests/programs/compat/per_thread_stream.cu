// Built with --default-stream per-thread: each of 6 host threads launches kernels and async
// copies on "the default stream", which is its own per-thread stream; cudaStreamSynchronize(0)
// and cudaStreamPerThread, and the threads' work never mixes.
#include <thread>
#include <vector>

#include "compat.h"

#ifndef CUDA_API_PER_THREAD_DEFAULT_STREAM
#error "build with nvcc --default-stream per-thread"
#endif

__global__ void iota_scaled(int* d, int n, int k) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) d[i] = i * k;
}
__global__ void add_one(int* d, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) d[i] += 1;
}

int main() {
  const int kThreads = 6, n = 1 << 20, rounds = 20;
  std::vector<long long> result(kThreads, -1);
  std::vector<int> bad(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      int* d;
      int* h;
      CHECK(cudaMalloc(&d, n * sizeof(int)));
      CHECK(cudaMallocHost(&h, n * sizeof(int)));
      long long total = 0;
      for (int r = 0; r < rounds; ++r) {
        iota_scaled<<<64, 256>>>(d, n, t + 1);  // default stream = this thread's stream
        for (int k = 0; k < r % 4; ++k) add_one<<<64, 256, 0, cudaStreamPerThread>>>(d, n);
        CHECK(cudaMemcpyAsync(h, d, n * sizeof(int), cudaMemcpyDeviceToHost, 0));
        CHECK(cudaStreamSynchronize(0));
        for (int i = 0; i < n; i += 997) {
          bad[t] += h[i] != i * (t + 1) + r % 4;
          total += h[i];
        }
      }
      result[t] = total;
      CHECK(cudaFreeHost(h));
      CHECK(cudaFree(d));
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    std::printf("thread %d: mismatches %d, total %lld\n", t, bad[t], result[t]);
    EXPECT(bad[t] == 0, "thread %d", t);
  }
  return finish();
}
