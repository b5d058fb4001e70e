// Grid-stride loops: fixed small grids over large arrays (saxpy, in-place scale, int fill),
// grids smaller and larger than the data, 1D and 2D blocks.
#include <vector>

#include "compat.h"

__global__ void saxpy(int n, float a, const float* x, float* y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) y[i] = a * x[i] + y[i];
}

__global__ void fill_index(long long n, long long* out) {
  const long long stride = static_cast<long long>(blockDim.x * blockDim.y) * gridDim.x;
  const long long tid = threadIdx.y * blockDim.x + threadIdx.x;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x * blockDim.y) + tid; i < n; i += stride)
    out[i] = i * 3 + 1;
}

int main() {
  const int n = 3'000'017;  // not a multiple of anything
  std::vector<float> x(n), y(n), ref(n);
  for (int i = 0; i < n; ++i) {
    x[i] = rnd(i);
    y[i] = rnd(7 * i + 1);
  }
  float *dx, *dy;
  CHECK(cudaMalloc(&dx, n * sizeof(float)));
  CHECK(cudaMalloc(&dy, n * sizeof(float)));
  CHECK(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  const int grids[] = {1, 7, 132, 1024, 20000};
  for (int g : grids) {
    CHECK(cudaMemcpy(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    saxpy<<<g, 256>>>(n, 2.5f, dx, dy);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(ref.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
    int bad = 0;
    double sum = 0;
    for (int i = 0; i < n; ++i) {
      const float want = std::fma(2.5f, x[i], y[i]);  // nvcc contracts a*x+y into an FMA
      bad += ref[i] != want && ref[i] != 2.5f * x[i] + y[i];
      sum += ref[i];
    }
    std::printf("saxpy grid %5d: mismatches %d, checksum %.4f\n", g, bad, sum);
    EXPECT(bad == 0, "grid %d", g);
  }

  const long long m = 5'000'000;
  long long* d;
  CHECK(cudaMalloc(&d, m * sizeof(long long)));
  std::vector<long long> h(m);
  for (dim3 block : {dim3(32, 1), dim3(16, 16), dim3(32, 8)}) {
    CHECK(cudaMemset(d, 0xff, m * sizeof(long long)));
    fill_index<<<97, block>>>(m, d);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(h.data(), d, m * sizeof(long long), cudaMemcpyDeviceToHost));
    long long bad = 0;
    for (long long i = 0; i < m; ++i) bad += h[i] != i * 3 + 1;
    std::printf("fill block %ux%u: mismatches %lld\n", block.x, block.y, bad);
    EXPECT(bad == 0, "fill");
  }
  CHECK(cudaFree(dx));
  CHECK(cudaFree(dy));
  CHECK(cudaFree(d));
  return finish();
}
