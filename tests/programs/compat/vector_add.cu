// Vector add: the first program anyone writes. <<<>>> launch, cudaMalloc, cudaMemcpy.
#include <vector>

#include "compat.h"

__global__ void add(const float* a, const float* b, float* c, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

int main() {
  const int n = 1 << 20;
  std::vector<float> a(n), b(n), c(n);
  for (int i = 0; i < n; ++i) {
    a[i] = rnd(i);
    b[i] = rnd(i + n);
  }
  float *da, *db, *dc;
  CHECK(cudaMalloc(&da, n * sizeof(float)));
  CHECK(cudaMalloc(&db, n * sizeof(float)));
  CHECK(cudaMalloc(&dc, n * sizeof(float)));
  CHECK(cudaMemcpy(da, a.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  for (int block : {32, 128, 256, 1024}) {
    CHECK(cudaMemset(dc, 0, n * sizeof(float)));
    add<<<(n + block - 1) / block, block>>>(da, db, dc, n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(c.data(), dc, n * sizeof(float), cudaMemcpyDeviceToHost));
    int bad = 0;
    double sum = 0;
    for (int i = 0; i < n; ++i) {
      bad += c[i] != a[i] + b[i];
      sum += c[i];
    }
    std::printf("block %4d: mismatches %d, checksum %.6f\n", block, bad, sum);
    EXPECT(bad == 0, "block %d: %d mismatches", block, bad);
  }
  // A launch with no work items still launches.
  add<<<1, 1>>>(da, db, dc, 0);
  CHECK(cudaGetLastError());
  CHECK(cudaFree(da));
  CHECK(cudaFree(db));
  CHECK(cudaFree(dc));
  return finish();
}
