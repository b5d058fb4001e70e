// Cooperative launch: cudaLaunchCooperativeKernel with as many blocks as can be resident
// (from the occupancy API), grid.sync() between phases of a multi-phase computation
// (grid-wide prefix of block sums), grid.thread_rank/size, and the cudaDevAttrCooperativeLaunch
// attribute.
#include <cooperative_groups.h>

#include <vector>

#include "compat.h"

namespace cg = cooperative_groups;

__global__ void phases(const int* in, int* block_sums, long long* out, int n, int rounds) {
  cg::grid_group grid = cg::this_grid();
  __shared__ int s;
  for (int r = 0; r < rounds; ++r) {
    if (threadIdx.x == 0) s = 0;
    __syncthreads();
    int local = 0;
    for (unsigned long long i = grid.thread_rank(); i < static_cast<unsigned long long>(n); i += grid.size())
      local += in[i] * (r + 1);
    atomicAdd(&s, local);
    __syncthreads();
    if (threadIdx.x == 0) block_sums[blockIdx.x] = s;
    grid.sync();  // every block's sum is visible to every block
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      long long t = 0;
      for (unsigned b = 0; b < gridDim.x; ++b) t += block_sums[b];
      out[r] = t;
    }
    grid.sync();  // block_sums is reused next round
  }
}

int main() {
  int coop = 0, sms = 0;
  CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, 0));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::printf("cooperative launch supported: %s\n", coop ? "yes" : "no");
  const int threads = 256;
  int per_sm = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, phases, threads, 0));
  std::printf("blocks per SM > 0: %s\n", per_sm > 0 ? "yes" : "no");
  const int n = 1 << 22, rounds = 5;
  std::vector<int> h(n);
  long long base = 0;
  for (int i = 0; i < n; ++i) {
    h[i] = static_cast<int>(hash32(i) % 10);
    base += h[i];
  }
  int *din, *dsums;
  long long* dout;
  CHECK(cudaMalloc(&din, n * sizeof(int)));
  CHECK(cudaMalloc(&dsums, per_sm * sms * sizeof(int)));
  CHECK(cudaMalloc(&dout, rounds * sizeof(long long)));
  CHECK(cudaMemcpy(din, h.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  for (int blocks : {1, sms, per_sm * sms}) {
    CHECK(cudaMemset(dout, 0, rounds * sizeof(long long)));
    int nn = n, rr = rounds;
    void* args[] = {&din, &dsums, &dout, &nn, &rr};
    CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(phases), dim3(blocks), dim3(threads), args, 0,
                                      nullptr));
    long long got[rounds];
    CHECK(cudaMemcpy(got, dout, sizeof got, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int r = 0; r < rounds; ++r) bad += got[r] != base * (r + 1);
    std::printf("%s grid: rounds wrong %d, last %lld\n",
                blocks == 1     ? "1-block"
                : blocks == sms ? "1-per-SM"
                                : "full",
                bad, got[rounds - 1]);
    EXPECT(bad == 0, "blocks %d", blocks);
  }
  // Too many blocks for a cooperative launch is an error, not a hang.
  int nn = n, rr = 1;
  void* args[] = {&din, &dsums, &dout, &nn, &rr};
  const cudaError_t e = cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(phases), dim3(per_sm * sms * 4 + 1),
                                                    dim3(threads), args, 0, nullptr);
  const cudaError_t sticky = cudaGetLastError();
  std::printf("too many cooperative blocks: %s (last error %s)\n", cudaGetErrorName(e), cudaGetErrorName(sticky));
  EXPECT(e == cudaErrorCooperativeLaunchTooLarge, "too large");
  CHECK(cudaFree(din));
  CHECK(cudaFree(dsums));
  CHECK(cudaFree(dout));
  return finish();
}
