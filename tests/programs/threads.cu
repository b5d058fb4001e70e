// Several host threads copying at once through one client (pageable and pinned),
// each on its own stream, plus the per-thread default stream.
#include <cstring>
#include <thread>
#include <vector>

#include "check.h"

static bool work(int id) {
  const size_t n = (3u << 20) + static_cast<size_t>(id) * 4099;
  std::vector<unsigned char> a(n), b(n);
  for (size_t i = 0; i < n; ++i) a[i] = static_cast<unsigned char>(i * 7 + id);
  cudaStream_t s;
  if (cudaStreamCreate(&s) != cudaSuccess) return false;
  unsigned char *d = nullptr, *p = nullptr;
  bool ok = cudaMalloc(&d, n) == cudaSuccess && cudaMallocHost(&p, n) == cudaSuccess;
  for (int round = 0; ok && round < 4; ++round) {
    ok &= cudaMemcpyAsync(d, a.data(), n, cudaMemcpyHostToDevice, s) == cudaSuccess;
    ok &= cudaMemcpyAsync(p, d, n, cudaMemcpyDeviceToHost, s) == cudaSuccess;
    ok &= cudaStreamSynchronize(s) == cudaSuccess;
    ok &= std::memcmp(p, a.data(), n) == 0;
    ok &= cudaMemcpy(b.data(), d, n, cudaMemcpyDeviceToHost) == cudaSuccess;
    ok &= a == b;
    ok &= cudaMemsetAsync(d, id, n, cudaStreamPerThread) == cudaSuccess;
    ok &= cudaMemcpyAsync(b.data(), d, n, cudaMemcpyDeviceToHost, cudaStreamPerThread) == cudaSuccess;
    ok &= b[0] == static_cast<unsigned char>(id) && b[n - 1] == static_cast<unsigned char>(id);
  }
  ok &= cudaFree(d) == cudaSuccess && cudaFreeHost(p) == cudaSuccess && cudaStreamDestroy(s) == cudaSuccess;
  return ok;
}

int main() {
  const int kThreads = 8;
  std::vector<int> ok(kThreads, 0);
  std::vector<std::thread> ts;
  for (int i = 0; i < kThreads; ++i) ts.emplace_back([&, i] { ok[i] = work(i) ? 1 : 0; });
  for (auto& t : ts) t.join();
  for (int i = 0; i < kThreads; ++i) std::printf("thread %d: %s\n", i, ok[i] ? "ok" : "FAILED");
  std::printf("done\n");
  return 0;
}
