// CUB device-wide algorithms with the two-call temporary-storage idiom: DeviceReduce::Sum and
// ::Max, DeviceScan::ExclusiveSum and ::InclusiveSum, DeviceSelect::If, on an explicit stream,
// temporary storage from cudaMallocAsync; plus a BlockReduce inside a user kernel. (Radix sort:
// thrust_basic's sort_by_key runs CUB's.)
#include <cub/block/block_reduce.cuh>
#include <cub/device/device_reduce.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>

#include <algorithm>
#include <numeric>
#include <vector>

#include "compat.h"

struct Small {
  __host__ __device__ bool operator()(int v) const { return v < 1000; }
};

__global__ void block_reduce(const int* in, int* out) {
  using BR = cub::BlockReduce<int, 256>;
  __shared__ typename BR::TempStorage tmp;
  const int v = in[blockIdx.x * 256 + threadIdx.x];
  const int s = BR(tmp).Sum(v);
  if (threadIdx.x == 0) out[blockIdx.x] = s;
}

template <typename F>
void with_temp(F f, cudaStream_t s) {
  size_t bytes = 0;
  CHECK(f(nullptr, bytes));
  void* tmp;
  CHECK(cudaMallocAsync(&tmp, bytes, s));
  CHECK(f(tmp, bytes));
  CHECK(cudaFreeAsync(tmp, s));
}

int main() {
  const int n = 1'000'000;
  std::vector<int> h(n);
  for (int i = 0; i < n; ++i) h[i] = static_cast<int>(hash32(i) % 100000);
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int *in, *out, *scalars;
  CHECK(cudaMalloc(&in, n * sizeof(int)));
  CHECK(cudaMalloc(&out, n * sizeof(int)));
  CHECK(cudaMalloc(&scalars, 4 * sizeof(int)));
  CHECK(cudaMemcpyAsync(in, h.data(), n * sizeof(int), cudaMemcpyHostToDevice, s));

  long long* lsum;
  CHECK(cudaMalloc(&lsum, sizeof(long long)));
  with_temp([&](void* t, size_t& b) { return cub::DeviceReduce::Sum(t, b, in, lsum, n, s); }, s);
  with_temp([&](void* t, size_t& b) { return cub::DeviceReduce::Max(t, b, in, scalars, n, s); }, s);
  with_temp([&](void* t, size_t& b) { return cub::DeviceSelect::If(t, b, in, out, scalars + 1, n, Small{}, s); }, s);
  long long gsum = 0;
  int gs[2];
  CHECK(cudaMemcpyAsync(&gsum, lsum, sizeof gsum, cudaMemcpyDeviceToHost, s));
  CHECK(cudaMemcpyAsync(gs, scalars, sizeof gs, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  const long long rsum = std::accumulate(h.begin(), h.end(), 0LL);
  const int rmax = *std::max_element(h.begin(), h.end());
  const long long rsel = std::count_if(h.begin(), h.end(), Small{});
  std::printf("sum %lld max %d selected %d\n", gsum, gs[0], gs[1]);
  EXPECT(gsum == rsum && gs[0] == rmax && gs[1] == rsel, "reduce/select");

  std::vector<int> g(n);
  with_temp([&](void* t, size_t& b) { return cub::DeviceScan::ExclusiveSum(t, b, in, out, 4096, s); }, s);
  CHECK(cudaMemcpyAsync(g.data(), out, 4096 * sizeof(int), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  std::vector<int> r(n);
  std::exclusive_scan(h.begin(), h.begin() + 4096, r.begin(), 0);
  std::printf("exclusive scan[4095] %d\n", g[4095]);
  EXPECT(std::equal(r.begin(), r.begin() + 4096, g.begin()), "exclusive scan");
  with_temp([&](void* t, size_t& b) { return cub::DeviceScan::InclusiveSum(t, b, in, out, 4096, s); }, s);
  CHECK(cudaMemcpyAsync(g.data(), out, 4096 * sizeof(int), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  std::inclusive_scan(h.begin(), h.begin() + 4096, r.begin());
  std::printf("inclusive scan[4095] %d\n", g[4095]);
  EXPECT(std::equal(r.begin(), r.begin() + 4096, g.begin()), "inclusive scan");

  block_reduce<<<n / 256, 256, 0, s>>>(in, out);
  CHECK(cudaMemcpyAsync(g.data(), out, n / 256 * sizeof(int), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  int bbad = 0;
  for (int b = 0; b < n / 256; ++b) bbad += g[b] != std::accumulate(h.begin() + b * 256, h.begin() + b * 256 + 256, 0);
  std::printf("BlockReduce: mismatches %d\n", bbad);
  EXPECT(bbad == 0, "BlockReduce");
  CHECK(cudaStreamDestroy(s));
  for (int* p : {in, out, scalars}) CHECK(cudaFree(p));
  CHECK(cudaFree(lsum));
  return finish();
}
