// Tiled matrix multiply with static shared memory (__syncthreads between tile phases),
// non-multiple-of-tile sizes, float and double, checked against a CPU GEMM.
#include <vector>

#include "compat.h"

template <typename T, int kTile>
__global__ void gemm(int m, int n, int k, const T* a, const T* b, T* c) {
  __shared__ T as[kTile][kTile];
  __shared__ T bs[kTile][kTile + 1];  // padded: no bank conflicts
  const int row = blockIdx.y * kTile + threadIdx.y, col = blockIdx.x * kTile + threadIdx.x;
  T acc = 0;
  for (int t = 0; t < k; t += kTile) {
    as[threadIdx.y][threadIdx.x] = row < m && t + threadIdx.x < k ? a[row * k + t + threadIdx.x] : T(0);
    bs[threadIdx.y][threadIdx.x] = col < n && t + threadIdx.y < k ? b[(t + threadIdx.y) * n + col] : T(0);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kTile; ++i) acc += as[threadIdx.y][i] * bs[i][threadIdx.x];
    __syncthreads();
  }
  if (row < m && col < n) c[row * n + col] = acc;
}

template <typename T, int kTile>
void run(int m, int n, int k) {
  std::vector<T> a(static_cast<size_t>(m) * k), b(static_cast<size_t>(k) * n), c(static_cast<size_t>(m) * n);
  for (size_t i = 0; i < a.size(); ++i) a[i] = rnd(static_cast<uint32_t>(i));
  for (size_t i = 0; i < b.size(); ++i) b[i] = rnd(static_cast<uint32_t>(i + 999331));
  T *da, *db, *dc;
  CHECK(cudaMalloc(&da, a.size() * sizeof(T)));
  CHECK(cudaMalloc(&db, b.size() * sizeof(T)));
  CHECK(cudaMalloc(&dc, c.size() * sizeof(T)));
  CHECK(cudaMemcpy(da, a.data(), a.size() * sizeof(T), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), b.size() * sizeof(T), cudaMemcpyHostToDevice));
  dim3 block(kTile, kTile), grid((n + kTile - 1) / kTile, (m + kTile - 1) / kTile);
  gemm<T, kTile><<<grid, block>>>(m, n, k, da, db, dc);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(c.data(), dc, c.size() * sizeof(T), cudaMemcpyDeviceToHost));
  int bad = 0;
  double sum = 0;
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double want = 0;
      for (int p = 0; p < k; ++p) want += static_cast<double>(a[i * k + p]) * b[p * n + j];
      bad += !close(c[i * n + j], want, sizeof(T) == 4 ? 1e-4 : 1e-12);
      sum += c[i * n + j];
    }
  std::printf("%s tile %d %dx%dx%d: mismatches %d, checksum %.5f\n", sizeof(T) == 4 ? "float " : "double", kTile, m, n,
              k, bad, sum);
  EXPECT(bad == 0, "gemm");
  CHECK(cudaFree(da));
  CHECK(cudaFree(db));
  CHECK(cudaFree(dc));
}

int main() {
  run<float, 16>(256, 256, 256);
  run<float, 32>(301, 177, 259);
  run<double, 16>(200, 129, 333);
  run<double, 8>(64, 64, 1000);
  return finish();
}
