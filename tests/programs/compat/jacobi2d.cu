// 2D Jacobi (5-point Laplace, fixed boundary): a memory-bound stencil with ping-pong
// buffers and a residual reduction every few sweeps. Also a benchmark:
// `jacobi2d [sweeps] [size]` (defaults 200, 512). Checked against the same sweeps on the CPU
// for sizes up to 512 (the arithmetic is identical, so the grids match exactly).
#include <algorithm>
#include <utility>
#include <vector>

#include "compat.h"

__global__ void sweep(const float* in, float* out, int n) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x + 1, y = blockIdx.y * blockDim.y + threadIdx.y + 1;
  if (x < n - 1 && y < n - 1) {
    const int i = y * n + x;
    out[i] = 0.25f * ((in[i - 1] + in[i + 1]) + (in[i - n] + in[i + n]));
  }
}

__global__ void residual(const float* a, const float* b, int n, float* out) {
  __shared__ float s[256];
  float m = 0;
  for (int i = blockIdx.x * 256 + threadIdx.x; i < n * n; i += 256 * gridDim.x) m = fmaxf(m, fabsf(a[i] - b[i]));
  s[threadIdx.x] = m;
  __syncthreads();
  for (int w = 128; w > 0; w /= 2) {
    if (threadIdx.x < w) s[threadIdx.x] = fmaxf(s[threadIdx.x], s[threadIdx.x + w]);
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicMax(reinterpret_cast<int*>(out), __float_as_int(s[0]));  // non-negative floats
}

int main(int argc, char** argv) {
  const int sweeps = int_arg(argc, argv, 1, 200);
  const int n = std::max(int_arg(argc, argv, 2, 512), 8);
  std::vector<float> g(static_cast<size_t>(n) * n, 0.0f);
  for (int x = 0; x < n; ++x) {
    g[x] = 1.0f;                                    // top edge hot
    g[static_cast<size_t>(n - 1) * n + x] = -0.5f;  // bottom edge cold
  }
  for (int y = 0; y < n; ++y) g[static_cast<size_t>(y) * n] = static_cast<float>(y) / n;  // left ramp
  float *a, *b, *dres;
  const size_t bytes = g.size() * sizeof(float);
  CHECK(cudaMalloc(&a, bytes));
  CHECK(cudaMalloc(&b, bytes));
  CHECK(cudaMalloc(&dres, sizeof(float)));
  CHECK(cudaMemcpy(a, g.data(), bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(b, g.data(), bytes, cudaMemcpyHostToDevice));
  dim3 block(32, 8), grid((n - 2 + 31) / 32, (n - 2 + 7) / 8);
  for (int s = 0; s < sweeps; ++s) {
    sweep<<<grid, block>>>(a, b, n);
    std::swap(a, b);
    if ((s + 1) % 50 == 0 || s + 1 == sweeps) {
      CHECK(cudaMemset(dres, 0, sizeof(float)));
      residual<<<132, 256>>>(a, b, n, dres);
      float r = 0;
      CHECK(cudaMemcpy(&r, dres, sizeof r, cudaMemcpyDeviceToHost));
      std::printf("sweep %5d: max change %.6e\n", s + 1, r);
    }
  }
  std::vector<float> got(g.size());
  CHECK(cudaMemcpy(got.data(), a, bytes, cudaMemcpyDeviceToHost));
  double sum = 0;
  for (float v : got) sum += v;
  std::printf("%d sweeps on %dx%d: checksum %.6f\n", sweeps, n, n, sum);
  if (n <= 512) {
    std::vector<float> p = g, q = g;
    for (int s = 0; s < sweeps; ++s) {
      for (int y = 1; y < n - 1; ++y)
        for (int x = 1; x < n - 1; ++x) {
          const int i = y * n + x;
          q[i] = 0.25f * ((p[i - 1] + p[i + 1]) + (p[i - n] + p[i + n]));
        }
      std::swap(p, q);
    }
    int bad = 0;
    for (size_t i = 0; i < g.size(); ++i) bad += got[i] != p[i];
    std::printf("cpu comparison: mismatches %d\n", bad);
    EXPECT(bad == 0, "jacobi");
  }
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  CHECK(cudaFree(dres));
  return finish();
}
