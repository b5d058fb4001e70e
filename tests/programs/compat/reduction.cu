// Reductions: shared memory tree + __syncthreads, warp shuffles (__shfl_down_sync,
// __shfl_xor_sync), two-pass (per-block partials, then one block), int and double.
#include <algorithm>
#include <climits>
#include <vector>

#include "compat.h"

template <typename T>
__device__ T warp_sum(T v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}

// Classic shared-memory tree down to one warp, then shuffles.
template <typename T, int kBlock>
__global__ void block_sum(const T* in, T* partial, int n) {
  __shared__ T s[kBlock];
  T v = 0;
  for (int i = blockIdx.x * kBlock + threadIdx.x; i < n; i += kBlock * gridDim.x) v += in[i];
  s[threadIdx.x] = v;
  __syncthreads();
  for (int w = kBlock / 2; w >= 32; w /= 2) {
    if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x < 32) {
    v = warp_sum(s[threadIdx.x]);
    if (threadIdx.x == 0) partial[blockIdx.x] = v;
  }
}

// Max via butterfly (every lane gets the result).
__global__ void block_max(const int* in, int* out, int n) {
  __shared__ int warps[32];
  int v = INT_MIN;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) v = max(v, in[i]);
  for (int o = 16; o > 0; o /= 2) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = threadIdx.x < blockDim.x / 32 ? warps[threadIdx.x] : INT_MIN;
    for (int o = 16; o > 0; o /= 2) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (threadIdx.x == 0) atomicMax(out, v);
  }
}

template <typename T, int kBlock>
T gpu_sum(const T* d, T* partial, int n, int blocks) {
  block_sum<T, kBlock><<<blocks, kBlock>>>(d, partial, n);
  block_sum<T, kBlock><<<1, kBlock>>>(partial, partial + blocks, blocks);
  CHECK(cudaGetLastError());
  T r;
  CHECK(cudaMemcpy(&r, partial + blocks, sizeof(T), cudaMemcpyDeviceToHost));
  return r;
}

int main() {
  const int n = 10'000'019;
  std::vector<int> hi(n);
  std::vector<double> hd(n);
  long long isum = 0;
  double dsum = 0;
  int imax = INT_MIN;
  for (int i = 0; i < n; ++i) {
    hi[i] = static_cast<int>(hash32(i) % 2001) - 1000;
    hd[i] = rnd(i);
    isum += hi[i];
    dsum += hd[i];
    imax = std::max(imax, hi[i] * 7 + (i == 4242 ? 100000 : 0));
  }
  int* di;
  double* dd;
  CHECK(cudaMalloc(&di, n * sizeof(int)));
  CHECK(cudaMalloc(&dd, n * sizeof(double)));
  CHECK(cudaMemcpy(di, hi.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dd, hd.data(), n * sizeof(double), cudaMemcpyHostToDevice));
  int* ipart;
  double* dpart;
  CHECK(cudaMalloc(&ipart, 2048 * sizeof(int)));
  CHECK(cudaMalloc(&dpart, 2048 * sizeof(double)));
  for (int blocks : {1, 100, 1000}) {
    const int gi = gpu_sum<int, 256>(di, ipart, n, blocks);
    const int gi2 = gpu_sum<int, 1024>(di, ipart, n, blocks);
    const double gd = gpu_sum<double, 512>(dd, dpart, n, blocks);
    std::printf("blocks %4d: int sum %d / %d (cpu %lld), double sum %.6f (cpu %.6f)\n", blocks, gi, gi2, isum, gd,
                dsum);
    EXPECT(gi == isum && gi2 == isum, "int sum");
    EXPECT(close(gd, dsum, 1e-9), "double sum");
  }
  for (int i = 0; i < n; ++i) hi[i] = hi[i] * 7 + (i == 4242 ? 100000 : 0);
  CHECK(cudaMemcpy(di, hi.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  int* dmax;
  CHECK(cudaMalloc(&dmax, sizeof(int)));
  const int lowest = INT_MIN;
  CHECK(cudaMemcpy(dmax, &lowest, sizeof(int), cudaMemcpyHostToDevice));
  block_max<<<264, 512>>>(di, dmax, n);
  int gmax = 0;
  CHECK(cudaMemcpy(&gmax, dmax, sizeof(int), cudaMemcpyDeviceToHost));
  std::printf("max %d (cpu %d)\n", gmax, imax);
  EXPECT(gmax == imax, "max");
  CHECK(cudaFree(di));
  CHECK(cudaFree(dd));
  CHECK(cudaFree(ipart));
  CHECK(cudaFree(dpart));
  CHECK(cudaFree(dmax));
  return finish();
}
