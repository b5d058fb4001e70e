// Stream-ordered allocation: cudaMallocAsync / cudaFreeAsync interleaved with kernels on two
// streams (allocation reused across streams through an event), the default memory pool's
// release threshold, cudaMallocFromPoolAsync, and many small allocations in a loop.
#include <cstdint>
#include <vector>

#include "compat.h"

__global__ void fill(int* d, int n, int v) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) d[i] = v + i;
}
__global__ void sum(const int* d, int n, unsigned long long* out) {
  unsigned long long s = 0;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) s += d[i];
  atomicAdd(out, s);
}

int main() {
  int supported = 0;
  CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, 0));
  std::printf("memory pools supported: %s\n", supported ? "yes" : "no");
  cudaStream_t a, b;
  CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  cudaMemPool_t pool;
  CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
  uint64_t threshold = 256ull << 20;
  CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  uint64_t back = 0;
  CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &back));
  std::printf("release threshold %llu MiB\n", static_cast<unsigned long long>(back >> 20));

  unsigned long long* dsum;
  CHECK(cudaMallocAsync(&dsum, sizeof *dsum, a));
  unsigned long long total = 0, want = 0;
  for (int r = 0; r < 50; ++r) {
    const int n = 1000 + r * 4096;
    int* d;
    CHECK(cudaMallocAsync(&d, n * sizeof(int), a));
    CHECK(cudaMemsetAsync(dsum, 0, sizeof *dsum, a));
    fill<<<32, 256, 0, a>>>(d, n, r);
    sum<<<32, 256, 0, a>>>(d, n, dsum);
    unsigned long long s = 0;
    CHECK(cudaMemcpyAsync(&s, dsum, sizeof s, cudaMemcpyDeviceToHost, a));
    CHECK(cudaFreeAsync(d, a));
    CHECK(cudaStreamSynchronize(a));
    total += s;
    for (int i = 0; i < n; ++i) want += static_cast<unsigned long long>(r + i);
  }
  std::printf("50 allocate/use/free rounds: total %llu (cpu %llu)\n", total, want);
  EXPECT(total == want, "rounds");

  // Allocated on a, used on b after an event, freed on b.
  cudaEvent_t e;
  CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  const int n = 1 << 20;
  int* shared_buf;
  CHECK(cudaMallocAsync(&shared_buf, n * sizeof(int), a));
  fill<<<128, 256, 0, a>>>(shared_buf, n, 7);
  CHECK(cudaEventRecord(e, a));
  CHECK(cudaStreamWaitEvent(b, e, 0));
  unsigned long long* bsum;
  CHECK(cudaMallocFromPoolAsync(&bsum, sizeof *bsum, pool, b));
  CHECK(cudaMemsetAsync(bsum, 0, sizeof *bsum, b));
  sum<<<128, 256, 0, b>>>(shared_buf, n, bsum);
  unsigned long long s = 0;
  CHECK(cudaMemcpyAsync(&s, bsum, sizeof s, cudaMemcpyDeviceToHost, b));
  CHECK(cudaFreeAsync(shared_buf, b));
  CHECK(cudaFreeAsync(bsum, b));
  CHECK(cudaStreamSynchronize(b));
  unsigned long long w = 0;
  for (int i = 0; i < n; ++i) w += 7ull + i;
  std::printf("cross-stream allocation: sum %llu (cpu %llu)\n", s, w);
  EXPECT(s == w, "cross-stream");
  CHECK(cudaFreeAsync(dsum, a));
  CHECK(cudaStreamSynchronize(a));
  CHECK(cudaMemPoolTrimTo(pool, 0));
  CHECK(cudaEventDestroy(e));
  CHECK(cudaStreamDestroy(a));
  CHECK(cudaStreamDestroy(b));
  return finish();
}
