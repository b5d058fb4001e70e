// __constant__ memory: cudaMemcpyToSymbol (whole, with an offset, async on a stream),
// cudaMemcpyFromSymbol, a polynomial and a struct in constant memory read by kernels, and
// constant memory updated between launches.
#include <vector>

#include "compat.h"

struct Params {
  float scale;
  int shift;
  double bias;
};

__constant__ float coef[16];
__constant__ Params params;
__constant__ int table[256];

__global__ void poly(const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float acc = 0;
  for (int k = 15; k >= 0; --k) acc = acc * x[i] + coef[k];
  y[i] = acc * params.scale + static_cast<float>(params.bias);
}

__global__ void lookup(int* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = table[(i + params.shift) & 255];
}

int main() {
  float c[16];
  for (int k = 0; k < 16; ++k) c[k] = 1.0f / static_cast<float>(k + 1);
  CHECK(cudaMemcpyToSymbol(coef, c, sizeof c));
  Params p{2.0f, 5, 0.5};
  CHECK(cudaMemcpyToSymbol(params, &p, sizeof p));
  const int n = 100000;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) x[i] = rnd(i) * 0.5f;
  float *dx, *dy;
  CHECK(cudaMalloc(&dx, n * sizeof(float)));
  CHECK(cudaMalloc(&dy, n * sizeof(float)));
  CHECK(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  poly<<<(n + 255) / 256, 256>>>(dx, dy, n);
  CHECK(cudaMemcpy(y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
  int bad = 0;
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    double acc = 0;
    for (int k = 15; k >= 0; --k) acc = acc * x[i] + c[k];
    bad += !close(y[i], acc * 2.0 + 0.5, 1e-5);
    sum += y[i];
  }
  std::printf("poly: mismatches %d, checksum %.4f\n", bad, sum);
  EXPECT(bad == 0, "poly");

  // Half the coefficients replaced through an offset, then read back whole.
  float c2[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  CHECK(cudaMemcpyToSymbol(coef, c2, sizeof c2, 8 * sizeof(float)));
  float back[16];
  CHECK(cudaMemcpyFromSymbol(back, coef, sizeof back));
  int bb = 0;
  for (int k = 0; k < 16; ++k) bb += back[k] != (k < 8 ? c[k] : 0.0f);
  std::printf("offset write + read back: mismatches %d\n", bb);
  EXPECT(bb == 0, "offset");
  Params pb{};
  CHECK(cudaMemcpyFromSymbol(&pb, params, sizeof pb));
  std::printf("params read back: %.1f %d %.2f\n", pb.scale, pb.shift, pb.bias);

  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int* dout;
  CHECK(cudaMalloc(&dout, 1024 * sizeof(int)));
  std::vector<int> t(256), out(1024);
  long long total = 0;
  for (int round = 0; round < 3; ++round) {
    for (int k = 0; k < 256; ++k) t[k] = k * (round + 1);
    p.shift = round * 10;
    CHECK(cudaMemcpyToSymbolAsync(table, t.data(), 256 * sizeof(int), 0, cudaMemcpyHostToDevice, s));
    CHECK(cudaMemcpyToSymbolAsync(params, &p, sizeof p, 0, cudaMemcpyHostToDevice, s));
    lookup<<<4, 256, 0, s>>>(dout, 1024);
    CHECK(cudaMemcpyAsync(out.data(), dout, 1024 * sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    int bad2 = 0;
    for (int i = 0; i < 1024; ++i) {
      bad2 += out[i] != ((i + p.shift) & 255) * (round + 1);
      total += out[i];
    }
    EXPECT(bad2 == 0, "lookup round %d", round);
  }
  std::printf("lookup rounds total %lld\n", total);
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(dx));
  CHECK(cudaFree(dy));
  CHECK(cudaFree(dout));
  return finish();
}
